%%% @doc The registry of running sessions and the owner of everything they
%%% install: trace flags, call patterns, message patterns, hub members.
%%%
%%% Sessions overlap freely (docs/design.md, "Sessions that overlap"):
%%% every process beamprobe traces has one tracer, the hub
%%% (`{tracer, beamprobe_nif, beamprobe_hub}'), which routes each event in
%%% C to the sessions that asked for it.  Every decision that depends on
%%% other sessions is made here, in one process, one request at a time:
%%%
%%% - `join/2': a session becomes a hub member; the janitor sets the call
%%%   patterns (the union of the live sessions' match specs,
%%%   beamprobe_combine), the message patterns and the trace flags it
%%%   needs (adding to what other sessions set), or refuses what cannot be
%%%   combined (`{conflict, Session, What}', `{cannot_combine, ...}') and
%%%   leaves nothing behind.
%%% - `leave/1': a stopping session gives back what it set; a flag, a
%%%   pattern or a message pattern is removed only when no other live
%%%   session needs it; then the session leaves the hub.
%%% - a session process that dies without leaving (for instance killed
%%%   with `exit(S, kill)') is cleaned after as by `leave/2', and its trace
%%%   finalised.
%%% - a janitor that is restarted (killed, its supervisor starts another)
%%%   asks the running sessions for what they installed (each keeps the
%%%   entry `join/2' returned) and takes them over; a session that leaves
%%%   before it was taken over hands its entry to `leave/2'.
%%%
%%% Meta sessions (`meta => true') are hub members too: their call
%%% patterns are meta patterns (the union of the meta sessions', combined
%%% like the others) whose tracer state is `beamprobe_hub_meta', and whose
%%% calls of every process go to the members that record meta calls.
%%%
%%% The janitor never crashes on a session's behalf: a failing clean-up
%%% step is logged and the next one runs.
-module(beamprobe_janitor).
-behaviour(gen_server).

-export([start_link/0, join/2, leave/2, sessions/0, tracer/0, untrace_self/0,
         installed/1,
         others_patterns/1, others_patterns/2, installed_specs/2,
         foreign_patterns/1, reinstall_pattern/2, reinstall_patterns/3,
         add_own/2,
         pick_up/2, profile_ended/0,
         installed_msg/1, msg_state/1]).
%% For beamprobe_janitor_flags.
-export([safely/1, trace_info/2]).
-export([init/1, handle_continue/2, handle_call/3, handle_cast/2,
         handle_info/2]).

-type mfa_pat() :: {atom(), atom(), arity() | '_'}.
-type procs() :: none | all | new | existing | [pid()].

%% What a session asks the janitor to install for it.
-type spec() :: #{res := beamprobe_nif:session(),
                  meta := boolean(),
                  procs := procs(),
                  exclude => [pid()],
                  flags := [atom()],
                  arity := boolean(),
                  ports := boolean(),
                  kinds := non_neg_integer(),
                  calls := [{mfa_pat(), true | list()}],
                  msgs := [{send | 'receive', term()}],
                  handlers := [pid()],
                  relied => [mfa()],
                  held => [pid()],
                  others => careful | [pid()]}.
-export_type([spec/0]).

-define(HUB, beamprobe_hub).
-define(TRACER, {tracer, beamprobe_nif, ?HUB}).
-define(HUB_META, beamprobe_hub_meta).
-define(KEYS, beamprobe_janitor_keys).
-define(FLAGS, beamprobe_janitor_flags).
%% Hub kinds (c_src/bp_hub.h).
-define(K_SEND, 4).
-define(K_RECEIVE, 8).
%% A restarted janitor waits this long (ms) for the running sessions to
%% be taken over before it removes the hub members nobody claims.
-define(REAP_AFTER, 1000).

-record(st, {sessions = #{} :: #{reference() => map()},
             patterns = #{} :: #{mfa_pat() => term()},
             metapatterns = #{} :: #{mfa_pat() => term()},
             msgpats = #{} :: #{send | 'receive' => term()},
             %% The node's message pattern before a beamprobe session
             %% set it, set again when the last one leaves.
             msgprev = #{} :: #{send | 'receive' => term()}}).

%% @doc Starts the janitor, registered locally.
-spec start_link() -> {ok, pid()}.
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc The tracer of every process beamprobe traces.
-spec tracer() -> {tracer, beamprobe_nif, beamprobe_hub}.
tracer() -> ?TRACER.

%% @doc Drops the calling process's trace flags if beamprobe's tracer set
%% them (a beamprobe process spawned while a session traces new
%% processes); flags of another tool's tracer are left to it.  Turning
%% them off naming our tracer would be refused for such a process and
%% logged by the VM ("can only have one tracer per process").  The
%% caller is sensitive (process_flag/2) first: the answer of
%% erlang:trace_info/2 is a message, which is no trace event then.
-spec untrace_self() -> ok.
untrace_self() ->
    ?FLAGS:untrace_ours(self()).

%% @doc Installs what `Session' asks for (`Spec') next to the other live
%% sessions, atomically: on success the session records its events from
%% now on; returned are the number of functions its patterns matched and
%% the janitor's entry for it (for `leave/2' and a restarted janitor).
%% On failure nothing of it is left installed.
-spec join(pid(), spec()) ->
          {ok, non_neg_integer(), map()} | {error, term()}.
join(Session, Spec) ->
    gen_server:call(?MODULE, {join, Session, Spec}, infinity).

%% @doc Removes what `Session' installed and no other session needs, then
%% takes it out of the hub (no event reaches it after this returns).
%% `Entry': what `join/2' returned (`undefined' if it did not succeed),
%% used if this janitor does not know the session (restarted since).
%% Idempotent.  Without a janitor (the application stopping) this does
%% nothing.
-spec leave(pid(), map() | undefined) -> ok.
leave(Session, Entry) ->
    %% The entry is sent only to a janitor that does not know the session:
    %% for `procs => existing | new' it holds every pid alive at the start
    %% (500,000 processes: ≈ 0.3 s to copy, on the way to clearing the
    %% flags of a session whose owner died).
    try gen_server:call(?MODULE, {leave, Session}, infinity) of
        unknown ->
            gen_server:call(?MODULE, {leave, Session, Entry}, infinity);
        ok -> ok
    catch exit:_ -> ok
    end.

%% @doc What the janitor has installed for `Session' (for a watchdog that
%% checks nobody removed or replaced it): the call patterns that name
%% its functions, each with the match spec installed there (the union of
%% the sessions tracing it: compare with `erlang:trace_info(MFA,
%% match_spec)'), its message patterns, and the tracer its processes
%% have (`tracer/0'; meta sessions: `{meta, beamprobe_nif,
%% beamprobe_hub_meta}' on their patterns).  `{error, not_found}' for a session the janitor does not
%% know.
-spec installed(pid()) ->
          {ok, #{patterns := #{mfa_pat() => term()},
                 message_patterns := #{send | 'receive' => term()},
                 tracer := term(), procs := procs()}} |
          {error, not_found}.
installed(Session) ->
    gen_server:call(?MODULE, {installed, Session}, infinity).

%% @doc The live sessions with their hub members (for info and tests).
-spec sessions() -> [{pid(), integer() | none}].
sessions() ->
    gen_server:call(?MODULE, sessions, infinity).

%% @doc The call patterns claimed by every session but `Session', of both
%% kinds (beamprobe's own, for beamprobe_watch: not another tool's).
%% `[]' without a janitor.
-spec others_patterns(pid()) -> [mfa_pat()].
others_patterns(Session) ->
    others_patterns(Session, both).

%% @doc The call patterns of one kind (meta patterns if `Meta' is true,
%% trace patterns if false, `both') claimed by every session but
%% `Session': a meta session's pattern does not make another tool's trace
%% pattern on the same function beamprobe's (beamprobe_skip).  `[]'
%% without a janitor.  Waits for a busy janitor (an install over many
%% processes): an answer given up on would make beamprobe's own patterns
%% look like another tool's (functions skipped, a false tamper report).
-spec others_patterns(pid(), boolean() | both) -> [mfa_pat()].
others_patterns(Session, Meta) ->
    try gen_server:call(?MODULE, {others_patterns, Session, Meta}, infinity)
    catch exit:_ -> []
    end.

%% @doc The message pattern of kind `Kind' beamprobe's sessions set
%% (`{ok, MatchSpec}'), or `none'.
-spec installed_msg(send | 'receive') -> {ok, term()} | none.
installed_msg(Kind) ->
    gen_server:call(?MODULE, {installed_msg, Kind}, infinity).

%% @doc Adds `Pids' to the processes of `Session' that beamprobe never
%% traces (its watchdog, its samplers: started after it joined), and
%% takes their trace flags off now.
-spec add_own(pid(), [pid()]) -> ok.
add_own(Session, Pids) ->
    gen_server:call(?MODULE, {add_own, Session, Pids}, infinity).

%% @doc The processes of `Pids' (skipped by `Session' at its start only
%% because a profile run held them, `held' in its spec) that no profile
%% holds any more get the session's flags: `{ok, Picked, Still, Entry}',
%% Still those a profile still holds, Entry the session's new entry (as
%% `join/2' returns it).  A process another tool took meanwhile, or that
%% has exited, is neither.  `{error, not_found}' for a session the janitor
%% does not know.
-spec pick_up(pid(), [pid()]) ->
          {ok, [pid()], [pid()], map()} | {error, not_found}.
pick_up(Session, Pids) ->
    try gen_server:call(?MODULE, {pick_up, Session, Pids}, infinity)
    catch exit:_ -> {error, not_found}
    end.

%% @doc A profile run (beamprobe_profile) has ended and let go of the
%% processes it held: the running sessions are told (each takes those it
%% skipped for it, pick_up/2).  Does not wait; nothing without a janitor.
-spec profile_ended() -> ok.
profile_ended() ->
    gen_server:cast(?MODULE, profile_ended).

%% @doc The match specs the janitor has installed (for any session) on
%% patterns covering function `F' (meta patterns if `Meta'): what
%% beamprobe_watch accepts on `F' as beamprobe's own doing.  `[]' without
%% a janitor.
-spec installed_specs(mfa(), boolean()) -> [term()].
installed_specs(F, Meta) ->
    try gen_server:call(?MODULE, {installed_specs, F, Meta}, infinity)
    catch exit:_ -> []
    end.

%% @doc Sets on function `F' the pattern beamprobe has installed there now
%% (meta if `Meta'): the match spec of the most specific installed key
%% covering it, the combined one of every session that traces it.  For a
%% watchdog's `on_tamper => reinstall': the pattern it saw last may be
%% older (another session joined or left since).  `ok', or `none' when no
%% installed key covers `F' any more.
-spec reinstall_pattern(mfa(), boolean()) -> ok | none.
reinstall_pattern(F, Meta) ->
    try gen_server:call(?MODULE, {reinstall_pattern, F, Meta}, infinity)
    catch exit:_ -> none
    end.

%% @doc As {@link reinstall_pattern/2} for functions `Fs' of a module
%% loaded again (`Why' = `reloaded': its new code has no pattern): every
%% session on them is sent the list of its own, once (beamprobe_watch
%% reports them `reloaded').  `ok', or `none' when no installed key covers
%% any of them.
-spec reinstall_patterns([mfa()], boolean(), reloaded) -> ok | none.
reinstall_patterns(Fs, Meta, Why) ->
    try gen_server:call(?MODULE, {reinstall_patterns, Fs, Meta, Why},
                        infinity)
    catch exit:_ -> none
    end.

%% @doc The functions of `Fs' whose trace pattern is another tool's:
%% global (beamprobe sets none), or local with a match spec that is not
%% the one the janitor installed there (no session traces the function,
%% or another tool replaced the sessions' pattern after they started,
%% e.g. dbg:tpl/4).  Asked in the janitor, which makes every change of
%% beamprobe's patterns: no session joins or leaves between the VM's
%% answer and the janitor's, so a session starting next to others that
%% join or leave never takes their fresh pattern for another tool's
%% (beamprobe_skip).  Without a janitor: every function with a pattern.
-spec foreign_patterns([mfa()]) -> [mfa()].
foreign_patterns(Fs) ->
    try gen_server:call(?MODULE, {foreign_patterns, Fs}, infinity)
    catch exit:_ -> [F || F <- Fs, ?KEYS:foreign_pattern(F, #{})]
    end.

%% @private
-spec init([]) -> {ok, #st{}, {continue, rejoin}}.
init([]) ->
    ok = beamprobe_own:sensitive(), % no trace events of it (see beamprobe_shell.erl)
    {ok, #st{}, {continue, rejoin}}.

%% @private
%% A restarted janitor asks the running sessions for their entries.
-spec handle_continue(rejoin | collect, #st{}) -> {noreply, #st{}}.
handle_continue(collect, St) ->
    %% A session has left: its entry held the session's NIF resource
    %% (`res'), which the C destructor frees (the ring mapping, the
    %% streams, the handler and TCP state) only once no process refers to
    %% it.  This process lives as long as the node and may not collect
    %% for hours (and an old reference that reached its old heap waits
    %% for a full sweep): every stopped session's memory stayed mapped
    %% until then.  Its heap is small; collecting it now, once the old
    %% state is no longer referenced, lets the resource go.
    _ = erlang:garbage_collect(),
    {noreply, St};
handle_continue(rejoin, St) ->
    _ = case whereis(beamprobe_session_sup) of
            undefined -> ok;
            _ ->
                Children = try supervisor:which_children(beamprobe_session_sup)
                           catch exit:_ -> []
                           end,
                [P ! {beamprobe_rejoin, self()}
                 || {_, P, _, _} <- Children, is_pid(P)]
        end,
    %% Members whose session died with the previous janitor: nobody will
    %% take them over (see reap_orphans).
    _ = erlang:send_after(?REAP_AFTER, self(), reap_orphans),
    {noreply, St}.

%% @private
-spec handle_call(term(), gen_server:from(), #st{}) ->
          {reply, term(), #st{}} | {reply, term(), #st{}, {continue, collect}}.
handle_call({join, Session, Spec}, _From, St) ->
    St0 = drop(Session, St),
    case do_join(Session, Spec, St0) of
        {ok, Matched, St1} ->
            {reply, {ok, Matched, entry(Session, St1)}, St1};
        {error, Reason, St1} -> {reply, {error, Reason}, St1}
    end;
handle_call({leave, Session}, _From, #st{sessions = Ss} = St) ->
    case knows(Session, Ss) of
        true -> {reply, ok, drop(Session, St), {continue, collect}};
        false -> {reply, unknown, St}
    end;
handle_call({leave, Session, Entry}, _From, St) ->
    {reply, ok, drop(Session, adopt(Session, Entry, St)),
     {continue, collect}};
handle_call({installed, Session}, _From,
            #st{sessions = Ss, patterns = Pats, metapatterns = MPats,
                msgpats = MP} = St) ->
    Reply = case [E || #{pid := P} = E <- maps:values(Ss), P =:= Session] of
                [#{calls := Calls, meta := Meta} = E | _] ->
                    Own = [MFA || {MFA, _} <- Calls],
                    Installed = case Meta of
                                    true -> MPats;
                                    false -> Pats
                                end,
                    {ok, #{patterns => maps:filter(
                                         fun(K, _) ->
                                                 lists:any(fun(O) -> covers(O, K) end,
                                                           Own)
                                         end, Installed),
                           message_patterns => maps:with(
                                                 [K || {K, _} <- maps:get(msgs, E)],
                                                 MP),
                           tracer => case Meta of
                                         true -> {meta, beamprobe_nif, ?HUB_META};
                                         false -> ?TRACER
                                     end,
                           procs => maps:get(procs, E)}};
                [] -> {error, not_found}
            end,
    {reply, Reply, St};
handle_call(sessions, _From, #st{sessions = Ss} = St) ->
    {reply, [{P, maps:get(member, E, none)}
             || #{pid := P} = E <- maps:values(Ss)], St};
handle_call({installed_msg, Kind}, _From, #st{msgpats = MP} = St) ->
    {reply, case MP of
                #{Kind := MS} -> {ok, MS};
                #{} -> none
            end, St};
handle_call({add_own, Session, Pids}, _From, #st{sessions = Ss} = St) ->
    Ss1 = maps:map(fun(_, #{pid := P} = E) when P =:= Session ->
                           E#{own => maps:get(own, E, []) ++ Pids};
                      (_, E) -> E
                   end, Ss),
    _ = [catch erlang:trace(P, false, [all, ?TRACER]) || P <- Pids],
    {reply, ok, St#st{sessions = Ss1}};
handle_call({pick_up, Session, Pids}, _From, #st{sessions = Ss} = St) ->
    case [{Ref, E} || {Ref, #{pid := P} = E} <- maps:to_list(Ss),
                      P =:= Session] of
        [{Ref, E} | _] ->
            {Picked, Still} = ?FLAGS:pick_up(E, Pids, Ss),
            E1 = case E of
                     #{procs := L} when is_list(L) ->
                         E#{procs := L ++ Picked, held => Still};
                     #{} -> E#{held => Still}
                 end,
            {reply, {ok, Picked, Still, E1}, St#st{sessions = Ss#{Ref := E1}}};
        [] -> {reply, {error, not_found}, St}
    end;
handle_call({others_patterns, Session, Meta}, _From, #st{sessions = Ss} = St) ->
    {reply, [MFA || #{pid := P, calls := Calls, meta := M} <- maps:values(Ss),
                    P =/= Session, Meta =:= both orelse M =:= Meta,
                    {{_, _, _} = MFA, _} <- Calls],
     St};
handle_call({reinstall_patterns, Fs, Meta, reloaded}, _From, St) ->
    %% The module was loaded again: its new code gets the patterns, and
    %% every session on them is told, once per session with the list
    %% (beamprobe_watch: `reloaded').  Only where the new code has no
    %% pattern still: another tool may have set its own there since the
    %% watchdog looked (its watchdog then reports it replaced), or
    %% another watchdog's call set it already.
    case [F || F <- Fs, ?KEYS:no_pattern(F, Meta), set_again(F, Meta, St)] of
        [] -> {reply, none, St};
        Set ->
            Seen = erlang:system_time(millisecond),
            _ = [P ! {beamprobe_pattern_reset, Mine, Seen, reloaded}
                 || #{pid := P, meta := Me, calls := Calls} <- maps:values(
                                                                 St#st.sessions),
                    Me =:= Meta,
                    Mine <- [[F || F <- Set, covered(Calls, F)]],
                    Mine =/= []],
            {reply, ok, St}
    end;
handle_call({reinstall_pattern, F, Meta}, _From, St) ->
    case set_again(F, Meta, St) of
        false -> {reply, none, St};
        true ->
            %% Every session tracing F lost its calls while the pattern
            %% was gone: their watchdogs report it (one may not have
            %% looked yet, and now never sees a difference), and that it
            %% is back.
            pattern_back([F], Meta, reinstall, none, St),
            {reply, ok, St}
    end;
handle_call({foreign_patterns, Fs}, _From, St) ->
    Pats = installed_pats(St, false),
    {reply, [F || F <- Fs, ?KEYS:foreign_pattern(F, Pats)], St};
handle_call({installed_specs, F, Meta}, _From, St) ->
    %% As erlang:trace_info/2 shows them: `true' is the empty match spec.
    {reply, [case MS of true -> []; _ -> MS end
             || {K, MS} <- maps:to_list(installed_pats(St, Meta)),
                covers(K, F)], St};
handle_call(_, _From, St) ->
    {reply, {error, unknown_request}, St}.

%%% ------------------------------------------------------------------------
%%% Joining
%%% ------------------------------------------------------------------------

entry(Session, #st{sessions = Ss}) ->
    hd([E || #{pid := P} = E <- maps:values(Ss), P =:= Session]).

%% Takes over a session this janitor does not know (it was restarted):
%% what is installed is then what the known sessions need.
adopt(_Session, undefined, St) -> St;
adopt(Session, #{pid := Session} = E,
      #st{sessions = Ss, msgpats = MP} = St) ->
    case knows(Session, Ss) of
        true -> St;
        false ->
            St1 = St#st{sessions = Ss#{monitor(process, Session) => E},
                        msgpats = maps:merge(MP, maps:from_list(
                                                   maps:get(msgs, E)))},
            lists:foldl(fun(Meta, S) ->
                                case desired(S, Meta) of
                                    {ok, D} -> set_installed(S, Meta, D);
                                    {error, _} -> S
                                end
                        end, St1, [false, true])
    end;
adopt(_Session, _Other, St) -> St.

knows(Session, Ss) ->
    lists:any(fun(#{pid := P}) -> P =:= Session end, maps:values(Ss)).

do_join(Session, Spec, #st{sessions = Ss} = St) ->
    Ref = monitor(process, Session),
    %% `others': the processes other tools held when the session looked
    %% (beamprobe_skip:skip/2), for this install only.
    E0 = maps:remove(others, Spec#{pid => Session}),
    Others = maps:get(others, Spec, careful),
    case conflicts(E0, maps:values(Ss)) of
        {Pid, What} ->
            demonitor(Ref, [flush]),
            {error, {conflict, Pid, What}, St};
        none ->
            case add_member(E0) of
                {ok, E} ->
                    St1 = St#st{sessions = Ss#{Ref => E}},
                    try install(E#{others => Others}, St1) of
                        {ok, Matched, St2} -> {ok, Matched, St2};
                        {error, Reason, St2} ->
                            {error, Reason, drop(Session, St2)}
                    catch throw:{trace_failed, _, _} = Why ->
                            {error, Why, drop(Session, St1)};
                          Class:Reason:Stack ->
                            {error, {install_failed,
                                     {Class, Reason, hd(Stack ++ [none])}},
                             drop(Session, St1)}
                    end;
                {error, Reason} ->
                    demonitor(Ref, [flush]),
                    {error, Reason, St}
            end
    end.

%% A hub member for a session that sets flags on processes.
add_member(#{procs := none, meta := false} = E) -> {ok, E};
add_member(#{res := Res, procs := Procs0, kinds := Kinds,
             calls := Calls} = E) ->
    %% A pure meta session (no process events): its meta calls come from
    %% every process, as the VM's meta patterns apply to every process.
    Procs = case Procs0 of
                none -> all;
                _ -> Procs0
            end,
    {Mode, Set} = case Procs of
                      %% With the processes a profile run holds: no event
                      %% of theirs comes before the profile lets them go
                      %% and pick_up/2 sets the session's flags on them.
                      L when is_list(L) -> {list, L ++ maps:get(held, E, [])};
                      all -> {all, []};
                      %% Alive at start: `existing' includes them, `new'
                      %% everything else.  A pid reused after one of them
                      %% ended counts as existing (docs/design.md).
                      Other -> {Other, processes() ++ erlang:ports()}
                  end,
    %% Functions whose pattern another tool holds (beamprobe_skip:skip/2)
    %% still give this session's processes call events: routed like the
    %% session's own (no pattern of ours is set on them).
    Pats = [MFA || {MFA, _} <- Calls] ++ maps:get(relied, E, []),
    Snapshot = case Mode of
                   new -> maps:from_keys(Set, []);
                   existing -> maps:from_keys(Set, []);
                   _ -> undefined
               end,
    {HubMode, HubSet} = excluding(Mode, Set, maps:get(exclude, E, [])),
    case beamprobe_nif:hub_add(Res, #{kinds => Kinds, procs => HubMode,
                                      pids => HubSet, calls => Pats}) of
        {ok, N} -> {ok, E#{member => N, snapshot => Snapshot}};
        {error, hub_full} -> {error, {too_many_sessions, 256}};
        {error, R} -> {error, R}
    end.

%% The member's processes without the excluded ones (`exclude'): only
%% the member's routing changes; flags stay as the processes' sessions
%% need them (the excluded processes' events go to the other sessions
%% that record them).  The hub's `new' mode is "every process not in the
%% set", so `all' but some is `new' with them as the set.
excluding(Mode, Set, []) -> {Mode, Set};
excluding(all, [], Ex) -> {new, Ex};
excluding(new, Set, Ex) -> {new, Set ++ Ex};
excluding(Mode, Set, Ex) -> {Mode, Set -- Ex}.       % list, existing

install(#{calls := Calls, meta := Meta, pid := Self} = E, St) ->
    case desired(St, Meta) of
        {ok, Desired} ->
            Own = [MFA || {MFA, _} <- Calls],
            Old = installed_pats(St, Meta),
            %% The joining session's keys are set whole: on a function
            %% another tool left without a pattern that the other sessions
            %% still claim, their calls come back (told: pattern_back/5).
            Back = ?KEYS:gone_under(Own, Old, relied(St, Meta), Meta),
            case apply_patterns(Old, Desired, Own, Meta, St) of
                {ok, Counts} ->
                    St1 = set_installed(St, Meta, Desired),
                    case [MFA || MFA <- Own, maps:get(MFA, Counts, 0) =:= 0] of
                        [Missing | _] -> {error, {no_match, Missing}, St1};
                        [] ->
                            Matched = lists:sum([maps:get(M, Counts)
                                                 || M <- lists:usort(Own)]),
                            case set_msg_patterns(E, St1) of
                                {ok, St2} ->
                                    ?FLAGS:set_flags(E, St2#st.sessions),
                                    pattern_back(Back, Meta, joined, Self,
                                                 St2),
                                    {ok, Matched + length(maps:get(msgs, E)),
                                     St2};
                                {error, R} -> {error, R, St1}
                            end
                    end;
                {error, R, Done} ->
                    {error, R, set_installed(St, Meta, Done)}
            end;
        {error, R} -> {error, R, St}
    end.

%% The functions of Fs that have a pattern of the kind again (set by
%% beamprobe after another tool removed it: a session naming them joined,
%% or on_tamper => reinstall): every session of the kind but Except whose
%% patterns cover one, or that relies on it (another tool's pattern it
%% used, beamprobe_skip), records its calls again and is told
%% (beamprobe_watch: `restored', after `removed' if its watchdog had not
%% reported the gap yet).
pattern_back([], _Meta, _Why, _Except, _St) -> ok;
pattern_back(Fs, Meta, Why, Except, #st{sessions = Ss}) ->
    Seen = erlang:system_time(millisecond),
    _ = [P ! {beamprobe_pattern_reset, F, Seen, Why}
         || F <- Fs, not ?KEYS:no_pattern(F, Meta),
            #{pid := P, meta := Me, calls := Calls} = E <- maps:values(Ss),
            P =/= Except, Me =:= Meta,
            covered(Calls, F) orelse lists:member(F, maps:get(relied, E, []))],
    ok.

%% Whether a session's call patterns cover function F.
covered(Calls, F) ->
    lists:any(fun({K, _}) -> covers(K, F) end, Calls).

%% The functions other tools' patterns cover that sessions of the kind
%% rely on (beamprobe_skip: local patterns only).
relied(_St, true) -> [];
relied(#st{sessions = Ss}, false) ->
    lists:usort(lists:append([maps:get(relied, E, []) || E <- maps:values(Ss)])).

%% Sets F's pattern as beamprobe has it now (the most specific of the
%% installed keys covering F); false if none covers it.
set_again(F, Meta, St) ->
    Pats = installed_pats(St, Meta),
    case ?KEYS:general_first([K || K <- maps:keys(Pats), covers(K, F)]) of
        [] -> false;
        Keys ->
            MS = maps:get(lists:last(Keys), Pats),  % the most specific
            _ = safely(fun() -> erlang:trace_pattern(F, MS, set_flag(Meta))
                       end),
            true
    end.

installed_pats(#st{metapatterns = P}, true) -> P;
installed_pats(#st{patterns = P}, false) -> P.

set_installed(St, true, P) -> St#st{metapatterns = P};
set_installed(St, false, P) -> St#st{patterns = P}.

%% The call patterns every live session of one kind (meta or not) needs.
desired(#st{sessions = Ss}, Meta) ->
    beamprobe_combine:desired([{M, Calls}
                               || #{meta := Me, calls := Calls,
                                    member := M} <- maps:values(Ss),
                                  Me =:= Meta, Calls =/= []],
                              route_tags()).

%% The tags of the routes in combined match specs: the node's, which no
%% traced term carries (a session's own `message' action, installed as
%% it is, could otherwise send a route of its choosing: its calls into
%% other sessions' traces).
route_tags() ->
    beamprobe_nif:hub_route_tags().

%% Applies the difference from the installed patterns Old to New: keys
%% gone are removed unless a remaining more general key covers them (then
%% setting that one restores them); changed keys, Force keys and every
%% key a touched key covers are set again, the most general first (the
%% last trace_pattern/3 on a function wins).  Returns the number of
%% functions each set key matched.
apply_patterns(Old, New, Force, Meta, St) ->
    %% The tracer looks for routes while any combined match spec may be
    %% installed: raised before they are set, lowered after.
    Tags = route_tags(),
    Other = beamprobe_combine:routes(installed_pats(St, not Meta), Tags),
    Routes = beamprobe_combine:routes(New, Tags),
    ok = beamprobe_nif:hub_routes(
           Other + max(Routes, beamprobe_combine:routes(Old, Tags))),
    R = apply_patterns1(Old, New, Force, Meta),
    ok = beamprobe_nif:hub_routes(Other + Routes),
    R.

%% trace_pattern/3 flags to set and to remove a pattern of the kind.
set_flag(true) -> [{meta, beamprobe_nif, ?HUB_META}];
set_flag(false) -> [local].

unset_flag(true) -> [meta];
unset_flag(false) -> [local].

apply_patterns1(Old, New, Force, Meta) ->
    Removed = [K || K <- maps:keys(Old), not maps:is_key(K, New)],
    Changed = [K || {K, MS} <- maps:to_list(New),
                    maps:get(K, Old, '$none') =/= MS] ++
        [K || K <- Force, maps:is_key(K, New)],
    R0 = lists:usort(Changed ++
                         [K || K <- maps:keys(New),
                               lists:any(fun(Rm) -> covers(K, Rm) end,
                                         Removed)]),
    Reset = lists:usort(R0 ++ [K || K <- maps:keys(New),
                                    lists:any(fun(T) -> covers(T, K) end,
                                              R0 ++ Removed)]),
    Kept = maps:without(Force, Old),
    %% The functions of the keys set again that had no pattern before this
    %% pass (another tool removed it): they stay so (set_key/7).  Looked
    %% at before the removals, whose functions a key set again restores.
    Gone = maps:from_keys(
             [MFA || K <- Reset, is_map_key(K, Kept),
                     MFA <- beamprobe_skip:functions(K),
                     ?KEYS:no_pattern(MFA, Meta)], []),
    _ = [safely(fun() -> remove_key(K, Old, Meta) end)
         || K <- ?KEYS:general_first(Removed),
            not lists:any(fun(N) -> covers(N, K) end, maps:keys(New))],
    %% (Keys a session forces are set whole.)
    case ?KEYS:set_keys(?KEYS:general_first(Reset), New, #{}, Old,
                  {set_flag(Meta), Kept, Meta, Gone}) of
        {ok, _} = Ok -> Ok;
        {error, R, Done} ->
            %% What is installed now: the old keys this pass did not
            %% remove (the one that failed keeps its old match spec), and
            %% those it set.  (Only those it set: the keys of sessions
            %% installed before were forgotten, and left installed when
            %% their sessions stopped.)
            {error, R, maps:merge(maps:without(Removed, Old), Done)}
    end.

%% Removes key K's pattern, which no live session needs any more, from
%% the functions where it is still beamprobe's: one whose pattern another
%% tool set meanwhile (the watchdog reported it replaced) keeps it, as
%% beamprobe never takes a pattern from another tool.  Old: the installed
%% keys; a function holds the match spec of one covering it (the most
%% specific, set last).
remove_key(K, Old, Meta) ->
    ?KEYS:on_ours(K, false, unset_flag(Meta),
            fun(MFA) -> ?KEYS:ours(MFA, Old, Meta, true) end).

covers(A, B) -> beamprobe_combine:covers(A, B).

%% Message patterns are global in the VM: one per kind, shared by the
%% sessions that set the same one (conflicts/2 refused the others).
%% A kind that fails (badarg) undoes the kinds this call set before it:
%% the session is refused, and nothing would remove them.
set_msg_patterns(#{msgs := Msgs}, St) ->
    case fold_msg_patterns(Msgs, St) of
        {ok, _} = Ok -> Ok;
        {error, R, #st{msgpats = MP, msgprev = Prev}} ->
            _ = [safely(fun() -> message_pattern(K, maps:get(K, Prev, true)) end)
                 || K <- maps:keys(MP), not is_map_key(K, St#st.msgpats)],
            {error, R}
    end.

fold_msg_patterns(Msgs, St) ->
    lists:foldl(
      fun({Kind, MS}, {ok, #st{msgpats = MP} = S}) ->
              case MP of
                  #{Kind := MS} -> {ok, S};
                  #{} ->
                      Prev = case maps:is_key(Kind, MP) of
                                 true -> maps:get(Kind, S#st.msgprev, true);
                                 false -> msg_state(Kind)
                             end,
                      try message_pattern(Kind, MS) of
                          _ -> {ok, S#st{msgpats = MP#{Kind => MS},
                                         msgprev = (S#st.msgprev)#{Kind => Prev}}}
                      catch error:badarg ->
                              {error, {bad_pattern, {Kind, MS}}, S}
                      end
              end;
         (_, Err) -> Err
      end, {ok, St}, Msgs).

%% Refusals: a message pattern that another session recording those
%% messages does not share -- on any processes: the pattern is the
%% node's, so it filters the other session's messages wherever they are.
conflicts(E, Others) ->
    Found = [{Pid, What} || #{pid := Pid} = O <- Others,
                            What <- conflict(E, O)],
    case Found of [] -> none; [F | _] -> F end.

conflict(A, B) ->
        [{message_pattern, K}
         || {K, Bit} <- [{send, ?K_SEND}, {'receive', ?K_RECEIVE}],
            maps:get(kinds, A) band Bit =/= 0,
            maps:get(kinds, B) band Bit =/= 0,
            %% (No pattern is the VM's `true'.)
            proplists:get_value(K, maps:get(msgs, A), true) =/=
                proplists:get_value(K, maps:get(msgs, B), true)].

%%% ------------------------------------------------------------------------
%%% Leaving
%%% ------------------------------------------------------------------------

%% Undoes what session Pid installed (see the module doc), in this order:
%% flags (the node first), call patterns, message patterns, the hub
%% member.  Returns the state without it.
drop(Pid, #st{sessions = Ss} = St) ->
    case [{Ref, E} || {Ref, #{pid := P} = E} <- maps:to_list(Ss),
                      P =:= Pid] of
        [] -> St;
        [{Ref, E} | _] ->
            demonitor(Ref, [flush]),
            undo(E, St#st{sessions = maps:remove(Ref, Ss)})
    end.

undo(#{meta := Meta} = E, #st{sessions = Ss} = St) ->
    Others = maps:values(Ss),
    _ = safely(fun() -> ?FLAGS:remove_flags(E, Others) end),
    St1 = case desired(St, Meta) of
              {ok, D} ->
                  case safely(fun() ->
                                      apply_patterns(installed_pats(St, Meta),
                                                     D, [], Meta, St)
                              end) of
                      %% A key the VM refused keeps its old match spec:
                      %% recorded as installed, so that it is removed
                      %% when no session needs it (recording D lost it).
                      {error, _, Now} -> set_installed(St, Meta, Now);
                      _ -> set_installed(St, Meta, D)
                  end;
              {error, _} -> St
          end,
    St2 = remove_msg_patterns(St1),
    _ = case E of
            #{member := N} ->
                safely(fun() -> beamprobe_nif_wait:hub_remove(N) end);
            #{} -> ok
        end,
    St2.

remove_msg_patterns(#st{sessions = Ss, msgpats = MP} = St) ->
    Held = lists:append([[K || {K, _} <- maps:get(msgs, E)]
                         || E <- maps:values(Ss)]),
    Gone = [K || K <- maps:keys(MP), not lists:member(K, Held)],
    %% The pattern before the first session, if the node's is still the
    %% one beamprobe set (another tool that set one since keeps it).
    _ = [safely(fun() ->
                        case msg_state(K) =:= maps:get(K, MP) of
                            true -> message_pattern(
                                      K, maps:get(K, St#st.msgprev, true));
                            false -> ok
                        end
                end) || K <- Gone],
    St#st{msgpats = maps:without(Gone, MP),
          msgprev = maps:without(Gone, St#st.msgprev)}.

%% @doc The node's message pattern of kind `K' (one per node), as
%% erlang:trace_info/2 gives it: `true' (every message, the VM's
%% default), `false' (none) or a match spec.
-spec msg_state(send | 'receive') -> term().
msg_state(K) ->
    case trace_info(K, match_spec) of
        {match_spec, MS} -> MS;
        _ -> true
    end.

%% erlang:trace_pattern(send | 'receive', ...) through apply: its OTP 25
%% spec leaves out message patterns, which dialyzer then calls impossible.
message_pattern(Kind, MS) ->
    erlang:apply(erlang, trace_pattern, [Kind, MS, []]).

%% @private erlang:trace_info/2 through apply: its OTP 25 spec leaves out
%% tracers of the form {Module, State}, which dialyzer then calls
%% impossible.
-spec trace_info(term(), atom()) -> term().
trace_info(What, Item) ->
    erlang:apply(erlang, trace_info, [What, Item]).

%% @private Runs a clean-up step F; a step that fails is logged, and the
%% next one runs (the janitor never crashes on a session's behalf).
-spec safely(fun(() -> term())) -> term().
safely(F) ->
    try F()
    catch Class:Reason ->
            logger:warning("beamprobe_janitor: clean-up step failed: ~p:~p",
                           [Class, Reason]),
            error
    end.

%% @private
-spec handle_cast(term(), #st{}) -> {noreply, #st{}}.
handle_cast({rejoin, Session, Entry}, St) ->
    {noreply, adopt(Session, Entry, St)};
handle_cast(profile_ended, #st{sessions = Ss} = St) ->
    _ = [P ! beamprobe_profile_ended || #{pid := P} <- maps:values(Ss)],
    {noreply, St};
handle_cast(_, St) ->
    {noreply, St}.

%% @private
-spec handle_info(term(), #st{}) ->
          {noreply, #st{}} | {noreply, #st{}, {continue, collect}}.
handle_info({'DOWN', Ref, process, _, _Why}, #st{sessions = Ss} = St) ->
    case maps:take(Ref, Ss) of
        {E, Ss1} ->
            %% Died without leaving: undo what it installed, then
            %% finalise its trace.
            St1 = undo(E, St#st{sessions = Ss1}),
            #{res := Res} = E,
            _ = safely(fun() -> beamprobe_nif_wait:stop(Res) end),
            {noreply, St1, {continue, collect}};
        error ->
            {noreply, St}
    end;
handle_info(reap_orphans, St) ->
    {noreply, reap_orphans(St)};
handle_info(beamprobe_nif_reloaded, #st{sessions = Ss} = St) ->
    %% The NIF module was loaded again (beamprobe_nif:load/0): the VM has
    %% dropped it as the tracer of every process and meta pattern.  Set
    %% every session's flags and meta patterns again (taking no process
    %% another tracer holds now), then tell the sessions (they count it).
    %% A call to the module waits until its load has finished.
    _ = (catch beamprobe_nif:is_loaded()),
    MPats = St#st.metapatterns,
    _ = safely(fun() -> apply_patterns(#{}, MPats, maps:keys(MPats), true,
                                       St) end),
    _ = [safely(fun() -> ?FLAGS:set_flags(E, Ss) end) || E <- maps:values(Ss)],
    _ = [Pid ! beamprobe_nif_reloaded || #{pid := Pid} <- maps:values(Ss)],
    {noreply, St};
handle_info(_, St) ->
    {noreply, St}.

%% Hub members of sessions that died while no janitor ran (killed with
%% the previous one): out of the hub; their flags too if no session is
%% left (what others share stays: the union cannot tell whose it was).
%% A member whose session process still lives is being taken over.
reap_orphans(#st{sessions = Ss} = St) ->
    Known = [N || #{member := N} <- maps:values(Ss)],
    Orphans = [N || {N, Pid} <- safe_hub_list(), not lists:member(N, Known),
                    not (is_pid(Pid) andalso is_process_alive(Pid))],
    _ = [safely(fun() -> beamprobe_nif_wait:hub_remove(N) end) || N <- Orphans],
    _ = Orphans =/= [] andalso
        [P || #{procs := P} <- maps:values(Ss), P =/= none] =:= [] andalso
        safely(fun ?FLAGS:untrace_node/0),
    St.

safe_hub_list() ->
    try beamprobe_nif:hub_list()
    catch _:_ -> []
    end.


