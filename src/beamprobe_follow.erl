%%% @doc Following a request: a session that starts tracing at a root
%%% call and spreads along the request's messages, on one node or on
%%% every node of a cluster session.
%%%
%%% `beamprobe:start(#{follow => #{from => "m:f/2", budget => #{events =>
%%% N, ms => T, requests => R}}, output => {file, Dir}})' follows on this
%%% node; with
%%% `nodes => [node() | nodes()]' it is a cluster session
%%% (beamprobe_cluster) whose every node runs one of these, so that a
%%% request is followed on each listed node its messages reach, wherever
%%% its root call is made (an unlisted node is not traced: the label
%%% passes through it).
%%%
%%% ```
%%% every process has `call' (this session's tracer)
%%% any process calls m:f/2 --(call pattern)--> match spec: seq_trace
%%%   label (an integer naming the node and the session: label/2) on
%%%   the caller, with the
%%%   token's `send' and `receive' flags; return_trace
%%% a process carrying that label sends --(the VM's seq_trace: this
%%%   session is the node's system seq_trace tracer)--> send event
%%% a process receives a labelled message --(seq_trace)--> receive
%%%   event, written in the receiver when it takes the message (not when
%%%   it enters the queue)
%%% the VM carries the label with each message, to other nodes too, and
%%%   clears it when a process takes a message without one
%%% '''
%%%
%%% A process that already carries a seq_trace label of its own when it
%%% calls the root (the application's, or another tool's: anything but a
%%% follow label) is not taken over: its token is left as it was, that
%%% call is not followed, and it is counted (`requests' `labelled' in
%%% info/1 and the summary; the call's return is not traced).
%%%
%%% So only the request's messages are recorded: a send only while its
%%% sender works for a followed request (it took a labelled message last,
%%% or is the root in or after its root call), a receive only of a
%%% labelled message.  No process is enabled on the way and nothing
%%% races: both are decided by the label of the process that acts.
%%% `bin/beamprobe request' builds each request's tree from them (sends
%%% matched to receives).
%%%
%%% Budget, per request (c_src/bp_follow.h): every request has the same
%%% label (on OTP 25 a match spec cannot give each root call a label of
%%% its own), so the tracer tells requests apart: each root call starts a
%%% request; a message belongs to the request its sender works for (by
%%% the seq_trace serial the VM gives each labelled message: sender and
%%% serial at the send, the same at the receive); a process works for the
%%% request of the message it took last (as its seq_trace token does),
%%% the root until its root call returns.  Each request may record
%%% `events' events (default 10000) within `ms' ms of its root call
%%% (default 5000); later events of it are not written and are counted
%%% (`dropped' `request_events', `request_ms'), and its first cut event
%%% writes an annotation `follow_cut' ({events, N} or {ms, T}) about its
%%% root process.  `requests' (default 1024, at most 16384) bounds the
%%% requests the tracer keeps apart at once (fixed tables, allocated at
%%% start): a root call when that many requests are in their root calls
%%% (and younger than `ms') is refused (`requests' `refused', nothing of
%%% it recorded); an event of a request pushed out of the tables by newer
%%% ones, and a process or message the tables could not hold (8 and 16
%%% per request slot), is counted as `request_table'.  On another node, a labelled
%%% message from a remote process that is not an answer to one this node
%%% sent for a request (the sender's first send after taking it) starts a
%%% part of the request with a budget of its own: each node bounds what
%%% it records of a request, per part.
%%%
%%% The session as a whole is bounded by `limits' (as any session:
%%% `events' 1000000 here unless given, `bytes', `seconds' 60); when one
%%% is reached (`stop_reason' `limit_events', `limit_bytes',
%%% `limit_seconds'), or stop/1 is called, or the owner dies (or the
%%% session process is killed: a guard process, guard/1), everything
%%% it installed is removed: the call pattern, the flags of every process
%%% it traced, the system seq_trace tracer (back to none).  What it cannot
%%% remove: the seq_trace label stays in the processes that carry it
%%% until they receive an unlabelled message (no process can clear
%%% another's token); without the system tracer it has no effect on
%%% tracing.
%%%
%%% It needs the node's trace patterns and its one system seq_trace tracer
%%% for itself: it refuses to start while another beamprobe session runs,
%%% another tool has a pattern on the root function, a system seq_trace
%%% tracer is set (`{seq_trace_tracer, T}'), default flags for new
%%% processes are set, or a profile runs (`{profile, Pid}', {@link
%%% beamprobe:profile/2}: it holds the call flag of every process nobody
%%% traces) (`{error, {follow_conflict, What}}'); while it runs,
%%% every other session's start is refused (`{error, {follow_running,
%%% Pid}}', beamprobe_session).
-module(beamprobe_follow).
-behaviour(gen_server).

