%%% @doc EUnit: beamprobe_combine against the VM's own match-spec engine
%%% (erlang:match_spec_test/3, the oracle): a clause compiled into a
%%% condition over the argument list must hold for exactly the argument
%%% lists the clause matches; a combined match spec must route each call
%%% to exactly the sessions whose own match spec matches it, with their
%%% return tracing and call info.
-module(beamprobe_combine_tests).

-include_lib("eunit/include/eunit.hrl").

%% Heads and guards of every kind the translation handles, for arity 2.
clauses() ->
    [{'_', [], []},
     {'$1', [], []},
     {'$1', [{'=:=', {length, '$1'}, 2}], []},
     {['_', '_'], [], []},
     {['$1', '_'], [{'>', '$1', 5}], []},
     {['$1', '$1'], [], []},
     {['$1', '$2'], [{'<', '$1', '$2'}], []},
     {[{ok, '$1'}, '_'], [{is_integer, '$1'}], []},
     {[{'_', '_', '_'}, '$2'], [{is_atom, '$2'}], []},
     {[[a | '$1'], '_'], [{'==', {length, '$1'}, 1}], []},
     {[[], '_'], [], []},
     {[#{k => '$1'}, '_'], [{'>', '$1', 0}], []},
     {[#{k => 1, j => x}, '_'], [], []},
     {[<<"bin">>, 1.0], [], []},
     {['$1', '_'], [{'==', {element, 1, '$1'}, ok}], []},  % raises
     {['$1', '$2'], [{'>', {'+', '$1', '$2'}, 3}], []},      % raises
     {['$1', '_'], [{'orelse', {is_atom, '$1'}, {'>', '$1', 10}}], []},
     {['$1', '_'], [{'=:=', '$_', [a, b]}], []},
     {['$1', '$2'], [{'=:=', '$$', [1, 2]}], []},
     %% Raising sub-expressions under comparisons, type tests, not.
     {['$1', '_'], [{'not', {'>', {'+', '$1', 1}, 3}}], []},
     {['$1', '_'], [{is_atom, {hd, '$1'}}], []},
     {['$1', '_'], [{'orelse', {'>', {'+', '$1', 1}, 3}, true}], []},
     {['$1', '$2'], [{'=:=', {element, 1, '$1'}, '$2'}, {is_integer, '$2'}],
      []},
     {['$1', '_'], [{'not', {is_integer, {length, '$1'}}}], []}].

args() ->
    Terms = [0, 1, 6, 11, a, x, 1.0, <<"bin">>, [], [a], [a, b], [b, c],
             {ok, 1}, {ok, a}, {ok, 1, 2}, {a, b, c}, #{k => 1}, #{k => -1},
             #{k => 1, j => x}, #{j => x}, "s", self()],
    [[A, B] || A <- Terms, B <- [1, 2, a, 1.0, <<"bin">>, ok]].

vm_match(Args, MS) ->
    case erlang:match_spec_test(Args, MS, trace) of
        {ok, false, _, _} -> false;
        {ok, _, _, _} -> true;
        {error, E} -> error({bad_ms, MS, E})
    end.

%% Each compiled clause holds exactly where the clause matches: as a
%% guard, and as a body expression (how a combined match spec's route is
%% computed; a body evaluates a raising sub-expression to 'EXIT').
compile_clause_test_() ->
    clause_cases('$1', fun beamprobe_combine:compile_clause/1).

%% The same under a head of one arity (`['$1', '$2']'), how a key that
%% names one arity is combined: the arguments are the head's variables.
compile_clause_fixed_test_() ->
    clause_cases(['$1', '$2'],
                 fun(C) -> beamprobe_combine:compile_clause(C, 2) end).

%% One case per clause: Compile(C) under Head against the VM's own match.
clause_cases(Head, Compile) ->
    [{lists:flatten(io_lib:format("~p", [C])),
      fun() ->
              Cond = Compile(C),
              Guard = [{Head, [Cond], []}],
              Body = [{Head, [], [{message, {{Cond}}}]}],
              [begin
                   Want = vm_match(Args, [C]),
                   ?assertEqual({C, Args, Want},
                                {C, Args, vm_match(Args, Guard)}),
                   {ok, {Val}, _, _} =
                       erlang:match_spec_test(Args, Body, trace),
                   ?assertEqual({C, Args, Want}, {C, Args, Val =:= true})
               end || Args <- args()]
      end} || C <- clauses()].

%% The route of a call: the members named in the result of the combined
%% match spec (first element of a member counts), each with its info and
%% the return tracing its clause asked for; and whether the VM traces the
%% return (the tag says so, and exception_trace is on).
route(Args, MS) ->
    case erlang:match_spec_test(Args, MS, trace) of
        {ok, false, _, _} -> {[], false};
        {ok, Res, Flags, _} ->
            [Tag | Elems] = tuple_to_list(Res),
            Members = lists:foldl(
                        fun(V, Acc) when is_integer(V) ->
                                add(V, true, Acc);
                           ({V, Info}, Acc) -> add(V, Info, Acc);
                           (_, Acc) -> Acc
                        end, [], Elems),
            Traced = Flags =:= [exception_trace],
            ?assertEqual(Tag =:= bp_route_ret, Traced),
            ?assert(Flags =:= [] orelse Traced),
            {lists:sort(Members), Traced}
    end.

add(V, Info, Acc) ->
    M = V band 255,
    Ret = case V bsr 8 of
              0 -> none;
              1 -> return_trace;
              3 -> exception_trace
          end,
    case lists:keymember(M, 1, Acc) of
        true -> Acc;
        false -> [{M, Info, Ret} | Acc]
    end.

%% Sessions alone: which match, with their call info and return tracing.
alone(Args, Sessions) ->
    Results = [{M, erlang:match_spec_test(Args, MS, trace)}
               || {M, MS} <- Sessions],
    Members = lists:sort([{M, R, case Fs of
                                     [] -> none;
                                     [F] -> F
                                 end}
                          || {M, {ok, R, Fs, _}} <- Results, R =/= false]),
    {Members, lists:any(fun({_, _, F}) -> F =/= none end, Members)}.

%% Several sessions' match specs on one function: the combined match spec
%% routes every call exactly as the sessions alone would have matched it,
%% puts the strongest return tracing any of them asked for, and carries
%% each matching session's call info.
combined_routes_test() ->
    combined_routes({m, f, 2}).

%% The same on a key of any arity (`{m, f, '_'}': head '$1', the list).
combined_routes_any_arity_test() ->
    combined_routes({m, f, '_'}).

%% A key of one arity gets a head of one arity: no list is built.
fixed_head_test() ->
    {ok, #{{m, f, 2} := MS}} =
        beamprobe_combine:desired([{0, [{{m, f, 2}, [{['$1', '_'], [], []}]}]},
                                   {1, [{{m, f, 2}, [{['_', '$1'], [], []}]}]}]),
    ?assertEqual([['$1', '$2']], lists:usort([H || {H, _, _} <- MS])),
    {ok, #{{m, f, '_'} := MS2}} =
        beamprobe_combine:desired([{0, [{{m, f, '_'}, [{['$1', '_'], [], []}]}]},
                                   {1, [{{m, f, '_'}, [{['_', '$1'], [], []}]}]}]),
    ?assertEqual(['$1'], lists:usort([H || {H, _, _} <- MS2])).

combined_routes(K) ->
    Sessions = [{0, [{['$1', '_'], [{'>', '$1', 5}], []}]},
                {3, [{['$1', '_'], [{'=<', '$1', 5}], [{return_trace}]}]},
                {5, true},
                {7, [{[{ok, '$1'}, '_'], [], [{message, {{got, '$1'}}}]},
                     {['$1', '_'], [{is_atom, '$1'}], [{exception_trace}]}]},
                {9, [{['$1', '$2'], [{'>', {'+', '$1', '$2'}, 3}],
                      [{message, '$2'}, {return_trace}]}]},
                %% A head of another arity: never matches a call of 2.
                {11, [{['$1'], [], []}, {['$1', b], [], [{message, '$_'}]}]}],
    {ok, #{K := MS}} = beamprobe_combine:desired(
                         [{M, [{K, S}]} || {M, S} <- Sessions]),
    [begin
         {Members, Ret} = route(Args, MS),
         Alone = alone(Args, [{M, case S of true -> [{'_', [], []}];
                                         _ -> S
                                  end} || {M, S} <- Sessions]),
         ?assertEqual({Args, Alone}, {Args, {Members, Ret}})
     end || Args <- args()].

%% Identical match specs are installed as they are; one session's match
%% spec too; intersections of patterns get keys of their own.
keys_test() ->
    MS = [{['$1'], [{'>', '$1', 1}], []}],
    ?assertEqual({ok, #{{m, f, 1} => MS}},
                 beamprobe_combine:desired([{0, [{{m, f, 1}, MS}]},
                                            {1, [{{m, f, 1}, MS}]}])),
    {ok, D} = beamprobe_combine:desired([{0, [{{m, f, '_'}, true}]},
                                         {1, [{{m, '_', 1}, MS}]}]),
    ?assertEqual(lists:sort([{m, f, '_'}, {m, '_', 1}, {m, f, 1}]),
                 lists:sort(maps:keys(D))),
    ?assertEqual(true, maps:get({m, f, '_'}, D)),
    ?assertEqual(MS, maps:get({m, '_', 1}, D)),
    ?assertEqual(1, beamprobe_combine:routes(D)).

%% What cannot be combined.
refused_test() ->
    K = {m, f, 1},
    [?assertMatch({error, {cannot_combine, K, _}},
                  beamprobe_combine:desired([{0, [{K, true}]},
                                             {1, [{K, [Clause]}]}]))
     || Clause <- [{['_'], [], [{trace, [], [send]}]},
                   {['_'], [], [{silent, true}]},
                   {['_'], [], [{message, false}]},
                   {['_'], [], [{set_seq_token, label, 1}]},
                   %% The same nested in the call event's message: the VM
                   %% runs them too (a return no route knows of).
                   {['_'], [], [{message, {return_trace}}]},
                   {['_'], [], [{message, {{ok, {silent, true}}}}]},
                   {['$1'], [], [{message, ['$1', {set_seq_token, label, 1}]}]},
                   {['_'], [], [{message, {message, true}}]},
                   {[#{'$1' => 1}], [], []},
                   {['_'], [{'>', '$3', 1}], []}]].

%% Two sessions of one clause each and no call info: the combined
%% match spec's routes are literals (one clause per set of sessions that
%% can match together, largest first) and route every call exactly as
%% the sessions alone would have matched it, with their return tracing.
%% Sessions drawn from every clause kind above, raising guards included.
literal_routes_test_() ->
    [{Name, fun() -> literal_routes({m, f, 2}, S) end}
     || {Name, S} <- combos([2], 1, fun(M) -> M * 2 end, 7, 1)].

literal_routes(K, Sessions) ->
    MS = exact_routes(K, Sessions),
    %% 2^n - 1 sets at most, after a clause that ends a call none wants.
    Sets = case MS of
               [{_, _, [{message, false}]} | Rest] -> Rest;
               _ -> MS
           end,
    ?assert(length(Sets) < 1 bsl length(Sessions)),
    [?assertMatch({message, {const, _}}, hd(Body)) || {_, _, Body} <- Sets].

%% Three to eight such sessions: the route comes from a tree of constant
%% maps (each condition evaluated once, the leaf the literal route of the
%% sessions whose conditions hold), exactly as the sessions alone.
tree_routes_test_() ->
    [{Name, fun() -> tree_routes({m, f, 2}, S) end}
     || {Name, S} <- combos([3, 4, 6, 8], 2, fun(M) -> M * 3 + 1 end, 5, 2)].

tree_routes(K, Sessions) ->
    MS = exact_routes(K, Sessions),
    [?assertMatch({message, {map_get, _, _}}, hd(Body)) || {_, _, Body} <- MS].

%% Nine such sessions: the routes are built per call again (a tree of
%% 512 leaves would be too large a constant), and still exact.
nine_sessions_build_routes_test() ->
    Sessions = [{M, [{['$1', '_'], [{'>', '$1', M}], []}]}
                || M <- lists:seq(0, 8)],
    MS = exact_routes({m, f, 2}, Sessions),
    ?assertEqual(9, length(MS)),
    [?assertMatch({message, {T}} when is_tuple(T), hd(Body))
     || {_, _, Body} <- MS].

%% Named sets of K sessions (K in Ks) of one clause each: session M is
%% member Member(M) with clause (I + M * CStep) of clauses() and the
%% return tracing (I + M * RStep) of none, return, exception; one set per
%% I-th clause, every Step-th.
combos(Ks, Step, Member, CStep, RStep) ->
    Cs = clauses(),
    N = length(Cs),
    Rets = [[], [{return_trace}], [{exception_trace}]],
    Combos = [[{Member(M),
                [setelement(3, lists:nth((I + M * CStep) rem N + 1, Cs),
                            lists:nth((I + RStep * M) rem 3 + 1, Rets))]}
               || M <- lists:seq(0, K - 1)]
              || K <- Ks, I <- lists:seq(0, N - 1, Step)],
    [{lists:flatten(io_lib:format("~p sessions, combo ~p", [length(S), J])), S}
     || {J, S} <- lists:enumerate(Combos)].

%% The combined match spec of Sessions on key K: counted as a route, and
%% routing every call of args() exactly as the sessions alone match it.
exact_routes(K, Sessions) ->
    {ok, #{K := MS}} = beamprobe_combine:desired(
                         [{M, [{K, S}]} || {M, S} <- Sessions]),
    ?assertEqual(1, beamprobe_combine:routes(#{K => MS})),
    [?assertEqual({Args, alone(Args, Sessions)}, {Args, route(Args, MS)})
     || Args <- args()],
    MS.
