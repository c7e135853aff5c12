%%% Coexistence with other tracing tools (src/beamprobe_skip.erl), on a
%%% real VM with the real dbg (runtime_tools) and, when its source can be
%%% found, the real recon_trace and redbug compiled into the case's
%%% directory at test time (never vendored; see
%%% beamprobe_coexist_lib:load_recon/1): what dbg or recon_trace traces
%%% is left to them: both tools complete, and info/1, the summary and the
%%% shell's note list what beamprobe skipped; force => true takes it.
%%%
%%% What another tool removes or replaces under a running session, and
%%% what is not reported: beamprobe_tamper_SUITE.
-module(beamprobe_coexist_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-import(beamprobe_coexist_lib, [dbg_collector/0, traced_by_other/1,
                                load_recon/1, load_redbug/1]).

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([dbg_procs_skipped/1, dbg_pattern_left/1, listed_procs_skipped/1,
         nothing_left/1, force_takes_over/1, recon_coexists/1,
         redbug_coexists/1, shell_note/1, shell_next_to_dbg/1,
         own_guard_not_relied/1, msg_pattern_left/1, msg_pattern_shared/1,
         new_procs_of_other_no_error_report/1, narrower_pattern_kept/1,
         replaced_pattern_not_taken/1, skipped_proc_stays_skipped/1]).
%% logger handler (new_procs_of_other_no_error_report)
-export([log/2]).

-define(W, beamprobe_workload).
-define(L, beamprobe_test_lib).
-define(SH, beamprobe_shell_lib).
-define(ADD, {?W, add, 2}).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [dbg_procs_skipped, dbg_pattern_left, listed_procs_skipped,
     nothing_left, force_takes_over, recon_coexists, redbug_coexists,
     shell_note, shell_next_to_dbg, own_guard_not_relied,
     msg_pattern_left, msg_pattern_shared,
     new_procs_of_other_no_error_report, narrower_pattern_kept,
     replaced_pattern_not_taken, skipped_proc_stays_skipped].

init_per_suite(Config) ->
    beamprobe_coexist_lib:init_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    beamprobe_coexist_lib:end_case().

%%% ------------------------------------------------------------------------
%%% 1. Skipping what another tool holds
%%% ------------------------------------------------------------------------

%% dbg traces two workers (its own tracer, its own pattern on add/2);
%% beamprobe traces every other process.  Each sees exactly its own
%% processes' calls; info/1 and the summary name the skipped ones.
dbg_procs_skipped(Config) ->
    [A1, A2, B1, B2] = [?W:start_worker() || _ <- [1, 2, 3, 4]],
    Dbg = dbg_collector(),
    {ok, _} = dbg:p(A1, [c]),
    {ok, _} = dbg:p(A2, [c]),
    {ok, _} = dbg:tpl(?W, add, 2, []),
    Dir = ?L:dir(Config, "trace"),
    S = ?L:start(#{procs => all, calls => [?ADD], output => {file, Dir}}),
    {ok, I} = beamprobe:info(S),
    #{skipped := #{procs := Skipped, procs_count := N, calls := SkCalls}} = I,
    ?assert(lists:member(A1, Skipped)),
    ?assert(lists:member(A2, Skipped)),
    ?assertNot(lists:member(B1, Skipped)),
    ?assertEqual(length(Skipped), N),
    %% dbg's pattern is dbg's: left as it is, and listed.
    ?assertEqual([?ADD], SkCalls),
    ?assertEqual({match_spec, []}, erlang:trace_info(?ADD, match_spec)),
    ?assertEqual({tracer, dbg_tracer()}, erlang:trace_info(A1, tracer)),
    ?assertMatch({tracer, {beamprobe_nif, _}}, erlang:trace_info(B1, tracer)),
    [?W:run(P, fun() -> [?W:add(X, 1) || X <- lists:seq(1, K)] end)
     || {P, K} <- [{A1, 10}, {A2, 20}, {B1, 30}, {B2, 40}]],
    Sum = ?L:stop(S),
    ?assertEqual(maps:get(skipped, I), maps:get(skipped, Sum)),
    ?assertEqual([], maps:get(tampered, Sum)),
    %% dbg: exactly A1's and A2's calls.
    DbgCalls = dbg_calls(Dbg, 30),
    ?assertEqual(#{A1 => 10, A2 => 20}, DbgCalls),
    %% beamprobe: exactly B1's and B2's.
    Evs = ?L:trace(Dir),
    ?assertEqual(30, length(?L:events(Evs, "call", B1))),
    ?assertEqual(40, length(?L:events(Evs, "call", B2))),
    ?assertEqual(70, length(?L:events(Evs, "call"))),
    %% dbg still holds its processes and pattern after beamprobe stopped.
    ?assertEqual({tracer, dbg_tracer()}, erlang:trace_info(A1, tracer)),
    ?assertEqual({traced, local}, erlang:trace_info(?ADD, traced)),
    dbg:stop(),
    [?W:stop_worker(P) || P <- [A1, A2, B1, B2]].

%% A pattern of dbg on one function of a wildcard: beamprobe sets its
%% patterns on the other functions one by one and leaves dbg's match spec.
dbg_pattern_left(Config) ->
    _ = dbg_collector(),
    MS = [{['$1', '_'], [{'>', '$1', 5}], []}],
    {ok, _} = dbg:tpl(?W, add, 2, MS),
    Dir = ?L:dir(Config, "trace"),
    S = ?L:start(#{procs => all, calls => [{?W, '_', '_'}],
                   output => {file, Dir}}),
    {ok, #{skipped := #{calls := [?ADD]}}} = beamprobe:info(S),
    ?assertEqual({match_spec, MS}, erlang:trace_info(?ADD, match_spec)),
    ?assertEqual({traced, local}, erlang:trace_info({?W, tick, 1}, traced)),
    ?assertEqual({match_spec, []}, erlang:trace_info({?W, tick, 1}, match_spec)),
    B = ?W:start_worker(),
    ?W:run(B, fun() -> [?W:add(X, 1) || X <- lists:seq(1, 10)],
                       ?W:tick(1) end),
    Sum = ?L:stop(S),
    ?assertEqual([], maps:get(tampered, Sum)),
    %% dbg's match spec filtered add/2 (X > 5: 5 calls), tick/1 is ours.
    Evs = ?L:trace(Dir),
    Calls = [iolist_to_binary(?L:field(E, "mfa"))
             || E <- ?L:events(Evs, "call", B)],
    ?assertEqual(5, length([x || <<"beamprobe_workload:add/2">> <- Calls])),
    ?assertEqual(1, length([x || <<"beamprobe_workload:tick/1">> <- Calls])),
    %% Still dbg's; ours are gone.
    ?assertEqual({match_spec, MS}, erlang:trace_info(?ADD, match_spec)),
    ?assertEqual({traced, false}, erlang:trace_info({?W, tick, 1}, traced)),
    ?W:stop_worker(B).

%% The session's {W, '_', '_'} is set one function at a time around
%% add/2, which dbg holds; tick/1, which the session also names with its
%% own match spec (return_trace), keeps that one.  Before, tick/1 was set
%% again by the wildcard's expansion, after it: its match spec [] (no
%% returns) replaced the narrower pattern's, and stats showed tick/1's
%% calls open until the trace's end.
narrower_pattern_kept(Config) ->
    _ = dbg_collector(),
    {ok, _} = dbg:tpl(?W, add, 2, []),
    Dir = ?L:dir(Config, "trace"),
    RT = [{'_', [], [{return_trace}]}],
    S = ?L:start(#{procs => all, calls => [{{?W, tick, 1}, RT}, {?W, '_', '_'}],
                   output => {file, Dir}}),
    {ok, #{skipped := #{calls := [?ADD]}}} = beamprobe:info(S),
    ?assertEqual({match_spec, RT}, erlang:trace_info({?W, tick, 1}, match_spec)),
    ?assertEqual({match_spec, []}, erlang:trace_info({?W, sink, 1}, match_spec)),
    B = ?W:start_worker(),
    ?W:run(B, fun() -> [?W:tick(X) || X <- lists:seq(1, 5)], ?W:sink(1) end),
    _ = ?L:stop(S),
    Evs = ?L:trace(Dir),
    ?assertEqual(5, length([x || E <- ?L:events(Evs, "return_from", B),
                                 iolist_to_binary(?L:field(E, "mfa"))
                                     =:= <<"beamprobe_workload:tick/1">>])),
    ?W:stop_worker(B).

%% procs => [A, B] with A traced by dbg: B is traced, A skipped.
listed_procs_skipped(Config) ->
    _ = dbg_collector(),
    [A, B] = [?W:start_worker() || _ <- [1, 2]],
    {ok, _} = dbg:p(A, [c]),
    S = ?L:start(#{procs => [A, B], calls => [?ADD],
                   output => {file, ?L:dir(Config, "t")}}),
    {ok, #{skipped := #{procs := [A], procs_count := 1, calls := []}}} =
        beamprobe:info(S),
    ?assertEqual({tracer, dbg_tracer()}, erlang:trace_info(A, tracer)),
    ?assertMatch({tracer, {beamprobe_nif, _}}, erlang:trace_info(B, tracer)),
    _ = ?L:stop(S),
    ?assertEqual({tracer, dbg_tracer()}, erlang:trace_info(A, tracer)),
    [?W:stop_worker(P) || P <- [A, B]].

%% Nothing left to trace: a clear error, nothing installed.
nothing_left(Config) ->
    _ = dbg_collector(),
    A = ?W:start_worker(),
    {ok, _} = dbg:p(A, [c]),
    ?assertEqual({error, {already_traced, [A]}},
                 beamprobe:start(#{procs => [A], calls => [?ADD],
                                   output => {file, ?L:dir(Config, "a")}})),
    {ok, _} = dbg:p(new, [c]),
    ?assertEqual({error, {already_traced, [new]}},
                 beamprobe:start(#{procs => new, events => [procs],
                                   output => {file, ?L:dir(Config, "b")}})),
    %% A meta session whose every function has another meta tracer.
    Other = spawn(fun() -> receive _ -> ok end end),
    1 = erlang:trace_pattern(?ADD, true, [{meta, Other}]),
    ?assertEqual({error, {already_traced, [?ADD]}},
                 beamprobe:start(#{procs => all, meta => true,
                                   calls => [?ADD],
                                   output => {file, ?L:dir(Config, "c")}})),
    ?assertEqual({meta, Other}, erlang:trace_info(?ADD, meta)),
    ?assertEqual([], beamprobe:list()),
    exit(Other, kill),
    ?W:stop_worker(A).

