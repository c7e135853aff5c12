%%% @doc What a session adds from the VM itself: system monitor reports
%%% (`monitor => #{...}', {@link beamprobe_monitor}) and counter samples
%%% (`sample => #{...}', {@link beamprobe_sampler}); and the check that an
%%% `output => lttng' sink can run ({@link beamprobe_lttng}).  The session's one
%%% interface to both: start/2 when it starts, stop/1 when it stops.
-module(beamprobe_vm).

-export([check/1, start/2, stop/1, pids/1]).

-type handle() :: none | #{monitor := boolean(),
                           sampler := pid() | undefined}.
-export_type([handle/0]).

%% @doc Before anything is installed: can the session's `output => lttng'
%% sink run here (the provider built, a session daemon running)?
-spec check(map()) -> ok | {error, {lttng_unavailable, string()}}.
check(C) ->
    case [L || #{type := lttng} = L <- maps:get(sinks, C, [])] of
        [] -> ok;
        _ -> beamprobe_lttng:check()
    end.

%% @doc Joins the shared system monitor and starts the sampler, as the
%% session's configuration asks (neither: `{ok, none}').  On an error,
%% nothing is left joined or started.
-spec start(term(), map()) -> {ok, handle()} | {error, term()}.
start(Res, C) ->
    Mon = case C of
              #{monitor := T} ->
                  case beamprobe_monitor:asks_nothing(T) of
                      %% Only `false' port flags: nothing to monitor, and
                      %% the node's monitor (another tool's) left alone.
                      true -> none;
                      false ->
                          beamprobe_monitor:join(Res, T,
                                                 maps:get(force, C, false))
                  end;
              _ -> none
          end,
    case Mon of
        {error, _} = E -> E;
        _ ->
            Sampler = case C of
                          #{sample := S} ->
                              {ok, P} = beamprobe_sampler:start_link(Res, S),
                              P;
                          _ -> undefined
                      end,
            case {Mon, Sampler} of
                {none, undefined} -> {ok, none};
                _ -> {ok, #{monitor => Mon =:= ok, sampler => Sampler}}
            end
    end.

%% @doc The processes it started (the session does not trace them).
-spec pids(handle()) -> [pid()].
pids(#{sampler := S}) when is_pid(S) -> [S];
pids(_) -> [].

%% @doc Leaves the system monitor (the last session out restores the
%% monitor set before) and stops the sampler.  Idempotent.
-spec stop(handle()) -> ok.
stop(none) -> ok;
stop(#{monitor := M, sampler := S}) ->
    ok = beamprobe_sampler:stop(S),
    _ = M andalso beamprobe_monitor:leave(self()),
    ok.
