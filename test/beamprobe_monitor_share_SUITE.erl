%%% @doc The system monitor shared by sessions (src/beamprobe_monitor.erl),
%%% as each session sees it: a session gets the reports the VM would send
%%% it alone, whatever other sessions share the monitor; reports dropped in
%%% a flood are told to each session that wanted them; a monitor another
%%% tool took from the sessions, and a session forced back, is that tool's
%%% again at the end.  Reports are injected as the VM sends them (a
%%% `{monitor, Pid, What, Info}' message to the owner) where their exact
%%% values matter; beamprobe_monitor_SUITE has the VM's own.
-module(beamprobe_monitor_share_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([flood_drops_told/1, forced_after_taken_restored/1,
         thresholds_as_alone/1, rate_bounded/1]).

-define(L, beamprobe_test_lib).
-define(ADD, {beamprobe_workload, add, 2}).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [flood_drops_told, forced_after_taken_restored, thresholds_as_alone,
     rate_bounded].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, _} = code:ensure_loaded(beamprobe_workload),
    Config.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    ?assertEqual(undefined, erlang:system_monitor()),
    %% A second of its own: the reports a case writes count against the
    %% rate of their second (1,000), node-wide.
    timer:sleep(1100),
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    ?L:clear_trace_state(),
    _ = erlang:system_monitor(undefined),
    ok.

%%% ------------------------------------------------------------------------

%% Sessions trace a process of their own (two sessions never conflict).
spec(Dir, Extra) ->
    Idle = spawn(fun() -> receive stop -> ok end end),
    maps:merge(#{calls => [?ADD], procs => [Idle], output => {file, Dir}},
               Extra).

monitor_events(Evs, What) ->
    [E || E <- ?L:events(Evs, "monitor"),
          ?L:field(E, "what") =:= atom_to_binary(What)].

pid_text(P) -> list_to_binary(pid_to_list(P)).

%% A flood of reports (30,000 long_gc reports waiting at once, as a node
%% whose every GC is long sends them): past the bound the owner drops
%% them, and each session that would have had them is told how many in
%% its trace (a `tampered' event `system_monitor node dropped', N in its
%% detail), so that written + told = every report it asked for.  A
%% session whose thresholds the reports do not pass is told nothing.
%% (Before, the 19,999 dropped reports were only in
%% beamprobe_monitor:stats/0: the trace said "lost events: none".)
flood_drops_told(Config) ->
    Dir = ?L:dir(Config, "t"),
    Dir2 = ?L:dir(Config, "t2"),
    S = ?L:start(spec(Dir, #{monitor => #{long_gc => 1}})),
    S2 = ?L:start(spec(Dir2, #{monitor => #{long_gc => 100}})),
    {ok, #{dropped := D0, reports := R0}} = beamprobe_monitor:stats(),
    M = whereis(beamprobe_monitor),
    Me = quiet_process(),
    N = 30000,
    %% all of them waiting before the first is handled
    erlang:suspend_process(M),
    [M ! {monitor, Me, long_gc, [{timeout, 5}, {heap_size, I}]}
     || I <- lists:seq(1, N)],
    erlang:resume_process(M),
    ?L:wait_until(fun() -> process_info(M, message_queue_len) =:=
                               {message_queue_len, 0} end, 60000),
    {ok, #{dropped := D1, reports := R1}} = beamprobe_monitor:stats(),
    ?assertEqual(N, R1 - R0),
    Dropped = D1 - D0,
    ?assert(Dropped > 0),
    _ = ?L:stop(S),
    _ = ?L:stop(S2),
    Evs = ?L:trace(Dir),
    Written = length([E || E <- monitor_events(Evs, long_gc),
                           ?L:field(E, "process") =:= pid_text(Me)]),
    Told = [binary_to_integer(hd(binary:split(?L:field(E, "detail"),
                                              <<" ">>)))
            || E <- ?L:events(Evs, "tampered"),
               ?L:field(E, "how") =:= <<"dropped">>],
    ct:log("written ~p, told ~p, dropped ~p", [Written, Told, Dropped]),
    ?assertNotEqual([], Told),
    ?assertEqual(Dropped, lists:sum(Told)),
    ?assertEqual(N, Written + lists:sum(Told)),
    %% the other session asked for none of them
    Evs2 = ?L:trace(Dir2),
    ?assertEqual([], monitor_events(Evs2, long_gc)),
    ?assertEqual([], [E || E <- ?L:events(Evs2, "tampered"),
                           ?L:field(E, "how") =:= <<"dropped">>]),
    %% print shows it
    Print = ?L:cli_ok(["print", Dir]),
    ?assertNotEqual(nomatch, binary:match(Print, <<"dropped">>)).

%% Another tool takes the monitor from running sessions, then a new
%% session takes it back with force => true: when the last session
%% leaves, the tool's monitor is given back (it was the node's monitor
%% when beamprobe forced it), not the one from before the first session.
%% (Before, the tool's monitor was replaced by `undefined' for good.)
forced_after_taken_restored(Config) ->
    S = ?L:start(spec(?L:dir(Config, "t"), #{monitor => #{long_gc => 3}})),
    Tool = spawn(fun() -> receive stop -> ok end end),
    erlang:system_monitor(Tool, [{long_gc, 500}]),
    ?assertMatch({error, {system_monitor_taken, Tool}},
                 beamprobe:start(spec(?L:dir(Config, "t1"),
                                      #{monitor => #{long_gc => 4}}))),
    S2 = ?L:start(spec(?L:dir(Config, "t2"), #{monitor => #{long_gc => 4},
                                               force => true})),
    Mon = whereis(beamprobe_monitor),
    ?assertEqual({Mon, [{long_gc, 3}]}, erlang:system_monitor()),
    _ = ?L:stop(S2),
    ?assertEqual({Mon, [{long_gc, 3}]}, erlang:system_monitor()),
    _ = ?L:stop(S),
    ?assertEqual({Tool, [{long_gc, 500}]}, erlang:system_monitor()),
    {ok, #{sessions := 0}} = beamprobe_monitor:stats(),
    exit(Tool, kill).

%% A session's reports are those the VM would send it alone, whatever
%% other sessions share the monitor: the VM reports a GC or a schedule
%% that took strictly longer than the threshold (long_gc 5: 6 ms and
%% more), a heap at least as large as it.  Sessions of long_gc 5,
%% long_schedule 5 and large_heap 1000 next to one of 1 (the monitor is
%% set to 1) get the reports of 6 ms and of 1000 words, not those of 5 ms.
%% (Before, the reports of exactly 5 ms reached them too: a session got
%% more reports when another one of a lower threshold ran.)
thresholds_as_alone(Config) ->
    DA = ?L:dir(Config, "a"), DB = ?L:dir(Config, "b"),
    A = ?L:start(spec(DA, #{monitor => #{long_gc => 1, long_schedule => 1,
                                         large_heap => 1}})),
    B = ?L:start(spec(DB, #{monitor => #{long_gc => 5, long_schedule => 5,
                                         large_heap => 1000}})),
    M = whereis(beamprobe_monitor),
    Me = quiet_process(),
    Reports = [{long_gc, [{timeout, 5}, {heap_size, 1}]},
               {long_gc, [{timeout, 6}, {heap_size, 2}]},
               {long_schedule, [{timeout, 5}, {in, undefined},
                                {out, undefined}]},
               {long_schedule, [{timeout, 6}, {in, undefined},
                                {out, undefined}]},
               {large_heap, [{heap_block_size, 999}, {old_heap_block_size, 0}]},
               {large_heap, [{heap_block_size, 600},
                             {old_heap_block_size, 400}]}],
    [M ! {monitor, Me, W, I} || {W, I} <- Reports],
    {ok, _} = beamprobe_monitor:stats(),     % handled by now
    _ = ?L:stop(A),
    _ = ?L:stop(B),
    Got = fun(Dir) ->
                  lists:sort([{binary_to_atom(?L:field(E, "what")),
                               ?L:field(E, "duration_ms"),
                               ?L:field(E, "detail")}
                              || E <- ?L:events(?L:trace(Dir), "monitor"),
                                 ?L:field(E, "process") =:= pid_text(Me)])
          end,
    ?assertEqual(6, length(Got(DA))),
    ?assertEqual([{large_heap, 0,
                   <<"[{heap_block_size,600},{old_heap_block_size,400}]">>},
                  {long_gc, 6, <<"[{timeout,6},{heap_size,2}]">>},
                  {long_schedule, 6,
                   <<"[{timeout,6},{in,undefined},{out,undefined}]">>}],
                 Got(DB)).

%% Reports arriving steadily faster than beamprobe writes them (6,000 in
%% about 1.5 s, 50 at a time, never many waiting: as a node whose every GC
%% is reported, large_heap on a large process, sends them): at most 1,000
%% are written a second, the session's own `rate' limit or not, and the
%% rest are told as dropped: written + told = 6,000.  (Before, all were
%% written, two events each: 36,000 reports a second of a real node made
%% 72,000 events a second in the trace, past `limits => #{rate => ...}'.)
rate_bounded(Config) ->
    Dir = ?L:dir(Config, "t"),
    %% A threshold no real heap reaches (2^30 words, 8 GiB): with
    %% large_heap => 1 the VM's own reports of every GC on the node (many
    %% under the ASan NIF) were dropped and told too, so told + written
    %% passed 6,000.
    Big = 1 bsl 30,
    S = ?L:start(spec(Dir, #{monitor => #{large_heap => Big}})),
    M = whereis(beamprobe_monitor),
    Me = quiet_process(),
    N = 6000,
    T0 = erlang:monotonic_time(millisecond),
    lists:foreach(
      fun(B) ->
              [M ! {monitor, Me, large_heap, [{heap_block_size,
                                               Big + B * 50 + I},
                                              {old_heap_block_size, 0}]}
               || I <- lists:seq(1, 50)],
              timer:sleep(12)
      end, lists:seq(0, N div 50 - 1)),
    {ok, _} = beamprobe_monitor:stats(),     % every report handled by now
    Secs = (erlang:monotonic_time(millisecond) - T0) div 1000 + 1,
    _ = ?L:stop(S),
    Evs = ?L:trace(Dir),
    Written = length([E || E <- monitor_events(Evs, large_heap),
                           ?L:field(E, "process") =:= pid_text(Me)]),
    Told = lists:sum([binary_to_integer(hd(binary:split(?L:field(E, "detail"),
                                                        <<" ">>)))
                      || E <- ?L:events(Evs, "tampered"),
                         ?L:field(E, "how") =:= <<"dropped">>]),
    ct:log("~b s: written ~b, told ~b", [Secs, Written, Told]),
    ?assert(Written =< 1000 * (Secs + 1)),
    ?assert(Told > 0),
    %% (the figures in the reason: CI prints only its first terms)
    Written + Told =:= N orelse
        ct:fail("written ~b + told ~b =/= ~b", [Written, Told, N]).

%% The process the injected reports name: one that never runs again, so
%% never collects garbage, so the VM sends no report of its own for it.
%% (The test process itself, with the monitor at large_heap 1, got a real
%% large_heap report in the VM of the ASan NIF: 4 reports where 3 were
%% injected.)  It ends with the test process.
quiet_process() ->
    Parent = self(),
    spawn(fun() ->
                  Ref = monitor(process, Parent),
                  receive {'DOWN', Ref, process, _, _} -> ok end
          end).
