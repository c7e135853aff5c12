%%% @doc `make bench', the first pass: what the calls traced right after a
%%% session starts cost, while each producing thread's ring is still new
%%% memory (c_src/bp_prefault.h).  Each run starts a fresh session (or the
%%% floor's tracing) on a fresh process and times its first N calls as a
%%% whole (no windows: the first pass is the point), with the minor page
%%% faults of the scheduler threads meanwhile; a drained session (`args => arity') and a flight
%%% recorder (`overflow => drop_oldest', whose one 8 MiB part N calls write
%%% through).  Every configuration runs once per round, interleaved; a
%%% figure is the median of the rounds.
%%%
%%% `smoke' runs every configuration once with tiny counts and no
%%% thresholds (`make test'), ending with `bench smoke part: N passed, M
%%% failed'.  See docs/performance/stops-22-23.md, "Ring memory mapped ahead".
-module(beamprobe_firstpass_bench).
-export([main/1]).

-define(ROUNDS, 7).
-define(F, {bench_target, f, 1}).

%% @doc `main(["bench", VMLabel...])' or `main(["smoke", VMLabel...])'.
-spec main([string()]) -> no_return().
main([Mode | Label]) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    {module, _} = code:ensure_loaded(bench_target),
    Tmp = filename:join(os:getenv("TMPDIR", "/tmp"),
                        "beamprobe-fpbench-" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Tmp, "x")),
    Smoke = Mode =:= "smoke",
    {Rounds, N} = case Smoke of
                      true -> {1, 1000};
                      false -> {rounds(), 100000}
                  end,
    io:format("~n== first pass: ns per call over the first ~p calls traced "
              "after a session starts (args => arity), whole run; VM: ~s; "
              "median of ~p interleaved rounds ==~n",
              [N, string:join(Label, " "), Rounds]),
    Res = lists:foldl(
            fun(_, Acc0) ->
                    lists:foldl(
                      fun(C, Acc) ->
                              R = try run(C, N, Tmp)
                                  catch Cl:E:St ->
                                          io:format("~p: ~p:~p ~p~n",
                                                    [C, Cl, E, St]),
                                          error
                                  end,
                              maps:update_with(C, fun(L) -> [R | L] end,
                                               [R], Acc)
                      end, Acc0, [untraced, floor, drained, flight])
            end, #{}, lists:seq(1, Rounds)),
    os:cmd("rm -rf " ++ Tmp),
    Failed = report(Res),
    _ = Smoke andalso io:format("bench smoke part: ~p passed, ~p failed~n",
                                [4 * Rounds - Failed, Failed]),
    halt(case Smoke andalso Failed > 0 of true -> 1; false -> 0 end).

rounds() ->
    case string:to_integer(os:getenv("BEAMPROBE_BENCH_ROUNDS", "")) of
        {R, []} when R > 0 -> R;
        _ -> ?ROUNDS
    end.

%% {ns per call, minor faults of the node} over the first N calls.
run(Config, N, Tmp) ->
    Parent = self(),
    W = spawn(fun() ->
                      receive go -> ok end,
                      F0 = minflt(),
                      T0 = erlang:monotonic_time(nanosecond),
                      bench_target:loop(N, 42),
                      T1 = erlang:monotonic_time(nanosecond),
                      Parent ! {done, self(), (T1 - T0) / N, minflt() - F0}
              end),
    Undo = setup(Config, W, Tmp),
    W ! go,
    receive {done, W, Ns, Faults} -> Undo(), {Ns, Faults} end.

setup(untraced, _W, _Tmp) ->
    fun() -> ok end;
setup(floor, W, _Tmp) ->
    1 = erlang:trace_pattern(?F, true, [local]),
    erlang:trace(W, true, [call, arity, {tracer, floor_tracer, []}]),
    fun() ->
            catch erlang:trace(W, false, [all]),
            erlang:trace_pattern(?F, false, [local]),
            ok
    end;
setup(Config, W, Tmp) ->
    Dir = filename:join(Tmp, atom_to_list(Config)),
    os:cmd("rm -rf " ++ Dir),
    {ok, S} = beamprobe:start(
                #{procs => [W], calls => [?F], args => arity,
                  overflow => case Config of
                                  flight -> drop_oldest;
                                  drained -> drop_newest
                              end,
                  output => {file, Dir},
                  limits => #{seconds => infinity, bytes => infinity}}),
    fun() -> {ok, _} = beamprobe:stop(S), os:cmd("rm -rf " ++ Dir), ok end.

%% The minor page faults of the node's scheduler threads so far (field 10
%% of /proc/self/task/T/stat for each thread named N_scheduler): the
%% traced process's, not the collector's mapping ahead.
minflt() ->
    case file:list_dir("/proc/self/task") of
        {ok, Ts} -> lists:sum([task_minflt(T) || T <- Ts]);
        _ -> 0
    end.

task_minflt(T) ->
    Dir = "/proc/self/task/" ++ T,
    case {file:read_file(Dir ++ "/comm"), file:read_file(Dir ++ "/stat")} of
        {{ok, Comm}, {ok, Stat}} ->
            case binary:match(Comm, <<"_scheduler">>) of
                nomatch -> 0;
                _ ->
                    [_, Rest] = binary:split(Stat, <<") ">>),
                    binary_to_integer(
                      lists:nth(8, binary:split(Rest, <<" ">>, [global])))
            end;
        _ -> 0
    end.

report(Res) ->
    Ok = fun({Ns, _}) when is_number(Ns), Ns > 0 -> true; (_) -> false end,
    Failed = length([R || L <- maps:values(Res), R <- L, not Ok(R)]),
    case Failed of
        0 ->
            Med = fun(C, I) -> median([element(I, R) || R <- maps:get(C, Res)])
                  end,
            U = Med(untraced, 1),
            Fl = Med(floor, 1) - U,
            io:format("untraced ~.1f ns per call; floor+ ~.1f ns~n", [U, Fl]),
            io:format("~-28s ~8s ~7s ~14s~n",
                      ["configuration", "added", "x floor", "minor faults"]),
            [io:format("~-28s ~8.1f ~7.2f ~14w~n",
                       [Name, Med(C, 1) - U, (Med(C, 1) - U) / Fl,
                        Med(C, 2)])
             || {C, Name} <- [{floor, "floor"},
                              {drained, "session, drained"},
                              {flight, "session, flight recorder"}]];
        _ ->
            io:format("first-pass bench FAILED (~p runs)~n", [Failed])
    end,
    Failed.

median(L) ->
    S = lists:sort(L),
    lists:nth((length(S) + 1) div 2, S).
