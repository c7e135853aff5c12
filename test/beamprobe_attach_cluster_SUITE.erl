%%% @doc `beamprobe attach --cluster NODE': three plain nodes (`erl
%%% -sname', no beamprobe) connected to each other and calling each
%%% other's functions are traced by one command: beamprobe is brought to
%%% every node, each node's trace lands in DIR/<node> (clock offsets
%%% recorded, read as one by `beamprobe cluster'), the events are printed
%%% live with their node's name, and every node is left as it was after
%%% the session's own end, ^C, the command killed with SIGKILL or NODE
%%% itself killed; a node with beamprobe on its code path keeps its own;
%%% nodes on another host get the stream through this host's address.
%%%
%%% One node: beamprobe_attach_SUITE; the helpers both use:
%%% beamprobe_attach_lib.
-module(beamprobe_attach_cluster_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("kernel/include/file.hrl").

%% Node checks shared with the other suites that bring beamprobe to a
%% node (test/bp_node_clean.erl), and the attach suites' own
%% (test/beamprobe_attach_lib.erl).
-import(bp_node_clean, [loaded_ours/1, attach_dirs/0]).
-import(beamprobe_attach_lib,
        [short/1, attach/2, attach/3, wait_attached/1, wait_output/3,
         wait_exit/2, interrupt/1, snapshot/1, assert_clean/3,
         wait_clean_problems/4, wait_clean/5]).

-export([all/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([cluster_traces/1, cluster_sigkill_cleans/1, cluster_mixed/1,
         cluster_prints_live/1, cluster_other_host/1,
         cluster_node_killed/1, cluster_node_killed_nif_sent/1,
         cluster_no_output/1]).

-define(CN, 50).

all() -> [cluster_traces, cluster_sigkill_cleans, cluster_mixed,
          cluster_prints_live, cluster_other_host, cluster_node_killed,
          cluster_node_killed_nif_sent, cluster_no_output].

init_per_suite(Config) ->
    beamprobe_attach_lib:init_suite(Config).

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    beamprobe_attach_lib:init_per_testcase(fun init_case/2, Case, Config).

init_case(Case, Config) ->
    %% Three plain nodes (no beamprobe) connected to each other; this
    %% node talks to them over hidden connections, so it is no part of
    %% their cluster (nodes() there lists the three alone).
    %% cluster_mixed: c has beamprobe on its code path.
    Extra = fun($c) when Case =:= cluster_mixed ->
                    ["-pa", filename:dirname(code:which(beamprobe))];
               (_) -> []
            end,
    Targets = [start_hidden_target(list_to_atom(
                                     "bp_attach_" ++ atom_to_list(Case) ++
                                         [$_, C, $_] ++ os:getpid()),
                                   ?config(work_dir, Config), Extra(C))
               || C <- "abc"],
    Nodes = [N || {N, _} <- Targets],
    [true = rpc:call(A, net_kernel, connect_node, [B]) || A <- Nodes,
                                                          B <- Nodes, A < B],
    %% (The far end of a connection lists it a moment later.)
    Peers = fun(N) -> lists:sort(rpc:call(N, erlang, nodes, [])) end,
    _ = [begin
             _ = catch beamprobe_test_lib:wait_until(
                         fun() -> Peers(N) =:= Nodes -- [N] end, 5000),
             ?assertEqual(Nodes -- [N], Peers(N))
         end || N <- Nodes],
    [{Node, Port} | _] = Targets,
    Out = filename:join(?config(priv_dir, Config), atom_to_list(Case)),
    [{target, Node}, {target_port, Port}, {targets, Targets}, {out, Out},
     {case_name, Case}, {tmp_before, attach_dirs()} | Config].

end_per_testcase(_Case, Config) ->
    beamprobe_attach_lib:end_per_testcase(Config).

%%% ------------------------------------------------------------------------

%% --cluster: three plain nodes calling each other's
%% bp_attach_work:double/1; one command brings beamprobe to all of them,
%% the limit ends the session, DIR holds one trace per node that
%% `beamprobe cluster' reads (nodes, offsets recorded), each node's trace
%% has exactly the calls it served, and every node is left as it was.
cluster_traces(Config) ->
    Nodes = [N || {N, _} <- ?config(targets, Config)],
    Out = ?config(out, Config),
    Befores = [{N, snapshot(N)} || N <- Nodes],
    A = attach(Config, ["--cluster", "-o", Out, "--seconds", "8",
                        short(hd(Nodes)), "bp_attach_work:double/1"]),
    T = wait_attached(A),
    ?assertMatch({match, _}, re:run(T, "cluster session on 3 nodes")),
    %% Each node calls double/1 on each other node ?CN times: every node
    %% serves 2 * ?CN calls.
    Ws = [rpc:async_call(N, bp_attach_work, remote, [Nodes -- [N], ?CN])
          || N <- Nodes],
    _ = [ok = rpc:yield(W) || W <- Ws],
    {0, Text} = wait_exit(A, 30000),
    ct:log("attach said:~n~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "every node left as it was")),
    ?assertMatch({match, _}, re:run(Text, "2 other nodes cleaned by their "
                                    "agents, beamprobe brought to and "
                                    "removed from 2\\)")),
    _ = [assert_clean(N, B, Config) || {N, B} <- Befores],
    %% No node's staged trace left behind (beamprobe_cluster's).
    ?assertEqual([], filelib:wildcard("/tmp/beamprobe-cluster-*" ++
                                          atom_to_list(?FUNCTION_NAME) ++
                                          "*")),
    %% One trace per node, and nothing else.
    ?assertEqual(lists:sort([atom_to_list(N) || N <- Nodes]),
                 lists:sort(filelib:wildcard("*", Out))),
    _ = [begin
             D = filename:join(Out, atom_to_list(N)),
             {ok, #file_info{mode = M}} = file:read_file_info(
                                            filename:join(D, "metadata")),
             ?assertEqual(8#600, M band 8#777),
             Stats = beamprobe_test_lib:cli_ok(["stats", "--json", D]),
             {match, [Calls]} = re:run(Stats, "\"calls\": *([0-9]+)",
                                       [{capture, all_but_first, list}]),
             ?assertEqual({N, 2 * ?CN}, {N, list_to_integer(Calls)})
         end || N <- Nodes],
    J = beamprobe_test_lib:cli_ok(["cluster", "--json", Out]),
    ct:log("cluster --json:~n~s", [J]),
    ?assertMatch({match, _}, re:run(J, "\"nodes\": 3,")),
    ?assertMatch({match, _}, re:run(J, "\"control\": \"" ++
                                        atom_to_list(hd(Nodes)) ++ "\"")),
    _ = [?assertMatch({match, _},
                      re:run(J, "\"node\": \"" ++ atom_to_list(N) ++
                                 "\", \"recorded\": true"))
         || N <- Nodes],
    %% The merged timeline has every node's calls.
    P = beamprobe_test_lib:cli_ok(["cluster", "--print", Out]),
    ?assertEqual(3 * 2 * ?CN,
                 length(binary:matches(P, <<"call bp_attach_work:double(">>))).

%% --cluster, the command killed with SIGKILL mid-session: the agent on
%% NODE sees it go, stops the cluster session and has every other node's
%% agent undo what it brought: all three nodes clean within seconds.
cluster_sigkill_cleans(Config) ->
    Nodes = [N || {N, _} <- ?config(targets, Config)],
    Befores = [{N, snapshot(N)} || N <- Nodes],
    A = attach(Config, ["--cluster", "-o", ?config(out, Config),
                        short(hd(Nodes)), "bp_attach_work:double/1"]),
    _ = wait_attached(A),
    _ = [?assertNotEqual([], loaded_ours(N)) || N <- Nodes],
    ok = rpc:call(hd(Nodes), bp_attach_work, remote, [tl(Nodes), 10]),
    {os_pid, Os} = erlang:port_info(A, os_pid),
    T0 = erlang:monotonic_time(millisecond),
    os:cmd("kill -9 " ++ integer_to_list(Os)),
    Ms = [wait_clean(N, B, Config, T0, 3000) || {N, B} <- Befores],
    ct:log("clean after ~w ms", [Ms]),
    ?assert(lists:max(Ms) =< 1000),
    %% Nothing staged on any node either.
    ?assertEqual([], cluster_staged(?FUNCTION_NAME)).

%% --cluster prints every node's events as they arrive, each line with its
%% node's name (while the session runs: the lines are there before it
%% ends), and the node traces in DIR hold exactly what was printed, per
%% node; the clock offsets are recorded in them at the end.
cluster_prints_live(Config) ->
    Nodes = [N || {N, _} <- ?config(targets, Config)],
    Out = ?config(out, Config),
    Befores = [{N, snapshot(N)} || N <- Nodes],
    A = attach(Config, ["--cluster", "-p", "-o", Out, "--seconds", "60",
                        short(hd(Nodes)), "bp_attach_work:double/1"]),
    _ = wait_attached(A),
    Ws = [rpc:async_call(N, bp_attach_work, remote, [Nodes -- [N], ?CN])
          || N <- Nodes],
    _ = [ok = rpc:yield(W) || W <- Ws],
    %% Still running (60 s): every node's calls are printed already.
    Count = fun(T, N) ->
                    length([L || L <- binary:split(T, <<"\n">>, [global]),
                                 binary:match(L, <<"call bp_attach_work:"
                                                   "double(">>) =/= nomatch,
                                 lists:member(atom_to_binary(N),
                                              binary:split(L, <<" ">>,
                                                           [global]))])
            end,
    Live = wait_output(A, fun(T) ->
                                  lists:all(fun(N) -> Count(T, N) >= 2 * ?CN
                                            end, Nodes)
                          end, 20000),
    ?assertEqual([{N, 2 * ?CN} || N <- Nodes],
                 [{N, Count(Live, N)} || N <- Nodes]),
    %% A line: time, node, pid, event.
    ?assertMatch({match, _},
                 re:run(Live, "^[0-9:.]+ " ++ atom_to_list(lists:last(Nodes))
                        ++ " <[0-9.]+> +call bp_attach_work:double\\([0-9]+\\)$",
                        [multiline])),
    interrupt(A),
    {0, Text} = wait_exit(A, 30000),
    ct:log("attach said:~n~s", [Text]),
    ?assertEqual([{N, 2 * ?CN} || N <- Nodes],
                 [{N, Count(Text, N)} || N <- Nodes]),
    ?assertMatch({match, _}, re:run(Text, "0 lost on|, 0 lost, on")),
    _ = [?assertMatch({match, _},
                      re:run(Text, atom_to_list(N) ++ ": [0-9]+ events, 0 lost"))
         || N <- Nodes],
    _ = [assert_clean(N, B, Config) || {N, B} <- Befores],
    ?assertEqual([], cluster_staged(?FUNCTION_NAME)),
    %% The final traces: the same count per node, offsets recorded.
    ?assertEqual(lists:sort([atom_to_list(N) || N <- Nodes]),
                 lists:sort(filelib:wildcard("*", Out))),
    _ = [begin
             Stats = beamprobe_test_lib:cli_ok(
                       ["stats", "--json", filename:join(Out, atom_to_list(N))]),
             {match, [Calls]} = re:run(Stats, "\"calls\": *([0-9]+)",
                                       [{capture, all_but_first, list}]),
             ?assertEqual({N, 2 * ?CN}, {N, list_to_integer(Calls)})
         end || N <- Nodes],
    J = beamprobe_test_lib:cli_ok(["cluster", "--json", Out]),
    _ = [?assertMatch({match, _},
                      re:run(J, "\"node\": \"" ++ atom_to_list(N) ++
                                 "\", \"recorded\": true"))
         || N <- Nodes].

