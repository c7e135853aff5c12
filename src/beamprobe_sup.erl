%%% @doc Supervisor of the session processes ({@link beamprobe_session}),
%%% one per running session, never restarted: a session that dies has
%%% already removed its tracing (or its collector finalises the trace).
-module(beamprobe_sup).
-behaviour(supervisor).
-export([start_link/0, start_session/2, sessions/0, init/1]).

%% @doc Starts the supervisor, registered as `beamprobe_sup'.
-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() ->
    supervisor:start_link({local, ?MODULE}, ?MODULE, []).

%% @doc Starts a session process owned by `Owner'.
-spec start_session(pid(), map()) -> {ok, pid()} | {error, term()}.
start_session(Owner, Config) ->
    supervisor:start_child(?MODULE, [Owner, Config]).

%% @doc The running session processes.
-spec sessions() -> [pid()].
sessions() ->
    [P || {_, P, _, _} <- supervisor:which_children(?MODULE), is_pid(P)].

%% @private
-spec init([]) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init([]) ->
    Flags = #{strategy => simple_one_for_one, intensity => 10, period => 1},
    Child = #{id => beamprobe_session,
              start => {beamprobe_session, start_link, []},
              restart => temporary, shutdown => 5000, type => worker,
              modules => [beamprobe_session]},
    {ok, {Flags, [Child]}}.
