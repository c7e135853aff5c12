%%% @doc Tests of Erlang handler sinks (flow control, several sinks,
%%% per-sink filters), of concurrent sessions and clear/0, and of the shell
%%% API from a remote shell, through what a user sees: the lines printed
%%% into an io server and the events a handler is given.  The shared
%%% helpers (capture io server, traced module `bpsh_target') are in
%%% beamprobe_shell_lib.
%%%
%%% In remote_shell the session runs on a peer node while the lines are
%%% printed by a capture process on this node, as with `erl -remsh'.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_handler_SUITE -logdir _build/ct_logs
-module(beamprobe_handler_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([handler_flow_control/1, handler_flow_control_credits_2/1,
         handler_every_event/1, handler_told_every_loss/1,
         handler_order_across_threads/1,
         handler_order_collector_paused/1, stop_reads_nothing_in_caller/1,
         several_sinks/1, sink_filter/1, handler_batch_bytes/1, handler_waiting_bytes/1,
         handler_finish_wait_shared/1,
         concurrent_sessions/1, clear_restores/1, remote_shell/1]).
%% Peer-side helper (spawned by MFA).
-export([remote_shell_proc/3]).
%% Traced by handler_batch_bytes.
-export([big/1]).

%% The largest capture (64 KiB of text per argument).
-define(MAX_CAPTURE, #{depth => 64, list => 4096, binary => 65536,
                       bytes => 65536}).
-define(L, beamprobe_test_lib).
-define(T, bpsh_target).
-define(H, beamprobe_test_handler).

-import(beamprobe_shell_lib,
        [compile_src/1, cap/0, cap_text/1, event_lines/1, wait_text/3,
         what/1, ok_calls/3, session_of/1, handler_pid/0,
         handler_done/1, handler_events/1, worker/0, run/2,
         no_pattern/1, beamprobe_tracer/1, target_src/0]).
-import(beamprobe_test_lib,
        [start/1, stop/1]).

%%% ------------------------------------------------------------------------
%%% Setup
%%% ------------------------------------------------------------------------

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, handlers}, {group, sessions}, remote_shell].

groups() ->
    [{handlers, [], [handler_flow_control, handler_flow_control_credits_2,
                     handler_every_event, handler_told_every_loss,
                     handler_order_across_threads,
                     handler_order_collector_paused,
                     stop_reads_nothing_in_caller,
                     several_sinks, sink_filter, handler_batch_bytes,
                     handler_waiting_bytes,
                     handler_finish_wait_shared]},
     {sessions, [], [concurrent_sessions, clear_restores]}].

init_per_suite(Config) ->
    beamprobe_shell_lib:init_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    beamprobe_shell_lib:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    beamprobe_shell_lib:clear_trace_state().

%%% ------------------------------------------------------------------------
%%% 5-7. Handlers
%%% ------------------------------------------------------------------------

