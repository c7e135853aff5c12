%%% @doc Fault injection on beamprobe's sinks: the disk fills up (a tiny
%%% tmpfs), the trace directory is removed mid-trace, stream files cannot
%%% be created, links are planted in the output directory, the umask is
%%% 000, an event is larger than the default packet, a handler crashes or
%%% blocks forever, the handler sink's per-batch memory, idle sessions'
%%% CPU and the session cap.  Each case checks the promise "every event is
%%% in the files or counted as lost, by cause" against babeltrace2.
%%%
%%% The suite module is itself a beamprobe_handler (init/1,
%%% handle_events/2, terminate/2), in modes `crash', `block' and `count'.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_sink_faults_SUITE -logdir _build/ct_logs
-module(beamprobe_sink_faults_SUITE).
-behaviour(beamprobe_handler).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([handler_env_no_leak/1, handler_blocked_is_killed/1,
         handler_killed_after_limit/1, handler_trapping_exits_session_killed/1,
         handler_not_told_file_losses/1, handler_crash_info_now/1,
         handler_crash_counted/1, idle_sessions_sleep/1, session_cap/1,
         session_cap_concurrent/1, event_larger_than_packet/1,
         disk_full/1, dir_removed/1, stream_not_creatable/1,
         planted_symlinks/1, unsafe_existing_dir/1, umask_000/1,
         discarded_visible_to_babeltrace/1, stop_waits_for_handlers/1,
         handler_stops_own_session/1, handler_stop_ends_session/1,
         stream_file_removed_after/1,
         stream_files_planted_entry/1]).
%% The handler callbacks, and the umask child node's entry point.
-export([init/1, handle_events/2, terminate/2, umask_child/1]).

-define(L, beamprobe_test_lib).
-define(W, beamprobe_workload).

-import(beamprobe_test_lib, [dir/2, start/1, stop/1, total/1, dropped/2]).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [handler_env_no_leak, handler_blocked_is_killed,
     handler_killed_after_limit, handler_trapping_exits_session_killed,
     handler_crash_counted,
     stop_waits_for_handlers, handler_stops_own_session,
     handler_stop_ends_session,
     idle_sessions_sleep, session_cap, session_cap_concurrent,
     event_larger_than_packet, disk_full, dir_removed,
     stream_not_creatable, planted_symlinks, unsafe_existing_dir,
     umask_000, discarded_visible_to_babeltrace, stream_file_removed_after,
     handler_not_told_file_losses, handler_crash_info_now,
     stream_files_planted_entry].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    ?L:clear_trace_state(),
    _ = application:unset_env(beamprobe, max_sessions),
    _ = application:unset_env(beamprobe, handler_stop_timeout),
    ok.

%%% ------------------------------------------------------------------------
%%% The handler (modes: count, crash, block)
%%% ------------------------------------------------------------------------

