%%% @doc The registry of running sessions: what each one traces (to refuse
%%% a colliding session with `{conflict, Session, What}'), and the cleaner
%%% after a session process that dies without stopping (for instance killed
%%% with `exit(S, kill)'): it removes its call and message trace patterns
%%% and any trace flag still pointing at its tracer, and finalises its
%%% trace (beamprobe_session:remove_tracing/6, as a stopping session does).
%%%
%%% Sessions register what they installed after installing; a session that
%%% ends normally has already undone it and the janitor only forgets it.
-module(beamprobe_janitor).
-behaviour(gen_server).

-export([start_link/0, register_session/5, unregister_session/1,
         conflict/2, patterns_in_use/1]).

-type mfa_pat() :: {atom(), atom(), arity() | '_'}.
-type claim() :: {none | all | new | existing | [pid()], [mfa_pat()]}.
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

%% @doc Starts the janitor, registered locally.
-spec start_link() -> {ok, pid()}.
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Called by a session process once it has installed its tracing.
-spec register_session(pid(), beamprobe_nif:session(), [mfa_pat()],
                       boolean(), claim()) -> ok.
register_session(Session, Res, Patterns, Meta, Claim) ->
    gen_server:call(?MODULE, {register, Session, Res, Patterns, Meta, Claim}).

%% @doc Called by a session process once it has removed its tracing.
-spec unregister_session(pid()) -> ok.
unregister_session(Session) ->
    gen_server:call(?MODULE, {unregister, Session}).

%% @doc The first running session (other than `Self') whose processes or
%% functions overlap `Claim', with what overlaps; or `none'.
-spec conflict(pid(), claim()) -> none | {pid(), term()}.
conflict(Self, Claim) ->
    gen_server:call(?MODULE, {conflict, Self, Claim}).

%% @doc Trace patterns set by running sessions other than `Self'.
-spec patterns_in_use(pid()) -> [mfa_pat()].
patterns_in_use(Self) ->
    gen_server:call(?MODULE, {in_use, Self}).

%% @private
-spec init([]) -> {ok, map()}.
init([]) ->
    {ok, #{}}.

%% @private
-spec handle_call(term(), gen_server:from(), map()) -> {reply, term(), map()}.
handle_call({register, Session, Res, Patterns, Meta, Claim}, _From, St) ->
    Ref = monitor(process, Session),
    {reply, ok, St#{Ref => #{pid => Session, res => Res, patterns => Patterns,
                             meta => Meta, claim => Claim}}};
handle_call({unregister, Session}, _From, St) ->
    St1 = maps:filter(fun(Ref, #{pid := P}) when P =:= Session ->
                              demonitor(Ref, [flush]), false;
                         (_, _) -> true
                      end, St),
    {reply, ok, St1};
handle_call({conflict, Self, {Procs, MFAs}}, _From, St) ->
    Found = [{Pid, What}
             || #{pid := Pid, claim := {P2, M2}, meta := Meta2} <- maps:values(St),
                Pid =/= Self,
                What <- [procs_overlap(Procs, P2)] ++
                        [{calls, A} || A <- MFAs, B <- M2,
                                       mfa_overlap(A, B),
                                       Meta2 orelse A =/= B],
                What =/= false],
    {reply, case Found of [] -> none; [F | _] -> F end, St};
handle_call({in_use, Self}, _From, St) ->
    {reply, lists:append([Ps || #{pid := P, patterns := Ps} <- maps:values(St),
                                P =/= Self]), St};
handle_call(_, _From, St) ->
    {reply, ok, St}.

procs_overlap(none, _) -> false;
procs_overlap(_, none) -> false;
procs_overlap(A, B) when is_list(A), is_list(B) ->
    case [P || P <- A, lists:member(P, B)] of
        [] -> false;
        Common -> {procs, Common}
    end;
procs_overlap(A, B) when is_atom(A) -> {procs, A, B};
procs_overlap(A, B) -> {procs, A, B}.

%% Two patterns overlap when they can name the same function (or are the
%% same message pattern kind).
mfa_overlap({M1, F1, A1}, {M2, F2, A2}) ->
    same(M1, M2) andalso same(F1, F2) andalso same(A1, A2);
mfa_overlap(A, B) -> A =:= B.

same('_', _) -> true;
same(_, '_') -> true;
same(X, Y) -> X =:= Y.

%% @private
-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_, St) ->
    {noreply, St}.

%% @private
-spec handle_info(term(), map()) -> {noreply, map()}.
handle_info({'DOWN', Ref, process, _, normal}, St) ->
    {noreply, maps:remove(Ref, St)};
handle_info({'DOWN', Ref, process, _, _Abnormal}, St) ->
    case maps:take(Ref, St) of
        {#{res := Res, patterns := Patterns, meta := Meta,
           claim := Claim}, St1} ->
            clean(Res, Patterns, Meta, Claim, St1),
            {noreply, St1};
        error ->
            {noreply, St}
    end;
handle_info(_, St) ->
    {noreply, St}.

clean(Res, Patterns, Meta, {_Procs, Claimed}, Others) ->
    InUse = lists:append([Ps || #{patterns := Ps} <- maps:values(Others)]),
    MsgPats = [K || {message, K} <- Claimed],
    ok = beamprobe_session:remove_tracing(Res, all, Patterns, Meta, MsgPats,
                                          InUse),
    _ = beamprobe_nif:stop(Res),
    ok.
