%%% @doc Coexistence with other tracing tools (dbg, recon_trace, redbug,
%%% ...) while a session runs: a watchdog that notices when one of them
%%% removes or replaces what the session installed.  (What a session
%%% leaves to them when it starts: beamprobe_skip.)
%%%
%%% == The watchdog (start_link/2) ==
%%%
%%% One process per session checks, every ?TICK_MS ms, what the session
%%% installed against what it found right after installing (its baseline):
%%%
%%% - each function its patterns cover (`erlang:trace_info(MFA, traced |
%%%   match_spec)', or `meta | meta_match_spec' for meta sessions):
%%%   `removed' when the pattern is gone, `replaced' when another match
%%%   spec, another meta tracer or a global pattern is there; and, for a
%%%   session with local patterns, each function whose pattern it skipped
%%%   and used: `removed' only (the other tool may change its own);
%%% - the flags and tracer of the session's processes: every listed pid,
%%%   or for `all'/`existing' a sample of at most ?SAMPLE of them (taken
%%%   again when half have exited, at most every ?RESAMPLE_MS ms), plus
%%%   `new': `removed' when the tracer is gone or some flags are,
%%%   `replaced' when another tracer is there.
%%%
%%% A difference is confirmed ?CONFIRM_MS ms later (so that a NIF reload,
%%% after which the session traces its processes again, is not reported),
%%% then reported once per function or process: in `info/1' (`tampered =>
%%% [{pattern, MFA, removed | replaced | restored | reloaded, SeenMs} |
%%% {procs, Pid | new,
%%% removed | replaced, SeenMs}]', SeenMs from `erlang:system_time(millisecond)',
%%% at most ?MAX_FINDINGS, and `tampered_count'), as a `tampered' event in
%%% the trace (docs/format.md) and so on the shell printer.  More than
%%% ?MAX_EACH functions (processes) changed the same way in one round are
%%% one report, `{pattern, {functions, N}, How, SeenMs}' (`{procs,
%%% {processes, N}, ...}'), whose event lists the first five.  A match
%%% spec the janitor installed (the combined one of the beamprobe sessions
%%% on the function, set again when one joins or leaves) is beamprobe's:
%%% taken as the new baseline, not reported; any other is, also on a
%%% function another beamprobe session traces too.  With `on_tamper =>
%%% reinstall' (not the default: it fights the other tool) the pattern or
%%% flags are set again after the report.  A pattern beamprobe sets
%%% again after another tool removed it (`on_tamper => reinstall', or a
%%% session naming the function starting: its keys are set whole) brings
%%% the calls back to every session tracing the function: the janitor
%%% tells their watchdogs, which report it `restored' (after a `removed'
%%% for the gap if they had not seen it yet: the pattern may have been
%%% back before they looked) and watch it again.
%%%
%%% A pattern gone because its module was loaded again (a hot upgrade,
%%% l(M), c(M): the new code has no pattern; mod_id/1 tells it from
%%% another tool's removal) is set again on the new code, whatever
%%% `on_tamper' says, for every session on it, and each reports it once,
%%% `reloaded' (with its gap: the new code's calls before the check).
%%%
%%% Limits: at most ?FUNS_PER_TICK functions and ?PROCS_PER_TICK
%%% processes are checked per tick (round robin beyond that, so a change is
%%% seen within `ceil(N / ?FUNS_PER_TICK) * ?TICK_MS' ms plus the
%%% confirmation), and at most ?MAX_FUNS functions are watched per
%%% session; with `procs => all' a process outside the sample that loses
%%% its flags is not seen (`erlang:trace(all, false, ...)' is: it clears
%%% `new' and the sample), nor with `procs => new' any one process: none
%%% is sampled, only the defaults for new processes are watched (a tool
%%% that clears every process clears them too and is seen; one that
%%% clears only existing processes, or one process by its pid, is not).
%%% Patterns on every module (`{'_', '_', '_'}',
%%% with `force') are not watched; message patterns are (`{messages,
%%% send | 'receive', How, Seen}').  A
%%% process another tool starts tracing between the start's check and
%%% `erlang:trace/3' fails a `procs => [...]' start (`trace_failed'), as
%%% before; with `all' the VM leaves it to that tool.
-module(beamprobe_watch).
-behaviour(gen_server).

-export([running_bits/0, start_link/2, start_in/3, stop/1, rebase/1,
         findings/1, watch_procs/2]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-export_type([finding/0]).

-define(TICK_MS, 500).
-define(CONFIRM_MS, 100).
-define(FUNS_PER_TICK, 1000).
-define(PROCS_PER_TICK, 200).
-define(MAX_FUNS, 5000).
-define(SAMPLE, 100).
-define(RESAMPLE_MS, 10000).
-define(MAX_FINDINGS, 100).
-define(MAX_EACH, 3).

-type finding() :: {pattern, mfa() | {functions, pos_integer()},
                    removed | replaced | restored | reloaded, integer()}
                 | {procs, pid() | new | {processes, pos_integer()},
                    removed | replaced, integer()}
                 | {messages, send | 'receive', removed | replaced, integer()}.

%%% ------------------------------------------------------------------------
%%% The watchdog
%%% ------------------------------------------------------------------------

-record(w, {session :: pid(),
            res :: beamprobe_nif:session(),
            meta :: boolean(),
            reinstall :: boolean(),
            flags :: undefined | [atom()],
            relied = [] :: [mfa()],       % other tools' patterns used
            %% The message patterns the session set: {Kind, MatchSpec}.
            msgs = [] :: [{send | 'receive', term()}],
            funs = {[], []} :: {list(), list()},      % to check, checked
            procs = {[], []} :: {list(), list()},
            new = none :: none | {term(), term()},
            traced :: term(),
            sampled_at = 0 :: integer(),
            pending = #{} :: #{term() => finding()},
            confirm = false :: boolean(),
            %% What has been reported (until watched again), and how.
            reported = #{} :: #{term() => atom()},
            %% The code of the watched functions' modules at the baseline
            %% (mod_id/1): a pattern gone with its module's code changed
            %% went with the old code.
            mods = #{} :: #{module() => term()},
            %% The code of those modules as the last round saw it with
            %% a pattern of the session still on it (or `false':
            %% unloaded): a purge, a delete after the baseline.
            seen = #{} :: #{module() => term()},
            findings = [] :: [finding()],
            count = 0 :: non_neg_integer()}).

