%%% @doc The agent of a cluster session on every node but the control
%%% node (beamprobe_cluster): it owns that node's session and its staged
%%% trace, answers the coordinator's `stop' and `info', and ends the
%%% session when the coordinator goes away.
%%%
%%% A coordinator that dies while the node is connected never fetches:
%%% the agent ends the session and removes the staged trace.
%%% An agent that loses the connection to the control node (the node died,
%%% or a netsplit: it cannot tell which) ends its session at once (trace
%%% flags and patterns removed), logs a warning naming the staged trace,
%%% and keeps the trace and its session's summary for the coordinator's
%%% stop after a reconnection; it asks the epmd of the control node's
%%% host (at the lost connection's address) whether that node still
%%% runs, at once then less and less often (2 s doubling to 30 s), and
%%% the control node itself whenever it connects again (linger/1):
%%% - no node of that name runs on its host any more (epmd answers
%%%   without it), or it came back as a new incarnation: the staged
%%%   trace is removed at once (a notice says so) and the agent ends;
%%% - back, its coordinator alive: the agent waits for its stop (or its
%%%   death, then removes the trace), as a running session would;
%%% - back, its coordinator ended meanwhile (its stop summary named the
%%%   node's staged trace as not fetched): the trace is kept for
%%%   ?LINGER_MS (10 min) for the operator to copy, then removed;
%%% - no news (host or epmd unreachable): removed ?LINGER_MS after the
%%%   connection was lost.
%%% Nothing staged stays behind for good on a node that lives on.
-module(beamprobe_cluster_agent).

-export([start/3]).

-include_lib("kernel/include/net_address.hrl").

%% How long a disconnected agent keeps its summary and staged trace
%% for the coordinator's stop, without news of the coordinator; how
%% often it looks for news (doubling from ?CHECK_MS to ?CHECK_MAX_MS).
-define(LINGER_MS, 600000).
-define(CHECK_MS, 2000).
-define(CHECK_MAX_MS, 30000).

%% A disconnected agent (linger/1): the coordinator, the session's
%% summary, the staged trace, the deadline, the monitor of the
%% coordinator once it is seen alive again, the checker running, when
%% to check next.
-record(lg, {coord :: pid(),
             %% The control node's address (its last connection), for
             %% its host's epmd: no name resolution on this node.
             addr :: inet:ip_address() | undefined,
             sum :: term(),
             staged :: string() | undefined,
             deadline :: integer(),
             mon :: reference() | undefined,
             checker :: {reference(), pid(), reference()} | undefined,
             next = 0 :: non_neg_integer(),
             %% false once the coordinator is known to have ended.
             check = true :: boolean()}).

%% @doc Runs on a cluster node (beamprobe_cluster:agent_start/3, called
%% over erpc by the coordinator `Coord'): starts the node's session, in a
%% staging directory unless `Spec' has its output, owned by an agent
%% process that ends it when the coordinator goes away (caller dead,
%% connection lost): `{ok, Agent, StagingDir | undefined}'.
-spec start(pid(), map(), string()) ->
          {ok, pid(), string() | undefined} | {error, term()}.
