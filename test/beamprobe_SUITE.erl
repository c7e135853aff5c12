%%% @doc End-to-end tests of beamprobe: exact loss accounting, clean-up
%%% after stop and after the owner dies, limits, bounded capture, flight
%%% recorder dumps and file modes.  The event kinds are tested in
%%% beamprobe_events_SUITE, input validation in beamprobe_errors_SUITE.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_SUITE -logdir _build/ct_logs
%%%
%%% Each case traces only processes it spawned (procs => [Pid, ...]) or new
%%% ones (procs => new), writes into its own directory under priv_dir and
%%% leaves no session behind (end_per_testcase stops any).  The helpers
%%% shared with the other suites are in beamprobe_test_lib.
-module(beamprobe_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("kernel/include/file.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([stats_untimed/1, stats_mixed/1, stats_overlap/1,
         stats_untimed_cut/1, stats_untimed_names/1,
         stats_exceptions_only/1, stats_partial_returns/1]).
-export([loss_drop_newest/1, loss_drop_oldest/1, loss_overflow_stop/1,
         count_calls/1,
         owner_death/1, session_killed/1, stop_restores_all/1, stop_restores_pids/1,
         info_and_list/1, stop_twice/1,
         limit_events/1, limit_seconds/1, limit_bytes/1,
         limit_bytes_counted/1, limit_bytes_page_cache/1,
         limit_bytes_cli/1, capture_bounded/1,
         dump_flight_recorder/1, dump_not_flight_recorder/1,
         file_modes/1]).

%% Run in a peer node by limit_bytes_page_cache.
-export([page_cache_session/2]).

-define(W, beamprobe_workload).
-define(L, beamprobe_test_lib).

-import(beamprobe_test_lib,
        [dir/2, start/1, stop/1, trace/1, one/3, assert_field/3,
         dead_pid/0, wait_dead/1, total/1, dropped/2, remote_pid/0,
         call_args_int/1]).

%%% ------------------------------------------------------------------------
%%% Setup
%%% ------------------------------------------------------------------------

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, loss}, {group, lifecycle}, {group, limits}, {group, output}].

groups() ->
    [{loss, [], [loss_drop_newest, loss_drop_oldest, loss_overflow_stop,
                 count_calls]},
     {lifecycle, [], [owner_death, session_killed, stop_restores_all,
                      stop_restores_pids,
                      info_and_list, stop_twice]},
     {limits, [], [limit_events, limit_seconds, limit_bytes,
                   limit_bytes_counted, limit_bytes_page_cache,
                   limit_bytes_cli, capture_bounded]},
     {output, [], [dump_flight_recorder, dump_not_flight_recorder,
                   file_modes, stats_untimed, stats_mixed,
                   stats_overlap, stats_untimed_cut,
                   stats_untimed_names, stats_exceptions_only,
                   stats_partial_returns]}].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, ?W} = code:ensure_loaded(?W),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    %% Every case starts from a node with no session and no trace state,
    %% and writes under its own directory.
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    %% Stops any session; do not let a failed case (or a bug) leave trace
    %% state for the next.
    ?L:clear_trace_state().

%%% ------------------------------------------------------------------------
%%% 2, 3. Loss accounting and counting
%%% ------------------------------------------------------------------------

-define(N, 200000).

%% Two busy processes, a 16 KiB buffer: every call is written or counted.
loss_drop_newest(Config) ->
    Dir = dir(Config, "drop_newest"),
    Ps = [?W:start_looper(self(), fun() -> ?W:loop_tick(1, ?N) end)
          || _ <- [1, 2]],
    S = start(#{procs => Ps, calls => [{?W, tick, 1}], return => false,
                exceptions => false, args => arity, buffer => 16384,
                output => {file, Dir}}),
    ok = ?W:go(Ps),
    [ok, ok] = ?W:wait_done(Ps, 30000),
    Sum = stop(S),
    #{events := Ev} = Sum,
    ?assert(dropped(Sum, ring_full) > 0),
    ?assert(Ev > 0),
    ?assertEqual(2 * ?N, Ev + total(Sum)),
    ?assertEqual(total(Sum), dropped(Sum, ring_full)),
    %% babeltrace2 sees exactly the events counted.
    Evs = trace(Dir),
    ?assertEqual(Ev, ?L:count(Evs, "call")),
    [?assertEqual(<<"undefined">>, ?L:field(E, "args"))
     || E <- lists:sublist(?L:events(Evs, "call"), 100)].

%% Flight recorder: the newest events are kept, the older ones counted as
%% overwritten.
loss_drop_oldest(Config) ->
    Dir = dir(Config, "drop_oldest"),
    Ps = [?W:start_looper(self(), fun() -> ?W:loop_tick(1, ?N) end)
          || _ <- [1, 2]],
    S = start(#{procs => Ps, calls => [{?W, tick, 1}], return => false,
                exceptions => false, args => full, buffer => 16384,
                overflow => drop_oldest, output => {file, Dir}}),
    ok = ?W:go(Ps),
    [ok, ok] = ?W:wait_done(Ps, 30000),
    Sum = stop(S),
    #{events := Ev} = Sum,
    Evs = trace(Dir),
    Calls = ?L:events(Evs, "call"),
    ?assertEqual(Ev, length(Calls)),
    ?assert(Ev > 0),
    ?assert(dropped(Sum, overwritten) > 0),
    %% The last call babeltrace2 prints is the last one made, and what was
    %% kept is from the end of the run.
    ?assertEqual(?N, call_args_int(lists:last(Calls))),
    Ints = [call_args_int(E) || E <- Calls],
    ?assert(lists:min(Ints) > ?N div 2),
    ?assertEqual(0, dropped(Sum, ring_full)),
    %% Exact: every call is either written or overwritten (process events
    %% evicted from the ring are not calls and must not be counted).
    ?assertEqual({events_plus_overwritten, 2 * ?N},
                 {events_plus_overwritten, Ev + dropped(Sum, overwritten)}),
    ?assertEqual(2 * ?N, Ev + total(Sum)).

