%%% @doc One tracing session: installs the trace flags and patterns with the
%%% C tracer as their tracer, enforces the time limit, watches its owner,
%%% and on stop removes everything it installed and finalises the trace.
%%%
%%% ```
%%% owner ──monitor──> session process ──NIF calls──> session resource
%%%                         │                        (rings + collector)
%%%                         └─ erlang:trace/3, erlang:trace_pattern/3
%%% '''
%%%
%%% Internal: use {@link beamprobe}.  A session is started by
%%% {@link beamprobe_sup} and then asked to `install'; if installing fails,
%%% everything done so far is undone and the process ends.
-module(beamprobe_session).

-include("beamprobe_events.hrl").
-behaviour(gen_server).

-export([start_link/2, settle_handlers/3]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2,
         handle_continue/2]).

-define(ANNOTATE_MAX, 100000).
-define(ANNOTATE_CHUNK, 500).

-record(st, {owner :: pid(),
             monitor :: reference(),
             config :: beamprobe_config:config(),
             res :: undefined | beamprobe_nif:session(),
             created_dir = false :: boolean(),
             patterns = [] :: [{module(), atom(), arity() | '_'}],
             handlers = [] :: [pid()],
             matched = 0 :: non_neg_integer(),
             msg_patterns = [] :: [send | 'receive'],
             traced = none :: none | all | new | existing | [pid()],
             started :: integer(),
             timer :: undefined | reference(),
             summary :: undefined | map(),
             %% The NIF session, kept after the stop while handlers live:
             %% their acks still move batches, and their final account is
             %% read from it once they have ended (settle_handlers/3).
             hres :: undefined | beamprobe_nif:session(),
             hub :: undefined | map(),
             nif_reloads = 0 :: non_neg_integer(),
             %% Coexistence with other tools: what was left to them
             %% (beamprobe_skip), and the watchdog (beamprobe_watch).
             skipped :: undefined | beamprobe_skip:skipped(),
             %% Of the skipped processes, those a profile run held
             %% (beamprobe_profile): taken when it ends (pick_up/1).
             held = [] :: [pid()],
             watch :: undefined | pid(),
             %% The watchdog's process, started before any trace flag
             %% (beamprobe_own:prestart/0) until it becomes the watchdog.
             spare :: undefined | pid(),
             %% The VM's monitor reports and counter samples
             %% (beamprobe_monitor, beamprobe_sampler).
             vm = none :: beamprobe_vm:handle()}).

%% @doc Starts a session process for `Owner'; it traces nothing until asked
%% to `install'.
-spec start_link(pid(), beamprobe_config:config()) -> {ok, pid()}.
start_link(Owner, Config) ->
    %% Sensitive from its start (beamprobe_own): another session may be
    %% tracing meanwhile.
    beamprobe_own:start_link(?MODULE, {Owner, Config}).

%% @private
-spec init({pid(), beamprobe_config:config()}) -> {ok, #st{}}.
init({Owner, Config}) ->
    process_flag(trap_exit, true),
    ok = beamprobe_own:sensitive(), % no trace events of it (see beamprobe_shell.erl)
    %% beamprobe never traces itself: a session process spawned while
    %% another session traces new processes drops the hub's flags.
    ok = beamprobe_janitor:untrace_self(),
    {ok, #st{owner = Owner, monitor = monitor(process, Owner),
             config = Config,
             started = erlang:monotonic_time(millisecond)}}.

