%%% @doc Counter samples of a session (`sample => #{interval => Ms, what =>
%%% [...]}'): a process linked to the session that writes, every
%%% `interval' milliseconds, one `sample' event (docs/format.md) per
%%% counter into the session's trace.  The exports draw them as counter
%%% tracks.
%%%
%%% What can be sampled (`what', default `[run_queues, memory,
%%% process_count]'):
%%%
%%% <ul>
%%% <li>`run_queues': `run_queue' (every run queue, dirty ones included:
%%%     `statistics(total_run_queue_lengths_all)').</li>
%%% <li>`memory': `memory_total', `memory_processes', `memory_binary',
%%%     `memory_ets', `memory_code' (bytes, `erlang:memory/1').</li>
%%% <li>`scheduler_utilization': the normal schedulers' busy share since
%%%     the last sample (value / 1000000; the flag `scheduler_wall_time'
%%%     is on while the sampler lives).</li>
%%% <li>`process_count'.</li>
%%% <li>`message_queues_top' or `{message_queues_top, N}': the N (default
%%%     5, at most 50) longest message queues, one `message_queue_len'
%%%     sample per process (its pid in the event).  Costs one
%%%     `process_info/2' per process of the node per sample.</li>
%%% </ul>
%%%
%%% Bounded: `interval' is at least ?MIN_INTERVAL ms, the top list at most
%%% ?MAX_TOP processes; a sample that finds the session stopped ends the
%%% sampler.
-module(beamprobe_sampler).

-export([check/1, start_link/2, stop/1]).
-export([init/3]).

-define(MIN_INTERVAL, 10).
-define(MAX_INTERVAL, 1 bsl 32 - 1).
-define(MAX_TOP, 50).
-define(DEFAULT_TOP, 5).
-define(PPM, 1000000).

-type what() :: run_queues | memory | scheduler_utilization |
                process_count | message_queues_top |
                {message_queues_top, pos_integer()}.
-type config() :: #{interval := pos_integer(), what := [what()]}.
-export_type([config/0]).

%% @doc Checks a `sample' option's value: `{ok, Config}' with the
%% defaults filled in (`interval' 1000 ms), or `{error, Reason}'.
-spec check(term()) -> {ok, config()} | {error, term()}.
check(M) when is_map(M) ->
    C = maps:merge(#{interval => 1000,
                     what => [run_queues, memory, process_count]}, M),
    case C of
        #{interval := I} when not is_integer(I); I < ?MIN_INTERVAL;
                              I > ?MAX_INTERVAL ->
            {error, {bad_option, {sample, interval}, I}};
        #{what := W} when not is_list(W); W =:= [] ->
            {error, {bad_option, {sample, what}, W}};
        #{what := W} ->
            case [K || K <- maps:keys(C), K =/= interval, K =/= what] of
                [K | _] -> {error, {unknown_option, {sample, K}}};
                [] ->
                    case [X || X <- W, not what(X)] of
                        [] -> {ok, C};
                        [X | _] -> {error, {bad_option, {sample, what}, X}}
                    end
            end
    end;
check(M) -> {error, {bad_option, sample, M}}.

what(run_queues) -> true;
what(memory) -> true;
what(scheduler_utilization) -> true;
what(process_count) -> true;
what(message_queues_top) -> true;
what({message_queues_top, N}) ->
    is_integer(N) andalso N >= 1 andalso N =< ?MAX_TOP;
what(_) -> false.

%% @doc Starts the sampler of the NIF session `Res', linked to the caller
%% (the session process); the first sample is taken at once.
-spec start_link(term(), config()) -> {ok, pid()}.
start_link(Res, Config) ->
    Parent = self(),
    {ok, beamprobe_own:spawn_link(fun() -> init(Parent, Res, Config) end)}.

%% @doc Stops a sampler (no more samples once this returns).
-spec stop(pid() | undefined) -> ok.
stop(undefined) -> ok;
stop(Pid) ->
    unlink(Pid),
    Ref = monitor(process, Pid),
    exit(Pid, kill),
    receive {'DOWN', Ref, process, Pid, _} -> ok end.

%% @private
-spec init(pid(), term(), config()) -> no_return().
init(_Parent, Res, #{interval := I, what := W}) ->
    ok = beamprobe_own:sensitive(), % no trace events of it (see beamprobe_shell.erl)
    Util = lists:member(scheduler_utilization, W),
    _ = Util andalso erlang:system_flag(scheduler_wall_time, true),
    Wall = Util andalso erlang:statistics(scheduler_wall_time),
    loop(Res, I, W, Wall).

loop(Res, I, W, Wall) ->
    {Samples, Wall1} = samples(W, Wall),
    case write(Res, Samples) of
        stopped -> exit(normal);
        ok -> ok
    end,
    receive after I -> loop(Res, I, W, Wall1) end.

write(_Res, []) -> ok;
write(Res, [{Who, Fields} | T]) ->
    case catch beamprobe_nif:notice(Res, sample, Who, Fields) of
        {error, stopped} -> stopped;
        _ -> write(Res, T)
    end.

%% counter, value, scale, process (bp_format.h: sample).
s(Name, V) -> {undefined, [Name, V, 1, <<>>]}.

samples(W, Wall) ->
    lists:foldr(fun(X, {Acc, Wl}) ->
                        {New, Wl1} = sample(X, Wl),
                        {New ++ Acc, Wl1}
                end, {[], Wall}, W).

sample(run_queues, Wall) ->
    {[s(<<"run_queue">>, erlang:statistics(total_run_queue_lengths_all))],
     Wall};
sample(memory, Wall) ->
    Ms = erlang:memory([total, processes, binary, ets, code]),
    {[s(<<"memory_", (atom_to_binary(K))/binary>>, V) || {K, V} <- Ms],
     Wall};
sample(process_count, Wall) ->
    {[s(<<"process_count">>, erlang:system_info(process_count))], Wall};
sample(scheduler_utilization, Wall) ->
    case erlang:statistics(scheduler_wall_time) of
        Now when is_list(Now), is_list(Wall) ->
            N = erlang:system_info(schedulers),
            {A, T} = lists:foldl(
                       fun({{Id, A1, T1}, {Id, A0, T0}}, {SA, ST})
                             when Id =< N ->
                               {SA + A1 - A0, ST + T1 - T0};
                          (_, Acc) -> Acc
                       end, {0, 0},
                       lists:zip(lists:sort(Now), lists:sort(Wall))),
            V = case T of
                    0 -> 0;
                    _ -> max(0, min(?PPM, A * ?PPM div T))
                end,
            {[{undefined, [<<"scheduler_utilization">>, V, ?PPM, <<>>]}],
             Now};
        Now -> {[], Now}
    end;
sample(message_queues_top, Wall) ->
    sample({message_queues_top, ?DEFAULT_TOP}, Wall);
sample({message_queues_top, N}, Wall) ->
    Top = top(erlang:processes(), N, []),
    {[{P, [<<"message_queue_len">>, L, 1,
           list_to_binary(pid_to_list(P))]} || {L, P} <- Top], Wall}.

%% The N longest queues, longest first; the list held is at most N long.
top([], _N, Acc) -> lists:reverse(Acc);
top([P | Ps], N, Acc) ->
    case process_info(P, message_queue_len) of
        {message_queue_len, L} when L > 0 ->
            Acc1 = lists:sublist(lists:reverse(
                                   lists:keymerge(1, [{L, P}],
                                                  lists:reverse(Acc))), N),
            top(Ps, N, Acc1);
        _ -> top(Ps, N, Acc)
    end.
