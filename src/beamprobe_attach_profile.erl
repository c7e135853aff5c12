%%% @doc The node side of `beamprobe profile NODE' (c_src/cli/cmd_profile.c):
%%% a profile run ({@link beamprobe:profile/2}) owned by the attach agent
%%% (src/beamprobe_attach.erl).
%%%
%%% The agent starts the run with {@link start/2}: a process linked to the
%%% agent calls `beamprobe:profile/2' (so the run's worker, which monitors
%%% its caller, restores every counter and flag when the agent goes, however
%%% it goes) and sends the agent its result, the table or the JSON text,
%%% already formatted here (pids are this node's).  {@link start/2} returns
%%% once the run counts (its worker waits for the time to pass), or with the
%%% run's error (a bad pattern, a function that does not exist, a profile
%%% already running, counters held by another tool).
%%%
%%% When the command line asks to stop early (^C), dies or loses the
%%% connection, the agent calls {@link finish/2} before it unloads anything:
%%% the run is ended now (`{beamprobe_profile, stop}' to its worker: the
%%% counters are read, then removed), its result goes to the command line
%%% when it is still there, and only then does the agent unload the modules
%%% (a worker purged while it restores would leave counters behind).
-module(beamprobe_attach_profile).

-export([start/2, finish/2]).

-define(WORKER, beamprobe_profile).    % beamprobe_profile's registered name
-define(START_POLLS, 3000).            % 10 ms each: 30 s to expand patterns
-define(STOP_POLLS, 100).              % 50 ms each

-type outcome() :: {ok, binary()} | {error, binary()}.

%% @doc Starts a profile run for the agent (the calling process).
%% Patterns: the pattern texts of the command line; Opts: `seconds',
%% `timing', `per_process', `sort' (binary), `top' (0: all), `json'.
%% Returns the run's process (its result comes to the agent as
%% `{beamprobe_attach_profile, Pid, Outcome}') and a text for the command
%% line, or `{error, Text}' when the run could not start.
-spec start([binary() | string()], map()) ->
          {ok, pid(), binary()} | {error, binary()}.
start(Patterns, Opts) when is_list(Patterns), is_map(Opts) ->
    case profile_opts(Opts) of
        {error, _} = E -> E;
        {ok, POpts} ->
            Agent = self(),
            Json = maps:get(json, Opts, false) =:= true,
            Pats = [unicode:characters_to_list(P) || P <- Patterns],
            %% Linked: the agent's death ends the run (the worker
            %% restores); the run's death does not end the agent.
            _ = process_flag(trap_exit, true),
            P = spawn_link(fun() -> Agent ! {?MODULE, self(),
                                             run(Pats, POpts, Json)}
                           end),
            wait_started(P, maps:get(time, POpts), ?START_POLLS)
    end;
start(_, _) ->
    {error, <<"bad profile request">>}.

%% @doc Ends the run (undefined: none; `{done, Outcome}': ended already),
%% waits until it has restored everything, and sends the outcome to Cli
%% (`{beamprobe_attach_profile, ok | error, Text}') unless Cli is false.
-spec finish(undefined | pid() | {done, outcome()}, false | pid()) -> ok.
finish(undefined, _Cli) -> ok;
finish(Run, Cli) ->
    Outcome = case Run of
                  {done, O} -> O;
                  P when is_pid(P) -> stop(P)
              end,
    _ = is_pid(Cli) andalso
        (Cli ! {beamprobe_attach_profile, element(1, Outcome),
                element(2, Outcome)}),
    ok.

%%% ------------------------------------------------------------------------

profile_opts(Opts) ->
    try
        Secs = maps:get(seconds, Opts, 5),
        (is_integer(Secs) andalso Secs > 0 andalso Secs =< 3600)
            orelse throw({bad, "--seconds: 1 to 3600"}),
        Sort = case maps:get(sort, Opts, <<"own">>) of
                   <<"own">> -> own;
                   <<"calls">> -> calls;
                   <<"mean">> -> mean;
                   _ -> throw({bad, "--sort: calls, own or mean"})
               end,
        Top = case maps:get(top, Opts, 0) of
                  0 -> infinity;
                  N when is_integer(N), N > 0 -> N;
                  _ -> throw({bad, "--top: a number"})
              end,
        {ok, #{time => Secs * 1000, sort => Sort, top => Top,
               timing => maps:get(timing, Opts, true) =:= true,
               per_process => maps:get(per_process, Opts, false) =:= true,
               print => false}}
    catch throw:{bad, Text} -> {error, list_to_binary(Text)}
    end.

