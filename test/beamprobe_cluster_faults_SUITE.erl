%%% @doc Cluster sessions (beamprobe_cluster) when a node or the control
%%% side fails: a node frozen (SIGSTOP) at stop or at info/1, frozen long
%%% enough to be disconnected, a node whose clock steps during the
%%% session, the control node killed, the coordinator ended while a node
%%% was out of reach.  Each case runs on two hidden `peer' nodes of this
%%% host (beamprobe_cluster_lib); the normal path is beamprobe_cluster_SUITE.
-module(beamprobe_cluster_faults_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2,
         end_per_testcase/2]).
-export([frozen_node_stop_bounded/1, frozen_node_disconnected/1,
         stepped_clock_bounds_hold/1, frozen_nodes_info_bounded/1,
         control_node_killed/1, coordinator_ended_while_away/1]).
%% Run on the nodes.
-export([start_owned/1, cluster_procs/0, log_start/0, logged/0]).
%% A logger handler (log_start/0).
-export([log/2]).

-define(L, beamprobe_test_lib).
-define(C, beamprobe_cluster_lib).

-import(beamprobe_cluster_lib,
        [nodes_of/1, ping_pong/2, assert_clean/2, env/2, int/2,
         with_stdio_peer/2, stopped/1]).

all() ->
    [frozen_node_stop_bounded, frozen_node_disconnected,
     stepped_clock_bounds_hold, frozen_nodes_info_bounded,
     control_node_killed, coordinator_ended_while_away].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    case node() of
        nonode@nohost -> {skip, "the node is not distributed (ct_run -sname)"};
        _ -> Config
    end.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    ?C:init_case(Case, Config).

end_per_testcase(_Case, Config) ->
    ?C:end_case(Config).

%% A node frozen (SIGSTOP: a stuck VM) when the session stops: the stop
%% returns after the one wait for that node's stop (60 s), not after 16
%% clock probes of 5 s each, then the stop's wait, then a fetch and a
%% dist_ids call waiting as long again (about 2 min with one frozen node
%% before, and as much more per further frozen node); the other node's
%% trace is fetched and that node left clean; the frozen node's entry
%% says it was not stopped and names its staged trace.
frozen_node_stop_bounded(Config) ->
    Nodes = [_, N2, N3] = nodes_of(Config),
    Dir = ?L:dir(Config, "frozen"),
    {ok, H} = beamprobe:start(#{nodes => Nodes, events => [send],
                                output => {file, Dir}}),
    _ = ping_pong(Nodes, 3),
    Staged = filename:join(os:getenv("TMPDIR", "/tmp"), "beamprobe-cluster-*"),
    {Ms, R} = stop_frozen(H, N3),
    {ok, #{nodes := Per}} = R,
    ?assert(Ms < 75000),
    ?assertMatch(#{fetch := ok}, maps:get(N2, Per)),
    ?assertMatch(#{fetch := {error, _}, staged := _}, maps:get(N3, Per)),
    assert_clean(Config, Nodes -- [N3]),
    %% Thawed, that node gets the stop and ends its session (unless it
    %% has halted: a peer ends when its connection is lost); its staged
    %% trace stays on its disk (this machine's /tmp).
    _ = (catch ?L:wait_until(fun() -> erpc:call(N3, beamprobe, list, [], 5000) =:= [] end,
                             20000)),
    [ok = file:del_dir_r(D) || D <- filelib:wildcard(Staged)],
    ok.

%% Stops cluster session H with node N frozen (SIGSTOP), thawing N
%% after: {Ms the stop took, what it returned}.
stop_frozen(H, N) ->
    OsPid = erpc:call(N, os, getpid, []),
    [] = os:cmd("kill -STOP " ++ OsPid),
    T0 = erlang:monotonic_time(millisecond),
    R = try beamprobe:stop(H)
        after os:cmd("kill -CONT " ++ OsPid)
        end,
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("stop took ~p ms: ~p", [Ms, R]),
    {Ms, R}.

%% info/1 with both remote nodes frozen (SIGSTOP): it answers within its
%% one deadline (2 s) for all the nodes, says that those two did not
%% answer, and still gives the control node's info; before, it asked the
%% nodes in turn and waited 60 s for each frozen one (120 s here).
%% Thawed, the nodes stop as usual.
frozen_nodes_info_bounded(Config) ->
    Nodes = [N1, N2, N3] = nodes_of(Config),
    Dir = ?L:dir(Config, "frozeninfo"),
    {ok, H} = beamprobe:start(#{nodes => Nodes, events => [send],
                                output => {file, Dir}}),
    OsPids = [erpc:call(N, os, getpid, []) || N <- [N2, N3]],
    [[] = os:cmd("kill -STOP " ++ P) || P <- OsPids],
    %% (A stop signal takes effect when it is delivered: until both say
    %% so, a node could still answer.)
    _ = ?L:wait_until(fun() -> lists:all(fun ?C:stopped/1, OsPids) end, 10000),
    T0 = erlang:monotonic_time(millisecond),
    R = try beamprobe:info(H)
        after [os:cmd("kill -CONT " ++ P) || P <- OsPids]
        end,
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("info took ~p ms: ~p", [Ms, R]),
    {ok, #{nodes := Per} = Info} = R,
    ?assert(Ms < 15000),
    ?assertEqual(lists:sort([N2, N3]), lists:sort(maps:get(no_answer, Info, none))),
    ?assertMatch({ok, #{events := _}}, maps:get(N1, Per)),
    ?assertEqual({error, timeout}, maps:get(N2, Per)),
    ?assertEqual({error, timeout}, maps:get(N3, Per)),
    {ok, #{nodes := PerStop}} = beamprobe:stop(H),
    [?assertMatch(#{fetch := ok}, maps:get(N, PerStop)) || N <- [N2, N3]],
    assert_clean(Config, Nodes).

%% The same, with a net tick time of 10 s, so that the frozen node is
%% disconnected during the stop's wait: the stop then returns at once,
%% without trying new connections to the frozen node for the fetch and
%% the dist_ids call (7 s each: net_setuptime).
frozen_node_disconnected(Config) ->
    Old = net_kernel:get_net_ticktime(),
    _ = net_kernel:set_net_ticktime(10, 0),
    try
        _ = ?L:wait_until(fun() -> net_kernel:get_net_ticktime() =:= 10 end, 15000),
        with_stdio_peer(["-kernel", "net_ticktime", "10"],
                        fun(N) -> frozen_node_disconnected(Config, N) end)
    after
        net_kernel:set_net_ticktime(Old, 0)
    end.

frozen_node_disconnected(Config, N) ->
    Dir = ?L:dir(Config, "frozen10"),
    {ok, H} = beamprobe:start(#{nodes => [node(), N], events => [send],
                                output => {file, Dir}}),
    {Ms, R} = stop_frozen(H, N),
    {ok, #{nodes := #{N := Per}}} = R,
    ?assertMatch(#{fetch := {error, {not_stopped, {agent_down, noconnection}}},
                   staged := _}, Per),
    ?assert(Ms < 20000),
    %% Thawed, the node ends its session; its staged trace stays.
    #{staged := Staged} = Per,
    _ = (catch ?L:wait_until(fun() -> net_kernel:connect_node(N) andalso
                                          erpc:call(N, beamprobe, list, [], 5000) =:= [] end,
                             20000)),
    ?assertEqual([], erpc:call(N, beamprobe, list, [])),
    ok = file:del_dir_r(Staged).

%% A node whose clock moves against the control node's during the
%% session (here stepped by S between the start and the stop probes; in
%% life, two hosts' clocks drift apart): the recorded bounds hold the
%% true offset of the whole session, at its start and at its stop.  The
%% node runs with test/clock_shift/clock_shift.so preloaded (its
%% CLOCK_MONOTONIC 5 s ahead of this node's, plus S once stepped) and
%% BEAMPROBE_CLOCK=monotonic (every stamp is a clock_gettime()).  The
%% steps run from 10 us to 1.3 ms, across the probes' widths: before,
%% the start and stop bounds were intersected whenever they overlapped,
%% and a step smaller than their width but larger than one side of it
%% left a true offset outside the recorded bounds.
stepped_clock_bounds_hold(Config) ->
    case os:find_executable("cc") of
        false -> {skip, "no C compiler (cc) for the clock shifting library"};
        _ -> stepped_clock_bounds_hold1(Config)
    end.

stepped_clock_bounds_hold1(Config) ->
    Priv = ?config(priv_dir, Config),
    So = filename:join(Priv, "clock_shift.so"),
    Src = filename:join([filename:dirname(code:which(beamprobe)), "..", "test",
                         "clock_shift", "clock_shift.c"]),
    Cc = os:cmd("cc -O2 -Wall -Wextra -Werror -shared -fPIC -o " ++ So ++
                    " " ++ Src ++ " -ldl 2>&1; echo rc=$?"),
    ?assertEqual("rc=0", string:trim(lists:last(string:split(string:trim(Cc), "\n", all))), Cc),
    ShiftFile = filename:join(Priv, "clock_shift"),
    C = 5000000000,
    {ok, Fd} = file:open(ShiftFile, [read, write, raw, binary]),
    Set = fun(V) -> ok = file:pwrite(Fd, 0, <<V:64/signed-native>>) end,
    Set(C),
    Paths = [filename:dirname(code:which(beamprobe)),
             filename:dirname(code:which(?MODULE))],
    {ok, P, N} = peer:start_link(#{name => peer:random_name(),
                                   env => [{"LD_PRELOAD", So},
                                           {"BP_CLOCK_SHIFT_FILE", ShiftFile},
                                           {"BEAMPROBE_CLOCK", "monotonic"}],
                                   args => ["-hidden" |
                                            lists:append([["-pa", D] || D <- Paths])]}),
    try
        %% The node's clock is C ahead: the shift is in force.
        T0 = beamprobe_nif:clock(),
        T1 = erpc:call(N, beamprobe_nif, clock, []),
        ?assert(abs(T1 - T0 - C) < 100000000),
        %% Each session starts from the shift the last one ended with:
        %% the node's monotonic clock only ever steps forward, as a real
        %% one does (stepped back by the last step, the peer's VM missed
        %% the 10 s of the next start's check of its code now and then:
        %% beamprobe_missing).
        {Wrong, _} =
            lists:foldl(fun(S, {W, Base}) ->
                                case step_session(Config, N, Set, Base, S) of
                                    ok -> {W, Base + S};
                                    R -> {[R | W], Base + S}
                                end
                        end, {[], C}, [10000 bsl K || K <- lists:seq(0, 7)]),
        ?assertEqual([], Wrong)
    after
        catch peer:stop(P),
        file:close(Fd)
    end.

step_session(Config, N, Set, C, S) ->
    Set(C),
    Dir = ?L:dir(Config, "step" ++ integer_to_list(S)),
    {ok, H} = beamprobe:start(#{nodes => [node(), N], events => [send],
                                output => {file, Dir}}),
    Set(C + S),
    {ok, _} = beamprobe:stop(H),
    Env = env(Dir, N),
    {Lo, Hi} = {int(Env, "clock_offset_lo_ns"), int(Env, "clock_offset_hi_ns")},
    %% The offset to add to the node's clock: -C at the start, -(C + S)
    %% at the stop.
    ct:log("step ~p: bounds [~p, ~p] (~p, ~p)", [S, Lo + C, Hi + C,
                                                 maps:get("clock_probe_start", Env),
                                                 maps:get("clock_probe_stop", Env)]),
    case Lo =< -(C + S) andalso -C =< Hi of
        true -> ok;
        false -> {S, Lo + C, Hi + C}
    end.

%% The control node dies (halted) mid-session: the other node's agent
%% sees its coordinator's node go, ends its session at once (trace flags
%% and patterns removed, as a session ends with its owner), finds from
%% the epmd of the control node's host that no node of that name runs
%% any more, so that nobody will ever fetch its staged trace, removes it
%% and ends, all within seconds.  Before, the agent kept the staged
%% trace and waited 10 minutes for a stop that could not come, then
%% ended leaving the staged trace behind for good.
control_node_killed(Config) ->
    [{PC, C}, {_, T}] = proplists:get_value(peers, Config),
    Clean = proplists:get_value(T, proplists:get_value(clean, Config)),
    Before = ?L:staged_dirs(T),
    Dir = ?L:dir(Config, "ctl"),
    ok = erpc:call(T, ?MODULE, log_start, []),
    {ok, _H} = erpc:call(C, ?MODULE, start_owned,
                         [#{nodes => [C, T], events => [send],
                            calls => [{lists, reverse, 1}],
                            output => {file, Dir}}]),
    %% T runs its part of the session: a session, the pattern, a staged
    %% trace, an agent.
    ?assertMatch([_], erpc:call(T, beamprobe, list, [])),
    ?assertMatch({traced, local},
                 erpc:call(T, erlang, trace_info, [{lists, reverse, 1}, traced])),
    ?assertMatch([_], ?L:staged_dirs(T) -- Before),
    ?assertMatch([_], erpc:call(T, ?MODULE, cluster_procs, [])),
    _ = erpc:call(T, lists, reverse, [[1, 2, 3]]),
    T0 = erlang:monotonic_time(millisecond),
    peer:stop(PC),
    Left = fun() -> #{clean => erpc:call(T, ?C, node_clean, []) =:= Clean,
                      staged => ?L:staged_dirs(T) -- Before,
                      agents => erpc:call(T, ?MODULE, cluster_procs, [])}
           end,
    Done = #{clean => true, staged => [], agents => []},
    _ = (catch ?L:wait_until(fun() -> Left() =:= Done end, 20000)),
    Ms = erlang:monotonic_time(millisecond) - T0,
    Now = Left(),
    ct:log("after ~p ms: ~p", [Ms, Now]),
    ?assertEqual({T, Done}, {T, Now}),
    ?assertEqual({T, Clean}, {T, erpc:call(T, ?C, node_clean, [])}),
    ?assertEqual({traced, false}, erpc:call(T, erlang, trace_info,
                                  [{lists, reverse, 1}, traced])),
    %% T's log says what happened, naming the staged trace.
    Log = erpc:call(T, ?MODULE, logged, []),
    ct:log("~p's log:~n~ts", [T, lists:join("\n", Log)]),
    ?assert(lists:any(fun(L) -> string:find(L, io_lib:format("control node ~p was lost",
                                                             [C])) =/= nomatch end, Log)),
    ?assert(lists:any(fun(L) -> string:find(L, "{control_node_down,") =/= nomatch
                                    andalso string:find(L, "was removed") =/= nomatch
                      end, Log)).

%% The handle (coordinator) ends while a node is out of reach (here:
%% the node frozen, disconnected, the handle killed, the node thawed):
%% back in touch, the node's agent finds the control node alive but the
%% coordinator gone; nobody will fetch the staged trace, but a stop
%% summary may have named it (fetch => {error, _}, staged => Path) for
%% the operator: the node's session is over, the staged trace is kept
%% (for 10 minutes, which the log says; then removed) and the agent
%% waits no longer for news of the control node.
coordinator_ended_while_away(Config) ->
    with_stdio_peer([], fun(N) -> coordinator_ended_while_away(Config, N) end).

coordinator_ended_while_away(Config, N) ->
    ok = erpc:call(N, ?MODULE, log_start, []),
    Before = ?L:staged_dirs(N),
    Dir = ?L:dir(Config, "away"),
    {ok, H} = beamprobe:start(#{nodes => [node(), N], events => [send],
                                output => {file, Dir}}),
    [Staged] = ?L:staged_dirs(N) -- Before,
    OsPid = erpc:call(N, os, getpid, []),
    [] = os:cmd("kill -STOP " ++ OsPid),
    try
        _ = ?L:wait_until(fun() -> stopped(OsPid) end, 10000),
        true = erlang:disconnect_node(N),
        Ref = monitor(process, H),
        exit(H, kill),
        receive {'DOWN', Ref, process, H, _} -> ok end
    after
        os:cmd("kill -CONT " ++ OsPid)
    end,
    Ended = fun() ->
                    lists:any(fun(L) -> string:find(L, "coordinator has ended") =/= nomatch end,
                              erpc:call(N, ?MODULE, logged, []))
            end,
    _ = (catch ?L:wait_until(Ended, 20000)),
    Log = erpc:call(N, ?MODULE, logged, []),
    ct:log("~p's log:~n~ts", [N, lists:join("\n", Log)]),
    ?assert(Ended()),
    ?assertEqual([], erpc:call(N, beamprobe, list, [])),
    ?assertEqual([Staged], ?L:staged_dirs(N) -- Before),
    ?assert(lists:any(fun(L) -> string:find(L, Staged) =/= nomatch andalso
                                    string:find(L, "kept for 600 s") =/= nomatch
                      end, Log)),
    ?assertMatch([_], erpc:call(N, ?MODULE, cluster_procs, [])),
    ok = file:del_dir_r(Staged).


%% On a node: its log from now on, kept by a process (logged/0).
log_start() ->
    Pid = spawn(fun() -> log_sink([]) end),
    true = register(bp_log_sink, Pid),
    logger:add_handler(bp_log_sink, ?MODULE, #{level => all}).

log_sink(Acc) ->
    receive
        {log, Text} -> log_sink([Text | Acc]);
        {get, From} -> From ! {logged, lists:reverse(Acc)}, log_sink(Acc)
    end.

%% @private The logger handler of log_start/0.
log(#{msg := Msg}, _Config) ->
    Text = case Msg of
               {string, S} -> S;
               {report, R} -> io_lib:format("~tp", [R]);
               {F, A} -> io_lib:format(F, A)
           end,
    catch bp_log_sink ! {log, unicode:characters_to_list(Text)},
    ok.

logged() ->
    bp_log_sink ! {get, self()},
    receive {logged, L} -> L after 5000 -> [] end.

%% On a node: starts a cluster session owned by a process that lives
%% until the node does; its handle.
start_owned(Spec) ->
    Self = self(),
    _ = spawn(fun() ->
                      Self ! {started, beamprobe:start(Spec)},
                      receive after infinity -> ok end
              end),
    receive {started, R} -> R end.

%% On a node: its processes running a cluster agent's code (in
%% beamprobe_cluster before the agent had a module of its own).
cluster_procs() ->
    [P || P <- processes(),
          case process_info(P, current_function) of
              {current_function, {M, _, _}} ->
                  M =:= beamprobe_cluster orelse M =:= beamprobe_cluster_agent;
              _ -> false
          end].
