%%% @doc Tests of the shell API (beamprobe:calls/2,3, messages/2,3) through
%%% what a user sees, the lines printed into an io server: count, rate and
%%% time limits, the pattern language (guards, actions, Elixir modules,
%%% caller and stack, message patterns, procs), printing, and bad inputs
%%% with their error texts.  Handlers, sinks, concurrent sessions, clear/0
%%% and the remote shell are in beamprobe_handler_SUITE; the shared helpers
%%% (capture io server, traced module `bpsh_target') in beamprobe_shell_lib.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_shell_SUITE -logdir _build/ct_logs
-module(beamprobe_shell_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([own_output_not_traced/1, gate_load_not_traced/1,
         own_start_not_traced/1]).
-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([own_work_not_traced/1, count_limit/1, count_limit_exact/1, count_whole_module/1,
         rate_limit_burst/1, rate_limit_dropped_reported/1,
         rate_limit_windows/1, rate_limit_stop/1,
         time_limit/1, time_limit_bounds/1,
         patterns_guards_actions/1, patterns_elixir/1,
         patterns_caller_stack/1, patterns_recon_module_fun/1,
         patterns_recon_any_function_arity/1, replace_by_arity/1,
         module_reloaded_said/1, patterns_two_arities/1,
         messages_pattern/1, messages_pattern_ports/1, procs_option/1,
         printer_indent_bounded/1,
         bad_inputs/1, format_errors/1]).

-define(L, beamprobe_test_lib).
-define(T, bpsh_target).
-define(H, beamprobe_test_handler).

-import(beamprobe_shell_lib,
        [cap/0, cap_text/1, lines/1, event_lines/1, dropped_lines/1,
         wait_text/3, indent/1, what/1, pid_of/1, ok_calls/3, the_session/0,
         wait_no_session/0, worker/0, run/2, no_pattern/1,
         beamprobe_tracer/1]).
-import(beamprobe_test_lib,
        [stop/1]).

%%% ------------------------------------------------------------------------
%%% Setup
%%% ------------------------------------------------------------------------

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, limits}, {group, patterns}, bad_inputs, format_errors,
     own_work_not_traced, own_output_not_traced, gate_load_not_traced,
     own_start_not_traced].

groups() ->
    [{limits, [], [count_limit, count_limit_exact, count_whole_module,
                   rate_limit_burst, rate_limit_dropped_reported,
                   rate_limit_windows, rate_limit_stop, time_limit,
                   time_limit_bounds]},
     {patterns, [], [patterns_guards_actions, patterns_elixir,
                     patterns_caller_stack, patterns_recon_module_fun,
                     patterns_recon_any_function_arity, replace_by_arity,
                     module_reloaded_said, patterns_two_arities,
                     messages_pattern, messages_pattern_ports, procs_option,
                     printer_indent_bounded]}].

init_per_suite(Config) ->
    beamprobe_shell_lib:init_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    beamprobe_shell_lib:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    beamprobe_shell_lib:clear_trace_state().

%%% ------------------------------------------------------------------------
%%% 1. Count limit
%%% ------------------------------------------------------------------------

%% calls(P, N) prints exactly N event lines, then "session ended (events)",
%% and returns the number of functions matched.
count_limit(_Config) ->
    Cap = cap(),
    ?assertEqual(1, ok_calls("bpsh_target:f/1", 5, #{io_server => Cap})),
    ok = ?T:loop(f, 1, 20),
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    Lines = lines(Cap),
    ct:log("~s", [cap_text(Cap)]),
    ?assertEqual(7, length(Lines)),
    {Events, Last} = lists:split(5, Lines),
    ?assertEqual([<<"% beamprobe: session ended (events)">>,
                  <<"% beamprobe: event limit reached: 5 events, tracing "
                    "stopped">>], Last),
    Me = list_to_binary(pid_to_list(self())),
    lists:foreach(
      fun({I, L}) ->
              ?assertMatch({match, _},
                           re:run(L, "^[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6} "
                                  "<[0-9]+\\.[0-9]+\\.[0-9]+>")),
              ?assertEqual(Me, pid_of(L)),
              %% An unnamed process is printed with its initial call.
              ?assertMatch({match, _}, re:run(L, "^[0-9:.]+ <[0-9.]+>\\([^ ]+:[^ ]+/[0-9]+\\) ")),
              ?assertEqual(iolist_to_binary(["call bpsh_target:f(",
                                             integer_to_list(I), ")"]),
                           what(L))
      end, lists:zip(lists:seq(1, 5), Events)),
    %% The session is gone and left nothing behind.
    wait_no_session(),
    ?assert(no_pattern({?T, f, 1})),
    %% With a guard and an action: calls and returns count alike.
    Cap2 = cap(),
    ?assertEqual(1, ok_calls("bpsh_target:f(X) when X > 2 -> return", 5,
                             #{io_server => Cap2})),
    ok = ?T:loop(f, 1, 20),
    wait_text(Cap2, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call bpsh_target:f(3)">>,
                  <<"returned from bpsh_target:f/1 -> 6">>,
                  <<"call bpsh_target:f(4)">>,
                  <<"returned from bpsh_target:f/1 -> 8">>,
                  <<"call bpsh_target:f(5)">>],
                 [what(L) || L <- event_lines(Cap2)]),
    wait_no_session().

%% Exactly N matching events: the session has done its job and must end
%% (and print why) without waiting for an (N+1)th event or the 15 s limit.
count_limit_exact(_Config) ->
    Cap = cap(),
    1 = ok_calls("bpsh_target:f/1", 3, #{io_server => Cap}),
    ok = ?T:loop(f, 1, 3),
    wait_text(Cap, "call bpsh_target:f(3)", 2000),
    %% No 4th call ever happens.
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual(3, length(event_lines(Cap))),
    wait_no_session(),
    ?assert(no_pattern({?T, f, 1})).

%% "m" traces every function of m: the result is their number.
count_whole_module(_Config) ->
    Cap = cap(),
    N = length(?T:module_info(functions)),
    ?assertEqual(N, ok_calls("bpsh_target -> return", 4,
                             #{io_server => Cap})),
    %% g/1 calls the local h/1: meta tracing sees local calls too.
    4 = ?T:g(3),
    4 = ?T:g(3),
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call bpsh_target:g(3)">>, <<"call bpsh_target:h(3)">>,
                  <<"returned from bpsh_target:h/1 -> 3">>,
                  <<"returned from bpsh_target:g/1 -> 4">>],
                 [what(L) || L <- event_lines(Cap)]),
    wait_no_session(),
    ?L:pattern_removed([{?T, '_', '_'}]),
    ?assert(lists:all(fun beamprobe_shell_lib:no_pattern/1,
                      [{?T, F, A} || {F, A} <- ?T:module_info(functions)])),
    %% A list of patterns: the sum of what each matches.
    Cap2 = cap(),
    ?assertEqual(2, ok_calls(["bpsh_target:f/1", "bpsh_target:g/1"], 2,
                             #{io_server => Cap2})),
    ok = beamprobe:clear().

%%% ------------------------------------------------------------------------
%%% 2. Rate limit
%%% ------------------------------------------------------------------------

%% A burst of K calls within one window: N lines, and K - N reported as
%% dropped, the same numbers as the session's counters.
rate_limit_burst(_Config) ->
    {Printed, Dropped, Sum} = rate_burst(fun() -> ok = ?T:loop(f, 1, 200) end),
    ?assertEqual(5, Printed),
    ?assertEqual(200 - Printed, Dropped),
    ?assertMatch(#{events := 5, dropped := #{rate := 195}}, Sum).

%% The same burst spread over part of the window (the first calls are
%% printed before the rest arrive): every dropped event must still be
%% reported to the shell, here when the session ends.
rate_limit_dropped_reported(_Config) ->
    {Printed, Dropped, Sum} =
        rate_burst(fun() ->
                           ok = ?T:loop(f, 1, 5),
                           timer:sleep(100),
                           ok = ?T:loop(f, 6, 200)
                   end),
    ?assertMatch(#{events := 5, dropped := #{rate := 195}}, Sum),
    ?assertEqual(5, Printed),
    ?assertEqual({dropped_lines, 200 - Printed}, {dropped_lines, Dropped}).

rate_burst(Burst) ->
    Cap = cap(),
    1 = ok_calls("bpsh_target:f/1", {5, 1000},
                 #{io_server => Cap, time => 20000}),
    S = the_session(),
    T0 = erlang:monotonic_time(millisecond),
    Burst(),
    ?assert(?L:elapsed_ms(T0) < 900),  % one window
    %% Everything counted at the source, then time to print.
    ?L:wait_until(fun() ->
                          {ok, #{events := E, dropped := #{rate := R}}} =
                              beamprobe:info(S),
                          E + R =:= 200
                  end, 2000),
    timer:sleep(300),
    Sum = stop(S),
    wait_text(Cap, "% beamprobe: session ended (requested)\n", 2000),
    ct:log("~s", [cap_text(Cap)]),
    {length(event_lines(Cap)), dropped_lines(Cap), Sum}.

%% Several windows: never more than N lines per window; counts agree
%% with the session's.
%%
%% A window opens at the first event after the previous one ended (the
%% first at the session's start) and takes N events.  The printed events
%% are put in windows by that rule (windows/2), not by the silences
%% between them: a caller held up for 100 ms or more in the middle of a
%% window's burst (a loaded machine) made two silences of one window, and
%% the windows' count was bounded by the loop's elapsed time, which such a
%% wait makes longer without adding a window.  How many windows the calls
%% open is known from when they were made (the same rule on the caller's
%% clock).
rate_limit_windows(_Config) ->
    Cap = cap(),
    {N, Ms} = {5, 200},
    1 = ok_calls("bpsh_target:f/1", {N, Ms},
                 #{io_server => Cap, time => 20000, timestamp => ns}),
    S = the_session(),
    K = 400,
    %% The first window opened at the session's start: once it has ended,
    %% the first call opens the next (and every window opens at a call).
    timer:sleep(Ms),
    T0 = erlang:monotonic_time(millisecond),
    %% A call every 2-3 ms; the time of each, just before it.
    Made = [begin
                T = erlang:monotonic_time(nanosecond),
                _ = ?T:f(I),
                timer:sleep(2),
                T
            end || I <- lists:seq(1, K)],
    Elapsed = ?L:elapsed_ms(T0),
    timer:sleep(300),
    Sum = stop(S),
    wait_text(Cap, "% beamprobe: session ended (requested)\n", 2000),
    ct:log("~b calls in ~b ms~n~s", [K, Elapsed, cap_text(Cap)]),
    Ts = [binary_to_integer(hd(binary:split(L, <<" ">>)))
          || L <- event_lines(Cap)],
    ?assertEqual(Ts, lists:sort(Ts)),
    %% (1 ms less than a window: an event's time is taken after the rate
    %% check that let it in.)
    Windows = windows(Ts, (Ms - 1) * 1000000),
    Opened = length(windows(Made, Ms * 1000000)),
    Sizes = [length(W) || W <- Windows],
    ct:log("lines per window: ~w; the calls opened ~b windows",
           [Sizes, Opened]),
    lists:all(fun(L) -> L =< N end, Sizes) orelse
        ct:fail("more than ~b lines in a window of ~b ms: ~w",
                [N, Ms, Sizes]),
    %% The windows reopen as the calls come (one fewer: the two clocks
    %% may see the call nearest a window's end on either side of it).
    length(Windows) >= Opened - 1 orelse
        ct:fail("~b windows printed, the calls opened ~b: ~w",
                [length(Windows), Opened, Sizes]),
    length(Ts) =< N * (Elapsed div Ms + 2) orelse
        ct:fail("~b lines in ~b ms, windows of ~b", [length(Ts), Elapsed, N]),
    #{events := Ev, dropped := #{rate := R}} = Sum,
    ?assertEqual(length(Ts), Ev),
    ?assertEqual(K, Ev + R),
    ?assert(dropped_lines(Cap) =< R).

%% Sorted times into windows as the rate limit makes them: a window opens
%% at the first time at least Len after the previous one opened and holds
%% the times before the next opens.
windows([], _Len) -> [];
windows([T0 | Ts], Len) -> windows(Ts, Len, T0, [T0], []).

windows([], _Len, _Open, Cur, Acc) ->
    lists:reverse([lists:reverse(Cur) | Acc]);
windows([T | Ts], Len, Open, Cur, Acc) when T - Open >= Len ->
    windows(Ts, Len, T, [T], [lists:reverse(Cur) | Acc]);
windows([T | Ts], Len, Open, Cur, Acc) ->
    windows(Ts, Len, Open, [T | Cur], Acc).

%% on_rate => stop: the first excess event ends the session.
rate_limit_stop(_Config) ->
    Cap = cap(),
    1 = ok_calls("bpsh_target:f/1", {3, 1000},
                 #{io_server => Cap, on_rate => stop}),
    ok = ?T:loop(f, 1, 100),
    wait_text(Cap, "% beamprobe: session ended (rate)\n", 2000),
    ct:log("~s", [cap_text(Cap)]),
    ?assertEqual([<<"call bpsh_target:f(1)">>, <<"call bpsh_target:f(2)">>,
                  <<"call bpsh_target:f(3)">>],
                 [string:trim(what(L), leading) || L <- event_lines(Cap)]),
    wait_no_session(),
    ?assert(no_pattern({?T, f, 1})).

%%% ------------------------------------------------------------------------
%%% 3. Time limit
%%% ------------------------------------------------------------------------

time_limit(_Config) ->
    [begin
         Cap = cap(),
         T0 = erlang:monotonic_time(millisecond),
         1 = ok_calls("bpsh_target:f/1", Limit,
                      #{io_server => Cap, time => 300}),
         T1 = erlang:monotonic_time(millisecond),
         7 = ?T:f(3) + 1,
         wait_text(Cap, "% beamprobe: session ended (seconds)\n"
                   "% beamprobe: time limit reached: 300 ms, tracing stopped "
                   "(time => Ms for longer)\n", 3000),
         Elapsed = ?L:elapsed_ms(T0),
         Elapsed1 = ?L:elapsed_ms(T1),
         ct:log("limit ~p: ended after ~b ms (~b after calls/3 returned)~n~s",
                [Limit, Elapsed, Elapsed1, cap_text(Cap)]),
         %% (the upper bound from after the start: a loaded machine)
         ?assert(Elapsed >= 290),
         ?assert(Elapsed1 < 1300),
         ?assertEqual([<<"call bpsh_target:f(3)">>],
                      [what(L) || L <- event_lines(Cap)]),
         wait_no_session(),
         ?assert(no_pattern({?T, f, 1}))
     end || Limit <- [1000, {1000, 1000}]],
    ok.

%% The time option takes every integer the tutorial's table promises,
%% 1..4294967295 ms (erlang:send_after/3's limit): times above 4294967 s
%% were refused by the session with its internal limit's name
%% ({bad_option, {limits, seconds}, 4294967.295}), found by running the
%% table's bounds.
time_limit_bounds(_Config) ->
    Cap = cap(),
    [begin
         ?assertEqual(1, beamprobe:calls("bpsh_target:f/1", 5,
                                         #{io_server => Cap, time => Ms})),
         ok = beamprobe:clear(),
         wait_no_session()
     end || Ms <- [4294967001, 4294967295]],
    ?assertEqual({error, {bad_option, time, 4294967296}},
                 beamprobe:calls("bpsh_target:f/1", 5,
                                 #{io_server => Cap, time => 4294967296})),
    ?assertEqual([], beamprobe:list()).

%%% ------------------------------------------------------------------------
%%% 4. Patterns
%%% ------------------------------------------------------------------------

patterns_guards_actions(_Config) ->
    Cap = cap(),
    %% Two guard alternatives, a head match on a second argument.
    1 = ok_calls("bpsh_target:add(A, 10) when A < 0; A > 100 -> return", 4,
                 #{io_server => Cap}),
    [?T:add(A, B) || {A, B} <- [{1, 10}, {-1, 10}, {200, 1}, {200, 10},
                                {50, 10}, {300, 10}]],
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call bpsh_target:add(-1, 10)">>,
                  <<"returned from bpsh_target:add/2 -> 9">>,
                  <<"call bpsh_target:add(200, 10)">>,
                  <<"returned from bpsh_target:add/2 -> 210">>],
                 [what(L) || L <- event_lines(Cap)]),
    wait_no_session(),
    %% return => true adds returns to a pattern without action.
    Cap2 = cap(),
    1 = ok_calls("bpsh_target:f/1", 2, #{io_server => Cap2, return => true}),
    ok = ?T:loop(f, 1, 2),
    wait_text(Cap2, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call bpsh_target:f(1)">>,
                  <<"returned from bpsh_target:f/1 -> 2">>],
                 [what(L) || L <- event_lines(Cap2)]),
    wait_no_session().

%% recon_trace's `{M, '_', fun([X]) when ... -> ... end}' (a fun typed in
%% the shell): every function of M taking one argument.  It was refused as
%% {error, {bad_option, calls, {bpsh_target, '_', 1}}}: the fun's arity was
%% put after a '_' function, which no trace pattern takes.
patterns_recon_module_fun(_Config) ->
    Cap = cap(),
    {ok, Toks, _} = erl_scan:string(
                      "fun([X]) when X > 100 -> return_trace() end."),
    {ok, Es} = erl_parse:parse_exprs(Toks),
    {value, Fun, _} = erl_eval:exprs(Es, erl_eval:new_bindings()),
    %% OTP 25's ms_transform has no caller_line(): the error names the
    %% ways that work (it said only that the fun cannot be translated).
    {ok, Toks2, _} = erl_scan:string("fun(_) -> message(caller_line()) end."),
    {ok, Es2} = erl_parse:parse_exprs(Toks2),
    {value, Fun2, _} = erl_eval:exprs(Es2, erl_eval:new_bindings()),
    case beamprobe:calls({?T, f, Fun2}, 4, #{io_server => Cap}) of
        {error, {bad_pattern, _, Msg}} ->
            ?assertNotEqual(nomatch, string:find(Msg, "[{message, {caller_line}}]"));
        N2 when is_integer(N2) ->             % an ms_transform that has it
            ok = beamprobe:clear()
    end,
    N = ok_calls({?T, '_', Fun}, 4, #{io_server => Cap}),
    ?assert(N >= 3),                            % f/1, g/1, h/1, ...
    _ = [?T:f(1), ?T:add(200, 1), ?T:f(200), ?T:g(300)],
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call bpsh_target:f(200)">>,
                  <<"returned from bpsh_target:f/1 -> 400">>,
                  <<"call bpsh_target:g(300)">>,
                  <<"call bpsh_target:h(300)">>],
                 [what(L) || L <- event_lines(Cap)]),
    wait_no_session().

