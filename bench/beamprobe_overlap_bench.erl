%%% @doc `make bench', overlapping sessions (issue 8): the ns a traced call
%%% (`args => arity') adds over an untraced run with 1, 2 and 8 beamprobe
%%% sessions tracing the same function in the same process, next to the
%%% do-nothing NIF tracer (the VM floor, bench/floor_tracer.c).  Sessions
%%% with the same match spec share the installed pattern (the call is
%%% routed by the sessions' function filters); "conditions" runs 2 and 8
%%% sessions with different match-spec conditions, all true for the
%%% bench's argument (one combined match spec, the call routed by its
%%% result), against one session with a condition.  "flight recorders"
%%% (`overflow => drop_oldest': the collectors do not drain during the
%%% run) shows the producers' cost alone; with drained sessions each extra
%%% session also costs its collector's CPU (its own copy of every event
%%% written to its own files), which on a 2-core machine competes with
%%% the traced process.  Every configuration runs once per round,
%%% interleaved; a run is timed in 20 windows and counts its
%%% 10th-percentile window; a figure is the median of the rounds.
%%% "Per extra session" is (N sessions' added cost - 1 session's) / (N - 1).
%%%
%%% Every session must have received every call: a run in which a session
%%% dropped an event (a dropped event costs less than a written one), or
%%% whose sessions' events (written, plus overwritten for a flight
%%% recorder) do not add up to the calls made, is not counted (the
%%% `refused' column).  The VM's emulator flags are printed as the VM got
%%% them (`erlang:system_info(emu_args)'), next to the label given.
%%%
%%% `smoke' runs every configuration once with tiny counts and no
%%% thresholds (`make test'), ending with `bench smoke part: N passed, M
%%% failed'.  See docs/performance.md.
-module(beamprobe_overlap_bench).
-export([main/1]).

-define(ROUNDS, 7).
-define(F, {bench_target, f, 1}).

%% @doc `main(["bench", VMLabel...])' or `main(["smoke", VMLabel...])'.
-spec main([string()]) -> no_return().
main([Mode | Label]) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    {module, _} = code:ensure_loaded(bench_target),
    Tmp = filename:join(os:getenv("TMPDIR", "/tmp"),
                        "beamprobe-obench-" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Tmp, "x")),
    Smoke = Mode =:= "smoke",
    {Rounds, Ops} = case Smoke of
                        true -> {1, 1000};
                        false -> {rounds(), 500000}
                    end,
    io:format("~n== overlapping sessions: ns added per traced call "
              "(args => arity); VM: ~s (emulator flags: ~s); OTP ~s, ~p "
              "schedulers; median of ~p interleaved rounds of ~p calls ==~n",
              [string:join(Label, " "), beamprobe_bench:emu_flags(),
               erlang:system_info(otp_release),
               erlang:system_info(schedulers), Rounds, Ops]),
    Res = lists:foldl(
            fun(_, Acc0) ->
                    lists:foldl(
                      fun(C, Acc) ->
                              R = try run(C, Ops, Tmp)
                                  catch Cl:E:St ->
                                          io:format("~p: ~p:~p ~p~n",
                                                    [C, Cl, E, St]),
                                          error
                                  end,
                              maps:update_with(C, fun(L) -> [R | L] end,
                                               [R], Acc)
                      end, Acc0, configs())
            end, #{}, lists:seq(1, Rounds)),
    os:cmd("rm -rf " ++ Tmp),
    Failed = report(Res, Smoke),
    halt(case Smoke andalso Failed > 0 of true -> 1; false -> 0 end).

%% BEAMPROBE_BENCH_ROUNDS overrides the number of rounds (an A/B script
%% runs one round per VM, alternating builds).
rounds() ->
    case string:to_integer(os:getenv("BEAMPROBE_BENCH_ROUNDS", "")) of
        {N, []} when N > 0 -> N;
        _ -> ?ROUNDS
    end.

%% BEAMPROBE_BENCH_CONFIGS="same1 fr1" runs only those (and untraced
%% and floor, which every figure needs): for profiling one of them.
configs() ->
    All = [untraced, floor, {same, 1}, {same, 2}, {same, 8}, {cond_, 1},
           {cond_, 2}, {cond_, 8}, {fr, 1}, {fr, 8}],
    case string:lexemes(os:getenv("BEAMPROBE_BENCH_CONFIGS", ""), " ,") of
        [] -> All;
        Names -> [C || C <- All, lists:member(config_name(C),
                                             ["untraced", "floor" | Names])]
    end.

config_name({Kind, K}) ->
    string:trim(atom_to_list(Kind), trailing, "_") ++ integer_to_list(K);
config_name(C) -> atom_to_list(C).

%% Session I's match spec: the same for every session, or a condition of
%% its own that holds for the bench's argument (42).
ms({cond_, _}, I) -> [{['$1'], [{'>', '$1', -I}], []}];
ms(_, _I) -> true.

%% `fr': flight recorders (overflow => drop_oldest), whose collectors do
%% not drain while the bench runs: the producers' cost alone.
overflow({fr, _}) -> drop_oldest;
overflow(_) -> drop_newest.

%% {NsPerCall, Dropped, Lost}: Lost is the calls made times the sessions
%% less what the sessions wrote (and, flight recorders, overwrote).
run(Config, N, Tmp) ->
    W = bench_target:windowed_worker(N, 42, 20),
    Undo = setup(Config, W, Tmp),
    erlang:garbage_collect(),
    W ! go,
    Ws = receive {done, W, T} -> T end,
    {Drops, Seen, K} = Undo(),
    Calls = length(Ws) * max(1, N div 20),   % windowed_worker's windows
    {bench_target:p10(Ws), Drops, Calls * K - Seen}.

setup(untraced, W, _Tmp) ->
    {flags, []} = erlang:trace_info(W, flags),
    {traced, false} = erlang:trace_info(?F, traced),
    fun() -> {0, 0, 0} end;
setup(floor, W, _Tmp) ->
    1 = erlang:trace_pattern(?F, true, [local]),
    erlang:trace(W, true, [call, arity, {tracer, floor_tracer, []}]),
    fun() ->
            catch erlang:trace(W, false, [all]),
            erlang:trace_pattern(?F, false, [local]),
            {0, 0, 0}
    end;
setup({_, K} = C, W, Tmp) ->
    Ss = [begin
              Dir = filename:join(Tmp, "s" ++ integer_to_list(I)),
              os:cmd("rm -rf " ++ Dir),
              {ok, S} = beamprobe:start(
                          #{procs => [W], calls => [{?F, ms(C, I)}],
                            args => arity, return => false,
                            overflow => overflow(C),
                            exceptions => false, output => {file, Dir},
                            limits => #{seconds => infinity,
                                        bytes => infinity,
                                        events => infinity}}),
              S
          end || I <- lists:seq(1, K)],
    fun() ->
            Sums = [begin
                        {ok, #{events := E, dropped := Dr}} = beamprobe:stop(S),
                        %% A flight recorder overwrites by design.
                        Ov = maps:get(overwritten, Dr, 0),
                        {maps:get(total, Dr) - Ov, E + Ov}
                    end || S <- Ss],
            {lists:sum([D || {D, _} <- Sums]),
             lists:sum([E || {_, E} <- Sums]), K}
    end.

report(Res0, Smoke) ->
    Ok = fun({Ns, _, _}) when is_number(Ns), Ns > 0 -> true; (_) -> false end,
    Failed0 = length([R || L <- maps:values(Res0), R <- L, not Ok(R)]),
    Passed0 = length([R || L <- maps:values(Res0), R <- L, Ok(R)]),
    %% Runs that dropped or lost an event: not counted.
    Counted = fun(L) -> [{Ns, D} || {Ns, D, Lost} <- L, D =:= 0, Lost =:= 0] end,
    RefusedOf = maps:map(fun(_, L) when Failed0 =:= 0 -> length(L) - length(Counted(L));
                            (_, _) -> 0
                         end, Res0),
    Refused = fun(C) -> maps:get(C, RefusedOf) end,
    AllDrops = maps:map(fun(_, L) when Failed0 =:= 0 ->
                                lists:sum([D || {_, D, _} <- L]);
                           (_, _) -> 0
                        end, Res0),
    Res = maps:map(fun(_, L) when Failed0 =:= 0 -> Counted(L);
                      (_, L) -> L
                   end, Res0),
    Empty = [C || Failed0 =:= 0, {C, []} <- maps:to_list(Res)],
    {Passed, Failed} = case Empty of
                           [] -> {Passed0, Failed0};
                           _ ->
                               io:format("overlap bench FAILED: every run "
                                         "refused (dropped or lost events) in "
                                         "~p~n", [[config_name(C) || C <- Empty]]),
                               N = lists:sum([Refused(C) || C <- Empty]),
                               {Passed0 - N, N}
                       end,
    case Failed of
        0 when map_size(Res) < 10 ->
            %% A subset (BEAMPROBE_BENCH_CONFIGS): each one's added cost.
            U = median([Ns || {Ns, _} <- maps:get(untraced, Res)]),
            Fl = median([Ns || {Ns, _} <- maps:get(floor, Res)]) - U,
            [io:format("~-10s added ~8.1f ns, ~5.2f x floor, drops ~p, "
                       "refused ~p~n",
                       [config_name(C), A, A / Fl, maps:get(C, AllDrops),
                        Refused(C)])
             || C <- configs(),
                A <- [median([Ns || {Ns, _} <- maps:get(C, Res)]) - U]];
        0 ->
            Med = fun(C) -> median([Ns || {Ns, _} <- maps:get(C, Res)]) end,
            Drops = fun(C) -> maps:get(C, AllDrops) end,
            U = Med(untraced),
            Add = fun(C) -> Med(C) - U end,
            Fl = Add(floor),
            One = Add({same, 1}),
            io:format("untraced ~.1f ns per call; floor+ ~.1f ns; "
                      "targets: 1 session <= 1.25x floor, "
                      "<= 10 ns per extra session~n", [U, Fl]),
            io:format("~-34s ~8s ~7s ~14s ~4s ~s~n",
                      ["configuration", "added", "x floor",
                       "per extra ses.", "met", "drops refused"]),
            io:format("~-34s ~8.1f ~7.2f ~14s ~4s ~p ~p~n",
                      ["1 session", One, One / Fl, "-",
                       yes(One / Fl =< 1.25), Drops({same, 1}), Refused({same, 1})]),
            [begin
                 A = Add(C),
                 Extra = (A - One) / (K - 1),
                 io:format("~-34s ~8.1f ~7.2f ~14.1f ~4s ~p ~p~n",
                           [Name, A, A / Fl, Extra, yes(Extra =< 10.0),
                            Drops(C), Refused(C)])
             end || {C, K, Name} <- [{{same, 2}, 2, "2 sessions, same match spec"},
                                     {{same, 8}, 8, "8 sessions, same match spec"}]],
            %% Conditions: against one session with a condition of its own.
            Cond1 = Add({cond_, 1}),
            io:format("~-34s ~8.1f ~7.2f ~14s ~4s ~p ~p~n",
                      ["1 session with a condition", Cond1, Cond1 / Fl, "-",
                       "", Drops({cond_, 1}), Refused({cond_, 1})]),
            [begin
                 A = Add(C),
                 Extra = (A - Cond1) / (K - 1),
                 io:format("~-34s ~8.1f ~7.2f ~14.1f ~4s ~p ~p~n",
                           [Name, A, A / Fl, Extra, yes(Extra =< 10.0),
                            Drops(C), Refused(C)])
             end || {C, K, Name} <- [{{cond_, 2}, 2, "2 sessions, own conditions"},
                                     {{cond_, 8}, 8, "8 sessions, own conditions"}]],
            %% Producers only: flight recorders, not drained meanwhile.
            Fr1 = Add({fr, 1}),
            io:format("~-34s ~8.1f ~7.2f ~14s ~4s ~p ~p~n",
                      ["1 flight recorder (producer only)", Fr1, Fr1 / Fl,
                       "-", yes(Fr1 / Fl =< 1.25), Drops({fr, 1}), Refused({fr, 1})]),
            Fr8 = Add({fr, 8}),
            io:format("~-34s ~8.1f ~7.2f ~14.1f ~4s ~p ~p~n",
                      ["8 flight recorders, same spec", Fr8, Fr8 / Fl,
                       (Fr8 - Fr1) / 7, yes((Fr8 - Fr1) / 7 =< 10.0),
                       Drops({fr, 8}), Refused({fr, 8})]);
        _ ->
            io:format("overlap bench FAILED (~p of ~p runs)~n",
                      [Failed, Passed + Failed])
    end,
    _ = Smoke andalso io:format("bench smoke part: ~p passed, ~p failed~n",
                                [Passed, Failed]),
    Failed.

yes(true) -> "yes";
yes(false) -> "NO".

median(L) ->
    S = lists:sort(L),
    lists:nth((length(S) + 1) div 2, S).
