%%% Coexistence with other tracing tools (src/beamprobe_watch.erl), on a
%%% real VM with the real dbg (runtime_tools) and, when its source can be
%%% found, the real recon_trace and redbug compiled into the case's
%%% directory at test time (never vendored; see recon_src/0):
%%%
%%% - what dbg or recon_trace traces is left to them: both tools complete,
%%%   and info/1 and the summary list what beamprobe skipped;
%%% - what another tool removes or replaces under a running session
%%%   (dbg:ctp/1, erlang:trace_pattern(MFA, false, [local]), another match
%%%   spec or meta tracer, erlang:trace(P, false, [all]), dbg:p(P, clear),
%%%   recon_trace:calls/2, erlang:trace(all, false, [all])) is reported
%%%   within a second in info/1, as a `tampered' event in the trace (read
%%%   back with babeltrace2 and `bin/beamprobe print') and on the shell
%%%   printer;
%%% - nothing is reported on a normal stop, on a second beamprobe session
%%%   starting and stopping (on other or the same functions) or on a
%%%   reload of the NIF.
-module(beamprobe_coexist_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([dbg_procs_skipped/1, dbg_pattern_left/1, listed_procs_skipped/1,
         nothing_left/1, force_takes_over/1,
         ctp_reported/1, trace_pattern_false_reported/1,
         ms_replaced_reported/1, meta_replaced_reported/1,
         flags_removed_reported/1, dbg_clear_reported/1,
         all_cleared_reported/1, recon_wipe_reported/1,
         recon_coexists/1, redbug_coexists/1, reinstall_option/1,
         no_report_on_stop/1, no_report_second_session/1,
         no_report_same_function/1, no_report_on_reload/1,
         shell_note/1, watchdog_not_traced/1, tampered_nif_args/1,
         relied_pattern_removed/1, shell_next_to_dbg/1,
         redbug_wipe_reported/1, idle_not_running/1,
         own_guard_not_relied/1, msg_pattern_left/1,
         msg_pattern_replaced_reported/1]).

-define(W, beamprobe_workload).
-define(L, beamprobe_test_lib).
-define(SH, beamprobe_shell_lib).
-define(ADD, {?W, add, 2}).
-define(WITHIN_MS, 1000).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [dbg_procs_skipped, dbg_pattern_left, listed_procs_skipped,
     nothing_left, force_takes_over,
     ctp_reported, trace_pattern_false_reported, ms_replaced_reported,
     meta_replaced_reported, flags_removed_reported, dbg_clear_reported,
     all_cleared_reported, recon_wipe_reported, recon_coexists,
     redbug_coexists, reinstall_option,
     no_report_on_stop, no_report_second_session, no_report_same_function,
     no_report_on_reload, shell_note, watchdog_not_traced,
     tampered_nif_args, relied_pattern_removed, shell_next_to_dbg,
     redbug_wipe_reported, idle_not_running, own_guard_not_relied,
     msg_pattern_left, msg_pattern_replaced_reported].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, ?W} = code:ensure_loaded(?W),
    {ok, _} = application:ensure_all_started(runtime_tools),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    catch dbg:stop(),
    catch recon_trace:clear(),
    catch redbug:stop(),
    erlang:trace_pattern({'_', '_', '_'}, false, [meta]),
    ?L:clear_trace_state().

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
    Note = beamprobe_watch:skipped_note(Sk),
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

%%% ------------------------------------------------------------------------
%%% 2. Reporting what another tool removes or replaces
%%% ------------------------------------------------------------------------

%% dbg:ctp/1 removes beamprobe's pattern: info/1 within a second, the
%% trace (babeltrace2 and bin/beamprobe print) and the printer say so.
ctp_reported(Config) ->
    reported(Config, #{calls => [?ADD]},
             fun() -> _ = dbg_collector(),
                      {ok, [{matched, _, 1}]} = dbg:ctp(?W, add, 2)
             end,
             {pattern, ?ADD, removed}).

trace_pattern_false_reported(Config) ->
    reported(Config, #{calls => [{?W, '_', '_'}]},
             fun() -> erlang:trace_pattern({?W, tick, 1}, false, [local]) end,
             {pattern, {?W, tick, 1}, removed}).

