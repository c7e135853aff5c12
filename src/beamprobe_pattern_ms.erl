%%% @doc Match-specification compilation for {@link beamprobe_pattern}:
%%% turns the parsed argument list of a pattern into a match-spec head,
%%% and its `when' guards into match-spec conditions.
%%%
%%% Argument variables are numbered `$1', `$2', ... in order of first
%%% appearance; constant sub-expressions (`-1', `<<"bin">>', `"pre" ++ _')
%%% are evaluated without running any code but arithmetic and binary
%%% construction. Guards are parsed with `erl_parse' and checked against
%%% what match specs (OTP 25) implement; in Elixir mode the Elixir guard
%%% functions `elem/2', `is_nil/1', `is_map_key/2' (Elixir argument
%%% order), `div/2' and `rem/2' are translated too.
%%%
%%% Errors are thrown in the form {@link beamprobe_pattern:parse/2}
%%% catches; this module is internal to the pattern parser.
-module(beamprobe_pattern_ms).

-export([compile_head/1, compile_guards/5]).

-export_type([vars/0]).

%% Argument variable name => match variable ('$1', '$2', ...).
-type vars() :: #{atom() => atom()}.
%% A split-off part of the token list: the separating token and the
%% tokens after it, or none.
-type part() :: none | {erl_scan:token(), [erl_scan:token()]}.

%% Errors are thrown as {beamprobe_pattern, Loc, Msg} and caught in
%% beamprobe_pattern:parse/2. Loc is a token annotation, an erl_anno
%% location {Line, Col}, or {abs, Column}.
-define(ERR(Loc, Msg), throw({beamprobe_pattern, Loc, Msg})).

-import(beamprobe_pattern, [anno/1, plain/1]).

%% Binary operators allowed in match-spec guards.
-define(GUARD_BINOPS, ['andalso', 'orelse', 'and', 'or', 'xor',
                       '==', '/=', '=:=', '=/=', '<', '>', '=<', '>=',
                       '+', '-', '*', '/', 'div', 'rem',
                       'band', 'bor', 'bxor', 'bsl', 'bsr']).
-define(GUARD_UNOPS, ['not', '-', '+', 'bnot']).

%% Guard functions that match specs (OTP 25) implement.
-define(GUARD_BIFS, [{is_atom, 1}, {is_float, 1}, {is_integer, 1},
                     {is_list, 1}, {is_number, 1}, {is_pid, 1},
                     {is_port, 1}, {is_reference, 1}, {is_tuple, 1},
                     {is_map, 1}, {is_map_key, 2}, {is_binary, 1},
                     {is_function, 1}, {is_record, 3}, {abs, 1},
                     {element, 2}, {hd, 1}, {tl, 1}, {length, 1},
                     {map_get, 2}, {map_size, 1}, {node, 0}, {node, 1},
                     {round, 1}, {size, 1}, {bit_size, 1}, {byte_size, 1},
                     {trunc, 1}, {binary_part, 2}, {binary_part, 3},
                     {float, 1}, {self, 0}]).
%% Erlang guard functions that match specs do not implement.
-define(NON_MS_BIFS, [{tuple_size, 1}, {is_bitstring, 1}, {is_function, 2},
                      {is_record, 2}, {min, 2}, {max, 2}, {ceil, 1},
                      {floor, 1}]).

%%% ---- heads ---------------------------------------------------------------

