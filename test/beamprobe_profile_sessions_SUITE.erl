%%% Sessions next to a profile run (beamprobe:profile/2): a session
%%% started during the run skips the processes the profile holds (their
%%% tracer is the profile's), and takes them when the run ends, normally
%%% or with its worker killed (beamprobe_janitor:pick_up/2).  (A session
%%% refused or skipping during a profile, a profile during a session:
%%% beamprobe_profile_SUITE.)
-module(beamprobe_profile_sessions_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([session_during_profile_picked_up/1,
         session_during_killed_profile_picked_up/1,
         more_held_than_listed_picked_up/1,
         picked_up_then_taken_reported/1]).

-define(W, beamprobe_workload).

all() ->
    [session_during_profile_picked_up,
     session_during_killed_profile_picked_up,
     more_held_than_listed_picked_up,
     picked_up_then_taken_reported].

init_per_suite(Config) ->
    beamprobe_test_lib:require_tracer(),
    {module, ?W} = code:ensure_loaded(?W),
    Config.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    beamprobe_test_lib:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    _ = case whereis(beamprobe_profile) of
            undefined -> ok;
            P -> exit(P, kill)
        end,
    _ = [erlang:trace_pattern({?W, add, 2}, false, [C])
         || C <- [call_count, call_time]],
    beamprobe_test_lib:clear_trace_state().

%% Sessions started while a profile with timing runs skip the processes
%% it holds (above); when it ends they take them: a session with `procs =>
%% all' and one with a list naming one held and one free process record
%% the held one's calls from then on, and `skipped' no longer lists it.
%% Before, they stayed untraced for the rest of the session (add(2, 1)
%% after the profile's end: not recorded, `skipped' still listed them).
session_during_profile_picked_up(Config) ->
    during_profile(Config, fun() ->
                                   whereis(beamprobe_profile) !
                                       {beamprobe_profile, stop},
                                   fun({ok, _}) -> true; (_) -> false end
                           end).

%% The same when the profile's worker is killed: its guard restores the
%% flags, and the sessions take the processes.
session_during_killed_profile_picked_up(Config) ->
    during_profile(Config, fun() ->
                                   exit(whereis(beamprobe_profile), kill),
                                   fun(R) -> R =:= {error, {profile_failed,
                                                            killed}}
                                   end
                           end).

during_profile(Config, End) ->
    W = ?W:start_worker(),
    Self = self(),
    _ = spawn_link(fun() ->
                           Self ! {profiled, beamprobe:profile(
                                               {?W, add, 2},
                                               #{time => 60000,
                                                 print => false})}
                   end),
    Discard = {tracer, {beamprobe_nif, beamprobe_discard}},
    beamprobe_test_lib:wait_until(
      fun() -> erlang:trace_info(W, tracer) =:= Discard end, 10000),
    Free = ?W:start_worker(),                   % spawned after: not held
    Dir = fun(N) -> beamprobe_test_lib:dir(Config, N) end,
    SA = beamprobe_test_lib:start(#{calls => [{?W, add, 2}], procs => all,
                                    output => {file, Dir("all")}}),
    SL = beamprobe_test_lib:start(#{calls => [{?W, add, 2}],
                                    procs => [W, Free],
                                    output => {file, Dir("list")}}),
    Skipped = fun(S) ->
                      {ok, #{skipped := #{procs := Sk, procs_count := N}}} =
                          beamprobe:info(S),
                      {lists:member(W, Sk), N}
              end,
    {true, NA} = Skipped(SA),
    ?assertEqual({true, 1}, Skipped(SL)),
    ?W:run(W, fun() -> ?W:add(1, 1) end),              % held: not recorded
    Want = End(),
    receive {profiled, Res} -> ?assert(Want(Res), Res) end,
    beamprobe_test_lib:wait_until(
      fun() -> element(1, Skipped(SA)) =:= false andalso
                   element(1, Skipped(SL)) =:= false end, 10000),
    ?assertEqual({tracer, {beamprobe_nif, beamprobe_hub}},
                 erlang:trace_info(W, tracer)),
    {false, NA1} = Skipped(SA),
    ?assert(NA1 < NA),
    ?assertEqual({false, 0}, Skipped(SL)),
    ?W:run(W, fun() -> ?W:add(2, 1) end),
    ?W:run(Free, fun() -> ?W:add(3, 1) end),
    _ = [beamprobe_test_lib:stop(S) || S <- [SA, SL]],
    [begin
         Evs = beamprobe_test_lib:trace(Dir(N)),
         ?assertEqual({N, 1}, {N, length(beamprobe_test_lib:events(
                                             Evs, "call", W))}),
         ?assertEqual({N, 1}, {N, length(beamprobe_test_lib:events(
                                             Evs, "call", Free))})
     end || N <- ["all", "list"]],
    beamprobe_test_lib:assert_no_trace_state([W, Free], [{?W, add, 2}]),
    [?W:stop_worker(P) || P <- [W, Free]].

%% More processes held than `skipped' lists (1,000): a session with
%% `procs => all' started during the profile takes every one of them when
%% it ends.  Before, it took only the listed ones: of 1,500 idle
%% processes the profile held, 930 got the session's tracer, 570 stayed
%% untraced for the rest of its run (and `skipped' still counted them).
more_held_than_listed_picked_up(Config) ->
    Ps = [spawn(fun() -> receive stop -> ok end end)
          || _ <- lists:seq(1, 1500)],
    Self = self(),
    _ = spawn_link(fun() ->
                           Self ! {profiled, beamprobe:profile(
                                               {?W, add, 2},
                                               #{time => 60000,
                                                 print => false})}
                   end),
    Tracer = fun(T) ->
                     fun() -> lists:all(fun(P) -> erlang:trace_info(P, tracer)
                                                      =:= {tracer, T}
                                        end, Ps)
                     end
             end,
    beamprobe_test_lib:wait_until(
      Tracer({beamprobe_nif, beamprobe_discard}), 20000),
    S = beamprobe_test_lib:start(#{calls => [{?W, add, 2}], procs => all,
                                   output => {file, beamprobe_test_lib:dir(
                                                      Config, "all")}}),
    {ok, #{skipped := #{procs_count := N0}}} = beamprobe:info(S),
    ?assert(N0 >= 1500, N0),
    whereis(beamprobe_profile) ! {beamprobe_profile, stop},
    receive {profiled, R} -> ?assertMatch({ok, _}, R) end,
    beamprobe_test_lib:wait_until(
      Tracer({beamprobe_nif, beamprobe_hub}), 10000),
    {ok, #{skipped := #{procs_count := N1}}} = beamprobe:info(S),
    ?assert(N1 =< N0 - 1500, {N0, N1}),
    _ = beamprobe_test_lib:stop(S),
    beamprobe_test_lib:assert_no_trace_state(Ps, [{?W, add, 2}]),
    [P ! stop || P <- Ps],
    ok.

%% A process a session with a list took when the profile ended is
%% watched as the others: another tool taking it is reported.  Before,
%% the watchdog watched only the processes of the start: the session lost
%% W's events without a word (tampered listed only the free worker).
picked_up_then_taken_reported(Config) ->
    W = ?W:start_worker(),
    Self = self(),
    _ = spawn_link(fun() ->
                           Self ! {profiled, beamprobe:profile(
                                               {?W, add, 2},
                                               #{time => 60000,
                                                 print => false})}
                   end),
    beamprobe_test_lib:wait_until(
      fun() -> erlang:trace_info(W, tracer) =:=
                   {tracer, {beamprobe_nif, beamprobe_discard}} end, 10000),
    Free = ?W:start_worker(),
    S = beamprobe_test_lib:start(#{calls => [{?W, add, 2}],
                                   procs => [W, Free],
                                   output => {file, beamprobe_test_lib:dir(
                                                      Config, "list")}}),
    whereis(beamprobe_profile) ! {beamprobe_profile, stop},
    receive {profiled, R} -> ?assertMatch({ok, _}, R) end,
    %% (Taken: the session has dealt with the profile's end.)
    beamprobe_test_lib:wait_until(
      fun() ->
              {ok, #{skipped := #{procs := Sk}}} = beamprobe:info(S),
              not lists:member(W, Sk)
      end, 10000),
    Other = spawn(fun() -> receive stop -> ok end end),
    [begin
         _ = erlang:trace(P, false, [all]),
         1 = erlang:trace(P, true, [call, {tracer, Other}])
     end || P <- [W, Free]],
    Taken = fun() ->
                    {ok, #{tampered := T}} = beamprobe:info(S),
                    lists:sort([P || {procs, P, replaced, _} <- T])
            end,
    beamprobe_test_lib:wait_until(
      fun() -> Taken() =:= lists:sort([W, Free]) end, 10000),
    _ = beamprobe_test_lib:stop(S),
    [erlang:trace(P, false, [all]) || P <- [W, Free]],
    Other ! stop,
    beamprobe_test_lib:assert_no_trace_state([W, Free], [{?W, add, 2}]),
    [?W:stop_worker(P) || P <- [W, Free]].