%% overflow => stop: the session ends by itself at the first loss; every
%% call made while it was tracing is written or counted (stopped).
loss_overflow_stop(Config) ->
    Dir = dir(Config, "overflow_stop"),
    Ps = [?W:start_looper(self(), fun() -> ?W:loop_tick(1, ?N) end)
          || _ <- [1, 2]],
    S = start(#{procs => Ps, calls => [{?W, tick, 1}], return => false,
                exceptions => false, args => arity, buffer => 16384,
                overflow => stop, output => {file, Dir}}),
    %% Hold the session process so that it removes tracing only after the
    %% loopers are done: then exactly 2 * N calls were traced.
    ok = sys:suspend(S),
    ok = ?W:go(Ps),
    Done = ?W:wait_done(Ps, 30000),
    ok = sys:resume(S),
    ?assertEqual([ok, ok], Done),
    _ = ?L:wait_ended(S, 5000),
    Sum = stop(S),
    ?assertMatch(#{stop_reason := overflow}, Sum),
    #{events := Ev} = Sum,
    ?assert(dropped(Sum, ring_full) >= 1),
    ?assert(dropped(Sum, stopped) > 0),
    ?assertEqual(2 * ?N, Ev + total(Sum)),
    ?assertEqual(Ev, ?L:count(trace(Dir), "call")),
    %% Without holding it: a busy process sees its tracing removed soon.
    Dir2 = dir(Config, "overflow_stop2"),
    [P] = [?W:start_looper(self(), fun() -> ?W:loop_add_until(50000000) end)],
    S2 = start(#{procs => [P], calls => [{?W, add, 2}], return => false,
                 buffer => 16384, overflow => stop, output => {file, Dir2}}),
    ok = ?W:go([P]),
    [Made] = ?W:wait_done([P], 20000),
    _ = ?L:wait_ended(S2, 5000),
    Sum2 = stop(S2),
    ?assertMatch(#{stop_reason := overflow}, Sum2),
    Seen = maps:get(events, Sum2) + total(Sum2),
    ct:log("calls made ~p, written + dropped ~p", [Made, Seen]),
    ?assert(Seen =< Made),
    ?assert(Seen > Made - 1000),
    ?assertEqual(maps:get(events, Sum2), ?L:count(trace(Dir2), "call")).

%% The number of call lines babeltrace2 prints is Summary events (process
%% and drops events are not counted), with and without losses.
count_calls(Config) ->
    N = 30000,
    Dir = dir(Config, "count"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, add, 2}], return => false,
                output => {file, Dir}}),
    ok = ?W:run(W, fun() -> ?W:loop_add(N) end),
    Sum = stop(S),
    ?assertMatch(#{events := N}, Sum),
    ?assertEqual(0, total(Sum)),
    Evs = trace(Dir),
    ?assertEqual(N, ?L:count(Evs, "call")),
    Aux = ?L:count(Evs, "process") + ?L:count(Evs, "drops"),
    ?assert(Aux > 0),
    ?assertEqual(length(Evs), N + Aux),
    %% With losses.
    Dir2 = dir(Config, "count_loss"),
    S2 = start(#{procs => [W], calls => [{?W, add, 2}], return => false,
                 buffer => 16384, output => {file, Dir2}}),
    ok = ?W:run(W, fun() -> ?W:loop_add(N) end),
    Sum2 = stop(S2),
    #{events := Ev2} = Sum2,
    ?assertEqual(N, Ev2 + total(Sum2)),
    ?assertEqual(Ev2, ?L:count(trace(Dir2), "call")),
    ?W:stop_worker(W).

%%% ------------------------------------------------------------------------
%%% 4, 5, 11. Lifecycle
%%% ------------------------------------------------------------------------

%% The owner dies: the session stops, removes everything, and the trace
%% is readable.
owner_death(Config) ->
    Dir = dir(Config, "owner"),
    W = ?W:start_worker(),
    Me = self(),
    MFAs = [{?W, add, 2}],
    Owner = spawn(fun() ->
                          R = beamprobe:start(#{procs => [W], calls => MFAs,
                                                events => [send, 'receive'],
                                                output => {file, Dir}}),
                          Me ! {started, self(), R},
                          receive never -> ok end
                  end),
    S = receive {started, Owner, {ok, Sess}} -> Sess;
                {started, Owner, Other} -> ct:fail({start_failed, Other})
        after 5000 -> ct:fail(owner_did_not_start)
        end,
    ?assert(lists:member(S, beamprobe:list())),
    ok = ?W:run(W, fun() -> ?W:loop_add(100) end),
    ?assertMatch({flags, [_ | _]}, erlang:trace_info(W, flags)),
    exit(Owner, kill),
    Ms = ?L:wait_until(fun() -> not lists:member(S, beamprobe:list()) end,
                       1000),
    ct:log("session gone ~p ms after the owner died", [Ms]),
    ?assertNot(is_process_alive(S)),
    ?L:assert_no_trace_state([W], MFAs),
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    Evs = trace(Dir),
    ?assertEqual(100, ?L:count(Evs, "call")),
    ?W:stop_worker(W).

%% The session process itself killed: the janitor removes its flags, its
%% call patterns and its message patterns, and the trace is finalised.
session_killed(Config) ->
    Dir = dir(Config, "killed"),
    W = ?W:start_worker(),
    MFAs = [{?W, add, 2}],
    Before = erlang:trace_info(send, match_spec),
    S = start(#{procs => [W], calls => MFAs, events => [send],
                messages => [{send, [{['_', {ping, '_'}], [], []}]}],
                output => {file, Dir}}),
    ?assertNotEqual(Before, erlang:trace_info(send, match_spec)),
    ok = ?W:run(W, fun() -> ?W:loop_add(10) end),
    exit(S, kill),
    _ = ?L:wait_until(fun() -> erlang:trace_info(send, match_spec) =:= Before
                      end, 1000),
    ?assertEqual(Before, erlang:trace_info(send, match_spec)),
    ?L:assert_no_trace_state([W], MFAs),
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    ?assertEqual(10, ?L:count(trace(Dir), "call")),
    ?W:stop_worker(W).

%% procs => all (and existing): after stop no process or port has our
%% tracer, no flags for new ones, no pattern.
stop_restores_all(Config) ->
    [restore_all(Config, Procs) || Procs <- [all, existing]],
    ok.

restore_all(Config, Procs) ->
    Dir = dir(Config, atom_to_list(Procs)),
    Others = ?L:traced_by_others(),
    MFAs = [{?W, '_', '_'}],
    Old = ?W:start_worker(),                     % an existing process
    S = start(#{procs => Procs, calls => MFAs, return_to => true,
                events => [send, 'receive', procs, running, gc, ports],
                output => {file, Dir}}),
    W = ?W:start_worker(),                       % a new process
    ?assertMatch({tracer, {beamprobe_nif, _}}, erlang:trace_info(Old, tracer)),
    ?assertMatch({tracer, {beamprobe_nif, _}}, erlang:trace_info(self(), tracer)),
    case Procs of
        all ->
            ?assertMatch({tracer, {beamprobe_nif, _}},
                         erlang:trace_info(W, tracer)),
            ?assertMatch({flags, [_ | _]}, erlang:trace_info(new, flags));
        existing ->
            ?assertEqual({tracer, []}, erlang:trace_info(W, tracer)),
            ?assertEqual({flags, []}, erlang:trace_info(new, flags))
    end,
    %% The session process itself is never traced.
    ?assertEqual({flags, []}, erlang:trace_info(S, flags)),
    ok = ?W:run(W, fun() -> ?W:loop_add(10) end),
    ok = ?W:run(Old, fun() -> ?W:loop_add(10) end),
    Sum = stop(S),
    ?assert(maps:get(events, Sum) > 0),
    Left = [{P, erlang:trace_info(P, tracer), erlang:trace_info(P, flags)}
            || P <- (processes() ++ erlang:ports()) -- Others,
               not lists:member(erlang:trace_info(P, tracer),
                                [{tracer, []}, undefined])],
    ?assertEqual([], Left),
    ?L:assert_no_trace_state([self(), W, Old], MFAs),
    Evs = trace(Dir),
    AddCalls = fun(P) ->
                       length([E || E <- ?L:events(Evs, "call", P),
                                    ?L:field(E, "mfa") =:=
                                        <<"beamprobe_workload:add/2">>])
               end,
    ?assertEqual(10, AddCalls(Old)),
    case Procs of
        all -> ?assertEqual(10, AddCalls(W));
        existing ->
            WText = list_to_binary(pid_to_list(W)),
            WKeys = [K || #{name := <<"process">>, key := K} = E <- Evs,
                          ?L:field(E, "pid") =:= WText],
            ?assertEqual([], [E || #{key := K, name := N} = E <- Evs,
                                   lists:member(K, WKeys),
                                   N =/= <<"process">>])
    end,
    ?W:stop_worker(W),
    ?W:stop_worker(Old).

