%%% @doc Sessions that overlap (issue 8, point 1): several sessions over
%%% the same processes and functions, each receiving exactly the events it
%%% asked for -- checked against the same sessions run one at a time (the
%%% oracle: the VM's own single-tracer behaviour), under random start/stop
%%% orders and load, and next to dbg.
-module(beamprobe_overlap_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2,
         end_per_testcase/2]).
-export([different_renderings/1, issue_example/1, ports_and_own/1,
         returns_exact/1, returns_deep_recursion/1,
         meta_next_to_hub/1, janitor_and_session_killed/1,
         reload_with_overlaps/1, random_sessions_under_load/1, next_to_dbg/1,
         cannot_combine/1, message_pattern_conflict/1,
         distinct_functions_same_procs/1, killed_session_cleaned/1,
         busy_janitor_not_another_tool/1, exclude_per_session/1,
         forged_route_ignored/1, own_processes_not_recorded/1]).
-export([prober/0]).

-define(L, beamprobe_test_lib).
-define(W, beamprobe_workload).

all() ->
    [issue_example, different_renderings, returns_exact,
     returns_deep_recursion, forged_route_ignored,
     distinct_functions_same_procs, busy_janitor_not_another_tool,
     exclude_per_session,
     own_processes_not_recorded, cannot_combine,
     message_pattern_conflict, killed_session_cleaned, ports_and_own,
     meta_next_to_hub, janitor_and_session_killed, reload_with_overlaps,
     next_to_dbg,
     random_sessions_under_load].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, ?W} = code:ensure_loaded(?W),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    ?L:clear_trace_state().

%%% ------------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------------

%% A process that, on {probe, From, N, K, Sink}, calls tick(1..N), sends K
%% messages to Sink, and replies {probe_done, self()}: the same events
%% every time it is asked.
prober() ->
    receive
        {probe, From, N, K, Sink} ->
            ok = ?W:loop_tick(1, N),
            _ = [Sink ! {msg, I} || I <- lists:seq(1, K)],
            From ! {probe_done, self()},
            prober();
        stop -> ok
    end.

start_prober() -> spawn(?MODULE, prober, []).

probe(P, N, K, Sink) ->
    P ! {probe, self(), N, K, Sink},
    receive {probe_done, P} -> ok
    after 30000 -> ct:fail(probe_timeout)
    end.

sink() ->
    spawn(fun Loop() -> receive stop -> ok; _ -> Loop() end end).

