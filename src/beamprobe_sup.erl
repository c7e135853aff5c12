%%% @doc Top supervisor of the beamprobe application:
%%% ```
%%% beamprobe_sup (one_for_one)
%%%  ├─ beamprobe_janitor        cleans up after a session process that dies
%%%  ├─ beamprobe_monitor        the one owner of erlang:system_monitor/2
%%%  ├─ beamprobe_gate           keeps beamprobe:annotate/1,2 off the NIF
%%%  │                           while nothing wants annotations
%%%  └─ beamprobe_session_sup    (simple_one_for_one) one beamprobe_session
%%%                              per running session, never restarted
%%% '''
-module(beamprobe_sup).
-behaviour(supervisor).
-export([start_link/0, start_session/2, sessions/0, init/1]).

%% @doc Starts the supervisor, registered as `beamprobe_sup'.
-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() ->
    supervisor:start_link({local, ?MODULE}, ?MODULE, top).

%% @doc Starts a session process owned by `Owner'.
-spec start_session(pid(), map()) -> {ok, pid()} | {error, term()}.
start_session(Owner, Config) ->
    supervisor:start_child(beamprobe_session_sup, [Owner, Config]).

%% @doc The running session processes.
-spec sessions() -> [pid()].
sessions() ->
    try supervisor:which_children(beamprobe_session_sup) of
        %% A session that has just exited may still be a child until
        %% the supervisor has handled its exit signal.
        Children -> [P || {_, P, _, _} <- Children, is_pid(P),
                          is_process_alive(P)]
    catch exit:_ -> []   % the application is stopping or stopped
    end.

%% @private
-spec init(top | sessions) ->
          {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init(top) ->
    %% beamprobe's own (beamprobe_own): starting a session runs
    %% proc_lib's option handling (lists:keyfind/3) here, while other
    %% sessions may be tracing.
    _ = process_flag(sensitive, true),
    %% What beamprobe_monitor must find again if it is restarted (its
    %% sessions, the monitor to give back): held here, by the process that
    %% outlives it, not in persistent_term (whose every update scans all
    %% processes of the node).
    _ = ets:new(beamprobe_monitor_state, [named_table, public, set]),
    %% One shell's traces start one at a time (beamprobe_shell).
    _ = ets:new(beamprobe_shell_locks, [named_table, public, set]),
    %% The cluster and follow sessions' handles, and beamprobe's own
    %% sensitive processes (beamprobe_own).
    _ = ets:new(beamprobe_handles, [named_table, public, set]),
    ok = beamprobe_own:sensitive(),
    Flags = #{strategy => one_for_one, intensity => 10, period => 10},
    Janitor = #{id => beamprobe_janitor,
                start => {beamprobe_janitor, start_link, []},
                restart => permanent, shutdown => 5000, type => worker,
                modules => [beamprobe_janitor]},
    %% The one owner of erlang:system_monitor/2 for every session.
    Monitor = #{id => beamprobe_monitor,
                start => {beamprobe_monitor, start_link, []},
                restart => permanent, shutdown => 5000, type => worker,
                modules => [beamprobe_monitor]},
    %% Keeps beamprobe:annotate/1,2 off the NIF while nothing wants it.
    Gate = #{id => beamprobe_gate,
             start => {beamprobe_gate, start_link, []},
             restart => permanent, shutdown => 5000, type => worker,
             modules => [beamprobe_gate]},
    Sessions = #{id => beamprobe_session_sup,
                 start => {supervisor, start_link,
                           [{local, beamprobe_session_sup}, ?MODULE, sessions]},
                 restart => permanent, shutdown => infinity,
                 type => supervisor, modules => [?MODULE]},
    {ok, {Flags, [Janitor, Monitor, Gate, Sessions]}};
init(sessions) ->
    ok = beamprobe_own:sensitive(),
    Flags = #{strategy => simple_one_for_one, intensity => 10, period => 1},
    Child = #{id => beamprobe_session,
              start => {beamprobe_session, start_link, []},
              restart => temporary, shutdown => 5000, type => worker,
              modules => [beamprobe_session]},
    {ok, {Flags, [Child]}}.
