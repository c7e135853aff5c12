%%% @doc `beamprobe attach NODE': a separately started node (`erl -sname')
%%% that has never heard of beamprobe is traced from the command line; the
%%% local trace holds every call; the node is left as it was (no trace
%%% flags or patterns, no beamprobe module, application or process, no
%%% file attach placed) after ^C, after the session's own end, and within
%%% a second of the command being killed with SIGKILL; a node whose OTP
%%% release or architecture does not match the NIF is refused before
%%% anything is loaded; the NIF can be sent over distribution.
-module(beamprobe_attach_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("kernel/include/file.hrl").

%% Node checks shared with the other suite that brings beamprobe to a
%% node (test/bp_node_clean.erl).
-import(bp_node_clean, [loaded_ours/1, loaded_libs/1, attach_dirs/0,
                        kill_port/1]).

-export([all/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([traces_n_calls/1, prints_live/1, session_limit_ends/1,
         sigkill_cleans_within_1s/1, version_refused/1,
         nif_over_distribution/1, bad_cookie/1, no_such_node/1,
         cookie_file/1, connection_dropped/1, node_has_beamprobe/1,
         long_names/1, as_if_remote/1, cluster_traces/1,
         cluster_sigkill_cleans/1, cluster_mixed/1, cluster_prints_live/1,
         cluster_other_host/1,
         cluster_node_killed/1, cluster_node_killed_nif_sent/1,
         cluster_no_output/1, two_at_once/1, orphan_agent_module/1,
         events_only/1, skipped_reported/1, own_module_kept/1,
         force_option/1]).

-define(N, 500).
-define(CN, 50).

all() -> [traces_n_calls, prints_live, session_limit_ends,
          sigkill_cleans_within_1s, version_refused, nif_over_distribution,
          bad_cookie, no_such_node, cookie_file, connection_dropped,
          node_has_beamprobe, long_names, as_if_remote, cluster_traces,
          cluster_sigkill_cleans, cluster_mixed, cluster_prints_live,
          cluster_other_host,
          cluster_node_killed, cluster_node_killed_nif_sent,
          cluster_no_output, two_at_once, orphan_agent_module,
          events_only, skipped_reported, own_module_kept, force_option].

init_per_suite(Config) ->
    case node() of
        nonode@nohost -> {skip, "the suite needs a distributed node"};
        _ ->
            Dir = ?config(priv_dir, Config),
            %% The workload module, in a directory of its own: the target
            %% node's only code path addition (no beamprobe there).
            WDir = filename:join(Dir, "workload"),
            ok = filelib:ensure_dir(filename:join(WDir, "x")),
            Src = filename:join(WDir, "bp_attach_work.erl"),
            ok = file:write_file(Src,
                "-module(bp_attach_work).\n"
                "-export([work/1, double/1, remote/2, hold_dbg/1]).\n"
                "hold_dbg(To) -> spawn(fun() -> {ok, _} = dbg:tracer(),\n"
                "    P = spawn(timer, sleep, [60000]),\n"
                "    {ok, _} = dbg:p(P, [c]),\n"
                "    {ok, _} = dbg:tpl(?MODULE, double, 1, []),\n"
                "    To ! {dbg_on, P}, receive stop -> dbg:stop() end end).\n"
                "work(N) -> [?MODULE:double(I) || I <- lists:seq(1, N)], ok.\n"
                "remote(Peers, N) -> [erpc:call(P, ?MODULE, double, [I])\n"
                "                     || P <- Peers, I <- lists:seq(1, N)], ok.\n"
                "double(X) -> X * 2.\n"),
            {ok, _} = compile:file(Src, [{outdir, WDir}]),
            [{work_dir, WDir} | Config]
    end.

end_per_suite(_Config) -> ok.

%% A case whose init fails is skipped without end_per_testcase: the nodes
%% it started would live on (and hold Common Test's output open), so
%% they go here.  (They also halt by themselves when this node exits:
%% bp_node_clean:start_target/5.)
init_per_testcase(Case, Config) ->
    put(started_ports, []),
    try init_case(Case, Config)
    catch C:R:St ->
            _ = [kill_port(P) || P <- get(started_ports)],
            erlang:raise(C, R, St)
    end.

init_case(long_names, Config) ->
    %% A node with a long name: the suite's node (short names) cannot
    %% talk to it; it runs its own workload.
    Name = "bp_attach_long_" ++ os:getpid(),
    Erl = os:find_executable("erl"),
    Port = open_port({spawn_executable, Erl},
                     [{args, ["-noshell", "-name", Name ++ "@127.0.0.1",
                              "-setcookie", atom_to_list(erlang:get_cookie()),
                              "-pa", ?config(work_dir, Config), "-eval",
                              %% (Halts when this node's port closes.)
                              "spawn(fun() -> io:get_line(''), halt() end), "
                              "F = fun L() -> bp_attach_work:work(1), "
                              "timer:sleep(50), L() end, F()"]}]),
    started(Port),
    timer:sleep(1500),
    [{target, list_to_atom(Name ++ "@127.0.0.1")}, {target_port, Port},
     {out, filename:join(?config(priv_dir, Config), "long_names")},
     {tmp_before, attach_dirs()} | Config];
init_case(Case, Config) when Case =:= cluster_traces;
                                    Case =:= cluster_sigkill_cleans;
                                    Case =:= cluster_mixed;
                                    Case =:= cluster_prints_live;
                                    Case =:= cluster_other_host;
                                    Case =:= cluster_node_killed;
                                    Case =:= cluster_node_killed_nif_sent;
                                    Case =:= cluster_no_output ->
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
     {case_name, Case}, {tmp_before, attach_dirs()} | Config];
init_case(Case, Config) ->
    Name = list_to_atom("bp_attach_" ++ atom_to_list(Case) ++ "_" ++
                            os:getpid()),
    Args = case Case of
               node_has_beamprobe ->
                   ["-pa", filename:dirname(code:which(beamprobe))];
               _ -> []
           end,
    {Node, Port} = start_target(Name, ?config(work_dir, Config), Args),
    put(target_port, Port),
    Out = filename:join(?config(priv_dir, Config), atom_to_list(Case)),
    [{target, Node}, {target_port, Port}, {out, Out},
     {tmp_before, attach_dirs()} | Config].

end_per_testcase(_Case, Config) ->
    %% An attach a failed case left running goes too.
    _ = [os:cmd("kill -9 " ++ P ++ " 2>/dev/null")
         || P <- string:lexemes(case file:read_file(pids_file(Config)) of
                                    {ok, B} -> binary_to_list(B);
                                    _ -> ""
                                end, "\n"),
            is_our_attach(P, Config)],
    _ = file:delete(pids_file(Config)),
    Targets = case ?config(targets, Config) of
                  undefined -> [{?config(target, Config),
                                 ?config(target_port, Config)}];
                  Ts -> Ts
              end,
    _ = [begin
             _ = rpc:call(Node, erlang, halt, [], 2000),
             kill_port(Port)
         end || {Node, Port} <- Targets],
    ok.

started(Port) -> put(started_ports, [Port | get(started_ports)]).

%%% ------------------------------------------------------------------------

%% The node lacks beamprobe: attach brings it, N calls are traced, the
%% local trace has N (bin/beamprobe and babeltrace2), ^C ends it and the
%% node is as before.
traces_n_calls(Config) ->
    Node = ?config(target, Config),
    Out = ?config(out, Config),
    ?assertEqual(non_existing, rpc:call(Node, code, which, [beamprobe])),
    Before = snapshot(Node),
    A = attach(Config, ["-o", Out, "--quiet", short(Node),
                        "bp_attach_work:double/1"]),
    wait_attached(A),
    ok = rpc:call(Node, bp_attach_work, work, [?N]),
    timer:sleep(300),
    interrupt(A),
    {0, Text} = wait_exit(A, 15000),
    ct:log("attach said:~n~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "node left as it was")),
    assert_clean(Node, Before, Config),
    Stats = beamprobe_test_lib:cli_ok(["stats", "--json", Out]),
    {match, [Calls]} = re:run(Stats, "\"calls\": *([0-9]+)",
                              [{capture, all_but_first, list}]),
    ?assertEqual(?N, list_to_integer(Calls)),
    Evs = beamprobe_test_lib:trace(Out),
    ?assertEqual(?N, length([E || #{name := <<"call">>} = E <- Evs])).

%% Without -o the events are printed as they arrive, before the session
%% ends (the lines of `print'); the cookie is not left on the command
%% line.
prints_live(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    A = attach(Config, [short(Node), "bp_attach_work:double/1 -> return",
                        "--seconds", "60"]),
    wait_attached(A),
    %% The cookie given with --cookie is out of the command line that
    %% ps shows.
    {os_pid, Os} = erlang:port_info(A, os_pid),
    {ok, Cmd} = file:read_file("/proc/" ++ integer_to_list(Os) ++ "/cmdline"),
    ?assertEqual(nomatch, binary:match(Cmd, atom_to_binary(erlang:get_cookie()))),
    ?assertNotEqual(nomatch, binary:match(Cmd, <<"--cookie">>)),
    ok = rpc:call(Node, bp_attach_work, work, [20]),
    %% Still running: the lines are there already.
    Lines = wait_output(A, fun(T) ->
                               length(binary:matches(T, <<"returned from">>))
                                   >= 20
                       end, 10000),
    ?assertEqual(20, length(binary:matches(Lines,
                                           <<"call bp_attach_work:double(">>))),
    ?assertMatch({match, _}, re:run(Lines, "double/1 -> 40")),
    interrupt(A),
    {0, _} = wait_exit(A, 15000),
    assert_clean(Node, Before, Config).

%% The session's own limit ends it: attach exits 0 by itself.
session_limit_ends(Config) ->
    Node = ?config(target, Config),
    Out = ?config(out, Config),
    Before = snapshot(Node),
    A = attach(Config, ["-o", Out, "-q", "--max-events", "10", short(Node),
                        "bp_attach_work:double/1"]),
    wait_attached(A),
    ok = rpc:call(Node, bp_attach_work, work, [100]),
    {0, Text} = wait_exit(A, 15000),
    ?assertMatch({match, _}, re:run(Text, "session ended \\(events\\)")),
    assert_clean(Node, Before, Config),
    Evs = beamprobe_test_lib:trace(Out),
    ?assertEqual(10, length([E || #{name := <<"call">>} = E <- Evs])).

%% attach killed with SIGKILL: the node notices the connection drop and is
%% clean within a second.
sigkill_cleans_within_1s(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    A = attach(Config, ["-o", ?config(out, Config), "-q", short(Node),
                        "bp_attach_work:double/1", "--seconds", "60"]),
    wait_attached(A),
    ok = rpc:call(Node, bp_attach_work, work, [50]),
    true = [] =/= loaded_ours(Node),
    {os_pid, Os} = erlang:port_info(A, os_pid),
    T0 = erlang:monotonic_time(millisecond),
    os:cmd("kill -KILL " ++ integer_to_list(Os)),
    Ms = wait_clean(Node, Before, Config, T0, 3000),
    ct:log("clean after ~p ms", [Ms]),
    ?assert(Ms =< 1000),
    receive {A, {exit_status, _}} -> ok after 5000 -> ok end.

%% A NIF built for another OTP release or architecture: refused, nothing
%% loaded, nothing left.
version_refused(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    Fake = filename:join(?config(priv_dir, Config), "fake.build"),
    ok = file:write_file(Fake, "otp_release=24\nsystem_architecture="
                         "aarch64-unknown-linux-gnu\n"),
    A = attach(Config, [short(Node), "bp_attach_work:double/1"],
               [{"BEAMPROBE_NIF_BUILD", Fake}]),
    {2, Text} = wait_exit(A, 15000),
    ct:log("~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "runs OTP 25 on .* built for OTP "
                                    "24 on aarch64.*nothing was loaded")),
    assert_clean(Node, Before, Config),
    ?assertEqual(false, rpc:call(Node, erlang, module_loaded,
                                 [beamprobe_attach])).

%% The node cannot read our directory (another host, another user): the
%% NIF goes over distribution into a private directory of the node's, and
%% is removed at the end.
nif_over_distribution(Config) ->
    Node = ?config(target, Config),
    Out = ?config(out, Config),
    Before = snapshot(Node),
    A = attach(Config, ["-o", Out, "-q", short(Node),
                        "bp_attach_work:double/1"],
               [{"BEAMPROBE_ATTACH_SEND_NIF", "1"}]),
    wait_attached(A),
    %% The library the node loaded is in a directory of its own, 0700.
    [Lib] = [L || L <- loaded_libs(Node), lists:suffix("beamprobe_nif.so", L)],
    {ok, #{mode := Mode}} = {ok, maps:from_list(
                                   [{mode, element(8, element(2,
                                      file:read_file_info(filename:dirname(Lib))))}])},
    ?assertEqual(8#700, Mode band 8#777),
    ok = rpc:call(Node, bp_attach_work, work, [?N]),
    timer:sleep(300),
    interrupt(A),
    {0, _} = wait_exit(A, 15000),
    assert_clean(Node, Before, Config),
    ?assertNot(filelib:is_dir(filename:dirname(Lib))),
    Evs = beamprobe_test_lib:trace(Out),
    ?assertEqual(?N, length([E || #{name := <<"call">>} = E <- Evs])).

bad_cookie(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    A = attach(Config, [short(Node), "bp_attach_work:double/1"],
               [], "wrongcookie"),
    {2, Text} = wait_exit(A, 20000),
    ?assertMatch({match, _}, re:run(Text, "cannot connect to .*cookie")),
    assert_clean(Node, Before, Config).

no_such_node(Config) ->
    A = attach(Config, ["bp_attach_nonexistent_node",
                        "bp_attach_work:double/1"]),
    {2, Text} = wait_exit(A, 20000),
    ?assertMatch({match, _}, re:run(Text, "cannot connect to")).

%% --cookie-file, and a second attach while one is active is refused.
cookie_file(Config) ->
    Node = ?config(target, Config),
    File = filename:join(?config(priv_dir, Config), "cookie"),
    ok = file:write_file(File, [atom_to_list(erlang:get_cookie()), "\n"]),
    Before = snapshot(Node),
    A = attach(Config, ["--cookie-file", File, "-o", ?config(out, Config),
                        "-q", short(Node), "bp_attach_work:double/1"], [],
               none),
    wait_attached(A),
    B = attach(Config, [short(Node), "bp_attach_work:double/1"]),
    {2, TextB} = wait_exit(B, 15000),
    ?assertMatch({match, _}, re:run(TextB, "another beamprobe attach")),
    interrupt(A),
    {0, _} = wait_exit(A, 15000),
    assert_clean(Node, Before, Config).

%% The connection drops (the node disconnects the hidden node): the
%% agent ends the session and cleans up; attach says it lost the node.
connection_dropped(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    A = attach(Config, ["-o", ?config(out, Config), "-q", short(Node),
                        "bp_attach_work:double/1", "--seconds", "60"]),
    wait_attached(A),
    [Cli] = [N || N <- rpc:call(Node, erlang, nodes, [hidden]),
                  lists:prefix("beamprobe_attach_", atom_to_list(N))],
    true = rpc:call(Node, erlang, disconnect_node, [Cli]),
    {2, Text} = wait_exit(A, 15000),
    ?assertMatch({match, _}, re:run(Text, "lost the connection")),
    assert_clean(Node, Before, Config).

%% beamprobe on the node's code path: attach uses the node's copy (loads
%% nothing of its own) and unloads only what was not loaded before.
node_has_beamprobe(Config) ->
    Node = ?config(target, Config),
    {module, beamprobe_pattern} = rpc:call(Node, code, ensure_loaded,
                                           [beamprobe_pattern]),
    Before = snapshot(Node),
    A = attach(Config, ["-o", ?config(out, Config), "-q", short(Node),
                        "bp_attach_work:double/1"]),
    Text0 = wait_attached(A),
    ?assertEqual(nomatch, binary:match(Text0, <<"brought in">>)),
    %% The node's own files: nothing loaded from attach's.
    ?assertEqual([], [M || M <- loaded_ours(Node),
                           lists:prefix("beamprobe-attach:",
                                        rpc:call(Node, code, which, [M]))]),
    ok = rpc:call(Node, bp_attach_work, work, [?N]),
    timer:sleep(300),
    interrupt(A),
    {0, _} = wait_exit(A, 15000),
    ?assertEqual([beamprobe_pattern], loaded_ours(Node)),
    ?assertEqual(maps:get(apps, Before),
                 [App || {App, _, _} <- rpc:call(Node, application,
                                                 loaded_applications, [])]),
    Evs = beamprobe_test_lib:trace(?config(out, Config)),
    ?assertEqual(?N, length([E || #{name := <<"call">>} = E <- Evs])).

%% Two attaches started at the same moment on a node without beamprobe:
%% one traces, the other is refused, and the node is left clean (both had
%% loaded the agent's module: the first one's purge takes every version;
%% before, both failed and the module stayed, refusing every later
%% attach).  Several offsets, as the race's window moves.
two_at_once(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    [begin
         Out = ?config(out, Config) ++ "_" ++ integer_to_list(Ms),
         Args = fun(X) -> ["-q", "--seconds", "1", "-o", Out ++ X,
                           short(Node), "bp_attach_work:double/1"]
                end,
         A = attach(Config, Args("a")),
         timer:sleep(Ms),
         B = attach(Config, Args("b")),
         Ra = wait_exit(A, 30000),
         Rb = wait_exit(B, 30000),
         ct:log("offset ~b ms:~nA ~p~nB ~p", [Ms, Ra, Rb]),
         Codes = lists:sort([element(1, Ra), element(1, Rb)]),
         ?assertEqual([0, 2], Codes),
         [{2, Refused}] = [R || {2, _} = R <- [Ra, Rb]],
         ?assertMatch({match, _}, re:run(Refused, "another beamprobe attach")),
         assert_clean(Node, Before, Config)
     end || Ms <- [0, 5, 20]].

%% An attach that died between loading its agent's module and starting
%% the agent left the module behind: the next attach removes it (after a
%% second, to let a live attach in that window start its agent), says so,
%% and traces.
orphan_agent_module(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    {ok, Bin} = file:read_file(code:which(beamprobe_attach)),
    {module, beamprobe_attach} =
        rpc:call(Node, code, load_binary,
                 [beamprobe_attach, "beamprobe-attach:beamprobe_attach.beam",
                  Bin]),
    A = attach(Config, ["-q", "--seconds", "1", "-o", ?config(out, Config),
                        short(Node), "bp_attach_work:double/1"]),
    {0, Text} = wait_exit(A, 30000),
    ct:log("attach said:~n~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "removed the beamprobe_attach "
                                    "module")),
    assert_clean(Node, Before, Config).

%% A node that has one of beamprobe's modules loaded from elsewhere (not
%% beamprobe itself on its path): attach refuses to replace it, says
%% which, and the node keeps its own copy and nothing else (attach used
%% to load its copy over it and leave that).
own_module_kept(Config) ->
    Node = ?config(target, Config),
    Own = filename:rootname(code:which(beamprobe_pattern)),
    {module, beamprobe_pattern} = rpc:call(Node, code, load_abs, [Own]),
    ?assertEqual(non_existing, rpc:call(Node, code, which, [beamprobe])),
    Before = snapshot(Node),
    A = attach(Config, ["-q", "--seconds", "1", "-o", ?config(out, Config),
                        short(Node), "bp_attach_work:double/1"]),
    {2, Text} = wait_exit(A, 30000),
    ct:log("attach said:~n~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "beamprobe_pattern is already "
                                    "loaded on this node")),
    assert_clean(Node, Before, Config),
    ?assertEqual(Own ++ ".beam",
                 rpc:call(Node, code, which, [beamprobe_pattern])).

%% --events alone, no pattern (the list of patterns used to be encoded
%% with two tails, and every such attach failed).
events_only(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    A = attach(Config, ["-q", "--seconds", "1", "--events", "send,receive",
                        "-o", ?config(out, Config), short(Node)]),
    {0, Text} = wait_exit(A, 30000),
    ct:log("attach said:~n~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "0 functions matched")),
    assert_clean(Node, Before, Config).

%% dbg traces a function and a process on the node: attach leaves both to
%% it and says which, and they are dbg's afterwards.
skipped_reported(Config) ->
    Node = ?config(target, Config),
    Holder = rpc:call(Node, bp_attach_work, hold_dbg, [self()]),
    P = receive {dbg_on, Pid} -> Pid after 10000 -> ct:fail(no_dbg) end,
    %% (--events: a session of local patterns and process flags; alone,
    %% a pattern is traced through meta patterns, which coexist with
    %% dbg's local one and take no process.)
    A = attach(Config, ["--seconds", "1", "--events", "send",
                        "-o", ?config(out, Config),
                        short(Node), "bp_attach_work:double/1"]),
    {0, Text} = wait_exit(A, 30000),
    ct:log("attach said:~n~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "0 functions matched; left to "
                                    "another tool that traces them: 1 "
                                    "function \\(\\[\\{bp_attach_work,double,1\\}\\]\\), 1 process")),
    %% dbg's pattern and flags are dbg's still.
    ?assertMatch({traced, local},
                 rpc:call(Node, erlang, trace_info,
                          [{bp_attach_work, double, 1}, traced])),
    ?assertMatch({flags, [call]}, rpc:call(Node, erlang, trace_info,
                                           [P, flags])),
    Holder ! stop,
    ok.

%% --force: a refusal that force => true would lift names the option;
%% with it, the pattern over every module starts, and a function dbg
%% traces is taken (and traced) instead of left to dbg.
force_option(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    A = attach(Config, ["--seconds", "1", "-q", "-o", ?config(out, Config),
                        short(Node), "_:_"]),
    {2, Text} = wait_exit(A, 30000),
    ct:log("attach said:~n~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "use --force")),
    ?assertEqual(nomatch, re:run(Text, "force => true")),
    assert_clean(Node, Before, Config),
    Out2 = filename:join(?config(priv_dir, Config), "forced"),
    B = attach(Config, ["--seconds", "5", "--max-events", "50", "-q",
                        "-o", Out2, "--force", short(Node), "_:_"]),
    {0, TextB} = wait_exit(B, 60000),
    ct:log("attach --force said:~n~s", [TextB]),
    ?assertMatch({match, _}, re:run(TextB, "[0-9]{4,} functions matched")),
    assert_clean(Node, Before, Config),
    Holder = rpc:call(Node, bp_attach_work, hold_dbg, [self()]),
    receive {dbg_on, _} -> ok after 10000 -> ct:fail(no_dbg) end,
    Out3 = filename:join(?config(priv_dir, Config), "taken"),
    C = attach(Config, ["--seconds", "2", "--events", "send", "-q",
                        "-o", Out3, "--force", short(Node),
                        "bp_attach_work:double/1"]),
    wait_attached(C),
    ok = rpc:call(Node, bp_attach_work, work, [7]),
    {0, TextC} = wait_exit(C, 30000),
    ct:log("attach --force said:~n~s", [TextC]),
    ?assertMatch({match, _}, re:run(TextC, "1 function matched")),
    ?assertEqual(nomatch, re:run(TextC, "left to another tool")),
    Evs = beamprobe_test_lib:trace(Out3),
    ?assertEqual(7, length([E || #{name := <<"call">>} = E <- Evs])),
    Holder ! stop,
    ok.

%% The path of a node on another host: the NIF goes over distribution,
%% the stream comes to this end's address of the connection (remote =>
%% true); the same trace, the same clean node.
as_if_remote(Config) ->
    Node = ?config(target, Config),
    Out = ?config(out, Config),
    Before = snapshot(Node),
    A = attach(Config, ["-o", Out, "-q", short(Node),
                        "bp_attach_work:double/1"],
               [{"BEAMPROBE_ATTACH_REMOTE", "1"}]),
    wait_attached(A),
    ok = rpc:call(Node, bp_attach_work, work, [?N]),
    timer:sleep(300),
    interrupt(A),
    {0, _} = wait_exit(A, 15000),
    assert_clean(Node, Before, Config),
    Evs = beamprobe_test_lib:trace(Out),
    ?assertEqual(?N, length([E || #{name := <<"call">>} = E <- Evs])).

%% Long names: NODE with a dotted host makes attach a long-named node.
long_names(Config) ->
    Node = ?config(target, Config),
    A = attach(Config, ["-o", ?config(out, Config), "-q", "--max-events",
                        "20", short(Node), "bp_attach_work:double/1"]),
    {0, Text} = wait_exit(A, 30000),
    ct:log("~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "node left as it was")),
    Evs = beamprobe_test_lib:trace(?config(out, Config)),
    ?assertEqual(20, length([E || #{name := <<"call">>} = E <- Evs])).

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
%% within a second; no staging directory is left in /tmp (NODE's NIF
%% directory, which this command made, is removed); DIR keeps the partial
%% node traces, readable by `print'.
cluster_node_killed(Config) ->
    node_killed(Config, []).

%% The same, NODE's NIF sent over distribution into a directory its agent
%% made (as for a node of another user): NODE dead, the command (same
%% host) removes that directory.
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
    ?assertNotEqual([], attach_dirs() -- ?config(tmp_before, Config)),
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

%% A plain node (plus Extra arguments), reached over a hidden connection
%% (start_hidden_target) or a normal one; either way in started_ports.
start_hidden_target(Name, WDir, Extra) ->
    started_target(Name, WDir, Extra, hidden).

start_target(Name, WDir, Extra) ->
    started_target(Name, WDir, Extra, ping).

started_target(Name, WDir, Extra, Connect) ->
    {_, Port} = T = bp_node_clean:start_target(Name, WDir, Extra,
                                               bp_attach_work, Connect),
    started(Port),
    T.

short(Node) -> atom_to_list(Node).

attach(Config, Args) -> attach(Config, Args, []).
attach(Config, Args, Env) ->
    attach(Config, Args, Env, atom_to_list(erlang:get_cookie())).
attach(Config, Args, Env, Cookie) ->
    Bin = filename:join([filename:dirname(filename:dirname(
                                            code:which(beamprobe))),
                         "bin", "beamprobe"]),
    CookieArgs = case Cookie of
                     none -> [];
                     _ -> ["--cookie", Cookie]
                 end,
    Port = open_port({spawn_executable, Bin},
                     [{args, ["attach" | CookieArgs] ++ Args}, {env, Env},
                      exit_status, binary, stderr_to_stdout, stream]),
    {os_pid, Os} = erlang:port_info(Port, os_pid),
    ok = file:write_file(pids_file(Config), [integer_to_list(Os), "\n"],
                         [append]),
    Port.

%% Still our attach (not a pid reused since): its command line names this
%% case's target node.
is_our_attach(P, Config) ->
    case file:read_file("/proc/" ++ P ++ "/cmdline") of
        {ok, Cmd} ->
            binary:match(Cmd, <<"attach">>) =/= nomatch andalso
                binary:match(Cmd, atom_to_binary(?config(target, Config)))
                =/= nomatch;
        _ -> false
    end.

pids_file(Config) ->
    filename:join(?config(priv_dir, Config), "attach-pids").

wait_attached(A) ->
    wait_output(A, fun(T) -> binary:match(T, <<"attached to">>) =/= nomatch
                   end, 20000).

%% Output gathered so far (kept in the process dictionary per port).
wait_output(A, Pred, Ms) ->
    Deadline = erlang:monotonic_time(millisecond) + Ms,
    wait_output1(A, Pred, Deadline).
wait_output1(A, Pred, Deadline) ->
    T = get_out(A),
    case Pred(T) of
        true -> T;
        false ->
            Left = Deadline - erlang:monotonic_time(millisecond),
            receive
                {A, {data, D}} -> put({out, A}, <<T/binary, D/binary>>),
                                  wait_output1(A, Pred, Deadline);
                {A, {exit_status, S}} ->
                    ct:fail({attach_exited, S, T})
            after max(Left, 0) -> ct:fail({no_output, T})
            end
    end.

get_out(A) ->
    case get({out, A}) of
        undefined -> <<>>;
        B -> B
    end.

wait_exit(A, Ms) ->
    receive
        {A, {data, D}} -> put({out, A}, <<(get_out(A))/binary, D/binary>>),
                          wait_exit(A, Ms);
        {A, {exit_status, S}} -> {S, get_out(A)}
    after Ms -> ct:fail({attach_did_not_exit, get_out(A)})
    end.

interrupt(A) ->
    {os_pid, Os} = erlang:port_info(A, os_pid),
    os:cmd("kill -INT " ++ integer_to_list(Os)).

%% What the node has that attach must leave alone or restore.
snapshot(Node) ->
    %% Once the node has booted: a node still starting adds its own
    %% names (logger_std_h_default) after the snapshot.
    booted(Node, 100),
    #{mods => loaded_ours(Node),
      apps => [A || {A, _, _} <- rpc:call(Node, application,
                                          loaded_applications, [])],
      procs => length(rpc:call(Node, erlang, processes, [])),
      names => lists:sort(rpc:call(Node, erlang, registered, []))}.

booted(Node, 0) -> ct:fail({not_booted, Node});
booted(Node, N) ->
    %% (init:get_status/0 says `starting' while the node's -eval runs:
    %% the test nodes' -eval never returns.)  The logger's default
    %% handler is registered late in the boot.
    case rpc:call(Node, erlang, whereis, [logger_std_h_default]) of
        P when is_pid(P) -> ok;
        _ -> timer:sleep(50), booted(Node, N - 1)
    end.

%% A cluster session's staged traces (beamprobe_cluster's) on this case's
%% nodes.
cluster_staged(Case) ->
    filelib:wildcard("/tmp/beamprobe-cluster-*bp_attach_" ++
                         atom_to_list(Case) ++ "_*").

clean_problems(Node, Before, Config) ->
    Now = snapshot(Node),
    New = loaded_ours(Node) -- maps:get(mods, Before),
    P = [{modules, New} || New =/= []] ++
        [{apps, maps:get(apps, Now)} || maps:get(apps, Now) =/=
                                            maps:get(apps, Before)] ++
        [{registered, maps:get(names, Now) -- maps:get(names, Before)}
         || maps:get(names, Now) -- maps:get(names, Before) =/= []] ++
        [{new_flags, F} || {flags, F} <- [rpc:call(Node, erlang, trace_info,
                                                  [new, flags])], F =/= []] ++
        [{pattern, T} || T <- [rpc:call(Node, erlang, trace_info,
                                        [{bp_attach_work, double, 1}, all])],
                         T =/= {all, false}] ++
        [{files, attach_dirs() -- ?config(tmp_before, Config)}
         || attach_dirs() -- ?config(tmp_before, Config) =/= []] ++
        [{nif_mapped, L} || L <- loaded_libs(Node),
                            lists:suffix("beamprobe_nif.so", L)],
    %% Every process traced by nobody; none runs beamprobe's code.
    Traced = [Pid || Pid <- rpc:call(Node, erlang, processes, []),
                     {flags, Fs} <- [rpc:call(Node, erlang, trace_info,
                                             [Pid, flags])], Fs =/= []],
    Ours = [{Pid, I} || Pid <- rpc:call(Node, erlang, processes, []),
                        I <- [rpc:call(Node, erlang, process_info,
                                       [Pid, [current_function,
                                              initial_call]])],
                        is_list(I),
                        lists:any(fun({_, {M, _, _}}) ->
                                          lists:prefix("beamprobe",
                                                       atom_to_list(M));
                                     (_) -> false
                                  end, I)],
    P ++ [{traced, Traced} || Traced =/= []] ++
        [{beamprobe_procs, Ours} || Ours =/= []].

assert_clean(Node, Before, Config) ->
    ?assertEqual([], wait_clean_problems(Node, Before, Config, 3000)).

wait_clean_problems(Node, Before, Config, Ms) ->
    bp_node_clean:wait_problems(
      fun() -> clean_problems(Node, Before, Config) end, Ms).

%% Milliseconds from T0 until the node is clean (fails after Ms).
wait_clean(Node, Before, Config, T0, Ms) ->
    bp_node_clean:wait_clean(
      fun() -> clean_problems(Node, Before, Config) end, T0, Ms).
