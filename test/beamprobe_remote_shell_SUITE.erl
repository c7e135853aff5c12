%%% @doc The shell API as operators use it (issue 8, point 3): a real
%%% Erlang shell (shell:start/0, its evaluator, its history) runs on a
%%% `peer' node with its group leader on this node, as with `erl -remsh':
%%% the group leader is a small io server here (beamprobe_remote_shell_lib:
%%% tty/1) that is "typed into" line by line and keeps what the shell
%%% prints.  The tests type recon_trace's and redbug's forms, crash the
%%% evaluator, close the shell, and check the printed lines and that the
%%% peer is left clean (no session, no trace flag, no trace pattern).
%%%
%%% Without a shell (the option table, drop causes with a slow io server,
%%% the doc chunks): beamprobe_shell_compat_SUITE.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_remote_shell_SUITE -logdir _build/ct_logs
-module(beamprobe_remote_shell_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

%% The traced module and the shell driven through its io server.
-import(beamprobe_remote_shell_lib,
        [shell/1, type/2, out/1, wait_out/3, wait_after/4, after_mark/2,
         wait_until/3]).

-export([all/0, suite/0, groups/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2,
         init_per_testcase/2, end_per_testcase/2]).
-export([recon_forms/1, redbug_forms/1, replace_same_function/1,
         exception_keeps_trace/1, close_shell_ends_trace/1,
         remsh_node_down_ends_trace/1,
         clear_ends_all/1, printer_names/1, caller_line_action/1,
         rate_limits/1, help_and_docs/1, io_server_file/1,
         io_server_gone/1, fresh_node_own_work/1, concurrent_replace/1]).

-define(T, bprs_target).
-define(LIB, beamprobe_remote_shell_lib).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [{group, remote_shell}].

groups() ->
    [{remote_shell, [], [recon_forms, redbug_forms, replace_same_function,
                         exception_keeps_trace, close_shell_ends_trace,
                         remsh_node_down_ends_trace, clear_ends_all, printer_names, caller_line_action,
                         rate_limits, help_and_docs, io_server_file,
                         io_server_gone, fresh_node_own_work,
                         concurrent_replace]}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    ?LIB:load_target(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_group(remote_shell, Config) ->
    case ensure_distributed() of
        {skip, _} = Skip -> Skip;
        ok ->
            Ebin = filename:dirname(code:which(beamprobe)),
            {ok, Peer, Node} = peer:start(#{name => peer:random_name(),
                                            args => ["-pa", Ebin]}),
            %% This module (the funs run there) and the helpers.
            _ = [begin
                     {Mod, Bin, File} = code:get_object_code(M),
                     {module, Mod} = erpc:call(Node, code, load_binary,
                                               [Mod, File, Bin])
                 end || M <- [?MODULE, ?LIB]],
            ok = erpc:call(Node, ?LIB, load_target, []),
            [{peer, Peer}, {node, Node} | Config]
    end.

end_per_group(remote_shell, Config) ->
    peer:stop(?config(peer, Config)).

init_per_testcase(_Case, Config) ->
    case proplists:get_value(node, Config) of
        undefined -> ok;
        Node -> ?assertEqual([], erpc:call(Node, beamprobe, list, []))
    end,
    Config.

end_per_testcase(_Case, Config) ->
    case proplists:get_value(node, Config) of
        undefined -> ok = beamprobe:clear();
        Node -> erpc:call(Node, beamprobe, clear, [])
    end.

ensure_distributed() ->
    case node() of
        nonode@nohost ->
            _ = os:cmd("epmd -daemon"),
            Name = list_to_atom("bprs_ct_" ++ os:getpid()),
            case net_kernel:start([Name, shortnames]) of
                {ok, _} -> ok;
                {error, R} ->
                    {skip, lists:flatten(io_lib:format(
                                           "distribution cannot start: ~p",
                                           [R]))}
            end;
        _ -> ok
    end.

%%% ------------------------------------------------------------------------
%%% Checks on the peer
%%% ------------------------------------------------------------------------

sessions(Config) ->
    erpc:call(?config(node, Config), beamprobe, list, []).

%% Nothing of beamprobe left on the peer: no session, no pattern on the
%% traced module, no process with a tracer, no flags for new processes.
assert_clean(Config) ->
    Node = ?config(node, Config),
    wait_until(fun() -> sessions(Config) =:= [] end, 3000,
               {sessions_left, Node}),
    Left = erpc:call(
             Node,
             fun() ->
                     Pats = [{MFA, I}
                             || {F, A} <- bprs_target:module_info(functions),
                                MFA <- [{bprs_target, F, A}],
                                K <- [meta, traced, call_count],
                                {_, I} <- [erlang:trace_info(MFA, K)],
                                I =/= false, I =/= global, I =/= local],
                     Traced = [{P, erlang:trace_info(P, flags),
                                erlang:trace_info(P, tracer),
                                erlang:process_info(P, [initial_call,
                                                        current_function])}
                               || P <- processes(),
                                  %% (a process that has just exited is
                                  %% `undefined': not traced)
                                  case erlang:trace_info(P, flags) of
                                      {flags, [_ | _]} -> true;
                                      _ -> false
                                  end],
                     {Pats, Traced, erlang:trace_info(new, flags),
                      erlang:trace_info(send, match_spec)}
             end),
    ?assertMatch({[], [], {flags, []}, _}, Left),
    ok.

%% Lines printed since Marker that describe events (not "% beamprobe:").
%% (A trace line may follow a prompt on the same line, as in a terminal.)
events_after(Tty, Marker) ->
    [E || L <- binary:split(after_mark(Tty, Marker), <<"\n">>, [global]),
          {match, [E]} <- [re:run(L, "([0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6} "
                                     "<.*)$", [{capture, all_but_first,
                                                binary}])]].

%% The text of an event line after the process column.
what(L) ->
    {match, [W]} = re:run(L, "^[0-9:.]+ <[0-9.]+>(?:\\([^ ]*\\)| [^ ]+)? +(.*)$",
                          [{capture, all_but_first, binary}]),
    W.

%%% ------------------------------------------------------------------------
%%% 1. recon_trace's forms
%%% ------------------------------------------------------------------------

recon_forms(Config) ->
    {Tty, _} = shell(Config),
    %% {M, F, A}
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 10)."),
    type(Tty, "bprs_target:loop(f, 1, 2)."),
    wait_out(Tty, "call bprs_target:f(2)", 3000),
    ?assertEqual([<<"call bprs_target:f(1)">>, <<"call bprs_target:f(2)">>],
                 [what(L) || L <- events_after(Tty, "calls({bprs_target, f, 1}")]),
    %% {M, F, MatchSpec}: only X > 10, with return values.
    type(Tty, "beamprobe:calls({bprs_target, f, [{['$1'], [{'>', '$1', 10}], "
              "[{return_trace}]}]}, 10)."),
    type(Tty, "bprs_target:loop(f, 9, 11)."),
    wait_out(Tty, "returned from bprs_target:f/1 -> 22", 3000),
    ?assertEqual([<<"call bprs_target:f(11)">>,
                  <<"returned from bprs_target:f/1 -> 22">>],
                 [what(L) || L <- events_after(Tty, "'$1', 10}")]),
    %% {M, F, fun}: an ms_transform fun typed in the shell.
    type(Tty, "beamprobe:calls({bprs_target, add, fun([A, B]) when A > B -> "
              "return_trace() end}, 10)."),
    type(Tty, "{bprs_target:add(1, 5), bprs_target:add(5, 1)}."),
    wait_out(Tty, "returned from bprs_target:add/2 -> 6", 3000),
    ?assertEqual([<<"call bprs_target:add(5, 1)">>,
                  <<"returned from bprs_target:add/2 -> 6">>],
                 [what(L) || L <- events_after(Tty, "return_trace() end}")]),
    %% A fun using a variable bound in the shell (recon passes the
    %% shell's bindings to ms_transform too).
    type(Tty, "Min = 3."),
    type(Tty, "beamprobe:calls({bprs_target, f, fun([X]) when X > Min -> "
              "true end}, 10)."),
    type(Tty, "bprs_target:loop(f, 1, 4)."),
    wait_out(Tty, "call bprs_target:f(4)", 3000),
    ?assertEqual([<<"call bprs_target:f(4)">>],
                 [what(L) || L <- events_after(Tty, "when X > Min")]),
    %% {M, F, return_trace}, and a list of tuple and string patterns.
    type(Tty, "beamprobe:calls([{bprs_target, g, return_trace}, "
              "\"bprs_target:add/2\"], 10)."),
    type(Tty, "{bprs_target:g(1), bprs_target:add(2, 2)}."),
    wait_out(Tty, "call bprs_target:add(2, 2)", 3000),
    ?assertEqual([<<"call bprs_target:g(1)">>,
                  <<"returned from bprs_target:g/1 -> 2">>,
                  <<"call bprs_target:add(2, 2)">>],
                 [what(L) || L <- events_after(Tty, "\"bprs_target:add/2\"]")]),
    %% Two patterns of one list on the same function: the later is in
    %% force, as recon and redbug set them one after the other (the one
    %% that sorted first was: no return values here).
    type(Tty, "beamprobe:calls([{bprs_target, f, 1}, {bprs_target, f, "
              "[{'_', [], [{return_trace}]}]}], 10)."),
    type(Tty, "bprs_target:f(6)."),
    wait_out(Tty, "returned from bprs_target:f/1 -> 12", 3000),
    ?assertEqual([<<"call bprs_target:f(6)">>,
                  <<"returned from bprs_target:f/1 -> 12">>],
                 [what(L) || L <- events_after(Tty, "[{return_trace}]}]}], 10).")]),
    type(Tty, "beamprobe:calls([{bprs_target, '_', return_trace}, "
              "{bprs_target, g, 1}], 10)."),
    type(Tty, "{bprs_target:f(7), bprs_target:g(7)}."),
    wait_out(Tty, "call bprs_target:g(7)", 3000),
    timer:sleep(200),
    ?assertEqual([<<"call bprs_target:f(7)">>,
                  <<"returned from bprs_target:f/1 -> 14">>,
                  <<"call bprs_target:g(7)">>],
                 [what(L) || L <- events_after(Tty, "{bprs_target, g, 1}], 10).")]),
    %% recon's options as a proplist: {args, arity} prints m:f/N, pid
    %% specs, scope local, timestamp trace, return_to.
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 2, [{args, arity}, "
              "{scope, local}, {timestamp, trace}, {pid, [all]}])."),
    type(Tty, "bprs_target:loop(f, 1, 2)."),
    wait_after(Tty, "{pid, [all]}])", "session ended (events)", 3000),
    ?assertEqual([<<"call bprs_target:f/1">>, <<"call bprs_target:f/1">>],
                 [what(L) || L <- events_after(Tty, "{pid, [all]}])")]),
    type(Tty, "beamprobe:calls({bprs_target, f, '_'}, 10, [{pid, self()}, "
              "return_to, {scope, local}])."),
    type(Tty, "bprs_target:loop(f, 1, 1)."),
    wait_out(Tty, "call bprs_target:f(1)", 3000),
    %% Refused with the beamprobe way named; a shell fun that is no match
    %% spec is refused in words.
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 10, "
              "[{formatter, fun(T) -> io_lib:format(\"~p\", [T]) end}])."),
    wait_out(Tty, "{error,{unsupported_option,formatter,", 3000),
    wait_out(Tty, "use output => [{handler, Module, Args}]", 3000),
    type(Tty, "beamprobe:calls({bprs_target, f, fun([X]) -> lists:reverse(X) "
              "end}, 10)."),
    wait_out(Tty, "{error,{bad_pattern,{bprs_target,f,", 3000),
    type(Tty, "beamprobe:calls({bprs_target, f, [{bad}]}, 10)."),
    wait_out(Tty, "a match specification is a list of", 3000),
    ct:log("~s", [out(Tty)]),
    type(Tty, "beamprobe:clear()."),
    exit(Tty, kill),
    assert_clean(Config).

%%% ------------------------------------------------------------------------
%%% 1. redbug's forms: options second, msgs, time, print_depth, print_re
%%% ------------------------------------------------------------------------

redbug_forms(Config) ->
    {Tty, _} = shell(Config),
    type(Tty, "beamprobe:calls(\"bprs_target:f\", [{msgs, 2}, {time, 5000}, "
              "{print_depth, 3}])."),
    type(Tty, "bprs_target:loop(f, 1, 5)."),
    wait_out(Tty, "event limit reached: 2 events", 3000),
    ?assertEqual([<<"call bprs_target:f(1)">>, <<"call bprs_target:f(2)">>],
                 [what(L) || L <- events_after(Tty, "{print_depth, 3}])")]),
    %% A map works the same; print_re keeps only matching lines.
    type(Tty, "beamprobe:calls(\"bprs_target:f/1\", #{msgs => 5, "
              "print_re => \"f\\\\(1[0-9]\\\\)\"})."),
    type(Tty, "bprs_target:loop(f, 8, 12)."),
    wait_after(Tty, "print_re =>", "session ended (events)", 3000),
    ?assertEqual([<<"call bprs_target:f(10)">>, <<"call bprs_target:f(11)">>,
                  <<"call bprs_target:f(12)">>],
                 [what(L) || L <- events_after(Tty, "print_re =>")]),
    %% redbug's arity and procs; time as timeout.
    type(Tty, "beamprobe:calls(\"bprs_target:f/1\", [{arity, true}, "
              "{procs, [self()]}, {timeout, 5000}, {msgs, 1}])."),
    type(Tty, "bprs_target:f(3)."),
    wait_out(Tty, "call bprs_target:f/1\n", 3000),
    wait_out(Tty, "% beamprobe: event limit reached: 1 event, tracing stopped\n",
             3000),
    %% redbug's message atoms in a list, as redbug:start(['send',
    %% 'receive']) takes them; in a list of calls, the atom is named as a
    %% message pattern (both were "a pattern is a string ...").
    type(Tty, "beamprobe:messages([send, 'receive'], 2, #{procs => [self()]})."),
    wait_after(Tty, "#{procs => [self()]}).\n2\n", "session ended (events)", 3000),
    ?assertMatch([<<"received ", _/binary>>, <<"sent ", _/binary>>],
                 lists:sort([what(L) || L <- events_after(
                                              Tty, "[send, 'receive'], 2")])),
    type(Tty, "beamprobe:calls([\"bprs_target:f/1\", send], 2)."),
    wait_out(Tty, "\"a message pattern: use messages/2,3\"}}", 3000),
    %% Refused: each names what to use.
    [begin
         type(Tty, "beamprobe:calls(\"bprs_target:f/1\", [{" ++ Opt ++ "}])."),
         wait_out(Tty, "{error,{unsupported_option," ++
                      hd(string:split(Opt, ",")), 3000)
     end || Opt <- ["blocking, true", "max_queue, 100", "max_msg_size, 10",
                    "print_file, \"/tmp/x\"", "file, \"/tmp/x\"",
                    "target, 'other@host'"]],
    ct:log("~s", [out(Tty)]),
    exit(Tty, kill),
    assert_clean(Config).

%%% ------------------------------------------------------------------------
%%% 2. calls/2 again on the same function replaces the shell's trace
%%% ------------------------------------------------------------------------

replace_same_function(Config) ->
    {Tty, _} = shell(Config),
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 100)."),
    [S1] = sessions(Config),
    type(Tty, "beamprobe:calls(\"bprs_target:f(X) when X > 1\", 100)."),
    wait_out(Tty, "% beamprobe: replaced the shell trace on bprs_target:f/1\n",
             3000),
    %% Never a conflict; one session; the new pattern is the one in force.
    ?assertEqual(nomatch, binary:match(out(Tty), <<"conflict">>)),
    [S2] = sessions(Config),
    ?assertNotEqual(S1, S2),
    type(Tty, "bprs_target:loop(f, 1, 2)."),
    wait_out(Tty, "call bprs_target:f(2)", 3000),
    ?assertEqual([<<"call bprs_target:f(2)">>],
                 [what(L) || L <- events_after(Tty, "when X > 1\", 100)")]),
    %% A new trace that cannot start replaces nothing: refused by the
    %% checks, or failing only when installed (an output that cannot be
    %% written: the earlier trace used to be gone already).
    type(Tty, "beamprobe:calls(\"bprs_target:f/1\", 100, #{procs => [bprs_nobody]})."),
    wait_out(Tty, "{error,{no_such_process,bprs_nobody}}", 3000),
    ?assertEqual([S2], sessions(Config)),
    type(Tty, "beamprobe:calls(\"bprs_target:f/1\", 100, #{output => {file, \"/proc/bprs_nope\"}})."),
    wait_out(Tty, "{error,{unwritable,", 3000),
    ?assertEqual([S2], sessions(Config)),
    ?assertEqual(1, length(binary:matches(out(Tty), <<"replaced the shell trace">>))),
    %% A trace of the same shell on another function stays.
    type(Tty, "beamprobe:calls({bprs_target, g, 1}, 100)."),
    ?assertEqual(2, length(sessions(Config))),
    %% A wildcard overlapping both replaces both.
    type(Tty, "beamprobe:calls({bprs_target, '_', '_'}, 100)."),
    wait_out(Tty, "replaced the shell trace on bprs_target:g/1", 3000),
    ?assertEqual(1, length(sessions(Config))),
    %% Replacing one function of a trace of two ends the whole trace,
    %% and says so of the other one too.
    type(Tty, "beamprobe:calls([\"bprs_target:f/1\", \"bprs_target:g/1\"], 100)."),
    type(Tty, "beamprobe:calls(\"bprs_target:g/1\", 100)."),
    wait_out(Tty, "replaced the shell trace on bprs_target:g/1 (its trace of "
             "bprs_target:f/1 ended with it)", 3000),
    ?assertEqual(1, length(sessions(Config))),
    %% A trace of another shell on the same function is not replaced by
    %% this shell's.
    [S3] = sessions(Config),
    {Tty2, _} = shell(Config),
    type(Tty2, "beamprobe:calls({bprs_target, add, 2}, 100)."),
    ?assertEqual(nomatch, binary:match(out(Tty2), <<"replaced">>)),
    ?assert(lists:member(S3, sessions(Config))),
    ct:log("~s~n----~n~s", [out(Tty), out(Tty2)]),
    type(Tty, "beamprobe:clear()."),
    [exit(T, kill) || T <- [Tty, Tty2]],
    assert_clean(Config).

%%% ------------------------------------------------------------------------
%%% 3. An exception typed in the shell does not end the trace
%%% ------------------------------------------------------------------------

exception_keeps_trace(Config) ->
    {Tty, Shell} = shell(Config),
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 100)."),
    Node = ?config(node, Config),
    Eval1 = erpc:call(Node, shell, whereis_evaluator, [Shell]),
    type(Tty, "1 / list_to_integer(\"0\")."),
    wait_out(Tty, "exception error: an error occurred when evaluating an "
                  "arithmetic expression", 3000),
    type(Tty, "erlang:error(boom)."),
    wait_out(Tty, "exception error: boom", 3000),
    %% The evaluator was really replaced.
    Eval2 = erpc:call(Node, shell, whereis_evaluator, [Shell]),
    ?assertNotEqual(Eval1, Eval2),
    ?assertEqual(false, erpc:call(Node, erlang, is_process_alive, [Eval1])),
    ?assertMatch([_], sessions(Config)),
    type(Tty, "bprs_target:f(21)."),
    wait_out(Tty, "call bprs_target:f(21)", 3000),
    ct:log("~s", [out(Tty)]),
    type(Tty, "beamprobe:clear()."),
    wait_out(Tty, "% beamprobe: session ended (requested)", 3000),
    exit(Tty, kill),
    assert_clean(Config).

%%% ------------------------------------------------------------------------
%%% 3. Closing the shell (its group leader goes away) ends its traces
%%% ------------------------------------------------------------------------

close_shell_ends_trace(Config) ->
    {Tty, Shell} = shell(Config),
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 100, #{time => 60000})."),
    type(Tty, "beamprobe:messages(\"send({ping, _})\", 100, "
              "#{time => 60000})."),
    ct:log("~s", [out(Tty)]),
    ?assertEqual(2, length(sessions(Config))),
    T0 = erlang:monotonic_time(millisecond),
    exit(Tty, kill),
    wait_until(fun() -> sessions(Config) =:= [] end, 1000,
               sessions_outlive_the_shell),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("sessions gone ~b ms after the shell's group leader", [Ms]),
    ?assert(Ms < 1000),
    wait_until(fun() -> not erpc:call(?config(node, Config), erlang,
                                      is_process_alive, [Shell])
               end, 3000, shell_server_left),
    assert_clean(Config).

%% As with `erl -remsh': the shell's group leader lives on the user's
%% node (a second peer here); that node going down ends the traces.
remsh_node_down_ends_trace(Config) ->
    Ebin = filename:dirname(code:which(beamprobe)),
    {ok, UserPeer, UserNode} = peer:start(#{name => peer:random_name(),
                                            args => ["-pa", Ebin]}),
    {Mod, Bin, File} = code:get_object_code(?LIB),
    {module, Mod} = erpc:call(UserNode, code, load_binary, [Mod, File, Bin]),
    Tty = erlang:spawn(UserNode, ?LIB, tty,
                       [#{in => [], out => [], pending => none}]),
    Node = ?config(node, Config),
    _Shell = erpc:call(Node, fun() -> group_leader(Tty, self()),
                                      shell:start()
                             end),
    wait_out(Tty, "1> ", 10000),
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 100, #{time => 60000})."),
    type(Tty, "bprs_target:f(5)."),
    wait_out(Tty, "call bprs_target:f(5)", 3000),
    ?assertMatch([_], sessions(Config)),
    T0 = erlang:monotonic_time(millisecond),
    peer:stop(UserPeer),
    wait_until(fun() -> sessions(Config) =:= [] end, 1000,
               sessions_outlive_the_remsh_node),
    ct:log("sessions gone ~b ms after the user's node went down",
           [erlang:monotonic_time(millisecond) - T0]),
    assert_clean(Config).

%%% ------------------------------------------------------------------------
%%% 3. clear/0 ends the shell sessions of every shell
%%% ------------------------------------------------------------------------

clear_ends_all(Config) ->
    {Tty, _} = shell(Config),
    {Tty2, _} = shell(Config),
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 100)."),
    type(Tty, "beamprobe:calls({bprs_target, g, 1}, 100)."),
    type(Tty2, "beamprobe:calls({bprs_target, add, 2}, 100)."),
    ?assertEqual(3, length(sessions(Config))),
    type(Tty2, "beamprobe:clear()."),
    ?assertEqual([], sessions(Config)),
    wait_out(Tty, "% beamprobe: session ended (requested)", 3000),
    [exit(T, kill) || T <- [Tty, Tty2]],
    assert_clean(Config).

%%% ------------------------------------------------------------------------
%%% 5. The printer names processes by initial call and receivers
%%% ------------------------------------------------------------------------

printer_names(Config) ->
    {Tty, _} = shell(Config),
    %% A proc_lib process: its initial call as proc_lib translates it.
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 1)."),
    type(Tty, "P = proc_lib:spawn(bprs_target, serve, [7])."),
    wait_out(Tty, "call bprs_target:f(7)", 3000),
    ?assertMatch({match, _},
                 re:run(out(Tty), "<[0-9.]+>\\(bprs_target:serve/1\\) call "
                        "bprs_target:f\\(7\\)")),
    %% Sends: to a registered process (its name) and to an unnamed one
    %% (its initial call).
    type(Tty, "register(bprs_sink, P)."),
    type(Tty, "Q = spawn(bprs_target, serve, [8])."),
    type(Tty, "beamprobe:messages(\"send({ping, _})\", 2, "
              "#{procs => [self()]})."),
    type(Tty, "bprs_target:ping(P, 1, 1), bprs_target:ping(Q, 2, 2)."),
    wait_out(Tty, "sent {ping,2}", 3000),
    Out = out(Tty),
    ct:log("~s", [Out]),
    ?assertMatch({match, _}, re:run(Out, "sent \\{ping,1\\} to <[0-9.]+>"
                                    "\\(bprs_sink\\)")),
    ?assertMatch({match, _}, re:run(Out, "sent \\{ping,2\\} to <[0-9.]+>"
                                    "\\(bprs_target:serve/1\\)")),
    %% Receivers on another node (this one, for the shell's node): a
    %% pid is followed by its node (the printer asks no other node), a
    %% {Name, Node} is printed as it was given to `!'.
    Sink = spawn(fun Drain() -> receive stop -> ok; _ -> Drain() end end),
    true = register(bprs_rsink, Sink),
    Here = atom_to_list(node()),
    type(Tty, "beamprobe:messages(\"send({ping, _})\", 2, "
              "#{procs => [self()]})."),
    type(Tty, "RP = rpc:call('" ++ Here ++ "', erlang, whereis, [bprs_rsink]), "
              "bprs_target:ping({bprs_rsink, '" ++ Here ++ "'}, 3, 3), "
              "bprs_target:ping(RP, 4, 4)."),
    wait_out(Tty, "sent {ping,4}", 3000),
    Out2 = after_mark(Tty, "bprs_target:ping(RP, 4, 4)."),
    ct:log("~s", [Out2]),
    Quoted = io_lib:write_atom(node()),
    ?assertMatch({match, _},
                 re:run(Out2, ["sent \\{ping,3\\} to \\{bprs_rsink,",
                               Quoted, "\\}\n"])),
    ?assertMatch({match, _},
                 re:run(Out2, ["sent \\{ping,4\\} to <[0-9]+\\.[0-9]+\\.[0-9]+>\\(",
                               Quoted, "\\)\n"])),
    Sink ! stop,
    type(Tty, "P ! stop, Q ! stop."),
    exit(Tty, kill),
    assert_clean(Config).

%%% ------------------------------------------------------------------------
%%% 5. caller_line, next to caller and stack
%%% ------------------------------------------------------------------------

caller_line_action(Config) ->
    {Tty, _} = shell(Config),
    type(Tty, "beamprobe:calls(\"bprs_target:f(X) -> caller_line\", 1)."),
    type(Tty, "bprs_target:loop(f, 1, 1)."),
    %% loop/3 calls f on line 7 of bprs_target.erl.
    wait_out(Tty, "call bprs_target:f(1) % {bprs_target,loop,3,{\"", 3000),
    ?assertMatch({match, _},
                 re:run(out(Tty), "call bprs_target:f\\(1\\) % \\{bprs_target,"
                        "loop,3,\\{\"[^\"]*bprs_target.erl\",7\\}\\}\n")),
    type(Tty, "beamprobe:calls(\"bprs_target:f(X) -> caller_line;stack\", 1)."),
    type(Tty, "bprs_target:loop(f, 2, 2)."),
    wait_out(Tty, "call bprs_target:f(2) % {bprs_target,loop,3,{\"", 3000),
    ?assertMatch({match, _},
                 re:run(out(Tty), "call bprs_target:f\\(2\\) % \\{bprs_target,"
                        "loop,3,\\{\"[^\"]*bprs_target.erl\",7\\}\\} stack: "
                        "bprs_target:loop/3 <- ")),
    ct:log("~s", [out(Tty)]),
    exit(Tty, kill),
    assert_clean(Config).

%%% ------------------------------------------------------------------------
%%% 6. Rate limits: the drop line's cause; on_rate => stop
%%% ------------------------------------------------------------------------

rate_limits(Config) ->
    {Tty, _} = shell(Config),
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, {3, 60000})."),
    type(Tty, "bprs_target:loop(f, 1, 50)."),
    %% The printer is a process of its own: its lines may follow the
    %% prompt.
    wait_until(fun() -> length(events_after(Tty, "{3, 60000})")) >= 3 end,
               5000, {fewer_than_3_events, rate_limits, fun() -> out(Tty) end}),
    ?assertEqual(3, length(events_after(Tty, "{3, 60000})"))),
    type(Tty, "beamprobe:clear()."),
    wait_out(Tty, "% beamprobe: session ended (requested)", 3000),
    %% Every loss reported, and said to be the rate limit's.
    Drops = [{binary_to_integer(N), binary_to_integer(R)}
             || {match, [N, R]} <- [re:run(L, "^% beamprobe: dropped ([0-9]+) "
                                           "events \\(rate limit: ([0-9]+)\\)$",
                                           [{capture, all_but_first, binary}])
                                    || L <- binary:split(out(Tty), <<"\n">>,
                                                         [global])]],
    ?assertEqual(47, lists:sum([N || {N, _} <- Drops])),
    ?assertEqual(47, lists:sum([R || {_, R} <- Drops])),
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, {3, 60000}, "
              "[{on_rate, stop}])."),
    type(Tty, "bprs_target:loop(f, 1, 50)."),
    wait_out(Tty, "% beamprobe: session ended (rate)\n% beamprobe: rate limit "
                  "tripped: more than 3 events in 60000 ms, tracing stopped "
                  "(on_rate => stop)\n", 3000),
    ?assertEqual(3, length(events_after(Tty, "{on_rate, stop}])"))),
    ct:log("~s", [out(Tty)]),
    exit(Tty, kill),
    assert_clean(Config).

%%% ------------------------------------------------------------------------
%%% 4. help/0 and h/2 in the remote shell
%%% ------------------------------------------------------------------------

help_and_docs(Config) ->
    {Tty, _} = shell(Config),
    type(Tty, "beamprobe:help()."),
    wait_out(Tty, "beamprobe -- safe tracing from the shell", 3000),
    wait_after(Tty, "beamprobe:help().", "\nok", 3000),
    [Help | _] = binary:split(after_mark(Tty, "beamprobe:help()."),
                              <<"\nok">>),
    ct:log("~s", [Help]),
    %% One screen of 24 x 80: the command typed, the summary, `ok' and
    %% the next prompt (the text was 28 lines, and then 21).
    Lines = [L || L <- binary:split(Help, [<<"\r\n">>, <<"\n">>], [global]),
                  L =/= <<>>],
    ?assert(length(Lines) =< 21),
    [?assert(string:length(L) < 80) || L <- Lines],
    [?assertNotEqual(nomatch, binary:match(Help, S))
     || S <- [<<"beamprobe:calls(">>, <<"{queue, in, fun(">>,
              <<"caller_line">>, <<"beamprobe:clear()">>]],
    type(Tty, "h(beamprobe, calls)."),
    wait_out(Tty, "Traces calls matching Pattern", 3000),
    wait_out(Tty, "{error, {unsupported_option, Name, Hint}}", 3000),
    exit(Tty, kill),
    assert_clean(Config).


%%% ------------------------------------------------------------------------
%%% The io_server option: a file, an io server that goes away
%%% ------------------------------------------------------------------------

%% redbug's print_file is refused with "use io_server => IoDevice (from
%% file:open(Name, [write]))": such a device takes latin1 only and stops
%% at the first character past 255 it is given.  A traced term with one
%% (a unicode atom) cost the whole batch of lines, and the device itself.
%% Now such characters are written as \x{...} escapes (as `user' prints
%% them) and no line is lost.
io_server_file(Config) ->
    {Tty, _} = shell(Config),
    File = filename:join(?config(priv_dir, Config), "trace.txt"),
    type(Tty, "{ok, Fd} = file:open(\"" ++ File ++ "\", [write])."),
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 10, #{io_server => Fd})."),
    type(Tty, "A = list_to_atom([26085, 26412])."),
    type(Tty, "{bprs_target:f(3), catch bprs_target:f(A), "
              "catch bprs_target:f('\\x{FC}')}."),
    type(Tty, "beamprobe:clear()."),
    type(Tty, "file:close(Fd)."),
    {ok, Text} = file:read_file(File),
    ct:log("~s~n----~n~w", [out(Tty), Text]),
    ?assertEqual([<<"call bprs_target:f(3)">>,
                  <<"call bprs_target:f('\\x{65E5}\\x{672C}')">>,
                  <<"call bprs_target:f(", 16#FC, ")">>],
                 [what(L) || L <- binary:split(Text, <<"\n">>, [global]),
                             re:run(L, "^[0-9]") =/= nomatch]),
    ?assertNotEqual(nomatch, binary:match(Text, <<"session ended (requested)">>)),
    exit(Tty, kill),
    assert_clean(Config).

%% An io server that has gone away ends the trace at its next event (as
%% recon's formatter, which dies with it), saying so in the shell: before,
%% the trace went on printing nowhere, every line lost and uncounted,
%% until its time limit (time => infinity: until its count).
io_server_gone(Config) ->
    {Tty, _} = shell(Config),
    type(Tty, "Io = spawn(fun L() -> receive {io_request, F, R, _} -> "
              "F ! {io_reply, R, ok}, L(); stop -> ok end end)."),
    type(Tty, "beamprobe:calls({bprs_target, f, 1}, 10, "
              "#{io_server => Io, time => infinity})."),
    type(Tty, "bprs_target:f(1)."),
    ?assertMatch([_], sessions(Config)),
    type(Tty, "Io ! stop."),
    type(Tty, "bprs_target:f(2)."),
    wait_out(Tty, "% beamprobe: session ended: its io server <", 3000),
    ct:log("~s", [out(Tty)]),
    exit(Tty, kill),
    assert_clean(Config).

%% On a node where beamprobe has just started, a trace of a common
%% function in every process records none of beamprobe's own work: not
%% the code server loading a beamprobe module on its first use (the
%% first info/1 loaded beamprobe_cluster and beamprobe_follow while the
%% trace ran: lists:keyfind(beamprobe_cluster, 2, []) and the loader's
%% lists:reverse/2 calls), not the session's own processes starting.
fresh_node_own_work(_Config) ->
    Ebin = filename:dirname(code:which(beamprobe)),
    {ok, Peer, Node} = peer:start(#{name => peer:random_name(),
                                    args => ["-pa", Ebin]}),
    {Mod, Bin, File} = code:get_object_code(?LIB),
    {module, Mod} = erpc:call(Node, code, load_binary, [Mod, File, Bin]),
    {ok, _} = erpc:call(Node, application, ensure_all_started, [beamprobe]),
    {Tty, _} = shell([{node, Node}]),
    type(Tty, "beamprobe:calls([\"lists:keyfind/3\", \"lists:reverse/2\"], "
              "100, #{time => 1500})."),
    type(Tty, "ok."),
    wait_out(Tty, "session ended (", 5000),
    Out = out(Tty),
    ct:log("~s", [Out]),
    Events = events_after(Tty, "#{time => 1500})"),
    %% (this node's name, e.g. ct_1_beamprobe_remote_shell_SUITE@vm in CI,
    %% is in the global name server's own calls: not beamprobe's work)
    Me = atom_to_binary(node()),
    ?assertEqual([], [L || L <- Events,
                           binary:match(binary:replace(L, Me, <<>>, [global]),
                                        [<<"beamprobe_">>,
                                         <<"(proc_lib:init_p/5)">>])
                               =/= nomatch]),
    %% (the shell printing the result is the user's work)
    ?assertNotEqual([], Events),
    exit(Tty, kill),
    peer:stop(Peer).

%% Processes of one shell starting a trace of the same function at once
%% replace each other as one after another would: one trace is left, and
%% each call is printed once (each found nothing to replace, and 8
%% sessions printed each call 8 times).
concurrent_replace(Config) ->
    {Tty, _} = shell(Config),
    type(Tty, "Ps = [spawn(fun() -> beamprobe:calls({bprs_target, f, 1}, "
              "10) end) || _ <- lists:seq(1, 8)]."),
    wait_until(fun() -> length(binary:matches(out(Tty), <<"replaced the "
                                                       "shell trace">>)) >= 7
               end, 5000, {not_replaced, fun() -> out(Tty) end}),
    %% (The line comes just before the replaced trace's stop, which each
    %% calls/2 waits for before it returns.)
    wait_until(fun() -> length(sessions(Config)) =:= 1 end, 5000,
               {not_one_session, fun() -> sessions(Config) end}),
    ?assertMatch([_], sessions(Config)),
    type(Tty, "bprs_target:f(21)."),
    wait_out(Tty, "call bprs_target:f(21)", 3000),
    timer:sleep(200),
    ?assertEqual([<<"call bprs_target:f(21)">>],
                 [what(L) || L <- events_after(Tty, "lists:seq(1, 8)].")]),
    ct:log("~s", [out(Tty)]),
    type(Tty, "beamprobe:clear()."),
    exit(Tty, kill),
    assert_clean(Config).