-export([start/2, is_handle/1, call/2, check/1, running/0, label/2,
         new_label/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, handle_continue/2,
         terminate/2]).

%% A follow label's bits 48-57 (label/2, c_src/bp_follow.h).
-define(LABEL_MAGIC, 16#2DF).
-define(IS_LABEL(L), (is_integer(L) andalso L bsr 48 =:= ?LABEL_MAGIC
                      andalso L < 1 bsl 58)).
-define(EVENTS, 10000).
-define(MS, 5000).
-define(MAX_MS, 3600000).
-define(REQUESTS, 1024).
-define(MAX_REQUESTS, 16384).
%% The session-wide bounds (limits), unless given.
-define(SESSION_EVENTS, 1000000).

%% The registered name of the node's follow session while installed.
-define(CLAIM, beamprobe_follow_session).

-record(st, {owner :: pid(),
             monitor :: reference(),
             res :: undefined | beamprobe_nif:session(),
             mfa :: {module(), atom(), arity() | '_'},
             dir :: string(),
             new_set = false :: boolean(),
             seq_set = false :: boolean(),
             pat_set = false :: boolean(),
             claimed = false :: boolean(),
             created_dir = false :: boolean(),
             timer :: undefined | reference(),
             nif_reloads = 0 :: non_neg_integer(),
             started :: integer(),
             budget :: #{events := pos_integer(), ms := pos_integer(),
                         requests := pos_integer()},
             %% The seq_trace label of this session (label/2).
             label :: non_neg_integer(),
             %% The process that cleans up if this one is killed (guard/1).
             guard :: undefined | pid(),
             summary :: undefined | map()}).


%%% ------------------------------------------------------------------------
%%% API
%%% ------------------------------------------------------------------------

%% @doc Starts a follow session owned by `Owner' (see the module doc).
-spec start(map(), pid()) -> {ok, pid()} | {error, term()}.
start(Spec, Owner) ->
    case check(Spec) of
        {ok, Cfg} ->
            {ok, Pid} = gen_server:start(?MODULE, {Owner, Cfg}, []),
            try gen_server:call(Pid, install, infinity) of
                ok -> {ok, Pid};
                {error, _} = E -> E
            catch exit:{R, _} -> {error, {follow_failed, R}}
            end;
        {error, _} = E -> E
    end.

%% @doc True if `Pid' is a follow session of this node.
-spec is_handle(term()) -> boolean().
is_handle(Pid) -> beamprobe_own:is_handle(Pid, follow).

%% @doc The node's follow session while it is installed (or installing),
%% else `undefined': every other session's start is refused meanwhile
%% (beamprobe_session), as this one refuses to start next to them.
-spec running() -> pid() | undefined.
running() -> whereis(?CLAIM).

%% @doc `stop' or `info' on a follow session.
-spec call(pid(), stop | info) -> {ok, map()} | {error, term()}.
call(Pid, Req) ->
    try gen_server:call(Pid, Req, 60000)
    catch exit:_ -> {error, not_found}
    end.

