%%% @doc Fault injection: beamprobe's promises under faults nobody plans
%%% for.  Each case injects one fault into a real session and asserts the
%%% promises: the node survives; `events' + `dropped' add up to what was
%%% produced and `events' to what babeltrace2 can read; nothing stays
%%% installed (trace flags, `new' flags, call patterns); a bad situation
%%% gives a clear `{error, _}'.
%%%
%%%   tiny_tmpfs          output on a 256 KiB tmpfs (ENOSPC mid-trace)
%%%   dir_removed         the output directory removed mid-trace
%%%   read_only           output on a read-only mount; remounted read-only
%%%                       mid-trace
%%%   nif_reload_x15      code:purge + code:load_file of beamprobe_nif 15
%%%                       times with a session running
%%%   concurrent_start_stop  50 processes start and stop sessions at random
%%%   procs_all_race      20 simultaneous `procs => all' sessions
%%%   owner_death         the owner killed on a node with 100,000 processes
%%%   stop_unrelated_pid  stop/1 and info/1 given a pid that is no session
%%%   unrelated_pid_big_dictionary  ... of a process with a 40 MB dictionary, not copied
%%%   handler_crash       a handler that crashes on its first batch
%%%   handler_block       a handler that blocks forever
%%   handler_remote_link a handler sink given the link event of a remote
%%                       pid (on a peer node: if it crashes, only the peer)
%%%   sigkill_peer        a traced peer node killed with SIGKILL; its trace
%%%                       read by bin/beamprobe and babeltrace2
%%%
%%% Mounting needs root; where `mount' fails the case is skipped with the
%%% reason.  This module is also the crashing/blocking handler (init/1,
%%% handle_events/2, terminate/2).
-module(beamprobe_fault_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([tiny_tmpfs/1, dir_removed/1, read_only/1, nif_reload_x15/1,
         concurrent_start_stop/1, procs_all_race/1, owner_death/1,
         stop_unrelated_pid/1, unrelated_pid_big_dictionary/1, handler_crash/1, handler_block/1,
         handler_remote_link/1, sigkill_peer/1]).
%% The handler (beamprobe_handler behaviour) and helpers run elsewhere.
-export([init/1, handle_events/2, terminate/2, peer_tracer/2,
         peer_remote_link/2]).

-define(W, beamprobe_workload).
-define(L, beamprobe_test_lib).
-define(ADD, {?W, add, 2}).

-import(beamprobe_test_lib, [dir/2, start/1, stop/1, total/1]).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [tiny_tmpfs, dir_removed, read_only, nif_reload_x15,
     concurrent_start_stop, procs_all_race, owner_death, stop_unrelated_pid,
     unrelated_pid_big_dictionary,
     handler_crash, handler_block, handler_remote_link, sigkill_peer].

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
%%% Sink faults
%%% ------------------------------------------------------------------------

%% The output fills a 256 KiB tmpfs.  The session goes on, reports the
%% write error, counts what it could not write as lost: events + dropped
%% = produced, and `events' is exactly what babeltrace2 reads from the
%% (whole-packet) trace.
tiny_tmpfs(Config) ->
    with_tmpfs(Config, "size=256k", fun(Mnt) ->
        Dir = filename:join(Mnt, "trace"),
        {Sum, Produced} = traced_adds(Dir, 100000, fun(_) -> ok end),
        ?assertNotEqual(none, maps:get(io_error, Sum)),
        assert_accounting(Sum, Produced),
        assert_readable(Dir, Sum)
    end).