%% Another match spec (dbg:tpl on beamprobe's function).
ms_replaced_reported(Config) ->
    reported(Config, #{calls => [?ADD]},
             fun() -> _ = dbg_collector(),
                      {ok, _} = dbg:tpl(?W, add, 2, [{'_', [], [{return_trace}]}])
             end,
             {pattern, ?ADD, replaced}).

%% Another meta tracer on a meta session's function.
meta_replaced_reported(Config) ->
    Other = spawn(fun() -> receive _ -> ok end end),
    reported(Config, #{calls => [?ADD], meta => true},
             fun() -> erlang:trace_pattern(?ADD, true, [{meta, Other}]) end,
             {pattern, ?ADD, replaced}),
    exit(Other, kill).

%% erlang:trace(P, false, [all]) on a listed process.
flags_removed_reported(Config) ->
    P = ?W:start_worker(),
    reported(Config, #{calls => [?ADD], procs => [P]},
             fun() -> 1 = erlang:trace(P, false, [all]) end,
             {procs, P, removed}),
    ?W:stop_worker(P).

%% dbg:p(P, clear) cannot touch a process another tracer holds (OTP 25:
%% dbg passes its tracer, the VM refuses): nothing to report.  The flags
%% cleared by hand and dbg:p(P, [c]) then: replaced by dbg.
dbg_clear_reported(Config) ->
    P = ?W:start_worker(),
    _ = dbg_collector(),
    S = ?L:start(#{procs => [P], calls => [?ADD],
                   output => {file, ?L:dir(Config, "a")}}),
    {ok, _} = dbg:p(P, clear),
    ?assertMatch({tracer, {beamprobe_nif, _}}, erlang:trace_info(P, tracer)),
    timer:sleep(1200),
    ?assertEqual([], tampered(S)),
    _ = ?L:stop(S),
    dbg:stop(),
    reported(Config, #{calls => [?ADD], procs => [P]},
             fun() -> _ = dbg_collector(),
                      1 = erlang:trace(P, false, [all]),
                      {ok, [{matched, _, 1}]} = dbg:p(P, [c])
             end,
             {procs, P, '_'}),
    ?W:stop_worker(P).

