%%% @doc Coexistence with other tracing tools (dbg, recon_trace, redbug,
%%% ...) when a session starts: what it leaves to them.  (While it runs, a
%%% watchdog notices when one of them removes or replaces what the session
%%% installed: beamprobe_watch.)
%%%
%%% == Skipping what another tool holds (skip/2) ==
%%%
%%% On OTP 25 a process has one tracer and a function one trace pattern
%%% (and one meta pattern).  Unless `force => true', a session takes
%%% neither from another tool:
%%%
%%% - a process is taken when its tracer (`erlang:trace_info(P, tracer)')
%%%   is set and is not a session's (`{beamprobe_nif, _}', but for the
%%%   profile mode's `{beamprobe_nif, beamprobe_discard}'); `new' is taken
%%%   when the default tracer of new processes is someone else's.  A taken
%%%   process is not traced (`procs => all' then traces the other ones, and
%%%   only `existing' ones when `new' is taken);
%%% - a function is taken, for a session with `local' patterns, when it has
%%%   a trace pattern (`erlang:trace_info(MFA, traced)' is `local' or
%%%   `global') that is not beamprobe's: global, or no beamprobe session
%%%   claims the function, or its match spec is not one the janitor
%%%   installed there (another tool replaced the sessions' pattern after
%%%   they started, e.g. dbg:tpl/4); for a `meta => true'
%%%   session, when it has a meta tracer that is not beamprobe's.  Its
%%%   pattern is left as it is.  The session's processes still get call
%%%   events from it (the pattern is global, the tracer is per process),
%%%   filtered by the other tool's match spec, not the session's.
%%%   Conversely, a process the other tool traces with `call' gets the
%%%   calls of the session's patterns from the VM, through the other
%%%   tool's tracer, filtered by the session's match spec and carrying its
%%%   result (a `{bp_route, ...}' term where sessions' match specs are
%%%   combined, beamprobe_combine) as the trace message's extra element:
%%%   beamprobe takes nothing from that process, but cannot keep a global
%%%   pattern from it (beamprobe_overlap_fuzz_SUITE counts them).
%%%   `call_count'/`call_time' counters do not make a function taken: they
%%%   are separate breakpoints and coexist with trace patterns.  A tracer
%%%   (of a process or a meta pattern) that is a process or port that has
%%%   exited, or `[]', takes nothing.  A pattern on `{M, '_', '_'}' or
%%%   `{M, F, '_'}' with some functions taken is set on the others one by
%%%   one.  A `'_'' module needs `force' anyway (beamprobe_config).
%%%
%%% `new' held by another tool is only seen at start; processes that tool
%%% gets afterwards (spawned while it holds `new') are not asked for by
%%% `erlang:trace/3' and so not taken either: the VM leaves a process whose
%%% tracer is another, enabled one alone.
%%%
%%% What was skipped is in `info/1' and the summary (`skipped =>
%%% #{procs => [Pid | new], procs_count => N, calls => [MFA]}', at most
%%% ?MAX_SKIPPED pids listed; `untraceable => [{Pid, sensitive}]': listed
%%% processes no trace can see, see untraceable/2).  A session left with
%%% nothing to trace fails with `{error, {already_traced, Skipped}}' (or
%%% `{untraceable, L}').  Processes a profile run holds (its tracer
%%% `{beamprobe_nif, beamprobe_discard}') are skipped and listed too, but
%%% taken when it ends (`profile_held', beamprobe_janitor:pick_up/2).
%%% With `force => true', taken
%%% processes (and `new') are cleared and taken over, and patterns are
%%% overwritten, as before.
-module(beamprobe_skip).

-export([skip/2, to_set/2, skipped_note/1]).
%% For the watchdog (beamprobe_watch): the functions a pattern names.
-export([functions/1, covers/2]).
%% For the watchdog too: erlang:trace_info/2 without its spec's gap.
-export([trace_info/2]).

-export_type([skipped/0]).

-define(MAX_SKIPPED, 1000).

-type mfa_pat() :: {atom(), atom(), arity() | '_'}.
-type skipped() :: #{procs := [pid() | new], procs_count := non_neg_integer(),
                     calls := [mfa()], relied => [mfa()],
                     untraceable => [{pid(), sensitive}],
                     profile_held => [pid()],
                     taken => #{procs := [pid() | new],
                                procs_count := non_neg_integer(),
                                calls := [mfa()]}}.

%% @doc What session `Self' leaves to other tools: returns the
%% configuration with the taken processes left out (`procs') and what was
%% skipped; the patterns to set come from {@link to_set/2}.  With
%% `force => true' clears the taken processes and `new' (taking them over)
%% and skips nothing.
-spec skip(beamprobe_config:config(), pid()) ->
          {ok, beamprobe_config:config(), skipped()}
        | {error, {already_traced, [pid() | new | mfa()]}}
        | {error, {untraceable, [{pid(), sensitive | already_traced}]}}
        | {error, {message_pattern_taken, send | 'receive', term()}}
        | {error, {message_pattern_shared, send | 'receive', pid() | new}}.
skip(C, Self) ->
    case msg_taken(C) of
        ok -> untraceable(C, Self);
        {error, _} = E -> E
    end.

%% Listed processes the VM never makes a trace event of (`sensitive':
%% process_flag/2; beamprobe's own processes, another session's handlers
%% among them, are all sensitive) are left out and listed under
%% `untraceable', with the reason; when every listed process is one, the
%% session is refused: it would record nothing (`force' cannot change
%% that).  When the others are all another tool's (dbg), nothing is left
%% either: refused with every listed process and its reason, `sensitive'
%% or `already_traced' (`force' takes the latter).  Only a session that sets trace flags asks: annotations
%% (beamprobe:annotate/1,2) are written by the NIF whatever the VM traces.
untraceable(#{procs := L} = C, Self) when is_list(L) ->
    U = case sets_flags(C) of
            true -> [{P, sensitive} || P <- L, sensitive(P)];
            false -> []
        end,
    case U of
        [] -> with_untraceable(skip1(C, Self), []);
        _ when length(U) =:= length(L) -> {error, {untraceable, U}};
        _ ->
            Rest = L -- [P || {P, _} <- U],
            case skip1(C#{procs := Rest}, Self) of
                %% The others all another tool's: nothing left, for
                %% either reason; each named with its own (the error
                %% named the taken ones only).
                {error, {already_traced, Rest}} ->
                    Why = maps:from_list(
                            U ++ [{P, already_traced} || P <- Rest]),
                    {error, {untraceable, [{P, maps:get(P, Why)}
                                           || P <- L]}};
                R -> with_untraceable(R, U)
            end
    end;
untraceable(C, Self) ->
    with_untraceable(skip1(C, Self), []).

with_untraceable({ok, C, Sk}, U) -> {ok, C, Sk#{untraceable => U}};
with_untraceable({error, _} = E, _U) -> E.

sets_flags(C) ->
    maps:get(calls, C, []) =/= [] orelse
        maps:get(events, C, []) -- [annotation] =/= [].

%% Whether local process P is one of beamprobe's own sensitive processes
%% (process_flag/2: the VM makes no trace event of it, for any tracer),
%% as each marks itself (beamprobe_own:sensitive/0): one table lookup,
%% nothing read from P.  No BIF tells whether any process is sensitive;
%% the one sign, an empty backtrace, costs printing every term on P's
%% stack in one go, literals included (a large bignum: seconds of a
%% scheduler; 20 s for one compiled into a module), so a process made
%% sensitive by someone else is not recognised (docs/tutorial.md,
%% section 17).
sensitive(P) ->
    beamprobe_own:is_handle(P, sensitive).

%% A message pattern (one per node and kind) another tool set -- dbg:tpe/2
%% and the like: neither `true' (the VM's default) nor one a beamprobe
%% session set -- is not taken without force => true (it was replaced,
%% and after the session the node traced every message).
msg_taken(#{force := true}) -> ok;
msg_taken(#{messages := Msgs}) ->
    Taken = [{K, Cur} || {K, _} <- Msgs,
                         Cur <- [beamprobe_janitor:msg_state(K)],
                         Cur =/= true,
                         beamprobe_janitor:installed_msg(K) =/= {ok, Cur}],
    case Taken of
        [] -> msg_shared([K || {K, MS} <- Msgs, MS =/= true]);
        [{K, Cur} | _] -> {error, {message_pattern_taken, K, Cur}}
    end;
msg_taken(_) -> ok.

%% A message pattern of its own (not `true') would also filter the
%% messages another tool traces (the pattern is the node's, for every
%% tracer): not set while a process another tracer holds has that
%% kind's flag, nor while another tracer's defaults for new processes
%% have it, without force => true.  (One pass over the processes, only
%% for a session with a message pattern; foreign_tracer/1 tells a
%% process without any flag by process_info/2, and only another tool's
%% processes are asked their flags: skip/2 of such a session took 91 ms
%% with 200,000 idle processes, where asking trace_info/2 of each took
%% 452 ms.)
msg_shared([]) -> ok;
msg_shared(Kinds) ->
    Holders = [{K, P} || P <- [new | processes()], foreign_tracer(P),
                         {flags, F} <- [trace_info(P, flags)],
                         K <- Kinds, lists:member(K, F)],
    case Holders of
        [] -> ok;
        [{K, P} | _] -> {error, {message_pattern_shared, K, P}}
    end.

skip1(#{meta := true, events := []} = C, Self) ->
    skip_calls(C, Self, [], 0);
skip1(#{procs := Procs, force := true} = C, Self) ->
    {_, Taken} = taken_procs(Procs),
    _ = [catch erlang:trace(P, false, [all]) || P <- Taken, is_pid(P)],
    _ = lists:member(new, Taken) andalso erlang:trace(new, false, [all]),
    %% What force => true took from other tools is said (info/1's
    %% skipped.taken, the shell's note): it is theirs no more.
    {ok, C, (none())#{taken => #{procs => lists:sublist(Taken, ?MAX_SKIPPED),
                                 procs_count => length(Taken),
                                 calls => forced_calls(C, Self)}}};
skip1(#{procs := Procs} = C, Self) ->
    {NTargets, Taken} = taken_procs(Procs),
    Pids = [P || P <- Taken, is_pid(P)],
    NewTaken = lists:member(new, Taken),
    %% Every existing process taken, and `new' too or not asked for.
    AllTaken = NTargets > 0 andalso length(Pids) =:= NTargets andalso
        (NewTaken orelse Procs =:= existing),
    case Procs of
        L when is_list(L), L =:= Pids -> {error, {already_traced, Pids}};
        new when NewTaken -> {error, {already_traced, [new]}};
        _ when AllTaken ->
            {error, {already_traced, lists:sublist(Taken, ?MAX_SKIPPED)}};
        L when is_list(L) ->
            held(Pids, skip_calls(C#{procs := L -- Pids}, Self, Taken,
                                  length(Taken)));
        all when NewTaken ->
            held(Pids, skip_calls(C#{procs := existing}, Self, Taken,
                                  length(Taken)));
        _ -> held(Pids, skip_calls(C, Self, Taken, length(Taken)))
    end.

%% The skipped processes (Pids, all of them: not only the ?MAX_SKIPPED
%% listed) that a profile run (beamprobe_profile) holds, under
%% `profile_held' (for the session: not in info/1): a profile is bounded,
%% and when it ends the session takes them (beamprobe_janitor:pick_up/2).
held(Pids, {ok, C, Sk}) ->
    Held = [P || P <- Pids,
                 tracer(P) =:= {beamprobe_nif, beamprobe_discard}],
    {ok, C, Sk#{profile_held => Held}};
held(_Pids, Other) -> Other.

none() -> #{procs => [], procs_count => 0, calls => []}.

skip_calls(#{force := true} = C, Self, _Procs, _N) ->
    {ok, C, (none())#{taken => #{procs => [], procs_count => 0,
                                 calls => forced_calls(C, Self)}}};
skip_calls(#{calls := Calls, meta := Meta} = C, Self, Procs, N) ->
    TakenBy = taken_by(Calls, Meta, Self),
    Taken = lists:usort([F || {F, _} <- TakenBy]),
    %% A function another tool's pattern holds still gives this session's
    %% processes its call events, filtered by that tool's match spec:
    %% used (relied on) only if this session asked for every call of it
    %% as it is; a guard or an action of its own would be broken by it.
    Relied = case Meta of
                 true -> [];
                 false -> lists:usort([F || {F, Call} <- TakenBy,
                                            accepts_all(Call)])
             end,
    Skipped = #{procs => lists:sublist(Procs, ?MAX_SKIPPED),
                procs_count => N, calls => Taken, relied => Relied},
    %% Nothing of its own left to record: refused, as starting would
    %% record nothing (or only what the other tool's match spec lets by).
    Nothing = Calls =/= [] andalso to_set(Calls, Skipped) =:= []
        andalso maps:get(messages, C) =:= []
        andalso (Meta orelse
                 (Relied =:= [] andalso maps:get(events, C, []) -- [call] =:= [])),
    case Nothing of
        true -> {error, {already_traced, Taken}};
        false -> {ok, C, Skipped}
    end.

%% @doc The call patterns to set: `Calls' without the functions skipped
%% (a wildcard pattern with some of its functions skipped becomes one
%% pattern per function left).
-spec to_set([mfa_pat() | {mfa_pat(), term()}], skipped() | undefined) ->
          [mfa_pat() | {mfa_pat(), term()}].
to_set(Calls, #{calls := Skipped}) when Skipped =/= [] ->
    lists:append(
      [begin
           Funs = functions(pat(Call)),
           case [F || F <- Funs, lists:member(F, Skipped)] of
               [] -> [Call];
               _ -> [with_pat(Call, F) || F <- Funs,
                                          not lists:member(F, Skipped),
                                          not narrower(F, Call, Calls)]
           end
       end || Call <- Calls]);
to_set(Calls, _) -> Calls.

%% The functions another tool's pattern held that force => true takes.
forced_calls(#{calls := []}, _Self) -> [];
forced_calls(#{calls := Calls, meta := Meta}, Self) ->
    lists:usort([F || {F, _} <- taken_by(Calls, Meta, Self)]).

%% The functions of Calls another tool's pattern holds: `{F, Call}'.  For
%% local patterns the janitor decides (beamprobe_janitor:
%% foreign_patterns/1): between its answer and the VM's no beamprobe
%% session joins or leaves, so none of their patterns, fresh or about to
%% go, is taken for another tool's.  A pattern on a function other
%% sessions trace is another tool's when its match spec is not the one
%% the janitor installed: dbg:tpl/4 over it after the sessions started
%% (their watchdogs report it replaced).
taken_by([], _Meta, _Self) -> [];
taken_by(Calls, true, _Self) ->
    [{F, Call} || Call <- Calls, F <- functions(pat(Call)),
                  taken_meta(F)];                % the meta tracer tells
taken_by(Calls, false, _Self) ->
    Fs = [{F, Call} || Call <- Calls, F <- functions(pat(Call))],
    Foreign = maps:from_keys(beamprobe_janitor:foreign_patterns(
                               lists:usort([F || {F, _} <- Fs])), true),
    [X || {F, _} = X <- Fs, is_map_key(F, Foreign)].

%% A pattern that asks for every call as it is: no head, guard or action.
accepts_all({{_, _, _}, true}) -> true;
accepts_all({{_, _, _}, MS}) when is_list(MS) ->
    lists:any(fun({H, [], []}) -> H =:= '_' orelse
                                      (is_list(H) andalso
                                       lists:all(fun(X) -> X =:= '_' end, H));
                 (_) -> false
              end, MS);
accepts_all({_, _, _}) -> true;
accepts_all(_) -> false.

%% Whether another pattern of the session names F with fewer '_' than
%% Call: F follows that one (beamprobe_combine's session_ms/2), so Call's
%% functions set one by one leave F out (set as {M, F, A} after it, Call's
%% match spec would replace the narrower one's: m:a/1 with its returns
%% next to m:'_'/'_' without them lost its returns).
narrower(F, Call, Calls) ->
    W = wild(pat(Call)),
    lists:any(fun(O) -> covers(pat(O), F) andalso wild(pat(O)) < W end,
              Calls).

wild(P) -> length([x || '_' <- tuple_to_list(P)]).

pat({{_, _, _} = MFA, _MS}) -> MFA;
pat({_, _, _} = MFA) -> MFA.

with_pat({{_, _, _}, MS}, F) -> {F, MS};
with_pat({_, _, _}, F) -> F.

%% @doc The functions a pattern names, those of its module loaded now (a
%% `'_'' module: none, it needs force).
-spec functions(mfa_pat()) -> [mfa()].
functions({'_', _, _}) -> [];
functions({M, F, A}) when F =/= '_', A =/= '_' -> [{M, F, A}];
functions({M, F, '_'}) ->
    %% The BIF, not M:module_info/1: that one may be traced (by this very
    %% session: meta patterns trace every process, beamprobe's too).
    try erlang:get_module_info(M, functions) of
        Fs -> [{M, N, Ar} || {N, Ar} <- Fs, F =:= '_' orelse N =:= F]
    catch _:_ -> []
    end.

%% The number of target processes, and those (and `new') another tool
%% traces.
taken_procs(Procs) ->
    Targets = case Procs of
                  new -> [];
                  L when is_list(L) -> L;
                  _ -> processes() -- [self()]
              end,
    New = case Procs of
              existing -> [];
              L2 when is_list(L2) -> [];
              _ -> [new || foreign_tracer(new)]
          end,
    {length(Targets), [P || P <- Targets, foreign_tracer(P)] ++ New}.

foreign_tracer(P) ->
    case tracer(P) of
        [] -> false;
        undefined -> false;
        %% The profile mode's tracer (beamprobe_profile): not a session's,
        %% and the VM refuses the janitor's tracer on its processes.
        {beamprobe_nif, beamprobe_discard} -> true;
        {beamprobe_nif, _} -> false;
        T -> alive(T)
    end.

%% The tracer of P, `new' or a port as trace_info/2 gives it; of a local
%% process its flags read first (beamprobe_each:tracer_of/1).
tracer(P) when is_pid(P), node(P) =:= node() -> beamprobe_each:tracer_of(P);
tracer(P) ->
    case trace_info(P, tracer) of
        {tracer, T} -> T;
        _ -> undefined
    end.

%% A tracer process or port that has exited holds nothing (the VM itself
%% replaces it); a tracer module is taken to be alive.
alive([]) -> false;                   % no tracer (trace_info's `[]')
alive(P) when is_pid(P) -> is_process_alive(P);
alive(P) when is_port(P) -> erlang:port_info(P) =/= undefined;
alive(_) -> true.

taken_meta(F) ->
    case trace_info(F, meta) of
        {meta, false} -> false;
        {meta, {beamprobe_nif, _}} -> false;
        {meta, T} -> alive(T);
        _ -> false
    end.
%% @doc Whether pattern `Pat' (`{M, F, A}', any of them `'_'') covers
%% function `MFA'; anything else covers nothing.
-spec covers(term(), mfa()) -> boolean().
covers({M1, F1, A1}, {M, F, A}) ->
    same(M1, M) andalso same(F1, F) andalso same(A1, A);
covers(_, _) -> false.

same('_', _) -> true;
same(X, X) -> true;
same(_, _) -> false.

%% @doc One line for the shell saying what a session skipped, or `none'.
-spec skipped_note(skipped() | undefined) -> none | string().
skipped_note(#{untraceable := [_ | _] = U} = Sk) ->
    Line = lists:flatten(
             io_lib:format("% beamprobe: left out ~b process(es) no trace "
                           "can see (~s): sensitive (process_flag/2), as "
                           "beamprobe's own processes are\n",
                           [length(U), list([P || {P, _} <- U])])),
    case skipped_note(Sk#{untraceable := []}) of
        none -> Line;
        Other -> Line ++ Other
    end;
skipped_note(#{taken := #{procs_count := 0, calls := []}}) -> none;
skipped_note(#{taken := #{procs := Procs, procs_count := N, calls := Calls}}) ->
    P = [io_lib:format("~b process(es) (~s)", [N, list(Procs)]) || N > 0],
    C = [io_lib:format("the pattern(s) on ~s",
                       [list([mfa_text(M) || M <- Calls])]) || Calls =/= []],
    lists:flatten(["% beamprobe: force => true took from another tool ",
                   lists:join(" and ", P ++ C),
                   " (theirs no more: not given back)\n"]);
skipped_note(#{procs_count := 0, calls := []}) -> none;
skipped_note(#{procs := Procs, procs_count := N, calls := Calls}) ->
    P = case N of
            0 -> [];
            _ -> [io_lib:format("~b process(es) traced by another tool "
                                "(~s)", [N, list(Procs)])]
        end,
    C = case Calls of
            [] -> [];
            _ -> [io_lib:format("the pattern(s) of another tool on ~s "
                                "(left as they are)",
                                [list([mfa_text(M) || M <- Calls])])]
        end,
    lists:flatten(["% beamprobe: skipped ", lists:join(" and ", P ++ C),
                   "; force => true takes them over\n"]);
skipped_note(_) -> none.

list(L) ->
    Shown = [case X of
                 S when is_list(S) -> S;
                 T -> io_lib:format("~p", [T])
             end || X <- lists:sublist(L, 3)],
    lists:join(", ", Shown) ++ [", ..." || length(L) > 3].

mfa_text({M, F, A}) -> io_lib:format("~tw:~tw/~b", [M, F, A]).

%% @doc erlang:trace_info/2 through apply: its OTP 25 spec leaves out
%% tracers of the form {Module, State}, which dialyzer then calls
%% impossible.  `undefined' where the VM refuses the question (a pid of
%% another node, a function of no loaded module).
-spec trace_info(pid() | port() | new | mfa() | send | 'receive' | on_load,
                 atom()) -> term().
trace_info(What, Item) ->
    try erlang:apply(erlang, trace_info, [What, Item])
    catch error:badarg -> undefined
    end.
