%%% @doc End-to-end tests of beamprobe: every event kind through the real
%%% babeltrace2, exact loss accounting, limits, bounded capture, flight
%%% recorder dumps, clean-up after stop and after the owner dies, and input
%%% validation.
%%%
%%% Run: make && ct_run -noshell -pa ebin -dir test -suite beamprobe_SUITE
%%%      -logdir _build/ct_logs
%%%
%%% Each case traces only processes it spawned (procs => [Pid, ...]) or new
%%% ones (procs => new), writes into its own directory under priv_dir and
%%% leaves no session behind (end_per_testcase stops any).
-module(beamprobe_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("kernel/include/file.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([events_call/1, events_exception/1, events_return_to/1,
         events_messages/1, events_procs/1, events_running/1, events_gc/1,
         events_ports/1, process_events/1,
         loss_drop_newest/1, loss_drop_oldest/1, loss_overflow_stop/1,
         count_calls/1,
         owner_death/1, stop_restores_all/1, stop_restores_pids/1,
         bad_options/1, bad_output/1, bad_patterns/1,
         already_traced_pid/1, already_traced_new/1,
         limit_events/1, limit_seconds/1, limit_bytes/1,
         capture_bounded/1,
         dump_flight_recorder/1, dump_not_flight_recorder/1,
         info_and_list/1, stop_twice/1,
         file_modes/1]).

-define(W, beamprobe_workload).
-define(L, beamprobe_test_lib).

%%% ------------------------------------------------------------------------
%%% Setup
%%% ------------------------------------------------------------------------

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, events}, {group, loss}, {group, lifecycle}, {group, errors},
     {group, limits}, {group, output}].

groups() ->
    [{events, [], [events_call, events_exception, events_return_to,
                   events_messages, events_procs, events_running, events_gc,
                   events_ports, process_events]},
     {loss, [], [loss_drop_newest, loss_drop_oldest, loss_overflow_stop,
                 count_calls]},
     {lifecycle, [], [owner_death, stop_restores_all, stop_restores_pids,
                      info_and_list, stop_twice]},
     {errors, [], [bad_options, bad_output, bad_patterns,
                   already_traced_pid, already_traced_new]},
     {limits, [], [limit_events, limit_seconds, limit_bytes,
                   capture_bounded]},
     {output, [], [dump_flight_recorder, dump_not_flight_recorder,
                   file_modes]}].

init_per_suite(Config) ->
    case os:find_executable("babeltrace2") of
        false -> ct:fail("babeltrace2 is not installed");
        _ -> ok
    end,
    {ok, _} = application:ensure_all_started(beamprobe),
    {module, beamprobe_nif} = code:ensure_loaded(beamprobe_nif),
    {module, ?W} = code:ensure_loaded(?W),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    %% Every case starts from a node with no session and no trace state,
    %% and writes under its own directory.
    ?assertEqual([], beamprobe:list()),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    CaseDir = filename:join(?config(priv_dir, Config), atom_to_list(Case)),
    ok = file:make_dir(CaseDir),
    [{case_dir, CaseDir} | Config].

end_per_testcase(_Case, _Config) ->
    _ = [beamprobe:stop(S) || S <- beamprobe:list()],
    %% Do not let a failed case (or a bug) leave trace state for the next.
    erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    erlang:trace(all, false, [all]),
    ok.

%%% ------------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------------

dir(Config, Name) ->
    filename:join(?config(case_dir, Config), Name).

start(Spec) ->
    case beamprobe:start(Spec) of
        {ok, S} -> S;
        Other -> ct:fail({start_failed, Spec, Other})
    end.

stop(S) ->
    {ok, Sum} = beamprobe:stop(S),
    ct:log("summary: ~p", [Sum]),
    Sum.

trace(Dir) ->
    ?L:parse(?L:babeltrace_ok(Dir)).

one(Evs, Name, P) ->
    case ?L:events(Evs, Name, P) of
        [E] -> E;
        L -> ct:fail({expected_one, Name, P, length(L), L})
    end.