%% `rm -rf' of the output directory mid-trace: the session must notice
%% (io_error) rather than report every later event as written into files
%% nobody can read.
dir_removed(Config) ->
    Dir = dir(Config, "removed"),
    {Sum, Produced} =
        traced_adds(Dir, 100000,
                    fun(half) -> os:cmd("rm -rf '" ++ Dir ++ "'"); (_) -> ok end),
    ?assertNotEqual(none, maps:get(io_error, Sum)),
    assert_accounting(Sum, Produced),
    ?assert(is_process_alive(whereis(beamprobe_sup))).

%% A read-only mount, a path through a regular file: start/1 says so
%% ({error, _}) and installs nothing.  (A remount read-only mid-trace is
%% refused by the kernel while the trace files are open: not testable.)
read_only(Config) ->
    _ = with_tmpfs(Config, "size=4m,ro", fun(Mnt) ->
        R = beamprobe:start(#{procs => [self()], calls => [?ADD],
                              output => {file, filename:join(Mnt, "t")}}),
        ?assertMatch({error, _}, R),
        ?L:assert_no_trace_state([self()], [?ADD])
    end),
    %% A path through a regular file: enotdir, said as an error.
    File = dir(Config, "a_file"),
    ok = file:write_file(File, <<>>),
    ?assertMatch({error, _},
                 beamprobe:start(#{procs => [self()], calls => [?ADD],
                                   output => {file, filename:join(File, "t")}})),
    ?L:assert_no_trace_state([self()], [?ADD]).

%%% ------------------------------------------------------------------------
%%% The NIF purged and reloaded
%%% ------------------------------------------------------------------------

%% As OTP's tracer_SUITE does for its tracers: 15 rounds of delete + purge
%% + load of the NIF module while sessions run.  Every session keeps working,
%% stops with its summary, and nothing stays installed; start/1 works
%% after the last round.
nif_reload_x15(Config) ->
    W = ?W:start_worker(),
    W0 = ?W:start_worker(),
    %% One session runs across all 15 reloads (so the library instance it
    %% was started with is purged), and one starts and stops in each.
    S0 = start(#{procs => [W0], calls => [{?W, tick, 1}], return => true,
                 output => {file, dir(Config, "long")}}),
    Results =
        [begin
             Dir = dir(Config, "r" ++ integer_to_list(I)),
             {ok, S} = beamprobe:start(#{procs => [W], calls => [?ADD],
                                         return => true,
                                         output => {file, Dir}}),
             3 = ?W:run(W, fun() -> ?W:add(1, 2) end),
             I = ?W:run(W0, fun() -> ?W:tick(I) end),
             %% The module unloaded (its library too), then loaded again.
             _ = code:delete(beamprobe_nif),
             _ = code:purge(beamprobe_nif),
             Load = code:load_file(beamprobe_nif),
             %% The sessions trace their processes again (asynchronously,
             %% told by the module's on_load): wait until both did.
             ok = wait_reloads([S, S0], I),
             3 = ?W:run(W, fun() -> ?W:add(1, 2) end),
             I = ?W:run(W0, fun() -> ?W:tick(I) end),
             Alive = is_process_alive(S) andalso is_process_alive(S0)
                 andalso element(1, beamprobe:info(S0)) =:= ok,
             Stop = beamprobe:stop(S),
             {I, Load, Alive, summary_or_error(Stop)}
         end || I <- lists:seq(1, 15)],
    ct:log("rounds: ~p", [Results]),
    Bad = [R || {_, Load, Alive, Sum} = R <- Results,
                not (Load =:= {module, beamprobe_nif} andalso Alive
                     andalso is_map(Sum)
                     andalso maps:get(events, Sum, 0) =:= 4)],
    ?assertEqual([], Bad),
    %% The long session counted every tick (2 calls + 2 returns a round).
    ?assertMatch({ok, #{events := 60}}, beamprobe:stop(S0)),
    ?assertEqual([], beamprobe:list()),
    ?L:assert_no_trace_state([W, W0], [?ADD, {?W, tick, 1}]),
    Dir = dir(Config, "after"),
    S2 = start(#{procs => [W], calls => [?ADD], return => true,
                 output => {file, Dir}}),
    3 = ?W:run(W, fun() -> ?W:add(1, 2) end),
    ?assertMatch(#{events := 2}, stop(S2)),
    ?W:stop_worker(W),
    ?W:stop_worker(W0).

wait_reloads(Ss, I) -> wait_reloads(Ss, I, 100).

wait_reloads(_Ss, _I, 0) -> timeout;
wait_reloads(Ss, I, N) ->
    Counts = [maps:get(nif_reloads, element(2, beamprobe:info(S)), -1)
              || S <- Ss],
    case Counts of
        [1, I] -> ok;
        _ -> timer:sleep(10), wait_reloads(Ss, I, N - 1)
    end.

summary_or_error({ok, Sum}) -> Sum;
summary_or_error(Other) -> Other.

%%% ------------------------------------------------------------------------
%%% Races
%%% ------------------------------------------------------------------------

%% 50 processes start sessions (each on itself, the same call pattern)
%% and stop them, or die without stopping, at random moments.  Every call
%% returns {ok, _} or {error, _}; at the end no session, flag or pattern
%% is left.
concurrent_start_stop(Config) ->
    Seed = erlang:phash2(erlang:monotonic_time()),
    ct:pal("seed ~p", [Seed]),
    Self = self(),
    Pids = [spawn_monitor(
              fun() ->
                      rand:seed(exsss, Seed + I),
                      Dir = dir(Config, "c" ++ integer_to_list(I)),
                      timer:sleep(rand:uniform(30)),
                      R1 = (catch beamprobe:start(
                                    #{procs => [self()], calls => [?ADD],
                                      buffer => 65536,
                                      output => {file, Dir}})),
                      _ = ?W:add(1, I),
                      timer:sleep(rand:uniform(30)),
                      R2 = case {R1, rand:uniform(4)} of
                               {_, 1} -> exit(owner_gone);
                               {{ok, S}, _} -> (catch beamprobe:stop(S));
                               _ -> none
                           end,
                      Self ! {self(), R1, R2}
              end) || I <- lists:seq(1, 50)],
    Res = [receive
               {P, R1, R2} -> {P, R1, R2};
               {'DOWN', Ref, process, P, owner_gone} -> {P, owner_gone}
           after 60000 -> ct:fail(timeout)
           end || {P, Ref} <- Pids],
    Bad = [R || {_, R1, R2} = R <- Res,
                not ok_or_error(R1) orelse
                    not (R2 =:= none orelse ok_or_error(R2))],
    ct:log("results: ~p", [Res]),
    ?assertEqual([], Bad),
    ?L:wait_until(fun() -> beamprobe:list() =:= [] end, 5000),
    %% Sessions of dead owners are cleaned up by then at the latest.
    catch ?L:wait_until(fun() -> ?L:no_pattern(?ADD) end, 5000),
    ?L:assert_no_trace_state([], [?ADD]).

ok_or_error({ok, _}) -> true;
ok_or_error({error, _}) -> true;
ok_or_error(_) -> false.

%% 20 simultaneous `procs => all' sessions: sessions overlap freely, so
%% every one is accepted (each a member of the hub), and after they stop
%% no trace state is left.
procs_all_race(Config) ->
    Self = self(),
    Go = make_ref(),
    Ps = [spawn(fun() ->
                        Dir = dir(Config, "all" ++ integer_to_list(I)),
                        receive Go -> ok end,
                        R = beamprobe:start(#{procs => all, events => [gc],
                                              buffer => 65536,
                                              output => {file, Dir}}),
                        Self ! {self(), R},
                        receive stop -> ok end
                end) || I <- lists:seq(1, 20)],
    [P ! Go || P <- Ps],
    Rs = [receive {P, R} -> R after 30000 -> ct:fail(timeout) end || P <- Ps],
    Ok = [S || {ok, S} <- Rs],
    [begin catch beamprobe:stop(S) end || S <- Ok],
    [P ! stop || P <- Ps],
    ct:log("results: ~p", [Rs]),
    ?assertEqual([], [R || R <- Rs, not ok_or_error(R)]),
    ?assertEqual({accepted, 20}, {accepted, length(Ok)}),
    ?L:wait_until(fun() -> beamprobe:list() =:= [] end, 5000),
    ?L:assert_no_trace_state([], []).

