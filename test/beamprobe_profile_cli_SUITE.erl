%%% @doc `beamprobe profile NODE PATTERN...': profile mode from the command
%%% line, through attach, against a separately started node (`erl -sname')
%%% that has never heard of beamprobe.  The count printed is the number of
%%% calls the node made, and what beamprobe:profile/2 counts for the same
%%% workload; `--json' is valid JSON (python3's parser, an oracle nobody
%%% here wrote) with the same numbers; the node is left as it was (no
%%% beamprobe module, no call_count/call_time counter, no trace flag, no
%%% file) after the run's end, after ^C (which still prints the table),
%%% and within a second of the command being killed with SIGKILL; bad
%%% patterns, an unreachable node, a wrong cookie, a profile already
%%% running and the node dying mid-run each end with exit status 2 (1 for
%%% a bad command line) and a message naming the problem.
-module(beamprobe_profile_cli_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

%% Node checks shared with the other suite that brings beamprobe to a
%% node (test/bp_node_clean.erl).
-import(bp_node_clean, [loaded_ours/1, loaded_libs/1, attach_dirs/0]).

-export([all/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([counts_equal/1, json_same_numbers/1, interrupt_prints_table/1,
         sigkill_cleans_within_1s/1, bad_patterns/1, usage_errors/1,
         no_such_node/1, bad_cookie/1, profile_running/1,
         node_dies_mid_run/1, no_timing_top/1, second_profile_refused/1,
         counters_held_by_cprof/1, per_process_timed/1, asan_clean/1,
         coexists_with_session/1, unloaded_module/1]).

-define(N, 1234).
-define(W, bp_pcli_work).
-define(DOUBLE, {?W, double, 1}).
-define(WORK, {?W, work, 1}).

all() -> [counts_equal, json_same_numbers, interrupt_prints_table,
          sigkill_cleans_within_1s, bad_patterns, usage_errors,
          no_such_node, bad_cookie, profile_running, node_dies_mid_run,
          no_timing_top, second_profile_refused, counters_held_by_cprof,
          per_process_timed, asan_clean, coexists_with_session,
          unloaded_module].

init_per_suite(Config) ->
    case node() of
        nonode@nohost -> {skip, "the suite needs a distributed node"};
        _ ->
            Dir = ?config(priv_dir, Config),
            WDir = filename:join(Dir, "workload"),
            ok = filelib:ensure_dir(filename:join(WDir, "x")),
            Src = filename:join(WDir, "bp_pcli_work.erl"),
            ok = file:write_file(Src,
                "-module(bp_pcli_work).\n"
                "-export([work/1, double/1, start_loop/0, own_session/1]).\n"
                "work(N) -> [?MODULE:double(I) || I <- lists:seq(1, N)], ok.\n"
                "start_loop() -> register(bp_pcli_loop, spawn(fun loop/0)), ok.\n"
                "loop() -> receive {work, N, From} -> work(N),\n"
                "          From ! {done, self()}, loop() end.\n"
                "own_session(Dir) -> spawn(fun() ->\n"
                "    {ok, S} = beamprobe:start(#{calls => [{?MODULE, double, 1}],\n"
                "        procs => all, args => arity, output => {file, Dir}}),\n"
                "    register(bp_pcli_session, self()), session_loop(S) end), ok.\n"
                "session_loop(S) -> receive\n"
                "    {info, F} -> F ! {session, beamprobe:info(S)}, session_loop(S);\n"
                "    {stop, F} -> F ! {session, beamprobe:stop(S)} end.\n"
                "double(X) -> X * 2.\n"),
            {ok, _} = compile:file(Src, [{outdir, WDir}]),
            %% A module the node has but has not loaded; its on_load leaves
            %% a file behind if it ever runs.
            OnLoad = filename:join(WDir, "bp_pcli_onload.erl"),
            ok = file:write_file(OnLoad, io_lib:format(
                "-module(bp_pcli_onload).~n-on_load(init/0).~n-export([f/0]).~n"
                "init() -> ok = file:write_file(~tp, <<\"ran\">>).~n"
                "f() -> ok.~n", [filename:join(WDir, "onload_ran")])),
            {ok, _} = compile:file(OnLoad, [{outdir, WDir}]),
            [{work_dir, WDir} | Config]
    end.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    Name = list_to_atom("bp_pcli_" ++ atom_to_list(Case) ++ "_" ++
                            os:getpid()),
    Extra = case Case of
                _ when Case =:= profile_running;
                       Case =:= coexists_with_session ->
                    ["-pa", filename:dirname(code:which(beamprobe))];
                _ -> []
            end,
    {Node, Port} = start_target(Name, ?config(work_dir, Config), Extra),
    [{target, Node}, {target_port, Port}, {tmp_before, attach_dirs()}
     | Config].

end_per_testcase(_Case, Config) ->
    _ = [os:cmd("kill -9 " ++ P ++ " 2>/dev/null")
         || P <- string:lexemes(case file:read_file(pids_file(Config)) of
                                    {ok, B} -> binary_to_list(B);
                                    _ -> ""
                                end, "\n"),
            is_ours(P, Config)],
    _ = file:delete(pids_file(Config)),
    Node = ?config(target, Config),
    _ = rpc:call(Node, erlang, halt, [], 2000),
    bp_node_clean:kill_port(?config(target_port, Config)).

%%% ------------------------------------------------------------------------

%% The node lacks beamprobe; it calls double/1 ?N times (and work/1 once)
%% while the command profiles it: the table says ?N and 1, the numbers
%% beamprobe:profile/2 gives for the same workload here; the node is as
%% before.
counts_equal(Config) ->
    Node = ?config(target, Config),
    ?assertEqual(non_existing, rpc:call(Node, code, which, [beamprobe])),
    Before = snapshot(Node),
    P = profile(Config, ["--seconds", "3", short(Node), "bp_pcli_work:double/1",
                         "bp_pcli_work:work/1"]),
    Started = wait_started(P),
    ?assertMatch({match, _}, re:run(Started, "beamprobe brought in")),
    %% The counters are on, on the node.
    ?assertMatch({call_count, 0},
                 rpc:call(Node, erlang, trace_info, [?DOUBLE, call_count])),
    ok = rpc:call(Node, ?W, work, [?N]),
    {0, Text} = wait_exit(P, 30000),
    ct:log("profile said:~n~s", [Text]),
    ?assertEqual(?N, table_calls(Text, "bp_pcli_work:double/1")),
    ?assertEqual(1, table_calls(Text, "bp_pcli_work:work/1")),
    ?assertMatch({match, _}, re:run(Text, "^     calls      total        own"
                                    "       mean        max        p50"
                                    "        p99   open  function$",
                                    [multiline])),
    ?assertMatch({match, _}, re:run(Text, "not available in profile mode: "
                                    "total \\(inclusive\\) time, max, p50, "
                                    "p99 and open calls need events")),
    ?assertMatch({match, _}, re:run(Text, "node left as it was")),
    assert_clean(Node, Before, Config),
    %% The same workload under beamprobe:profile/2, here.
    {module, ?W} = code:load_abs(filename:join(?config(work_dir, Config),
                                               "bp_pcli_work")),
    Self = self(),
    Runner = spawn(fun() ->
                           Self ! {self(), beamprobe:profile(
                                             ["bp_pcli_work:double/1",
                                              "bp_pcli_work:work/1"],
                                             #{time => 1500, print => false})}
                   end),
    timer:sleep(300),
    ok = ?W:work(?N),
    Res = receive {Runner, {ok, R}} -> R after 10000 -> ct:fail(no_profile) end,
    Local = maps:from_list([{F, C} || #{function := F, calls := C}
                                          <- maps:get(functions, Res)]),
    ?assertEqual(#{<<"bp_pcli_work:double/1">> => ?N,
                   <<"bp_pcli_work:work/1">> => 1}, Local).

%% --json: one line of JSON, valid to python3, with the same numbers;
%% what counters cannot give is null.
json_same_numbers(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    P = profile(Config, ["--json", "--seconds", "2", short(Node),
                         "bp_pcli_work:double/1", "bp_pcli_work:work/1"]),
    wait_started(P),
    ok = rpc:call(Node, ?W, work, [?N]),
    {0, Text} = wait_exit(P, 30000),
    [Json] = [L || L <- binary:split(Text, <<"\n">>, [global]),
                   binary:match(L, <<"{\"mode\":\"profile\"">>) =:= {0, 17}],
    ct:log("~s", [Json]),
    Py = python(Config, Json,
                "fs = {f['function']: f for f in d['functions']}\n"
                "g = fs['bp_pcli_work:double/1']\n"
                "print(d['mode'], g['calls'], fs['bp_pcli_work:work/1']['calls'],"
                " d['total_calls'], type(g['own_ns']).__name__,"
                " g['total_ns'], g['p99_ns'], g['max_ns'],"
                " 'need events' in d['unavailable'])"),
    ?assertEqual("profile " ++ integer_to_list(?N) ++ " 1 " ++
                     integer_to_list(?N + 1) ++ " int None None None True",
                 Py),
    assert_clean(Node, Before, Config).

%% ^C during the run: it ends early and still prints the table; the node
%% is as before.
interrupt_prints_table(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    P = profile(Config, ["--seconds", "600", short(Node),
                         "bp_pcli_work:double/1"]),
    wait_started(P),
    ok = rpc:call(Node, ?W, work, [?N]),
    T0 = erlang:monotonic_time(millisecond),
    signal(P, "INT"),
    {0, Text} = wait_exit(P, 30000),
    ct:log("after ~b ms:~n~s", [erlang:monotonic_time(millisecond) - T0,
                                Text]),
    ?assertEqual(?N, table_calls(Text, "bp_pcli_work:double/1")),
    ?assertMatch({match, _}, re:run(Text, "ending the profile")),
    assert_clean(Node, Before, Config).

%% SIGKILL of the command mid-run: the agent sees the connection go; the
%% counters, the call flags and what attach brought are gone within a
%% second.
sigkill_cleans_within_1s(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    P = profile(Config, ["--seconds", "600", short(Node),
                         "bp_pcli_work:double/1"]),
    wait_started(P),
    ok = rpc:call(Node, ?W, work, [10]),
    ?assertMatch({call_count, 10},
                 rpc:call(Node, erlang, trace_info, [?DOUBLE, call_count])),
    ?assertMatch({call_time, _},
                 rpc:call(Node, erlang, trace_info, [?DOUBLE, call_time])),
    ?assertNotEqual([], traced(Node)),
    ?assertNotEqual([], loaded_ours(Node)),
    %% Within 1 s of the nodes' own time (bp_node_clean:clean_within/4).
    _ = bp_node_clean:clean_within(
          Node, fun() -> signal(P, "KILL") end,
          fun() -> clean_problems(Node, Before, Config) end, 1000),
    ok.

%% A pattern that does not parse, one with a guard (counters count every
%% call), a module the node does not have: exit 2, the pattern named, the
%% node as before.  The command exits once the node is clean: the next
%% one, started at once, is not refused as "another attach".
bad_patterns(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    Cases = [{"bp_pcli_work:double(", "bad pattern"},
             {"bp_pcli_work:double(X) when X > 1",
              "selects calls by argument or guard"},
             {"bp_pcli_nosuch:f/1", "module bp_pcli_nosuch cannot be loaded"},
             {"bp_pcli_work:nosuch/7", "matches no function"}],
    _ = [begin
             P = profile(Config, [short(Node), Pat]),
             {S, Text} = wait_exit(P, 30000),
             ct:log("~s:~n~s", [Pat, Text]),
             ?assertEqual({Pat, 2}, {Pat, S}),
             ?assertMatch({Pat, {match, _}},
                          {Pat, re:run(Text, "cannot profile: .*" ++ Msg)}),
             ?assertEqual(nomatch, binary:match(Text, <<"calls      total">>)),
             ?assertMatch({Pat, {match, _}},
                          {Pat, re:run(Text, "node left as it was")})
         end || {Pat, Msg} <- Cases],
    assert_clean(Node, Before, Config).

%% A module the node has but has not loaded is not loaded by the command
%% (its on_load never runs): alone, exit 2 and a message saying it is not
%% loaded; beside a loaded function, the table and a line naming it.  The
%% old command loaded it and still said the node was left as it was.
unloaded_module(Config) ->
    Node = ?config(target, Config),
    Ran = filename:join(?config(work_dir, Config), "onload_ran"),
    ?assertEqual(false, rpc:call(Node, code, is_loaded, [bp_pcli_onload])),
    ?assertMatch({file, _}, rpc:call(Node, code, is_loaded, [?W])),
    Before = snapshot(Node),
    P1 = profile(Config, ["--seconds", "1", short(Node), "bp_pcli_onload:f/0"]),
    {S1, T1} = wait_exit(P1, 30000),
    ct:log("alone:~n~s", [T1]),
    ?assertEqual(2, S1),
    ?assertMatch({match, _}, re:run(T1, "cannot profile: .*bp_pcli_onload not "
                                    "loaded: profile mode never loads a module")),
    P2 = profile(Config, ["--seconds", "1", short(Node), "bp_pcli_work:double/1",
                          "bp_pcli_onload:f/0"]),
    {S2, T2} = wait_exit(P2, 30000),
    ct:log("with a loaded one:~n~s", [T2]),
    ?assertEqual(0, S2),
    ?assertMatch({match, _}, re:run(T2, "not loaded \\(not profiled; profile "
                                    "mode never loads a module\\): bp_pcli_onload")),
    ?assertMatch({match, _}, re:run(T2, "node left as it was")),
    ?assertEqual(false, rpc:call(Node, code, is_loaded, [bp_pcli_onload])),
    ?assertNot(filelib:is_regular(Ran)),
    assert_clean(Node, Before, Config).

%% Bad command lines: exit 1, nothing done.
usage_errors(Config) ->
    Node = ?config(target, Config),
    Cases = [{[], "expected NODE and patterns: profile mode runs on a node"},
             {[short(Node)], "expected a pattern after NODE"},
             {["bp_pcli_work:double/1"], "expected NODE and patterns"},
             {["--sort", "total", short(Node), "m:f/1"], "--sort: calls, own "
              "or mean"},
             {["--seconds", "0", short(Node), "m:f/1"], "--seconds: 1 to 3600"},
             {["--seconds", "x", short(Node), "m:f/1"], "--seconds"},
             {["--top", "-1", short(Node), "m:f/1"], "bad --top"},
             {["--no-timing", "--per-process", short(Node), "m:f/1"],
              "--per-process needs timing"},
             {["--bogus", short(Node), "m:f/1"], "Try 'beamprobe profile --help'"}],
    _ = [begin
             {S, Text} = wait_exit(profile(Config, Args), 10000),
             ?assertEqual({Args, 1}, {Args, S}),
             ?assertNotEqual({Args, nomatch},
                             {Args, binary:match(Text, list_to_binary(Msg))})
         end || {Args, Msg} <- Cases],
    %% --help: the usage, exit 0.
    {0, Help} = wait_exit(profile(Config, ["--help"], [], none), 10000),
    ?assertMatch({match, _}, re:run(Help, "^Usage: beamprobe profile")).

no_such_node(Config) ->
    P = profile(Config, ["bp_pcli_nonexistent_node", "bp_pcli_work:double/1"]),
    {2, Text} = wait_exit(P, 20000),
    ?assertMatch({match, _}, re:run(Text, "cannot connect to "
                                    "bp_pcli_nonexistent_node@")).

bad_cookie(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    P = profile(Config, [short(Node), "bp_pcli_work:double/1"], [],
                "wrongcookie"),
    {2, Text} = wait_exit(P, 20000),
    ?assertMatch({match, _}, re:run(Text, "cannot connect to .*cookie")),
    assert_clean(Node, Before, Config).

%% The node runs a profile of its own (beamprobe on its code path): the
%% command is refused, and the node's profile runs on undisturbed.
profile_running(Config) ->
    Node = ?config(target, Config),
    Own = rpc:async_call(Node, beamprobe, profile,
                         ["bp_pcli_work:double/1",
                          #{time => 8000, timing => false,
                            print => false}]),
    _ = beamprobe_test_lib:wait_until(
           fun() -> is_pid(rpc:call(Node, erlang, whereis,
                                    [beamprobe_profile])) end, 5000),
    Before = snapshot(Node),
    P = profile(Config, [short(Node), "bp_pcli_work:double/1"]),
    {2, Text} = wait_exit(P, 20000),
    ct:log("~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "cannot profile: a profile already "
                                    "runs")),
    ?assertEqual([], wait_clean_problems(Node, Before, Config, 3000) --
                     [{counters, [?DOUBLE]}]),
    ok = rpc:call(Node, ?W, work, [7]),
    {ok, #{functions := [#{calls := 7}]}} = rpc:yield(Own).

%% The node goes down mid-run: the command says it lost the node, exit 2;
%% the NIF directory the node's agent made on this host (the NIF sent over
%% distribution) is gone already (removed once the library was loaded)
%% and nothing is left.
node_dies_mid_run(Config) ->
    Node = ?config(target, Config),
    P = profile(Config, ["--seconds", "600", short(Node),
                         "bp_pcli_work:double/1"],
                [{"BEAMPROBE_ATTACH_SEND_NIF", "1"}]),
    wait_started(P),
    ?assertEqual([], attach_dirs() -- ?config(tmp_before, Config)),
    {os_pid, Os} = erlang:port_info(?config(target_port, Config), os_pid),
    os:cmd("kill -9 " ++ integer_to_list(Os)),
    {2, Text} = wait_exit(P, 20000),
    ?assertMatch({match, _}, re:run(Text, "lost the connection to .*before "
                                    "the profile ended: no table")),
    ?assertEqual([], attach_dirs() -- ?config(tmp_before, Config)).

%% --no-timing --sort calls --top 1: counts only (own 0, mean -), the most
%% called function alone.
no_timing_top(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    P = profile(Config, ["--no-timing", "--sort", "calls", "--top", "1",
                         "--seconds", "2", short(Node), "bp_pcli_work:work/1",
                         "bp_pcli_work:double/_"]),
    Started = wait_started(P),
    ?assertMatch({match, _}, re:run(Started, "calls only")),
    %% No process carries a flag.
    ?assertEqual([], traced(Node)),
    ok = rpc:call(Node, ?W, work, [?N]),
    {0, Text} = wait_exit(P, 30000),
    ct:log("~s", [Text]),
    ?assertEqual(?N, table_calls(Text, "bp_pcli_work:double/1")),
    ?assertEqual(nomatch, re:run(Text, "bp_pcli_work:work/1")),
    ?assertMatch({match, _}, re:run(Text, "sorted by calls")),
    ?assertMatch({match, _}, re:run(Text, " +" ++ integer_to_list(?N) ++
                                        " +- +0ns +- ")),
    assert_clean(Node, Before, Config).

%% A second profile (or attach) while one runs on the node: refused before
%% anything is loaded; the first goes on and ends with its table.
second_profile_refused(Config) ->
    Node = ?config(target, Config),
    Before = snapshot(Node),
    A = profile(Config, ["--seconds", "600", short(Node),
                         "bp_pcli_work:double/1"]),
    wait_started(A),
    B = profile(Config, [short(Node), "bp_pcli_work:double/1"]),
    {2, TextB} = wait_exit(B, 20000),
    ?assertMatch({match, _}, re:run(TextB, "another beamprobe attach or "
                                    "profile is active")),
    ok = rpc:call(Node, ?W, work, [?N]),
    signal(A, "INT"),
    {0, TextA} = wait_exit(A, 30000),
    ?assertEqual(?N, table_calls(TextA, "bp_pcli_work:double/1")),
    assert_clean(Node, Before, Config).

%% cprof counts on the node: its counters are refused (named in the
%% message), never touched: cprof still has its own count afterwards.
counters_held_by_cprof(Config) ->
    Node = ?config(target, Config),
    case rpc:call(Node, code, which, [cprof]) of
        non_existing -> {skip, "cprof (tools) is not installed"};
        _ ->
            N = rpc:call(Node, cprof, start, [?W]),
            ?assert(N >= 2),
            Before = snapshot(Node),
            ok = rpc:call(Node, ?W, work, [5]),
            P = profile(Config, [short(Node), "bp_pcli_work:double/1"]),
            {2, Text} = wait_exit(P, 20000),
            ct:log("~s", [Text]),
            ?assertMatch({match, _}, re:run(Text, "cannot profile: 1 "
                                            "function\\(s\\) already have "
                                            "call_count")),
            %% The advice names the Erlang API's option, which the
            %% command line does not take (it said "add force => true"
            %% only).
            ?assertMatch({match, _}, re:run(Text, "beamprobe profile has no "
                                            "such option: call "
                                            "beamprobe:profile/2 with force "
                                            "=> true")),
            ok = rpc:call(Node, ?W, work, [5]),
            ?assertMatch({call_count, 10},
                         rpc:call(Node, erlang, trace_info,
                                  [?DOUBLE, call_count])),
            ?assertEqual([{counters, [?DOUBLE, ?WORK]}],
                         wait_clean_problems(Node, Before, Config, 3000)),
            _ = rpc:call(Node, cprof, stop, []),
            ok
    end.

%% --per-process --json: a process of the node's that existed before the
%% run (so it carries the call flag) calls double/1 ?N times: every call
%% timed, own time above zero, and the per-process entry names that pid
%% (the node's text of it) with all ?N calls.
per_process_timed(Config) ->
    Node = ?config(target, Config),
    ok = rpc:call(Node, ?W, start_loop, []),
    Loop = rpc:call(Node, erlang, whereis, [bp_pcli_loop]),
    LoopText = rpc:call(Node, erlang, pid_to_list, [Loop]),
    Before = snapshot(Node),
    P = profile(Config, ["--per-process", "--json", "--seconds", "2",
                         short(Node), "bp_pcli_work:double/1"]),
    wait_started(P),
    Loop ! {work, ?N, self()},
    receive {done, Loop} -> ok after 10000 -> ct:fail(loop_did_not_work) end,
    {0, Text} = wait_exit(P, 30000),
    [Json] = [L || L <- binary:split(Text, <<"\n">>, [global]),
                   binary:match(L, <<"{\"mode\":\"profile\"">>) =:= {0, 17}],
    ct:log("~s", [Json]),
    Py = python(Config, Json,
                "[g] = d['functions']\n"
                "[p] = g['processes']\n"
                "print(g['calls'], g['timed_calls'], g['own_ns'] > 0,"
                " g['mean_ns'] == g['own_ns'] // g['calls'],"
                " p['pid'], p['calls'], p['own_ns'] == g['own_ns'])"),
    ?assertEqual(lists:flatten(io_lib:format("~b ~b True True ~s ~b True",
                                             [?N, ?N, LoopText, ?N])), Py),
    assert_clean(Node, Before, Config).

%% The ASan+UBSan build of the command (c_src/cli's `asan' target) through
%% a whole run (--per-process --json, a table of several kB), a ^C run and
%% a refused run: the same results, not one sanitizer report.
asan_clean(Config) ->
    Root = filename:dirname(filename:dirname(code:which(beamprobe))),
    Asan = filename:join([Root, "_build", "cli", "beamprobe-asan"]),
    Build = os:cmd("make -s -C " ++ filename:join([Root, "c_src", "cli"]) ++
                       " asan 2>&1; echo rc=$?"),
    case filelib:is_regular(Asan) andalso lists:suffix("rc=0\n", Build) of
        false -> {skip, "no ASan build of the command: " ++ Build};
        true ->
            Node = ?config(target, Config),
            ok = rpc:call(Node, ?W, start_loop, []),
            Loop = rpc:call(Node, erlang, whereis, [bp_pcli_loop]),
            Before = snapshot(Node),
            Env = [{"ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0"},
                   {"UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1"},
                   {"BEAMPROBE_HOME", Root}],
            Run = fun(Args) -> run_bin(Config, Asan, Args, Env) end,
            A = Run(["--per-process", "--json", "--seconds", "2", short(Node),
                     "bp_pcli_work:_/_"]),
            wait_started(A),
            Loop ! {work, ?N, self()},
            receive {done, Loop} -> ok after 10000 -> ct:fail(no_work) end,
            {0, TA} = wait_exit(A, 60000),
            B = Run(["--seconds", "600", short(Node), "bp_pcli_work:double/1"]),
            wait_started(B),
            signal(B, "INT"),
            {0, TB} = wait_exit(B, 60000),
            {2, TC} = wait_exit(Run([short(Node), "bp_pcli_work:double(1)"]),
                                60000),
            _ = [begin
                     ct:log("~s", [T]),
                     ?assertEqual(nomatch,
                                  re:run(T, "AddressSanitizer|LeakSanitizer|"
                                            "runtime error:"))
                 end || T <- [TA, TB, TC]],
            ?assertMatch({match, _}, re:run(TA, "\"calls\":" ++
                                                integer_to_list(?N) ++ ",")),
            ?assertMatch({match, _}, re:run(TB, "calls +total")),
            assert_clean(Node, Before, Config)
    end.

