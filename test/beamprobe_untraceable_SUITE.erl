%%% @doc What a session is told, and tells, about what it cannot see:
%%% listed processes no trace can see (`sensitive' ones: beamprobe's own,
%%% another session's handlers), losses a handler sink is told (the
%%% session's, not only of the events it receives: `session_wide'), and
%%% sessions of annotations only (`events => [annotation]').
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_untraceable_SUITE -logdir _build/ct_logs
-module(beamprobe_untraceable_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([sensitive_refused/1, handler_of_other_session_refused/1,
         registered_sensitive_refused/1, untraceable_listed/1,
         sensitive_and_dbg_refused/1, self_and_dead/1, shell_calls_sensitive/1, large_terms_not_printed/1,
         handler_losses_session_wide/1, annotations_only/1,
         annotations_only_all/1]).
%% Spawned by MFA.
-export([seq_loop/1, hold/2]).

-define(L, beamprobe_test_lib).
-define(H, beamprobe_test_handler).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [sensitive_refused, handler_of_other_session_refused,
     registered_sensitive_refused, untraceable_listed,
     sensitive_and_dbg_refused, self_and_dead,
     shell_calls_sensitive, large_terms_not_printed,
     handler_losses_session_wide, annotations_only,
     annotations_only_all].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, ?H} = code:ensure_loaded(?H),
    Config.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    _ = beamprobe:clear(),
    ?L:clear_trace_state().

%%% ------------------------------------------------------------------------
%%% Untraceable processes
%%% ------------------------------------------------------------------------

%% A process made sensitive as beamprobe's own are (beamprobe_own:
%% sensitive/0: process_flag/2 and its mark), waiting.  (A process made
%% sensitive by anyone else is not recognised: no BIF tells, and the one
%% sign costs printing its stack; see large_terms_not_printed.)
sensitive_proc() ->
    Parent = self(),
    P = spawn_link(fun() ->
                           ok = beamprobe_own:sensitive(),
                           Parent ! {sensitive, self()},
                           seq_loop(0)
                   end),
    receive {sensitive, P} -> P end.

%% Calls lists:seq/2 when told; stops on `stop'.
seq_loop(N) ->
    receive
        {seq, From, K} ->
            _ = [lists:seq(1, I rem 3) || I <- lists:seq(1, K)],
            From ! {seq_done, self()},
            seq_loop(N + K);
        stop -> ok
    end.

seq(P, K) ->
    P ! {seq, self(), K},
    receive {seq_done, P} -> ok after 10000 -> ct:fail({no_seq, P}) end.

%% Every listed process sensitive: refused, naming each with the reason
%% (before: {ok, S}, and the session recorded nothing of it).
sensitive_refused(Config) ->
    P = sensitive_proc(),
    Spec = #{procs => [P], calls => [{lists, seq, 2}],
             output => {file, ?L:dir(Config, "t")}},
    ?assertEqual({error, {untraceable, [{P, sensitive}]}},
                 beamprobe:start(Spec)),
    {error, R} = beamprobe:start(Spec),
    Text = beamprobe:format_error(R),
    ?assertNotEqual(nomatch, string:find(Text, "sensitive")),
    %% force cannot trace it either.
    ?assertEqual({error, {untraceable, [{P, sensitive}]}},
                 beamprobe:start(Spec#{force => true})),
    ?assertEqual([], beamprobe:list()),
    P ! stop.

%% Another session's handler process: beamprobe's own, sensitive.
handler_of_other_session_refused(Config) ->
    S1 = ?L:start(#{procs => [self()], calls => [{lists, seq, 2}],
                    output => {handler, ?H, #{parent => self()}}}),
    H = receive {handler_init, Pid} -> Pid after 5000 -> ct:fail(no_init) end,
    ?assertEqual({error, {untraceable, [{H, sensitive}]}},
                 beamprobe:start(#{procs => [H], calls => [{lists, seq, 2}],
                                   output => {file, ?L:dir(Config, "t")}})),
    _ = ?L:stop(S1).

%% A registered name of a sensitive process (the janitor).
registered_sensitive_refused(Config) ->
    J = whereis(beamprobe_janitor),
    ?assert(is_pid(J)),
    ?assertEqual({error, {untraceable, [{J, sensitive}]}},
                 beamprobe:start(#{procs => [beamprobe_janitor],
                                   events => [send],
                                   output => {file, ?L:dir(Config, "t")}})).

%% One listed process sensitive, the other traced by dbg: nothing left
%% to trace, for two reasons.  The error named only the dbg-traced one
%% ({already_traced, [D]}: as if the sensitive one could be traced, and
%% force => true then started a session that recorded nothing of it);
%% now each with its reason, the message naming both.
sensitive_and_dbg_refused(Config) ->
    P = sensitive_proc(),
    D = spawn_link(?MODULE, seq_loop, [0]),
    Me = self(),
    {ok, _} = dbg:tracer(process, {fun(M, N) -> Me ! {dbg, M}, N + 1 end,
                                   0}),
    try
        {ok, _} = dbg:p(D, [c]),
        Spec = #{procs => [P, D], calls => [{lists, seq, 2}],
                 output => {file, ?L:dir(Config, "t")}},
        R = beamprobe:start(Spec),
        ?assertEqual({error, {untraceable, [{P, sensitive},
                                            {D, already_traced}]}}, R),
        {error, Why} = R,
        Text = beamprobe:format_error(Why),
        ct:log("~ts", [Text]),
        [?assertNotEqual({nomatch, Part}, {string:find(Text, Part), Part})
         || Part <- ["[" ++ pid_to_list(P) ++ "] is sensitive",
                     "[" ++ pid_to_list(D) ++ "] is traced by another tracer",
                     "force => true"]],
        ?assertEqual([], beamprobe:list()),
        %% force takes the dbg-traced one: the session starts, the
        %% sensitive one listed as skipped.
        {ok, S} = beamprobe:start(Spec#{force => true}),
        {ok, #{skipped := #{untraceable := [{P, sensitive}]}}} =
            beamprobe:info(S),
        _ = ?L:stop(S)
    after
        dbg:stop(),
        unlink(D),
        exit(D, kill),
        P ! stop
    end.

%% Some listed processes untraceable: the others are traced, and info/1
%% and the summary list the untraceable ones with the reason.
untraceable_listed(_Config) ->
    P = sensitive_proc(),
    Q = spawn_link(?MODULE, seq_loop, [0]),
    S = ?L:start(#{procs => [P, Q], calls => [{lists, seq, 2}],
                   output => {handler, ?H, #{parent => self()}}}),
    {ok, #{skipped := Sk}} = beamprobe:info(S),
    ?assertMatch(#{untraceable := [{P, sensitive}], procs_count := 0}, Sk),
    ok = seq(P, 10),
    ok = seq(Q, 10),
    Sum = ?L:stop(S),
    ?assertMatch(#{skipped := #{untraceable := [{P, sensitive}]}}, Sum),
    %% Q's 11 calls (the comprehension's own lists:seq/2 too), none of P.
    ?assertEqual([{Q, 11}], calls_by_pid(handler_all())),
    %% The shell's one line says so.
    Line = beamprobe_skip:skipped_note(maps:get(skipped, Sum)),
    ?assertNotEqual(nomatch, string:find(Line, "sensitive")),
    P ! stop, Q ! stop.

%% self() (not sensitive) is traced and nothing is listed; a dead pid is
%% refused as before.
self_and_dead(Config) ->
    S = ?L:start(#{procs => [self()], calls => [{lists, seq, 2}],
                   output => {handler, ?H, #{parent => self()}}}),
    {ok, #{skipped := Sk}} = beamprobe:info(S),
    ?assertMatch(#{untraceable := []}, Sk),
    _ = lists:seq(1, 2),
    _ = ?L:stop(S),
    ?assertEqual([{self(), 1}], calls_by_pid(handler_all())),
    D = ?L:dead_pid(),
    ?assertEqual({error, {dead_process, D}},
                 beamprobe:start(#{procs => [D], calls => [{lists, seq, 2}],
                                   output => {file, ?L:dir(Config, "d")}})).

%% The shell API with the pid of a sensitive process: the same error.
shell_calls_sensitive(_Config) ->
    P = sensitive_proc(),
    Cap = beamprobe_shell_lib:cap(),
    ?assertEqual({error, {untraceable, [{P, sensitive}]}},
                 beamprobe:calls({lists, seq, 2}, 10,
                                 #{procs => P, io_server => Cap})),
    ?assertEqual({error, {untraceable, [{P, sensitive}]}},
                 beamprobe:calls("lists:seq/2", [{pid, P}, {msgs, 10},
                                                 {io_server, Cap}])),
    ?assertEqual([], beamprobe:list()),
    P ! stop.

%% Holds T in its stack (2 words) until told to stop.
hold(Parent, T) ->
    Parent ! {holding, self()},
    receive stop -> ok end,
    erlang:phash2(T).

%% A process with a small stack holding a large term: nothing of it is
%% read to tell whether it is sensitive.  That was told by reading its
%% backtrace, which prints every term on the stack in one go: a bignum
%% in decimal (quadratic: 2^1,000,000 took 4.2 s, 2^2,000,000 ~17 s of
%% a scheduler, no yield), a binary scanned whole; start/1 took that
%% long.  Bounding the heap first still let a literal through (outside
%% the heap: the compiled constant below, 20 s).  Now only beamprobe's
%% own marks are looked up.  A non-sensitive process is traced as before.
large_terms_not_printed(_Config) ->
    [large_term_not_printed(Big)
     || Big <- [1 bsl (erlang:system_info(wordsize) * 250000),
                1 bsl 2000000]].    % (a literal: folded by the compiler)

large_term_not_printed(Big) ->
    P = spawn_link(?MODULE, hold, [self(), Big]),
    receive {holding, P} -> ok end,
    {stack_size, St} = process_info(P, stack_size),
    ?assert(St =< 32),
    {T, S} = timer:tc(fun() ->
                              ?L:start(#{procs => [P],
                                         calls => [{lists, seq, 2}],
                                         output => {handler, ?H,
                                                    #{parent => self()}}})
                      end),
    ct:log("start/1 took ~b ms", [T div 1000]),
    {ok, #{skipped := #{untraceable := []}}} = beamprobe:info(S),
    _ = ?L:stop(S),
    ?assert(T < 5000000),
    P ! stop.

%%% ------------------------------------------------------------------------
%%% Losses told to a handler
%%% ------------------------------------------------------------------------

%% The losses at the source (here the rate limit's, of call events) are
%% counted per cause, before the event's kind is known: a handler that
%% receives only `send' events is told them as the session's
%% (`session_wide'), not as its own.
handler_losses_session_wide(_Config) ->
    Q = spawn_link(?MODULE, seq_loop, [0]),
    S = ?L:start(#{procs => [Q], calls => [{lists, seq, 2}],
                   events => [send], limits => #{rate => {1, 60000}},
                   output => [{handler, ?H, #{parent => self()},
                               #{events => [send]}}]}),
    ok = seq(Q, 100),
    Sum = ?L:stop(S),
    Rate = ?L:dropped(Sum, rate),
    ?assert(Rate >= 99),
    Drops = handler_drops(),
    ct:log("dropped maps: ~p", [Drops]),
    ?assertNotEqual([], Drops),
    Told = lists:sum([N || #{count := N} <- Drops]),
    ?assertEqual(Rate, Told),
    [?assertEqual(maps:get(count, D) - maps:get(slow_output, D, 0),
                  maps:get(session_wide, D, 0)) || D <- Drops],
    Q ! stop.

%% The `dropped' maps the test handler forwarded until it ended.
handler_drops() ->
    receive
        {handler_events, _, Evs} ->
            [E || #{event := dropped} = E <- Evs] ++ handler_drops();
        {handler_done, _, _, _} -> []
    after 10000 -> ct:fail(handler_not_done)
    end.

%%% ------------------------------------------------------------------------
%%% Sessions of annotations only
%%% ------------------------------------------------------------------------

%% events => [annotation] alone: the session starts, sets no trace flag
%% and records the annotations of its processes (before: refused, bad
%% option).
annotations_only(_Config) ->
    S = ?L:start(#{procs => [self()], events => [annotation],
                   output => {handler, ?H, #{parent => self()}}}),
    ?assertEqual({flags, []}, erlang:trace_info(self(), flags)),
    ok = beamprobe:annotate(checkpoint, 42),
    _ = lists:seq(1, 3),
    _ = ?L:stop(S),
    Evs = handler_all(),
    Me = self(),
    ?assertMatch([#{event := annotation, pid := Me, tag := <<"checkpoint">>,
                    value := <<"42">>}],
                 [E || #{event := annotation} = E <- Evs]),
    ?assertEqual([], [E || #{event := call} = E <- Evs]).

%% procs => all (the default): every process's annotations, no flag set
%% anywhere.
annotations_only_all(_Config) ->
    S = ?L:start(#{events => [annotation],
                   output => {handler, ?H, #{parent => self()}}}),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    ?assertEqual({flags, []}, erlang:trace_info(self(), flags)),
    Parent = self(),
    P = spawn_link(fun() -> beamprobe:annotate(other),
                            Parent ! {annotated, self()} end),
    receive {annotated, P} -> ok end,
    ok = beamprobe:annotate(mine),
    _ = ?L:stop(S),
    Anns = [{Pid, T} || #{event := annotation, pid := Pid, value := T}
                            <- handler_all()],
    ?assertEqual(lists:sort([{P, <<"other">>}, {self(), <<"mine">>}]),
                 lists:sort(Anns)).

calls_by_pid(Evs) ->
    lists:sort(maps:to_list(
                 lists:foldl(fun(#{event := call, pid := P}, M) ->
                                     maps:update_with(P, fun(N) -> N + 1 end,
                                                      1, M);
                                (_, M) -> M
                             end, #{}, Evs))).

handler_all() ->
    receive
        {handler_events, _, Evs} -> Evs ++ handler_all();
        {handler_done, _, _, _} -> []
    after 10000 -> ct:fail(handler_not_done)
    end.
