%%% @doc The janitor's call-pattern keys on the functions they cover
%%% (beamprobe_janitor): which function's pattern is beamprobe's, another
%%% tool's or gone, and setting keys again only where beamprobe may.
%%% Runs in the janitor process.
-module(beamprobe_janitor_keys).

-export([on_ours/4, ours/4, foreign_pattern/2, set_keys/5, no_pattern/2,
         general_first/1, gone_under/4]).

-type mfa_pat() :: {atom(), atom(), arity() | '_'}.

-define(HUB_META, beamprobe_hub_meta).

%% @doc trace_pattern(K, What, Flag) on the functions of K that Ours
%% says are beamprobe's: on K whole when all are; a '_' module (force)
%% whole, unchecked.  Returns the number of functions set.
-spec on_ours(mfa_pat(), term(), list(), fun((mfa()) -> boolean())) ->
          non_neg_integer().
on_ours({'_', _, _} = K, What, Flag, _Ours) ->
    erlang:trace_pattern(K, What, Flag);
on_ours(K, What, Flag, Ours) ->
    case lists:partition(Ours, beamprobe_skip:functions(K)) of
        {_, []} -> erlang:trace_pattern(K, What, Flag);
        {Mine, _Theirs} ->
            lists:sum([erlang:trace_pattern(MFA, What, Flag) || MFA <- Mine])
    end.

