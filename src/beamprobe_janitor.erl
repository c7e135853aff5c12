%%% @doc The registry of running sessions and the owner of their shared
%%% trace patterns.
%%%
%%% Every decision that depends on other sessions is made here, in one
%%% process, one request at a time:
%%%
%%% - `claim/3': a session checks that nothing it will trace collides with
%%%   another session (`{conflict, Session, What}') and registers what it
%%%   will trace, in one step: two sessions started at once can never both
%%%   be accepted.  The claim is released when the session releases it,
%%%   ends or dies, whatever happens during its install.
%%% - `release/4': a stopping session gives back its call and message
%%%   patterns; a pattern is removed (here, in the same step) only when no
%%%   other session holds it, so that the last of many sessions stopping at
%%%   once removes it and none is left behind.
%%% - a session process that dies without stopping (for instance killed
%%%   with `exit(S, kill)') is cleaned after: the trace flags still pointing
%%%   at its tracer, its patterns (as `release/4'), and its trace finalised.
%%%
%%% The janitor never crashes on a session's behalf: a failing clean-up
%%% step is logged and the next one runs.
-module(beamprobe_janitor).
-behaviour(gen_server).

-export([start_link/0, claim/3, register_session/5, release/4,
         unregister_session/1, others_patterns/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-type mfa_pat() :: {atom(), atom(), arity() | '_'}.
-type claim() :: {none | all | new | existing | [pid()],
                  [mfa_pat() | {message, send | 'receive'}]}.
-export_type([claim/0]).

%% One entry per session, keyed by the monitor reference: its claim, and
%% once its NIF session exists, the resource (its tracer's state) and the
%% patterns it has set (for info; the clean-up uses the claim).
-type entry() :: #{pid := pid(), claim := claim(), meta := boolean(),
                   res => beamprobe_nif:session(),
                   patterns => [mfa_pat()]}.

%% @doc Starts the janitor, registered locally.
-spec start_link() -> {ok, pid()}.
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Checks `Claim' (patterns meta-traced if `Meta') against every
%% other session and, if nothing overlaps, registers it for `Session',
%% atomically.  Returns the first overlapping session with what overlaps
%% otherwise.
-spec claim(pid(), claim(), boolean()) -> ok | {conflict, pid(), term()}.
claim(Session, Claim, Meta) ->
    gen_server:call(?MODULE, {claim, Session, Claim, Meta}, infinity).

%% @doc Called by a session process once it has installed its tracing:
%% what the janitor must undo if the session dies.
-spec register_session(pid(), beamprobe_nif:session(), [mfa_pat()],
                       boolean(), claim()) -> ok.
register_session(Session, Res, Patterns, Meta, Claim) ->
    gen_server:call(?MODULE, {register, Session, Res, Patterns, Meta, Claim},
                    infinity).

%% @doc Called by a session that stops (or failed to install): forgets its
%% claim, then removes each of its call patterns (`Patterns', set with the
%% `meta' or `local' flag as `Meta' says) and message patterns
%% (`MsgPatterns') that no other session holds.  Idempotent.  Without a
%% janitor (being restarted, or the application stopping: nothing else to
%% share with) the caller removes its patterns itself.
-spec release(pid(), [mfa_pat()], boolean(), [send | 'receive']) -> ok.
release(Session, Patterns, Meta, MsgPatterns) ->
    try gen_server:call(?MODULE,
                        {release, Session, Patterns, Meta, MsgPatterns},
                        infinity)
    catch exit:_ -> remove_patterns(Patterns, Meta, MsgPatterns, #{})
    end.

%% @doc Forgets a session (its tracing is already removed).  Idempotent.
-spec unregister_session(pid()) -> ok.
unregister_session(Session) ->
    gen_server:call(?MODULE, {unregister, Session}, infinity).

%% @doc The call patterns claimed by every session but `Session'
%% (beamprobe's own, for beamprobe_watch: not another tool's).  `[]'
%% without a janitor.
-spec others_patterns(pid()) -> [mfa_pat()].
others_patterns(Session) ->
    try gen_server:call(?MODULE, {others_patterns, Session}, 5000)
    catch exit:_ -> []
    end.

%% @private
-spec init([]) -> {ok, #{reference() => entry()}}.
init([]) ->
    {ok, #{}}.

%% @private
-spec handle_call(term(), gen_server:from(), map()) -> {reply, term(), map()}.
handle_call({claim, Session, Claim, Meta}, _From, St) ->
    case conflict(Session, Claim, Meta, St) of
        none ->
            St1 = forget(Session, St),
            Ref = monitor(process, Session),
            {reply, ok, St1#{Ref => #{pid => Session, claim => Claim,
                                      meta => Meta}}};
        {Pid, What} ->
            {reply, {conflict, Pid, What}, St}
    end;
handle_call({register, Session, Res, Patterns, Meta, Claim}, _From, St) ->
    Entry = #{pid => Session, res => Res, patterns => Patterns,
              meta => Meta, claim => Claim},
    St1 = case find(Session, St) of
              {Ref, _} -> St#{Ref => Entry};
              error -> St#{monitor(process, Session) => Entry}
          end,
    {reply, ok, St1};
handle_call({release, Session, Patterns, Meta, MsgPats}, _From, St) ->
    St1 = forget(Session, St),
    remove_patterns(Patterns, Meta, MsgPats, St1),
    {reply, ok, St1};
handle_call({others_patterns, Session}, _From, St) ->
    {reply, [MFA || #{pid := P, claim := {_, Ms}} <- maps:values(St),
                    P =/= Session, {_, _, _} = MFA <- Ms], St};
handle_call({unregister, Session}, _From, St) ->
    {reply, ok, forget(Session, St)};
handle_call(_, _From, St) ->
    {reply, {error, unknown_request}, St}.

find(Session, St) ->
    case [{Ref, E} || {Ref, #{pid := P} = E} <- maps:to_list(St),
                      P =:= Session] of
        [Found | _] -> Found;
        [] -> error
    end.

forget(Session, St) ->
    maps:filter(fun(Ref, #{pid := P}) when P =:= Session ->
                        demonitor(Ref, [flush]), false;
                   (_, _) -> true
                end, St).

%% The first session (other than `Self') whose processes or functions
%% overlap `Claim', with what overlaps; or `none'.
%% Identical call patterns may be shared by sessions that are not meta
%% (each process has one tracer); any other overlap is a conflict.
conflict(Self, {Procs, MFAs}, Meta, St) ->
    Found = [{Pid, What}
             || #{pid := Pid, claim := {P2, M2}, meta := Meta2}
                    <- maps:values(St),
                Pid =/= Self,
                What <- [procs_overlap(Procs, P2)] ++
                        [{calls, A} || A <- MFAs, B <- M2,
                                       mfa_overlap(A, B),
                                       Meta orelse Meta2 orelse A =/= B],
                What =/= false],
    case Found of [] -> none; [F | _] -> F end.

procs_overlap(none, _) -> false;
procs_overlap(_, none) -> false;
procs_overlap(A, B) when is_list(A), is_list(B) ->
    case [P || P <- A, lists:member(P, B)] of
        [] -> false;
        Common -> {procs, Common}
    end;
procs_overlap(A, B) -> {procs, A, B}.

%% Two patterns overlap when they can name the same function (or are the
%% same message pattern kind).
mfa_overlap({M1, F1, A1}, {M2, F2, A2}) ->
    same(M1, M2) andalso same(F1, F2) andalso same(A1, A2);
mfa_overlap(A, B) -> A =:= B.

same('_', _) -> true;
same(_, '_') -> true;
same(X, Y) -> X =:= Y.

%% Removes the patterns no session in `St' (the others) holds.  A session
%% holds what it claimed: a session being installed holds its patterns
%% before it sets them, so a pattern is never removed under it.
remove_patterns(Patterns, Meta, MsgPats, St) ->
    Held = lists:append([Ms || #{claim := {_, Ms}} <- maps:values(St)]),
    Flag = case Meta of
               true -> [meta];
               false -> [local]
           end,
    _ = [safely(fun() -> message_pattern(K, true) end)
         || K <- lists:usort(MsgPats), not lists:member({message, K}, Held)],
    _ = [safely(fun() -> erlang:trace_pattern(MFA, false, Flag) end)
         || MFA <- lists:usort(Patterns), not lists:member(MFA, Held)],
    ok.

%% erlang:trace_pattern(send | 'receive', ...) through apply: its OTP 25
%% spec leaves out message patterns, which dialyzer then calls impossible.
message_pattern(Kind, MS) ->
    erlang:apply(erlang, trace_pattern, [Kind, MS, []]).

safely(F) ->
    try F()
    catch Class:Reason ->
            logger:warning("beamprobe_janitor: clean-up step failed: ~p:~p",
                           [Class, Reason]),
            error
    end.

%% @private
-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_, St) ->
    {noreply, St}.

%% @private
-spec handle_info(term(), map()) -> {noreply, map()}.
handle_info({'DOWN', Ref, process, _, _Why}, St) ->
    case maps:take(Ref, St) of
        {#{meta := Meta, claim := {_Procs, Claimed}} = E, St1} ->
            %% Died without releasing (a session that stops or fails to
            %% install releases first), maybe in the middle of installing:
            %% undo whatever it may have set.  Its flags point at its
            %% tracer, known once its NIF session exists; its patterns are
            %% the ones it claimed (those no other session holds).
            _ = case E of
                    #{res := Res} ->
                        safely(fun() ->
                                       beamprobe_session:remove_flags(Res, all)
                               end);
                    #{} -> ok
                end,
            remove_patterns([MFA || {_, _, _} = MFA <- Claimed], Meta,
                            [K || {message, K} <- Claimed], St1),
            _ = case E of
                    #{res := Res2} ->
                        safely(fun() -> beamprobe_nif:stop(Res2) end);
                    #{} -> ok
                end,
            {noreply, St1};
        error ->
            {noreply, St}
    end;
handle_info(beamprobe_nif_reloaded, St) ->
    %% The NIF module was loaded again (beamprobe_nif:load/0): every
    %% session traces its processes again.
    _ = [Pid ! beamprobe_nif_reloaded || #{pid := Pid} <- maps:values(St)],
    {noreply, St};
handle_info(_, St) ->
    {noreply, St}.