%%% ------------------------------------------------------------------------
%%% Owners and pids
%%% ------------------------------------------------------------------------

%% The owner is killed on a node with 100,000 more processes: within 1 s
%% (issue 7's promise) the session is gone and no process is traced.
owner_death(Config) ->
    Idle = [spawn(fun() -> receive stop -> ok end end)
            || _ <- lists:seq(1, 100000)],
    try
        Self = self(),
        Dir = dir(Config, "owner"),
        Owner = spawn(fun() ->
                              R = beamprobe:start(#{procs => all,
                                                    events => [procs],
                                                    output => {file, Dir}}),
                              Self ! {self(), R},
                              receive after infinity -> ok end
                      end),
        {ok, _S} = receive {Owner, R} -> R after 30000 -> ct:fail(timeout) end,
        ?assertNotEqual([], ?L:traced_by_others()),
        Sched0 = ?L:sched_times(),
        T0 = erlang:monotonic_time(millisecond),
        exit(Owner, kill),
        ?L:wait_until(fun() -> beamprobe:list() =:= [] andalso
                                   erlang:trace_info(new, flags) =:= {flags, []}
                      end, 10000),
        {Ms, Sched1} = wait_untraced(Idle, T0),
        {Waited, Threads} = ?L:waited_ms(Sched0, Sched1),
        ct:pal("flags cleared ~p ms after the owner died, ~p ms of it "
               "waiting for a CPU; threads (name, ms run, ms waiting): ~p",
               [Ms, Waited, Threads]),
        %% Flags are cleared one process at a time (src/beamprobe_each.erl:
        %% the VM's one pass can crash OTP 25.2): measured 0.32–0.42 s
        %% here for 100 k, waits included.  Within 1 s of the node's own
        %% time: less what it waited for a CPU other processes had (a
        %% loaded machine: 1,159 ms).
        %% (the figures in the reason: CI prints only its first terms)
        Ms - Waited =< 1000 orelse
            ct:fail("flags cleared in ~b ms, ~b ms of it waiting for a "
                    "CPU: ~b ms of work", [Ms, Waited, Ms - Waited])
    after
        [P ! stop || P <- Idle]
    end.

%% Polls the last idle process, then waits for the janitor to finish the
%% removal (one process at a time, by workers it waits for: a call to it
%% returns after), then checks every process once; returns the ms since
%% T0 and sched_times/0 then (before the check).  (Polling every
%% process's tracer meanwhile would compete with the removal for the two
%% cores.)
wait_untraced(Idle, T0) ->
    Last = lists:last(Idle),
    ?L:wait_until(fun() -> erlang:trace_info(Last, flags) =:= {flags, []} end,
                  20000),
    _ = sys:get_state(beamprobe_janitor),
    Ms = erlang:monotonic_time(millisecond) - T0,
    Sched = ?L:sched_times(),
    ?assertEqual([], ?L:traced_by_others()),
    {Ms, Sched}.

%% stop/1 and info/1 given a pid that is not a session: {error,
%% not_found}, and the process (a gen_server that stops when called with
%% `stop') is untouched.
stop_unrelated_pid(_Config) ->
    P = spawn(fun gen_loop/0),
    ?assertEqual({error, not_found}, beamprobe:info(P)),
    ?assertEqual({error, not_found}, beamprobe:stop(P)),
    ?assertEqual({error, not_found}, beamprobe:dump(P)),
    ?assert(is_process_alive(P)),
    exit(P, kill).

%% stop/1, info/1 and dump/1 given a process holding ~40 MB in its
%% dictionary: answered without copying it.  The caller runs with a heap
%% limit of 2 M words (16 MB) that kills it when exceeded; the old check
%% for a cluster or follow handle copied the dictionary, twice.  A real
%% cluster handle is still one.
unrelated_pid_big_dictionary(Config) ->
    Self = self(),
    P = spawn(fun() ->
                      put(big, lists:seq(1, 2500000)),
                      Self ! {filled, self()},
                      gen_loop()
              end),
    receive {filled, P} -> ok after 30000 -> ct:fail(not_filled) end,
    {Q, Ref} = spawn_monitor(
                 fun() ->
                         _ = process_flag(max_heap_size,
                                          #{size => 2000000, kill => true,
                                            error_logger => false}),
                         R = [beamprobe:info(P), beamprobe:stop(P),
                              beamprobe:dump(P)],
                         exit({answers, R})
                 end),
    receive
        {'DOWN', Ref, process, Q, Why} ->
            ?assertEqual({answers, [{error, not_found}, {error, not_found},
                                    {error, not_found}]}, Why)
    after 30000 -> ct:fail(no_answer)
    end,
    ?assert(is_process_alive(P)),
    exit(P, kill),
    Dir = filename:join(?config(priv_dir, Config), "cluster_handle"),
    {ok, H} = beamprobe:start(#{nodes => [node()], calls => [{?W, add, 2}],
                                output => {file, Dir}}),
    ?assertMatch({ok, #{}}, beamprobe:info(H)),
    ?assertMatch({ok, #{}}, beamprobe:stop(H)),
    ?assertEqual({error, not_found}, beamprobe:info(H)).

%% A minimal gen_server: replies {unknown, Req} to calls, stops on `stop'.
gen_loop() ->
    receive
        {'$gen_call', From, stop} -> gen:reply(From, ok);
        {'$gen_call', From, Req} -> gen:reply(From, {unknown, Req}), gen_loop();
        _ -> gen_loop()
    end.

%%% ------------------------------------------------------------------------
%%% Handlers
%%% ------------------------------------------------------------------------

%% A handler that crashes on its first batch: the node and the session
%% survive, stop/1 returns the summary, and the events the dead handler
%% never handled are counted as lost (in the handler's account).
handler_crash(_Config) ->
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [?ADD], return => true,
                output => {handler, ?MODULE, #{mode => crash,
                                               parent => self()}}}),
    H = receive {handler_init, Pid} -> Pid after 5000 -> ct:fail(no_init) end,
    ok = ?W:run(W, fun() -> ?W:loop_add(5000) end),
    ?L:wait_dead(H),
    ok = ?W:run(W, fun() -> ?W:loop_add(5000) end),
    %% While the session runs, the batches left in the dead mailbox leave
    %% in_flight: the collector asks, at most once a second, whether a
    %% handler holding no credit is still alive.
    _ = ?L:wait_until(
          fun() ->
                  {ok, #{handlers := [#{in_flight := F0}]}} = beamprobe:info(S),
                  F0 =:= 0
          end, 5000),
    Sum = stop(S),
    Produced = 20000,
    ?assertEqual({produced, Produced},
                 {produced, maps:get(events, Sum) + total(Sum)}),
    %% The handler's account: what it acknowledged (at most the one batch
    %% it crashed on, 1000 events) and what it lost add up to what the
    %% session collected; nothing left in a dead mailbox is counted as
    %% delivered, nor as still in flight.
    [#{delivered := D, dropped := X, in_flight := F}] =
        maps:get(handlers, Sum),
    ct:log("handler: delivered ~p, dropped ~p, in_flight ~p", [D, X, F]),
    ?assertEqual({in_flight, 0}, {in_flight, F}),
    ?assertEqual({handler, Produced}, {handler, D + X}),
    ?assert(D =< 1000),
    ?L:assert_no_trace_state([W], [?ADD]),
    ?W:stop_worker(W).

%% A handler that blocks forever: stop/1 still returns (soon), and the
%% handler does not outlive its session.
handler_block(_Config) ->
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [?ADD],
                output => {handler, ?MODULE, #{mode => block,
                                               parent => self()}}}),
    H = receive {handler_init, Pid} -> Pid after 5000 -> ct:fail(no_init) end,
    ok = ?W:run(W, fun() -> ?W:loop_add(5000) end),
    T0 = erlang:monotonic_time(millisecond),
    {ok, Sum} = beamprobe:stop(S),
    ct:log("stop took ~p ms: ~p", [?L:elapsed_ms(T0), Sum]),
    ?assert(?L:elapsed_ms(T0) < 10000),
    %% killed after handler_stop_timeout (5000 ms), plus a margin for a
    %% loaded machine (5000 raced with the kill: failed under load)
    ?L:wait_until(fun() -> not is_process_alive(H) end, 15000),
    ?L:assert_no_trace_state([W], [?ADD]),
    ?W:stop_worker(W).