%% The events of a trace without the `process' events, each as
%% {Name, PidText, Fields}: comparable between two runs on the same
%% processes.
norm_events(Dir) ->
    Evs = ?L:trace(Dir),
    Names = maps:from_list([{K, ?L:field(E, "pid")}
                            || #{name := <<"process">>, key := K} = E <- Evs]),
    lists:sort([{N, maps:get(K, Names, K), maps:without([<<"to">>], F)}
                || #{name := N, key := K, fields := F} <- Evs,
                   N =/= <<"process">>, N =/= <<"drops">>]).

tick_args(Evs) ->
    [binary_to_integer(binary:part(A, 1, byte_size(A) - 2))
     || {<<"call">>, _, #{<<"args">> := A}} <- Evs].

hub_flags_left() ->
    [{P, F} || P <- processes() ++ erlang:ports(),
               {flags, F} <- [erlang:trace_info(P, flags)], F =/= [],
               erlang:trace_info(P, tracer) =:=
                   {tracer, {beamprobe_nif, beamprobe_hub}}].

assert_nothing_left(MFAs) ->
    ?assertEqual([], beamprobe:list()),
    ?assertEqual([], hub_flags_left()),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    ?assertEqual(0, beamprobe_nif:hub_members()),
    [?assertEqual({MFA, {all, false}}, {MFA, erlang:trace_info(MFA, all)})
     || MFA <- MFAs],
    ok.

gt(N) -> [{['$1'], [{'>', '$1', N}], []}].
le(N) -> [{['$1'], [{'=<', '$1', N}], []}].

%%% ------------------------------------------------------------------------
%%% 1. The issue's example, event by event against single-session runs
%%% ------------------------------------------------------------------------

%% Runs the sessions Specs together, then each alone, around the same
%% workload Work(); returns {Together, Alone}: [{I, Events}] each.
together_alone(Config, Specs, Work) ->
    Run = fun(Tag, Which) ->
                  Dirs = [{I, ?L:dir(Config, Tag ++ integer_to_list(I))}
                          || I <- Which],
                  Ss = [?L:start(S#{output => {file, D},
                                    buffer => 8 * 1024 * 1024})
                        || {I, D} <- Dirs, S <- [lists:nth(I, Specs)]],
                  ok = Work(),
                  Sums = [?L:stop(S) || S <- Ss],
                  [?assertEqual(0, ?L:total(Sum)) || Sum <- Sums],
                  [{I, norm_events(D)} || {I, D} <- Dirs]
          end,
    Is = lists:seq(1, length(Specs)),
    {Run("together", Is), lists:append([Run("alone", [I]) || I <- Is])}.

%% Three `procs => all' sessions on tick/1 with X > 500, X =< 500 and
%% true, and one on [P] with events => [send]: 500, 500, 1000 calls and
%% P's sends -- and each session's events are exactly those of the same
%% session run alone.
issue_example(Config) ->
    P = start_prober(),
    Sink = sink(),
    Specs = [#{calls => [{{?W, tick, 1}, gt(500)}], args => full},
             #{calls => [{{?W, tick, 1}, le(500)}], args => full},
             #{calls => [{?W, tick, 1}], args => full},
             #{procs => [P], events => [send]}],
    {Together, Alone} = together_alone(Config, Specs,
                                       fun() -> probe(P, 1000, 20, Sink) end),
    [{1, E1}, {2, E2}, {3, E3}, {4, E4}] = Together,
    ?assertEqual(500, length(tick_args(E1))),
    ?assert(lists:all(fun(X) -> X > 500 end, tick_args(E1))),
    ?assertEqual(500, length(tick_args(E2))),
    ?assert(lists:all(fun(X) -> X =< 500 end, tick_args(E2))),
    ?assertEqual(lists:seq(1, 1000), lists:sort(tick_args(E3))),
    Sends = [E || {<<"send">>, _, _} = E <- E4],
    ?assertEqual(21, length(Sends)),   % 20 to Sink, the reply
    ?assertEqual(length(Sends), length(E4)),
    [?assertEqual({I, proplists:get_value(I, Alone)}, {I, Evs})
     || {I, Evs} <- Together],
    %% What the janitor says it installed for a session is what the VM
    %% has (the interface a watchdog checks against).
    S = ?L:start((hd(Specs))#{output => {file, ?L:dir(Config, "i1")}}),
    S2 = ?L:start((lists:nth(3, Specs))#{output => {file, ?L:dir(Config, "i2")}}),
    {ok, #{patterns := Pats, tracer := Tracer}} = beamprobe_janitor:installed(S),
    ?assertEqual([{?W, tick, 1}], maps:keys(Pats)),
    [?assertEqual({match_spec, MS}, erlang:trace_info(MFA, match_spec))
     || {MFA, MS} <- maps:to_list(Pats)],
    ?assertEqual({tracer, beamprobe_nif, beamprobe_hub}, Tracer),
    ?assertEqual({error, not_found}, beamprobe_janitor:installed(self())),
    _ = [?L:stop(X) || X <- [S, S2]],
    assert_nothing_left([{?W, tick, 1}]),
    P ! stop,
    Sink ! stop,
    ok.

%% Sessions on the same function and process that render its events
%% differently (arguments or not, capture limits, returns, exceptions,
%% call info from a `message' action in a combined match spec): an event
%% rendered once is copied only into sessions that render it the same
%% way; each gets exactly what it gets alone.
different_renderings(Config) ->
    W = ?W:start_worker(),
    Big = lists:seq(1, 300),
    Specs = [#{procs => [W], calls => [{?W, sink, 1}], args => full},
             #{procs => [W], calls => [{?W, sink, 1}], args => arity},
             #{procs => [W], calls => [{?W, sink, 1}], args => full,
               capture => #{list => 3}},
             #{procs => [W], calls => [{?W, sink, 1}, {?W, crash, 1}],
               args => full, return => true, exceptions => true},
             #{procs => [W], calls => [{?W, sink, 1}], args => full},
             #{procs => [W], calls => [{{?W, sink, 1},
                                        [{'_', [], [{message, {caller}}]}]}],
               args => full}],
    Work = fun() ->
                   ?W:run(W, fun() ->
                                     [ok = ?W:sink({I, Big}) || I <- [1, 2]],
                                     {caught, _} = ?W:catch_crash(x),
                                     ok
                             end)
           end,
    {Together, Alone} = together_alone(Config, Specs, Work),
    [?assertEqual({I, proplists:get_value(I, Alone)}, {I, Evs})
     || {I, Evs} <- Together],
    ?assert(lists:all(fun({_, Evs}) -> Evs =/= [] end, Together)),
    %% The call-info session got its caller (evaluated for it alone).
    {6, E6} = lists:keyfind(6, 1, Together),
    ?assertEqual(2, length([x || {<<"call">>, _, #{<<"info">> := I}} <- E6,
                                 binary:match(I, <<"beamprobe_overlap_SUITE">>)
                                     =/= nomatch])),
    assert_nothing_left([{?W, sink, 1}, {?W, crash, 1}]),
    ?W:stop_worker(W).

%% Sessions with different conditions that ask for returns on the same
%% function: each gets the returns (and exceptions) of exactly the calls
%% its own clause matched and asked for -- as alone -- also for nested
%% and raising calls.
returns_exact(Config) ->
    W = ?W:start_worker(),
    Ret = fun(G) -> [{['$1'], G, [{return_trace}]}] end,
    Specs = [#{procs => [W], calls => [{{?W, tick, 1}, Ret([{'>', '$1', 5}])}]},
             #{procs => [W], calls => [{{?W, tick, 1}, Ret([{'=<', '$1', 3}])}]},
             #{procs => [W], calls => [{?W, tick, 1}]},
             #{procs => [W], calls => [{{?W, crash, 1},
                                        [{['$1'], [{'>', '$1', 1}],
                                          [{exception_trace}]}]}]},
             #{procs => [W], calls => [{{?W, crash, 1},
                                        [{['$1'], [], [{return_trace}]}]}]},
             #{procs => [W], calls => [{{?W, outer, 1},
                                        [{['$1'], [{'<', '$1', 3}],
                                          [{return_trace}]},
                                         {['_'], [], []}]},
                                       {?W, inner, 1}], return => true}],
    Work = fun() ->
                   ?W:run(W, fun() ->
                                     [I = ?W:tick(I) || I <- lists:seq(1, 10)],
                                     [{caught, _} = ?W:catch_crash(I)
                                      || I <- [1, 2, 3]],
                                     [_ = ?W:outer(I) || I <- [1, 2, 3, 4]],
                                     ok
                             end)
           end,
    {Together, Alone} = together_alone(Config, Specs, Work),
    [?assertEqual({I, proplists:get_value(I, Alone)}, {I, Evs})
     || {I, Evs} <- Together],
    {1, E1} = lists:keyfind(1, 1, Together),
    ?assertEqual(5, length([x || {<<"return_from">>, _, _} <- E1])),
    {4, E4} = lists:keyfind(4, 1, Together),
    ?assertEqual(2, length([x || {<<"exception_from">>, _, _} <- E4])),
    ?assertMatch(#{members := 0, routes := 0, return_frames_lost := 0},
                 beamprobe_nif:hub_stats()),
    assert_nothing_left([{?W, tick, 1}, {?W, crash, 1}, {?W, outer, 1},
                         {?W, inner, 1}]),
    ?W:stop_worker(W).

%% A session's own `message' action, installed as it is (alone on its
%% function), sends the traced call's argument, shaped like a route of
%% combined match specs (`{bp_route, N}', `{bp_route_ret, N + 256}')
%% while other sessions' specs are combined elsewhere: the call is still
%% that session's alone.  Before, the tracer took any result so tagged
%% for a route: the argument decided which sessions got the call (here
%% the other three, which do not trace sink/1) and the session lost it.
forged_route_ignored(Config) ->
    Dirs = [?L:dir(Config, N) || N <- ["gt", "le", "add", "own"]],
    [DG, DL, DA, DX] = Dirs,
    Ss = [?L:start(#{calls => [{{?W, tick, 1}, gt(5)}], output => {file, DG}}),
          ?L:start(#{calls => [{{?W, tick, 1}, le(5)}], output => {file, DL}}),
          ?L:start(#{calls => [{?W, add, 2}], output => {file, DA}}),
          ?L:start(#{calls => [{{?W, sink, 1}, [{['$1'], [], [{message, '$1'}]}]}],
                     output => {file, DX}})],
    ?assertMatch(#{routes := R} when R > 0, beamprobe_nif:hub_stats()),
    Forged = [{bp_route, I} || I <- lists:seq(0, 5)] ++
        [{bp_route_ret, I + 256} || I <- lists:seq(0, 5)],
    _ = [ok = ?W:sink(T) || T <- Forged],
    _ = [?L:stop(S) || S <- Ss],
    Sinks = fun(D) -> [A || {<<"call">>, _, #{<<"mfa">> := <<"beamprobe_workload:sink/1">>,
                                              <<"args">> := A}} <- norm_events(D)]
            end,
    ?assertEqual({[], [], []}, {Sinks(DG), Sinks(DL), Sinks(DA)}),
    ?assertEqual(length(Forged), length(Sinks(DX))),
    assert_nothing_left([{?W, tick, 1}, {?W, add, 2}, {?W, sink, 1}]).

%% A recursion deeper than the return stack keeps (64 frames): nothing
%% breaks, calls are still routed exactly, the frames lost are counted,
%% and their returns are routed by function (a session may then see a
%% return of a call it did not see, never lose one of its own).
returns_deep_recursion(Config) ->
    W = ?W:start_worker(),
    Lost0 = maps:get(return_frames_lost, beamprobe_nif:hub_stats()),
    Ret = fun(G) -> [{['$1', '_'], G, [{return_trace}]}] end,
    D1 = ?L:dir(Config, "a"),
    D2 = ?L:dir(Config, "b"),
    S1 = ?L:start(#{procs => [W], calls => [{{?W, loop_tick, 2},
                                              Ret([{'>', '$1', 50}])}],
                    output => {file, D1}}),
    S2 = ?L:start(#{procs => [W], calls => [{{?W, loop_tick, 2},
                                              Ret([{'=<', '$1', 50}])}],
                    output => {file, D2}}),
    ok = ?W:run(W, fun() -> ?W:loop_tick(1, 100) end),
    _ = [?L:stop(S) || S <- [S1, S2]],
    ?assert(maps:get(return_frames_lost, beamprobe_nif:hub_stats()) > Lost0),
    E1 = norm_events(D1),
    E2 = norm_events(D2),
    ?assertEqual(51, length([x || {<<"call">>, _, _} <- E1])),  % 51..101
    ?assertEqual(50, length([x || {<<"call">>, _, _} <- E2])),
    ?assert(length([x || {<<"return_from">>, _, _} <- E1]) >= 51),
    ?assert(length([x || {<<"return_from">>, _, _} <- E2]) >= 50),
    assert_nothing_left([{?W, loop_tick, 2}]),
    ?W:stop_worker(W).

%% Two `all' sessions on different functions of the same processes (the
%% old conflict {procs, all, all}) each get their own function's calls;
%% stopping one leaves the other's pattern and flags.
distinct_functions_same_procs(Config) ->
    P = start_prober(),
    Sink = sink(),
    DA = ?L:dir(Config, "a"),
    DB = ?L:dir(Config, "b"),
    SA = ?L:start(#{calls => [{?W, tick, 1}], output => {file, DA}}),
    SB = ?L:start(#{calls => [{?W, add, 2}], events => [send], output => {file, DB}}),
    ok = probe(P, 10, 3, Sink),
    7 = ?W:add(3, 4),
    _ = ?L:stop(SA),
    ?assertEqual({all, false}, erlang:trace_info({?W, tick, 1}, all)),
    ?assertMatch({all, [_ | _]}, erlang:trace_info({?W, add, 2}, all)),
    ?assertMatch({flags, [_ | _]}, erlang:trace_info(P, flags)),
    ok = probe(P, 10, 3, Sink),
    _ = ?L:stop(SB),
    EA = norm_events(DA),
    EB = norm_events(DB),
    ?assertEqual(lists:seq(1, 10), lists:sort(tick_args(EA))),
    ?assertEqual([<<"call">>], lists:usort([N || {N, _, _} <- EA])),
    Self = list_to_binary(pid_to_list(self())),
    ?assertEqual(1, length([x || {<<"call">>, Pid, _} <- EB, Pid =:= Self])),
    ?assert(length([x || {<<"send">>, _, _} <- EB]) >= 8),
    assert_nothing_left([{?W, tick, 1}, {?W, add, 2}]),
    P ! stop,
    Sink ! stop.

%% A session that starts while the janitor is busy for longer than a
%% call's usual 5 s (an install over many processes; here the janitor
%% suspended for 11 s, past two such calls) waits for it: the function the first session traces
%% is not taken for another tool's (skipped, its calls lost) because the
%% question "which patterns do beamprobe's sessions claim?" went
%% unanswered.
busy_janitor_not_another_tool(Config) ->
    P = start_prober(),
    Sink = sink(),
    DA = ?L:dir(Config, "a"),
    DB = ?L:dir(Config, "b"),
    SA = ?L:start(#{calls => [{?W, tick, 1}], output => {file, DA}}),
    Self = self(),
    ok = sys:suspend(beamprobe_janitor),
    %% The starter owns session B: it stays until B is stopped.
    Starter = spawn(fun() ->
                            Self ! {started, beamprobe:start(
                                               #{calls => [{{?W, tick, 1}, gt(5)}],
                                                 output => {file, DB}})},
                            receive stop -> ok end
                    end),
    timer:sleep(11000),
    ok = sys:resume(beamprobe_janitor),
    SB = receive {started, {ok, S}} -> S;
                 {started, Other} -> ct:fail({start_failed, Other})
         after 10000 -> ct:fail({start_hangs, Starter})
         end,
    {ok, #{skipped := Sk}} = beamprobe:info(SB),
    ?assertEqual([], maps:get(calls, Sk)),
    ok = probe(P, 10, 0, Sink),
    _ = ?L:stop(SB),
    _ = ?L:stop(SA),
    ?assertEqual(lists:seq(1, 10), lists:sort(tick_args(norm_events(DA)))),
    ?assertEqual(lists:seq(6, 10), lists:sort(tick_args(norm_events(DB)))),
    assert_nothing_left([{?W, tick, 1}]),
    Starter ! stop,
    P ! stop,
    Sink ! stop.

%% `exclude': a session does not record the excluded processes, whatever
%% its `procs' (all, a list, new; a meta session's calls too), while
%% another session on the same processes still records them; bad values
%% are refused.
exclude_per_session(Config) ->
    P1 = start_prober(),
    P2 = start_prober(),
    Sink = sink(),
    Dirs = [?L:dir(Config, N) || N <- ["all", "ex_all", "ex_list", "ex_meta"]],
    [DA, DX, DL, DM] = Dirs,
    SA = ?L:start(#{calls => [{?W, tick, 1}], output => {file, DA}}),
    SX = ?L:start(#{calls => [{?W, tick, 1}], exclude => [P1],
                    output => {file, DX}}),
    SL = ?L:start(#{calls => [{?W, tick, 1}], procs => [P1, P2],
                    exclude => [P2], output => {file, DL}}),
    SM = ?L:start(#{calls => [{?W, tick, 1}], meta => true, exclude => [P2],
                    output => {file, DM}}),
    ok = probe(P1, 3, 0, Sink),
    ok = probe(P2, 4, 0, Sink),
    _ = [?L:stop(S) || S <- [SA, SX, SL, SM]],
    [P1T, P2T] = [list_to_binary(pid_to_list(P)) || P <- [P1, P2]],
    Who = fun(D) -> lists:usort([Pid || {<<"call">>, Pid, _} <- norm_events(D)]) end,
    ?assertEqual([P1T, P2T], Who(DA) -- [list_to_binary(pid_to_list(self()))]),
    ?assertEqual([P2T], Who(DX) -- [list_to_binary(pid_to_list(self()))]),
    ?assertEqual([P1T], Who(DL)),
    ?assertEqual([P1T], Who(DM) -- [list_to_binary(pid_to_list(self()))]),
    ?assertEqual([1, 1, 2, 2, 3, 3, 4], lists:sort(tick_args(norm_events(DA)))),
    Dead = spawn(fun() -> ok end),
    timer:sleep(50),
    ?assertMatch({error, {dead_process, Dead}},
                 beamprobe:start(#{calls => [{?W, tick, 1}], exclude => [Dead]})),
    ?assertMatch({error, {bad_option, exclude, _}},
                 beamprobe:start(#{calls => [{?W, tick, 1}], exclude => foo})),
    ?assertMatch({error, {no_such_process, bp_no_such_name}},
                 beamprobe:start(#{calls => [{?W, tick, 1}],
                                   exclude => [bp_no_such_name]})),
    assert_nothing_left([{?W, tick, 1}]),
    [X ! stop || X <- [P1, P2, Sink]].

%% Sessions recording process events of new processes (`new' and
%% `all') while other sessions start and stop (a file sink, a handler
%% sink, samples): they record the process the test spawns, and nothing
%% of the processes beamprobe spawns for the others (session, watchdog,
%% handler and its guard and reaper, sampler).  Before, each of those
%% was recorded `spawned' and `getting_linked' (the VM makes both from
%% the flags of new processes before the process turns sensitive):
%% 8 processes for two file sessions; and each session process's
%% `receive' of its start message, which carries the whole configuration
%% of the session starting (a TCP token too).
own_processes_not_recorded(Config) ->
    DN = ?L:dir(Config, "new"),
    DA = ?L:dir(Config, "all"),
    SN = ?L:start(#{procs => new, events => [procs, send, 'receive'], output => {file, DN}}),
    SA = ?L:start(#{events => [procs], output => {file, DA}}),
    Others = [#{calls => [{?W, tick, 1}], output => {file, ?L:dir(Config, "f")}},
              #{procs => [self()], calls => [{?W, tick, 1}],
                output => {handler, beamprobe_test_handler, #{parent => self()}}},
              #{procs => [self()], events => [send],
                sample => #{interval => 1000, what => [process_count]},
                output => {file, ?L:dir(Config, "s")}}],
    Ss = [?L:start(O) || O <- Others],
    H = receive {handler_init, HP} -> HP after 5000 -> ct:fail(no_handler) end,
    _ = [?L:stop(S) || S <- Ss],
    W = spawn(fun() -> ok end),
    ?L:wait_dead(W),
    _ = [?L:stop(S) || S <- [SN, SA]],
    WT = list_to_binary(pid_to_list(W)),
    Own = [list_to_binary(pid_to_list(P)) || P <- [H | Ss]],
    [begin
         Evs = norm_events(D),
         Spawned = [M || {<<"spawned">>, Who, #{<<"mfa">> := M}} <- Evs,
                         Who =/= WT],
         ?assertEqual({D, []}, {D, [M || M <- Spawned,
                                         binary:match(M, <<"beamprobe">>)
                                             =/= nomatch]}),
         ?assertEqual({D, []}, {D, [E || {_, Who, _} = E <- Evs,
                                         lists:member(Who, Own)]}),
         ?assertMatch([_], [x || {<<"spawned">>, Who, _} <- Evs, Who =:= WT]),
         ?assertMatch([_], [x || {<<"exit">>, Who, _} <- Evs, Who =:= WT])
     end || D <- [DN, DA]],
    assert_nothing_left([{?W, tick, 1}]).

%% What cannot be combined is refused with a reason, and nothing of the
%% refused session stays installed: an action with effects beyond the
%% call event (here `trace') on a function another session traces with
%% another match spec.
cannot_combine(Config) ->
    S1 = ?L:start(#{calls => [{{?W, tick, 1}, gt(5)}],
                    output => {file, ?L:dir(Config, "a")}}),
    Before = erlang:trace_info({?W, tick, 1}, match_spec),
    Trace = {trace, [], [send]},
    %% (Without force => true a flag-changing action is refused first.)
    ?assertEqual({error, {flag_action, Trace}},
                 beamprobe:start(#{calls => [{{?W, tick, 1},
                                              [{'_', [], [Trace]}]}],
                                   output => {file, ?L:dir(Config, "b")}})),
    {error, Why} = beamprobe:start(#{calls => [{{?W, tick, 1},
                                                [{'_', [], [Trace]}]}],
                                     force => true,
                                     output => {file, ?L:dir(Config, "b")}}),
    ?assertMatch({cannot_combine, {?W, tick, 1}, {action, Trace}}, Why),
    ?assertNotEqual(nomatch, string:find(beamprobe:format_error(Why),
                                         "cannot be combined")),
    ?assertEqual(Before, erlang:trace_info({?W, tick, 1}, match_spec)),
    ?assertEqual([S1], beamprobe:list()),
    ?assertEqual(1, beamprobe_nif:hub_members()),
    _ = ?L:stop(S1),
    assert_nothing_left([{?W, tick, 1}]).

