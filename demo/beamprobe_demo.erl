%%% @doc The workload `make demo' traces: a gen_server keeping counters in
%%% ETS, a pool of workers sending it requests, and a little garbage.
-module(beamprobe_demo).
-behaviour(gen_server).

-export([run/1, start/0, stop/0, work/2]).
-export([init/1, handle_call/3, handle_cast/2]).

%% @doc Starts the workload, traces it for `Seconds' through the core API
%% into `Dir', prints the summary.
-spec run([string()]) -> no_return().
run([Dir, Seconds]) ->
    {ok, _} = start(),
    Workers = [spawn_link(?MODULE, work, [I, 0]) || I <- lists:seq(1, 4)],
    %% Functions that return, with their returns (exception_trace): the
    %% times of `stats' need both ends of a call.  Not work/2, a loop
    %% that never returns: return tracing would make it grow its stack
    %% forever, and a call without its return has no time.
    Ret = [{'_', [], [{exception_trace}]}],
    {ok, S} = beamprobe:start(#{calls => [{{?MODULE, data, 0}, Ret},
                                          {{?MODULE, handle_call, 3}, Ret},
                                          {{?MODULE, handle_cast, 2}, Ret},
                                          {{lists, sort, 1}, Ret},
                                          {{ets, update_counter, 3}, Ret}],
                                events => [send, 'receive', procs, gc,
                                           running],
                                procs => [whereis(?MODULE) | Workers],
                                output => {file, Dir}}),
    timer:sleep(round(list_to_float(Seconds ++ ".0") * 1000)),
    {ok, Sum} = beamprobe:stop(S),
    #{events := Ev, dropped := #{total := D}, bytes := B} = Sum,
    io:format("traced ~p events (~p dropped), ~.1f kB in ~s~n",
              [Ev, D, B / 1000, Dir]),
    halt(0).

%% @doc Starts the demo server.
-spec start() -> {ok, pid()}.
start() -> gen_server:start({local, ?MODULE}, ?MODULE, [], []).

%% @doc Stops the demo server.
-spec stop() -> ok.
stop() -> gen_server:stop(?MODULE).

%% @doc A worker: asks the server to count things, sorts some data.
-spec work(pos_integer(), non_neg_integer()) -> no_return().
work(Id, N) ->
    Key = lists:nth(rand:uniform(5), [apples, pears, plums, figs, kiwis]),
    _ = gen_server:call(?MODULE, {count, Key, Id}),
    _ = lists:sort(data()),
    N rem 50 =:= 0 andalso gen_server:cast(?MODULE, {report, Id, N}),
    timer:sleep(rand:uniform(3)),
    work(Id, N + 1).

%% @doc Fifty random numbers to sort.
-spec data() -> [pos_integer()].
data() -> [rand:uniform(1000) || _ <- lists:seq(1, 50)].

%% @private
-spec init([]) -> {ok, ets:tid()}.
init([]) ->
    {ok, ets:new(?MODULE, [set])}.

%% @private
-spec handle_call({count, atom(), pos_integer()}, gen_server:from(),
                  ets:tid()) -> {reply, integer(), ets:tid()}.
handle_call({count, Key, _Id}, _From, T) ->
    {reply, ets:update_counter(T, Key, 1, {Key, 0}), T}.

%% @private
-spec handle_cast({report, pos_integer(), non_neg_integer()}, ets:tid()) ->
          {noreply, ets:tid()}.
handle_cast({report, _Id, _N}, T) ->
    _ = ets:tab2list(T),
    {noreply, T}.
