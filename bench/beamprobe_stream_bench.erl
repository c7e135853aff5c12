%%% @doc `make bench', the TCP stream sink (`output => {tcp, Address}')
%%% next to the file sink: what each costs the traced node per call, and
%%% the events per second each delivers.
%%%
%%% A worker calls bench_target:f/1 N times (`args => arity'); it runs
%%% untraced (the baseline), traced into a file sink, and traced into a
%%% TCP sink whose receiver is `bin/beamprobe receive' (a separate OS
%%% process writing the same trace directory the file sink writes: the
%%% whole pipeline).  node cost = (traced - untraced ns) / N; throughput =
%%% events delivered (written, or received) / seconds from the first call
%%% until stop/1 returned (the trace complete).  Median of interleaved
%%% rounds.  `smoke': tiny counts, one round, no thresholds, ending with
%%% `bench smoke part: N passed, M failed'.
-module(beamprobe_stream_bench).
-export([main/1]).

%% @doc `main(["bench"])' or `main(["smoke"])'.
-spec main([string()]) -> no_return().
main([Mode | _]) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    {module, _} = code:ensure_loaded(bench_target),
    Smoke = Mode =:= "smoke",
    {Rounds, N} = case Smoke of
                      true -> {1, 2000};
                      false -> {5, 1000000}
                  end,
    Tmp = filename:join(os:getenv("TMPDIR", "/tmp"),
                        "beamprobe-sbench-" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Tmp, "x")),
    io:format("~n== stream sink vs file sink: ~p calls of bench_target:f/1 "
              "(args => arity); OTP ~s, ~p schedulers; median of ~p "
              "interleaved rounds ==~n",
              [N, erlang:system_info(otp_release),
               erlang:system_info(schedulers), Rounds]),
    Res = [[{Sink, run(Sink, N, Tmp, R)} || Sink <- [none, file, tcp]]
           || R <- lists:seq(1, Rounds)],
    Ok = lists:foldl(fun(Sink, Acc) ->
                             Rs = [X || Round <- Res, {S, X} <- Round,
                                        S =:= Sink],
                             report(Sink, Rs, N, Res) andalso Acc
                     end, true, [none, file, tcp]),
    _ = os:cmd("rm -rf " ++ Tmp),
    case Smoke of
        true -> io:format("bench smoke part: ~p passed, ~p failed~n",
                          [case Ok of true -> 1; false -> 0 end,
                           case Ok of true -> 0; false -> 1 end]);
        false -> ok
    end,
    halt(0).

run(none, N, _Tmp, _R) ->
    W = bench_target:timed_worker(N, 42),
    W ! go,
    receive {done, W, Ns} -> #{ns => Ns, events => 0, lost => 0, wall => Ns}
    end;
run(Sink, N, Tmp, R) ->
    Dir = filename:join(Tmp, atom_to_list(Sink) ++ integer_to_list(R)),
    {Output, Rx} = case Sink of
                       file -> {{file, Dir}, none};
                       tcp ->
                           {P, Port} = receiver(Dir),
                           {{tcp, "127.0.0.1:" ++ integer_to_list(Port)}, P}
                   end,
    W = bench_target:timed_worker(N, 42),
    {ok, S} = beamprobe:start(#{calls => [{bench_target, f, 1}],
                                procs => [W], args => arity,
                                output => Output,
                                limits => #{seconds => 600}}),
    T0 = erlang:monotonic_time(nanosecond),
    W ! go,
    Ns = receive {done, W, X} -> X end,
    {ok, Sum} = beamprobe:stop(S),
    Wall = erlang:monotonic_time(nanosecond) - T0,
    Lost = case Sum of
               #{dropped := #{stream := L}} -> L;
               _ -> 0
           end,
    _ = case Rx of
            none -> ok;
            _ -> wait_port(Rx)
        end,
    #{ns => Ns, events => maps:get(events, Sum) - Lost, lost => Lost,
      wall => Wall, dropped => maps:get(total, maps:get(dropped, Sum))}.

report(Sink, Rs, N, All) ->
    Base = median([maps:get(ns, X) || Round <- All, {none, X} <- Round]),
    Ns = median([maps:get(ns, X) || X <- Rs]),
    case Sink of
        none ->
            io:format("~-6s ~8.1f ns per call (untraced)~n",
                      [Sink, Ns / N]);
        _ ->
            Ev = median([maps:get(events, X) || X <- Rs]),
            Wall = median([maps:get(wall, X) || X <- Rs]),
            Lost = lists:sum([maps:get(dropped, X) || X <- Rs]),
            io:format("~-6s ~8.1f ns per call, node cost ~6.1f ns per event; "
                      "~10w events/s delivered; ~p events lost~n",
                      [Sink, Ns / N, (Ns - Base) / N,
                       round(Ev / (Wall / 1.0e9)), Lost])
    end,
    true.

median(L) ->
    S = lists:sort(L),
    lists:nth((length(S) + 1) div 2, S).

receiver(Dir) ->
    Bin = filename:join([filename:dirname(filename:dirname(
                                            code:which(beamprobe))),
                         "bin", "beamprobe"]),
    P = open_port({spawn_executable, Bin},
                  [{args, ["receive", "--listen", "127.0.0.1:0", "-o", Dir]},
                   exit_status, binary, stderr_to_stdout, {line, 1000}]),
    receive
        {P, {data, {eol, <<"beamprobe: listening on port ", R/binary>>}}} ->
            {match, [Num]} = re:run(R, "^[0-9]+", [{capture, first, list}]),
            {P, list_to_integer(Num)}
    after 10000 -> error(receiver_did_not_start)
    end.

wait_port(P) ->
    receive
        {P, {data, _}} -> wait_port(P);
        {P, {exit_status, S}} -> S
    after 30000 -> error(receiver_did_not_end)
    end.