%% Message patterns are one per node: sessions recording sends on
%% overlapping processes must share theirs.
message_pattern_conflict(Config) ->
    MS = [{['_', {ping, '_'}], [], []}],
    Before = erlang:trace_info(send, match_spec),
    S1 = ?L:start(#{events => [send], messages => [{send, MS}],
                    output => {file, ?L:dir(Config, "a")}}),
    {error, Why} = beamprobe:start(#{events => [send],
                                     output => {file, ?L:dir(Config, "b")}}),
    ?assertMatch({conflict, S1, {message_pattern, send}}, Why),
    ?assertNotEqual(nomatch, string:find(beamprobe:format_error(Why),
                                         "message pattern")),
    S2 = ?L:start(#{events => [send], messages => [{send, MS}],
                    output => {file, ?L:dir(Config, "c")}}),
    _ = ?L:stop(S1),
    ?assertNotEqual(true, erlang:trace_info(send, match_spec) =:=
                        {match_spec, []}),
    _ = ?L:stop(S2),
    ?assertEqual(Before, erlang:trace_info(send, match_spec)),
    assert_nothing_left([]).

%% A session killed while others run: the janitor removes what only it
%% needed, the others keep recording.
killed_session_cleaned(Config) ->
    P = start_prober(),
    Sink = sink(),
    DA = ?L:dir(Config, "a"),
    SA = ?L:start(#{calls => [{{?W, tick, 1}, gt(5)}], output => {file, DA}}),
    SB = ?L:start(#{calls => [{{?W, tick, 1}, le(5)}],
                    events => [send], output => {file, ?L:dir(Config, "b")}}),
    exit(SB, kill),
    ?L:wait_until(fun() -> beamprobe:list() =:= [SA] end, 5000),
    ?L:wait_until(fun() -> beamprobe_nif:hub_members() =:= 1 end, 5000),
    ?assertEqual([], [Q || Q <- processes(),
                           {flags, F} <- [erlang:trace_info(Q, flags)],
                           lists:member(send, F)]),
    ok = probe(P, 10, 1, Sink),
    _ = ?L:stop(SA),
    ?assertEqual(lists:seq(6, 10), lists:sort(tick_args(norm_events(DA)))),
    assert_nothing_left([{?W, tick, 1}]),
    P ! stop,
    Sink ! stop.