%% @doc Handler callbacks: `crash' raises on the first batch, `block'
%% never returns from it, `forward' sends each batch to the parent.
-spec init(map()) -> {ok, map()}.
init(#{parent := P} = Arg) ->
    P ! {handler_init, self()},
    {ok, Arg}.

-spec handle_events(list(), map()) -> {ok, map()}.
handle_events(_Events, #{mode := crash}) ->
    erlang:error(handler_crash_on_purpose);
handle_events(_Events, #{mode := block}) ->
    receive never -> ok end;
handle_events(Events, #{mode := forward, parent := P} = St) ->
    P ! {handler_events, self(), Events},
    {ok, St}.

-spec terminate(term(), map()) -> ok.
terminate(_Reason, _State) ->
    ok.

%% A process on a peer node, traced with `events => [procs]' into a
%% handler sink, links to a pid of this node (a remote pid for it), drops
%% its copy and collects its heap.  The handler gets the link event with
%% `other' as that pid (or undefined), never a term made from a stale
%% word; the peer survives and the session stops with its summary.
handler_remote_link(_Config) ->
    Paths = lists:append([["-pa", filename:dirname(code:which(M))]
                          || M <- [beamprobe, ?W, ?MODULE]]),
    {ok, Peer, Node} =
        case peer:start(#{name => peer:random_name(?MODULE), args => Paths}) of
            {ok, P, N} -> {ok, P, N};
            Err -> ct:fail({peer_start_failed, Err})
        end,
    Local = spawn(fun() -> receive stop -> ok end end),
    try
        T = erlang:spawn(Node, ?MODULE, peer_remote_link, [self(), Local]),
        Ref = monitor(process, T),
        Stopped = receive
                      {T, stopped, R} -> R;
                      {'DOWN', Ref, process, T, Why} -> {peer_process_down, Why}
                  after 20000 -> peer_timeout
                  end,
        Evs = lists:append(handler_batches()),
        Links = [E || #{event := link} = E <- Evs],
        ct:log("stopped: ~p~nlink events: ~p", [Stopped, Links]),
        ?assertEqual(Node, erpc:call(Node, erlang, node, [], 5000)),
        ?assertMatch({ok, #{}}, Stopped),
        ?assertMatch([_], Links),
        [#{other := Other}] = Links,
        ?assert(Other =:= Local orelse Other =:= undefined)
    after
        Local ! stop,
        catch peer:stop(Peer)
    end.

handler_batches() ->
    receive {handler_events, _, Evs} -> [Evs | handler_batches()]
    after 500 -> []
    end.

%% @doc On a peer: traces itself into a forwarding handler, links to and
%% unlinks from Remote, stops, reports the stop result.
-spec peer_remote_link(pid(), pid()) -> ok.
peer_remote_link(Parent, Remote) ->
    {ok, S} = beamprobe:start(#{procs => [self()], events => [procs],
                                output => {handler, ?MODULE,
                                           #{mode => forward,
                                             parent => Parent}}}),
    self() ! {remote, Remote},
    link_and_forget(),
    %% The remote pid's copy on this heap is now garbage: collect it and
    %% reuse the memory before the collector decodes the event.
    [begin _ = lists:seq(1, 20000), erlang:garbage_collect() end
     || _ <- lists:seq(1, 20)],
    timer:sleep(200),
    R = beamprobe:stop(S),
    Parent ! {self(), stopped, R},
    ok.

link_and_forget() ->
    receive {remote, R} -> true = link(R) end,
    ok.

%%% ------------------------------------------------------------------------
%%% A traced node killed
%%% ------------------------------------------------------------------------

%% A peer node traces itself into a directory and is killed with SIGKILL
%% mid-trace.  What it flushed is whole packets: babeltrace2 reads the
%% trace without error, `bin/beamprobe print' too (no crash), and both
%% see the same call events.
sigkill_peer(Config) ->
    Dir = dir(Config, "killed"),
    Paths = lists:append([["-pa", filename:dirname(code:which(M))]
                          || M <- [beamprobe, ?W, ?MODULE]]),
    {ok, Peer, Node} =
        case peer:start(#{name => peer:random_name(?MODULE), args => Paths}) of
            {ok, P, N} -> {ok, P, N};
            Err -> ct:fail({peer_start_failed, Err})
        end,
    OsPid = erpc:call(Node, os, getpid, []),
    T = erlang:spawn(Node, ?MODULE, peer_tracer, [Dir, self()]),
    receive {T, started} -> ok after 20000 -> ct:fail(peer_no_session) end,
    timer:sleep(1500),
    _ = os:cmd("kill -9 " ++ OsPid),
    ?L:wait_until(fun() -> not lists:member(Node, nodes()) end, 10000),
    catch peer:stop(Peer),
    {ok, Files} = file:list_dir(Dir),
    ct:log("files: ~p", [[{F, filelib:file_size(filename:join(Dir, F))}
                          || F <- Files]]),
    %% Whole packets to the end of every stream file, and some of them end
    %% blocks written with O_DIRECT (padded: c_src/bp_dio.h), so the kill
    %% came while blocks were being written that way.
    Packets = [packets(filename:join(Dir, F))
               || "thread-" ++ _ = F <- Files],
    ct:log("stream files: {packets, padded, whole to the end}: ~p", [Packets]),
    ?assertEqual([], [P || {_, _, false} = P <- Packets]),
    ?assert(lists:sum([Pad || {_, Pad, _} <- Packets]) > 0),
    {BtStatus, BtOut, BtErr} = ?L:babeltrace(Dir),
    ct:log("babeltrace2 exit ~p: ~s", [BtStatus, BtErr]),
    ?assertEqual({babeltrace2_exit, 0}, {babeltrace2_exit, BtStatus}),
    BtCalls = ?L:count(?L:parse(BtOut), "call"),
    {PrStatus, PrOut} = beamprobe_test_lib:cli(["print", Dir]),
    ?assertEqual({print_exit, 0}, {print_exit, PrStatus}),
    PrCalls = length([L || L <- binary:split(PrOut, <<"\n">>, [global]),
                           binary:match(L, <<" call ">>) =/= nomatch]),
    ct:log("calls read: babeltrace2 ~p, beamprobe print ~p", [BtCalls, PrCalls]),
    ?assert(BtCalls > 0),
    ?assertEqual({calls, BtCalls}, {calls, PrCalls}).

%% A stream file's packets: {how many, how many padded (packet_size >
%% content_size), whether they reach exactly to the end of the file}.
packets(Path) ->
    {ok, Bin} = file:read_file(Path),
    packets(Bin, 0, 0, 0).

