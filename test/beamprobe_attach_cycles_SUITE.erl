%%% @doc Repeated `beamprobe attach NODE' cycles on one plain node (no
%%% beamprobe on its code path), each ended another way (^C, SIGTERM,
%%% SIGKILL of the command, the session's own limit, the connection
%%% dropped), the node checked after each for everything a session could
%%% leave: beamprobe's modules, processes, names; trace flags and tracers
%%% on every process and port, trace patterns, meta patterns and counters
%%% on every loaded function, message trace patterns, the sequential
%%% tracer, the system monitor and profiler; the descriptors and the ring
%%% mappings (over 64 MiB) of the node's OS process; the files in /tmp;
%%% and the growth of its atoms and memory over the cycles (a slow leak
%%% shows over many cycles, not one).
%%%
%%% The helpers: beamprobe_attach_lib, bp_node_clean.
-module(beamprobe_attach_cycles_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-import(beamprobe_attach_lib,
        [short/1, attach/2, wait_attached/1, wait_exit/2, interrupt/1,
         snapshot/1]).

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([cycles/1, cluster_cycles/1, profile_cycles/1, session_killed/1,
         agent_killed/1, cluster_peer_killed/1, node_killed/1]).

-define(CYCLES, 15).

suite() -> [{timetrap, {seconds, 120}}].

all() -> [cycles, cluster_cycles, profile_cycles, session_killed,
          agent_killed, cluster_peer_killed, node_killed].

init_per_suite(Config) ->
    beamprobe_attach_lib:init_suite(Config).

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    beamprobe_attach_lib:init_per_testcase(fun init_case/2, Case, Config).

init_case(cluster_peer_killed, Config) ->
    C = init_case(cluster_cycles, Config),
    lists:keystore(out, 1, C, {out, filename:join(?config(priv_dir, Config),
                                                  "cluster_peer_killed")});
init_case(cluster_cycles, Config) ->
    %% Three plain nodes connected to each other, reached from here over
    %% hidden connections (this node is no part of their cluster).
    Targets = [beamprobe_attach_lib:started_target(
                 list_to_atom("bp_attach_cc_" ++ [C, $_] ++ os:getpid()),
                 ?config(work_dir, Config), [], hidden) || C <- "abc"],
    Nodes = [N || {N, _} <- Targets],
    connect(Nodes),
    [{Node, Port} | _] = Targets,
    Out = filename:join(?config(priv_dir, Config), "cluster_cycles"),
    [{target, Node}, {target_port, Port}, {targets, Targets}, {out, Out},
     {tmp_before, tmp_files()} | Config];
init_case(Case, Config) ->
    Name = list_to_atom("bp_attach_" ++ atom_to_list(Case) ++ "_" ++
                            os:getpid()),
    {Node, Port} = beamprobe_attach_lib:started_target(
                     Name, ?config(work_dir, Config), [], ping),
    Out = filename:join(?config(priv_dir, Config), atom_to_list(Case)),
    [{target, Node}, {target_port, Port}, {out, Out},
     {tmp_before, tmp_files()} | Config].

end_per_testcase(_Case, Config) ->
    beamprobe_attach_lib:end_per_testcase(Config).

%%% ------------------------------------------------------------------------

%% ?CYCLES attaches, each ended one of five ways; after each the node has
%% nothing of the session's (deep/1 as before the first), and over the
%% cycles its atoms and memory grow by a bounded amount.
cycles(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    Deep0 = deep(Node),
    Ends = [int, term, kill, limit, drop],
    Figs = [begin
                End = lists:nth(1 + (I - 1) rem length(Ends), Ends),
                cycle(End, I, Node, Before, Deep0, Config),
                {I, End, counts(Node)}
            end || I <- lists:seq(1, ?CYCLES)],
    ct:log("cycles (i, end, {atoms, memory total, processes}):~n~p", [Figs]),
    %% After the first round of ends (every path taken once), the rest
    %% add no atoms but the nodes' names of the command lines (one per
    %% attach, distribution's) and bounded memory.
    {_, _, {A5, M5, _}} = lists:nth(5, Figs),
    {_, _, {AN, MN, _}} = lists:last(Figs),
    ?assert(AN - A5 =< 2 * (?CYCLES - 5), {atoms, A5, AN}),
    ?assert(MN - M5 < 4 * 1024 * 1024, {memory, M5, MN}).

%% The same over three nodes with --cluster (the command on the first):
%% also ended by the first node losing its connection to another one
%% mid-session (that node's agent cleans up by itself); every node is
%% checked after each cycle.
cluster_cycles(Config) ->
    Nodes = [N || {N, _} <- ?config(targets, Config)],
    Befores = [{N, snapshot(N), deep(N)} || N <- Nodes],
    Ends = [int, kill, limit, peer_drop, term, drop, agent_killed,
            remote_agent_killed],
    Figs = [begin
                End = lists:nth(1 + (I - 1) rem length(Ends), Ends),
                cycle(End, I, Nodes, Befores, Config),
                connect(Nodes),
                {I, End, [counts(N) || N <- Nodes]}
            end || I <- lists:seq(1, 16)],
    ct:log("cycles (i, end, per node {atoms, memory total, processes}):~n~p",
           [Figs]),
    {_, _, C6} = lists:nth(8, Figs),
    {_, _, CN} = lists:last(Figs),
    _ = [begin
             ?assert(AN - A6 =< 4 * 8, {atoms, N, A6, AN}),
             ?assert(MN - M6 < 4 * 1024 * 1024, {memory, N, M6, MN})
         end || {N, {A6, M6, _}, {AN, MN, _}} <- lists:zip3(Nodes, C6, CN)],
    ok.

%% The kernel's name lookup service, started on a node by the first
%% lookup that needs it (a node that lost a connection looks its peer up
%% again): the kernel's, not the session's.
kernel_service({registered, Names}) ->
    Names -- [inet_gethost_native, inet_gethost_native_sup] =:= [];
kernel_service(_) -> false.

%% --cluster: the third node dies mid-session (its OS process killed);
%% the session goes on, ^C ends it, the two others are left clean; twice.
cluster_peer_killed(Config) ->
    [{_, _}, {_, _}, {N3, P3}] = ?config(targets, Config),
    Nodes = [N || {N, _} <- ?config(targets, Config)],
    Befores = [{N, snapshot(N), deep(N)} || N <- Nodes -- [N3]],
    cycle({peer_killed, P3}, 1, Nodes, Befores, Config),
    ok.

%% The node itself dies mid-session (its OS process killed, as by the
%% out-of-memory killer): the command exits 2 and nothing attach placed
%% is left in /tmp (the library's file and directory stayed there for
%% good: nobody was left to remove them).
node_killed(Config) ->
    Node = ?config(target, Config),
    A = attach(Config, ["-o", ?config(out, Config), "-q", short(Node),
                        "bp_attach_work:double/1", "--seconds", "60"]),
    wait_attached(A),
    ok = rpc:call(Node, bp_attach_work, work, [50]),
    bp_node_clean:kill_port(?config(target_port, Config)),
    {2, Text} = wait_exit(A, 15000),
    ct:log("~s", [Text]),
    ?assertEqual([], tmp_files() -- ?config(tmp_before, Config)).

connect(Nodes) ->
    [true = rpc:call(A, net_kernel, connect_node, [B]) || A <- Nodes,
                                                          B <- Nodes, A < B],
    Peers = fun(N) -> lists:sort(rpc:call(N, erlang, nodes, [])) end,
    _ = [beamprobe_test_lib:wait_until(
           fun() -> Peers(N) =:= Nodes -- [N] end, 5000) || N <- Nodes],
    ok.

cycle(End, I, Node, Before, Deep0, Config) ->
    cycle(End, I, [Node], [{Node, Before, Deep0}], Config).

%% Someone on the node kills the session's process: the agent ends the
%% attach, cleans up and says the session ended abnormally (it said "no
%% session ran").
session_killed(Config) ->
    killed(session_killed, Config).

%% Someone on the node kills the attach agent itself (exit(Pid, kill):
%% no code of its runs): its guard undoes what it brought and tells the
%% command line, which ends (it waited for good, the node keeping
%% beamprobe's modules, application and NIF file).
agent_killed(Config) ->
    killed(agent_killed, Config).

killed(End, Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    Deep0 = deep(Node),
    _ = [cycle(End, I, Node, Before, Deep0, Config) || I <- [1, 2, 3]],
    ok.

%% `beamprobe profile NODE' (through attach: counters, call flags), ended
%% the same five ways (limit: its --seconds), with timing per process
%% and without timing in turn.
profile_cycles(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    Deep0 = deep(Node),
    Ends = [int, term, kill, limit, drop, agent_killed],
    Figs = [begin
                End = lists:nth(1 + (I - 1) rem length(Ends), Ends),
                profile_cycle(End, I, Node, [{Node, Before, Deep0}], Config),
                {I, End, counts(Node)}
            end || I <- lists:seq(1, 12)],
    ct:log("cycles (i, end, {atoms, memory total, processes}):~n~p", [Figs]),
    {_, _, {A5, M5, _}} = lists:nth(6, Figs),
    {_, _, {AN, MN, _}} = lists:last(Figs),
    ?assert(AN - A5 =< 2 * 6, {atoms, A5, AN}),
    ?assert(MN - M5 < 4 * 1024 * 1024, {memory, M5, MN}).

profile_cycle(End, I, Node, Befores, Config) ->
    Secs = case End of
               limit -> "1";
               _ -> "600"
           end,
    Timing = case I rem 2 of
                 0 -> ["--no-timing"];
                 1 -> ["--per-process"]
             end,
    Bin = filename:join([filename:dirname(filename:dirname(
                                            code:which(beamprobe))),
                         "bin", "beamprobe"]),
    A = open_port({spawn_executable, Bin},
                  [{args, ["profile", "--cookie",
                           atom_to_list(erlang:get_cookie()),
                           "--seconds", Secs | Timing] ++
                        [short(Node), "bp_attach_work:double/1",
                         "lists:seq/2"]},
                   exit_status, binary, stderr_to_stdout, stream]),
    _ = beamprobe_attach_lib:wait_output(
          A, fun(T) -> binary:match(T, <<"profiling on">>) =/= nomatch end,
          30000),
    ending(End, I, A, [Node], Befores, Config).

cycle(End, I, Nodes, Befores, Config) ->
    Node = hd(Nodes),
    Cluster = [C || length(Nodes) > 1, C <- ["--cluster"]],
    Out = ?config(out, Config) ++ "-" ++ integer_to_list(I),
    Limit = case End of
                limit -> ["--max-events", "10"];
                _ -> ["--seconds", "60"]
            end,
    A = attach(Config, Cluster ++ ["-o", Out, "-q", short(Node),
                        "bp_attach_work:double/1 -> return",
                        "lists:seq/2", "--events", "send,receive,procs,gc"] ++ Limit),
    wait_attached(A),
    _ = [ok = rpc:call(N, bp_attach_work, work, [50]) || N <- Nodes],
    ending(End, I, A, Nodes, Befores, Config).

ending(End, I, A, Nodes, Befores, Config) ->
    Node = hd(Nodes),
    {os_pid, Os} = erlang:port_info(A, os_pid),
    Kill = fun(Sig) -> os:cmd("kill -" ++ Sig ++ " " ++ integer_to_list(Os))
           end,
    case End of
        {peer_killed, P3} ->
            bp_node_clean:kill_port(P3),
            N3 = lists:nth(3, Nodes),
            _ = beamprobe_test_lib:wait_until(
                  fun() -> not lists:member(N3, rpc:call(Node, erlang, nodes,
                                                         []))
                  end, 5000),
            interrupt(A);
        remote_agent_killed ->
            N2 = lists:nth(2, Nodes),
            Ag2 = rpc:call(N2, erlang, whereis, [beamprobe_attach_agent]),
            true = rpc:call(N2, erlang, exit, [Ag2, kill]),
            interrupt(A);
        agent_killed ->
            Ag = rpc:call(Node, erlang, whereis, [beamprobe_attach_agent]),
            true = rpc:call(Node, erlang, exit, [Ag, kill]);
        session_killed ->
            [S] = rpc:call(Node, beamprobe, list, []),
            true = rpc:call(Node, erlang, exit, [S, kill]);
        int -> interrupt(A);
        term -> Kill("TERM");
        kill -> Kill("KILL");
        limit -> ok;
        drop ->
            [Cli] = [N || N <- rpc:call(Node, erlang, nodes, [hidden]),
                          lists:prefix("beamprobe_", atom_to_list(N))],
            true = rpc:call(Node, erlang, disconnect_node, [Cli]);
        peer_drop ->
            %% The second node loses the first (the control node): its
            %% agent cleans up; then the command ends by ^C.
            true = rpc:call(lists:nth(2, Nodes), erlang, disconnect_node,
                            [Node]),
            interrupt(A)
    end,
    {Status, Text} = wait_exit(A, 15000),
    ct:log("cycle ~p (~p): exit ~p~n~s", [I, End, Status, Text]),
    %% The command says what happened on the node.
    _ = [?assertMatch({match, _}, re:run(Text, "the attach agent died"))
         || End =:= agent_killed],
    _ = [?assertMatch({match, _}, re:run(Text, "session ended abnormally"))
         || End =:= session_killed],
    %% ... and that the trace cannot be trusted whole: exit 2 (it was 0
    %% when the agent or the session was killed on the node).
    _ = [?assertEqual({End, 2}, {End, Status})
         || End =:= agent_killed orelse End =:= session_killed],
    Problems = bp_node_clean:wait_problems(
                 fun() ->
                         [{N, P} || {N, Before, Deep0} <- Befores,
                                    P <- beamprobe_attach_lib:wait_clean_problems(
                                           N, Before, Config, 0) ++
                                        diff(Deep0, deep(N)),
                                    not kernel_service(P)] ++
                             [{tmp, tmp_files() -- ?config(tmp_before, Config)}
                              || tmp_files() -- ?config(tmp_before, Config)
                                     =/= []]
                 end, 3000),
    ?assertEqual({I, End, []}, {I, End, Problems}).

%%% ------------------------------------------------------------------------

%% Everything on the node a session could leave (an Erlang expression
%% evaluated there: nothing is loaded for the check) and its OS process's
%% descriptors and big mappings.
deep(Node) ->
    Expr =
        "Fs = [{M, F, A} || {M, _} <- code:all_loaded(),"
        "       {F, A} <- try M:module_info(functions) catch _:_ -> [] end],"
        "Set = fun(I) -> lists:any(fun({_, V}) -> V =/= false andalso"
        "                                          V =/= [] end, I) end,"
        "Pats = [{MFA, I} || MFA <- Fs, {all, I} <- [erlang:trace_info(MFA, all)],"
        "        is_list(I), Set(I)],"
        "Traced = [{P, F, T} || P <- processes() ++ erlang:ports(),"
        "          {flags, F} <- [erlang:trace_info(P, flags)],"
        "          {tracer, T} <- [erlang:trace_info(P, tracer)],"
        "          F =/= [] orelse T =/= []],"
        "New = [{K, F} || K <- [new_processes, new_ports],"
        "       {flags, F} <- [erlang:trace_info(K, flags)], F =/= []],"
        "Msg = [{K, MS} || K <- [send, 'receive'],"
        "       {match_spec, MS} <- [erlang:trace_info(K, match_spec)],"
        "       MS =/= true, MS =/= false],"
        "Sys = [{K, T} || {K, T} <- [{seq, erlang:system_info(sequential_tracer)},"
        "       {monitor, erlang:system_monitor()},"
        "       {profile, erlang:system_profile()}],"
        "       T =/= undefined, T =/= {sequential_tracer, false}],"
        "#{patterns => Pats, traced => Traced, new => New, msg => Msg,"
        "  sys => Sys, ets => [T || T <- ets:all(), is_atom(T) orelse"
        "       lists:prefix(\"beamprobe\", atom_to_list(ets:info(T, name)))],"
        "  os => os:getpid()}.",
    {ok, Toks, _} = erl_scan:string(Expr),
    {ok, Exprs} = erl_parse:parse_exprs(Toks),
    {value, M, _} = rpc:call(Node, erl_eval, exprs, [Exprs, []]),
    Os = maps:get(os, M),
    Fd = "/proc/" ++ Os ++ "/fd/",
    {ok, Fds} = file:list_dir(Fd),
    M#{fds => lists:sort([T || F <- Fds, {ok, T} <- [file:read_link(Fd ++ F)],
                               not lists:prefix("socket:", T),
                               not lists:prefix("anon_inode:", T),
                               not lists:prefix("pipe:", T)]),
       big_maps => big_maps(Os),
       threads => [length(element(2, file:list_dir("/proc/" ++ Os ++ "/task")))],
       ours_mapped => ours_mapped(Os)}.