%% @private
-spec init(map()) -> {ok, map()}.
init(#{parent := P} = Arg) ->
    _ = maps:get(trap, Arg, false) andalso process_flag(trap_exit, true),
    P ! {handler_init, self()},
    {ok, Arg#{n => 0}}.

%% @private
-spec handle_events([beamprobe_handler:event()], map()) -> {ok, map()}.
handle_events(_Evs, #{mode := crash}) ->
    erlang:error(handler_crashes_on_purpose);
handle_events(_Evs, #{mode := block}) ->
    receive never_sent -> ok end,
    erlang:error(unreachable);
handle_events(Evs, #{mode := slow, n := N} = St) ->
    timer:sleep(100),
    {ok, St#{n := N + length([E || #{event := call} = E <- Evs])}};
handle_events(_Evs, #{mode := stop_now} = St) ->
    {stop, St};
handle_events(_Evs, #{mode := stop_self, parent := P} = St) ->
    [S] = beamprobe:list(),
    P ! {stopped_self, self(), beamprobe:stop(S)},
    {ok, St};
handle_events(Evs, #{n := N, parent := P} = St) ->
    N1 = N + length([E || #{event := call} = E <- Evs]),
    case maps:get(report_at, St, undefined) of
        At when is_integer(At), N < At, N1 >= At ->
            P ! {handler_reached, self()};
        _ -> ok
    end,
    {ok, St#{n := N1}}.

%% @private
-spec terminate(term(), map()) -> ok.
terminate(_Why, #{parent := P, n := N}) ->
    P ! {handler_done, self(), N},
    ok.

handler_pid() ->
    receive {handler_init, P} -> P after 5000 -> ct:fail(no_handler) end.

%%% ------------------------------------------------------------------------
%%% Item 4: the handler sink
%%% ------------------------------------------------------------------------

%% 30,000 delivered batches of one event each: before the fix every batch
%% leaked its environment (~840 bytes: ~25 MB here); the VM's system
%% memory must stay flat (a generous 8 MB for everything else).
handler_env_no_leak(_Config) ->
    Self = self(),
    P = spawn_link(fun() -> paced_ticks(Self) end),
    S = start(#{procs => [P], calls => [{?W, tick, 1}], return => false,
                exceptions => false, args => arity,
                output => {handler, ?MODULE, #{parent => self(),
                                               mode => count,
                                               report_at => 30000},
                           #{batch => 1, credits => 64}}}),
    H = handler_pid(),
    erlang:garbage_collect(),
    Before = erlang:memory(system),
    P ! go,
    receive {handler_reached, H} -> ok after 90000 -> ct:fail(slow) end,
    P ! stop,
    receive {paced_done, P} -> ok after 10000 -> ct:fail(workload) end,
    Sum = stop(S),
    receive {handler_done, H, _} -> ok after 10000 -> ct:fail(done) end,
    erlang:garbage_collect(),
    After = erlang:memory(system),
    %% Batches sent: acknowledged, or still in flight when it stopped.
    [#{delivered := Acked, in_flight := InFlight}] = maps:get(handlers, Sum),
    Delivered = Acked + InFlight,
    ct:pal("~p batches delivered; system memory ~p -> ~p (~p bytes/batch)",
           [Delivered, Before, After,
            (After - Before) div max(1, Delivered)]),
    ?assert(Delivered >= 30000),
    ?assert(After - Before < 8 * 1024 * 1024).

%% Calls tick/1 until told to stop, paced so that the handler mostly
%% keeps up (a batch is delivered, not dropped, while it has a credit).
paced_ticks(Parent) ->
    receive go -> ok end,
    paced_loop(Parent).

paced_loop(Parent) ->
    _ = [?W:tick(I) || I <- lists:seq(1, 30)],
    receive
        stop -> Parent ! {paced_done, self()}
    after 1 -> paced_loop(Parent)
    end.

%% A handler blocked forever in handle_events/2 is killed a bounded time
%% after its session stops (it would otherwise outlive the session and
%% pin its mailbox).
handler_blocked_is_killed(_Config) ->
    ok = application:set_env(beamprobe, handler_stop_timeout, 300),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, tick, 1}],
                output => {handler, ?MODULE, #{parent => self(),
                                               mode => block},
                           #{batch => 1}}}),
    H = handler_pid(),
    ?W:run(W, fun() -> [?W:tick(I) || I <- lists:seq(1, 100)] end),
    _ = ?L:wait_until(fun() ->
                               {message_queue_len, Q} =
                                   process_info(H, message_queue_len),
                               Q > 0
                       end, 5000),
    Ref = monitor(process, H),
    Sched0 = ?L:sched_times(),
    T0 = erlang:monotonic_time(millisecond),
    Sum = stop(S),
    Ms = erlang:monotonic_time(millisecond) - T0,
    {Waited0, Threads} = ?L:timer_waited_ms(Sched0, ?L:sched_times()),
    Waited = min(Waited0, Ms),
    %% Blocked on its first batch: it acknowledged nothing; its `credits'
    %% (4) one-event batches were in flight, the rest dropped.  stop/1
    %% returned once it was killed: those 4 are lost too, and said so
    %% (before, the summary still had them `in_flight', taken at the stop).
    ?assertMatch(#{events := 100, dropped := #{total := 0},
                   handlers := [#{delivered := 0, in_flight := 0,
                                  dropped := 100, slow_output := 96,
                                  handler_down := 4}]}, Sum),
    %% stop/1 waited for it, a bounded time: it was killed by then.
    %% At least the 300 ms timeout; at most 3 s of the node's own time:
    %% less what its schedulers waited for a CPU other processes had.
    %% (The figures in the reason: CI prints only its first terms.)
    ct:pal("stop/1 returned after ~p ms, ~p ms of it waiting for a CPU; "
           "threads (name, ms run, ms waiting): ~p", [Ms, Waited, Threads]),
    Ms >= 250 andalso Ms - Waited < 3000 orelse
        ct:fail("stop/1 returned after ~b ms, ~b ms of it waiting for a "
                "CPU: ~b ms of the node's time, not in [250, 3000)",
                [Ms, Waited, Ms - Waited]),
    receive
        {'DOWN', Ref, process, H, Why} -> ?assertEqual(killed, Why)
    after 0 ->
            ct:fail({blocked_handler_still_alive, H})
    end,
    ?W:stop_worker(W).

%% A session that ends by itself (its event limit) with a blocked handler:
%% the handler is killed handler_stop_timeout later, and from then on
%% info/1 and stop/1 count the batches it never handled as dropped.
%% Before, both said `in_flight := 4' for good, for a handler long dead.
handler_killed_after_limit(_Config) ->
    ok = application:set_env(beamprobe, handler_stop_timeout, 300),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, tick, 1}],
                limits => #{events => 50},
                output => {handler, ?MODULE, #{parent => self(),
                                               mode => block},
                           #{batch => 1}}}),
    H = handler_pid(),
    Ref = monitor(process, H),
    ?W:run(W, fun() -> [?W:tick(I) || I <- lists:seq(1, 100)] end),
    receive
        {'DOWN', Ref, process, H, Why} -> ?assertEqual(killed, Why)
    after 10000 -> ct:fail({blocked_handler_not_killed, H})
    end,
    Acc = #{delivered => 0, in_flight => 0, dropped => 50,
            slow_output => 46, handler_down => 4},
    Info = fun() -> {ok, I} = beamprobe:info(S), I end,
    _ = (catch ?L:wait_until(fun() -> maps:get(handlers, Info()) =:= [Acc]
                             end, 3000)),
    ?assertMatch(#{stop_reason := events, handlers := [Acc]}, Info()),
    ?assertMatch(#{stop_reason := events, handlers := [Acc]}, stop(S)),
    ?W:stop_worker(W).

%% A session killed (no stop/1, no terminate/2 of its own) with handlers
%% that trap exits: the link does not take them down.  Before, both lived
%% for good, pinning their mailboxes and the session's NIF resource; now
%% they are stopped as the session's stop would: the one that handles
%% runs terminate/2, the blocked one is killed after handler_stop_timeout.
handler_trapping_exits_session_killed(_Config) ->
    ok = application:set_env(beamprobe, handler_stop_timeout, 300),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, tick, 1}],
                output => [{handler, ?MODULE, #{parent => self(), trap => true,
                                                report_at => 10}},
                           {handler, ?MODULE, #{parent => self(), trap => true,
                                                mode => block},
                            #{batch => 1}}]}),
    H1 = handler_pid(),
    H2 = handler_pid(),
    ?W:run(W, fun() -> [?W:tick(I) || I <- lists:seq(1, 10)] end),
    receive {handler_reached, H1} -> ok
    after 5000 -> ct:fail(handler_got_nothing)
    end,
    R1 = monitor(process, H1),
    R2 = monitor(process, H2),
    exit(S, kill),
    receive
        {handler_done, H1, N} -> ?assertEqual(10, N)
    after 3000 -> ct:fail({handler_outlived_its_session, H1})
    end,
    receive {'DOWN', R1, process, H1, normal} -> ok
    after 3000 -> ct:fail({handler_outlived_its_session, H1})
    end,
    receive {'DOWN', R2, process, H2, Why} -> ?assertEqual(killed, Why)
    after 3000 -> ct:fail({blocked_handler_outlived_its_session, H2})
    end,
    ?W:stop_worker(W).

%% stop/1 returns when the handlers have handled every batch sent to them
%% and ended (the shell printer's output is all there when it returns):
%% a handler taking 100 ms per one-event batch, 4 batches in flight.
stop_waits_for_handlers(_Config) ->
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, tick, 1}],
                output => {handler, ?MODULE, #{parent => self(),
                                               mode => slow},
                           #{batch => 1}}}),
    H = handler_pid(),
    ?W:run(W, fun() -> [?W:tick(I) || I <- lists:seq(1, 6)] end),
    _ = ?L:wait_until(fun() ->
                               {message_queue_len, Q} =
                                   process_info(H, message_queue_len),
                               Q > 0
                       end, 5000),
    Sum = stop(S),
    [#{delivered := D, in_flight := F, dropped := Dr}] = maps:get(handlers, Sum),
    %% Its terminate/2 has run, with every event it was sent handled.
    receive
        {handler_done, H, N} ->
            ?assertEqual(D + F, N),
            ?assertEqual(6, N + Dr),
            ?assert(N >= 4)
    after 0 -> ct:fail({stop_returned_before_the_handler_ended, H})
    end,
    ?assertNot(is_process_alive(H)),
    ?W:stop_worker(W).

%% handle_events/2 returning {stop, State} ends the session (stop reason
%% handler_stop), as documented; before, only the handler ended and the
%% session traced on, its events counted as dropped.
handler_stop_ends_session(_Config) ->
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, tick, 1}],
                output => {handler, ?MODULE, #{parent => self(),
                                               mode => stop_now},
                           #{batch => 1}}}),
    H = handler_pid(),
    ?W:run(W, fun() -> ?W:tick(1) end),
    _ = ?L:wait_ended(S, 5000),
    {ok, Info} = beamprobe:info(S),
    ?assertNot(maps:is_key(config, Info)),   % ended: its summary
    receive {handler_done, H, _} -> ok after 2000 -> ct:fail(not_ended) end,
    ?assertMatch(#{stop_reason := handler_stop}, stop(S)),
    ?W:stop_worker(W).

%% A handler that stops its own session from handle_events/2 is not
%% waited for by that stop/1 (it would wait for itself until killed).
handler_stops_own_session(_Config) ->
    ok = application:set_env(beamprobe, handler_stop_timeout, 5000),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, tick, 1}],
                output => {handler, ?MODULE, #{parent => self(),
                                               mode => stop_self},
                           #{batch => 1}}}),
    H = handler_pid(),
    Sched0 = ?L:sched_times(),
    T0 = erlang:monotonic_time(millisecond),
    ?W:run(W, fun() -> ?W:tick(1) end),
    receive
        {stopped_self, H, R} -> ?assertMatch({ok, #{events := 1}}, R)
    after 10000 -> ct:fail(handler_stop_hangs)
    end,
    %% Not waited for (handler_stop_timeout, 5 s): within 1 s of the
    %% node's own time, less what its schedulers waited for a CPU other
    %% processes had.  (The figures in the reason: CI prints only its
    %% first terms.)
    Ms = erlang:monotonic_time(millisecond) - T0,
    {Waited0, Threads} = ?L:timer_waited_ms(Sched0, ?L:sched_times()),
    Waited = min(Waited0, Ms),
    ct:pal("stop/1 from the handler returned after ~p ms, ~p ms of it "
           "waiting for a CPU; threads (name, ms run, ms waiting): ~p",
           [Ms, Waited, Threads]),
    Ms - Waited < 1000 orelse
        ct:fail("stop/1 from the handler returned after ~b ms, ~b ms of it "
                "waiting for a CPU: ~b ms of the node's time, not < 1000",
                [Ms, Waited, Ms - Waited]),
    receive {handler_done, H, _} -> ok after 2000 -> ct:fail(not_ended) end,
    ?assertEqual({error, not_found}, beamprobe:stop(S)),
    ?W:stop_worker(W).

%% A handler that crashes: every event meant for it is delivered or
%% counted as dropped (per handler and in the summary); the batches left
%% in its mailbox (up to 64 here) are dropped, neither delivered nor still
%% in flight.
handler_crash_counted(_Config) ->
    N = 5000,
    W = ?W:start_worker(),
    S = crashed_handler_session(W),
    ?W:run(W, fun() -> [?W:tick(I) || I <- lists:seq(1, N - 100)] end),
    Sum = stop(S),
    ?W:stop_worker(W),
    ?assertEqual(0, total(Sum)),
    [#{delivered := D, dropped := Dr, in_flight := F}] =
        maps:get(handlers, Sum),
    ct:pal("delivered ~p, dropped ~p, in_flight ~p", [D, Dr, F]),
    ?assert(Dr > 0),
    ?assertEqual(0, F),
    ?assert(D =< 10), % at most the batch it crashed on
    ?assertEqual(N, D + Dr),
    %% The cause: lost with the handler, none for want of a credit.
    ?assertMatch([#{handler_down := Dr, slow_output := 0}],
                 maps:get(handlers, Sum)).

%% A session on worker W whose handler (batches of 10, 64 credits)
%% crashed on its first batch of the 100 calls W made.
crashed_handler_session(W) ->
    S = start(#{procs => [W], calls => [{?W, tick, 1}], return => false,
                exceptions => false, args => arity,
                output => {handler, ?MODULE, #{parent => self(),
                                               mode => crash},
                           #{batch => 10, credits => 64}}}),
    H = handler_pid(),
    Ref = monitor(process, H),
    ?W:run(W, fun() -> [?W:tick(I) || I <- lists:seq(1, 100)] end),
    receive {'DOWN', Ref, process, H, _} -> ok
    after 5000 -> ct:fail(handler_did_not_crash)
    end,
    S.

%% info/1 while the session runs, after its handler crashed holding
%% credits and no event came since: the batches it will never handle are
%% dropped (handler_down), not in flight.  Before, info/1 said in_flight
%% 100 until the stop (the collector finds a dead handler at its next
%% send, or once a second while it holds no credit: neither came).
handler_crash_info_now(_Config) ->
    W = ?W:start_worker(),
    S = crashed_handler_session(W),
    timer:sleep(200),
    {ok, #{handlers := [A]}} = beamprobe:info(S),
    ct:log("info: ~p", [A]),
    ?assertMatch(#{delivered := 0, in_flight := 0, dropped := 100,
                   handler_down := 100, slow_output := 0}, A),
    _ = stop(S),
    ?W:stop_worker(W).

%%% ------------------------------------------------------------------------
%%% Item 5: idle sessions, the session cap
%%% ------------------------------------------------------------------------

%% 40 idle sessions: their collector threads must sleep, not poll.  With
%% a 2 ms poll each collector switched context ~500 times a second; now
%% an idle one wakes ~10 times a second (its 100 ms flush).  Measured on
%% the collector threads themselves (/proc/self/task), so the rest of the
%% node (and the other engineers' tests on the machine) do not count.
idle_sessions_sleep(Config) ->
    NS = 40,
    Ps = [spawn_link(fun() -> receive stop -> ok end end)
          || _ <- lists:seq(1, NS)],
    Ss = [start(#{procs => [P], calls => [{?W, tick, 1}],
                  output => {file, dir(Config, "idle" ++
                                           integer_to_list(I))}})
          || {I, P} <- lists:zip(lists:seq(1, NS), Ps)],
    timer:sleep(500), %% past the collectors' short poll after start
    {Sw0, Cpu0} = collectors(),
    timer:sleep(2000),
    {Sw1, Cpu1} = collectors(),
    Switches = Sw1 - Sw0,
    Ticks = Cpu1 - Cpu0,
    PerSessionPerSec = Switches / NS / 2,
    %% Ring memory mapped ahead (c_src/bp_prefault.h): an idle session's
    %% slots get their header and one 1 MiB window, not their 8 MiB ring.
    Mapped = lists:sum([maps:get(prefaulted, element(2, beamprobe:info(S)))
                        || S <- Ss]),
    ct:pal("~p idle sessions over 2 s: ~p context switches (~.1f per "
           "session per second), ~p clock ticks of CPU; ring memory mapped "
           "ahead ~p bytes",
           [NS, Switches, PerSessionPerSec, Ticks, Mapped]),
    _ = [stop(S) || S <- Ss],
    [P ! stop || P <- Ps],
    ?assert(Mapped =< NS * 2 * (1024 + 64) * 1024), % at most 2 slots each
    ?assert(PerSessionPerSec < 50),
    %% 2 s x 100 ticks/s: a generous 2 % of one core for 40 sessions.
    ?assert(Ticks =< 4).

%% Sum of voluntary context switches and of utime + stime (clock ticks)
%% of this node's collector threads.
collectors() ->
    Tasks = filelib:wildcard("/proc/self/task/*"),
    lists:foldl(
      fun(T, {Sw, Cpu} = Acc) ->
              case file:read_file(filename:join(T, "comm")) of
                  {ok, <<"beamprobe_colle", _/binary>>} ->
                      {ok, St} = file:read_file(filename:join(T, "status")),
                      {match, [V]} = re:run(St, "voluntary_ctxt_switches:"
                                            "\\s+([0-9]+)",
                                            [{capture, all_but_first,
                                              binary}]),
                      {ok, Stat} = file:read_file(filename:join(T, "stat")),
                      [_, After] = binary:split(Stat, <<") ">>),
                      F = binary:split(After, <<" ">>, [global]),
                      U = binary_to_integer(lists:nth(12, F)),
                      S = binary_to_integer(lists:nth(13, F)),
                      {Sw + binary_to_integer(V), Cpu + U + S};
                  _ -> Acc
              end
      end, {0, 0}, Tasks).

%% The cap: the (Max+1)th session gets {too_many_sessions, Max} and leaves
%% nothing behind (no directory, no trace state, no session).
session_cap(Config) ->
    ok = application:set_env(beamprobe, max_sessions, 3),
    Ps = [spawn_link(fun() -> receive stop -> ok end end)
          || _ <- lists:seq(1, 4)],
    Spec = fun(P, I) -> #{procs => [P], calls => [{?W, add, 2}],
                          output => {file, dir(Config, "cap" ++
                                                   integer_to_list(I))}}
           end,
    Ss = [start(Spec(P, I)) || {I, P} <- lists:zip([1, 2, 3],
                                                   lists:sublist(Ps, 3))],
    ?assertEqual(3, beamprobe_nif:live_sessions()),
    P4 = lists:last(Ps),
    ?assertEqual({error, {too_many_sessions, 3}},
                 beamprobe:start(Spec(P4, 4))),
    ?assertMatch({match, _}, re:run(beamprobe:format_error(
                                      {too_many_sessions, 3}),
                                    "too many sessions.*max_sessions")),
    ?assert(?L:dir_absent_or_empty(dir(Config, "cap4"))),
    ?assertEqual({flags, []}, erlang:trace_info(P4, flags)),
    ?assertEqual(3, length(beamprobe:list())),
    _ = stop(hd(Ss)),
    ?assertEqual(2, beamprobe_nif:live_sessions()),
    S4 = start(Spec(P4, 5)),
    _ = [stop(S) || S <- [S4 | tl(Ss)]],
    ?assertEqual(0, beamprobe_nif:live_sessions()),
    [P ! stop || P <- Ps].

%% 20 concurrent starts under a cap of 5: exactly 5 are accepted.
session_cap_concurrent(Config) ->
    ok = application:set_env(beamprobe, max_sessions, 5),
    Self = self(),
    Ps = [spawn_link(fun() -> receive stop -> ok end end)
          || _ <- lists:seq(1, 20)],
    Gate = make_ref(),
    Starters =
        [spawn_link(fun() ->
                            receive Gate -> ok end,
                            R = beamprobe:start(
                                  #{procs => [P], calls => [{?W, add, 2}],
                                    output => {file, dir(Config, "c" ++
                                                   integer_to_list(I))}}),
                            Self ! {started, self(), R},
                            %% A session ends with its owner: stay.
                            receive stop -> ok end
                    end)
         || {I, P} <- lists:zip(lists:seq(1, 20), Ps)],
    [S ! Gate || S <- Starters],
    Rs = [receive {started, S, R} -> R after 30000 -> timeout end
          || S <- Starters],
    Ok = [S || {ok, S} <- Rs],
    Refused = [R || {error, {too_many_sessions, 5}} = R <- Rs],
    ct:pal("~p accepted, ~p refused: ~p", [length(Ok), length(Refused),
                                           Rs -- Refused]),
    ?assertEqual(5, length(Ok)),
    ?assertEqual(15, length(Refused)),
    ?assertEqual(5, beamprobe_nif:live_sessions()),
    _ = [stop(S) || S <- Ok],
    ?assertEqual(0, beamprobe_nif:live_sessions()),
    [P ! stop || P <- Ps ++ Starters].

%%% ------------------------------------------------------------------------
%%% Item 9: an event larger than the default packet
%%% ------------------------------------------------------------------------

%% capture bytes 65536: a call whose arguments render to 65,536 bytes is
%% larger than a 64 KiB packet.  It must be in the file (the session's
%% packets are sized for its largest event), not counted as written and
%% silently missing.
event_larger_than_packet(Config) ->
    Dir = dir(Config, "big"),
    W = ?W:start_worker(),
    %% 2000 binaries of 60 bytes: ~130 KB of text, cut at 65536.
    Big = [binary:copy(<<"a">>, 60) || _ <- lists:seq(1, 2000)],
    S = start(#{procs => [W], calls => [{?W, sink, 1}], return => false,
                exceptions => false,
                capture => #{bytes => 65536, list => 4096},
                output => {file, Dir}}),
    ?W:run(W, fun() -> [?W:sink(Big) || _ <- [1, 2, 3]] end),
    Sum = stop(S),
    ?W:stop_worker(W),
    Calls = ?L:events(?L:trace(Dir), "call"),
    Sizes = [byte_size(?L:field(E, "args")) || E <- Calls],
    ct:pal("args sizes in the file: ~p", [Sizes]),
    ?assertEqual(0, total(Sum)),
    ?assertEqual(3, maps:get(events, Sum)),
    ?assertEqual(3, length(Calls)),
    [?assert(Sz > 65000) || Sz <- Sizes].

%%% ------------------------------------------------------------------------
%%% Item 10: sink faults
%%% ------------------------------------------------------------------------

%% The disk fills up mid-trace (a 512 KiB tmpfs): babeltrace2 reads the
%% trace, the summary's events are exactly the events in the files, the
%% rest is counted as io_error losses.
disk_full(Config) ->
    Mnt = dir(Config, "mnt"),
    ok = file:make_dir(Mnt),
    case os:cmd("mount -t tmpfs -o size=512k tmpfs '" ++ Mnt ++
                    "' 2>&1 && echo MOUNTED") of
        "MOUNTED\n" ->
            try disk_full_run(Mnt)
            after os:cmd("umount -l '" ++ Mnt ++ "'")
            end;
        Out ->
            {skip, "cannot mount a tmpfs (need root and CAP_SYS_ADMIN): "
             ++ Out}
    end.

disk_full_run(Mnt) ->
    Dir = filename:join(Mnt, "trace"),
    N = 100000,
    Ps = [?W:start_looper(self(), fun() -> ?W:loop_tick(1, N) end)
          || _ <- [1, 2]],
    S = start(#{procs => Ps, calls => [{?W, tick, 1}], return => false,
                exceptions => false, args => full,
                output => {file, Dir}}),
    ok = ?W:go(Ps),
    [ok, ok] = ?W:wait_done(Ps, 60000),
    Sum = stop(S),
    #{events := Ev, io_error := IoErr} = Sum,
    ?assertMatch({error, {file, enospc}}, IoErr),
    ?assert(dropped(Sum, io_error) > 0),
    Calls = ?L:count(?L:trace(Dir), "call"),
    ct:pal("summary events ~p, babeltrace2 reads ~p calls, io_error "
           "losses ~p", [Ev, Calls, dropped(Sum, io_error)]),
    ?assertEqual(Ev, Calls).

%% rm -rf of the output directory mid-trace: reported as an io_error,
%% and the events written into the removed files are counted as lost.
dir_removed(Config) ->
    Dir = dir(Config, "removed"),
    N = 300000,
    Ps = [?W:start_looper(self(), fun() -> ?W:loop_tick(1, N) end)
          || _ <- [1]],
    S = start(#{procs => Ps, calls => [{?W, tick, 1}], return => false,
                exceptions => false, args => arity, buffer => 1 bsl 24,
                output => {file, Dir}}),
    ok = ?W:go(Ps),
    timer:sleep(50),
    _ = os:cmd("rm -rf '" ++ Dir ++ "'; rm -rf '" ++ Dir ++ "'"),
    [ok] = ?W:wait_done(Ps, 60000),
    timer:sleep(300),
    Sum = stop(S),
    #{events := Ev, io_error := IoErr} = Sum,
    ct:pal("events ~p, io_error ~p, lost ~p", [Ev, IoErr,
                                                maps:get(dropped, Sum)]),
    ?assertNotEqual(none, IoErr),
    ?assert(dropped(Sum, io_error) > 0),
    ?assertEqual(false, filelib:is_dir(Dir)),
    ?assertEqual(0, Ev).

%% A stream file that cannot be created (a directory is in its way):
%% its events are lost (io_error), not counted as written.  `procs =>
%% new': no event at all before the directories are in place.
stream_not_creatable(Config) ->
    Dir = dir(Config, "blocked"),
    S = start(#{procs => new, calls => [{?W, tick, 1}], return => false,
                exceptions => false, output => {file, Dir}}),
    [ok = file:make_dir(filename:join(Dir, stream_name(I)))
     || I <- lists:seq(0, 255)],
    burst(1000),
    _ = ?L:wait_ended(S, 5000),
    Sum = stop(S),
    ?assertMatch({error, {file, eexist}}, maps:get(io_error, Sum)),
    ?assertEqual(0, maps:get(events, Sum)),
    ?assert(dropped(Sum, io_error) >= 1).

%% The file sink cannot write (as in stream_not_creatable) while a handler
%% sink gets every event: the handler is told of no loss.  Before, it was
%% told the file's io_error losses as its own ("% beamprobe: dropped 1000
%% events (write error: 1000)" in the shell printer, which had printed
%% all 1000).
handler_not_told_file_losses(Config) ->
    Dir = dir(Config, "blocked_h"),
    S = start(#{procs => new, calls => [{?W, tick, 1}], return => false,
                exceptions => false,
                output => [{file, Dir},
                           {handler, beamprobe_test_handler,
                            #{parent => self(), forward => counts}}]}),
    H = receive {handler_init, P} -> P after 5000 -> ct:fail(no_handler) end,
    [ok = file:make_dir(filename:join(Dir, stream_name(I)))
     || I <- lists:seq(0, 255)],
    burst(1000),
    _ = ?L:wait_ended(S, 5000),
    Sum = stop(S),
    Totals = receive {handler_done, H, _, T} -> T
             after 10000 -> ct:fail(handler_not_done)
             end,
    ct:log("summary ~p~nhandler ~p", [Sum, Totals]),
    ?assert(dropped(Sum, io_error) >= 1),
    [#{delivered := D, dropped := 0}] = maps:get(handlers, Sum),
    ?assert(D >= 1),
    %% What it got and what it was told it lost.
    ?assertMatch(#{calls := D, dropped := 0, dropped_events := 0}, Totals).

%% A stream file deleted, or cut at a packet's end, after the session
%% stopped: the metadata lists what each file held (env stream_files),
%% so `info' and `stats' count its events as lost ("missing from the
%% files") and exit 2 naming the file, where they said 0 lost before.
%% The oracle for what the file held is babeltrace2 on the intact copy.
stream_file_removed_after(Config) ->
    Dir = dir(Config, "whole"),
    S = start(#{procs => new, calls => [{?W, tick, 1}], return => false,
                exceptions => false, output => {file, Dir}}),
    _ = [burst(2000) || _ <- lists:seq(1, 4)],
    #{events := 8000} = stop(S),
    {ok, Meta} = file:read_file(filename:join(Dir, "metadata")),
    ?assertMatch({match, _}, re:run(Meta, "stream_files = \"thread-")),
    {0, Info} = ?L:cli(["info", Dir]),
    ?assertMatch({match, _}, re:run(Info, "lost events:  0\n")),
    %% The stream with the most calls, by babeltrace2.
    Calls = [T || #{name := <<"call">>, thread := T} <- ?L:trace(Dir)],
    ByThread = lists:foldl(fun(T, M) -> maps:update_with(T, fun(X) -> X + 1 end,
                                                        1, M)
                           end, #{}, Calls),
    [{T, N} | _] = lists:reverse(lists:keysort(2, maps:to_list(ByThread))),
    File = filename:join(Dir, stream_name(T)),
    ct:pal("calls by stream ~p; removing ~s (~p calls)", [ByThread, File, N]),
    Gone = dir(Config, "gone"),
    ok = copy_dir(Dir, Gone),
    ok = file:delete(filename:join(Gone, stream_name(T))),
    {2, Out} = ?L:cli(["info", Gone]),
    Lost = integer_to_list(N),
    ?assertMatch({match, _}, re:run(Out, "lost events:  " ++ Lost ++ "\n")),
    ?assertMatch({match, _}, re:run(Out, "missing from the files +" ++ Lost)),
    ?assertMatch({match, _}, re:run(Out, stream_name(T) ++ ": missing")),
    {2, Js} = ?L:cli(["stats", "--json", Gone]),
    ?assertMatch({match, _}, re:run(Js, "\"missing_from_files\":" ++ Lost)),
    %% Cut after its first packet with events: what follows is missing.
    Cut = dir(Config, "cut"),
    ok = copy_dir(Dir, Cut),
    {ok, Bin} = file:read_file(File),
    Keep = packet_end(Bin, 2),
    ?assert(Keep < byte_size(Bin)),
    ok = file:write_file(filename:join(Cut, stream_name(T)),
                         binary:part(Bin, 0, Keep)),
    Left = length([x || #{name := <<"call">>, thread := T1} <- ?L:trace(Cut),
                        T1 =:= T]),
    {2, Out2} = ?L:cli(["info", Cut]),
    ct:pal("~s", [Out2]),
    ?assertMatch({match, _}, re:run(Out2, "missing from the files +"
                                    ++ integer_to_list(N - Left))),
    ?assertMatch({match, _}, re:run(Out2, "cut: [0-9]+ of the [0-9]+ bytes")).

%% The end of the first K packets of a stream file (packet_size, in bits,
%% at byte 48 of each header: docs/format.md).
packet_end(Bin, K) -> packet_end(Bin, K, 0).
packet_end(_Bin, 0, Off) -> Off;
packet_end(Bin, K, Off) ->
    <<_:Off/binary, _:48/binary, Bits:64/little, _/binary>> = Bin,
    packet_end(Bin, K - 1, Off + Bits div 8).

copy_dir(From, To) ->
    ok = file:make_dir(To),
    {ok, Names} = file:list_dir(From),
    _ = [{ok, _} = file:copy(filename:join(From, F), filename:join(To, F))
         || F <- Names],
    ok.

%% A hostile stream_files list (a path outside the trace, malformed
%% entries, a number past 64 bits, a file listed longer than it is): the
%% reader names each problem, opens nothing outside the directory, and
%% exits 2 instead of crashing or trusting it.
stream_files_planted_entry(Config) ->
    Dir = dir(Config, "planted"),
    S = start(#{procs => new, calls => [{?W, tick, 1}], return => false,
                exceptions => false, output => {file, Dir}}),
    burst(100),
    _ = stop(S),
    MetaFile = filename:join(Dir, "metadata"),
    {ok, Meta} = file:read_file(MetaFile),
    Bad = <<"\tstream_files = \"../../../etc/passwd:1:1:1,thread-x:1:1:1,"
            "thread-999:99999999999999999999:1:1,thread-998:5:7:0,,:::\";\n">>,
    Meta1 = re:replace(Meta, "\tstream_files = \"[^\"]*\";\n", Bad,
                       [{return, binary}]),
    ?assertNotEqual(Meta, Meta1),
    ok = file:write_file(MetaFile, Meta1),
    {2, Out} = ?L:cli(["info", Dir]),
    ct:pal("~s", [Out]),
    ?assertMatch({match, _}, re:run(Out, "malformed entry '../../../etc/passwd")),
    ?assertMatch({match, _}, re:run(Out, "malformed entry 'thread-x")),
    ?assertMatch({match, _}, re:run(Out, "malformed entry 'thread-999")),
    ?assertMatch({match, _}, re:run(Out, "thread-998: missing: the session "
                                    "wrote 7 events")),
    ?assertMatch({match, _}, re:run(Out, "lost events:  7\n")).

%% N calls of tick/1 in a new process.
burst(N) ->
    Self = self(),
    P = spawn(fun() -> [?W:tick(I) || I <- lists:seq(1, N)],
                       Self ! {burst_done, self()}
              end),
    receive {burst_done, P} -> ok after 30000 -> ct:fail(burst) end.

stream_name(I) ->
    lists:flatten(io_lib:format("thread-~3..0B", [I])).

%%% ------------------------------------------------------------------------
%%% Item 19: links planted in the output directory, modes
%%% ------------------------------------------------------------------------

%% A symlink planted as `metadata' (before the start) or as a stream file
%% (after it): nothing outside the directory is written, the error says
%% what is wrong.
planted_symlinks(Config) ->
    Victim = dir(Config, "victim"),
    ok = file:write_file(Victim, <<"precious">>),
    %% metadata -> victim in a pre-created empty directory.
    D1 = dir(Config, "planted1"),
    ok = file:make_dir(D1),
    ok = file:change_mode(D1, 8#700),
    ok = file:make_symlink(Victim, filename:join(D1, "metadata")),
    R1 = beamprobe:start(#{procs => [self()], calls => [{?W, tick, 1}],
                           output => {file, D1}}),
    ct:pal("metadata planted: ~p", [R1]),
    ?assertMatch({error, {_, D1}}, R1),
    ?assertEqual({ok, <<"precious">>}, file:read_file(Victim)),
    %% The output directory itself a symlink to a directory.
    Real = dir(Config, "real"),
    ok = file:make_dir(Real),
    D2 = dir(Config, "planted2"),
    ok = file:make_symlink(Real, D2),
    ?assertEqual({error, {unwritable, D2, symlink}},
                 beamprobe:start(#{procs => [self()],
                                   calls => [{?W, tick, 1}],
                                   output => {file, D2}})),
    ?assertEqual({ok, []}, file:list_dir(Real)),
    ?assertMatch({match, _}, re:run(beamprobe:format_error(
                                      {unwritable, D2, symlink}),
                                    "symbolic link")),
    %% thread-NNN -> victim, planted after the start.
    D3 = dir(Config, "planted3"),
    S = start(#{procs => new, calls => [{?W, tick, 1}], return => false,
                exceptions => false, output => {file, D3}}),
    [ok = file:make_symlink(Victim, filename:join(D3, stream_name(I)))
     || I <- lists:seq(0, 255)],
    burst(100),
    _ = ?L:wait_ended(S, 5000),
    Sum = stop(S),
    ?assertEqual({ok, <<"precious">>}, file:read_file(Victim)),
    ?assertMatch({error, {file, eexist}}, maps:get(io_error, Sum)),
    ?assertEqual(0, maps:get(events, Sum)),
    ?assert(dropped(Sum, io_error) >= 1).

%% An existing directory is used only if it is ours alone.
unsafe_existing_dir(Config) ->
    D = dir(Config, "shared"),
    ok = file:make_dir(D),
    ok = file:change_mode(D, 8#777),
    ?assertEqual({error, {unwritable, D, group_or_world_writable}},
                 beamprobe:start(#{procs => [self()],
                                   calls => [{?W, tick, 1}],
                                   output => {file, D}})),
    ok = file:change_mode(D, 8#700),
    S = start(#{procs => [self()], calls => [{?W, tick, 1}],
                output => {file, D}}),
    _ = stop(S),
    ?assertMatch({ok, _}, file:read_file(filename:join(D, "metadata"))).

%% umask 000 (in a node of its own): the directory is 0700 and the files
%% 0600 from the first instant a watcher can see them.
umask_000(Config) ->
    Dir = dir(Config, "umask"),
    Erl = os:find_executable("erl"),
    Pa = lists:usort([filename:dirname(code:which(beamprobe)),
                      filename:dirname(code:which(?MODULE))]),
    Cmd = "umask 000; exec '" ++ Erl ++ "' -noshell " ++
        lists:append(["-pa '" ++ P ++ "' " || P <- Pa]) ++
        "-run " ++ atom_to_list(?MODULE) ++ " umask_child '" ++ Dir ++ "'",
    Out = os:cmd(Cmd),
    ct:pal("child: ~s", [Out]),
    case re:run(Out, "MODES (.*)\n", [{capture, all_but_first, list}]) of
        {match, [Text]} ->
            {ok, Toks, _} = erl_scan:string(Text ++ "."),
            {ok, Modes} = erl_parse:parse_term(Toks),
            #{dir := DM, metadata := MM, stream := SM, umask := U} = Modes,
            ?assertEqual(0, U),
            ?assertEqual(8#700, DM),
            ?assertEqual(8#600, MM),
            ?assertEqual(8#600, SM);
        nomatch ->
            ct:fail({child_failed, Out})
    end.

%% @private The child node: watchers record the first mode they see of the
%% directory and the files, while a session is started and traces.
-spec umask_child([string()]) -> no_return().
umask_child([Dir]) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    Self = self(),
    Watch = fun(Path) ->
                    spawn_link(fun() -> Self ! {mode, Path, first_mode(Path)}
                               end)
            end,
    Md = filename:join(Dir, "metadata"),
    Watch(Dir),
    Watch(Md),
    W = spawn_link(fun() -> receive go -> ?W:tick(1) end,
                            receive stop -> ok end end),
    StreamWatcher = spawn_link(fun() -> Self ! {mode, stream,
                                                first_stream_mode(Dir)}
                               end),
    {ok, S} = beamprobe:start(#{procs => [W], calls => [{?W, tick, 1}],
                                output => {file, Dir}}),
    W ! go,
    Get = fun(P) -> receive {mode, P, M} -> M after 10000 -> timeout end
          end,
    DM = Get(Dir),
    MM = Get(Md),
    SM = Get(stream),
    {ok, _} = beamprobe:stop(S),
    unlink(StreamWatcher),
    Umask = umask_now(),
    io:format("MODES ~w~n", [#{dir => DM, metadata => MM, stream => SM,
                               umask => Umask}]),
    halt(0).

%% Spins until a stream file exists in Dir; its permission bits then.
first_stream_mode(Dir) ->
    first_stream_mode(Dir, erlang:monotonic_time(millisecond)).

first_stream_mode(Dir, T0) ->
    Found = case file:list_dir(Dir) of
                {ok, Fs} -> [F || "thread-" ++ _ = F <- Fs];
                _ -> []
            end,
    case Found of
        [F | _] -> first_mode(filename:join(Dir, F));
        [] ->
            case erlang:monotonic_time(millisecond) - T0 > 8000 of
                true -> timeout;
                false -> first_stream_mode(Dir, T0)
            end
    end.

%% Spins until Path exists; its permission bits then.
first_mode(Path) -> first_mode(Path, erlang:monotonic_time(millisecond)).

first_mode(Path, T0) ->
    case file:read_link_info(Path) of
        {ok, I} -> element(8, I) band 8#777;
        _ ->
            case erlang:monotonic_time(millisecond) - T0 > 8000 of
                true -> timeout;
                false -> first_mode(Path, T0)
            end
    end.

umask_now() ->
    list_to_integer(string:trim(os:cmd("sh -c umask")), 8).

%%% ------------------------------------------------------------------------
%%% Item 11: every loss visible to babeltrace2
%%% ------------------------------------------------------------------------

%% Heavy ring_full losses with a tiny buffer, many of them before a
%% stream's first packet: the sum of babeltrace2's "discarded events"
%% notices equals the session's total.
discarded_visible_to_babeltrace(Config) ->
    Dir = dir(Config, "discarded"),
    N = 200000,
    Ps = [?W:start_looper(self(), fun() -> ?W:loop_tick(1, N) end)
          || _ <- [1, 2]],
    S = start(#{procs => Ps, calls => [{?W, tick, 1}], return => false,
                exceptions => false, args => full, buffer => 16384,
                output => {file, Dir}}),
    ok = ?W:go(Ps),
    [ok, ok] = ?W:wait_done(Ps, 60000),
    Sum = stop(S),
    {0, _Out, Err} = ?L:babeltrace(Dir),
    {match, Ns} = re:run(Err, "discarded ([0-9]+) events",
                         [global, {capture, all_but_first, binary}]),
    Seen = lists:sum([binary_to_integer(X) || [X] <- Ns]),
    ct:pal("babeltrace2: ~p discarded in ~p notices; session: ~p",
           [Seen, length(Ns), maps:get(dropped, Sum)]),
    ?assert(dropped(Sum, ring_full) > 0),
    ?assertEqual(total(Sum), Seen).