%% Every process and `new' cleared, as erlang:trace(all, false, [all])
%% does (done one process at a time: that one pass can crash OTP 25.2
%% while a process runs on a dirty scheduler, src/beamprobe_each.erl),
%% under procs => all: one report for the many processes.
all_cleared_reported(Config) ->
    reported(Config, #{calls => [?ADD], procs => all},
             fun() -> beamprobe_each:trace(all, false, [all]) end,
             {procs, new, removed}),
    %% (reported/4 stopped the session; its summary is logged.)
    ok.

%% recon_trace:calls/2 (compiled from its source) wipes every pattern and
%% flag of the node: reported.
recon_wipe_reported(Config) ->
    case load_recon(Config) of
        {skip, _} = Skip -> Skip;
        ok ->
            Io = ?SH:cap(),
            reported(Config, #{calls => [?ADD], procs => all},
                     fun() -> 1 = recon_trace:calls({?W, tick, 1}, 10,
                                                    [{io_server, Io}])
                     end,
                     {pattern, ?ADD, removed})
    end.

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

%% A pattern of dbg the session skipped and used: dbg changing its match
%% spec is dbg's business (not reported); dbg:ctp removing it is reported
%% (the session gets no more calls from it).
relied_pattern_removed(Config) ->
    _ = dbg_collector(),
    {ok, _} = dbg:tpl(?W, add, 2, []),
    reported(Config, #{calls => [?ADD]},
             fun() ->
                     {ok, _} = dbg:tpl(?W, add, 2, [{'_', [], [{message, x}]}]),
                     timer:sleep(1200),
                     %% Nothing yet: the change was dbg's own pattern.
                     [] = tampered(the_session()),
                     {ok, [{matched, _, 1}]} = dbg:ctp(?W, add, 2)
             end,
             {pattern, ?ADD, removed}).

the_session() ->
    [S] = beamprobe:list(),
    S.

%% redbug's start clears every local pattern of the node (and its stop
%% every process's flags): reported.
redbug_wipe_reported(Config) ->
    case load_redbug(Config) of
        {skip, _} = Skip -> Skip;
        ok ->
            Q = ?W:start_worker(),
            Self = self(),
            reported(Config, #{calls => [?ADD]},
                     fun() ->
                             _ = redbug:start("beamprobe_workload:tick/1",
                                              [{procs, [Q]}, {time, 20000},
                                               {print_fun,
                                                fun(M) -> Self ! {rb, M} end}]),
                             _ = ?L:wait_until(fun() -> traced_by_other(Q) end,
                                               5000)
                     end,
                     {pattern, ?ADD, removed}),
            redbug:stop(),
            ?W:stop_worker(Q)
    end.

%% on_tamper => reinstall: reported, then set again.
reinstall_option(Config) ->
    Dir = ?L:dir(Config, "t"),
    S = ?L:start(#{calls => [?ADD], on_tamper => reinstall,
                   output => {file, Dir}}),
    erlang:trace_pattern(?ADD, false, [local]),
    _ = ?L:wait_until(fun() -> tampered(S) =/= [] end, ?WITHIN_MS),
    _ = ?L:wait_until(fun() -> erlang:trace_info(?ADD, traced) =:=
                                    {traced, local} end, ?WITHIN_MS),
    P = ?W:start_worker(),
    ?W:run(P, fun() -> ?W:add(1, 1) end),
    _ = ?L:stop(S),
    [_] = ?L:events(?L:trace(Dir), "call", P),
    ?W:stop_worker(P).

%%% ------------------------------------------------------------------------
%%% No report on beamprobe's own changes
%%% ------------------------------------------------------------------------

no_report_on_stop(Config) ->
    Dir = ?L:dir(Config, "t"),
    S = ?L:start(#{calls => [{?W, '_', '_'}], events => [send],
                   output => {file, Dir}}),
    %% Traced processes that end are not a report either (these are
    %% traced through `new'; a listed one: no_report_second_session).
    _ = [spawn(fun() -> ?W:add(1, 2) end) || _ <- lists:seq(1, 200)],
    timer:sleep(1200),
    Sum = ?L:stop(S),
    timer:sleep(700),
    ?assertEqual([], maps:get(tampered, Sum)),
    ?assertEqual([], ?L:events(?L:trace(Dir), "tampered")).

%% A second session on other processes and functions starts and stops.
no_report_second_session(Config) ->
    [P1, P2] = [?W:start_worker() || _ <- [1, 2]],
    Dir = ?L:dir(Config, "a"),
    P3 = ?W:start_worker(),
    S = ?L:start(#{procs => [P1, P3], calls => [?ADD],
                   output => {file, Dir}}),
    ?W:stop_worker(P3),
    [begin
         S2 = ?L:start(#{procs => [P2], calls => [{?W, tick, 1}],
                         output => {file, ?L:dir(Config, "b" ++
                                                     integer_to_list(I))}}),
         timer:sleep(300),
         _ = ?L:stop(S2),
         timer:sleep(300)
     end || I <- [1, 2, 3]],
    timer:sleep(700),
    Sum = ?L:stop(S),
    ?assertEqual([], maps:get(tampered, Sum)),
    ?assertEqual([], ?L:events(?L:trace(Dir), "tampered")),
    [?W:stop_worker(P) || P <- [P1, P2]].

