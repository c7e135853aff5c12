%%% @doc Cost per call of profile mode (beamprobe:profile/2), next to the
%%% do-nothing NIF tracer (bench/floor_tracer.c, the VM floor) in the same
%%% run: ns per local call of bench_target:f/1, best of interleaved rounds,
%%% and the cost added over untraced as a ratio of the floor's.
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
    Best = [{C, lists:min([proplists:get_value(C, R) || R <- Rs])}
            || {C, _} <- Configs],
    Base = proplists:get_value(untraced, Best),
    FloorAdd = proplists:get_value(floor, Best) - Base,
    [io:format("~-42s ~7.1f ns  +~6.1f ns  ~5.2f x floor's added cost~n",
               [L, V, V - Base, (V - Base) / max(FloorAdd, 0.001)])
     || {C, L} <- Configs, V <- [proplists:get_value(C, Best)]],
    io:format("target: profile's added cost < the floor's~n"),
    _ = Smoke andalso io:format("bench smoke part: ~p passed, 0 failed~n",
                                [length(Configs)]),
    halt(0).

run(Config, Calls) ->
    Undo = setup(Config),
    erlang:garbage_collect(),
    T0 = erlang:monotonic_time(nanosecond),
    ok = bench_target:loop(Calls, 42),
    T1 = erlang:monotonic_time(nanosecond),
    Undo(),
    (T1 - T0) / Calls.

setup(untraced) -> fun() -> ok end;
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
