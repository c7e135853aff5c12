%%% @doc Elixir-syntax patterns (as in rexbug) for {@link beamprobe_pattern}:
%%% translates the tokens of an Elixir pattern, as scanned by `erl_scan',
%%% to the Erlang tokens of the equivalent Erlang pattern, which
%%% `beamprobe_pattern' then parses and compiles as usual.
%%%
%%% Aliases (`Foo.Bar') become ``'Elixir.Foo.Bar''', `:atom' an atom,
%%% lower-case names variables (`_x' is ignored), `"x"' a UTF-8 binary,
%%% ``'x''' a charlist, `%{k: v}' a map (the `%{' was already turned into
%%% `#{' by the character pre-scan), and the operators `!=', `===',
%%% `!==', `<=', `and', `or', `&&', `||', `!' their Erlang equivalents.
%%% Keyword lists, structs, captures, `in', `<>', `|>' and string
%%% interpolation are refused. See the {@link beamprobe_pattern} module
%%% documentation for the language.
%%%
%%% Errors are thrown in the form {@link beamprobe_pattern:parse/2}
%%% catches; this module is internal to the pattern parser.
-module(beamprobe_pattern_elixir).

-export([translate/1]).

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

%% ex(Tokens, ReversedOutput, BracketStack)
ex([], Acc, _St) ->
    lists:reverse(Acc);
%% ':' immediately followed by a name: an atom
ex([{':', A}, T | R], Acc, St) when element(1, T) =/= '(' ->
    case adjacent(A, 1, T) of
        true -> ex(R, [{atom, A, ex_colon_atom(T)} | Acc], St);
        false -> ex([T | R], [{':', A} | Acc], St)
    end;
%% aliases and ignored variables
ex([{var, A, Name} | R], Acc, St) ->
    case atom_to_list(Name) of
        [$_ | _] ->
            ex(R, [{var, A, '_'} | Acc], St);
        First ->
            {Segs, R1} = ex_alias(R, [First]),
            ex(R1, [{atom, A, ex_alias_atom(Segs)} | Acc], St)
    end;
ex([{atom, A, N} = T | R], Acc, St) ->
    case erl_scan:text(T) of
        [$' | _] ->
            ex(R, [{string, A, atom_to_list(N)} | Acc], St);
        Text ->
            {Name, Len, R1} = ex_suffix(N, length(Text), A, R),
            Prev = case Acc of [P | _] -> element(1, P); [] -> none end,
            case R1 of
                [{':', CA} | R2] when Prev =/= '.' ->
                    case adjacent(A, Len, {':', CA}) of
                        true ->
                            case St of
                                [map | _] -> ok;
                                _ -> ?ERR(A, "keyword lists are not supported; "
                                             "write a list of tuples")
                            end,
                            ex(R2, [{':=', CA}, {atom, A, Name} | Acc], St);
                        false ->
                            ex(R1, [ex_name(Name, A, Prev, R1) | Acc], St)
                    end;
                _ ->
                    ex(R1, [ex_name(Name, A, Prev, R1) | Acc], St)
            end
    end;
ex([{string, A, S} = T | R], Acc, St) ->
    string:find(erl_scan:text(T), "#{") =:= nomatch orelse
        ?ERR(A, "string interpolation is not supported"),
    Bin = [{'>>', A}, {atom, A, utf8}, {'/', A}, {string, A, S}, {'<<', A}],
    ex(R, Bin ++ Acc, St);
ex([{'!', A}, {'=', _} = T | R], Acc, St) ->
    case adjacent(A, 1, T) of
        true -> ex(R, [{'/=', A} | Acc], St);
        false -> ex([T | R], [{'not', A} | Acc], St)
    end;
ex([{'!', A}, {'==', _} = T | R], Acc, St) ->
    case adjacent(A, 1, T) of
        true -> ex(R, [{'=/=', A} | Acc], St);
        false -> ex([T | R], [{'not', A} | Acc], St)
    end;
ex([{'!', A} | R], Acc, St) ->
    ex(R, [{'not', A} | Acc], St);
ex([{'==', A}, {'=', _} = T | R], Acc, St) ->
    case adjacent(A, 2, T) of
        true -> ex(R, [{'=:=', A} | Acc], St);
        false -> ex([T | R], [{'==', A} | Acc], St)
    end;
ex([{'<=', A} | R], Acc, St) ->
    ex(R, [{'=<', A} | Acc], St);
ex([{'&', A}, {'&', _} = T | R], Acc, St) ->
    case adjacent(A, 1, T) of
        true -> ex(R, [{'andalso', A} | Acc], St);
        false -> ?ERR(A, "captures (&) are not supported")
    end;
ex([{'&', A} | _], _Acc, _St) ->
    ?ERR(A, "captures (&) are not supported");
ex([{'||', A} | R], Acc, St) ->
    ex(R, [{'orelse', A} | Acc], St);
ex([{'<', A}, {'>', _} = T | R], Acc, St) ->
    case adjacent(A, 1, T) of
        true -> ?ERR(A, "the '<>' operator is not supported");
        false -> ex([T | R], [{'<', A} | Acc], St)
    end;
ex([{'|', A}, {'>', _} = T | R], Acc, St) ->
    case adjacent(A, 1, T) of
        true -> ?ERR(A, "the pipe operator '|>' is not supported");
        false -> ex([T | R], [{'|', A} | Acc], St)
    end;
ex([{'#', A}, {'{', B} | R], Acc, St) ->
    ex(R, [{'{', B}, {'#', A} | Acc], [map | St]);
ex([{C, _} = T | R], Acc, St) when C =:= '('; C =:= '['; C =:= '{'; C =:= '<<' ->
    ex(R, [T | Acc], [other | St]);
ex([{C, _} = T | R], Acc, St) when C =:= ')'; C =:= ']'; C =:= '}'; C =:= '>>' ->
    ex(R, [T | Acc], case St of [_ | St1] -> St1; [] -> [] end);
ex([{W, A} | R], Acc, St) when W =:= 'and'; W =:= 'or' ->
    Op = case W of 'and' -> 'andalso'; 'or' -> 'orelse' end,
    ex(R, [{Op, A} | Acc], St);
ex([{W, A} = T | R], Acc, St) ->
    case erl_scan:reserved_word(W) of
        true ->
            Prev = case Acc of [P | _] -> element(1, P); [] -> none end,
            Next = case R of [N | _] -> element(1, N); [] -> none end,
            Keep = ['when', 'not', 'andalso', 'orelse'],
            Out = if
                      Prev =:= '.'; Next =:= '(' -> {atom, A, W};
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
ex([T | R], Acc, St) ->
    ex(R, [T | Acc], St).

%% An atom name: a function name (after '.' or before '('), true/false/nil,
%% or else an Elixir variable.
ex_name(in, A, Prev, _R) when Prev =/= '.' ->
    ?ERR(A, "the 'in' operator is not supported; combine '==' tests with 'or'");
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
        true -> {list_to_atom(atom_to_list(N) ++ atom_to_list(Ch)), Len + 1, R};
        false -> {N, Len, R0}
    end;
ex_suffix(N, Len, _A, R) ->
    {N, Len, R}.

ex_colon_atom({atom, _, N}) -> N;
ex_colon_atom({var, _, N}) -> N;
ex_colon_atom({string, A, S}) ->
    try list_to_atom(S)
    catch error:_ -> ?ERR(A, "atom too long")
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

ex_alias_atom(["Elixir" | _] = Segs) ->
    list_to_atom(lists:flatten(lists:join(".", Segs)));
ex_alias_atom(Segs) ->
    list_to_atom(lists:flatten(["Elixir." | lists:join(".", Segs)])).

%% Whether token T starts right after the Len characters starting at A.
adjacent(A, Len, T) ->
    {L1, C1} = erl_anno:location(A),
    case erl_anno:location(anno(T)) of
        {L1, C2} -> C2 =:= C1 + Len;
        _ -> false
    end.
