%%% beamprobe_files_bench -- what writing the trace files costs the node:
%%% CPU time of the collector threads (user and kernel) per event per
%%% session, the traced process's wall time per call, and how much the
%%% page cache grew, with 1 and 8 sessions tracing every call of one busy
%%% process to files.
%%%
%%% The writer uses O_DIRECT unless the VM was started with
%%% BEAMPROBE_NO_DIRECT_IO set (read at the NIF's load): bench/run.sh
%%% `files' runs this module in VMs of both kinds, alternating, so the two
%%% are compared in the same run.  `smoke': tiny counts, one round, no
%%% thresholds, ending with `bench smoke part: N passed, M failed'.
-module(beamprobe_files_bench).
-export([main/1]).

-define(F, {bench_target, f, 1}).

%% @doc `main(["bench"])' or `main(["smoke"])'.
-spec main([string()]) -> no_return().
main([Mode | _]) ->
    Smoke = Mode =:= "smoke",
    N = case Smoke of true -> 20000; false -> 2000000 end,
    Ks = case Smoke of true -> [2]; false -> [1, 8] end,
    Writer = case os:getenv("BEAMPROBE_NO_DIRECT_IO") of
                 false -> "O_DIRECT";
                 _ -> "page cache"
             end,
    Tmp = string:trim(os:cmd("mktemp -d /tmp/bp-files-bench.XXXXXX")),
    Res = [{K, run(K, N, Tmp)} || K <- Ks],
    os:cmd("rm -rf " ++ Tmp),
    [io:format("files writer=~-10s sessions ~p: ~6.1f ns/call traced, "
               "collectors ~5.1f ns user + ~5.1f ns kernel per event per "
               "session, page cache +~p MiB, ~p events lost~n",
               [Writer, K, Wall, U, S, Cache, Lost])
     || {K, {Wall, U, S, Cache, Lost}} <- Res],
    Failed = length([x || {_, {_, _, _, _, L}} <- Res, L =/= 0]),
    _ = Smoke andalso io:format("bench smoke part: ~p passed, ~p failed~n",
                                [length(Res) - Failed, Failed]),
    halt(0).

run(K, N, Tmp) ->
    Self = self(),
    W = spawn(fun() ->
                      receive go -> ok end,
                      T0 = erlang:monotonic_time(nanosecond),
                      bench_target:loop(N, 42),
                      Self ! {done, erlang:monotonic_time(nanosecond) - T0}
              end),
    Ss = [begin
              Dir = filename:join(Tmp, "k" ++ integer_to_list(K) ++ "s" ++
                                      integer_to_list(I)),
              {ok, S} = beamprobe:start(
                          #{procs => [W], calls => [?F], args => arity,
                            return => false, exceptions => false,
                            output => {file, Dir},
                            limits => #{seconds => infinity,
                                        bytes => infinity,
                                        events => infinity}}),
              S
          end || I <- lists:seq(1, K)],
    C0 = collector_cpu(),
    M0 = cached_kib(),
    W ! go,
    Ns = receive {done, T} -> T end,
    %% The collectors drain what is left (and are still there to be read:
    %% a thread that ended takes its times with it).
    timer:sleep(300),
    C1 = collector_cpu(),
    M1 = cached_kib(),
    Sums = [begin {ok, Sum} = beamprobe:stop(S), Sum end || S <- Ss],
    {U, Sy} = sub(C1, C0),
    Ev = N * K,
    Tick = 1.0e9 / 100, %% clock ticks (USER_HZ) in ns
    Lost = lists:sum([maps:get(total, maps:get(dropped, Sum)) || Sum <- Sums]),
    _ = Lost > 0 andalso
        io:format("files: ~p sessions lost events: ~p~n",
                  [K, [maps:filter(fun(_, V) -> V > 0 end,
                                   maps:get(dropped, Sum)) || Sum <- Sums]]),
    {Ns / N, U * Tick / Ev, Sy * Tick / Ev, max(0, M1 - M0) div 1024, Lost}.

sub({A, B}, {C, D}) -> {A - C, B - D}.

%% User and system clock ticks of this VM's threads named beamprobe_colle*
%% (the collectors), summed.
collector_cpu() ->
    Pid = os:getpid(),
    Dir = "/proc/" ++ Pid ++ "/task/",
    {ok, Ts} = file:list_dir(Dir),
    lists:foldl(
      fun(T, {U, S} = Acc) ->
              case file:read_file(Dir ++ T ++ "/stat") of
                  {ok, Stat} ->
                      [_, Rest] = binary:split(Stat, <<"(">>),
                      [Name, R] = binary:split(Rest, <<") ">>),
                      case Name of
                          <<"beamprobe_colle", _/binary>> ->
                              F = binary:split(R, <<" ">>, [global]),
                              {U + binary_to_integer(lists:nth(12, F)),
                               S + binary_to_integer(lists:nth(13, F))};
                          _ -> Acc
                      end;
                  _ -> Acc
              end
      end, {0, 0}, Ts).

cached_kib() ->
    {ok, B} = file:read_file("/proc/meminfo"),
    {match, [V]} = re:run(B, "\nCached: +([0-9]+) kB", [{capture, all_but_first, binary}]),
    binary_to_integer(V).
