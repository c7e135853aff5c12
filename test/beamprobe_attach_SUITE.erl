%%% @doc `beamprobe attach NODE': a separately started node (`erl -sname')
%%% that has never heard of beamprobe is traced from the command line; the
%%% local trace holds every call; the node is left as it was (no trace
%%% flags or patterns, no beamprobe module, application or process, no
%%% file attach placed) after ^C, after the session's own end, and within
%%% a second of the command being killed with SIGKILL; a node whose OTP
%%% release or architecture does not match the NIF is refused before
%%% anything is loaded; the NIF can be sent over distribution.
%%%
%%% --cluster (three nodes, one command): beamprobe_attach_cluster_SUITE;
%%% the helpers both use: beamprobe_attach_lib.
-module(beamprobe_attach_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

%% Node checks shared with the other suites that bring beamprobe to a
%% node (test/bp_node_clean.erl), and this suite's own
%% (test/beamprobe_attach_lib.erl).
-import(bp_node_clean, [loaded_ours/1, loaded_libs/1, attach_dirs/0]).
-import(beamprobe_attach_lib,
        [started/1, short/1, attach/2, attach/3, attach/4, wait_attached/1,
         wait_output/3, wait_exit/2, interrupt/1, snapshot/1,
         assert_clean/3, wait_clean/5]).

-export([all/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([open_tmpdir/1, unwritable_tmpdir/1]).
-export([traces_n_calls/1, prints_live/1, session_limit_ends/1,
         sigkill_cleans_within_1s/1, version_refused/1,
         nif_over_distribution/1, bad_cookie/1, no_such_node/1,
         cookie_file/1, connection_dropped/1, node_has_beamprobe/1,
         long_names/1, as_if_remote/1, two_at_once/1,
         orphan_agent_module/1, events_only/1, skipped_reported/1,
         own_module_kept/1, force_option/1, refused_then_attach/1, nif_mapped_once/1,
         sigkill_removes_temp_trace/1]).

-define(N, 500).

all() -> [traces_n_calls, prints_live, session_limit_ends,
          sigkill_cleans_within_1s, version_refused, nif_over_distribution,
          bad_cookie, no_such_node, cookie_file, connection_dropped,
          node_has_beamprobe, long_names, as_if_remote, two_at_once,
          orphan_agent_module, events_only, skipped_reported,
          own_module_kept, force_option, refused_then_attach, nif_mapped_once, open_tmpdir,
          unwritable_tmpdir, sigkill_removes_temp_trace].

init_per_suite(Config) ->
    beamprobe_attach_lib:init_suite(Config).

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    beamprobe_attach_lib:init_per_testcase(fun init_case/2, Case, Config).

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
    beamprobe_attach_lib:end_per_testcase(Config).

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
    %% Within 1 s of the nodes' own time (bp_node_clean:clean_within/4).
    _ = bp_node_clean:clean_within(
          Node, fun() -> os:cmd("kill -KILL " ++ integer_to_list(Os)) end,
          fun() -> beamprobe_attach_lib:clean_problems(Node, Before, Config)
          end, 1000),
    receive {A, {exit_status, _}} -> ok after 5000 -> ok end.

%% Without -o, the trace goes to a temporary directory ($TMPDIR/
%% beamprobe-trace-XXXXXX) that attach removes at its end: also when it is
%% killed (SIGKILL), within a second, as the node is cleaned.  On the old
%% tree it stayed, with the trace, after every killed attach.
sigkill_removes_temp_trace(Config) ->
    Node = ?config(target, Config),
    Tmp = filename:join(?config(priv_dir, Config), "kill_tmp"),
    ok = file:make_dir(Tmp),
    Before = snapshot(Node),
    A = attach(Config, [short(Node), "bp_attach_work:double/1",
                        "--seconds", "60"], [{"TMPDIR", Tmp}]),
    wait_attached(A),
    ok = rpc:call(Node, bp_attach_work, work, [50]),
    [Trace] = filelib:wildcard(filename:join(Tmp, "beamprobe-trace-*")),
    ct:log("trace directory ~s: ~p", [Trace, file:list_dir(Trace)]),
    {os_pid, Os} = erlang:port_info(A, os_pid),
    T0 = erlang:monotonic_time(millisecond),
    os:cmd("kill -KILL " ++ integer_to_list(Os)),
    _ = wait_clean(Node, Before, Config, T0, 3000),
    Gone = fun G(0) -> file:list_dir(Tmp);
               G(N) -> case file:list_dir(Tmp) of
                           {ok, []} -> {ok, []};
                           _ -> timer:sleep(50), G(N - 1)
                       end
           end,
    ?assertEqual({ok, []}, Gone(20)),
    ct:log("removed within ~p ms", [erlang:monotonic_time(millisecond) - T0]),
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
    %% The library the node loaded was in a directory of its own
    %% (private: beamprobe_attach:secure_dir/1), removed with the library
    %% file as soon as the library was loaded (a node killed mid-session
    %% leaves neither behind): the mapping names a deleted file.
    Pid = rpc:call(Node, os, getpid, []),
    {ok, Maps} = file:read_file("/proc/" ++ Pid ++ "/maps"),
    {match, [[Lib] | _]} = re:run(Maps, "(/\\S*beamprobe_nif\\.so) \\(deleted\\)",
                                  [global, {capture, all_but_first, list}]),
    ?assert(lists:prefix("beamprobe-nif-",
                         filename:basename(filename:dirname(Lib)))),
    ?assertNot(filelib:is_dir(filename:dirname(Lib))),
    ok = rpc:call(Node, bp_attach_work, work, [?N]),
    timer:sleep(300),
    interrupt(A),
    {0, _} = wait_exit(A, 15000),
    assert_clean(Node, Before, Config),
    ?assertNot(filelib:is_dir(filename:dirname(Lib))),
    Evs = beamprobe_test_lib:trace(Out),
    ?assertEqual(?N, length([E || #{name := <<"call">>} = E <- Evs])).

%% Attached three times (the library read from our directory twice, then
%% sent over distribution), the node maps one copy of the library: every
%% attach that brings the same one places it at the same path (named by
%% the node's OS pid and the library's MD5), which the dynamic linker
%% finds loaded.  Before, each attach left one more copy mapped (≈ 7 MB
%% of address space and the blocks of a deleted file).
nif_mapped_once(Config) ->
    Node = ?config(target, Config),
    Out = ?config(out, Config),
    Before = snapshot(Node),
    Run = fun(I, Env) ->
                  Dir = Out ++ "-" ++ integer_to_list(I),
                  A = attach(Config, ["-o", Dir, "-q", short(Node),
                                      "bp_attach_work:double/1"], Env),
                  wait_attached(A),
                  ok = rpc:call(Node, bp_attach_work, work, [?N]),
                  timer:sleep(300),
                  interrupt(A),
                  {0, _} = wait_exit(A, 15000),
                  assert_clean(Node, Before, Config),
                  Evs = beamprobe_test_lib:trace(Dir),
                  ?assertEqual(?N, length([E || #{name := <<"call">>} = E
                                                    <- Evs]))
          end,
    _ = [Run(I, Env) || {I, Env} <- [{1, []}, {2, []},
                                     {3, [{"BEAMPROBE_ATTACH_SEND_NIF", "1"}]}]],
    Pid = rpc:call(Node, os, getpid, []),
    {ok, Maps} = file:read_file("/proc/" ++ Pid ++ "/maps"),
    {match, Ms} = re:run(Maps, "(/\\S*beamprobe_nif\\.so)",
                         [global, {capture, all_but_first, list}]),
    Paths = [P || [P] <- Ms],
    ct:pal("beamprobe_nif.so mapped from ~p", [lists:usort(Paths)]),
    ?assertMatch([_], lists:usort(Paths)),
    [Lib] = lists:usort(Paths),
    ?assert(lists:prefix("beamprobe-nif-" ++ Pid ++ "-",
                         filename:basename(filename:dirname(Lib)))).

bad_cookie(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    A = attach(Config, [short(Node), "bp_attach_work:double/1"],
               [], "wrongcookie"),
    {2, Text} = wait_exit(A, 20000),
    ?assertMatch({match, _}, re:run(Text, "cannot connect to .*cookie")),
    assert_clean(Node, Before, Config).

%% The node's TMPDIR is writable by others without the sticky bit
%% (another user could rename the library's directory away and put one of
%% theirs at its name before the node loads it): attach refuses, naming
%% it, nothing is left there or on the node.  It placed the library there.
open_tmpdir(Config) ->
    Node = ?config(target, Config),
    Tmp = filename:join(?config(priv_dir, Config), "open_tmp"),
    ok = file:make_dir(Tmp),
    ok = file:change_mode(Tmp, 8#777),
    true = rpc:call(Node, os, putenv, ["TMPDIR", Tmp]),
    Before = snapshot(Node),
    _ = [begin
             refused(Config, Env, "temporary directory .*open_tmp .*"
                     "writable by others without the sticky bit", Before),
             ?assertEqual({ok, []}, file:list_dir(Tmp))
         end || Env <- [[], [{"BEAMPROBE_ATTACH_SEND_NIF", "1"}]]],
    %% With the sticky bit, as /tmp: taken.
    [] = os:cmd("chmod 1777 " ++ Tmp), % (file:change_mode/2 drops it)
    A2 = attach(Config, [short(Node), "bp_attach_work:double/1"]),
    wait_attached(A2),
    interrupt(A2),
    {0, _} = wait_exit(A2, 15000),
    assert_clean(Node, Before, Config).

%% A TMPDIR where no directory can be made (/proc): a clear refusal
%% naming it, not the agent's crash; nothing left behind.
unwritable_tmpdir(Config) ->
    Node = ?config(target, Config),
    true = rpc:call(Node, os, putenv, ["TMPDIR", "/proc"]),
    Before = snapshot(Node),
    refused(Config, [{"BEAMPROBE_ATTACH_SEND_NIF", "1"}],
            "cannot create /proc/beamprobe-", Before).

%% An attach with the environment Env exits 2 saying Why (a regular
%% expression), and leaves the node as it was (Before).
refused(Config, Env, Why, Before) ->
    Node = ?config(target, Config),
    A = attach(Config, [short(Node), "bp_attach_work:double/1"], Env),
    {2, Text} = wait_exit(A, 20000),
    ct:log("~p: ~s", [Env, Text]),
    ?assertMatch({match, _}, re:run(Text, Why)),
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
%% attach).  Several offsets, as the race's window moves.  (At 5 ms on a
%% loaded machine the second one's agent ran, but it had seen the module
%% the first one loaded as there before it: neither unloaded it.)
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
     end || Ms <- [0, 2, 5, 10, 20]].

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

%% A refused session (here a pattern on every module, without --force)
%% waits for the agent to undo what attach brought, as profile does: it
%% says "node left as it was", and an attach right after it is not refused
%% as "another beamprobe attach or profile is active on this node (or one
%% is still cleaning up)".  Before, attach exited at once and the next
%% attach was refused (found by running the tutorial's section 20).
refused_then_attach(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    A = attach(Config, ["--seconds", "1", "-q", "-o", ?config(out, Config),
                        short(Node), "_:_"]),
    {2, Text} = wait_exit(A, 30000),
    ct:log("refused attach said:~n~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "use --force")),
    ?assertMatch({match, _}, re:run(Text, "no session ran; node left as it was")),
    %% The -o directory attach made for the refused session is gone again
    %% (on the old tree it stayed, empty); one that was there stays.
    ?assertNot(filelib:is_dir(?config(out, Config))),
    Had = filename:join(?config(priv_dir, Config), "had_dir"),
    ok = file:make_dir(Had),
    A1 = attach(Config, ["--seconds", "1", "-q", "-o", Had, short(Node),
                         "_:_"]),
    {2, _} = wait_exit(A1, 30000),
    ?assertEqual({ok, []}, file:list_dir(Had)),
    Out = filename:join(?config(priv_dir, Config), "after_refused"),
    B = attach(Config, ["--seconds", "1", "-q", "-o", Out, short(Node),
                        "bp_attach_work:double/1"]),
    {RcB, TextB} = wait_exit(B, 30000),
    ct:log("next attach said:~n~s", [TextB]),
    ?assertEqual(nomatch, re:run(TextB, "another beamprobe attach")),
    ?assertEqual(0, RcB),
    assert_clean(Node, Before, Config).

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

%%% ------------------------------------------------------------------------

start_target(Name, WDir, Extra) ->
    beamprobe_attach_lib:started_target(Name, WDir, Extra, ping).
