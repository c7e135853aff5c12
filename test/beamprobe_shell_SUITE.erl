%%% @doc Tests of the shell API (beamprobe:calls/2,3, messages/2,3,
%%% clear/0), of Erlang handler sinks (flow control, several sinks, per-sink
%%% filters) and of concurrent sessions, through what a user sees: the lines
%%% printed into an io server.
%%%
%%% Printed output goes to a capture process (cap_*/N below): a minimal io
%%% server that accumulates every put_chars request, on this node (or, in
%%% remote_shell, on this node while the session runs on a peer node, as
%%% with `erl -remsh').
%%%
%%% The traced functions live in `bpsh_target' (and `Elixir.Bpsh.Target'),
%%% compiled from source in init_per_suite: the pattern language refuses
%%% beamprobe* modules (the tracer's own) without `force'.
%%%
%%% Run: make && ct_run -noshell -pa ebin -dir test -suite beamprobe_shell_SUITE
%%%      -logdir _build/ct_logs
-module(beamprobe_shell_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([count_limit/1, count_limit_exact/1, count_whole_module/1,
         rate_limit_burst/1, rate_limit_dropped_reported/1,
         rate_limit_windows/1, rate_limit_stop/1,
         time_limit/1,
         patterns_guards_actions/1, patterns_elixir/1,
         patterns_caller_stack/1,
         messages_pattern/1, messages_pattern_ports/1, procs_option/1,
         printer_indent_bounded/1,
         handler_flow_control/1, handler_flow_control_credits_2/1,
         handler_every_event/1, several_sinks/1, sink_filter/1,
         concurrent_sessions/1, clear_restores/1, remote_shell/1,
         bad_inputs/1, format_errors/1]).
%% Capture io server and peer-side helper (spawned by MFA).
-export([cap_loop/1, remote_shell_proc/3]).

-define(L, beamprobe_test_lib).
-define(T, bpsh_target).
-define(H, beamprobe_test_handler).

%%% ------------------------------------------------------------------------
%%% Setup
%%% ------------------------------------------------------------------------

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, limits}, {group, patterns}, {group, handlers},
     {group, sessions}, remote_shell, bad_inputs, format_errors].

groups() ->
    [{limits, [], [count_limit, count_limit_exact, count_whole_module,
                   rate_limit_burst, rate_limit_dropped_reported,
                   rate_limit_windows, rate_limit_stop, time_limit]},
     {patterns, [], [patterns_guards_actions, patterns_elixir,
                     patterns_caller_stack,
                     messages_pattern, messages_pattern_ports, procs_option,
                     printer_indent_bounded]},
     {handlers, [], [handler_flow_control, handler_flow_control_credits_2,
                     handler_every_event, several_sinks, sink_filter]},
     {sessions, [], [concurrent_sessions, clear_restores]}].

%% The traced module.  loop/3 calls F(I) for I = From..To through a remote
%% call (so every call is a real call of the traced function).
target_src() ->
    "-module(bpsh_target).
     -export([f/1, g/1, add/2, loop/3, loop_sleep/4, ping/3, spin/2]).
     f(X) -> X * 2.
     g(X) -> h(X) + 1.
     h(X) -> X.
     add(A, B) -> A + B.
     loop(_F, I, To) when I > To -> ok;
     loop(F, I, To) -> _ = bpsh_target:F(I), loop(F, I + 1, To).
     loop_sleep(_F, I, To, _Ms) when I > To -> ok;
     loop_sleep(F, I, To, Ms) ->
         _ = bpsh_target:F(I), timer:sleep(Ms), loop_sleep(F, I + 1, To, Ms).
     ping(_P, I, To) when I > To -> ok;
     ping(P, I, To) ->
         P ! {ping, I}, P ! {pong, I}, ping(P, I + 1, To).
     spin(F, Until) ->
         case erlang:monotonic_time(millisecond) < Until of
             true -> loop(F, 1, 1000), spin(F, Until);
             false -> ok
         end.
    ".

elixir_src() ->
    "-module('Elixir.Bpsh.Target').
     -export([f/1]).
     f(X) -> X * 2.
    ".

init_per_suite(Config) ->
    case os:find_executable("babeltrace2") of
        false -> ct:fail("babeltrace2 is not installed");
        _ -> ok
    end,
    {ok, _} = application:ensure_all_started(beamprobe),
    {module, beamprobe_nif} = code:ensure_loaded(beamprobe_nif),
    {module, ?H} = code:ensure_loaded(?H),
    _ = [load_src(Src) || Src <- [target_src(), elixir_src()]],
    Config.

