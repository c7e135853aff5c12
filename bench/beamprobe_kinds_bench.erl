%%% @doc `make bench', per event kind: the ns each traced event adds over
%%% an untraced run, for beamprobe, the do-nothing NIF tracer (the VM
%%% floor, bench/floor_tracer.c) and `{tracer, Pid}' (a process that
%%% discards), all measured in the same run, interleaved: each round runs
%%% every kind under every configuration once; a run is timed in 20
%%% windows and counts its 10th-percentile window; a figure is the median
%%% of the rounds.  Ratios are `added cost / floor's added cost'.  The events
%%% per operation are counted by the `{tracer, Pid}' sink in the same run;
%%% a beamprobe run that dropped an event, or whose session wrote another
%%% number of events than that sink received (for calls, exactly; for the
%%% other kinds, whose counts vary a little, more than 1 % apart), is not
%%% counted (a dropped event costs less than a written one): the line says
%%% how many were refused.  The VM's emulator flags are printed as the VM
%%% got them (`erlang:system_info(emu_args)'), next to the label given.
%%%
%%% `smoke' runs every kind and configuration once with tiny counts and no
%%% thresholds (`make test'): it proves the bench code still runs, and
%%% ends with `bench smoke part: N passed, M failed' (bench/run.sh adds
%%% up the parts into `bench smoke: N passed, M failed').  See docs/performance.md.
-module(beamprobe_kinds_bench).
-export([main/1]).

-define(ROUNDS, 7).
%% Each run is timed in this many windows of ops/WINDOWS operations; the
%% run's figure is the 10th percentile of the windows' ns per op, so a
%% window in which the OS ran something else on the core does not count
%% (2 cores shared with builds and tests: the median of whole runs moved
%% by ±30 %).
-define(WINDOWS, 20).

-type kind() :: #{id := atom(), label := string(), target := float(),
                  ops := pos_integer(), who := self | pair | new,
                  pattern := none | {mfa(), true | list()},
                  flags := [atom()], bp := map(),
                  work := fun((pos_integer(), [pid()]) -> term())}.

%% @doc `main(["kinds", VMLabel])' or `main(["smoke", VMLabel])', or
%% `main(["only", Kind, Configs, Rounds])': runs one kind under one
%% configuration (or several, comma-separated, in turn) Rounds times,
%% printing ns per op and the events dropped (for `perf record' and
%% bench/ab.sh, which counts no run that dropped: a dropped event costs
%% less than a written one).
-spec main([string()]) -> no_return().
main(["only", Kind, Config, Rounds]) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    Tmp = filename:join(os:getenv("TMPDIR", "/tmp"),
                        "beamprobe-kbench-" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Tmp, "x")),
    [K] = [K || #{id := Id} = K <- kinds(false), atom_to_list(Id) =:= Kind],
    %% Config may name several, comma-separated: run in turn each round.
    Cs = [list_to_existing_atom(C) || C <- string:lexemes(Config, ",")],
    [begin
         {Ns, Ev, Drops} = run(K, C, Tmp),
         io:format("~s ~s: ~.1f ns per op, ~s events per op written, ~p dropped~n",
                   [Kind, C, Ns, case Ev of
                                     undefined -> "-";
                                     _ -> float_to_list(Ev, [{decimals, 2}])
                                 end, Drops])
     end || _ <- lists:seq(1, list_to_integer(Rounds)), C <- Cs],
    os:cmd("rm -rf " ++ Tmp),
    halt(0);
main([Mode | Label]) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    {module, _} = code:ensure_loaded(bench_target),  % not in a timed run
    Tmp = filename:join(os:getenv("TMPDIR", "/tmp"),
                        "beamprobe-kbench-" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Tmp, "x")),
    Smoke = Mode =:= "smoke",
    Rounds = case Smoke of true -> 1; false -> ?ROUNDS end,
    io:format("~n== ns added per traced event, per event kind; VM: ~s "
              "(emulator flags: ~s); "
              "OTP ~s, ~p schedulers; median of ~p interleaved rounds, each "
              "run the 10th percentile of ~p windows ==~n",
              [string:join(Label, " "), beamprobe_bench:emu_flags(),
               erlang:system_info(otp_release),
               erlang:system_info(schedulers), Rounds, ?WINDOWS]),
    _ = extra_opts() =:= #{} orelse
        io:format("beamprobe's sessions also get BP_BENCH_OPTS: ~p~n",
                  [extra_opts()]),
    Res = rounds(kinds(Smoke), Rounds, Tmp),
    os:cmd("rm -rf " ++ Tmp),
    Failed = report(kinds(Smoke), Res, Smoke),
    halt(case Smoke andalso Failed > 0 of true -> 1; false -> 0 end).

