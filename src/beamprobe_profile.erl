%%% @doc Profile mode: the implementation of {@link beamprobe:profile/2}.
%%%
%%% No event is produced.  For a bounded time the VM's own per-function
%%% counters count: `call_count' (every call, in every process, an atomic
%%% increment, no process flag needed) and `call_time' (calls and time per
%%% function and per process, kept for processes that carry the `call'
%%% trace flag).  At the end the counters are read and removed, and the
%%% table is printed in `beamprobe stats'' layout.
%%%
%%% Safety: the run happens in a worker process that monitors the caller
%%% and restores everything it set when the time is up, when the caller
%%% dies, or when it fails; counters another tool holds (cprof, eprof,
%%% fprof, tprof, another profile run) are never touched; the trace
%%% patterns of running sessions (local, meta, match specs) are never
%%% touched (trace_pattern's `call_count'/`call_time' flags are separate
%%% breakpoints); the `call' flag is set only on processes nobody else
%%% traces, with a tracer that discards every event (`{beamprobe_nif,
%%% beamprobe_discard}': other tools' patterns do not run in them), not on
%%% the processes they spawn (those take the `new' defaults of whoever
%%% set them), and cleared at the end.  If the worker dies, its guard (a
%%% process of the run that outlives it) restores what it set, also when
%%% the caller died with it.  Sessions started during the run skip the
%%% processes it gave the flag; when it ends (either way) they take them
%%% (beamprobe_janitor:profile_ended/0).
%%% One profile runs at a time (the worker is registered).  A
%%% `{beamprobe_profile, stop}' message to the registered worker ends the
%%% run early, with its table (how `bin/beamprobe profile' stops on ^C).
-module(beamprobe_profile).

-export([profile/2, to_json/1, format/1]).

-define(NAME, beamprobe_profile).
-define(GUARD, beamprobe_profile_guard).
-define(OPTS, [time, timing, per_process, procs, sort, top, json, print,
               io_server, force, max_functions]).
-define(DEFAULT_MS, 5000).
-define(MAX_MS, 3600000).          % an hour: always bounded
-define(MAX_FUNCTIONS, 10000).
-define(PATTERN_FORMS,
        "a pattern is a string (\"m:f/2\", \"m:f(A, _) -> return\", "
        "Elixir's \"M.f/2\"), a tuple {M, F, A} (F or A may be '_'), or a "
        "list of these").
-define(UNAVAILABLE,
        "total (inclusive) time, max, p50, p99 and open calls need events: "
        "run a trace (beamprobe:start/1, bin/beamprobe stats) for them").

-type row() :: #{function := binary(), mfa := mfa(), calls := non_neg_integer(),
                 timed_calls := non_neg_integer(), own_ns := non_neg_integer(),
                 mean_ns := non_neg_integer() | null,
                 processes => [#{pid := pid(), calls := non_neg_integer(),
                                 own_ns := non_neg_integer()}]}.
-type result() :: #{functions := [row()], functions_called := non_neg_integer(),
                    total_calls := non_neg_integer(),
                    total_timed_calls := non_neg_integer(),
                    total_own_ns := non_neg_integer(), seconds := float(),
                    timed_processes := non_neg_integer(),
                    untimed_processes := non_neg_integer(),
                    skipped := [mfa()], lost := [mfa()],
                    not_loaded := [module()],
                    unavailable := string(),
                    foreign_trace_messages := non_neg_integer(),
                    sort := calls | own | mean}.
-export_type([result/0]).

