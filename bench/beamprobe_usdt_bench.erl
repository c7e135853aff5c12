%%% @doc `make bench', USDT probes (docs/usdt.md): what a usdt sink adds
%%% per traced call.
%%%
%%% detached: one session tracing bench_target:f/1 (`args => arity', a
%%% flight recorder: `overflow => drop_oldest', so the collector does not
%%% drain during the run and the figure is the producer's alone), against
%%% the same session with a usdt sink (`output => [usdt, {file, ...}]')
%%% while no tool is attached: the added cost is the is-enabled check
%%% (target < 2 ns per event).  Both run once per round, interleaved; a
%%% figure is the median of the rounds.
%%% attached: the same pair while bpftrace (as root, attached by pid to
%%% this VM) counts every beamprobe:call probe: the cost per fired probe
%%% (a uprobe trap into the kernel and back).  Skipped with the reason
%%% where bpftrace cannot run.
%%% annotate: beamprobe:annotate/2 when no session and no probe wants it
%%% (the gate off), against a remote call of an empty function and an
%%% empty NIF call measured in the same run.
%%%
%%% `smoke' runs each once with tiny counts and no thresholds, ending with
%%% `bench smoke part: N passed, M failed'.  See docs/usdt.md.
-module(beamprobe_usdt_bench).
-export([main/1, nop/2]).

-define(F, {bench_target, f, 1}).

%% @doc `main(["bench"])' or `main(["smoke"])'.
-spec main([string()]) -> no_return().
main([Mode | _]) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    {module, _} = code:ensure_loaded(bench_target),
    Tmp = filename:join(os:getenv("TMPDIR", "/tmp"),
                        "beamprobe-ubench-" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Tmp, "x")),
    Smoke = Mode =:= "smoke",
    {Rounds, Ops, AOps} = case Smoke of
                              true -> {1, 1000, 1000};
                              false -> {11, 300000, 30000}
                          end,
    io:format("~n== USDT probes: ns added per traced call (args => arity, "
              "flight recorder); OTP ~s, ~p schedulers; median of ~p "
              "interleaved rounds of ~p calls ==~n",
              [erlang:system_info(otp_release), erlang:system_info(schedulers),
               Rounds, Ops]),
    Detached = rounds([untraced, base, usdt], Rounds, Ops, Tmp),
    R1 = report_pair("detached (no tool attached)", Detached, 2.0),
    R2 = case bpftrace() of
             {skip, Why} ->
                 io:format("attached: skipped: ~s~n", [Why]),
                 ok;
             {ok, Bt} ->
                 case attach(Bt) of
                     {ok, Port} ->
                         Attached = rounds([untraced, base, usdt], Rounds,
                                           AOps, Tmp),
                         Fired = detach(Port),
                         report_pair("attached (bpftrace counting "
                                     "beamprobe:call)", Attached, none),
                         io:format("probes fired, counted by bpftrace: ~s~n",
                                   [Fired]),
                         ok;
                     {error, E} ->
                         io:format("attached: skipped: ~s~n", [E]),
                         ok
                 end
         end,
    R3 = annotate_cost(Rounds, Ops),
    os:cmd("rm -rf " ++ Tmp),
    Failed = length([R || R <- [R1, R2, R3], R =/= ok]),
    _ = Smoke andalso io:format("bench smoke part: ~p passed, ~p failed~n",
                                [3 - Failed, Failed]),
    halt(case Smoke andalso Failed > 0 of true -> 1; false -> 0 end).

rounds(Configs, Rounds, Ops, Tmp) ->
    lists:foldl(
      fun(_, Acc0) ->
              lists:foldl(
                fun(C, Acc) ->
                        R = run(C, Ops, Tmp),
                        maps:update_with(C, fun(L) -> [R | L] end, [R], Acc)
                end, Acc0, Configs)
      end, #{}, lists:seq(1, Rounds)).

run(Config, N, Tmp) ->
    W = bench_target:timed_worker(N, 42),
    Undo = setup(Config, W, Tmp),
    erlang:garbage_collect(),
    W ! go,
    Ns = receive {done, W, T} -> T end,
    Undo(),
    Ns / N.

setup(untraced, _W, _Tmp) -> fun() -> ok end;
setup(C, W, Tmp) ->
    Dir = filename:join(Tmp, atom_to_list(C)),
    os:cmd("rm -rf " ++ Dir),
    Out = case C of
              base -> {file, Dir};
              usdt -> [usdt, {file, Dir}]
          end,
    {ok, S} = beamprobe:start(#{procs => [W], calls => [{?F, true}],
                                args => arity, return => false,
                                exceptions => false,
                                overflow => drop_oldest, output => Out,
                                limits => #{seconds => infinity,
                                            bytes => infinity,
                                            events => infinity}}),
    fun() -> {ok, _} = beamprobe:stop(S), ok end.

report_pair(Label, Res, Target) ->
    Med = fun(C) -> median(maps:get(C, Res)) end,
    U = Med(untraced),
    B = Med(base) - U,
    X = Med(usdt) - U,
    D = X - B,
    io:format("~s: untraced ~.1f ns per call; session ~.1f ns added; "
              "with a usdt sink ~.1f ns added: ~.2f ns per event "
              "(x~.3f)~s~n",
              [Label, U, B, X, D, X / B,
               case Target of
                   none -> "";
                   T -> io_lib:format("; target < ~.1f ns: ~s", [T, yes(D < T)])
               end]),
    case lists:all(fun(V) -> V > 0 end, [U, B + U, X + U]) of
        true -> ok;
        false -> error
    end.

