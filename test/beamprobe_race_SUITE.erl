%%% @doc Races between sessions (issue 7 item 6): concurrent starts that
%%% collide, many sessions sharing a pattern stopped at once, and the shell
%%% API on a function so busy that its session ends before it returns.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_race_SUITE -logdir _build/ct_logs
-module(beamprobe_race_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([concurrent_all_starts/1, simultaneous_stops/1,
         shell_count_reached/1, killed_mid_install/1,
         janitor_restarted/1, fence_fallback/1,
         dump_write_error_ends/1]).
%% A beamprobe_handler whose init/1 blocks until told (to hold a session
%% in the middle of its install).
-export([init/1, handle_events/2, terminate/2]).
%% Traced functions and helpers.
-export([busy/1, shared/1, null_io/0, fence_peer/2]).

-define(L, beamprobe_test_lib).

suite() -> [{timetrap, {seconds, 180}}].

all() ->
    [concurrent_all_starts, simultaneous_stops, shell_count_reached,
     killed_mid_install, janitor_restarted, fence_fallback,
     dump_write_error_ends].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    ok = beamprobe:clear(),
    _ = [beamprobe:stop(S) || S <- beamprobe:list()],
    erlang:trace_pattern({?MODULE, '_', '_'}, false, [local]),
    erlang:trace_pattern({?MODULE, '_', '_'}, false, [meta]),
    ok.

busy(X) -> X + 1.

spin() -> _ = busy(1), spin().
shared(X) -> X.

%%% ------------------------------------------------------------------------

%% 20 `procs => all' sessions started at the same time: sessions overlap
%% freely, so every one is accepted, and once all are stopped nothing is
%% left traced.
concurrent_all_starts(Config) ->
    N = 20,
    Parent = self(),
    Owners = [spawn_link(
                fun() ->
                        Dir = ?L:dir(Config, "all" ++ integer_to_list(I)),
                        receive go -> ok end,
                        R = beamprobe:start(#{procs => all, events => [gc],
                                              buffer => 16384,
                                              output => {file, Dir}}),
                        Parent ! {self(), R},
                        receive stop -> ok end
                end) || I <- lists:seq(1, N)],
    [O ! go || O <- Owners],
    Rs = [receive {O, R} -> R after 60000 -> timeout end || O <- Owners],
    ct:log("~p", [Rs]),
    Ok = [S || {ok, S} <- Rs],
    ?assertEqual(N, length(Ok)),
    ?assertEqual(N, beamprobe_nif:hub_members()),
    [?assertMatch({ok, _}, beamprobe:stop(S)) || S <- Ok],
    [O ! stop || O <- Owners],
    ?assertEqual([], beamprobe:list()),
    ?assertEqual(0, beamprobe_nif:hub_members()),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    %% (The owners told to stop may still be listed, exiting: undefined.)
    ?assertEqual([], [{P, F} || P <- processes(),
                                F <- [erlang:trace_info(P, flags)],
                                F =/= {flags, []}, F =/= undefined]).

%% A stop asked for while a flight-recorder dump holds the producers off
%% is not lost: the dump's own write fails (the trace directory was
%% removed), which ends the session with `io_error' as any write error
%% does.  Before, the request found the state `paused', not `running',
%% and the dump set it `running' again: 1 s later the session still
%% traced (`state => running', `stop_reason => io_error', 2.8 M more
%% events overwritten) until stop/1 or its 60 s.
dump_write_error_ends(Config) ->
    Dir = ?L:dir(Config, "fr"),
    W = spawn_link(fun spin/0),
    S = ?L:start(#{procs => [W], calls => [{?MODULE, busy, 1}],
                   overflow => drop_oldest, buffer => 65536,
                   output => {file, Dir}}),
    timer:sleep(50),
    _ = os:cmd("rm -rf '" ++ Dir ++ "'"),
    ok = beamprobe:dump(S),
    Ended = try ?L:wait_ended(S, 3000), true
            catch _:_ -> false
            end,
    {ok, I} = beamprobe:info(S),
    ct:log("info after the dump: ~p", [I]),
    unlink(W),
    exit(W, kill),
    ?assert(Ended),
    ?assertEqual(io_error, maps:get(stop_reason, I)),
    {ok, Sum} = beamprobe:stop(S),
    ?assertMatch({error, {file, _}}, maps:get(io_error, Sum)),
    ?assert(maps:get(io_error, maps:get(dropped, Sum)) > 0).