handler_flow_control(Config) ->
    flow_control(Config, #{}, 4).

handler_flow_control_credits_2(Config) ->
    flow_control(Config, #{credits => 2}, 2).

%% A slow handler (50 ms per batch) under a firehose: its mailbox never
%% holds more than `credits' batches, the excess is dropped and counted,
%% the handler is told, and the node's memory stays bounded.
flow_control(_Config, SinkOpts, Credits) ->
    erlang:garbage_collect(),
    Mem0 = erlang:memory(total),
    Until = erlang:monotonic_time(millisecond) + 2000,
    Loopers = [beamprobe_workload:start_looper(
                 self(), fun() -> ?T:spin(f, Until) end)
               || _ <- lists:seq(1, 4)],
    S = start(#{procs => Loopers, calls => [{?T, f, 1}],
                limits => #{seconds => 5},
                output => [{handler, ?H, #{sleep => 50, parent => self(),
                                           forward => counts},
                            SinkOpts}]}),
    H = handler_pid(),
    beamprobe_workload:go(Loopers),
    {MaxQ, Samples} = sample_queue(H, Until, 0, 0),
    _ = beamprobe_workload:wait_done(Loopers, 10000),
    Mem1 = erlang:memory(total),
    Sum = stop(S),
    {_Reason, Totals} = handler_done(H),
    ct:log("max queue ~b (~b samples), memory +~b KB~nhandler: ~p",
           [MaxQ, Samples, (Mem1 - Mem0) div 1024, Totals]),
    ?assert(Samples > 20),
    ?assert(MaxQ =< Credits),
    #{handlers := [#{delivered := Delivered, dropped := Dropped,
                     in_flight := InFlight}],
      events := Events} = Sum,
    ?assert(Dropped > 0),
    ?assert(Delivered > 0),
    ?assert(InFlight =< Credits * 1000), % at most `credits' batches
    ?assertEqual(Events, Delivered + Dropped + InFlight),
    %% What the handler was given is what the session counts as delivered
    %% (acknowledged) plus what was in its mailbox at stop (in flight,
    %% handled after the summary was taken).
    HandlerGot = Delivered + InFlight,
    ?assertMatch(#{events := HandlerGot, bad := 0}, Totals),
    %% It was told it lost events.
    ?assertMatch(#{dropped_events := DE, dropped := D} when DE > 0 andalso
                                                            D > 0, Totals),
    ?assert(Mem1 - Mem0 < 50 * 1024 * 1024),
    ?L:assert_no_trace_state(Loopers -- [P || P <- Loopers,
                                             not is_process_alive(P)],
                             [{?T, f, 1}]).

sample_queue(H, Until, Max, N) ->
    case erlang:monotonic_time(millisecond) < Until of
        false -> {Max, N};
        true ->
            Q = case erlang:process_info(H, message_queue_len) of
                    {message_queue_len, L} -> L;
                    undefined -> ct:fail(handler_died)
                end,
            timer:sleep(10),
            sample_queue(H, Until, max(Q, Max), N + 1)
    end.

%% A handler that keeps up gets every event.
handler_every_event(_Config) ->
    W = worker(),
    {S, H} = f_to_handler(W),
    %% 10,000 calls at a modest rate: 500 every 5 ms.
    [ok = run(W, fun() -> ?T:loop(f, I, I + 499), timer:sleep(5) end)
     || I <- lists:seq(1, 10000, 500)],
    wait_events(S, 10000),
    Sum = stop(S),
    {requested, Totals} = handler_done(H),
    Evs = handler_events(H),
    %% The last batches may still be in flight (unacknowledged) when the
    %% summary is taken: the handler handles them after stop.
    ?assertMatch(#{events := 10000,
                   dropped := #{total := 0},
                   handlers := [#{delivered := Dl, dropped := 0,
                                  in_flight := Fl}]}
                   when Dl + Fl =:= 10000, Sum),
    ?assertMatch(#{calls := 10000, events := 10000, dropped_events := 0,
                   bad := 0}, Totals),
    ?assertEqual(10000, length(Evs)),
    ?assertEqual([{call, W, <<"bpsh_target:f/1">>}],
                 lists:usort([{E, P, M} || #{event := E, pid := P, mfa := M}
                                               <- Evs])),
    %% In order, with their arguments.
    ?assertEqual(args_text(10000), [A || #{args := A} <- Evs]),
    beamprobe_workload:stop_worker(W).

%% A handler is told every event it lost, the last ones too: a slow
%% handler (300 ms per one-event batch) holding no credit when the session
%% stops.  Before, the losses since its last report waited for a credit
%% that never came (the session was over): this handler was told of none
%% of its 96 lost events, and the shell printer's "dropped N events" lines
%% added up to less than the summary's count.
handler_told_every_loss(_Config) ->
    W = worker(),
    S = start(#{procs => [W], calls => [{?T, f, 1}], return => false,
                exceptions => false,
                output => {handler, ?H, #{parent => self(), sleep => 300,
                                          forward => counts},
                           #{batch => 1}}}),
    H = handler_pid(),
    ok = run(W, fun() -> ?T:loop(f, 1, 100) end),
    wait_events(S, 100),
    Sum = stop(S),
    {requested, Totals} = handler_done(H),
    ct:log("summary ~p~nhandler ~p", [maps:get(handlers, Sum), Totals]),
    #{handlers := [#{delivered := Dl, dropped := Dr, in_flight := 0,
                     slow_output := Dr, handler_down := 0}]} = Sum,
    ?assertEqual(100, Dl + Dr),
    ?assert(Dr > 0),
    ?assertMatch(#{events := Dl, dropped := Dr, bad := 0}, Totals),
    beamprobe_workload:stop_worker(W).

%% A process that moves between scheduler threads writes its events into
%% one ring per thread; the handler still gets them in the order they
%% happened (the collector merges the rings by timestamp), not one
%% thread's worth after the other's.
handler_order_across_threads(_Config) ->
    case erlang:system_info(schedulers_online) of
        N when N >= 2 -> order_across_threads();
        N -> {skip, io_lib:format("~b scheduler online: a process cannot "
                                  "move between scheduler threads", [N])}
    end.

order_across_threads() ->
    check_order(order_run()).

%% 10,000 calls of f/1 by one process into a handler, in chunks of 50,
%% each chunk on the other scheduler (process_flag(scheduler, N) binds the
%% process to scheduler N): the summary and the handler's events.  No ct
%% call: also run on a peer node.
order_run() ->
    W = worker(),
    {ok, S} = beamprobe:start(#{procs => [W], calls => [{?T, f, 1}],
                                return => false, exceptions => false,
                                %% Room for every batch: order, not
                                %% flow control, is tested here.
                                output => {handler, ?H,
                                           #{parent => self()},
                                           #{credits => 20}}}),
    H = handler_pid(),
    [ok = run(W, fun() ->
                         _ = process_flag(scheduler, 1 + (I div 50) rem 2),
                         erlang:yield(),
                         ?T:loop(f, I, I + 49)
                 end)
     || I <- lists:seq(1, 10000, 50)],
    ok = run(W, fun() -> _ = process_flag(scheduler, 0), ok end),
    _ = ?L:wait_until(fun() ->
                              {ok, #{events := E}} = beamprobe:info(S),
                              E =:= 10000
                      end, 5000),
    {ok, Sum} = beamprobe:stop(S),
    {requested, _Totals} = handler_done(H),
    Evs = handler_events(H),
    beamprobe_workload:stop_worker(W),
    {Sum, Evs}.

check_order({Sum, Evs}) ->
    ct:log("summary ~p", [Sum]),
    ?assertMatch(#{threads := T} when T >= 2, Sum),
    ?assertEqual(10000, length(Evs)),
    Args = [A || #{args := A} <- Evs],
    Want = args_text(10000),
    case Args =:= Want of
        true -> ok;
        false ->
            First = hd([{I, A, B} || {I, A, B} <- lists:zip3(
                                                   lists:seq(1, 10000),
                                                   Args, Want), A =/= B]),
            ct:fail({out_of_order, First})
    end.

%% The same with the collector pausing 2 ms between two slots' heads (the
%% checked NIF's BEAMPROBE_TEST_DRAIN_GAP_US: what a collector preempted
%% there does): a process that moved between the two reads used to have
%% its events in the slot read second delivered before its earlier ones
%% in the slot read first ({out_of_order, _} at the first move).
handler_order_collector_paused(Config) ->
    case {erlang:system_info(schedulers_online), ensure_distributed()} of
        {N, _} when N < 2 ->
            {skip, io_lib:format("~b scheduler online: a process cannot "
                                 "move between scheduler threads", [N])};
        {_, {skip, _} = Skip} -> Skip;
        {_, ok} -> order_paused(Config)
    end.

order_paused(_Config) ->
    Ebin = filename:dirname(code:which(beamprobe)),
    Root = filename:dirname(Ebin),
    Make = os:cmd("make -s -C " ++ filename:join(Root, "c_src") ++ " check 2>&1"),
    Nif = filename:join(Root, "_build/c/check/beamprobe_nif"),
    case filelib:is_regular(Nif ++ ".so") of
        true -> ok;
        false -> ct:fail({checked_nif_not_built, Make})
    end,
    TestDir = filename:dirname(code:which(?MODULE)),
    {ok, Peer, Node} =
        peer:start_link(#{name => peer:random_name(),
                          args => ["-pa", Ebin, "-pa", TestDir],
                          env => [{"BEAMPROBE_NIF", Nif},
                                  {"BEAMPROBE_TEST_DRAIN_GAP_US", "2000"}]}),
    try
        [{module, M} = erpc:call(Node, code, load_binary,
                                 [M, atom_to_list(M) ++ ".erl", B])
         || {M, B} <- [compile_src(target_src())]],
        check_order(erpc:call(Node, fun order_run/0, 60000))
    after
        peer:stop(Peer)
    end.

%% stop/1 of a session with a handler makes no call in the caller that
%% another session tracing the caller's calls records: it read the
%% application env there (ets:lookup(ac_tab, {env, beamprobe,
%% handler_stop_timeout})), once per handler; a shell trace of
%% ets:lookup/2 printed those calls when clear/0 stopped another trace.
stop_reads_nothing_in_caller(Config) ->
    Dir = filename:join(?config(case_dir, Config), "trace"),
    W = worker(),
    {S, H} = f_to_handler(W),
    Watch = start(#{procs => [self()], calls => [{ets, lookup, 2}],
                    output => {file, Dir}}),
    _ = ets:lookup(ac_tab, {env, beamprobe, own_check_marker}),
    _ = stop(S),
    {requested, _} = handler_done(H),
    _ = stop(Watch),
    Args = [?L:field(E, "args") || E <- ?L:events(?L:trace(Dir), "call")],
    ct:log("ets:lookup/2 calls: ~p", [Args]),
    %% (The marker call shows that the caller's calls are recorded.)
    ?assertMatch([_], [A || A <- Args,
                            binary:match(A, <<"own_check_marker">>) =/= nomatch]),
    ?assertEqual([], [A || A <- Args,
                           binary:match(A, <<"handler_stop_timeout">>) =/= nomatch]),
    beamprobe_workload:stop_worker(W).

%% A file and a handler in one session see the same events.
several_sinks(Config) ->
    Dir = filename:join(?config(case_dir, Config), "trace"),
    W = worker(),
    S = start(#{procs => [W], calls => [{?T, f, 1}], return => false,
                output => [{file, Dir},
                           {handler, ?H, #{parent => self()}}]}),
    H = handler_pid(),
    ok = run(W, fun() -> ?T:loop(f, 1, 1000) end),
    Sum = stop(S),
    {requested, #{calls := HCalls}} = handler_done(H),
    Evs = ?L:parse(?L:babeltrace_ok(Dir)),
    FileCalls = ?L:events(Evs, "call", W),
    ?assertEqual(1000, HCalls),
    ?assertEqual(HCalls, length(FileCalls)),
    ?assertMatch(#{events := 1000, dropped := #{total := 0},
                   handlers := [#{delivered := Dl, dropped := 0,
                                  in_flight := Fl}]}
                   when Dl + Fl =:= 1000, Sum),
    ?assertEqual([iolist_to_binary(["(", integer_to_list(I), ")"])
                  || I <- lists:seq(1, 1000)],
                 [?L:field(E, "args") || E <- FileCalls]),
    beamprobe_workload:stop_worker(W).

big(_) -> ok.

%% The largest capture and batch (100,000 events) with a handler holding
%% its one credit 200 ms per batch: the ~64 KiB events made meanwhile
%% waited in one open batch, sent as one message of all of them (13 MB
%% here, about 64 MB for 1,000 events).  A batch message now holds about
%% 1 MiB of terms at most (c_src/bp_sink_handler.h
%% BP_HANDLER_BATCH_BYTES, plus one event), the rest waits in further
%% batches for credits: every event is delivered, none counted lost.
handler_batch_bytes(_Config) ->
    N = 200,
    P = big_caller(N),
    S = start(#{procs => [P], calls => [{?MODULE, big, 1}], return => false,
                args => full, buffer => 32 * 1024 * 1024,
                capture => ?MAX_CAPTURE,
                output => {handler, ?H, #{parent => self(), sleep => 200},
                           #{batch => 100000, credits => 1}}}),
    H = handler_pid(),
    P ! go,
    Delivered = fun() ->
                        {ok, #{handlers := [#{delivered := D}]}} =
                            beamprobe:info(S),
                        D
                end,
    _ = ?L:wait_until(fun() -> Delivered() >= N end, 30000),
    Sum = stop(S),
    {_, #{calls := Calls, dropped := HDropped}} = handler_done(H),
    Batches = batches(H),
    Sizes = [batch_bytes(B) || B <- Batches],
    ct:log("~b batches, bytes: ~p~nsummary: ~p", [length(Sizes), Sizes, Sum]),
    ?assertEqual(N, Calls),
    ?assertEqual(0, HDropped),
    ?assertMatch(#{events := N, dropped := #{total := 0},
                   handlers := [#{delivered := N, dropped := 0}]}, Sum),
    %% 1 MiB and one event (64 KiB of text and its map) at most.
    ?assert(lists:max(Sizes) =< 1024 * 1024 + 80 * 1024),
    ?assert(length(Sizes) >= 10),
    unlink(P),
    exit(P, kill).

%% What a handler sink holds is bounded in bytes, not only by `batch'
%% events: 1,000 calls of 64 KiB arguments (about 70 MB of maps) for a
%% handler holding its one credit (a batch takes it 30 s), batch 100,000.
%% The collector kept every one in closed batches of 1 MiB waiting for
%% credits (erlang:memory(binary) grew by 68 MB); now at most
%% BP_HANDLER_CLOSED_MAX (16) closed batches wait, then what waits is
%% dropped, counted as slow_output (c_src/bp_sink_handler.h).
handler_waiting_bytes(_Config) ->
    with_stop_timeout(100, fun waiting_bytes/0).

waiting_bytes() ->
    N = 1000,
    P = big_caller(N),
    Bin0 = erlang:memory(binary),
    S = start(#{procs => [P], calls => [{?MODULE, big, 1}], return => false,
                args => full, buffer => 32 * 1024 * 1024,
                capture => ?MAX_CAPTURE,
                output => {handler, ?H, #{parent => self(), sleep => 30000},
                           #{batch => 100000, credits => 1}}}),
    P ! go,
    %% Every call recorded and given to the handler sink.
    _ = ?L:wait_until(fun() ->
                              {ok, #{events := E}} = beamprobe:info(S),
                              E >= N
                      end, 30000),
    Held = erlang:memory(binary) - Bin0,
    {ok, #{handlers := [#{dropped := Dropped0}]}} = beamprobe:info(S),
    Sum = stop(S),
    ct:log("held ~b bytes of binaries once the ~b calls were given; "
           "dropped then ~b~nsummary: ~p", [Held, N, Dropped0, Sum]),
    #{handlers := [#{delivered := D, dropped := Dr, in_flight := F,
                     slow_output := Slow}]} = Sum,
    ?assertEqual(N, D + Dr + F),
    ?assert(Slow > 0),
    %% 17 batches of about 1 MiB waiting and one in flight, with room to
    %% spare (the binaries of the ring's events are not counted here).
    ?assert(Held < 24 * 1024 * 1024 orelse
            ct:fail({held_bytes, Held, N}) =:= ok),
    unlink(P),
    exit(P, kill).

%% Runs Fun with the application's handler_stop_timeout at Ms (how long
%% a handler still in handle_events/2 at the stop is given), then puts it
%% back as it was.
with_stop_timeout(Ms, Fun) ->
    Old = application:get_env(beamprobe, handler_stop_timeout),
    ok = application:set_env(beamprobe, handler_stop_timeout, Ms),
    try Fun()
    after
        case Old of
            {ok, V} -> application:set_env(beamprobe, handler_stop_timeout, V);
            undefined -> application:unset_env(beamprobe, handler_stop_timeout)
        end
    end.

%% At the end, batches split off by size wait up to 1 s for their
%% credits (c_src/bp_sink_handler.h BP_HANDLER_FINISH_NS): 1 s in all,
%% not 1 s per handler.  Four handlers, each holding its one credit (a
%% batch takes it 30 s), each with batches waiting: the collector waited
%% 1 s for each in turn, and stop/1 took over 4 s (9 s with the
%% handlers' 5 s to end); now about 1 s.  Every
%% event is delivered, dropped or in flight, for each handler.
handler_finish_wait_shared(_Config) ->
    %% Handlers still in handle_events/2 at the stop are killed after
    %% 100 ms (default 5 s, counted in stop/1's time).
    with_stop_timeout(100, fun finish_wait_shared/0).

finish_wait_shared() ->
    N = 100,
    K = 4,
    P = big_caller(N),
    S = start(#{procs => [P], calls => [{?MODULE, big, 1}], return => false,
                args => full, buffer => 32 * 1024 * 1024,
                capture => ?MAX_CAPTURE,
                output => [{handler, ?H, #{parent => self(), sleep => 30000},
                            #{batch => 100000, credits => 1}}
                           || _ <- lists:seq(1, K)]}),
    P ! go,
    %% Every event recorded, and each handler holds its credit.
    _ = ?L:wait_until(
          fun() ->
                  {ok, #{events := E, handlers := Hs}} = beamprobe:info(S),
                  E >= N andalso
                      lists:all(fun(#{in_flight := F}) -> F > 0 end, Hs)
          end, 30000),
    {T, {ok, Sum}} = timer:tc(fun() -> beamprobe:stop(S) end),
    ct:log("stop/1 took ~b ms~nsummary: ~p", [T div 1000, Sum]),
    #{handlers := Hs} = Sum,
    ?assertEqual(K, length(Hs)),
    [?assertEqual(N, D + Dr + F)
     || #{delivered := D, dropped := Dr, in_flight := F} <- Hs],
    ?assert(T < 3000000),
    unlink(P),
    exit(P, kill).

batches(H) ->
    receive {handler_events, H, Evs} -> [Evs | batches(H)]
    after 0 -> []
    end.

%% A batch's memory: its terms, and the off-heap bytes of its binaries.
batch_bytes(Evs) ->
    8 * erts_debug:flat_size(Evs)
        + lists:sum([byte_size(B) || E <- Evs, B <- maps:values(E),
                                     is_binary(B), byte_size(B) > 64]).

%% events => [send] on the handler: it gets sends only; the file all.
sink_filter(Config) ->
    Dir = filename:join(?config(case_dir, Config), "trace"),
    W = worker(),
    Sink = spawn(fun() -> receive stop -> ok end end),
    S = start(#{procs => [W], calls => [{?T, f, 1}], return => false,
                events => [send],
                output => [{file, Dir},
                           {handler, ?H, #{parent => self()},
                            #{events => [send]}}]}),
    H = handler_pid(),
    ok = run(W, fun() -> ?T:loop(f, 1, 50), ?T:ping(Sink, 1, 10) end),
    Sum = stop(S),
    {requested, Totals} = handler_done(H),
    HEvs = handler_events(H),
    Evs = ?L:parse(?L:babeltrace_ok(Dir)),
    ct:log("summary ~p~nhandler ~p", [Sum, Totals]),
    ?assertEqual([send], lists:usort([E || #{event := E} <- HEvs])),
    ?assertEqual(50, length(?L:events(Evs, "call", W))),
    FileSends = ?L:events(Evs, "send", W),
    ?assertEqual(length(FileSends), length(HEvs)),
    %% 20 messages to Sink (+ the worker's reply to this process).
    ?assertEqual(20, length([E || #{event := send, to := To} = E <- HEvs,
                                  To =:= Sink])),
    ?assertMatch(#{calls := 0}, Totals),
    Sink ! stop,
    beamprobe_workload:stop_worker(W).

%%% ------------------------------------------------------------------------
%%% 8-9. Several sessions; clear/0
%%% ------------------------------------------------------------------------

concurrent_sessions(_Config) ->
    CapF = cap(),
    CapG = cap(),
    1 = ok_calls("bpsh_target:f/1", 100, #{io_server => CapF, return => true}),
    1 = ok_calls("bpsh_target:g/1 -> return", 100, #{io_server => CapG}),
    SF = session_of({?T, f, 1}),
    SG = session_of({?T, g, 1}),
    ?assertNotEqual(SF, SG),
    %% A session of explicit processes, alongside.
    W1 = worker(),
    W2 = worker(),
    W3 = worker(),
    SP = start(#{procs => [W1, W2], calls => [{?T, add, 2}], return => true,
                 output => {handler, ?H, #{parent => self()}}}),
    H = handler_pid(),
    %% Overlapping sessions are accepted (each gets exactly its own
    %% events: beamprobe_overlap_SUITE; the shell API replaces a trace of
    %% the same shell on the same function, as recon_trace does:
    %% beamprobe_remote_shell_SUITE).
    ?assertEqual(3, length(beamprobe:list())),
    %% Every session sees its own events.
    ok = run(W1, fun() -> 2 = ?T:f(1), 2 = ?T:g(1), 3 = ?T:add(1, 2), ok end),
    ok = run(W3, fun() -> 7 = ?T:add(3, 4), ok end),  % W3: not traced by SP
    W1T = pid_to_list(W1),
    wait_text(CapF, "returned from bpsh_target:f/1 -> 2", 2000),
    wait_text(CapG, "returned from bpsh_target:g/1 -> 2", 2000),
    ?assertEqual([<<"call bpsh_target:f(1)">>,
                  <<"returned from bpsh_target:f/1 -> 2">>],
                 [what(L) || L <- event_lines(CapF)]),
    ?assertEqual([<<"call bpsh_target:g(1)">>,
                  <<"returned from bpsh_target:g/1 -> 2">>],
                 [what(L) || L <- event_lines(CapG)]),
    ?assert(lists:all(fun(L) -> binary:match(L, list_to_binary(W1T)) =/= nomatch
                      end, event_lines(CapF) ++ event_lines(CapG))),
    SumP = stop(SP),
    {requested, _} = handler_done(H),
    ?assertEqual([{call, W1, <<"(1, 2)">>}, {return_from, W1, <<"3">>}],
                 [{E, P, maps:get(args, M, maps:get(result, M, none))}
                  || #{event := E, pid := P} = M <- handler_events(H)]),
    ?assertMatch(#{events := 2}, SumP),
    %% The shell sessions still run; clear/0 ends them.
    ?assertEqual(lists:sort([SF, SG]), lists:sort(beamprobe:list())),
    ok = beamprobe:clear(),
    wait_text(CapF, "% beamprobe: session ended (requested)\n", 2000),
    wait_text(CapG, "% beamprobe: session ended (requested)\n", 2000),
    ?assertEqual([], beamprobe:list()),
    [beamprobe_workload:stop_worker(W) || W <- [W1, W2, W3]],
    ok.

%% clear/0 stops every shell session and leaves nothing behind.
clear_restores(_Config) ->
    SendBefore = erlang:trace_info(send, match_spec),
    RecvBefore = erlang:trace_info('receive', match_spec),
    ct:log("before: ~p ~p", [SendBefore, RecvBefore]),
    MFAs = [{?T, f, 1}, {?T, g, 1}, {lists, reverse, 1}],
    Caps = [cap() || _ <- lists:seq(1, 4)],
    [C1, C2, C3, C4] = Caps,
    1 = ok_calls("bpsh_target:f/1", 1000, #{io_server => C1}),
    1 = ok_calls("bpsh_target:g(X) when X > 0 -> return;stack", 1000,
                 #{io_server => C2}),
    1 = ok_calls(":lists.reverse([:bp_never_given | _])", 1000,
                 #{io_server => C3}),
    1 = beamprobe:messages("send({ping, _})", 1000, #{io_server => C4}),
    %% A session not started from the shell API (a meta-traced call
    %% session: the messages session above claims every process): clear/0
    %% leaves it alone.
    W = worker(),
    Other = start(#{calls => [{?T, add, 2}], meta => true,
                    output => {handler, ?H, #{}}}),
    ?assertEqual(5, length(beamprobe:list())),
    ?assertMatch({meta, {beamprobe_nif, _}}, erlang:trace_info({?T, f, 1}, meta)),
    ?assertNotEqual(SendBefore, erlang:trace_info(send, match_spec)),
    ?assertNotEqual([], [P || P <- processes(), beamprobe_tracer(P)]),
    2 = ?T:f(1), 2 = ?T:g(1),
    ok = beamprobe:clear(),
    [wait_text(C, "% beamprobe: session ended (requested)\n", 2000)
     || C <- Caps],
    ?assertEqual([Other], beamprobe:list()),
    _ = stop(Other),
    ?assertEqual([], beamprobe:list()),
    [?assert(no_pattern(MFA)) || MFA <- MFAs],
    [?assertEqual({all, false}, erlang:trace_info(MFA, all))
     || MFA <- [{?T, f, 1}, {?T, g, 1}]],
    ?assertEqual(SendBefore, erlang:trace_info(send, match_spec)),
    ?assertEqual(RecvBefore, erlang:trace_info('receive', match_spec)),
    ?assertEqual([], [P || P <- processes() ++ erlang:ports(),
                           beamprobe_tracer(P)]),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    %% clear/0 with nothing running.
    ok = beamprobe:clear(),
    beamprobe_workload:stop_worker(W).

%%% ------------------------------------------------------------------------
%%% 10. Remote shell
%%% ------------------------------------------------------------------------

%% As with `erl -remsh': the evaluating process runs on the traced node
%% (the peer) and its group leader is on this node.  The lines must reach
%% this node's capture process.
remote_shell(Config) ->
    case ensure_distributed() of
        {skip, _} = Skip -> Skip;
        ok -> remote_shell_run(Config)
    end.

ensure_distributed() ->
    case node() of
        nonode@nohost ->
            _ = os:cmd("epmd -daemon"),
            Name = list_to_atom("bpsh_ct_" ++ os:getpid()),
            case net_kernel:start([Name, shortnames]) of
                {ok, _} -> ok;
                {error, R} ->
                    {skip, lists:flatten(io_lib:format(
                                           "distribution cannot start: ~p",
                                           [R]))}
            end;
        _ -> ok
    end.

remote_shell_run(_Config) ->
    Ebin = filename:dirname(code:which(beamprobe)),
    {ok, Peer, Node} =
        case peer:start_link(#{name => peer:random_name(),
                               args => ["-pa", Ebin]}) of
            {ok, P, N} -> {ok, P, N};
            Err -> ct:fail({peer_start_failed, Err})
        end,
    try
        %% The peer gets this suite and the traced module.
        {Mod, Bin, File} = code:get_object_code(?MODULE),
        {module, Mod} = erpc:call(Node, code, load_binary, [Mod, File, Bin]),
        [{module, M} = erpc:call(Node, code, load_binary,
                                 [M, atom_to_list(M) ++ ".erl", B])
         || {M, B} <- [compile_src(target_src())]],
        Cap = cap(),
        Shell = erlang:spawn(Node, ?MODULE, remote_shell_proc,
                             [self(), Cap, "bpsh_target:f(X) when X > 1 -> return"]),
        R = receive {Shell, started, Res} -> Res
            after 10000 -> ct:fail(remote_calls_timeout)
            end,
        ?assertEqual(1, R),
        %% The session runs on the peer, not here.
        ?assertEqual([], beamprobe:list()),
        ?assertMatch([_], erpc:call(Node, beamprobe, list, [])),
        ok = erpc:call(Node, ?T, loop, [f, 1, 3]),
        wait_text(Cap, "% beamprobe: session ended (events)\n", 5000),
        ct:log("~s", [cap_text(Cap)]),
        ?assertEqual([<<"call bpsh_target:f(2)">>,
                      <<"returned from bpsh_target:f/1 -> 4">>,
                      <<"call bpsh_target:f(3)">>],
                     [what(L) || L <- event_lines(Cap)]),
        %% clear/0 on the peer: run from the "shell".
        Shell ! {clear, self()},
        receive {Shell, cleared, ok} -> ok
        after 5000 -> ct:fail(remote_clear_timeout)
        end,
        ?assertEqual([], erpc:call(Node, beamprobe, list, [])),
        ?assertEqual({meta, false},
                     erpc:call(Node, erlang, trace_info, [{?T, f, 1}, meta]))
    after
        peer:stop(Peer)
    end.

%% The "shell" on the peer node: its group leader is Cap, on the test node.
remote_shell_proc(Tester, Cap, Pattern) ->
    group_leader(Cap, self()),
    Tester ! {self(), started, beamprobe:calls(Pattern, 3)},
    receive
        {clear, From} -> From ! {self(), cleared, beamprobe:clear()}
    after 30000 -> ok
    end.

%% A session of W's calls of f/1 (no returns) into the test handler, and
%% the handler's pid.
f_to_handler(W) ->
    S = start(#{procs => [W], calls => [{?T, f, 1}], return => false,
                exceptions => false,
                output => {handler, ?H, #{parent => self()}}}),
    {S, handler_pid()}.

%% Waits until session S has recorded N events.
wait_events(S, N) ->
    ?L:wait_until(fun() ->
                          {ok, #{events := E}} = beamprobe:info(S),
                          E =:= N
                  end, 5000).

%% The args text of f(1) .. f(N).
args_text(N) ->
    [iolist_to_binary(["(", integer_to_list(I), ")"]) || I <- lists:seq(1, N)].

%% A process that, once sent `go', calls big/1 N times with a 64 KiB
%% binary each, then waits for `stop'.
big_caller(N) ->
    Bin = binary:copy(<<"0123456789abcdef">>, 4096),
    spawn_link(fun() -> receive go -> ok end,
                        [?MODULE:big(<<I:32, Bin/binary>>)
                         || I <- lists:seq(1, N)],
                        receive stop -> ok end
               end).
