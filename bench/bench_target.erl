%%% @doc The functions the benchmark traces.
-module(bench_target).
-export([loop/2, f/1, spin/1]).

%% @doc Calls f/1 N times (a local call: the traced one).
-spec loop(non_neg_integer(), term()) -> ok.
loop(0, _) -> ok;
loop(N, X) -> _ = f(X), loop(N - 1, X).

%% @doc The traced function.
-spec f(term()) -> term().
f(X) -> X.

%% @doc Calls loop/2 in batches until the deadline (monotonic ms).
-spec spin(integer()) -> non_neg_integer().
spin(Deadline) -> spin(Deadline, 0).
spin(Deadline, N) ->
    case erlang:monotonic_time(millisecond) >= Deadline of
        true -> N;
        false -> loop(1000, 42), spin(Deadline, N + 1000)
    end.