%% @doc Whether function MFA's pattern (of the kind) is the one beamprobe set:
%% a local pattern with the match spec of a key of Old covering it; a
%% meta pattern with the hub's meta tracer.  A function with no pattern
%% of the kind is ours if None: when removing (nothing to take from
%% anyone), or setting a key again on a function this pass removed it
%% from (a more general key gone); not when setting a key again on a
%% function that had none before the pass: another tool removed it (the
%% watchdogs reported it `removed'), or it was skipped for another tool's
%% and that tool let it go.  A session alone would record nothing more of
%% it; set again when another session joined or left, its calls came back
%% to the sessions that had said it was gone (a joining session's own
%% keys are set whole: beamprobe_janitor's install/2).
-spec ours(mfa(), #{mfa_pat() => term()}, boolean(), boolean()) -> boolean().
ours(MFA, _Old, true, None) ->
    case beamprobe_skip:trace_info(MFA, meta) of
        {meta, false} -> None;
        {meta, T} -> T =:= {beamprobe_nif, ?HUB_META};
        _ -> true
    end;
ours(MFA, Old, false, None) ->
    case beamprobe_skip:trace_info(MFA, traced) of
        {traced, false} -> None;
        {traced, local} ->
            {match_spec, MS} = beamprobe_skip:trace_info(MFA, match_spec),
            lists:any(fun({K, KMS}) -> covers(K, MFA) andalso ms(KMS) =:= MS end,
                      maps:to_list(Old));
        _ -> false
    end.

%% @doc Whether function F's trace pattern is another tool's, Pats being
%% what the janitor installed (beamprobe_janitor:foreign_patterns/1).
-spec foreign_pattern(mfa(), #{mfa_pat() => term()}) -> boolean().
foreign_pattern(F, Pats) ->
    case beamprobe_skip:trace_info(F, traced) of
        {traced, local} ->
            case beamprobe_skip:trace_info(F, match_spec) of
                {match_spec, MS} ->
                    not lists:any(fun({K, KMS}) ->
                                          covers(K, F) andalso ms(KMS) =:= MS
                                  end, maps:to_list(Pats));
                _ -> false                      % (unloaded meanwhile)
            end;
        {traced, global} -> true;
        _ -> false
    end.

%% A match spec as erlang:trace_info/2 gives it back.
ms(true) -> [];
ms(MS) -> MS.

%% @doc Sets the keys Ks (most general first) to their match specs in
%% New, each with set_key/7; How: {TracePatternFlags, Old (the keys
%% installed before, less those set whole), Meta, Gone (the functions
%% that had no pattern before the pass, set_key/7)}.  `{ok, Counts}'
%% (functions matched per key), or `{error, {bad_pattern, K}, Done}' with
%% the keys set before K.
-spec set_keys([mfa_pat()], #{mfa_pat() => term()},
               #{mfa_pat() => non_neg_integer()}, #{mfa_pat() => term()},
               {list(), #{mfa_pat() => term()}, boolean(), #{mfa() => []}}) ->
          {ok, #{mfa_pat() => non_neg_integer()}} |
          {error, {bad_pattern, mfa_pat()}, #{mfa_pat() => term()}}.
set_keys([], _New, Counts, _Done, _How) -> {ok, Counts};
set_keys([K | T], New, Counts, Done, {Flag, Old, Meta, Gone} = How) ->
    MS = maps:get(K, New),
    try set_key(K, MS, Flag, Old, Done, Meta, Gone) of
        N -> set_keys(T, New, Counts#{K => N}, Done#{K => MS}, How)
    catch error:badarg ->
            {error, {bad_pattern, K}, Done}
    end.

%% Sets key K's (new) match spec.  A key installed before (its sessions
%% changed) is set again only on the functions whose pattern is still
%% beamprobe's: one another tool set meanwhile (reported replaced by the
%% watchdog) keeps it, as on removal (beamprobe_janitor's remove_key/3).  Beamprobe's: a
%% match spec of a key installed before, or of one set earlier in this
%% pass (a wildcard key, set first, covers the functions of the more
%% specific ones set after it).
set_key(K, MS, Flag, Old, Done, Meta, Gone) when is_map_key(K, Old) ->
    on_ours(K, MS, Flag, fun(MFA) ->
                                 None = not is_map_key(MFA, Gone),
                                 ours(MFA, Old, Meta, None) orelse
                                     ours(MFA, Done, Meta, None)
                         end);
set_key(K, MS, Flag, _Old, _Done, _Meta, _Gone) ->
    erlang:trace_pattern(K, MS, Flag).

%% @doc The functions of keys Ks (a joining session's, set whole by the
%% janitor) that have no pattern of the kind (meta if Meta) now and that
%% a key of Old (another session's) covers or that a session relies on
%% (Relied: another tool's pattern it used): another tool removed their
%% pattern, the sessions that trace them reported it `removed', and the
%% join sets it again.  Read before the join sets anything.
-spec gone_under([mfa_pat()], #{mfa_pat() => term()}, [mfa()], boolean()) ->
          [mfa()].
gone_under(Ks, Old, Relied, Meta) ->
    OldKeys = maps:keys(Old),
    Claimed = fun(MFA) ->
                      lists:member(MFA, Relied) orelse
                          lists:any(fun(O) -> covers(O, MFA) end, OldKeys)
              end,
    case OldKeys =:= [] andalso Relied =:= [] of
        true -> [];
        false ->
            lists:usort([MFA || K <- Ks, MFA <- beamprobe_skip:functions(K),
                                Claimed(MFA), no_pattern(MFA, Meta)])
    end.

%% @doc Whether function MFA has no pattern of the kind (meta if Meta).
-spec no_pattern(mfa(), boolean()) -> boolean().
no_pattern(MFA, true) ->
    beamprobe_skip:trace_info(MFA, meta) =:= {meta, false};
no_pattern(MFA, false) ->
    beamprobe_skip:trace_info(MFA, traced) =:= {traced, false}.

%% @doc Keys, the most general first (the last trace_pattern/3 on a
%% function wins: the most specific key's match spec stays).
-spec general_first([mfa_pat()]) -> [mfa_pat()].
general_first(Keys) ->
    Wild = fun(K) -> length([x || '_' <- tuple_to_list(K)]) end,
    [K || {_, K} <- lists:sort([{-Wild(K), K} || K <- Keys])].

covers(A, B) -> beamprobe_combine:covers(A, B).