%% 200 sessions holding the same call pattern (each on its own process),
%% stopped by 200 processes at once: the pattern is gone afterwards.
simultaneous_stops(Config) ->
    N = 200,
    %% More sessions than the default cap (max_sessions, 64).  The env
    %% may be unset (an earlier suite in this VM unloaded the
    %% application): beamprobe then uses the default, and so does the
    %% restore.
    %% Their worst-case ring memory (200 x 22 slots x 650 KiB here) may
    %% pass max_memory on a small host: lifted too.
    Cap = application:get_env(beamprobe, max_sessions),
    Mem = application:get_env(beamprobe, max_memory),
    ok = application:set_env(beamprobe, max_sessions, N + 10),
    ok = application:set_env(beamprobe, max_memory, 1 bsl 40),
    try simultaneous_stops(Config, N)
    after
        case Cap of
            {ok, C} -> ok = application:set_env(beamprobe, max_sessions, C);
            undefined -> ok = application:unset_env(beamprobe, max_sessions)
        end,
        case Mem of
            {ok, M} -> ok = application:set_env(beamprobe, max_memory, M);
            undefined -> ok = application:unset_env(beamprobe, max_memory)
        end
    end.

simultaneous_stops(Config, N) ->
    MFA = {?MODULE, shared, 1},
    Ws = [spawn_link(fun() -> receive stop -> ok end end)
          || _ <- lists:seq(1, N)],
    Ss = [?L:start(#{procs => [W], calls => [MFA], buffer => 16384,
                     output => {file, ?L:dir(Config,
                                             "s" ++ pid_to_list(W))}})
          || W <- Ws],
    ?assertMatch({all, [_ | _]}, erlang:trace_info(MFA, all)),
    Parent = self(),
    Stoppers = [spawn_link(fun() ->
                                   receive go -> ok end,
                                   Parent ! {self(), beamprobe:stop(S)}
                           end) || S <- Ss],
    [P ! go || P <- Stoppers],
    Rs = [receive {P, R} -> R after 60000 -> timeout end || P <- Stoppers],
    ?assertEqual(N, length([ok || {ok, #{}} <- Rs])),
    ?assertEqual({all, false}, erlang:trace_info(MFA, all)),
    [W ! stop || W <- Ws],
    ?assertEqual([], beamprobe:list()),
    %% Every stop ran the remover's barrier (c_src/bp_membar.h): none of
    %% the membarrier calls failed.
    Hub = beamprobe_nif:hub_stats(),
    ct:log("hub: ~p", [Hub]),
    ?assertMatch(#{barrier := B} when B =:= membarrier; B =:= fence, Hub),
    ?assertEqual(0, maps:get(barrier_failures, Hub)).

%% calls("m:f/1", 1) on a function another process calls in a tight loop:
%% the count is reached (and the session ends) before calls/2 returns.
%% Forty times in a row, it returns the number of matched functions,
%% never an exception and never a conflict with its predecessor (`force'
%% only because the module name starts with beamprobe).
shell_count_reached(_Config) ->
    Io = spawn_link(?MODULE, null_io, []),
    Looper = spawn_link(fun Loop() -> _ = ?MODULE:busy(1), Loop() end),
    Rs = [try beamprobe:calls("beamprobe_race_SUITE:busy/1", 1,
                              #{io_server => Io, force => true})
          catch C:R:St -> {raised, C, R, St}
          end || _ <- lists:seq(1, 40)],
    ct:log("~p", [Rs]),
    unlink(Looper),
    exit(Looper, kill),
    ?assertEqual(lists:duplicate(40, 1), Rs).

%% A session killed in the middle of its install (its handler starting)
%% leaves nothing behind: the same session can start right after (and,
%% sessions overlapping freely, also while it installs).
killed_mid_install(Config) ->
    Parent = self(),
    W = spawn_link(fun() -> receive stop -> ok end end),
    Spec = #{procs => [W], calls => [{?MODULE, shared, 1}],
             output => {handler, ?MODULE, #{parent => Parent}}},
    Starter = spawn(fun() -> Parent ! {started, beamprobe:start(Spec)} end),
    H = receive {blocked_in_init, Pid} -> Pid after 10000 -> timeout end,
    [S] = beamprobe:list(),
    {ok, SA} = beamprobe:start(Spec#{output => {file, ?L:dir(Config, "a")}}),
    ?assertMatch({ok, _}, beamprobe:stop(SA)),
    exit(S, kill),
    exit(H, kill),
    exit(Starter, kill),
    _ = ?L:wait_until(fun() -> beamprobe:list() =:= [] end, 5000),
    _ = sys:get_state(beamprobe_janitor),
    S2 = ?L:start(Spec#{output => {file, ?L:dir(Config, "b")}}),
    ?assertMatch({ok, _}, beamprobe:stop(S2)),
    ?assertEqual({all, false}, erlang:trace_info({?MODULE, shared, 1}, all)),
    W ! stop.

%% The janitor killed (and restarted by its supervisor) while a session

%% Where the kernel refuses membarrier, producers and removers keep full
%% barriers (c_src/bp_membar.h); BEAMPROBE_BARRIER=fence forces that path.
%% On a peer node started so: the hub says `fence', and two overlapping
%% sessions, one of them stopped while the worker keeps calling, count
%% exactly what they should.
fence_fallback(Config) ->
    {Peer, Node} = ?L:env_peer(?MODULE, [{"BEAMPROBE_BARRIER", "fence"}]),
    try
        Dir = proplists:get_value(case_dir, Config),
        R = erpc:call(Node, ?MODULE, fence_peer, [Dir, 200000], 120000),
        ct:log("~p", [R]),
        #{hub := Hub, long := Long, short := Short, calls := N} = R,
        ?assertMatch(#{barrier := fence, barrier_failures := 0}, Hub),
        %% The long session saw every call; the short one, stopped while
        %% the worker called on, at least the first 1,000 and not all.
        ?assertEqual(N, maps:get(events, Long)),
        ?assertEqual(0, maps:get(total, maps:get(dropped, Long))),
        ?assert(maps:get(events, Short) >= 1000),
        ?assert(maps:get(events, Short) < N)
    after
        peer:stop(Peer)
    end.

%% Runs on the peer: N calls of busy/1 by a worker traced by two sessions;
%% the second is stopped once the worker has made 1,000 of them.
fence_peer(Dir, N) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    Parent = self(),
    W = spawn(fun() ->
                      receive go -> ok end,
                      _ = [?MODULE:busy(I) || I <- lists:seq(1, 1000)],
                      Parent ! {self(), running},
                      _ = [?MODULE:busy(I) || I <- lists:seq(1001, N)],
                      Parent ! {self(), done}
              end),
    Start = fun(Name) ->
                    {ok, S} = beamprobe:start(
                                #{procs => [W], calls => [{?MODULE, busy, 1}],
                                  args => arity, return => false,
                                  output => {file, filename:join(Dir, Name)}}),
                    S
            end,
    L = Start("long"),
    S = Start("short"),
    W ! go,
    receive {W, running} -> ok after 60000 -> exit(worker_timeout) end,
    {ok, Short} = beamprobe:stop(S),
    receive {W, done} -> ok after 60000 -> exit(worker_timeout) end,
    {ok, Long} = beamprobe:stop(L),
    #{hub => beamprobe_nif:hub_stats(), long => Long, short => Short,
      calls => N}.

%% runs: the session still stops with its summary and removes its pattern.
janitor_restarted(Config) ->
    W = spawn_link(fun() -> receive stop -> ok end end),
    S = ?L:start(#{procs => [W], calls => [{?MODULE, shared, 1}],
                   output => {file, ?L:dir(Config, "j")}}),
    J = whereis(beamprobe_janitor),
    exit(J, kill),
    _ = ?L:wait_until(fun() -> is_pid(whereis(beamprobe_janitor)) andalso
                                   whereis(beamprobe_janitor) =/= J
                      end, 5000),
    ?assertMatch({ok, #{stop_reason := requested}}, beamprobe:stop(S)),
    ?assertEqual({all, false}, erlang:trace_info({?MODULE, shared, 1}, all)),
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    W ! stop.

init(#{parent := Parent}) ->
    Parent ! {blocked_in_init, self()},
    receive never -> {ok, none} end.
handle_events(_, St) -> {ok, St}.
terminate(_, _) -> ok.

%% An io server that accepts and discards everything.
null_io() ->
    receive
        {io_request, From, ReplyAs, _} ->
            From ! {io_reply, ReplyAs, ok},
            null_io();
        _ -> null_io()
    end.
