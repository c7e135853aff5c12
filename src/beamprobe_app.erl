%%% @doc The beamprobe application: starts {@link beamprobe_sup}.
-module(beamprobe_app).
-behaviour(application).
-export([start/2, stop/1]).

%% @doc Starts the session supervisor.
-spec start(application:start_type(), term()) -> {ok, pid()} | {error, term()}.
start(_Type, _Args) ->
    %% Before any session: its scratch process must be traced by none.
    _ = beamprobe_watch:running_bits(),
    %% Every module of beamprobe loaded now: one loaded on first use
    %% while a session runs (beamprobe_cluster by the first info/1) is
    %% loaded by the code server, whose work -- lists:keyfind/3,
    %% lists:reverse/1,2, its messages -- a trace of every process would
    %% record as if it were the user's.
    _ = case application:get_key(beamprobe, modules) of
            {ok, Mods} -> code:ensure_modules_loaded(Mods);
            undefined -> ok
        end,
    beamprobe_sup:start_link().

%% @doc Nothing to clean up: sessions stop with their supervisor.
-spec stop(term()) -> ok.
stop(_State) ->
    ok.