end_per_suite(_Config) ->
    ok.

load_src(Src) ->
    {Mod, Bin} = compile_src(Src),
    {module, Mod} = code:load_binary(Mod, atom_to_list(Mod) ++ ".erl", Bin),
    Mod.

compile_src(Src) ->
    {ok, Mod, Bin} = compile:forms(forms(Src), [return_errors]),
    {Mod, Bin}.

forms(Src) ->
    {ok, Toks, _} = erl_scan:string(Src),
    split_forms(Toks, []).

split_forms([], []) -> [];
split_forms([{dot, _} = D | T], Acc) ->
    {ok, F} = erl_parse:parse_form(lists:reverse([D | Acc])),
    [F | split_forms(T, [])];
split_forms([Tok | T], Acc) -> split_forms(T, [Tok | Acc]).

init_per_testcase(Case, Config) ->
    ?assertEqual([], beamprobe:list()),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    CaseDir = filename:join(?config(priv_dir, Config), atom_to_list(Case)),
    ok = file:make_dir(CaseDir),
    [{case_dir, CaseDir} | Config].

end_per_testcase(_Case, _Config) ->
    ok = beamprobe:clear(),
    _ = [beamprobe:stop(S) || S <- beamprobe:list()],
    %% Never let a failed case leave trace state for the next one.
    erlang:trace_pattern({?T, '_', '_'}, false, [local]),
    erlang:trace_pattern({?T, '_', '_'}, false, [meta]),
    erlang:trace_pattern({lists, reverse, 1}, false, [meta]),
    erlang:trace_pattern(send, true, []),
    erlang:trace_pattern('receive', true, []),
    erlang:trace(all, false, [all]),
    ok.

%%% ------------------------------------------------------------------------
%%% Capture io server
%%% ------------------------------------------------------------------------

%% A process answering io requests; it accumulates the text of every
%% put_chars request.  cap_text/1 returns it all as a binary.
cap() ->
    spawn(?MODULE, cap_loop, [[]]).

cap_loop(Acc) ->
    receive
        {io_request, From, ReplyAs, Req} ->
            {Reply, Acc1} = io_req(Req, Acc),
            From ! {io_reply, ReplyAs, Reply},
            cap_loop(Acc1);
        {cap_text, From, Ref} ->
            From ! {Ref, iolist_to_binary(lists:reverse(Acc))},
            cap_loop(Acc);
        cap_stop -> ok
    end.

io_req({put_chars, Enc, Chars}, Acc) ->
    case unicode:characters_to_binary(Chars, Enc, unicode) of
        B when is_binary(B) -> {ok, [B | Acc]};
        _ -> {{error, put_chars}, Acc}
    end;
io_req({put_chars, Enc, M, F, A}, Acc) ->
    try apply(M, F, A) of
        Chars -> io_req({put_chars, Enc, Chars}, Acc)
    catch _:_ -> {{error, F}, Acc}
    end;
io_req({put_chars, Chars}, Acc) -> io_req({put_chars, latin1, Chars}, Acc);
io_req({put_chars, M, F, A}, Acc) -> io_req({put_chars, latin1, M, F, A}, Acc);
io_req({requests, Reqs}, Acc) ->
    lists:foldl(fun(R, {ok, A}) -> io_req(R, A);
                   (_, Err) -> Err
                end, {ok, Acc}, Reqs);
io_req(getopts, Acc) -> {[{binary, false}, {encoding, unicode}], Acc};
io_req({get_geometry, _}, Acc) -> {{error, enotsup}, Acc};
io_req(_, Acc) -> {{error, request}, Acc}.

cap_text(Cap) ->
    Ref = make_ref(),
    Cap ! {cap_text, self(), Ref},
    receive {Ref, T} -> T
    after 5000 -> ct:fail({capture_not_answering, Cap})
    end.

lines(Cap) ->
    binary:split(cap_text(Cap), <<"\n">>, [global, trim_all]).

%% Lines describing events (everything but "% beamprobe: ..." lines).
event_lines(Cap) ->
    [L || L <- lines(Cap), not is_meta(L)].

is_meta(<<"% beamprobe:", _/binary>>) -> true;
is_meta(_) -> false.

%% Sum of the N of every "dropped N events" line.
dropped_lines(Cap) ->
    lists:sum([binary_to_integer(N)
               || L <- lines(Cap),
                  {match, [N]} <- [re:run(L, "^% beamprobe: dropped ([0-9]+) "
                                          "events", [{capture, all_but_first,
                                                      binary}])]]).

