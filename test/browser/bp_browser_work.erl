%%% @doc Workload for test/browser/run.sh: compiled code (not erl_eval,
%%% which itself calls lists functions) that calls lists:seq/2 and
%%% lists:reverse/1 under a non-tail-recursive nest/1, so the speedscope
%%% flame chart has stacks several frames deep:
%%% run/1 > nest/1 > nest/1 > ... > lists:seq/2 | lists:reverse/1.
-module(bp_browser_work).

-export([run/1, nest/1]).

%% @doc nest(1), nest(2), ..., nest(N); returns the total list lengths.
-spec run(pos_integer()) -> non_neg_integer().
run(N) ->
    lists:sum([nest(D) || D <- lists:seq(1, N)]).

%% @doc Builds and reverses a list at each of D levels of recursion.
-spec nest(non_neg_integer()) -> non_neg_integer().
nest(0) ->
    length(lists:reverse(lists:seq(1, 2000)));
nest(D) ->
    A = length(lists:reverse(lists:seq(1, D * 3000))),
    B = nest(D - 1),                       % not a tail call: stays on the stack
    A + B + length(lists:seq(1, D)).
