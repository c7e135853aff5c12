%%% @doc `erlang:trace/3' on every process, one process at a time.
%%%
%%% On OTP 25.2 the forms that change many processes in one pass of the
%%% VM (`all', `existing', `processes', `existing_processes') also change
%%% the tracer of a process that is running on a dirty scheduler (a dirty
%%% NIF: file I/O, ...) without its lock, and the VM can crash:
%%% `lookup_tracer_nif' on a tracer that became `[]', on a dirty I/O
%%% scheduler (erlang/otp#5984, #6448, fixed in 25.3 by #6495; #8286,
%%% fixed in 2024; Debian's 25.2.3 has neither).  beamprobe's CI hit it
%%% once (SIGSEGV in the overlap suite, between two sessions on `procs =>
%%% all').  Measured here (docs/design.md, "Dirty schedulers"), 4 or 8
%%% processes calling `file:read_file_info/1' (a dirty I/O NIF) in a loop
%%% while another process sets `send' on every process and clears it:
%%%
%%% <ul>
%%% <li>the do-nothing NIF tracer, set and cleared in one pass each:
%%%     SIGSEGV in 4 runs of 4, each within 22 s;</li>
%%% <li>beamprobe's tracer, set one process at a time and cleared in one
%%%     pass: SIGSEGV within 2 s;</li>
%%% <li>beamprobe's tracer, both one process at a time
%%%     (`beamprobe_safety_SUITE' `dirty_scheduler_toggles'): no crash in
%%%     25 s (18,674 set/clear rounds).</li>
%%% </ul>
%%%
%%% So beamprobe changes existing processes one by one (`erlang:trace(Pid,
%%% ...)', which takes the process's locks), by one worker.  The defaults
%%% for new processes (they change no running process) and existing ports
%%% (which never run on a dirty scheduler) are changed in one pass.  What
%%% a one-pass call does for a process traced by another tracer is kept:
%%% it is left alone, and not counted.
%%%
%%% Which tracer a process has is asked only where needed:
%%% `erlang:trace_info(Pid, tracer)' takes the VM's code-modification
%%% permission and costs ≈ 3.9 µs a process here, against ≈ 0.4–0.8 µs
%%% for clearing its flags and ≈ 0.15–0.45 µs for `process_info(Pid,
%%% trace)'.  Turning flags off with our tracer named, the VM itself
%%% refuses a process whose tracer is another live one (`badarg', and the
%%% error report "can only have one tracer per process"), so on a node of
%%% more than `?CAREFUL_UP_TO' processes the tracer is asked, when turning
%%% off, only of processes already known to be another tool's (found by
%%% an earlier call in the same process: the janitor, whose every start
%%% asks); any other is cleared at once, and one the VM refuses becomes
%%% known.  Turning on, the same when the caller gives the processes
%%% other tools hold ({@link trace/4}).  Measured (docs/design.md, "Dirty
%%% schedulers"): a dead owner's
%%% `procs => existing' session on 500,000 processes is cleared in
%%% ≈ 0.6 s that way, against ≈ 2 s asking each.
-module(beamprobe_each).

-export([trace/3, trace/4, tracer_of/1]).

%% Nodes with at most this many processes: the tracer of every traced
%% process is asked before it is turned off (no error report ever).
-define(CAREFUL_UP_TO, 20000).
%% The caller's process-dictionary key of the processes known to be
%% traced by another tool.
-define(KNOWN, {?MODULE, others}).

-type which() :: all | existing | new | processes | existing_processes
               | new_processes.
-export_type([which/0]).

%% @doc As `erlang:trace(Which, How, Flags)', existing processes one at a
%% time.  With `{tracer, ...}' in `Flags', a process whose tracer is
%% another one is left alone (turning on: another live tracer; turning
%% off: any other); without it, turning off clears every process.  New
%% processes are done first, so that a process spawned meanwhile is in
%% the snapshot of existing ones.  Returns the number of processes and
%% ports changed.
-spec trace(which(), boolean(), [term()]) -> non_neg_integer().
trace(Which, How, Flags) ->
    trace(Which, How, Flags, careful).

%% @doc As {@link trace/3}; turning on with `{tracer, ...}' in `Flags' on
%% a node of more than 20,000 processes, `Others' (every process another
%% tool traced a moment ago, as the caller just found: a session's
%% `beamprobe_skip:skip/2') spares asking each traced process its tracer:
%% a process not among them is changed at once, and the VM refuses one
%% whose tracer is another live one (with its error report: a process
%% another tool started tracing since).  `careful': ask each.
-spec trace(which(), boolean(), [term()], careful | [pid()]) ->
          non_neg_integer().
trace(Which, How, Flags, Others) ->
    {New, Old, Ports} = parts(Which),
    %% The worker first: spawned before the new-process defaults change,
    %% it is never traced itself.
    W = case Old of
            true -> worker(How, Flags, tracer(Flags));
            false -> none
        end,
    %% A call that raises (erlang:trace/3 refusing a tracer module being
    %% loaded again: the janitor's retrace after a NIF reload) ends the
    %% worker too: it waited for its `go' for good, linked to the
    %% janitor (beamprobe_lifecycle_SUITE:nif_reload, now and then).
    try
        _ = New =/= none andalso erlang:trace(New, How, Flags),
        NP = case Old of
                 true -> run(W, mode(How, tracer(Flags), Others));
                 false -> 0
             end,
        NPo = case Ports of
                  true -> erlang:trace(existing_ports, How, Flags);
                  false -> 0
              end,
        NP + NPo
    after
        end_worker(W)
    end.

%% (A worker that has answered has ended; unlinked first, so that the
%% kill does not reach the caller.)
end_worker(none) -> ok;
end_worker(W) ->
    unlink(W),
    exit(W, kill),
    ok.

%% The new part (done in one pass), whether existing processes are
%% changed, whether existing ports are.
parts(all) -> {new, true, true};
parts(existing) -> {none, true, true};
parts(new) -> {new, false, false};
parts(processes) -> {new_processes, true, false};
parts(existing_processes) -> {none, true, false};
parts(new_processes) -> {new_processes, false, false}.

%% The tracer named in the flags, as trace_info/2 reports it.
tracer(Flags) ->
    case [T || T <- Flags, is_tuple(T), element(1, T) =:= tracer] of
        [{tracer, M, S}] -> {M, S};
        [{tracer, P}] -> P;
        [] -> none
    end.

%% One worker, linked to its caller, that ends when it is done or the
%% caller dies; it leaves itself out (beamprobe never traces its own
%% processes).  One, not one per scheduler: each `erlang:trace/3' and
%% `erlang:trace_info/2' call takes the VM's code-modification
%% permission, so a second worker only makes the two wait and retry
%% (measured: 200,000 processes cleared in 350–380 ms by one worker,
%% 420–470 ms by two, on 2 schedulers).
%% The worker lists the processes itself, when told to (after the
%% defaults for new processes changed): 500,000 pids are not copied.
worker(How, Flags, Tracer) ->
    Self = self(),
    %% (sensitive: its erlang:trace/3 calls, one per process, are no
    %% events of a session tracing lists:keyfind/3 meanwhile)
    beamprobe_own:spawn_link(
      fun() ->
              receive
                  {go, Self, Mode} ->
                      Ps = processes() -- [self()],
                      Self ! {done, self(),
                              each(Ps, How, Flags, Tracer, Mode, {0, []})}
              end
      end).

%% careful: the tracer of every traced process is asked first; {fast,
%% Known}: only of those in Known (our tracer named: the VM refuses
%% another tool's process itself).  Turning on, only with the other
%% tools' processes given by the caller.
mode(How, Tracer, Others) when Tracer =/= none,
                               not How orelse is_list(Others) ->
    case erlang:system_info(process_count) > ?CAREFUL_UP_TO of
        true when is_list(Others) ->
            {fast, maps:merge(known(), maps:from_keys(Others, true))};
        true -> {fast, known()};
        false -> careful
    end;
mode(_How, _Tracer, _Others) -> careful.

run(W, Mode) ->
    W ! {go, self(), Mode},
    {N, Found} = receive {done, W, R} -> R end,
    learn(Mode, Found),
    N.

%% The processes known to be another tool's: those found by this pass,
%% and (after a fast pass, which asks only the known ones) the known ones
%% still alive.
known() ->
    case get(?KNOWN) of
        undefined -> #{};
        K -> K
    end.

learn(careful, Found) ->
    put(?KNOWN, maps:from_keys(Found, true));
learn({fast, Known}, Found) ->
    Alive = maps:filter(fun(P, _) -> is_process_alive(P) end, Known),
    put(?KNOWN, maps:merge(Alive, maps:from_keys(Found, true))).

%% Returns {changed, [processes found traced by another tool]}.
each([], _How, _Flags, _Tracer, _Mode, Acc) -> Acc;
each([P | Ps], How, Flags, Tracer, Mode, {N, Found} = Acc) ->
    case wanted(P, How, Tracer, Mode) of
        false -> each(Ps, How, Flags, Tracer, Mode, Acc);
        other -> each(Ps, How, Flags, Tracer, Mode, {N, [P | Found]});
        Why ->
            case catch erlang:trace(P, How, Flags) of
                1 -> each(Ps, How, Flags, Tracer, Mode, {N + 1, Found});
                {'EXIT', {badarg, _}} when Why =:= unasked ->
                    %% The VM refused it: another tracer's (or gone).
                    each(Ps, How, Flags, Tracer, Mode,
                         {N, [P || is_process_alive(P)] ++ Found});
                _ -> each(Ps, How, Flags, Tracer, Mode, Acc)
            end
    end.

%% @doc The tracer of local process `P' as `erlang:trace_info(P, tracer)'
%% gives it (`[]': none), or `undefined' if `P' is gone.  A process
%% without flags has no tracer: its flags are read first (≈ 0.2 µs, where
%% its tracer costs ≈ 3.9 µs, serialised in the VM: 2 s for 500,000
%% processes).
-spec tracer_of(pid()) -> term().
tracer_of(P) ->
    case flagged(P) of
        true -> tracer_info(P);
        false -> [];
        undefined -> undefined
    end.

flagged(P) ->
    case erlang:process_info(P, trace) of
        {trace, 0} -> false;
        {trace, _} -> true;
        undefined -> undefined
    end.

%% erlang:trace_info/2 through apply: its OTP 25 spec leaves out tracers
%% of the form {Module, State}, which dialyzer then calls impossible.
tracer_info(P) ->
    case erlang:apply(erlang, trace_info, [P, tracer]) of
        {tracer, T} -> T;
        undefined -> undefined
    end.

%% Would the one-pass form change P: true, unasked (probably: its tracer
%% was not asked, fast mode), false, or other (it is another tracer's)?
%% (Asked first: the one-process form fails with an error report where
%% the one pass skips quietly.)
wanted(P, How, Tracer, Mode) ->
    case flagged(P) of
        false -> How;
        true -> wanted_traced(P, How, Tracer, Mode);
        undefined -> false
    end.

wanted_traced(_P, false, none, _Mode) -> true;
wanted_traced(P, _How, _Tracer, {fast, Known}) when not is_map_key(P, Known) ->
    unasked;
wanted_traced(P, How, Tracer, _Mode) ->
    case tracer_info(P) of
        [] -> How;
        Tracer -> true;
        undefined -> false;
        Other ->
            case How andalso not alive(Other) of
                true -> true;
                false -> other
            end
    end.

alive(P) when is_pid(P), node(P) =:= node() -> is_process_alive(P);
alive(P) when is_port(P) -> erlang:port_info(P) =/= undefined;
alive(_) -> true.
