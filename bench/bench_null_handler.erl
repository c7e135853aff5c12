%%% @doc A beamprobe handler that does nothing but count (bench).
-module(bench_null_handler).
-behaviour(beamprobe_handler).
-export([init/1, handle_events/2, terminate/2]).

%% @doc Counts from 0.
-spec init(term()) -> {ok, non_neg_integer()}.
init(_) -> {ok, 0}.

%% @doc Counts the events.
-spec handle_events([map()], non_neg_integer()) -> {ok, non_neg_integer()}.
handle_events(Events, N) -> {ok, N + length(Events)}.

%% @doc Nothing to clean.
-spec terminate(term(), non_neg_integer()) -> ok.
terminate(_, _) -> ok.
