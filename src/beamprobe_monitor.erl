%%% @doc The one owner of the node's system monitor (`erlang:system_monitor/2')
%%% for every beamprobe session: a registered process under
%%% {@link beamprobe_sup}.
%%%
%%% OTP 25 has one system monitor per node.  Sessions that ask for
%%% `monitor => #{long_gc => Ms, long_schedule => Ms, large_heap => Words,
%%% busy_port => true, busy_dist_port => true}' join here; this process
%%% sets the union of their thresholds (the smallest times and sizes, any
%%% port flag) with itself as the receiver, and writes each report as a
%%% `monitor' event (docs/format.md) into every session whose own
%%% thresholds it passes.  The monitor that was set before the first
%%% session joined is set again when the last one leaves (or when this
%%% process ends); if another tool took it from the sessions and a session
%%% took it back with `force => true', that tool's monitor is.  Another
%%% tool's monitor is not taken unless the session says `force => true':
%%% `{error, {system_monitor_taken, Pid}}'.
%%%
%%% Another tool that sets the system monitor while sessions hold it takes
%%% the reports away: checked every ?CHECK_MS ms, reported once as a
%%% `tampered' event (what `system_monitor', subject `node', how
%%% `replaced', detail the new holder) in every session.
%%%
%%% Bounded: a report costs one NIF call per session with a text cut at
%%% 1024 bytes (the info list printed at depth 20), and at most ?MAX_RATE
%%% reports a second are written into the sessions (the VM sends a
%%% `large_heap' report for every GC of a large process: tens of
%%% thousands a second, two events each in every session, past the
%%% sessions' own rate limits).  Reports past that rate, or while more
%%% than ?MAX_QUEUE wait here, are counted as `dropped' (stats/0) instead
%%% of written, and each session that would have had them is told how
%%% many it missed: a `tampered' event (what `system_monitor', subject
%%% `node', how `dropped', detail the count), written once the flood is
%%% over (at the next report written, at the next check, at the latest
%%% when the session leaves).
-module(beamprobe_monitor).
-behaviour(gen_server).

-export([start_link/0, join/3, leave/1, stats/0, check/1, asks_nothing/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2,
         handle_continue/2]).

-define(MAX_QUEUE, 10000).
-define(MAX_RATE, 1000).      % reports written a second, all sessions
-define(STATE, beamprobe_monitor_state).   % beamprobe_sup's table
-define(CHECK_MS, 1000).
-define(DEPTH, 20).
-define(KEYS, [long_gc, long_schedule, large_heap, busy_port,
               busy_dist_port]).

-type thresholds() :: #{long_gc => pos_integer(),
                        long_schedule => pos_integer(),
                        large_heap => pos_integer(),
                        busy_port => boolean(),
                        busy_dist_port => boolean()}.
-export_type([thresholds/0]).

-record(st, {sessions = #{} :: #{pid() => {reference(), term(),
                                            thresholds()}},
             previous = none :: none | undefined | {pid(), list()},
             reports = 0 :: non_neg_integer(),
             dropped = 0 :: non_neg_integer(),
             %% reports dropped since each session was last told
             missed = #{} :: #{pid() => pos_integer()},
             %% the second (monotonic ms div 1000) and reports written in it
             second = 0 :: integer(),
             written = 0 :: non_neg_integer(),
             %% another tool took the monitor (reported once)
             lost = false :: boolean(),
             timer :: undefined | reference()}).

%% @doc Starts the registered owner (from beamprobe_sup).
-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Checks a `monitor' option's value: `{ok, Thresholds}' or
%% `{error, Reason}'.  Times are milliseconds and sizes words (positive
%% integers below 2^32); the port flags booleans; at least one key.
-spec check(term()) -> {ok, thresholds()} | {error, term()}.
check(M) when is_map(M), map_size(M) > 0 ->
    Bad = [{K, V} || {K, V} <- maps:to_list(M), not valid(K, V)],
    case Bad of
        [] -> {ok, M};
        [{K, V} | _] -> {error, {bad_option, {monitor, K}, V}}
    end;
check(M) -> {error, {bad_option, monitor, M}}.

%% @doc True if the thresholds ask for no report at all (only port flags,
%% all `false'): the session then joins nothing.
-spec asks_nothing(thresholds()) -> boolean().
asks_nothing(T) ->
    lists:all(fun({_, V}) -> V =:= false end, maps:to_list(T)).

