%%% EUnit tests of the shell API's translations, without a session:
%%% recon_trace's and redbug's option names (beamprobe_shell_opts) and
%%% recon_trace's pattern forms (beamprobe_pattern_recon), including funs
%%% typed in a shell (made here with erl_eval, as the shell makes them).
-module(beamprobe_shell_opts_tests).

-include_lib("eunit/include/eunit.hrl").

-define(N(O), beamprobe_shell_opts:normalize(O)).
-define(P(X), beamprobe_pattern_recon:parse(X, false)).

%% A fun as the shell evaluates it.
shell_fun(Text) ->
    {ok, Toks, _} = erl_scan:string(Text ++ "."),
    {ok, Es} = erl_parse:parse_exprs(Toks),
    {value, F, _} = erl_eval:exprs(Es, erl_eval:new_bindings()),
    F.

%%% ---- options -------------------------------------------------------------

map_and_proplist_agree_test() ->
    Me = self(),
    L = [{pid, Me}, {time, 500}, return_to, {args, arity}, {print_depth, 7},
         {timestamp, trace}, {scope, local}, {print_msec, true}],
    {ok, M1} = ?N(L),
    {ok, M2} = ?N(maps:from_list(proplists:unfold(L))),
    ?assertEqual(M1, M2),
    ?assertEqual(#{procs => [Me], time => 500, return_to => true,
                   arity => true, args => 7, timestamp => time}, M1).