configs() -> [untraced, floor, bp, process].

%%% ------------------------------------------------------------------------
%%% The kinds
%%% ------------------------------------------------------------------------

-spec kinds(boolean()) -> [kind()].
kinds(Smoke) ->
    Large = {lists:seq(1, 100), list_to_binary(lists:duplicate(1024, $x)),
             #{a => 1, b => "a string", c => [{x, y}, {z, 1.5}]}},
    F = {bench_target, f, 1},
    G = {bench_target, g, 1},
    Ks = [#{id => call_arity, label => "call, args => arity",
            target => 1.2, ops => 500000, who => self,
            pattern => {F, true}, flags => [call, arity],
            bp => #{calls => [F], args => arity},
            work => fun(N, _) -> bench_target:loop(N, 42) end},
          #{id => call_full_small, label => "call, args => full, small arg",
            target => 1.4, ops => 500000, who => self,
            pattern => {F, true}, flags => [call],
            bp => #{calls => [F], args => full},
            work => fun(N, _) -> bench_target:loop(N, 42) end},
          #{id => call_full_large, label => "call, args => full, large arg",
            target => 1.5, ops => 100000, who => self,
            pattern => {F, true}, flags => [call],
            bp => #{calls => [F], args => full},
            work => fun(N, _) -> bench_target:loop(N, Large) end},
          #{id => return_from, label => "call + return_from (arity)",
            target => 1.5, ops => 300000, who => self,
            pattern => {F, [{'_', [], [{return_trace}]}]},
            flags => [call, arity],
            bp => #{calls => [F], args => arity, return => true},
            work => fun(N, _) -> bench_target:loop(N, 42) end},
          #{id => exception_from, label => "call + exception_from (arity)",
            target => 1.5, ops => 200000, who => self,
            pattern => {G, [{'_', [], [{exception_trace}]}]},
            flags => [call, arity],
            bp => #{calls => [G], args => arity, exceptions => true},
            work => fun(N, _) -> bench_target:loop_exc(N, 42) end},
          #{id => send, label => "send, full capture (ping-pong)",
            target => 2.0, ops => 100000, who => pair,
            pattern => none, flags => [send],
            bp => #{events => [send], args => full},
            work => fun ping/2},
          #{id => 'receive', label => "receive, full capture (ping-pong)",
            target => 2.0, ops => 100000, who => pair,
            pattern => none, flags => ['receive'],
            bp => #{events => ['receive'], args => full},
            work => fun ping/2},
          #{id => send_receive,
            label => "send+receive, full (ping-pong)",
            target => 2.0, ops => 100000, who => pair,
            pattern => none, flags => [send, 'receive'],
            bp => #{events => [send, 'receive'], args => full},
            work => fun ping/2},
          #{id => procs, label => "spawn/link/exit (procs, new)",
            target => 1.5, ops => 20000, who => new,
            pattern => none, flags => [procs],
            bp => #{events => [procs]},
            work => fun spawner/2},
          #{id => gc, label => "gc start/end",
            target => 1.5, ops => 100000, who => self,
            pattern => none, flags => [garbage_collection],
            bp => #{events => [gc]},
            work => fun gcs/2},
          #{id => running, label => "scheduling in/out (yield)",
            target => 1.5, ops => 200000, who => self,
            pattern => none, flags => [running],
            bp => #{events => [running]},
            work => fun yields/2}],
    case Smoke of
        true -> [K#{ops := max(50, Ops div 500)} || #{ops := Ops} = K <- Ks];
        false -> Ks
    end.

ping(0, _) -> ok;
ping(N, [_, P] = Ps) ->
    P ! {ping, self()},
    receive pong -> ok end,
    ping(N - 1, Ps).

pong() ->
    receive
        {ping, From} -> From ! pong, pong();
        stop -> ok
    end.

spawner(0, _) -> ok;
spawner(N, Ps) ->
    C = spawn_link(fun() -> ok end),
    Ref = monitor(process, C),
    receive {'DOWN', Ref, process, C, _} -> ok end,
    spawner(N - 1, Ps).

gcs(0, _) -> ok;
gcs(N, Ps) -> true = erlang:garbage_collect(), gcs(N - 1, Ps).

yields(0, _) -> ok;
yields(N, Ps) -> erlang:yield(), yields(N - 1, Ps).

%%% ------------------------------------------------------------------------
%%% Runs
%%% ------------------------------------------------------------------------

%% #{{Kind, Config} => [{NsPerOp, EventsPerOp | undefined, Drops}]}
rounds(Kinds, Rounds, Tmp) ->
    lists:foldl(
      fun(_, Acc0) ->
              lists:foldl(
                fun(#{id := Id} = K, Acc1) ->
                        lists:foldl(
                          fun(C, Acc) ->
                                  R = try run(K, C, Tmp)
                                      catch Cl:E:St ->
                                              io:format("~p ~p: ~p:~p ~p~n",
                                                        [Id, C, Cl, E, St]),
                                              error
                                      end,
                                  maps:update_with({Id, C}, fun(L) -> [R | L] end,
                                                   [R], Acc)
                          end, Acc1, configs())
                end, Acc0, Kinds)
      end, #{}, lists:seq(1, Rounds)).

run(#{who := Who, work := Work, ops := N} = K, Config, Tmp) ->
    Dir = filename:join(Tmp, atom_to_list(Config)),
    os:cmd("rm -rf " ++ Dir),
    Parent = self(),
    Start = fun() ->
                    W = spawn(fun() -> worker(Parent, Who, Work, N) end),
                    receive {ready, W, Ps} -> {W, Ps} end
            end,
    {W, Undo} = case Who of
                    new ->
                        U = setup(Config, K, [new], Dir),
                        {W0, _} = Start(),
                        {W0, U};
                    _ ->
                        {W0, Ps} = Start(),
                        {W0, setup(Config, K, Ps, Dir)}
                end,
    ok = check_traced(Config, W),
    erlang:garbage_collect(),
    W ! go,
    Ws = receive {done, W, T} -> T end,
    {Events, Drops} = Undo(),
    os:cmd("rm -rf " ++ Dir),
    {p10(Ws), case Events of undefined -> undefined; _ -> Events / N end,
     Drops}.

%% The worker is traced as Config says before it starts: not at all when
%% untraced (no flags, no tracer, no leftover `new' default of an earlier
%% run), else by the configuration's tracer.
check_traced(Config, W) ->
    Tracer = case erlang:trace_info(W, tracer) of
                 {tracer, []} -> none;
                 {tracer, {floor_tracer, _}} -> floor;
                 {tracer, {beamprobe_nif, _}} -> bp;
                 {tracer, P} when is_pid(P) -> process;
                 {tracer, Other} -> Other
             end,
    Flags = erlang:trace_info(W, flags),
    New = erlang:trace_info(new, flags),
    case {Config, Tracer, Flags, New} of
        {untraced, none, {flags, []}, {flags, []}} -> ok;
        {untraced, _, _, _} -> error({untraced_run_traced, Tracer, Flags, New});
        {C, C, {flags, [_ | _]}, _} -> ok;
        _ -> error({not_traced_as, Config, Tracer, Flags})
    end.

worker(Parent, Who, Work, N) ->
    Ps = case Who of
             pair -> [self(), spawn(fun pong/0)];
             _ -> [self()]
         end,
    Parent ! {ready, self(), Ps},
    receive go -> ok end,
    Win = max(1, N div ?WINDOWS),
    Ws = [begin
              T0 = erlang:monotonic_time(nanosecond),
              _ = Work(Win, Ps),
              (erlang:monotonic_time(nanosecond) - T0) / Win
          end || _ <- lists:seq(1, N div Win)],
    [P ! stop || P <- tl(Ps)],
    Parent ! {done, self(), Ws}.

%% The 10th percentile of the windows' ns per op.
p10(Ws) ->
    S = lists:sort(Ws),
    lists:nth(max(1, (length(S) + 5) div 10), S).

%% Sets Config's tracing up on Targets; returns the undo, which returns
%% {EventsSeenBySink | undefined, Drops}.
setup(untraced, _K, _Targets, _Dir) ->
    fun() -> {undefined, 0} end;
setup(floor, #{pattern := Pat, flags := Fl}, Targets, _Dir) ->
    pattern(Pat, true),
    [erlang:trace(T, true, Fl ++ [{tracer, floor_tracer, []}])
     || T <- Targets],
    fun() -> untrace(Targets, Pat), {undefined, 0} end;
setup(process, #{pattern := Pat, flags := Fl}, Targets, _Dir) ->
    Sink = spawn(fun() -> sink(0) end),
    pattern(Pat, true),
    [erlang:trace(T, true, Fl ++ [{tracer, Sink}]) || T <- Targets],
    fun() ->
            untrace(Targets, Pat),
            drained(Sink),
            Sink ! {count, self()},
            receive {count, Sink, C} -> {C, 0} end
    end;
setup(bp, #{bp := Bp}, Targets, Dir) ->
    Procs = case Targets of [new] -> new; _ -> Targets end,
    Spec = maps:merge(#{procs => Procs, return => false, exceptions => false,
                        output => {file, Dir},
                        limits => #{seconds => infinity, bytes => infinity}},
                      maps:merge(Bp, extra_opts())),
    {ok, S} = beamprobe:start(Spec),
    fun() ->
            {ok, #{events := E, dropped := #{total := D}}} = beamprobe:stop(S),
            {E, D}
    end.

%% BP_BENCH_OPTS="#{buffer => 65536}": options added to every beamprobe
%% session of the run (experiments; the A/B of bench/ab.sh passes it on).
extra_opts() ->
    case os:getenv("BP_BENCH_OPTS") of
        false -> #{};
        "" -> #{};
        Text ->
            {ok, Toks, _} = erl_scan:string(Text ++ "."),
            {ok, Opts} = erl_parse:parse_term(Toks),
            Opts
    end.

pattern(none, _) -> ok;
pattern({{M, _, _} = MFA, MS}, true) ->
    {module, M} = code:ensure_loaded(M),  % trace_pattern needs it loaded
    1 = erlang:trace_pattern(MFA, MS, [local]);
pattern({MFA, _}, false) -> erlang:trace_pattern(MFA, false, [local]).

untrace(Targets, Pat) ->
    [catch erlang:trace(T, false, [all]) || T <- Targets],
    pattern(Pat, false),
    ok.

sink(N) ->
    receive
        {count, From} -> From ! {count, self(), N};
        _ -> sink(N + 1)
    end.

%% Waits until the sink has read every trace message (they arrive from
%% the traced processes, not in order with ours).
drained(Sink) ->
    case process_info(Sink, message_queue_len) of
        {message_queue_len, 0} ->
            timer:sleep(20),
            case process_info(Sink, message_queue_len) of
                {message_queue_len, 0} -> ok;
                _ -> drained(Sink)
            end;
        _ -> timer:sleep(10), drained(Sink)
    end.

%%% ------------------------------------------------------------------------
%%% Report
%%% ------------------------------------------------------------------------

report(Kinds, Res, Smoke) ->
    io:format("untraced: ns per operation; floor+, bp+, pid+: ns each event "
              "adds over untraced;~nbp/fl, pid/fl: added cost / the floor's "
              "added cost; target: issue 12's for bp/fl; ev/op: events per "
              "operation the {tracer, Pid} sink received, bp ev: those "
              "beamprobe wrote;~nrefused: beamprobe runs not counted (they "
              "dropped events or wrote another number of them)~n"),
    io:format("~-36s ~5s ~5s ~8s | ~8s ~8s ~8s | ~6s ~6s ~6s ~4s ~s ~s~n",
              ["kind", "ev/op", "bp ev",
               "untraced", "floor+", "bp+", "pid+", "bp/fl", "pid/fl",
               "target", "met", "bp drops", "refused"]),
    {P, F} = lists:foldl(fun(K, {P0, F0}) ->
                                 {P1, F1} = report_kind(K, Res),
                                 {P0 + P1, F0 + F1}
                         end, {0, 0}, Kinds),
    _ = Smoke andalso io:format("bench smoke part: ~p passed, ~p failed~n", [P, F]),
    F.

report_kind(#{id := Id, label := Label, target := Target, pattern := Pat}, Res) ->
    Rs = [{C, maps:get({Id, C}, Res)} || C <- configs()],
    Passed = length([R || {_, L} <- Rs, R <- L, ok_result(R)]),
    Failed = length([R || {_, L} <- Rs, R <- L, not ok_result(R)]),
    Ev = case Failed of
             0 -> median([E || {_, E, _} <- proplists:get_value(process, Rs)]);
             _ -> undefined
         end,
    %% beamprobe's runs that dropped or wrote another number of events
    %% than the sink received: not counted.  Calls are exactly one or two
    %% events each; the other kinds' counts vary a little from run to run
    %% (a process scheduled out once more): 1 %.
    Tol = case Pat of none -> 0.01 * Ev; _ -> 0.0 end,
    AllBp = proplists:get_value(bp, Rs),
    Counted = [R || {_, E, D} = R <- AllBp, D =:= 0, Failed =:= 0,
                    abs(E - Ev) =< Tol],
    Refused = length(AllBp) - length(Counted),
    case Failed of
        0 when Counted =/= [] ->
            Runs = fun(bp) -> Counted;
                      (C) -> proplists:get_value(C, Rs)
                   end,
            Med = fun(C) -> median([Ns || {Ns, _, _} <- Runs(C)]) end,
            BpEv = median([E || {_, E, _} <- Counted]),
            Drops = lists:sum([D || {_, _, D} <- AllBp]),
            U = Med(untraced),
            Add = fun(C) -> (Med(C) - U) / max(Ev, 1.0e-9) end,
            Fl = Add(floor), Bp = Add(bp), Pid = Add(process),
            Ratio = Bp / Fl,
            io:format("~-36s ~5.2f ~5.2f ~8.1f | ~8.1f ~8.1f ~8.1f | ~6.2f ~6.2f ~6.2f ~4s ~p ~p~n",
                      [Label, Ev, BpEv, U, Fl, Bp, Pid, Ratio, Pid / Fl, Target,
                       case Ratio =< Target of true -> "yes"; false -> "NO" end,
                       Drops, Refused]),
            {Passed, Failed};
        0 ->
            io:format("~-36s FAILED: every beamprobe run refused (dropped: ~p; "
                      "events per op written: ~w, received by the sink: ~.2f)~n",
                      [Label, lists:sum([D || {_, _, D} <- AllBp]),
                       [E || {_, E, _} <- AllBp], Ev]),
            {Passed - Refused, Refused};
        _ ->
            io:format("~-36s FAILED (~p of ~p runs)~n",
                      [Label, Failed, Passed + Failed]),
            {Passed, Failed}
    end.

ok_result({Ns, _, _}) when is_number(Ns), Ns > 0 -> true;
ok_result(_) -> false.

median(L) ->
    S = lists:sort(L),
    lists:nth((length(S) + 1) div 2, S).