valid(K, V) when K =:= long_gc; K =:= long_schedule; K =:= large_heap ->
    is_integer(V) andalso V >= 1 andalso V < 1 bsl 32;
valid(K, V) when K =:= busy_port; K =:= busy_dist_port -> is_boolean(V);
valid(_, _) -> false.

%% @doc Session `Session' (its process) wants the reports passing
%% `Thresholds' written into the NIF session `Res'.  It leaves by
%% leave/1 or by ending.  `Force': take the monitor from another tool.
-spec join(term(), thresholds(), boolean()) ->
          ok | {error, {system_monitor_taken, pid()} | {bad_option, term(), term()}}.
join(Res, Thresholds, Force) ->
    case check(Thresholds) of
        {ok, T} -> gen_server:call(?MODULE, {join, self(), Res, T, Force},
                                   infinity);
        {error, _} = E -> E
    end.

%% @doc The calling session leaves; the last one out restores the
%% monitor set before.  Idempotent.
-spec leave(pid()) -> ok.
leave(Session) ->
    case whereis(?MODULE) of
        undefined -> ok;
        _ -> gen_server:call(?MODULE, {leave, Session}, infinity)
    end.

%% @doc Sessions joined, reports received, reports dropped (too many
%% waiting), and the monitor this process set (or `undefined').
-spec stats() -> {ok, #{sessions := non_neg_integer(),
                        reports := non_neg_integer(),
                        dropped := non_neg_integer(),
                        monitor := term()}}.
stats() ->
    gen_server:call(?MODULE, stats, infinity).

