%%% @doc Cluster sessions: one beamprobe session per node from one call,
%%% stopped together, their traces brought into one directory with the
%%% clock offsets of the nodes recorded in them.
%%%
%%% ```
%%% caller ── coordinator (this module, the handle) ──erpc──> agent on node N
%%%              │  clock probes at start and stop          └─ session on N
%%%              └─ session on node() (if listed)              (trace staged
%%%                                                             on N, fetched
%%% DIR/<node>/metadata, thread-NNN ...  one trace per node      at stop)
%%% '''
%%%
%%% `beamprobe:start(#{nodes => [node() | nodes()], ...})' starts it; the
%%% other keys are the spec every node's session gets (`procs' must not
%%% name pids: a pid lives on one node).  Every node needs beamprobe on its
%%% code path (`{error, {beamprobe_missing, Node}}' otherwise; nothing is
%%% loaded into a node by this module).  Each node writes its trace into a
%%% private (0700) staging directory of its own file system; at stop the
%%% coordinator copies it over distribution, in 1 MiB chunks, to
%%% `DIR/<node>' on the caller's node and deletes the staged copy.  A node
%%% that cannot be reached at stop keeps its staged trace; the summary
%%% names it (`nodes => #{N => #{fetch => {error, R}, staged => Path}}').
%%% A coordinator that dies while a node is connected never fetches: that
%%% node's agent ends the session and removes the staged trace.  An
%%% agent that loses the connection to the control node ends its
%%% session at once and removes its staged trace as soon as nobody can
%%% fetch it any more, within a bound (beamprobe_cluster_agent).
%%% `info/1' asks every node at once and answers within 2 s: a node that
%%% has not answered by then (stuck, frozen) is `{error, timeout}' in
%%% `nodes' and listed in `no_answer'.
%%%
%%% Clocks: before the first and after the last event the coordinator
%%% probes every node (`?PROBES' round trips reading the trace clock there
%%% between two readings here).  A probe sent at `T0' and answered at `T3'
%%% (control clock) that read `T1' on the node bounds the offset `D' (add
%%% it to the node's timestamps to get the control node's clock) to
%%% `T0 - T1 =< D =< T3 - T1'; the hull of the tightest bounds of the
%%% start probes and of the stop probes (the offset may move in between)
%%% is recorded in the node's metadata env (`clock_offset_lo_ns',
%%% `clock_offset_hi_ns', their midpoint `clock_offset_ns'; the start and
%%% stop probes separately in `clock_probe_start'/`clock_probe_stop' as
%%% "lo,hi,min_rtt,probes") with `dist_ids', the node's numbers of the
%%% other nodes (how it prints their pids, `<N.x.y>'), which the reader
%%% (`bin/beamprobe cluster') needs to match messages across nodes.
%%%
%%% Streamed (`output => {streams, #{Node => {tcp, Address, Opts}}}', one
%%% TCP stream per node, as `beamprobe attach --cluster' uses): every
%%% node's session streams its packets to its own receiver as they are
%%% written (no staging, nothing fetched); since the traces are not here,
%%% the clock offsets cannot be written into them: the summary gives each
%%% node's metadata env lines (`clock_env', text to add to the env block
%%% of that node's metadata) for the receiver to record.
-module(beamprobe_cluster).
-behaviour(gen_server).

-export([start/2, is_handle/1, call/2]).
-export([agent_start/3, agent_files/1, agent_read/3, agent_cleanup/1,
         local_start/1, copy/4,
         dist_ids/1, rewrite_env/2, env_lines/1, probe_bounds/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2,
         terminate/2]).

-define(PROBES, 16).
-define(CHUNK, 1048576).
-define(CALL_TIMEOUT, 60000).
%% info/1's one deadline for all the nodes' answers.
-define(INFO_MS, 2000).

-record(node, {name :: node(),
               session :: pid() | undefined,   % local session
               agent :: pid() | undefined,     % remote agent
               staged :: string() | undefined, % remote staging dir
               dir :: string() | undefined,    % DIR/<node> here (files)
               %% The agent was seen going (its node disconnected, or
               %% it died): {MonotonicMs, Reason}.  A disconnected
               %% agent ends its session and keeps its summary for a
               %% while (beamprobe_cluster_agent), for the stop after a reconnection.
               lost :: undefined | {integer(), term()}}).

-record(st, {owner :: pid(),
             monitor :: reference(),
             dir :: string() | undefined,      % undefined: streamed
             streams = #{} :: #{node() => tuple()},
             id :: string(),
             nodes = [] :: [#node{}],
             created = false :: boolean(),
             started :: integer(),
             probes_start = #{} :: #{node() => tuple()},
             summary :: undefined | map()}).

%%% ------------------------------------------------------------------------
%%% API
%%% ------------------------------------------------------------------------

%% @doc Starts a cluster session owned by `Owner' (see the module doc):
%% `{ok, Handle}' or `{error, Reason}' with nothing left running on any
%% node.
-spec start(map(), pid()) -> {ok, pid()} | {error, term()}.
start(#{nodes := Nodes} = Spec0, Owner) ->
    %% A follow session: one seq_trace label for every node's session,
    %% so that each records only this session's requests (before, each
    %% node took any other node's follow label: a label an earlier or
    %% unrelated follow session left in another node's processes).
    Spec = case Spec0 of
               #{follow := F} when is_map(F) ->
                   Spec0#{follow := F#{'$label' => beamprobe_follow:new_label()}};
               #{} -> Spec0
           end,
    case check(Nodes, Spec) of
        {ok, Ns, Dir, Base} ->
            {ok, Pid} = gen_server:start(?MODULE, {Owner, Dir}, []),
            try gen_server:call(Pid, {start, Ns, Base}, infinity) of
                ok -> {ok, Pid};
                {error, _} = E -> E
            catch exit:{R, _} -> {error, {cluster_failed, R}}
            end;
        {error, _} = E -> E
    end.

%% @doc True if `Pid' is a cluster session handle of this node.
-spec is_handle(term()) -> boolean().
is_handle(Pid) -> beamprobe_own:is_handle(Pid, cluster).

%% @doc `stop' or `info' on a handle.
-spec call(pid(), stop | info) -> {ok, map()} | {error, term()}.
call(Pid, Req) ->
    try gen_server:call(Pid, Req, infinity)
    catch exit:_ -> {error, not_found}
    end.

%%% ------------------------------------------------------------------------
%%% Checking the spec
%%% ------------------------------------------------------------------------

check(Nodes, Spec) ->
    Base = maps:remove(nodes, Spec),
    case nodes_ok(Nodes) of
        {error, _} = E -> E;
        {ok, Ns} ->
            case {procs_ok(maps:get(procs, Base, all)),
                  exclude_ok(maps:get(exclude, Base, []), Ns), dir(Base)} of
                {{error, _} = E, _, _} -> E;
                {_, {error, _} = E, _} -> E;
                {_, _, {error, _} = E} -> E;
                {ok, ok, {ok, Dir}} when is_map(Dir) ->
                    case [N || N <- Ns, not is_map_key(N, Dir)] of
                        [] -> {ok, Ns, Dir, maps:remove(output, Base)};
                        [N | _] -> {error, {bad_option, output,
                                            lists:flatten(io_lib:format(
                                              "no stream for node ~tp",
                                              [N]))}}
                    end;
                {ok, ok, {ok, Dir}} -> {ok, Ns, Dir, maps:remove(output, Base)}
            end
    end.

%% The pids to exclude live on the session's nodes (each node's session
%% gets its own, node_spec/2); anything else in a proper list is checked
%% by each node.
exclude_ok(X, Ns) when is_list(X) ->
    case proper(X) andalso
        [P || P <- X, is_pid(P), not lists:member(node(P), Ns)] of
        false -> {error, {bad_option, exclude, X}};
        [] -> names_somewhere([A || A <- X, is_atom(A)], Ns);
        [P | _] -> {error, {bad_option, exclude,
                            lists:flatten(io_lib:format(
                              "~p is a process of ~tp, not one of the "
                              "session's nodes", [P, node(P)]))}}
    end;
exclude_ok(_, _) -> ok.

%% A name to exclude is excluded on the nodes where it is registered
%% (node_spec/2); one registered on none is {no_such_process, Name}, as
%% for a session of one node.
names_somewhere([], _Ns) -> ok;
names_somewhere(Names, Ns) ->
    Regs = lists:append([R || {ok, R} <- erpc:multicall(Ns, erlang, registered,
                                                        [], ?CALL_TIMEOUT)]),
    case [A || A <- Names, not lists:member(A, Regs)] of
        [] -> ok;
        [A | _] -> {error, {no_such_process, A}}
    end.

nodes_ok(L) when is_list(L), L =/= [] ->
    case proper(L) andalso lists:all(fun is_atom/1, L) of
        false -> {error, {bad_option, nodes, L}};
        true ->
            Ns = lists:usort(L),
            Known = [node() | nodes(connected)],
            case [N || N <- Ns, not lists:member(N, Known)] of
                [N | _] -> {error, {node_down, N}};
                [] -> missing(Ns)
            end
    end;
nodes_ok(L) -> {error, {bad_option, nodes, L}}.

%% Every node must have beamprobe (this module and its NIF) loadable.
missing([]) -> {ok, []};
missing(Ns) ->
    Rs = erpc:multicall(Ns, code, ensure_loaded, [?MODULE], 10000),
    case [N || {N, R} <- lists:zip(Ns, Rs), R =/= {ok, {module, ?MODULE}}] of
        [] -> {ok, Ns};
        [N | _] -> {error, {beamprobe_missing, N}}
    end.

procs_ok(P) when P =:= all; P =:= new; P =:= existing -> ok;
procs_ok(L) when is_list(L) ->
    case proper(L) andalso lists:all(fun is_atom/1, L) of
        true -> ok;
        false -> {error, {bad_option, procs,
                          "a cluster session takes all, new, existing or "
                          "registered names (a pid lives on one node)"}}
    end;
procs_ok(P) -> {error, {bad_option, procs, P}}.

proper(L) ->
    try length(L) >= 0
    catch error:badarg -> false
    end.

dir(#{output := {file, Dir}}) -> dir_ok(Dir);
dir(#{output := {streams, M}}) when is_map(M), map_size(M) > 0 ->
    case [O || {_, O} <- maps:to_list(M),
               {error, _} <- [beamprobe_config:validate(
                                #{events => [procs], output => O})]] of
        [] -> {ok, M};
        [O | _] -> {error, {bad_option, output, O}}
    end;
dir(#{output := O}) ->
    {error, {bad_option, output,
             lists:flatten(io_lib:format(
                             "a cluster session writes files: output => "
                             "{file, Dir}, not ~tP", [O, 10]))}};
dir(_) ->
    {{Y, Mo, D}, {H, Mi, Se}} = calendar:local_time(),
    dir_ok(lists:flatten(
             io_lib:format("beamprobe-cluster-~4..0w~2..0w~2..0w-~2..0w~2..0w~2..0w",
                           [Y, Mo, D, H, Mi, Se]))).

dir_ok(Dir) ->
    Abs = filename:absname(Dir),
    case beamprobe_config:validate(#{events => [procs],
                                     output => {file, Abs}}) of
        {ok, _} -> {ok, Abs};
        {error, _} = E -> E
    end.

%%% ------------------------------------------------------------------------
%%% The coordinator
%%% ------------------------------------------------------------------------

%% @private
-spec init({pid(), string() | map()}) -> {ok, #st{}}.
init({Owner, Dir0}) ->
    {Dir, Streams} = case is_map(Dir0) of
                         true -> {undefined, Dir0};
                         false -> {Dir0, #{}}
                     end,
    ok = beamprobe_own:mark_handle(cluster),
    process_flag(trap_exit, true),
    Id = integer_to_list(erlang:unique_integer([positive])) ++ "-" ++
        integer_to_list(rand:uniform(1 bsl 40)),
    {ok, #st{owner = Owner, monitor = monitor(process, Owner), dir = Dir,
             streams = Streams,
             id = Id, started = erlang:monotonic_time(millisecond)}}.

%% @private
-spec handle_call(term(), gen_server:from(), #st{}) ->
          {reply, term(), #st{}} | {stop, normal, term(), #st{}}.
handle_call({start, Ns, Base}, _From, St) ->
    case start_nodes(Ns, Base, St) of
        {ok, St1} ->
            Probes = probe_all(St1#st.nodes),
            {reply, ok, St1#st{probes_start = Probes}};
        {error, R, St1} ->
            _ = stop_nodes(St1, failed),
            _ = [file:del_dir_r(N#node.dir) || N <- St1#st.nodes,
                                                N#node.dir =/= undefined],
            _ = [agent_cleanup_remote(N) || N <- St1#st.nodes],
            _ = St1#st.created andalso file:del_dir(St#st.dir),
            {stop, normal, {error, R}, St1#st{nodes = []}}
    end;
handle_call(stop, _From, St) ->
    St1 = finish(St, requested),
    {stop, normal, {ok, St1#st.summary}, St1};
handle_call(info, _From, #st{summary = undefined} = St) ->
    {reply, {ok, info(St)}, St};
handle_call(info, _From, #st{summary = Sum} = St) ->
    {reply, {ok, Sum}, St};
handle_call(_, _From, St) ->
    {reply, {error, unknown_request}, St}.

%% @private
-spec handle_cast(term(), #st{}) -> {noreply, #st{}}.
handle_cast(_, St) -> {noreply, St}.

%% @private
-spec handle_info(term(), #st{}) -> {noreply, #st{}} | {stop, normal, #st{}}.
handle_info({'DOWN', Ref, process, _, _}, #st{monitor = Ref} = St) ->
    {stop, normal, finish(St, owner_down)};
handle_info({'DOWN', _, process, Pid, Why}, #st{nodes = Ns} = St) ->
    %% A node's agent went (disconnected, or died): said in info/1 and
    %% in the stop summary, instead of a session that looks whole.
    Now = erlang:monotonic_time(millisecond),
    Ns1 = [case N of
               #node{agent = Pid, lost = undefined} ->
                   logger:warning("beamprobe: cluster session: node ~p lost "
                                  "(~0tp): its session ends there",
                                  [N#node.name, Why]),
                   N#node{lost = {Now, Why}};
               _ -> N
           end || N <- Ns],
    {noreply, St#st{nodes = Ns1}};
handle_info(_, St) -> {noreply, St}.

%% @private
-spec terminate(term(), #st{}) -> ok.
terminate(_, St) ->
    ok = beamprobe_own:unmark_handle(),
    _ = finish(St, terminated),
    ok.

start_nodes([], _Base, St) -> {ok, St};
start_nodes([N | Ns], Base0, St) ->
    start_node(N, Ns, node_spec(N, Base0), Base0, St).

%% A pid lives on one node: the session of each node excludes the pids
%% of that node, and the names registered there.
node_spec(N, #{exclude := X} = Base) when is_list(X) ->
    Regs = case [A || A <- X, is_atom(A)] of
               [] -> [];
               _ -> try erpc:call(N, erlang, registered, [], ?CALL_TIMEOUT)
                    catch _:_ -> all   % the node's own check says why
                    end
           end,
    Base#{exclude := [P || P <- X,
                           case P of
                               _ when is_pid(P) -> node(P) =:= N;
                               _ when is_atom(P), Regs =/= all ->
                                   lists:member(P, Regs);
                               _ -> true
                           end]};
node_spec(_N, Base) -> Base.

start_node(N, Ns, Base, Base0, #st{dir = undefined, nodes = Acc} = St) ->
    %% Streamed: each node's session writes to its own stream.
    Spec = Base#{output => maps:get(N, St#st.streams)},
    R = case N =:= node() of
            true -> local_start(Spec);
            false ->
                try erpc:call(N, ?MODULE, agent_start,
                              [self(), Spec, St#st.id], ?CALL_TIMEOUT)
                catch Class:Err -> {error, {Class, Err}}
                end
        end,
    case R of
        {ok, S} when is_pid(S) ->
            start_nodes(Ns, Base0, St#st{nodes = Acc ++ [#node{name = N,
                                                              session = S}]});
        {ok, Agent, Staged} ->
            _ = monitor(process, Agent),
            start_nodes(Ns, Base0,
                        St#st{nodes = Acc ++ [#node{name = N, agent = Agent,
                                                    staged = Staged}]});
        {error, Failure} -> {error, {node_failed, N, Failure}, St}
    end;
start_node(N, Ns, Base, Base0, #st{dir = Dir, nodes = Acc} = St) ->
    Local = filename:join(Dir, atom_to_list(N)),
    R = case N =:= node() of
            true ->
                case ensure_dir(Dir) of
                    {ok, C} ->
                        put(created, C),
                        local_start(Base#{output => {file, Local}});
                    {error, _} = E -> E
                end;
            false ->
                try erpc:call(N, ?MODULE, agent_start,
                              [self(), Base, St#st.id], ?CALL_TIMEOUT)
                catch Class:Err -> {error, {Class, Err}}
                end
        end,
    case R of
        {ok, S} when is_pid(S) ->
            start_nodes(Ns, Base0, St#st{created = get(created) =:= true,
                                        nodes = Acc ++ [#node{name = N,
                                                              session = S,
                                                              dir = Local}]});
        {ok, Agent, Staged} ->
            _ = monitor(process, Agent),
            start_nodes(Ns, Base0,
                        St#st{nodes = Acc ++ [#node{name = N, agent = Agent,
                                                    staged = Staged,
                                                    dir = Local}]});
        {error, Failure} -> {error, {node_failed, N, Failure}, St}
    end.

%% @private A node's own session of the cluster session, owned by the
%% caller (the coordinator here, the agent on the other nodes).
-spec local_start(map()) -> {ok, beamprobe:session()} | {error, term()}.
local_start(Spec) ->
    case beamprobe:start_matched(Spec, self()) of
        {ok, S, _} -> {ok, S};
        {error, _} = E -> E
    end.

ensure_dir(Dir) ->
    case beamprobe_nif_wait:make_dir(unicode:characters_to_binary(Dir)) of
        {error, not_empty} -> {ok, false};
        {error, R} -> {error, {unwritable, Dir, R}};
        created -> {ok, true};
        existing -> {ok, false}
    end.

%% A remote node's staged trace of a start that failed elsewhere.
agent_cleanup_remote(#node{agent = undefined}) -> ok;
agent_cleanup_remote(#node{staged = undefined}) -> ok;
agent_cleanup_remote(#node{name = N, staged = Staged}) ->
    catch erpc:call(N, ?MODULE, agent_cleanup, [Staged], 5000).

%% Every node is asked at once, with one deadline (?INFO_MS) for all:
%% a node that has not answered by then is `{error, timeout}' and named
%% in `no_answer'.  Before, the nodes were asked in turn, each for up to
%% ?CALL_TIMEOUT: info/1 of a session with a frozen node (SIGSTOP, its
%% agent suspended) took 60 s per such node.
info(#st{nodes = Ns, dir = Dir, started = T0} = St) ->
    Per = ask_all(Ns, info, ?INFO_MS),
    M = lost(St, #{nodes => maps:from_list(Per), output => output(St, Dir),
                   seconds => (erlang:monotonic_time(millisecond) - T0) / 1000}),
    case [N || {N, {error, timeout}} <- Per] of
        [] -> M;
        Silent -> M#{no_answer => Silent}
    end.

%% Req to every node's session at once: [{Node, Reply}] in the nodes'
%% order, `{error, timeout}' for a node that has not answered within Ms
%% (its asking process is killed: a late answer goes nowhere).
ask_all(Ns, Req, Ms) ->
    Self = self(),
    Deadline = erlang:monotonic_time(millisecond) + Ms,
    Ask = fun(N) ->
                  try node_call(N, Req)
                  catch Class:Why -> {error, {Class, Why}}
                  end
          end,
    Ws = [{N#node.name, spawn_link(fun() -> Self ! {asked, self(), Ask(N)} end)}
          || N <- Ns],
    [{Name, receive
                {asked, P, R} -> R
            after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
                    unlink(P),
                    exit(P, kill),
                    receive {asked, P, R} -> R after 0 -> {error, timeout} end
            end} || {Name, P} <- Ws].

%% `lost': the nodes whose agent was seen going, with when (seconds
%% into the session) and why; absent when none was.
lost(#st{nodes = Ns, started = T0}, M) ->
    case [{N#node.name, #{after_seconds => (T - T0) / 1000, reason => Why}}
          || #node{lost = {T, Why}} = N <- Ns] of
        [] -> M;
        L -> M#{lost => maps:from_list(L)}
    end.

node_call(#node{session = S}, Req) when is_pid(S) ->
    case Req of
        info -> beamprobe:info(S);
        stop -> beamprobe:stop(S)
    end;
node_call(#node{agent = A}, Req) ->
    acall(A, Req).

%% A request to an agent; an agent that is gone or unreachable is an
%% error, never a hang.
acall(Agent, Req) ->
    %% (After a disconnection: connect again first, so that the monitor
    %% below reaches an agent that is still there.)
    _ = net_kernel:connect_node(node(Agent)),
    Ref = monitor(process, Agent),
    Agent ! {?MODULE, self(), Ref, Req},
    receive
        {?MODULE, Ref, Reply} -> demonitor(Ref, [flush]), Reply;
        {'DOWN', Ref, process, _, Why} -> {error, {agent_down, Why}}
    after ?CALL_TIMEOUT ->
            demonitor(Ref, [flush]), {error, timeout}
    end.

%% Stops every node's session (in parallel), once.
stop_nodes(#st{nodes = Ns}, _Why) ->
    Self = self(),
    Stop = fun(N) ->
                   try node_call(N, stop)
                   catch Class:Why -> {error, {Class, Why}}
                   end
           end,
    Pids = [{N, spawn_link(fun() -> Self ! {stopped, self(), Stop(N)} end)}
            || N <- Ns],
    [{N, receive {stopped, P, R} -> R end} || {N, P} <- Pids].

finish(#st{summary = S} = St, _) when S =/= undefined -> St;
finish(#st{nodes = []} = St, _) -> St;
finish(#st{nodes = Ns, dir = Dir, started = T0} = St, Why) ->
    ProbesStop = probe_all(Ns),
    Stops = stop_nodes(St, Why),
    _ = Dir =/= undefined andalso ensure_dir(Dir),
    Names = [N#node.name || N <- Ns],
    Per = [try node_result(N, R, St#st.probes_start, ProbesStop, Names, T0)
           catch Class:Err ->
                   {N#node.name, #{summary => R, output => N#node.dir,
                                   error => {Class, Err}}}
           end || {N, R} <- Stops],
    Sum = lists:foldl(fun({ok, S}, A) -> add(S, A); (_, A) -> A end,
                      #{events => 0, dropped => #{total => 0}, bytes => 0},
                      [R || {_, R} <- Stops]),
    Summary = Sum#{seconds => (erlang:monotonic_time(millisecond) - T0) / 1000,
                   output => output(St, Dir),
                   stop_reason => Why,
                   nodes => maps:from_list([streamed(St, P) || P <- Per])},
    St#st{summary = lost(St, Summary)}.

%% A streamed node's output: its stream.
streamed(#st{dir = undefined, streams = M}, {Name, #{output := undefined} = R}) ->
    {Name, R#{output => maps:get(Name, M, undefined)}};
streamed(_, P) -> P.

output(#st{streams = M}, undefined) -> {streams, M};
output(_, Dir) -> Dir.

add(#{events := E, dropped := #{total := D}, bytes := B},
    #{events := E0, dropped := #{total := D0}, bytes := B0} = A) ->
    A#{events := E0 + E, dropped := #{total => D0 + D}, bytes := B0 + B};
add(_, A) -> A.

%% Brings a node's trace here (if remote), records its clock offset.
%% A node that did not answer its stop within ?CALL_TIMEOUT (stuck,
%% frozen), or whose connection went meanwhile, is not asked for
%% anything more: its session may still be writing the staged trace, and
%% each further call would wait as long again, or for a new connection
%% to a frozen node (a frozen node held the stop for minutes).
node_result(#node{name = Name, dir = Local} = N, Stop, P0, P1, Names, T0) ->
    Gone = case Stop of
               {error, timeout} -> true;
               {error, {agent_down, noconnection}} -> true;
               _ -> false
           end,
    Fetch = case Stop of
                {error, R} when Gone, N#node.staged =/= undefined ->
                    {error, {not_stopped, R}};
                _ -> fetch(N)
            end,
    Clock = clock(Name, maps:get(Name, P0, none), maps:get(Name, P1, none)),
    Ids = case Name =:= node() of
              true -> dist_ids(Names);
              false when Gone -> "";
              false ->
                  try erpc:call(Name, ?MODULE, dist_ids, [Names], ?CALL_TIMEOUT)
                  catch _:_ -> ""
                  end
          end,
    Env = env(Clock, Ids, Names) ++ lost_env(N, T0),
    Rec = case Fetch of
              ok when Local =:= undefined -> ok;
              ok -> rewrite_env(filename:join(Local, "metadata"), Env);
              _ -> Fetch
          end,
    R0 = #{summary => Stop, clock => maps:from_list(
                                         [{K, V} || {K, V} <- Clock,
                                                    is_integer(V)]),
           output => Local},
    R1 = case Fetch of
             ok when Local =:= undefined ->
                 R0#{clock_env => iolist_to_binary(env_lines(Env))};
             ok -> R0#{fetch => ok};
             {error, _} = E -> R0#{fetch => E, staged => N#node.staged}
         end,
    {Name, case Rec of ok -> R1; {error, _} = E2 -> R1#{env => E2} end}.

%% Copies a remote node's staged trace into its local directory and
%% deletes the staged copy; the local node's trace is already there.
fetch(#node{agent = undefined}) -> ok;
fetch(#node{staged = undefined}) -> ok;
fetch(#node{name = Name, staged = Staged, dir = Local}) ->
    try
        {ok, Files} = erpc:call(Name, ?MODULE, agent_files, [Staged],
                                ?CALL_TIMEOUT),
        {ok, _} = ensure_dir(Local),
        lists:foreach(fun({F, Size}) ->
                              copy(Name, filename:join(Staged, F),
                                   filename:join(Local, F), Size)
                      end, Files),
        _ = erpc:call(Name, ?MODULE, agent_cleanup, [Staged], ?CALL_TIMEOUT),
        ok
    catch Class:Why -> {error, {fetch_failed, {Class, Why}}}
    end.

%% @private
%% Copies Size bytes of Node's file From into the new local file To
%% (0600 from its creation: made 0644 under the usual umask and changed
%% after, it could be opened by another user in between, who could then
%% read all that was copied in; an existing To is refused); raises
%% `{short_copy, From, Detail}' when fewer come.
-spec copy(node(), string(), string(), non_neg_integer()) -> ok.
copy(Node, From, To, Size) ->
    ok = beamprobe_nif_wait:create_file(unicode:characters_to_binary(To)),
    {ok, Fd} = file:open(To, [write, raw, binary]),
    try
        copy_chunks(Node, From, Fd, 0, Size)
    after
        file:close(Fd)
    end.

%% The file whole, or an error naming how much came: a copy cut short
%% (the staged file shorter than listed, a read error there) used to
%% count as fetched, and the staged file was then deleted.
copy_chunks(_Node, _From, _Fd, Off, Size) when Off >= Size -> ok;
copy_chunks(Node, From, Fd, Off, Size) ->
    case erpc:call(Node, ?MODULE, agent_read, [From, Off, ?CHUNK],
                   ?CALL_TIMEOUT) of
        {ok, Bin} when byte_size(Bin) > 0 ->
            ok = file:write(Fd, Bin),
            copy_chunks(Node, From, Fd, Off + byte_size(Bin), Size);
        Other ->
            error({short_copy, From, #{copied => Off, size => Size,
                                       read => Other}})
    end.

%%% ------------------------------------------------------------------------
%%% Clocks
%%% ------------------------------------------------------------------------

%% Every node at once: a node that does not answer costs one probe's
%% timeout, not ?PROBES of them per node in turn (a frozen node held a
%% cluster stop for 80 s before it was even asked to stop).
probe_all(Ns) ->
    Self = self(),
    Pids = [{N#node.name,
             spawn_link(fun() -> Self ! {probed, self(), probe(N#node.name)} end)}
            || N <- Ns],
    maps:from_list([{Name, receive {probed, P, R} -> R end} || {Name, P} <- Pids]).

%% {Lo, Hi, MinRtt, Count}: bounds of the offset to add to Node's trace
%% clock to get this node's, from up to ?PROBES round trips (the first
%% that fails ends them: the node is unreachable or stuck); `none' when
%% the node could not be probed.
probe(Node) when Node =:= node() -> {0, 0, 0, 0};
probe(Node) -> probe_bounds(samples(Node, ?PROBES)).

samples(_Node, 0) -> [];
samples(Node, K) ->
    case sample(Node) of
        {_, _, _} = S -> [S | samples(Node, K - 1)];
        none -> []
    end.

sample(Node) ->
    T0 = beamprobe_nif:clock(),
    try erpc:call(Node, beamprobe_nif, clock, [], 5000) of
        T1 when is_integer(T1) -> {T0, T1, beamprobe_nif:clock()};
        _ -> none
    catch _:_ -> none
    end.

%% @doc The offset bounds of samples `{T0, T1, T3}' (T0, T3 read here
%% before and after T1 was read on the other node): `{Lo, Hi, MinRtt,
%% Count}' with Lo = max(T0 - T1), Hi = min(T3 - T1); `none' without
%% samples.
-spec probe_bounds([{integer(), integer(), integer()}]) ->
          {integer(), integer(), integer(), non_neg_integer()} | none.
probe_bounds([]) -> none;
probe_bounds(Samples) ->
    Lo = lists:max([T0 - T1 || {T0, T1, _} <- Samples]),
    Hi = lists:min([T3 - T1 || {_, T1, T3} <- Samples]),
    Rtt = lists:min([T3 - T0 || {T0, _, T3} <- Samples]),
    {Lo, Hi, Rtt, length(Samples)}.

%% The recorded offset: the hull of the start and stop bounds.  Each
%% holds the offset at its own moment; the offset of the whole session
%% is only known to lie between them (the clocks of two hosts drift
%% apart, a few ppm; a step).  Their intersection, recorded before when
%% they overlapped, assumed a constant offset: a node stepped 20 us
%% between the probes got bounds [-15403, -5128] that held neither its
%% offset at the start (0) nor at the stop (-20000).
clock(Node, _, _) when Node =:= node() ->
    [{offset_ns, 0}, {lo_ns, 0}, {hi_ns, 0}, {start, {0, 0, 0, 0}},
     {stop, {0, 0, 0, 0}}];
clock(_Node, P0, P1) ->
    Bs = [{Lo, Hi} || {Lo, Hi, _, _} <- [P0, P1]],
    case Bs of
        [] -> [{start, P0}, {stop, P1}];
        _ ->
            Lo = lists:min([L || {L, _} <- Bs]),
            Hi = lists:max([H || {_, H} <- Bs]),
            [{offset_ns, (Lo + Hi) div 2}, {lo_ns, Lo}, {hi_ns, Hi},
             {start, P0}, {stop, P1}]
    end.

env(Clock, Ids, Names) ->
    Probe = fun({Lo, Hi, Rtt, N}) -> lists:concat([Lo, ",", Hi, ",", Rtt, ",", N]);
               (_) -> "none"
            end,
    [{"cluster_control", atom_to_list(node())},
     {"cluster_nodes", lists:join(",", [atom_to_list(N) || N <- Names])},
     {"dist_ids", Ids}] ++
        [{"clock_" ++ Key, integer_to_list(V)}
         || {K, Key} <- [{offset_ns, "offset_ns"}, {lo_ns, "offset_lo_ns"},
                         {hi_ns, "offset_hi_ns"}],
            V <- [proplists:get_value(K, Clock)], is_integer(V)] ++
        [{"clock_probe_start", Probe(proplists:get_value(start, Clock))},
         {"clock_probe_stop", Probe(proplists:get_value(stop, Clock))}].

%% A node seen going mid-session (its session ended there then, and its
%% trace with it): `cluster_lost' = "Seconds,Reason", so that the merged
%% timeline says where that node's part ends instead of showing a trace
%% that looks whole.
lost_env(#node{lost = {T, Why}}, T0) ->
    [{"cluster_lost", lists:flatten(io_lib:format("~.3f,~0tP",
                                                  [(T - T0) / 1000, Why, 8]))}];
lost_env(#node{}, _T0) -> [].

%% @doc How this node prints pids of each of `Nodes': "Num=node,..." where
%% Num is the first number of `<Num.X.Y>' (also `#Ref<Num...>',
%% `#Port<Num...>'); 0 for this node.
-spec dist_ids([node()]) -> string().
dist_ids(Nodes) ->
    lists:flatten(
      lists:join(",", [integer_to_list(node_num(N)) ++ "=" ++ atom_to_list(N)
                       || N <- Nodes])).

node_num(N) when N =:= node() -> 0;
node_num(N) ->
    NB = atom_to_binary(N, utf8),
    %% NEW_PID_EXT with the node's name: the pid prints with the number
    %% this node uses for that node.
    Pid = binary_to_term(<<131, 88, 119, (byte_size(NB)), NB/binary,
                           0:32, 0:32, 0:32>>),
    [Num | _] = string:split(tl(pid_to_list(Pid)), "."),
    list_to_integer(Num).

%% @doc Adds `Env' (key, value) to the env block of a trace's metadata
%% file (written whole to a hidden temporary file, then renamed).
-spec rewrite_env(file:filename(), [{string(), iodata()}]) ->
          ok | {error, term()}.
rewrite_env(Path, Env) ->
    case file:read_file(Path) of
        {ok, Text} ->
            Lines = env_lines(Env),
            case binary:split(Text, <<"env {\n">>) of
                [Before, After] ->
                    New = [Before, <<"env {\n">>, Lines, After],
                    Tmp = filename:join(filename:dirname(Path), ".metadata.tmp"),
                    _ = file:delete(Tmp),
                    case private_write(Tmp, New) of
                        ok -> file:rename(Tmp, Path);
                        {error, _} = E -> E
                    end;
                _ -> {error, no_env_block}
            end;
        {error, R} -> {error, {metadata, R}}
    end.

%% File, new, 0600 from its creation (copy/4), with Data.
private_write(File, Data) ->
    case beamprobe_nif_wait:create_file(unicode:characters_to_binary(File)) of
        ok -> file:write_file(File, Data, [raw]);
        {error, _} = E -> E
    end.

%% @doc The lines of a metadata env block for `Env' (key, value), as
%% {@link rewrite_env/2} adds them: `\tKEY = "VALUE";\n', quotes and
%% backslashes escaped, control characters replaced.
-spec env_lines([{string(), iodata()}]) -> iolist().
env_lines(Env) ->
    [["\t", K, " = \"", escape(lists:flatten(io_lib:format("~ts", [V]))),
      "\";\n"] || {K, V} <- Env].

escape(S) ->
    lists:flatmap(fun($") -> "\\\""; ($\\) -> "\\\\";
                     (C) when C < 32 -> "?";
                     (C) -> [C]
                  end, S).

%%% ------------------------------------------------------------------------
%%% The agent, on every other node (beamprobe_cluster_agent)
%%% ------------------------------------------------------------------------

%% @private
%% Runs on a cluster node (erpc): starts the node's session in a staging
%% directory, owned by an agent process (beamprobe_cluster_agent).
-spec agent_start(pid(), map(), string()) ->
          {ok, pid(), string() | undefined} | {error, term()}.
agent_start(Coord, Spec, Id) ->
    beamprobe_cluster_agent:start(Coord, Spec, Id).

%% @private
-spec agent_files(string()) -> {ok, [{string(), non_neg_integer()}]}.
agent_files(Dir) ->
    {ok, Fs} = file:list_dir(Dir),
    {ok, [{F, filelib:file_size(filename:join(Dir, F))}
          || F <- lists:sort(Fs), not lists:prefix(".", F)]}.

%% @private
-spec agent_read(string(), non_neg_integer(), pos_integer()) ->
          {ok, binary()} | eof | {error, term()}.
agent_read(Path, Off, Len) ->
    {ok, Fd} = file:open(Path, [read, raw, binary]),
    try file:pread(Fd, Off, Len)
    after file:close(Fd)
    end.

%% @private
-spec agent_cleanup(string()) -> ok | {error, term()}.
agent_cleanup(Dir) ->
    file:del_dir_r(Dir).