%% @doc Checks a follow spec: `{ok, Config}' or the first error.
-spec check(map()) -> {ok, map()} | {error, term()}.
check(#{follow := F} = Spec) when is_map(F) ->
    Allowed = [follow, output, args, capture, buffer, tag, limits],
    case [K || K <- maps:keys(Spec), not lists:member(K, Allowed)] of
        [K | _] ->
            {error, {bad_option, K, "not with follow (allowed: output, "
                     "args, capture, buffer, tag, limits)"}};
        [] ->
            case maps:get(limits, Spec, #{}) of
                #{rate := R} when R =/= infinity ->
                    {error, {bad_option, {limits, rate}, "not with follow"}};
                _ -> check_follow(F, Spec)
            end
    end;
check(#{follow := F}) -> {error, {bad_option, follow, F}}.

check_follow(F, Spec) ->
    case [K || K <- maps:keys(F), not lists:member(K, [from, budget, '$label'])] of
        [K | _] -> {error, {unknown_option, {follow, K}}};
        [] when not is_map_key('$label', F) orelse
                ?IS_LABEL(map_get('$label', F)) ->
            case {root(maps:get(from, F, undefined)),
                  budget(maps:get(budget, F, #{}))} of
                {{error, _} = E, _} -> E;
                {_, {error, _} = E} -> E;
                {{ok, MFA}, {ok, B}} ->
                    %% The rest is checked as a session spec would be.
                    Base = maps:without([follow], Spec),
                    case beamprobe_config:validate(Base#{calls => [MFA]}) of
                        {ok, #{sinks := [#{type := file}]} = C} ->
                            {ok, maps:merge(
                                   C#{root => MFA, budget => B,
                                      limits => session_limits(Spec, C)},
                                   maps:with(['$label'], F))};
                        %% The follow session writes a directory only: a
                        %% handler, tcp or usdt sink would be ignored.
                        {ok, _} ->
                            {error, {bad_option, output,
                                     "a follow session writes a trace "
                                     "directory only: output => {file, Dir}"}};
                        {error, _} = E -> E
                    end
            end;
        [] -> {error, {bad_option, {follow, '$label'}, maps:get('$label', F)}}
    end.

root(P) when is_list(P); is_binary(P) ->
    case beamprobe_pattern:parse(P) of
        {ok, #{kind := call, mfa := {M, F, _} = MFA, match_spec := [{'_', [], []}],
               actions := []}} when M =/= '_', F =/= '_' ->
            {ok, MFA};
        {ok, _} ->
            {error, {bad_option, {follow, from},
                     "a root function m:f/arity (no guards or actions)"}};
        {error, {Col, Msg}} -> {error, {bad_pattern, P, Col, Msg}}
    end;
root(P) -> {error, {bad_option, {follow, from}, P}}.

budget(B) when is_map(B) ->
    M = maps:merge(#{events => ?EVENTS, ms => ?MS, requests => ?REQUESTS}, B),
    case M of
        _ when map_size(M) > 3 -> {error, {bad_option, {follow, budget}, B}};
        #{events := E, ms := Ms, requests := R}
          when is_integer(E), E > 0, E =< 16#FFFFFFFFFFFFFFFF,
               is_integer(Ms), Ms > 0, Ms =< ?MAX_MS,
               is_integer(R), R > 0, R =< ?MAX_REQUESTS ->
            {ok, M};
        _ -> {error, {bad_option, {follow, budget}, B}}
    end;
budget(B) -> {error, {bad_option, {follow, budget}, B}}.

%% The session-wide bounds: `limits' as for any session, but `events'
%% is ?SESSION_EVENTS unless given (a follow session records on every
%% process of the node).
session_limits(Spec, #{limits := L}) ->
    case maps:get(limits, Spec, #{}) of
        #{events := _} -> L;
        _ -> L#{events := ?SESSION_EVENTS}
    end.

%%% ------------------------------------------------------------------------
%%% The session process
%%% ------------------------------------------------------------------------

%% @private
-spec init({pid(), map()}) -> {ok, #st{}}.
init({Owner, C}) ->
    ok = beamprobe_own:mark_handle(follow),
    process_flag(trap_exit, true),
    #{root := MFA, budget := B, dir := Dir} = C,
    put(config, C),
    {ok, #st{owner = Owner, monitor = monitor(process, Owner), mfa = MFA,
             dir = Dir, budget = B,
             %% A cluster session's nodes share one label
             %% (beamprobe_cluster): only its own counts on each node.
             label = maps:get('$label', C, new_label()),
             started = erlang:monotonic_time(millisecond)}}.

%% @private
-spec handle_call(term(), gen_server:from(), #st{}) ->
          {reply, term(), #st{}} | {stop, normal, term(), #st{}}.
handle_call(install, _From, St) ->
    case install(St) of
        {ok, St1} -> {reply, ok, St1};
        {error, R, St1} ->
            {stop, normal, {error, R}, discard(uninstall(St1))}
    end;
handle_call(stop, _From, St) ->
    St1 = finish(St, requested),
    {stop, normal, {ok, St1#st.summary}, St1};
handle_call(info, _From, #st{summary = undefined, res = Res} = St) ->
    Stats = try beamprobe_nif:info(Res) catch _:_ -> #{} end,
    {reply, {ok, Stats#{output => St#st.dir, root => St#st.mfa,
                        budget => St#st.budget,
                        nif_reloads => St#st.nif_reloads,
                        traced => length(traced(St))}}, St};
handle_call(info, _From, #st{summary = Sum} = St) ->
    {reply, {ok, Sum}, St};
handle_call(_, _From, St) ->
    {reply, {error, unknown_request}, St}.

%% @private
-spec handle_cast(term(), #st{}) -> {noreply, #st{}}.
handle_cast(_, St) -> {noreply, St}.

%% @private
-spec handle_info(term(), #st{}) ->
          {noreply, #st{}} | {noreply, #st{}, {continue, collect}}
          | {stop, normal, #st{}}.
handle_info({'DOWN', Ref, process, _, _}, #st{monitor = Ref} = St) ->
    {stop, normal, finish(St, owner_down)};
handle_info(limit_seconds, St) ->
    ended(finish(St, limit_seconds));
handle_info({beamprobe_stop, events}, St) ->
    ended(finish(St, limit_events));
handle_info({beamprobe_stop, bytes}, St) ->
    ended(finish(St, limit_bytes));
handle_info({beamprobe_stop, Why}, St) ->
    ended(finish(St, Why));
handle_info(beamprobe_nif_reloaded, #st{summary = undefined,
                                       res = Res} = St) when Res =/= undefined ->
    {noreply, retrace(St)};
handle_info(_, St) -> {noreply, St}.

%% Ended by a limit: the summary waits for stop/1; the resource, dropped
%% by finish/2, goes now (this idle process would not collect for long).
ended(St) -> {noreply, St, {continue, collect}}.

%% @private
-spec handle_continue(collect, #st{}) -> {noreply, #st{}}.
handle_continue(collect, St) ->
    _ = erlang:garbage_collect(),
    {noreply, St}.

%% @private
-spec terminate(term(), #st{}) -> ok.
terminate(_, St) ->
    ok = beamprobe_own:unmark_handle(),
    _ = finish(St, terminated),
    ok.

install(St) ->
    Steps = [fun alone/1, fun make_dir/1, fun start_nif/1, fun guard/1,
             fun seq_tracer/1, fun patterns/1, fun flags/1, fun timer/1],
    run(Steps, St).

run([], St) -> {ok, St};
run([F | Fs], St) ->
    try F(St) of
        {ok, St1} -> run(Fs, St1);
        {error, R, St1} -> {error, R, St1}
    catch C:R:Stack -> {error, {install_failed, {C, R, hd(Stack ++ [none])}}, St}
    end.

%% The node's call pattern on the root and the default flags of new
%% processes must be free.
alone(St) ->
    %% The node's one follow session: this process's registered name
    %% while it is installed, so that two sessions started at the same
    %% moment cannot both pass the checks below (and the loser, undoing
    %% what it set, cannot touch what the winner set).
    try register(?CLAIM, self()) of
        true -> alone1(St#st{claimed = true})
    catch error:badarg ->
            {error, {follow_conflict, {session, whereis(?CLAIM)}}, St}
    end.

alone1(#st{mfa = {M, F, A}} = St) ->
    {module, M} = code:ensure_loaded(M),
    Fs = [{M, F, Ar} || {Fn, Ar} <- erlang:get_module_info(M, functions), Fn =:= F,
                        A =:= '_' orelse Ar =:= A],
    Taken = [MFA || MFA <- Fs,
                    erlang:trace_info(MFA, traced) =/= {traced, false}],
    if
        Fs =:= [] -> {error, {no_such_function, St#st.mfa}, St};
        Taken =/= [] -> {error, {follow_conflict, {pattern, hd(Taken)}}, St};
        true ->
            case {beamprobe:list(), erlang:trace_info(new, flags),
                  system_tracer()} of
                {[S | _], _, _} -> {error, {follow_conflict, {session, S}}, St};
                {[], {flags, [_ | _]}, _} ->
                    {error, {follow_conflict, new_processes}, St};
                {[], _, false} ->
                    case profile_running() of
                        undefined -> {ok, St};
                        P -> {error, {follow_conflict, {profile, P}}, St}
                    end;
                %% Checked again when set (seq_tracer/1): before anything
                %% is created, the usual conflict costs nothing to undo.
                {[], _, Other} ->
                    {error, {follow_conflict, {seq_trace_tracer, Other}}, St}
            end
    end.

%% A profile run (beamprobe_profile: its worker, or its guard while it
%% restores): it gives every process nobody traces the `call' flag with a
%% tracer that discards all, and this session traces only processes
%% nobody traces.  Started during a profile, a follow session recorded
%% nothing (0 events, 0 requests: the root's callers were the
%% profile's), and said nothing.  Checked after the claim, as the profile
%% checks the claim after its name (beamprobe_profile:flag/2): of the two
%% started at once, one sees the other.
profile_running() ->
    case whereis(beamprobe_profile) of
        undefined -> whereis(beamprobe_profile_guard);
        P -> P
    end.

%% The node's system seq_trace tracer (one per node) must be free: the
%% session becomes it, and records the labelled messages the node's
%% processes receive (the token's `receive' flag).
seq_tracer(St) ->
    case system_tracer() of
        false ->
            _ = seq_trace:set_system_tracer(tracer_term(St)),
            {ok, St#st{seq_set = true}};
        Other -> {error, {follow_conflict, {seq_trace_tracer, Other}}, St}
    end.

make_dir(#st{dir = Dir} = St) ->
    case beamprobe_nif_wait:make_dir(unicode:characters_to_binary(Dir)) of
        {error, R} -> {error, {unwritable, Dir, R}, St};
        created -> {ok, St#st{created_dir = true}};
        existing -> {ok, St}
    end.

%% After a failed install: the NIF session ended without a summary, and
%% the directory removed if this session created it (nothing
%% half-installed stays behind).
discard(#st{res = Res, created_dir = Created, dir = Dir} = St) ->
    _ = Res =/= undefined andalso (catch beamprobe_nif_wait:stop(Res)),
    _ = Created andalso beamprobe_nif_wait:remove_dir(Dir),
    St#st{res = undefined, created_dir = false}.

start_nif(#st{dir = Dir, budget = #{events := E, ms := Ms, requests := Rq}} = St) ->
    C = get(config),
    #{limits := #{events := N, bytes := Bytes}} = C,
    Nif = maps:merge(
            #{file => true, dir => unicode:characters_to_binary(Dir),
              file_kinds => 16#FFFFFFFFFFFFFFFF, usdt_kinds => 0,
              handlers => [], rate_stop => false, ms_result => false,
              buffer => maps:get(buffer, C),
              max_slots => min(256, erlang:system_info(schedulers) +
                                   erlang:system_info(dirty_cpu_schedulers) +
                                   erlang:system_info(dirty_io_schedulers) + 8),
              overflow => drop_newest, args => maps:get(args, C),
              capture => maps:get(capture, C), return => true,
              exceptions => true, event_limit => zero_if_infinity(N),
              byte_limit => zero_if_infinity(Bytes), notify => self(),
              follow => {E, Ms, Rq, St#st.label},
              max_sessions => application:get_env(beamprobe, max_sessions, 64),
              max_memory => beamprobe_config:max_memory(),
              env => env(St)},
            beamprobe_lttng:nif_config([])),
    case beamprobe_nif_wait:start(Nif) of
        {ok, Res} -> {ok, St#st{res = Res}};
        {error, R} -> {error, R, St}
    end.

zero_if_infinity(infinity) -> 0;
zero_if_infinity(N) -> N.

env(#st{mfa = {M, F, A}, budget = #{events := E, ms := Ms, requests := R}}) ->
    {ok, Host} = inet:gethostname(),
    [{<<"node">>, atom_to_binary(node())},
     {<<"hostname">>, list_to_binary(Host)},
     {<<"otp_release">>, list_to_binary(erlang:system_info(otp_release))},
     {<<"follow_root">>, iolist_to_binary(io_lib:format("~p:~p/~p", [M, F, A]))},
     {<<"follow_budget">>,
      iolist_to_binary(io_lib:format("events=~b,ms=~b,requests=~b", [E, Ms, R]))}].

tracer(#st{res = Res}) -> {tracer, beamprobe_nif, Res}.

%% The root's pattern labels its caller, with the token's `send' and
%% `receive' flags: the VM then reports every send and every receive of
%% a labelled message to the system seq_trace tracer (this session).
patterns(#st{mfa = MFA, label = Label} = St) ->
    _ = erlang:trace_pattern(MFA, root_ms(Label), [local]),
    {ok, St#st{pat_set = true}}.

%% @private
%% The seq_trace label of the follow session numbered Serial on Node: a
%% small integer (bits 48-57 say it is beamprobe's, 24-47 are a hash of
%% the node's name, 0-23 the serial; c_src/bp_follow.h).  Never a tuple:
%% OTP 25's `{set_seq_token, label, {const, Label}}' puts a pointer into
%% the match spec's own memory in the caller's token, without copying the
%% label; once the root's pattern was removed (the session stopped) and
%% the match spec freed, a process labelled just before sent freed memory
%% as its label, and the VM crashed copying it ("eheap_alloc: Cannot
%% allocate 17552637133976 bytes", beamprobe_lifecycle_SUITE:follows).
-spec label(node(), non_neg_integer()) -> non_neg_integer().
label(Node, Serial) ->
    (?LABEL_MAGIC bsl 48) bor (erlang:phash2(Node, 1 bsl 24) bsl 24)
        bor (Serial band 16#FFFFFF).

%% @private
%% A new follow session's label on this node (label/2): a cluster follow
%% session gives its every node's session this node's (beamprobe_cluster).
-spec new_label() -> non_neg_integer().
new_label() ->
    label(node(), erlang:unique_integer([positive, monotonic])).

%% The root's match spec of the follow session whose label is Label.
%% A caller without a seq_trace token gets the label, with the token's
%% `send' and `receive' flags.  A caller whose token has a follow label
%% (this session's: it works for a request; an earlier session's, left
%% in it) gets this session's, as before.  A caller whose token carries
%% any other label is the application's (seq_trace used by it, or by
%% another tool): its token is left as it was (label and flags; before,
%% the root's call overwrote the label, and the application's messages
%% went on carrying beamprobe's label instead of its own), the call
%% event says so (`beamprobe_follow_labelled'): the NIF does not follow
%% it and counts it (`requests' `labelled', c_src/bp_follow.c), and its
%% return is not traced: it is no event of the session (before, each
%% counted as `outside', or once the tables had been full as a
%% `request_table' loss).  A match spec guard cannot read the token's
%% label (get_seq_token is an action), so the second clause does its
%% actions under `andalso' on whether the label is a follow label: none
%% of them runs for the application's.  Its label is never written back
%% either: `set_seq_token' keeps a pointer to a boxed label, and the one
%% get_seq_token returns is a copy on the match spec's temporary heap
%% (writing the token's own label back through it, as this match spec
%% did, left a tuple label such as `{my_app, x}' pointing at freed
%% memory: the VM crashed at the caller's next send, "eheap_alloc:
%% Cannot allocate 17549897388816 bytes", app_label_returns).
root_ms(Label) ->
    Cur = {element, 2, {get_seq_token}},
    IsFollow = {'andalso', {is_integer, Cur},
                {'==', {'bsr', Cur, 48}, ?LABEL_MAGIC}},
    Follow = [{set_seq_token, label, Label},
              {set_seq_token, send, true},
              {set_seq_token, 'receive', true},
              {return_trace}],
    [{'_', [{'not', {is_seq_trace}}], Follow},
     {'_', [],
      [{message, {element, {map_get, IsFollow,
                            {const, #{true => 1, false => 2}}},
                  {{true, beamprobe_follow_labelled}}}},
       list_to_tuple(['andalso', IsFollow | Follow])]}].

%% A process that removes what this session installed if it dies without
%% doing so (killed: terminate/2 does not run), as the janitor does for a
%% killed session: the root's pattern would go on labelling its callers
%% (and keep a return frame per call) and refuse every later follow
%% session.  Spawned before the flags for new processes are set.
guard(#st{mfa = MFA, label = Label} = St) ->
    Session = self(),
    Tracer = tracer_term(St),
    G = beamprobe_own:spawn(fun() ->
                      ok = beamprobe_own:sensitive(),
                      Ref = monitor(process, Session),
                      receive
                          {'DOWN', Ref, process, _, _} ->
                              remove_left(MFA, root_ms(Label), Tracer);
                          %% finish/2 has removed everything.
                          {Session, done} -> ok
                      end
              end),
    {ok, St#st{guard = G}}.

%% What a dead follow session left installed, where it is still its own
%% (the match spec names it, the tracer is its own): after a normal stop,
%% nothing; a later follow session's is never touched.
remove_left(Root, MS, Tracer) ->
    _ = remove_root(Root, MS),
    _ = system_tracer() =:= Tracer andalso seq_trace:set_system_tracer(false),
    _ = beamprobe_skip:trace_info(new, tracer) =:= {tracer, Tracer} andalso
        erlang:trace(new, false, [all]),
    _ = [catch erlang:trace(P, false, [all])
         || P <- processes(), beamprobe_each:tracer_of(P) =:= Tracer],
    ok.

%% `call' on every process nobody traces (and on new ones): the root's
%% pattern fires in whichever calls it.
flags(St) ->
    T = tracer(St),
    Me = self(),
    _ = [catch erlang:trace(P, true, [call, T])
         || P <- processes(), P =/= Me,
            beamprobe_each:tracer_of(P) =:= []],
    _ = erlang:trace(new, true, [call, T]),
    {ok, St#st{new_set = true}}.

%% After a reload of the NIF module (beamprobe_nif:load/0 tells the
%% claimed name) the VM has dropped it as the tracer of every process, of
%% new processes and of seq_trace: set them again, as flags/1 and
%% seq_tracer/1 did, taking nothing another tool holds by then (a
%% seq_trace tracer another tool set meanwhile stays its own, and the stop
%% says so: seq_tracer_off/1).  Events between the purge and the load were
%% never given to beamprobe; the summary counts the reloads
%% (`nif_reloads'), as a session's does.
retrace(St) ->
    %% A call to the module waits until its load has finished.
    _ = (catch beamprobe_nif:is_loaded()),
    T = tracer(St),
    Me = self(),
    _ = St#st.seq_set andalso system_tracer() =:= false andalso
        seq_trace:set_system_tracer(tracer_term(St)),
    _ = [catch erlang:trace(P, true, [call, T])
         || P <- processes(), P =/= Me,
            beamprobe_each:tracer_of(P) =:= []],
    _ = St#st.new_set andalso erlang:trace_info(new, tracer) =:= {tracer, []}
        andalso erlang:trace(new, true, [call, T]),
    St#st{nif_reloads = St#st.nif_reloads + 1}.

%% The session-wide time bound (limits => #{seconds => S}).
timer(St) ->
    case get(config) of
        #{limits := #{seconds := infinity}} -> {ok, St};
        #{limits := #{seconds := S}} ->
            {ok, St#st{timer = erlang:send_after(round(S * 1000), self(),
                                                 limit_seconds)}}
    end.

%% Processes traced with this session as their tracer.
traced(#st{res = undefined}) -> [];
traced(St) ->
    T = case tracer(St) of {tracer, M, S} -> {M, S} end,
    [P || P <- processes(), beamprobe_each:tracer_of(P) =:= T].

%% seq_trace:get_system_tracer/0 through apply: its OTP 25 spec leaves
%% out {Module, State} tracers, which dialyzer then calls impossible (as
%% erlang:trace_info/2's, beamprobe_each:tracer_of/1).
system_tracer() ->
    erlang:apply(seq_trace, get_system_tracer, []).

%% Patterns first, then flags: nothing of it stays.
uninstall(#st{res = undefined} = St) -> unclaim(St);
uninstall(#st{mfa = MFA} = St) ->
    _ = St#st.pat_set andalso root_off(MFA, St),
    _ = St#st.new_set andalso erlang:trace(new, false, [all]),
    _ = St#st.seq_set andalso seq_tracer_off(St),
    _ = [catch erlang:trace(P, false, [all]) || P <- traced(St)],
    _ = St#st.timer =/= undefined andalso erlang:cancel_timer(St#st.timer),
    unclaim(St#st{new_set = false, seq_set = false, pat_set = false,
                  timer = undefined}).

%% The root's pattern removed where it is still this session's; a
%% function whose pattern another tool replaced keeps it (beamprobe never
%% takes a pattern from another tool), and the trace says from when on
%% requests may be missing (a `tampered' event), as for the seq_trace
%% tracer.
root_off(Root, #st{res = Res, label = Label}) ->
    case remove_root(Root, root_ms(Label)) of
        [] -> ok;
        [{M, F, A} | _] ->
            Detail = <<"another tool's pattern is on the root: its calls were "
                       "no longer followed">>,
            _ = (catch beamprobe_nif:tampered(
                         Res, undefined,
                         [<<"pattern">>, beamprobe_nif:render_mfa(M, F, A),
                          <<"replaced">>, Detail])),
            ok
    end.

%% Removes match spec MS from the functions of Root that have it; returns
%% the functions whose pattern is another's.
remove_root({M, F, A}, MS) ->
    Fs = try erlang:get_module_info(M, functions)
         catch error:badarg -> []
         end,
    Funs = [{M, Fn, Ar} || {Fn, Ar} <- Fs, Fn =:= F, A =:= '_' orelse Ar =:= A],
    _ = [erlang:trace_pattern(MFA, false, [local])
         || MFA <- Funs, beamprobe_skip:trace_info(MFA, match_spec) =:= {match_spec, MS}],
    [MFA || MFA <- Funs,
            beamprobe_skip:trace_info(MFA, traced) =/= {traced, false}].

%% Only what alone/1 registered: another session's name is its own.
unclaim(#st{claimed = true} = St) ->
    _ = (catch unregister(?CLAIM)),
    St#st{claimed = false};
unclaim(St) -> St.

tracer_term(St) -> case tracer(St) of {tracer, M, S} -> {M, S} end.

%% The system seq_trace tracer back to none, if it is still this
%% session; if another tool replaced it, that tool keeps it, and the
%% trace says from when on receives may be missing (a `tampered' event).
seq_tracer_off(#st{res = Res} = St) ->
    Mine = tracer_term(St),
    case system_tracer() of
        Mine -> _ = seq_trace:set_system_tracer(false), ok;
        Other ->
            Detail = unicode:characters_to_binary(
                       io_lib:format("now ~0p: receives of labelled messages "
                                     "were no longer recorded", [Other])),
            _ = (catch beamprobe_nif:tampered(Res, undefined,
                                              [<<"seq_trace_tracer">>,
                                               <<"node">>, <<"replaced">>,
                                               Detail])),
            ok
    end.

finish(#st{summary = S} = St, _) when S =/= undefined -> St;
finish(#st{res = undefined} = St, _) -> St;
finish(#st{res = Res} = St, Why) ->
    St1 = uninstall(St),
    Stats = try beamprobe_nif_wait:stop(Res) of
                {ok, S} -> S;
                {error, E} -> #{nif_error => E}
            catch _:E -> #{nif_error => E}
            end,
    Dropped = maps:get(dropped, Stats, #{total => 0}),
    Reqs = maps:get(requests, Stats, #{}),
    Sum = #{events => maps:get(events, Stats, 0),
            dropped => Dropped,
            requests => Reqs,
            bytes => maps:get(bytes, Stats, 0),
            seconds => (erlang:monotonic_time(millisecond) - St#st.started) / 1000,
            output => St#st.dir, root => St#st.mfa, budget => St#st.budget,
            nif_reloads => St#st.nif_reloads, stop_reason => Why},
    _ = record_counts(St1, Dropped, Reqs),
    %% Nothing uses the resource after the stop (info/1 answers from the
    %% summary), and the guard (whose closure holds it too) has nothing
    %% left to do: neither keeps it, so that a session that ended by a
    %% limit and is never stopped does not keep its rings (ended/1).
    _ = is_pid(St1#st.guard) andalso (St1#st.guard ! {self(), done}),
    St1#st{summary = Sum, res = undefined, guard = undefined}.

%% The per-request budget's counts, in the trace's metadata env (added
%% at the end, as a cluster session's clock offsets): `beamprobe request'
%% prints them.
record_counts(#st{dir = Dir}, Dropped, Reqs) ->
    Env = [{"follow_" ++ atom_to_list(K), integer_to_list(V)}
           || {K, V} <- lists:sort(maps:to_list(Reqs)), is_integer(V)] ++
          [{"follow_dropped_" ++ atom_to_list(K), integer_to_list(V)}
           || K <- [request_events, request_ms, request_table],
              {ok, V} <- [maps:find(K, Dropped)], is_integer(V)],
    catch beamprobe_cluster:rewrite_env(filename:join(Dir, "metadata"), Env).
