%%% @doc The `beamprobe_handler' behaviour: an Erlang module that receives
%%% a session's events, decoded as maps, in batches.
%%%
%%% ```
%%% {ok, S} = beamprobe:start(#{calls => [{lists, seq, 2}],
%%%                             output => {handler, my_handler, Arg}}).
%%% '''
%%%
%%% ```
%%% -module(my_handler).
%%% -behaviour(beamprobe_handler).
%%% -export([init/1, handle_events/2, terminate/2]).
%%% init(Arg) -> {ok, 0}.
%%% handle_events(Events, N) -> {ok, N + length(Events)}.
%%% terminate(_Reason, N) -> io:format("~p events~n", [N]).
%%% '''
%%%
%%% Each event is a map with `event' (`call', `return_from', `send', ...,
%%% or `dropped' with `count' when events were lost, and the count per
%%% cause: `slow_output' (batches dropped because the handler was too
%%% slow), `rate', `ring_full', `too_big', ... as in the summary's
%%% `dropped', except `io_error': the trace files' losses are events the
%%% handler got; and `session_wide': of `count', the losses at the source
%%% (all causes but `slow_output'), counted before an event's kind is
%%% known: the session's, of any kind and process, not only of those this
%%% handler's `events' and `procs' select), `ts' (monotonic ns), `pid'
%%% (the process), and the
%%% event's fields from docs/format.md (`mfa', `args', `result',
%%% `message', ... as binaries holding Erlang-syntax text; fields of kind
%%% `pid' (`to', `other') as a pid or port, or `undefined' when the other
%%% party is not local: a registered name, an alias, a pid on another
%%% node; include/beamprobe_events.hrl lists every field's kind).
%%%
%%% Flow control: the session's collector thread sends a batch only while
%%% it holds a credit (default 4); the handler process gives one back after
%%% each `handle_events/2'.  A handler that falls behind loses whole batches
%%% (counted, and reported to it as a `dropped' event), never memory: its
%%% mailbox holds at most `credits' batches of at most `batch' events and
%%% about 1 MiB each (a batch that reaches that size ends there, and the
%%% events after it wait for the next credit, in 16 such batches at most;
%%% docs/design.md).
%%%
%%% `handle_events/2' returning `{stop, State}' ends the session (stop
%%% reason `handler_stop'; `terminate/2' is called with `stop').  A
%%% handler that crashes is logged (logger:error) and its later events are
%%% counted as dropped; the session goes on.
%%%
%%% The handler runs in its own process, started by the session before
%%% tracing starts and never traced by it.  When the session ends, the
%%% handler handles the batches already in its mailbox, runs `terminate/2'
%%% and exits; a handler that has not ended within `handler_stop_timeout'
%%% milliseconds (application env, default 5000), e.g. one blocked in
%%% `handle_events/2', is killed, so that it cannot outlive its session
%%% and pin its mailbox.  A session that ends without its stop (killed)
%%% stops its handlers the same way (`terminate/2' gets
%%% `{session_down, Why}'), one that traps exits too.
-module(beamprobe_handler).

-export([start_link/2, attach/3, stop/2, stop/3]).
-export([init_it/3]).

-export_type([event/0]).

-type event() :: #{event := atom(), ts => non_neg_integer(),
                   pid => pid() | port() | undefined, atom() => term()}.

-callback init(Arg :: term()) -> {ok, State :: term()} | {error, term()}.
-callback handle_events([event()], State :: term()) ->
    {ok, NewState :: term()} | {stop, NewState :: term()}.
-callback terminate(Reason :: term(), State :: term()) -> term().

%% @doc Starts a handler process running `Mod', linked to the caller; it
%% has run `Mod:init(Arg)' when this returns.
-spec start_link(module(), term()) -> {ok, pid()} | {error, term()}.
start_link(Mod, Arg) ->
    %% One of beamprobe's own (beamprobe_own:spawn_link/1): a session
    %% recording process events of new processes records nothing of it.
    Parent = self(),
    Pid = beamprobe_own:spawn_link(fun() -> init_it(Parent, Mod, Arg) end),
    Ref = monitor(process, Pid),
    receive
        {?MODULE, ack, Pid, Ret} ->
            demonitor(Ref, [flush]),
            Ret;
        {'DOWN', Ref, process, Pid, Why} -> {error, Why}
    end.

%% @doc Tells the handler which session and sink number it serves (so it
%% can give credits back).
-spec attach(pid(), beamprobe_nif:session(), non_neg_integer()) -> ok.
attach(Handler, Res, Index) ->
    Handler ! {beamprobe_attach, Res, Index},
    ok.

%% @doc Asks the handler to handle what it has received, run
%% `Mod:terminate(Reason, State)' and end; kills it if it has not ended
%% within the application env `handler_stop_timeout' (ms, default 5000).
%% Returns at once.
-spec stop(pid(), term()) -> ok.
stop(Handler, Reason) ->
    Timeout = case application:get_env(beamprobe, handler_stop_timeout) of
                  {ok, T} when is_integer(T), T >= 0 -> T;
                  _ -> 5000
              end,
    stop(Handler, Reason, Timeout).

%% @doc As {@link stop/2}, with the time limit in milliseconds.
-spec stop(pid(), term(), non_neg_integer()) -> ok.
stop(Handler, Reason, Timeout) ->
    Handler ! {beamprobe_detach, Reason},
    _ = beamprobe_own:spawn(fun() -> reap(Handler, Timeout) end),
    ok.

%% Waits for the handler to end; kills it after Timeout ms.
reap(Handler, Timeout) ->
    Ref = monitor(process, Handler),
    receive
        {'DOWN', Ref, process, _, _} -> ok
    after Timeout ->
            exit(Handler, kill),
            receive {'DOWN', Ref, process, _, _} -> ok end
    end.

%% The handler's guard: a session that ends without telling its handler
%% to stop (killed, or crashed before its stop) leaves a handler that traps
%% exits (the link does not take it down) alive for good, its mailbox and
%% the session's NIF resource (the rings) with it.  The guard then stops
%% the handler as the session would have (stop/2: it handles what it has,
%% runs terminate/2 with `{session_down, Why}', or is killed after
%% `handler_stop_timeout').  It ends with the handler.
guard(Session, Handler) ->
    ok = beamprobe_own:sensitive(),
    ok = beamprobe_janitor:untrace_self(), % a new process: as init_it/3
    SRef = monitor(process, Session),
    HRef = monitor(process, Handler),
    receive
        {'DOWN', HRef, process, _, _} -> ok;
        {'DOWN', SRef, process, _, Why} when Why =:= normal;
                                            Why =:= shutdown ->
            %% A session ends so only after its stop, which told the
            %% handler (beamprobe_session:finish/2).
            demonitor(HRef, [flush]);
        {'DOWN', SRef, process, _, Why} ->
            demonitor(HRef, [flush]),
            stop(Handler, {session_down, Why})
    end.

init_ack(Parent, Ret) ->
    Parent ! {?MODULE, ack, self(), Ret},
    ok.

%% @private
-spec init_it(pid(), module(), term()) -> no_return().
init_it(Parent, Mod, Arg) ->
    %% beamprobe never traces itself: a handler spawned while the hub
    %% traces new processes drops the flags it got (beamprobe_janitor).
    ok = beamprobe_own:sensitive(), % no trace events of it (see beamprobe_shell.erl)
    ok = beamprobe_janitor:untrace_self(),
    process_flag(message_queue_data, off_heap),
    %% Spawned untraced (after untrace_self/0), before Mod:init/1 can
    %% trap exits.
    Self = self(),
    _ = beamprobe_own:spawn(fun() -> guard(Parent, Self) end),
    try Mod:init(Arg) of
        {ok, St} ->
            init_ack(Parent, {ok, self()}),
            wait_attach(Mod, St);
        {error, R} ->
            init_ack(Parent, {error, {handler_init, Mod, R}}),
            exit(normal);
        Other ->
            init_ack(Parent, {error, {handler_init, Mod, Other}}),
            exit(normal)
    catch
        C:R ->
            init_ack(Parent, {error, {handler_init, Mod, {C, R}}}),
            exit(normal)
    end.

wait_attach(Mod, St) ->
    receive
        {beamprobe_attach, Res, Index} -> loop(Mod, St, Res, Index);
        {beamprobe_detach, Reason} -> done(Mod, Reason, St)
    end.

loop(Mod, St, Res, Index) ->
    receive
        {beamprobe_events, Index, Events} ->
            St1 = handle(Mod, Events, St, Res, Index),
            loop(Mod, St1, Res, Index);
        {beamprobe_detach, Reason} ->
            St1 = drain(Mod, St, Res, Index),
            done(Mod, Reason, St1)
    end.

handle(Mod, Events, St, Res, Index) ->
    Result = Mod:handle_events(Events, St),
    ok = beamprobe_nif:ack(Res, Index),
    case Result of
        {ok, St1} -> St1;
        {stop, St1} -> done(Mod, stop, St1)
    end.

%% Batches already in the mailbox when the session ends.
drain(Mod, St, Res, Index) ->
    receive
        {beamprobe_events, Index, Events} ->
            drain(Mod, handle(Mod, Events, St, Res, Index), Res, Index)
    after 0 -> St
    end.

-spec done(module(), term(), term()) -> no_return().
done(Mod, Reason, St) ->
    _ = Mod:terminate(Reason, St),
    exit(normal).
