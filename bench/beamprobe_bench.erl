%%% @doc `make bench': the cost of a traced call under each tracer, the
%%% highest call-event rate beamprobe sustains with zero drops, and the
%%% node's memory under a firehose.  Every figure is measured in this run;
%%% costs are reported as ratios to the do-nothing NIF tracer measured in
%%% the same run (machines here are noisy).  See docs/performance.md.
-module(beamprobe_bench).
-export([main/0, main/1, emu_flags/0]).

-define(CALLS, 1000000).
-define(ROUNDS, 7).

%% BEAMPROBE_BENCH_SMOKE=1 (bench/run.sh smoke, in `make test'): tiny
%% counts, one round, no search; it proves the code runs, nothing more.
smoke() -> os:getenv("BEAMPROBE_BENCH_SMOKE") =:= "1".
calls() -> case smoke() of true -> 2000; false -> ?CALLS end.
rounds() -> case smoke() of true -> 1; false -> ?ROUNDS end.

%% @doc Runs every benchmark with default settings.
-spec main() -> no_return().
main() -> main([]).

%% @doc Runs the benchmarks named in Args (all when empty): cost, rate,
%% handler, firehose.
-spec main([atom() | string()]) -> no_return().
main(Args0) ->
    Args = [if is_list(A) -> list_to_atom(A); true -> A end || A <- Args0],
    {ok, _} = application:ensure_all_started(beamprobe),
    %% Loaded here, not by the first (untraced) timed run.
    {module, _} = code:ensure_loaded(bench_target),
    Tmp = tmp_dir(),
    All = Args =:= [],
    io:format("beamprobe benchmark, OTP ~s, ~p schedulers, emulator flags: "
              "~s, ~p calls per run~n",
              [erlang:system_info(otp_release),
               erlang:system_info(schedulers), emu_flags(), calls()]),
    %% The firehose first: its memory figures want a fresh node.
    _ = (All orelse lists:member(firehose, Args)) andalso firehose(Tmp),
    P1 = (All orelse lists:member(cost, Args)) andalso cost(Tmp),
    P2 = (All orelse lists:member(rate, Args)) andalso rate(Tmp),
    _ = (All orelse lists:member(handler, Args)) andalso handler(Tmp),
    os:cmd("rm -rf " ++ Tmp),
    case smoke() of
        true ->
            %% Each cost configuration and the rate run that produced a
            %% number passed; a crash never gets here (no closing line).
            {Ok, Bad} = case P1 of
                            {P, F} -> {P, F};
                            false -> {0, 0}
                        end,
            io:format("bench smoke part: ~p passed, ~p failed~n",
                      [Ok + case P2 of 1 -> 1; _ -> 0 end, Bad]);
        false -> ok
    end,
    halt(0).

%% The emulator flags this VM was started with (those before the first
%% "--" of its command line, e.g. "-sbwt none"), "none" for none; the
%% header of every bench that prints them.
-spec emu_flags() -> string().
emu_flags() ->
    [_Beam | Args] = erlang:system_info(emu_args),
    case lists:takewhile(fun(A) -> A =/= "--" end, Args) of
        [] -> "none";
        Fl -> string:join(Fl, " ")
    end.

tmp_dir() ->
    D = filename:join(os:getenv("TMPDIR", "/tmp"),
                      "beamprobe-bench-" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(D, "x")),
    D.

%%% ------------------------------------------------------------------------
%%% Cost per traced call
%%% ------------------------------------------------------------------------

configs() ->
    [{untraced, "untraced"},
     {floor, "do-nothing NIF tracer (VM floor)"},
     {bp_arity, "beamprobe args => arity"},
     {bp_full, "beamprobe args => full, small arg"},
     {process, "erlang:trace to a discarding process (arity)"},
     {dbg_file, "dbg, trace_port(file, ...)"}].

