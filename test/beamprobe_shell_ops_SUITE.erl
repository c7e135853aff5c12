%%% @doc The shell API as an operator used to recon_trace and redbug
%%% drives it, with the inputs and sequences that broke it: retyping a
%%% trace of a function with another match spec, ...  Each case checks
%%% what is printed against what ran, and that nothing stays installed.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_shell_ops_SUITE -logdir _build/ct_logs
-module(beamprobe_shell_ops_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-import(beamprobe_remote_shell_lib, [wait_until/3]).
-import(beamprobe_shell_lib, [cap/0, cap_text/1, lines/1, event_lines/1, what/1,
                              wait_text/3, wait_no_session/0]).

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([replace_uncombinable/1, clear_stuck_terminal/1,
         bare_action_atoms/1, io_server_refuses/1, replace_io_stuck/1,
         replace_no_duplicates/1, replace_failed_uncut/1,
         replace_line_order/1]).
%% An io server that answers nothing until released, one that refuses
%% output (spawned by MFA).
-export([held_io/1, refusing_io/1]).

-define(T, bprs_target).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [replace_uncombinable, clear_stuck_terminal, bare_action_atoms,
     io_server_refuses, replace_io_stuck, replace_no_duplicates,
     replace_failed_uncut, replace_line_order].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    beamprobe_remote_shell_lib:load_target(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(_Case, Config) ->
    ?assertEqual([], beamprobe:list()),
    Config.

end_per_testcase(_Case, _Config) ->
    ok = application:unset_env(beamprobe, handler_stop_timeout),
    ok = beamprobe:clear(),
    _ = [beamprobe:stop(S) || S <- beamprobe:list()],
    ok.

%% Nothing of beamprobe left on the traced module.
no_patterns() ->
    [{MFA, K, I} || {F, A} <- ?T:module_info(functions),
                    MFA <- [{?T, F, A}], K <- [meta, traced],
                    {_, I} <- [erlang:trace_info(MFA, K)],
                    I =/= false].

%%% ------------------------------------------------------------------------

%% Retyping a trace of a function with a match spec that cannot be
%% combined with the first one (a body term, `{message, false}', ...)
%% replaces it, as any other retyped trace: it returned
%% `{error, {cannot_combine, ...}}' and the old trace went on.  With
%% another tool's session on the function, the error stands and the
%% shell's trace is left as it was.
replace_uncombinable(Config) ->
    Cap = cap(),
    O = #{io_server => Cap},
    1 = beamprobe:calls({?T, f, 1}, 100, O),
    [S1] = beamprobe:list(),
    %% fun([X]) -> {X} end, as ms_transform makes it.
    Term = [{['$1'], [], [{{'$1'}}]}],
    ?assertEqual(1, beamprobe:calls({?T, f, Term}, 100, O)),
    wait_text(Cap, "% beamprobe: replaced the shell trace on bprs_target:f/1\n",
              3000),
    [S2] = beamprobe:list(),
    ?assertNotEqual(S1, S2),
    ?assertEqual(1, beamprobe:calls({?T, f, [{['$1'], [], [{message, false}]}]},
                                    100, O)),
    [S3] = beamprobe:list(),
    ?assertNotEqual(S2, S3),
    ?assertEqual(1, beamprobe:calls({?T, f, 1}, 100, O)),
    _ = ?T:f(5),
    wait_text(Cap, "call bprs_target:f(5)", 3000),
    ?assertEqual([<<"call bprs_target:f(5)">>],
                 [what(L) || L <- event_lines(Cap)]),
    ok = beamprobe:clear(),
    wait_no_session(),
    %% Another session on f/1: the shell's retyped trace cannot start, and
    %% its first trace stays.
    {ok, Other} = beamprobe:start(#{calls => [{{?T, f, 1}, true}],
                                        output => {file, filename:join(?config(priv_dir, Config), "other")}}),
    1 = beamprobe:calls({?T, f, 1}, 100, O),
    [Mine] = beamprobe:list() -- [Other],
    ?assertMatch({error, {cannot_combine, {?T, f, 1}, _}},
                 beamprobe:calls({?T, f, Term}, 100, O)),
    ?assertEqual(lists:sort([Other, Mine]), lists:sort(beamprobe:list())),
    ok = beamprobe:clear(),
    {ok, _} = beamprobe:stop(Other),
    wait_no_session(),
    ?assertEqual([], no_patterns()).

%% clear/0 with a terminal that does not answer (its io server stuck, the
%% very case for clear/0) stops every shell trace at once: it stopped
%% them one after another, each waiting handler_stop_timeout (5 s) for
%% its printer, the later traces still tracing meanwhile (a shell with 5
%% traces took 25 s).  With the timeout at 60 s, every trace's pattern is
%% gone while the first printer still waits.
clear_stuck_terminal(_Config) ->
    ok = application:set_env(beamprobe, handler_stop_timeout, 60000),
    Io = spawn(?MODULE, held_io, [[]]),
    %% (no trace ends on its time limit while the test waits)
    O = #{io_server => Io, time => 600000},
    MFAs = [{?T, f, 1}, {?T, g, 1}, {?T, add, 2}],
    _ = [1 = beamprobe:calls(MFA, 100, O) || MFA <- MFAs],
    _ = [?T:f(1), ?T:g(1), ?T:add(1, 2)],
    %% Each printer waits for its line's reply.
    wait_until(fun() -> held(Io) >= 3 end, 10000, printers_not_waiting),
    Me = self(),
    Clear = spawn(fun() -> Me ! {cleared, self(), beamprobe:clear()} end),
    Meta = fun(MFA) -> element(2, erlang:trace_info(MFA, meta)) end,
    wait_until(fun() -> lists:all(fun(MFA) -> Meta(MFA) =:= false end, MFAs)
               end, 20000, {patterns_left, [{M, Meta(M)} || M <- MFAs]}),
    Io ! release,
    receive {cleared, Clear, R} -> ?assertEqual(ok, R)
    after 30000 -> ct:fail(clear_not_returning)
    end,
    wait_no_session(),
    ?assertEqual([], no_patterns()).

held(Io) ->
    Io ! {held, self()},
    receive {held, N} -> N after 5000 -> ct:fail(io_not_answering) end.

held_io(Held) ->
    receive
        {io_request, From, ReplyAs, Req} when is_list(Held) ->
            held_io([{From, Req, ReplyAs} | Held]);
        {io_request, From, ReplyAs, Req} ->
            _ = case Held of
                    {released, Io} -> catch io:request(Io, Req);
                    _ -> ok
                end,
            From ! {io_reply, ReplyAs, ok},
            held_io(Held);
        {held, From} ->
            From ! {held, length(Held)},
            held_io(Held);
        release ->
            _ = [From ! {io_reply, ReplyAs, ok} || {From, _, ReplyAs} <- Held],
            held_io(released);
        {release_to, Io} ->
            %% The held requests, in their order, to Io.
            _ = [begin
                     _ = (catch io:request(Io, Req)),
                     From ! {io_reply, ReplyAs, ok}
                 end || {From, Req, ReplyAs} <- lists:reverse(Held)],
            held_io({released, Io})
    end.

%% A fun typed in the shell (or an iex fn: also an erl_eval fun) whose
%% body is an action written as an atom, `fun(_) -> return_trace end' or
%% Elixir's `fn [x] -> :return end' (as Beamprobe.match/1 takes it), or a
%% match spec with one, is refused with the way to write it: the atom is a
%% constant and does nothing, and it was accepted, printing calls and no
%% return.  A call, `return_trace()', and an atom inside `message(...)' are
%% taken.
bare_action_atoms(_Config) ->
    Cap = cap(),
    O = #{io_server => Cap},
    Bad = [{"fun([_]) -> return_trace end.", "return_trace()"},
           {"fun([_]) -> return end.", "Beamprobe.match(fn ... -> :return end)"},
           {"fun(_) -> caller, ok end.", "message(caller())"},
           {"fun([X]) when X > 1 -> exception end.", "exception_trace()"},
           {"fun(_) -> stack end.", "message(process_dump())"},
           {"fun(_) -> caller_line end.", "\"Mod.fun/1 :: caller_line\""}],
    _ = [begin
             R = beamprobe:calls({?T, f, shell_fun(Src)}, 10, O),
             ?assertMatch({Src, {error, {bad_pattern, _, _}}}, {Src, R}),
             {error, {bad_pattern, _, Msg}} = R,
             ?assertNotEqual({Src, nomatch}, {Src, string:find(Msg, Hint)})
         end || {Src, Hint} <- Bad],
    ?assertMatch({error, {bad_pattern, _, "return_trace in a match spec body" ++ _}},
                 beamprobe:calls({?T, f, [{'_', [], [return_trace]}]}, 10, O)),
    ?assertEqual([], beamprobe:list()),
    1 = beamprobe:calls({?T, f, shell_fun("fun([_]) -> message(return) end.")},
                        10, O),
    1 = beamprobe:calls({?T, f, shell_fun("fun([_]) -> return_trace() end.")},
                        10, O),
    _ = ?T:f(3),
    wait_text(Cap, "returned from bprs_target:f/1 -> 6", 3000),
    ok = beamprobe:clear(),
    wait_no_session(),
    ?assertEqual([], no_patterns()).

%% A fun as the shell makes it (erl_eval keeps its clauses).
shell_fun(Src) ->
    {ok, Toks, _} = erl_scan:string(Src),
    {ok, Exprs} = erl_parse:parse_exprs(Toks),
    {value, Fun, _} = erl_eval:exprs(Exprs, erl_eval:new_bindings()),
    Fun.

%% An io server that refuses the printer's lines (an error reply, as a
%% file on a full disk gives): the lines lost are counted and the shell
%% that started the trace is told, at the first and with the count at the
%% end.  They were lost in silence (the handler's counters said all 21
%% were delivered; 20 never were).
io_server_refuses(_Config) ->
    Shell = cap(),
    Io = spawn(?MODULE, refusing_io, [1]),
    Gl = group_leader(),
    %% The trace belongs to the group leader: a shell here.
    true = group_leader(Shell, self()),
    R = try beamprobe:calls({?T, f, 1}, 21, #{io_server => Io})
        after group_leader(Gl, self())
        end,
    ?assertEqual(1, R),
    _ = ?T:f(0),
    %% (the first line is taken, the next ones are refused)
    wait_until(fun() -> io_state(Io) =:= {0, 0} end, 5000,
               first_line_not_printed),
    ok = ?T:loop(f, 1, 20),
    wait_no_session(),
    wait_text(Shell, "% beamprobe: the io server " ++ pid_to_list(Io) ++
                  " refuses the trace's lines (an error reply): they are "
                  "lost, and counted\n", 3000),
    wait_text(Shell, "% beamprobe: 20 lines lost: the io server " ++
                  pid_to_list(Io) ++ " refused them\n", 3000),
    ?assertEqual([], no_patterns()).

io_state(Io) ->
    Io ! {state, self()},
    receive {state, S} -> S after 5000 -> ct:fail(io_not_answering) end.

%% Takes Ok put_chars requests, then answers each with {error, enospc}.
refusing_io(Ok) -> refusing_io(Ok, 0).

refusing_io(Ok, Refused) ->
    receive
        {io_request, From, ReplyAs, getopts} ->
            From ! {io_reply, ReplyAs, [{binary, false}, {encoding, unicode}]},
            refusing_io(Ok, Refused);
        {io_request, From, ReplyAs, _} when Ok > 0 ->
            From ! {io_reply, ReplyAs, ok},
            refusing_io(Ok - 1, Refused);
        {io_request, From, ReplyAs, _} ->
            From ! {io_reply, ReplyAs, {error, enospc}},
            refusing_io(Ok, Refused + 1);
        {state, From} ->
            From ! {state, {Ok, Refused}},
            refusing_io(Ok, Refused)
    end.

%% Retyping a trace whose io server does not answer returns: the
%% "replaced" line is written by a process of its own, the shell's
%% evaluator waits for it a second at most.  It hung in io:format/3 for
%% good (with the shell's lock held: the shell's next calls/2 waited 10 s
%% for it).  The line is printed once the io server answers.
replace_io_stuck(_Config) ->
    Io = spawn(?MODULE, held_io, [[]]),
    O = #{io_server => Io, time => 600000},
    1 = beamprobe:calls({?T, f, 1}, 100, O),
    _ = ?T:f(1),
    wait_until(fun() -> held(Io) >= 1 end, 10000, printer_not_waiting),
    Me = self(),
    Again = spawn(fun() -> Me ! {again, self(), beamprobe:calls({?T, f, 1}, 100, O)} end),
    receive {again, Again, R} -> ?assertEqual(1, R)
    after 30000 -> ct:fail({calls_hung, erlang:process_info(Again, current_stacktrace)})
    end,
    ?assertMatch([_], beamprobe:list()),
    %% The line waits for the io server, and comes when it answers.
    wait_until(fun() -> held(Io) >= 2 end, 10000, replaced_line_not_sent),
    Cap = cap(),
    Io ! {release_to, Cap},
    wait_text(Cap, "% beamprobe: replaced the shell trace on bprs_target:f/1\n",
              10000),
    ok = beamprobe:clear(),
    wait_no_session(),
    ?assertEqual([], no_patterns()).

%% A trace retyped while its function is called all the time: no call is
%% printed twice.  The new trace starts before the one it replaces ends,
%% and both printed the calls made meanwhile (a function called 1,000
%% times a second, retyped 10 times: 6-10 calls printed twice).  The one
%% replaced now prints nothing from the moment the new one is asked for.
replace_no_duplicates(_Config) ->
    Cap = cap(),
    O = #{io_server => Cap, time => 600000},
    1 = beamprobe:calls({?T, f, 1}, 1000000, O),
    Caller = spawn(fun() -> call_f(1) end),
    [begin
         timer:sleep(20),
         1 = beamprobe:calls({?T, f, 1}, 1000000, O)
     end || _ <- lists:seq(1, 20)],
    timer:sleep(20),
    exit(Caller, kill),
    ok = beamprobe:clear(),
    wait_no_session(),
    Calls = [binary_to_integer(I)
             || L <- event_lines(Cap),
                {match, [I]} <- [re:run(what(L), "^call bprs_target:f\\(([0-9]+)\\)$",
                                        [{capture, all_but_first, binary}])]],
    Twice = [I || {I, N} <- maps:to_list(count(Calls)), N > 1],
    ct:log("~b calls printed, ~b replacements", [length(Calls), 20]),
    ?assert(length(Calls) > 100),
    ?assertEqual({printed_twice, []}, {printed_twice, lists:sort(Twice)}),
    ?assertEqual([], no_patterns()).

%% About 5,000 calls a second, each with an argument of its own.
call_f(I) ->
    _ = ?T:f(I),
    _ = I rem 5 =:= 0 andalso timer:sleep(1),
    call_f(I + 1).

count(L) ->
    lists:foldl(fun(X, M) -> maps:update_with(X, fun(N) -> N + 1 end, 1, M) end,
                #{}, L).

%% A retyped trace that cannot start (the process it names is traced by
%% dbg, which beamprobe does not take without force) leaves the running
%% trace as it was: it prints again (the calls it did not print while the
%% new trace tried to start, if any, are counted and said).
replace_failed_uncut(_Config) ->
    Cap = cap(),
    O = #{io_server => Cap, time => 600000},
    1 = beamprobe:calls({?T, g, 1}, 1000, O),
    [S] = beamprobe:list(),
    P = spawn(fun() -> receive stop -> ok end end),
    {ok, Dbg} = dbg:tracer(process, {fun(_, St) -> St end, ok}),
    try
        {ok, _} = dbg:p(P, [c]),
        ?assertMatch({error, {already_traced, [P]}},
                     beamprobe:calls({?T, g, 1}, 1000, O#{procs => [P]})),
        ?assertEqual([S], beamprobe:list()),
        _ = ?T:g(7),
        wait_text(Cap, "call bprs_target:g(7)", 5000)
    after
        dbg:stop(),
        exit(Dbg, kill),
        P ! stop
    end,
    ok = beamprobe:clear(),
    wait_no_session(),
    ?assertEqual([], no_patterns()).

%% Retyping a trace prints "replaced the shell trace on ..." and the
%% replaced printer's "session ended (replaced)", always in that order:
%% the two lines came in either order (the printer writes its last line
%% as it ends, after the stop had returned); the old tree printed the
%% printer's line first.
replace_line_order(_Config) ->
    Cap = cap(),
    O = #{io_server => Cap, time => 600000},
    1 = beamprobe:calls({?T, f, 1}, 1000, O),
    Rounds = 8,
    [begin
         1 = beamprobe:calls({?T, f, 1}, 1000 + I, O),
         wait_text_n(Cap, <<"session ended (replaced)">>, I, 5000)
     end || I <- lists:seq(1, Rounds)],
    Ls = [L || L <- lines(Cap),
               binary:match(L, [<<"replaced the shell trace">>,
                                <<"session ended (replaced)">>]) =/= nomatch],
    ct:log("~p", [Ls]),
    Kinds = [case binary:match(L, <<"replaced the shell trace">>) of
                 nomatch -> ended;
                 _ -> said
             end || L <- Ls],
    ?assertEqual(lists:append(lists:duplicate(Rounds, [said, ended])), Kinds),
    ok = beamprobe:clear(),
    wait_no_session().

wait_text_n(Cap, Text, N, Ms) when Ms > 0 ->
    case length(binary:matches(iolist_to_binary(cap_text(Cap)), Text)) >= N of
        true -> ok;
        false -> timer:sleep(10), wait_text_n(Cap, Text, N, Ms - 10)
    end;
wait_text_n(Cap, Text, N, _) ->
    ct:fail({not_printed, Text, N, cap_text(Cap)}).