%% The run's process: the caller profile/2's worker monitors.
run(Pats, POpts, Json) ->
    try beamprobe:profile(Pats, POpts#{json => Json}) of
        {ok, J} when is_binary(J) -> {ok, J};
        {ok, Res} -> {ok, unicode:characters_to_binary(
                            beamprobe_profile:format(Res))};
        {error, R} -> {error, error_text(R)}
    catch C:R -> {error, text("~tp:~tP", [C, R, 10])}
    end.

error_text(R) ->
    Text = unicode:characters_to_binary(beamprobe:format_error(R)),
    %% The command line has no force: the Erlang API's advice ("add force
    %% => true") named an option `beamprobe profile' does not take.
    case binary:match(Text, <<"force => true">>) of
        nomatch -> Text;
        _ -> <<Text/binary, " (beamprobe profile has no such option: "
               "call beamprobe:profile/2 with force => true on the node, "
               "e.g. from erl -remsh, for that)">>
    end.

%% Until the run counts (its worker waits in beamprobe_profile:wait/3),
%% or ends (an error).
wait_started(P, Ms, N) ->
    receive
        {?MODULE, P, {error, Text}} -> {error, Text};
        {?MODULE, P, _} = Done ->
            self() ! Done,                     % for the agent's loop
            {ok, P, started_text(Ms)}
    after 10 ->
            Started = case worker(P) of
                          W when is_pid(W) ->
                              process_info(W, current_function) =:=
                                  {current_function,
                                   {beamprobe_profile, wait, 3}};
                          undefined -> false
                      end,
            case Started orelse N =:= 0 of
                true -> {ok, P, started_text(Ms)};
                false -> wait_started(P, Ms, N - 1)
            end
    end.

started_text(Ms) ->
    text("counters on for ~b s", [Ms div 1000]).

%% The worker of P's run: the registered profile worker that monitors P.
worker(P) ->
    case whereis(?WORKER) of
        W when is_pid(W) ->
            case process_info(W, monitors) of
                {monitors, Ms} ->
                    case lists:member({process, P}, Ms) of
                        true -> W;
                        false -> undefined
                    end;
                _ -> undefined
            end;
        _ -> undefined
    end.

%% Ends P's run now; its outcome once everything is restored.
stop(P) ->
    MRef = monitor(process, P),
    stop(P, MRef, undefined, ?STOP_POLLS).

stop(P, MRef, Told, N) ->
    Told1 = case {Told, worker(P)} of
                {undefined, W} when is_pid(W) ->
                    W ! {?WORKER, stop},
                    W;
                _ -> Told
            end,
    receive
        {?MODULE, P, Outcome} ->
            demonitor(MRef, [flush]),
            Outcome;
        {'DOWN', MRef, process, P, Why} ->
            {error, text("the profile process ended: ~tP", [Why, 10])}
    after 50 ->
            case N of
                0 -> abandon(P);
                _ -> stop(P, MRef, Told1, N - 1)
            end
    end.

%% The run did not answer: its caller goes, and its worker restores (it
%% monitors the caller); waits for that.
abandon(P) ->
    unlink(P),
    W = worker(P),
    WRef = is_pid(W) andalso monitor(process, W),
    exit(P, kill),
    _ = is_reference(WRef) andalso
        receive {'DOWN', WRef, process, _, _} -> ok
        after 5000 -> ok
        end,
    {error, <<"the profile did not end in time; it was abandoned "
              "(its counters removed)">>}.

text(Fmt, Args) ->
    unicode:characters_to_binary(io_lib:format(Fmt, Args)).