%% "x floor" is the added cost over the untraced run divided by the
%% floor's added cost (docs/performance.md), the floor being
%% `[call, arity]' with the match spec `true', as for beamprobe's arity
%% run; `args => full' is compared with that same floor.  A beamprobe run
%% that dropped an event or wrote another number of events than the calls
%% made is not counted (a dropped event costs less than a written one).
cost(Tmp) ->
    io:format("~n== ns per traced call (best of ~p interleaved runs; "
              "the least disturbed run) ==~n", [rounds()]),
    Rounds = [[{C, run_cost(C, Tmp)} || {C, _} <- configs()]
              || _ <- lists:seq(1, rounds())],
    Bad = [{C, W, D} || R <- Rounds, {C, {_, W, D}} <- R,
                        D =/= 0 orelse W =/= calls()],
    [io:format("~p: ~p events written of ~p calls, ~p dropped: run not "
               "counted~n", [C, W, calls(), D]) || {C, W, D} <- Bad],
    Best = [{C, case [Ns || R <- Rounds, {Ns, W, 0} <- [proplists:get_value(C, R)],
                            W =:= calls()] of
                    [] -> none;
                    L -> lists:min(L)
                end}
            || {C, _} <- configs()],
    U = proplists:get_value(untraced, Best),
    FloorAdd = proplists:get_value(floor, Best) - U,
    [case proplists:get_value(C, Best) of
         none -> io:format("~-44s FAILED: no run wrote every event~n", [Label]);
         V -> io:format("~-44s ~8.1f ns  +~7.1f ns  ~5.2f x floor's added cost~n",
                        [Label, V, V - U, (V - U) / FloorAdd])
     end || {C, Label} <- configs()],
    io:format("targets: arity <= 1.25 x floor, full <= 1.6 x floor~n"),
    Passed = length([C || {C, _} <- configs(),
                          is_number(proplists:get_value(C, Best))]),
    {Passed, length(configs()) - Passed}.

%% {NsPerCall, EventsWritten, Dropped}: beamprobe's counts from its
%% summary; the calls made and 0 for the other tracers.
run_cost(Config, Tmp) ->
    Dir = filename:join(Tmp, atom_to_list(Config)),
    os:cmd("rm -rf " ++ Dir),
    Undo = setup(Config, Dir),
    erlang:garbage_collect(),
    T0 = erlang:monotonic_time(nanosecond),
    ok = bench_target:loop(calls(), 42),
    T1 = erlang:monotonic_time(nanosecond),
    {W, D} = case Undo() of
                 {ok, #{events := E, dropped := #{total := Dr}}} -> {E, Dr};
                 _ -> {calls(), 0}
             end,
    os:cmd("rm -rf " ++ Dir),
    {(T1 - T0) / calls(), W, D}.

setup(untraced, _) ->
    %% Nothing left by the last run: no flag, no pattern.
    {flags, []} = erlang:trace_info(self(), flags),
    {traced, false} = erlang:trace_info({bench_target, f, 1}, traced),
    fun() -> ok end;
setup(floor, _) ->
    1 = erlang:trace_pattern({bench_target, f, 1}, true, [local]),
    1 = erlang:trace(self(), true, [call, arity, {tracer, floor_tracer, []}]),
    fun() -> untrace() end;
setup(Bp, Dir) when Bp =:= bp_arity; Bp =:= bp_full ->
    Args = case Bp of bp_arity -> arity; bp_full -> full end,
    {ok, S} = beamprobe:start(#{procs => [self()],
                                calls => [{bench_target, f, 1}],
                                args => Args, return => false,
                                exceptions => false,
                                output => {file, Dir},
                                limits => #{seconds => infinity,
                                            bytes => infinity}}),
    fun() -> {ok, _} = beamprobe:stop(S) end;
setup(process, _) ->
    Sink = spawn(fun Loop() -> receive _ -> Loop() end end),
    1 = erlang:trace_pattern({bench_target, f, 1}, true, [local]),
    1 = erlang:trace(self(), true, [call, arity, {tracer, Sink}]),
    fun() -> untrace(), exit(Sink, kill) end;
setup(dbg_file, Dir) ->
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    {ok, _} = dbg:tracer(port, dbg:trace_port(file, filename:join(Dir, "dbg"))),
    {ok, _} = dbg:p(self(), [c]),
    {ok, _} = dbg:tpl(bench_target, f, 1, []),
    fun() -> dbg:stop_clear() end.

untrace() ->
    erlang:trace(self(), false, [all]),
    erlang:trace_pattern({bench_target, f, 1}, false, [local]).

%%% ------------------------------------------------------------------------
%%% Highest rate with zero drops
%%% ------------------------------------------------------------------------

rate(Tmp) ->
    io:format("~n== highest call-event rate with zero drops "
              "(~p workers, args => arity) ==~n",
              [erlang:system_info(schedulers)]),
    {Rate, Dropped} = rate_run(Tmp, infinity),
    io:format("unthrottled: ~.2f M events/s, ~p dropped~n",
              [Rate / 1.0e6, Dropped]),
    Best = case {Dropped, smoke()} of
               {0, _} -> Rate;
               {_, true} -> none;
               _ -> search(Tmp, Rate * 0.9, 6)
           end,
    Floor = floor_rate(),
    case Best of
        none ->
            %% Smoke has no search, the search found no rate without drops:
            %% no figure (the last target tried is not a measured rate).
            io:format("sustained with zero drops: none found (target >= 5 M "
                      "events/s)~n"),
            io:format("the VM's own ceiling, the same workers under the "
                      "do-nothing NIF tracer: ~.2f M calls/s~n",
                      [Floor / 1.0e6]);
        _ ->
            io:format("sustained with zero drops: ~.2f M events/s (target >= 5)~n",
                      [Best / 1.0e6]),
            io:format("the VM's own ceiling, the same workers under the "
                      "do-nothing NIF tracer: ~.2f M calls/s (beamprobe: "
                      "~.1f % of it)~n", [Floor / 1.0e6, 100 * Best / Floor])
    end,
    1.

%% Calls per second of the same workers traced by the do-nothing NIF
%% tracer (bench/floor_tracer.c): what the VM reaches without beamprobe.
floor_rate() ->
    NW = erlang:system_info(schedulers),
    Parent = self(),
    F = {bench_target, f, 1},
    Workers = [spawn(fun() -> receive go -> ok end,
                              Parent ! {done, self(), work(infinity, NW)}
                     end) || _ <- lists:seq(1, NW)],
    1 = erlang:trace_pattern(F, true, [local]),
    [1 = erlang:trace(W, true, [call, arity, {tracer, floor_tracer, []}])
     || W <- Workers],
    T0 = erlang:monotonic_time(microsecond),
    [W ! go || W <- Workers],
    Calls = lists:sum([receive {done, W, N} -> N end || W <- Workers]),
    T1 = erlang:monotonic_time(microsecond),
    erlang:trace_pattern(F, false, [local]),
    Calls / ((T1 - T0) / 1.0e6).

search(_Tmp, _Target, 0) -> none;
search(Tmp, Target, N) ->
    case rate_run(Tmp, Target) of
        {Got, 0} ->
            io:format("  at ~.2f M/s target: ~.2f M/s, 0 dropped~n",
                      [Target / 1.0e6, Got / 1.0e6]),
            Got;
        {Got, D} ->
            io:format("  at ~.2f M/s target: ~.2f M/s, ~p dropped~n",
                      [Target / 1.0e6, Got / 1.0e6, D]),
            search(Tmp, Target * 0.85, N - 1)
    end.

rate_run(Tmp, Target) ->
    Dir = filename:join(Tmp, "rate"),
    os:cmd("rm -rf " ++ Dir),
    NW = erlang:system_info(schedulers),
    Parent = self(),
    Workers = [spawn(fun() -> receive go -> ok end,
                              Parent ! {done, self(), work(Target, NW)}
                     end) || _ <- lists:seq(1, NW)],
    {ok, S} = beamprobe:start(#{procs => Workers,
                                calls => [{bench_target, f, 1}],
                                args => arity, return => false,
                                exceptions => false,
                                output => {file, Dir},
                                %% 2 s at 8 M/s is near the default 1 GiB.
                                limits => #{seconds => infinity,
                                            bytes => infinity}}),
    T0 = erlang:monotonic_time(microsecond),
    [W ! go || W <- Workers],
    Calls = lists:sum([receive {done, W, N} -> N end || W <- Workers]),
    T1 = erlang:monotonic_time(microsecond),
    {ok, #{events := Ev, dropped := #{total := D}}} = beamprobe:stop(S),
    os:cmd("rm -rf " ++ Dir),
    %% The calls the workers made, each one event: those not written are
    %% lost whether or not the session counted them as dropped.
    _ = Ev + D =/= Calls andalso
        io:format("  ~p calls, ~p events written, ~p counted as dropped~n",
                  [Calls, Ev, D]),
    {Calls / ((T1 - T0) / 1.0e6), max(D, Calls - Ev)}.

-define(RATE_MS, 2000).

rate_ms() -> case smoke() of true -> 100; false -> ?RATE_MS end.

work(infinity, _NW) ->
    bench_target:spin(erlang:monotonic_time(millisecond) + rate_ms());
work(Target, NW) ->
    PerTick = max(1, round(Target / NW / 1000)),  % calls per ms
    T0 = erlang:monotonic_time(millisecond),
    paced(T0, T0 + rate_ms(), PerTick, 0).

paced(T, End, _PerTick, N) when T >= End -> N;
paced(T, End, PerTick, N) ->
    bench_target:loop(PerTick, 42),
    Now = erlang:monotonic_time(millisecond),
    Next = T + 1,
    Now < Next andalso timer:sleep(0),
    wait_until(Next),
    paced(Next, End, PerTick, N + PerTick).

wait_until(T) ->
    case erlang:monotonic_time(millisecond) < T of
        true -> erlang:yield(), wait_until(T);
        false -> ok
    end.

%%% ------------------------------------------------------------------------
%%% Delivery rate to an Erlang handler that does nothing
%%% ------------------------------------------------------------------------

handler(_Tmp) ->
    io:format("~n== delivery to a do-nothing Erlang handler "
              "(~p workers, batches of 1000, 8 credits) ==~n",
              [erlang:system_info(schedulers)]),
    NW = erlang:system_info(schedulers),
    Parent = self(),
    Workers = [spawn(fun() -> receive go -> ok end,
                              Parent ! {done, self(), work(infinity, NW)}
                     end) || _ <- lists:seq(1, NW)],
    {ok, S} = beamprobe:start(#{procs => Workers,
                                calls => [{bench_target, f, 1}],
                                args => arity, return => false,
                                exceptions => false,
                                output => [{handler, bench_null_handler, [],
                                            #{batch => 1000,
                                              credits => 8}}]}),
    T0 = erlang:monotonic_time(microsecond),
    [W ! go || W <- Workers],
    [receive {done, W, _} -> ok end || W <- Workers],
    T1 = erlang:monotonic_time(microsecond),
    {ok, Sum} = beamprobe:stop(S),
    [#{delivered := Dl, dropped := Dr}] = maps:get(handlers, Sum),
    Secs = (T1 - T0) / 1.0e6,
    io:format("delivered ~p events in ~.2f s: ~.1f k events/s "
              "(~p dropped by the sink, ~p at the source) (target >= 500 k/s)~n",
              [Dl, Secs, Dl / Secs / 1000, Dr,
               maps:get(total, maps:get(dropped, Sum))]),
    ok.

%%% ------------------------------------------------------------------------
%%% Firehose: memory stays bounded by the buffers
%%% ------------------------------------------------------------------------

firehose(Tmp) ->
    Secs = list_to_integer(os:getenv("BEAMPROBE_FIREHOSE_SECS", "10")),
    io:format("~n== firehose: every local call of every process, ~p s, "
              "default buffers ==~n", [Secs]),
    Dir = filename:join(Tmp, "firehose"),
    Workers = [spawn(fun churn/0) || _ <- lists:seq(1, 4)],
    timer:sleep(200),
    Rss0 = rss(), Mem0 = erlang:memory(total),
    {ok, S} = beamprobe:start(#{procs => all,
                                calls => [{'_', '_', '_'}],
                                %% Calls only: return_from would make tail
                                %% calls non-tail (exception_trace), and the
                                %% workers' loops would grow their stacks.
                                force => true, return => false,
                                exceptions => false,
                                output => {file, Dir},
                                limits => #{seconds => infinity,
                                            bytes => infinity}}),
    timer:sleep(Secs * 500),
    RssHalf = rss(),
    timer:sleep(Secs * 500),
    {ok, Info} = beamprobe:info(S),
    Rss1 = rss(), Mem1 = erlang:memory(total),
    {ok, Sum} = beamprobe:stop(S),
    [exit(W, kill) || W <- Workers],
    Rss2 = rss(),
    #{events := Ev, dropped := #{total := D}} = Sum,
    Threads = maps:get(threads, Info),
    Buffers = Threads * maps:get(buffer, maps:get(config, Info)),
    io:format("events ~p, dropped ~p, ~.1f MB written~n",
              [Ev, D, maps:get(bytes, Sum) / 1.0e6]),
    io:format("RSS before ~.1f MB, after ~p s ~.1f MB (growth ~.1f MB), "
              "after stop ~.1f MB~n",
              [Rss0 / 1.0e6, Secs, Rss1 / 1.0e6, (Rss1 - Rss0) / 1.0e6,
               Rss2 / 1.0e6]),
    io:format("erlang:memory(total) before ~.1f MB, after ~.1f MB~n",
              [Mem0 / 1.0e6, Mem1 / 1.0e6]),
    io:format("RSS at ~p s ~.1f MB, at ~p s ~.1f MB: growth in the second "
              "half ~.1f MB (bounded: the rings are full-sized by then)~n",
              [Secs div 2, RssHalf / 1.0e6, Secs, Rss1 / 1.0e6,
               (Rss1 - RssHalf) / 1.0e6]),
    Own = (Rss1 - Rss0) - (Mem1 - Mem0),
    io:format("buffers: ~p producing threads x 8 MiB = ~.1f MB; RSS growth "
              "less the VM's own (erlang:memory) growth: ~.1f MB; within "
              "buffers (+1 MB for packet buffers): ~s~n",
              [Threads, Buffers / 1.0e6, Own / 1.0e6,
               yes_no(Own =< Buffers + 1024 * 1024)]),
    os:cmd("rm -rf " ++ Dir),
    ok.

yes_no(true) -> "yes";
yes_no(false) -> "NO".

churn() ->
    L = lists:seq(1, 200),
    _ = lists:sum(lists:map(fun(X) -> X * 2 end, L)),
    _ = maps:from_list([{X, X} || X <- lists:sublist(L, 20)]),
    _ = lists:sort(lists:reverse(L)),
    churn().

rss() ->
    {ok, B} = file:read_file("/proc/" ++ os:getpid() ++ "/status"),
    [Line] = [L || L <- binary:split(B, <<"\n">>, [global]),
                   binary:match(L, <<"VmRSS:">>) =/= nomatch],
    [_, Kb | _] = string:lexemes(binary_to_list(Line), " \t"),
    list_to_integer(Kb) * 1024.
