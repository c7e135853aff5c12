%%% @doc Workload for the beamprobe tests: small functions to trace and
%%% worker processes that run them on request, so a test traces only the
%%% processes it spawned.
%%%
%%% The functions are not inlined and not tail calls where the tests need a
%%% return_to event (`outer/1' calls `inner/1' and then adds 1).
-module(beamprobe_workload).

-export([add/2, tick/1, sink/1, crash/1, outer/1, inner/1, catch_crash/1,
         loop_tick/2, loop_add/1, loop_add_until/1, garbage/1]).
-export([start_worker/0, run/2, run/3, stop_worker/1, worker_loop/0]).
-export([start_looper/2, go/1, wait_done/2]).
-export([procs_parent/1, procs_child/1]).

%%% ------------------------------------------------------------------------
%%% Functions to trace
%%% ------------------------------------------------------------------------

%% @doc A + B.
-spec add(number(), number()) -> number().
add(A, B) -> A + B.

%% @doc Returns its argument (a counter for ordering checks).
-spec tick(integer()) -> integer().
tick(I) -> I.

%% @doc Takes anything, returns ok.
-spec sink(term()) -> ok.
sink(_X) -> ok.

%% @doc Always raises error({boom, X}).
-spec crash(term()) -> no_return().
crash(X) -> erlang:error({boom, X}).

%% @doc Calls crash/1 and catches its exception.
-spec catch_crash(term()) -> {caught, term()}.
catch_crash(X) ->
    try crash(X)
    catch error:R -> {caught, R}
    end.

%% @doc inner(X) + 1: inner/1 returns to outer/1 (not a tail call).
-spec outer(integer()) -> integer().
outer(X) ->
    Y = inner(X),
    Y + 1.

%% @doc X * 2.
-spec inner(integer()) -> integer().
inner(X) -> X * 2.

%% @doc Calls tick(I) for I = From..To (local calls).
-spec loop_tick(integer(), integer()) -> ok.
loop_tick(I, To) when I > To -> ok;
loop_tick(I, To) ->
    _ = tick(I),
    loop_tick(I + 1, To).

%% @doc Calls add(I, 1) N times (local calls).
-spec loop_add(non_neg_integer()) -> ok.
loop_add(0) -> ok;
loop_add(N) ->
    _ = add(N, 1),
    loop_add(N - 1).

%% @doc Calls add/2 in chunks of 1000 until the calling process is no
%% longer traced (or Max calls); returns the number of calls made.
-spec loop_add_until(pos_integer()) -> non_neg_integer().
loop_add_until(Max) -> loop_add_until(Max, 0).

loop_add_until(Max, Done) when Done >= Max -> Done;
loop_add_until(Max, Done) ->
    case erlang:trace_info(self(), flags) of
        {flags, []} -> Done;
        _ ->
            ok = loop_add(1000),
            loop_add_until(Max, Done + 1000)
    end.

%% @doc Allocates about N list cells of garbage, several times, so that
%% minor collections happen, then forces a major one.
-spec garbage(pos_integer()) -> ok.
garbage(N) ->
    _ = [length(lists:seq(1, N)) || _ <- lists:seq(1, 20)],
    Keep = lists:seq(1, N),
    true = erlang:garbage_collect(),
    N = length(Keep),
    ok.

%%% ------------------------------------------------------------------------
%%% Worker processes
%%% ------------------------------------------------------------------------

%% @doc A process that runs funs sent with run/2.
-spec start_worker() -> pid().
start_worker() ->
    spawn(?MODULE, worker_loop, []).

%% @private
-spec worker_loop() -> ok.
worker_loop() ->
    receive
        {run, From, Ref, F} ->
            From ! {Ref, F()},
            worker_loop();
        stop -> ok
    end.

%% @doc Runs F in worker W; returns its result.
-spec run(pid(), fun(() -> term())) -> term().
run(W, F) -> run(W, F, 30000).

%% @doc Runs F in worker W; returns its result or fails after Timeout ms.
-spec run(pid(), fun(() -> term()), timeout()) -> term().
run(W, F, Timeout) ->
    Ref = make_ref(),
    W ! {run, self(), Ref, F},
    receive {Ref, R} -> R
    after Timeout -> erlang:error({worker_timeout, W})
    end.

%% @doc Ends a worker.
-spec stop_worker(pid()) -> ok.
stop_worker(W) ->
    W ! stop,
    ok.

%% @doc A process that waits for `go', runs F, sends {done, self(), Result}
%% to Parent and ends.
-spec start_looper(pid(), fun(() -> term())) -> pid().
start_looper(Parent, F) ->
    spawn(fun() ->
                  receive go -> ok end,
                  R = F(),
                  Parent ! {done, self(), R}
          end).

%% @doc Starts loopers.
-spec go([pid()]) -> ok.
go(Pids) ->
    [P ! go || P <- Pids],
    ok.

%% @doc Waits for every looper's result, in the order given.
-spec wait_done([pid()], timeout()) -> [term()].
wait_done(Pids, Timeout) ->
    [receive {done, P, R} -> R
     after Timeout -> erlang:error({looper_timeout, P})
     end || P <- Pids].

%%% ------------------------------------------------------------------------
%%% Process events
%%% ------------------------------------------------------------------------

%% @doc Spawns procs_child(1), links and unlinks it, registers and
%% unregisters itself, makes the child exit with {child_exit, 1}, reports
%% {procs_done, self(), Child} to Parent and exits with reason procs_done.
-spec procs_parent(pid()) -> no_return().
procs_parent(Parent) ->
    C = spawn(?MODULE, procs_child, [1]),
    true = link(C),
    true = unlink(C),
    true = register(beamprobe_test_reg, self()),
    true = unregister(beamprobe_test_reg),
    Ref = monitor(process, C),
    C ! stop,
    receive {'DOWN', Ref, process, C, _} -> ok end,
    Parent ! {procs_done, self(), C},
    exit(procs_done).

%% @doc Waits for stop, then exits with {child_exit, N}.
-spec procs_child(integer()) -> no_return().
procs_child(N) ->
    receive stop -> exit({child_exit, N}) end.