%% force => true: the old take-over.
force_takes_over(Config) ->
    _ = dbg_collector(),
    A = ?W:start_worker(),
    {ok, _} = dbg:p(A, [c]),
    {ok, _} = dbg:tpl(?W, add, 2, [{'_', [], [{message, dbg}]}]),
    Dir = ?L:dir(Config, "t"),
    S = ?L:start(#{procs => [A], calls => [?ADD], force => true,
                   output => {file, Dir}}),
    {ok, #{skipped := #{procs := [], calls := []} = Sk}} = beamprobe:info(S),
    %% What it took is said, as the shell's note says it.
    ?assertEqual(#{procs => [A], procs_count => 1, calls => [?ADD]},
                 maps:get(taken, Sk)),
    Note = beamprobe_skip:skipped_note(Sk),
    ?assertMatch({match, _}, re:run(Note, "force => true took from another "
                                    "tool 1 process\\(es\\) \\(<[0-9.]+>\\) "
                                    "and the pattern\\(s\\) on "
                                    "beamprobe_workload:add/2")),
    ?assertMatch({tracer, {beamprobe_nif, _}}, erlang:trace_info(A, tracer)),
    ?assertEqual({match_spec, []}, erlang:trace_info(?ADD, match_spec)),
    ?W:run(A, fun() -> ?W:add(1, 2) end),
    _ = ?L:stop(S),
    [_] = ?L:events(?L:trace(Dir), "call", A),
    ?W:stop_worker(A).

%% A session whose only function dbg holds, with a guard of its own:
%% dbg's match spec would filter its calls (f(1) shown against `X > 100',
%% f(500) never), so it is refused (already_traced) instead of starting
%% and printing calls its own guard rejects.  Next to a function of its
%% own, the held one is left to dbg and gives it no event.
own_guard_not_relied(Config) ->
    _ = dbg_collector(),
    {ok, _} = dbg:tpl(?W, add, 2, [{['$1', '_'], [{'<', '$1', 10}], []}]),
    Guarded = [{['$1', '_'], [{'>', '$1', 100}], []}],
    Dir = ?L:dir(Config, "trace"),
    ?assertEqual({error, {already_traced, [?ADD]}},
                 beamprobe:start(#{procs => all, calls => [{?ADD, Guarded}],
                                   output => {file, Dir}})),
    S = ?L:start(#{procs => all,
                   calls => [{?ADD, Guarded}, {{?W, tick, 1}, true}],
                   output => {file, ?L:dir(Config, "t2")}}),
    B = ?W:start_worker(),
    ?W:run(B, fun() -> [?W:add(X, 1) || X <- [1, 500]], ?W:tick(1) end),
    _ = ?L:stop(S),
    Evs = ?L:trace(?L:dir(Config, "t2")),
    Calls = [iolist_to_binary(?L:field(E, "mfa"))
             || E <- ?L:events(Evs, "call", B)],
    ?assertEqual([<<"beamprobe_workload:tick/1">>], Calls),
    ?W:stop_worker(B).