%% An explicit pid list: only those are traced, and not after stop.
stop_restores_pids(Config) ->
    Dir = dir(Config, "restore_pids"),
    Ws = [W1, W2] = [?W:start_worker() || _ <- [1, 2]],
    Bystander = ?W:start_worker(),
    MFAs = [{?W, add, 2}, {?W, tick, 1}, {lists, reverse, 1}],
    S = start(#{procs => Ws, calls => MFAs,
                events => [send, 'receive', procs, running, gc],
                output => {file, Dir}}),
    [?assertMatch({tracer, {beamprobe_nif, _}}, erlang:trace_info(W, tracer))
     || W <- Ws],
    ?assertEqual({tracer, []}, erlang:trace_info(Bystander, tracer)),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    [?assertMatch({all, [_ | _]}, erlang:trace_info(MFA, all)) || MFA <- MFAs],
    [ok = ?W:run(W, fun() -> ?W:loop_add(10) end) || W <- Ws],
    _ = stop(S),
    ?L:assert_no_trace_state([W1, W2, Bystander, self()], MFAs),
    [?assertEqual({tracer, []}, erlang:trace_info(P, tracer))
     || P <- processes(), is_process_alive(P),
        erlang:trace_info(P, tracer) =/= undefined],
    Evs = trace(Dir),
    ?assertEqual(20, length([E || E <- ?L:events(Evs, "call"),
                                  ?L:field(E, "mfa") =:=
                                      <<"beamprobe_workload:add/2">>])),
    [?W:stop_worker(W) || W <- [W1, W2, Bystander]].

%% list/0 has the session while it runs and not after stop; info/1 gives
%% counters and configuration.
info_and_list(Config) ->
    [begin
         Dir = dir(Config, "list" ++ integer_to_list(I)),
         W = ?W:start_worker(),
         S = start(#{procs => [W], calls => [{?W, add, 2}], return => true,
                     output => {file, Dir}}),
         ?assert(is_pid(S)),
         ?assertEqual([S], beamprobe:list()),
         ok = ?W:run(W, fun() -> ?W:loop_add(5) end),
         {ok, Info} = beamprobe:info(S),
         ?assertMatch(#{events := _, dropped := #{total := 0},
                        output := _, config := #{procs := [W]}}, Info),
         ?assertEqual(filename:absname(Dir), maps:get(output, Info)),
         _ = ?L:wait_until(fun() ->
                                   {ok, #{events := E}} = beamprobe:info(S),
                                   E =:= 10
                           end, 2000),
         Sum = stop(S),
         ?assertMatch(#{events := 10}, Sum),
         %% Right after stop returns, the session is no longer listed.
         ?assertEqual({I, []}, {I, beamprobe:list()}),
         ?W:stop_worker(W)
     end || I <- lists:seq(1, 20)],
    ok.

%% stop twice: the second returns {error, not_found}; so do info and dump.
stop_twice(Config) ->
    Dir = dir(Config, "stop_twice"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, add, 2}],
                overflow => drop_oldest, output => {file, Dir}}),
    {ok, _} = beamprobe:stop(S),
    ?assertEqual({error, not_found}, beamprobe:stop(S)),
    ?assertEqual({error, not_found}, beamprobe:info(S)),
    ?assertEqual({error, not_found}, beamprobe:dump(S)),
    ?assertEqual({error, not_found}, beamprobe:stop(not_a_session)),
    ?W:stop_worker(W).

%%% ------------------------------------------------------------------------
%%% 8, 9. Limits and bounded capture
%%% ------------------------------------------------------------------------