assert_field(E, K, V) when is_integer(V) ->
    ?assertEqual({K, V}, {K, ?L:field(E, K)});
assert_field(E, K, V) ->
    ?assertEqual({K, iolist_to_binary(V)}, {K, ?L:field(E, K)}).

dead_pid() ->
    P = spawn(fun() -> ok end),
    Ref = monitor(process, P),
    receive {'DOWN', Ref, process, P, _} -> P end.

wait_dead(P) ->
    Ref = monitor(process, P),
    receive {'DOWN', Ref, process, P, _} -> ok
    after 10000 -> ct:fail({still_alive, P})
    end.

total(#{dropped := #{total := T}}) -> T.
dropped(#{dropped := D}, K) -> maps:get(K, D).

%% A pid on another node (for remote_process).
remote_pid() ->
    Node = <<"other@nohost">>,
    binary_to_term(<<131, 88, 119, (byte_size(Node)), Node/binary,
                     0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1>>).

%% The call events' integer argument ("(123)" -> 123).
call_args_int(E) ->
    <<"(", Rest/binary>> = ?L:field(E, "args"),
    binary_to_integer(binary:part(Rest, 0, byte_size(Rest) - 1)).

%%% ------------------------------------------------------------------------
%%% 1. Every event kind, read back by babeltrace2
%%% ------------------------------------------------------------------------

%% call (args text, info) and return_from (result); no return_to unless
%% asked; a process event naming the traced pid.
events_call(Config) ->
    Dir = dir(Config, "call"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, add, 2}],
                output => {file, Dir}}),
    11 = ?W:run(W, fun() -> ?W:add(1, 10) end),
    Sum = stop(S),
    ?assertMatch(#{events := 2, stop_reason := requested}, Sum),
    ?assertEqual(0, total(Sum)),
    Evs = trace(Dir),
    Call = one(Evs, "call", W),
    assert_field(Call, "mfa", "beamprobe_workload:add/2"),
    assert_field(Call, "args", "(1, 10)"),
    assert_field(Call, "info", "true"),
    Ret = one(Evs, "return_from", W),
    assert_field(Ret, "mfa", "beamprobe_workload:add/2"),
    assert_field(Ret, "result", "11"),
    ?assertEqual(0, ?L:count(Evs, "return_to")),
    ?assertEqual(0, ?L:count(Evs, "exception_from")),
    ?W:stop_worker(W).

%% exception_from with class and reason, from a function that raises.
events_exception(Config) ->
    Dir = dir(Config, "exception"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, crash, 1}],
                output => {file, Dir}}),
    {caught, {boom, 7}} = ?W:run(W, fun() -> ?W:catch_crash(7) end),
    Sum = stop(S),
    ?assertMatch(#{events := 2}, Sum),
    Evs = trace(Dir),
    Call = one(Evs, "call", W),
    assert_field(Call, "mfa", "beamprobe_workload:crash/1"),
    assert_field(Call, "args", "(7)"),
    Exc = one(Evs, "exception_from", W),
    assert_field(Exc, "mfa", "beamprobe_workload:crash/1"),
    assert_field(Exc, "class", "error"),
    assert_field(Exc, "reason", "{boom,7}"),
    ?assertEqual(0, ?L:count(Evs, "return_from")),
    ?W:stop_worker(W).

%% return_to (return_to => true) names the caller returned to.
events_return_to(Config) ->
    Dir = dir(Config, "return_to"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, inner, 1}], return_to => true,
                output => {file, Dir}}),
    7 = ?W:run(W, fun() -> ?W:outer(3) end),
    _ = stop(S),
    Evs = trace(Dir),
    assert_field(one(Evs, "call", W), "mfa", "beamprobe_workload:inner/1"),
    assert_field(one(Evs, "return_from", W), "result", "6"),
    RetTo = ?L:events(Evs, "return_to", W),
    ?assert(RetTo =/= []),
    ?assert(lists:any(fun(E) ->
                              ?L:field(E, "mfa") =:=
                                  <<"beamprobe_workload:outer/1">>
                      end, RetTo)),
    ?W:stop_worker(W).