%% dbg's message pattern (dbg:tpe/2: one per node and kind) is dbg's: a
%% session with a message pattern of its own is refused without force
%% (it used to replace dbg's silently, and leave `true', every send, to
%% dbg afterwards); with force it is taken and given back at the end.
msg_pattern_left(Config) ->
    _ = dbg_collector(),
    DbgMS = [{['_', {dbg_only, '_'}], [], []}],
    {ok, _} = dbg:tpe(send, DbgMS),
    Mine = [{['_', {ping, '_'}], [], []}],
    Spec = #{procs => all, events => [send], messages => [{send, Mine}],
             output => {file, ?L:dir(Config, "t")}},
    ?assertEqual({error, {message_pattern_taken, send, DbgMS}},
                 beamprobe:start(Spec)),
    ?assertEqual({match_spec, DbgMS}, erlang:trace_info(send, match_spec)),
    ?assertEqual([], beamprobe:list()),
    S = ?L:start(Spec#{force => true, output => {file, ?L:dir(Config, "f")}}),
    ?assertEqual({match_spec, Mine}, erlang:trace_info(send, match_spec)),
    _ = ?L:stop(S),
    ?assertEqual({match_spec, DbgMS}, erlang:trace_info(send, match_spec)),
    dbg:stop(),
    erlang:trace_pattern(send, true, []).

%% A message pattern of a session's own is the node's: it would filter
%% the messages dbg traces too.  Refused while dbg traces that kind of
%% message on a process (it used to cut dbg's receive events down to the
%% session's pattern), set with force.
msg_pattern_shared(Config) ->
    _ = dbg_collector(),
    D = ?W:start_worker(),
    {ok, _} = dbg:p(D, [m]),
    Mine = [{['_', '_', {ping, '_'}], [], []}],
    Spec = #{procs => all, events => ['receive'],
             messages => [{'receive', Mine}],
             output => {file, ?L:dir(Config, "t")}},
    ?assertEqual({error, {message_pattern_shared, 'receive', D}},
                 beamprobe:start(Spec)),
    ?assertEqual({match_spec, true}, erlang:trace_info('receive', match_spec)),
    ?assertEqual([], beamprobe:list()),
    %% Every message (`true') filters nothing of dbg's.
    S1 = ?L:start(Spec#{messages => [{'receive', true}],
                        output => {file, ?L:dir(Config, "a")}}),
    _ = ?L:stop(S1),
    S = ?L:start(Spec#{force => true, output => {file, ?L:dir(Config, "f")}}),
    ?assertEqual({match_spec, Mine}, erlang:trace_info('receive', match_spec)),
    _ = ?L:stop(S),
    dbg:stop(),
    erlang:trace_pattern('receive', true, []),
    ?W:stop_worker(D).

%%% ------------------------------------------------------------------------
%%% Next to the real tools and in the shell
%%% ------------------------------------------------------------------------

%% recon_trace on one process with its own pattern; beamprobe on the
%% others: both see exactly their own calls.
recon_coexists(Config) ->
    case load_recon(Config) of
        {skip, _} = Skip -> Skip;
        ok ->
            [A, B] = [?W:start_worker() || _ <- [1, 2]],
            Io = ?SH:cap(),
            1 = recon_trace:calls({?W, add, '_'}, 100,
                                  [{pid, A}, {io_server, Io}]),
            Dir = ?L:dir(Config, "trace"),
            S = ?L:start(#{procs => all, calls => [?ADD],
                           output => {file, Dir}}),
            {ok, #{skipped := #{procs := Sk, calls := SkC}}} =
                beamprobe:info(S),
            ?assert(lists:member(A, Sk)),
            ?assertEqual([?ADD], SkC),
            ?W:run(A, fun() -> [?W:add(X, 1) || X <- lists:seq(1, 7)] end),
            ?W:run(B, fun() -> [?W:add(X, 1) || X <- lists:seq(1, 9)] end),
            Sum = ?L:stop(S),
            ?assertEqual([], maps:get(tampered, Sum)),
            ?assertEqual(9, length(?L:events(?L:trace(Dir), "call", B))),
            ?assertEqual(0, length(?L:events(?L:trace(Dir), "call", A))),
            %% recon printed A's 7 calls (one "beamprobe_workload:add(" each).
            _ = ?L:wait_until(
                   fun() -> count(?SH:cap_text(Io),
                                  <<"beamprobe_workload:add(">>) >= 7 end,
                   5000),
            ?assertEqual(7, count(?SH:cap_text(Io),
                                  <<"beamprobe_workload:add(">>)),
            recon_trace:clear(),
            [?W:stop_worker(P) || P <- [A, B]]
    end.

%% redbug (compiled from its source) on one process; beamprobe on the
%% others.
redbug_coexists(Config) ->
    case load_redbug(Config) of
        {skip, _} = Skip -> Skip;
        ok ->
            [A, B] = [?W:start_worker() || _ <- [1, 2]],
            Self = self(),
            _ = redbug:start("beamprobe_workload:add/2",
                                  [{procs, [A]}, {msgs, 100}, {time, 20000},
                                   {print_fun, fun(M) -> Self ! {rb, M} end}]),
            _ = ?L:wait_until(fun() -> traced_by_other(A) end, 5000),
            Dir = ?L:dir(Config, "trace"),
            S = ?L:start(#{procs => all, calls => [?ADD],
                           output => {file, Dir}}),
            {ok, #{skipped := #{procs := Sk}}} = beamprobe:info(S),
            ?assert(lists:member(A, Sk)),
            ?W:run(A, fun() -> [?W:add(X, 1) || X <- lists:seq(1, 4)] end),
            ?W:run(B, fun() -> [?W:add(X, 1) || X <- lists:seq(1, 6)] end),
            Sum = ?L:stop(S),
            ?assertEqual([], maps:get(tampered, Sum)),
            ?assertEqual(6, length(?L:events(?L:trace(Dir), "call", B))),
            ?assertEqual(0, length(?L:events(?L:trace(Dir), "call", A))),
            redbug:stop(),
            Got = collect_rb([]),
            ct:log("redbug printed ~p", [Got]),
            ?assertEqual(4, length([M || M <- Got, is_call_line(M)])),
            [?W:stop_worker(P) || P <- [A, B]]
    end.

%% The shell: beamprobe:calls/2 prints a one-line note naming what it
%% skipped; a wiped pattern prints a line.
shell_note(_Config) ->
    T = ?SH:load_src(?SH:target_src()),
    Io = ?SH:cap(),
    Other = spawn(fun() -> receive _ -> ok end end),
    1 = erlang:trace_pattern({T, f, 1}, true, [{meta, Other}]),
    N = beamprobe:calls(["bpsh_target:add/2", "bpsh_target:f/1"], 100,
                        #{io_server => Io}),
    ct:log("calls -> ~p", [N]),
    ?assert(is_integer(N)),
    _ = ?L:wait_until(fun() -> binary:match(?SH:cap_text(Io),
                                             <<"skipped">>) =/= nomatch
                       end, 2000),
    Text = ?SH:cap_text(Io),
    ct:log("~ts", [Text]),
    ?assertNotEqual(nomatch, binary:match(Text, <<"bpsh_target:f/1">>)),
    ?assertEqual({meta, Other}, erlang:trace_info({T, f, 1}, meta)),
    erlang:trace_pattern({T, add, 2}, false, [meta]),
    _ = ?L:wait_until(fun() -> binary:match(?SH:cap_text(Io),
                                             <<"another tool removed the "
                                               "pattern on bpsh_target:add/2">>)
                                    =/= nomatch
                       end, 2000),
    beamprobe:clear(),
    exit(Other, kill).

%% The shell's meta patterns and dbg's local pattern (dbg:p(all, [c])) on
%% the same function are separate breakpoints: nothing skipped, both
%% complete.
shell_next_to_dbg(_Config) ->
    T = ?SH:load_src(?SH:target_src()),
    Io = ?SH:cap(),
    _ = dbg_collector(),
    {ok, _} = dbg:p(all, [c]),
    {ok, _} = dbg:tpl(T, f, 1, []),
    1 = beamprobe:calls("bpsh_target:f/1", 5, #{io_server => Io}),
    W = spawn(fun() -> T:loop(f, 1, 5) end),
    _ = ?L:wait_until(fun() -> count(?SH:cap_text(Io), <<"call bpsh_target:f(">>)
                                   >= 5 end, 3000),
    #{W := 5} = dbg_calls(x, 5),
    Text = ?SH:cap_text(Io),
    ct:log("~ts", [Text]),
    ?assertEqual(nomatch, binary:match(Text, <<"skipped">>)),
    ?assertEqual(nomatch, binary:match(Text, <<"another tool">>)),
    beamprobe:clear().

%% Another tool traces new processes (recon_trace:calls/3 and dbg:p(all,
%% c) do): the session and printer processes a shell trace spawns start
%% traced by it.  Each dropped its flags naming beamprobe's tracer, which
%% the VM refuses for a process another tracer holds, and logs: two
%% "can only have one tracer per process" error reports on the node at
%% every beamprobe:calls/2 next to recon_trace (found running one beside
%% the other).  Now nothing is logged, and the other tool keeps what it
%% holds.
new_procs_of_other_no_error_report(_Config) ->
    T = ?SH:load_src(?SH:target_src()),
    Io = ?SH:cap(),
    _ = dbg_collector(),
    {ok, _} = dbg:p(new, [c]),
    ok = logger:add_handler(bp_coexist_capture, ?MODULE,
                            #{config => #{pid => self()}}),
    try
        1 = beamprobe:calls({T, f, 1}, 5, #{io_server => Io}),
        ok = T:loop(f, 1, 5),
        _ = ?L:wait_until(fun() -> count(?SH:cap_text(Io),
                                         <<"call bpsh_target:f(">>) >= 5
                          end, 3000),
        ok = beamprobe:clear(),
        %% (a report is sent from the VM at once; a second later it has
        %% been handled)
        timer:sleep(1000),
        Reports = flush_logged([]),
        ct:log("logged: ~p", [Reports]),
        ?assertEqual([], [R || R <- Reports,
                               string:find(R, "one tracer") =/= nomatch]),
        %% dbg's default for new processes is still dbg's.
        {ok, DbgTracer} = dbg:get_tracer(),
        P = spawn(fun() -> receive stop -> ok end end),
        ?assertEqual({tracer, DbgTracer}, erlang:trace_info(P, tracer)),
        P ! stop
    after
        logger:remove_handler(bp_coexist_capture)
    end.

%% logger handler: every event to the test process, as text.
log(#{msg := Msg}, #{config := #{pid := Pid}}) ->
    Text = case Msg of
               {string, S} -> S;
               {report, R} -> io_lib:format("~tp", [R]);
               {F, A} -> io_lib:format(F, A)
           end,
    Pid ! {bp_logged, lists:flatten(io_lib:format("~ts", [Text]))}.

flush_logged(Acc) ->
    receive {bp_logged, T} -> flush_logged([T | Acc])
    after 0 -> lists:reverse(Acc)
    end.

%% Two sessions trace add/2, then dbg replaces their pattern with its own
%% (both report it): a session that starts afterwards on add/2 takes
%% dbg's pattern no more than if no session had been there -- refused
%% with nothing else to trace, skipped (and listed) under a wildcard,
%% relied on when it asks for every call -- and dbg keeps its pattern
%% after every session stopped.  Before, another session claiming add/2
%% made its pattern beamprobe's: the new session set its own match spec
%% over dbg's and the last stop removed add/2's pattern altogether.
replaced_pattern_not_taken(Config) ->
    DbgMS = [{'_', [], [{return_trace}]}],
    Own = fun(N) -> [{[N, '_'], [], []}] end,
    Start = fun(Name, Spec) -> ?L:start(Spec#{output => {file, ?L:dir(Config, Name)}}) end,
    S1 = Start("s1", #{calls => [{?ADD, Own(1)}]}),
    S2 = Start("s2", #{calls => [?ADD]}),
    _ = dbg_collector(),
    {ok, _} = dbg:tpl(?W, add, 2, DbgMS),
    Tampered = fun(S) -> {ok, #{tampered := T}} = beamprobe:info(S), T =/= [] end,
    _ = ?L:wait_until(fun() -> Tampered(S1) andalso Tampered(S2) end, 5000),
    ?assertEqual({error, {already_traced, [?ADD]}},
                 beamprobe:start(#{calls => [{?ADD, Own(2)}],
                                   output => {file, ?L:dir(Config, "s3")}})),
    ?assertEqual({match_spec, DbgMS}, erlang:trace_info(?ADD, match_spec)),
    S4 = Start("s4", #{calls => [{?W, '_', '_'}]}),
    {ok, #{skipped := #{calls := Sk4}}} = beamprobe:info(S4),
    ?assertEqual([?ADD], Sk4),
    S5 = Start("s5", #{calls => [?ADD]}),
    {ok, #{skipped := #{calls := Sk5, relied := R5}}} = beamprobe:info(S5),
    ?assertEqual({[?ADD], [?ADD]}, {Sk5, R5}),
    ?assertEqual({match_spec, DbgMS}, erlang:trace_info(?ADD, match_spec)),
    ?assertEqual({match_spec, []}, erlang:trace_info({?W, tick, 1}, match_spec)),
    _ = [?L:stop(S) || S <- [S4, S5, S1, S2]],
    ?assertEqual({match_spec, DbgMS}, erlang:trace_info(?ADD, match_spec)),
    ?assertEqual({traced, false}, erlang:trace_info({?W, tick, 1}, traced)),
    {ok, _} = dbg:p(self(), [c]),
    3 = ?W:add(1, 2),
    ?assertEqual(#{self() => 1}, dbg_calls(x, 1)).

%% A session on every process skips the one dbg traces (and says so);
%% dbg lets it go and a second session traces it: the first still records
%% nothing of it, as alone.  Before, the first recorded its calls (the
%% second session's flags, routed to every `all' member) but not its
%% sends, which it had asked for too: part of a process it said it
%% skipped.
skipped_proc_stays_skipped(Config) ->
    [A, B] = [?W:start_worker() || _ <- [1, 2]],
    _ = dbg_collector(),
    {ok, _} = dbg:p(A, [c]),
    D1 = ?L:dir(Config, "all"),
    D2 = ?L:dir(Config, "list"),
    S1 = ?L:start(#{calls => [{?W, tick, 1}], events => [send],
                    output => {file, D1}}),
    {ok, #{skipped := #{procs := Sk}}} = beamprobe:info(S1),
    ?assert(lists:member(A, Sk)),
    dbg:stop(),
    ?assertEqual({flags, []}, erlang:trace_info(A, flags)),
    S2 = ?L:start(#{procs => [A], calls => [{?W, tick, 1}],
                    output => {file, D2}}),
    [?W:run(P, fun() -> ?W:tick(1) end) || P <- [A, B]],
    _ = [?L:stop(S) || S <- [S1, S2]],
    E1 = ?L:trace(D1),
    Of = fun(Name, P) -> try ?L:events(E1, Name, P)
                         catch error:{no_process_event, _} -> []
                         end
         end,
    ?assertEqual({[], []}, {Of("call", A), Of("send", A)}),
    ?assertEqual(1, length(Of("send", B))),
    ?assertEqual(1, length(?L:events(E1, "call", B))),
    ?assertEqual(1, length(?L:events(?L:trace(D2), "call", A))),
    [?W:stop_worker(P) || P <- [A, B]].

%%% ------------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------------

count(Bin, Pat) -> length(binary:matches(Bin, Pat)).

dbg_tracer() ->
    {ok, T} = dbg:get_tracer(),
    T.

%% Waits for N call messages (at most 5 s), then counts per process.
dbg_calls(_, N) ->
    dbg_calls(N, #{}, erlang:monotonic_time(millisecond) + 5000).

dbg_calls(0, Acc, _) -> Acc;
dbg_calls(N, Acc, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {dbg_call, P} -> dbg_calls(N - 1, maps:update_with(P, fun(X) -> X + 1 end,
                                                           1, Acc), Deadline)
    after Left -> Acc
    end.

collect_rb(Acc) ->
    receive {rb, M} -> collect_rb([M | Acc])
    after 500 -> lists:reverse(Acc)
    end.

is_call_line({call, {{?W, add, _}, _}, _, _}) -> true;
is_call_line(_) -> false.