%% @private
-spec init([]) -> {ok, #st{}}.
init([]) ->
    process_flag(trap_exit, true),
    ok = beamprobe_own:sensitive(), % no trace events of it (see beamprobe_shell.erl)
    {ok, resume(#st{})}.

%% After a restart (this process was killed, or crashed): the sessions
%% that had joined, and the monitor to give back at the end, as the last
%% one left them (persist/1).  The VM dropped the system monitor when its
%% receiver ended: set again, and each session told that reports of the
%% meantime are missing (a `tampered' event), instead of sessions that
%% silently get no more reports and a monitor never given back.
resume(St) ->
    Saved = try ets:lookup(?STATE, state) of
                [{state, L0, P0}] -> {L0, P0};
                [] -> none
            catch error:badarg -> none   % not under beamprobe_sup
            end,
    case Saved of
        {L, Prev} when L =/= [] ->
            Live = [E || {Pid, _, _} = E <- L, is_process_alive(Pid)],
            S = maps:from_list([{Pid, {monitor(process, Pid), Res, T}}
                                || {Pid, Res, T} <- Live]),
            Detail = <<"beamprobe's system monitor owner ended and was "
                       "restarted: reports in between are missing">>,
            _ = [catch beamprobe_nif:tampered(Res, undefined,
                                              [<<"system_monitor">>,
                                               <<"node">>, <<"restarted">>,
                                               Detail])
                 || {_, Res, _} <- Live],
            St1 = St#st{sessions = S, previous = Prev},
            case map_size(S) of
                0 ->
                    %% Nobody left to monitor for: give the monitor back
                    %% (the VM cleared it when its receiver, this
                    %% process's predecessor, ended).
                    _ = erlang:system_monitor() =:= undefined andalso
                        give_back(Prev),
                    persist(St),
                    St;
                _ -> set(St1), persist(St1), arm(St1)
            end;
        _ -> St
    end.

%% What resume/1 needs, kept outside this process: in beamprobe_sup's
%% table (it outlives this process).
persist(#st{sessions = S, previous = Prev}) ->
    L = [{Pid, Res, T} || {Pid, {_, Res, T}} <- maps:to_list(S)],
    try
        case L of
            [] -> true = ets:delete(?STATE, state);
            _ -> true = ets:insert(?STATE, {state, L, Prev})
        end,
        ok
    catch error:badarg -> ok   % not under beamprobe_sup: nothing kept
    end.

%% @private
-spec handle_call(term(), gen_server:from(), #st{}) ->
          {reply, term(), #st{}} | {reply, term(), #st{}, {continue, collect}}.
handle_call({join, Pid, Res, T, Force}, _From, #st{sessions = S} = St) ->
    Current = erlang:system_monitor(),
    Self = self(),
    Taken = case Current of
                undefined -> none;
                {Self, _} -> none;
                {Other, _} -> Other
            end,
    if
        Taken =/= none, not Force ->
            {reply, {error, {system_monitor_taken, Taken}}, St};
        true ->
            Prev = case {St#st.previous, Taken} of
                       {none, _} -> Current;      % the first one in
                       {P, none} -> P;
                       %% Forced from a tool that took the monitor from
                       %% the sessions: the monitor to give back at the
                       %% end is that tool's (as if it had been there
                       %% before the first session), not the one it
                       %% replaced.
                       {_, _} -> Current
                   end,
            S1 = case S of
                     #{Pid := {Ref, _, _}} -> S#{Pid => {Ref, Res, T}};
                     _ -> S#{Pid => {monitor(process, Pid), Res, T}}
                 end,
            St1 = St#st{sessions = S1, previous = Prev, lost = false},
            set(St1),
            persist(St1),
            {reply, ok, arm(St1)}
    end;
handle_call({leave, Pid}, _From, St) ->
    %% (before it stops its NIF session: told what it missed)
    {reply, ok, drop(Pid, tell_missed(St)), {continue, collect}};
handle_call(stats, _From, #st{sessions = S, reports = R, dropped = D} = St) ->
    {reply, {ok, #{sessions => map_size(S), reports => R, dropped => D,
                   monitor => erlang:system_monitor()}}, St};
handle_call(_, _From, St) ->
    {reply, {error, unknown_request}, St}.

%% @private
%% A session has left: its entry held the session's NIF resource, whose
%% destructor unmaps its rings only once no heap refers to it.  This
%% process lives as long as the node and collects rarely (as the janitor,
%% beamprobe_janitor:handle_continue/2): collected now, once its old state
%% is no longer referenced.
-spec handle_continue(collect, #st{}) -> {noreply, #st{}}.
handle_continue(collect, St) ->
    _ = erlang:garbage_collect(),
    {noreply, St}.

%% @private
-spec handle_cast(term(), #st{}) -> {noreply, #st{}}.
handle_cast(_, St) -> {noreply, St}.

%% @private
-spec handle_info(term(), #st{}) ->
          {noreply, #st{}} | {noreply, #st{}, {continue, collect}}.
handle_info({monitor, Who, What, Info}, #st{reports = R} = St0)
  when is_atom(What), is_list(Info) orelse is_port(Info) ->
    St = this_second(St0),
    case process_info(self(), message_queue_len) of
        {message_queue_len, N} when N > ?MAX_QUEUE;
                                    St#st.written >= ?MAX_RATE ->
            {noreply, missed(What, Info,
                             St#st{reports = R + 1,
                                   dropped = St#st.dropped + 1})};
        _ ->
            St1 = tell_missed(St),
            %% (A message of that shape from anyone but the VM may hold
            %% anything: it must not end this process.)
            _ = (catch report(Who, What, Info, St1)),
            {noreply, St1#st{reports = R + 1, written = St1#st.written + 1}}
    end;
handle_info({'DOWN', _, process, Pid, _}, St) ->
    {noreply, drop(Pid, St), {continue, collect}};
handle_info(check, #st{sessions = S} = St) when map_size(S) =:= 0 ->
    {noreply, St#st{timer = undefined}};
handle_info(check, St) ->
    {noreply, arm((check_held(tell_missed(St)))#st{timer = undefined})};
handle_info(_, St) ->
    {noreply, St}.

%% @private
-spec terminate(term(), #st{}) -> ok.
terminate(_, #st{sessions = S} = St) when map_size(S) > 0 ->
    restore(St),
    ok;
terminate(_, _) -> ok.

%%% ------------------------------------------------------------------------

drop(Pid, St) ->
    St1 = drop1(Pid, St),
    persist(St1),
    St1.

drop1(Pid, #st{sessions = S, missed = M} = St0) ->
    St = St0#st{missed = maps:remove(Pid, M)},
    case maps:take(Pid, S) of
        error -> St;
        {{Ref, _, _}, S1} when map_size(S1) =:= 0 ->
            demonitor(Ref, [flush]),
            restore(St),
            St#st{sessions = S1, previous = none};
        {{Ref, _, _}, S1} ->
            demonitor(Ref, [flush]),
            St1 = St#st{sessions = S1},
            %% a monitor another tool took is left to it
            _ = St#st.lost orelse set(St1),
            St1
    end.

%% The reports written so far in this second.
this_second(#st{second = Sec} = St) ->
    case erlang:monotonic_time(millisecond) div 1000 of
        Sec -> St;
        Now -> St#st{second = Now, written = 0}
    end.

%% A report dropped (too many a second, or waiting): counted for each
%% session whose thresholds it passes.
missed(What, Info, #st{sessions = S, missed = M} = St) ->
    M1 = maps:fold(fun(Pid, {_, _, T}, Acc) ->
                           case passes(What, Info, T) of
                               true -> maps:update_with(Pid, fun(N) -> N + 1 end,
                                                        1, Acc);
                               false -> Acc
                           end
                   end, M, S),
    St#st{missed = M1}.

%% Each session that missed reports is told how many: a `tampered' event
%% (as for the reports missing across a restart, resume/1), so that the
%% loss shows in its trace.
tell_missed(#st{missed = M} = St) when map_size(M) =:= 0 -> St;
tell_missed(#st{sessions = S, missed = M} = St) ->
    _ = [catch beamprobe_nif:tampered(
                 Res, undefined,
                 [<<"system_monitor">>, <<"node">>, <<"dropped">>,
                  iolist_to_binary(
                    [integer_to_list(N), " reports dropped: at most ",
                     integer_to_list(?MAX_RATE), " are written a second, "
                     "and at most ", integer_to_list(?MAX_QUEUE),
                     " wait"])])
         || {Pid, N} <- maps:to_list(M), #{Pid := {_, Res, _}} <- [S]],
    St#st{missed = #{}}.

arm(#st{timer = undefined} = St) ->
    St#st{timer = erlang:send_after(?CHECK_MS, self(), check)};
arm(St) -> St.

%% Is the monitor still ours?  If another tool took it, say so once.
check_held(#st{lost = true} = St) -> St;
check_held(#st{sessions = S} = St) ->
    Self = self(),
    case erlang:system_monitor() of
        {Self, _} -> St;
        Other ->
            Detail = unicode:characters_to_binary(
                       io_lib:format("now ~0p: this session gets no more "
                                     "system monitor reports",
                                     [case Other of
                                          {P, Opts} -> {P, Opts};
                                          undefined -> undefined
                                      end])),
            _ = [catch beamprobe_nif:tampered(Res, undefined,
                                              [<<"system_monitor">>,
                                               <<"node">>, <<"replaced">>,
                                               Detail])
                 || {_, Res, _} <- maps:values(S)],
            St#st{lost = true}
    end.

%% The union of the sessions' thresholds, with this process as receiver.
set(#st{sessions = S}) ->
    Ts = [T || {_, _, T} <- maps:values(S)],
    Min = fun(K) ->
                  case [V || #{K := V} <- Ts] of
                      [] -> [];
                      Vs -> [{K, lists:min(Vs)}]
                  end
          end,
    Flag = fun(K) ->
                   case lists:any(fun(T) -> maps:get(K, T, false) end, Ts) of
                       true -> [K];
                       false -> []
                   end
           end,
    Opts = Min(long_gc) ++ Min(long_schedule) ++ Min(large_heap) ++
        Flag(busy_port) ++ Flag(busy_dist_port),
    _ = erlang:system_monitor(self(), Opts),
    ok.

%% The monitor set before the first session joined, if its receiver still
%% lives; none otherwise.  Only if the monitor is still ours: another
%% tool that took it since keeps it.
restore(#st{previous = Prev}) -> restore_prev(Prev).

restore_prev(Prev) ->
    Self = self(),
    case erlang:system_monitor() of
        {Self, _} -> give_back(Prev);
        _ -> ok
    end.

give_back(Prev) ->
    _ = case Prev of
            {P, Opts} when is_pid(P) ->
                case is_process_alive(P) of
                    true -> erlang:system_monitor(P, Opts);
                    false -> erlang:system_monitor(undefined)
                end;
            _ -> erlang:system_monitor(undefined)
        end,
    ok.

%% Writes the report into every session whose thresholds it passes.
%% A `process' event first names the process (the readers show its pid
%% text and name, not a key).
report(Who, What, Info, #st{sessions = S}) ->
    Fields = fields(Who, What, Info),
    Key = key(Who),
    Names = names(Key),
    _ = [begin
             _ = Names =/= [] andalso (catch beamprobe_nif:annotate(Res, Names)),
             catch beamprobe_nif:notice(Res, monitor, Key, Fields)
         end
         || {_, Res, T} <- maps:values(S), passes(What, Info, T)],
    ok.

names(P) when is_pid(P) ->
    Name = case process_info(P, registered_name) of
               {registered_name, N} -> N;
               _ -> undefined
           end,
    Init = case process_info(P, initial_call) of
               {initial_call, {M, F, A}} -> {M, F, A};
               _ -> undefined
           end,
    [{P, Name, Init}];
names(P) when is_port(P) ->
    Name = case erlang:port_info(P, registered_name) of
               {registered_name, N} -> N;
               _ -> undefined
           end,
    Drv = case erlang:port_info(P, name) of
              {name, D} -> unicode:characters_to_binary(D);
              _ -> undefined
          end,
    [{P, Name, Drv}];
names(_) -> [].

%% As the VM decides for a monitor of those thresholds alone (erl_gc.c,
%% beam_common.c, OTP 25): a time strictly over it, a heap size at least
%% it; so that a session gets the same reports whatever other sessions
%% share the monitor.
passes(long_gc, Info, #{long_gc := Ms}) -> num(timeout, Info) > Ms;
passes(long_schedule, Info, #{long_schedule := Ms}) ->
    num(timeout, Info) > Ms;
passes(large_heap, Info, #{large_heap := W}) ->
    num(heap_block_size, Info) + num(old_heap_block_size, Info) >= W;
passes(busy_port, _, #{busy_port := true}) -> true;
passes(busy_dist_port, _, #{busy_dist_port := true}) -> true;
passes(_, _, _) -> false.

num(K, Info) when is_list(Info) ->
    case lists:keyfind(K, 1, Info) of
        {K, N} when is_integer(N) -> N;
        _ -> 0
    end;
num(_, _) -> 0.

key(P) when is_pid(P), node(P) =:= node() -> P;
key(P) when is_port(P), node(P) =:= node() -> P;
key(_) -> undefined.

%% what, process, duration_ms, port, detail (bp_format.h: monitor).
fields(Who, What, Info) ->
    {Dur, Other, Detail} =
        case What of
            W when W =:= busy_port; W =:= busy_dist_port -> {0, Info, []};
            W when W =:= long_gc; W =:= long_schedule ->
                {num(timeout, Info), [], Info};
            _ -> {0, [], Info}
        end,
    [atom_to_binary(What), text(Who), Dur,
     case Other of [] -> <<>>; _ -> text(Other) end,
     case Detail of [] -> <<>>; _ -> text(Detail) end].

%% Printed at depth ?DEPTH; the NIF cuts it at 1024 bytes (at a UTF-8
%% boundary).
text(T) ->
    unicode:characters_to_binary(io_lib:format("~0P", [T, ?DEPTH])).
