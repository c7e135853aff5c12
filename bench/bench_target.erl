%%% @doc The functions the benchmark traces.
-module(bench_target).
-export([loop/2, f/1, spin/1, loop_exc/2, g/1, timed_worker/2,
         windowed_worker/3, p10/1]).

%% @doc Calls f/1 N times (a local call: the traced one).
-spec loop(non_neg_integer(), term()) -> ok.
loop(0, _) -> ok;
loop(N, X) -> _ = f(X), loop(N - 1, X).

%% @doc The traced function.
-spec f(term()) -> term().
f(X) -> X.

%% @doc Calls g/1 N times, catching the exception it raises.
-spec loop_exc(non_neg_integer(), term()) -> ok.
loop_exc(0, _) -> ok;
loop_exc(N, X) -> _ = (catch g(X)), loop_exc(N - 1, X).

%% @doc The traced function that raises (exception_from events).
-spec g(term()) -> no_return().
g(X) -> throw(X).

%% @doc Calls loop/2 in batches until the deadline (monotonic ms).
-spec spin(integer()) -> non_neg_integer().
spin(Deadline) -> spin(Deadline, 0).
spin(Deadline, N) ->
    case erlang:monotonic_time(millisecond) >= Deadline of
        true -> N;
        false -> loop(1000, 42), spin(Deadline, N + 1000)
    end.

%% @doc A process that, sent `go', runs loop(N, X) and sends the caller
%% {done, Pid, Nanoseconds} (the benches trace it between spawn and go).
-spec timed_worker(non_neg_integer(), term()) -> pid().
timed_worker(N, X) ->
    Parent = self(),
    spawn(fun() ->
                  receive go -> ok end,
                  T0 = erlang:monotonic_time(nanosecond),
                  _ = loop(N, X),
                  T1 = erlang:monotonic_time(nanosecond),
                  Parent ! {done, self(), T1 - T0}
          end).

%% @doc Like timed_worker/2, but runs the N calls in K windows and sends
%% {done, Pid, [NsPerCall]}, one figure per window (see p10/1).
-spec windowed_worker(non_neg_integer(), term(), pos_integer()) -> pid().
windowed_worker(N, X, K) ->
    Parent = self(),
    Win = max(1, N div K),
    spawn(fun() ->
                  receive go -> ok end,
                  Ws = [begin
                            T0 = erlang:monotonic_time(nanosecond),
                            _ = loop(Win, X),
                            (erlang:monotonic_time(nanosecond) - T0) / Win
                        end || _ <- lists:seq(1, N div Win)],
                  Parent ! {done, self(), Ws}
          end).

%% @doc The 10th percentile of a run's windows: a window in which the OS
%% ran something else on the core does not count (2 cores shared with
%% builds and tests).
-spec p10([number()]) -> number().
p10(Ws) ->
    S = lists:sort(Ws),
    lists:nth(max(1, (length(S) + 5) div 10), S).
