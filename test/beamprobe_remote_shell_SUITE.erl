%%% @doc The shell API as operators use it (issue 8, point 3): a real
%%% Erlang shell (shell:start/0, its evaluator, its history) runs on a
%%% `peer' node with its group leader on this node, as with `erl -remsh':
%%% the group leader is a small io server here (tty/1) that is "typed
%%% into" line by line and keeps what the shell prints.  The tests type
%%% recon_trace's and redbug's forms, crash the evaluator, close the shell,
%%% and check the printed lines and that the peer is left clean (no
%%% session, no trace flag, no trace pattern).
%%%
%%% Also here, without a shell: the option table (every recon_trace:calls/3
%%% and redbug:start/2 option accepted or refused with a hint), drop
%%% causes with a slow io server, and the EEP-48 doc chunks (h/2 in erl,
%%% and in iex when Elixir is installed).
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_remote_shell_SUITE -logdir _build/ct_logs
-module(beamprobe_remote_shell_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, groups/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2,
         init_per_testcase/2, end_per_testcase/2]).
-export([recon_forms/1, redbug_forms/1, replace_same_function/1,
         exception_keeps_trace/1, close_shell_ends_trace/1,
         remsh_node_down_ends_trace/1,
         clear_ends_all/1, printer_names/1, caller_line_action/1,
         rate_limits/1, help_and_docs/1]).
-export([options_table/1, drop_causes_slow_output/1, doc_chunks/1,
         iex_docs/1]).
%% The io server standing for the shell's group (spawned by MFA).
-export([tty/1, slow_io/1, load_target_here/0]).

-define(T, bprs_target).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [{group, remote_shell}, options_table, drop_causes_slow_output,
     doc_chunks, iex_docs].