%% A session recording sends of every process, next to one recording port
%% events too: the ports' messages reach only the second; and neither
%% records beamprobe's own processes (the sessions, their handlers).
ports_and_own(Config) ->
    DA = ?L:dir(Config, "a"),
    DB = ?L:dir(Config, "b"),
    SA = ?L:start(#{events => [send], output => {file, DA}}),
    SB = ?L:start(#{events => [send, ports], output => {file, DB}}),
    SC = ?L:start(#{procs => [self()], events => [send],
                    output => {handler, beamprobe_test_handler,
                               #{parent => self()}}}),
    H = receive {handler_init, HP} -> HP after 5000 -> ct:fail(no_handler) end,
    Port = open_port({spawn, "echo overlap"}, [binary, exit_status]),
    receive {Port, {exit_status, 0}} -> ok after 5000 -> ct:fail(no_port) end,
    timer:sleep(50),
    Own = [SA, SB, SC, H | [P || {_, P, _, _} <-
                                  supervisor:which_children(beamprobe_session_sup)]],
    _ = ?L:stop(SC),
    _ = ?L:stop(SA),
    _ = ?L:stop(SB),
    PortText = list_to_binary(erlang:port_to_list(Port)),
    EA = norm_events(DA),
    EB = norm_events(DB),
    ?assertEqual([], [E || {_, <<"#Port", _/binary>>, _} = E <- EA]),
    ?assert(lists:any(fun({_, Who, _}) -> Who =:= PortText end, EB)),
    OwnTexts = [list_to_binary(pid_to_list(P)) || P <- Own],
    ?assertEqual([], [E || {_, Who, _} = E <- EA ++ EB,
                           lists:member(Who, OwnTexts)]),
    assert_nothing_left([]).

%% Meta sessions (meta patterns: every process, no process flags) next
%% to each other and to a hub session, on the same function with
%% different conditions (and returns): each gets what it gets alone; and
%% stopping the hub session leaves no flag behind while the meta sessions
%% still record.
meta_next_to_hub(Config) ->
    W = ?W:start_worker(),
    Cond = fun(G, A) -> [{['$1', '_'], G, A}] end,
    Specs = [#{calls => [{{?W, add, 2}, Cond([{'>', '$1', 5}], [])}],
               meta => true},
             #{calls => [{{?W, add, 2}, Cond([{'=<', '$1', 7}],
                                            [{return_trace}])}],
               meta => true, args => full},
             #{procs => [W], calls => [{{?W, add, 2}, Cond([], [])}],
               args => full}],
    Work = fun() ->
                   ?W:run(W, fun() ->
                                     [_ = ?W:add(I, 1) || I <- lists:seq(1, 10)],
                                     ok
                             end)
           end,
    {Together, Alone} = together_alone(Config, Specs, Work),
    [?assertEqual({I, proplists:get_value(I, Alone)}, {I, Evs})
     || {I, Evs} <- Together],
    {1, E1} = lists:keyfind(1, 1, Together),
    ?assertEqual(5, length([x || {<<"call">>, _, _} <- E1])),
    {2, E2} = lists:keyfind(2, 1, Together),
    ?assertEqual(7, length([x || {<<"return_from">>, _, _} <- E2])),
    %% The hub session stops first: no flag left, the meta one records.
    DM = ?L:dir(Config, "meta"),
    SM = ?L:start((hd(Specs))#{output => {file, DM}}),
    SH = ?L:start((lists:last(Specs))#{output => {file, ?L:dir(Config, "h")}}),
    ?assertNotEqual([], hub_flags_left()),
    _ = ?L:stop(SH),
    ?assertEqual([], hub_flags_left()),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    ?assertMatch({meta, {beamprobe_nif, beamprobe_hub_meta}},
                 erlang:trace_info({?W, add, 2}, meta)),
    9 = ?W:add(8, 1),
    _ = ?L:stop(SM),
    ?assertEqual(1, length([x || {<<"call">>, _, _} <- norm_events(DM)])),
    ?assertEqual({meta, false}, erlang:trace_info({?W, add, 2}, meta)),
    assert_nothing_left([{?W, add, 2}]),
    ?W:stop_worker(W).

%% The NIF module deleted, purged and loaded again while overlapping
%% sessions run (a meta one, two hub ones with different conditions on a
%% shared function): after the reload each records again exactly its own
%% calls (the janitor set the flags and the meta patterns again).
reload_with_overlaps(Config) ->
    W = ?W:start_worker(),
    D = [?L:dir(Config, N) || N <- ["m", "a", "b"]],
    [DM, DA, DB] = D,
    SM = ?L:start(#{calls => [{?W, tick, 1}], meta => true,
                    output => {file, DM}}),
    SA = ?L:start(#{procs => [W], calls => [{{?W, add, 2},
                                              [{['$1', '_'], [{'>', '$1', 5}], []}]}],
                    output => {file, DA}}),
    SB = ?L:start(#{procs => [W], calls => [{?W, add, 2}],
                    output => {file, DB}}),
    true = code:delete(beamprobe_nif),
    _ = code:purge(beamprobe_nif),
    {module, beamprobe_nif} = code:load_file(beamprobe_nif),
    _ = sys:get_state(beamprobe_janitor),
    [_ = sys:get_state(S) || S <- [SM, SA, SB]],
    ok = ?W:run(W, fun() ->
                           [_ = ?W:add(I, 1) || I <- lists:seq(1, 10)],
                           [I = ?W:tick(I) || I <- [1, 2, 3]],
                           ok
                   end),
    Sums = [?L:stop(S) || S <- [SM, SA, SB]],
    [?assertMatch(#{nif_reloads := 1}, Sum) || Sum <- Sums],
    [EM, EA, EB] = [norm_events(X) || X <- D],
    ?assertEqual(3, length([x || {<<"call">>, _, _} <- EM])),
    ?assertEqual(5, length([x || {<<"call">>, _, _} <- EA])),
    ?assertEqual(10, length([x || {<<"call">>, _, _} <- EB])),
    assert_nothing_left([{?W, add, 2}, {?W, tick, 1}]),
    ?W:stop_worker(W).

%% The janitor and a session killed together: the restarted janitor takes
%% the surviving session over and, within its reaping delay, removes the
%% dead one's hub member (and what only it needed, here every flag once
%% the survivor stops).
janitor_and_session_killed(Config) ->
    P = start_prober(),
    Sink = sink(),
    DA = ?L:dir(Config, "a"),
    SA = ?L:start(#{calls => [{?W, tick, 1}], output => {file, DA}}),
    SB = ?L:start(#{events => [send], output => {file, ?L:dir(Config, "b")}}),
    J = whereis(beamprobe_janitor),
    exit(J, kill),
    exit(SB, kill),
    ?L:wait_until(fun() -> is_pid(whereis(beamprobe_janitor)) andalso
                               whereis(beamprobe_janitor) =/= J end, 5000),
    ?L:wait_until(fun() -> beamprobe_nif:hub_members() =:= 1 end, 5000),
    ok = probe(P, 10, 1, Sink),
    _ = ?L:stop(SA),
    ?assertEqual(lists:seq(1, 10), lists:sort(tick_args(norm_events(DA)))),
    assert_nothing_left([{?W, tick, 1}]),
    P ! stop,
    Sink ! stop.

%%% ------------------------------------------------------------------------
%%% 2. Next to dbg
%%% ------------------------------------------------------------------------

%% dbg traces the calls of one process; a beamprobe session on every
%% process skips it (the VM leaves a process another tracer holds alone)
%% and traces the others; both get all their events, and stopping the
%% session leaves dbg's tracing as it was.
next_to_dbg(Config) ->
    D = start_prober(),
    P = start_prober(),
    Sink = sink(),
    Self = self(),
    {ok, _} = dbg:tracer(process, {fun(M, N) -> Self ! {dbg, M}, N + 1 end,
                                   0}),
    {ok, _} = dbg:p(D, [c]),
    {ok, _} = dbg:tpl(?W, tick, 1, []),
    DbgTracer = erlang:trace_info(D, tracer),
    Dir = ?L:dir(Config, "bp"),
    S = ?L:start(#{calls => [{?W, add, 2}], events => [send], output => {file, Dir}}),
    ?assertEqual(DbgTracer, erlang:trace_info(D, tracer)),
    ok = probe(D, 100, 5, Sink),
    ok = probe(P, 100, 5, Sink),
    [D ! {x, I} || I <- lists:seq(1, 3)],
    ok = ?W:loop_add(50),
    Sum = ?L:stop(S),
    ?assertEqual(0, ?L:total(Sum)),
    ?assertEqual(DbgTracer, erlang:trace_info(D, tracer)),
    ?assertEqual({flags, [call]}, erlang:trace_info(D, flags)),
    DbgCalls = flush_dbg(0),
    ?assertEqual(100, DbgCalls),
    Evs = norm_events(Dir),
    DT = list_to_binary(pid_to_list(D)),
    PT = list_to_binary(pid_to_list(P)),
    ?assertEqual([], [E || {_, Pid, _} = E <- Evs, Pid =:= DT]),
    ?assertEqual(6, length([x || {<<"send">>, Pid, _} <- Evs, Pid =:= PT])),
    ?assertEqual(50, length([x || {<<"call">>, _, _} <- Evs])),
    dbg:stop(),
    assert_nothing_left([{?W, add, 2}]),
    [Q ! stop || Q <- [D, P, Sink]],
    ok.

flush_dbg(N) ->
    receive {dbg, {trace, _, call, {?W, tick, _}}} -> flush_dbg(N + 1);
            {dbg, _} -> flush_dbg(N)
    after 500 -> N
    end.

%%% ------------------------------------------------------------------------
%%% 3. Ten random sessions under load
%%% ------------------------------------------------------------------------

%% Ten sessions with random overlapping specs (processes, conditions on
%% a shared function, event kinds) started and stopped in a random order
%% while load processes call and send; between any two steps a probe runs.
%% Each session must have seen, per argument class, exactly the probe
%% calls of the probes run during its life, the probe's sends if it asked
%% for them, and nothing it did not ask for; at the end nothing is left.
random_sessions_under_load(Config) ->
    Seed = erlang:monotonic_time(),
    ct:log("seed ~p", [Seed]),
    rand:seed(exsss, Seed),
    P = start_prober(),
    Sink = sink(),
    Load = [spawn(fun() -> load(Sink) end) || _ <- [1, 2]],
    Classes = [{true, fun(_) -> true end},
               {gt(150), fun(X) -> X > 150 end},
               {le(50), fun(X) -> X =< 50 end},
               {[{['$1'], [{'==', {'rem', '$1', 2}, 0}], []}],
                fun(X) -> X rem 2 == 0 end},
               {[{[3], [], []}, {['$1'], [{'>', '$1', 190}], []}],
                fun(X) -> X == 3 orelse X > 190 end}],
    Specs = [begin
                 {MS, Pred} = lists:nth(rand:uniform(length(Classes)), Classes),
                 ProcsOpt = lists:nth(rand:uniform(5),
                                      [all, [P], [hd(Load)], existing, new]),
                 Ev = lists:nth(rand:uniform(3), [[], [send], [send, procs]]),
                 Calls = case rand:uniform(4) of
                             1 when Ev =/= [] -> [];
                             2 -> [{{?W, tick, 1}, MS}, {?W, add, 2}];
                             _ -> [{{?W, tick, 1}, MS}]
                         end,
                 #{i => I, procs => ProcsOpt, events => Ev, calls => Calls,
                   pred => Pred}
             end || I <- lists:seq(1, 10)],
    Order = shuffle_order(10),
    ct:log("specs ~p~norder ~p", [[maps:remove(pred, S) || S <- Specs], Order]),
    {Live, Probes} = lists:foldl(
               fun(Step, {Live0, Pr}) ->
                       Live1 = step(Step, Live0, Specs, Config),
                       ok = probe(P, 200, 3, Sink),
                       {Live1, inc(Live1, Pr)}
               end, {#{}, #{}}, Order),
    [exit(L, kill) || L <- Load],
    PT = list_to_binary(pid_to_list(P)),
    LT = list_to_binary(pid_to_list(hd(Load))),
    lists:foreach(
      fun(#{i := I, procs := Procs, events := Ev, calls := Calls,
            pred := Pred}) ->
              {done, Dir, Sum, Before} = maps:get(I, Live),
              ?assertEqual({I, 0}, {I, ?L:total(Sum)}),
              N = maps:get(I, Probes, 0),
              Evs = norm_events(Dir),
              Incl = fun(Pid) -> Procs =:= all orelse Procs =:= existing
                                     orelse (Procs =:= new andalso
                                             not lists:member(Pid, Before))
                                     orelse (Procs =:= [P] andalso Pid =:= PT)
                                     orelse (Procs =:= [hd(Load)] andalso
                                             Pid =:= LT)
                     end,
              %% Nothing foreign.
              Kinds = [<<"call">> || Calls =/= []] ++
                  [<<"send">> || lists:member(send, Ev)] ++
                  [<<"send_to_non_existing_process">> || lists:member(send, Ev)] ++
                  [K || lists:member(procs, Ev),
                        K <- [<<"spawn">>, <<"spawned">>, <<"exit">>,
                              <<"link">>, <<"unlink">>, <<"getting_linked">>,
                              <<"getting_unlinked">>, <<"register">>,
                              <<"unregister">>]],
              [?assert({I, E, lists:member(Name, Kinds)} =:= {I, E, true})
               || {Name, _, _} = E <- Evs],
              [?assertEqual({I, E, true}, {I, E, Incl(Pid)})
               || {_, Pid, _} = E <- Evs],
              Fns = [mfa_text(C) || C <- Calls],
              [?assertEqual({I, E, true},
                            {I, E, lists:member(maps:get(<<"mfa">>, F), Fns)})
               || {<<"call">>, _, F} = E <- Evs],
              %% The probe's calls, per class, and its sends.
              Ticks = lists:sort(
                        [binary_to_integer(binary:part(A, 1, byte_size(A) - 2))
                         || {<<"call">>, Pid, #{<<"mfa">> := <<"beamprobe_workload:tick/1">>,
                                                <<"args">> := A}} <- Evs,
                            Pid =:= PT]),
              WantTicks = case Calls =/= [] andalso Incl(PT) of
                              true -> lists:sort(lists:append(
                                                   lists:duplicate(
                                                     N, [X || X <- lists:seq(1, 200),
                                                              Pred(X)])));
                              false -> []
                          end,
              ?assertEqual({I, length(WantTicks)}, {I, length(Ticks)}),
              ?assertEqual({I, WantTicks}, {I, Ticks}),
              PSends = [x || {<<"send">>, Pid, _} <- Evs, Pid =:= PT],
              WantSends = case lists:member(send, Ev) andalso Incl(PT) of
                              true -> 4 * N;
                              false -> 0
                          end,
              ?assertEqual({I, sends, WantSends}, {I, sends, length(PSends)})
      end, Specs),
    assert_nothing_left([{?W, tick, 1}, {?W, add, 2}]),
    P ! stop,
    Sink ! stop,
    ok.

mfa_text({{M, F, A}, _}) -> iolist_to_binary(io_lib:format("~p:~p/~p", [M, F, A]));
mfa_text({M, F, A}) -> iolist_to_binary(io_lib:format("~p:~p/~p", [M, F, A])).

step({start, I}, Live, Specs, Config) ->
    Sp = lists:nth(I, Specs),
    Dir = ?L:dir(Config, "s" ++ integer_to_list(I)),
    %% The processes alive before it starts (`new' excludes them).
    Before = [list_to_binary(pid_to_list(Q)) || Q <- processes()],
    S = ?L:start((maps:with([procs, events, calls], Sp))
                 #{output => {file, Dir}, args => full, buffer => 4 * 1024 * 1024}),
    Live#{I => {S, Dir, Before}};
step({stop, I}, Live, _Specs, _Config) ->
    {S, Dir, Before} = maps:get(I, Live),
    Sum = ?L:stop(S),
    Live#{I => {done, Dir, Sum, Before}}.

%% Probes run while each live session lives.
inc(Live, Probes) ->
    maps:fold(fun(_, {done, _, _, _}, Acc) -> Acc;
                 (I, {_, _, _}, Acc) ->
                      maps:update_with(I, fun(V) -> V + 1 end, 1, Acc)
              end, Probes, Live).

%% A random interleaving of start i and stop i (each stop after its start).
shuffle_order(N) ->
    shuffle_order(lists:seq(1, N), [], []).

shuffle_order([], [], Acc) -> lists:reverse(Acc);
shuffle_order(ToStart, Started, Acc) ->
    Choices = [{start, hd(ToStart)} || ToStart =/= []] ++
        [{stop, I} || I <- Started],
    case lists:nth(rand:uniform(length(Choices)), Choices) of
        {start, I} -> shuffle_order(tl(ToStart), [I | Started],
                                    [{start, I} | Acc]);
        {stop, I} -> shuffle_order(ToStart, Started -- [I], [{stop, I} | Acc])
    end.

load(Sink) ->
    _ = [?W:add(I, 1) || I <- lists:seq(1, 50)],
    Sink ! load,
    timer:sleep(1),
    load(Sink).