%% Waits until the captured text contains Sub; returns elapsed ms.
wait_text(Cap, Sub, Timeout) ->
    try ?L:wait_until(fun() ->
                              binary:match(cap_text(Cap),
                                           iolist_to_binary(Sub)) =/= nomatch
                      end, Timeout)
    catch error:{timeout, _} ->
            ct:fail({text_not_printed, iolist_to_binary(Sub),
                     {within_ms, Timeout}, {printed, cap_text(Cap)}})
    end.

%% The number of spaces before the event's description.
indent(Line) ->
    {match, [Sp]} = re:run(Line, "^[0-9:.]+ <[0-9.]+> ( *)",
                           [{capture, all_but_first, binary}]),
    byte_size(Sp).

%% The text of an event line after the time and process columns, without
%% indentation: "call bpsh_target:f(1)".
what(Line) ->
    case re:run(Line, "^[0-9:.]+ (?:<[0-9.]+>|#Port<[0-9.]+>) +(.*)$",
                [{capture, all_but_first, binary}]) of
        {match, [W]} -> W;
        nomatch -> ct:fail({unexpected_line, Line})
    end.

%%% ------------------------------------------------------------------------
%%% Other helpers
%%% ------------------------------------------------------------------------

ok_calls(Pattern, Limit, Opts) ->
    case beamprobe:calls(Pattern, Limit, Opts) of
        N when is_integer(N) -> N;
        Other -> ct:fail({calls_failed, Pattern, Limit, Other})
    end.

%% The only shell session running.
the_session() ->
    case [S || S <- beamprobe:list(), is_shell(S)] of
        [S] -> S;
        L -> ct:fail({expected_one_shell_session, L})
    end.