packets(Bin, Off, N, Pad) when Off + 76 =< byte_size(Bin) ->
    <<_:Off/binary, 16#C1FC1FC1:32/little, _:36/binary,
      Content:64/little, Size:64/little, _/binary>> = Bin,
    true = Size >= Content andalso Size rem 8 =:= 0 andalso Size > 0,
    packets(Bin, Off + Size div 8, N + 1,
            Pad + case Size > Content of true -> 1; false -> 0 end);
packets(Bin, Off, N, Pad) ->
    {N, Pad, Off =:= byte_size(Bin)}.

%% @doc On the peer: starts a session on itself and calls add/2 forever.
-spec peer_tracer(file:filename(), pid()) -> no_return().
peer_tracer(Dir, Parent) ->
    {ok, _} = beamprobe:start(#{procs => [self()], calls => [?ADD],
                                output => {file, Dir}}),
    Parent ! {self(), started},
    peer_loop(0).

%% About 40,000 calls a second: enough for many packets in 1.5 s, and for
%% more than 64 KiB per 100 ms flush, so that blocks are written with
%% O_DIRECT (c_src/bp_dio.h); little enough for babeltrace2's text output.
peer_loop(N) ->
    _ = [?W:add(N, I) || I <- lists:seq(1, 40)],
    timer:sleep(1),
    peer_loop(N + 1).