first_of_a_key_wins_test() ->
    ?assertEqual({ok, #{time => 100}}, ?N([{time, 100}, {time, 200}])),
    ?assertEqual({ok, #{time => 100}}, ?N([{timeout, 100}])).

%% Two names of one setting with different values are refused, map or
%% proplist: they were resolved silently, the later of the proplist or the
%% last in the map's key order winning ([{time, 1000}, {timeout, 5000}]
%% traced 5 s, against "the first of a key wins").  The same value twice
%% is fine.
aliases_that_disagree_test() ->
    [?assertMatch({O, {error, {conflicting_options, _, _}}}, {O, ?N(O)})
     || O <- [[{time, 1000}, {timeout, 5000}],
              #{time => 1000, timeout => 5000},
              [{arity, false}, {args, arity}],
              #{args => arity, arity => false},
              [{args, 3}, {print_depth, 10}],
              [{pid, all}, {procs, new}]]],
    ?assertEqual({error, {conflicting_options, time, timeout}},
                 ?N([{time, 1000}, {timeout, 5000}])),
    ?assertEqual({ok, #{time => 1000}}, ?N([{time, 1000}, {timeout, 1000}])),
    ?assertEqual({ok, #{args => 64}}, ?N([{args, 64}, {print_depth, 999999}])),
    ?assertNotEqual(nomatch, string:find(beamprobe:format_error(
                                           {conflicting_options, time,
                                            timeout}), "timeout")).

%% An io server that is not there (a name nobody has, a dead pid) is a bad
%% option, not a trace whose every line is lost.
io_server_there_test() ->
    Dead = spawn(fun() -> ok end),
    Ref = monitor(process, Dead),
    receive {'DOWN', Ref, process, Dead, _} -> ok end,
    ?assertEqual({error, {bad_option, io_server, bp_nobody_zz}},
                 ?N([{io_server, bp_nobody_zz}])),
    ?assertEqual({error, {bad_option, io_server, Dead}},
                 ?N([{io_server, Dead}])),
    Io = spawn(fun() -> receive stop -> ok end end),
    ?assertEqual({ok, #{io_server => Io}}, ?N([{io_server, Io}])),
    Io ! stop,
    %% The caller is no io server (the shell's evaluator).
    ?assertEqual({error, {bad_option, io_server, self()}},
                 ?N([{io_server, self()}])),
    ?assertEqual({ok, #{io_server => user}}, ?N([{io_server, user}])).

recon_pid_specs_test() ->
    Me = self(),
    [A, B, C] = [list_to_integer(X)
                 || X <- string:lexemes(pid_to_list(Me), "<.>")],
    yes = global:register_name(bp_opts_test, Me),
    try
        [?assertEqual({ok, #{procs => P}}, ?N([{pid, Spec}]))
         || {Spec, P} <- [{all, all}, {new, new}, {existing, existing},
                          {[all], all}, {Me, [Me]}, {[Me], [Me]},
                          {{A, B, C}, [Me]}, {pid_to_list(Me), [Me]},
                          {{global, bp_opts_test}, [Me]},
                          {{via, global, bp_opts_test}, [Me]},
                          {code_server, [code_server]},
                          {[Me, code_server], [Me, code_server]},
                          {{pid, B, C}, [Me]}]]
    after
        global:unregister_name(bp_opts_test)
    end,
    [?assertEqual({error, {bad_option, pid, Bad}}, ?N([{pid, Bad}]))
     || Bad <- [[], "<nope>", {global, bp_nobody_here}, 1.5,
                [self() | x], [new, self(), 1.5]]].

%% recon's lists mix processes and sets of them (its own doc:
%% `[{pid, [{via, gproc, Name}, new]}]'), each traced: taken with that
%% meaning, or refused naming the beamprobe way.  They were all
%% {bad_option, pid, ...}, which names none.
recon_mixed_pid_specs_test() ->
    Me = self(),
    [?assertEqual({Spec, {ok, #{procs => P}}}, {Spec, ?N([{pid, Spec}])})
     || {Spec, P} <- [{[all, new], all}, {[Me, all], all},
                      {[existing, new], all}, {[Me, existing], existing},
                      {[new, new], new}]],
    {error, {unsupported_option, pid, Hint}} = ?N([{pid, [Me, new]}]),
    ?assertNotEqual(nomatch, string:find(Hint, "procs => all")),
    ?assertMatch({error, {unsupported_option, procs, _}},
                 ?N(#{procs => [code_server, new]})).

refused_options_name_the_way_test() ->
    [begin
         {error, {unsupported_option, K, Hint}} = ?N([{K, V}]),
         ?assert(io_lib:char_list(Hint)),
         ?assert(length(Hint) > 10)
     end || {K, V} <- [{scope, global}, {formatter, x}, {use_dbg, true},
                       {target, n}, {cookie, c}, {blocking, true},
                       {max_queue, 1}, {max_msg_size, 1}, {debug, true},
                       {trace_child, true}, {discard, true}, {buffered, true},
                       {records, []}, {print_calls, true},
                       {print_return, true}, {print_node, true},
                       {print_fun, x}, {print_time_unit, second},
                       {print_file, "f"}, {file, "f"}, {file_size, 1},
                       {file_count, 1}]].

unknown_and_bad_test() ->
    ?assertEqual({error, {unknown_option, colour}}, ?N(#{colour => red})),
    ?assertEqual({error, {bad_option, opts, x}}, ?N(x)),
    ?assertEqual({error, {bad_option, opts, [x | y]}}, ?N([x | y])),
    ?assertEqual({error, {bad_option, opts, [{1, 2}]}}, ?N([{1, 2}])),
    ?assertEqual({error, {bad_option, print_re, "("}}, ?N([{print_re, "("}])),
    ?assertEqual({error, {bad_option, scope, moon}}, ?N([{scope, moon}])).

%% syntax (issue 11): the printer's syntax, erlang or elixir.
syntax_test() ->
    ?assertEqual({ok, #{syntax => elixir}}, ?N([{syntax, elixir}])),
    ?assertEqual({ok, #{syntax => erlang}}, ?N(#{syntax => erlang})),
    ?assertEqual({error, {bad_option, syntax, cobol}}, ?N([{syntax, cobol}])).

%%% ---- recon_trace's patterns ----------------------------------------------

mfa_forms_test() ->
    ?assertMatch({ok, #{kind := call, mfa := {lists, seq, 2},
                        match_spec := [{'_', [], []}], actions := []}},
                 ?P({lists, seq, 2})),
    ?assertMatch({ok, #{mfa := {lists, seq, '_'}}}, ?P({lists, seq, '_'})),
    ?assertMatch({ok, #{mfa := {lists, seq, '_'},
                        match_spec := [{'_', [], [{return_trace}]}],
                        actions := [return]}},
                 ?P({lists, seq, return_trace})),
    ?assertMatch({error, [_ | _]}, ?P({lists, seq, 256})),
    ?assertMatch({error, [_ | _]}, ?P({lists, seq, -1})),
    ?assertMatch({error, [_ | _]}, ?P({lists, seq, "x"})).

match_spec_forms_test() ->
    MS = [{['$1', '_'], [{is_integer, '$1'}], [{return_trace}]}],
    %% Every clause takes two arguments: the pattern is on arity 2 only.
    ?assertEqual({ok, #{kind => call, mfa => {lists, seq, 2},
                        match_spec => MS, actions => [return]}},
                 ?P({lists, seq, MS})),
    ?assertMatch({ok, #{mfa := {lists, seq, '_'}}},
                 ?P({lists, seq, [{'_', [], [{message, {caller}}]}]})),
    %% [] is erlang:trace_pattern/3's (and recon_trace's) every call.
    ?assertEqual({ok, #{kind => call, mfa => {lists, seq, '_'},
                        match_spec => [{'_', [], []}], actions => []}},
                 ?P({lists, seq, []})),
    [?assertMatch({error, [_ | _]}, ?P({lists, seq, Bad}))
     || Bad <- [[{bad}], [{['$1'], [{no_such_guard, '$1'}], []}],
                [{x, y}]]].

shell_fun_forms_test() ->
    F = shell_fun("fun([A, B]) when A > B -> return_trace() end"),
    ?assertEqual({ok, #{kind => call, mfa => {lists, seq, 2},
                        match_spec => [{['$1', '$2'], [{'>', '$1', '$2'}],
                                        [{return_trace}]}],
                        actions => [return]}},
                 ?P({lists, seq, F})),
    G = shell_fun("fun(_) -> message(caller()) end"),
    ?assertMatch({ok, #{mfa := {lists, seq, '_'}, actions := [caller]}},
                 ?P({lists, seq, G})),
    %% recon's `{M, '_', fun([X]) -> ... end}': every function of M (the
    %% heads match those of arity 1); {M, '_', 1} is no trace pattern, and
    %% was refused as {bad_option, calls, {lists, '_', 1}}.
    One = shell_fun("fun([X]) when X > 1 -> return_trace() end"),
    ?assertMatch({ok, #{mfa := {lists, '_', '_'},
                        match_spec := [{['$1'], [{'>', '$1', 1}],
                                        [{return_trace}]}]}},
                 ?P({lists, '_', One})),
    ?assertMatch({ok, #{mfa := {lists, '_', '_'}}},
                 ?P({lists, '_', [{['_', '_'], [], []}]})),
    %% Not a match spec: refused in words.
    H = shell_fun("fun([X]) -> lists:reverse(X) end"),
    ?assertMatch({error, "the fun is not a match specification" ++ _},
                 ?P({lists, seq, H})),
    %% A compiled fun has no clauses to transform.
    ?assertMatch({error, "only a fun typed in the shell" ++ _},
                 ?P({lists, seq, fun(X) -> X end})).

safety_test() ->
    ?assertMatch({error, [_ | _]}, ?P({'_', '_', '_'})),
    ?assertMatch({error, [_ | _]}, ?P({io, format, 2})),
    ?assertMatch({error, [_ | _]}, ?P({beamprobe, start, 1})),
    ?assertMatch({ok, _}, beamprobe_pattern_recon:parse({io, format, 2}, true)).
