%%% @doc A traced module loaded again while sessions run (a hot upgrade,
%%% `l(M)', `c(M)', `recompile' in iex): the VM drops every trace pattern
%%% of the module, the new code has none.  Before, each session reported
%%% `{pattern, MFA, removed}' ("removed by another tool, or the module was
%%% loaded again") and recorded none of the new code's calls for the rest
%%% of its run.  Now the session's watchdog sees that the module's code
%%% changed (another MD5, or old code where there was none), sets the
%%% pattern on the new code, and reports `reloaded' with the gap (in
%%% info/1, the trace and on the printer); a removal by another tool
%%% stays `removed' and is not undone.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_code_reload_SUITE -logdir _build/ct_logs
-module(beamprobe_code_reload_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([same_code_again/1, new_version/1, meta_session/1,
         many_functions/1, removal_not_undone/1, shell_printer/1,
         removal_after_restore_not_undone/1, purged_then_same_code/1,
         deleted_then_loaded/1, other_tool_on_new_code_kept/1,
         module_over_one_round/1]).

-define(L, beamprobe_test_lib).
-define(M, bpcr_target).
-define(F, {?M, f, 1}).
-define(WITHIN_MS, 5000).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [same_code_again, new_version, meta_session, many_functions,
     removal_not_undone, shell_printer, removal_after_restore_not_undone,
     purged_then_same_code, deleted_then_loaded,
     other_tool_on_new_code_kept, module_over_one_round].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    {Bin1, Bin2} = {target(1), target(2)},
    _ = code:purge(?M),
    _ = code:delete(?M),
    _ = code:purge(?M),
    {module, ?M} = code:load_binary(?M, "bpcr_target.erl", Bin1),
    %% No old code: a load of the same binary shows as old code.
    _ = code:purge(?M),
    [{bins, {Bin1, Bin2}} | ?L:init_case(Case, Config)].

end_per_testcase(_Case, _Config) ->
    _ = [beamprobe:stop(S) || S <- beamprobe:list()],
    _ = code:purge(?M),
    _ = code:delete(?M),
    _ = code:purge(?M),
    ok.

%% The traced module, version V (f/1 adds V; g/1 .. j/1 for the
%% many-functions case).
target(V) ->
    Src = io_lib:format(
            "-module(~s).~n-export([f/1, g/1, h/1, i/1, j/1]).~n"
            "f(X) -> X + ~b.~ng(X) -> X.~nh(X) -> X.~ni(X) -> X.~nj(X) -> X.~n",
            [?M, V]),
    {ok, Ts, _} = erl_scan:string(lists:flatten(Src)),
    Forms = split_forms(Ts, [], []),
    {ok, ?M, Bin} = compile:forms(Forms, [binary]),
    Bin.

split_forms([], [], Acc) -> lists:reverse(Acc);
split_forms([{dot, _} = D | Rest], Cur, Acc) ->
    {ok, F} = erl_parse:parse_form(lists:reverse([D | Cur])),
    split_forms(Rest, [], [F | Acc]);
split_forms([T | Rest], Cur, Acc) ->
    split_forms(Rest, [T | Cur], Acc).

load(Bin) ->
    {module, ?M} = code:load_binary(?M, "bpcr_target.erl", Bin),
    ok.

tampered(S) ->
    {ok, #{tampered := T}} = beamprobe:info(S),
    [{K, Sub, How} || {K, Sub, How, _} <- T].

wait_tampered(S, Want) ->
    _ = ?L:wait_until(fun() -> tampered(S) =:= Want end, ?WITHIN_MS),
    ok.

%% Calls in a process of its own (its pid tells its events apart).
calls(Xs) ->
    Self = self(),
    P = spawn(fun() -> [?M:f(X) || X <- Xs], Self ! {done, self()} end),
    receive {done, P} -> P after 5000 -> ct:fail(calls_hang) end.

args(Evs, P) ->
    [A || #{fields := #{<<"args">> := A}} <- ?L:events(Evs, "call", P)].

%% The same binary loaded again (l(M) of an unchanged module): two
%% sessions on f/1, one with a condition; both record the new code's
%% calls, each reports `reloaded' once, the trace says so, nothing of
%% beamprobe's is left after the stops.  The old tree: both reported
%% `removed', and neither recorded a call after the load.
same_code_again(Config) ->
    {Bin1, _} = ?config(bins, Config),
    DA = ?L:dir(Config, "a"),
    DB = ?L:dir(Config, "b"),
    A = ?L:start(#{calls => [?F], output => {file, DA}}),
    B = ?L:start(#{calls => [{?F, [{[1], [], []}]}], output => {file, DB}}),
    P1 = calls([1, 2]),
    ok = load(Bin1),
    Want = [{pattern, ?F, reloaded}],
    ok = wait_tampered(A, Want),
    ok = wait_tampered(B, Want),
    ?assertEqual({traced, local}, erlang:trace_info(?F, traced)),
    P2 = calls([1, 3]),
    timer:sleep(700),                   % a watchdog round more: one report
    ?assertEqual(Want, tampered(A)),
    ?assertEqual(Want, tampered(B)),
    _ = ?L:stop(A),
    _ = ?L:stop(B),
    TA = ?L:trace(DA),
    TB = ?L:trace(DB),
    ?assertEqual([<<"(1)">>, <<"(2)">>], args(TA, P1)),
    ?assertEqual([<<"(1)">>, <<"(3)">>], args(TA, P2)),
    ?assertEqual([<<"(1)">>], args(TB, P1)),
    ?assertEqual([<<"(1)">>], args(TB, P2)),
    [?assertMatch([#{fields := #{<<"how">> := <<"reloaded">>}}],
                  ?L:events(T, "tampered")) || T <- [TA, TB]],
    ?L:assert_no_trace_state([], [?F]).

%% A new version (another MD5): its calls are recorded with the new
%% code's results, and a second load after that is followed too.
new_version(Config) ->
    {Bin1, Bin2} = ?config(bins, Config),
    D = ?L:dir(Config, "t"),
    S = ?L:start(#{calls => [?F], return => true, output => {file, D}}),
    ok = load(Bin2),
    ok = wait_tampered(S, [{pattern, ?F, reloaded}]),
    P1 = calls([10]),
    _ = code:purge(?M),
    ok = load(Bin1),
    _ = ?L:wait_until(fun() -> length(tampered(S)) =:= 2 end, ?WITHIN_MS),
    ?assertEqual([{pattern, ?F, reloaded}, {pattern, ?F, reloaded}],
                 tampered(S)),
    P2 = calls([10]),
    _ = ?L:stop(S),
    T = ?L:trace(D),
    Ret = fun(P) -> [R || #{fields := #{<<"result">> := R}}
                              <- ?L:events(T, "return_from", P)]
          end,
    ?assertEqual([<<"12">>], Ret(P1)),
    ?assertEqual([<<"11">>], Ret(P2)),
    ?L:assert_no_trace_state([], [?F]).

%% A meta session (every process's calls): the same.
meta_session(Config) ->
    {Bin1, _} = ?config(bins, Config),
    D = ?L:dir(Config, "m"),
    S = ?L:start(#{meta => true, calls => [?F], output => {file, D}}),
    ok = load(Bin1),
    ok = wait_tampered(S, [{pattern, ?F, reloaded}]),
    ?assertMatch({meta, _}, erlang:trace_info(?F, meta)),
    P = calls([7]),
    _ = ?L:stop(S),
    ?assertEqual([<<"(7)">>], args(?L:trace(D), P)),
    ?assertEqual({meta, false}, erlang:trace_info(?F, meta)).

%% A wildcard over the module (5 functions: one report for all of them),
%% every function traced again.
many_functions(Config) ->
    {Bin1, _} = ?config(bins, Config),
    S = ?L:start(#{calls => [{?M, '_', '_'}],
                   output => {file, ?L:dir(Config, "w")}}),
    S2 = ?L:start(#{calls => [{?M, '_', '_'}],
                    output => {file, ?L:dir(Config, "w2")}}),
    ok = load(Bin1),
    _ = ?L:wait_until(fun() -> tampered(S) =/= [] andalso tampered(S2) =/= []
                      end, ?WITHIN_MS),
    timer:sleep(1200),                  % no second report comes
    %% (f/1 .. j/1 and module_info/0,1: 7 functions.)
    ?assertEqual([{pattern, {functions, 7}, reloaded}], tampered(S)),
    ?assertEqual([{pattern, {functions, 7}, reloaded}], tampered(S2)),
    _ = ?L:stop(S2),
    _ = ?L:wait_until(
          fun() ->
                  lists:all(fun(F) -> erlang:trace_info({?M, F, 1}, traced)
                                          =:= {traced, local} end,
                            [f, g, h, i, j])
          end, ?WITHIN_MS),
    _ = ?L:stop(S),
    ?L:assert_no_trace_state([], [{?M, F, 1} || F <- [f, g, h, i, j]]).

%% Another tool removing the pattern (the code unchanged) is still
%% `removed', and the pattern stays removed (not set again behind the
%% tool's back); a load after that is not taken for the removal's cause.
removal_not_undone(Config) ->
    D = ?L:dir(Config, "r"),
    S = ?L:start(#{calls => [?F], output => {file, D}}),
    1 = erlang:trace_pattern(?F, false, [local]),
    ok = wait_tampered(S, [{pattern, ?F, removed}]),
    timer:sleep(700),
    ?assertEqual({traced, false}, erlang:trace_info(?F, traced)),
    _ = ?L:stop(S),
    ?L:assert_no_trace_state([], [?F]).

%% The shell's printer says what happened, not "another tool reloaded".
shell_printer(Config) ->
    {Bin1, _} = ?config(bins, Config),
    Cap = beamprobe_shell_lib:cap(),
    1 = beamprobe:calls(?F, 100, #{io_server => Cap}),
    ok = load(Bin1),
    beamprobe_shell_lib:wait_text(
      Cap, "% beamprobe: bpcr_target:f/1: the module was loaded again: "
           "the pattern is set on its new code", ?WITHIN_MS),
    _ = calls([42]),
    beamprobe_shell_lib:wait_text(Cap, "bpcr_target:f(42)", ?WITHIN_MS),
    ?assertEqual(nomatch, string:find(beamprobe_shell_lib:cap_text(Cap),
                                      "another tool")),
    ok = beamprobe:clear(),
    %% In Elixir syntax, the function as Elixir writes it (it was
    %% "bpcr_target:f/1" in an Elixir trace).
    Cap2 = beamprobe_shell_lib:cap(),
    1 = beamprobe:calls(?F, 100, #{io_server => Cap2, syntax => elixir}),
    {_, Bin2} = ?config(bins, Config),
    _ = code:purge(?M),
    ok = load(Bin2),                    % (another MD5: the load shows)
    beamprobe_shell_lib:wait_text(
      Cap2, "% beamprobe: :bpcr_target.f/1: the module was loaded again",
      ?WITHIN_MS),
    ok = beamprobe:clear().

%% The session's watchdog (a beamprobe_watch process, in its state).
watchdog(S) ->
    [W] = [P || P <- tuple_to_list(sys:get_state(S)), is_pid(P), P =/= S,
                case catch sys:get_state(P, 5000) of
                    T when is_tuple(T) -> element(1, T) =:= w;
                    _ -> false
                end],
    W.

%% Makes watchdog W check now, and waits until it has.
watchdog_round(W) ->
    W ! tick,
    _ = sys:get_state(W),
    ok.

%% The module loaded again, and a session naming f/1 starting before A's
%% watchdog looked: the join sets f/1's pattern on the new code, A says
%% `removed' and `restored'.  Another tool removing the pattern after
%% that is a removal: reported `removed' and not undone.  The old tree
%% kept the module's code from before the load as A's baseline: the
%% removal was taken for a load, reported `reloaded', and the pattern set
%% again behind the tool's back.
removal_after_restore_not_undone(Config) ->
    {Bin1, _} = ?config(bins, Config),
    A = ?L:start(#{calls => [?F], output => {file, ?L:dir(Config, "a")}}),
    W = watchdog(A),
    ok = sys:suspend(W),                % B starts before W looks
    ok = load(Bin1),
    B = ?L:start(#{calls => [?F], output => {file, ?L:dir(Config, "b")}}),
    ok = sys:resume(W),
    ok = wait_tampered(A, [{pattern, ?F, removed}, {pattern, ?F, restored}]),
    ?assertEqual({traced, local}, erlang:trace_info(?F, traced)),
    1 = erlang:trace_pattern(?F, false, [local]),
    Want = [{pattern, ?F, removed}, {pattern, ?F, restored},
            {pattern, ?F, removed}],
    ok = wait_tampered(A, Want),
    ok = watchdog_round(W),
    ok = watchdog_round(watchdog(B)),
    timer:sleep(200),                   % past a confirmation: no reload
    ?assertEqual(Want, tampered(A)),
    ?assertEqual([{pattern, ?F, removed}], tampered(B)),
    ?assertEqual({traced, false}, erlang:trace_info(?F, traced)),
    _ = ?L:stop(A),
    _ = ?L:stop(B),
    ?L:assert_no_trace_state([], [?F]).

%% Loaded again, its old code purged after the watchdog followed the
%% load (old code was there when it set the pattern again), then the same
%% binary loaded again: another load, followed.  The old tree compared
%% with the code when it set the pattern (old code there then too): the
%% second load was reported `removed' and the new code's calls were lost.
purged_then_same_code(Config) ->
    {Bin1, _} = ?config(bins, Config),
    D = ?L:dir(Config, "p"),
    S = ?L:start(#{calls => [?F], output => {file, D}}),
    W = watchdog(S),
    ok = load(Bin1),
    ok = wait_tampered(S, [{pattern, ?F, reloaded}]),
    _ = code:purge(?M),
    false = erlang:check_old_code(?M),
    ok = watchdog_round(W),             % it saw the purge
    ok = load(Bin1),
    Want = [{pattern, ?F, reloaded}, {pattern, ?F, reloaded}],
    ok = wait_tampered(S, Want),
    ?assertEqual({traced, local}, erlang:trace_info(?F, traced)),
    P = calls([5]),
    _ = ?L:stop(S),
    ?assertEqual([<<"(5)">>], args(?L:trace(D), P)),
    ?L:assert_no_trace_state([], [?F]).

%% The module deleted and purged (the watchdog saw it gone: nothing to
%% report, no call can be lost), then loaded again: followed, the new
%% code's calls recorded.  The old tree: `removed', calls lost.
deleted_then_loaded(Config) ->
    {Bin1, _} = ?config(bins, Config),
    D = ?L:dir(Config, "d"),
    S = ?L:start(#{calls => [?F], output => {file, D}}),
    W = watchdog(S),
    true = code:delete(?M),
    _ = code:purge(?M),
    ok = watchdog_round(W),
    ?assert(is_process_alive(W)),
    ?assertEqual([], tampered(S)),
    ok = load(Bin1),
    ok = wait_tampered(S, [{pattern, ?F, reloaded}]),
    P = calls([6]),
    _ = ?L:stop(S),
    ?assertEqual([<<"(6)">>], args(?L:trace(D), P)),
    ?L:assert_no_trace_state([], [?F]).

%% Another tool sets its own pattern on the new code (dbg's patterns went
%% with the old code too: set again after a load) after the watchdog saw
%% the load and before the janitor set beamprobe's: the tool's pattern
%% stays, and the session reports it `replaced'.  The old tree set
%% beamprobe's over it (match_spec [] instead of the tool's).
other_tool_on_new_code_kept(Config) ->
    {Bin1, _} = ?config(bins, Config),
    S = ?L:start(#{calls => [?F], output => {file, ?L:dir(Config, "o")}}),
    W = watchdog(S),
    J = whereis(beamprobe_janitor),
    ok = sys:suspend(J),
    try
        ok = load(Bin1),
        ok = watchdog_round(W),
        %% The watchdog waits for the janitor to set the pattern again
        %% (the janitor is sensitive: its messages are not shown).
        _ = ?L:wait_until(
              fun() ->
                      {current_stacktrace, CS} =
                          process_info(W, current_stacktrace),
                      lists:keymember(reinstall_patterns, 2, CS)
              end, ?WITHIN_MS),
        Theirs = [{'_', [], [{message, theirs}]}],
        1 = erlang:trace_pattern(?F, Theirs, [local])
    after
        sys:resume(J)
    end,
    ok = wait_tampered(S, [{pattern, ?F, reloaded}, {pattern, ?F, replaced}]),
    ?assertEqual({match_spec, [{'_', [], [{message, theirs}]}]},
                 erlang:trace_info(?F, match_spec)),
    _ = ?L:stop(S),
    ?assertEqual({match_spec, [{'_', [], [{message, theirs}]}]},
                 erlang:trace_info(?F, match_spec)),
    1 = erlang:trace_pattern(?F, false, [local]),
    ok.

%% A module with more functions than a watchdog round checks (1,000):
%% loaded again, all of them are followed, in one report.  The old tree
%% reported the 1,000 of the first round `reloaded' and set them again,
%% and the next round took the other 102 (module_info/0,1 included) for
%% removed by another tool: {functions, 102} removed, never set again.
module_over_one_round(Config) ->
    N = 1100,
    Names = [list_to_atom("f" ++ integer_to_list(I)) || I <- lists:seq(1, N)],
    Forms = [{attribute, 1, module, bpcr_big},
             {attribute, 1, export, [{F, 1} || F <- Names]}] ++
        [{function, 1, F, 1, [{clause, 1, [{var, 1, 'X'}], [], [{var, 1, 'X'}]}]}
         || F <- Names],
    {ok, bpcr_big, Bin} = compile:forms(Forms, [binary]),
    {module, bpcr_big} = code:load_binary(bpcr_big, "bpcr_big.erl", Bin),
    try
        S = ?L:start(#{calls => [{bpcr_big, '_', '_'}],
                       output => {file, ?L:dir(Config, "big")}}),
        {module, bpcr_big} = code:load_binary(bpcr_big, "bpcr_big.erl", Bin),
        ok = wait_tampered(S, [{pattern, {functions, N + 2}, reloaded}]),
        Traced = fun() -> [F || F <- Names,
                                erlang:trace_info({bpcr_big, F, 1}, traced)
                                    =/= {traced, local}]
                 end,
        ?assertEqual([], Traced()),
        ok = watchdog_round(watchdog(S)),
        timer:sleep(200),                % past a confirmation: no removal
        ?assertEqual([{pattern, {functions, N + 2}, reloaded}], tampered(S)),
        _ = ?L:stop(S),
        ?L:assert_no_trace_state([], [{bpcr_big, '_', '_'}])
    after
        _ = code:purge(bpcr_big),
        _ = code:delete(bpcr_big),
        _ = code:purge(bpcr_big)
    end.