%% @doc See {@link beamprobe:profile/2}.
-spec profile(term(), term()) -> {ok, result() | binary()} | {error, term()}.
profile(Patterns, Opts) when is_map(Opts) ->
    case check_opts(Opts) of
        ok ->
            O0 = maps:merge(defaults(), Opts),
            O = O0#{procs := case maps:get(procs, O0) of
                                 all -> all;
                                 Ps -> lists:usort(Ps)
                             end},
            case mfas(Patterns, maps:get(force, O)) of
                {ok, [], [_ | _] = NotLoaded} ->
                    {error, {not_loaded, NotLoaded}};
                {ok, MFAs, NotLoaded} -> run(MFAs, O#{not_loaded => NotLoaded});
                {error, _} = E -> E
            end;
        {error, _} = E -> E
    end;
profile(Patterns, Opts) when is_list(Opts) ->
    %% A proplist, as calls/3 takes (the first of a key wins, as with
    %% proplists:get_value/2; an atom is {Atom, true}): it was refused as
    %% `bad value for option opts'.
    case beamprobe_shell_opts:proplist(Opts) of
        {ok, Pairs} -> profile(Patterns, maps:from_list(Pairs));
        error -> {error, {bad_option, opts, Opts}}
    end;
profile(_, Opts) ->
    {error, {bad_option, opts, Opts}}.

defaults() ->
    #{time => ?DEFAULT_MS, timing => true, per_process => false, procs => all,
      sort => own, top => infinity, json => false, print => true,
      io_server => group_leader(), force => false,
      max_functions => ?MAX_FUNCTIONS}.

check_opts(Opts) ->
    case [K || K <- maps:keys(Opts), not lists:member(K, ?OPTS)] of
        [K | _] -> {error, {unknown_option, K}};
        [] ->
            case [{K, V} || K <- ?OPTS, {ok, V} <- [maps:find(K, Opts)],
                            not opt_ok(K, V)] of
                [] -> io_server_there(Opts);
                [{K, V} | _] -> {error, {bad_option, K, V}}
            end
    end.

%% The table goes to an io server that is there, checked before the run:
%% one that was not (a name nobody has, a dead pid) or the caller itself
%% (`io_server => self()': no process answers its own io request) was
%% found only when printing, and the whole run's result was lost with
%% `{error, {io_server, ...}}'.  A remote pid is taken as it is (asking
%% its node would block).
io_server_there(#{print := false}) -> ok;
io_server_there(#{io_server := Io}) ->
    Pid = case Io of
              P when is_pid(P) -> P;
              Name -> whereis(Name)
          end,
    case is_pid(Pid) andalso Pid =/= self() andalso
        (node(Pid) =/= node() orelse is_process_alive(Pid)) of
        true -> ok;
        false -> {error, {bad_option, io_server, Io}}
    end;
io_server_there(_) -> ok.

opt_ok(time, T) -> is_integer(T) andalso T > 0 andalso T =< ?MAX_MS;
opt_ok(procs, all) -> true;
%% length/1 in a guard: an improper list fails it (lists:all/2 crashed).
%% Local pids: another node's made the worker crash (trace_info badarg).
opt_ok(procs, P) when length(P) > 0 ->
    lists:all(fun(Pid) -> is_pid(Pid) andalso node(Pid) =:= node() end, P);
opt_ok(procs, _) -> false;
opt_ok(sort, S) -> lists:member(S, [calls, own, mean]);
opt_ok(top, T) -> T =:= infinity orelse (is_integer(T) andalso T > 0);
opt_ok(io_server, Io) -> is_pid(Io) orelse (is_atom(Io) andalso Io =/= undefined);
opt_ok(max_functions, N) -> is_integer(N) andalso N > 0;
opt_ok(_, B) -> is_boolean(B).   % timing, per_process, json, print, force

%%% ---- patterns -------------------------------------------------------------

%% {ok, MFAs, NotLoaded}: the functions the patterns name, each {M, F, A}
%% exactly, of loaded modules; NotLoaded, the modules named that exist but
%% are not loaded.  Nothing is loaded here: loading runs the module's
%% on_load and changes the node a profile only observes.
mfas(P, Force) when is_tuple(P); is_binary(P) -> mfas([P], Force);
mfas([C | _] = P, Force) when is_integer(C) -> mfas([P], Force);
%% length/1 in a guard: an improper list is a bad pattern (the list
%% comprehension crashed with bad_generator).
mfas(L, Force) when length(L) > 0 ->
    try
        Found = [expand(one(P, Force), Force) || P <- L],
        MFAs = lists:usort(lists:append([Fs || {ok, Fs} <- Found])),
        {ok, MFAs, lists:usort([M || {not_loaded, M} <- Found])}
    catch throw:{?MODULE, E} -> {error, E}
    end;
mfas(P, _) -> {error, {bad_pattern, P, ?PATTERN_FORMS}}.

one({M, F, A} = MFA, Force) when (is_atom(M)), is_atom(F),
                                 (A =:= '_' orelse
                                  (is_integer(A) andalso A >= 0 andalso A =< 255)) ->
    M =:= '_' andalso not Force andalso throw({?MODULE, {force_required, MFA}}),
    MFA;
one(P, Force) when is_list(P); is_binary(P) ->
    case beamprobe_pattern:parse(P, #{force => Force}) of
        {ok, #{kind := call, mfa := MFA, match_spec := MS, actions := Acts}} ->
            case Acts =:= [] andalso lists:all(fun plain_clause/1, MS) of
                true -> MFA;
                false -> throw({?MODULE, {profile_match_spec, P}})
            end;
        {ok, _} -> throw({?MODULE, {bad_pattern, P, "not a call pattern"}});
        {error, {Col, Msg}} -> throw({?MODULE, {bad_pattern, P, Col, Msg}})
    end;
one(P, _) -> throw({?MODULE, {bad_pattern, P, ?PATTERN_FORMS}}).

%% Counters count every call: a clause that selects (a literal argument, a
%% repeated variable, a guard) or acts (return, stack) cannot apply.
plain_clause({'_', [], []}) -> true;
plain_clause({Args, [], []}) when is_list(Args) ->
    Vars = [V || V <- Args, is_atom(V), V =/= '_', is_var(V)],
    length(Vars) =:= length(lists:usort(Vars)) andalso
        lists:all(fun(V) -> V =:= '_' orelse is_var(V) end, Args);
plain_clause(_) -> false.

is_var(V) when is_atom(V) ->
    case atom_to_list(V) of
        [$$ | N] -> N =/= [] andalso lists:all(fun(C) -> C >= $0 andalso C =< $9 end, N);
        _ -> false
    end;
is_var(_) -> false.

expand({'_', F, A} = MFA, Force) ->
    %% Every loaded module's matching functions; no match at all is the
    %% error (naming the pattern, not the first module without one).
    Mods = [M || {M, _} <- code:all_loaded()],
    Fs = lists:append([try expand({M, F, A}, Force) of
                           {ok, L} -> L;
                           {not_loaded, _} -> []   % unloaded meanwhile
                       catch throw:{?MODULE, _} -> []
                       end || M <- lists:sort(Mods)]),
    case Fs of
        [] -> throw({?MODULE, {no_match, MFA}});
        _ -> {ok, Fs}
    end;
expand({M, F, A} = MFA, _Force) ->
    case {erlang:module_loaded(M), code:which(M)} of
        {true, _} ->
            %% get_module_info/2 fails if M is purged meanwhile.
            Fs = try [{M, F1, A1}
                      || {F1, A1} <- erlang:get_module_info(M, functions),
                         F =:= '_' orelse F =:= F1,
                         A =:= '_' orelse A =:= A1]
                 catch error:badarg -> not_loaded
                 end,
            case Fs of
                not_loaded -> {not_loaded, M};
                [] -> throw({?MODULE, {no_match, MFA}});
                _ -> {ok, Fs}
            end;
        {false, non_existing} -> throw({?MODULE, {no_such_module, M}});
        {false, _} -> {not_loaded, M}
    end.

%%% ---- the run --------------------------------------------------------------

run(MFAs, #{max_functions := Max, force := Force} = O)
  when length(MFAs) > Max, not Force ->
    _ = O,
    {error, {too_many_functions, length(MFAs), Max}};
run(MFAs, O) ->
    start_worker(MFAs, O).

%% Checked by the registered worker, so that two profile runs cannot both
%% find a function free.
free(MFAs, O) ->
    Held = [MFA || MFA <- MFAs, held(MFA)],
    case {Held, maps:get(force, O)} of
        {[_ | _], false} -> {error, {counters_in_use, Held}};
        _ -> {ok, MFAs -- Held, Held}
    end.

%% Another tool (cprof, eprof, fprof, tprof, a profile run) counts here.
held(MFA) ->
    erlang:trace_info(MFA, call_count) =/= {call_count, false} orelse
        erlang:trace_info(MFA, call_time) =/= {call_time, false}.

start_worker(MFAs, O) ->
    Caller = self(),
    {Pid, Ref} = spawn_opt(fun() -> worker(Caller, MFAs, O) end,
                           [monitor, {priority, high}]),
    collect(Pid, Ref, O, none).

collect(Pid, Ref, O, Guard) ->
    receive
        {Pid, taken, G} ->
            collect(Pid, Ref, O, G);
        {Pid, Result} ->
            erlang:demonitor(Ref, [flush]),
            report(Result, O);
        {'DOWN', Ref, process, Pid, Why} ->
            %% Killed before its own clean-up: its guard restores what it
            %% set (else its counters and flags would stay, and refuse
            %% every later run); returns once that is done.
            _ = is_pid(Guard) andalso wait_down(Guard),
            {error, {profile_failed, Why}}
    end.

wait_down(P) ->
    R = erlang:monitor(process, P),
    receive {'DOWN', R, process, P, _} -> true end.

%% The run's guard: restores the counters and flags the worker set if the
%% worker dies before restoring them itself (killed), whether or not its
%% caller is still there (both killed at once left them for good, and
%% every later run was refused with counters_in_use).  Registered while
%% it lives: no run starts before it has restored.  Not linked: it
%% outlives the worker; sensitive: nothing records it.
start_guard(MFAs, Tracer, Timing) ->
    W = self(),
    G = beamprobe_own:spawn(fun() ->
                      ok = beamprobe_own:sensitive(),
                      R = erlang:monitor(process, W),
                      guard(W, R, MFAs, Tracer, Timing)
              end),
    true = register(?GUARD, G),
    G.

guard(W, R, MFAs, Tracer, Timing) ->
    receive
        {W, done} -> ok;                             % restored by itself
        {'DOWN', R, process, W, normal} -> ok;
        {'DOWN', R, process, W, _} ->
            set(MFAs, false, Timing),
            Tracer =:= none orelse unflag(Tracer)
    end.

report({ok, Res}, #{json := true} = O) ->
    J = to_json(Res),
    print(O, [J, $\n], J);
report({ok, Res}, O) ->
    print(O, format(Res), Res);
report({error, _} = E, _) -> E.

%% An io server that is gone or refuses: an error that says so (the
%% counters are already restored).
print(#{print := false}, _, Res) -> {ok, Res};
print(#{io_server := Io}, Text, Res) ->
    try io:put_chars(Io, Text) of
        ok -> {ok, Res}
    catch _:R -> {error, {io_server, Io, R}}
    end.

worker(Caller, MFAs0, O) ->
    CRef = erlang:monitor(process, Caller),
    Reply = try register(?NAME, self()) of
                true ->
                    case {whereis(?GUARD), free(MFAs0, O)} of
                        {G, _} when is_pid(G) ->
                            %% The last run's guard is still restoring.
                            {error, {profile_running, G}};
                        {_, {ok, MFAs, Held}} ->
                            %% What to restore if this worker dies.
                            Tracer = case maps:get(timing, O) of
                                         true -> tracer(self());
                                         false -> none
                                     end,
                            Guard = start_guard(MFAs, Tracer,
                                                maps:get(timing, O)),
                            Caller ! {self(), taken, Guard},
                            try profile_locked(CRef, MFAs, Held, Tracer, O)
                            after
                                %% Restored: the guard ends (and its name
                                %% is free) before the caller is told.
                                Guard ! {self(), done},
                                wait_down(Guard)
                            end;
                        {_, {error, _} = E} -> E
                    end
            catch error:badarg ->
                    {error, {profile_running, whereis(?NAME)}}
            end,
    Caller ! {self(), Reply}.

profile_locked(CRef, MFAs, Held, Tracer, #{time := Ms} = O) ->
    Self = self(),
    Timing = maps:get(timing, O),
    %% Computed once, before any counter counts: computed again to pause
    %% them, its list comprehensions and lists:sort/usort calls were
    %% counted (1.9 of 2 million calls of a '_' profile were its own).
    Groups = groups(MFAs),
    try
        {Timed, Untimed} = case Timing of
                               true -> flag(maps:get(procs, O), Tracer);
                               false -> {0, 0}
                           end,
        %% The window the counters may count in: from the first set to
        %% the last pause.  Not from before the flags: on a node of
        %% 300,000 processes a 500 ms run said "over 0.83 s" (the flags
        %% took 0.33 s, counting nothing).
        T0 = erlang:monotonic_time(),
        set_groups(Groups, true, Timing),
        Timer = erlang:start_timer(Ms, Self, done),
        Foreign = wait(CRef, Timer, 0),
        set_groups(Groups, pause, Timing),
        Secs = erlang:convert_time_unit(erlang:monotonic_time() - T0,
                                        native, microsecond) / 1.0e6,
        {Rows, Lost} = read(MFAs, Timing, maps:get(per_process, O), [], []),
        {ok, result(Rows, O, #{seconds => Secs, timed_processes => Timed,
                               untimed_processes => Untimed,
                               skipped => Held, lost => Lost,
                               not_loaded => maps:get(not_loaded, O, []),
                               foreign_trace_messages => Foreign})}
    catch
        throw:caller_down -> {error, caller_down}
    after
        set_groups(Groups, false, Timing),
        Timing andalso unflag(Tracer),
        drain()
    end.

%% The tracer of the processes given the call flag: beamprobe's, in a
%% state that discards every event (no message, and other tools' local or
%% global patterns do not run in them: no return_trace frames, no
%% messages); this worker where the NIF is not loaded (it then receives
%% the events of those patterns, and drops them).
tracer(Self) ->
    case beamprobe_nif:loaded() of
        ok -> {tracer, beamprobe_nif, beamprobe_discard};
        _ -> {tracer, Self}
    end.

%% The call flag (call_time counts only in processes that carry it) on every
%% process nobody traces.  Not set_on_spawn: the processes they spawn take
%% the `new' defaults of other tools and sessions, not this run's flags.
%% Not on this worker: its own calls are not timed.
flag(Procs, Tracer) ->
    %% A follow session (beamprobe_follow) traces every process nobody
    %% traces, and a process this run takes first it does not record: the
    %% run times none while one is there (all counted, untimed).  The
    %% claim is checked after this worker's name, as the follow session
    %% checks this name after its claim: of the two started at once, one
    %% sees the other.
    case whereis(beamprobe_follow_session) of
        undefined -> flag1(Procs, Tracer);
        _ when Procs =:= all -> {0, erlang:system_info(process_count)};
        _ -> {0, length([P || P <- Procs, P =/= self()])}
    end.

flag1(all, Tracer) ->
    %% One process at a time (beamprobe_each: the VM's one pass can crash
    %% OTP 25.2).
    N = beamprobe_each:trace(existing_processes, true, [call, Tracer]),
    %% Only if it is ours: this worker may have a session's tracer (its
    %% `new' defaults), and the VM refuses another's with an error report.
    _ = beamprobe_each:tracer_of(self()) =:= tracer_info(Tracer) andalso
        (catch erlang:trace(self(), false, [call, Tracer])),
    {max(0, N - 1), max(0, erlang:system_info(process_count) - N)};
flag1(Pids, Tracer) ->
    lists:foldl(fun(P, {T, U}) ->
                        case erlang:trace_info(P, tracer) of
                            {tracer, []} ->
                                try erlang:trace(P, true, [call, Tracer]) of
                                    _ -> {T + 1, U}
                                catch error:badarg -> {T, U + 1}
                                end;
                            _ -> {T, U + 1}   % gone, or another tracer's
                        end
                end, {0, 0}, [P || P <- Pids, P =/= self()]).

%% Tracer as erlang:trace_info/2 gives it.
tracer_info({tracer, M, S}) -> {M, S};
tracer_info({tracer, P}) -> P.

%% Only the processes whose tracer is Tracer are changed.  Then the
%% sessions that skipped them because this run held them take them
%% (beamprobe_janitor:pick_up/2): a profile is bounded, a session with
%% `procs => all' may run longer.
unflag(Tracer) ->
    _ = beamprobe_each:trace(existing_processes, false, [call, Tracer]),
    ok = beamprobe_janitor:profile_ended(),
    true.

%% The counters of MFAs, set, paused or removed: one trace_pattern call
%% per module whose every function is profiled ({M, '_', '_'}), else per
%% function, both counters in one call.  Each call waits for the VM's
%% thread progress: on a busy node 507 functions one by one (two calls
%% each) took 8 s, and each function counted over a different window.
%% No lists:foreach: a profiled lists would count the profiler's calls.
set(MFAs, How, Timing) ->
    set_groups(groups(MFAs), How, Timing).

set_groups(Groups, How, Timing) ->
    Flags = case Timing of
                true -> [call_count, call_time];
                false -> [call_count]
            end,
    set_each(Groups, How, Flags).

set_each([], _, _) -> ok;
set_each([MFA | R], How, Flags) ->
    _ = erlang:trace_pattern(MFA, How, Flags),
    set_each(R, How, Flags).

%% MFAs (sorted) as {M, '_', '_'} where they are all of M's functions.
groups(MFAs) ->
    %% One pass (a filter of every function per module was quadratic: a
    %% forced '_' profile names every function of every loaded module).
    ByMod = lists:foldl(fun({M, _, _} = X, Acc) ->
                                maps:update_with(M, fun(L) -> [X | L] end,
                                                 [X], Acc)
                        end, #{}, MFAs),
    lists:append([group(M, Fs) || {M, Fs} <- lists:sort(maps:to_list(ByMod))]).

group(M, Fs) ->
    All = try lists:sort([{M, F, A} || {F, A} <- erlang:get_module_info(M, functions)])
          catch _:_ -> []
          end,
    case All =/= [] andalso lists:sort(Fs) =:= All of
        true -> [{M, '_', '_'}];
        false -> Fs
    end.

wait(CRef, Timer, N) ->
    receive
        {timeout, Timer, done} -> N;
        {?NAME, stop} -> N;                     % ended early (attach's ^C)
        {'DOWN', CRef, process, _, _} -> throw(caller_down);
        M when element(1, M) =:= trace; element(1, M) =:= trace_ts ->
            wait(CRef, Timer, N + 1)
    end.

drain() ->
    receive M when element(1, M) =:= trace; element(1, M) =:= trace_ts ->
            drain()
    after 0 -> ok
    end.

%% {Rows, Lost}: Lost, the functions whose counter is gone (their module
%% loaded again, or removed, during the run): their calls are unknown.
read([], _, _, Acc, Lost) -> {Acc, lists:reverse(Lost)};
read([MFA | R], Timing, PerProc, Acc, Lost) ->
    case erlang:trace_info(MFA, call_count) of
        {call_count, C} when is_integer(C) ->
            read(R, Timing, PerProc, row(MFA, C, Timing, PerProc, Acc), Lost);
        _ -> read(R, Timing, PerProc, Acc, [MFA | Lost])
    end.

row(MFA, Calls, Timing, PerProc, Acc) ->
    Procs = case Timing andalso erlang:trace_info(MFA, call_time) of
                {call_time, L} when is_list(L) -> L;
                _ -> []
            end,
    Own = lists:sum([S * 1000000000 + Us * 1000 || {_, _, S, Us} <- Procs]),
    TCalls = lists:sum([C || {_, C, _, _} <- Procs]),
    Row0 = #{function => name(MFA), mfa => MFA, calls => Calls,
             timed_calls => TCalls, own_ns => Own,
             mean_ns => case TCalls of
                            0 -> null;
                            _ -> Own div TCalls
                        end},
    Row = case PerProc of
              true ->
                  %% Most own time first (maps: not lists:keysort/2).
                  Row0#{processes =>
                            [#{pid => P, calls => C, own_ns => T}
                             || {T, C, P} <- lists:reverse(lists:sort(
                                  [{S * 1000000000 + Us * 1000, C, P}
                                   || {P, C, S, Us} <- Procs]))]};
              false -> Row0
          end,
    case Calls of
        0 -> Acc;  % not called: not listed
        _ -> [Row | Acc]
    end.

%% As `stats' names functions: atoms quoted where Erlang needs it.
name({M, F, A}) ->
    unicode:characters_to_binary(io_lib:format("~tw:~tw/~b", [M, F, A])).

result(Rows, O, Extra) ->
    Sort = maps:get(sort, O),
    Key = fun(#{calls := C}) when Sort =:= calls -> C;
             (#{own_ns := T}) when Sort =:= own -> T;
             (#{mean_ns := null}) -> -1;
             (#{mean_ns := M}) -> M
          end,
    Sorted = lists:sort(fun(A, B) -> {Key(A), maps:get(function, B)} >=
                                         {Key(B), maps:get(function, A)} end,
                        Rows),
    Top = case maps:get(top, O) of
              infinity -> Sorted;
              N -> lists:sublist(Sorted, N)
          end,
    %% functions_called: all of them, also with `top' (the rows shown).
    Extra#{functions => Top, functions_called => length(Rows), sort => Sort,
           total_calls => lists:sum([C || #{calls := C} <- Rows]),
           %% (fewer than total_calls: calls of processes not timed)
           total_timed_calls => lists:sum([C || #{timed_calls := C} <- Rows]),
           total_own_ns => lists:sum([T || #{own_ns := T} <- Rows]),
           unavailable => ?UNAVAILABLE}.

%%% ---- output ---------------------------------------------------------------

%% @doc The table `bin/beamprobe stats' prints for functions, for a
%% profile's result: the columns no counter gives are `-'.
-spec format(result()) -> iolist().
format(#{functions := Rows} = R) ->
    Called = maps:get(functions_called, R, length(Rows)),
    Shown = case length(Rows) of
                Called -> "";
                N -> io_lib:format(" (the top ~b shown)", [N])
            end,
    Head = io_lib:format(
             "Profile: ~b functions called~s, ~b calls, own time ~s over ~s; "
             "sorted by ~s~n",
             [Called, Shown, maps:get(total_calls, R),
              dur(maps:get(total_own_ns, R)),
              dur(round(maps:get(seconds, R) * 1.0e9)), maps:get(sort, R)]),
    Cols = "     calls      total        own       mean        max        "
        "p50        p99   open  function\n",
    Lines = [[pad(integer_to_list(C), 10), pad("-", 11), pad(dur(T), 11),
              pad(case M of null -> "-"; _ -> dur(M) end, 11),
              pad("-", 11), pad("-", 11), pad("-", 11), pad("-", 7), "  ",
              Name, "\n", procs_lines(Row)]
             || #{calls := C, own_ns := T, mean_ns := M, function := Name}
                    = Row <- Rows],
    [Head, Cols, Lines, notes(R)].

procs_lines(#{processes := Ps}) ->
    [[pad(integer_to_list(C), 10), pad("", 11), pad(dur(T), 11),
      pad(dur(T div max(C, 1)), 11), "    ", pid_to_list(P), "\n"]
     || #{pid := P, calls := C, own_ns := T} <- Ps];
procs_lines(_) -> [].

notes(R) ->
    %% (mean: stats' column is total per call, an inclusive time that
    %% counters cannot give; this one is own per call, and says so)
    [io_lib:format("own: time in the function and in callees not profiled "
                   "(call_time); mean: own per timed call (in stats, total "
                   "per call); call flag set in ~b processes (~b others, "
                   "traced by another tracer or gone: timed only where "
                   "that tracer set the call flag)~n",
                   [maps:get(timed_processes, R),
                    maps:get(untimed_processes, R)]),
     untimed_note(R),
     case maps:get(skipped, R) of
         [] -> [];
         S -> io_lib:format("skipped (counters held by another tool): ~ts~n",
                            [lists:join(", ", [name(M) || M <- S])])
     end,
     case maps:get(lost, R, []) of
         [] -> [];
         L -> io_lib:format("counters lost (module loaded again or removed, "
                            "or the counters removed by another tool, "
                            "during the run; calls unknown): ~ts~n",
                            [lists:join(", ", [name(M) || M <- L])])
     end,
     case maps:get(not_loaded, R, []) of
         [] -> [];
         N -> io_lib:format("not loaded (not profiled; profile mode never "
                            "loads a module): ~ts~n",
                            [lists:join(", ", [io_lib:format("~tw", [M])
                                               || M <- N])])
     end,
     "not available in profile mode: ", maps:get(unavailable, R), "\n"].

pad(S, W) ->
    L = string:length(S),
    [lists:duplicate(max(0, W - L), $\s), S].

%% bp_out_dur's format: 999ns, 1.234us, 1.234ms, 1.234567s.
dur(Ns) when Ns < 1000 -> integer_to_list(Ns) ++ "ns";
dur(Ns) when Ns < 1000000 -> fixed(Ns, 1000, 3) ++ "us";
dur(Ns) when Ns < 1000000000 -> fixed(Ns div 1000, 1000, 3) ++ "ms";
dur(Ns) -> fixed(Ns div 1000, 1000000, 6) ++ "s".

fixed(V, Div, Dec) ->
    Frac = integer_to_list(V rem Div),
    integer_to_list(V div Div) ++ "." ++
        lists:duplicate(Dec - length(Frac), $0) ++ Frac.

%% The calls own and mean leave out: those of processes spawned during the
%% run (no flag), traced by another tracer, or not in `procs'.  The table
%% showed them as if timed: 5061 calls, own 5us, when 5050 of them ran in
%% processes spawned during the run and only 11 were timed.
untimed_note(#{timed_processes := TP, total_calls := C} = R) ->
    TC = maps:get(total_timed_calls, R, C),
    case TC < C andalso (TP > 0 orelse TC > 0) of
        true ->
            io_lib:format("own and mean cover ~b of ~b calls: the other ~b "
                          "were made in processes not timed (spawned during "
                          "the run, traced by another tracer, or not in "
                          "procs)~n", [TC, C, C - TC]);
        false -> []
    end.

%% @doc The result as JSON text: `stats --json''s function entries (same
%% keys; `null' for what counters cannot give) and the run's facts.
-spec to_json(result()) -> binary().
to_json(#{functions := Rows} = R) ->
    Fs = [["{\"function\":", jstr(N), ",\"calls\":", int(C),
           ",\"returns\":null,\"exceptions\":null,\"unwound\":null,"
           "\"open\":null,\"total_ns\":null,\"own_ns\":", int(T),
           ",\"mean_ns\":", int(M),
           ",\"max_ns\":null,\"p50_ns\":null,\"p99_ns\":null,"
           "\"timed_calls\":", int(TC), jprocs(Row), "}"]
          || #{function := N, calls := C, own_ns := T, mean_ns := M,
               timed_calls := TC} = Row <- Rows],
    iolist_to_binary(
      ["{\"mode\":\"profile\",\"duration_ns\":",
       int(round(maps:get(seconds, R) * 1.0e9)),
       ",\"functions_called\":", int(maps:get(functions_called, R, length(Rows))),
       ",\"total_calls\":", int(maps:get(total_calls, R)),
       ",\"total_timed_calls\":", int(maps:get(total_timed_calls, R,
                                              maps:get(total_calls, R))),
       ",\"total_own_ns\":", int(maps:get(total_own_ns, R)),
       ",\"timed_processes\":", int(maps:get(timed_processes, R)),
       ",\"untimed_processes\":", int(maps:get(untimed_processes, R)),
       ",\"skipped\":[", lists:join(",", [jstr(name(M)) || M <- maps:get(skipped, R)]),
       "],\"lost\":[", lists:join(",", [jstr(name(M)) || M <- maps:get(lost, R, [])]),
       "],\"not_loaded\":[", lists:join(",", [jstr(io_lib:format("~tw", [M]))
                                           || M <- maps:get(not_loaded, R, [])]),
       "],\"unavailable\":", jstr(maps:get(unavailable, R)),
       ",\"functions\":[", lists:join(",", Fs), "]}"]).

jprocs(#{processes := Ps}) ->
    [",\"processes\":[",
     lists:join(",", [["{\"pid\":", jstr(pid_to_list(P)), ",\"calls\":", int(C),
                       ",\"own_ns\":", int(T), "}"]
                      || #{pid := P, calls := C, own_ns := T} <- Ps]), "]"];
jprocs(_) -> [].

int(null) -> "null";
int(N) -> integer_to_list(N).

%% A JSON string: ", \ and control characters escaped, UTF-8 as is.
jstr(S) ->
    B = unicode:characters_to_binary(S),
    [$", [esc(C) || <<C/utf8>> <= B], $"].

esc($") -> "\\\"";
esc($\\) -> "\\\\";
esc($\n) -> "\\n";
esc($\r) -> "\\r";
esc($\t) -> "\\t";
esc(C) when C < 16#20; C =:= 16#7f ->
    io_lib:format("\\u~4.16.0b", [C]);
esc(C) -> <<C/utf8>>.