%% limits.events: exactly that many events, the rest counted; the session
%% ends by itself.
limit_events(Config) ->
    Dir = dir(Config, "limit_events"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, add, 2}], return => false,
                limits => #{events => 100}, output => {file, Dir}}),
    ok = sys:suspend(S),                % every call is made while traced
    ok = ?W:run(W, fun() -> ?W:loop_add(1000) end),
    ok = sys:resume(S),
    _ = ?L:wait_ended(S, 5000),
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    Sum = stop(S),
    ?assertMatch(#{events := 100, stop_reason := events}, Sum),
    ?assert(dropped(Sum, limit) >= 1),
    ?assertEqual(900, dropped(Sum, limit) + dropped(Sum, stopped)),
    ?assertEqual(900, total(Sum)),
    ?assertEqual(100, ?L:count(trace(Dir), "call")),
    ?W:stop_worker(W).

%% limits.seconds: the session ends by itself about then.
limit_seconds(Config) ->
    Dir = dir(Config, "limit_seconds"),
    W = ?W:start_worker(),
    T0 = erlang:monotonic_time(millisecond),
    S = start(#{procs => [W], calls => [{?W, add, 2}], return => true,
                limits => #{seconds => 0.5}, output => {file, Dir}}),
    ok = ?W:run(W, fun() -> ?W:loop_add(10) end),
    _ = ?L:wait_ended(S, 3000),
    Ms = ?L:elapsed_ms(T0),
    ct:log("ended after ~p ms", [Ms]),
    ?assert(Ms >= 450),
    ?assert(Ms < 1000),
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    ?L:pattern_removed([{?W, add, 2}]),
    Sum = stop(S),
    ?assertMatch(#{stop_reason := seconds, events := 20}, Sum),
    _ = trace(Dir),
    ?W:stop_worker(W).

%% limits.bytes: the session ends by itself once that much is written,
%% and the trace files never pass it: an event that would take them past
%% it is not written, and counted as the limit's (the old collector
%% checked after each pass of the rings: 1.69 MB for a 1 MiB limit).  Two
%% busy processes (two thread files), 1.5 MB (direct blocks of 512 KiB,
%% padded), 100 kB and 20 kB (page-cache writes).
limit_bytes(Config) ->
    [limit_bytes(Config, Limit) || Limit <- [1500000, 100000, 20000]],
    ok.

limit_bytes(Config, Limit) ->
    Dir = dir(Config, "limit_bytes_" ++ integer_to_list(Limit)),
    Ps = [?W:start_looper(self(), fun() -> ?W:loop_add_until(20000000) end)
          || _ <- [1, 2]],
    S = start(#{procs => Ps, calls => [{?W, add, 2}], args => full,
                limits => #{bytes => Limit}, output => {file, Dir}}),
    T0 = erlang:monotonic_time(millisecond),
    ok = ?W:go(Ps),
    Made = ?W:wait_done(Ps, 20000),
    _ = ?L:wait_ended(S, 5000),
    ct:log("~p calls, ended after ~p ms", [Made, ?L:elapsed_ms(T0)]),
    ?assert(lists:sum(Made) < 40000000),
    Sum = stop(S),
    Files = filelib:wildcard(filename:join(Dir, "thread-*")),
    OnDisk = lists:sum([filelib:file_size(F) || F <- Files]),
    #{bytes := Bytes, events := Events, dropped := #{limit := Lost}} = Sum,
    ct:log("limit ~p: ~p bytes in ~p files, ~p events, ~p lost",
           [Limit, OnDisk, length(Files), Events, Lost]),
    ?assertMatch(#{stop_reason := bytes}, Sum),
    ?assertEqual(OnDisk, Bytes),
    ?assert(Bytes =< Limit),
    %% Not stopped early: the room kept is a few hundred bytes per file,
    %% and a block's padding (4 KiB) while a block may be written.
    ?assert(Bytes >= Limit - 2 * 8192 - Limit div 20),
    ?assert(Lost > 0),
    ?L:pattern_removed([{?W, add, 2}]),
    Evs = trace(Dir),
    ?assertEqual(Events, length([E || #{name := <<"call">>} = E <- Evs])).

%% limits.bytes, every event counted: four processes make all their calls
%% while traced (the session process is suspended, so nothing removes
%% their flags), and every call is in the files or a `limit' loss.  The
%% collector counts the events it refuses, the producers those made after
%% the stop: two writers of one single-writer counter lost 5 to 25 of
%% 40,000 counts per session (0498e02).  Limits of 1 byte (no file at
%% all), 1,000 (a few events) and 100,000.
limit_bytes_counted(Config) ->
    [limit_bytes_counted(Config, Limit) || Limit <- [1, 1000, 100000]],
    ok.

limit_bytes_counted(Config, Limit) ->
    Dir = dir(Config, "limit_bytes_counted_" ++ integer_to_list(Limit)),
    {N, Sum} = four_loopers_limited(Dir, Limit),
    Files = filelib:wildcard(filename:join(Dir, "thread-*")),
    OnDisk = lists:sum([filelib:file_size(F) || F <- Files]),
    #{bytes := Bytes, events := Events} = Sum,
    ?assertMatch(#{stop_reason := bytes}, Sum),
    ?assertEqual({calls, 4 * N, Limit},
                 {calls, Events + total(Sum), Limit}),
    ?assertEqual({limit, total(Sum)}, {limit, dropped(Sum, limit)}),
    ?assertEqual(OnDisk, Bytes),
    ?assert(Bytes =< Limit),
    Read = case Files of
               [] -> 0;                          % babeltrace2 wants one
               _ -> ?L:count(trace(Dir), "call")
           end,
    ?assertEqual(Events, Read).

%% Four processes make 20,000 traced calls each while the session
%% process is held (every call is recorded or counted, none waits for
%% it), the session limited to Limit bytes of files in Dir; {calls made
%% by each, the summary once it has ended}.
four_loopers_limited(Dir, Limit) ->
    N = 20000,
    Ps = [?W:start_looper(self(), fun() -> ?W:loop_add(N) end)
          || _ <- [1, 2, 3, 4]],
    S = start(#{procs => Ps, calls => [{?W, add, 2}], args => full,
                limits => #{bytes => Limit}, output => {file, Dir}}),
    ok = sys:suspend(S),
    ok = ?W:go(Ps),
    [ok, ok, ok, ok] = ?W:wait_done(Ps, 30000),
    ok = sys:resume(S),
    _ = ?L:wait_ended(S, 5000),
    Sum = stop(S),
    {N, Sum}.

%% The CLI tells the session's losses when no stream file could tell
%% them: under a 1-byte limit no file is ever made (the trace holds only
%% its metadata), and `info', `stats' and `print' said "lost events: 0"
%% where the summary said 80,000 lost as `limit'; under 1000 bytes the
%% threads that only lost events have no file either.  The session
%% records its losses per cause at stop (env session_lost).
limit_bytes_cli(Config) ->
    [limit_bytes_cli(Config, Limit) || Limit <- [1, 1000]],
    ok.

limit_bytes_cli(Config, Limit) ->
    Dir = dir(Config, "limit_bytes_cli_" ++ integer_to_list(Limit)),
    {_N, Sum} = four_loopers_limited(Dir, Limit),
    Lost = total(Sum),
    ?assertEqual({limit, Lost}, {limit, dropped(Sum, limit)}),
    ?assert(Lost > 0),
    Files = filelib:wildcard(filename:join(Dir, "thread-*")),
    Info = ?L:cli_ok(["info", Dir]),
    ct:log("limit ~p, ~p stream files, summary ~p lost:~n~s",
           [Limit, length(Files), Lost, Info]),
    Want = integer_to_list(Lost),
    ?assertEqual({info, Limit, [Want]},
                 {info, Limit, re_all(Info, "lost events: +([0-9]+)")}),
    ?assertEqual({info_limit, Limit, [Want]},
                 {info_limit, Limit, re_all(Info, "\n  limit +([0-9]+)")}),
    Stats = ?L:cli_ok(["stats", Dir]),
    ?assertEqual({stats, Limit, [Want]},
                 {stats, Limit, re_all(Stats, "Lost events: ([0-9]+)")}),
    Json = ?L:cli_ok(["stats", "--json", Dir]),
    ?assertEqual({json, Limit, [Want]},
                 {json, Limit, re_all(Json, "\"lost\":\\{\"total\":([0-9]+)")}),
    case Files of
        [] ->
            %% Nothing in any file: all of them in no stream, and print
            %% says so.
            ?assertEqual({no_stream, [Want]},
                         {no_stream, re_all(Info, "in no stream file\\) +([0-9]+)")}),
            Print = ?L:cli_ok(["print", Dir]),
            ?assertEqual({print, [Want]},
                         {print, re_all(Print, "lost events in no stream file: ([0-9]+)")});
        _ ->
            ok
    end.

re_all(Text, Re) ->
    case re:run(Text, Re, [global, {capture, all_but_first, list}]) of
        {match, Ms} -> [M || [M] <- Ms];
        nomatch -> []
    end.

%% limits.bytes where the files are written through the page cache
%% (BEAMPROBE_NO_DIRECT_IO, as on a file system without O_DIRECT): no
%% packet is ever padded there, so no room is kept for a block's padding
%% (4 KiB per file and per packet), which stopped sessions early: 10
%% calls of 64 KiB arguments (about 66 KB per event), a 133,000-byte
%% limit, got 1 event written where 2 fit (131,515 bytes with the room
%% for the drops event, 166).
limit_bytes_page_cache(Config) ->
    Dir = dir(Config, "limit_bytes_page_cache"),
    {Peer, Node} = ?L:env_peer(?MODULE, [{"BEAMPROBE_NO_DIRECT_IO", "1"}]),
    try
        Limit = 133000,
        Sum = erpc:call(Node, ?MODULE, page_cache_session, [Dir, Limit],
                        60000),
        ct:log("summary: ~p", [Sum]),
        Files = filelib:wildcard(filename:join(Dir, "thread-*")),
        OnDisk = lists:sum([filelib:file_size(F) || F <- Files]),
        #{bytes := Bytes, events := Events} = Sum,
        ?assertMatch(#{stop_reason := bytes}, Sum),
        ?assertEqual(10, Events + total(Sum)),
        ?assertEqual(OnDisk, Bytes),
        ?assert(Bytes =< Limit),
        ?assertEqual({events, 2, Bytes}, {events, Events, Bytes}),
        ?assertEqual(Events, ?L:count(trace(Dir), "call"))
    after
        peer:stop(Peer)
    end.

%% @doc In the peer: one process makes 10 calls of a 70,000-byte binary
%% while traced (the session suspended); the session's summary.
page_cache_session(Dir, Limit) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    Big = binary:copy(<<"x">>, 70000),
    P = ?W:start_looper(self(), fun() -> [?W:sink(Big) || _ <- lists:seq(1, 10)],
                                         ok end),
    S = start(#{procs => [P], calls => [{?W, sink, 1}], args => full,
                capture => #{bytes => 65536, binary => 65536},
                limits => #{bytes => Limit}, output => {file, Dir}}),
    ok = sys:suspend(S),
    ok = ?W:go([P]),
    [ok] = ?W:wait_done([P], 30000),
    ok = sys:resume(S),
    _ = ?L:wait_ended(S, 5000),
    {ok, Sum} = beamprobe:stop(S),
    Sum.

%% A 100 MB binary and a 1M-element list: short args text with "...",
%% and calls stay fast.
capture_bounded(Config) ->
    Dir = dir(Config, "capture"),
    W = ?W:start_worker(),
    ok = ?W:run(W, fun() ->
                           put(bin, binary:copy(<<"x">>, 100 * 1024 * 1024)),
                           put(list, lists:seq(1, 1000000)),
                           ok
                   end),
    S = start(#{procs => [W], calls => [{?W, sink, 1}], return => false,
                output => {file, Dir}}),
    Time = fun(Key) ->
                   ?W:run(W, fun() ->
                                     X = get(Key),
                                     T0 = erlang:monotonic_time(microsecond),
                                     [ok = ?W:sink(X)
                                      || _ <- lists:seq(1, 1000)],
                                     erlang:monotonic_time(microsecond) - T0
                             end)
           end,
    BinUs = Time(bin),
    ListUs = Time(list),
    ct:log("1000 calls: binary ~p us, list ~p us", [BinUs, ListUs]),
    ?assert(BinUs < 2000000),
    ?assert(ListUs < 2000000),
    Sum = stop(S),
    ?assertMatch(#{events := 2000}, Sum),
    ?assertEqual(0, total(Sum)),
    Calls = ?L:events(trace(Dir), "call", W),
    ?assertEqual(2000, length(Calls)),
    {BinCalls, ListCalls} = lists:split(1000, Calls),
    Bytes = 512,                                 % the default capture
    [begin
         A = ?L:field(E, "args"),
         ?assert(byte_size(A) < Bytes + 16),
         ?assertNotEqual(nomatch, binary:match(A, <<"...">>)),
         ?assertMatch(<<"(<<\"xxxx", _/binary>>, A)
     end || E <- BinCalls],
    [begin
         A = ?L:field(E, "args"),
         ?assert(byte_size(A) < Bytes + 16),
         ?assertNotEqual(nomatch, binary:match(A, <<"...">>)),
         ?assertMatch(<<"([1,2,3,", _/binary>>, A)
     end || E <- ListCalls],
    %% Messages are cut the same way.
    Dir3 = dir(Config, "capture_messages"),
    S3 = start(#{procs => [W], events => [send, 'receive'],
                 output => {file, Dir3}}),
    ok = ?W:run(W, fun() ->
                           self() ! {big, get(bin)},
                           self() ! {long, get(list)},
                           receive {big, _} -> ok end,
                           receive {long, _} -> ok end
                   end),
    _ = stop(S3),
    Evs3 = trace(Dir3),
    Msgs = [?L:field(E, "message")
            || E <- ?L:events(Evs3, "send", W) ++
                   ?L:events(Evs3, "receive", W),
               binary:match(?L:field(E, "message"),
                            [<<"{big,">>, <<"{long,">>]) =/= nomatch],
    ?assertEqual(4, length(Msgs)),
    [begin
         ?assert(byte_size(M) < Bytes + 16),
         ?assertNotEqual(nomatch, binary:match(M, <<"...">>))
     end || M <- Msgs],
    %% A smaller capture.bytes is honoured too.
    Dir2 = dir(Config, "capture_small"),
    S2 = start(#{procs => [W], calls => [{?W, sink, 1}], return => false,
                 capture => #{bytes => 32, binary => 1000, list => 1000},
                 output => {file, Dir2}}),
    ok = ?W:run(W, fun() -> ?W:sink(get(list)) end),
    ok = ?W:run(W, fun() -> ?W:sink(get(bin)) end),
    _ = stop(S2),
    [begin
         A = ?L:field(E, "args"),
         ?assert(byte_size(A) =< 32 + 8),
         ?assertNotEqual(nomatch, binary:match(A, <<"...">>))
     end || E <- ?L:events(trace(Dir2), "call", W)],
    exit(W, kill).

%%% ------------------------------------------------------------------------
%%% 10, 12. Flight recorder dumps, file modes
%%% ------------------------------------------------------------------------

dump_flight_recorder(Config) ->
    Dir = dir(Config, "dump"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, tick, 1}], return => false,
                overflow => drop_oldest, output => {file, Dir}}),
    ok = ?W:run(W, fun() -> ?W:loop_tick(1, 1000) end),
    ok = beamprobe:dump(S),
    ok = ?W:run(W, fun() -> ?W:loop_tick(1001, 2000) end),
    ok = beamprobe:dump(S),
    ok = ?W:run(W, fun() -> ?W:loop_tick(2001, 3000) end),
    Sum = stop(S),
    ?assertMatch(#{events := 3000}, Sum),
    ?assertEqual(0, total(Sum)),
    Calls = ?L:events(trace(Dir), "call", W),
    ?assertEqual(lists:seq(1, 3000), [call_args_int(E) || E <- Calls]),
    %% With a tiny ring that overwrites, before and after a dump.
    Dir2 = dir(Config, "dump_small"),
    S2 = start(#{procs => [W], calls => [{?W, tick, 1}], return => false,
                 overflow => drop_oldest, buffer => 16384,
                 output => {file, Dir2}}),
    ok = ?W:run(W, fun() -> ?W:loop_tick(1, 5000) end),
    ok = beamprobe:dump(S2),
    ok = ?W:run(W, fun() -> ?W:loop_tick(5001, 10000) end),
    Sum2 = stop(S2),
    ?assert(dropped(Sum2, overwritten) > 0),
    Calls2 = ?L:events(trace(Dir2), "call", W),
    ?assertEqual(maps:get(events, Sum2), length(Calls2)),
    ?assertEqual(10000, call_args_int(lists:last(Calls2))),
    Ints = [call_args_int(E) || E <- Calls2],
    ?assertEqual(Ints, lists:sort(Ints)),
    ?assert(lists:member(5000, Ints)),           % the dumped window's end
    ?W:stop_worker(W).

dump_not_flight_recorder(Config) ->
    Dir = dir(Config, "no_dump"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, add, 2}],
                output => {file, Dir}}),
    ?assertEqual({error, not_flight_recorder}, beamprobe:dump(S)),
    Dir2 = dir(Config, "no_dump_stop"),
    W2 = ?W:start_worker(),
    S2 = start(#{procs => [W2], events => [send], overflow => stop,
                 output => {file, Dir2}}),
    ?assertEqual({error, not_flight_recorder}, beamprobe:dump(S2)),
    _ = stop(S2),
    _ = stop(S),
    ?assertEqual({error, not_found}, beamprobe:dump(S)),
    _ = trace(Dir),
    ?W:stop_worker(W),
    ?W:stop_worker(W2).

