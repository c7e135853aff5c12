%%% @doc Following a request across the nodes of a cluster follow session
%%% (beamprobe_follow with `nodes', beamprobe_cluster) on `peer' nodes of
%%% this host: the request's messages are recorded on every node they
%%% reach, `bin/beamprobe request' reads the directory of node traces as
%%% one, and no node keeps anything afterwards.  One node:
%%% beamprobe_follow_SUITE.
-module(beamprobe_follow_nodes_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2,
         end_per_testcase/2]).
-export([across_nodes/1, across_nodes_two_roots/1, across_nodes_conflict/1,
         across_nodes_peer_dies/1, across_nodes_budget/1,
         across_nodes_request_budget/1, across_nodes_erpc/1]).

-define(L, beamprobe_test_lib).
-define(F, beamprobe_follow_lib).
-define(W, follow_request).

all() ->
    [across_nodes, across_nodes_two_roots, across_nodes_conflict,
     across_nodes_peer_dies, across_nodes_budget, across_nodes_request_budget,
     across_nodes_erpc].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    Config1 = ?L:init_case(Case, Config),
    [{send_before, erlang:trace_info(send, match_spec)} | Config1].

end_per_testcase(_Case, _Config) ->
    ?L:clear_trace_state().

plain(Servers, N) -> ?W:plain(Servers, N).

%%% ------------------------------------------------------------------------

%% A request followed across 3 processes on 2 nodes: the root client
%% here, mid on a peer node, srv here again (two node crossings each
%% way), while an unrelated client sends to both servers all along.  The
%% request view of the cluster directory holds exactly the request's ten
%% events, in causal order; afterwards neither node has anything
%% installed (flags, patterns, the seq_trace system tracer).
across_nodes(Config) ->
    Dir = ?L:dir(Config, "f"),
    {Peer, B} = ?F:start_peer(),
    try
        Before = erpc:call(B, ?F, node_state, []),
        Srv = spawn(?W, srv, [100]),
        Mid = erpc:call(B, erlang, spawn, [?W, mid, [Srv]]),
        {ok, H} = beamprobe:start(#{follow => #{from => "follow_request:root/2",
                                                budget => #{ms => 20000}},
                                    nodes => [node(), B],
                                    output => {file, Dir}}),
        %% The peer's follow session owns its seq_trace tracer.
        ?assertMatch({beamprobe_nif, _},
                     erpc:call(B, seq_trace, get_system_tracer, [])),
        Self = self(),
        Other = spawn(?W, plain_until_stop, [[Mid, Srv]]),
        timer:sleep(20),
        Client = spawn(fun() -> Self ! {done, self(), ?W:root(Mid, 7)} end),
        receive {done, Client, 107} -> ok end,
        timer:sleep(20),
        Other ! {stop, self()},
        receive {plain_stopped, Other, Rounds} -> ct:pal("~p plain rounds", [Rounds]) end,
        {ok, Sum} = beamprobe:stop(H),
        ct:pal("~p", [Sum]),
        ?F:assert_clean(Config),
        After = erpc:call(B, ?F, node_state, []),
        ?assertEqual(Before, After),
        ?assertMatch(#{traced := [], new := {flags, []}, seq_tracer := false,
                       sessions := []}, After),
        {Out, Events} = ?F:chain_request(Dir),
        %% The events of mid (receive its request, send on, receive the
        %% reply, send it back) are the peer node's.
        Bn = atom_to_binary(B),
        OnB = [I || {I, L} <- lists:zip(lists:seq(1, 10), Events),
                    binary:match(L, Bn) =/= nomatch],
        ?assertEqual([3, 4, 7, 8], OnB),
        ?assertEqual(nomatch, binary:match(Out, <<"plain">>))
    after
        catch peer:stop(Peer)
    end.

%% Two followed requests at once through the same servers (mid on the
%% peer, srv here), one whose root call is made here and one on the
%% peer: each request holds its own messages only, and each is rooted on
%% its own node.
across_nodes_two_roots(Config) ->
    Dir = ?L:dir(Config, "f"),
    {Peer, B} = ?F:start_peer(),
    try
        Srv = spawn(?W, srv, [100]),
        Mid = erpc:call(B, erlang, spawn, [?W, mid, [Srv]]),
        {ok, H} = beamprobe:start(#{follow => #{from => "follow_request:root/2"},
                                    nodes => [node(), B],
                                    output => {file, Dir}}),
        Self = self(),
        Here = spawn(fun() -> receive go -> ok end,
                              Self ! {done, self(), ?W:root(Mid, 1)} end),
        There = erpc:call(B, erlang, spawn,
                          [fun() -> receive go -> ok end,
                                    Self ! {done, self(), ?W:root(Mid, 2)} end]),
        Other = spawn(fun() -> plain([Mid, Srv], 20), Self ! plain_done end),
        Here ! go,
        There ! go,
        receive {done, Here, 101} -> ok end,
        receive {done, There, 102} -> ok end,
        receive plain_done -> ok end,
        _ = Other,
        {ok, _} = beamprobe:stop(H),
        ?F:assert_clean(Config),
        ?assertMatch(#{traced := [], seq_tracer := false, sessions := []},
                     erpc:call(B, ?F, node_state, [])),
        Out = ?L:cli_ok(["request", Dir]),
        ct:pal("~s", [Out]),
        Blocks = [B0 || B0 <- binary:split(Out, <<"Request ">>, [global]), B0 =/= <<>>],
        ?assertEqual(2, length(Blocks)),
        Roots = lists:sort(
                  [{V, N} || Blk <- Blocks,
                             {match, [N]} <- [re:run(Blk, "^[0-9]+: root <[0-9.]+> on (\\S+),", [{capture, all_but_first, binary}])],
                             V <- lists:usort([V0 || {match, [V0]} <- [re:run(L, "\\{req,<[0-9.]+>,([0-9]+)\\}", [{capture, all_but_first, binary}]) || L <- ?F:lines(Blk)]])]),
        ?assertEqual([{<<"1">>, atom_to_binary(node())}, {<<"2">>, atom_to_binary(B)}], Roots),
        [?assertMatch({match, _}, re:run(Blk, ", 10 events, 3 processes")) || Blk <- Blocks],
        [?assertEqual(nomatch, binary:match(Blk, <<"plain">>)) || Blk <- Blocks]
    after
        catch peer:stop(Peer)
    end.

%% The peer's seq_trace system tracer is taken: the cluster follow
%% session fails to start, naming the node, and neither node keeps
%% anything (the peer's tracer is left as it was).
across_nodes_conflict(Config) ->
    Dir = ?L:dir(Config, "f"),
    {Peer, B} = ?F:start_peer(),
    try
        T = erpc:call(B, erlang, spawn, [timer, sleep, [infinity]]),
        _ = erpc:call(B, seq_trace, set_system_tracer, [T]),
        ?assertMatch({error, {node_failed, B, {follow_conflict, {seq_trace_tracer, T}}}},
                     beamprobe:start(#{follow => #{from => "follow_request:root/2"},
                                       nodes => [node(), B],
                                       output => {file, Dir}})),
        %% Nothing half-installed: not even the peer's staging directory.
        ?assertEqual([], ?L:staged_dirs(B)),
        ?assert(?L:dir_absent_or_empty(Dir)),
        ?F:assert_clean(Config),
        ?assertMatch(#{traced := [], seq_tracer := T, sessions := [],
                       new := {flags, []}, send := {match_spec, _}},
                     erpc:call(B, ?F, node_state, [])),
        ?assertMatch({all, false}, erpc:call(B, erlang, trace_info, [{?W, root, 2}, all]))
    after
        catch peer:stop(Peer)
    end.

%% The peer dies in the middle of a request: the request's root still
%% gets no answer from it, stop returns with this node's trace, names the
%% lost node, and this node keeps nothing (its seq_trace tracer
%% restored).
across_nodes_peer_dies(Config) ->
    Dir = ?L:dir(Config, "f"),
    {Peer, B} = ?F:start_peer(),
    Srv = spawn(?W, srv, [100]),
    Mid = erpc:call(B, erlang, spawn, [?W, mid, [Srv]]),
    {ok, H} = beamprobe:start(#{follow => #{from => "follow_request:root/2"},
                                nodes => [node(), B],
                                output => {file, Dir}}),
    Self = self(),
    107 = ?W:root(Mid, 7),
    peer:stop(Peer),
    Client = spawn(fun() -> Self ! {done, self(), catch ?W:root(Mid, 8)} end),
    timer:sleep(100),
    exit(Client, kill),
    {ok, #{nodes := Per}} = beamprobe:stop(H),
    ?assertMatch(#{fetch := {error, _}}, maps:get(B, Per)),
    ?assertMatch(#{fetch := ok}, maps:get(node(), Per)),
    %% The dead peer's staged trace is named; it is on this machine's
    %% /tmp, and the test removes it.
    #{staged := Left} = maps:get(B, Per),
    ?assert(filelib:is_dir(Left)),
    ok = file:del_dir_r(Left),
    ?F:assert_clean(Config),
    %% The dead peer's trace is not here: `request' names it and exits 2
    %% (part of the data is gone), and prints what it has.
    {2, Out} = ?L:cli(["request", filename:join(Dir, atom_to_list(node()))]),
    ct:pal("~s", [Out]),
    ?assertMatch({match, _}, re:run(Out, "node " ++ atom_to_list(B) ++
                                        " ran the session .* is not here")),
    ?assertMatch({match, _}, re:run(Out, "returned from follow_request:root/2 -> 107")).

%% The time budget ends the follow session on every node by itself: both
%% nodes are clean before stop.
across_nodes_budget(Config) ->
    Dir = ?L:dir(Config, "f"),
    {Peer, B} = ?F:start_peer(),
    try
        Before = erpc:call(B, ?F, node_state, []),
        {ok, H} = beamprobe:start(#{follow => #{from => "follow_request:root/2"},
                                    limits => #{seconds => 0.3},
                                    nodes => [node(), B],
                                    output => {file, Dir}}),
        ?assertMatch(#{seq_tracer := {beamprobe_nif, _}},
                     erpc:call(B, ?F, node_state, [])),
        timer:sleep(800),
        ?F:assert_clean(Config),
        ?assertEqual(Before, erpc:call(B, ?F, node_state, [])),
        {ok, #{nodes := Per}} = beamprobe:stop(H),
        [?assertMatch(#{summary := {ok, #{stop_reason := limit_seconds}}}, V)
         || V <- maps:values(Per)]
    after
        catch peer:stop(Peer)
    end.

%% The budget per request across nodes: roots here ask an echo server on
%% a peer; each node counts the part of a request it sees (here: the
%% root's call, sends, receives and return; there: the echo's receives
%% and sends, one part per request, the echo's answers and the root's
%% next messages kept in it by their serials).  With 7 events per
%% request, the long request (10 round trips) is cut after 7 events on
%% each node, exactly 15 cut here and 13 there, and the short ones are
%% whole on both.
across_nodes_request_budget(Config) ->
    Dir = ?L:dir(Config, "f"),
    {Peer, B} = ?F:start_peer(),
    try
        Echo = erpc:call(B, erlang, spawn, [?W, echo, []]),
        {ok, H} = beamprobe:start(#{follow => #{from => "follow_request:ask/2",
                                                budget => #{events => 7}},
                                    nodes => [node(), B],
                                    output => {file, Dir}}),
        Shorts = [{Id, [0]} || Id <- lists:seq(2, 4)],
        ?F:run_asks(Echo, [{1, lists:duplicate(10, 0)} | Shorts]),
        %% This process took the roots' answers, which carry the label
        %% (sent after their root calls: of no request): without it, the
        %% cluster's stop would start parts of its own on both nodes.
        _ = seq_trace:set_token([]),
        {ok, #{nodes := Per}} = beamprobe:stop(H),
        ct:pal("~p", [Per]),
        ?F:assert_clean(Config),
        ?assertMatch(#{traced := [], seq_tracer := false, sessions := []},
                     erpc:call(B, ?F, node_state, [])),
        #{summary := {ok, Here}} = maps:get(node(), Per),
        #{summary := {ok, There}} = maps:get(B, Per),
        ?assertMatch(#{dropped := #{request_events := 15, request_table := 0},
                       requests := #{started := 4, cut := 1, refused := 0}}, Here),
        ?assertMatch(#{dropped := #{request_events := 13, request_table := 0},
                       requests := #{started := 4, cut := 1, refused := 0}}, There),
        Out = ?L:cli_ok(["request", Dir]),
        ct:pal("~s", [Out]),
        Blocks = ?F:blocks(Out),
        ?assertEqual(4, length(Blocks)),
        Bn = atom_to_binary(B),
        OnB = fun(Ls) -> [L || L <- Ls, binary:match(L, <<" ", Bn/binary, " ">>) =/= nomatch] end,
        Here1 = fun(Ls) -> Ls -- OnB(Ls) end,
        {LongHead, LongLines} = ?F:request_of(1, Blocks),
        ?assertMatch({match, _}, re:run(LongHead, "cut: events budget \\(7\\)")),
        All = ?F:ask_events(1, 10),
        %% Here: call, then (sent, received) per round trip.
        ?F:assert_events(Here1(LongLines),
                      lists:sublist([E || {I, E} <- lists:zip(lists:seq(1, length(All)), All),
                                          I =:= 1 orelse (I - 2) rem 4 =:= 0 orelse (I - 2) rem 4 =:= 3], 7)),
        %% There: (received, sent) per round trip; its 7th event, the
        %% receive of a message whose send was cut here, has no send to
        %% be matched with in the request view.
        ?F:assert_events(OnB(LongLines),
                      lists:sublist([E || {I, E} <- lists:zip(lists:seq(1, length(All)), All),
                                          I > 1, (I - 2) rem 4 =:= 1 orelse (I - 2) rem 4 =:= 2], 6)),
        [begin
             {SH, SL} = ?F:request_of(Id, Blocks),
             ?F:assert_events(SL, ?F:ask_events(Id, 1)),
             ?assertEqual(nomatch, binary:match(SH, <<"cut">>))
         end || {Id, _} <- Shorts]
    after
        catch peer:stop(Peer)
    end.

%% A request across three nodes through erpc: the root calls
%% erpc:call(B, ...), whose process on B (spawned by a spawn_request the
%% root sends to B's node name, then sent the call by name too) asks the
%% echo server on C.  `beamprobe request' showed the root's 4 events
%% only, B's and C's left out: a send to a node's name was taken for a
%% send to a process registered under that name on the sender's node.
across_nodes_erpc(Config) ->
    Dir = ?L:dir(Config, "f"),
    {PB, B} = ?F:start_peer(),
    {PC, C} = ?F:start_peer(),
    try
        true = erpc:call(B, net_kernel, connect_node, [C]),
        Echo = erpc:call(C, erlang, spawn, [?W, echo, []]),
        {ok, H} = beamprobe:start(#{follow => #{from => "follow_request:ask/2"},
                                    nodes => [node(), B, C],
                                    output => {file, Dir}}),
        Self = self(),
        spawn(fun() -> Self ! {asked, ?W:ask(B, {erpc, Echo})} end),
        receive {asked, 1} -> ok end,
        timer:sleep(50),
        {ok, Sum} = beamprobe:stop(H),
        ct:pal("~p", [Sum]),
        Out = ?L:cli_ok(["request", Dir]),
        ct:pal("~s", [Out]),
        [Bs, Cs] = [atom_to_list(N) || N <- [B, C]],
        ?assertMatch({match, _}, re:run(Out, "^Request 1: .*, 3 processes", [multiline])),
        [?assertMatch({match, _}, re:run(Out, RE, [multiline]))
         || RE <- [" " ++ Bs ++ "   <[0-9.]+> received \\{spawn_request,",
                   " " ++ Bs ++ "   <[0-9.]+> sent \\{echo,<[0-9.]+>,once\\} to <",
                   " " ++ Cs ++ "     <[0-9.]+> received \\{echo,<[0-9.]+>,once\\}$",
                   " " ++ Cs ++ "     <[0-9.]+> sent \\{echoed,once\\} to <",
                   " " ++ Bs ++ "       <[0-9.]+> received \\{echoed,once\\}$"]]
    after
        catch peer:stop(PB),
        catch peer:stop(PC)
    end.
