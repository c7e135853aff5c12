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
-behaviour(gen_server).

-export([start_link/2, remove_flags/2]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

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
             nif_reloads = 0 :: non_neg_integer(),
             %% Coexistence with other tools (beamprobe_watch): what was
             %% left to them, and the watchdog.
             skipped :: undefined | beamprobe_watch:skipped(),
             watch :: undefined | pid(),
             %% The VM's monitor reports and counter samples
             %% (beamprobe_monitor, beamprobe_sampler).
             vm = none :: beamprobe_vm:handle()}).

%% @doc Starts a session process for `Owner'; it traces nothing until asked
%% to `install'.
-spec start_link(pid(), beamprobe_config:config()) -> {ok, pid()}.
start_link(Owner, Config) ->
    gen_server:start_link(?MODULE, {Owner, Config}, []).

%% @private
-spec init({pid(), beamprobe_config:config()}) -> {ok, #st{}}.
init({Owner, Config}) ->
    process_flag(trap_exit, true),
    {ok, #st{owner = Owner, monitor = monitor(process, Owner),
             config = Config,
             started = erlang:monotonic_time(millisecond)}}.

%% @private
-spec handle_call(term(), gen_server:from(), #st{}) ->
          {reply, term(), #st{}} | {stop, normal, term(), #st{}}.
handle_call(install, _From, St) ->
    case install(St) of
        {ok, St1} -> {reply, {ok, self(), St1#st.matched}, St1};
        {error, Reason, St1} ->
            {stop, normal, {error, Reason}, abort(St1)}
    end;
handle_call(stop, _From, St) ->
    St1 = finish(St, requested),
    {stop, normal, {ok, St1#st.summary}, St1};
handle_call(info, _From, #st{summary = undefined, res = Res} = St) ->
    case nif(fun() -> beamprobe_nif:info(Res) end) of
        {nif_error, E} -> {reply, {error, {nif_error, E}}, St};
        Stats -> {reply, {ok, info_map(St, Stats)}, St}
    end;
handle_call(info, _From, #st{summary = Sum} = St) ->
    {reply, {ok, Sum}, St};
handle_call(dump, _From, #st{summary = undefined, res = Res} = St) ->
    _ = annotate_live(St),
    case nif(fun() -> beamprobe_nif:dump(Res) end) of
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
-spec handle_info(term(), #st{}) -> {noreply, #st{}} | {stop, normal, #st{}}.
handle_info({'DOWN', Ref, process, _, _}, #st{monitor = Ref} = St) ->
    {stop, normal, finish(St, owner_down)};
handle_info({limit, seconds}, St) ->
    ended(finish(St, seconds));
handle_info({beamprobe_stop, Why}, St) ->
    ended(finish(St, Why));
handle_info({'EXIT', _, _}, St) ->
    {noreply, St};
handle_info(beamprobe_nif_reloaded, #st{summary = undefined,
                                       res = Res} = St) when Res =/= undefined ->
    {noreply, retrace(St)};
handle_info(_Other, St) ->
    {noreply, St}.

%% A session that ended by itself keeps its summary for stop/1, unless it
%% was started from the shell API (nobody will ask).
ended(#st{config = #{tag := beamprobe_shell}} = St) -> {stop, normal, St};
ended(St) -> {noreply, St}.

%% @private
-spec terminate(term(), #st{}) -> ok.
terminate(_Reason, St) ->
    _ = finish(St, terminated),
    ok.

%%% ------------------------------------------------------------------------
%%% Installing
%%% ------------------------------------------------------------------------

install(#st{config = C} = St) ->
    Steps = [fun check_conflicts/1, fun check_tracers/1, fun check_vm/1,
             fun make_dir/1,
             fun start_handlers/1, fun start_nif/1, fun start_vm/1,
             fun set_patterns/1,
             fun set_flags/1, fun annotate_start/1, fun start_timer/1,
             fun register_janitor/1, fun start_watch/1],
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

%% Another beamprobe session on the same processes or functions?  The
%% check and the claim are one step of the janitor: of two sessions started
%% at once, one is refused.  Whatever happens next, uninstall/1 releases it.
check_conflicts(#st{config = C} = St) ->
    case beamprobe_janitor:claim(self(), claim(C), maps:get(meta, C)) of
        ok -> {ok, St};
        {conflict, Session, What} -> {error, {conflict, Session, What}, St}
    end.

%% What a session takes: the processes it sets flags on (none for a pure
%% meta session) and the functions it sets patterns on.
claim(#{procs := Procs, meta := Meta, events := Ev, calls := Calls,
        messages := Msgs}) ->
    P = case Meta andalso Ev =:= [] of
            true -> none;
            false -> Procs
        end,
    {P, [mfa(C) || C <- Calls] ++ [{message, K} || {K, _} <- Msgs]}.

mfa({{_, _, _} = MFA, _MS}) -> MFA;
mfa({_, _, _} = MFA) -> MFA.

%% What another tool (dbg, recon_trace, redbug, ...) traces is left to it
%% unless forced: beamprobe_watch:skip/2 says what, and what is left to
%% trace.
check_tracers(#st{config = C} = St) ->
    case beamprobe_watch:skip(C, self()) of
        {ok, C1, Skipped} -> {ok, St#st{config = C1, skipped = Skipped}};
        {error, Reason} -> {error, Reason, St}
    end.

make_dir(#st{config = #{dir := undefined}} = St) ->
    {ok, St};
make_dir(#st{config = #{dir := Dir}} = St) ->
    %% Created 0700 by the NIF (no mkdir -> chmod window under any umask).
    case beamprobe_nif:make_dir(unicode:characters_to_binary(Dir)) of
        created -> {ok, St#st{created_dir = true}};
        existing -> {ok, St};
        {error, R} -> {error, {unwritable, Dir, R}, St}
    end.

%% Handler sinks run in their own processes, started before tracing.
start_handlers(#st{config = #{sinks := Sinks}} = St) ->
    start_handlers([S || #{type := handler} = S <- Sinks], St).

start_handlers([], St) -> {ok, St};
start_handlers([#{module := M, arg := A} | T], #st{handlers = Hs} = St) ->
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
    Nif0 = #{file => Dir =/= undefined,
             file_kinds => FileKinds,
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
            return => maps:get(return, C) orelse
                ms_action(C, [return_trace, exception_trace]),
            exceptions => maps:get(exceptions, C) orelse
                ms_action(C, [exception_trace]),
            event_limit => limit(Ev),
            byte_limit => limit(By),
            notify => self(),
            max_sessions => application:get_env(beamprobe, max_sessions, 64),
            env => trace_env(C)},
    Nif1 = case Dir of
               undefined -> Nif0;
               _ -> Nif0#{dir => unicode:characters_to_binary(Dir)}
           end,
    Nif2 = maps:merge(Nif1, beamprobe_lttng:nif_config(Sinks)),
    Nif = case Rate of
              infinity -> Nif2;
              {N, Ms} -> Nif2#{rate => {N, Ms}}
          end,
    case beamprobe_nif:start(Nif) of
        {ok, Res} ->
            %% From now on the janitor can clear this session's flags if
            %% the process dies in the middle of installing.
            ok = beamprobe_janitor:register_session(
                   self(), Res, [], maps:get(meta, C), claim(C)),
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
    ms_any(C, fun(A) when is_tuple(A), tuple_size(A) =:= 1 ->
                      lists:member(element(1, A), Names);
                 (_) -> false
              end).

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
    Calls = [io_lib:format("~p:~p/~p", [M, F, A])
             || {M, F, A} <- maps:get(calls, C)],
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
     {<<"calls">>, iolist_to_binary(lists:join(", ", Calls))},
     {<<"args">>, atom_to_binary(maps:get(args, C))},
     {<<"overflow">>, atom_to_binary(maps:get(overflow, C))}].

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

set_patterns(#st{config = #{calls := Calls} = C, res = Res} = St) ->
    %% `true' when no action is needed: no match-spec program runs per call.
    Default = case actions(C) of
                  [] -> true;
                  Actions -> [{'_', [], Actions}]
              end,
    Flags = case maps:get(meta, C) of
                true -> [{meta, beamprobe_nif, Res}];
                false -> [local]
            end,
    set_patterns(general_first(beamprobe_watch:to_set(Calls, St#st.skipped)),
                 Default, Flags, St).

%% The last trace_pattern/3 on a function wins: set `{m, '_', '_'}' before
%% `{{m, f, 1}, MatchSpec}', so that the specific pattern's match spec
%% (say, the return tracing it asks for) is the one that stays.
general_first(Calls) ->
    Wild = fun(Call) -> length([x || '_' <- tuple_to_list(mfa(Call))]) end,
    [C || {_, _, C} <- lists:sort([{-Wild(C), I, C}
                                   || {I, C} <- lists:enumerate(Calls)])].

set_patterns([], _Default, _Flags,
             #st{config = #{messages := Msgs}} = St) ->
    %% Message patterns last: they apply to the session's send/receive
    %% events (global in the VM, like call patterns).
    lists:foldl(fun({Kind, MS}, {ok, S}) ->
                        try message_pattern(Kind, MS) of
                            _ -> {ok, S#st{msg_patterns =
                                               [Kind | S#st.msg_patterns],
                                           matched = S#st.matched + 1}}
                        catch error:badarg ->
                                {error, {bad_pattern, {Kind, MS}}, S}
                        end;
                   (_, Err) -> Err
                end, {ok, St}, Msgs);
set_patterns([Call | T], Default, Flags, #st{patterns = Done} = St) ->
    {MFA, MS} = case Call of
                    {{_, _, _} = M, S} -> {M, S};
                    M -> {M, Default}
                end,
    try erlang:trace_pattern(MFA, MS, Flags) of
        0 -> {error, {no_match, MFA}, St};
        N when is_integer(N) ->
            set_patterns(T, Default, Flags,
                         St#st{patterns = [MFA | Done],
                               matched = St#st.matched + N})
    catch
        error:badarg -> {error, {bad_pattern, MFA}, St}
    end.

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

%% The flags of the session's processes, its tracer last.
tracer_flags(#st{config = C0, res = Res}) ->
    C = case C0 of
            #{meta := true} -> C0#{calls := []};  % calls are meta-traced
            _ -> C0
        end,
    flags(C) ++ [{tracer, beamprobe_nif, Res}].

set_flags(#st{config = #{meta := true, events := []}} = St) ->
    {ok, St};
set_flags(#st{config = #{procs := Procs} = C, res = Res,
              handlers = Hs} = St) ->
    Flags = tracer_flags(St),
    try
        case Procs of
            L when is_list(L) ->
                [erlang:trace(P, true, Flags) || P <- L],
                {ok, St#st{traced = L}};
            Spec0 ->
                %% Ports only when port events are wanted: ports send
                %% messages too, and message patterns do not filter them.
                Spec = case lists:member(ports, maps:get(events, C)) of
                           true -> Spec0;
                           false -> processes_only(Spec0)
                       end,
                _ = erlang:trace(Spec, true, Flags),
                %% Never trace beamprobe itself: this session, its
                %% handlers, the janitor and the supervisors.
                Own = own_processes(Hs) ++ beamprobe_vm:pids(St#st.vm),
                _ = [erlang:trace(P, false, [all])
                     || Spec =/= new, P <- Own],
                {ok, St#st{traced = Spec0}}
        end
    catch
        error:badarg ->
            {error, {trace_failed, Procs, Flags -- [{tracer, beamprobe_nif, Res}]},
             St#st{traced = Procs}}
    end.

%% After a reload of the NIF module the VM has dropped it as the tracer of
%% every process (and meta pattern) it traced: trace them again, taking
%% no process another tracer holds now.  What happened in between was
%% never given to beamprobe; the summary counts the reloads
%% (`nif_reloads').  `existing' sessions cannot tell the processes they
%% traced from newer ones: they trace every untraced process again.
retrace(#st{config = C, traced = Traced, handlers = Hs} = St) ->
    %% The message comes from the module's on_load: a call to the module
    %% waits until the load has finished (and the tracer is usable).
    _ = (catch beamprobe_nif:is_loaded()),
    Flags = tracer_flags(St),
    Untraced = fun(P) -> trace_info(P, tracer) =:= {tracer, []} end,
    Own = own_processes(Hs) ++ [St#st.watch | beamprobe_vm:pids(St#st.vm)],
    Ports = lists:member(ports, maps:get(events, C)),
    Targets = case Traced of
                  L when is_list(L) -> L;
                  none -> [];
                  new -> [];
                  _ when Ports -> processes() ++ erlang:ports();
                  _ -> processes()
              end,
    _ = [catch erlang:trace(P, true, Flags)
         || P <- Targets, not lists:member(P, Own), Untraced(P)],
    _ = case Traced =:= all orelse Traced =:= new of
            true ->
                New = case Ports of
                          true -> new;
                          false -> new_processes
                      end,
                Untraced(new) andalso (catch erlang:trace(New, true, Flags));
            false -> false
        end,
    _ = case maps:get(meta, C) of
            true ->
                %% Meta patterns name the tracer too: set them again.
                catch set_patterns(St#st{patterns = [], msg_patterns = []});
            false -> ok
        end,
    ok = beamprobe_watch:rebase(St#st.watch),
    St#st{nif_reloads = St#st.nif_reloads + 1}.

%% beamprobe's own processes, never traced: this session, its handlers,
%% the janitor and the supervisors.
own_processes(Handlers) ->
    [self() | Handlers] ++
        [P || N <- [beamprobe_janitor, beamprobe_sup, beamprobe_session_sup,
                    beamprobe_monitor],
              P <- [whereis(N)], is_pid(P)].

processes_only(all) -> processes;
processes_only(existing) -> existing_processes;
processes_only(new) -> new_processes.

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

%% Names and initial calls of processes, as `process' events.
annotate(#st{res = Res}, Targets) ->
    Items = lists:filtermap(fun describe/1,
                            lists:sublist(Targets, ?ANNOTATE_MAX)),
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

register_janitor(#st{res = Res, patterns = Pats, config = C} = St) ->
    ok = beamprobe_janitor:register_session(self(), Res, Pats,
                                            maps:get(meta, C), claim(C)),
    {ok, St}.

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

%% The watchdog: reports what another tool removes or replaces.
start_watch(#st{res = Res, patterns = Pats, config = C, traced = T} = St) ->
    {ok, W} = beamprobe_watch:start_link(
                self(), #{res => Res, meta => maps:get(meta, C),
                          patterns => Pats, procs => T,
                          relied => case St#st.skipped of
                                        #{calls := Sk} -> Sk;
                                        _ -> []
                                    end,
                          on_tamper => maps:get(on_tamper, C, report)}),
    {ok, St#st{watch = W}}.

%%% ------------------------------------------------------------------------
%%% Stopping
%%% ------------------------------------------------------------------------

%% Stops tracing once; later calls return the same state.
finish(#st{summary = Sum} = St, _Why) when Sum =/= undefined -> St;
finish(#st{res = undefined} = St, _Why) -> St;
finish(#st{res = Res, config = C, started = T0} = St, Why) ->
    %% Flags off first (the node comes first), then the names; the
    %% watchdog before them (it must not see the session's own removal).
    Coexist = coexist(St),
    Targets = live_targets(St),
    St1 = uninstall(St),
    _ = annotate(St, Targets),
    Stats = case nif(fun() -> beamprobe_nif:stop(Res) end) of
                {ok, S} -> S;
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
            matched => St#st.matched,
            nif_reloads => St#st.nif_reloads,
            tag => maps:get(tag, C)},
    _ = [beamprobe_handler:stop(H, Why) || H <- St1#st.handlers],
    Sum1 = case Stats of
               #{nif_error := NE} -> maps:merge(Sum#{nif_error => NE}, Coexist);
               _ -> maps:merge(Sum, Coexist)
           end,
    St1#st{summary = Sum1}.

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

stop_reason(Why, #{stop_reason := none}) -> Why;
stop_reason(_, #{stop_reason := R}) -> R.

%% Undoes a failed install: flags, patterns, the NIF session and the
%% directory it created.
abort(#st{res = Res, created_dir = Created, config = #{dir := Dir}} = St) ->
    St1 = uninstall(St),
    _ = Res =/= undefined andalso nif(fun() -> beamprobe_nif:stop(Res) end),
    [begin unlink(H), exit(H, kill) end || H <- St#st.handlers],
    _ = case Created of
        true ->
            {ok, Files} = file:list_dir(Dir),
            _ = [file:delete(filename:join(Dir, F)) || F <- Files],
            _ = file:del_dir(Dir);
        false -> ok
    end,
    St1#st{res = undefined}.

%% Removes every trace flag and pattern this session set, and releases its
%% claim: the janitor removes the patterns no other session holds.
%% Idempotent.
uninstall(#st{res = Res, traced = Traced, patterns = Pats} = St) ->
    ok = beamprobe_watch:stop(St#st.watch),
    ok = beamprobe_vm:stop(St#st.vm),
    Meta = maps:get(meta, St#st.config),
    ok = remove_flags(Res, Traced),
    ok = beamprobe_janitor:release(self(), Pats, Meta, St#st.msg_patterns),
    _ = case St#st.timer of
        undefined -> ok;
        T -> erlang:cancel_timer(T)
    end,
    St#st{traced = none, patterns = [], msg_patterns = [],
          timer = undefined, watch = undefined, vm = none}.

%% @private
%% Removes the trace flags of every process or port traced by the session
%% whose resource is `Res' (`Traced': a pid list, or `all'/`existing'/`new'
%% for the node, or `none').  Used by the session when it stops and by
%% beamprobe_janitor when a session process dies.
-spec remove_flags(beamprobe_nif:session() | undefined,
                   none | all | new | existing | [pid()]) -> ok.
remove_flags(Res, Traced) ->
    Tracer = {tracer, beamprobe_nif, Res},
    case Traced of
        none -> ok;
        L when is_list(L) -> untrace(L, Tracer);
        _ -> untrace_node(Tracer)
    end.

%% Every process and port whose tracer is this session's, in one pass of
%% the VM each (no trace_info per process: 200 k processes take ~0.1 s).
%% erlang:trace(_, false, [all, {tracer, T}]) leaves a process alone when
%% another tracer that is still enabled traces it (erl_bif_trace.c,
%% start_trace/5): another tool's flags are never touched.  `new' first,
%% so that no process spawned meanwhile gets the tracer; `existing_*', not
%% `all', so that the default flags of another tool are kept.
untrace_node({tracer, M, S} = Tracer) ->
    _ = case trace_info(new, tracer) of
        {tracer, {M, S}} -> catch erlang:trace(new, false, [all]);
        _ -> ok
    end,
    _ = [catch erlang:trace(Which, false, [all, Tracer])
         || Which <- [existing_processes, existing_ports]],
    ok.

untrace(Targets, Tracer) ->
    _ = [catch erlang:trace(P, false, [all, Tracer]) || P <- Targets],
    ok.

%% erlang:trace_pattern(send | 'receive', ...) through apply: its OTP 25
%% spec leaves out message patterns, which dialyzer then calls impossible.
message_pattern(Kind, MS) ->
    erlang:apply(erlang, trace_pattern, [Kind, MS, []]).

%% erlang:trace_info/2 through apply: its OTP 25 spec leaves out tracers
%% of the form {Module, State}, which dialyzer then calls impossible.
trace_info(PidPortFuncEvent, Item) ->
    erlang:apply(erlang, trace_info, [PidPortFuncEvent, Item]).

info_map(#st{config = C, started = T0, matched = M} = St, Stats) ->
    maps:merge(Stats#{seconds => (erlang:monotonic_time(millisecond) - T0) / 1000,
           output => output(C),
           matched => M,
           nif_reloads => St#st.nif_reloads,
           tag => maps:get(tag, C),
           config => C},
               %% skipped, tampered: as in the summary
               coexist(St)).

%% What was left to other tools and what they changed (beamprobe_watch).
coexist(#st{skipped = Sk, watch = W}) ->
    {Found, N} = beamprobe_watch:findings(W),
    #{skipped => case Sk of
                     undefined -> #{procs => [], procs_count => 0,
                                    calls => []};
                     _ -> Sk
                 end,
      tampered => Found, tampered_count => N}.

output(#{dir := undefined, sinks := Sinks}) ->
    [{handler, M} || #{type := handler, module := M} <- Sinks];
output(#{dir := Dir}) -> Dir.
