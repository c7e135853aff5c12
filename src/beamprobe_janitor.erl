%%% @doc Cleans up after a session process that dies without stopping (for
%%% instance killed with `exit(S, kill)'): removes its trace patterns and
%%% any trace flag still pointing at its tracer, and finalises its trace.
%%%
%%% Sessions register what they installed after installing; a session that
%%% ends normally has already undone it and the janitor only forgets it.
-module(beamprobe_janitor).
-behaviour(gen_server).

-export([start_link/0, register_session/3]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

%% @doc Starts the janitor, registered locally.
-spec start_link() -> {ok, pid()}.
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Called by a session process once it has installed its tracing.
-spec register_session(pid(), beamprobe_nif:session(),
                       [{atom(), atom(), arity() | '_'}]) -> ok.
register_session(Session, Res, Patterns) ->
    gen_server:call(?MODULE, {register, Session, Res, Patterns}).

%% @private
-spec init([]) -> {ok, #{reference() => {beamprobe_nif:session(), list()}}}.
init([]) ->
    {ok, #{}}.

%% @private
-spec handle_call(term(), gen_server:from(), map()) -> {reply, ok, map()}.
handle_call({register, Session, Res, Patterns}, _From, St) ->
    Ref = monitor(process, Session),
    {reply, ok, St#{Ref => {Res, Patterns}}};
handle_call(_, _From, St) ->
    {reply, ok, St}.

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
        {{Res, Patterns}, St1} ->
            clean(Res, Patterns, St1),
            {noreply, St1};
        error ->
            {noreply, St}
    end;
handle_info(_, St) ->
    {noreply, St}.

clean(Res, Patterns, Others) ->
    Tracer = {tracer, {beamprobe_nif, Res}},
    case erlang:trace_info(new, tracer) of
        Tracer -> erlang:trace(new, false, [all]);
        _ -> ok
    end,
    [catch erlang:trace(P, false, [all])
     || P <- processes() ++ erlang:ports(),
        erlang:trace_info(P, tracer) =:= Tracer],
    InUse = lists:append([Ps || {_, Ps} <- maps:values(Others)]),
    [erlang:trace_pattern(MFA, false, [local])
     || MFA <- Patterns, not lists:member(MFA, InUse)],
    _ = beamprobe_nif:stop(Res),
    ok.