%% A second session on the same function with another match spec (it
%% replaces the first one's: issue 8 point 1) is beamprobe's doing, not
%% another tool's.
no_report_same_function(Config) ->
    [P1, P2] = [?W:start_worker() || _ <- [1, 2]],
    Dir = ?L:dir(Config, "a"),
    S = ?L:start(#{procs => [P1], calls => [?ADD], output => {file, Dir}}),
    S2 = ?L:start(#{procs => [P2],
                    calls => [{?ADD, [{['$1', '_'], [{'>', '$1', 1}], []}]}],
                    output => {file, ?L:dir(Config, "b")}}),
    timer:sleep(1200),
    _ = ?L:stop(S2),
    timer:sleep(1200),
    Sum = ?L:stop(S),
    ?assertEqual([], maps:get(tampered, Sum)),
    ?assertEqual([], ?L:events(?L:trace(Dir), "tampered")),
    [?W:stop_worker(P) || P <- [P1, P2]].

%% A reload of the NIF: the session traces its processes again, which is
%% not a report.
no_report_on_reload(Config) ->
    P = ?W:start_worker(),
    Dir = ?L:dir(Config, "a"),
    S = ?L:start(#{procs => [P], calls => [?ADD], output => {file, Dir}}),
    Meta = ?L:start(#{meta => true, calls => [{?W, tick, 1}],
                      output => {file, ?L:dir(Config, "m")}}),
    [begin
         true = code:delete(beamprobe_nif),
         _ = code:purge(beamprobe_nif),
         {module, beamprobe_nif} = code:load_file(beamprobe_nif),
         timer:sleep(200)
     end || _ <- [1, 2, 3]],
    timer:sleep(1200),
    SumM = ?L:stop(Meta),
    Sum = ?L:stop(S),
    ?assertEqual(3, maps:get(nif_reloads, Sum)),
    ?assertEqual([], maps:get(tampered, Sum)),
    ?assertEqual([], maps:get(tampered, SumM)),
    ?W:stop_worker(P).

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

%% The watchdog is beamprobe's: never traced, also after a NIF reload
%% (the session traces every untraced process again then).
watchdog_not_traced(Config) ->
    Dir = ?L:dir(Config, "t"),
    S = ?L:start(#{procs => all, events => ['receive'], calls => [?ADD],
                   output => {file, Dir}}),
    %% (The watchdog: the session's own process with the watch's state.)
    [W] = [P || P <- ?L:own_pids(S),
                element(1, sys:get_state(P)) =:= w],
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    true = code:delete(beamprobe_nif),
    _ = code:purge(beamprobe_nif),
    {module, beamprobe_nif} = code:load_file(beamprobe_nif),
    timer:sleep(1200),
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    Sum = ?L:stop(S),
    ?assertEqual(1, maps:get(nif_reloads, Sum)),
    Evs = ?L:trace(Dir),
    ?assertNotEqual([], ?L:events(Evs, "receive")),
    %% No event names the watchdog (not even a `process' event).
    ?assertError({no_process_event, _}, ?L:pid_key(Evs, W)).

%% beamprobe_nif:tampered/3 refuses what it cannot write, cuts long
%% texts, and writes nothing into a stopped session.
tampered_nif_args(Config) ->
    Dir = ?L:dir(Config, "t"),
    S = ?L:start(#{calls => [?ADD], output => {file, Dir}}),
    {ok, #{config := _}} = beamprobe:info(S),
    Res = session_res(S),
    Bad = [[<<"a">>, <<"b">>, <<"c">>], [<<"a">>, <<"b">>, <<"c">>, x],
           [<<"a">>, <<"b">>, <<"c">>, <<"d">>, <<"e">>],
           [<<"a">>, <<"b">>, <<"c">> | <<"d">>], not_a_list],
    [?assertError(badarg, beamprobe_nif:tampered(Res, undefined, F))
     || F <- Bad],
    ?assertError(badarg, beamprobe_nif:tampered(Res, "pid", [<<>>, <<>>, <<>>, <<>>])),
    ?assertError(badarg, beamprobe_nif:tampered(make_ref(), undefined,
                                                [<<>>, <<>>, <<>>, <<>>])),
    Huge = binary:copy(<<"é"/utf8>>, 5000),            % 10000 bytes, 2 per char
    ok = beamprobe_nif:tampered(Res, self(),
                                [<<"procs">>, <<"x", 0, "y">>, <<"how">>, Huge]),
    _ = ?L:stop(S),
    ?assertEqual({error, stopped},
                 beamprobe_nif:tampered(Res, undefined,
                                        [<<"a">>, <<"b">>, <<"c">>, <<"d">>])),
    [E] = ?L:events(?L:trace(Dir), "tampered"),
    ?assertEqual(<<"x?y">>, f(E, "subject")),
    D = f(E, "detail"),
    ?assertEqual(1024, byte_size(D)),             % cut at a character
    ?assertEqual(D, unicode:characters_to_binary(D)).

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

%%% ------------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------------

%% The NIF session of session process S (for tampered_nif_args).
session_res(S) ->
    St = sys:get_state(S),
    [Res] = [R || R <- tuple_to_list(St), is_reference(R),
                  (catch beamprobe_nif:info(R)) =/= {'EXIT', badarg},
                  is_map(catch beamprobe_nif:info(R))],
    Res.

%% Starts a session (Spec, with a file sink and the shell printer), runs
%% Tamper and checks that {Kind, Subject, How} is reported within a
%% second in info/1, then in the trace and on the printer.
reported(Config, Spec, Tamper, {Kind, Subject, How}) ->
    Dir = ?L:dir(Config, "trace"),
    Io = ?SH:cap(),
    Printer = {handler, beamprobe_printer, #{io => Io}},
    S = ?L:start(Spec#{output => [{file, Dir}, Printer]}),
    timer:sleep(100),
    ?assertEqual([], tampered(S)),
    T0 = erlang:monotonic_time(millisecond),
    _ = Tamper(),
    T1 = erlang:monotonic_time(millisecond),
    _ = ?L:wait_until(fun() -> tampered(S) =/= [] end, 2 * ?WITHIN_MS),
    %% From the end of Tamper (its last step is the change; some wait
    %% first).
    Ms = ?L:elapsed_ms(T1),
    ct:log("Tamper took ~b ms", [T1 - T0]),
    Found = tampered(S),
    ct:log("reported after ~b ms: ~p", [Ms, Found]),
    ?assert(Ms =< ?WITHIN_MS),
    Match = [F || {K, Sub, H, Seen} = F <- Found, K =:= Kind,
                  Sub =:= Subject, How =:= '_' orelse H =:= How,
                  is_integer(Seen)],
    ?assertNotEqual([], Match),
    [{_, _, How1, _} | _] = Match,
    %% The printer's line.
    SubText = subject_text(Subject),
    Line = iolist_to_binary(["another tool ", atom_to_list(How1), " the ",
                             case Kind of
                                 pattern -> "pattern on ";
                                 messages -> "message pattern of ";
                                 procs -> "trace flags of "
                             end, SubText]),
    try ?L:wait_until(fun() -> binary:match(?SH:cap_text(Io), Line)
                                   =/= nomatch end, 3000)
    catch error:{timeout, _} ->
            ct:fail({no_printer_line, Line, ?SH:cap_text(Io)})
    end,
    Sum = ?L:stop(S),
    ?assertEqual(Found, lists:sublist(maps:get(tampered, Sum), length(Found))),
    %% babeltrace2 reads the event...
    Evs = ?L:trace(Dir),
    Tampered = ?L:events(Evs, "tampered"),
    ct:log("tampered events: ~p", [Tampered]),
    ?assert(lists:any(fun(E) ->
                              f(E, "what") =:= atom_to_binary(Kind) andalso
                                  f(E, "subject") =:= SubText andalso
                                  f(E, "how") =:= atom_to_binary(How1)
                      end, Tampered)),
    %% ... and so does bin/beamprobe print.
    Out = beamprobe_test_lib:cli_ok(["print", Dir]),
    Want = iolist_to_binary(["tampered ", atom_to_list(Kind), " ", SubText,
                             " ", atom_to_list(How1)]),
    ?assertNotEqual(nomatch, binary:match(Out, Want)),
    %% stats says it (table and JSON), the Perfetto export has an instant.
    NT = integer_to_list(length(Tampered)),
    ?assertNotEqual(nomatch, binary:match(beamprobe_test_lib:cli_ok(["stats", Dir]),
                                          list_to_binary("Changed by another tool (patterns or flags removed or replaced): " ++ NT))),
    ?assertNotEqual(nomatch,
                    binary:match(beamprobe_test_lib:cli_ok(["stats", "--json", Dir]),
                                 list_to_binary("\"tampered\":" ++ NT ++ ","))),
    ?assertNotEqual(nomatch, binary:match(beamprobe_test_lib:cli_ok(["export", "-F", "perfetto", Dir]),
                                          <<"\"name\":\"tampered: ", (atom_to_binary(Kind))/binary>>)),
    %% Counted as an event.
    ?assert(maps:get(events, Sum) >= length(Tampered)),
    ok.

tampered(S) ->
    {ok, #{tampered := T}} = beamprobe:info(S),
    T.

f(E, K) -> iolist_to_binary(?L:field(E, K)).

subject_text({M, F, A}) -> beamprobe_nif:render_mfa(M, F, A);
subject_text(new) -> <<"new">>;
subject_text(send) -> <<"send">>;
subject_text(P) when is_pid(P) -> list_to_binary(pid_to_list(P)).

count(Bin, Pat) -> length(binary:matches(Bin, Pat)).

%% dbg with a tracer process that counts call messages per process.
dbg_collector() ->
    Parent = self(),
    {ok, _} = dbg:tracer(process,
                         {fun({trace, P, call, _}, N) ->
                                  Parent ! {dbg_call, P}, N + 1;
                             (_, N) -> N
                          end, 0}),
    Parent.

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

traced_by_other(P) ->
    case erlang:trace_info(P, tracer) of
        {tracer, []} -> false;
        {tracer, _} -> true;
        _ -> false
    end.

collect_rb(Acc) ->
    receive {rb, M} -> collect_rb([M | Acc])
    after 500 -> lists:reverse(Acc)
    end.

is_call_line({call, {{?W, add, _}, _}, _, _}) -> true;
is_call_line(_) -> false.

%%% Third-party tools compiled from their source at test time --------------

%% recon: $RECON_SRC (a directory with recon_trace.erl), $RECON_GIT (a git
%% directory of github.com/ferd/recon), an installed recon, or the local
%% mirror /work/.mirror/ferd+recon/repo when it exists.
load_recon(Config) ->
    load_tool(Config, recon_trace, "RECON_SRC", "RECON_GIT",
              ["/work/.mirror/ferd+recon/repo"],
              ["recon.erl", "recon_lib.erl", "recon_trace.erl",
               "recon_rec.erl", "recon_map.erl", "recon_alloc.erl"]).

%% redbug: $REDBUG_SRC, $REDBUG_GIT, installed, or the local mirror.
load_redbug(Config) ->
    load_tool(Config, redbug, "REDBUG_SRC", "REDBUG_GIT",
              ["/work/.mirror/massemanet+redbug/repo"],
              ["redbug.erl", "redbug_compiler.erl", "redbug_dtop.erl",
               "redbug_targ.erl", "redbug_lexer.xrl", "redbug_parser.yrl",
               "redbug_dbg.hrl"]).

load_tool(Config, Mod, SrcVar, GitVar, Mirrors, Files) ->
    case code:ensure_loaded(Mod) of
        {module, Mod} -> ok;
        _ ->
            Dest = filename:join(?config(priv_dir, Config), atom_to_list(Mod)),
            case tool_source(SrcVar, GitVar, Mirrors, Files, Dest) of
                {ok, SrcDir} -> compile_tool(SrcDir, Dest, Files, Mod);
                {skip, Why} ->
                    io:format("~p skipped: ~s~n", [Mod, Why]),
                    {skip, Why}
            end
    end.

tool_source(SrcVar, GitVar, Mirrors, Files, Dest) ->
    case os:getenv(SrcVar) of
        Dir when is_list(Dir), Dir =/= "" -> {ok, Dir};
        _ ->
            Gits = [G || G <- [os:getenv(GitVar) | Mirrors], is_list(G),
                         G =/= "", filelib:is_file(G)],
            case Gits of
                [Git | _] -> from_git(Git, Files, Dest);
                [] -> {skip, lists:flatten(
                               io_lib:format("no source: set ~s (a source "
                                             "directory) or ~s (a git "
                                             "directory)", [SrcVar, GitVar]))}
            end
    end.

from_git(Git, Files, Dest) ->
    ok = filelib:ensure_path(filename:join(Dest, "src")),
    Src = filename:join(Dest, "src"),
    Results = [begin
                   Out = filename:join(Src, F),
                   os:cmd("git --git-dir='" ++ Git ++ "' show HEAD:src/" ++ F ++
                              " > '" ++ Out ++ "' 2>/dev/null"),
                   filelib:file_size(Out) > 0
               end || F <- Files],
    case lists:all(fun(X) -> X end, Results) of
        true -> {ok, Src};
        false -> {skip, "cannot read the source from " ++ Git}
    end.

compile_tool(Src, Dest, Files, Mod) ->
    Ebin = filename:join(Dest, "ebin"),
    ok = filelib:ensure_path(Ebin),
    Gen = [begin
               In = filename:join(Src, F),
               Out = filename:join(Ebin, filename:rootname(F) ++ ".erl"),
               case filename:extension(F) of
                   ".xrl" -> {ok, _} = leex:file(In, [{scannerfile, Out}]);
                   ".yrl" -> {ok, _} = yecc:file(In, [{parserfile, Out}])
               end,
               Out
           end || F <- Files, lists:member(filename:extension(F),
                                           [".xrl", ".yrl"])],
    Erls = [filename:join(Src, F) || F <- Files,
                                     filename:extension(F) =:= ".erl"] ++ Gen,
    Res = [compile:file(E, [{outdir, Ebin}, {i, Src}, return_errors,
                            nowarn_deprecated_function])
           || E <- Erls],
    case [R || R <- Res, element(1, R) =/= ok] of
        [] ->
            true = code:add_patha(Ebin),
            {module, Mod} = code:ensure_loaded(Mod),
            ok;
        Errors ->
            Why = lists:flatten(io_lib:format("~p does not compile here: ~p",
                                              [Mod, Errors])),
            io:format("~s~n", [Why]),
            {skip, Why}
    end.

%% The watchdog's checks do not make an idle process look busy: on OTP
%% 25 erlang:trace_info/2 of a process is a signal it is scheduled to
%% answer, and a session recording `running' recorded each check (every
%% 500 ms) as a sched_in/sched_out pair of a process blocked in receive
%% (14 in 3 s).  Now its flags are read without a signal, and its tracer
%% only when they change.
idle_not_running(Config) ->
    Dir = ?L:dir(Config, "t"),
    Idle = spawn(fun() -> receive stop -> ok end end),
    Busy = spawn(fun Loop() -> receive stop -> ok after 50 -> Loop() end end),
    S = ?L:start(#{procs => [Idle, Busy], events => [running],
                   output => {file, Dir}}),
    timer:sleep(5000),
    Sum = ?L:stop(S),
    ct:log("~p", [Sum]),
    Evs = ?L:trace(Dir),
    InBusy = length(?L:events(Evs, "sched_in", Busy)),
    InIdle = try length(?L:events(Evs, "sched_in", Idle))
             catch error:{no_process_event, _} -> 0
             end,
    ct:log("sched_in: busy ~b, idle ~b", [InBusy, InIdle]),
    %% The busy one wakes 20 times a second: the session records running.
    ?assert(InBusy >= 50),
    %% Checks every 500 ms made 22 pairs in 5 s; what is left comes from
    %% the start and the stop (process names read, the first check), not
    %% from the run's length (2 to 4 seen).
    ?assert(InIdle =< 6),
    Idle ! stop,
    Busy ! stop.

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

%% dbg:stop/0 sets the node's send pattern to `true' (every send): a
%% session whose pattern it was says so within a second, instead of
%% recording every send as if the user had asked for them.
msg_pattern_replaced_reported(Config) ->
    reported(Config, #{procs => all, events => [send],
                       messages => [{send, [{['_', {ping, '_'}], [], []}]}]},
             fun() -> erlang:trace_pattern(send, true, []) end,
             {messages, send, replaced}),
    erlang:trace_pattern(send, true, []).
