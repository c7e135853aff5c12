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
%%% ...)', which takes the process's locks: ≈ 4–5 µs a process here; with
%%% a worker per scheduler 200,000 processes take ≈ 1 s, against ≈ 0.05 s
%%% in one pass).  The defaults for new processes (they change no running
%%% process) and existing ports (which never run on a dirty scheduler) are
%%% changed in one pass.  What a one-pass call does for a process traced
%%% by another tracer is kept: it is left alone, and not counted.
-module(beamprobe_each).

-export([trace/3]).

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
    {New, Old, Ports} = parts(Which),
    %% The workers first: spawned before the new-process defaults change,
    %% they are never traced themselves.
    Ws = case Old of
             true -> workers(How, Flags, tracer(Flags));
             false -> []
         end,
    _ = New =/= none andalso erlang:trace(New, How, Flags),
    NP = case Old of
             true -> run(Ws, processes() -- Ws);
             false -> 0
         end,
    NPo = case Ports of
              true -> erlang:trace(existing_ports, How, Flags);
              false -> 0
          end,
    NP + NPo.

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

%% One worker per online scheduler (each call takes the process's locks:
%% ≈ 4 µs here, so 200,000 processes take ≈ 1 s on one scheduler).  A
%% worker is linked to its caller and ends when it is done or the caller
%% dies; the workers leave themselves out (beamprobe never traces its
%% own processes).
workers(How, Flags, Tracer) ->
    Self = self(),
    [spawn_link(fun() ->
                        receive
                            {chunk, Self, Ps} ->
                                Self ! {done, self(), each(Ps, How, Flags,
                                                          Tracer, 0)}
                        end
                end)
     || _ <- lists:seq(1, erlang:system_info(schedulers_online))].

run(Ws, Ps) ->
    _ = [W ! {chunk, self(), C} || {W, C} <- lists:zip(Ws, deal(Ps, Ws))],
    lists:sum([receive {done, W, N} -> N end || W <- Ws]).

%% Ps dealt round-robin into one list per worker.
deal(Ps, Ws) ->
    deal(Ps, [[] || _ <- Ws], []).

deal([], Hands, Done) -> lists:reverse(Done, Hands);
deal(Ps, [], Done) -> deal(Ps, lists:reverse(Done), []);
deal([P | Ps], [H | Hands], Done) -> deal(Ps, Hands, [[P | H] | Done]).

each([], _How, _Flags, _Tracer, N) -> N;
each([P | Ps], How, Flags, Tracer, N) ->
    case wanted(P, How, Tracer) andalso (catch erlang:trace(P, How, Flags)) of
        1 -> each(Ps, How, Flags, Tracer, N + 1);
        _ -> each(Ps, How, Flags, Tracer, N)
    end.

%% Would the one-pass form change P?  (Asked first: the one-process form
%% fails with an error report where the one pass skips quietly.)  A
%% process without flags has no tracer: its flags are read first, which
%% costs a quarter of reading its tracer.
wanted(P, How, Tracer) ->
    case erlang:process_info(P, trace) of
        {trace, 0} -> How;
        {trace, _} -> wanted_traced(P, How, Tracer);
        undefined -> false
    end.

wanted_traced(_P, false, none) -> true;
wanted_traced(P, How, Tracer) ->
    case erlang:trace_info(P, tracer) of
        {tracer, []} -> How;
        {tracer, Tracer} -> true;
        {tracer, Other} -> How andalso not alive(Other);
        undefined -> false
    end.

alive(P) when is_pid(P), node(P) =:= node() -> is_process_alive(P);
alive(P) when is_port(P) -> erlang:port_info(P) =/= undefined;
alive(_) -> true.