is_shell(S) ->
    case beamprobe:info(S) of
        {ok, #{tag := beamprobe_shell}} -> true;
        _ -> false
    end.

%% The running shell session tracing MFA.
session_of(MFA) ->
    [S] = [S || S <- beamprobe:list(),
                {ok, #{config := #{calls := Calls}}} <- [beamprobe:info(S)],
                lists:keymember(MFA, 1, Calls)],
    S.

wait_no_session() ->
    try ?L:wait_until(fun() -> beamprobe:list() =:= [] end, 3000)
    catch error:{timeout, _} -> ct:fail({sessions_left, beamprobe:list()})
    end.

start(Spec) ->
    case beamprobe:start(Spec) of
        {ok, S} -> S;
        Other -> ct:fail({start_failed, Spec, Other})
    end.

stop(S) ->
    {ok, Sum} = beamprobe:stop(S),
    ct:log("summary: ~p", [Sum]),
    Sum.

%% Handler messages.
handler_pid() ->
    receive {handler_init, H} -> H
    after 5000 -> ct:fail(handler_not_started)
    end.

handler_done(H) ->
    receive {handler_done, H, Reason, Totals} -> {Reason, Totals}
    after 10000 -> ct:fail({handler_not_done, H})
    end.

%% Every {handler_events, H, Events} received so far, in order.
handler_events(H) ->
    receive {handler_events, H, Evs} -> Evs ++ handler_events(H)
    after 0 -> []
    end.

%% A process that runs bpsh_target functions on request.
worker() ->
    beamprobe_workload:start_worker().

run(W, F) -> beamprobe_workload:run(W, F).

%% Trace state left on a function: meta or local pattern.
no_pattern(MFA) ->
    {meta, Meta} = erlang:trace_info(MFA, meta),
    {traced, Traced} = erlang:trace_info(MFA, traced),
    {Meta, Traced} =:= {false, false}.

beamprobe_tracer(P) ->
    case erlang:trace_info(P, tracer) of
        {tracer, {beamprobe_nif, _}} -> true;
        _ -> false
    end.

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
    ?assertEqual(6, length(Lines)),
    {Events, [Last]} = lists:split(5, Lines),
    ?assertEqual(<<"% beamprobe: session ended (events)">>, Last),
    Me = list_to_binary(pid_to_list(self())),
    lists:foreach(
      fun({I, L}) ->
              ?assertMatch({match, _},
                           re:run(L, "^[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6} "
                                  "<[0-9]+\\.[0-9]+\\.[0-9]+> ")),
              ?assertEqual(Me, hd(binary:split(tl_word(L), <<" ">>))),
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

tl_word(L) ->
    [_Time, Rest] = binary:split(L, <<" ">>),
    Rest.

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
    ?assert(lists:all(fun no_pattern/1,
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
rate_limit_windows(_Config) ->
    Cap = cap(),
    {N, Ms} = {5, 200},
    1 = ok_calls("bpsh_target:f/1", {N, Ms},
                 #{io_server => Cap, time => 20000, timestamp => ns}),
    S = the_session(),
    K = 400,
    T0 = erlang:monotonic_time(millisecond),
    ok = ?T:loop_sleep(f, 1, K, 2),
    Elapsed = ?L:elapsed_ms(T0),
    timer:sleep(300),
    Sum = stop(S),
    wait_text(Cap, "% beamprobe: session ended (requested)\n", 2000),
    ct:log("~b calls in ~b ms~n~s", [K, Elapsed, cap_text(Cap)]),
    Ts = [binary_to_integer(hd(binary:split(L, <<" ">>)))
          || L <- event_lines(Cap)],
    ?assertEqual(Ts, lists:sort(Ts)),
    %% A window opens at the first event after the previous one ended
    %% (the first at the session's start) and takes N events: with a call
    %% every 2-3 ms, each window's events are a burst of N consecutive
    %% calls, separated from the next window's by a silence.
    Windows = clusters(Ts, (Ms div 2) * 1000000),
    ct:log("lines per window: ~p", [[length(W) || W <- Windows]]),
    ?assert(lists:all(fun(W) -> length(W) =< N end, Windows)),
    %% Each window after the first opens at its first event: they are at
    %% least Ms apart.
    Opens = [hd(W) || W <- tl(Windows)],
    ?assertEqual([], [{A, B} || {A, B} <- lists:zip(lists:droplast(Opens),
                                                    tl(Opens)),
                                B - A < (Ms - 1) * 1000000]),
    %% The calls lasted Elapsed ms: about Elapsed / Ms windows.
    ?assert(length(Windows) >= Elapsed div Ms - 1),
    ?assert(length(Ts) =< N * (Elapsed div Ms + 2)),
    #{events := Ev, dropped := #{rate := R}} = Sum,
    ?assertEqual(length(Ts), Ev),
    ?assertEqual(K, Ev + R),
    ?assert(dropped_lines(Cap) =< R).

%% Sorted timestamps split where two are more than Gap apart.
clusters([], _Gap) -> [];
clusters([T0 | Ts], Gap) -> clusters(Ts, Gap, [T0], []).

clusters([], _Gap, Cur, Acc) -> lists:reverse([lists:reverse(Cur) | Acc]);
clusters([T | Ts], Gap, [Prev | _] = Cur, Acc) when T - Prev > Gap ->
    clusters(Ts, Gap, [T], [lists:reverse(Cur) | Acc]);
clusters([T | Ts], Gap, Cur, Acc) -> clusters(Ts, Gap, [T | Cur], Acc).

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
         7 = ?T:f(3) + 1,
         wait_text(Cap, "% beamprobe: session ended (seconds)\n", 2000),
         Elapsed = ?L:elapsed_ms(T0),
         ct:log("limit ~p: ended after ~b ms~n~s",
                [Limit, Elapsed, cap_text(Cap)]),
         ?assert(Elapsed >= 290),
         ?assert(Elapsed < 1000),
         ?assertEqual([<<"call bpsh_target:f(3)">>],
                      [what(L) || L <- event_lines(Cap)]),
         wait_no_session(),
         ?assert(no_pattern({?T, f, 1}))
     end || Limit <- [1000, {1000, 1000}]],
    ok.

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
    ?assertEqual([iolist_to_binary(["sent {ping,", integer_to_list(I),
                                    "} to ", To]) || I <- [1, 2, 3]],
                 [what(L) || L <- event_lines(Cap)]),
    ?assertEqual([list_to_binary(Me)],
                 lists:usort([hd(binary:split(tl_word(L), <<" ">>))
                              || L <- event_lines(Cap)])),
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
                 lists:usort([hd(binary:split(tl_word(L), <<" ">>))
                              || L <- event_lines(Cap2)])),
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
    ?assertEqual([<<"sent {ping,1} to ", (list_to_binary(pid_to_list(Sink)))/binary>>,
                  <<"sent {ping,2} to ", (list_to_binary(pid_to_list(Sink)))/binary>>,
                  <<"sent {ping,3} to ", (list_to_binary(pid_to_list(Sink)))/binary>>],
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
    ?assertEqual([W1T], lists:usort([hd(binary:split(tl_word(L), <<" ">>))
                                     || L <- Lines])),
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
%%% 5-7. Handlers
%%% ------------------------------------------------------------------------

handler_flow_control(Config) ->
    flow_control(Config, #{}, 4).

handler_flow_control_credits_2(Config) ->
    flow_control(Config, #{credits => 2}, 2).

%% A slow handler (50 ms per batch) under a firehose: its mailbox never
%% holds more than `credits' batches, the excess is dropped and counted,
%% the handler is told, and the node's memory stays bounded.
flow_control(_Config, SinkOpts, Credits) ->
    erlang:garbage_collect(),
    Mem0 = erlang:memory(total),
    Until = erlang:monotonic_time(millisecond) + 2000,
    Loopers = [beamprobe_workload:start_looper(
                 self(), fun() -> ?T:spin(f, Until) end)
               || _ <- lists:seq(1, 4)],
    S = start(#{procs => Loopers, calls => [{?T, f, 1}],
                limits => #{seconds => 5},
                output => [{handler, ?H, #{sleep => 50, parent => self(),
                                           forward => counts},
                            SinkOpts}]}),
    H = handler_pid(),
    beamprobe_workload:go(Loopers),
    {MaxQ, Samples} = sample_queue(H, Until, 0, 0),
    _ = beamprobe_workload:wait_done(Loopers, 10000),
    Mem1 = erlang:memory(total),
    Sum = stop(S),
    {_Reason, Totals} = handler_done(H),
    ct:log("max queue ~b (~b samples), memory +~b KB~nhandler: ~p",
           [MaxQ, Samples, (Mem1 - Mem0) div 1024, Totals]),
    ?assert(Samples > 20),
    ?assert(MaxQ =< Credits),
    #{handlers := [#{delivered := Delivered, dropped := Dropped}],
      events := Events} = Sum,
    ?assert(Dropped > 0),
    ?assert(Delivered > 0),
    ?assertEqual(Events, Delivered + Dropped),
    %% What the handler was given is what the session counts as delivered.
    ?assertMatch(#{events := Delivered, bad := 0}, Totals),
    %% It was told it lost events.
    ?assertMatch(#{dropped_events := DE, dropped := D} when DE > 0 andalso
                                                            D > 0, Totals),
    ?assert(Mem1 - Mem0 < 50 * 1024 * 1024),
    ?L:assert_no_trace_state(Loopers -- [P || P <- Loopers,
                                             not is_process_alive(P)],
                             [{?T, f, 1}]).

sample_queue(H, Until, Max, N) ->
    case erlang:monotonic_time(millisecond) < Until of
        false -> {Max, N};
        true ->
            Q = case erlang:process_info(H, message_queue_len) of
                    {message_queue_len, L} -> L;
                    undefined -> ct:fail(handler_died)
                end,
            timer:sleep(10),
            sample_queue(H, Until, max(Q, Max), N + 1)
    end.

%% A handler that keeps up gets every event.
handler_every_event(_Config) ->
    W = worker(),
    S = start(#{procs => [W], calls => [{?T, f, 1}], return => false,
                exceptions => false,
                output => {handler, ?H, #{parent => self()}}}),
    H = handler_pid(),
    %% 10,000 calls at a modest rate: 500 every 5 ms.
    [ok = run(W, fun() -> ?T:loop(f, I, I + 499), timer:sleep(5) end)
     || I <- lists:seq(1, 10000, 500)],
    ?L:wait_until(fun() ->
                          {ok, #{events := E}} = beamprobe:info(S),
                          E =:= 10000
                  end, 5000),
    Sum = stop(S),
    {requested, Totals} = handler_done(H),
    Evs = handler_events(H),
    ?assertMatch(#{events := 10000,
                   dropped := #{total := 0},
                   handlers := [#{delivered := 10000, dropped := 0}]}, Sum),
    ?assertMatch(#{calls := 10000, events := 10000, dropped_events := 0,
                   bad := 0}, Totals),
    ?assertEqual(10000, length(Evs)),
    ?assertEqual([{call, W, <<"bpsh_target:f/1">>}],
                 lists:usort([{E, P, M} || #{event := E, pid := P, mfa := M}
                                               <- Evs])),
    %% In order, with their arguments.
    ?assertEqual([iolist_to_binary(["(", integer_to_list(I), ")"])
                  || I <- lists:seq(1, 10000)],
                 [A || #{args := A} <- Evs]),
    beamprobe_workload:stop_worker(W).

%% A file and a handler in one session see the same events.
several_sinks(Config) ->
    Dir = filename:join(?config(case_dir, Config), "trace"),
    W = worker(),
    S = start(#{procs => [W], calls => [{?T, f, 1}], return => false,
                output => [{file, Dir},
                           {handler, ?H, #{parent => self()}}]}),
    H = handler_pid(),
    ok = run(W, fun() -> ?T:loop(f, 1, 1000) end),
    Sum = stop(S),
    {requested, #{calls := HCalls}} = handler_done(H),
    Evs = ?L:parse(?L:babeltrace_ok(Dir)),
    FileCalls = ?L:events(Evs, "call", W),
    ?assertEqual(1000, HCalls),
    ?assertEqual(HCalls, length(FileCalls)),
    ?assertMatch(#{events := 1000, dropped := #{total := 0},
                   handlers := [#{delivered := 1000, dropped := 0}]}, Sum),
    ?assertEqual([iolist_to_binary(["(", integer_to_list(I), ")"])
                  || I <- lists:seq(1, 1000)],
                 [?L:field(E, "args") || E <- FileCalls]),
    beamprobe_workload:stop_worker(W).

%% events => [send] on the handler: it gets sends only; the file all.
sink_filter(Config) ->
    Dir = filename:join(?config(case_dir, Config), "trace"),
    W = worker(),
    Sink = spawn(fun() -> receive stop -> ok end end),
    S = start(#{procs => [W], calls => [{?T, f, 1}], return => false,
                events => [send],
                output => [{file, Dir},
                           {handler, ?H, #{parent => self()},
                            #{events => [send]}}]}),
    H = handler_pid(),
    ok = run(W, fun() -> ?T:loop(f, 1, 50), ?T:ping(Sink, 1, 10) end),
    Sum = stop(S),
    {requested, Totals} = handler_done(H),
    HEvs = handler_events(H),
    Evs = ?L:parse(?L:babeltrace_ok(Dir)),
    ct:log("summary ~p~nhandler ~p", [Sum, Totals]),
    ?assertEqual([send], lists:usort([E || #{event := E} <- HEvs])),
    ?assertEqual(50, length(?L:events(Evs, "call", W))),
    FileSends = ?L:events(Evs, "send", W),
    ?assertEqual(length(FileSends), length(HEvs)),
    %% 20 messages to Sink (+ the worker's reply to this process).
    ?assertEqual(20, length([E || #{event := send, to := To} = E <- HEvs,
                                  To =:= Sink])),
    ?assertMatch(#{calls := 0}, Totals),
    Sink ! stop,
    beamprobe_workload:stop_worker(W).

%%% ------------------------------------------------------------------------
%%% 8-9. Several sessions; clear/0
%%% ------------------------------------------------------------------------

concurrent_sessions(_Config) ->
    CapF = cap(),
    CapG = cap(),
    1 = ok_calls("bpsh_target:f/1", 100, #{io_server => CapF, return => true}),
    1 = ok_calls("bpsh_target:g/1 -> return", 100, #{io_server => CapG}),
    SF = session_of({?T, f, 1}),
    SG = session_of({?T, g, 1}),
    ?assertNotEqual(SF, SG),
    %% A session of explicit processes, alongside.
    W1 = worker(),
    W2 = worker(),
    W3 = worker(),
    SP = start(#{procs => [W1, W2], calls => [{?T, add, 2}],
                 output => {handler, ?H, #{parent => self()}}}),
    H = handler_pid(),
    %% Colliding sessions are refused.
    CapX = cap(),
    ?assertEqual({error, {conflict, SF, {calls, {?T, f, 1}}}},
                 beamprobe:calls("bpsh_target:f/1", 5, #{io_server => CapX})),
    ?assertEqual({error, {conflict, SG, {calls, {?T, g, 1}}}},
                 beamprobe:calls("bpsh_target:g(X) when X > 1", 5,
                                 #{io_server => CapX})),
    ?assertMatch({error, {conflict, _, {calls, {?T, '_', '_'}}}},
                 beamprobe:calls("bpsh_target", 5, #{io_server => CapX})),
    ?assertEqual({error, {conflict, SF, {calls, {?T, f, 1}}}},
                 beamprobe:start(#{procs => [W3], calls => [{?T, f, 1}]})),
    ?assertEqual({error, {conflict, SP, {procs, [W2]}}},
                 beamprobe:start(#{procs => [W2, W3],
                                   calls => [{?T, add, 2}],
                                   output => {handler, ?H, #{}}})),
    ?assertEqual(<<>>, cap_text(CapX)),
    ?assertEqual(3, length(beamprobe:list())),
    %% Every session sees its own events.
    ok = run(W1, fun() -> 2 = ?T:f(1), 2 = ?T:g(1), 3 = ?T:add(1, 2), ok end),
    ok = run(W3, fun() -> 7 = ?T:add(3, 4), ok end),  % W3: not traced by SP
    W1T = pid_to_list(W1),
    wait_text(CapF, "returned from bpsh_target:f/1 -> 2", 2000),
    wait_text(CapG, "returned from bpsh_target:g/1 -> 2", 2000),
    ?assertEqual([<<"call bpsh_target:f(1)">>,
                  <<"returned from bpsh_target:f/1 -> 2">>],
                 [what(L) || L <- event_lines(CapF)]),
    ?assertEqual([<<"call bpsh_target:g(1)">>,
                  <<"returned from bpsh_target:g/1 -> 2">>],
                 [what(L) || L <- event_lines(CapG)]),
    ?assert(lists:all(fun(L) -> binary:match(L, list_to_binary(W1T)) =/= nomatch
                      end, event_lines(CapF) ++ event_lines(CapG))),
    SumP = stop(SP),
    {requested, _} = handler_done(H),
    ?assertEqual([{call, W1, <<"(1, 2)">>}, {return_from, W1, <<"3">>}],
                 [{E, P, maps:get(args, M, maps:get(result, M, none))}
                  || #{event := E, pid := P} = M <- handler_events(H)]),
    ?assertMatch(#{events := 2}, SumP),
    %% The shell sessions still run; clear/0 ends them.
    ?assertEqual(lists:sort([SF, SG]), lists:sort(beamprobe:list())),
    ok = beamprobe:clear(),
    wait_text(CapF, "% beamprobe: session ended (requested)\n", 2000),
    wait_text(CapG, "% beamprobe: session ended (requested)\n", 2000),
    ?assertEqual([], beamprobe:list()),
    [beamprobe_workload:stop_worker(W) || W <- [W1, W2, W3]],
    ok.

%% clear/0 stops every shell session and leaves nothing behind.
clear_restores(_Config) ->
    SendBefore = erlang:trace_info(send, match_spec),
    RecvBefore = erlang:trace_info('receive', match_spec),
    ct:log("before: ~p ~p", [SendBefore, RecvBefore]),
    MFAs = [{?T, f, 1}, {?T, g, 1}, {lists, reverse, 1}],
    Caps = [cap() || _ <- lists:seq(1, 4)],
    [C1, C2, C3, C4] = Caps,
    1 = ok_calls("bpsh_target:f/1", 1000, #{io_server => C1}),
    1 = ok_calls("bpsh_target:g(X) when X > 0 -> return;stack", 1000,
                 #{io_server => C2}),
    1 = ok_calls(":lists.reverse([:bp_never_given | _])", 1000,
                 #{io_server => C3}),
    1 = beamprobe:messages("send({ping, _})", 1000, #{io_server => C4}),
    %% A session not started from the shell API (a meta-traced call
    %% session: the messages session above claims every process): clear/0
    %% leaves it alone.
    W = worker(),
    Other = start(#{calls => [{?T, add, 2}], meta => true,
                    output => {handler, ?H, #{}}}),
    ?assertEqual(5, length(beamprobe:list())),
    ?assertMatch({meta, {beamprobe_nif, _}}, erlang:trace_info({?T, f, 1}, meta)),
    ?assertNotEqual(SendBefore, erlang:trace_info(send, match_spec)),
    ?assertNotEqual([], [P || P <- processes(), beamprobe_tracer(P)]),
    2 = ?T:f(1), 2 = ?T:g(1),
    ok = beamprobe:clear(),
    [wait_text(C, "% beamprobe: session ended (requested)\n", 2000)
     || C <- Caps],
    ?assertEqual([Other], beamprobe:list()),
    _ = stop(Other),
    ?assertEqual([], beamprobe:list()),
    [?assert(no_pattern(MFA)) || MFA <- MFAs],
    [?assertEqual({all, false}, erlang:trace_info(MFA, all))
     || MFA <- [{?T, f, 1}, {?T, g, 1}]],
    ?assertEqual(SendBefore, erlang:trace_info(send, match_spec)),
    ?assertEqual(RecvBefore, erlang:trace_info('receive', match_spec)),
    ?assertEqual([], [P || P <- processes() ++ erlang:ports(),
                           beamprobe_tracer(P)]),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    %% clear/0 with nothing running.
    ok = beamprobe:clear(),
    beamprobe_workload:stop_worker(W).

%%% ------------------------------------------------------------------------
%%% 10. Remote shell
%%% ------------------------------------------------------------------------

%% As with `erl -remsh': the evaluating process runs on the traced node
%% (the peer) and its group leader is on this node.  The lines must reach
%% this node's capture process.
remote_shell(Config) ->
    case ensure_distributed() of
        {skip, _} = Skip -> Skip;
        ok -> remote_shell_run(Config)
    end.

ensure_distributed() ->
    case node() of
        nonode@nohost ->
            _ = os:cmd("epmd -daemon"),
            Name = list_to_atom("bpsh_ct_" ++ os:getpid()),
            case net_kernel:start([Name, shortnames]) of
                {ok, _} -> ok;
                {error, R} ->
                    {skip, lists:flatten(io_lib:format(
                                           "distribution cannot start: ~p",
                                           [R]))}
            end;
        _ -> ok
    end.

remote_shell_run(_Config) ->
    Ebin = filename:dirname(code:which(beamprobe)),
    {ok, Peer, Node} =
        case peer:start_link(#{name => peer:random_name(),
                               args => ["-pa", Ebin]}) of
            {ok, P, N} -> {ok, P, N};
            Err -> ct:fail({peer_start_failed, Err})
        end,
    try
        %% The peer gets this suite and the traced module.
        {Mod, Bin, File} = code:get_object_code(?MODULE),
        {module, Mod} = erpc:call(Node, code, load_binary, [Mod, File, Bin]),
        [{module, M} = erpc:call(Node, code, load_binary,
                                 [M, atom_to_list(M) ++ ".erl", B])
         || {M, B} <- [compile_src(target_src())]],
        Cap = cap(),
        Shell = erlang:spawn(Node, ?MODULE, remote_shell_proc,
                             [self(), Cap, "bpsh_target:f(X) when X > 1 -> return"]),
        R = receive {Shell, started, Res} -> Res
            after 10000 -> ct:fail(remote_calls_timeout)
            end,
        ?assertEqual(1, R),
        %% The session runs on the peer, not here.
        ?assertEqual([], beamprobe:list()),
        ?assertMatch([_], erpc:call(Node, beamprobe, list, [])),
        ok = erpc:call(Node, ?T, loop, [f, 1, 3]),
        wait_text(Cap, "% beamprobe: session ended (events)\n", 5000),
        ct:log("~s", [cap_text(Cap)]),
        ?assertEqual([<<"call bpsh_target:f(2)">>,
                      <<"returned from bpsh_target:f/1 -> 4">>,
                      <<"call bpsh_target:f(3)">>],
                     [what(L) || L <- event_lines(Cap)]),
        %% clear/0 on the peer: run from the "shell".
        Shell ! {clear, self()},
        receive {Shell, cleared, ok} -> ok
        after 5000 -> ct:fail(remote_clear_timeout)
        end,
        ?assertEqual([], erpc:call(Node, beamprobe, list, [])),
        ?assertEqual({meta, false},
                     erpc:call(Node, erlang, trace_info, [{?T, f, 1}, meta]))
    after
        peer:stop(Peer)
    end.

%% The "shell" on the peer node: its group leader is Cap, on the test node.
remote_shell_proc(Tester, Cap, Pattern) ->
    group_leader(Cap, self()),
    Tester ! {self(), started, beamprobe:calls(Pattern, 3)},
    receive
        {clear, From} -> From ! {self(), cleared, beamprobe:clear()}
    after 30000 -> ok
    end.

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
    ?assertMatch({error, {bad_pattern, _}}, beamprobe:calls([], 5, O)),
    ?assertMatch({error, {bad_pattern, _}}, beamprobe:calls(foo, 5, O)),
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
     || L <- [0, -1, {0, 100}, {5, 0}, {5, -1}, {1.5, 10}, foo, infinity]],
    ?assertMatch({error, {bad_limit, 0, _}}, beamprobe:messages("send", 0, O)),
    ?assertEqual({error, {unknown_option, bogus}},
                 beamprobe:calls("bpsh_target:f/1", 5, O#{bogus => 1})),
    ?assertEqual({error, {unknown_option, bogus}},
                 beamprobe:messages("send", 5, O#{bogus => 1})),
    ?assertEqual({error, {bad_option, opts, [{io_server, Cap}]}},
                 beamprobe:calls("bpsh_target:f/1", 5, [{io_server, Cap}])),
    ?assertMatch({error, {bad_option, {limits, seconds}, _}},
                 beamprobe:calls("bpsh_target:f/1", 5, O#{time => -1})),
    ?assertEqual({error, {bad_option, on_rate, maybe}},
                 beamprobe:calls("bpsh_target:f/1", {5, 10},
                                 O#{on_rate => maybe})),
    ?assertEqual({error, {dead_process, Dead}},
                 beamprobe:calls("bpsh_target:f/1", 5, O#{procs => [Dead]})),
    %% Nothing was installed, nothing printed.
    ?assertEqual([], beamprobe:list()),
    ?assert(lists:all(fun no_pattern/1,
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
              beamprobe:calls("bpsh_target:f/1", 5, [])],
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