%% @doc Starts the watchdog of session `Session' (linked to the caller),
%% right after it installed its tracing: `Expected' says what it
%% installed: `res' (its NIF session), `meta', `patterns' (as set),
%% `procs' (a pid list, `all', `existing', `new' or `none') and
%% `on_tamper' (`report' or `reinstall').
-spec start_link(pid(), map()) -> {ok, pid()} | {error, term()}.
start_link(Session, Expected) ->
    %% Sensitive from its start (beamprobe_own): it starts after the
    %% session's patterns are installed.
    beamprobe_own:start_link(?MODULE, {Session, Expected}).

%% @doc As {@link start_link/2}, in `Spare', a process of
%% {@link beamprobe_own:prestart/0} the session started before its trace
%% flags (so that none of its events is recorded).
-spec start_in(pid(), pid(), map()) -> {ok, pid()} | {error, term()}.
start_in(Spare, Session, Expected) ->
    beamprobe_own:become(Spare, ?MODULE, {Session, Expected}).

%% @doc Stops the watchdog and waits until it has ended: nothing it sees
%% afterwards (the session removing its own tracing) is reported.
%% Returns its last findings, as {@link findings/1}.
-spec stop(pid() | undefined) -> {[finding()], non_neg_integer()}.
stop(undefined) -> {[], 0};
stop(W) ->
    unlink(W),
    Ref = monitor(process, W),
    Last = call(W, stop, {[], 0}),
    exit(W, kill),                      % if it has not ended by itself
    receive {'DOWN', Ref, process, W, _} -> ok
    after 5000 -> ok
    end,
    Last.

%% @doc What is installed now is the new baseline (the session has just
%% installed it again, e.g. after a NIF reload); unconfirmed differences
%% are forgotten.
-spec rebase(pid() | undefined) -> ok.
rebase(undefined) -> ok;
rebase(W) -> call(W, rebase, ok).

%% @doc Processes a session with a list of processes took after its
%% start (those a profile run held, beamprobe_janitor:pick_up/2) are
%% watched too, from the tracer and flags they have now (another tool
%% taking one is reported as for the others).
-spec watch_procs(pid() | undefined, [pid()]) -> ok.
watch_procs(undefined, _Pids) -> ok;
watch_procs(W, Pids) -> call(W, {watch_procs, Pids}, ok).

%% @doc The differences reported so far, oldest first, and their number.
-spec findings(pid() | undefined) -> {[finding()], non_neg_integer()}.
findings(undefined) -> {[], 0};
findings(W) -> call(W, findings, {[], 0}).

call(W, Req, Default) ->
    try gen_server:call(W, Req, 5000)
    catch exit:_ -> Default
    end.

%% @private
-spec init({pid(), map()}) -> {ok, #w{}}.
init({Session, #{res := Res} = E}) ->
    %% Spawned after the session's flags were set: `new' (this session's,
    %% another session's or another tool's) may have traced this process;
    %% beamprobe's own processes are never traced.  First thing, and
    %% without erlang:trace_info/2 (its answer is a message, which would
    %% be traced), nor a tracer named (refused, and logged, when another
    %% tracer holds it).
    ok = beamprobe_own:sensitive(), % no trace events of it (see beamprobe_shell.erl)
    _ = (catch erlang:trace(self(), false, [all])),
    Meta = maps:get(meta, E, false),
    %% A session with local patterns gets call events from the patterns
    %% of other tools it skipped: watched too (their removal is reported,
    %% their owner changing the match spec is not).
    Relied = case Meta of
                 true -> [];
                 false -> maps:get(relied, E, [])
             end,
    W = #w{session = Session, res = Res, meta = Meta,
           reinstall = maps:get(on_tamper, E, report) =:= reinstall,
           flags = maps:get(flags, E, undefined),
           traced = maps:get(procs, E, none), relied = Relied,
           msgs = maps:get(msgs, E, [])},
    Funs = lists:sublist(
             lists:usort([F || P <- maps:get(patterns, E, []),
                               F <- beamprobe_skip:functions(P)] ++ Relied),
             ?MAX_FUNS),
    W1 = baseline(W#w{funs = {[{F, none} || F <- Funs], []}}),
    _ = erlang:send_after(?TICK_MS, self(), tick),
    {ok, W1}.

%% Reads the baseline of every function and process (a function the
%% session's patterns do not cover, e.g. a wildcard's function skipped,
%% is not watched).
baseline(#w{funs = {A, B}, meta = Meta} = W) ->
    Funs = [{F, S} || {F, _} <- A ++ B, S <- [fun_state(F, Meta)],
                      installed(S, W)],
    Mods = maps:from_list([{M, mod_id(M)}
                           || M <- lists:usort([M || {{M, _, _}, _} <- Funs])]),
    sample(W#w{funs = {Funs, []}, pending = #{}, mods = Mods, seen = #{}}).

%% Which code of module M is loaded: its MD5, and whether old code is
%% there.  Loading M again drops every trace pattern of M (the new code
%% has none): it shows as another MD5, or, for the same binary loaded
%% again, as old code where there was none (until the old code is
%% purged).  The same binary loaded again over old code not purged when
%% a round last looked is not told from another tool's removal.
mod_id(M) ->
    try erlang:module_loaded(M) andalso
            {erlang:get_module_info(M, md5), erlang:check_old_code(M)}
    catch _:_ -> false
    end.

%% Whether M's code changed as loading it again does, since the
%% baseline or since a round last saw it with the session's pattern on
%% it (old code purged, or the module deleted, after the baseline: the
%% same binary loaded again shows only against what the round saw).
reloaded(M, #w{mods = Mods, seen = Seen}) ->
    case mod_id(M) of
        false -> false;                         % unloaded
        Now -> changed(maps:get(M, Mods, unknown), Now) orelse
                   changed(maps:get(M, Seen, unknown), Now)
    end.

changed(unknown, _) -> false;
changed(false, _) -> true;                      % was unloaded
changed({Md5, _}, {Md5b, _}) when Md5 =/= Md5b -> true;
changed({_, false}, {_, true}) -> true;
changed(_, _) -> false.

%% The round's view of the code of the modules of FStates (Ids, each
%% read before their functions' states): a module unloaded, or one with
%% a function whose pattern is still the session's (so its code is the
%% one the pattern was set on).
observe(Ids, FStates, #w{seen = Seen} = W) ->
    Held = [M || {{M, _, _}, Base, S} <- FStates,
                 fun_diff(Base, S, W) =:= same, installed(S, W)],
    W#w{seen = lists:foldl(
                 fun({M, false}, Acc) -> Acc#{M => false};
                    ({M, Id}, Acc) ->
                         case lists:member(M, Held) of
                             true -> Acc#{M => Id};
                             false -> Acc
                         end
                 end, Seen, Ids)}.

%% The code of modules Ms now is the one the session's patterns are on:
%% their baseline (and the last seen: a removal before the next round is
%% not a load).
new_code(Ms, #w{mods = Mods, seen = Seen} = W) ->
    Ids = [{M, mod_id(M)} || M <- lists:usort(Ms)],
    W#w{mods = maps:merge(Mods, maps:from_list(Ids)),
        seen = maps:merge(Seen, maps:from_list(Ids))}.

installed({false, _}, _) -> false;
installed({{beamprobe_nif, _} = T, _}, _W) ->
    %% The hub's tracer states (beamprobe_janitor): every beamprobe
    %% session's patterns name them.
    T =:= {beamprobe_nif, beamprobe_hub_meta} orelse
        T =:= {beamprobe_nif, beamprobe_hub};
installed({undefined, _}, _) -> false;
installed({_, _}, #w{meta = Meta}) -> not Meta.

sample(#w{traced = Traced} = W) ->
    _ = [erase(K) || {{?MODULE, _} = K, _} <- get()],
    Mine = {tracer, {beamprobe_nif, beamprobe_hub}},
    Pids = case Traced of
               L when is_list(L) -> L;
               T when T =:= all; T =:= existing -> spread(processes());
               _ -> []
           end,
    Procs0 = [{P, S} || P <- Pids, S <- [proc_state(P, W)],
                        element(1, S) =:= Mine],
    Procs = case Traced of
                L2 when is_list(L2) -> Procs0;
                _ -> lists:sublist(Procs0, ?SAMPLE)
            end,
    New = case Traced =:= all orelse Traced =:= new of
              true ->
                  case proc_state(new, W) of
                      {Mine, _} = S -> S;
                      _ -> none
                  end;
              false -> none
          end,
    W#w{procs = {Procs, []}, new = New,
        sampled_at = erlang:monotonic_time(millisecond)}.

%% At most 4 * ?SAMPLE pids spread over the list, to pick ?SAMPLE of the
%% session's among them.
spread(Ps) ->
    Step = max(1, length(Ps) div (4 * ?SAMPLE)),
    lists:sublist([P || {I, P} <- lists:enumerate(Ps), I rem Step =:= 0,
                        P =/= self()], 4 * ?SAMPLE).

fun_state(F, false) ->
    {val(trace_info(F, traced)), val(trace_info(F, match_spec))};
fun_state(F, true) ->
    {val(trace_info(F, meta)), val(trace_info(F, meta_match_spec))}.

%% The tracer and, of the process's flags, those this session asked for:
%% the flags are the union of what every beamprobe session on the process
%% needs (beamprobe_janitor), and another session leaving removes its own.
proc_state(P, #w{flags = Own}) ->
    {Tracer, All} = proc_info(P),
    Flags = case val(All) of
                L when is_list(L), is_list(Own) -> [F || F <- L, lists:member(F, Own)];
                Other -> Other
            end,
    {Tracer, Flags}.

%% trace_info/2's tracer and flags of P.  On OTP 25 trace_info/2 of a
%% process is a signal it must be scheduled to answer: a session (this
%% one or another) recording `running' on P recorded every check as P
%% running (an idle process showed an in/out pair per check, 500 ms
%% apart).  So a local P traced for `running' is read again only when
%% its trace flags (process_info(P, trace): no signal to P) changed since
%% the last read.  What that cannot see: a tool that takes such a P and
%% sets exactly the flags it had, `running' included, between two checks.
proc_info(P) when is_pid(P), node(P) =:= node() ->
    Run = running_bits(),
    case erlang:process_info(P, trace) of
        undefined -> {undefined, undefined};
        {trace, Bits} when Bits band Run =:= 0 ->
            {trace_info(P, tracer), trace_info(P, flags)};
        {trace, Bits} ->
            case get({?MODULE, P}) of
                {Bits, Info} -> Info;
                _ ->
                    Info = {trace_info(P, tracer), trace_info(P, flags)},
                    put({?MODULE, P}, {Bits, Info}),
                    Info
            end
    end;
proc_info(P) -> {trace_info(P, tracer), trace_info(P, flags)}.

val({_, V}) -> V;
val(undefined) -> undefined.

%% @private
-spec handle_call(term(), gen_server:from(), #w{}) ->
          {reply, term(), #w{}} | {stop, normal, term(), #w{}}.
handle_call(rebase, _From, W) ->
    %% After a NIF reload the janitor traced the node's processes again:
    %% not this one.
    _ = (catch erlang:trace(self(), false, [all])),
    {reply, ok, baseline(W)};
handle_call({watch_procs, Pids}, _From,
            #w{traced = L, procs = {A, B}, flags = Own} = W) when is_list(L) ->
    %% From what the janitor set on them (not read now: another tool may
    %% have taken one since).
    Mine = {tracer, {beamprobe_nif, beamprobe_hub}},
    New = [P || P <- Pids, not lists:member(P, L)],
    Add = [{P, S} || P <- New,
                     S <- [case is_list(Own) of
                               true -> {Mine, Own};
                               false -> proc_state(P, W)
                           end],
                     element(1, S) =:= Mine],
    {reply, ok, W#w{traced = L ++ New, procs = {A ++ Add, B}}};
handle_call({watch_procs, _}, _From, W) ->
    %% (`all', `existing': a sample of the node's processes is watched.)
    {reply, ok, W};
handle_call(findings, _From, #w{findings = Fs, count = N} = W) ->
    {reply, {lists:reverse(Fs), N}, W};
handle_call(stop, _From, #w{findings = Fs, count = N} = W) ->
    %% The last answer: nothing is checked after it.
    {stop, normal, {lists:reverse(Fs), N}, W};
handle_call(_, _From, W) ->
    {reply, {error, unknown_request}, W}.

%% @private
-spec handle_cast(term(), #w{}) -> {noreply, #w{}}.
handle_cast(_, W) -> {noreply, W}.

%% @private
-spec handle_info(term(), #w{}) -> {noreply, #w{}}.
handle_info(tick, W) ->
    _ = erlang:send_after(?TICK_MS, self(), tick),
    {noreply, maybe_confirm(check(maybe_resample(W)))};
handle_info(confirm, W) ->
    {noreply, confirm(W#w{confirm = false})};
handle_info({pattern_reset, Fs, Seen, reloaded}, W) when is_list(Fs) ->
    {noreply, reloaded_reset(Fs, Seen, W)};
handle_info({pattern_reset, F, Seen, Why}, W) ->
    {noreply, pattern_reset(F, Seen, Why, W)};
handle_info(_, W) ->
    {noreply, W}.

maybe_resample(#w{traced = T, procs = {A, B}, sampled_at = At} = W)
  when T =:= all; T =:= existing ->
    Alive = length([x || {P, _} <- A ++ B, is_process_alive(P)]),
    Now = erlang:monotonic_time(millisecond),
    case Alive < ?SAMPLE div 2 andalso Now - At >= ?RESAMPLE_MS of
        true -> (sample(W))#w{pending = W#w.pending};
        false -> W
    end;
maybe_resample(W) -> W.

%% One round: the next ?FUNS_PER_TICK functions and ?PROCS_PER_TICK
%% processes, and `new'.
check(#w{funs = Funs, procs = Procs, meta = Meta} = W) ->
    {FBatch, Funs1} = take(?FUNS_PER_TICK, Funs),
    {PBatch, Procs1} = take(?PROCS_PER_TICK, Procs),
    Now = erlang:system_time(millisecond),
    %% (Each module's code read before its functions' patterns.)
    Ids = [{M, mod_id(M)} || M <- lists:usort([M || {{M, _, _}, _} <- FBatch])],
    FStates = [{F, Base, fun_state(F, Meta)} || {F, Base} <- FBatch],
    FDiffs = [{{pattern, F}, How, Base, S}
              || {F, Base, S} <- FStates,
                 How <- [fun_diff(Base, S, W)], How =/= same],
    PDiffs = [{{procs, P}, How, Base, S}
              || {P, Base} <- PBatch, S <- [proc_state(P, W)],
                 How <- [proc_diff(Base, S)], How =/= same],
    MDiffs = [{{messages, K}, How, MS, S}
              || {K, MS} <- W#w.msgs, S <- [beamprobe_janitor:msg_state(K)],
                 How <- [msg_diff(MS, S)], How =/= same],
    NDiffs = case W#w.new of
                 none -> [];
                 NBase ->
                     NS = proc_state(new, W),
                     [{{procs, new}, H, NBase, NS}
                      || H <- [proc_diff(NBase, NS)], H =/= same]
             end,
    %% Dead processes leave the list.
    Procs2 = drop_dead(Procs1),
    W1 = observe(Ids, FStates, W#w{funs = Funs1, procs = Procs2}),
    lists:foldl(fun(D, Acc) -> note(D, Now, Acc) end, W1,
                FDiffs ++ PDiffs ++ NDiffs ++ MDiffs).

msg_diff(MS, MS) -> same;
msg_diff(_, false) -> removed;
msg_diff(_, _) -> replaced.

take(N, {[], Done}) -> take1(N, {lists:reverse(Done), []});
take(N, Q) -> take1(N, Q).

take1(N, {A, Done}) ->
    {Batch, Rest} = lists:split(min(N, length(A)), A),
    {Batch, {Rest, lists:reverse(Batch, Done)}}.

drop_dead({A, B}) ->
    Alive = fun({P, _}) ->
                    is_process_alive(P) orelse erase({?MODULE, P}) =:= x
            end,
    {lists:filter(Alive, A), lists:filter(Alive, B)}.

fun_diff(Base, Base, _W) -> same;
fun_diff(_Base, {false, _}, _W) -> removed;
fun_diff(_Base, {[], _}, _W) -> removed;       % meta: no tracer
fun_diff(_Base, {undefined, _}, _W) -> same;   % module unloaded
fun_diff(_Base, _S, _W) -> replaced.

proc_diff(_Base, {undefined, _}) -> same;       % exited
proc_diff({T, _}, {{tracer, []}, _}) when T =/= {tracer, []} -> removed;
proc_diff({T, _}, {T2, _}) when T2 =/= T -> replaced;
proc_diff({_, Flags}, {_, Now}) ->
    case Flags -- Now of
        [] -> same;
        _ -> removed
    end.

note({Key, How, Base, S}, Now, #w{pending = Pend, reported = Rep} = W) ->
    case Rep of
        #{Key := _} -> W;
        _ ->
            case Pend of
                #{Key := _} -> W;
                _ -> W#w{pending = Pend#{Key => {How, Base, S, Now}}}
            end
    end.

maybe_confirm(#w{pending = P, confirm = false} = W) when map_size(P) > 0 ->
    _ = erlang:send_after(?CONFIRM_MS, self(), confirm),
    W#w{confirm = true};
maybe_confirm(W) -> W.

%% Reports the differences still there; a match spec beamprobe's janitor
%% installed (the combined one of the sessions on the function, set again
%% when one joins or leaves) becomes the baseline.  More
%% than ?MAX_EACH differences of one kind and how in one round (recon_trace
%% clearing the node, erlang:trace(all, false, [all])) are one report:
%% `{pattern, {functions, N}, How, Seen}' or `{procs, {processes, N}, How,
%% Seen}' (the event's detail lists the first ones).
confirm(#w{pending = Pend} = W) ->
    {Sure0, W1} = maps:fold(fun(Key, {_How, Base, _S, Seen}, {Acc, WA}) ->
                                    confirm_one(Key, Base, Seen, Acc, WA)
                            end, {[], W#w{pending = #{}}}, Pend),
    Sure = whole_modules(Sure0, W1),
    Groups = lists:foldl(fun({{Kind, Sub}, How, _, _, _} = D, G) ->
                                 K = {Kind, How, Sub =:= new},
                                 maps:update_with(K, fun(L) -> [D | L] end,
                                                  [D], G)
                         end, #{}, lists:sort(Sure)),
    maps:fold(fun(_, Ds, WA) when length(Ds) > ?MAX_EACH ->
                      report_many(lists:reverse(Ds), WA);
                 (_, Ds, WA) ->
                      lists:foldl(fun({Key, How, Base, S, Seen}, WB) ->
                                          report(Key, How, Base, S, Seen, WB)
                                  end, WA, lists:reverse(Ds))
              end, W1, Groups).

%% A module loaded again lost the patterns of all its functions: those
%% of its watched functions not checked in this round (beyond
%% ?FUNS_PER_TICK: the next round would compare with the new code, and
%% take them for removed) are reported and set again with the others.
whole_modules(Sure, #w{funs = {A, B}, meta = Meta, reported = Rep} = W) ->
    case [{M, Seen} || {{pattern, {M, _, _}}, reloaded, _, _, Seen} <- Sure] of
        [] -> Sure;
        Ms ->
            In = [K || {K, _, _, _, _} <- Sure],
            Sure ++ [{{pattern, F}, reloaded, Base, S, Seen}
                     || {{M, _, _} = F, Base} <- A ++ B,
                        {M2, Seen} <- [lists:keyfind(M, 1, Ms)], M2 =:= M,
                        not lists:member({pattern, F}, In),
                        not is_map_key({pattern, F}, Rep),
                        not lists:member(F, W#w.relied),
                        S <- [fun_state(F, Meta)],
                        fun_diff(Base, S, W) =:= removed]
    end.

confirm_one({pattern, F} = Key, Base, Seen, Acc, #w{meta = Meta} = W) ->
    S = fun_state(F, Meta),
    case fun_diff(Base, S, W) of
        same -> {Acc, W};
        replaced ->
            %% Not "another beamprobe session claims F": another tool's
            %% match spec on a function two sessions shared was taken for
            %% theirs, and neither session reported it.
            case lists:member(F, W#w.relied) orelse
                %% The combined match spec beamprobe's janitor installs
                %% when another session joins or leaves (by beamprobe's
                %% tracer, for a meta pattern).
                (installed(S, W) andalso
                 lists:member(element(2, S),
                              beamprobe_janitor:installed_specs(F, Meta))) of
                true -> {Acc, rebase_fun(F, S, W)};
                false -> {[{Key, replaced, Base, S, Seen} | Acc], W}
            end;
        removed ->
            {M, _, _} = F,
            How = case not lists:member(F, W#w.relied) andalso
                      reloaded(M, W) of
                      true -> reloaded;
                      false -> removed
                  end,
            {[{Key, How, Base, S, Seen} | Acc], W}
    end;
confirm_one({messages, K} = Key, Base, Seen, Acc, W) ->
    S = beamprobe_janitor:msg_state(K),
    case msg_diff(Base, S) of
        same -> {Acc, W};
        How -> {[{Key, How, Base, S, Seen} | Acc], W}
    end;
confirm_one({procs, P} = Key, Base, Seen, Acc, W) ->
    S = proc_state(P, W),
    case proc_diff(Base, S) of
        same -> {Acc, W};
        How -> {[{Key, How, Base, S, Seen} | Acc], W}
    end.

%% F is watched from S now; a pattern of the session's set again (by a
%% join, a reinstall, a load followed) is on the module's code now: the
%% baseline of the module (a removal later is not a load).
rebase_fun({M, _, _} = F, S, #w{funs = {A, B}} = W) ->
    R = fun(L) -> [case X of {F, _} -> {F, S}; _ -> X end || X <- L] end,
    W1 = W#w{funs = {R(A), R(B)}},
    case installed(S, W) of
        true -> new_code([M], W1);
        false -> W1
    end.

report({Kind, Subject} = Key, How, Base, S, Seen, W) ->
    Relied = lists:member(Subject, W#w.relied),
    Detail = case Relied of
                 true -> <<"the pattern another tool had set, which this "
                           "session used (skipped, not replaced), is gone">>;
                 false -> detail(Kind, How, Base, S, W)
             end,
    Pid = case Subject of
              P when is_pid(P) -> P;
              _ -> undefined
          end,
    W1 = note(Key, How, Detail, Pid, Seen, W),
    case How of
        reloaded -> reinstall_reloaded([Subject], W1);
        _ when W#w.reinstall, not Relied -> reinstall(Key, Base, W1);
        _ -> W1
    end.

%% The functions of a module loaded again, reported `reloaded': the
%% janitor sets their patterns on the new code and tells every session
%% on them (this one too: reloaded_reset/3); the new code is the
%% baseline of their modules.
reinstall_reloaded(Fs, #w{meta = Meta} = W) ->
    W1 = new_code([M || {M, _, _} <- Fs], W),
    case beamprobe_janitor:reinstall_patterns(Fs, Meta, reloaded) of
        ok -> W1;
        none -> lists:foldl(fun(F, WA) -> reinstalled({pattern, F}, WA) end,
                            W1, Fs)
    end.

%% Writes the report of Key (a `tampered' event, the finding for info/1).
note({Kind, Subject} = Key, How, Detail, Pid, Seen, W) ->
    Fields = [atom_to_binary(Kind), subject_text(Subject),
              atom_to_binary(How), Detail],
    _ = (catch beamprobe_nif:tampered(W#w.res, Pid, Fields)),
    W#w{reported = (W#w.reported)#{Key => How},
        pending = maps:remove(Key, W#w.pending),
        count = W#w.count + 1,
        findings = case W#w.count < ?MAX_FINDINGS of
                       true -> [{Kind, Subject, How, Seen} | W#w.findings];
                       false -> W#w.findings
                   end}.

%% The janitor set F's pattern again after another tool had removed it
%% (Seen: when), because a session naming F started (Why = joined) or a
%% watchdog's on_tamper => reinstall (this one's or another session's):
%% the session records F's calls again.  Said as `restored' (info/1, a
%% `tampered' event), once per removal, after a `removed' report of the
%% gap if this watchdog had not made one yet (the pattern may have been
%% back before it looked: calls lost without a word otherwise).  F is
%% then watched again from what is installed now: a later removal is
%% reported again.  Nothing for a function this watchdog does not watch;
%% for one of another tool's patterns the session relied on, `restored'
%% only after its `removed' (that tool changing its own is its business).
pattern_reset(F, Seen, Why, #w{meta = Meta} = W) ->
    Key = {pattern, F},
    Relied = lists:member(F, W#w.relied),
    Watched = watched(F, W),
    W1 = case Watched andalso not is_map_key(Key, W#w.reported) andalso
             not Relied of
             true -> note(Key, removed, gap_detail(Why), undefined, Seen, W);
             false -> W
         end,
    case Watched andalso is_map_key(Key, W1#w.reported) of
        true ->
            W2 = note(Key, restored, restored_detail(Why, Relied), undefined,
                      Seen, W1),
            reinstalled(Key, rebase_fun(F, fun_state(F, Meta), W2));
        false -> W1
    end.

%% The janitor set the patterns of Fs on their module's new code (the
%% module was loaded again; Seen: when): a function whose load this
%% watchdog has reported is watched again; one whose load it had not seen
%% (another session's watchdog saw it first) is reported `reloaded' now,
%% once (more than ?MAX_EACH in one report), and watched again.  The new
%% code is the baseline of their modules.
reloaded_reset(Fs0, Seen, #w{meta = Meta, mods = Mods} = W0) ->
    W = new_code([M || {M, _, _} <- Fs0], W0),
    Fs = [F || F <- lists:usort(Fs0), watched(F, W),
               not lists:member(F, W#w.relied)],
    %% Not for a load this watchdog has seen already (it reported it, or
    %% an earlier reset of another watchdog's did): its module's code is
    %% the baseline's.
    Tell = [F || {M, _, _} = F <- Fs,
                 maps:get(M, Mods, false) =/= maps:get(M, W#w.mods)],
    Detail = <<"the module was loaded again, and its new code had no trace "
               "pattern until another session's watchdog set it again: calls "
               "of the new code in between were not traced">>,
    W1 = case length(Tell) > ?MAX_EACH of
             true ->
                 Ds = [{{pattern, F}, reloaded, none, none, Seen} || F <- Tell],
                 grouped(Ds, W, Detail);
             false ->
                 lists:foldl(fun(F, WA) ->
                                     note({pattern, F}, reloaded, Detail,
                                          undefined, Seen, WA)
                             end, W, Tell)
         end,
    lists:foldl(fun(F, WA) ->
                        WB = rebase_fun(F, fun_state(F, Meta), WA),
                        reinstalled({pattern, F}, WB)
                end, W1, Fs).

%% Whether this watchdog watches function F.
watched(F, #w{funs = {A, B}}) ->
    lists:keymember(F, 1, A) orelse lists:keymember(F, 1, B).

gap_detail(joined) ->
    <<"the trace pattern was gone (removed by another tool, or the module "
      "was loaded again) until another beamprobe session naming this "
      "function started: calls in between were not traced">>;
gap_detail(reinstall) ->
    <<"the trace pattern was gone (removed by another tool, or the module "
      "was loaded again) until another session set it again (on_tamper => "
      "reinstall): calls in between were not traced">>.

restored_detail(Why, Relied) ->
    iolist_to_binary(
      [case Relied of
           true -> "the pattern another tool had set is gone, ";
           false -> "the trace pattern, removed before, "
       end,
       case Why of
           joined -> "and a beamprobe session naming this function started "
                     "and set its own: ";
           reinstall -> "was set again (on_tamper => reinstall): "
       end,
       "its calls are recorded again from here"]).

%% One report for many functions or processes.
report_many([{_, How, _, _, _} | _] = Ds, W) ->
    W1 = grouped(Ds, W, none),
    case How of
        reloaded -> reinstall_reloaded([F || {{pattern, F}, _, _, _, _} <- Ds],
                                       W1);
        _ when W#w.reinstall ->
            lists:foldl(fun({Key, _, Base, _, _}, WA) ->
                                reinstall(Key, Base, WA)
                        end, W1, Ds);
        _ -> W1
    end.

%% The one report of Ds (Why: a detail to add, or none).
grouped([{{Kind, _}, How, _, _, Seen} | _] = Ds, W, Why) ->
    N = length(Ds),
    Subject = case Kind of
                  pattern -> {functions, N};
                  procs -> {processes, N}
              end,
    First = [subject_text(Sub) || {{_, Sub}, _, _, _, _} <- lists:sublist(Ds, 5)],
    %% (Patterns gone on more than ?MAX_EACH functions at once are most
    %% often a module loaded again: said as for one function, which the
    %% list of names alone did not.)
    Detail = text("~s: ~ts~s~ts", [case Kind of
                                       pattern -> "functions";
                                       procs -> "processes"
                                   end, lists:join(", ", First),
                                   [", ..." || N > 5],
                                   case {Kind, How} of
                                       _ when is_binary(Why) -> [": ", Why];
                                       {pattern, removed} ->
                                           " (removed by another tool, or "
                                           "their module was loaded again)";
                                       {pattern, reloaded} ->
                                           [" (their module was loaded again: "
                                            "the patterns are set on its new "
                                            "code; calls of the new code "
                                            "before, at most about ",
                                            integer_to_list(?TICK_MS + ?CONFIRM_MS),
                                            " ms, were not traced)"];
                                       _ -> ""
                                   end]),
    Fields = [atom_to_binary(Kind), subject_text(Subject),
              atom_to_binary(How), Detail],
    _ = (catch beamprobe_nif:tampered(W#w.res, undefined, Fields)),
    Rep = lists:foldl(fun({Key, _, _, _, _}, R) -> R#{Key => How} end,
                      W#w.reported, Ds),
    W#w{reported = Rep, count = W#w.count + 1,
        findings = case W#w.count < ?MAX_FINDINGS of
                       true -> [{Kind, Subject, How, Seen} | W#w.findings];
                       false -> W#w.findings
                   end}.

subject_text({functions, N}) -> iolist_to_binary([integer_to_list(N), " functions"]);
subject_text({processes, N}) -> iolist_to_binary([integer_to_list(N), " processes"]);
subject_text({M, F, A}) ->
    try beamprobe_nif:render_mfa(M, F, A)
    catch _:_ -> iolist_to_binary(io_lib:format("~tw:~tw/~b", [M, F, A]))
    end;
subject_text(new) -> <<"new">>;
subject_text(K) when K =:= send; K =:= 'receive' -> atom_to_binary(K);
subject_text(P) when is_pid(P) -> list_to_binary(pid_to_list(P)).

detail(pattern, reloaded, _Base, _S, _W) ->
    text("the module was loaded again: the pattern is set on its new code "
         "(calls of the new code before, at most about ~b ms, were not "
         "traced)", [?TICK_MS + ?CONFIRM_MS]);
detail(pattern, removed, _Base, _S, _W) ->
    <<"the trace pattern is gone (removed by another tool, or the module "
      "was loaded again)">>;
detail(pattern, replaced, _Base, {T, MS}, #w{meta = true}) ->
    text("meta tracer now ~0p, match spec ~0p", [T, MS]);
detail(pattern, replaced, _Base, {T, MS}, _W) ->
    text("now a ~p pattern with match spec ~0p", [T, MS]);
detail(messages, removed, _Base, _S, _W) ->
    <<"the node's message pattern is off (false): no such message is "
      "recorded any more">>;
detail(messages, replaced, _Base, S, _W) ->
    text("the node's message pattern is now ~0p (dbg:stop/0 sets true: every "
         "message)", [S]);
detail(procs, removed, {_, Flags}, {{tracer, []}, _}, _W) ->
    text("trace flags ~0p and the tracer removed", [Flags]);
detail(procs, removed, {_, Flags}, {_, Now}, _W) ->
    text("trace flags ~0p removed", [Flags -- Now]);
detail(procs, replaced, _Base, {{tracer, T}, Flags}, _W) ->
    text("now traced by ~0p with flags ~0p", [T, Flags]).

text(Fmt, Args) ->
    B = unicode:characters_to_binary(io_lib:format(Fmt, Args)),
    binary:part(B, 0, min(byte_size(B), 900)).

%% on_tamper => reinstall: set the baseline again (a process another
%% tracer holds now stays with it: erlang:trace/3 refuses).  A pattern is
%% set by the janitor, as it has it now: the one seen last may be older
%% (a session with its own condition joined since, whose route it lacks).
reinstall({messages, K}, MS, W) ->
    _ = (catch erlang:apply(erlang, trace_pattern, [K, MS, []])),
    reinstalled({messages, K}, W);
reinstall({pattern, F}, _Base, #w{meta = Meta} = W) ->
    case beamprobe_janitor:reinstall_pattern(F, Meta) of
        %% The janitor tells every session tracing F, this one too: it
        %% is `restored' and watched again then (pattern_reset/4).
        ok -> W;
        none -> reinstalled({pattern, F}, W)
    end;
reinstall({procs, P}, {_, Flags}, W) ->
    _ = (catch erlang:trace(P, true, Flags ++ [beamprobe_janitor:tracer()])),
    reinstalled({procs, P}, W).

%% Watched again: a later removal is reported again.
reinstalled(Key, #w{reported = R} = W) ->
    W#w{reported = maps:remove(Key, R)}.

trace_info(What, Item) -> beamprobe_skip:trace_info(What, Item).

%% @private
%% The process_info(P, trace) bits of the `running' flags, found once per
%% VM on a scratch process (the layout is the VM's own), when the
%% application starts (beamprobe_app: before any session traces new
%% processes).  Should a session trace the scratch process after all, or
%% the VM refuse, every bit counts as `running' (tracers read only when
%% flags change).
-spec running_bits() -> non_neg_integer().
running_bits() ->
    case persistent_term:get({?MODULE, running_bits}, undefined) of
        undefined ->
            P = spawn(fun() -> receive stop -> ok end end),
            Bits = try
                       _ = erlang:trace(P, false, [all]),
                       1 = erlang:trace(P, true, [running, {tracer, self()}]),
                       {trace, B} = erlang:process_info(P, trace),
                       B
                   catch _:_ -> -1
                   after
                       _ = (catch erlang:trace(P, false, [all])),
                       exit(P, kill)
                   end,
            persistent_term:put({?MODULE, running_bits}, Bits),
            Bits;
        Bits -> Bits
    end.