%%% ------------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------------

%% Traces N calls of add/2 (2N events) in a worker, calling Fault(half)
%% after the first half and Fault(done) at the end; returns the summary
%% and the number of events produced.
traced_adds(Dir, N, Fault) ->
    W = ?W:start_worker(),
    S = start(#{procs => [W], calls => [?ADD], return => true,
                exceptions => true, output => {file, Dir}}),
    ok = ?W:run(W, fun() -> ?W:loop_add(N div 2) end),
    _ = Fault(half),
    ok = ?W:run(W, fun() -> ?W:loop_add(N - N div 2) end),
    _ = Fault(done),
    Sum = stop(S),
    ?L:assert_no_trace_state([W], [?ADD]),
    ?W:stop_worker(W),
    {Sum, 2 * N}.

%% events + dropped = produced while the session ran to the end; a
%% session that ended by itself on a write error stopped tracing then,
%% and the events after it were never its own.
assert_accounting(#{stop_reason := requested} = Sum, Produced) ->
    ?assertEqual({produced, Produced},
                 {produced, maps:get(events, Sum) + total(Sum)});
assert_accounting(Sum, Produced) ->
    ct:log("session ended by itself: ~p", [maps:get(stop_reason, Sum)]),
    ?assert(maps:get(events, Sum) + total(Sum) =< Produced).

%% `events' is what babeltrace2 reads (and it reads without error).
assert_readable(Dir, Sum) ->
    Evs = ?L:trace(Dir),
    Read = length([E || #{name := Nm} = E <- Evs,
                        Nm =/= <<"process">>, Nm =/= <<"drops">>]),
    ?assertEqual({readable, maps:get(events, Sum)}, {readable, Read}).

%% Runs F(MountPoint) with a tmpfs mounted there; skips if mount fails.
with_tmpfs(Config, Opts, F) ->
    Mnt = dir(Config, "mnt" ++ integer_to_list(erlang:unique_integer([positive]))),
    ok = file:make_dir(Mnt),
    case mount(["-t", "tmpfs", "-o", "mode=0700," ++ Opts, "tmpfs", Mnt]) of
        ok ->
            try F(Mnt)
            after
                _ = os:cmd("umount -l '" ++ Mnt ++ "'")
            end;
        {error, Out} ->
            {skip, "cannot mount a tmpfs (root needed): " ++ Out}
    end.

mount(Args) ->
    Out = os:cmd("mount " ++ lists:join(" ", ["'" ++ A ++ "'" || A <- Args])
                 ++ " 2>&1; echo \"rc=$?\""),
    case string:find(Out, "rc=0") of
        nomatch -> {error, Out};
        _ -> ok
    end.
