%%% @doc Test helper of the follow suites (beamprobe_follow_SUITE: requests
%%% on one node; beamprobe_follow_nodes_SUITE: across nodes): what a node
%%% has installed, a peer node, a follow session's start, and the request
%%% view of `bin/beamprobe request' taken apart and checked.
-module(beamprobe_follow_lib).

-include_lib("stdlib/include/assert.hrl").

-export([assert_clean/1, node_state/0, start_peer/0, follow/2, lines/1,
         chain_request/1, blocks/1, request_of/2, ask_events/2,
         assert_events/2, ask_follow/2, run_asks/2]).

-define(L, beamprobe_test_lib).
-define(W, follow_request).

%% Nothing of the follow session left: no process traced, the send
%% pattern as before, no pattern on the root, no flags for new processes.
assert_clean(Config) ->
    %% (A process that exits during the scan is `undefined': not traced.)
    ?assertEqual([], [P || P <- processes(),
                           {flags, [_ | _]} <- [erlang:trace_info(P, flags)]]),
    ?assertEqual(proplists:get_value(send_before, Config),
                 erlang:trace_info(send, match_spec)),
    ?assertEqual({all, false}, erlang:trace_info({?W, root, 2}, all)),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    ?assertEqual(false, seq_trace:get_system_tracer()),
    ?assertEqual([], beamprobe:list()).

%% What a node has installed (run there by erpc).
-spec node_state() -> map().
node_state() ->
    {module, ?W} = code:ensure_loaded(?W),
    #{traced => [P || P <- processes(),
                      {flags, [_ | _]} <- [erlang:trace_info(P, flags)]],
      send => erlang:trace_info(send, match_spec),
      root => erlang:trace_info({?W, root, 2}, all),
      mid => erlang:trace_info({?W, mid, 1}, all),
      new => erlang:trace_info(new, flags),
      seq_tracer => seq_trace:get_system_tracer(),
      sessions => beamprobe:list()}.

start_peer() ->
    Paths = [filename:dirname(code:which(beamprobe)),
             filename:dirname(code:which(?W))],
    {ok, P, N} = peer:start_link(#{name => peer:random_name(),
                                   args => ["-hidden" |
                                            lists:append([["-pa", D] || D <- Paths])]}),
    {P, N}.

follow(Dir, Budget) ->
    beamprobe:start(#{follow => #{from => "follow_request:root/2",
                                  budget => Budget},
                      output => {file, Dir}}).

lines(Bin) -> [L || L <- binary:split(Bin, <<"\n">>, [global]), L =/= <<>>].

%% The one request of root(Mid, 7) through mid and srv (three processes),
%% as `bin/beamprobe request Dir' prints it: its header, then its ten
%% events in causal order; returns the output and the event lines.
chain_request(Dir) ->
    Out = ?L:cli_ok(["request", Dir]),
    ct:pal("~s", [Out]),
    %% (Not the `Left out' summary line after the requests.)
    [Head | Events] = [L || L <- lines(Out),
                            binary:match(L, <<"Left out (in no request)">>)
                                =:= nomatch],
    ?assertMatch({match, _}, re:run(Head, "^Request 1: root <0\\.[0-9]+\\.[0-9]+> .*, 10 events, 3 processes")),
    Expected = ["call follow_request:root\\(<[0-9.]+>, 7\\)$",
                "sent \\{req,<[0-9.]+>,7\\} to <",
                "received \\{req,<[0-9.]+>,7\\}$",
                "sent \\{req,<[0-9.]+>,7\\} to <",
                "received \\{req,<[0-9.]+>,7\\}$",
                "sent \\{reply,107\\} to <",
                "received \\{reply,107\\}$",
                "sent \\{reply,107\\} to <",
                "received \\{reply,107\\}$",
                "returned from follow_request:root/2 -> 107$"],
    ?assertEqual(length(Expected), length(Events)),
    [?assertMatch({{match, _}, _}, {re:run(L, RE), L})
     || {L, RE} <- lists:zip(Events, Expected)],
    {Out, Events}.

%% Requests of `bin/beamprobe request' Out: [{Head, EventLines}].
blocks(Out) ->
    [begin
         [H | Ls] = lines(<<"Request ", B/binary>>),
         %% (Not the summary lines after the last request.)
         {H, [L || L <- Ls, binary:match(L, <<"Per-request budget:">>) =:= nomatch,
                   binary:match(L, <<"Left out (in no request)">>) =:= nomatch,
                   binary:match(L, <<"Not followed: ">>) =:= nomatch]}
     end
     || B <- binary:split(Out, <<"Request ">>, [global]), B =/= <<>>,
        binary:match(B, <<": root ">>) =/= nomatch].

%% The request of ask/2 tagged Id, from the blocks: its event lines.
request_of(Id, Blocks) ->
    Tag = iolist_to_binary(io_lib:format("{~p,", [Id])),
    case [{H, Ls} || {H, Ls} <- Blocks, binary:match(hd(Ls), Tag) =/= nomatch] of
        [R] -> R;
        Other -> ct:fail({request, Id, Other})
    end.

%% What ask(Echo, {Id, Plan}) does, event by event (the regexps of its
%% request's lines), all its events.
ask_events(Id, N) ->
    T = fun(I) -> io_lib:format("\\{~p,~p\\}", [Id, I]) end,
    ["call follow_request:ask\\(<[0-9.]+>, \\{" ++ integer_to_list(Id) ++ ","] ++
        lists:append(
          [["sent \\{echo,<[0-9.]+>," ++ T(I) ++ "\\} to <",
            "received \\{echo,<[0-9.]+>," ++ T(I) ++ "\\}$",
            "sent \\{echoed," ++ T(I) ++ "\\} to <",
            "received \\{echoed," ++ T(I) ++ "\\}$"] || I <- lists:seq(0, N - 1)]) ++
        ["returned from follow_request:ask/2 -> " ++ integer_to_list(N) ++ "$"].

assert_events(Lines, REs) ->
    ?assertEqual({length(REs), Lines}, {length(Lines), Lines}),
    [?assertMatch({{match, _}, _}, {re:run(L, lists:flatten(RE)), L})
     || {L, RE} <- lists:zip(Lines, REs)].

ask_follow(Dir, Budget) ->
    beamprobe:start(#{follow => #{from => "follow_request:ask/2",
                                  budget => Budget},
                      output => {file, Dir}}).

run_asks(Echo, Asks) ->
    Self = self(),
    Ps = [{Id, spawn(fun() -> receive go -> ok end,
                              Self ! {asked, Id, ?W:ask(Echo, {Id, Plan})} end)}
          || {Id, Plan} <- Asks],
    [P ! go || {_, P} <- Ps],
    [receive {asked, Id, N} -> ?assertEqual(length(Plan), N) end
     || {Id, Plan} <- Asks].
