%%% @doc recon_trace's pattern forms for the shell API
%%% ({@link beamprobe:calls/3}): tuples instead of strings.
%%%
%%% ```
%%% {M, F, A}           A an arity 0..255 or '_'       every call
%%% {M, F, '_'}         F may be '_' too (and M, with force => true)
%%% {M, '_', A}         every function of M of arity A
%%% {M, F, MatchSpec}   a match specification (a list), as
%%%                     erlang:trace_pattern/3 takes it; its actions are
%%%                     kept ({return_trace}, {exception_trace},
%%%                     {message, {caller}}, ...)
%%% {M, F, []}         the empty match spec: every call, as '_'
%%% {M, F, return_trace}   recon's shorthand for
%%%                        [{'_', [], [{return_trace}]}]
%%% {M, F, Fun}         a fun typed in the shell, in ms_transform syntax:
%%%                     fun([A, _]) when A > 1 -> return_trace() end
%%% '''
%%%
%%% They compile to the same map as a string pattern of
%%% {@link beamprobe_pattern} (`#{kind => call, mfa => ..., match_spec =>
%%% ..., actions => ...}') and pass the same safety check.  A fun is
%%% turned into a match specification as recon does: its clauses, kept by
%%% the shell's `erl_eval' (only a fun typed in the shell has them; a
%%% compiled fun is refused), go through
%%% `ms_transform:transform_from_shell/3'.  A match specification is
%%% checked with `erlang:match_spec_test/3' before anything is installed.
%%% An action written as an atom in a body (`fun(_) -> return_trace end',
%%% Elixir's `fn [x] -> :return end') is refused with the way to write
%%% it: in a match spec it is a constant that does nothing.
-module(beamprobe_pattern_recon).

-export([parse/2, is_form/1]).

-define(ANY, [{'_', [], []}]).
%% Actions written as atoms (refused: bare_actions/1).
-define(BARE_ACTIONS, [return, return_trace, exception, exception_trace,
                       caller, caller_line, stack, process_dump]).

%% @doc Is `P' one of the tuple forms (as opposed to a string)?
-spec is_form(term()) -> boolean().
is_form({M, F, _}) when is_atom(M), is_atom(F) -> true;
is_form(_) -> false.

%% @doc Compiles a tuple form; `{error, Message}' says what is wrong.
-spec parse(term(), boolean()) ->
          {ok, beamprobe_pattern:call_pattern()} | {error, string()}.
parse({'_', F, _}, _Force) when F =/= '_' ->
    %% As the string "_:f/1" says (it was `{bad_option, calls, ...}').
    {error, "the module '_' needs the function '_' too "
            "(erlang:trace_pattern/3 cannot select a function in every "
            "module)"};
parse({M, F, A}, Force) when is_atom(M), is_atom(F) ->
    case spec(A) of
        {ok, Arity0, MS0} ->
            %% erlang:trace_pattern/3 takes no arity after a '_' function
            %% ({M, '_', 1} is refused): a match spec of one arity on every
            %% function of M is {M, '_', '_'}, as recon_trace installs it
            %% (its heads match the functions of that arity only).  An
            %% arity alone gets such heads, as the string "m:_/1" does:
            %% its '_' head matched every arity, and {m, '_', 1} printed
            %% the calls of m:f/2 too.
            {Arity, MS} = case {F, Arity0, MS0} of
                              {'_', N, ?ANY} when is_integer(N) ->
                                  {'_', [{lists:duplicate(N, '_'), [], []}]};
                              {'_', _, _} -> {'_', MS0};
                              _ -> {Arity0, MS0}
                          end,
            P = #{kind => call, mfa => {M, F, Arity}, match_spec => MS,
                  actions => actions(MS)},
            case beamprobe_pattern:check(P, Force) of
                ok -> {ok, P};
                {error, {_, Msg}} -> {error, Msg}
            end;
        {error, _} = E -> E
    end;
parse(_, _) ->
    {error, "a pattern is a string (\"m:f/2\") or a tuple {M, F, A}"}.

spec(A) when is_integer(A), A >= 0, A =< 255 -> {ok, A, ?ANY};
spec('_') -> {ok, '_', ?ANY};
spec(return_trace) -> {ok, '_', [{'_', [], [{return_trace}]}]};
%% The empty match spec is erlang:trace_pattern/3's `true' (and dbg's):
%% every call, as recon_trace installs it.  It was refused as one that
%% "traces nothing".
spec([]) -> {ok, '_', ?ANY};
spec(Fun) when is_function(Fun) ->
    case fun_to_ms(Fun) of
        {ok, MS} -> {ok, arity_of(MS), MS};
        {error, _} = E -> E
    end;
spec(MS) when is_list(MS) ->
    case check_ms(MS) of
        ok -> {ok, arity_of(MS), MS};
        {error, _} = E -> E
    end;
spec(A) ->
    {error, lists:flatten(
              io_lib:format("~tP is not an arity (0..255), '_', a match "
                            "specification, return_trace or a shell fun",
                            [A, 8]))}.

%% A match spec that fixes the number of arguments in every clause
%% traces only that arity (erlang:trace_pattern/3 would install it on
%% every arity, where it never matches).
arity_of(MS) ->
    Heads = [H || {H, _, _} <- MS],
    case lists:all(fun is_list/1, Heads) andalso
        lists:usort([length(H) || H <- Heads]) of
        [N] -> N;
        _ -> '_'
    end.

check_ms(MS) ->
    case proper(MS) andalso lists:all(fun(C) -> is_tuple(C) andalso
                                                     tuple_size(C) =:= 3
                                      end, MS) of
        false ->
            {error, "a match specification is a list of {Head, Guards, "
                    "Body} clauses"};
        true ->
            try erlang:match_spec_test([], MS, trace) of
                {ok, _, _, _} -> bare_actions(MS);
                {error, Errors} ->
                    {error, lists:flatten(
                              ["not a valid match specification: ",
                               lists:join("; ", [io_lib:format("~ts", [E])
                                                 || {_, E} <- Errors])])}
            catch error:_ ->
                    {error, "not a valid match specification"}
            end
    end.

proper(L) ->
    try length(L) >= 0 catch error:badarg -> false end.

%% An action written as an atom (`return_trace', `caller', or Beamprobe.match's
%% `return') is a constant in a match spec body: it does nothing.  In
%% Elixir it is what one writes, `fn [x] -> :return_trace end' (a call
%% return_trace() does not compile there), and the same fn given to
%% Beamprobe.match/1 traces returns: typed into calls/2 it was accepted
%% and printed no return, silently.
bare_actions(MS) ->
    case [A || {_, _, Body} <- MS, is_list(Body), A <- Body,
               lists:member(A, ?BARE_ACTIONS)] of
        [] -> ok;
        [A | _] ->
            {error, lists:flatten(
                      io_lib:format(
                        "~tw in a match spec body is an atom, which does "
                        "nothing: write the action ~ts (Erlang shell fun: "
                        "~ts; Elixir: ~ts)",
                        [A, action_term(A), action_call(A),
                         elixir_way(A)]))}
    end.

action_term(A) ->
    io_lib:format("~w", [case action_of(A) of
                             {message, X} -> {message, {X}};
                             X -> {X}
                         end]).

action_call(A) ->
    case action_of(A) of
        {message, X} -> io_lib:format("message(~w())", [X]);
        X -> io_lib:format("~w()", [X])
    end.

action_of(A) when A =:= return; A =:= return_trace -> return_trace;
action_of(A) when A =:= exception; A =:= exception_trace -> exception_trace;
action_of(A) when A =:= stack; A =:= process_dump -> {message, process_dump};
action_of(caller) -> {message, caller};
action_of(caller_line) -> {message, caller_line}.

%% Beamprobe.match/1 takes :return, :exception and :caller; the others
%% are actions of the string patterns.
elixir_way(A) ->
    case action_of(A) of
        return_trace -> "Beamprobe.match(fn ... -> :return end)";
        exception_trace -> "Beamprobe.match(fn ... -> :exception end)";
        {message, caller} -> "Beamprobe.match(fn ... -> :caller end)";
        {message, process_dump} -> "the pattern \"Mod.fun/1 :: stack\"";
        {message, caller_line} -> "the pattern \"Mod.fun/1 :: caller_line\""
    end.

%% As recon_trace: the clauses the shell keeps for a fun it evaluates,
%% through ms_transform with dbg's rules (return_trace(), message(...),
%% caller(), ... allowed in the body).
fun_to_ms(Fun) ->
    case erl_eval:fun_data(Fun) of
        {fun_data, Bindings, Clauses} ->
            try ms_transform:transform_from_shell(dbg, Clauses, Bindings) of
                {error, [{_, [{_, _, Code} | _]} | _], _} ->
                    {error, "the fun is not a match specification: " ++
                         lists:flatten(ms_transform:format_error(Code)) ++
                         caller_line_hint(Code)};
                MS when is_list(MS) ->
                    %% (Not a throw: this is the `of' part of the try,
                    %% which its catch does not cover.)
                    case check_ms(MS) of
                        ok -> {ok, MS};
                        {error, _} = E -> E
                    end;
                _ ->
                    {error, "the fun is not a match specification"}
            catch _:_ ->
                    {error, "the fun is not a match specification"}
            end;
        _ ->
            {error, "only a fun typed in the shell can become a match "
                    "specification (ms_transform); give a compiled fun's "
                    "match specification as a list"}
    end.

%% caller_line() is a match spec function of OTP 26's ms_transform only:
%% on older ones it is refused as a local call, with no way named.
caller_line_hint({_BodyLocalCall, caller_line, 0}) ->
    " (this OTP's ms_transform has no caller_line(): give the match spec "
        "[{'_', [], [{message, {caller_line}}]}] or the string "
        "\"m:f -> caller_line\")";
caller_line_hint(_) -> "".

%% The actions a match spec asks for, as beamprobe_pattern names them.
actions(MS) ->
    Body = lists:flatten([B || {_, _, B} <- MS]),
    lists:usort([return || T <- Body,
                           T =:= {return_trace} orelse T =:= {exception_trace}]
                ++ [caller || {message, {caller}} <- Body]
                ++ [caller_line || {message, {caller_line}} <- Body]
                ++ [stack || {message, {process_dump}} <- Body]).