%% recon's {M, '_', Arity}: the functions of M of that arity, as the
%% string "m:_/2" (it traced every arity: f(1) was printed for {T, '_',
%% 2}).  {'_', F, A}: refused with the string's message, not as a bad
%% `calls' option.
patterns_recon_any_function_arity(_Config) ->
    Cap = cap(),
    N = ok_calls({?T, '_', 2}, 2, #{io_server => Cap}),
    ?assert(N >= 1),
    _ = [?T:f(1), ?T:add(1, 2), ?T:g(3), ?T:add(3, 4)],
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call bpsh_target:add(1, 2)">>,
                  <<"call bpsh_target:add(3, 4)">>],
                 [what(L) || L <- event_lines(Cap)]),
    wait_no_session(),
    %% The empty match spec is trace_pattern's `true': every call, of
    %% every arity (it was refused as one that "traces nothing").
    Cap3 = cap(),
    N3 = ok_calls({?T, add, []}, 2, #{io_server => Cap3}),
    ?assert(N3 >= 1),
    _ = [?T:add(1, 2), ?T:f(1), ?T:add(3, 4)],
    wait_text(Cap3, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call bpsh_target:add(1, 2)">>,
                  <<"call bpsh_target:add(3, 4)">>],
                 [what(L) || L <- event_lines(Cap3)]),
    wait_no_session(),
    [?assertMatch({error, {bad_pattern, P, "the module '_' needs the "
                                           "function '_' too" ++ _}},
                  beamprobe:calls(P, 2, #{io_server => Cap, force => true}))
     || P <- [{'_', f, 1}, {'_', f, '_'}]],
    ?assertEqual([], beamprobe:list()).

%% A trace of m:_/2 (or {m, '_', 2}) replaces the shell's traces of
%% functions of arity 2 only: it replaced the trace of f/1, which it does
%% not trace (its function pattern is {m, '_', '_'}: the arity is in its
%% match spec's heads).
replace_by_arity(_Config) ->
    Cap = cap(),
    O = #{io_server => Cap},
    1 = ok_calls({?T, f, 1}, 100, O),
    _ = ok_calls("bpsh_target:_/2", 100, O),
    _ = ok_calls({?T, '_', 2}, 100, O),
    wait_text(Cap, "% beamprobe: replaced the shell trace on bpsh_target:_/2\n",
              2000),
    1 = ok_calls({?T, add, 2}, 100, O),
    Replaced = fun() -> length(binary:matches(
                                 cap_text(Cap),
                                 <<"% beamprobe: replaced the shell trace on "
                                   "bpsh_target:_/2\n">>)) end,
    ?L:wait_until(fun() -> Replaced() =:= 2 end, 2000),
    ?assertEqual(2, length(beamprobe:list())),
    ?assertEqual(nomatch, binary:match(cap_text(Cap), <<"f/1">>)),
    _ = [?T:f(7), ?T:add(1, 2)],
    wait_text(Cap, "call bpsh_target:add(1, 2)", 2000),
    wait_text(Cap, "call bpsh_target:f(7)", 2000),
    ok = beamprobe:clear(),
    wait_no_session(),
    %% One trace of m:_/1 and m:_/2 (one match spec): replaced by a trace
    %% of f/1, it is named by its arities (it said m:_/_).
    Cap2 = cap(),
    O2 = #{io_server => Cap2},
    _ = ok_calls(["bpsh_target:_/1", "bpsh_target:_/2"], 100, O2),
    1 = ok_calls({?T, f, 1}, 100, O2),
    wait_text(Cap2, "% beamprobe: replaced the shell trace on bpsh_target:_/1 "
              "(its trace of bpsh_target:_/2 ended with it)\n", 2000),
    ok = beamprobe:clear(),
    wait_no_session().

%% Two patterns of one list on every function of a module, of two
%% arities: both are traced (only the later was: both are {m, '_', '_'},
%% and the earlier was taken as covered by it).  Where they overlap, the
%% later one is in force.
patterns_two_arities(_Config) ->
    Cap = cap(),
    _ = ok_calls(["bpsh_target:_/1", "bpsh_target:_/2"], 2,
                 #{io_server => Cap}),
    _ = [?T:f(1), ?T:add(1, 2)],
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call bpsh_target:f(1)">>, <<"call bpsh_target:add(1, 2)">>],
                 [what(L) || L <- event_lines(Cap)]),
    wait_no_session(),
    Cap2 = cap(),
    _ = ok_calls([{?T, '_', '_'}, {?T, '_', 1}, "bpsh_target:_/1 -> return"],
                 3, #{io_server => Cap2}),
    _ = [?T:add(1, 2), ?T:f(1)],
    wait_text(Cap2, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call bpsh_target:add(1, 2)">>, <<"call bpsh_target:f(1)">>,
                  <<"returned from bpsh_target:f/1 -> 2">>],
                 [what(L) || L <- event_lines(Cap2)]),
    wait_no_session().

%% A trace of a whole module whose module is loaded again: one line says
%% so (for more than three functions it listed the functions only:
%% "another tool removed the pattern on 10 functions: functions: ..."),
%% and the trace goes on with the new code (it stopped there, until the
%% patterns were followed onto the new code: beamprobe_code_reload_SUITE).
module_reloaded_said(_Config) ->
    %% No old code when the trace starts (an earlier case may have loaded
    %% the module again): loading the same source again then shows as
    %% old code where there was none (beamprobe_watch:mod_id/1).
    _ = code:purge(?T),
    Cap = cap(),
    N = ok_calls({?T, '_', '_'}, 100, #{io_server => Cap}),
    ?assert(N > 3),
    ?T = beamprobe_shell_lib:load_src(beamprobe_shell_lib:target_src()),
    wait_text(Cap, "(their module was loaded again: the patterns are set on "
                   "its new code", 5000),
    ?assertEqual(nomatch, string:find(cap_text(Cap), "another tool")),
    _ = ?T:f(77),
    wait_text(Cap, "call bpsh_target:f(77)", 5000),
    ok = beamprobe:clear(),
    wait_no_session(),
    _ = code:purge(?T).

%% Elixir syntax: ":lists.reverse/1" (an Erlang module), and an Elixir
%% alias ("Bpsh.Target" is 'Elixir.Bpsh.Target').
patterns_elixir(_Config) ->
    Cap = cap(),
    1 = ok_calls(":lists.reverse([:bp_marker | _]) :: return", 2,
                 #{io_server => Cap}),
    Rev = fun lists:reverse/1,
    [3, 2, bp_marker] = Rev([bp_marker, 2, 3]),
    [] = Rev([]),
    [1, bp_marker] = Rev([bp_marker, 1]),
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call lists:reverse([bp_marker,2,3])">>,
                  <<"returned from lists:reverse/1 -> [3,2,bp_marker]">>],
                 [what(L) || L <- event_lines(Cap)]),
    wait_no_session(),
    ?assert(no_pattern({lists, reverse, 1})),
    Cap2 = cap(),
    1 = ok_calls("Bpsh.Target.f(x) when x > 1 :: return", 4,
                 #{io_server => Cap2}),
    [2, 4, 6, 8] = [apply('Elixir.Bpsh.Target', f, [X]) || X <- [1, 2, 3, 4]],
    wait_text(Cap2, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call 'Elixir.Bpsh.Target':f(2)">>,
                  <<"returned from 'Elixir.Bpsh.Target':f/1 -> 4">>,
                  <<"call 'Elixir.Bpsh.Target':f(3)">>,
                  <<"returned from 'Elixir.Bpsh.Target':f/1 -> 6">>],
                 [what(L) || L <- event_lines(Cap2)]),
    wait_no_session().

%% `caller' and `stack' actions: the line says who called the function
%% (bpsh_target:loop/3 calls f/1).  A stack is only useful if it shows the
%% stack's frames, not just the head of the process dump.
patterns_caller_stack(_Config) ->
    Cap = cap(),
    1 = ok_calls("bpsh_target:f(X) -> caller", 1, #{io_server => Cap}),
    ok = ?T:loop(f, 1, 2),
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"call bpsh_target:f(1) % {bpsh_target,loop,3}">>],
                 [what(L) || L <- event_lines(Cap)]),
    wait_no_session(),
    Cap2 = cap(),
    1 = ok_calls("bpsh_target:f(X) -> stack", 1, #{io_server => Cap2}),
    ok = ?T:loop(f, 1, 2),
    wait_text(Cap2, "% beamprobe: session ended (events)\n", 2000),
    ct:log("~s", [cap_text(Cap2)]),
    [Line] = event_lines(Cap2),
    ?assertMatch({match, _}, re:run(what(Line), "^call bpsh_target:f\\(1\\) % ")),
    ?assertEqual({stack_shows_caller, true},
                 {stack_shows_caller,
                  binary:match(Line, <<"bpsh_target:loop/3">>) =/= nomatch}),
    %% The innermost frame is the caller: f/1 is called from loop/3, and
    %% nothing this process ran earlier (it last waited in a gen call)
    %% may appear before it.
    ?assertMatch({match, _},
                 re:run(Line, " % stack: bpsh_target:loop/3 <- beamprobe_shell_"
                        "SUITE:patterns_caller_stack/1 <- ")),
    wait_no_session().

%% send({ping, _}): only the matching messages are printed.
messages_pattern(_Config) ->
    Before = erlang:trace_info(send, match_spec),
    Cap = cap(),
    Sink = spawn(fun() -> receive stop -> ok end end),
    ?assertEqual(1, beamprobe:messages("send({ping, _})", 3,
                                       #{io_server => Cap})),
    ok = ?T:ping(Sink, 1, 5),
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    ct:log("~s", [cap_text(Cap)]),
    Me = pid_to_list(self()),
    To = pid_to_list(Sink),
    %% The receiver is named by its initial call (it has no name).
    ?assertEqual([iolist_to_binary(["sent {ping,", integer_to_list(I),
                                    "} to ", To, "(erlang:apply/2)"])
                  || I <- [1, 2, 3]],
                 [what(L) || L <- event_lines(Cap)]),
    ?assertEqual([list_to_binary(Me)],
                 lists:usort([pid_of(L) || L <- event_lines(Cap)])),
    wait_no_session(),
    ?assertEqual(Before, erlang:trace_info(send, match_spec)),
    ?assertEqual([], [P || P <- processes(), beamprobe_tracer(P)]),
    %% 'receive'({ping, _}): the receiver's side.
    Cap2 = cap(),
    1 = beamprobe:messages("'receive'({ping, _})", 2, #{io_server => Cap2}),
    ok = ?T:ping(Sink, 1, 3),
    wait_text(Cap2, "% beamprobe: session ended (events)\n", 2000),
    ?assertEqual([<<"received {ping,1}">>, <<"received {ping,2}">>],
                 [what(L) || L <- event_lines(Cap2)]),
    ?assertEqual([list_to_binary(To)],
                 lists:usort([pid_of(L) || L <- event_lines(Cap2)])),
    Sink ! stop,
    wait_no_session().

%% Ports send messages too (here a port program's output and exit status);
%% a message pattern must filter them like any other sender.
messages_pattern_ports(_Config) ->
    Cap = cap(),
    Sink = spawn(fun() -> receive stop -> ok end end),
    1 = beamprobe:messages("send({ping, _})", 3,
                           #{io_server => Cap, time => 5000}),
    Port = open_port({spawn_executable, os:find_executable("echo")},
                     [{args, ["hello"]}, exit_status]),
    receive {Port, {exit_status, 0}} -> ok
    after 5000 -> ct:fail(port_did_not_exit)
    end,
    receive {Port, {data, "hello\n"}} -> ok after 0 -> ok end,
    ok = ?T:ping(Sink, 1, 5),
    wait_text(Cap, "% beamprobe: session ended", 6000),
    ct:log("~s", [cap_text(Cap)]),
    To = list_to_binary(pid_to_list(Sink) ++ "(erlang:apply/2)"),
    ?assertEqual([<<"sent {ping,1} to ", To/binary>>,
                  <<"sent {ping,2} to ", To/binary>>,
                  <<"sent {ping,3} to ", To/binary>>],
                 [what(L) || L <- event_lines(Cap)]),
    Sink ! stop.

%% procs => [Pid]: only that process's calls are printed (the session sets
%% flags on it instead of meta tracing), and its flags are removed after.
procs_option(_Config) ->
    W1 = worker(),
    W2 = worker(),
    Cap = cap(),
    1 = ok_calls("bpsh_target:f(X) -> return", 4,
                 #{io_server => Cap, procs => [W1]}),
    ok = run(W2, fun() -> ?T:loop(f, 1, 3) end),
    ok = run(W1, fun() -> ?T:loop(f, 10, 13) end),
    wait_text(Cap, "% beamprobe: session ended (events)\n", 2000),
    Lines = event_lines(Cap),
    ?assertEqual([<<"call bpsh_target:f(10)">>,
                  <<"returned from bpsh_target:f/1 -> 20">>,
                  <<"call bpsh_target:f(11)">>,
                  <<"returned from bpsh_target:f/1 -> 22">>],
                 [what(L) || L <- Lines]),
    W1T = list_to_binary(pid_to_list(W1)),
    ?assertEqual([W1T], lists:usort([pid_of(L) || L <- Lines])),
    wait_no_session(),
    ?L:assert_no_trace_state([W1, W2], [{?T, f, 1}]),
    [beamprobe_workload:stop_worker(W) || W <- [W1, W2]],
    ok.

%% The printer indents by call depth like `beamprobe print', which caps
%% the indentation at 256 levels: a pattern without `return' (no return
%% event ever lowers the depth) must not make lines grow without bound.
printer_indent_bounded(_Config) ->
    Cap = cap(),
    K = 400,
    1 = ok_calls("bpsh_target:f/1", K, #{io_server => Cap}),
    ok = ?T:loop(f, 1, K + 1),
    wait_text(Cap, "% beamprobe: session ended (events)\n", 3000),
    Lines = event_lines(Cap),
    ?assertEqual(K, length(Lines)),
    Indent = [indent(L) || L <- Lines],
    ct:log("indentation of the first and last lines: ~p, ~p",
           [hd(Indent), lists:last(Indent)]),
    ?assert(lists:max(Indent) =< 2 * 256).

%%% ------------------------------------------------------------------------
%%% 11. Bad inputs
%%% ------------------------------------------------------------------------

bad_inputs(_Config) ->
    SendBefore = erlang:trace_info(send, match_spec),
    Cap = cap(),
    O = #{io_server => Cap},
    Dead = spawn(fun() -> ok end),
    MRef = monitor(process, Dead),
    receive {'DOWN', MRef, process, Dead, _} -> ok end,
    %% Malformed patterns: where and what.
    ?assertMatch({error, {bad_pattern, "bpsh_target:f(", 14, [_ | _]}},
                 beamprobe:calls("bpsh_target:f(", 5, O)),
    ?assertMatch({error, {bad_pattern, "bpsh_target:f/x", Col, [_ | _]}}
                   when is_integer(Col), beamprobe:calls("bpsh_target:f/x", 5, O)),
    ?assertMatch({error, {bad_pattern, "bpsh_target:f(X) when", _, [_ | _]}},
                 beamprobe:calls("bpsh_target:f(X) when", 5, O)),
    ?assertMatch({error, {bad_pattern, "bpsh_target:f(X) -> fly", _, [_ | _]}},
                 beamprobe:calls("bpsh_target:f(X) -> fly", 5, O)),
    ?assertMatch({error, {bad_pattern, "send({ping, _})", [_ | _]}},
                 beamprobe:calls("send({ping, _})", 5, O)),
    ?assertMatch({error, {bad_pattern, "bpsh_target:f/1", [_ | _]}},
                 beamprobe:messages("bpsh_target:f/1", 5, O)),
    ?assertMatch({error, {bad_pattern, _, [_ | _]}}, beamprobe:calls([], 5, O)),
    ?assertMatch({error, {bad_pattern, foo, [_ | _]}}, beamprobe:calls(foo, 5, O)),
    %% Dangerous patterns: refused unless forced.
    [?assertMatch({error, {bad_pattern, P, 1, [_ | _]}},
                  beamprobe:calls(P, 5, O))
     || P <- ["io:format/2", "beamprobe:start/1", "beamprobe_workload:tick/1",
              "_", "_:_", "erlang", "io_lib"]],
    %% Well-formed, but nothing to trace.
    ?assertEqual({error, {no_such_module, bpsh_nomod}},
                 beamprobe:calls("bpsh_nomod:f/1", 5, O)),
    ?assertEqual({error, {no_such_function, {?T, nope, 1}}},
                 beamprobe:calls("bpsh_target:nope/1", 5, O)),
    ?assertEqual({error, {no_such_function, {?T, nope, 1}}},
                 beamprobe:calls(["bpsh_target:f/1", "bpsh_target:nope/1"],
                                 5, O)),
    %% Bad limits and options.
    [?assertMatch({error, {bad_limit, L, _}}, beamprobe:calls("bpsh_target:f/1", L, O))
     || L <- [0, -1, {0, 100}, {5, 0}, {5, -1}, {1.5, 10}, foo, infinity,
              %% past the session's bounds: they were {bad_option,
              %% {limits, events | rate}, _}, an option nobody gave
              1 bsl 64, 1 bsl 70, {1 bsl 64, 100}, {5, (1 bsl 32) + 1}]],
    ?assertMatch({error, {bad_limit, 0, _}}, beamprobe:messages("send", 0, O)),
    %% redbug's atoms send and 'receive' ({bad_pattern, send}: "a pattern
    %% is a string" before): messages/2,3 takes them, calls/2,3 says so
    ?assertMatch({error, {bad_pattern, _, "a message pattern: use messages/2,3"}},
                 beamprobe:calls(send, 5, O)),
    Sink = spawn(fun Sink() ->
                         receive {io_request, F, R, _} -> F ! {io_reply, R, ok}, Sink();
                                 stop -> ok
                         end
                 end),
    ?assertEqual(1, beamprobe:messages(send, 5, O#{io_server => Sink})),
    ?assertEqual(1, beamprobe:messages('receive', 5, O#{io_server => Sink})),
    ok = beamprobe:clear(),
    Sink ! stop,
    ?assertEqual({error, {unknown_option, bogus}},
                 beamprobe:calls("bpsh_target:f/1", 5, O#{bogus => 1})),
    ?assertEqual({error, {unknown_option, bogus}},
                 beamprobe:messages("send", 5, O#{bogus => 1})),
    ?assertEqual({error, {bad_option, opts, nope}},
                 beamprobe:calls("bpsh_target:f/1", 5, nope)),
    ?assertEqual({error, {bad_option, opts, [{io_server, Cap} | x]}},
                 beamprobe:calls("bpsh_target:f/1", 5, [{io_server, Cap} | x])),
    ?assertEqual({error, {bad_option, opts, [{io_server, Cap}, "x"]}},
                 beamprobe:calls("bpsh_target:f/1", 5, [{io_server, Cap}, "x"])),
    %% The shell's own option is named (not the limit it becomes).
    ?assertEqual({error, {bad_option, time, -1}},
                 beamprobe:calls("bpsh_target:f/1", 5, O#{time => -1})),
    ?assertEqual({error, {bad_option, on_rate, maybe}},
                 beamprobe:calls("bpsh_target:f/1", {5, 10},
                                 O#{on_rate => maybe})),
    ?assertEqual({error, {dead_process, Dead}},
                 beamprobe:calls("bpsh_target:f/1", 5, O#{procs => [Dead]})),
    %% Nothing was installed, nothing printed.
    ?assertEqual([], beamprobe:list()),
    ?assert(lists:all(fun beamprobe_shell_lib:no_pattern/1,
                      [{?T, F, A} || {F, A} <- ?T:module_info(functions)])),
    ?assertEqual(SendBefore, erlang:trace_info(send, match_spec)),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    ?assertEqual([], [P || P <- processes(), beamprobe_tracer(P)]),
    ?assertEqual(<<>>, cap_text(Cap)),
    %% force => true accepts a refused pattern.
    ?assertEqual(1, beamprobe:calls("beamprobe_workload:tick/1", 1,
                                    O#{force => true})),
    ok = beamprobe:clear(),
    ?assert(no_pattern({beamprobe_workload, tick, 1})),
    %% A bad force value is a bad option like any other (last: this one
    %% raised badarg instead of returning an error).
    ?assertEqual({error, {bad_option, force, yes}},
                 catch beamprobe:calls("bpsh_target:f/1", 5,
                                       O#{force => yes})),
    ?assertEqual({error, {bad_option, force, yes}},
                 catch beamprobe:messages("send", 5, O#{force => yes})),
    ?assertEqual([], beamprobe:list()).

%% beamprobe:format_error/1 says every error of calls/3 and messages/3 in
%% words (not just the term printed back).
format_errors(_Config) ->
    Cap = cap(),
    O = #{io_server => Cap},
    Errors = [beamprobe:calls("bpsh_target:f(", 5, O),
              beamprobe:calls("io:format/2", 5, O),
              beamprobe:calls("send", 5, O),
              beamprobe:messages("bpsh_target:f/1", 5, O),
              beamprobe:calls(foo, 5, O),
              beamprobe:calls("bpsh_target:f/1", 0, O),
              beamprobe:calls("bpsh_target:f/1", 5, O#{bogus => 1}),
              beamprobe:calls("bpsh_target:nope/1", 5, O),
              beamprobe:calls("bpsh_target:f/1", 5, nope),
              beamprobe:calls("bpsh_target:f/1", 5, [{formatter, nope}])],
    Texts = [{R, beamprobe:format_error(R)} || {error, R} <- Errors],
    ct:log("~p", [Texts]),
    ?assertEqual(length(Errors), length(Texts)),
    ?assertEqual([], [{R, T} || {R, T} <- Texts,
                                T =:= lists:flatten(io_lib:format("~p", [R]))]),
    %% A pattern error names the column and says what is wrong.
    {{bad_pattern, _, Col, Msg}, Text} = hd(Texts),
    ?assertNotEqual(nomatch, string:find(Text, integer_to_list(Col))),
    ?assertNotEqual(nomatch, string:find(Text, Msg)),
    ?assertEqual([], beamprobe:list()).

%% A shell trace of a common function through meta patterns (every
%% process) shows the user's calls, not beamprobe's own work: the
%% session, its watchdog, the printer and the janitor call lists
%% functions all the time (the trace used to fill with them: 30 of 30
%% events, and never the user's one call; an idle node filled a rate
%% limit with the watchdog's and printer's calls).
own_work_not_traced(_Config) ->
    Cap = cap(),
    Me = list_to_binary(pid_to_list(self())),
    ?assert(ok_calls("lists:reverse/1", 100, #{io_server => Cap}) >= 1),
    S = the_session(),
    Own = [list_to_binary(pid_to_list(P))
           || P <- [S | beamprobe_test_lib:own_pids(S)] ++
                  [whereis(N) || N <- [beamprobe_janitor, beamprobe_monitor,
                                       beamprobe_gate]]],
    %% Let the watchdog and the printer work a while.
    timer:sleep(1500),
    _ = lists:reverse([my, own, call]),
    %% (It was a 600 ms sleep: the line may take longer on a loaded
    %% machine.)
    _ = wait_text(Cap, "([my,own,call])", 10000),
    ok = beamprobe:clear(),
    Events = [L || L <- lines(Cap), binary:first(L) =/= $%],
    ct:log("~s~nbeamprobe's: ~p", [cap_text(Cap), Own]),
    %% (Other processes of the test node may call it too: not beamprobe's.)
    ?assertEqual([], [L || L <- Events, lists:member(pid_of(L), Own)]),
    ?assert(lists:any(fun(L) -> pid_of(L) =:= Me andalso
                                    binary:match(L, <<"[my,own,call]">>) =/= nomatch
                      end, Events)).

%% A message trace of every process does not record the printing of its
%% own lines: the io server it prints to is left out of it (the old
%% shell session recorded each line's io_request to the io server, whose
%% printing it recorded again, until the limit: here 30 lines of
%% "received {io_request,...}" and no room for the messages asked for).
%% The io server's own messages still reach a session that is not
%% printing to it.
own_output_not_traced(Config) ->
    Cap = cap(),
    CapT = list_to_binary(pid_to_list(Cap)),
    Sink = spawn(fun Loop() -> receive stop -> ok; _ -> Loop() end end),
    SinkT = list_to_binary(pid_to_list(Sink)),
    Dir = beamprobe_test_lib:dir(Config, "file"),
    {ok, F} = beamprobe:start(#{events => ['receive'], procs => [Cap],
                                output => {file, Dir}}),
    1 = beamprobe:messages("'receive'", 30, #{io_server => Cap, time => 5000}),
    [begin Sink ! {hello, I}, timer:sleep(50) end || I <- lists:seq(1, 5)],
    timer:sleep(300),
    ok = beamprobe:clear(),
    {ok, _} = beamprobe:stop(F),
    Lines = event_lines(Cap),
    ct:log("~s", [cap_text(Cap)]),
    ?assertEqual([], [L || L <- Lines, pid_of(L) =:= CapT]),
    ?assertEqual([<<"received {hello,", (integer_to_binary(I))/binary, "}">>
                  || I <- lists:seq(1, 5)],
                 [what(L) || L <- Lines, pid_of(L) =:= SinkT]),
    %% The file session on the io server recorded its io requests.
    IoReqs = [E || E <- beamprobe_test_lib:trace(Dir),
                   binary:match(iolist_to_binary(io_lib:format("~p", [E])),
                                <<"io_request">>) =/= nomatch],
    ?assert(length(IoReqs) >= 5),
    Sink ! stop,
    wait_no_session().

%% Starting a session that records every process's messages does not
%% record beamprobe's own code loading: the annotation gate's flag module
%% is loaded before the session is installed (it was loaded after, and
%% the first events of such a session were the code server and the code
%% purger receiving beamprobe_gate_flag's load and purge).
gate_load_not_traced(Config) ->
    wait_until_gate_closed(60),
    Dir = beamprobe_test_lib:dir(Config, "gate"),
    {ok, S} = beamprobe:start(#{events => ['receive', send],
                                output => {file, Dir}}),
    timer:sleep(200),
    {ok, _} = beamprobe:stop(S),
    Gate = [E || E <- beamprobe_test_lib:trace(Dir),
                 binary:match(iolist_to_binary(io_lib:format("~p", [E])),
                              <<"beamprobe_gate_flag">>) =/= nomatch],
    ?assertEqual([], Gate).

%% The gate's flag is off once no session ran for its poll period.
wait_until_gate_closed(0) -> ct:fail(gate_still_open);
wait_until_gate_closed(N) ->
    case beamprobe_gate:state() of
        {ok, #{flag := false}} -> ok;
        _ -> timer:sleep(100), wait_until_gate_closed(N - 1)
    end.

%% beamprobe's own processes starting -- a session, its watchdog, the
%% supervisor starting the session -- are no events of a trace that runs
%% meanwhile, its own start included.  gen_server:start_link/3 runs gen's
%% option handling (lists:keyfind/3 for debug, hibernate_after) in the new
%% process before init/1 makes it sensitive; the watchdog is started after
%% the session's patterns are installed: calls("lists:keyfind/3", 5)
%% printed 3 calls of its own watchdog starting, and a trace running
%% while another session started recorded that session's start.
own_start_not_traced(Config) ->
    Cap = cap(),
    ?assert(ok_calls("lists:keyfind/3", 1000,
                     #{io_server => Cap, time => 20000}) >= 1),
    S = the_session(),
    Own1 = [S | beamprobe_test_lib:own_pids(S)],
    Dir = beamprobe_test_lib:dir(Config, "second"),
    {ok, S2} = beamprobe:start(#{calls => [{?T, f, 1}],
                                 output => {file, Dir}}),
    Own2 = [S2 | beamprobe_test_lib:own_pids(S2)],
    {ok, _} = beamprobe:stop(S2),
    _ = lists:keyfind(my, 1, [{my, own, call}]),
    _ = wait_text(Cap, "[{my,own,call}])", 10000),
    ok = beamprobe:clear(),
    Own = [list_to_binary(pid_to_list(P))
           || P <- Own1 ++ Own2 ++
                  [whereis(N) || N <- [beamprobe_sup, beamprobe_session_sup,
                                       beamprobe_janitor, beamprobe_monitor,
                                       beamprobe_gate]]],
    Events = event_lines(Cap),
    ct:log("~s~nbeamprobe's: ~p", [cap_text(Cap), Own]),
    ?assertEqual([], [L || L <- Events, lists:member(pid_of(L), Own)]),
    Me = list_to_binary(pid_to_list(self())),
    ?assert(lists:any(fun(L) -> pid_of(L) =:= Me andalso
                                    binary:match(L, <<"{my,own,call}">>) =/= nomatch
                      end, Events)).
