%%% @doc The trace flags of the hub's sessions, for beamprobe_janitor
%%% (which alone calls this, one request at a time): the flags a joining
%%% session needs set on its processes (added to what they have, `arity'
%%% only while no session wants full arguments), the flags a leaving one
%%% had removed where no other session needs them, every flag of the hub
%%% removed when the last session leaves.  A process another tracer holds
%%% is never touched.
-module(beamprobe_janitor_flags).

-export([set_flags/2, remove_flags/2, untrace_node/0, untrace_ours/1,
         pick_up/3]).

-define(HUB, beamprobe_hub).
-define(TRACER, {tracer, beamprobe_nif, ?HUB}).

-import(beamprobe_janitor, [safely/1, trace_info/2]).

%% Clears the flags of process P if the hub's tracer set them; the VM
%% refuses another tracer's process, with an error report.
-spec untrace_ours(pid() | port()) -> ok.
untrace_ours(P) ->
    case beamprobe_each:tracer_of(P) of
        {beamprobe_nif, ?HUB} ->
            _ = (catch erlang:trace(P, false, [all, ?TRACER])),
            ok;
        _ -> ok
    end.

%% Adds the session's flags to its processes (erlang:trace/3 adds to the
%% flags a process has; a process traced by another tracer is skipped by
%% the VM for `all'/`existing'/`new').  `arity' is set only while no live
%% session wants full arguments: a session that does removes it.
-spec set_flags(map(), #{reference() => map()}) -> ok.
set_flags(#{procs := none}, _Ss) -> ok;
set_flags(#{procs := Procs, flags := Flags0, arity := Arity,
            ports := Ports, pid := Self} = E, Ss) ->
    Others = [O || O <- maps:values(Ss), maps:get(pid, O) =/= Self],
    %% Calls of functions another tool's pattern covers (`relied', the
    %% session's own pattern skipped) reach the session too.
    Full = fun(#{calls := C, arity := A, meta := M} = O) ->
                   (C =/= [] orelse maps:get(relied, O, []) =/= [])
                       andalso not A andalso not M
           end,
    case Full(E) of
        true ->
            _ = safely(fun() -> beamprobe_each:trace(existing_processes,
                                                     false, [arity, ?TRACER])
                       end),
            %% The tracer named: on OTP 25 erlang:trace(new, false,
            %% Flags) without it clears every default for new processes
            %% (the other sessions' too), not just Flags.
            _ = new_is_hub() andalso
                safely(fun() -> erlang:trace(new_processes, false,
                                             [arity, ?TRACER]) end);
        false -> ok
    end,
    Flags = Flags0 ++ [arity || Arity, not lists:any(Full, Others)],
    _ = case Flags of
            [] -> ok;
            _ -> add_flags(Procs, Ports, Flags,
                           maps:get(others, E, careful))
        end,
    %% Also the processes of a session started while the hub traces new
    %% processes: its handlers got the defaults when they were spawned.
    untrace_own(Ss).

add_flags(L, _Ports, Flags, _Others) when is_list(L) ->
    _ = [case catch erlang:trace(P, true, Flags ++ [?TRACER]) of
             {'EXIT', _} -> throw({trace_failed, L, Flags});
             _ -> ok
         end || P <- L],
    ok;
%% Existing processes one at a time (beamprobe_each: the VM's one pass
%% can crash OTP 25.2 when a process runs on a dirty scheduler).
add_flags(Spec0, Ports, Flags, Others) ->
    Spec = case Ports of
               true -> Spec0;
               false -> processes_only(Spec0)
           end,
    _ = beamprobe_each:trace(Spec, true, Flags ++ [?TRACER], Others),
    ok.

%% beamprobe never traces itself: its sessions, their handlers, the
%% janitor and the supervisors.
untrace_own(Ss) ->
    %% Only those with our tracer (not a profile run's: beamprobe_profile).
    _ = [untrace_ours(P) || P <- own(Ss)],
    ok.

own(Ss) ->
    [self()] ++
        lists:append([[P | maps:get(handlers, E, []) ++ maps:get(own, E, [])]
                       || #{pid := P} = E <- maps:values(Ss)]) ++
        [P || N <- [beamprobe_sup, beamprobe_session_sup, beamprobe_monitor],
              P <- [whereis(N)], is_pid(P)].

%% Sets the flags of session E (as set_flags/2 would) on those of Pids
%% (processes it skipped at its start because a profile run held them)
%% that nobody else traces now: `{Picked, Still}', Still those a
%% profile's tracer holds again.  A process that exited, that another
%% tool took meanwhile, or that is beamprobe's own is neither.
-spec pick_up(map(), [pid()], #{reference() => map()}) ->
          {[pid()], [pid()]}.
pick_up(#{procs := none}, _Pids, _Ss) -> {[], []};
pick_up(#{flags := Flags0, arity := Arity, pid := Self}, Pids, Ss) ->
    Others = [O || O <- maps:values(Ss), maps:get(pid, O) =/= Self],
    Full = [x || #{calls := C, arity := false, meta := false} = O <- Others,
                 C =/= [] orelse maps:get(relied, O, []) =/= []],
    Flags = Flags0 ++ [arity || Arity, Full =:= []],
    Own = own(Ss),
    lists:foldr(
      fun(P, {Pk, Still}) ->
              case beamprobe_each:tracer_of(P) of
                  {beamprobe_nif, beamprobe_discard} -> {Pk, [P | Still]};
                  T when T =:= [] orelse T =:= {beamprobe_nif, ?HUB} ->
                      case lists:member(P, Own) orelse
                          beamprobe_own:is_handle(P, sensitive) of
                          true -> {Pk, Still};
                          false when Flags =:= [] -> {[P | Pk], Still};
                          false ->
                              case catch erlang:trace(P, true,
                                                      Flags ++ [?TRACER]) of
                                  1 -> {[P | Pk], Still};
                                  _ -> {Pk, Still}
                              end
                      end;
                  _ -> {Pk, Still}
              end
      end, {[], []}, Pids).

processes_only(all) -> processes;
processes_only(existing) -> existing_processes;
processes_only(new) -> new_processes.

new_is_hub() ->
    trace_info(new, tracer) =:= {tracer, {beamprobe_nif, ?HUB}}.

%% Removes the flags of leaving session E that no other session needs on
%% each of its processes.  No other hub session left: everything the hub
%% traces is untraced.
-spec remove_flags(map(), [map()]) -> ok.
remove_flags(#{procs := none}, _Others) -> ok;
remove_flags(E, Others) ->
    %% Sessions without processes (pure meta sessions) need no flag.
    remove_flags1(E, [O || #{procs := P} = O <- Others, P =/= none]).

remove_flags1(#{procs := Procs}, []) ->
    _ = case is_list(Procs) of
            true -> [catch erlang:trace(P, false, [all, ?TRACER])
                     || P <- Procs];
            false -> ok
        end,
    untrace_node();
remove_flags1(#{procs := Procs, flags := Flags} = E, Others) ->
    Global = lists:usort(lists:append([F || #{procs := all, flags := F}
                                                <- Others])),
    Base = Flags -- Global,
    Partial = [O || #{procs := P} = O <- Others, P =/= all],
    PartialNeed = lists:usort(lists:append([F || #{flags := F}
                                                     <- Partial])),
    Shared = Base -- PartialNeed =/= Base,
    _ = case {Base, Procs} of
            {[], _} -> ok;
            {_, L} when is_list(L) ->
                [remove_from(P, Base, Partial) || P <- L];
            _ when not Shared ->
                %% No other session needs any of them anywhere.
                safely(fun() -> beamprobe_each:trace(existing, false,
                                                     Base ++ [?TRACER])
                       end);
            _ ->
                [remove_from(P, Base, Partial)
                 || P <- processes() ++ erlang:ports(), includes(E, P)]
        end,
    %% Defaults for new processes.
    NewNeed = lists:usort(lists:append([F || #{procs := P, flags := F}
                                                 <- Others,
                                             P =:= all orelse P =:= new])),
    case (Procs =:= all orelse Procs =:= new) andalso new_is_hub() of
        true ->
            case Flags -- NewNeed of
                [] -> ok;
                %% (The tracer named: see set_flags/2.)
                R -> _ = safely(fun() -> erlang:trace(new, false,
                                                      R ++ [?TRACER]) end),
                     ok
            end;
        false -> ok
    end.

remove_from(P, Base, Partial) ->
    Need = lists:append([F || #{flags := F} = O <- Partial, includes(O, P)]),
    case Base -- Need of
        [] -> ok;
        R -> _ = (catch erlang:trace(P, false, R ++ [?TRACER])), ok
    end.

includes(#{procs := all}, _) -> true;
includes(#{procs := L}, P) when is_list(L) -> lists:member(P, L);
includes(#{procs := existing, snapshot := S}, P) -> is_map_key(P, S);
includes(#{procs := new, snapshot := S}, P) -> not is_map_key(P, S);
includes(_, _) -> false.

%% Every process and port whose tracer is the hub (processes one at a
%% time, beamprobe_each: the VM's one pass can crash OTP 25.2).  A process
%% another tracer traces is left alone: another tool's flags are never
%% touched.  `new' first, so that no process spawned meanwhile gets the
%% tracer.
-spec untrace_node() -> ok.
untrace_node() ->
    _ = new_is_hub() andalso (catch erlang:trace(new, false, [all])),
    _ = (catch beamprobe_each:trace(existing, false, [all, ?TRACER])),
    ok.