%% @private
-spec handle_call(term(), gen_server:from(), #st{}) ->
          {reply, term(), #st{}} | {stop, normal, term(), #st{}}.
handle_call(install, _From, St) ->
    %% The annotation gate opened first: its code loading is not traced.
    _ = beamprobe_gate:open(),
    case install(St) of
        {ok, St1} ->
            %% Annotations reach the NIF from now on (the gate,
            %% docs/usdt.md); asked here, not in the caller, whose trace
            %% the session may be recording.
            _ = beamprobe_gate:check(),
            {reply, {ok, self(), St1#st.matched}, St1};
        {error, Reason, St1} ->
            {stop, normal, {error, Reason}, abort(St1)}
    end;
handle_call(stop, _From, St) ->
    St1 = finish(St, requested),
    {stop, normal, {ok, St1#st.summary}, St1};
%% stop/1 of beamprobe.erl: also the handlers, for it to wait until they
%% have handled every batch (they are told to end in finish/2).
%% How long to wait for them is read here too: in the caller, its
%% application env lookups were recorded by any other session tracing the
%% caller's calls (a shell trace of ets:lookup/2 printed them at clear/0).
handle_call(stop_handlers, _From, St) ->
    St1 = finish(St, requested),
    {stop, normal,
     {ok, St1#st.summary, St1#st.handlers, handler_wait(), St1#st.hres},
     St1#st{hres = undefined}};
handle_call(info, _From, #st{summary = undefined, res = Res} = St) ->
    case nif(fun() -> beamprobe_nif:info(Res) end) of
        {nif_error, E} -> {reply, {error, {nif_error, E}}, St};
        Stats ->
            %% A handler that has ended will not handle what it was sent
            %% (the collector finds out at its next send, or once a
            %% second while it holds no credit).
            {reply, {ok, info_map(St, settle_view(Stats, St#st.handlers))},
             St}
    end;
handle_call(info, _From, #st{summary = Sum} = St) ->
    {reply, {ok, Sum}, St};
handle_call(dump, _From, #st{summary = undefined, res = Res} = St) ->
    _ = annotate_live(St),
    case nif(fun() -> beamprobe_nif:dump(Res) end) of
        {ok, N} -> {reply, dumped(N), St};
        {nif_error, E} -> {reply, {error, {nif_error, E}}, St};
        R -> {reply, R, St}
    end;
handle_call(dump, _From, St) ->
    {reply, {error, stopped}, St};
handle_call(_Other, _From, St) ->
    {reply, {error, unknown_request}, St}.

%% @private
-spec handle_cast(term(), #st{}) -> {noreply, #st{}}.
handle_cast(_Msg, St) ->
    {noreply, St}.

%% @private
-spec handle_info(term(), #st{}) ->
          {noreply, #st{}} | {noreply, #st{}, {continue, collect}}
          | {stop, normal, #st{}}.
handle_info({'DOWN', Ref, process, _, _}, #st{monitor = Ref} = St) ->
    {stop, normal, finish(St, owner_down)};
handle_info({limit, seconds}, St) ->
    ended(finish(St, seconds));
handle_info({beamprobe_stop, Why}, St) ->
    ended(finish(St, Why));
handle_info({'EXIT', H, Why}, #st{summary = undefined, handlers = Hs,
                                  config = #{sinks := Sinks}} = St) ->
    case lists:member(H, Hs) of
        %% handle_events/2 returned {stop, State}: the session ends.
        true when Why =:= normal -> ended(finish(St, handler_stop));
        true ->
            %% A crash: said in the log (Elixir's Logger does not show
            %% proc_lib's crash reports by default); the session goes on,
            %% the handler's events counted as dropped.
            Mods = [M || #{type := handler, module := M} <- Sinks],
            logger:error("beamprobe: a handler of session ~p (~tp) "
                         "crashed: ~tP; the session goes on, the events "
                         "for it are counted as dropped (handlers in "
                         "info/1 and the summary)", [self(), Mods, Why, 30]),
            {noreply, St};
        false -> {noreply, St}
    end;
handle_info({'EXIT', H, _}, #st{hres = Res, handlers = Hs,
                              summary = Sum} = St)
  when Res =/= undefined, Sum =/= undefined ->
    %% A handler of a session that ended by itself has ended: info/1 and
    %% stop/1 give its final account.
    case lists:member(H, Hs) of
        true ->
            St1 = St#st{summary = settle_handlers(Sum, Hs, Res)},
            case lists:any(fun erlang:is_process_alive/1, Hs) of
                true -> {noreply, St1};
                false -> {noreply, St1#st{hres = undefined}}
            end;
        false -> {noreply, St}
    end;
handle_info({'EXIT', _, _}, St) ->
    {noreply, St};
handle_info({beamprobe_rejoin, Janitor}, #st{summary = undefined,
                                            hub = Entry} = St)
  when Entry =/= undefined ->
    %% The janitor was restarted: it takes this session over.
    gen_server:cast(Janitor, {rejoin, self(), Entry}),
    {noreply, St};
handle_info(beamprobe_nif_reloaded, #st{summary = undefined,
                                       res = Res} = St) when Res =/= undefined ->
    {noreply, retrace(St)};
handle_info(beamprobe_profile_ended, #st{summary = undefined,
                                        res = Res} = St) when Res =/= undefined ->
    %% (From beamprobe_janitor: a profile run ended.)
    {ok, St1} = pick_up(St),
    {noreply, St1};
handle_info({beamprobe_pattern_reset, F, Seen, Why}, #st{watch = W} = St)
  when is_pid(W) ->
    %% (From beamprobe_janitor: a pattern another tool removed set again,
    %% for the watchdog.)
    W ! {pattern_reset, F, Seen, Why},
    {noreply, St};
handle_info(_Other, St) ->
    {noreply, St}.

%% Waits for the collector to have written the window dump/1 asked for
%% (beamprobe_nif:dump/1): here, in this module's code, not in a dirty NIF
%% of beamprobe_nif, which a purge of that module's old code (after a
%% reload) would kill this process in.
dumped(N) ->
    receive {beamprobe_dumped, M} when M >= N -> ok end.

%% A session that ended by itself keeps its summary for stop/1, unless it
%% was started from the shell API (nobody will ask); not its NIF resource
%% (finish/2 dropped it): collected now, the resource's destructor unmaps
%% the rings, instead of when this idle process next collects (never,
%% while an owner that does not call stop/1 lives).
ended(#st{config = #{tag := beamprobe_shell}} = St) -> {stop, normal, St};
ended(St) -> {noreply, St, {continue, collect}}.

%% @private
-spec handle_continue(collect, #st{}) -> {noreply, #st{}}.
handle_continue(collect, St) ->
    _ = erlang:garbage_collect(),
    {noreply, St}.

%% @private
-spec terminate(term(), #st{}) -> ok.
terminate(_Reason, St) ->
    _ = finish(St, terminated),
    ok.

%% How long stop/1 waits for a handler: beamprobe_handler:stop/2 kills it
%% after handler_stop_timeout, so it is gone by then (plus a margin).
handler_wait() ->
    case application:get_env(beamprobe, handler_stop_timeout) of
        {ok, T} when is_integer(T), T >= 0 -> T + 1000;
        _ -> 6000
    end.

%%% ------------------------------------------------------------------------
%%% Installing
%%% ------------------------------------------------------------------------

install(#st{config = C} = St) ->
    Steps = [fun check_follow/1, fun check_tracers/1, fun check_vm/1,
             fun make_dir/1, fun prestart_watch/1,
             fun start_handlers/1, fun start_nif/1, fun start_vm/1,
             fun join/1, fun annotate_start/1, fun start_timer/1,
             fun start_watch/1, fun pick_up/1],
    run(Steps, St, C).

run([], St, _C) -> {ok, St};
run([F | Fs], St, C) ->
    try F(St) of
        {ok, St1} -> run(Fs, St1, C);
        {error, Reason, St1} -> {error, Reason, St1}
    catch
        Class:Reason:Stack ->
            %% Never leave anything half-installed: St holds what was done.
            {error, {install_failed, {Class, Reason, hd(Stack ++ [none])}}, St}
    end.

%% The processes a session sets flags on: none for a pure meta session.
procs(#{procs := Procs, meta := Meta, events := Ev}) ->
    case Meta andalso Ev =:= [] of
        true -> none;
        false -> Procs
    end.

%% A follow session (beamprobe_follow) has the node's `new' default, every
%% process's flags, the root's pattern and the seq_trace tracer to itself:
%% it refuses to start while a session runs, and a session refuses to
%% start while it runs.  (Checked here, once this session is a child of
%% the supervisor, which the follow session asks after claiming its name:
%% of two starts at the same moment, one is refused.)
check_follow(St) ->
    case beamprobe_follow:running() of
        undefined -> {ok, St};
        F -> {error, {follow_running, F}, St}
    end.

%% What another tool (dbg, recon_trace, redbug, ...) traces is left to it
%% unless forced: beamprobe_skip:skip/2 says what, and what is left to
%% trace.  Processes traced by beamprobe's hub are shared with the other
%% sessions.
check_tracers(#st{config = C} = St) ->
    case beamprobe_skip:skip(C, self()) of
        {ok, C1, Skipped0} ->
            {Held, Skipped} = case maps:take(profile_held, Skipped0) of
                                  {H, Sk} -> {H, Sk};
                                  error -> {[], Skipped0}
                              end,
            {ok, St#st{config = C1, skipped = Skipped, held = Held}};
        {error, Reason} -> {error, Reason, St}
    end.

make_dir(#st{config = #{dir := undefined}} = St) ->
    {ok, St};
make_dir(#st{config = #{dir := Dir}} = St) ->
    %% Created 0700 by the NIF (no mkdir -> chmod window under any umask).
    case beamprobe_nif_wait:make_dir(unicode:characters_to_binary(Dir)) of
        created -> {ok, St#st{created_dir = true}};
        existing -> {ok, St};
        {error, R} -> {error, {unwritable, Dir, R}, St}
    end.

%% Handler sinks run in their own processes, started before tracing.
start_handlers(#st{config = #{sinks := Sinks}} = St) ->
    start_handlers([S || #{type := handler} = S <- Sinks], St).

start_handlers([], St) -> {ok, St};
start_handlers([#{module := M, arg := A0} = S | T],
               #st{handlers = Hs} = St) ->
    A = handler_arg(M, A0, S, St#st.config),
    case beamprobe_handler:start_link(M, A) of
        {ok, Pid} -> start_handlers(T, St#st{handlers = Hs ++ [Pid]});
        {error, R} -> {error, R, St}
    end.

start_nif(#st{config = C, handlers = Hs} = St) ->
    #{limits := #{events := Ev, bytes := By, rate := Rate}, dir := Dir,
      sinks := Sinks} = C,
    HSinks = [S || #{type := handler} = S <- Sinks],
    FileKinds = case [K || #{type := file, kinds := K} <- Sinks] of
                    [K] -> K;
                    [] -> 0
                end,
    Handlers = [#{pid => Pid, kinds => K, batch => B, credits => Cr,
                  overflow => Ov,
                  pids => case P of all -> []; _ -> P end}
                || {Pid, #{kinds := K, batch := B, credits := Cr,
                           overflow := Ov, procs := P}}
                       <- lists:zip(Hs, HSinks)],
    UsdtKinds = case [K || #{type := usdt, kinds := K} <- Sinks] of
                    [UK] -> UK;
                    [] -> 0
                end,
    Nif0 = #{file => Dir =/= undefined,
             file_kinds => FileKinds,
             usdt_kinds => UsdtKinds,
             handlers => Handlers,
             rate_stop => maps:get(on_rate, C) =:= stop,
             ms_result => ms_result(C),
             buffer => maps:get(buffer, C),
            max_slots => max_slots(),
            overflow => maps:get(overflow, C),
            args => maps:get(args, C),
            capture => maps:get(capture, C),
            %% A match spec that asks for return_trace/exception_trace
            %% asks for its events, whatever the session-wide options say.
            return => records_returns(C),
            exceptions => maps:get(exceptions, C) orelse
                ms_action(C, [exception_trace]),
            event_limit => limit(Ev),
            byte_limit => limit(By),
            notify => self(),
            max_sessions => application:get_env(beamprobe, max_sessions, 64),
            max_memory => beamprobe_config:max_memory(),
            env => trace_env(C)},
    Nif1 = case Dir of
               undefined -> Nif0;
               _ -> Nif0#{dir => unicode:characters_to_binary(Dir)}
           end,
    Nif2 = maps:merge(maps:merge(Nif1, beamprobe_lttng:nif_config(Sinks)),
                      tcp_config(Sinks)),
    Nif = case Rate of
              infinity -> Nif2;
              {N, Ms} -> Nif2#{rate => {N, Ms}}
          end,
    case beamprobe_nif_wait:start(Nif) of
        {ok, Res} ->
            [beamprobe_handler:attach(H, Res, I)
             || {I, H} <- lists:zip(lists:seq(0, length(Hs) - 1), Hs)],
            {ok, St#st{res = Res}};
        {error, R} -> {error, R, St}
    end.

%% Does some match spec return a value (message action) to record?
ms_result(C) ->
    ms_any(C, fun({message, _}) -> true; (_) -> false end).

%% Does some match spec have one of the actions `Names' (no arguments)?
ms_action(C, Names) ->
    ms_any(C, fun(A) -> is_action(A, Names) end).

%% Whether match-spec action A is one of Names ({return_trace}, ...).
is_action({A}, Names) -> lists:member(A, Names);
is_action(_, _Names) -> false.

ms_any(#{calls := Calls}, Pred) ->
    lists:any(fun({_, MS}) when is_list(MS) ->
                      lists:any(fun({_, _, Body}) when is_list(Body) ->
                                        lists:any(Pred, Body);
                                   (_) -> false
                                end, MS);
                 (_) -> false
              end, Calls).

limit(infinity) -> 0;
limit(N) -> N.

%% Every scheduler thread that can run a tracer callback gets a slot.
max_slots() ->
    N = erlang:system_info(schedulers) +
        erlang:system_info(dirty_cpu_schedulers) +
        erlang:system_info(dirty_io_schedulers) + 8,
    min(N, 256).

trace_env(C) ->
    {ok, Host} = inet:gethostname(),
    [{<<"node">>, atom_to_binary(node())},
     {<<"hostname">>, list_to_binary(Host)},
     {<<"otp_release">>, list_to_binary(otp_version())},
     {<<"erts_version">>, list_to_binary(erlang:system_info(version))},
     {<<"beamprobe_version">>, app_vsn()},
     {<<"start_time">>,
      list_to_binary(calendar:system_time_to_rfc3339(
                       erlang:system_time(microsecond),
                       [{unit, microsecond}]))},
     {<<"os_pid">>, list_to_binary(os:getpid())},
     {<<"calls">>, patterns_text(maps:get(calls, C))},
     {<<"args">>, atom_to_binary(maps:get(args, C))},
     {<<"overflow">>, atom_to_binary(maps:get(overflow, C))},
     %% false: no call of this trace can have a return event, so the
     %% readers show no call depth (`beamprobe print').
     {<<"returns">>, atom_to_binary(returns(C))}] ++
        case untimed(C) of
            [] -> [];
            U -> [{<<"timed_calls">>, patterns_text(timed_calls(C))},
                  {<<"untimed_calls">>, patterns_text(U)}]
        end.

%% Patterns as the trace's env shows them, in Erlang syntax and UTF-8
%% ("m:f/1, m:'_'/'_'"), whether they came with a match spec or not.
%% The atoms are rendered as call events render them (the NIF's
%% renderer), so that the readers find a function's name in them byte
%% for byte: io_lib's ~tp writes a non-latin-1 atom's escape or delete
%% character as \e and \d, the events as \033 and a raw 127.
patterns_text(Calls) ->
    iolist_to_binary(
      lists:join(", ", [[beamprobe_nif:render(M, #{}), $:,
                         beamprobe_nif:render(F, #{}), $/,
                         case A of
                             '_' -> <<"'_'">>;
                             _ -> integer_to_binary(A)
                         end]
                        || Call <- Calls, {M, F, A} <- [key(Call)]])).

%% In a trace where some calls can have return events (returns = true),
%% the patterns whose calls not all can: a clause of their match spec
%% without return_trace or exception_trace (the trace does not say which
%% clause a call matched), or a plain pattern of a session without return
%% and exceptions.  The readers count their calls and show
%% no time for them (a call of one never ends); return_to ends every
%% call, so with it there are none.  A function's calls follow its most
%% specific pattern (beamprobe_combine's session_ms/2; patterns naming a
%% function with as many '_' are the same pattern, since '_' is taken
%% only as {M, F, '_'}, {M, '_', '_'} or {'_', '_', '_'}), and of a
%% pattern given twice the last: each pattern is listed once, as
%% untimed or timed (timed_calls/1) by its last occurrence, and the
%% readers take the most specific of both lists (c_src/cli/bp_calls.h).
untimed(#{return_to := true}) -> [];
untimed(C) ->
    case returns(C) of
        false -> [];
        true -> [Call || Call <- last_calls(C), not timed(Call, C)]
    end.

%% The patterns whose calls have return events, each once (see above).
timed_calls(C) ->
    [Call || Call <- last_calls(C), timed(Call, C)].

%% The session's patterns, each key at its last occurrence only.
last_calls(C) ->
    Calls = lists:enumerate(maps:get(calls, C)),
    Last = maps:from_list([{key(Call), I} || {I, Call} <- Calls]),
    [Call || {I, Call} <- Calls, map_get(key(Call), Last) =:= I].

key({{_, _, _} = MFA, _}) -> MFA;
key(MFA) -> MFA.

timed({{_, _, _}, MS}, _C) when is_list(MS), MS =/= [] ->
    lists:all(fun({_, _, Body}) when is_list(Body) ->
                      lists:any(fun(A) ->
                                        is_action(A, [return_trace,
                                                      exception_trace])
                                end, Body);
                 (_) -> false
              end, MS);
timed({{_, _, _}, _}, _C) -> false;
timed({_, _, _}, C) -> actions(C) =/= [] andalso records_returns(C).

%% The shell printer's defaults from the session, where its argument
%% leaves them out: it names processes as the trace does when it
%% receives register events (follows_names); without return events a
%% call never ends, so it shows no call depth (returns), and a call of a
%% function traced without them pushes no frame (untimed).
handler_arg(beamprobe_printer, A, Sink, Config) when is_map(A) ->
    maps:merge(#{follows_names =>
                     maps:get(kinds, Sink, 0) band (1 bsl ?BP_EV_REGISTER) =/= 0,
                 returns => returns(Config),
                 untimed => [key(P) || P <- untimed(Config)],
                 calls => [key(P) || P <- maps:get(calls, Config, [])]},
               A);
handler_arg(_M, A, _Sink, _Config) -> A.

%% Whether a call can be followed by its return: a return_trace or
%% exception_trace action in a match spec, the session's return option
%% for a pattern without one, or return_to.  (exceptions alone records
%% the exception_from events of those patterns, not their return_from
%% events: records_returns/1.)
returns(C) ->
    maps:get(return_to, C, false) =:= true orelse
        ms_action(C, [return_trace, exception_trace]) orelse
        (maps:get(return, C, false) =:= true andalso
         lists:any(fun({_, _, _}) -> true; (_) -> false end,
                   maps:get(calls, C, []))).

%% Whether the tracer records return_from events: the session asked for
%% return, or a match spec for return_trace or exception_trace (its
%% events are recorded whatever return says).
records_returns(C) ->
    maps:get(return, C) orelse ms_action(C, [return_trace, exception_trace]).

otp_version() ->
    File = filename:join([code:root_dir(), "releases",
                          erlang:system_info(otp_release), "OTP_VERSION"]),
    case file:read_file(File) of
        {ok, B} -> string:trim(binary_to_list(B));
        {error, _} -> erlang:system_info(otp_release)
    end.

app_vsn() ->
    case application:get_key(beamprobe, vsn) of
        {ok, V} -> list_to_binary(V);
        undefined -> <<"0.1.0">>
    end.

%% Everything that depends on other sessions (patterns, flags, the hub)
%% is installed by the janitor, in one step (beamprobe_janitor:join/2).
join(#st{config = C, res = Res, handlers = Hs} = St) ->
    Default = case actions(C) of
                  [] -> true;
                  Actions -> [{'_', [], Actions}]
              end,
    Calls = [case Call of
                 {{_, _, _} = M, S} -> {M, S};
                 M -> {M, Default}
             end || Call <- beamprobe_skip:to_set(maps:get(calls, C),
                                                   St#st.skipped)],
    Meta = maps:get(meta, C),
    PFlags = flags(case Meta of
                       true -> C#{calls := []};  % calls are meta-traced
                       false -> C
                   end),
    Procs = procs(C),
    Spec = #{res => Res, meta => Meta, procs => Procs,
             %% The processes another tool held at the start are not
             %% this session's, also when another session traces them
             %% later (the hub then routes their events): as alone.
             %% (Not those a profile run held: this session's once it
             %% ends, pick_up/1.)
             exclude => maps:get(exclude, C) ++
                 (skipped_pids(St#st.skipped) -- St#st.held),
             held => St#st.held,
             flags => PFlags -- [arity],
             arity => lists:member(arity, PFlags),
             ports => lists:member(ports, maps:get(events, C)),
             kinds => kinds(C),
             calls => Calls,
             msgs => maps:get(messages, C),
             %% (The watchdog's process too: the janitor takes the
             %% flags off them.)
             handlers => Hs ++ beamprobe_vm:pids(St#st.vm) ++
                 [P || P <- [St#st.spare], is_pid(P)],
             %% Functions another tool's pattern covers: their call
             %% events still reach this session (beamprobe_skip:skip/2).
             relied => case {Meta, St#st.skipped} of
                           {false, #{relied := Sk}} -> Sk;
                           _ -> []
                       end,
             %% The processes other tools hold (just checked, each one):
             %% the janitor need not ask each traced process again.
             others => others(St#st.skipped)},
    case beamprobe_janitor:join(self(), Spec) of
        {ok, Matched, Entry} ->
            {ok, St#st{matched = Matched, traced = Procs, hub = Entry,
                       patterns = [M || {M, _} <- Calls],
                       msg_patterns = [K || {K, _} <- maps:get(messages, C)]}};
        {error, R} -> {error, R, St}
    end.

%% The processes beamprobe_skip:skip/2 listed as skipped (at most a
%% thousand: beyond, the others may still reach the session through
%% another session that traces them after their tool let them go).
skipped_pids(#{procs := L}) -> [P || P <- L, is_pid(P)];
skipped_pids(_) -> [].

%% The processes beamprobe_skip:skip/2 found traced by other tools, when
%% it listed them all (it keeps at most a thousand).
others(#{procs := L, procs_count := N}) when length(L) =:= N ->
    [P || P <- L, is_pid(P)];
others(_) -> careful.

%% The event kinds the session records through the hub (c_src/bp_hub.h;
%% 256: the calls of its meta patterns).
kinds(#{calls := Calls, meta := Meta, return_to := RetTo, events := Ev}) ->
    Bits = [{send, 4}, {'receive', 8}, {procs, 16}, {ports, 32},
            {running, 64}, {gc, 128}],
    HubCalls = Calls =/= [] andalso not Meta,
    (case Calls =/= [] andalso Meta of true -> 256; false -> 0 end) bor
    (case HubCalls of true -> 1; false -> 0 end) bor
        (case HubCalls andalso RetTo of true -> 2; false -> 0 end) bor
        lists:foldl(fun({E, B}, Acc) ->
                            case lists:member(E, Ev) of
                                true -> Acc bor B;
                                false -> Acc
                            end
                    end, 0, Bits).

actions(#{exceptions := true}) -> [{exception_trace}];
actions(#{return := true}) -> [{return_trace}];
actions(_) -> [].

flags(#{calls := Calls, args := Args, return_to := RetTo, events := Ev}) ->
    Map = [{send, send}, {'receive', 'receive'}, {procs, procs},
           {running, running}, {gc, garbage_collection}, {ports, ports}],
    [call || Calls =/= []] ++
        [arity || Calls =/= [], Args =/= full] ++
        [return_to || Calls =/= [], RetTo] ++
        [Flag || {E, Flag} <- Map, lists:member(E, Ev)].

%% After a reload of the NIF module the VM has dropped it as the tracer of
%% every process (and meta pattern) it traced: the janitor traces them
%% again (taking no process another tracer holds now).  What happened in
%% between was never given to beamprobe; the summary counts the reloads
%% (`nif_reloads').
retrace(St) ->
    ok = beamprobe_watch:rebase(St#st.watch),
    St#st{nif_reloads = St#st.nif_reloads + 1}.

annotate_start(#st{config = #{procs := Procs}} = St) ->
    Targets = case Procs of
                  L when is_list(L) -> L;
                  new -> [];
                  _ -> processes() ++ erlang:ports()
              end,
    _ = annotate(St, Targets),
    {ok, St}.

annotate_live(St) -> annotate(St, live_targets(St)).

live_targets(#st{traced = T}) when is_list(T) -> T;
live_targets(_) -> processes() ++ erlang:ports().

%% Names and initial calls of processes, as `process' events; not of
%% the session's own (itself, its watchdog: never traced).
annotate(#st{res = Res} = St, Targets) ->
    Own = [self() | [P || P <- [St#st.spare, St#st.watch], is_pid(P)]],
    Items = lists:filtermap(fun describe/1,
                            lists:sublist(Targets -- Own, ?ANNOTATE_MAX)),
    annotate_chunks(Res, Items).

annotate_chunks(_Res, []) -> ok;
annotate_chunks(Res, Items) ->
    {Chunk, Rest} = lists:split(min(?ANNOTATE_CHUNK, length(Items)), Items),
    _ = nif(fun() -> beamprobe_nif:annotate(Res, Chunk) end),
    annotate_chunks(Res, Rest).

describe(P) when is_pid(P) ->
    case erlang:process_info(P, [registered_name, initial_call]) of
        undefined -> false;
        Info ->
            %% Atoms and {M, F, A}: the NIF renders them as the tracer
            %% does (one form for names, docs/format.md).
            Name = case proplists:get_value(registered_name, Info) of
                       [] -> undefined;
                       N -> N
                   end,
            IC = proplists:get_value(initial_call, Info, undefined),
            {true, {P, Name, IC}}
    end;
describe(P) when is_port(P) ->
    case erlang:port_info(P, name) of
        {name, N} -> {true, {P, undefined, unicode:characters_to_binary(N)}};
        undefined -> false
    end.

start_timer(#st{config = #{limits := #{seconds := infinity}}} = St) ->
    {ok, St};
start_timer(#st{config = #{limits := #{seconds := S}}} = St) ->
    Ref = erlang:send_after(round(S * 1000), self(), {limit, seconds}),
    {ok, St#st{timer = Ref}}.

%% An lttng sink that cannot run here is refused before anything is made.
check_vm(#st{config = C} = St) ->
    case beamprobe_vm:check(C) of
        ok -> {ok, St};
        {error, R} -> {error, R, St}
    end.

%% System monitor reports and counter samples, if asked for.
start_vm(#st{res = Res, config = C} = St) ->
    case beamprobe_vm:start(Res, C) of
        {ok, H} -> {ok, St#st{vm = H}};
        {error, R} -> {error, R, St}
    end.

%% The watchdog's process, before the session sets any flag: a process
%% started after the flags of new processes would have its first
%% scheduling recorded (beamprobe_own:prestart/0).
prestart_watch(St) ->
    {ok, St#st{spare = beamprobe_own:prestart()}}.

%% The watchdog: reports what another tool removes or replaces.
start_watch(#st{res = Res, patterns = Pats, config = C, traced = T,
                spare = Spare} = St) ->
    %% Not `arity': beamprobe itself takes it off every process when a
    %% session that wants full arguments joins (the other sessions still
    %% render the arity they asked for: a cost, not a loss), and that is
    %% no other tool's doing.
    Flags = flags(case maps:get(meta, C) of
                      true -> C#{calls := []};
                      false -> C
                  end) -- [arity],
    {ok, W} = beamprobe_watch:start_in(
                Spare, self(), #{res => Res, meta => maps:get(meta, C),
                          patterns => Pats, procs => T, flags => Flags,
                          msgs => maps:get(messages, C),
                          relied => case St#st.skipped of
                                        #{relied := Sk} -> Sk;
                                        _ -> []
                                    end,
                          on_tamper => maps:get(on_tamper, C, report)}),
    %% (The janitor has it among the session's own since join/1.)
    {ok, St#st{watch = W, spare = undefined}}.

%% The processes skipped only because a profile run held them
%% (beamprobe_skip) that it has let go: the session takes them (the
%% janitor sets its flags on them) and they leave `skipped'.  Run after
%% the start (a profile that ended between the check and the join sent
%% its notice before this session was a member) and when the janitor
%% says a profile ended.  A process another tool took meanwhile stays
%% skipped; one still held (another profile run) waits for its end.
pick_up(#st{held = []} = St) -> {ok, St};
pick_up(#st{held = Held, skipped = #{procs := Sk, procs_count := N} = Skipped}
        = St) ->
    case beamprobe_janitor:pick_up(self(), Held) of
        {ok, Picked, Still, Entry} ->
            _ = annotate(St, Picked),
            %% (Its watchdog watches them too.)
            ok = beamprobe_watch:watch_procs(St#st.watch, Picked),
            {ok, St#st{held = Still, hub = Entry,
                       traced = case St#st.traced of
                                    L when is_list(L) -> L ++ Picked;
                                    T -> T
                                end,
                       skipped = Skipped#{procs := Sk -- Picked,
                                          procs_count := N - length(Picked)}}};
        {error, _} -> {ok, St}
    end.

%%% ------------------------------------------------------------------------
%%% Stopping
%%% ------------------------------------------------------------------------

%% Stops tracing once; later calls return the same state.
finish(#st{summary = Sum} = St, _Why) when Sum =/= undefined -> St;
finish(#st{res = undefined} = St, _Why) -> St;
finish(#st{res = Res, config = C, started = T0} = St, Why) ->
    %% Flags off first (the node comes first), then the names; the
    %% watchdog before them (it must not see the session's own removal).
    Coexist = coexist(St, beamprobe_watch:stop(St#st.watch)),
    St0 = St#st{watch = undefined},
    St1 = uninstall(St0),
    %% Listed after the flags are off: on a node of 500,000 processes the
    %% list takes ≈ 0.1 s.
    _ = annotate(St0, live_targets(St0)),
    Stats = case nif(fun() -> beamprobe_nif_wait:stop(Res) end) of
                {ok, S} -> S;
                {error, E} -> unknown_stats(E);
                {nif_error, E} -> unknown_stats(E)
            end,
    Secs = (erlang:monotonic_time(millisecond) - T0) / 1000,
    Sum = #{events => maps:get(events, Stats),
            dropped => maps:get(dropped, Stats),
            bytes => maps:get(bytes, Stats),
            seconds => Secs,
            output => output(C),
            stop_reason => stop_reason(Why, Stats),
            threads => maps:get(threads, Stats),
            io_error => maps:get(io_error, Stats),
            handlers => maps:get(handlers, Stats),
            stream => maps:get(stream, Stats, none),
            lttng_session => maps:get(lttng_session, Stats, none),
            matched => St#st.matched,
            nif_reloads => St#st.nif_reloads,
            tag => maps:get(tag, C)},
    _ = [beamprobe_handler:stop(H, Why) || H <- St1#st.handlers],
    %% Each sink's own losses, with a TCP stream (bp_losses.h).
    SumS = case Stats of
               #{lost_by_sink := BySink} -> Sum#{lost_by_sink => BySink};
               _ -> Sum
           end,
    Sum1 = case Stats of
               #{nif_error := NE} -> maps:merge(SumS#{nif_error => NE}, Coexist);
               _ -> maps:merge(SumS, Coexist)
           end,
    %% The resource is not used after the stop (info/1 and dump/1 answer
    %% from the summary); not kept, so that it can be freed (ended/1).
    St1#st{summary = Sum1, res = undefined,
           hres = case St1#st.handlers of
                      [] -> undefined;
                      _ -> Res
                  end}.

%% @doc The summary `Sum' of a stopped session with its handlers' account
%% read again from the NIF session `Res' (`Handlers' in sink order): a
%% handler that has ended acknowledges nothing more, so the batches still
%% in flight to it are lost (it was killed after `handler_stop_timeout',
%% or crashed), and counted as `dropped'; a live handler's account is as
%% it is now.  Called once the handlers were waited for (beamprobe:stop/1)
%% and when one ends; before, the summary was the account taken at the
%% stop, with the batches a killed handler never handled `in_flight'.
-spec settle_handlers(map(), [pid()], beamprobe_nif:session() | undefined) ->
          map().
settle_handlers(Sum, _Handlers, undefined) -> Sum;
settle_handlers(#{handlers := Old} = Sum, Handlers, Res)
  when length(Old) =:= length(Handlers) ->
    case nif(fun() -> beamprobe_nif:info(Res) end) of
        #{handlers := New} = Stats when length(New) =:= length(Handlers) ->
            Sum#{handlers := maps:get(handlers,
                                      settle_view(Stats, Handlers))};
        _ -> Sum
    end;
settle_handlers(Sum, _Handlers, _Res) -> Sum.

%% Stats (the NIF's) with the batches in flight to each handler of
%% Handlers that has ended counted as dropped (handler_down).
settle_view(#{handlers := Accs} = Stats, Handlers)
  when length(Accs) =:= length(Handlers) ->
    Stats#{handlers := [settle(H, A) || {H, A} <- lists:zip(Handlers, Accs)]};
settle_view(Stats, _Handlers) -> Stats.

settle(H, #{in_flight := F, dropped := D} = A) ->
    case is_process_alive(H) of
        false ->
            Down = maps:get(handler_down, A, 0),
            A#{in_flight := 0, dropped := D + F, handler_down => Down + F};
        true -> A
    end.

%% A call into the NIF that cannot take the session process down: during a
%% reload the module can be missing for a moment (code:delete + purge) or,
%% in embedded mode, until someone loads it.
nif(F) ->
    try F()
    catch Class:Reason -> {nif_error, {Class, Reason}}
    end.

%% What a summary says when the NIF could not be asked: nothing is known,
%% and it says so (`nif_error', stop_reason `nif_error').
unknown_stats(E) ->
    #{events => 0, dropped => #{total => 0}, bytes => 0, threads => 0,
      io_error => none, handlers => [], stop_reason => nif_error,
      nif_error => E}.

%% The TCP stream sink's part of the NIF configuration (bp_sink_tcp.c).
tcp_config(Sinks) ->
    case [X || #{type := tcp} = X <- Sinks] of
        [#{addr := IP, port := Port, kinds := K, queue := Q} = X] ->
            Bin = case IP of
                      {A, B, C, D} -> <<A, B, C, D>>;
                      {_, _, _, _, _, _, _, _} ->
                          << <<W:16>> || W <- tuple_to_list(IP) >>
                  end,
            #{tcp => {Bin, Port}, tcp_kinds => K, tcp_queue => Q,
              tcp_token => maps:get(token, X, <<>>)};
        [] -> #{}
    end.

stop_reason(Why, #{stop_reason := none}) -> Why;
stop_reason(_, #{stop_reason := R}) -> R.

%% Undoes a failed install: flags, patterns, the NIF session and the
%% directory it created.
abort(#st{res = Res, created_dir = Created, config = #{dir := Dir}} = St) ->
    St1 = uninstall(St),
    _ = Res =/= undefined andalso nif(fun() -> beamprobe_nif_wait:stop(Res) end),
    [begin unlink(H), exit(H, kill) end
     || H <- St#st.handlers ++ [P || P <- [St#st.spare], is_pid(P)]],
    _ = Created andalso beamprobe_nif_wait:remove_dir(Dir),
    St1#st{res = undefined}.

%% Removes every trace flag and pattern this session set that no other
%% session needs, and takes it out of the hub (beamprobe_janitor:leave/1).
%% Idempotent.
uninstall(St) ->
    _ = beamprobe_watch:stop(St#st.watch),
    ok = beamprobe_vm:stop(St#st.vm),
    ok = beamprobe_janitor:leave(self(), St#st.hub),
    _ = case St#st.timer of
        undefined -> ok;
        T -> erlang:cancel_timer(T)
    end,
    St#st{traced = none, patterns = [], msg_patterns = [],
          timer = undefined, hub = undefined, watch = undefined, vm = none}.

info_map(#st{config = C, started = T0, matched = M} = St, Stats) ->
    maps:merge(Stats#{seconds => (erlang:monotonic_time(millisecond) - T0) / 1000,
           output => output(C),
           matched => M,
           nif_reloads => St#st.nif_reloads,
           tag => maps:get(tag, C),
           config => C},
               %% skipped, tampered: as in the summary
               coexist(St, beamprobe_watch:findings(St#st.watch))).

%% What was left to other tools (beamprobe_skip) and what they changed
%% (beamprobe_watch).
coexist(#st{skipped = Sk}, {Found, N}) ->
    #{skipped => case Sk of
                     undefined -> #{procs => [], procs_count => 0,
                                    calls => [], untraceable => []};
                     _ -> Sk
                 end,
      tampered => Found, tampered_count => N}.

output(#{dir := undefined, sinks := Sinks}) ->
    [case S of
         #{type := handler, module := M} -> {handler, M};
         #{type := tcp, addr := A, port := P} -> {tcp, {A, P}};
         #{type := lttng} -> lttng;
         _ -> usdt
     end
     || #{type := T} = S <- Sinks, T =:= handler orelse T =:= usdt
            orelse T =:= tcp orelse T =:= lttng];
output(#{dir := Dir}) -> Dir.
