%%% @doc The beamprobe application: starts {@link beamprobe_sup}.
-module(beamprobe_app).
-behaviour(application).
-export([start/2, stop/1]).

%% @doc Starts the session supervisor.
-spec start(application:start_type(), term()) -> {ok, pid()} | {error, term()}.
start(_Type, _Args) ->
    %% Before any session: its scratch process must be traced by none.
    _ = beamprobe_watch:running_bits(),
    beamprobe_sup:start_link().

%% @doc Nothing to clean up: sessions stop with their supervisor.
-spec stop(term()) -> ok.
stop(_State) ->
    ok.