groups() ->
    [{remote_shell, [], [recon_forms, redbug_forms, replace_same_function,
                         exception_keeps_trace, close_shell_ends_trace,
                         remsh_node_down_ends_trace, clear_ends_all, printer_names, caller_line_action,
                         rate_limits, help_and_docs]}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    load_target(node()),
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
            {Mod, Bin, File} = code:get_object_code(?MODULE),
            {module, Mod} = erpc:call(Node, code, load_binary, [Mod, File, Bin]),
            ok = erpc:call(Node, ?MODULE, load_target_here, []),
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
%%% The traced module (compiled from source: the pattern language refuses
%%% beamprobe* modules without force)
%%% ------------------------------------------------------------------------

target_src() ->
    ["-module(bprs_target).\n",
     "-export([f/1, g/1, add/2, loop/3, ping/3, serve/1]).\n",
     "f(X) -> X * 2.\n",
     "g(X) -> X + 1.\n",
     "add(A, B) -> A + B.\n",
     "loop(_F, I, To) when I > To -> ok;\n",
     "loop(F, I, To) -> _ = bprs_target:F(I), loop(F, I + 1, To).\n",
     "ping(_P, I, To) when I > To -> ok;\n",
     "ping(P, I, To) -> P ! {ping, I}, ping(P, I + 1, To).\n",
     "serve(X) -> _ = bprs_target:f(X), receive stop -> ok end.\n"].

load_target_here() -> load_target(node()).

load_target(_Node) ->
    Dir = filename:join("/tmp", "bprs-" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    Src = filename:join(Dir, "bprs_target.erl"),
    ok = file:write_file(Src, target_src()),
    %% Compiled from a file: the line table names bprs_target.erl (for
    %% caller_line).
    {ok, bprs_target, Bin} = compile:file(Src, [binary, return_errors]),
    {module, bprs_target} = code:load_binary(bprs_target, Src, Bin),
    %% The line table keeps the name; the file is no longer needed.
    ok = file:del_dir_r(Dir).

%%% ------------------------------------------------------------------------
%%% A shell on the peer, its group leader here
%%% ------------------------------------------------------------------------

%% Starts a real shell (shell:start/0) on the peer whose group leader is a
%% tty process of this node, and waits for its first prompt.
shell(Config) ->
    Node = ?config(node, Config),
    Tty = spawn(?MODULE, tty, [#{in => [], out => [], pending => none}]),
    Shell = erpc:call(Node, fun() ->
                                    group_leader(Tty, self()),
                                    shell:start()
                            end),
    wait_out(Tty, "1> ", 10000),
    {Tty, Shell}.

%% Types a line (a newline is added) and waits for the next prompt.
type(Tty, Line) ->
    N = prompts(Tty),
    Tty ! {type, Line ++ "\n"},
    wait_until(fun() -> prompts(Tty) > N end, 10000,
               {no_prompt_after, Line, fun() -> out(Tty) end}),
    ok.

%% Prompts printed so far ("(node@host)N> "; "=> " in typed text is no
%% prompt).
prompts(Tty) ->
    case re:run(out(Tty), "\\)[0-9]+> ", [global]) of
        {match, Ms} -> length(Ms);
        nomatch -> 0
    end.

out(Tty) ->
    Ref = make_ref(),
    Tty ! {out, self(), Ref},
    receive {Ref, B} -> B after 5000 -> ct:fail(tty_not_answering) end.

wait_out(Tty, Sub, Timeout) ->
    wait_until(fun() -> binary:match(out(Tty), iolist_to_binary(Sub)) =/= nomatch
               end, Timeout, {not_printed, iolist_to_binary(Sub),
                              fun() -> out(Tty) end}).

%% Waits until Sub is printed after the last occurrence of Marker (an
%% earlier session's line must not satisfy the wait).
wait_after(Tty, Marker, Sub, Timeout) ->
    wait_until(fun() -> binary:match(after_mark(Tty, Marker),
                                     iolist_to_binary(Sub)) =/= nomatch
               end, Timeout, {not_printed_after, iolist_to_binary(Marker),
                              iolist_to_binary(Sub), fun() -> out(Tty) end}).

%% Text printed after the last occurrence of Marker.
after_mark(Tty, Marker) ->
    B = out(Tty),
    case binary:matches(B, iolist_to_binary(Marker)) of
        [] -> <<>>;
        Ms ->
            {P, L} = lists:last(Ms),
            binary:part(B, P + L, byte_size(B) - P - L)
    end.

wait_until(F, Timeout, What) ->
    Deadline = erlang:monotonic_time(millisecond) + Timeout,
    wait_loop(F, Deadline, What).

wait_loop(F, Deadline, What) ->
    case F() of
        true -> ok;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true ->
                    ct:fail(case What of
                                {A, B, Fun} when is_function(Fun) ->
                                    {A, B, Fun()};
                                _ -> What
                            end);
                false -> timer:sleep(10), wait_loop(F, Deadline, What)
            end
    end.

%% The io server: answers the shell's input requests from the typed text
%% (get_until with erl_scan, get_line) and keeps every output.
tty(#{in := In, out := Out, pending := Pending} = St) ->
    receive
        {io_request, From, ReplyAs, Req0} when Pending =:= none ->
            Req = latin1_req(Req0),
            case io_req(Req, St) of
                {reply, R, St1} ->
                    From ! {io_reply, ReplyAs, R},
                    tty(St1);
                {wait, St1} ->
                    tty(St1#{pending := {From, ReplyAs, Req}})
            end;
        {type, Text} ->
            %% Echoed, as a terminal does.
            St1 = St#{in := In ++ Text, out := [Text | Out]},
            case Pending of
                none -> tty(St1);
                {From, ReplyAs, Req} ->
                    case io_req(latin1_req(Req),
                                St1#{pending := none, prompted => true}) of
                        {reply, R, St2} ->
                            From ! {io_reply, ReplyAs, R},
                            tty(maps:remove(prompted, St2));
                        {wait, St2} ->
                            tty(St2#{pending := Pending})
                    end
            end;
        {out, From, Ref} ->
            From ! {Ref, unicode:characters_to_binary(lists:reverse(Out))},
            tty(St);
        {io_request, From, ReplyAs, Req0} ->
            %% Output while an input request waits (trace lines).
            case latin1_req(Req0) of
                Req when element(1, Req) =:= put_chars;
                         element(1, Req) =:= requests ->
                    {reply, R, St1} = io_req(Req, St),
                    From ! {io_reply, ReplyAs, R},
                    tty(St1);
                _ ->
                    From ! {io_reply, ReplyAs, {error, busy}},
                    tty(St)
            end
    end.

%% The requests of a node that sends them without an encoding (io sends
%% those to an io server on another node).
latin1_req({put_chars, Chars}) -> {put_chars, latin1, Chars};
latin1_req({put_chars, M, F, A}) -> {put_chars, latin1, M, F, A};
latin1_req({get_until, Prompt, M, F, Xs}) -> {get_until, latin1, Prompt, M, F, Xs};
latin1_req({get_line, Prompt}) -> {get_line, latin1, Prompt};
latin1_req({requests, Rs}) -> {requests, [latin1_req(R) || R <- Rs]};
latin1_req(R) -> R.

io_req({put_chars, Enc, Chars}, #{out := Out} = St) ->
    {reply, ok, St#{out := [unicode:characters_to_list(Chars, Enc) | Out]}};
io_req({put_chars, Enc, M, F, A}, St) ->
    io_req({put_chars, Enc, apply(M, F, A)}, St);
io_req({requests, Rs}, St) ->
    lists:foldl(fun(R, {reply, ok, S}) -> io_req(R, S);
                   (_, Acc) -> Acc
                end, {reply, ok, St}, Rs);
io_req(nl, St) -> io_req({put_chars, unicode, "\n"}, St);
io_req({get_until, _Enc, Prompt, M, F, Xs}, #{in := In, out := Out} = St) ->
    St1 = case maps:is_key(prompted, St) of
              true -> St;
              false -> St#{out := [prompt(Prompt) | Out]}
          end,
    %% A typed line is a whole expression in these tests: it is scanned
    %% at once.
    case In of
        [] -> {wait, St1};
        _ ->
            case apply(M, F, [[], In | Xs]) of
                {done, Result, Rest} ->
                    {reply, Result, St1#{in := rest(Rest)}};
                {more, _} ->
                    {wait, St1}
            end
    end;
io_req({get_line, _Enc, _Prompt}, #{in := In} = St) ->
    case string:split(In, "\n") of
        [Line, Rest] -> {reply, Line ++ "\n", St#{in := Rest}};
        _ -> {wait, St}
    end;
io_req(getopts, St) ->
    {reply, [{binary, false}, {encoding, unicode}, {echo, true}], St};
io_req({setopts, _}, St) -> {reply, ok, St};
io_req({get_geometry, _}, St) -> {reply, {error, enotsup}, St};
io_req(_, St) -> {reply, {error, request}, St}.

rest(eof) -> [];
rest(R) -> R.

prompt(P) ->
    try io_lib:format("~ts", [P])
    catch _:_ ->
            case P of
                {format, F, A} -> io_lib:format(F, A);
                _ -> io_lib:format("~p", [P])
            end
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
    {Mod, Bin, File} = code:get_object_code(?MODULE),
    {module, Mod} = erpc:call(UserNode, code, load_binary, [Mod, File, Bin]),
    Tty = erlang:spawn(UserNode, ?MODULE, tty,
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
    Help = after_mark(Tty, "beamprobe:help()."),
    ct:log("~s", [Help]),
    wait_out(Tty, "beamprobe -- safe tracing from the shell", 3000),
    %% One screen: at most 30 lines.
    ?assert(length(binary:split(Help, <<"\n">>, [global])) =< 31),
    [?assertNotEqual(nomatch, binary:match(Help, S))
     || S <- [<<"beamprobe:calls(">>, <<"{queue, in, fun(">>,
              <<"caller_line">>, <<"beamprobe:clear()">>]],
    type(Tty, "h(beamprobe, calls)."),
    wait_out(Tty, "Traces calls matching Pattern", 3000),
    wait_out(Tty, "{error, {unsupported_option, Name, Hint}}", 3000),
    exit(Tty, kill),
    assert_clean(Config).

%%% ------------------------------------------------------------------------
%%% 1. The option table: every recon_trace:calls/3 and redbug:start/2
%%% option is accepted or refused with the beamprobe way
%%% ------------------------------------------------------------------------

options_table(_Config) ->
    %% An io server that answers (clear/0 waits for the printer's last
    %% lines: one that never answered would hold each clear 5 s).
    Io = beamprobe_shell_lib:cap(),
    O = [{io_server, Io}],
    P = {bprs_target, f, 1},
    Ok = fun(Opts) ->
                 R = beamprobe:calls(P, 5, O ++ Opts),
                 ok = beamprobe:clear(),
                 R
         end,
    %% Accepted with their meaning.
    Accepted = [[{pid, all}], [{pid, new}], [{pid, existing}], [{pid, self()}],
                [{pid, [self(), whereis(code_server)]}], [{pid, code_server}],
                [{pid, pid_to_list(self())}],
                [{pid, list_to_tuple([list_to_integer(X) || X <- string:lexemes(
                                          pid_to_list(self()), "<.>")])}],
                [{procs, [self()]}], [{procs, {pid, element(2, pid_parts(self())),
                                                element(3, pid_parts(self()))}}],
                [{timestamp, formatter}], [{timestamp, trace}],
                [{args, args}], [{args, arity}], [{args, 3}],
                [return_to], [{return_to, true}], [{scope, local}],
                [{time, 1000}], [{timeout, 1000}], [{msgs, 5}], [{arity, true}],
                [{print_depth, 999999}], [{print_re, "x"}], [{print_msec, true}],
                #{io_server => Io, pid => all}],
    [?assertEqual({Opts, 1}, {Opts, case Opts of
                                       M when is_map(M) ->
                                           R = beamprobe:calls(P, 5, M),
                                           ok = beamprobe:clear(), R;
                                       _ -> Ok(Opts)
                                   end})
     || Opts <- Accepted],
    %% Refused, each with a hint that names a beamprobe option or function.
    Refused = [{scope, global}, {formatter, fun(_) -> "" end}, {use_dbg, true},
               {target, node()}, {cookie, c}, {blocking, true},
               {max_queue, 10}, {max_msg_size, 10}, {debug, true},
               {trace_child, true}, {discard, true}, {buffered, true},
               {records, [m]}, {print_calls, false}, {print_return, false},
               {print_node, true}, {print_fun, fun(_) -> ok end},
               {print_time_unit, millisecond}, {print_file, "/tmp/x"},
               {file, "/tmp/x"}, {file_size, 1}, {file_count, 8}],
    [begin
         {K, _} = Opt,
         R = beamprobe:calls(P, 5, O ++ [Opt]),
         ?assertMatch({Opt, {error, {unsupported_option, K, [_ | _]}}}, {Opt, R}),
         {error, {unsupported_option, K, Hint}} = R,
         ?assertMatch({K, {match, _}},
                      {K, re:run(Hint, "=>|beamprobe|procs|args|-> return|"
                                       "leave|records|pids|remsh|timestamp")}),
         %% format_error/1 says it in words.
         ?assertNotEqual(nomatch, string:find(beamprobe:format_error(
                                                element(2, R)), Hint))
     end || Opt <- Refused],
    %% Bad values are bad options, named as the caller wrote them.
    [?assertEqual({error, {bad_option, K, V}}, beamprobe:calls(P, 5, O ++ [{K, V}]))
     || {K, V} <- [{pid, []}, {pid, "<garbage>"}, {pid, {global, bprs_nobody}},
                   {timeout, -1}, {msgs, 0}, {args, deep}, {timestamp, never},
                   {scope, galaxy}, {print_re, "("}, {print_depth, 0},
                   {return_to, maybe}]],
    ?assertEqual({error, {unknown_option, bogus}},
                 beamprobe:calls(P, 5, O ++ [{bogus, 1}])),
    %% msgs must agree with an explicit limit.
    ?assertEqual({error, {bad_option, msgs, 3}},
                 beamprobe:calls(P, 5, O ++ [{msgs, 3}])),
    %% The first of a key wins, as with proplists:get_value/2.
    ?assertEqual(1, Ok([{time, 1000}, {time, -1}])),
    ?assertEqual([], beamprobe:list()),
    Io ! cap_stop.

pid_parts(P) ->
    [A, B, C] = [list_to_integer(X) || X <- string:lexemes(pid_to_list(P), "<.>")],
    {A, B, C}.

%%% ------------------------------------------------------------------------
%%% 6. A drop line says "output too slow" when the io server is slow
%%% ------------------------------------------------------------------------

drop_causes_slow_output(_Config) ->
    Io = spawn(?MODULE, slow_io, [[]]),
    1 = beamprobe:calls({bprs_target, f, 1}, 1000000,
                        #{io_server => Io, time => 60000}),
    bprs_target:loop(f, 1, 50000),
    timer:sleep(1500),
    ok = beamprobe:clear(),
    Text = fun() -> Io ! {text, self()},
                    receive {Io, T} -> T after 5000 -> <<>> end
           end,
    wait_until(fun() -> binary:match(Text(), <<"session ended">>) =/= nomatch
               end, 20000, slow_io_never_ended),
    Lines = [L || L <- binary:split(Text(), <<"\n">>, [global]),
                  binary:match(L, <<"dropped">>) =/= nomatch],
    ct:log("~p", [Lines]),
    ?assertNotEqual([], Lines),
    [?assertMatch({match, _}, re:run(L, "^% beamprobe: dropped [0-9]+ events "
                                     "\\(.*\\)$"))
     || L <- Lines],
    %% The handler could not keep up: at least one line says so.
    ?assert(lists:any(fun(L) -> re:run(L, "output too slow: [0-9]+") =/= nomatch
                      end, Lines)),
    Io ! stop.

%% An io server that takes 20 ms per request.
slow_io(Acc) ->
    receive
        {io_request, From, Ref, {put_chars, Enc, Chars}} ->
            timer:sleep(20),
            From ! {io_reply, Ref, ok},
            slow_io([unicode:characters_to_binary(Chars, Enc) | Acc]);
        {io_request, From, Ref, {put_chars, Enc, M, F, A}} ->
            From ! {io_reply, Ref, ok},
            slow_io([unicode:characters_to_binary(apply(M, F, A), Enc) | Acc]);
        {io_request, From, Ref, _} ->
            From ! {io_reply, Ref, {error, request}},
            slow_io(Acc);
        {text, From} ->
            From ! {self(), iolist_to_binary(lists:reverse(Acc))},
            slow_io(Acc);
        stop -> ok
    end.

%%% ------------------------------------------------------------------------
%%% 4. EEP-48 doc chunks
%%% ------------------------------------------------------------------------

doc_chunks(_Config) ->
    {ok, {docs_v1, _, erlang, _, #{<<"en">> := _}, _, Docs}} =
        code:get_doc(beamprobe),
    Documented = [{F, A} || {{function, F, A}, _, _, #{<<"en">> := D}, _}
                                <- Docs, D =/= []],
    Hidden = [{F, A} || {{function, F, A}, _, _, hidden, _} <- Docs],
    Exports = [FA || FA <- beamprobe:module_info(exports),
                     not lists:member(element(1, FA), [module_info]),
                     not lists:member(FA, Hidden)],
    ?assertEqual([], Exports -- Documented),
    ?assert(lists:member({calls, 2}, Documented)),
    %% h(beamprobe, calls) prints it (c:h/2 through shell_docs).
    Cap = spawn(fun() -> cap([]) end),
    Me = self(),
    spawn(fun() -> group_leader(Cap, self()), c:h(beamprobe, calls),
                   Me ! h_done end),
    receive h_done -> ok after 10000 -> ct:fail(h_timeout) end,
    Cap ! {text, self()},
    Text = receive {Cap, T} -> T after 5000 -> ct:fail(cap) end,
    ct:log("~s", [Text]),
    ?assertNotEqual(nomatch, binary:match(Text, <<"Traces calls matching Pattern">>)),
    ?assertNotEqual(nomatch, binary:match(Text, <<"-spec calls(">>)).

cap(Acc) ->
    receive
        {io_request, From, Ref, {put_chars, Enc, Chars}} ->
            From ! {io_reply, Ref, ok},
            cap([unicode:characters_to_binary(Chars, Enc) | Acc]);
        {io_request, From, Ref, {put_chars, Enc, M, F, A}} ->
            From ! {io_reply, Ref, ok},
            cap([unicode:characters_to_binary(apply(M, F, A), Enc) | Acc]);
        {io_request, From, Ref, {requests, Rs}} ->
            From ! {io_reply, Ref, ok},
            cap(lists:reverse([unicode:characters_to_binary(C, E)
                               || {put_chars, E, C} <- Rs]) ++ Acc);
        {io_request, From, Ref, getopts} ->
            From ! {io_reply, Ref, [{encoding, unicode}]},
            cap(Acc);
        {io_request, From, Ref, _} ->
            From ! {io_reply, Ref, {error, enotsup}},
            cap(Acc);
        {text, From} ->
            From ! {self(), iolist_to_binary(lists:reverse(Acc))},
            cap(Acc)
    end.

%% `h :beamprobe.calls' in iex prints the same documentation.
iex_docs(_Config) ->
    case os:find_executable("iex") of
        false ->
            {skip, "elixir (iex) is not installed: h :beamprobe.calls not "
                   "checked"};
        Iex ->
            Ebin = filename:dirname(code:which(beamprobe)),
            Out = os:cmd(Iex ++ " --erl \"-pa " ++ Ebin ++ "\" -e "
                         "'require IEx.Helpers; IEx.Helpers.h(:beamprobe.calls); "
                         "System.halt()' 2>&1 < /dev/null"),
            ct:log("~s", [Out]),
            ?assertNotEqual(nomatch, string:find(Out, "Traces calls matching"))
    end.
