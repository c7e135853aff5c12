%%% @doc The call patterns of overlapping sessions: which match spec is
%%% installed on each function so that every session gets exactly the
%%% calls its own match spec selects (docs/design.md, "Sessions that
%%% overlap").
%%%
%%% On OTP 25 a function has one match spec.  When several sessions trace
%%% a function and their match specs differ, the installed match spec is
%%% their union.  When each session's match spec is one clause without
%%% call info, the routes are constants the VM does not build per call:
%%% for two sessions one clause per set of sessions that can match
%%% together (enumerated/2), for three to eight a tree of constant maps
%%% indexed by the conditions (tree/2).  Otherwise each clause of each
%%% session's match spec becomes a condition over the arguments, and the
%%% body sends
%%% `{message, {bp_route, E1, ..., Ek}}' where `Ei' evaluates to the
%%% session's hub member number (plus 256 or 768 when its clause asks for
%%% return_trace or exception_trace) when its condition holds, else to
%%% something that is not an integer (guards keep their failure
%%% semantics in the body, see raising/1).  The tracer routes the call to
%%% exactly those members.  Return tracing is put on by extra clauses,
%%% one per session clause that asks for it, guarded by its condition and
%%% "no earlier clause of that session matched", before the clauses that
%%% only send the route: they use exception_trace and the tag
%%% `bp_route_ret', so that the tracer can pair the one return_from or
%%% exception_from with the call and send it to the members whose clause
%%% asked for it (c_src/bp_retstack.h).
%%%
%%% The conditions read the arguments from a head of their own: when the
%%% key names one arity A, the head `['$1', ..., '$A']' (each argument a
%%% variable, the whole list `'$_''); for a key of any arity (`{m, f,
%%% '_'}'), the head `'$1'' (the list, walked with `hd'/`tl' after a
%%% length check).  The first is what the VM runs fastest: no list is
%%% built and nothing walked (docs/performance/stops-22-23.md, "No
%%% locked instruction per event; combined heads of one arity").
%%%
%%% A clause's `message' action (call info: `{caller}', `{process_dump}',
%%% `{caller_line}', ...) is evaluated only in that session's element,
%%% which is then `{Member, Info}'.
%%%
%%% Pure functions: the janitor applies the result.
-module(beamprobe_combine).

-export([desired/1, desired/2, compile_clause/1, compile_clause/2,
         covers/2, routes/1, routes/2]).

%% Routes without a built term (docs/performance/stop-29.md, "Own
%% conditions: routes as literals"): one clause per set of members for
%% at most this many members on a key (2^n - 1 clauses) ...
-define(ENUM_MAX, 2).
%% ... and a tree of constant maps (2^n leaves) for at most this many.
-define(TREE_MAX, 8).

-type mfa_pat() :: {atom(), atom(), arity() | '_'}.
-type ms() :: true | [tuple()].
%% One session's call patterns: its hub member number and its patterns.
-type session_pats() :: {0..255, [{mfa_pat(), ms()}]}.
%% The tags of a route and of a route whose call's return is traced:
%% the node's (beamprobe_nif:hub_route_tags/0), names no traced term can
%% carry by chance or by design, since the tracer takes any match-spec
%% result tagged so for a route.
-type tags() :: {atom(), atom()}.
-export_type([session_pats/0, tags/0]).

%% The tags of desired/1 and routes/1 (tests: the tracer knows its own).
-define(PLAIN_TAGS, {bp_route, bp_route_ret}).

%% @doc The match spec to install on every pattern key, from the
%% sessions' patterns: `{ok, #{Key => MatchSpec}}', or `{error,
%% {cannot_combine, Key, Why}}' when two sessions' match specs on one
%% function cannot be combined (an action with effects beyond the call
%% event, `{message, false}', a head or guard this module cannot
%% translate).
%% Keys are the sessions' patterns and the intersections of patterns of
%% different sessions (`{m, f, '_'}' and `{m, '_', 1}' meet in `{m, f,
%% 1}').
-spec desired([session_pats()]) ->
          {ok, #{mfa_pat() => ms()}} | {error, term()}.
desired(Sessions) ->
    desired(Sessions, ?PLAIN_TAGS).

%% @doc As {@link desired/1}, with the routes tagged `Tags' (`{Route,
%% RouteRet}', the node's: beamprobe_nif:hub_route_tags/0).
-spec desired([session_pats()], tags()) ->
          {ok, #{mfa_pat() => ms()}} | {error, term()}.
desired(Sessions, Tags) ->
    Pats = [P || {_, Ps} <- Sessions, {P, _} <- Ps],
    Keys = closure(lists:usort(Pats)),
    try
        {ok, maps:from_list([{K, key_ms(K, Sessions, Tags)} || K <- Keys])}
    catch throw:{cannot_combine, _, _} = Why -> {error, Why}
    end.

%% Adds the intersections of overlapping keys until none is new.
closure(Keys) ->
    New = lists:usort([I || A <- Keys, B <- Keys, A < B,
                            I <- [intersect(A, B)], I =/= none,
                            not lists:member(I, Keys)]),
    case New of
        [] -> Keys;
        _ -> closure(lists:usort(Keys ++ New))
    end.

intersect({M1, F1, A1}, {M2, F2, A2}) ->
    case {meet(M1, M2), meet(F1, F2), meet(A1, A2)} of
        {none, _, _} -> none;
        {_, none, _} -> none;
        {_, _, none} -> none;
        K -> K
    end.

meet('_', X) -> X;
meet(X, '_') -> X;
meet(X, X) -> X;
meet(_, _) -> none.

%% @doc The number of combined match specs (whose calls carry a route)
%% among the installed ones.
-spec routes(#{mfa_pat() => ms()}) -> non_neg_integer().
routes(Patterns) ->
    routes(Patterns, ?PLAIN_TAGS).

%% @doc As {@link routes/1}, for routes tagged `Tags'.
-spec routes(#{mfa_pat() => ms()}, tags()) -> non_neg_integer().
routes(Patterns, Tags) ->
    length([K || {K, MS} <- maps:to_list(Patterns), is_route(MS, Tags)]).

is_route(MS, Tags) when is_list(MS) ->
    lists:any(fun(C) -> is_route_clause(C, Tags) end, MS);
is_route(_, _) -> false.

is_route_clause({_, _, [{message, {T}} | _]}, {R, RR}) when is_tuple(T),
                                                            tuple_size(T) > 0 ->
    lists:member(element(1, T), [{const, R}, {const, RR}]);
is_route_clause({_, _, [{message, {const, T}} | _]}, {R, RR})
  when is_tuple(T), tuple_size(T) > 0 ->
    lists:member(element(1, T), [R, RR]);
is_route_clause({_, _, [{message, {map_get, _, _}} | _]}, _) -> true;
is_route_clause(_, _) -> false.

%% @doc Does pattern `General' name every function `Key' names?
-spec covers(mfa_pat(), mfa_pat()) -> boolean().
covers({M1, F1, A1}, {M2, F2, A2}) ->
    c(M1, M2) andalso c(F1, F2) andalso c(A1, A2).

c('_', _) -> true;
c(X, X) -> true;
c(_, _) -> false.

%% The match spec of key K: each covering session's match spec is the
%% one of its most specific pattern covering K (the one the VM would have
%% kept for that session alone, beamprobe_session:general_first/1).
key_ms(K, Sessions, Tags) ->
    Cover = [{Member, session_ms(K, Ps)}
             || {Member, Ps} <- Sessions,
                lists:any(fun({P, _}) -> covers(P, K) end, Ps)],
    case lists:usort([MS || {_, MS} <- Cover]) of
        [MS] -> MS;
        _ -> combine(K, Cover, Tags)
    end.

session_ms(K, Ps) ->
    Wild = fun(P) -> length([x || '_' <- tuple_to_list(P)]) end,
    Sorted = lists:sort([{Wild(P), -I, MS}
                         || {I, {P, MS}} <- lists:enumerate(Ps),
                            covers(P, K)]),
    {_, _, MS} = hd(Sorted),
    MS.

%% The combined match spec of key K for [{Member, MatchSpec}]: with
%% routes the VM does not build when the sessions allow it (enumerated/2,
%% tree/2), else with routes it builds per call (built/3).
combine({_, _, A} = K, Cover, Tags) ->
    Arity = case is_integer(A) of true -> A; false -> any end,
    case units(K, Arity, Cover) of
        {ok, Units} when length(Units) =< ?ENUM_MAX ->
            enumerated(combined_head(Arity), Units, Tags);
        {ok, Units} when length(Units) =< ?TREE_MAX ->
            tree(combined_head(Arity), Units, Tags);
        _ ->
            built(K, Arity, Cover, Tags)
    end.

%% The match spec of more units: the clauses of built/3 (one per unit,
%% guarded by its condition, those asking for return tracing first),
%% whose body finds the route in a constant tree of maps instead of
%% building it: `map_get' of each unit's condition, as true or false, in
%% the map the previous one gave, down to the literal route of exactly
%% the units whose conditions hold.  Each condition runs once and nothing
%% is built.  The tree has 2^n leaves: only up to ?TREE_MAX units.
tree(Head, Units, Tags) ->
    Tree = lists:foldl(
             fun({_, Cond, _}, Acc) ->
                     %% A condition that raises is 'EXIT' in a body:
                     %% =:= true makes it false, as in a guard.
                     {map_get, {'=:=', Cond, true}, Acc}
             end, {const, route_tree(Units, [], Tags)}, Units),
    [{Head, [Cond], [{message, Tree}, {exception_trace}]}
     || {_, Cond, R} <- Units, R =/= none] ++
        [{Head, [Cond], [{message, Tree}]} || {_, Cond, _} <- Units].

%% Keyed by the first unit's condition, then the next one's...: the
%% route of the units found true (Held, in reverse) at each leaf.
route_tree([], Held, Tags) ->
    route_tuple(lists:reverse(Held), Tags);
route_tree([U | Us], Held, Tags) ->
    #{true => route_tree(Us, [U | Held], Tags),
      false => route_tree(Us, Held, Tags)}.

%% Each member as one unit {Member, Cond, Returns} when its match spec has
%% one clause for this key and no `message' action (its route element a
%% constant: the member number and its return tracing); a member none of
%% whose clauses fits the key's arity never matches and is left out.
%% `none' when a member has more clauses or call info.
units(K, Arity, Cover) ->
    try
        {ok, lists:append(
               [case [C || C <- clauses(MS), fits(C, Arity)] of
                    [] -> [];
                    [{_, _, Body} = C] ->
                        {Cond, Bind} = compile(K, Arity, C),
                        case actions(K, Body, Bind) of
                            {R, none} -> [{Member, Cond, R}];
                            _ -> throw(not_units)
                        end;
                    _ -> throw(not_units)
                end || {Member, MS} <- Cover])}
    catch throw:not_units -> none
    end.

%% The match spec of units with literal routes: one clause per set of
%% units that can hold together, largest sets first, guarded by the
%% conditions of its units, whose body is the route of that set as a
%% constant.  The VM runs the first clause that matches, which is the
%% clause of exactly the units whose conditions hold (a set that matches
%% is a subset of those; every larger one that matches would come
%% first), and a constant costs it nothing per call, where a route built
%% per call costs ~150 ns of heap and its cleanup.  A unit whose
%% condition is `true' is in every set (the sets without it can never be
%% first).  2^n - 1 clauses, which the VM tries in turn: for two units
%% (?ENUM_MAX) the cheapest form; with three, a call that one of them
%% wants costs more than with tree/2, with four more than built/3.  When
%% no unit is always in, a first clause ends a call none of them wants at
%% once (no call event: `{message, false}'), where the VM would otherwise
%% try every clause (a condition that raises fails that first guard: the
%% call goes on to the sets, which route it exactly).
enumerated(Head, Units, Tags) ->
    {Always, Some} = lists:partition(fun({_, Cond, _}) -> Cond =:= true end,
                                     Units),
    Sets = [Always ++ S || S <- subsets(Some), Always ++ S =/= []],
    Sorted = lists:sort(fun(X, Y) -> length(X) >= length(Y) end, Sets),
    None = case {Always, [Cond || {_, Cond, _} <- Some]} of
               {[], [C]} -> [{Head, [{'not', C}], [{message, false}]}];
               {[], Cs} -> [{Head, [{'not', list_to_tuple(['orelse' | Cs])}],
                             [{message, false}]}];
               _ -> []
           end,
    None ++
        [{Head, [Cond || {_, Cond, _} <- Set, Cond =/= true],
          literal_route(Set, Tags)} || Set <- Sorted].

subsets([]) -> [[]];
subsets([U | Us]) ->
    Rest = subsets(Us),
    [[U | S] || S <- Rest] ++ Rest.

%% The clause body sending Set's route as a constant (exception_trace
%% when the route's tag says the VM traces the return).
literal_route(Set, {_, RetTag} = Tags) ->
    case route_tuple(Set, Tags) of
        Route when element(1, Route) =:= RetTag ->
            [{message, {const, Route}}, {exception_trace}];
        Route ->
            [{message, {const, Route}}]
    end.

%% The route of exactly the units in Set, tagged bp_route_ret when one of
%% them asks for return tracing.
route_tuple(Set, {RouteTag, RetTag}) ->
    Tag = case lists:any(fun({_, _, R}) -> R =/= none end, Set) of
              true -> RetTag;
              false -> RouteTag
          end,
    list_to_tuple([Tag | [route_value(M, R, none) || {M, _, R} <- Set]]).

%% The combined match spec whose clauses build the route per call: each
%% element evaluates to its member's value if its condition holds.
built(K, Arity, Cover, {RouteTag, RetTag}) ->
    Elems = lists:append(
              [begin
                   %% A clause whose head has another arity never matches
                   %% on this key (with one arity): left out.
                   Clauses = [C || C <- clauses(MS), fits(C, Arity)],
                   Compiled = [compile(K, Arity, C) || C <- Clauses],
                   Conds = [Cond || {Cond, _} <- Compiled],
                   %% A clause runs only if no earlier clause of the same
                   %% match spec matched: its actions need that too.
                   [{Member, Cond, first_of(Cond, lists:sublist(Conds, J - 1)),
                     actions(K, Body, Bind)}
                    || {J, {{Cond, Bind}, {_, _, Body}}}
                           <- lists:enumerate(lists:zip(Compiled, Clauses))]
               end || {Member, MS} <- Cover]),
    Route = fun(Tag) ->
                    {message, {list_to_tuple(
                                 [{const, Tag} |
                                  [{'andalso', Cond, route_value(Member, R, Info)}
                                   || {Member, Cond, _, {R, Info}} <- Elems]])}}
            end,
    %% Returns: exception_trace for every clause that asks for either
    %% (one return_from or exception_from per traced call, whatever
    %% happens: the tracer pairs it with the call, bp_retstack.h), and
    %% the tag bp_route_ret says that one will come.
    Head = combined_head(Arity),
    [{Head, [First], [Route(RetTag), {exception_trace}]}
     || {_, _, First, {R, _}} <- Elems, R =/= none] ++
        [{Head, [Cond], [Route(RouteTag)]} || {_, Cond, _, _} <- Elems].

%% The head of a combined match spec's clauses: each argument a variable
%% for one arity, the argument list for any.
combined_head(any) -> '$1';
combined_head(A) -> [arg_var(I) || I <- lists:seq(1, A)].

arg_var(I) -> list_to_atom("$" ++ integer_to_list(I)).

fits({Args, _, _}, A) when is_list(Args), is_integer(A) -> length(Args) =:= A;
fits(_, _) -> true.

%% A route element's value when the clause matched: the member number
%% plus 256 if the clause asks for return_trace, 768 for exception_trace;
%% or {that, Info} with the value of the clause's `message' action (the
%% call info that member records: caller, stack, ...), evaluated only
%% when its condition holds.
route_value(Member, R, Info) ->
    V = Member + case R of
                     none -> 0;
                     return_trace -> 256;
                     exception_trace -> 768
                 end,
    case Info of
        none -> V;
        X -> {{V, X}}
    end.

first_of(Cond, []) -> Cond;
first_of(Cond, Earlier) ->
    {'andalso', Cond, {'not', list_to_tuple(['orelse', false | Earlier])}}.

clauses(true) -> [{'_', [], []}];
clauses(MS) when is_list(MS) -> MS.

%% The actions of a clause: which return tracing it asks for, and the
%% value of its `message' action (the last one, as the VM does).  Actions
%% with effects on the process or the node (trace, silent, set_seq_token,
%% enable_trace, ...) and `{message, false}' (no call event) would apply
%% to every session: refused.
actions(K, Body, Bind) when is_list(Body) ->
    lists:foldl(fun({exception_trace}, {_, I}) -> {exception_trace, I};
                   ({return_trace}, {none, I}) -> {return_trace, I};
                   ({return_trace}, RI) -> RI;
                   ({message, false} = A, _) ->
                        throw({cannot_combine, K, {action, A}});
                   ({message, true}, {R, _}) -> {R, none};
                   ({message, X}, {R, _}) ->
                        {R, try subst(X, Bind)
                            catch throw:{unsupported, W} ->
                                    throw({cannot_combine, K, W})
                            end};
                   (A, RI) when not is_tuple(A) -> RI;
                   (A, _) -> throw({cannot_combine, K, {action, A}})
                end, {none, none}, Body);
actions(K, Body, _Bind) -> throw({cannot_combine, K, {body, Body}}).

compile(K, Arity, Clause) ->
    try compile2(Clause, Arity)
    catch throw:{unsupported, What} -> throw({cannot_combine, K, What})
    end.

%% @doc One match-spec clause `{Head, Guards, Body}' as a condition over
%% the whole argument list `'$1'': structural checks for the head
%% (literals compared with `=:='), its variables replaced by their access
%% paths, then its guards.  Throws `{unsupported, What}'.
-spec compile_clause(tuple()) -> term().
compile_clause(Clause) ->
    element(1, compile2(Clause, any)).

%% @doc The same for calls of arity `Arity', as a condition under the head
%% `['$1', ..., '$Arity']' (a clause whose head is a list of another
%% length never matches them: not compiled, `{unsupported, _}').
-spec compile_clause(tuple(), arity()) -> term().
compile_clause(Clause, Arity) ->
    case fits(Clause, Arity) of
        true -> element(1, compile2(Clause, Arity));
        false -> throw({unsupported, {arity, Clause}})
    end.

%% The condition and the variables' access paths.
compile2({Head, Guards, _Body}, Arity) when is_list(Guards) ->
    {Checks, Bind0} = head(Head, Arity),
    Bind = Bind0#{{args} => args(Arity)},
    Conds = Checks ++ [subst(raising(G), Bind) || G <- Guards],
    {case Conds of
         [] -> true;
         [One] -> One;
         _ -> list_to_tuple(['andalso' | Conds])
     end, Bind};
compile2(C, _) -> throw({unsupported, {clause, C}}).

head('_', _) -> {[], #{}};
head(V, Arity) when is_atom(V) ->
    case var(V) of
        true -> {[], #{V => args(Arity)}};
        false -> throw({unsupported, {head, V}})
    end;
head(Args, any) when is_list(Args) ->
    {Checks, Bind, _} =
        lists:foldl(fun(A, {Cs, B, Path}) ->
                            {Cs1, B1} = pat(A, {hd, Path}, B),
                            {Cs ++ Cs1, B1, {tl, Path}}
                    end, {[], #{}, '$1'}, Args),
    {[{'=:=', {length, '$1'}, length(Args)} | Checks], Bind};
head(Args, Arity) when is_list(Args), length(Args) =:= Arity ->
    %% One arity: argument I is the head's variable '$I'.
    lists:foldl(fun({I, A}, {Cs, B}) ->
                        {Cs1, B1} = pat(A, arg_var(I), B),
                        {Cs ++ Cs1, B1}
                end, {[], #{}}, lists:enumerate(Args));
head(H, _) -> throw({unsupported, {head, H}}).

%% The argument list: the head itself for any arity, '$_' (the VM's whole
%% argument list in a trace match spec) under a head of one arity.
args(any) -> '$1';
args(_) -> '$_'.

pat('_', _Path, B) -> {[], B};
pat(V, Path, B) when is_atom(V) ->
    case var(V) of
        true ->
            case B of
                #{V := Bound} -> {[{'=:=', Path, Bound}], B};
                #{} -> {[], B#{V => Path}}
            end;
        false -> {[{'=:=', Path, {const, V}}], B}
    end;
pat(T, Path, B) when is_tuple(T) ->
    N = tuple_size(T),
    lists:foldl(fun({I, E}, {Cs, B0}) ->
                        {Cs1, B1} = pat(E, {element, I, Path}, B0),
                        {Cs ++ Cs1, B1}
                end,
                {[{is_tuple, Path}, {'=:=', {size, Path}, N}], B},
                lists:enumerate(tuple_to_list(T)));
pat([H | T], Path, B) ->
    {Cs1, B1} = pat(H, {hd, Path}, B),
    {Cs2, B2} = pat(T, {tl, Path}, B1),
    {[{is_list, Path}, {'=/=', Path, []}] ++ Cs1 ++ Cs2, B2};
pat(M, Path, B) when is_map(M) ->
    maps:fold(fun(K, V, {Cs, B0}) ->
                      case is_atom(K) andalso var(K) of
                          true -> throw({unsupported, {map_key, K}});
                          false -> ok
                      end,
                      {Cs1, B1} = pat(V, {map_get, {const, K}, Path}, B0),
                      {Cs ++ [{is_map_key, {const, K}, Path}] ++ Cs1, B1}
              end, {[{is_map, Path}], B}, M);
pat(Lit, Path, B) ->
    {[{'=:=', Path, {const, Lit}}], B}.

%% A guard as a body expression with a guard's failure semantics.  In a
%% match-spec body a sub-expression that raises evaluates to 'EXIT' and
%% evaluation goes on (verified on OTP 25: `{'>', {'+', a, 1}, 3}' is
%% true in a body, a failure in a guard), so a comparison or a type test
%% whose operand is a call (which may raise) is wrapped: if an operand is
%% 'EXIT' the node is 'EXIT' too (not false, which `not' would turn into
%% true), which makes every boolean operator above it, and the route
%% element, fail.  (An argument that really is the atom 'EXIT' is taken
%% for a failure there.)  Variables and constants cannot raise; the
%% structural checks of the head are safe by construction.
raising({Op, A, B}) when Op =:= '>'; Op =:= '<'; Op =:= '>='; Op =:= '=<';
                         Op =:= '=='; Op =:= '/='; Op =:= '=:=';
                         Op =:= '=/=' ->
    wrap({Op, raising(A), raising(B)}, [X || X <- [A, B], may_raise(X)]);
raising({Op, A}) when Op =:= is_atom; Op =:= is_binary; Op =:= is_boolean;
                      Op =:= is_float; Op =:= is_function;
                      Op =:= is_integer; Op =:= is_list; Op =:= is_map;
                      Op =:= is_number; Op =:= is_pid; Op =:= is_port;
                      Op =:= is_reference; Op =:= is_tuple;
                      Op =:= is_bitstring; Op =:= is_map_key ->
    wrap({Op, raising(A)}, [A || may_raise(A)]);
raising(T) when is_tuple(T), tuple_size(T) >= 2,
                (element(1, T) =:= 'andalso' orelse element(1, T) =:= 'orelse'
                 orelse element(1, T) =:= 'not' orelse element(1, T) =:= 'and'
                 orelse element(1, T) =:= 'or' orelse element(1, T) =:= 'xor') ->
    [Op | Args] = tuple_to_list(T),
    list_to_tuple([Op | [raising(X) || X <- Args]]);
raising(X) -> X.

wrap(Node, []) -> Node;
wrap(Node, Calls) ->
    Exit = {const, 'EXIT'},
    {'orelse',
     list_to_tuple(['andalso' | [{'=/=', C, Exit} || C <- Calls] ++ [Node]]),
     {'andalso', list_to_tuple(['orelse', false |
                                [{'=:=', C, Exit} || C <- Calls]]),
      Exit}}.

%% Can evaluating the expression raise?  Only calls can.
may_raise({const, _}) -> false;
may_raise({T}) when is_tuple(T) -> true;   % a tuple built of expressions
may_raise(T) when is_tuple(T), tuple_size(T) >= 1 -> true;
may_raise(L) when is_list(L) -> lists:any(fun may_raise/1, L);
may_raise(_) -> false.

%% Is the atom a match variable '$N'?
var(A) ->
    case atom_to_list(A) of
        [$$ | Ds] when Ds =/= [] ->
            lists:all(fun(D) -> D >= $0 andalso D =< $9 end, Ds);
        _ -> false
    end.

%% A guard or body expression with the clause's variables replaced.  An
%% action with an effect nested in an expression (`{message, {silent,
%% true}}', `{message, {return_trace}}': the VM runs it) is not combined:
%% the route does not know of it (a return nobody's frame asked for).
subst({T}, _B) when is_atom(T) -> nested_action({T});
subst('$_', B) -> maps:get({args}, B, '$1');
subst('$$', B) ->
    [P || {_, P} <- lists:sort([{list_to_integer(tl(atom_to_list(V))), P}
                               || {V, P} <- maps:to_list(B), is_atom(V)])];
subst(A, B) when is_atom(A) ->
    case var(A) of
        true ->
            case B of
                #{A := P} -> P;
                #{} -> throw({unsupported, {unbound, A}})
            end;
        false -> A
    end;
subst({const, _} = C, _B) -> C;
subst({T}, B) when is_tuple(T) ->
    {list_to_tuple([subst(E, B) || E <- tuple_to_list(T)])};
subst(T, B) when is_tuple(T), tuple_size(T) >= 1 ->
    [F | Args] = tuple_to_list(T),
    _ = nested_action(T),
    list_to_tuple([F | [subst(E, B) || E <- Args]]);
subst(L, B) when is_list(L) -> [subst(E, B) || E <- L];
subst(X, _B) -> X.

nested_action(T) ->
    case lists:member(element(1, T),
                      [message, return_trace, exception_trace, silent, trace,
                       enable_trace, disable_trace, set_seq_token, set_tcw]) of
        true -> throw({unsupported, {action, T}});
        false -> T
    end.
