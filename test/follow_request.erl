%%% @doc The request the follow suites (beamprobe_follow_SUITE,
%%% beamprobe_follow_nodes_SUITE) follow: root/2 (the client) -> mid ->
%%% srv and back, and a client that is not followed.  (Its own module:
%%% beamprobe refuses patterns on beamprobe's modules, the suites
%%% included.)
-module(follow_request).
-export([root/2, mid/1, srv/1, plain/2, plain_until_stop/1, servers/0,
         ask/2, echo/0, forward/0, echo_once/1]).

%% @doc The root of a request: asks Mid for X's reply.
-spec root(pid(), integer()) -> integer().
root(Mid, X) ->
    Mid ! {req, self(), X},
    receive {reply, R} -> R end.

%% @doc Forwards each request to Srv and its reply back.
-spec mid(pid()) -> no_return().
mid(Srv) ->
    receive
        {req, From, X} ->
            Srv ! {req, self(), X},
            receive {reply, R} -> From ! {reply, R} end,
            mid(Srv);
        {plain, From} -> From ! plain_reply, mid(Srv)
    end.

%% @doc Replies X + N to each request.
-spec srv(integer()) -> no_return().
srv(N) ->
    receive
        {req, From, X} -> From ! {reply, X + N}, srv(N);
        {plain, From} -> From ! plain_reply, srv(N)
    end.

%% @doc A client that is not followed: N plain requests to each server.
-spec plain([pid()], non_neg_integer()) -> ok.
plain(Servers, N) ->
    [begin S ! {plain, self()}, receive plain_reply -> ok end end
     || _ <- lists:seq(1, N), S <- Servers],
    ok.

%% @doc Plain requests to each server until told `stop'; then replies
%% `{plain_stopped, self(), Rounds}' to the sender of stop.
-spec plain_until_stop([pid()]) -> ok.
plain_until_stop(Servers) -> plain_until_stop(Servers, 0).

plain_until_stop(Servers, N) ->
    receive
        {stop, From} -> From ! {plain_stopped, self(), N}, ok
    after 0 ->
            ok = plain(Servers, 1),
            plain_until_stop(Servers, N + 1)
    end.

%% @doc A mid and a srv process: {Mid, Srv}.
-spec servers() -> {pid(), pid()}.
servers() ->
    Srv = spawn(?MODULE, srv, [100]),
    Mid = spawn(?MODULE, mid, [Srv]),
    {Mid, Srv}.

%% @doc Another root: one round trip to the echo server Echo per element
%% of Plan, each after sleeping that many ms; messages tagged
%% {Id, I}.  Returns the number of round trips.
%% ask(_, {serve, N}) instead serves N echo requests itself (the root
%% of a request that takes other requests' messages); ask(_, {chain,
%% Pids}) sends through forwarders (forward/0) in turn, the last
%% answering; ask(Echo, {spawned, Id}) has a process it spawns make the
%% round trip and tell it; ask(Node, {erpc, Echo}) has erpc:call/4
%% make it (echo_once/1) on Node.
-spec ask(pid() | node() | none, {term(), [non_neg_integer()] | [pid()] | pos_integer() | term()}) ->
          non_neg_integer().
ask(_, {chain, [First | Rest] = Ps}) ->
    First ! {fwd, Rest, self(), x},
    receive {done, x} -> length(Ps) end;
ask(Node, {erpc, Echo}) when is_atom(Node) ->
    erpc:call(Node, ?MODULE, echo_once, [Echo]);
ask(Echo, {spawned, Id}) ->
    Root = self(),
    spawn(fun() ->
                  Echo ! {echo, self(), Id},
                  receive {echoed, Id} -> Root ! {worker_done, Id} end
          end),
    receive {worker_done, Id} -> 1 end;
ask(_, {serve, N}) when is_integer(N) ->
    lists:foreach(fun(_) ->
                          receive {echo, From, Tag} -> From ! {echoed, Tag} end
                  end, lists:seq(1, N)),
    N;
ask(Echo, {Id, Plan}) ->
    lists:foldl(fun(Ms, I) ->
                        receive after Ms -> ok end,
                        Echo ! {echo, self(), {Id, I}},
                        receive {echoed, {Id, I}} -> I + 1 end
                end, 0, Plan).

%% @doc One round trip to the echo server Echo.
-spec echo_once(pid()) -> 1.
echo_once(Echo) ->
    Echo ! {echo, self(), once},
    receive {echoed, once} -> 1 end.

%% @doc The echo server of ask/2.
-spec echo() -> no_return().
echo() ->
    receive
        {echo, From, Tag} -> From ! {echoed, Tag}, echo()
    end.

%% @doc A forwarder of ask(_, {chain, Pids}).
-spec forward() -> no_return().
forward() ->
    receive
        {fwd, [Next | Rest], Root, X} -> Next ! {fwd, Rest, Root, X}, forward();
        {fwd, [], Root, X} -> Root ! {done, X}, forward()
    end.
