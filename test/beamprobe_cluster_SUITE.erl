%%% @doc Cluster sessions (beamprobe_cluster) on a three-node cluster of
%%% `peer' nodes on this host: one call starts a session per node, one
%%% stop ends them and brings every node's trace into one directory with
%%% its clock offset and bounds; `bin/beamprobe cluster' merges them.
%%%
%%% The nodes share this host's CLOCK_MONOTONIC, so the true offset
%%% between any two of them is exactly 0: the recorded bounds must contain
%%% 0.  To check the merge against a node whose clock estimate is wrong,
%%% a case rewrites one node's recorded offset (wide bounds, wrong centre)
%%% and checks that the reader pulls it back from the messages.
%%%
%%% Frozen nodes, stepped clocks and a control node or coordinator lost:
%%% beamprobe_cluster_faults_SUITE; the peers and helpers both use:
%%% beamprobe_cluster_lib.
-module(beamprobe_cluster_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("kernel/include/file.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2,
         end_per_testcase/2]).
-export([start_stop_three_nodes/1, flows_matched_not_reversed/1,
         refined_offsets/1, bad_specs/1, node_fails_to_start/1,
         owner_dies/1, coordinator_killed/1, node_killed/1,
         exited_not_traced/1, short_copy_refused/1, copy_private_at_once/1,
         disconnect_reported/1, exclude_per_node/1]).
%% Run on the nodes.
-export([chain_start/2, sender/0]).
-export([init/1, handle_call/3, handle_cast/2]).

-define(L, beamprobe_test_lib).
-define(C, beamprobe_cluster_lib).

-import(beamprobe_cluster_lib,
        [nodes_of/1, ping_pong/2, assert_clean/2, env/2, int/2,
         with_stdio_peer/2, traced/1]).

all() ->
    [start_stop_three_nodes, flows_matched_not_reversed, refined_offsets,
     bad_specs, node_fails_to_start, owner_dies, coordinator_killed,
     node_killed, exited_not_traced, short_copy_refused, copy_private_at_once,
     disconnect_reported, exclude_per_node].

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

%%% ------------------------------------------------------------------------
%%% Workloads
%%% ------------------------------------------------------------------------

%% A gen_server chain: chain_1 on node 2 forwards each call to chain_2 on
%% node 3, which forwards it to chain_3 on node 1 (the control node).
chain_start(Name, Next) ->
    {ok, Pid} = gen_server:start({local, Name}, ?MODULE, Next, []),
    unlink(Pid),
    {ok, Pid}.

init(Next) -> {ok, Next}.

handle_call(Req, _From, none) -> {reply, {done, Req}, none};
handle_call(Req, _From, Next) -> {reply, gen_server:call(Next, Req), Next}.

handle_cast(_, S) -> {noreply, S}.

chain(Config) ->
    [N1, N2, N3] = nodes_of(Config),
    {ok, _} = erpc:call(N1, ?MODULE, chain_start, [chain_3, none]),
    {ok, _} = erpc:call(N3, ?MODULE, chain_start, [chain_2, {chain_3, N1}]),
    {ok, _} = erpc:call(N2, ?MODULE, chain_start, [chain_1, {chain_2, N3}]),
    ok.

chain_calls(Config, N) ->
    [_, N2, _] = nodes_of(Config),
    [{done, I} = gen_server:call({chain_1, N2}, I) || I <- lists:seq(1, N)],
    ok.

chain_stop(Config) ->
    [N1, N2, N3] = nodes_of(Config),
    [catch gen_server:stop({Name, Node})
     || {Name, Node} <- [{chain_1, N2}, {chain_2, N3}, {chain_3, N1}]],
    ok.

%%% ------------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------------