%% send (to, to_text, message), send_to_non_existing_process, receive.
events_messages(Config) ->
    Dir = dir(Config, "messages"),
    W = ?W:start_worker(),
    T = ?W:start_worker(),                      % not traced
    Dead = dead_pid(),
    S = start(#{procs => [W], events => [send, 'receive'],
                output => {file, Dir}}),
    7 = ?W:run(W, fun() ->
                          T ! {hello, 42},
                          Dead ! hello_dead,
                          self() ! {ping, 7},
                          receive {ping, N} -> N end
                  end),
    _ = stop(S),
    Evs = trace(Dir),
    Sends = ?L:events(Evs, "send", W),
    [ToT] = [E || E <- Sends, ?L:field(E, "to_text") =:=
                                  list_to_binary(pid_to_list(T))],
    assert_field(ToT, "message", "{hello,42}"),
    ?assert(?L:field(ToT, "to") =/= 0),
    DeadSend = one(Evs, "send_to_non_existing_process", W),
    assert_field(DeadSend, "to_text", pid_to_list(Dead)),
    assert_field(DeadSend, "message", "hello_dead"),
    Recv = ?L:events(Evs, "receive", W),
    ?assert(lists:any(fun(E) -> ?L:field(E, "message") =:= <<"{ping,7}">>
                      end, Recv)),
    %% The send to itself is a send too, with its own key as `to'.
    WKey = ?L:pid_key(Evs, W),
    ?assert(lists:any(fun(E) -> ?L:field(E, "to") =:= WKey andalso
                                    ?L:field(E, "message") =:= <<"{ping,7}">>
                      end, Sends)),
    ?W:stop_worker(W),
    ?W:stop_worker(T).

%% spawn/spawned (mfa text), link/unlink/getting_linked/getting_unlinked,
%% register/unregister, exit (reason), with procs => new.
events_procs(Config) ->
    Dir = dir(Config, "procs"),
    S = start(#{procs => new, events => [procs], output => {file, Dir}}),
    Me = self(),
    P = spawn(?W, procs_parent, [Me]),
    C = receive {procs_done, P, Child} -> Child
        after 5000 -> ct:fail(no_procs_done)
        end,
    wait_dead(P),
    ?assertMatch({flags, [_ | _]}, erlang:trace_info(new, flags)),
    _ = stop(S),
    ?L:assert_no_trace_state([self()], []),
    Evs = trace(Dir),
    PT = pid_to_list(P),
    CT = pid_to_list(C),
    Spawned = one(Evs, "spawned", P),
    assert_field(Spawned, "other_text", pid_to_list(Me)),
    assert_field(Spawned, "mfa",
                 "beamprobe_workload:procs_parent(" ++ pid_to_list(Me) ++ ")"),
    Spawn = one(Evs, "spawn", P),
    assert_field(Spawn, "other_text", CT),
    assert_field(Spawn, "mfa", "beamprobe_workload:procs_child(1)"),
    ?assertEqual(?L:pid_key(Evs, C), ?L:field(Spawn, "other")),
    CSpawned = one(Evs, "spawned", C),
    assert_field(CSpawned, "other_text", PT),
    assert_field(CSpawned, "mfa", "beamprobe_workload:procs_child(1)"),
    assert_field(one(Evs, "link", P), "other_text", CT),
    assert_field(one(Evs, "unlink", P), "other_text", CT),
    assert_field(one(Evs, "getting_linked", C), "other_text", PT),
    assert_field(one(Evs, "getting_unlinked", C), "other_text", PT),
    assert_field(one(Evs, "register", P), "name", "beamprobe_test_reg"),
    assert_field(one(Evs, "unregister", P), "name", "beamprobe_test_reg"),
    assert_field(one(Evs, "exit", C), "reason", "{child_exit,1}"),
    assert_field(one(Evs, "exit", P), "reason", "procs_done"),
    %% The test process was not new: no event of it but its name.
    MeKey = ?L:pid_key(Evs, Me),
    ?assertEqual([], [E || #{key := K, name := N} = E <- Evs,
                           K =:= MeKey, N =/= <<"process">>]).

%% sched_in/sched_out (events => [running]) with mfa text and exiting.
events_running(Config) ->
    Dir = dir(Config, "running"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], events => [running], output => {file, Dir}}),
    ok = ?W:run(W, fun() -> timer:sleep(20) end),
    _ = stop(S),
    Evs = trace(Dir),
    In = ?L:events(Evs, "sched_in", W),
    Out = ?L:events(Evs, "sched_out", W),
    ?assert(length(In) >= 2),
    ?assert(length(Out) >= 2),
    [?assertEqual(0, ?L:field(E, "exiting")) || E <- In ++ Out],
    %% It is scheduled in to run the request while waiting in its loop,
    %% and out while sleeping.
    ?assert(?L:has_event(Evs, "sched_in",
                         [{"mfa", "beamprobe_workload:worker_loop/0"}])),
    ?assert(?L:has_event(Evs, "sched_out", [{"mfa", "timer:sleep/1"}])),
    ?W:stop_worker(W).

%% gc_minor_start/end and gc_major_start/end with heap sizes > 0.
events_gc(Config) ->
    Dir = dir(Config, "gc"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], events => [gc], output => {file, Dir}}),
    ok = ?W:run(W, fun() -> ?W:garbage(100000) end),
    true = ?W:run(W, fun() -> erlang:garbage_collect() end),
    _ = stop(S),
    Evs = trace(Dir),
    Kinds = ["gc_minor_start", "gc_minor_end", "gc_major_start",
             "gc_major_end"],
    [?assertNotEqual({K, []}, {K, ?L:events(Evs, K, W)}) || K <- Kinds],
    All = lists:append([?L:events(Evs, K, W) || K <- Kinds]),
    [begin
         ?assert(?L:field(E, "heap_size") > 0),
         ?assert(?L:field(E, "heap_block_size") > 0),
         ?assert(?L:field(E, "heap_block_size") >= ?L:field(E, "heap_size"))
     end || E <- All],
    ?W:stop_worker(W).

%% port_open/port_closed (events => [ports]) for a new port.
events_ports(Config) ->
    Dir = dir(Config, "ports"),
    S = start(#{procs => new, events => [ports], output => {file, Dir}}),
    Port = open_port({spawn, "cat"}, []),
    true = port_close(Port),
    _ = stop(S),
    ?L:assert_no_trace_state([self()], []),
    [?assertEqual({tracer, []}, erlang:trace_info(P, tracer))
     || P <- erlang:ports(), erlang:trace_info(P, tracer) =/= undefined],
    Evs = trace(Dir),
    Open = one(Evs, "port_open", Port),
    assert_field(Open, "other_text", pid_to_list(self())),
    assert_field(Open, "name", "cat"),
    assert_field(one(Evs, "port_closed", Port), "reason", "normal").

%% A process event for every traced pid: <0.N.0>, name, initial call.
process_events(Config) ->
    Dir = dir(Config, "process"),
    Ws = [W1, W2, W3] = [?W:start_worker() || _ <- [1, 2, 3]],
    true = register(beamprobe_test_named, W3),
    S = start(#{procs => [W1, W2, beamprobe_test_named],
                calls => [{?W, add, 2}], output => {file, Dir}}),
    [3 = ?W:run(W, fun() -> ?W:add(1, 2) end) || W <- Ws],
    _ = stop(S),
    Evs = trace(Dir),
    Procs = ?L:events(Evs, "process"),
    [begin
         Text = list_to_binary(pid_to_list(W)),
         ?assertMatch({match, _}, re:run(Text, "^<0\\.[0-9]+\\.0>$")),
         Mine = [E || E <- Procs, ?L:field(E, "pid") =:= Text],
         ?assertNotEqual({W, []}, {W, Mine}),
         ?assert(lists:any(fun(E) ->
                                   ?L:field(E, "initial_call") =:=
                                       <<"beamprobe_workload:worker_loop/0">>
                           end, Mine)),
         one(Evs, "call", W)
     end || W <- Ws],
    ?assert(?L:has_event(Evs, "process",
                         [{"pid", pid_to_list(W3)},
                          {"name", "beamprobe_test_named"}])),
    ?assert(?L:has_event(Evs, "process",
                         [{"pid", pid_to_list(W1)}, {"name", "undefined"}])),
    [?W:stop_worker(W) || W <- Ws].

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
         S = start(#{procs => [W], calls => [{?W, add, 2}],
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
%%% 6, 7. Bad input installs nothing
%%% ------------------------------------------------------------------------

%% Starts Spec (with an output dir added when it has none), expects
%% {error, Expected} (or a reason for which the fun Expected returns true)
%% and checks that nothing was installed or created.  Every problem is
%% collected, then the case fails naming them all.
expect_error(Config, Name, Spec0, Expected) ->
    Spec = case is_map(Spec0) andalso not maps:is_key(output, Spec0) of
               true -> Spec0#{output => {file, dir(Config, Name)}};
               false -> Spec0
           end,
    OutDir = case Spec of
                 #{output := {file, D}} when is_list(D) -> D;
                 _ -> dir(Config, Name)
             end,
    Before = listing(OutDir),
    Result = beamprobe:start(Spec),
    ResultOk = case Expected of
                   F when is_function(F, 1) -> (catch F(Result)) =:= true;
                   _ -> Result =:= {error, Expected}
               end,
    Text = case Result of
               {error, Reason} -> beamprobe:format_error(Reason);
               _ -> ""
           end,
    ct:log("~s: ~p~n    ~s", [Name, Result, Text]),
    MFAs = case Spec of
               #{calls := L} when is_list(L) -> [X || {_, _, _} = X <- L];
               _ -> []
           end,
    Leftover = [{MFA, erlang:trace_info(MFA, all)}
                || MFA <- lists:append([expand(X) || X <- [{?W, '_', '_'}
                                                           | MFAs]]),
                   not ?L:no_pattern(MFA)],
    Problems =
        [{result, Result, expected, Expected} || not ResultOk] ++
        [{format_error, Text} || not (io_lib:char_list(Text)
                                      andalso Text =/= "")] ++
        [{sessions_left, beamprobe:list()} || beamprobe:list() =/= []] ++
        [{flags_left, self(), erlang:trace_info(self(), flags)}
         || erlang:trace_info(self(), flags) =/= {flags, []}] ++
        [{new_flags_left, erlang:trace_info(new, flags)}
         || erlang:trace_info(new, flags) =/= {flags, []}] ++
        [{patterns_left, Leftover} || Leftover =/= []] ++
        [{output_changed, OutDir, Before, listing(OutDir)}
         || listing(OutDir) =/= Before],
    case Problems of
        [] -> element(2, Result);
        _ -> ct:fail({Name, Problems})
    end.

listing(Dir) ->
    case file:list_dir(Dir) of
        {ok, Files} -> {dir, lists:sort(Files)};
        {error, R} -> R
    end.

expand({M, F, A}) when is_atom(M), M =/= '_', is_atom(F) ->
    case code:is_loaded(M) of
        false -> [];
        _ -> [{M, Fn, Ar} || {Fn, Ar} <- M:module_info(functions),
                             F =:= '_' orelse F =:= Fn,
                             A =:= '_' orelse A =:= Ar]
    end;
expand(_) -> [].

bad_options(Config) ->
    Add = [{?W, add, 2}],
    Dead = dead_pid(),
    Remote = remote_pid(),
    Cases =
        [{"not_a_map", [calls], {bad_spec, [calls], "a map is expected"}},
         {"unknown", #{calls => Add, colour => blue},
          {unknown_option, colour}},
         {"procs_atom", #{calls => Add, procs => everything},
          {bad_option, procs, everything}},
         {"procs_empty", #{calls => Add, procs => []},
          {bad_option, procs, []}},
         {"procs_string", #{calls => Add, procs => [self(), "x"]},
          {bad_option, procs, "x"}},
         {"procs_dead", #{calls => Add, procs => [self(), Dead]},
          {dead_process, Dead}},
         {"procs_remote", #{calls => Add, procs => [Remote]},
          {remote_process, Remote}},
         {"procs_name", #{calls => Add, procs => [beamprobe_no_such_name]},
          {no_such_process, beamprobe_no_such_name}},
         {"calls_atom", #{calls => add}, {bad_option, calls, add}},
         {"calls_tuple", #{calls => [{?W, add}]},
          {bad_option, calls, {?W, add}}},
         {"calls_arity", #{calls => [{?W, add, 256}]},
          {bad_option, calls, {?W, add, 256}}},
         {"calls_neg", #{calls => [{?W, add, -1}]},
          {bad_option, calls, {?W, add, -1}}},
         {"calls_string", #{calls => [{"lists", seq, 2}]},
          {bad_option, calls, {"lists", seq, 2}}},
         {"no_module", #{calls => [{beamprobe_no_such_module, f, 1}]},
          {no_such_module, beamprobe_no_such_module}},
         {"no_function", #{calls => [{?W, no_such_function, 1}]},
          {no_such_function, {?W, no_such_function, 1}}},
         {"wrong_arity", #{calls => [{?W, add, 3}]},
          {no_such_function, {?W, add, 3}}},
         {"force_all", #{calls => [{'_', '_', '_'}]},
          {force_required, {'_', '_', '_'}}},
         {"force_fn", #{calls => [{'_', add, 2}]},
          {force_required, {'_', add, 2}}},
         {"return", #{calls => Add, return => yes},
          {bad_option, return, yes}},
         {"exceptions", #{calls => Add, exceptions => 1},
          {bad_option, exceptions, 1}},
         {"return_to", #{calls => Add, return_to => "true"},
          {bad_option, return_to, "true"}},
         {"events_atom", #{events => send}, {bad_option, events, send}},
         {"events_bad", #{events => [send, bogus]},
          {bad_option, events, bogus}},
         {"args", #{calls => Add, args => some},
          {bad_option, args, some}},
         {"capture_atom", #{calls => Add, capture => big},
          {bad_option, capture, big}},
         {"capture_key", #{calls => Add, capture => #{colour => 1}},
          {unknown_option, {capture, colour}}},
         {"capture_depth", #{calls => Add, capture => #{depth => 0}},
          {bad_option, {capture, depth}, 0}},
         {"capture_list", #{calls => Add, capture => #{list => 4097}},
          {bad_option, {capture, list}, 4097}},
         {"capture_binary", #{calls => Add, capture => #{binary => -1}},
          {bad_option, {capture, binary}, -1}},
         {"capture_bytes", #{calls => Add, capture => #{bytes => 15}},
          {bad_option, {capture, bytes}, 15}},
         {"buffer_small", #{calls => Add, buffer => 16383},
          {bad_option, buffer, 16383}},
         {"buffer_big", #{calls => Add, buffer => (1 bsl 32) + 1},
          {bad_option, buffer, (1 bsl 32) + 1}},
         {"buffer_float", #{calls => Add, buffer => 65536.0},
          {bad_option, buffer, 65536.0}},
         {"overflow", #{calls => Add, overflow => drop_all},
          {bad_option, overflow, drop_all}},
         {"limits_atom", #{calls => Add, limits => none},
          {bad_option, limits, none}},
         {"limits_key", #{calls => Add, limits => #{calls => 1}},
          {unknown_option, {limits, calls}}},
         {"limits_events", #{calls => Add, limits => #{events => 0}},
          {bad_option, {limits, events}, 0}},
         {"limits_events_float", #{calls => Add, limits => #{events => 1.5}},
          {bad_option, {limits, events}, 1.5}},
         {"limits_bytes", #{calls => Add, limits => #{bytes => -5}},
          {bad_option, {limits, bytes}, -5}},
         {"limits_seconds", #{calls => Add, limits => #{seconds => 0}},
          {bad_option, {limits, seconds}, 0}},
         {"force", #{calls => Add, force => 1}, {bad_option, force, 1}},
         {"output_atom", #{calls => Add, output => stdout},
          {bad_option, output, stdout}},
         {"output_int", #{calls => Add, output => {file, 42}},
          {bad_option, output, {file, 42}}},
         {"nothing", #{}, fun({error, {nothing_to_trace, H}}) ->
                                  io_lib:char_list(H)
                          end},
         {"nothing_pids", #{procs => [self()], calls => [], events => []},
          fun({error, {nothing_to_trace, _}}) -> true end}],
    [expect_error(Config, Name, Spec, Exp) || {Name, Spec, Exp} <- Cases],
    ok.

bad_output(Config) ->
    Add = [{?W, add, 2}],
    Priv = ?config(case_dir, Config),
    %% Under /proc: nothing can be created there.
    R1 = expect_error(Config, "proc", #{calls => Add,
                                        output => {file, "/proc/beamprobe_x"}},
                      fun({error, {unwritable, "/proc/beamprobe_x", _}}) -> true
                      end),
    ct:log("~p", [R1]),
    ?assertNot(filelib:is_dir("/proc/beamprobe_x")),
    %% Under a regular file.
    File = filename:join(Priv, "a_file"),
    ok = file:write_file(File, <<"x">>),
    Sub = filename:join(File, "trace"),
    expect_error(Config, "under_file", #{calls => Add, output => {file, Sub}},
                 {unwritable, Sub, enotdir}),
    %% The output is a regular file.
    expect_error(Config, "is_file", #{calls => Add, output => {file, File}},
                 fun({error, {unwritable, F, _}}) -> F =:= File end),
    %% The parent does not exist.
    NoParent = filename:join([Priv, "no_such_parent", "trace"]),
    expect_error(Config, "no_parent", #{calls => Add,
                                        output => {file, NoParent}},
                 {unwritable, NoParent, enoent}),
    ?assertNot(filelib:is_dir(filename:dirname(NoParent))),
    %% A directory that is not empty: left as it was.
    Full = filename:join(Priv, "full"),
    ok = file:make_dir(Full),
    ok = file:write_file(filename:join(Full, "keep"), <<"keep">>),
    expect_error(Config, "full", #{calls => Add, output => {file, Full}},
                 {output_exists, Full}),
    ?assertEqual({ok, ["keep"]}, file:list_dir(Full)),
    ?assertEqual({ok, <<"keep">>}, file:read_file(filename:join(Full, "keep"))),
    %% A relative path is made absolute in the error.
    {ok, Cwd} = file:get_cwd(),
    expect_error(Config, "relative",
                 #{calls => Add,
                   output => {file, "beamprobe_no_such_dir/x/y"}},
                 {unwritable, filename:join(Cwd, "beamprobe_no_such_dir/x/y"),
                  enoent}),
    %% An empty existing directory is accepted.
    Empty = filename:join(Priv, "empty"),
    ok = file:make_dir(Empty),
    S = start(#{calls => Add, procs => [self()], output => {file, Empty}}),
    _ = stop(S),
    _ = trace(Empty),
    ok.

%% A pattern that matches nothing is refused, and nothing stays installed
%% (in particular not a pattern set before it, nor the directory).
%% erlang:trace_pattern/3 takes '_' only in the forms {M, F, '_'},
%% {M, '_', '_'} and {'_', '_', '_'}: {zlib, '_', 200} ("every function of
%% arity 200": there is none) must give {error, {no_match, MFA}} or
%% {error, {bad_option, calls, MFA}}, never a crashed session.
bad_patterns(Config) ->
    W = ?W:start_worker(),
    Refused = fun(MFA) ->
                      fun({error, {no_match, X}}) -> X =:= MFA;
                         ({error, {bad_option, calls, X}}) -> X =:= MFA
                      end
              end,
    %% {lists, seq, 2} sorts before {zlib, '_', 200}: it is set first.
    R1 = expect_error(Config, "no_match",
                      #{procs => [W], calls => [{lists, seq, 2},
                                                {zlib, '_', 200}]},
                      Refused({zlib, '_', 200})),
    ct:log("~p", [R1]),
    ?assert(?L:no_pattern({lists, seq, 2})),
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    NoFn = {'_', beamprobe_no_such_function_anywhere, '_'},
    expect_error(Config, "no_match_forced",
                 #{procs => [W], force => true, calls => [{?W, add, 2}, NoFn]},
                 Refused(NoFn)),
    expect_error(Config, "any_module_forced",
                 #{procs => [W], force => true, calls => [{'_', add, 2}]},
                 Refused({'_', add, 2})),
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    ?L:pattern_removed([{?W, add, 2}, {lists, seq, 2}]),
    ?W:stop_worker(W).

%% A process traced by another tracer is refused, and taken over with
%% force => true.
already_traced_pid(Config) ->
    Other = spawn(fun Sink() -> receive _ -> Sink() end end),
    P = ?W:start_worker(),
    1 = erlang:trace(P, true, [send, {tracer, Other}]),
    expect_error(Config, "taken", #{procs => [P], calls => [{?W, add, 2}]},
                 {already_traced, [P]}),
    ?assertEqual({tracer, Other}, erlang:trace_info(P, tracer)),
    ?assertEqual({flags, [send]}, erlang:trace_info(P, flags)),
    %% procs => all refuses too, naming it.
    expect_error(Config, "taken_all", #{procs => all, calls => [{?W, add, 2}]},
                 {already_traced, [P]}),
    ?assertEqual({tracer, Other}, erlang:trace_info(P, tracer)),
    Dir = dir(Config, "forced"),
    S = start(#{procs => [P], calls => [{?W, add, 2}], force => true,
                output => {file, Dir}}),
    ?assertMatch({tracer, {beamprobe_nif, _}}, erlang:trace_info(P, tracer)),
    5 = ?W:run(P, fun() -> ?W:add(2, 3) end),
    _ = stop(S),
    ?assertEqual({tracer, []}, erlang:trace_info(P, tracer)),
    Evs = trace(Dir),
    assert_field(one(Evs, "call", P), "args", "(2, 3)"),
    ?W:stop_worker(P),
    exit(Other, kill).

%% New processes traced by another tracer: procs => new is refused.
already_traced_new(Config) ->
    Other = spawn(fun Sink() -> receive _ -> Sink() end end),
    try
        _ = erlang:trace(new, true, [procs, {tracer, Other}]),
        Dir = dir(Config, "new_taken"),
        Result = beamprobe:start(#{procs => new, events => [procs],
                                   output => {file, Dir}}),
        ?assertEqual({error, {already_traced, [new]}}, Result),
        ?assertEqual({tracer, Other}, erlang:trace_info(new, tracer)),
        ?assert(?L:dir_absent_or_empty(Dir)),
        ?assertEqual([], beamprobe:list()),
        {error, R} = Result,
        ?assert(length(beamprobe:format_error(R)) > 0)
    after
        erlang:trace(new, false, [all]),
        exit(Other, kill)
    end.

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
    S = start(#{procs => [W], calls => [{?W, add, 2}],
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

%% limits.bytes: the session ends by itself once that much is written.
limit_bytes(Config) ->
    Dir = dir(Config, "limit_bytes"),
    [P] = [?W:start_looper(self(), fun() -> ?W:loop_add_until(20000000) end)],
    S = start(#{procs => [P], calls => [{?W, add, 2}],
                limits => #{bytes => 100000}, output => {file, Dir}}),
    T0 = erlang:monotonic_time(millisecond),
    ok = ?W:go([P]),
    [Made] = ?W:wait_done([P], 20000),
    _ = ?L:wait_ended(S, 5000),
    ct:log("~p calls, ended after ~p ms", [Made, ?L:elapsed_ms(T0)]),
    ?assert(Made < 20000000),
    Sum = stop(S),
    ?assertMatch(#{stop_reason := bytes}, Sum),
    ?assert(maps:get(bytes, Sum) >= 100000),
    ?L:pattern_removed([{?W, add, 2}]),
    _ = trace(Dir).

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