%% beamprobe:annotate/2 while nothing wants annotations (the gate off:
%% beamprobe_gate), against the baselines of the same run: a remote call
%% of a function that does nothing (what calling annotate/2 costs at
%% least), an empty NIF call, the NIF path a gate-less annotate/2 took
%% (beamprobe:annotate_nif/2: the NIF returns at once) and
%% persistent_term:get/1 (the other flag considered).  Interleaved rounds,
%% medians.
annotate_cost(Rounds, Ops) ->
    Gate = wait_gate_off(50),
    Loops = [{remote, fun remote_loop/1}, {annotate, fun annotate_loop/1},
             {nif, fun nif_loop/1}, {annotate_nif, fun annotate_nif_loop/1},
             {pt, fun pt_loop/1}],
    persistent_term:put(?MODULE, false),
    L = [[{K, time_loop(F, Ops)} || {K, F} <- Loops]
         || _ <- lists:seq(1, Rounds)],
    persistent_term:erase(?MODULE),
    M = fun(K) -> median([proplists:get_value(K, R) || R <- L]) end,
    [R, A, N, AN, PT] = [M(K) || {K, _} <- Loops],
    io:format("beamprobe:annotate/2, nothing wants it (gate ~s): ~.1f ns "
              "per call; a remote call of an empty function: ~.1f ns: "
              "+~.1f ns (x~.2f)~n"
              "  an empty NIF call: ~.1f ns; the NIF path without the gate "
              "(beamprobe:annotate_nif/2): ~.1f ns (+~.1f ns over the remote "
              "call); persistent_term:get/1: ~.1f ns~n",
              [case Gate of true -> "off"; false -> "STILL ON" end,
               A, R, A - R, A / R, N, AN, AN - R, PT]),
    case Gate andalso A > 0 of
        true -> ok;
        false -> error
    end.

wait_gate_off(0) -> false;
wait_gate_off(N) ->
    case beamprobe_gate_flag:on() of
        false -> true;
        true -> timer:sleep(100), wait_gate_off(N - 1)
    end.

time_loop(F, Ops) ->
    T0 = erlang:monotonic_time(nanosecond),
    F(Ops),
    (erlang:monotonic_time(nanosecond) - T0) / Ops.

%% @private A function that does nothing (the remote-call baseline).
-spec nop(term(), term()) -> ok.
nop(_, _) -> ok.

remote_loop(0) -> ok;
remote_loop(N) -> ok = ?MODULE:nop(tag, N), remote_loop(N - 1).

annotate_loop(0) -> ok;
annotate_loop(N) -> ok = beamprobe:annotate(tag, N), annotate_loop(N - 1).

nif_loop(0) -> ok;
nif_loop(N) -> true = beamprobe_nif:is_loaded(), nif_loop(N - 1).

annotate_nif_loop(0) -> ok;
annotate_nif_loop(N) ->
    ok = beamprobe:annotate_nif(tag, N), annotate_nif_loop(N - 1).

pt_loop(0) -> ok;
pt_loop(N) -> false = persistent_term:get(?MODULE), pt_loop(N - 1).

bpftrace() ->
    case {os:find_executable("bpftrace"), os:cmd("id -u")} of
        {false, _} -> {skip, "bpftrace is not installed"};
        {Bt, "0\n"} ->
            _ = filelib:is_file("/sys/kernel/tracing/uprobe_events") orelse
                os:cmd("mount -t tracefs nodev /sys/kernel/tracing"),
            {ok, Bt};
        _ -> {skip, "bpftrace runs only as root"}
    end.

so() ->
    case os:getenv("BEAMPROBE_NIF") of
        false ->
            filename:join([filename:dirname(filename:dirname(
                                              code:which(beamprobe))),
                           "priv", "beamprobe_nif.so"]);
        Path -> Path ++ ".so"
    end.

attach(Bt) ->
    Script = "usdt:" ++ so() ++ ":beamprobe:call { @fired = count(); }",
    Port = open_port({spawn_executable, Bt},
                     [{args, ["-p", os:getpid(), "-e", Script]}, binary,
                      exit_status, stderr_to_stdout]),
    case wait_enabled(200) of
        true -> {ok, Port};
        false ->
            detach(Port),
            {error, "bpftrace did not attach within 20 s"}
    end.

wait_enabled(0) -> false;
wait_enabled(N) ->
    case beamprobe_nif:usdt_enabled(call) of
        true -> true;
        false -> timer:sleep(100), wait_enabled(N - 1)
    end.

%% Stops the bpftrace this bench started (SIGINT: it prints its maps).
detach(Port) ->
    {os_pid, P} = erlang:port_info(Port, os_pid),
    _ = os:cmd("kill -INT " ++ integer_to_list(P)),
    Out = collect(Port, <<>>),
    case re:run(Out, "@fired: ([0-9]+)", [{capture, all_but_first, list}]) of
        {match, [N]} -> N;
        nomatch -> "?"
    end.

collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> collect(Port, <<Acc/binary, D/binary>>);
        {Port, {exit_status, _}} -> Acc
    after 30000 -> Acc
    end.

yes(true) -> "yes";
yes(false) -> "NO".

median(L) ->
    S = lists:sort(L),
    lists:nth((length(S) + 1) div 2, S).