%% The mappings of a file of beamprobe's (the NIF library, also once its
%% file is deleted).
ours_mapped(Os) ->
    {ok, M} = file:read_file("/proc/" ++ Os ++ "/maps"),
    lists:usort([P || L <- binary:split(M, <<"\n">>, [global, trim]),
                      [_, _, _, _, _, P | _] <- [string:lexemes(L, " ")],
                      binary:match(P, <<"beamprobe">>) =/= nomatch]).

diff(D0, D1) ->
    [{K, {before, V0}, {now, V1}} || K <- lists:sort(maps:keys(D1)),
                                     K =/= os, K =/= ours_mapped,
                                     V0 <- [maps:get(K, D0)],
                                     V1 <- [maps:get(K, D1)],
                                     V1 -- V0 =/= []].

big_maps(Os) ->
    {ok, M} = file:read_file("/proc/" ++ Os ++ "/maps"),
    [L || L <- binary:split(M, <<"\n">>, [global, trim]),
          [R | _] <- [binary:split(L, <<" ">>)],
          [A0, B0] <- [binary:split(R, <<"-">>)],
          binary_to_integer(B0, 16) - binary_to_integer(A0, 16)
              > 64 * 1024 * 1024].

counts(Node) ->
    {rpc:call(Node, erlang, system_info, [atom_count]),
     rpc:call(Node, erlang, memory, [total]),
     length(rpc:call(Node, erlang, processes, []))}.

%% What beamprobe made under /tmp: every file and directory it makes
%% there is named beamprobe-... (attach's beamprobe-attach-*,
%% beamprobe-trace-*, the agent's beamprobe-nif-*, cluster staging
%% beamprobe-cluster-*), and the rest of /tmp is other programs' (in CI,
%% the clone the suite runs from and its logs; on a shared machine,
%% anything).
tmp_files() ->
    lists:sort(filelib:wildcard("/tmp/beamprobe*") ++
                   filelib:wildcard("/tmp/beamprobe*/**") ++
                   filelib:wildcard("/tmp/beamprobe*/**/.*")).
