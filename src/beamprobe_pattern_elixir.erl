%%% @doc Elixir-syntax patterns (as in rexbug) for {@link beamprobe_pattern}:
%%% translates the tokens of an Elixir pattern, as scanned by `erl_scan',
%%% to the Erlang tokens of the equivalent Erlang pattern, which
%%% `beamprobe_pattern' then parses and compiles as usual.
%%%
%%% Aliases (`Foo.Bar') become ``'Elixir.Foo.Bar''', `:atom' an atom,
%%% lower-case names variables (`_x' is ignored), `"x"' a UTF-8 binary,
%%% ``'x''' a charlist (both read with Elixir's escapes: `\u{1F600}',
%%% `\uHHHH', `\xHH' a byte, `\d' DEL; no octal nor `\^A'), `?a' and
%%% `?\n' a character's code point, `0x1F', `0b101', `0o17' integers
%%% (both the pre-scan's), `not(x)' the operator, a keyword key
%%% may be a reserved word (`%{end: e}', `%{in: x}'), `%{k: v}' a map (the `%{' was already turned into
%%% `#{' by the character pre-scan), and the operators `!=', `===',
%%% `!==', `<=', `and', `or', `&&', `||', `!' their Erlang equivalents.
%%% A struct `%Shop.Order{status: :paid}' is the map pattern
%%% `#{'__struct__' := 'Elixir.Shop.Order', status := paid}'; `x in [1,
%%% :a]' (a list of literals) is `(x =:= 1 orelse x =:= a)', `x in 1..9'
%%% `(is_integer(x) andalso x >= 1 andalso x =< 9)', and `not in' their
%%% negation; a head argument `"abc" <> _rest' is a variable tested in the
%%% guard with `binary_part/3' (a match spec head cannot match a binary
%%% prefix; the rest cannot be bound).  A keyword list is its list of
%%% pairs, as Elixir reads it (`[1, a: 2]' is `[1, {a, 2}]', `f(x, a: 1)'
%%% is `f(x, [{a, 1}])', `"a b": 1' a quoted key).  Captures, `|>',
%%% other uses of `<>', module attributes and string interpolation are
%%% refused, saying why. See the {@link beamprobe_pattern} module
%%% documentation for the language.
%%%
%%% Errors are thrown in the form {@link beamprobe_pattern:parse/2}
%%% catches; this module is internal to the pattern parser.
-module(beamprobe_pattern_elixir).

-export([translate/1, translate/2, escape/1]).

%% Errors are thrown as {beamprobe_pattern, Loc, Msg} and caught in
%% beamprobe_pattern:parse/2. Loc is a token annotation, an erl_anno
%% location {Line, Col}, or {abs, Column}.
-define(ERR(Loc, Msg), throw({beamprobe_pattern, Loc, Msg})).

-import(beamprobe_pattern, [anno/1, tok_text/1, plain/1]).

%% @private
%% @doc Internal (called by beamprobe_pattern): translates Elixir tokens
%% (as scanned by erl_scan) to Erlang tokens.
-spec translate([erl_scan:token()]) -> [erl_scan:token()].
translate(Toks) ->
    plain(ex(Toks, [], [])).

%% @private
%% @doc Internal (called by beamprobe_pattern): translates the head and
%% the `when' part (`none' or `{WhenToken, Tokens}'); the checks that
%% `"prefix" <> _' arguments need are added to the guard.
-spec translate([erl_scan:token()], none | {erl_scan:token(), [erl_scan:token()]}) ->
          {[erl_scan:token()], none | {erl_scan:token(), [erl_scan:token()]}}.
translate(Head0, When0) ->
    {Head1, Checks} = prefixes(Head0, 1, [], []),
    Head = translate(Head1),
    When = case When0 of
               none -> none;
               {W, GToks} -> {W, translate(GToks)}
           end,
    {Head, add_checks(Checks, When)}.

%% "abc" <> _rest in a head: a fresh variable, and the guard
%% is_binary(V) andalso byte_size(V) >= N andalso
%% binary_part(V, 0, N) =:= <<"abc"/utf8>> (Erlang tokens).
prefixes([{string, A, _} = T, {'<', LA}, {'>', _} = Gt | R], N, Acc, Checks) ->
    R =/= [] orelse ?ERR(LA, "'<>' needs a right-hand side, e.g. \"abc\" <> _rest"),
    adjacent(LA, 1, Gt) orelse ?ERR(LA, "unexpected '<'"),
    not interpolates(erl_scan:text(T)) orelse
        ?ERR(A, "string interpolation is not supported"),
    case R of
        [{Kind, VA, Name} | R1] when Kind =:= var; Kind =:= atom ->
            case atom_to_list(Name) of
                [$_ | _] -> ok;
                _ -> ?ERR(VA, io_lib:format(
                                "the rest of a \"prefix\" <> ~ts pattern cannot be "
                                "bound: a match spec head cannot match a binary "
                                "prefix, so only the prefix is checked (binary_part/3 "
                                "in the guard); write _~ts", [Name, Name]))
            end,
            V = list_to_atom("bp_prefix_" ++ integer_to_list(N)),
            Bin = ex_unescape(T),
            Len = byte_size(Bin),
            Check = [{'(', A}, {atom, A, is_binary}, {'(', A}, {var, A, V}, {')', A},
                     {'andalso', A}, {atom, A, byte_size}, {'(', A}, {var, A, V},
                     {')', A}, {'>=', A}, {integer, A, Len}, {'andalso', A},
                     {atom, A, binary_part}, {'(', A}, {var, A, V}, {',', A},
                     {integer, A, 0}, {',', A}, {integer, A, Len}, {')', A},
                     {'=:=', A}] ++ bin_toks(Bin, A) ++ [{')', A}],
            prefixes(R1, N + 1, [{atom, A, V} | Acc], [Check | Checks]);
        [T2 | _] ->
            ?ERR(anno(T2), "only \"literal prefix\" <> _rest is supported: a match "
                 "spec can check a binary's prefix (binary_part/3), not a variable "
                 "one or a suffix")
    end;
prefixes([{'<', LA}, {'>', _} = Gt | _], _N, _Acc, _Checks) ->
    case adjacent(LA, 1, Gt) of
        true -> ?ERR(LA, "only \"literal prefix\" <> _rest is supported in a "
                     "head: a match spec can check a binary's prefix "
                     "(binary_part/3), not a variable one or a suffix");
        false -> ?ERR(LA, "unexpected '<'")
    end;
prefixes([T | R], N, Acc, Checks) ->
    prefixes(R, N, [T | Acc], Checks);
prefixes([], _N, Acc, Checks) ->
    {lists:reverse(Acc), lists:reverse(Checks)}.

add_checks([], When) ->
    When;
add_checks([C1 | _] = Checks, When) ->
    A = anno(hd(C1)),
    And = lists:join([{'andalso', A}], Checks),
    case When of
        none -> {{'when', A}, lists:append(And)};
        {W, G} -> {W, lists:append(And) ++ [{'andalso', A}, {'(', A} | G] ++ [{')', A}]}
    end.

%% ex(Tokens, ReversedOutput, BracketStack)
ex([], Acc, _St) ->
    lists:reverse(Acc);
%% ':' immediately followed by a name: an atom
ex([{':', A}, T | R], Acc, St) when element(1, T) =/= '(' ->
    case adjacent(A, 1, T) of
        true ->
            %% :valid?, :run! (the suffix is part of the atom)
            {N, _, R1} = case element(1, T) of
                             string -> {ex_colon_atom(T), 0, R};
                             _ -> ex_suffix(ex_colon_atom(T), tok_len(T), anno(T), R)
                         end,
            ex(R1, [{atom, A, N} | Acc], St);
        false -> ex([T | R], [{':', A} | Acc], St)
    end;
%% aliases and ignored variables
ex([{var, A, Name}, {':', CA} = C | R], Acc, St) when R =/= [] ->
    %% Foo: 1, _a: 1: keys :Foo, :_a
    case adjacent(A, length(atom_to_list(Name)), C) of
        true -> kw_key(Name, A, CA, R, Acc, St);
        false -> ex_var({var, A, Name}, [C | R], Acc, St)
    end;
ex([{var, _, _} = V | R], Acc, St) ->
    ex_var(V, R, Acc, St);
%% a keyword key that erl_scan reads as a reserved word or as `in'
%% (%{end: e}, %{when: t}, %{in: x})
ex([{atom, A, in}, {':', CA} = C | R], Acc, St) when R =/= [] ->
    case adjacent(A, 2, C) of
        true -> kw_key(in, A, CA, R, Acc, St);
        false -> ex1([{atom, A, in}, C | R], Acc, St)
    end;
ex([{W, A}, {':', CA} = C | R] = R0, Acc, St) when is_atom(W), R =/= [] ->
    case erl_scan:reserved_word(W) andalso adjacent(A, length(atom_to_list(W)), C) of
        true -> kw_key(W, A, CA, R, Acc, St);
        false -> ex1(R0, Acc, St)
    end;
ex(R, Acc, St) ->
    ex1(R, Acc, St).

ex_var({var, A, Name}, R, [{'.', _} | _] = Acc, St) when Name =/= '_' ->
    %% Mod._name: a function's name
    case atom_to_list(Name) of
        [$_ | _] = S ->
            {Name1, _, R1} = ex_suffix(Name, length(S), A, R),
            ex(R1, [{atom, A, Name1} | Acc], St);
        _ -> ex_var1({var, A, Name}, R, Acc, St)
    end;
ex_var(V, R, Acc, St) ->
    ex_var1(V, R, Acc, St).

ex_var1({var, A, Name}, R, Acc, St) ->
    case atom_to_list(Name) of
        [$_ | _] ->
            ex(R, [{var, A, '_'} | Acc], St);
        First ->
            {Segs, R1} = ex_alias(R, [First]),
            ex(R1, [{atom, A, ex_alias_atom(A, Segs)} | Acc], St)
    end.

%% x in [literals], x in A..B, x not in ...
ex1([{atom, A, in} | R], [{'not', _}, Left | Acc], St) ->
    ex(R, [{')', A} | in_test(Left, A, R, St)] ++ [{'(', A}, {'not', A} | Acc], St, skip_in(R));
ex1([{atom, A, in} | R], [Left | Acc], St) ->
    ex(R, in_test(Left, A, R, St) ++ Acc, St, skip_in(R));
ex1([{atom, A, N} = T | R], Acc, St) ->
    case erl_scan:text(T) of
        [$' | _] = Text ->
            case R of
                [{':', CA} = C | R2] when R2 =/= [] ->
                    %% 'x y': 1, a quoted key
                    case adjacent(A, length(Text), C) of
                        true -> kw_key(key_atom(A, ex_chars(T)), A, CA, R2, Acc, St);
                        false -> ex(R, [{string, A, ex_chars(T)} | Acc], St)
                    end;
                _ -> ex(R, [{string, A, ex_chars(T)} | Acc], St)
            end;
        Text ->
            {Name, Len, R1} = ex_suffix(N, length(Text), A, R),
            Prev = case Acc of [P | _] -> element(1, P); [] -> none end,
            case R1 of
                [{':', CA} | R2] when Prev =/= '.' ->
                    case adjacent(A, Len, {':', CA}) of
                        true ->
                            kw_key(Name, A, CA, R2, Acc, St);
                        false ->
                            ex(R1, [ex_name(Name, A, Prev, R1) | Acc], St)
                    end;
                _ ->
                    ex(R1, [ex_name(Name, A, Prev, R1) | Acc], St)
            end
    end;
ex1([{string, A, _} = T | R], [{'.', _} | _] = Acc, St) ->
    %% Mod."odd name"(...), a quoted function name (as the printer
    %% writes one): an atom
    not interpolates(erl_scan:text(T)) orelse
        ?ERR(A, "string interpolation is not supported"),
    Name = unicode:characters_to_list(ex_unescape(T), utf8),
    ex(R, [{atom, A, key_atom(A, Name)} | Acc], St);
ex1([{string, A, _} = T | R], Acc, St) ->
    not interpolates(erl_scan:text(T)) orelse
        ?ERR(A, "string interpolation is not supported"),
    case R of
        [{':', CA} = C | R2] when R2 =/= [] ->
            %% "a b": 1, a quoted key (an atom, as Elixir reads it)
            case adjacent(A, length(erl_scan:text(T)), C) of
                true ->
                    Key = unicode:characters_to_list(ex_unescape(T), utf8),
                    kw_key(key_atom(A, Key), A, CA, R2, Acc, St);
                false ->
                    ex(R, lists:reverse(bin_toks(ex_unescape(T), A)) ++ Acc, St)
            end;
        _ ->
            ex(R, lists:reverse(bin_toks(ex_unescape(T), A)) ++ Acc, St)
    end;
ex1([{'!', A}, {'=', _} = T | R], Acc, St) ->
    case adjacent(A, 1, T) of
        true -> ex(R, [{'/=', A} | Acc], St);
        false -> ex([T | R], [{'not', A} | Acc], St)
    end;
ex1([{'!', A}, {'==', _} = T | R], Acc, St) ->
    case adjacent(A, 1, T) of
        true -> ex(R, [{'=/=', A} | Acc], St);
        false -> ex([T | R], [{'not', A} | Acc], St)
    end;
ex1([{'!', A} | R], Acc, St) ->
    ex(R, [{'not', A} | Acc], St);
ex1([{'==', A}, {'=', _} = T | R], Acc, St) ->
    case adjacent(A, 2, T) of
        true -> ex(R, [{'=:=', A} | Acc], St);
        false -> ex([T | R], [{'==', A} | Acc], St)
    end;
ex1([{'<=', A} | R], Acc, St) ->
    ex(R, [{'=<', A} | Acc], St);
ex1([{'&', A}, {'&', _} = T | R], Acc, St) ->
    case adjacent(A, 1, T) of
        true -> ex(R, [{'andalso', A} | Acc], St);
        false -> ?ERR(A, "captures (&) are not supported")
    end;
ex1([{'&', A} | _], _Acc, _St) ->
    ?ERR(A, "captures (&) are not supported");
ex1([{'||', A} | R], Acc, St) ->
    ex(R, [{'orelse', A} | Acc], St);
ex1([{'<', A}, {'>', _} = T | R], Acc, St) ->
    case adjacent(A, 1, T) of
        true -> ?ERR(A, "the '<>' operator is not supported");
        false -> ex([T | R], [{'<', A} | Acc], St)
    end;
ex1([{'|', A}, {'>', _} = T | R], Acc, St) ->
    case adjacent(A, 1, T) of
        true -> ?ERR(A, "the pipe operator '|>' is not supported");
        false -> ex([T | R], [{'|', A} | Acc], St)
    end;
ex1([{'#', A}, {'{', B} | R], Acc, St) ->
    ex(R, [{'{', B}, {'#', A} | Acc], [map | St]);
%% a struct, %Mod{...} (the pre-scan turned '%' into '#'): a map
%% pattern with its __struct__ key
ex1([{'#', A}, {var, VA, N} | R], Acc, St) ->
    {Segs, R1} = ex_alias(R, [atom_to_list(N)]),
    Mod = ex_alias_atom(VA, Segs),
    case R1 of
        [{'{', B}, {'}', _} = C | R2] ->
            ex([C | R2], [{atom, A, Mod}, {':=', A}, {atom, A, '__struct__'},
                          {'{', B}, {'#', A} | Acc], [map | St]);
        [{'{', B} | R2] ->
            ex(R2, [{',', A}, {atom, A, Mod}, {':=', A}, {atom, A, '__struct__'},
                    {'{', B}, {'#', A} | Acc], [map | St]);
        [T | _] -> ?ERR(anno(T), "expected '{' after the struct's name");
        [] -> ?ERR(A, "expected '{' after the struct's name")
    end;
ex1([{'[', _} = T | R], Acc, St) ->
    ex(R, [T | Acc], [list | St]);
ex1([{'(', _} = T | R], Acc, St) ->
    ex(R, [T | Acc], [paren | St]);
ex1([{C, _} = T | R], Acc, St) when C =:= '{'; C =:= '<<' ->
    ex(R, [T | Acc], [other | St]);
%% the end of a keyword pair: [a: 1, b: 2] is [{a, 1}, {b, 2}], and
%% f(x, a: 1) is f(x, [{a, 1}])
ex1([{',', A} = T | R], Acc, [kw | St]) ->
    ex(R, [T, {'}', A} | Acc], [kw_next | St]);
ex1([{']', _} = T | R], [{',', _} | Acc], [kw_next, list | St]) ->
    ex(R, [T | Acc], St);                       % [a: 1,]: a trailing comma
ex1([{C, A} | _], _Acc, [kw_next | _]) when C =:= ','; C =:= ']'; C =:= ')';
                                           C =:= '}'; C =:= '>>' ->
    ?ERR(A, "unexpected expression after a keyword list: keyword pairs "
         "(key: value) come last in a list or a call's arguments, e.g. "
         "[1, a: 2]");
ex1([{']', A} = T | R], Acc, [kw, list | St]) ->
    ex(R, [T, {'}', A} | Acc], St);
ex1([{')', A} = T | R], Acc, [kw, paren | St]) ->
    ex(R, [T, {']', A}, {'}', A} | Acc], St);
ex1([{C, _} = T | R], Acc, St) when C =:= ')'; C =:= ']'; C =:= '}'; C =:= '>>' ->
    ex(R, [T | Acc], case St of [_ | St1] -> St1; [] -> [] end);
ex1([{W, A} | R], Acc, St) when W =:= 'and'; W =:= 'or' ->
    Op = case W of 'and' -> 'andalso'; 'or' -> 'orelse' end,
    ex(R, [{Op, A} | Acc], St);
ex1([{W, A} = T | R], Acc, St) ->
    case erl_scan:reserved_word(W) of
        true ->
            Prev = case Acc of [P | _] -> element(1, P); [] -> none end,
            Next = case R of [N | _] -> element(1, N); [] -> none end,
            Keep = ['when', 'not', 'andalso', 'orelse'],
            %% not(x) and not (x) are the operator in Elixir, not a call
            Out = if
                      Prev =:= '.' -> {atom, A, W};
                      W =:= 'not' -> T;
                      Next =:= '(' -> {atom, A, W};
                      W =:= 'div'; W =:= 'rem' -> T;
                      true ->
                          case lists:member(W, Keep) of
                              true -> T;
                              false -> {var, A, W}
                          end
                  end,
            ex(R, [Out | Acc], St);
        false ->
            ex(R, [T | Acc], St)
    end;
ex1([T | R], Acc, St) ->
    ex(R, [T | Acc], St).

%% K: in a map (the map pattern's K := ...); in a list, [..., k: v] is
%% [..., {k, v}]; at the end of a call's arguments, f(x, k: v) is
%% f(x, [{k, v}]) (Elixir's reading: Code.string_to_quoted/1).  The pair's
%% '}' (and the call's ']') is written at the next ',' or closing bracket
%% of the same level (ex1/3, the kw and kw_next states).
kw_key(Name, A, CA, R, Acc, St) ->
    case St of
        [map | _] -> ex(R, [{':=', CA}, {atom, A, Name} | Acc], St);
        [kw_next | St1] -> ex(R, [{',', CA}, {atom, A, Name}, {'{', A} | Acc], [kw | St1]);
        [list | _] -> ex(R, [{',', CA}, {atom, A, Name}, {'{', A} | Acc], [kw | St]);
        [paren | _] ->
            ex(R, [{',', CA}, {atom, A, Name}, {'{', A}, {'[', A} | Acc], [kw | St]);
        _ -> ?ERR(A, "a keyword pair (key: value) belongs in a list ([a: 1]), "
                  "a map (%{a: 1}) or at the end of a call's arguments")
    end.

%% Whether a string's text holds an interpolation, #{ not escaped as \#{
%% (the printer writes a string holding "#{" as "\#{").
interpolates([$\\, _ | R]) -> interpolates(R);
interpolates([$#, ${ | _]) -> true;
interpolates([_ | R]) -> interpolates(R);
interpolates([]) -> false.

%% A quoted key ("a b": 1) as an atom.
key_atom(A, Chars) ->
    try list_to_atom(Chars)
    catch error:_ -> ?ERR(A, "atom too long: an atom holds at most 255 characters")
    end.

%% A name the scanner did not make (an alias's segments joined, a name and
%% its ? or ! suffix) as an atom: at most 255 characters, else an error
%% at the name (list_to_atom/1's system_limit escaped the parser).
name_atom(A, Chars, What) ->
    case length(Chars) =< 255 of
        true -> list_to_atom(Chars);
        false -> ?ERR(A, io_lib:format("~s too long: ~B characters, an atom "
                                       "holds at most 255", [What, length(Chars)]))
    end.

%% ex/4: goes on after the `in' operand.
ex(_R, Acc, St, Rest) ->
    ex(Rest, Acc, St).

%% The tokens after `in''s right operand.
skip_in([{'[', _} | R]) -> skip_list(R, 0);
skip_in(R0) ->
    case range(R0) of
        {_, _, R} -> R;
        none -> []
    end.

%% An integer range Lo..Hi, either bound negative (-5..5): {Lo, Hi, Rest}.
%% A decreasing range, 5..1, is Elixir's step -1: {1, 5, Rest} (x in 5..1
%% holds for 3 in Elixir 1.14).
range(R0) ->
    case range_int(R0) of
        {Lo, [{'..', _} | R1]} ->
            case range_int(R1) of
                {_, [{'/', SA}, {'/', _} | _]} ->
                    ?ERR(SA, "a range with a step (a..b//step) is not supported "
                         "in a pattern: write the values as a list, or the "
                         "bounds and rem(x - a, step) == 0 in the guard");
                {Hi, R} -> {min(Lo, Hi), max(Lo, Hi), R};
                none -> none
            end;
        _ -> none
    end.

int_toks(N, A) when N < 0 -> [{'(', A}, {'-', A}, {integer, A, -N}, {')', A}];
int_toks(N, A) -> [{integer, A, N}].

range_int([{'-', _}, {integer, _, N} | R]) -> {-N, R};
range_int([{'+', _}, {integer, _, N} | R]) -> {N, R};
range_int([{integer, _, N} | R]) -> {N, R};
range_int(_) -> none.

skip_list([{']', _} | R], 0) -> R;
skip_list([{C, _} | R], D) when C =:= '['; C =:= '{'; C =:= '('; C =:= '<<' ->
    skip_list(R, D + 1);
skip_list([{C, _} | R], D) when C =:= ']'; C =:= '}'; C =:= ')'; C =:= '>>' ->
    skip_list(R, D - 1);
skip_list([_ | R], D) -> skip_list(R, D);
skip_list([], _) -> [].

%% `Left in ...' as reversed Erlang tokens: an orelse of =:= tests for a
%% list of literals, a range test for A..B.
in_test(Left, A, R, _St) ->
    case element(1, Left) of
        K when K =:= var; K =:= atom; K =:= integer; K =:= float; K =:= ')';
               K =:= '>>' ->
            ok;
        _ -> ?ERR(A, "'in' needs a variable (or a literal) on its left, "
                  "e.g. x in [:a, :b]")
    end,
    K0 = element(1, Left),
    (K0 =:= ')' orelse K0 =:= '>>') andalso
        ?ERR(A, "'in' needs a variable on its left, e.g. x in [:a, :b]"),
    case {range(R), R} of
        {{Lo, Hi, _}, _} ->
            lists:reverse(
              [{'(', A}, {atom, A, is_integer}, {'(', A}, Left, {')', A},
               {'andalso', A}, Left, {'>=', A}] ++ int_toks(Lo, A) ++
                  [{'andalso', A}, Left, {'=<', A}] ++ int_toks(Hi, A) ++ [{')', A}]);
        {none, [{'[', _} | R1]} ->
            Elems = in_elems(R1, A),
            Tests = [[Left, {'=:=', A} | E] || E <- Elems],
            case Tests of
                [] -> [{atom, A, false}];
                _ -> lists:reverse([{'(', A}] ++ lists:append(
                                                   lists:join([{'orelse', A}], Tests))
                                   ++ [{')', A}])
            end;
        _ ->
            ?ERR(A, "'in' needs a literal list ([1, :a, \"s\"]) or an integer "
                 "range (1..9) on its right: a match spec cannot call "
                 "Enum.member?/2")
    end.

%% The elements of a literal list (tokens after '['), translated; each
%% must be a constant.
in_elems(Toks, A) ->
    Inner = lists:reverse(skip_list_keep(Toks, 0, [])),
    Parts = split_commas(Inner, 0, [], []),
    [begin
         E = translate(P),
         E =/= [] orelse ?ERR(A, "empty element in the list of 'in'"),
         [?ERR(anno(V), "'in' needs a list of literals (atoms, numbers, "
               "strings); a variable cannot be used there")
          || {var, _, _} = V <- E],
         E
     end || P <- Parts].

skip_list_keep([{']', _} | _], 0, Acc) -> Acc;
skip_list_keep([{C, _} = T | R], D, Acc) when C =:= '['; C =:= '{'; C =:= '(';
                                              C =:= '<<' ->
    skip_list_keep(R, D + 1, [T | Acc]);
skip_list_keep([{C, _} = T | R], D, Acc) when C =:= ']'; C =:= '}'; C =:= ')';
                                              C =:= '>>' ->
    skip_list_keep(R, D - 1, [T | Acc]);
skip_list_keep([T | R], D, Acc) -> skip_list_keep(R, D, [T | Acc]);
skip_list_keep([], _, Acc) -> Acc.

split_commas([], _D, [], Parts) -> lists:reverse(Parts);
split_commas([], _D, Cur, Parts) -> lists:reverse([lists:reverse(Cur) | Parts]);
split_commas([{',', _} | R], 0, Cur, Parts) ->
    split_commas(R, 0, [], [lists:reverse(Cur) | Parts]);
split_commas([{C, _} = T | R], D, Cur, Parts) when C =:= '['; C =:= '{'; C =:= '(';
                                                  C =:= '<<' ->
    split_commas(R, D + 1, [T | Cur], Parts);
split_commas([{C, _} = T | R], D, Cur, Parts) when C =:= ']'; C =:= '}'; C =:= ')';
                                                  C =:= '>>' ->
    split_commas(R, D - 1, [T | Cur], Parts);
split_commas([T | R], D, Cur, Parts) -> split_commas(R, D, [T | Cur], Parts).

%% An atom name: a function name (after '.' or before '('), true/false/nil,
%% or else an Elixir variable.
ex_name(Name, A, Prev, R) ->
    Next = case R of [N | _] -> element(1, N); [] -> none end,
    case Prev =:= '.' orelse Next =:= '(' orelse
        lists:member(Name, [true, false, nil]) of
        true -> {atom, A, Name};
        false -> {var, A, Name}
    end.

%% Joins a trailing '?' or '!' written right after a name (valid?, run!).
ex_suffix(N, Len, A, [{Ch, _} = T | R] = R0) when Ch =:= '?'; Ch =:= '!' ->
    BangOp = Ch =:= '!' andalso
        case R of
            [{Eq, _} = E | _] when Eq =:= '='; Eq =:= '==' -> adjacent(anno(T), 1, E);
            _ -> false
        end,
    case adjacent(A, Len, T) andalso not BangOp of
        true -> {name_atom(A, atom_to_list(N) ++ atom_to_list(Ch), "name"), Len + 1, R};
        false -> {N, Len, R0}
    end;
ex_suffix(N, Len, _A, R) ->
    {N, Len, R}.

tok_len({_, _, N} = T) when is_atom(N) ->
    case erl_scan:text(T) of
        undefined -> length(atom_to_list(N));
        Text -> length(Text)
    end;
tok_len({W, _}) when is_atom(W) -> length(atom_to_list(W));
tok_len(_) -> 0.

ex_colon_atom({atom, _, N}) -> N;
ex_colon_atom({var, _, N}) -> N;
ex_colon_atom({string, A, _} = T) ->
    try list_to_atom(ex_chars(T))
    catch error:_ -> ?ERR(A, "atom too long: an atom holds at most 255 characters")
    end;
ex_colon_atom({W, A}) ->
    case erl_scan:reserved_word(W) of
        true -> W;
        false -> ?ERR(A, io_lib:format("unexpected '~s' after ':'", [W]))
    end;
ex_colon_atom(T) ->
    ?ERR(anno(T), io_lib:format("expected an atom name after ':', found ~ts",
                                [tok_text(T)])).

ex_alias([{'.', _}, {var, _, N} | R] = R0, Segs) ->
    case atom_to_list(N) of
        [C | _] = S when C >= $A, C =< $Z -> ex_alias(R, [S | Segs]);
        _ -> {lists:reverse(Segs), R0}
    end;
ex_alias(R, Segs) ->
    {lists:reverse(Segs), R}.

ex_alias_atom(A, ["Elixir" | _] = Segs) ->
    name_atom(A, lists:flatten(lists:join(".", Segs)), "module name");
ex_alias_atom(A, Segs) ->
    name_atom(A, lists:flatten(["Elixir." | lists:join(".", Segs)]), "module name").

%% Whether token T starts right after the Len characters starting at A.
adjacent(A, Len, T) ->
    {L1, C1} = erl_anno:location(A),
    case erl_anno:location(anno(T)) of
        {L1, C2} -> C2 =:= C1 + Len;
        _ -> false
    end.

%% ---- Elixir string literals -------------------------------------------
%% erl_scan read a string with Erlang's escapes; Elixir's differ ("\u{1F600}",
%% "\uHHHH", "\xHH" a byte, no octal "\101" nor control "\^A", "\d" 127), so
%% the value is read again from the token's text.

%% A binary pattern for Bin: <<"..."/utf8>> or, not UTF-8, <<B1, B2, ...>>.
bin_toks(<<>>, A) ->
    [{'<<', A}, {'>>', A}];
bin_toks(Bin, A) ->
    case unicode:characters_to_list(Bin) of
        Chars when is_list(Chars) ->
            [{'<<', A}, {string, A, Chars}, {'/', A}, {atom, A, utf8}, {'>>', A}];
        _ ->
            Bytes = [{integer, A, B} || <<B>> <= Bin],
            [{'<<', A}] ++ lists:join({',', A}, Bytes) ++ [{'>>', A}]
    end.

%% The characters of a charlist 'abc' or a quoted atom :"abc".
ex_chars(T) ->
    case unicode:characters_to_list(ex_unescape(T)) of
        Chars when is_list(Chars) -> Chars;
        _ -> ?ERR(anno(T), "invalid UTF-8 in a charlist or atom (a \\xHH byte?)")
    end.

%% The bytes of a string token, its text read with Elixir's escapes.
ex_unescape(T) ->
    [_Q | Body] = erl_scan:text(T),
    ex_unesc(lists:droplast(Body), anno(T), []).

ex_unesc([], _A, Acc) ->
    iolist_to_binary(lists:reverse(Acc));
ex_unesc([$\\, $\n | R], A, Acc) ->
    ex_unesc(R, A, Acc);
ex_unesc([$\\, $x, ${ | R], A, Acc) ->
    {Cp, R1} = ex_hex_braced(R, A, "\\x{...}"),
    ex_unesc(R1, A, [ex_cp(Cp, A) | Acc]);
ex_unesc([$\\, $x | R], A, Acc) ->
    case ex_hex(R, 2) of
        {[], _} -> ?ERR(A, "invalid \\x escape: \\xHH (a byte) needs hex digits");
        {Ds, R1} -> ex_unesc(R1, A, [list_to_integer(Ds, 16) | Acc])
    end;
ex_unesc([$\\, $u, ${ | R], A, Acc) ->
    {Cp, R1} = ex_hex_braced(R, A, "\\u{...}"),
    ex_unesc(R1, A, [ex_cp(Cp, A) | Acc]);
ex_unesc([$\\, $u | R], A, Acc) ->
    case ex_hex(R, 4) of
        {[_, _, _, _] = Ds, R1} -> ex_unesc(R1, A, [ex_cp(list_to_integer(Ds, 16), A) | Acc]);
        _ -> ?ERR(A, "invalid \\u escape: write \\uHHHH or \\u{H...}")
    end;
ex_unesc([$\\, C | R], A, Acc) ->
    ex_unesc(R, A, [ex_cp(escape(C), A) | Acc]);
ex_unesc([C | R], A, Acc) ->
    ex_unesc(R, A, [ex_cp(C, A) | Acc]).

%% @private
%% @doc Internal (shared with beamprobe_pattern's pre-scan of `?\n'): the
%% code point of Elixir's escape `\C' in a string or a character literal;
%% any other character stands for itself (`\"' is `"').
-spec escape(char()) -> char().
escape($0) -> 0;
escape($a) -> 7;
escape($b) -> 8;
escape($d) -> 127;
escape($e) -> 27;
escape($f) -> 12;
escape($n) -> 10;
escape($r) -> 13;
escape($s) -> 32;
escape($t) -> 9;
escape($v) -> 11;
escape(C) -> C.

ex_cp(C, A) ->
    try <<C/utf8>>
    catch error:badarg -> ?ERR(A, io_lib:format("invalid code point ~.16B in a string", [C]))
    end.

ex_hex(R, Max) -> ex_hex(R, Max, []).
ex_hex([D | R], Max, Acc) when Max > 0, (D >= $0 andalso D =< $9) orelse
                                        (D >= $a andalso D =< $f) orelse
                                        (D >= $A andalso D =< $F) ->
    ex_hex(R, Max - 1, [D | Acc]);
ex_hex(R, _Max, Acc) -> {lists:reverse(Acc), R}.

ex_hex_braced(R, A, What) ->
    case ex_hex(R, 6) of
        {[_ | _] = Ds, [$} | R1]} -> {list_to_integer(Ds, 16), R1};
        _ -> ?ERR(A, "invalid " ++ What ++ " escape: 1 to 6 hex digits in braces")
    end.