%% The trace directory is 0700 and its files 0600.
file_modes(Config) ->
    Dir = dir(Config, "modes"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, add, 2}],
                events => [running], output => {file, Dir}}),
    ok = ?W:run(W, fun() -> ?W:loop_add(10) end),
    _ = stop(S),
    {ok, #file_info{mode = DMode, type = directory}} = file:read_file_info(Dir),
    ?assertEqual(8#700, DMode band 8#777),
    {ok, Files} = file:list_dir(Dir),
    ?assert(lists:member("metadata", Files)),
    ?assert(lists:any(fun(F) -> lists:prefix("thread-", F) end, Files)),
    [begin
         {ok, #file_info{mode = M, type = regular}} =
             file:read_file_info(filename:join(Dir, F)),
         ?assertEqual({F, 8#600}, {F, M band 8#777})
     end || F <- Files],
    _ = trace(Dir),
    ?W:stop_worker(W).

%% `bin/beamprobe stats' shows no call times for a trace recorded
%% without return events (env returns = false): it showed each call as
%% open until the trace's end, e.g. lists:seq/2 with a mean of 236 ms
%% for calls of a few microseconds.  With return => true the times are
%% measured.
stats_untimed(Config) ->
    DA = beamprobe_test_lib:dir(Config, "untimed"),
    DB = beamprobe_test_lib:dir(Config, "timed"),
    MFA = {beamprobe_workload, tick, 1},
    {ok, A} = beamprobe:start(#{calls => [MFA], output => {file, DA}}),
    {ok, B} = beamprobe:start(#{calls => [MFA], return => true,
                                output => {file, DB}}),
    [begin _ = beamprobe_workload:tick(I), timer:sleep(20) end
     || I <- lists:seq(1, 5)],
    {ok, _} = beamprobe:stop(A),
    {ok, _} = beamprobe:stop(B),
    Text = beamprobe_test_lib:cli_ok(["stats", "--sort", "total", DA]),
    ct:log("~s", [Text]),
    ?assertNotEqual(nomatch, binary:match(Text, <<"call times unknown">>)),
    ?assertMatch({match, _},
                 re:run(Text, "\n +5 +- +- +- +- +- +- +-  "
                              "beamprobe_workload:tick/1\n")),
    ?assertEqual(["unknown", "5", "None", "None", "None"],
                 py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DA]))),
    ["measured", "5", Total, Mean, "0"] =
        py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DB])),
    %% five calls of tick/1 take microseconds, not the trace's 100 ms
    ?assert(list_to_integer(Total) > 0),
    ?assert(list_to_integer(Mean) < 10000000),
    %% The time profiles refuse the untimed trace, naming why; perfetto
    %% shows its calls as instants ("i"), with no slice ("B"/"E").
    [begin
         {1, Err} = beamprobe_test_lib:cli(["export", "-F", F, DA]),
         ?assertNotEqual(nomatch, binary:match(Err, <<"has no return events">>)),
         {0, _} = beamprobe_test_lib:cli(["export", "-F", F, "-o",
                                          filename:join(?config(priv_dir, Config), "x." ++ F), DB])
     end || F <- ["folded", "callgrind", "speedscope"]],
    Phs = fun(D) ->
                  J = beamprobe_test_lib:cli_ok(["export", "-F", "perfetto", D]),
                  lists:usort([Ph || [Ph] <- element(2, re:run(J, "\"ph\":\"(.)\"",
                                                               [global, {capture, all_but_first, list}]))])
          end,
    ?assertEqual(["M", "i"], Phs(DA)),
    ?assertEqual(["B", "E", "M"], Phs(DB)).

%% A trace whose session traced tick/1 with its returns and sink/1 without
%% (returns = true, untimed_calls = sink/1): sink/1's calls are counted
%% and have no time, instead of each staying open (and holding its
%% callers' frames) until the trace's end; the env names every pattern,
%% those with a match spec and those with a non-latin-1 name too, in
%% UTF-8.
stats_mixed(Config) ->
    D = beamprobe_test_lib:dir(Config, "mixed"),
    W = beamprobe_workload,
    Fun = binary_to_atom(<<"f", 16#fc/utf8, "r_", 16#444/utf8>>),
    {ok, Mod, Bin} = compile:forms(
                       [{attribute, 1, module, bp_mixed_uni},
                        {attribute, 1, export, [{Fun, 1}]},
                        {function, 1, Fun, 1, [{clause, 1, [{var, 1, 'X'}], [],
                                                [{var, 1, 'X'}]}]}]),
    {module, Mod} = code:load_binary(Mod, "bp_mixed_uni.erl", Bin),
    Log = filename:join(?config(priv_dir, Config), "mixed_printer.txt"),
    {ok, Io} = file:open(Log, [write]),
    {ok, S} = beamprobe:start(
                #{calls => [{{W, tick, 1}, [{'_', [], [{return_trace}]}]},
                            {W, sink, 1}, {Mod, Fun, 1}],
                  output => [{file, D}, {handler, beamprobe_printer,
                                         #{io => Io, timestamp => none}}]}),
    [begin _ = W:tick(I), ok = W:sink(I), I = Mod:Fun(I), timer:sleep(20) end
     || I <- lists:seq(1, 5)],
    {ok, _} = beamprobe:stop(S),
    %% The shell's printer does not indent after an untimed call either
    %% (it prints the last events after stop/1 returns).
    _ = ?L:wait_until(fun() ->
                              {ok, P} = file:read_file(Log),
                              length(binary:matches(P, <<" call ">>)) >= 15
                      end, 5000),
    ok = file:close(Io),
    {ok, Printed} = file:read_file(Log),
    ct:log("~ts", [Printed]),
    PCalls = [L || L <- binary:split(Printed, <<"\n">>, [global]),
                   binary:match(L, <<" call ">>) =/= nomatch],
    ?assertEqual(15, length(PCalls)),
    [?assertMatch({match, _}, re:run(L, "^<[0-9.]+> call ")) || L <- PCalls],
    %% The file takes latin-1 only (opened without {encoding, utf8}): the
    %% function's name is there with \x{444} for the character it cannot
    %% take, instead of no line at all (the device died at the first).
    ?assertNotEqual(nomatch, binary:match(Printed, <<"r_\\x{444}'(1)">>)),
    Text = beamprobe_test_lib:cli_ok(["stats", D]),
    ct:log("~ts", [Text]),
    ?assertMatch({match, _},
                 re:run(Text, "\n +5 +- +- +- +- +- +- +-  "
                              "beamprobe_workload:sink/1\n")),
    {match, [Mean]} = re:run(Text, "\n +5 +\\S+ +\\S+ +(\\S+) .*  "
                                   "beamprobe_workload:tick/1\n",
                             [{capture, all_but_first, list}]),
    ?assertMatch({match, _}, re:run(Mean, "^[0-9.]+(ns|us)$")),
    ?assertNotEqual(nomatch, binary:match(Text, <<"2 functions traced without "
                                                  "a return event for every "
                                                  "call">>)),
    ?assertEqual(["partial", "5", "None", "None", "None"],
                 py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", D]),
                    "beamprobe_workload:sink/1")),
    %% No call indented: each is at the process's top level.
    Print = beamprobe_test_lib:cli_ok(["print", D]),
    Calls = [L || L <- binary:split(Print, <<"\n">>, [global]),
                  binary:match(L, <<" call ">>) =/= nomatch],
    ?assertEqual(15, length(Calls)),
    [?assertMatch({match, _}, re:run(L, "^\\S+ <[0-9.]+> call ")) || L <- Calls],
    %% The time profiles leave sink/1 out and say so; perfetto shows its
    %% calls as instants next to tick/1's slices.
    Folded = beamprobe_test_lib:cli_ok(["export", "-F", "folded", D]),
    ?assertNotEqual(nomatch, binary:match(Folded, <<"not in the folded profile: "
                                                    "beamprobe_workload:sink/1">>)),
    ?assertNotEqual(nomatch, binary:match(Folded, <<"tick/1 ">>)),
    ?assertEqual(nomatch, binary:match(Folded, <<"sink/1 ">>)),
    J = beamprobe_test_lib:cli_ok(["export", "-F", "perfetto", D]),
    ?assertEqual(10, length(binary:matches(J, <<"\"ph\":\"i\"">>))),
    ?assertEqual(5, length(binary:matches(J, <<"\"ph\":\"B\"">>))),
    %% info shows every pattern, in UTF-8.
    Info = beamprobe_test_lib:cli_ok(["info", D]),
    ct:log("~ts", [Info]),
    FunText = <<"f", 16#fc/utf8, "r_", 16#444/utf8>>,
    ?assertNotEqual(nomatch, binary:match(Info, <<"beamprobe_workload:tick/1, "
                                                  "beamprobe_workload:sink/1">>)),
    ?assertNotEqual(nomatch, binary:match(Info, <<"bp_mixed_uni:'", FunText/binary, "'/1">>)).

%% A function's calls follow its most specific pattern, the last of
%% equal ones (what the VM was given): outer/1 traced with its returns
%% next to beamprobe_workload:'_'/'_' without them, and inner/1 given twice,
%% last with its returns, are timed; tick/1 and sink/1 are not.  Before,
%% a function any untimed pattern named was untimed: outer/1 and inner/1
%% showed no time though their returns were recorded, and the shell's
%% printer did not indent inner/1's call inside outer/1.
stats_overlap(Config) ->
    D = beamprobe_test_lib:dir(Config, "overlap"),
    W = beamprobe_workload,
    R = [{'_', [], [{return_trace}]}],
    Log = filename:join(?config(priv_dir, Config), "overlap_printer.txt"),
    {ok, Io} = file:open(Log, [write]),
    {ok, S} = beamprobe:start(
                #{calls => [{{W, outer, 1}, R}, {W, '_', '_'},
                            {{W, inner, 1}, R}, {{W, inner, 1}, [{'_', [], []}]}],
                  output => [{file, D}, {handler, beamprobe_printer,
                                         #{io => Io, timestamp => none}}]}),
    [begin _ = W:outer(I), _ = W:tick(I), ok = W:sink(I), timer:sleep(10) end
     || I <- lists:seq(1, 5)],
    {ok, _} = beamprobe:stop(S),
    _ = ?L:wait_until(fun() ->
                              {ok, P} = file:read_file(Log),
                              length(binary:matches(P, <<" call ">>)) >= 20
                      end, 5000),
    ok = file:close(Io),
    {ok, Printed} = file:read_file(Log),
    ct:log("~ts", [Printed]),
    Lines = fun(Text, What) ->
                    [L || L <- binary:split(Text, <<"\n">>, [global]),
                          binary:match(L, What) =/= nomatch]
            end,
    Inner = <<"call beamprobe_workload:inner(">>,
    ?assertEqual(5, length(Lines(Printed, Inner))),
    [?assertMatch({match, _}, re:run(L, "^<[0-9.]+>   call ")) || L <- Lines(Printed, Inner)],
    [?assertMatch({match, _}, re:run(L, "^<[0-9.]+> call "))
     || L <- Lines(Printed, <<"call beamprobe_workload:sink(">>)],
    Text = beamprobe_test_lib:cli_ok(["stats", D]),
    ct:log("~ts", [Text]),
    [?assertMatch({match, _},
                  re:run(Text, "\n +5 +[0-9.]+(ns|us|ms) .*  beamprobe_workload:" ++ F ++ "/1\n"))
     || F <- ["outer", "inner"]],
    [?assertMatch({match, _},
                  re:run(Text, "\n +5 +- +- +- +- +- +- +-  beamprobe_workload:" ++ F ++ "/1\n"))
     || F <- ["tick", "sink"]],
    Print = beamprobe_test_lib:cli_ok(["print", D]),
    [?assertMatch({match, _}, re:run(L, "^\\S+ <[0-9.]+>   call "))
     || L <- Lines(Print, Inner)],
    ?assertEqual(5, length(Lines(Print, Inner))).

%% untimed_calls longer than the env's 8 KiB per value (400 functions
%% traced without returns next to top/1 with them): the value is cut,
%% and a function whose pattern was cut off is still untimed (named by no
%% pattern of timed_calls).  Before, the 200-odd cut off were timed: each
%% call stayed open until top/1 returned, e.g. f_..._399/1 "took" 0.3 ms.
stats_untimed_cut(Config) ->
    D = beamprobe_test_lib:dir(Config, "untimed_cut"),
    Names = [list_to_atom("a_rather_long_function_name_" ++ integer_to_list(I))
             || I <- lists:seq(1, 400)],
    M = bp_untimed_cut,
    trace_top(D, M, Names),
    Info = beamprobe_test_lib:cli_ok(["info", D]),
    ?assertMatch({match, _}, re:run(Info, "truncated: +calls, untimed_calls")),
    Text = beamprobe_test_lib:cli_ok(["stats", "--top", "1000", D]),
    ?assertNotEqual(nomatch, binary:match(Text, <<"400 functions traced without a return event for every call">>)),
    ?assertEqual(400, length(binary:matches(Text, <<"  3          -          -">>))),
    ?assertMatch({match, _}, re:run(Text, "\n +3 +[0-9.]+(ns|us|ms) .*  bp_untimed_cut:top/1\n")).

%% Loads module M, whose top/1 calls each of Names (each returns its
%% argument) and returns ok, traces top/1 with its returns and Names
%% without them into directory D, and calls top/1 three times.
trace_top(D, M, Names) ->
    {ok, M, Bin} = compile:forms(
                     [{attribute, 1, module, M},
                      {attribute, 1, export, [{top, 1} | [{F, 1} || F <- Names]]},
                      {function, 1, top, 1,
                       [{clause, 1, [{var, 1, 'X'}], [],
                         [{call, 1, {atom, 1, F}, [{var, 1, 'X'}]} || F <- Names]
                         ++ [{atom, 1, ok}]}]}
                      | [{function, 1, F, 1, [{clause, 1, [{var, 1, 'X'}], [],
                                               [{var, 1, 'X'}]}]} || F <- Names]]),
    {module, M} = code:load_binary(M, atom_to_list(M) ++ ".erl", Bin),
    {ok, S} = beamprobe:start(
                #{calls => [{{M, top, 1}, [{'_', [], [{return_trace}]}]}
                            | [{M, F, 1} || F <- Names]],
                  output => {file, D}}),
    [ok = M:top(I) || I <- lists:seq(1, 3)],
    {ok, _} = beamprobe:stop(S),
    ok.

%% Functions traced without returns whose names need quotes, escapes or
%% non-latin-1 characters, in a module whose name needs quotes, are
%% untimed.
%% Before, the env wrote the patterns with io_lib's ~tp, which writes the
%% escape and delete characters of a non-latin-1 atom as \e and \d where
%% the call events have \033 and a raw 127: those two were not found and
%% were timed, each call open until top/1 returned.
stats_untimed_names(Config) ->
    D = beamprobe_test_lib:dir(Config, "untimed_names"),
    M = list_to_atom("bp names " ++ [16#e9]),
    Names = [list_to_atom([$a, 16#436, 27]), list_to_atom([127, 16#436]),
             'receive', 'a b', '', 'it\'s', 'back\\slash', list_to_atom([$x, 16#e9]),
             list_to_atom([16#1F600])],
    trace_top(D, M, Names),
    Text = beamprobe_test_lib:cli_ok(["stats", D]),
    ct:log("~ts", [Text]),
    ?assertNotEqual(nomatch, binary:match(Text, <<"9 functions traced without a return event for every call">>)),
    ?assertEqual(9, length(binary:matches(Text, <<"  3          -          -">>))),
    ?assertMatch({match, _}, re:run(Text, "\n +3 +[0-9.]+(ns|us|ms) .*:top/1\n")).

%% exceptions => true without return records the exception_from events
%% of the plain patterns, not their return_from events: such a trace has
%% no call times (returns = false), and next to a match spec with
%% return_trace (whose returns the tracer records, and so theirs too) they
%% are timed.  Before, the env said returns = true and tick/1's calls,
%% never ended, were each open until the trace's end.
stats_exceptions_only(Config) ->
    W = beamprobe_workload,
    Run = fun(Name, Opts) ->
                  D = beamprobe_test_lib:dir(Config, Name),
                  {ok, S} = beamprobe:start(Opts#{output => {file, D}}),
                  [begin _ = W:tick(I), ok = W:sink(I), timer:sleep(10) end
                   || I <- lists:seq(1, 5)],
                  {ok, _} = beamprobe:stop(S),
                  D
          end,
    DA = Run("exc_only", #{calls => [{W, tick, 1}], exceptions => true}),
    ?assertEqual(["unknown", "5", "None", "None", "None"],
                 py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DA]))),
    DB = Run("exc_ms", #{calls => [{W, tick, 1}, {{W, sink, 1}, [{'_', [], []}]}],
                         exceptions => true}),
    ?assertEqual(["unknown", "5", "None", "None", "None"],
                 py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DB]))),
    DC = Run("exc_ret", #{calls => [{W, tick, 1},
                                    {{W, sink, 1}, [{'_', [], [{return_trace}]}]}],
                          exceptions => true}),
    ["measured", "5", _, _, "0"] =
        py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DC])),
    ["measured", "5", _, _, "0"] =
        py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DC]),
           "beamprobe_workload:sink/1").

%% call_times, calls, total_ns, mean_ns and open of tick/1 in stats --json.
py(Config, Json) ->
    py(Config, Json, "beamprobe_workload:tick/1").

py(Config, Json, Function) ->
    F = filename:join(?config(priv_dir, Config), "stats.json"),
    ok = file:write_file(F, Json),
    Out = os:cmd("python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                 "f=[x for x in d[\"functions\"] if x[\"function\"]"
                 "==sys.argv[2]][0]; "
                 "print(d[\"call_times\"], f[\"calls\"], f[\"total_ns\"], "
                 "f[\"mean_ns\"], f[\"open\"])' " ++ F ++ " " ++ Function),
    string:lexemes(Out, " \n").

%% A match spec with return_trace in some clauses only: the trace does not
%% say which clause a call matched, so its calls get no time and no frame
%% (untimed), its returns are not "returns without a traced call", and
%% the calls after one without a return are not shown inside it.  Before,
%% the pattern counted as timed: tick(3..6) stayed open to the trace's
%% end, held outer/1's calls inside them, and stats gave tick/1 a total
%% longer than the trace.
stats_partial_returns(Config) ->
    D = beamprobe_test_lib:dir(Config, "partial"),
    W = beamprobe_workload,
    Log = filename:join(?config(priv_dir, Config), "partial_printer.txt"),
    {ok, Io} = file:open(Log, [write]),
    {ok, S} = beamprobe:start(
                #{calls => [{{W, tick, 1}, [{['$1'], [{'<', '$1', 3}],
                                             [{return_trace}]},
                                            {'_', [], []}]},
                            {{W, outer, 1}, [{'_', [], [{return_trace}]}]}],
                  output => [{file, D}, {handler, beamprobe_printer,
                                         #{io => Io, timestamp => none}}]}),
    [begin I = W:tick(I), _ = W:outer(I), timer:sleep(5) end
     || I <- lists:seq(1, 6)],
    {ok, _} = beamprobe:stop(S),
    _ = ?L:wait_until(fun() ->
                              {ok, P} = file:read_file(Log),
                              length(binary:matches(P, <<"returned from">>))
                                  >= 8
                      end, 5000),
    ok = file:close(Io),
    {ok, Printed} = file:read_file(Log),
    ct:log("~ts", [Printed]),
    Lines = [L || L <- binary:split(Printed, <<"\n">>, [global]),
                  re:run(L, " (call|returned) ") =/= nomatch],
    %% 12 calls, 2 returns of tick/1, 6 of outer/1; none indented.
    ?assertEqual(20, length(Lines)),
    [?assertMatch({match, _}, re:run(L, "^<[0-9.]+> (call|returned) "))
     || L <- Lines],
    Text = beamprobe_test_lib:cli_ok(["stats", D]),
    ct:log("~ts", [Text]),
    ?assertMatch({match, _},
                 re:run(Text, "\n +6 +- +- +- +- +- +- +-  "
                              "beamprobe_workload:tick/1\n")),
    %% outer/1: 6 calls, each ended by its return, none open.
    ?assertMatch({match, _},
                 re:run(Text, "\n +6 +\\S+ +\\S+ +\\S+ +\\S+ +\\S+ +\\S+ +0  "
                              "beamprobe_workload:outer/1\n")),
    ?assertNotEqual(nomatch, binary:match(Text, <<"1 function traced without "
                                                  "a return event for every "
                                                  "call">>)),
    ?assertEqual(nomatch, binary:match(Text, <<"Returns without a traced call">>)),
    Print = beamprobe_test_lib:cli_ok(["print", D]),
    PLines = [L || L <- binary:split(Print, <<"\n">>, [global]),
                   re:run(L, " (call|returned) ") =/= nomatch],
    ?assertEqual(20, length(PLines)),
    [?assertMatch({match, _}, re:run(L, "^\\S+ <[0-9.]+> (call|returned) "))
     || L <- PLines],
    %% Perfetto: tick/1's 6 calls and 2 returns are instants, outer/1's 6
    %% calls slices (B/E); no slice is left open at the end.
    PF = filename:join(?config(priv_dir, Config), "partial.json"),
    _ = beamprobe_test_lib:cli_ok(["export", "-F", "perfetto", "-o", PF, D]),
    {ok, J} = file:read_file(PF),
    Count = fun(Pat) -> length(binary:matches(J, Pat)) end,
    ?assertEqual(2, Count(<<"\"cat\":\"return\"">>)),
    ?assertEqual(6, Count(<<"\"ph\":\"B\"">>)),
    ?assertEqual(6, Count(<<"\"ph\":\"E\"">>)),
    ?assertEqual(0, Count(<<"open_at_end">>)),
    ok.