%% @private
%% @doc Internal (called by beamprobe_pattern): compiles the argument
%% patterns of a call (or message) pattern to a match-spec head, and
%% returns it with the variables it binds, for the guards.
-spec compile_head([erl_parse:abstract_expr()]) -> {[term()], vars()}.
compile_head(Args) ->
    {Terms, {Vars, _}} = lists:mapfoldl(fun pat/2, {#{}, 1}, Args),
    {Terms, Vars}.

pat({var, _, '_'}, S) ->
    {'_', S};
pat({var, _, V}, {Vars, N} = S) ->
    case Vars of
        #{V := MV} -> {MV, S};
        _ ->
            MV = list_to_atom("$" ++ integer_to_list(N)),
            {MV, {Vars#{V => MV}, N + 1}}
    end;
pat({atom, _, '_'}, S) ->
    {'_', S};
pat({atom, A, X}, S) ->
    ms_special(X) andalso
        ?ERR(A, io_lib:format("the atom ~tw cannot be matched in a match "
                              "spec head (it denotes a match variable)", [X])),
    {X, S};
pat({T, _, V}, S) when T =:= integer; T =:= float; T =:= char; T =:= string ->
    {V, S};
pat({nil, _}, S) ->
    {[], S};
pat({cons, _, H, T}, S0) ->
    {PH, S1} = pat(H, S0),
    {PT, S2} = pat(T, S1),
    {[PH | PT], S2};
pat({tuple, _, Es}, S0) ->
    {Ps, S1} = lists:mapfoldl(fun pat/2, S0, Es),
    {list_to_tuple(Ps), S1};
pat({map, _, Assocs}, S0) ->
    {KVs, S1} = lists:mapfoldl(
                  fun({_, _, K, V}, Sx) ->
                          Key = case const(K) of
                                    {ok, KV} -> KV;
                                    error -> ?ERR(anno(K), "map keys must be constants "
                                                           "(match specs cannot bind "
                                                           "map keys)")
                                end,
                          {PV, Sy} = pat(V, Sx),
                          {{Key, PV}, Sy}
                  end, S0, Assocs),
    {maps:from_list(KVs), S1};
pat({map, A, _, _}, _S) ->
    ?ERR(A, "illegal pattern: map update");
pat({bin, A, _} = B, S) ->
    case const(B) of
        {ok, Bin} -> {Bin, S};
        error -> ?ERR(A, "binary patterns must be constant (match specs cannot "
                         "bind parts of a binary)")
    end;
pat({op, A, '++', L, R}, S0) ->
    case const(L) of
        {ok, Prefix} when is_list(Prefix) ->
            {PR, S1} = pat(R, S0),
            {Prefix ++ PR, S1};
        _ ->
            ?ERR(A, "illegal pattern: the left side of '++' must be a "
                    "constant string or list")
    end;
pat({op, A, _, _} = E, S) ->
    pat_const(A, E, S);
pat({op, A, _, _, _} = E, S) ->
    pat_const(A, E, S);
pat({record, A, _, _}, _S) ->
    ?ERR(A, "records are not supported; write the tuple, e.g. {rec, _, _}");
pat({record, A, _, _, _}, _S) ->
    ?ERR(A, "records are not supported; write the tuple, e.g. {rec, _, _}");
pat({record_index, A, _, _}, _S) ->
    ?ERR(A, "records are not supported; write the tuple, e.g. {rec, _, _}");
pat({record_field, A, _, _, _}, _S) ->
    ?ERR(A, "records are not supported; write the tuple, e.g. {rec, _, _}");
pat({match, A, _, _}, _S) ->
    ?ERR(A, "pattern aliases ('=') are not supported in match specs");
pat(E, _S) ->
    ?ERR(anno(E), "illegal pattern in the argument list").

pat_const(A, E, S) ->
    case const(E) of
        {ok, V} -> {V, S};
        error -> ?ERR(A, "illegal pattern: only constant expressions "
                         "(such as -1) are allowed")
    end.

%% Atoms a match spec would take for a variable.
ms_special('$_') -> true;
ms_special('$$') -> true;
ms_special(A) when is_atom(A) ->
    case atom_to_list(A) of
        [$$ | Ds] when Ds =/= [] -> lists:all(fun(C) -> C >= $0 andalso C =< $9 end, Ds);
        _ -> false
    end.

%% Evaluates a constant expression (no variables, no calls) without
%% running any code but arithmetic and binary construction.
const({T, _, V}) when T =:= integer; T =:= float; T =:= char; T =:= atom;
                      T =:= string ->
    {ok, V};
const({nil, _}) ->
    {ok, []};
const({cons, _, H, T}) ->
    const_all([H, T], fun([VH, VT]) -> [VH | VT] end);
const({tuple, _, Es}) ->
    const_all(Es, fun list_to_tuple/1);
const({map, _, Assocs}) ->
    KVs = lists:append([[K, V] || {_, _, K, V} <- Assocs]),
    const_all(KVs, fun(Vs) -> maps:from_list(pairs(Vs)) end);
const({op, _, Op, E}) ->
    const_all([E], fun([V]) -> const_op(Op, [V]) end);
const({op, _, Op, L, R}) ->
    const_all([L, R], fun(Vs) -> const_op(Op, Vs) end);
const({bin, A, Elems}) ->
    lists:foreach(fun byte_fits/1, Elems),
    try
        Elems1 = [{bin_element, EA, abstract(V), abstract_size(Size), Type}
                  || {bin_element, EA, V, Size, Type} <- Elems],
        {value, B, _} = erl_eval:expr({bin, A, Elems1}, erl_eval:new_bindings()),
        {ok, B}
    catch
        throw:not_const -> error;
        error:_ -> error
    end;
const(_) ->
    error.

%% A string or integer segment of the default type is a byte each:
%% <<"\x{1F600}">> and <<256>> are <<0>> in Erlang (the compiler warns),
%% a pattern that would never match what was written.
byte_fits({bin_element, A, {string, _, S}, default, default}) ->
    case [C || C <- S, C > 255] of
        [] -> ok;
        [C | _] -> ?ERR(A, io_lib:format(
                             "character ~ts (~.16B) does not fit a byte in a "
                             "binary (<<\"...\">> is Latin-1, each character "
                             "cut to 8 bits); write <<\"...\"/utf8>>",
                             [[C], C]))
    end;
byte_fits({bin_element, A, V, default, default}) ->
    case const(V) of
        {ok, N} when is_integer(N), (N > 255 orelse N < -128) ->
            ?ERR(A, io_lib:format("~b does not fit a byte in a binary (it "
                                  "would be cut to ~b); give its size, e.g. "
                                  "<<~b:16>>", [N, N band 255, N]));
        _ -> ok
    end;
byte_fits(_) ->
    ok.

abstract(E) ->
    case const(E) of
        {ok, V} -> erl_parse:abstract(V);
        error -> throw(not_const)
    end.

abstract_size(default) -> default;
abstract_size(E) -> abstract(E).

pairs([K, V | Rest]) -> [{K, V} | pairs(Rest)];
pairs([]) -> [].

const_all(Es, Build) ->
    Vs = [const(E) || E <- Es],
    case lists:all(fun(R) -> R =/= error end, Vs) of
        true ->
            try {ok, Build([V || {ok, V} <- Vs])}
            catch error:_ -> error
            end;
        false ->
            error
    end.

const_op(Op, Args) ->
    Pure = ?GUARD_BINOPS ++ ['++', '--'],
    case lists:member(Op, Pure) orelse
        (lists:member(Op, ?GUARD_UNOPS) andalso length(Args) =:= 1) of
        true when Op =:= 'andalso' -> [A, B] = Args, A andalso B;
        true when Op =:= 'orelse' -> [A, B] = Args, A orelse B;
        true -> apply(erlang, Op, Args);
        false -> erlang:error(badarg)
    end.

%%% ---- guards --------------------------------------------------------------

%% @private
%% @doc Internal (called by beamprobe_pattern): compiles the `when' part
%% (`none' if there is none) to the condition lists of the match-spec
%% clauses, one per `;'-separated alternative. `Vars' are the head's
%% variables, `End' the location just after the pattern and `Arrow' the
%% actions part (`none' if there is none), for error locations.
-spec compile_guards(part(), vars(), erlang | elixir,
                     {pos_integer(), pos_integer()}, part()) -> [[term()]].
compile_guards(none, _Vars, _Mode, _End, _Arrow) ->
    [[]];
compile_guards({_W, []}, _Vars, _Mode, End, Arrow) ->
    Loc = case Arrow of {ArTok, _} -> anno(ArTok); none -> End end,
    ?ERR(Loc, "expected a guard after 'when'");
compile_guards({W, GToks}, Vars, Mode, End, Arrow) ->
    WA = anno(W),
    EA = case Arrow of {ArTok, _} -> anno(ArTok); none -> End end,
    Form = plain([{atom, WA, f}, {'(', WA}, {')', WA}, {'when', WA} | GToks]
                 ++ [{'->', EA}, {atom, EA, ok}, {dot, EA}]),
    case erl_parse:parse_form(Form) of
        {ok, {function, _, f, 0, [{clause, _, [], Gs, _}]}} ->
            [[guard(E, Vars, Mode) || E <- Seq] || Seq <- Gs];
        {error, {Loc, erl_parse, _}} when Arrow =:= none, Loc =:= EA ->
            ?ERR(Loc, "incomplete guard");
        {error, {Loc, erl_parse, Msg}} ->
            ?ERR(Loc, erl_parse:format_error(Msg))
    end.

guard({var, A, '_'}, _Vars, _Mode) ->
    ?ERR(A, "'_' cannot be used in a guard");
guard({var, A, V}, Vars, _Mode) ->
    case Vars of
        #{V := MV} -> MV;
        _ -> ?ERR(A, io_lib:format("variable '~ts' is unbound (a guard can only use "
                                   "variables of the argument list)", [V]))
    end;
guard({atom, _, X}, _Vars, _Mode) ->
    case X =:= '_' orelse lists:prefix("$", atom_to_list(X)) of
        true -> {const, X};
        false -> X
    end;
guard({T, _, V}, _Vars, _Mode) when T =:= integer; T =:= float; T =:= char;
                                    T =:= string ->
    V;
guard({nil, _}, _Vars, _Mode) ->
    [];
guard({cons, _, H, T}, Vars, Mode) ->
    [guard(H, Vars, Mode) | guard(T, Vars, Mode)];
guard({tuple, _, Es}, Vars, Mode) ->
    {list_to_tuple([guard(E, Vars, Mode) || E <- Es])};
guard({map, A, Assocs}, Vars, Mode) ->
    maps:from_list(
      [case Kind of
           map_field_assoc ->
               case const(K) of
                   {ok, KV} -> {KV, guard(V, Vars, Mode)};
                   error -> ?ERR(anno(K), "map keys must be constants")
               end;
           map_field_exact ->
               ?ERR(A, "illegal guard expression: use '=>' to build a map")
       end || {Kind, _, K, V} <- Assocs]);
guard({bin, A, _} = B, _Vars, _Mode) ->
    case const(B) of
        {ok, Bin} -> Bin;
        error -> ?ERR(A, "illegal guard expression: binaries in guards must be "
                         "constant")
    end;
guard({op, _, '-', {T, _, N}}, _Vars, _Mode) when T =:= integer; T =:= float ->
    -N;
guard({op, A, Op, E}, Vars, Mode) ->
    lists:member(Op, ?GUARD_UNOPS) orelse
        ?ERR(A, io_lib:format("illegal guard expression: operator '~s'", [Op])),
    {Op, guard(E, Vars, Mode)};
guard({op, A, Op, L, R}, Vars, Mode) ->
    lists:member(Op, ?GUARD_BINOPS) orelse
        ?ERR(A, io_lib:format("illegal guard expression: operator '~s' is not "
                              "allowed in guards", [Op])),
    {Op, guard(L, Vars, Mode), guard(R, Vars, Mode)};
guard({call, A, {remote, _, {atom, _, erlang}, {atom, _, F}}, Args}, Vars, Mode) ->
    guard_call(A, F, Args, Vars, Mode);
guard({call, A, {remote, _, {atom, _, M}, {atom, _, F}}, Args}, _Vars, _Mode) ->
    ?ERR(A, io_lib:format("illegal guard expression: ~tw:~tw/~b is not a guard "
                          "function", [M, F, length(Args)]));
guard({call, A, {atom, _, F}, Args}, Vars, Mode) ->
    guard_call(A, F, Args, Vars, Mode);
guard({match, A, _, _}, _Vars, _Mode) ->
    ?ERR(A, "illegal guard expression: '=' matches, use '==' or '=:=' to compare");
guard({record, A, _, _}, _Vars, _Mode) ->
    ?ERR(A, "records are not supported");
guard({record_field, A, _, _, _}, _Vars, _Mode) ->
    ?ERR(A, "records are not supported");
guard({record_index, A, _, _}, _Vars, _Mode) ->
    ?ERR(A, "records are not supported");
guard(E, _Vars, _Mode) ->
    ?ERR(anno(E), "illegal guard expression").

guard_call(A, F, Args, Vars, Mode) ->
    N = length(Args),
    G = fun(E) -> guard(E, Vars, Mode) end,
    case {Mode, F, N} of
        {elixir, elem, 2} ->
            [T, I] = Args,
            Index = case guard(I, Vars, Mode) of
                        Int when is_integer(Int) -> Int + 1;
                        Expr -> {'+', Expr, 1}
                    end,
            {element, Index, G(T)};
        {elixir, is_nil, 1} ->
            {'==', G(hd(Args)), nil};
        {elixir, is_map_key, 2} ->
            [Map, Key] = Args,
            {is_map_key, G(Key), G(Map)};
        {elixir, Op, 2} when Op =:= 'div'; Op =:= 'rem' ->
            list_to_tuple([Op | [G(E) || E <- Args]]);
        {_, is_boolean, 1} ->
            X = G(hd(Args)),
            {'orelse', {'=:=', X, true}, {'=:=', X, false}};
        _ ->
            case {lists:member({F, N}, ?GUARD_BIFS),
                  lists:member({F, N}, ?NON_MS_BIFS)} of
                {true, _} ->
                    list_to_tuple([F | [G(E) || E <- Args]]);
                {_, true} ->
                    ?ERR(A, io_lib:format("guard function ~tw/~b is not supported "
                                          "by match specs", [F, N]));
                _ ->
                    ?ERR(A, io_lib:format("illegal guard expression: ~tw/~b is not "
                                          "a guard function", [F, N]))
            end
    end.
