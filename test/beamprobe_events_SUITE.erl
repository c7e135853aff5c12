%%% @doc End-to-end tests of beamprobe's event kinds: every kind (calls,
%%% exceptions, return_to, messages, process events, scheduling, garbage
%%% collection, ports) traced and read back through the real babeltrace2.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_events_SUITE -logdir _build/ct_logs
%%%
%%% Each case traces only processes it spawned (procs => [Pid, ...]) or new
%%% ones (procs => new), writes into its own directory under priv_dir and
%%% leaves no session behind (end_per_testcase stops any).  The helpers
%%% shared with the other suites are in beamprobe_test_lib.
-module(beamprobe_events_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([events_call/1, events_exception/1, events_return_to/1,
         events_messages/1, events_procs/1, events_running/1, events_gc/1,
         events_ports/1, process_events/1, own_processes_silent/1]).

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
    [{group, events}].

groups() ->
    [{events, [], [events_call, events_exception, events_return_to,
                   events_messages, events_procs, events_running, events_gc,
                   events_ports, process_events, own_processes_silent]}].

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
%%% 1. Every event kind, read back by babeltrace2
%%% ------------------------------------------------------------------------

%% call (args text, info) and return_from (result); no return_to unless
%% asked; a process event naming the traced pid.
events_call(Config) ->
    Dir = dir(Config, "call"),
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [{?W, add, 2}], return => true,
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
                exceptions => true, output => {file, Dir}}),
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
                return => true, output => {file, Dir}}),
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

%% beamprobe's own processes leave nothing in a trace of new processes.
%% The session's watchdog started after the flags of new processes: it
%% was scheduled in once before its first instruction made it sensitive,
%% and the readers charged it the whole trace as running.  And a session
%% started meanwhile was spawned with its whole configuration as an
%% argument, rendered in the `spawned' event (its tag here; a TCP
%% sink's token the same way).
own_processes_silent(Config) ->
    Dir = dir(Config, "own"),
    %% Capture limits wide enough to show a whole configuration.
    S = start(#{procs => new, events => [running, procs],
                capture => #{depth => 8, list => 64, bytes => 16384},
                output => {file, Dir}}),
    Own = ?L:own_pids(S),
    W = ?W:start_worker(),
    ok = ?W:run(W, fun() -> timer:sleep(5) end),
    S2 = start(#{calls => [{lists, seq, 2}], tag => own_silent_secret_tag,
                 output => {file, dir(Config, "own2")}}),
    _ = stop(S2),
    _ = stop(S),
    Text = ?L:babeltrace_ok(Dir),
    Evs = ?L:parse(Text),
    ?assertNotEqual([], ?L:events(Evs, "sched_in", W)),
    ?assertNotEqual([], Own),
    Seen = [P || P <- Own,
                 lists:member(list_to_binary(pid_to_list(P)),
                              [?L:field(E, "pid")
                               || E <- ?L:events(Evs, "process")])],
    ?assertEqual([], Seen),
    ?assertEqual(nomatch, binary:match(Text, <<"own_silent_secret_tag">>)),
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
         %% (Its serial is 0 until the node has spawned more processes
         %% than its table holds, 262,144 by default: not in a VM that ran
         %% the safety suite's 200 k processes before.)
         ?assertMatch({match, _}, re:run(Text, "^<0\\.[0-9]+\\.[0-9]+>$")),
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
