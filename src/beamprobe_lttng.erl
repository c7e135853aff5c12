%%% @doc The LTTng-UST sink (`output => lttng'): whether it can run here.
%%%
%%% The sink writes a session's events as tracepoints of the provider
%%% `beamprobe' from a shared object of its own, priv/beamprobe_lttng.so,
%%% built only where liblttng-ust-dev is installed (c_src/Makefile target
%%% `lttng'), loaded only for this sink and never unloaded.  A session that
%%% asks for it where it cannot run is refused with
%%% `{error, {lttng_unavailable, Why}}' and leaves nothing behind.
-module(beamprobe_lttng).

-export([check/0, provider_path/0, nif_config/1]).

%% @doc `ok' if the provider is built and an LTTng session daemon runs for
%% this user (or root's), else `{error, {lttng_unavailable, Why}}'.
-spec check() -> ok | {error, {lttng_unavailable, string()}}.
check() ->
    Lib = provider_path(),
    case filelib:is_regular(Lib) of
        false ->
            unavailable("~ts is missing: not built (liblttng-ust-dev was "
                        "missing at build time: apt-get install "
                        "liblttng-ust-dev lttng-tools, then make), or "
                        "removed since", [Lib]);
        true ->
            case [S || S <- sessiond_sockets(), listening(S)] of
                [] -> unavailable("no LTTng session daemon is running "
                                  "(start one: lttng-sessiond --daemonize)",
                                  []);
                _ -> ok
            end
    end.

%% @doc What the NIF's start/1 needs for the sinks `Sinks': for an lttng
%% sink, the provider's path (the NIF loads it) and the event kinds it
%% fires; nothing otherwise.
-spec nif_config([map()]) -> map().
nif_config(Sinks) ->
    case [K || #{type := lttng, kinds := K} <- Sinks] of
        [] -> #{};
        [K | _] -> #{lttng => unicode:characters_to_binary(provider_path()),
                     lttng_kinds => K}
    end.

%% @doc Where the provider object is expected.
-spec provider_path() -> file:filename().
provider_path() ->
    Priv = case code:priv_dir(beamprobe) of
               {error, _} ->
                   filename:join(filename:dirname(
                                   filename:dirname(code:which(?MODULE))),
                                 "priv");
               D -> D
           end,
    filename:join(Priv, "beamprobe_lttng.so").

%% The application sockets of a per-user and of the root session daemon
%% (lttng-sessiond(8): $LTTNG_HOME/.lttng, default $HOME; /var/run/lttng).
sessiond_sockets() ->
    Home = case os:getenv("LTTNG_HOME") of
               false -> os:getenv("HOME", "/nonexistent");
               H -> H
           end,
    [filename:join([Home, ".lttng", "lttng-ust-sock-8"]),
     "/var/run/lttng/lttng-ust-sock-8", "/run/lttng/lttng-ust-sock-8"].

%% A socket file that accepts a connection (a daemon killed with SIGKILL
%% leaves its socket file behind).
listening(F) ->
    case file:read_link_info(F) of
        {ok, _} ->
            case gen_tcp:connect({local, F}, 0, [local, binary,
                                                  {active, false}], 1000) of
                {ok, S} -> _ = gen_tcp:close(S), true;
                {error, _} -> false
            end;
        _ -> false
    end.

unavailable(Fmt, Args) ->
    {error, {lttng_unavailable, lists:flatten(io_lib:format(Fmt, Args))}}.