start(Coord, Spec, Id) ->
    Tmp = case os:getenv("TMPDIR") of
              false -> "/tmp";
              "" -> "/tmp";
              T -> T
          end,
    %% Streamed (the spec has its output): nothing staged here.
    Staged = case Spec of
                 #{output := _} -> undefined;
                 #{} -> filename:join(Tmp, "beamprobe-cluster-" ++ Id ++ "-" ++
                                          atom_to_list(node()))
             end,
    Caller = self(),
    Ref = make_ref(),
    {Agent, MRef} =
        spawn_monitor(fun() ->
                              _ = erlang:trace(self(), false, [all]),
                              CRef = monitor(process, Coord),
                              Addr = address(node(Coord)),
                              Out = case Staged of
                                        undefined -> maps:get(output, Spec);
                                        _ -> {file, Staged}
                                    end,
                              case beamprobe_cluster:local_start(
                                     Spec#{output => Out}) of
                                  {ok, S} ->
                                      Caller ! {Ref, ok},
                                      agent_loop(CRef, S, Staged, Addr);
                                  {error, _} = E -> Caller ! {Ref, E}
                              end
                      end),
    receive
        {Ref, ok} -> demonitor(MRef, [flush]), {ok, Agent, Staged};
        {Ref, {error, _} = E} -> demonitor(MRef, [flush]), E;
        {'DOWN', MRef, process, _, Why} -> {error, {agent_down, Why}}
    end.

%% (The coordinator's requests and the agent's replies are tagged
%% beamprobe_cluster: beamprobe_cluster:acall/2.)
agent_loop(CRef, S, Staged, Addr) ->
    receive
        {beamprobe_cluster, From, Ref, stop} ->
            From ! {beamprobe_cluster, Ref, beamprobe:stop(S)};
        {beamprobe_cluster, From, Ref, info} ->
            From ! {beamprobe_cluster, Ref, beamprobe:info(S)},
            agent_loop(CRef, S, Staged, Addr);
        {'DOWN', CRef, process, Coord, noconnection} ->
            %% Its group leader (the erpc caller's) is on the lost node:
            %% what it logs from now on stays here (forwarded there, a
            %% log event was a connection attempt to that node, which
            %% started the native name resolver on this node).
            ok = local_group_leader(),
            %% The coordinator's node is out of reach (dead, or a
            %% netsplit: this node cannot tell which): the session ends
            %% now, with its trace flags and patterns; its summary and
            %% staged trace are kept for the coordinator's stop after a
            %% reconnection (a coordinator that is still alive names
            %% the node in its summary), but only while the coordinator
            %% may still come for them (linger/1).
            Sum = case beamprobe:stop(S) of
                      {ok, M} -> {ok, M#{stop_reason => coordinator_unreachable}};
                      Other -> Other
                  end,
            logger:warning("beamprobe: cluster session: the connection to its "
                           "control node ~p was lost: the session here is "
                           "stopped (~ts); ~ts",
                           [node(Coord), sum_text(Sum), kept_text(Staged)]),
            ok = net_kernel:monitor_nodes(true, [{node_type, all}]),
            %% (Back already, before the subscription: as if just now.)
            _ = case lists:member(node(Coord), nodes(connected)) of
                    true -> self() ! {nodeup, node(Coord), []};
                    false -> ok
                end,
            linger(#lg{coord = Coord, addr = Addr, sum = Sum, staged = Staged,
                       deadline = erlang:monotonic_time(millisecond) +
                           ?LINGER_MS});
        {'DOWN', CRef, process, _, Why} ->
            %% The coordinator died while this node was connected: it will
            %% never fetch the staged trace, so it is not left behind.
            _ = beamprobe:stop(S),
            drop_staged(Staged, {coordinator_died, Why})
    end.

local_group_leader() ->
    case whereis(user) of
        undefined -> ok;
        User -> true = group_leader(User, self()), ok
    end.

sum_text({ok, #{events := E, dropped := #{total := D}}}) ->
    io_lib:format("~b events, ~b lost", [E, D]);
sum_text(Other) -> io_lib:format("~0tP", [Other, 8]).

kept_text(undefined) ->
    io_lib:format("its summary is kept for that node's stop while the node "
                  "may come back, at most ~b s", [?LINGER_MS div 1000]);
kept_text(Dir) ->
    io_lib:format("its staged trace ~ts is kept for that node's stop while "
                  "the node may come back: removed as soon as the node is "
                  "known gone, else after ~b s without it",
                  [Dir, ?LINGER_MS div 1000]).

%% A disconnected agent's last duty: its session's summary (and staged
%% trace) to the coordinator's stop or info (stop ends it).  It finds
%% out whether the coordinator can still come for them, with a checker
%% (a process of its own: a host that does not answer takes seconds),
%% and without a connection attempt of its own (which would resolve the
%% control node's host name here, and start the native resolver on a
%% node that is to be left as it was):
%% - at once, then every ?CHECK_MS, doubling up to ?CHECK_MAX_MS, the
%%   epmd of the control node's host (at the address of the lost
%%   connection): if it answers without the node's name, no node of
%%   that name runs there: the coordinator is gone, the staged trace is
%%   removed now;
%% - when the control node connects again (nodeup: its coordinator's
%%   stop or info, or anything else): a new incarnation of it, or its
%%   coordinator ended meanwhile: `gone' or `ended'; the coordinator
%%   alive: the agent monitors it and waits for its stop without a
%%   deadline (as a running session waits), until it dies (removed) or
%%   the connection is lost again (a new deadline);
%% - `ended' (its stop summary named this node's staged trace, not
%%   fetched, for the operator): kept ?LINGER_MS more, then removed;
%% - no news: removed at the deadline, ?LINGER_MS after the connection
%%   was lost.
linger(#lg{mon = Mon, checker = Ch, deadline = Deadline} = L) ->
    {ChTag, ChMon} = case Ch of
                         undefined -> {none, none};
                         {T, _, M} -> {T, M}
                     end,
    CNode = node(L#lg.coord),
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    Wait = case {Mon, L#lg.check} of
               {undefined, true} -> min(Left, L#lg.next);
               {undefined, false} -> Left;
               _ -> infinity
           end,
    receive
        {beamprobe_cluster, From, Ref, stop} ->
            From ! {beamprobe_cluster, Ref, L#lg.sum},
            linger_end(L);
        {beamprobe_cluster, From, Ref, info} ->
            From ! {beamprobe_cluster, Ref, L#lg.sum},
            linger(L);
        {?MODULE, checked, ChTag, Verdict} ->
            demonitor(ChMon, [flush]),
            lingered(Verdict, L#lg{checker = undefined});
        {'DOWN', ChMon, process, _, _} ->
            linger(L#lg{checker = undefined});
        {nodeup, CNode, _} when Mon =:= undefined, L#lg.check ->
            %% Connected again: whatever check runs gives way to the one
            %% that can tell.
            L1 = stop_checker(L),
            linger(start_checker(fun() -> incarnation(L#lg.coord) end, L1));
        {nodeup, _, _} ->
            linger(L);
        {nodedown, _, _} ->
            linger(L);
        {'DOWN', Mon, process, _, noconnection} ->
            logger:warning("beamprobe: cluster session: the connection to its "
                           "control node ~p was lost again; ~ts",
                           [CNode, kept_text(L#lg.staged)]),
            linger(L#lg{mon = undefined, next = 0,
                        deadline = erlang:monotonic_time(millisecond) +
                            ?LINGER_MS});
        {'DOWN', Mon, process, _, Why} ->
            drop_staged(L, {coordinator_died, Why})
    after Wait ->
            case erlang:monotonic_time(millisecond) >= Deadline of
                true when L#lg.check ->
                    drop_staged(L, {control_node_unreachable,
                                    ?LINGER_MS div 1000});
                true ->
                    drop_staged(L, {coordinator_ended, CNode});
                false when Ch =:= undefined, L#lg.check ->
                    Addr = L#lg.addr,
                    L1 = start_checker(fun() -> listed(CNode, Addr) end, L),
                    linger(L1#lg{next = min(?CHECK_MAX_MS,
                                            max(?CHECK_MS, 2 * L#lg.next))});
                false ->
                    linger(L)
            end
    end.

start_checker(F, L) ->
    Self = self(),
    Tag = make_ref(),
    {Pid, MRef} = spawn_monitor(fun() -> Self ! {?MODULE, checked, Tag, F()} end),
    L#lg{checker = {Tag, Pid, MRef}}.

stop_checker(#lg{checker = undefined} = L) -> L;
stop_checker(#lg{checker = {_, Pid, MRef}} = L) ->
    demonitor(MRef, [flush]),
    exit(Pid, kill),
    L#lg{checker = undefined}.

%% The agent ends: nothing of it is left running (its checker).
linger_end(L) ->
    _ = stop_checker(L),
    ok.

lingered(alive, #lg{coord = Coord} = L) ->
    logger:notice("beamprobe: cluster session: its control node ~p is back, "
                  "its coordinator alive: its stop is awaited",
                  [node(Coord)]),
    linger(L#lg{mon = monitor(process, Coord)});
lingered({gone, Why}, L) ->
    drop_staged(L, Why);
lingered(ended, #lg{staged = undefined} = L) ->
    drop_staged(L, {coordinator_ended, node(L#lg.coord)});
lingered(ended, #lg{coord = Coord, staged = Staged} = L) ->
    %% Its stop (or its owner's death) came while this node was out of
    %% reach: its summary names the staged trace (fetch => {error, _},
    %% staged => Path) for the operator to copy; kept for that, bounded.
    logger:notice("beamprobe: cluster session: its control node ~p is back "
                  "but its coordinator has ended: the staged trace ~ts, "
                  "not fetched, is kept for ~b s, then removed",
                  [node(Coord), Staged, ?LINGER_MS div 1000]),
    linger(L#lg{check = false,
                deadline = erlang:monotonic_time(millisecond) + ?LINGER_MS});
lingered(unknown, L) ->
    linger(L).

%% The address of the connection to node N (undefined: not connected,
%% or not an IP connection).
address(N) ->
    try net_kernel:node_info(N, address) of
        {ok, #net_address{address = {IP, _Port}}} when is_tuple(IP) -> IP;
        _ -> undefined
    catch _:_ -> undefined
    end.

%% Connected to the coordinator's node again (over the connection that
%% node made): the same incarnation (the coordinator's pid's creation),
%% then whether the coordinator lives.
incarnation(Coord) ->
    N = node(Coord),
    B = term_to_binary(Coord),
    <<Creation:32>> = binary:part(B, byte_size(B), -4),
    try erpc:call(N, erlang, system_info, [creation], 5000) of
        Creation ->
            case erpc:call(N, erlang, is_process_alive, [Coord], 5000) of
                true -> alive;
                false -> ended
            end;
        _ -> {gone, {control_node_restarted, N}}
    catch _:_ -> unknown
    end.

%% Not connected: if the epmd of the node's host answers and does not
%% list it, no node of that name runs there: the coordinator is gone.
%% A host or an epmd that does not answer says nothing (a netsplit), nor
%% does a node whose distribution does not use epmd.
listed(_N, undefined) -> unknown;
listed(N, Addr) ->
    [Name, _Host] = string:split(atom_to_list(N), "@"),
    case net_kernel:epmd_module() of
        erl_epmd ->
            case erl_epmd:names(Addr) of
                {ok, Names} ->
                    case lists:keymember(Name, 1, Names) of
                        true -> unknown;
                        false -> {gone, {control_node_down, N}}
                    end;
                _ -> unknown
            end;
        _ -> unknown
    end.

drop_staged(#lg{staged = Staged} = L, Why) ->
    ok = linger_end(L),
    drop_staged(Staged, Why);
drop_staged(Staged, Why) ->
    Removed = case Staged of
                  undefined -> "";
                  _ ->
                      _ = beamprobe_cluster:agent_cleanup(Staged),
                      io_lib:format(": its staged trace ~ts was removed",
                                    [Staged])
              end,
    logger:notice("beamprobe: cluster session ended here without its "
                  "coordinator's stop (~0tP)~ts", [Why, 10, Removed]).