run_cluster(Config, Spec, Work) ->
    Dir = ?L:dir(Config, "cluster"),
    Nodes = nodes_of(Config),
    {ok, H} = beamprobe:start(Spec#{nodes => Nodes, output => {file, Dir}}),
    {ok, Info} = beamprobe:info(H),
    ?assertEqual(lists:sort(Nodes), lists:sort(maps:keys(maps:get(nodes, Info)))),
    Result = Work(),
    {ok, Sum} = beamprobe:stop(H),
    ?assertEqual({error, not_found}, beamprobe:stop(H)),
    {Dir, Sum, Result}.

json_int(Key, Bin) ->
    {match, [V]} = re:run(Bin, "\"" ++ Key ++ "\": *(-?[0-9]+)", [{capture, all_but_first, list}]),
    list_to_integer(V).

%%% ------------------------------------------------------------------------
%%% Cases
%%% ------------------------------------------------------------------------

%% One call starts a session on each of three nodes, one stop ends them
%% all; every node's trace is here, readable by babeltrace2, 0600, with
%% clock bounds that contain the true offset (0: one host), and nothing
%% is left on any node: no session, flag, pattern, staged file.
start_stop_three_nodes(Config) ->
    Nodes = nodes_of(Config),
    {Dir, Sum, Msgs} = run_cluster(Config, #{events => [send, 'receive']},
                                   fun() -> ping_pong(nodes_of(Config), 5) end),
    ?assert(Msgs > 0),
    #{nodes := Per, output := Dir, events := Events} = Sum,
    ?assert(Events > 0),
    ?assertEqual(lists:sort(Nodes), lists:sort(maps:keys(Per))),
    lists:foreach(
      fun(N) ->
              #{fetch := ok, summary := {ok, NS}, clock := Clock} = maps:get(N, Per),
              NodeDir = filename:join(Dir, atom_to_list(N)),
              {ok, Files} = file:list_dir(NodeDir),
              ?assert(lists:member("metadata", Files)),
              [begin
                   {ok, I} = file:read_file_info(filename:join(NodeDir, F)),
                   ?assertEqual({F, 8#600}, {F, element(8, I) band 8#777})
               end || F <- Files],
              %% The node's own staging directory is gone.
              case N =:= node() of
                  true -> ok;
                  false ->
                      Staged = maps:get(output, NS),
                      ?assertEqual(false, erpc:call(N, filelib, is_dir, [Staged]))
              end,
              Env = env(Dir, N),
              Lo = int(Env, "clock_offset_lo_ns"),
              Hi = int(Env, "clock_offset_hi_ns"),
              Off = int(Env, "clock_offset_ns"),
              ?assertEqual(Clock, #{offset_ns => Off, lo_ns => Lo, hi_ns => Hi}),
              ct:pal("~p: offset ~p ns in [~p, ~p]", [N, Off, Lo, Hi]),
              ?assert(Lo =< 0 andalso 0 =< Hi),
              ?assert(Lo =< Off andalso Off =< Hi),
              ?assertEqual(atom_to_list(node()), maps:get("cluster_control", Env)),
              %% How this node prints the pids of the others.
              Ids = string:split(maps:get("dist_ids", Env), ",", all),
              ?assertEqual(length(Nodes), length(Ids)),
              ?assert(lists:member("0=" ++ atom_to_list(N), Ids)),
              %% An outside reader still reads the rewritten metadata.
              Out = ?L:babeltrace_ok(NodeDir),
              ?assert(byte_size(Out) > 0)
      end, Nodes),
    assert_clean(Config, Nodes),
    python_env(Dir, hd(tl(Nodes))).

%% python3-bt2 (libbabeltrace2) sees the offset in the trace's
%% environment.
python_env(Dir, Node) ->
    Py = "import bt2, sys\n"
        "it = bt2.TraceCollectionMessageIterator(sys.argv[1])\n"
        "for m in it:\n"
        "    if type(m) is bt2._StreamBeginningMessageConst:\n"
        "        e = m.stream.trace.environment\n"
        "        print(e['clock_offset_lo_ns'], e['clock_offset_hi_ns'], e['node'])\n"
        "        break\n",
    %% Debian's python3, where python3-bt2 installs (a python3 first on
    %% PATH, e.g. pyenv's, lacks it).
    Python = "/usr/bin/python3",
    case filelib:is_regular(Python) andalso
        os:cmd(Python ++ " -c 'import bt2' 2>&1") =:= "" of
        false -> ct:pal("python3-bt2 missing for /usr/bin/python3: "
                        "environment check skipped");
        true ->
            File = filename:join(filename:dirname(Dir), "env.py"),
            ok = file:write_file(File, Py),
            Out = os:cmd(Python ++ " " ++ File ++ " '" ++
                             filename:join(Dir, atom_to_list(Node)) ++ "'"),
            Env = env(Dir, Node),
            ?assertEqual(maps:get("clock_offset_lo_ns", Env) ++ " " ++
                             maps:get("clock_offset_hi_ns", Env) ++ " " ++
                             atom_to_list(Node) ++ "\n", Out)
    end.

%% A ping-pong between every pair of the three nodes and a gen_server
%% chain across them: `bin/beamprobe cluster' matches every cross-node
%% message into a flow (as many flows as messages crossed), none is
%% reversed in the merged timeline, and the offsets it prints lie inside
%% the recorded bounds.  A receive printed before its send is allowed
%% only as the VM's order (a send to another node is stamped after it
%% left): marked so on both ends, and as many as `late_send_stamps'.
flows_matched_not_reversed(Config) ->
    chain(Config),
    Calls = 20,
    {Dir, _Sum, PingMsgs} =
        run_cluster(Config, #{events => [send, 'receive']},
                    fun() ->
                            M = ping_pong(nodes_of(Config), 10),
                            chain_calls(Config, Calls),
                            M
                    end),
    chain_stop(Config),
    %% Each chain call: client -> chain_1 -> chain_2 -> chain_3 and the
    %% three replies back (the client is on the control node, chain_1 on
    %% node 2: every hop crosses nodes).
    Expected = PingMsgs + Calls * 6,
    Json = ?L:cli_ok(["cluster", "--json", Dir]),
    ct:pal("~s", [Json]),
    Flows = json_int("flows", Json),
    ?assert(Flows >= Expected),
    ?assertEqual(0, json_int("reversed", Json)),
    ?assertEqual(3, json_int("nodes", Json)),
    %% The merged timeline: every receive printed after its send, and
    %% every message of the workloads in a flow.
    Text = ?L:cli_ok(["cluster", "--print", Dir]),
    L0 = binary:split(Text, <<"\n">>, [global]),
    Lines = lists:zip(lists:seq(1, length(L0)), L0),
    Unmatched = [L || {_, L} <- Lines, binary:match(L, <<"[no flow">>) =/= nomatch,
                      re:run(L, "ping|pong|gen_call|done") =/= nomatch],
    ?assertEqual([], Unmatched),
    FlowLines = [{list_to_integer(F), I, Kind}
                 || {I, L} <- Lines,
                    {match, [Kind, F]} <- [re:run(L, "(sent|received) .*\\[flow ([0-9]+) ",
                                                 [{capture, all_but_first, list}])]],
    Sends = maps:from_list([{F, I} || {F, I, "sent"} <- FlowLines]),
    Recvs = maps:from_list([{F, I} || {F, I, "received"} <- FlowLines]),
    ?assertEqual(Flows, maps:size(Sends)),
    ?assertEqual(Flows, maps:size(Recvs)),
    Late = lists:usort(
             [list_to_integer(F)
              || {_, L} <- Lines,
                 {match, [F]} <- [re:run(L, "\\[flow ([0-9]+) .*, -[0-9.]+[mun]?s, "
                                         "send stamped after it left\\]$",
                                         [{capture, all_but_first, list}])]]),
    ?assertEqual(json_int("late_send_stamps", Json), length(Late)),
    ?assertEqual([], [F || {F, I} <- maps:to_list(Recvs), I < maps:get(F, Sends),
                           not lists:member(F, Late)]),
    %% Perfetto: one flow start and end per flow.
    Out = filename:join(filename:dirname(Dir), "cluster.json"),
    _ = ?L:cli_ok(["cluster", "--perfetto", Out, Dir]),
    {ok, P} = file:read_file(Out),
    S = length(binary:matches(P, <<"\"ph\":\"s\"">>)),
    F = length(binary:matches(P, <<"\"ph\":\"f\"">>)),
    ?assertEqual({Flows, Flows}, {S, F}),
    assert_clean(Config, nodes_of(Config)).

%% A node whose recorded offset is wrong (centre 30 ms off, bounds +-50
%% ms): the reader narrows its bounds with the messages' causality to an
%% interval that still contains the truth (0) and is far narrower, and no
%% flow comes out reversed.
refined_offsets(Config) ->
    {Dir, _, _} = run_cluster(Config, #{events => [send, 'receive']},
                              fun() -> ping_pong(nodes_of(Config), 20) end),
    [_, N2, _] = nodes_of(Config),
    Meta = filename:join([Dir, atom_to_list(N2), "metadata"]),
    {ok, Text} = file:read_file(Meta),
    T1 = lists:foldl(fun({K, V}, T) ->
                             re:replace(T, "\t" ++ K ++ " = \"[^\"]*\";",
                                        "\t" ++ K ++ " = \"" ++ V ++ "\";",
                                        [{return, binary}])
                     end, Text, [{"clock_offset_ns", "30000000"},
                                 {"clock_offset_lo_ns", "-20000000"},
                                 {"clock_offset_hi_ns", "80000000"}]),
    ok = file:write_file(Meta, T1),
    Json = ?L:cli_ok(["cluster", "--json", Dir]),
    ct:pal("~s", [Json]),
    {match, [Lo, Hi]} = re:run(Json, "\"node\": \"" ++ atom_to_list(N2) ++
                                   "\"[^}]*\"refined_lo_ns\": (-?[0-9]+), \"refined_hi_ns\": (-?[0-9]+)",
                               [{capture, all_but_first, list}]),
    {L, H} = {list_to_integer(Lo), list_to_integer(Hi)},
    ?assert(L =< 0 andalso 0 =< H),
    ?assert(H - L < 10000000),
    ?assertEqual(0, json_int("reversed", Json)).

%% Bad specs are refused with a clear error, nothing started anywhere.
bad_specs(Config) ->
    Nodes = nodes_of(Config),
    Dir = ?L:dir(Config, "bad"),
    ?assertEqual({error, {node_down, 'nobody@nowhere'}},
                 beamprobe:start(#{nodes => ['nobody@nowhere'], events => [send]})),
    ?assertMatch({error, {bad_option, nodes, _}},
                 beamprobe:start(#{nodes => [], events => [send]})),
    ?assertMatch({error, {bad_option, nodes, _}},
                 beamprobe:start(#{nodes => [node() | bad], events => [send]})),
    ?assertMatch({error, {bad_option, procs, _}},
                 beamprobe:start(#{nodes => Nodes, procs => [self()],
                                   events => [send]})),
    ?assertMatch({error, {bad_option, output, _}},
                 beamprobe:start(#{nodes => Nodes, output => usdt,
                                   events => [send]})),
    %% An improper exclude list: the caller crashed (bad_generator).
    ?assertEqual({error, {bad_option, exclude, [self() | bad]}},
                 beamprobe:start(#{nodes => Nodes, exclude => [self() | bad],
                                   events => [send], output => {file, Dir}})),
    %% Streamed: a stream for every node, each a sink a session takes.
    ?assertMatch({error, {bad_option, output, "no stream for node" ++ _}},
                 beamprobe:start(#{nodes => Nodes, events => [send],
                                   output => {streams,
                                              #{node() => {tcp, "127.0.0.1:9"}}}})),
    ?assertMatch({error, {bad_option, output, _}},
                 beamprobe:start(#{nodes => Nodes, events => [send],
                                   output => {streams,
                                              maps:from_list([{N, nonsense}
                                                              || N <- Nodes])}})),
    ?assertMatch({error, {bad_option, output, _}},
                 beamprobe:start(#{nodes => Nodes, events => [send],
                                   output => {streams, #{}}})),
    %% A node without beamprobe on its code path.
    {ok, Bare, BareNode} = peer:start_link(#{name => peer:random_name(),
                                             args => ["-hidden"]}),
    try
        ?assertEqual({error, {beamprobe_missing, BareNode}},
                     beamprobe:start(#{nodes => [node(), BareNode],
                                       events => [send],
                                       output => {file, Dir}})),
        ?assertEqual(false, filelib:is_dir(Dir))
    after peer:stop(Bare)
    end,
    ?assertMatch(["bad value for option nodes" ++ _],
                 [beamprobe:format_error({bad_option, nodes, []})]),
    assert_clean(Config, Nodes).

%% A node refuses its session (a module only the control node has): the
%% start fails naming the node, and the sessions already started on the
%% other nodes are stopped and their traces removed.
node_fails_to_start(Config) ->
    Nodes = [_, N2, N3] = nodes_of(Config),
    Dir = ?L:dir(Config, "fails"),
    %% This suite's module exists everywhere; a fresh module only here.
    {module, M} = make_module(),
    R = beamprobe:start(#{nodes => Nodes, calls => [{M, f, 0}],
                          output => {file, Dir}}),
    %% Nodes start in name order: the first peer of the two fails.
    {error, {node_failed, Failed, {no_such_module, M}}} = R,
    ?assert(lists:member(Failed, [N2, N3])),
    ?assertEqual([], beamprobe:list()),
    ?assert(?L:dir_absent_or_empty(Dir)),
    assert_clean(Config, Nodes),
    Staged = [F || N <- Nodes, F <- erpc:call(N, filelib, wildcard,
                                              ["/tmp/beamprobe-cluster-*"])],
    ct:pal("staged left by others: ~p", [Staged]).

make_module() ->
    M = list_to_atom("cluster_only_here_" ++
                         integer_to_list(erlang:unique_integer([positive]))),
    Forms = [{attribute, 1, module, M}, {attribute, 1, export, [{f, 0}]},
             {function, 1, f, 0, [{clause, 1, [], [], [{atom, 1, ok}]}]}],
    {ok, M, Bin} = compile:forms(Forms),
    code:load_binary(M, "nofile", Bin).

%% The process that started a cluster session dies: every node's session
%% ends (as a session ends when its owner dies), nothing left installed.
owner_dies(Config) ->
    Nodes = nodes_of(Config),
    Dir = ?L:dir(Config, "owner"),
    Self = self(),
    Owner = spawn(fun() ->
                          Self ! {started, beamprobe:start(#{nodes => Nodes,
                                                             events => [send],
                                                             output => {file, Dir}})},
                          receive die -> ok end
                  end),
    H = receive {started, {ok, H0}} -> H0 end,
    ?assertEqual(3, maps:size(maps:get(nodes, element(2, beamprobe:info(H))))),
    Ref = monitor(process, H),
    Owner ! die,
    receive {'DOWN', Ref, process, H, _} -> ok after 10000 -> ct:fail(handle_alive) end,
    assert_clean(Config, Nodes),
    %% The traces were still brought home.
    [?assert(filelib:is_file(filename:join([Dir, atom_to_list(N), "metadata"])))
     || N <- Nodes].

%% The coordinator itself is killed while every node is connected: nobody
%% will fetch the nodes' staged traces, so each node ends its session and
%% removes its staged directory (a node that only lost the connection
%% keeps it: node_killed).
coordinator_killed(Config) ->
    Nodes = [N1 | Peers] = nodes_of(Config),
    ?assertEqual(node(), N1),
    Dir = ?L:dir(Config, "coord"),
    Staged = fun() -> lists:append([?L:staged_dirs(N) || N <- Peers]) end,
    Before = Staged(),
    {ok, H} = beamprobe:start(#{nodes => Nodes, events => [send],
                                output => {file, Dir}}),
    New = Staged() -- Before,
    ct:log("staged: ~p", [New]),
    ?assertEqual(length(Peers), length(New)),
    Ref = monitor(process, H),
    exit(H, kill),
    receive {'DOWN', Ref, process, H, killed} -> ok after 5000 -> ct:fail(alive) end,
    assert_clean(Config, Nodes),
    _ = (catch ?L:wait_until(fun() -> Staged() -- Before =:= [] end, 5000)),
    ?assertEqual([], Staged() -- Before).

%% A node dies mid-session: info/1 answers at once, naming it lost (its
%% agent down: noconnection); stop still returns, with the other nodes'
%% traces, and names the lost one.
node_killed(Config) ->
    Nodes = [_, N2, N3] = nodes_of(Config),
    Dir = ?L:dir(Config, "killed"),
    {ok, H} = beamprobe:start(#{nodes => Nodes, events => [send],
                                output => {file, Dir}}),
    {P3, N3} = lists:keyfind(N3, 2, proplists:get_value(peers, Config)),
    peer:stop(P3),
    _ = ?L:wait_until(fun() -> is_map_key(lost, element(2, beamprobe:info(H))) end,
                      10000),
    T0 = erlang:monotonic_time(millisecond),
    {ok, Info} = beamprobe:info(H),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("info took ~p ms: ~p", [Ms, Info]),
    ?assert(Ms < 5000),
    ?assertMatch(#{lost := #{N3 := #{reason := noconnection}},
                   nodes := #{N3 := {error, {agent_down, noconnection}},
                              N2 := {ok, _}}}, Info),
    T1 = erlang:monotonic_time(millisecond),
    {ok, #{nodes := Per}} = beamprobe:stop(H),
    StopMs = erlang:monotonic_time(millisecond) - T1,
    ct:log("stop took ~p ms: ~p", [StopMs, Per]),
    ?assert(StopMs < 30000),
    ?assertMatch(#{fetch := ok}, maps:get(N2, Per)),
    ?assertMatch(#{fetch := {error, {not_stopped, {agent_down, noconnection}}}},
                 maps:get(N3, Per)),
    %% Its staged trace stays on its disk (here, this machine's /tmp):
    %% the summary names it; the test removes it.
    #{staged := Left} = maps:get(N3, Per),
    ?assert(filelib:is_dir(Left)),
    ok = file:del_dir_r(Left),
    assert_clean(Config, Nodes -- [N3]).

%% What the cases check is left on a node (node_clean/0): a process that
%% has exited by the time its trace state is read is not traced (CI
%% failed coordinator_killed on a node's agent, which ends just after its
%% session); a process with flags is.
exited_not_traced(_Config) ->
    {Dead, Ref} = spawn_monitor(fun() -> ok end),
    receive {'DOWN', Ref, process, Dead, _} -> ok end,
    ?assertEqual(undefined, erlang:trace_info(Dead, flags)),
    ?assertEqual([], traced([Dead])),
    Live = spawn(fun() -> receive stop -> ok end end),
    1 = erlang:trace(Live, true, [send]),
    try ?assertEqual([Live], traced([Dead, Live]))
    after
        erlang:trace(Live, false, [all]),
        Live ! stop
    end.

%% Fetching a node's trace: a file that comes shorter than listed (cut,
%% or a read error on the node) is an error naming what came, not a
%% fetch that worked (the staged copy was then deleted: a trace cut
%% without a word).
short_copy_refused(Config) ->
    [_, N2, _] = nodes_of(Config),
    Dir = ?L:dir(Config, "copy"),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    From = filename:join(Dir, "remote-file"),
    Data = crypto:strong_rand_bytes(3 * 1048576 + 17),
    ok = file:write_file(From, Data),
    To1 = filename:join(Dir, "whole"),
    ok = beamprobe_cluster:copy(N2, From, To1, byte_size(Data)),
    ?assertEqual({ok, Data}, file:read_file(To1)),
    {ok, #file_info{mode = Mode}} = file:read_file_info(To1),
    ?assertEqual(8#600, Mode band 8#777),
    To2 = filename:join(Dir, "short"),
    ?assertError({short_copy, From, #{copied := 3145745, size := 3145755,
                                      read := eof}},
                 beamprobe_cluster:copy(N2, From, To2, byte_size(Data) + 10)),
    %% (A file gone on the node: the read there raises, as before.)
    To3 = filename:join(Dir, "gone"),
    ?assertError({exception, {badmatch, {error, enoent}}, _},
                 beamprobe_cluster:copy(N2, From ++ ".missing", To3, 5)).

%% A fetched file is 0600 from its creation.  The copy used to open it
%% under the node's umask (0644 here) and change its mode after, through
%% the file server: another user who opened it in between could read all
%% that was copied in after.  With the file server held (suspended), the
%% window stayed open until it was let go; now no moment shows the file
%% with any mode but 0600, held or not.
copy_private_at_once(Config) ->
    [_, N2, _] = nodes_of(Config),
    %% (the window was there under any umask that lets others read:
    %% 0022 here, and in CI)
    ct:log("umask ~s", [os:cmd("umask")]),
    Dir = ?L:dir(Config, "copy"),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    From = filename:join(Dir, "remote-file"),
    ok = file:write_file(From, <<"secret">>),
    To = filename:join(Dir, "fetched"),
    FS = whereis(file_server_2),
    Self = self(),
    true = erlang:suspend_process(FS),
    Modes = try
                C = spawn(fun() -> Self ! {copied, self(), catch
                                               beamprobe_cluster:copy(
                                                 N2, From, To, 6)}
                          end),
                modes_seen(To, C, 100, [])
            after
                erlang:resume_process(FS)
            end,
    ct:log("modes seen while the file server was held: ~p",
           [lists:usort([integer_to_list(M band 8#777, 8) || M <- Modes])]),
    [] = [M || M <- Modes, M band 8#777 =/= 8#600],
    ok = receive {copied, _, R} -> R after 10000 -> copy_stuck end,
    ?assertEqual({ok, <<"secret">>}, file:read_file(To)),
    %% An existing file is not copied over.
    ?assertError({badmatch, {error, eexist}},
                 beamprobe_cluster:copy(N2, From, To, 6)).

%% The modes of To seen by the file server's side door (prim_file) every
%% 10 ms until the copier C is done or N tries.
modes_seen(_To, _C, 0, Acc) -> Acc;
modes_seen(To, C, N, Acc) ->
    Acc1 = case prim_file:read_file_info(To) of
               {ok, #file_info{mode = M}} -> [M | Acc];
               _ -> Acc
           end,
    receive
        {copied, C, _} = Done -> self() ! Done, Acc1
    after 10 -> modes_seen(To, C, N - 1, Acc1)
    end.

%% A node disconnected for a moment in the middle: its session ends there
%% (its agent cannot know whether the coordinator lives), and the
%% coordinator says so (`lost' in info/1 and in the stop summary, with
%% when), and after the reconnection its stop gets that node's own
%% summary (stop_reason coordinator_unreachable, its events counted in
%% the totals), not `agent_down' with the node's events missing from the
%% totals as before.
disconnect_reported(Config) ->
    with_stdio_peer([], fun(N2) -> disconnect_reported(Config, N2) end).

disconnect_reported(Config, N2) ->
    Nodes = [node(), N2],
    Clean = erpc:call(N2, ?C, node_clean, []),
    Dir = ?L:dir(Config, "disc"),
    {ok, H} = beamprobe:start(#{nodes => Nodes, events => [send],
                                output => {file, Dir}}),
    _ = ping_pong(Nodes, 5),
    true = erlang:disconnect_node(N2),
    _ = ?L:wait_until(fun() ->
                               case beamprobe:info(H) of
                                   {ok, #{lost := #{N2 := _}}} -> true;
                                   _ -> false
                               end
                       end, 5000),
    {ok, #{lost := #{N2 := #{after_seconds := At, reason := noconnection}}}} =
        beamprobe:info(H),
    ?assert(is_float(At) andalso At >= 0),
    true = net_kernel:connect_node(N2),
    {ok, Sum} = beamprobe:stop(H),
    ct:log("~p", [Sum]),
    #{lost := #{N2 := _}, nodes := Per, events := Total} = Sum,
    #{summary := {ok, #{stop_reason := coordinator_unreachable,
                        events := E2}}} = maps:get(N2, Per),
    ?assert(E2 > 0),
    ?assertEqual(Total, lists:sum([E || {_, #{summary := {ok, #{events := E}}}}
                                            <- maps:to_list(Per)])),
    ?assertMatch(#{fetch := ok}, maps:get(N2, Per)),
    %% The merged timeline says so too (before: a node trace that looked
    %% whole, exit 0, its end not explained): the trace records it
    %% (env cluster_lost), `beamprobe cluster' names the node, exit 2.
    ?assertMatch(#{"cluster_lost" := _}, env(Dir, N2)),
    {2, Out} = ?L:cli(["cluster", Dir]),
    ct:log("~ts", [Out]),
    {match, _} = re:run(Out, "node " ++ atom_to_list(N2) ++
                            " was lost mid-session \\(.*noconnection"),
    {match, _} = re:run(Out, "Lost mid-session \\(their traces end there\\): " ++
                            atom_to_list(N2) ++ " \\(after [0-9.]+,noconnection\\)"),
    assert_clean(Config, [node()]),
    ?assertEqual(Clean, erpc:call(N2, ?C, node_clean, [])).

%% exclude with pids of several nodes: each node's session excludes its
%% own (a pid lives on one node; before, every other node refused the
%% session with remote_process), and a pid of a node outside the session
%% is refused naming it.
exclude_per_node(Config) ->
    [N1, N2, N3] = Nodes = nodes_of(Config),
    Spawn = fun(N) -> erpc:call(N, erlang, spawn, [?MODULE, sender, []]) end,
    [A1, B1, A2, B2, C2] = [Spawn(N) || N <- [N1, N1, N2, N2, N2]],
    %% A name registered on one node only is excluded there (before, the
    %% other nodes refused the session: no_such_process).
    true = erpc:call(N2, erlang, register, [bp_excl_named, C2]),
    Dir = ?L:dir(Config, "exclude"),
    ?assertMatch({error, {bad_option, exclude, _}},
                 beamprobe:start(#{nodes => [N1, N3], exclude => [A2],
                                   events => [send], output => {file, Dir}})),
    ?assertEqual({error, {no_such_process, bp_excl_nobody}},
                 beamprobe:start(#{nodes => Nodes, exclude => [bp_excl_nobody],
                                   events => [send], output => {file, Dir}})),
    {ok, H} = beamprobe:start(#{nodes => Nodes,
                                exclude => [A1, A2, bp_excl_named],
                                events => [send], output => {file, Dir}}),
    Self = self(),
    [P ! {go, Self} || P <- [A1, B1, A2, B2, C2]],
    [receive {done, P} -> ok after 5000 -> error({timeout, P}) end
     || P <- [A1, B1, A2, B2, C2]],
    {ok, _} = beamprobe:stop(H),
    Sends = fun(N, P) ->
                    Text = list_to_binary(erpc:call(N, erlang, pid_to_list, [P])),
                    Evs = ?L:trace(filename:join(Dir, atom_to_list(N))),
                    Keys = [K || #{name := <<"process">>, key := K} = E <- Evs,
                                 ?L:field(E, "pid") =:= Text],
                    length([E || #{name := <<"send">>, key := K} = E <- Evs,
                                 lists:member(K, Keys)])
            end,
    ?assertEqual({0, 0, 0}, {Sends(N1, A1), Sends(N2, A2), Sends(N2, C2)}),
    ?assert(Sends(N1, B1) >= 5),
    ?assert(Sends(N2, B2) >= 5),
    assert_clean(Config, Nodes).

%% Sends itself five messages when told to, then says so.
-spec sender() -> ok.
sender() ->
    receive
        {go, From} ->
            [self() ! {x, I} || I <- lists:seq(1, 5)],
            From ! {done, self()},
            ok
    end.

