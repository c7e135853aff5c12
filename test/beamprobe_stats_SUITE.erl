%%% @doc `bin/beamprobe stats' (and `print', `export') against traces
%%% recorded by real sessions: call times shown only where return events
%%% were recorded, traces that mix timed and untimed calls, overlapping
%%% sessions, cut traces, process names, exception-only and partial
%%% returns.  The numbers are checked against what the workload did and,
%%% for --json, read back with python3's json module.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_stats_SUITE -logdir _build/ct_logs
%%%
%%% Each case writes into its own directory under priv_dir and leaves no
%%% session behind (end_per_testcase stops any).
-module(beamprobe_stats_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([stats_untimed/1, stats_mixed/1, stats_overlap/1,
         stats_untimed_cut/1, stats_untimed_names/1,
         stats_exceptions_only/1, stats_partial_returns/1]).

-define(W, beamprobe_workload).
-define(L, beamprobe_test_lib).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [stats_untimed, stats_mixed, stats_overlap, stats_untimed_cut,
     stats_untimed_names, stats_exceptions_only, stats_partial_returns].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, ?W} = code:ensure_loaded(?W),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    ?L:clear_trace_state().

%% `bin/beamprobe stats' shows no call times for a trace recorded
%% without return events (env returns = false): it showed each call as
%% open until the trace's end, e.g. lists:seq/2 with a mean of 236 ms
%% for calls of a few microseconds.  With return => true the times are
%% measured.
stats_untimed(Config) ->
    DA = beamprobe_test_lib:dir(Config, "untimed"),
    DB = beamprobe_test_lib:dir(Config, "timed"),
    MFA = {beamprobe_workload, tick, 1},
    {ok, A} = beamprobe:start(#{calls => [MFA], output => {file, DA}}),
    {ok, B} = beamprobe:start(#{calls => [MFA], return => true,
                                output => {file, DB}}),
    [begin _ = beamprobe_workload:tick(I), timer:sleep(20) end
     || I <- lists:seq(1, 5)],
    {ok, _} = beamprobe:stop(A),
    {ok, _} = beamprobe:stop(B),
    Text = beamprobe_test_lib:cli_ok(["stats", "--sort", "total", DA]),
    ct:log("~s", [Text]),
    ?assertNotEqual(nomatch, binary:match(Text, <<"call times unknown">>)),
    ?assertMatch({match, _},
                 re:run(Text, "\n +5 +- +- +- +- +- +- +-  "
                              "beamprobe_workload:tick/1\n")),
    ?assertEqual(["unknown", "5", "None", "None", "None"],
                 py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DA]))),
    ["measured", "5", Total, Mean, "0"] =
        py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DB])),
    %% five calls of tick/1 take microseconds, not the trace's 100 ms
    ?assert(list_to_integer(Total) > 0),
    ?assert(list_to_integer(Mean) < 10000000),
    %% The time profiles refuse the untimed trace, naming why; perfetto
    %% shows its calls as instants ("i"), with no slice ("B"/"E").
    [begin
         {1, Err} = beamprobe_test_lib:cli(["export", "-F", F, DA]),
         ?assertNotEqual(nomatch, binary:match(Err, <<"has no return events">>)),
         {0, _} = beamprobe_test_lib:cli(["export", "-F", F, "-o",
                                          filename:join(?config(priv_dir, Config), "x." ++ F), DB])
     end || F <- ["folded", "callgrind", "speedscope"]],
    Phs = fun(D) ->
                  J = beamprobe_test_lib:cli_ok(["export", "-F", "perfetto", D]),
                  lists:usort([Ph || [Ph] <- element(2, re:run(J, "\"ph\":\"(.)\"",
                                                               [global, {capture, all_but_first, list}]))])
          end,
    ?assertEqual(["M", "i"], Phs(DA)),
    ?assertEqual(["B", "E", "M"], Phs(DB)).

%% A trace whose session traced tick/1 with its returns and sink/1 without
%% (returns = true, untimed_calls = sink/1): sink/1's calls are counted
%% and have no time, instead of each staying open (and holding its
%% callers' frames) until the trace's end; the env names every pattern,
%% those with a match spec and those with a non-latin-1 name too, in
%% UTF-8.
stats_mixed(Config) ->
    D = beamprobe_test_lib:dir(Config, "mixed"),
    W = beamprobe_workload,
    Fun = binary_to_atom(<<"f", 16#fc/utf8, "r_", 16#444/utf8>>),
    {ok, Mod, Bin} = compile:forms(
                       [{attribute, 1, module, bp_mixed_uni},
                        {attribute, 1, export, [{Fun, 1}]},
                        {function, 1, Fun, 1, [{clause, 1, [{var, 1, 'X'}], [],
                                                [{var, 1, 'X'}]}]}]),
    {module, Mod} = code:load_binary(Mod, "bp_mixed_uni.erl", Bin),
    Log = filename:join(?config(priv_dir, Config), "mixed_printer.txt"),
    {ok, Io} = file:open(Log, [write]),
    {ok, S} = beamprobe:start(
                #{calls => [{{W, tick, 1}, [{'_', [], [{return_trace}]}]},
                            {W, sink, 1}, {Mod, Fun, 1}],
                  output => [{file, D}, {handler, beamprobe_printer,
                                         #{io => Io, timestamp => none}}]}),
    [begin _ = W:tick(I), ok = W:sink(I), I = Mod:Fun(I), timer:sleep(20) end
     || I <- lists:seq(1, 5)],
    {ok, _} = beamprobe:stop(S),
    %% The shell's printer does not indent after an untimed call either
    %% (it prints the last events after stop/1 returns).
    _ = ?L:wait_until(fun() ->
                              {ok, P} = file:read_file(Log),
                              length(binary:matches(P, <<" call ">>)) >= 15
                      end, 5000),
    ok = file:close(Io),
    {ok, Printed} = file:read_file(Log),
    ct:log("~ts", [Printed]),
    PCalls = [L || L <- binary:split(Printed, <<"\n">>, [global]),
                   binary:match(L, <<" call ">>) =/= nomatch],
    ?assertEqual(15, length(PCalls)),
    [?assertMatch({match, _}, re:run(L, "^<[0-9.]+> call ")) || L <- PCalls],
    %% The file takes latin-1 only (opened without {encoding, utf8}): the
    %% function's name is there with \x{444} for the character it cannot
    %% take, instead of no line at all (the device died at the first).
    ?assertNotEqual(nomatch, binary:match(Printed, <<"r_\\x{444}'(1)">>)),
    Text = beamprobe_test_lib:cli_ok(["stats", D]),
    ct:log("~ts", [Text]),
    ?assertMatch({match, _},
                 re:run(Text, "\n +5 +- +- +- +- +- +- +-  "
                              "beamprobe_workload:sink/1\n")),
    {match, [Mean]} = re:run(Text, "\n +5 +\\S+ +\\S+ +(\\S+) .*  "
                                   "beamprobe_workload:tick/1\n",
                             [{capture, all_but_first, list}]),
    ?assertMatch({match, _}, re:run(Mean, "^[0-9.]+(ns|us)$")),
    ?assertNotEqual(nomatch, binary:match(Text, <<"2 functions traced without "
                                                  "a return event for every "
                                                  "call">>)),
    ?assertEqual(["partial", "5", "None", "None", "None"],
                 py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", D]),
                    "beamprobe_workload:sink/1")),
    %% No call indented: each is at the process's top level.
    Print = beamprobe_test_lib:cli_ok(["print", D]),
    Calls = [L || L <- binary:split(Print, <<"\n">>, [global]),
                  binary:match(L, <<" call ">>) =/= nomatch],
    ?assertEqual(15, length(Calls)),
    [?assertMatch({match, _}, re:run(L, "^\\S+ <[0-9.]+> call ")) || L <- Calls],
    %% The time profiles leave sink/1 out and say so; perfetto shows its
    %% calls as instants next to tick/1's slices.
    Folded = beamprobe_test_lib:cli_ok(["export", "-F", "folded", D]),
    ?assertNotEqual(nomatch, binary:match(Folded, <<"not in the folded profile: "
                                                    "beamprobe_workload:sink/1">>)),
    ?assertNotEqual(nomatch, binary:match(Folded, <<"tick/1 ">>)),
    ?assertEqual(nomatch, binary:match(Folded, <<"sink/1 ">>)),
    J = beamprobe_test_lib:cli_ok(["export", "-F", "perfetto", D]),
    ?assertEqual(10, length(binary:matches(J, <<"\"ph\":\"i\"">>))),
    ?assertEqual(5, length(binary:matches(J, <<"\"ph\":\"B\"">>))),
    %% info shows every pattern, in UTF-8.
    Info = beamprobe_test_lib:cli_ok(["info", D]),
    ct:log("~ts", [Info]),
    FunText = <<"f", 16#fc/utf8, "r_", 16#444/utf8>>,
    ?assertNotEqual(nomatch, binary:match(Info, <<"beamprobe_workload:tick/1, "
                                                  "beamprobe_workload:sink/1">>)),
    ?assertNotEqual(nomatch, binary:match(Info, <<"bp_mixed_uni:'", FunText/binary, "'/1">>)).

%% A function's calls follow its most specific pattern, the last of
%% equal ones (what the VM was given): outer/1 traced with its returns
%% next to beamprobe_workload:'_'/'_' without them, and inner/1 given twice,
%% last with its returns, are timed; tick/1 and sink/1 are not.  Before,
%% a function any untimed pattern named was untimed: outer/1 and inner/1
%% showed no time though their returns were recorded, and the shell's
%% printer did not indent inner/1's call inside outer/1.
stats_overlap(Config) ->
    D = beamprobe_test_lib:dir(Config, "overlap"),
    W = beamprobe_workload,
    R = [{'_', [], [{return_trace}]}],
    Log = filename:join(?config(priv_dir, Config), "overlap_printer.txt"),
    {ok, Io} = file:open(Log, [write]),
    {ok, S} = beamprobe:start(
                #{calls => [{{W, outer, 1}, R}, {W, '_', '_'},
                            {{W, inner, 1}, R}, {{W, inner, 1}, [{'_', [], []}]}],
                  output => [{file, D}, {handler, beamprobe_printer,
                                         #{io => Io, timestamp => none}}]}),
    [begin _ = W:outer(I), _ = W:tick(I), ok = W:sink(I), timer:sleep(10) end
     || I <- lists:seq(1, 5)],
    {ok, _} = beamprobe:stop(S),
    _ = ?L:wait_until(fun() ->
                              {ok, P} = file:read_file(Log),
                              length(binary:matches(P, <<" call ">>)) >= 20
                      end, 5000),
    ok = file:close(Io),
    {ok, Printed} = file:read_file(Log),
    ct:log("~ts", [Printed]),
    Lines = fun(Text, What) ->
                    [L || L <- binary:split(Text, <<"\n">>, [global]),
                          binary:match(L, What) =/= nomatch]
            end,
    Inner = <<"call beamprobe_workload:inner(">>,
    ?assertEqual(5, length(Lines(Printed, Inner))),
    [?assertMatch({match, _}, re:run(L, "^<[0-9.]+>   call ")) || L <- Lines(Printed, Inner)],
    [?assertMatch({match, _}, re:run(L, "^<[0-9.]+> call "))
     || L <- Lines(Printed, <<"call beamprobe_workload:sink(">>)],
    Text = beamprobe_test_lib:cli_ok(["stats", D]),
    ct:log("~ts", [Text]),
    [?assertMatch({match, _},
                  re:run(Text, "\n +5 +[0-9.]+(ns|us|ms) .*  beamprobe_workload:" ++ F ++ "/1\n"))
     || F <- ["outer", "inner"]],
    [?assertMatch({match, _},
                  re:run(Text, "\n +5 +- +- +- +- +- +- +-  beamprobe_workload:" ++ F ++ "/1\n"))
     || F <- ["tick", "sink"]],
    Print = beamprobe_test_lib:cli_ok(["print", D]),
    [?assertMatch({match, _}, re:run(L, "^\\S+ <[0-9.]+>   call "))
     || L <- Lines(Print, Inner)],
    ?assertEqual(5, length(Lines(Print, Inner))).

%% untimed_calls longer than the env's 8 KiB per value (400 functions
%% traced without returns next to top/1 with them): the value is cut,
%% and a function whose pattern was cut off is still untimed (named by no
%% pattern of timed_calls).  Before, the 200-odd cut off were timed: each
%% call stayed open until top/1 returned, e.g. f_..._399/1 "took" 0.3 ms.
stats_untimed_cut(Config) ->
    D = beamprobe_test_lib:dir(Config, "untimed_cut"),
    Names = [list_to_atom("a_rather_long_function_name_" ++ integer_to_list(I))
             || I <- lists:seq(1, 400)],
    M = bp_untimed_cut,
    trace_top(D, M, Names),
    Info = beamprobe_test_lib:cli_ok(["info", D]),
    ?assertMatch({match, _}, re:run(Info, "truncated: +calls, untimed_calls")),
    Text = beamprobe_test_lib:cli_ok(["stats", "--top", "1000", D]),
    ?assertNotEqual(nomatch, binary:match(Text, <<"400 functions traced without a return event for every call">>)),
    ?assertEqual(400, length(binary:matches(Text, <<"  3          -          -">>))),
    ?assertMatch({match, _}, re:run(Text, "\n +3 +[0-9.]+(ns|us|ms) .*  bp_untimed_cut:top/1\n")).

%% Loads module M, whose top/1 calls each of Names (each returns its
%% argument) and returns ok, traces top/1 with its returns and Names
%% without them into directory D, and calls top/1 three times.
trace_top(D, M, Names) ->
    {ok, M, Bin} = compile:forms(
                     [{attribute, 1, module, M},
                      {attribute, 1, export, [{top, 1} | [{F, 1} || F <- Names]]},
                      {function, 1, top, 1,
                       [{clause, 1, [{var, 1, 'X'}], [],
                         [{call, 1, {atom, 1, F}, [{var, 1, 'X'}]} || F <- Names]
                         ++ [{atom, 1, ok}]}]}
                      | [{function, 1, F, 1, [{clause, 1, [{var, 1, 'X'}], [],
                                               [{var, 1, 'X'}]}]} || F <- Names]]),
    {module, M} = code:load_binary(M, atom_to_list(M) ++ ".erl", Bin),
    {ok, S} = beamprobe:start(
                #{calls => [{{M, top, 1}, [{'_', [], [{return_trace}]}]}
                            | [{M, F, 1} || F <- Names]],
                  output => {file, D}}),
    [ok = M:top(I) || I <- lists:seq(1, 3)],
    {ok, _} = beamprobe:stop(S),
    ok.

%% Functions traced without returns whose names need quotes, escapes or
%% non-latin-1 characters, in a module whose name needs quotes, are
%% untimed.
%% Before, the env wrote the patterns with io_lib's ~tp, which writes the
%% escape and delete characters of a non-latin-1 atom as \e and \d where
%% the call events have \033 and a raw 127: those two were not found and
%% were timed, each call open until top/1 returned.
stats_untimed_names(Config) ->
    D = beamprobe_test_lib:dir(Config, "untimed_names"),
    M = list_to_atom("bp names " ++ [16#e9]),
    Names = [list_to_atom([$a, 16#436, 27]), list_to_atom([127, 16#436]),
             'receive', 'a b', '', 'it\'s', 'back\\slash', list_to_atom([$x, 16#e9]),
             list_to_atom([16#1F600])],
    trace_top(D, M, Names),
    Text = beamprobe_test_lib:cli_ok(["stats", D]),
    ct:log("~ts", [Text]),
    ?assertNotEqual(nomatch, binary:match(Text, <<"9 functions traced without a return event for every call">>)),
    ?assertEqual(9, length(binary:matches(Text, <<"  3          -          -">>))),
    ?assertMatch({match, _}, re:run(Text, "\n +3 +[0-9.]+(ns|us|ms) .*:top/1\n")).

%% exceptions => true without return records the exception_from events
%% of the plain patterns, not their return_from events: such a trace has
%% no call times (returns = false), and next to a match spec with
%% return_trace (whose returns the tracer records, and so theirs too) they
%% are timed.  Before, the env said returns = true and tick/1's calls,
%% never ended, were each open until the trace's end.
stats_exceptions_only(Config) ->
    W = beamprobe_workload,
    Run = fun(Name, Opts) ->
                  D = beamprobe_test_lib:dir(Config, Name),
                  {ok, S} = beamprobe:start(Opts#{output => {file, D}}),
                  [begin _ = W:tick(I), ok = W:sink(I), timer:sleep(10) end
                   || I <- lists:seq(1, 5)],
                  {ok, _} = beamprobe:stop(S),
                  D
          end,
    DA = Run("exc_only", #{calls => [{W, tick, 1}], exceptions => true}),
    ?assertEqual(["unknown", "5", "None", "None", "None"],
                 py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DA]))),
    DB = Run("exc_ms", #{calls => [{W, tick, 1}, {{W, sink, 1}, [{'_', [], []}]}],
                         exceptions => true}),
    ?assertEqual(["unknown", "5", "None", "None", "None"],
                 py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DB]))),
    DC = Run("exc_ret", #{calls => [{W, tick, 1},
                                    {{W, sink, 1}, [{'_', [], [{return_trace}]}]}],
                          exceptions => true}),
    ["measured", "5", _, _, "0"] =
        py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DC])),
    ["measured", "5", _, _, "0"] =
        py(Config, beamprobe_test_lib:cli_ok(["stats", "--json", DC]),
           "beamprobe_workload:sink/1").

%% call_times, calls, total_ns, mean_ns and open of tick/1 in stats --json.
py(Config, Json) ->
    py(Config, Json, "beamprobe_workload:tick/1").

py(Config, Json, Function) ->
    F = filename:join(?config(priv_dir, Config), "stats.json"),
    ok = file:write_file(F, Json),
    Out = os:cmd("python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                 "f=[x for x in d[\"functions\"] if x[\"function\"]"
                 "==sys.argv[2]][0]; "
                 "print(d[\"call_times\"], f[\"calls\"], f[\"total_ns\"], "
                 "f[\"mean_ns\"], f[\"open\"])' " ++ F ++ " " ++ Function),
    string:lexemes(Out, " \n").

%% A match spec with return_trace in some clauses only: the trace does not
%% say which clause a call matched, so its calls get no time and no frame
%% (untimed), its returns are not "returns without a traced call", and
%% the calls after one without a return are not shown inside it.  Before,
%% the pattern counted as timed: tick(3..6) stayed open to the trace's
%% end, held outer/1's calls inside them, and stats gave tick/1 a total
%% longer than the trace.
stats_partial_returns(Config) ->
    D = beamprobe_test_lib:dir(Config, "partial"),
    W = beamprobe_workload,
    Log = filename:join(?config(priv_dir, Config), "partial_printer.txt"),
    {ok, Io} = file:open(Log, [write]),
    {ok, S} = beamprobe:start(
                #{calls => [{{W, tick, 1}, [{['$1'], [{'<', '$1', 3}],
                                             [{return_trace}]},
                                            {'_', [], []}]},
                            {{W, outer, 1}, [{'_', [], [{return_trace}]}]}],
                  output => [{file, D}, {handler, beamprobe_printer,
                                         #{io => Io, timestamp => none}}]}),
    [begin I = W:tick(I), _ = W:outer(I), timer:sleep(5) end
     || I <- lists:seq(1, 6)],
    {ok, _} = beamprobe:stop(S),
    _ = ?L:wait_until(fun() ->
                              {ok, P} = file:read_file(Log),
                              length(binary:matches(P, <<"returned from">>))
                                  >= 8
                      end, 5000),
    ok = file:close(Io),
    {ok, Printed} = file:read_file(Log),
    ct:log("~ts", [Printed]),
    Lines = [L || L <- binary:split(Printed, <<"\n">>, [global]),
                  re:run(L, " (call|returned) ") =/= nomatch],
    %% 12 calls, 2 returns of tick/1, 6 of outer/1; none indented.
    ?assertEqual(20, length(Lines)),
    [?assertMatch({match, _}, re:run(L, "^<[0-9.]+> (call|returned) "))
     || L <- Lines],
    Text = beamprobe_test_lib:cli_ok(["stats", D]),
    ct:log("~ts", [Text]),
    ?assertMatch({match, _},
                 re:run(Text, "\n +6 +- +- +- +- +- +- +-  "
                              "beamprobe_workload:tick/1\n")),
    %% outer/1: 6 calls, each ended by its return, none open.
    ?assertMatch({match, _},
                 re:run(Text, "\n +6 +\\S+ +\\S+ +\\S+ +\\S+ +\\S+ +\\S+ +0  "
                              "beamprobe_workload:outer/1\n")),
    ?assertNotEqual(nomatch, binary:match(Text, <<"1 function traced without "
                                                  "a return event for every "
                                                  "call">>)),
    ?assertEqual(nomatch, binary:match(Text, <<"Returns without a traced call">>)),
    Print = beamprobe_test_lib:cli_ok(["print", D]),
    PLines = [L || L <- binary:split(Print, <<"\n">>, [global]),
                   re:run(L, " (call|returned) ") =/= nomatch],
    ?assertEqual(20, length(PLines)),
    [?assertMatch({match, _}, re:run(L, "^\\S+ <[0-9.]+> (call|returned) "))
     || L <- PLines],
    %% Perfetto: tick/1's 6 calls and 2 returns are instants, outer/1's 6
    %% calls slices (B/E); no slice is left open at the end.
    PF = filename:join(?config(priv_dir, Config), "partial.json"),
    _ = beamprobe_test_lib:cli_ok(["export", "-F", "perfetto", "-o", PF, D]),
    {ok, J} = file:read_file(PF),
    Count = fun(Pat) -> length(binary:matches(J, Pat)) end,
    ?assertEqual(2, Count(<<"\"cat\":\"return\"">>)),
    ?assertEqual(6, Count(<<"\"ph\":\"B\"">>)),
    ?assertEqual(6, Count(<<"\"ph\":\"E\"">>)),
    ?assertEqual(0, Count(<<"open_at_end">>)),
    ok.
