%%% @doc What the cluster suites (beamprobe_cluster_SUITE,
%%% beamprobe_cluster_faults_SUITE) share: each case's two hidden `peer'
%%% nodes, connected to each other, with what each node had before the
%%% case (node_clean/0) to compare with after it; a ping-pong workload
%%% between every pair of nodes; the trace's metadata environment.
%%% The functions run on the nodes are exported from here.
-module(beamprobe_cluster_lib).

-include_lib("stdlib/include/assert.hrl").

-export([init_case/2, end_case/1, start_peer/0, nodes_of/1, connect/1,
         ping_pong/2, assert_clean/2, env/2, int/2, with_stdio_peer/2,
         stopped/1]).
%% Run on the nodes.
-export([pong/0, ping/3, node_clean/0, traced/1]).

-define(L, beamprobe_test_lib).

%% init_per_testcase/2 of the cluster suites: two peers, connected, and
%% what each node has before the case (`clean').
init_case(Case, Config) ->
    Config1 = ?L:init_case(Case, Config),
    Peers = [start_peer() || _ <- [1, 2]],
    C = [{peers, Peers} | Config1],
    ok = connect(C),
    [{clean, [{N, erpc:call(N, ?MODULE, node_clean, [])} || N <- nodes_of(C)]} | C].

end_case(Config) ->
    [catch peer:stop(P) || {P, _} <- proplists:get_value(peers, Config)],
    ?L:clear_trace_state().

start_peer() ->
    Paths = [filename:dirname(code:which(beamprobe)),
             filename:dirname(code:which(?MODULE))],
    %% Hidden: global's partition prevention would disconnect the
    %% nodes when a case stops its peers.
    {ok, P, N} = peer:start_link(#{name => peer:random_name(),
                                   args => ["-hidden" |
                                            lists:append([["-pa", D] || D <- Paths])]}),
    {P, N}.

nodes_of(Config) -> [node() | [N || {_, N} <- proplists:get_value(peers, Config)]].

%% Hidden peers are not in nodes(): connect them to each other.
connect(Config) ->
    Ns = [N || {_, N} <- proplists:get_value(peers, Config)],
    [true = erpc:call(A, net_kernel, connect_node, [B]) || A <- Ns, B <- Ns, A < B],
    ok.

pong() ->
    receive
        {ping, From, I} -> From ! {pong, self(), I}, pong();
        stop -> ok
    end.

ping(_Pong, 0, Parent) -> Parent ! {ping_done, self()};
ping(Pong, N, Parent) ->
    Pong ! {ping, self(), N},
    receive {pong, Pong, N} -> ok end,
    ping(Pong, N - 1, Parent).

%% A ping-pong between every ordered pair of nodes: Rounds messages each
%% way per pair.
ping_pong(Nodes, Rounds) ->
    Pairs = [{A, B} || A <- Nodes, B <- Nodes, A =/= B],
    Self = self(),
    Pingers = [begin
                   Pong = spawn(B, ?MODULE, pong, []),
                   {spawn(A, ?MODULE, ping, [Pong, Rounds, Self]), Pong}
               end || {A, B} <- Pairs],
    [receive {ping_done, P} -> Pong ! stop end || {P, Pong} <- Pingers],
    length(Pairs) * Rounds * 2.

%% On a node: sessions, traced processes and message patterns (compared
%% with what the node had before the case).
node_clean() ->
    #{sessions => beamprobe:list(), traced => traced(processes()),
      new => erlang:trace_info(new, flags),
      send => erlang:trace_info(send, match_spec),
      'receive' => erlang:trace_info('receive', match_spec)}.

%% The processes of Pids that have trace flags or a tracer.  One that
%% exits between processes/0 and trace_info/2 (`undefined') has neither:
%% a cluster node's agent ends just after its session, and was counted
%% as traced when the check caught it exiting (CI's coordinator_killed
%% failure, `traced => [<N.97.0>]': the agent).
traced(Pids) ->
    [P || P <- Pids,
          case {erlang:trace_info(P, flags), erlang:trace_info(P, tracer)} of
              {undefined, _} -> false;
              {_, undefined} -> false;
              {{flags, []}, {tracer, []}} -> false;
              _ -> true
          end].

assert_clean(Config, Nodes) ->
    lists:foreach(
      fun(N) ->
              Clean = proplists:get_value(N, proplists:get_value(clean, Config)),
              _ = (catch ?L:wait_until(fun() -> erpc:call(N, ?MODULE, node_clean, []) =:= Clean end,
                                       5000)),
              ?assertEqual({N, Clean}, {N, erpc:call(N, ?MODULE, node_clean, [])})
      end, Nodes).

env(Dir, Node) ->
    {ok, Text} = file:read_file(filename:join([Dir, atom_to_list(Node), "metadata"])),
    {match, Pairs} = re:run(Text, "\t([a-z_]+) = \"([^\"]*)\";", [global, {capture, all_but_first, list}]),
    maps:from_list([{K, V} || [K, V] <- Pairs]).

int(Env, K) -> list_to_integer(maps:get(K, Env)).

%% Runs Fun(Node) with a hidden peer of its own (extra emulator args
%% Args), controlled over its standard input (a peer controlled over
%% distribution ends when disconnected), connected; stops it after.
with_stdio_peer(Args, Fun) ->
    Paths = [filename:dirname(code:which(beamprobe)),
             filename:dirname(code:which(?MODULE))],
    {ok, P, N} = peer:start_link(#{name => peer:random_name(),
                                   connection => standard_io,
                                   args => ["-hidden" | Args] ++
                                       lists:append([["-pa", D] || D <- Paths])}),
    true = net_kernel:connect_node(N),
    try Fun(N)
    after catch peer:stop(P)
    end.

%% Is OS process Pid stopped (SIGSTOP delivered)?
stopped(Pid) ->
    case file:read_file("/proc/" ++ Pid ++ "/stat") of
        {ok, Stat} ->
            %% pid (comm) State ...: the state follows the last ')'.
            [_, Rest] = string:split(Stat, ")", trailing),
            case string:trim(Rest, leading) of
                <<"T", _/binary>> -> true;
                _ -> false
            end;
        {error, _} -> false
    end.
