%%% @doc Cost per call of profile mode (beamprobe:profile/2), next to the
%%% do-nothing NIF tracer (bench/floor_tracer.c, the VM floor) in the same
%%% run: ns per local call of bench_target:f/1, best of interleaved rounds,
%%% and the cost added over untraced as a ratio of the floor's.
%%% The counters are read before each profile run ends: call_count (and,
%%% with timing, call_time for this process) must be the calls made, else
%%% the run is not counted (the line says so).
%%% `bash bench/run.sh profile'.
-module(beamprobe_profile_bench).
-export([main/0, main/1]).

-define(CALLS, 2000000).
-define(ROUNDS, 5).
-define(MFA, {bench_target, f, 1}).

%% @doc Runs the comparison and prints it.
-spec main() -> no_return().
main() -> main([]).

%% @doc Same; `smoke' runs one short round (CI).
-spec main([string() | atom()]) -> no_return().
main(Args) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    %% Loaded here, not by the first (untraced) timed run.
    {module, _} = code:ensure_loaded(bench_target),
    Smoke = lists:member(smoke, Args) orelse lists:member("smoke", Args),
    {Calls, Rounds} = case Smoke of
                          true -> {100000, 1};
                          false -> {?CALLS, ?ROUNDS}
                      end,
    Configs = [{untraced, "untraced"},
               {floor, "do-nothing NIF tracer (VM floor)"},
               {counts, "profile, timing => false (call_count)"},
               {timed, "profile, timing => true (+ call_time)"}],
    io:format("~n== profile mode: ns per call (best of ~p interleaved "
              "rounds, ~p calls) ==~n", [Rounds, Calls]),
    Rs = [[{C, run(C, Calls)} || {C, _} <- Configs]
          || _ <- lists:seq(1, Rounds)],
    %% A profile run whose counters missed calls is not counted.
    Good = fun(C) -> [Ns || R <- Rs, {Ns, Counted} <- [proplists:get_value(C, R)],
                            Counted =:= Calls]
           end,
    Bad = [{C, Counted} || R <- Rs, {C, {_, Counted}} <- R, Counted =/= Calls],
    [io:format("~p: the counters said ~p calls of ~p: run not counted~n",
               [C, Counted, Calls]) || {C, Counted} <- Bad],
    Best = [{C, case Good(C) of [] -> none; L -> lists:min(L) end}
            || {C, _} <- Configs],
    Base = proplists:get_value(untraced, Best),
    FloorAdd = proplists:get_value(floor, Best) - Base,
    [case proplists:get_value(C, Best) of
         none -> io:format("~-42s FAILED: no run counted every call~n", [L]);
         V -> io:format("~-42s ~7.1f ns  +~6.1f ns  ~5.2f x floor's added cost~n",
                        [L, V, V - Base, (V - Base) / max(FloorAdd, 0.001)])
     end || {C, L} <- Configs],
    io:format("target: profile's added cost < the floor's~n"),
    Failed = length([C || {C, none} <- Best]),
    _ = Smoke andalso io:format("bench smoke part: ~p passed, ~p failed~n",
                                [length(Configs) - Failed, Failed]),
    halt(case Smoke andalso Failed > 0 of true -> 1; false -> 0 end).

%% {NsPerCall, CallsCounted}: the profile's counters (call_count, and
%% call_time's count for this process when timed) read before it ends;
%% Calls for untraced and the floor, which count nothing.
run(Config, Calls) ->
    Undo = setup(Config),
    erlang:garbage_collect(),
    T0 = erlang:monotonic_time(nanosecond),
    ok = bench_target:loop(Calls, 42),
    T1 = erlang:monotonic_time(nanosecond),
    Counted = counted(Config, Calls),
    Undo(),
    {(T1 - T0) / Calls, Counted}.

counted(counts, _) ->
    {call_count, N} = erlang:trace_info(?MFA, call_count),
    N;
counted(timed, _) ->
    {call_count, N} = erlang:trace_info(?MFA, call_count),
    {call_time, Ts} = erlang:trace_info(?MFA, call_time),
    Mine = [C || {P, C, _, _} <- Ts, P =:= self()],
    %% Every call counted, and timed in this (flagged) process.
    case Mine of
        [N] -> N;
        _ -> {N, Mine}
    end;
counted(_, Calls) -> Calls.

setup(untraced) ->
    %% Nothing left by the last run: no flag, no pattern, no counter.
    {flags, []} = erlang:trace_info(self(), flags),
    {all, false} = erlang:trace_info(?MFA, all),
    fun() -> ok end;
setup(floor) ->
    1 = erlang:trace_pattern(?MFA, true, [local]),
    1 = erlang:trace(self(), true, [call, arity, {tracer, floor_tracer, []}]),
    fun() ->
            erlang:trace(self(), false, [all]),
            erlang:trace_pattern(?MFA, false, [local])
    end;
setup(Mode) ->
    %% The real profile/2, ended by killing its caller (the worker then
    %% removes everything, as for any caller that dies).
    Self = self(),
    Caller = spawn(fun() ->
                           R = beamprobe:profile(?MFA, #{time => 600000,
                                                         print => false,
                                                         timing => Mode =:= timed}),
                           Self ! {profile, R}
                   end),
    wait(fun() -> erlang:trace_info(?MFA, call_count) =/= {call_count, false} end),
    fun() ->
            Ref = monitor(process, Caller),
            exit(Caller, kill),
            receive {'DOWN', Ref, _, _, _} -> ok end,
            wait(fun() -> whereis(beamprobe_profile) =:= undefined end)
    end.

wait(F) ->
    case F() of
        true -> ok;
        false -> timer:sleep(1), wait(F)
    end.
