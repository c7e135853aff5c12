%%% @doc The redbug-compatible pattern language: turns a trace pattern
%%% written as a string into the arguments of `erlang:trace_pattern/3'.
%%%
%%% A pattern is scanned with `erl_scan' and its parts are parsed with
%%% `erl_parse'; heads and guards are then compiled to a match
%%% specification by {@link beamprobe_pattern_ms}, and Elixir-syntax
%%% patterns are first translated to Erlang tokens by
%%% {@link beamprobe_pattern_elixir}. Errors say what is wrong and at
%%% which column (1-based, counted in characters from the start of the
%%% pattern).
%%%
%%% == Call patterns (Erlang syntax, as in redbug) ==
%%%
%%% ```
%%% MFA [when GUARDS] [-> ACTIONS]
%%% '''
%%%
%%% where `MFA' is one of
%%%
%%% ```
%%% "mod"                        every function of mod       {mod, '_', '_'}
%%% "mod:fun"                    fun of any arity            {mod, fun, '_'}
%%% "mod:fun/2"                  fun/2                       {mod, fun, 2}
%%% "mod:fun/_"                  same as mod:fun
%%% "mod:fun(A, b, _, \"str\")"    fun/4 with a head match     {mod, fun, 4}
%%% "mod:_" or "mod:'_'"         same as mod
%%% "mod:_(X, X)"                every function of mod called with two equal arguments
%%% "'Elixir.Foo':bar/1"         quoted atoms work as in Erlang
%%% '''
%%%
%%% Arguments are Erlang patterns: variables (bound to `$1', `$2', ... in
%%% order of first appearance; a variable used twice must match equal
%%% values), `_' (and the atom ``'_'''), numbers (also negative), atoms,
%%% strings, `"prefix" ++ Rest', lists (`[a | _]'), tuples, constant
%%% binaries (`<<"bin">>') and maps with constant keys
%%% (`#{k := V}'; `=>' is accepted too). An Erlang variable starting with
%%% `_' (`_X') is an ordinary variable. Records and binary patterns
%%% binding variables are refused: match specs cannot express them.
%%%
%%% `GUARDS' are Erlang guards over the argument variables: type tests
%%% (`is_atom/1', `is_list/1', ..., `is_boolean/1', `is_record/3'),
%%% comparisons, arithmetic, `and'/`or'/`not'/`xor', `andalso'/`orelse',
%%% and the guard functions match specs know (`element/2', `hd/1',
%%% `length/1', `map_get/2', `map_size/1', `size/1', `byte_size/1',
%%% `node/0,1', `self/0', ...). `,' is "and"; `;' separates alternatives,
%%% each of which becomes its own match-spec clause.
%%%
%%% `ACTIONS' are `return', `stack', `caller' and `caller_line',
%%% separated by `;' (or `,'). Each becomes a term in the body of every
%%% match-spec clause:
%%%
%%% ```
%%% return       {exception_trace}   a return_from event, or exception_from
%%%                                  if the call raises (like redbug; note
%%%                                  that it also makes tail calls of the
%%%                                  function non-tail, as return_trace does)
%%% stack        {message, {process_dump}}
%%% caller       {message, {caller}}
%%% caller_line  {message, {caller_line}}   (OTP 25) the caller and the
%%%              source line of the call: {M, F, A, {File, Line}}
%%% stack and caller together:   {message, {{{caller}, {process_dump}}}}
%%%          (a trace event carries a single message, so the pair
%%%           {CallerMFA, ProcessDump} is sent; caller_line likewise, and
%%%           it replaces caller when both are given)
%%% '''
%%%
%%% With no action the body is `[]'. Examples:
%%%
%%% ```
%%% "lists:seq(A, B) when A > B -> return"
%%%     #{kind => call, mfa => {lists, seq, 2}, actions => [return],
%%%       match_spec => [{['$1', '$2'], [{'>', '$1', '$2'}], [{exception_trace}]}]}
%%% "ets:lookup(T, hostname) when is_integer(T) -> stack"
%%%     #{kind => call, mfa => {ets, lookup, 2}, actions => [stack],
%%%       match_spec => [{['$1', hostname], [{is_integer, '$1'}],
%%%                       [{message, {process_dump}}]}]}
%%% "m:f(X) when X > 10; X < 0"
%%%     match_spec => [{['$1'], [{'>', '$1', 10}], []},
%%%                    {['$1'], [{'<', '$1', 0}], []}]
%%% '''
%%%
%%% == Message patterns ==
%%%
%%% `send' and ``'receive''' (also unquoted `receive') select message
%%% trace events, as in redbug. They may take the message as a pattern,
%%% plus guards; actions are not allowed:
%%%
%%% ```
%%% "send"                         every sent message
%%% "send({ping, _})"              head [Receiver, Msg] = ['_', {ping, '_'}]
%%% "send(To, Msg) when is_atom(To)"   the receiver too
%%% "'receive'"                    every received message
%%% "'receive'(X) when is_atom(X)" head [Node, Sender, Msg] = ['_', '_', '$1']
%%% "'receive'(Node, From, Msg)"   all three
%%% '''
%%%
%%% They compile to ``#{kind => send | 'receive', match_spec => MS}'' for
%%% ``erlang:trace_pattern(send | 'receive', MS, [])''. (To trace the
%%% functions of a module named `send', write `"send:_"'.)
%%%
%%% == Elixir syntax (as in rexbug) ==
%%%
%%% A pattern starting with an upper-case letter or with `:' is Elixir:
%%%
%%% ```
%%% "Foo.Bar.baz(x, :ok, \"bin\", 'chars')"   {'Elixir.Foo.Bar', baz, 4}, head
%%%                                    ['$1', ok, <<"bin">>, "chars"]
%%% "Mod.fun/2", "Mod.fun", "Mod", ":ets.lookup/2"
%%% "Mod.fun(a, b) when a > 1 and is_list(b) :: return;stack"
%%% "Mod.fun(%{k: v, \"s\" => _}, [h | _])"
%%% "Shop.buy(%Shop.Order{status: s}) when s in [:paid, :sent]"
%%% "Shop.find(\"user:\" <> _id, n) when n in 1..10"
%%% ":send", ":receive", ":send({:ping, _})"
%%% '''
%%%
%%% Lower-case names are variables, `_' and `_x' ignore; `:atom',
%%% `:"quoted atom"', operators as Elixir writes them (`:+', `:<<>>',
%%% `Kernel.+/2', `:erlang.==/2', `Kernel.!=(a, b)', `Kernel.and/2') and
%%% names of letters beyond Latin-1 (`:日本', `Mod.日本?/1', `[日本: 1]'; a
%%% variable of such letters is refused: rename it); `"x"' is a UTF-8 binary, ``'x''' a charlist;
%%% `nil', `true', `false' are atoms; `%{...}' is a map (keyword keys
%%% `k: v' allowed); a keyword list is a list of pairs as Elixir reads it:
%%% `[a: 1]' is `[{a, 1}]', `[1, b: 2]' is `[1, {b, 2}]' (pairs come last),
%%% `f(x, a: 1)' is `f(x, [{a, 1}])'; keys may be reserved words
%%% (`[in: 1, end: 2]') or quoted (`["a b": 1]'). Guard operators `==', `!=', `===', `!==', `<=',
%%% `and', `or', `not', `&&', `||', `!' and the guards `elem/2', `is_nil/1',
%%% `div/2', `rem/2', `is_map_key/2' (Elixir argument order) are
%%% translated. Actions follow `::'. A struct `%Mod{k: v}' is a map
%%% pattern with its `__struct__' key (`%name{}' and `%_{}' are refused);
%%% `x in [literals]', `x in 1..9' and `x not in [...]' are guards; a head
%%% argument `"prefix" <> _rest' is checked in the guard with
%%% `binary_part/3' (a match spec head cannot match a binary prefix, so the
%%% rest cannot be bound and only a literal prefix is allowed). Pipes,
%%% module attributes (`@name': they do not exist when the string is
%%% parsed) and string interpolation are refused, saying so.
%%%
%%% == Safety ==
%%%
%%% Unless `force => true' is given, a pattern is refused if it would
%%% trace the tracer itself or flood the node: any function of
%%% beamprobe's own modules (`beamprobe*'), of `io', `io_lib',
%%% `io_lib_format', `io_lib_pretty', `group', `user_drv', `prim_file',
%%% `erlang:display' (so also the whole `erlang' module), and any pattern
%%% with a ``'_''' module (`"_"', `"_:_"').
-module(beamprobe_pattern).

-export([parse/1, parse/2, format_error/1]).
%% Internal: the safety check and the action bodies, for the tuple forms
%% of beamprobe_pattern_recon.
-export([check/2, body/1]).
%% Internal: token helpers shared with beamprobe_pattern_ms and
%% beamprobe_pattern_elixir.
-export([anno/1, tok_text/1, plain/1]).

-export_type([trace_pattern/0, call_pattern/0, message_pattern/0,
              match_spec/0, action/0, error_info/0]).

-type action() :: return | stack | caller | caller_line.
-type match_spec() :: [{'_' | [term()], [term()], [term()]}].
-type call_pattern() :: #{kind := call,
                          mfa := {module() | '_', atom(), arity() | '_'},
                          match_spec := match_spec(),
                          actions := [action()]}.
-type message_pattern() :: #{kind := send | 'receive',
                             match_spec := match_spec()}.
-type trace_pattern() :: call_pattern() | message_pattern().
-type error_info() :: {Column :: pos_integer(), Message :: string()}.

%% Internal error: thrown (here and by beamprobe_pattern_ms and
%% beamprobe_pattern_elixir), caught in parse/2. Loc is a token
%% annotation, an erl_anno location {Line, Col}, or {abs, Column}.
-define(ERR(Loc, Msg), throw({?MODULE, Loc, Msg})).

-define(PROTECTED, [io, io_lib, io_lib_format, io_lib_pretty, group,
                    user_drv, prim_file]).
-define(ACTIONS, [return, stack, caller, caller_line]).
-define(OPENERS, ['(', '[', '{', '<<']).
-define(CLOSERS, [')', ']', '}', '>>']).

%%% ---- API -----------------------------------------------------------------

%% @doc Parses a pattern with the default options (`force => false').
%% @see parse/2
-spec parse(string() | binary()) ->
          {ok, trace_pattern()} | {error, error_info()}.
parse(Pattern) ->
    parse(Pattern, #{}).

%% @doc Parses a pattern (see the module documentation for the language).
%% `Opts' may hold `force => boolean()' (default `false'): with `true',
%% patterns that would trace the tracer itself or flood the node are
%% accepted. Returns the compiled pattern, or `{error, {Column, Message}}'
%% where `Column' is 1-based in the pattern. A non-boolean `force'
%% raises `badarg'.
-spec parse(string() | binary(), map()) ->
          {ok, trace_pattern()} | {error, error_info()}.
parse(Pattern, Opts) when is_map(Opts) ->
    Force = case maps:get(force, Opts, false) of
                B when is_boolean(B) -> B;
                _ -> erlang:error(badarg, [Pattern, Opts])
            end,
    case to_chars(Pattern) of
        {ok, Str} ->
            try compile(Str, Force) of
                P -> {ok, P}
            catch
                throw:{?MODULE, Loc, Msg} ->
                    {error, {column(Loc, Str), lists:flatten(Msg)}}
            end;
        {error, Col, Msg} ->
            {error, {Col, Msg}};
        error ->
            {error, {1, "a pattern must be a string or a binary"}}
    end.

%% @doc Says an error returned by {@link parse/2} in words, e.g.
%% `"column 9: arity must be an integer 0..255"'.
-spec format_error(error_info()) -> string().
format_error({Column, Message}) ->
    lists:flatten(io_lib:format("column ~b: ~ts", [Column, Message])).

%%% ---- driver --------------------------------------------------------------

to_chars(B) when is_binary(B) ->
    case unicode:characters_to_list(B) of
        L when is_list(L) -> {ok, L};
        {_, Good, Rest} ->
            %% Bytes that are not UTF-8 (a pattern from a terminal in
            %% latin-1, or cut in the middle of a character): where.
            Bad = binary:first(iolist_to_binary(Rest)),
            {error, length(Good) + 1,
             lists:flatten(io_lib:format(
                             "byte ~b (16#~.16B) is not UTF-8 here: patterns "
                             "are UTF-8 text", [byte_size(B) - iolist_size(Rest)
                                                 + 1, Bad]))}
    end;
to_chars(L) when is_list(L) ->
    try unicode:characters_to_list(L) of
        S when is_list(S) -> {ok, S};
        _ -> error
    catch
        _:_ -> error
    end;
to_chars(_) ->
    error.

compile(Str, Force) ->
    lists:all(fun is_space/1, Str) andalso ?ERR({abs, 1}, "empty pattern"),
    Mode = mode(Str),
    {Scanned, Ins} = prescan(Mode, Str),
    try compile(Scanned, Mode, Force)
    catch throw:{?MODULE, Loc, Msg} when Ins =/= [] ->
            %% the pre-scan quoted names ("+"): a column of the pattern
            %% as written
            Col = column(Loc, Scanned),
            ?ERR({abs, Col - length([I || I <- Ins, I < Col])}, Msg)
    end.

compile(Scanned, Mode, Force) ->
    End = end_loc(Scanned),
    Toks = strip_dot(scan(Scanned)),
    Toks =:= [] andalso ?ERR({abs, 1}, "empty pattern"),
    check_balance(Toks),
    {Before, Arrow} = split_top(fun is_arrow/1, Toks),
    {Head0, When0} = split_top(fun is_when/1, Before),
    {Head, When} = case {Mode, When0} of
                       {elixir, _} ->
                           beamprobe_pattern_elixir:translate(Head0, When0);
                       {erlang, _} ->
                           {Head0, When0}
                   end,
    P = build(Head, When, Arrow, Mode, End),
    check_safety(P, Force),
    P.

is_space(C) -> lists:member(C, " \t\r\n\f\v").

%% Elixir when the pattern starts with an upper-case letter or ':'.
mode(Str) ->
    case string:trim(Str, leading) of
        [C | _] when C >= $A, C =< $Z -> elixir;
        [$: | _] -> elixir;
        _ -> erlang
    end.

%% The location just after the last character.
end_loc(Str) ->
    Lines = string:split(Str, "\n", all),
    {length(Lines), length(lists:last(Lines)) + 1}.

column({abs, N}, _Str) ->
    N;
column(Loc, Str) ->
    case erl_anno:location(Loc) of
        {Line, Col} -> line_offset(Line, Str, 1, 0) + Col;
        Line when is_integer(Line) -> line_offset(Line, Str, 1, 0) + 1
    end.

line_offset(Line, _, Line, Off) -> Off;
line_offset(Line, [$\n | Rest], L, Off) -> line_offset(Line, Rest, L + 1, Off + 1);
line_offset(Line, [_ | Rest], L, Off) -> line_offset(Line, Rest, L, Off + 1);
line_offset(_, [], _, Off) -> Off.

scan(Str) ->
    case erl_scan:string(Str, {1, 1}, [text]) of
        {ok, Toks, _} -> Toks;
        {error, {Loc, erl_scan, {illegal, atom}}, _} ->
            %% (erl_scan's only reason for it: a name past 255 characters)
            ?ERR(Loc, "atom too long: an atom holds at most 255 characters");
        {error, {Loc, Mod, Desc}, _} -> ?ERR(Loc, Mod:format_error(Desc))
    end.

%% A final '.' is allowed (and ignored); any other is an error.
strip_dot(Toks) ->
    Toks1 = case lists:reverse(Toks) of
                [{dot, _} | Rev] -> lists:reverse(Rev);
                _ -> Toks
            end,
    [?ERR(anno(T), "unexpected '.' (only the end of the pattern may have one)")
     || {dot, _} = T <- Toks1],
    Toks1.

is_arrow(T) -> lists:member(element(1, T), ['->', '::']).
is_when(T) -> element(1, T) =:= 'when'.

check_balance(Toks) ->
    check_balance(Toks, []).

check_balance([], []) ->
    ok;
check_balance([], [{Open, A} | _]) ->
    ?ERR(A, io_lib:format("unbalanced ~s: '~s' is never closed",
                          [bracket_kind(Open), Open]));
check_balance([T | Rest], Stack) ->
    C = element(1, T),
    case {lists:member(C, ?OPENERS), lists:member(C, ?CLOSERS), Stack} of
        {true, _, _} ->
            check_balance(Rest, [{C, anno(T)} | Stack]);
        {_, true, []} ->
            ?ERR(anno(T), io_lib:format("unbalanced ~s: unexpected '~s'",
                                        [bracket_kind(C), C]));
        {_, true, [{Open, _} | Stack1]} ->
            case closer(Open) of
                C -> check_balance(Rest, Stack1);
                Want -> ?ERR(anno(T),
                             io_lib:format("unbalanced ~s: expected '~s' "
                                           "(to close '~s'), found '~s'",
                                           [bracket_kind(Open), Want, Open, C]))
            end;
        _ ->
            check_balance(Rest, Stack)
    end.

closer('(') -> ')';
closer('[') -> ']';
closer('{') -> '}';
closer('<<') -> '>>'.

bracket_kind(C) when C =:= '('; C =:= ')' -> "parenthesis";
bracket_kind(C) when C =:= '['; C =:= ']' -> "bracket";
bracket_kind(C) when C =:= '{'; C =:= '}' -> "brace";
bracket_kind(_) -> "binary brackets".

%% Splits at the first token at bracket depth 0 satisfying Pred.
split_top(Pred, Toks) ->
    split_top(Pred, Toks, 0, []).

split_top(_Pred, [], _D, Acc) ->
    {lists:reverse(Acc), none};
split_top(Pred, [T | Rest], D, Acc) ->
    C = element(1, T),
    case D =:= 0 andalso Pred(T) of
        true ->
            {lists:reverse(Acc), {T, Rest}};
        false ->
            D1 = case {lists:member(C, ?OPENERS), lists:member(C, ?CLOSERS)} of
                     {true, _} -> D + 1;
                     {_, true} -> D - 1;
                     _ -> D
                 end,
            split_top(Pred, Rest, D1, [T | Acc])
    end.

%% Splits [T | Rest] (T an opener) at its matching closer:
%% {Inner, CloserTok, After}.
split_group(Toks) ->
    split_group(Toks, 0, []).

split_group([T | Rest], D, Acc) ->
    C = element(1, T),
    case {lists:member(C, ?OPENERS), lists:member(C, ?CLOSERS)} of
        {true, _} -> split_group(Rest, D + 1, [T | Acc]);
        {_, true} when D =:= 1 ->
            [_Open | Inner] = lists:reverse(Acc),
            {Inner, T, Rest};
        {_, true} -> split_group(Rest, D - 1, [T | Acc]);
        _ -> split_group(Rest, D, [T | Acc])
    end.

%%% ---- building the pattern ------------------------------------------------

build([], When, Arrow, _Mode, _End) ->
    case {When, Arrow} of
        {{W, _}, _} -> ?ERR(anno(W), "missing function pattern before 'when'");
        {_, {Ar, _}} -> ?ERR(anno(Ar), io_lib:format(
                                          "missing function pattern before '~s'",
                                          [element(1, Ar)]))
    end;
build([{atom, A, send} | R], When, Arrow, Mode, End) when R =:= [];
                                                         element(1, hd(R)) =:= '(' ->
    message(send, A, R, When, Arrow, Mode, End);
build([{atom, A, 'receive'} | R], When, Arrow, Mode, End) when R =:= [];
                                                              element(1, hd(R)) =:= '(' ->
    message('receive', A, R, When, Arrow, Mode, End);
build([{'receive', A} | R], When, Arrow, Mode, End) when R =:= [];
                                                        element(1, hd(R)) =:= '(' ->
    message('receive', A, R, When, Arrow, Mode, End);
build(HeadToks, When, Arrow, Mode, End) ->
    {M, F, What} = parse_mfa(HeadToks, End),
    {Head, Vars} = case What of
                       {args, Args} -> beamprobe_pattern_ms:compile_head(Args);
                       {arity, N} when is_integer(N), (F =:= '_' orelse M =:= '_') ->
                           {lists:duplicate(N, '_'), #{}};
                       _ -> {'_', #{}}
                   end,
    Alts = beamprobe_pattern_ms:compile_guards(When, Vars, Mode, End, Arrow),
    Actions = parse_actions(Arrow, End),
    Body = body(Actions),
    Arity = case What of
                {args, Args1} -> length(Args1);
                {arity, N1} -> N1;
                none -> '_'
            end,
    MFA = case {M, F} of
              {'_', '_'} -> {'_', '_', '_'};
              {_, '_'} -> {M, '_', '_'};
              _ -> {M, F, Arity}
          end,
    #{kind => call, mfa => MFA, actions => Actions,
      match_spec => [{Head, Conds, Body} || Conds <- Alts]}.

message(Kind, A, R, When, Arrow, Mode, End) ->
    case Arrow of
        {ArTok, _} -> ?ERR(anno(ArTok), "actions are not allowed in send/'receive' "
                                        "patterns");
        none -> ok
    end,
    N = case Kind of send -> 2; 'receive' -> 3 end,
    {Head, Vars} =
        case R of
            [] ->
                {lists:duplicate(N, '_'), #{}};
            [{'(', _} | _] ->
                {Inner, Close, After} = split_group(R),
                After =:= [] orelse
                    ?ERR(anno(hd(After)), io_lib:format(
                                            "unexpected ~ts after the argument list",
                                            [tok_text(hd(After))])),
                Args = parse_args(Kind, A, hd(R), Inner, Close),
                case {Kind, length(Args)} of
                    {_, 1} ->
                        {H, V} = beamprobe_pattern_ms:compile_head(Args),
                        {lists:duplicate(N - 1, '_') ++ H, V};
                    {_, N} ->
                        beamprobe_pattern_ms:compile_head(Args);
                    {send, _} ->
                        ?ERR(anno(hd(R)), "a send pattern takes (Msg) or "
                                          "(Receiver, Msg)");
                    {'receive', _} ->
                        ?ERR(anno(hd(R)), "a 'receive' pattern takes (Msg) or "
                                          "(Node, Sender, Msg)")
                end
        end,
    Alts = beamprobe_pattern_ms:compile_guards(When, Vars, Mode, End, none),
    #{kind => Kind, match_spec => [{Head, Conds, []} || Conds <- Alts]}.

%% Returns {Module, Function, none | {arity, N | '_'} | {args, [Expr]}}.
parse_mfa([{atom, _, M} | R], End) ->
    after_module(M, R, End);
parse_mfa([{var, _, '_'} | R], End) ->
    after_module('_', R, End);
parse_mfa([{var, A, V} | _], _End) ->
    ?ERR(A, io_lib:format("expected a module name, found the variable ~ts "
                          "(quote it: '~ts')", [V, V]));
parse_mfa([T | _], _End) ->
    ?ERR(anno(T), io_lib:format("expected a module name (an atom), found ~ts",
                                [tok_text(T)])).

after_module(M, [], _End) ->
    {M, '_', none};
after_module(M, [{Sep, SA} | R], End) when Sep =:= ':'; Sep =:= '.' ->
    case R of
        [{atom, _, F} | R1] -> after_function(M, F, R1, End);
        [{var, _, '_'} | R1] -> after_function(M, '_', R1, End);
        [T | _] -> ?ERR(anno(T), io_lib:format(
                                   "expected a function name after '~s', found ~ts",
                                   [Sep, tok_text(T)]));
        [] -> ?ERR(next_col(SA), io_lib:format(
                                   "expected a function name after '~s'", [Sep]))
    end;
after_module(_M, [T | _], _End) ->
    ?ERR(anno(T), io_lib:format("expected ':' or '.' after the module name, "
                                "found ~ts", [tok_text(T)])).

after_function(M, F, _, _End) when M =:= '_', F =/= '_' ->
    ?ERR({abs, 1}, "the module '_' needs the function '_' too "
                   "(erlang:trace_pattern/3 cannot select a function in every module)");
after_function(M, F, [], _End) ->
    {M, F, none};
after_function(M, F, [{'/', SA} | R], _End) ->
    case R of
        [{integer, _, N}] when N >= 0, N =< 255 -> {M, F, {arity, N}};
        [{var, _, '_'}] -> {M, F, none};
        [{Cat, _, _}, T | _] when Cat =:= integer; Cat =:= var ->
            ?ERR(anno(T), io_lib:format("unexpected ~ts after the arity",
                                        [tok_text(T)]));
        [T | _] -> ?ERR(anno(T), "arity must be an integer 0..255");
        [] -> ?ERR(next_col(SA), "arity must be an integer 0..255")
    end;
after_function(M, F, [{'(', OA} = Open | _] = R, _End) ->
    {Inner, Close, After} = split_group(R),
    After =:= [] orelse
        ?ERR(anno(hd(After)), io_lib:format("unexpected ~ts after the argument list",
                                            [tok_text(hd(After))])),
    {M, F, {args, parse_args(F, OA, Open, Inner, Close)}};
after_function(_M, _F, [T | _], _End) ->
    ?ERR(anno(T), io_lib:format("expected '/', '(', 'when' or '->' after the "
                                "function name, found ~ts", [tok_text(T)])).

%% The column just after a one-character token.
next_col(A) ->
    {L, C} = erl_anno:location(A),
    {L, C + 1}.

%% Parses the argument list as a call F(Inner) with erl_parse.
parse_args(_F, FA, Open, Inner, Close) ->
    Toks = plain([{atom, FA, f}, Open | Inner] ++ [Close, {dot, anno(Close)}]),
    case erl_parse:parse_exprs(Toks) of
        {ok, [{call, _, _, Args}]} -> Args;
        {error, {Loc, erl_parse, Msg}} -> ?ERR(Loc, erl_parse:format_error(Msg))
    end.

%%% ---- actions -------------------------------------------------------------

parse_actions(none, _End) ->
    [];
parse_actions({Arrow, []}, End) ->
    ?ERR(End, io_lib:format("expected an action after '~s' (return, stack, "
                            "caller or caller_line)", [element(1, Arrow)]));
parse_actions({_Arrow, Toks}, End) ->
    acts(Toks, End, []).

acts([{atom, A, N} | R], End, Acc) ->
    lists:member(N, ?ACTIONS) orelse
        ?ERR(A, io_lib:format("unknown action '~tw' (expected return, stack, "
                              "caller or caller_line)", [N])),
    Acc1 = case lists:member(N, Acc) of
               true -> Acc;
               false -> [N | Acc]
           end,
    case R of
        [] ->
            lists:reverse(Acc1);
        [{Sep, _}] when Sep =:= ';'; Sep =:= ',' ->
            ?ERR(End, io_lib:format("expected an action after '~s'", [Sep]));
        [{Sep, _} | R1] when Sep =:= ';'; Sep =:= ',' ->
            acts(R1, End, Acc1);
        [T | _] ->
            ?ERR(anno(T), io_lib:format("expected ';' between actions, found ~ts",
                                        [tok_text(T)]))
    end;
acts([T | _], _End, _Acc) ->
    ?ERR(anno(T), io_lib:format("expected an action (return, stack, caller or "
                                "caller_line), found ~ts", [tok_text(T)])).

%% @private
%% @doc Internal: the match-spec body of a list of actions.
-spec body([action()]) -> [tuple()].
body(Actions) ->
    Ret = [{exception_trace} || lists:member(return, Actions)],
    Caller = case {lists:member(caller_line, Actions),
                   lists:member(caller, Actions)} of
                 {true, _} -> [{caller_line}];
                 {false, true} -> [{caller}];
                 {false, false} -> []
             end,
    Msg = case {Caller, lists:member(stack, Actions)} of
              {[C], true} -> [{message, {{C, {process_dump}}}}];
              {[C], false} -> [{message, C}];
              {[], true} -> [{message, {process_dump}}];
              {[], false} -> []
          end,
    Ret ++ Msg.

%% @private
%% @doc Internal: the safety check of {@link parse/2} for a pattern built
%% elsewhere (the tuple forms of beamprobe_pattern_recon): `ok' or
%% `{error, {1, Message}}'.
-spec check(trace_pattern(), boolean()) -> ok | {error, error_info()}.
check(P, Force) ->
    try check_safety(P, Force)
    catch throw:{?MODULE, _Loc, Msg} -> {error, {1, lists:flatten(Msg)}}
    end.

%%% ---- safety --------------------------------------------------------------

check_safety(_, true) ->
    ok;
check_safety(#{kind := call, mfa := {M, F, _} = MFA}, false) ->
    Bad = M =:= '_'
        orelse lists:member(M, ?PROTECTED)
        orelse lists:prefix("beamprobe", atom_to_list(M))
        orelse (M =:= erlang andalso (F =:= display orelse F =:= '_')),
    Bad andalso
        ?ERR({abs, 1}, io_lib:format("~ts would trace the tracer itself / flood "
                                     "the node; use force => true",
                                     [describe(MFA)])),
    ok;
check_safety(_, false) ->
    ok.

describe({'_', _, _}) -> "a pattern on every module";
describe({M, '_', _}) -> io_lib:format("a pattern on every function of ~tw", [M]);
describe({M, F, '_'}) -> io_lib:format("a pattern on ~tw:~tw", [M, F]);
describe({M, F, A}) -> io_lib:format("a pattern on ~tw:~tw/~b", [M, F, A]).

%%% ---- character pre-scan --------------------------------------------------

%% Acc (the pre-scan's output, reversed) ends in a name: a '?' after it is
%% the name's suffix (valid?), not a character literal.
-define(IS_NAME_END(Acc),
        (Acc =/= [] andalso is_integer(hd(Acc)) andalso
         ((hd(Acc) >= $a andalso hd(Acc) =< $z) orelse
          (hd(Acc) >= $A andalso hd(Acc) =< $Z) orelse
          (hd(Acc) >= $0 andalso hd(Acc) =< $9) orelse
          hd(Acc) =:= $_ orelse hd(Acc) =:= $? orelse hd(Acc) =:= $! orelse
          hd(Acc) > 127))).  % a letter beyond ASCII: é?

%% Character-level pass before erl_scan, outside quotes: a '%' would
%% start an Erlang comment, so it is refused -- except, in Elixir, '%{' (a
%% map), which becomes '#{' (same length, so columns hold); in Elixir a
%% '#' (which would start a comment there) is refused too.
%%
%% In Elixir, names erl_scan cannot read are quoted, as the pattern could
%% have written them: an operator after a module (Kernel.+/2 is
%% Kernel."+"/2) or after ':' (:+ is :"+"), and a name of letters beyond
%% Latin-1 (:日本, Mod.日本/1, 日本: 1) -- a variable of such letters is
%% refused, saying so.  Returns {Text, Inserted}: the text for erl_scan,
%% and the (1-based) positions in it of the quotes the pre-scan added.
prescan(Mode, Str) ->
    prescan(Mode, Str, 1, 1, none, []).

prescan(_M, [], _L, _C, _Q, Acc) ->
    Out = lists:reverse(Acc),
    {[case X of {ins, Ch} -> Ch; Ch -> Ch end || X <- Out],
     [I || {I, {ins, _}} <- lists:zip(lists:seq(1, length(Out)), Out)]};
prescan(elixir, [$. | Rest], L, C, none, Acc)
  when ?IS_NAME_END(Acc) orelse (Acc =/= [] andalso hd(Acc) =:= $") ->
    case ex_op(Rest, ex_dot_ops() ++ ex_word_ops(Rest)) of
        {Op, Rest1} ->
            prescan(elixir, Rest1, L, C + 1 + length(Op), none,
                    [{ins, $"} | quote_op(Op, [{ins, $"}, $. | Acc])]);
        none ->
            prescan(elixir, Rest, L, C + 1, none, [$. | Acc])
    end;
prescan(elixir, [$:, Ch | Rest] = Str, L, C, none, Acc)
  when Ch =/= $:, not ?IS_NAME_END(Acc),
       not (Acc =/= [] andalso hd(Acc) =:= $:) ->
    case ex_op([Ch | Rest], ex_atom_ops()) of
        {Op, Rest1} ->
            prescan(elixir, Rest1, L, C + 1 + length(Op), none,
                    [{ins, $"} | quote_op(Op, [{ins, $"}, $: | Acc])]);
        none ->
            prescan(elixir, tl(Str), L, C + 1, none, [$: | Acc])
    end;
prescan(elixir, [Ch | _] = Str, L, C, none, Acc)
  when Ch > 255; Ch =:= 16#AA; Ch =:= 16#B5; Ch =:= 16#B7; Ch =:= 16#BA ->
    %% a name with a letter beyond Latin-1 (or a middle dot, U+00B7):
    %% its start may already be out
    {Start, Acc1} = lists:splitwith(fun ex_name_char/1, Acc),
    {Tail, Rest} = lists:splitwith(fun ex_name_char/1, Str),
    {Suffix, Rest1} = case Rest of
                          [S | R] when S =:= $?; S =:= $! -> {[S], R};
                          _ -> {[], Rest}
                      end,
    Name = lists:reverse(Start) ++ Tail ++ Suffix,
    C0 = C - length(Start),
    Quoted = [{ins, $"} | lists:reverse(Name, [{ins, $"} | Acc1])],
    Key = case Rest1 of
              [$:, Sp | _] -> lists:member(Sp, " \t\r\n");
              _ -> false
          end,
    case Acc1 of
        [$: | _] -> ok;                          % :日本, an atom
        [$. | _] -> ok;                          % Mod.日本, a function
        _ when Key -> ok;                        % 日本: 1, a keyword key
        _ -> ?ERR({L, C0}, io_lib:format(
                             "the variable ~ts: beamprobe reads variables "
                             "of ASCII and Latin-1 letters only (rename "
                             "it, e.g. x)", [Name]))
    end,
    prescan(elixir, Rest1, L, C + length(Tail) + length(Suffix), none, Quoted);
prescan(M, [$\\, Ch | Rest], L, C, Q, Acc) when Q =/= none, Ch =/= $\n ->
    prescan(M, Rest, L, C + 2, Q, [Ch, $\\ | Acc]);
prescan(M, [Q | Rest], L, C, Q, Acc) ->
    prescan(M, Rest, L, C + 1, none, [Q | Acc]);
prescan(M, [Ch | Rest], L, C, none, Acc) when Ch =:= $"; Ch =:= $' ->
    prescan(M, Rest, L, C + 1, Ch, [Ch | Acc]);
prescan(erlang, [$$, $\\, Ch | Rest], L, C, none, Acc) when Ch =/= $\n ->
    prescan(erlang, Rest, L, C + 3, none, [Ch, $\\, $$ | Acc]);
prescan(erlang, [$$, Ch | Rest], L, C, none, Acc) when Ch =/= $\n ->
    prescan(erlang, Rest, L, C + 2, none, [Ch, $$ | Acc]);
prescan(elixir, [$?, $\\, Ch | Rest], L, C, none, Acc)
  when Ch =/= $\n, not ?IS_NAME_END(Acc) ->
    %% Elixir's ?\n: the code point, as digits padded to the same width
    Digits = integer_to_list(beamprobe_pattern_elixir:escape(Ch)),
    Pad = lists:duplicate(max(0, 3 - length(Digits)), $\s),
    prescan(elixir, Rest, L, C + 3, none, lists:reverse(Digits ++ Pad, Acc));
prescan(elixir, [$?, Ch | Rest], L, C, none, Acc)
  when Ch =/= $\n, Ch =/= $\s, Ch =/= $\t, not ?IS_NAME_END(Acc) ->
    %% Elixir's ?a is Erlang's $a (a name's ? suffix, valid?(x), stays)
    prescan(elixir, Rest, L, C + 2, none, [Ch, $$ | Acc]);
prescan(elixir, [$0, B | Rest], L, C, none, Acc)
  when (B =:= $x orelse B =:= $b orelse B =:= $o), not ?IS_NAME_END(Acc) ->
    %% Elixir's 0x1F, 0b101, 0o17 (erl_scan reads 0 and a name): the
    %% value in decimal, padded to the literal's width where it fits
    case based_integer(B, Rest) of
        {ok, Value, N, Rest1} ->
            Digits = integer_to_list(Value),
            Pad = lists:duplicate(max(0, N + 2 - length(Digits)), $\s),
            prescan(elixir, Rest1, L, C + N + 2, none, lists:reverse(Digits ++ Pad, Acc));
        error ->
            prescan(elixir, [B | Rest], L, C + 1, none, [$0 | Acc])
    end;
prescan(elixir, [$%, ${ | Rest], L, C, none, Acc) ->
    prescan(elixir, Rest, L, C + 2, none, [${, $# | Acc]);
prescan(elixir, [$%, Ch | Rest], L, C, none, Acc)
  when Ch >= $A, Ch =< $Z ->
    %% a struct, %Mod{...}: beamprobe_pattern_elixir reads "#Mod{"
    prescan(elixir, Rest, L, C + 2, none, [Ch, $# | Acc]);
prescan(elixir, [$%, Ch | _], L, C, none, _Acc)
  when (Ch >= $a andalso Ch =< $z) orelse Ch =:= $_ ->
    ?ERR({L, C}, "a struct pattern needs its module's name, e.g. "
         "%Shop.Order{status: :paid} (a match spec cannot leave the "
         "struct's module open: use %{} for any map)");
prescan(elixir, [$@, Ch | _], L, C, none, Acc)
  when ((Ch >= $a andalso Ch =< $z) orelse Ch =:= $_),
       not ?IS_NAME_END(Acc) ->
    %% (after a name, @ is part of it: :node@host)
    ?ERR({L, C}, "module attributes (@name) cannot be used in a pattern "
         "string: it is parsed at run time, where they do not exist; put "
         "the value in the string (\"... #{inspect(@name)} ...\") or use "
         "Beamprobe.match/1 with a ^pinned variable");
prescan(_M, [$% | _], L, C, none, _Acc) ->
    ?ERR({L, C}, "unexpected '%' (comments are not allowed in a pattern)");
prescan(elixir, [$# | _], L, C, none, _Acc) ->
    ?ERR({L, C}, "unexpected '#' (comments are not allowed in a pattern)");
prescan(M, [$\n | Rest], L, _C, Q, Acc) ->
    prescan(M, Rest, L + 1, 1, Q, [$\n | Acc]);
prescan(M, [Ch | Rest], L, C, Q, Acc) ->
    prescan(M, Rest, L, C + 1, Q, [Ch | Acc]).

%% A character of an Elixir name: ASCII and Latin-1 letters, digits, '_',
%% and any character beyond Latin-1 but spaces (Elixir's own rules,
%% Unicode UAX #31, are stricter: a name it refuses unquoted is read as
%% the atom it would be quoted).
ex_name_char(Ch) when is_integer(Ch) ->
    (Ch >= $a andalso Ch =< $z) orelse (Ch >= $A andalso Ch =< $Z)
        orelse (Ch >= $0 andalso Ch =< $9) orelse Ch =:= $_
        orelse (Ch >= 16#C0 andalso Ch =< 16#FF andalso Ch =/= 16#D7
                andalso Ch =/= 16#F7)
        orelse Ch =:= 16#AA orelse Ch =:= 16#B5 orelse Ch =:= 16#B7
        orelse Ch =:= 16#BA
        orelse (Ch > 255 andalso not lists:member(Ch, [16#1680, 16#2028, 16#2029,
                                                      16#202F, 16#205F, 16#3000,
                                                      16#FEFF])
                andalso not (Ch >= 16#2000 andalso Ch =< 16#200A));
ex_name_char(_) ->
    false.

%% Operator Op in a quoted name, onto the reversed Acc: a backslash (of
%% \\\\) is escaped, the escape is a character the pre-scan added.
quote_op(Op, Acc) ->
    lists:foldl(fun($\\, A) -> [$\\, {ins, $\\} | A];
                   (Ch, A) -> [Ch | A]
                end, Acc, Op).

%% The longest of Ops that Str starts with: {Op, Rest} or none.
ex_op(Str, Ops) ->
    Fits = [Op || Op <- Ops, lists:prefix(Op, Str)],
    case lists:reverse(lists:sort([{length(Op), Op} || Op <- Fits])) of
        [{N, Op} | _] -> {Op, lists:nthtail(N, Str)};
        [] -> none
    end.

%% Elixir's operators, as the names of functions (Kernel.+/2,
%% :erlang.==/2) and atoms (:+, :<<>>).
ex_dot_ops() ->
    ["+", "-", "*", "/", "++", "--", "**", "..", "...", "<>", "==", "!=",
     "===", "!==", "<", ">", "<=", ">=", "=~", "&&", "||", "!", "&&&", "|||",
     "^^^", "~~~", "<<<", ">>>", "|>", "<<~", "~>>", "<~", "~>", "<~>", "<|>",
     "=", "|", "&", "^", "@", "::", "..//", "<-", "\\\\"].

%% and, or, in, not, when: names of Kernel's functions after a '.'.
ex_word_ops(Str) ->
    [W || W <- ["and", "or", "in", "not", "when"], lists:prefix(W, Str),
          case lists:nthtail(length(W), Str) of
              [Ch | _] -> not ex_name_char(Ch) andalso Ch =/= $? andalso Ch =/= $!;
              [] -> true
          end].

ex_atom_ops() ->
    ex_dot_ops() ++ ["<<>>", "{}", "%{}", "%", ".", "->", "=>"].

%% The digits after Elixir's 0x, 0b or 0o (underscores between them):
%% {ok, Value, CharsRead, Rest}, or error where Elixir would not read an
%% integer (no digit, a trailing '_', a letter or digit of no base after).
based_integer(B, Str) ->
    Base = case B of $x -> 16; $b -> 2; $o -> 8 end,
    {Lit, Rest} = lists:splitwith(fun(Ch) -> Ch =:= $_ orelse digit(Ch, Base) end, Str),
    Ds = [Ch || Ch <- Lit, Ch =/= $_],
    NameChar = fun(Ch) -> digit(Ch, 36) orelse Ch =:= $_ end,
    case Lit of
        [D | _] when D =/= $_ ->
            case lists:last(Lit) =/= $_ andalso string:find(Lit, "__") =:= nomatch
                andalso not (Rest =/= [] andalso NameChar(hd(Rest))) of
                true -> {ok, list_to_integer(Ds, Base), length(Lit), Rest};
                false -> error
            end;
        _ -> error
    end.

digit(Ch, Base) ->
    V = if Ch >= $0, Ch =< $9 -> Ch - $0;
           Ch >= $a, Ch =< $z -> Ch - $a + 10;
           Ch >= $A, Ch =< $Z -> Ch - $A + 10;
           true -> 99
        end,
    V < Base.

%%% ---- token helpers -------------------------------------------------------

%% @private
%% @doc Internal (shared with beamprobe_pattern_ms and
%% beamprobe_pattern_elixir): the annotation of a token or of an
%% abstract-syntax node.
-spec anno(tuple()) -> erl_anno:anno().
anno(T) -> element(2, T).

%% @private
%% @doc Internal (shared with beamprobe_pattern_elixir): a token as it
%% reads in an error message, quoted, e.g. `"'foo'"'.
-spec tok_text(erl_scan:token()) -> io_lib:chars().
tok_text(T) ->
    case erl_scan:text(T) of
        undefined ->
            case T of
                {_, _, V} when is_atom(V) -> io_lib:format("'~ts'", [V]);
                {string, _, V} -> io_lib:format("~tp", [V]);
                {_, _, V} -> io_lib:format("'~tw'", [V]);
                {C, _} -> io_lib:format("'~s'", [C])
            end;
        Text ->
            "'" ++ Text ++ "'"
    end.

%% @private
%% @doc Internal (shared with beamprobe_pattern_ms and
%% beamprobe_pattern_elixir): tokens without their text, so that
%% erl_parse quotes them in messages.
-spec plain([erl_scan:token()]) -> [erl_scan:token()].
plain(Toks) ->
    [setelement(2, T, erl_anno:location(anno(T))) || T <- Toks].