%% The node (beamprobe on its code path) runs a trace session of its own
%% on double/1, every process: the profile counts what the session records
%% (?N calls: the counts equal), and the session goes on untouched (its
%% processes' flags, its modules, its events) after the profile is gone.
coexists_with_session(Config) ->
    Node = ?config(target, Config),
    Dir = filename:join(?config(priv_dir, Config), "node_session"),
    ok = rpc:call(Node, ?W, own_session, [Dir]),
    _ = beamprobe_test_lib:wait_until(
          fun() -> is_pid(rpc:call(Node, erlang, whereis,
                                   [bp_pcli_session])) end, 10000),
    Session = rpc:call(Node, erlang, whereis, [bp_pcli_session]),
    Before = snapshot(Node),
    TracedBefore = traced(Node),
    ?assertNotEqual([], TracedBefore),
    Tracers = fun() -> [{Pid, T} || Pid <- TracedBefore,
                                    {tracer, T} <- [rpc:call(Node, erlang,
                                                             trace_info,
                                                             [Pid, tracer])]]
              end,
    TracersBefore = Tracers(),
    P = profile(Config, ["--seconds", "2", short(Node),
                         "bp_pcli_work:double/1"]),
    Started = wait_started(P),
    ?assertEqual(nomatch, binary:match(Started, <<"brought in">>)),
    ok = rpc:call(Node, ?W, work, [?N]),
    {0, Text} = wait_exit(P, 30000),
    ct:log("~s", [Text]),
    ?assertEqual(?N, table_calls(Text, "bp_pcli_work:double/1")),
    %% The node as before, the session's tracing included.
    %% (The node's own NIF, of its code path, stays mapped: its session.)
    Own = filename:join([filename:dirname(filename:dirname(
                                            code:which(beamprobe))),
                         "priv", "beamprobe_nif.so"]),
    Problems = wait_clean_problems(Node, Before, Config, 3000),
    ?assertEqual([], [X || X <- Problems, element(1, X) =/= traced,
                           element(1, X) =/= new_flags,
                           X =/= {nif_mapped, Own}]),
    %% Every process the session traced (still alive) keeps its tracer.
    ?assertEqual([], Tracers() -- TracersBefore),
    Session ! {info, self()},
    receive {session, {ok, #{state := _}}} -> ok
    after 5000 -> ct:fail(session_gone)
    end,
    ok = rpc:call(Node, ?W, work, [10]),
    Session ! {stop, self()},
    Sum = receive {session, {ok, S}} -> S after 10000 -> ct:fail(no_stop) end,
    ct:log("the node's session: ~p", [Sum]),
    ?assertMatch(#{events := E} when E =:= ?N + 10, Sum).

%%% ------------------------------------------------------------------------

start_target(Name, WDir, Extra) ->
    bp_node_clean:start_target(Name, WDir, Extra, ?W, ping).

short(Node) -> atom_to_list(Node).

profile(Config, Args) -> profile(Config, Args, []).
profile(Config, Args, Env) ->
    profile(Config, Args, Env, atom_to_list(erlang:get_cookie())).
profile(Config, Args, Env, Cookie) ->
    Bin = filename:join([filename:dirname(filename:dirname(
                                            code:which(beamprobe))),
                         "bin", "beamprobe"]),
    run_bin(Config, Bin, Args, Env, Cookie).

run_bin(Config, Bin, Args, Env) ->
    run_bin(Config, Bin, Args, Env, atom_to_list(erlang:get_cookie())).
run_bin(Config, Bin, Args, Env, Cookie) ->
    CookieArgs = case Cookie of
                     none -> [];
                     _ -> ["--cookie", Cookie]
                 end,
    Port = open_port({spawn_executable, Bin},
                     [{args, ["profile" | CookieArgs] ++ Args}, {env, Env},
                      exit_status, binary, stderr_to_stdout, stream]),
    {os_pid, Os} = erlang:port_info(Port, os_pid),
    ok = file:write_file(pids_file(Config), [integer_to_list(Os), "\n"],
                         [append]),
    Port.

%% Still our command (not a pid reused since).
is_ours(P, Config) ->
    case file:read_file("/proc/" ++ P ++ "/cmdline") of
        {ok, Cmd} ->
            binary:match(Cmd, <<"profile">>) =/= nomatch andalso
                binary:match(Cmd, atom_to_binary(?config(target, Config)))
                =/= nomatch;
        _ -> false
    end.

pids_file(Config) ->
    filename:join(?config(priv_dir, Config), "profile-pids").

signal(P, Sig) ->
    {os_pid, Os} = erlang:port_info(P, os_pid),
    os:cmd("kill -" ++ Sig ++ " " ++ integer_to_list(Os)).

wait_started(P) ->
    wait_output(P, fun(T) -> binary:match(T, <<"profiling on">>) =/= nomatch
                   end, 30000).

wait_output(P, Pred, Ms) ->
    wait_output1(P, Pred, erlang:monotonic_time(millisecond) + Ms).
wait_output1(P, Pred, Deadline) ->
    T = get_out(P),
    case Pred(T) of
        true -> T;
        false ->
            Left = Deadline - erlang:monotonic_time(millisecond),
            receive
                {P, {data, D}} -> put({out, P}, <<T/binary, D/binary>>),
                                  wait_output1(P, Pred, Deadline);
                {P, {exit_status, S}} -> ct:fail({profile_exited, S, T})
            after max(Left, 0) -> ct:fail({no_output, T})
            end
    end.

get_out(P) ->
    case get({out, P}) of
        undefined -> <<>>;
        B -> B
    end.

wait_exit(P, Ms) ->
    receive
        {P, {data, D}} -> put({out, P}, <<(get_out(P))/binary, D/binary>>),
                          wait_exit(P, Ms);
        {P, {exit_status, S}} -> {S, get_out(P)}
    after Ms -> ct:fail({profile_did_not_exit, get_out(P)})
    end.

%% The calls column of Function's row in the table.
table_calls(Text, Function) ->
    case re:run(Text, "^ *([0-9]+) .* " ++ Function ++ "$",
                [multiline, {capture, all_but_first, list}]) of
        {match, [C]} -> list_to_integer(C);
        nomatch -> ct:fail({no_row, Function, Text})
    end.

%% python3 reads the JSON (d) and runs Code; its output, trimmed.
python(Config, Json, Code) ->
    case os:find_executable("python3") of
        false -> {skip, "python3 is not installed"};
        Py ->
            F = filename:join(?config(priv_dir, Config), "profile.json"),
            S = filename:join(?config(priv_dir, Config), "check.py"),
            ok = file:write_file(F, Json),
            ok = file:write_file(S, ["import json, sys\n"
                                     "d = json.load(open(sys.argv[1]))\n",
                                     Code, "\n"]),
            string:trim(os:cmd(Py ++ " " ++ S ++ " " ++ F ++ " 2>&1"))
    end.

%%% ---- the node as it was -------------------------------------------------

snapshot(Node) ->
    booted(Node, 100),
    #{mods => loaded_ours(Node),
      apps => [A || {A, _, _} <- rpc:call(Node, application,
                                          loaded_applications, [])],
      names => lists:sort(rpc:call(Node, erlang, registered, []))}.

booted(Node, 0) -> ct:fail({not_booted, Node});
booted(Node, N) ->
    case rpc:call(Node, erlang, whereis, [logger_std_h_default]) of
        P when is_pid(P) -> ok;
        _ -> timer:sleep(50), booted(Node, N - 1)
    end.

traced(Node) ->
    [Pid || Pid <- rpc:call(Node, erlang, processes, []),
            {flags, Fs} <- [rpc:call(Node, erlang, trace_info, [Pid, flags])],
            Fs =/= []].

clean_problems(Node, Before, Config) ->
    Now = snapshot(Node),
    Counted = [MFA || MFA <- [?DOUBLE, ?WORK],
                      rpc:call(Node, erlang, trace_info, [MFA, call_count])
                          =/= {call_count, false} orelse
                          rpc:call(Node, erlang, trace_info, [MFA, call_time])
                          =/= {call_time, false}],
    [{modules, M} || M <- [loaded_ours(Node) -- maps:get(mods, Before)],
                     M =/= []] ++
        [{apps, maps:get(apps, Now)}
         || maps:get(apps, Now) =/= maps:get(apps, Before)] ++
        [{registered, maps:get(names, Now) -- maps:get(names, Before)}
         || maps:get(names, Now) -- maps:get(names, Before) =/= []] ++
        [{counters, Counted} || Counted =/= []] ++
        [{new_flags, F} || {flags, F} <- [rpc:call(Node, erlang, trace_info,
                                                  [new, flags])], F =/= []] ++
        [{traced, T} || T <- [traced(Node)], T =/= []] ++
        [{files, attach_dirs() -- ?config(tmp_before, Config)}
         || attach_dirs() -- ?config(tmp_before, Config) =/= []] ++
        [{nif_mapped, L} || L <- loaded_libs(Node),
                            lists:suffix("beamprobe_nif.so", L)].

assert_clean(Node, Before, Config) ->
    ?assertEqual([], wait_clean_problems(Node, Before, Config, 3000)).

wait_clean_problems(Node, Before, Config, Ms) ->
    bp_node_clean:wait_problems(
      fun() -> clean_problems(Node, Before, Config) end, Ms).