%% --cluster with nodes on another host: the node streams must reach the
%% command from there, so the listeners take this host's address on the
%% route to that host and the sessions connect with remote => true
%% (BEAMPROBE_ATTACH_OTHER_HOSTS makes this machine's host name count as
%% another host's); every node's events still arrive, the nodes are left
%% clean.
cluster_other_host(Config) ->
    Nodes = [N || {N, _} <- ?config(targets, Config)],
    Out = ?config(out, Config),
    Befores = [{N, snapshot(N)} || N <- Nodes],
    [_, Host] = string:split(atom_to_list(hd(Nodes)), "@"),
    A = attach(Config, ["--cluster", "-p", "-o", Out, "--seconds", "60",
                        short(hd(Nodes)), "bp_attach_work:double/1"],
               [{"BEAMPROBE_ATTACH_OTHER_HOSTS", "elsewhere," ++ Host}]),
    _ = wait_attached(A),
    _ = [ok = rpc:call(N, bp_attach_work, work, [?CN]) || N <- Nodes],
    _ = wait_output(A, fun(T) ->
                               lists:all(fun(N) ->
                                   length(binary:matches(
                                            T, <<(atom_to_binary(N))/binary,
                                                 " <">>)) >= ?CN
                               end, Nodes)
                       end, 20000),
    interrupt(A),
    {0, Text} = wait_exit(A, 30000),
    ct:log("attach said:~n~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "a node on another host \\(")),
    _ = [?assertMatch({match, _},
                      re:run(Text, atom_to_list(N) ++ ": [0-9]+ events, 0 lost"))
         || N <- Nodes],
    _ = [begin
             Stats = beamprobe_test_lib:cli_ok(
                       ["stats", "--json", filename:join(Out, atom_to_list(N))]),
             {match, [Calls]} = re:run(Stats, "\"calls\": *([0-9]+)",
                                       [{capture, all_but_first, list}]),
             ?assertEqual({N, ?CN}, {N, list_to_integer(Calls)})
         end || N <- Nodes],
    _ = [assert_clean(N, B, Config) || {N, B} <- Befores].

%% --cluster without -o: printed live as always, the node traces in a
%% temporary directory (of $TMPDIR) that is removed at the end.
cluster_no_output(Config) ->
    Nodes = [N || {N, _} <- ?config(targets, Config)],
    Tmp = filename:join(?config(priv_dir, Config), "tmp"),
    ok = file:make_dir(Tmp),
    A = attach(Config, ["--cluster", "--seconds", "60", short(hd(Nodes)),
                        "bp_attach_work:double/1"], [{"TMPDIR", Tmp}]),
    _ = wait_attached(A),
    %% The node traces are being written there.
    [TraceDir] = [D || D <- filelib:wildcard(filename:join(Tmp, "*")),
                       lists:prefix("beamprobe-trace-", filename:basename(D))],
    ?assertEqual(lists:sort([atom_to_list(N) || N <- Nodes]),
                 lists:sort(filelib:wildcard("*", TraceDir))),
    _ = [ok = rpc:call(N, bp_attach_work, remote, [Nodes -- [N], 5])
         || N <- Nodes],
    _ = wait_output(A, fun(T) ->
                               lists:all(fun(N) ->
                                   length(binary:matches(
                                            T, <<(atom_to_binary(N))/binary,
                                                 " <">>)) >= 10
                               end, Nodes)
                       end, 20000),
    interrupt(A),
    {0, Text} = wait_exit(A, 30000),
    ct:log("attach said:~n~s", [Text]),
    ?assertEqual(nomatch, binary:match(Text, <<"written to">>)),
    ?assertEqual({ok, []}, file:list_dir(Tmp)).

%% --cluster, NODE itself killed mid-session: the command notices at once,
%% says so and exits 2 within a second; the other nodes' sessions end
%% (their coordinator is gone) and their agents undo what attach brought:
%% no trace flags, patterns, beamprobe modules or processes, no files,
%% within a second; no staging directory is left in /tmp (nor NODE's NIF
%% directory: removed once the library is loaded); DIR keeps the partial
%% node traces, readable by `print'.
cluster_node_killed(Config) ->
    node_killed(Config, []).

%% The same, NODE's NIF sent over distribution into a directory its agent
%% made (as for a node of another user): NODE dead, that directory is
%% not left (removed once the library was loaded).
cluster_node_killed_nif_sent(Config) ->
    node_killed(Config, [{"BEAMPROBE_ATTACH_SEND_NIF", "1"}]).

node_killed(Config, Env) ->
    Nodes = [Node | Others] = [N || {N, _} <- ?config(targets, Config)],
    Out = ?config(out, Config),
    Befores = [{N, snapshot(N)} || N <- Others],
    A = attach(Config, ["--cluster", "-p", "-o", Out, "--seconds", "60",
                        short(Node), "bp_attach_work:double/1"], Env),
    _ = wait_attached(A),
    ok = rpc:call(Node, bp_attach_work, remote, [Others, 10]),
    _ = [ok = rpc:call(N, bp_attach_work, remote, [Nodes -- [N], 10])
         || N <- Others],
    %% Every node's events are flowing.
    _ = wait_output(A, fun(T) ->
                               lists:all(fun(N) ->
                                   binary:match(T, <<(atom_to_binary(N))/binary,
                                                     " <">>) =/= nomatch
                               end, Nodes)
                       end, 20000),
    _ = [?assertNotEqual([], loaded_ours(N)) || N <- Others],
    %% The library's files are gone once it is loaded (a node killed
    %% leaves none behind).
    ?assertEqual([], attach_dirs() -- ?config(tmp_before, Config)),
    {os_pid, NodeOs} = erlang:port_info(?config(target_port, Config), os_pid),
    T0 = erlang:monotonic_time(millisecond),
    os:cmd("kill -9 " ++ integer_to_list(NodeOs)),
    {2, Text} = wait_exit(A, 5000),
    CliMs = erlang:monotonic_time(millisecond) - T0,
    ct:log("attach said (exit after ~b ms):~n~s", [CliMs, Text]),
    ?assertMatch({match, _}, re:run(Text, "lost the connection to " ++
                                        atom_to_list(Node))),
    ?assert(CliMs =< 1000),
    Ms = [wait_clean(N, B, Config, T0, 3000) || {N, B} <- Befores],
    ct:log("other nodes clean after ~w ms", [Ms]),
    ?assert(lists:max(Ms) =< 1000),
    _ = [?assertEqual({N, []}, {N, [F || F <- loaded_ours(N)]})
         || N <- Others],
    ?assertEqual([], cluster_staged(?config(case_name, Config))),
    ?assertEqual([], attach_dirs() -- ?config(tmp_before, Config)),
    %% DIR: the node traces as far as they came, nothing else.
    ?assertEqual(lists:sort([atom_to_list(N) || N <- Nodes]),
                 lists:sort(filelib:wildcard("*", Out))),
    ?assertNot(filelib:is_file(filename:join(Out, ".complete"))),
    _ = [beamprobe_test_lib:cli_ok(["print", filename:join(Out,
                                                            atom_to_list(N))])
         || N <- Others].

%% --cluster where one node has beamprobe on its code path: nothing is
%% brought there, but its agent still unloads what the session loaded; the
%% two others get beamprobe; all three traced and clean.
cluster_mixed(Config) ->
    Nodes = [_, _, C] = [N || {N, _} <- ?config(targets, Config)],
    Out = ?config(out, Config),
    ?assertNotEqual(non_existing, rpc:call(C, code, which, [beamprobe])),
    Befores = [{N, snapshot(N)} || N <- Nodes],
    A = attach(Config, ["--cluster", "-o", Out, "--max-events", "1000",
                        "--seconds", "60", short(hd(Nodes)),
                        "bp_attach_work:double/1"]),
    _ = wait_attached(A),
    %% c's beamprobe is its own, nothing from attach.
    ?assertEqual([], [M || M <- loaded_ours(C),
                           lists:prefix("beamprobe-attach:",
                                        rpc:call(C, code, which, [M]))]),
    ok = rpc:call(hd(Nodes), bp_attach_work, remote, [tl(Nodes), 20]),
    timer:sleep(500),
    interrupt(A),
    {0, Text} = wait_exit(A, 30000),
    ct:log("attach said:~n~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "2 other nodes cleaned by their "
                                    "agents, beamprobe brought to and "
                                    "removed from 1\\)")),
    %% c's own NIF (its priv/, not a file attach brought) may stay mapped,
    %% as after a plain attach to a node that has beamprobe; the rest is
    %% as before on every node.
    Own = filename:join([filename:dirname(filename:dirname(
                                            code:which(beamprobe))),
                         "priv", "beamprobe_nif.so"]),
    _ = [?assertEqual({N, []},
                      {N, wait_clean_problems(N, B, Config, 3000) --
                           [{nif_mapped, Own} || N =:= C]})
         || {N, B} <- Befores],
    ?assertEqual(lists:sort([atom_to_list(N) || N <- Nodes]),
                 lists:sort(filelib:wildcard("*", Out))),
    P = beamprobe_test_lib:cli_ok(["cluster", "--print", Out]),
    ?assertEqual(40, length(binary:matches(P, <<"call bp_attach_work:double(">>))).

%%% ------------------------------------------------------------------------

%% A plain node (plus Extra arguments) reached over a hidden connection.
start_hidden_target(Name, WDir, Extra) ->
    beamprobe_attach_lib:started_target(Name, WDir, Extra, hidden).

%% A cluster session's staged traces (beamprobe_cluster's) on this case's
%% nodes.
cluster_staged(Case) ->
    filelib:wildcard("/tmp/beamprobe-cluster-*bp_attach_" ++
                         atom_to_list(Case) ++ "_*").
