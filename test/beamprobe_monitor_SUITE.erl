%%% beamprobe_monitor_SUITE -- VM monitor events and counter samples in a
%%% session's trace (issue 9, point 4): a forced long GC and a long
%%% schedule appear as `monitor' events (babeltrace2, bin/beamprobe print,
%%% the Perfetto export); each session gets the reports passing its own
%%% thresholds; the one system monitor of the node is shared, taken from
%%% another tool only with force, and given back when the last session
%%% leaves (also when it dies); counter samples appear as Perfetto
%%% counter tracks; bad options are refused.
-module(beamprobe_monitor_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([long_gc_event/1, long_schedule_event/1, own_thresholds/1,
         taken_refused/1, forced_and_restored/1, restored_on_kill/1,
         bad_options/1, samples_counter_tracks/1, samples_bounded/1,
         handler_gets_monitor/1, lttng_unavailable/1, lttng_capture/1,
         lttng_losses_own/1,
         own_processes_untraced/1, taken_while_held/1,
         concurrent_sessions/1, monitor_only/1, sample_only/1,
         busy_port_event/1, busy_dist_port_event/1,
         large_heap_event/1,
         owner_killed_resumes/1, false_flags_ask_nothing/1]).

-define(L, beamprobe_test_lib).
-define(ADD, {beamprobe_workload, add, 2}).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [long_gc_event, long_schedule_event, own_thresholds, taken_refused,
     forced_and_restored, restored_on_kill, bad_options,
     samples_counter_tracks, samples_bounded, handler_gets_monitor,
     lttng_unavailable, lttng_capture, lttng_losses_own,
     own_processes_untraced,
     taken_while_held, concurrent_sessions, monitor_only, sample_only,
     busy_port_event, busy_dist_port_event, large_heap_event,
     owner_killed_resumes, false_flags_ask_nothing].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, _} = code:ensure_loaded(beamprobe_workload),
    Config.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    ?assertEqual(undefined, erlang:system_monitor()),
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

%% A process with a heap of a few million words, garbage collected on
%% demand: a GC of tens of milliseconds.
big_gc() ->
    Self = self(),
    P = spawn(fun() ->
                      L = lists:seq(1, 3000000),
                      Self ! {ready, self()},
                      receive go -> erlang:garbage_collect() end,
                      Self ! {done, self()},
                      receive stop -> length(L) end
              end),
    receive {ready, P} -> ok end,
    P ! go,
    receive {done, P} -> ok end,
    P.

%% A process that runs one BIF for tens of ms without being scheduled
%% out: a long schedule.
long_run() ->
    {P, Ref} = spawn_monitor(fun() -> _ = erlang:make_tuple(8000000, a),
                                      receive stop -> ok end end),
    timer:sleep(300),
    {P, Ref}.

monitor_events(Evs, What) ->
    [E || E <- ?L:events(Evs, "monitor"),
          ?L:field(E, "what") =:= atom_to_binary(What)].

pid_text(P) -> list_to_binary(pid_to_list(P)).

long_gc_event(Config) ->
    Dir = ?L:dir(Config, "t"),
    S = ?L:start(spec(Dir, #{monitor => #{long_gc => 1}})),
    P = big_gc(),
    timer:sleep(100),
    _ = ?L:stop(S),
    exit(P, kill),
    Evs = ?L:trace(Dir),
    Mine = [E || E <- monitor_events(Evs, long_gc),
                 ?L:field(E, "process") =:= pid_text(P)],
    ?assertNotEqual([], Mine),
    [E | _] = Mine,
    ?assert(?L:field(E, "duration_ms") >= 1),
    Detail = ?L:field(E, "detail"),
    ?assertNotEqual(nomatch, binary:match(Detail, <<"heap_block_size">>)),
    ?assertNotEqual(nomatch, binary:match(Detail, <<"{timeout,">>)),
    %% The monitor is given back: nothing was set before.
    ?assertEqual(undefined, erlang:system_monitor()),
    %% print and the Perfetto export show it.
    Print = ?L:cli_ok(["print", Dir]),
    %% on the process's line: its pid text (a process event names the
    %% key), not a raw key
    ?assertNotEqual(nomatch, binary:match(Print, <<" ", (pid_text(P))/binary,
                                                   " monitor long_gc ",
                                                   (pid_text(P))/binary>>)),
    Json = ?L:cli_ok(["export", "-F", "perfetto", Dir]),
    ?assertNotEqual(nomatch, binary:match(Json, <<"\"cat\":\"monitor\"">>)),
    ?assertNotEqual(nomatch, binary:match(?L:cli_ok(["stats", "--json", Dir]),
                                          <<"\"monitor\":">>)).

long_schedule_event(Config) ->
    Dir = ?L:dir(Config, "t"),
    S = ?L:start(spec(Dir, #{monitor => #{long_schedule => 5}})),
    {P, _} = long_run(),
    _ = ?L:stop(S),
    exit(P, kill),
    Evs = ?L:trace(Dir),
    Mine = [E || E <- monitor_events(Evs, long_schedule),
                 ?L:field(E, "process") =:= pid_text(P)],
    ?assertNotEqual([], Mine),
    [E | _] = Mine,
    ?assert(?L:field(E, "duration_ms") >= 5),
    ?assertNotEqual(nomatch, binary:match(?L:field(E, "detail"), <<"{out,">>)),
    %% the event's key is the process's: bin/beamprobe print puts it on
    %% the process's line.
    ?assertEqual([], monitor_events(Evs, long_gc)).

%% Two sessions: the monitor is set to the union (the smaller threshold);
%% each gets only the reports passing its own thresholds.
own_thresholds(Config) ->
    DA = ?L:dir(Config, "a"), DB = ?L:dir(Config, "b"),
    A = ?L:start(spec(DA, #{monitor => #{long_gc => 1}})),
    B = ?L:start(spec(DB, #{monitor => #{long_gc => 100000,
                                          long_schedule => 5}})),
    Mon = whereis(beamprobe_monitor),
    {Mon, Opts} = erlang:system_monitor(),
    ?assertEqual([{long_gc, 1}, {long_schedule, 5}], lists:sort(Opts)),
    P = big_gc(),
    timer:sleep(100),
    _ = ?L:stop(A),
    %% A left: B's thresholds alone.
    ?assertEqual({Mon, [{long_gc, 100000}, {long_schedule, 5}]},
                 sorted(erlang:system_monitor())),
    _ = ?L:stop(B),
    exit(P, kill),
    ?assertEqual(undefined, erlang:system_monitor()),
    ?assertNotEqual([], monitor_events(?L:trace(DA), long_gc)),
    ?assertEqual([], monitor_events(?L:trace(DB), long_gc)).

sorted({P, L}) -> {P, lists:sort(L)}.

%% Another tool holds the monitor: refused, nothing left behind.
taken_refused(Config) ->
    Tool = spawn(fun() -> receive stop -> ok end end),
    erlang:system_monitor(Tool, [{long_gc, 500}]),
    ?assertEqual({error, {system_monitor_taken, Tool}},
                 beamprobe:start(spec(?L:dir(Config, "t"),
                                      #{monitor => #{long_gc => 1}}))),
    Text = beamprobe:format_error({system_monitor_taken, Tool}),
    ?assertNotEqual(nomatch, string:find(Text, pid_to_list(Tool))),
    ?assertNotEqual(nomatch, string:find(Text, "force => true")),
    ?assertEqual([], beamprobe:list()),
    ?assertEqual({Tool, [{long_gc, 500}]}, erlang:system_monitor()),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    {ok, #{sessions := 0}} = beamprobe_monitor:stats(),
    exit(Tool, kill).

%% force => true takes it; the last session out gives it back.
forced_and_restored(Config) ->
    Tool = spawn(fun() -> receive stop -> ok end end),
    erlang:system_monitor(Tool, [{long_gc, 500}, busy_port]),
    S = ?L:start(spec(?L:dir(Config, "t"), #{monitor => #{long_gc => 7},
                                             force => true})),
    ?assertEqual({whereis(beamprobe_monitor), [{long_gc, 7}]},
                 erlang:system_monitor()),
    _ = ?L:stop(S),
    ?assertEqual({Tool, [busy_port, {long_gc, 500}]},
                 sorted(erlang:system_monitor())),
    exit(Tool, kill).

%% Another tool takes the monitor while a session holds it: reported once
%% in the trace (a tampered event), and left to that tool at the end.
taken_while_held(Config) ->
    Dir = ?L:dir(Config, "t"),
    D2 = ?L:dir(Config, "t2"),
    S = ?L:start(spec(Dir, #{monitor => #{long_gc => 3}})),
    S2 = ?L:start(spec(D2, #{monitor => #{long_gc => 4}})),
    Tool = spawn(fun() -> receive stop -> ok end end),
    erlang:system_monitor(Tool, [{long_gc, 500}]),
    timer:sleep(2500),
    _ = ?L:stop(S2),
    %% one session left: the tool keeps it
    ?assertEqual({Tool, [{long_gc, 500}]}, erlang:system_monitor()),
    _ = ?L:stop(S),
    ?assertEqual({Tool, [{long_gc, 500}]}, erlang:system_monitor()),
    Evs = ?L:trace(Dir),
    T = [E || E <- ?L:events(Evs, "tampered"),
              ?L:field(E, "what") =:= <<"system_monitor">>],
    ?assertMatch([_], T),
    [E] = T,
    ?assertEqual(<<"replaced">>, ?L:field(E, "how")),
    ?assertNotEqual(nomatch, binary:match(?L:field(E, "detail"),
                                          list_to_binary(pid_to_list(Tool)))),
    exit(Tool, kill).

%% 16 sessions start and stop at once (some killed) over a monitor another
%% tool held before: the union while they run, the tool's monitor back
%% when the last one has gone, no session left joined.
concurrent_sessions(Config) ->
    Tool = spawn(fun() -> receive stop -> ok end end),
    erlang:system_monitor(Tool, [{long_gc, 500}, busy_port]),
    Self = self(),
    Ws = [spawn(fun() ->
                        D = ?L:dir(Config, "s" ++ integer_to_list(I)),
                        {ok, S} = beamprobe:start(
                                    spec(D, #{monitor => #{long_gc => 10 + I},
                                              force => true})),
                        Self ! {started, self(), S},
                        receive go -> ok end,
                        case I rem 4 of
                            0 -> exit(S, kill);
                            _ -> {ok, _} = beamprobe:stop(S)
                        end,
                        Self ! {done, self()}
                end) || I <- lists:seq(1, 16)],
    Ss = [receive {started, W, S} -> S after 20000 -> ct:fail(no_start) end
          || W <- Ws],
    Mon = whereis(beamprobe_monitor),
    ?assertEqual({Mon, [{long_gc, 11}]}, erlang:system_monitor()),
    {ok, #{sessions := 16}} = beamprobe_monitor:stats(),
    [W ! go || W <- Ws],
    [receive {done, W} -> ok after 20000 -> ct:fail(no_stop) end || W <- Ws],
    ?L:wait_until(fun() ->
                          {ok, #{sessions := N}} = beamprobe_monitor:stats(),
                          N =:= 0
                  end, 10000),
    ?assertEqual({Tool, [busy_port, {long_gc, 500}]},
                 sorted(erlang:system_monitor())),
    ?L:wait_until(fun() -> beamprobe:list() =:= [] end, 10000),
    _ = Ss,
    exit(Tool, kill).

%% The session process killed: the monitor is released all the same.
restored_on_kill(Config) ->
    S = ?L:start(spec(?L:dir(Config, "t"), #{monitor => #{long_gc => 3}})),
    ?assertMatch({_, [{long_gc, 3}]}, erlang:system_monitor()),
    exit(S, kill),
    ?L:wait_until(fun() -> erlang:system_monitor() =:= undefined end, 5000),
    {ok, #{sessions := 0}} = beamprobe_monitor:stats().

bad_options(Config) ->
    D = ?L:dir(Config, "t"),
    Bad = [#{monitor => #{long_gc => 0}},
           #{monitor => #{long_gc => -5}},
           #{monitor => #{long_gc => 1 bsl 40}},
           #{monitor => #{bogus => 1}},
           #{monitor => #{busy_port => yes}},
           #{monitor => #{}},
           #{monitor => long_gc},
           #{sample => #{interval => 1}},
           #{sample => #{interval => 10.5}},
           #{sample => #{what => [foo]}},
           #{sample => #{what => []}},
           #{sample => #{what => [{message_queues_top, 1000}]}},
           #{sample => #{what => [{message_queues_top, 0}]}},
           #{sample => #{bogus => 1}},
           #{sample => 5}],
    [?assertMatch({{error, _}, _}, {beamprobe:start(spec(D, B)), B})
     || B <- Bad],
    ?assertEqual([], beamprobe:list()),
    ?assertEqual(undefined, erlang:system_monitor()).

samples_counter_tracks(Config) ->
    Dir = ?L:dir(Config, "t"),
    Busy = spawn(fun() -> receive never -> ok end end),
    [Busy ! {m, I} || I <- lists:seq(1, 57)],
    S = ?L:start(spec(Dir, #{sample => #{interval => 20,
                                         what => [run_queues, memory,
                                                  process_count,
                                                  scheduler_utilization,
                                                  {message_queues_top, 3}]}})),
    %% (at least 3 rounds of the counters: a fixed 300 ms can be one
    %% round on a loaded machine under the ASan NIF)
    wait_events(S, 60),
    _ = ?L:stop(S),
    exit(Busy, kill),
    Evs = ?L:trace(Dir),
    Samples = ?L:events(Evs, "sample"),
    Of = fun(C) -> [E || E <- Samples,
                         ?L:field(E, "counter") =:= iolist_to_binary(C)] end,
    ?assert(length(Of("process_count")) >= 2),
    [?assert(?L:field(E, "value") > 10) || E <- Of("process_count")],
    [?assert(?L:field(E, "value") > 1000000) || E <- Of("memory_total")],
    ?assertNotEqual([], Of("run_queue")),
    ?assertNotEqual([], Of("memory_ets")),
    Util = Of("scheduler_utilization"),
    ?assertNotEqual([], Util),
    [begin ?assertEqual(1000000, ?L:field(E, "scale")),
           ?assert(?L:field(E, "value") =< 1000000) end || E <- Util],
    Q = [E || E <- Of("message_queue_len"),
              ?L:field(E, "process") =:= pid_text(Busy)],
    ?assertNotEqual([], Q),
    [?assertEqual(57, ?L:field(E, "value")) || E <- Q],
    %% The Perfetto export draws counter tracks ("ph":"C").
    Json = ?L:cli_ok(["export", "-F", "perfetto", Dir]),
    Term = json_events(?L:dir(Config, "perfetto.json"), Json),
    Counters = [E || #{<<"ph">> := <<"C">>} = E <- Term],
    Names = lists:usort([N || #{<<"name">> := N} <- Counters]),
    ?assert(lists:member(<<"process_count">>, Names)),
    ?assert(lists:member(<<"memory_total">>, Names)),
    ?assert(lists:member(<<"message_queue_len ",
                           (pid_text(Busy))/binary>>, Names)),
    [?assert(is_number(V)) || #{<<"args">> := #{<<"value">> := V}} <- Counters],
    ?assert(lists:any(fun(#{<<"name">> := <<"scheduler_utilization">>,
                            <<"args">> := #{<<"value">> := V}}) ->
                              is_float(V) andalso V =< 1.0;
                         (_) -> false end, Counters)),
    Print = ?L:cli_ok(["print", Dir]),
    ?assertNotEqual(nomatch, binary:match(Print, <<"sample process_count ">>)).

%% At most N processes per top sample; the interval is at least 10 ms.
samples_bounded(Config) ->
    Dir = ?L:dir(Config, "t"),
    Ps = [spawn(fun() -> receive never -> ok end end) || _ <- lists:seq(1, 10)],
    [[P ! x || _ <- lists:seq(1, I)] || {I, P} <- lists:enumerate(Ps)],
    T0 = erlang:monotonic_time(millisecond),
    S = ?L:start(spec(Dir, #{sample => #{interval => 10,
                                         what => [{message_queues_top, 2}]}})),
    wait_events(S, 4),
    _ = ?L:stop(S),
    %% the sampler ran at most this long (start and stop included)
    Ms = erlang:monotonic_time(millisecond) - T0,
    [exit(P, kill) || P <- Ps],
    Evs = ?L:events(?L:trace(Dir), "sample"),
    ?assert(length(Evs) >= 4),
    %% Each sample: the two longest queues, 10 and 9.
    Values = lists:sort([?L:field(E, "value") || E <- Evs]),
    ?assertEqual([9, 10], lists:usort(Values)),
    %% never more samples than the interval allows (Ms / 10 ms + 1, two
    %% processes each)
    ct:log("~p samples in ~p ms", [length(Evs), Ms]),
    ?assert(length(Evs) =< 2 * (Ms div 10 + 1)).

%% A handler sink gets monitor events too (as maps), and the printer
%% prints them.
handler_gets_monitor(Config) ->
    Self = self(),
    Log = ?L:dir(Config, "printer.txt"),
    {ok, Io} = file:open(Log, [write]),
    S = ?L:start(#{calls => [?ADD], monitor => #{long_gc => 1},
                   procs => [spawn(fun() -> receive stop -> ok end end)],
                   output => [{handler, beamprobe_test_handler,
                               #{parent => Self}},
                              {handler, beamprobe_printer, #{io => Io}}]}),
    P = big_gc(),
    timer:sleep(200),
    _ = ?L:stop(S),
    exit(P, kill),
    ok = file:close(Io),
    Evs = collect_handler([]),
    Mon = [E || #{event := monitor} = E <- Evs],
    ?assert(lists:any(fun(#{what := <<"long_gc">>, process := T,
                            pid := Pid}) ->
                              T =:= pid_text(P) andalso Pid =:= P;
                         (_) -> false end, Mon)),
    {ok, Text} = file:read_file(Log),
    ?assertNotEqual(nomatch, binary:match(Text, <<"% beamprobe: monitor long_gc ",
                                                  (pid_text(P))/binary>>)).

collect_handler(Acc) ->
    receive
        {handler_events, _, Es} -> collect_handler(Es ++ Acc)
    after 500 -> Acc
    end.

%% A session tracing every process leaves its sampler and the shared
%% monitor untraced (their work is not the node's).
own_processes_untraced(Config) ->
    S = ?L:start(#{events => [running], procs => all,
                   output => {file, ?L:dir(Config, "t")},
                   monitor => #{long_gc => 50},
                   sample => #{interval => 10}}),
    Own = ?L:own_pids(S),
    ?assert(length(Own) >= 2),       % the watchdog, the sampler
    [?assertEqual({flags, []}, erlang:trace_info(P, flags)) || P <- Own],
    ?assertEqual({flags, []},
                 erlang:trace_info(whereis(beamprobe_monitor), flags)),
    %% a process of the node is traced (the check means something)
    Other = spawn(fun() -> receive stop -> ok end end),
    {flags, F} = erlang:trace_info(Other, flags),
    ?assert(lists:member(running, F)),
    exit(Other, kill),
    _ = ?L:stop(S),
    [?assertEqual(false, is_process_alive(P)) || P <- Own].

%% output => lttng where the provider is not built (or no session daemon
%% runs): a clear error, nothing left behind, also next to a file sink.
lttng_unavailable(Config) ->
    case beamprobe_lttng:check() of
        ok -> {skip, "LTTng is available here: lttng_capture tests it"};
        {error, {lttng_unavailable, Why}} ->
            ct:log("lttng unavailable: ~ts", [Why]),
            ?assertNotEqual(nomatch,
                            string:find(beamprobe:format_error(
                                          {lttng_unavailable, Why}), Why)),
            D = ?L:dir(Config, "t"),
            [begin
                 R = beamprobe:start(spec(D, #{output => O,
                                               monitor => #{long_gc => 5}})),
                 ?assertEqual({error, {lttng_unavailable, Why}}, R),
                 ?assertEqual([], beamprobe:list()),
                 ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
                 ?assertEqual(undefined, erlang:system_monitor()),
                 ?assert(lists:member(file:list_dir(D),
                                      [{ok, []}, {error, enoent}]))
             end || O <- [lttng, [{file, D}, lttng], {lttng, #{}}]],
            ?assertMatch({error, {bad_option, output, _}},
                         beamprobe:start(spec(D, #{output => [lttng, lttng]}))),
            ?assertMatch({error, {unknown_option, {output, colour}}},
                         beamprobe:start(spec(D, #{output => {lttng,
                                                              #{colour => 1}}})))
    end.

%% An LTTng session (lttng create --output, enable-event -u 'beamprobe:*',
%% start, stop, destroy) captures the N calls of a session with a file
%% and an lttng sink; babeltrace2 (python3-bt2) reads the same events with
%% the same field values from both.  Needs lttng-tools, python3-bt2 and
%% the provider (priv/beamprobe_lttng.so); a session daemon is started if
%% none runs.  BEAMPROBE_LTTNG_PREFIX names another prefix holding
%% lttng-tools (bin/, lib/) when it is not installed in /usr.
lttng_capture(Config) ->
    case lttng_ready() of
        {ok, Prefix, Lttng, Py} -> lttng_capture(Config, Prefix, Lttng, Py);
        {skip, _} = Skip -> Skip
    end.

%% {ok, Prefix, Lttng, Py} when lttng-tools, python3-bt2 and the
%% provider are there, else {skip, Why}.
lttng_ready() ->
    Prefix = os:getenv("BEAMPROBE_LTTNG_PREFIX", "/usr"),
    Lttng = filename:join([Prefix, "bin", "lttng"]),
    Py = "/usr/bin/python3",
    Provider = beamprobe_lttng:provider_path(),
    HasLttng = filelib:is_regular(Lttng),
    HasBt2 = filelib:is_regular(Py) andalso
        os:cmd(Py ++ " -c 'import bt2; print(1)' 2>/dev/null") =:= "1\n",
    if
        not HasLttng ->
            {skip, "lttng-tools is not installed (no " ++ Lttng ++ "; "
             "apt-get install lttng-tools liblttng-ust-dev, or set "
             "BEAMPROBE_LTTNG_PREFIX)"};
        not HasBt2 ->
            {skip, "python3-bt2 is not installed for /usr/bin/python3"};
        true ->
            case filelib:is_regular(Provider) of
                false -> {skip, Provider ++ " was not built "
                          "(liblttng-ust-dev missing at build time)"};
                true -> {ok, Prefix, Lttng, Py}
            end
    end.

%% A session that writes files under a 1000-byte limit and LTTng: the
%% events past the limit are lost to the files alone (LTTng has them),
%% so the LTTng trace's calls and the losses its drops events tell add up
%% to the calls made.  On the old tree its drops events counted the
%% files' `limit' losses as its own (calls + lost > calls made).
lttng_losses_own(Config) ->
    case lttng_ready() of
        {ok, Prefix, Lttng, Py} ->
            Env = lttng_env(Prefix),
            Started = ensure_sessiond(Prefix, Env),
            Name = "bp_test_" ++ os:getpid() ++ "_" ++
                integer_to_list(erlang:unique_integer([positive])),
            try lttng_losses_own(Config, Env, Lttng, Py, Name)
            after
                catch sh(Env, [Lttng, "destroy", Name]),
                stop_sessiond(Started)
            end;
        {skip, _} = Skip -> Skip
    end.

lttng_losses_own(Config, Env, Lttng, Py, Name) ->
    LDir = ?L:dir(Config, "lttng"),
    FDir = ?L:dir(Config, "file"),
    sh(Env, [Lttng, "create", Name, "--output=" ++ LDir]),
    sh(Env, [Lttng, "enable-event", "-u", "beamprobe:*", "-s", Name]),
    sh(Env, [Lttng, "start", Name]),
    N = 500,
    Ps = [beamprobe_workload:start_looper(
            self(), fun() -> beamprobe_workload:loop_add(N) end)
          || _ <- [1, 2, 3, 4]],
    S = ?L:start(#{procs => Ps, calls => [?ADD],
                   limits => #{bytes => 1000},
                   output => [{file, FDir}, lttng]}),
    ok = beamprobe_workload:go(Ps),
    [ok, ok, ok, ok] = beamprobe_workload:wait_done(Ps, 60000),
    Sum = ?L:stop(S),
    sh(Env, [Lttng, "stop", Name]),
    sh(Env, [Lttng, "destroy", Name]),
    #{lttng_session := Id} = Sum,
    ?assert(?L:dropped(Sum, limit) > 0),
    T = iolist_to_binary(["session=", integer_to_list(Id)]),
    Lt = [[Nm | Fs] || [Nm, _Ts, _K, Sess | Fs] <- py_events(Py, "lttng", LDir),
                       Sess =:= T],
    Calls = length([E || E = [<<"call">> | _] <- Lt]),
    Lost = lists:sum([binary_to_integer(V)
                      || [<<"drops">> | Fs] <- Lt, F <- Fs,
                         [_, V] <- [binary:split(F, <<"=">>)]]),
    ct:log("lttng: ~b calls, ~b lost, of ~b", [Calls, Lost, 4 * N]),
    ?assertEqual(4 * N, Calls + Lost).

lttng_capture(Config, Prefix, Lttng, Py) ->
    Env = lttng_env(Prefix),
    Started = ensure_sessiond(Prefix, Env),
    try
        capture_once(Config, "first", Env, Lttng, Py),
        %% The NIF purged, deleted and loaded again: the provider it
        %% loaded stays registered (never unloaded) and serves the new
        %% NIF's sessions.
        NIF = beamprobe_nif,
        _ = code:purge(NIF),
        true = code:delete(NIF),
        _ = code:purge(NIF),
        {module, NIF} = code:load_file(NIF),
        capture_once(Config, "after_reload", Env, Lttng, Py)
    after
        stop_sessiond(Started)
    end.

capture_once(Config, Tag, Env, Lttng, Py) ->
    %% (A name of this OS process: a session a failed run left in the
    %% daemon does not make the next run fail.)
    Name = "bp_test_" ++ os:getpid() ++ "_" ++
        integer_to_list(erlang:unique_integer([positive])),
    try capture_once(Config, Tag, Env, Lttng, Py, Name)
    after
        %% Destroyed already when all went well: then this fails, unseen.
        catch sh(Env, [Lttng, "destroy", Name])
    end.

capture_once(Config, Tag, Env, Lttng, Py, Name) ->
    LDir = ?L:dir(Config, Tag ++ "_lttng"),
    FDir = ?L:dir(Config, Tag ++ "_file"),
    sh(Env, [Lttng, "create", Name, "--output=" ++ LDir]),
    sh(Env, [Lttng, "enable-event", "-u", "beamprobe:*", "-s", Name]),
    sh(Env, [Lttng, "start", Name]),
    N = 50,
    S = ?L:start(#{calls => [?ADD], return => true,
                   output => [{file, FDir}, lttng]}),
    %% A second session into LTTng on the same calls: each event fired
    %% twice, told apart by its `session' field.
    S2 = ?L:start(#{calls => [?ADD], return => true, output => lttng}),
    Worker = spawn(fun() -> [beamprobe_workload:add(I, 1)
                             || I <- lists:seq(1, N)],
                            receive stop -> ok end end),
    timer:sleep(300),
    Sum = ?L:stop(S),
    Sum2 = ?L:stop(S2),
    exit(Worker, kill),
    sh(Env, [Lttng, "stop", Name]),
    sh(Env, [Lttng, "destroy", Name]),
    File = py_events(Py, "file", FDir),
    Both = py_events(Py, "lttng", LDir),
    #{lttng_session := Id1} = Sum,
    %% (An LTTng-only session's output says so: it said [] before.)
    #{lttng_session := Id2, output := [lttng]} = Sum2,
    ?assertNotEqual(Id1, Id2),
    Of = fun(Id) ->
                 T = iolist_to_binary(["session=", integer_to_list(Id)]),
                 [[Nm, Ts, K | Fs] || [Nm, Ts, K, Sess | Fs] <- Both,
                                      Sess =:= T]
         end,
    Lt = Of(Id1),
    ?assertEqual(length(Both), length(Lt) + length(Of(Id2))),
    %% The second session's events: the same calls and returns (its
    %% process and drops events are its own, written at its own times).
    Calls2 = fun(L) -> lists:sort([E || E = [Nm | _] <- L,
                                        Nm =:= <<"call">> orelse
                                            Nm =:= <<"return_from">>])
             end,
    ?assertEqual(Calls2(Lt), Calls2(Of(Id2))),
    ?assertEqual(2 * N, length(Calls2(Of(Id2)))),
    ct:log("~s: file: ~b events, lttng: ~b events, summary ~p",
           [Tag, length(File), length(Lt), Sum]),
    Calls = [E || E = [<<"call">> | _] <- Lt],
    ?assertEqual(N, length(Calls)),
    ?assertEqual(N, length([E || E = [<<"return_from">> | _] <- Lt])),
    %% The same events, field for field, the drops events at the end
    %% included (LTTng used to get none: its trace did not say the
    %% session's losses).
    ?assertNotEqual([], [E || E = [<<"drops">> | _] <- Lt]),
    ?assertEqual(lists:sort(File), lists:sort(Lt)),
    [_, _, _ | Fields] = hd(Calls),
    ?assert(lists:member(<<"mfa=beamprobe_workload:add/2">>, Fields)).

lttng_env(Prefix) ->
    case Prefix of
        "/usr" -> [];
        _ ->
            Lib = hd(filelib:wildcard(filename:join([Prefix, "lib", "*",
                                                     "liblttng-ctl.so.0"]))),
            [{"LD_LIBRARY_PATH", filename:dirname(Lib)},
             {"LTTNG_SESSION_CONFIG_XSD_PATH",
              filename:join([Prefix, "share", "xml", "lttng"])}]
    end.

%% A session daemon for this user, started unless one runs: its pid, or
%% none.
ensure_sessiond(Prefix, Env) ->
    case beamprobe_lttng:check() of
        ok -> none;
        {error, {lttng_unavailable, _}} ->
            Lib = proplists:get_value("LD_LIBRARY_PATH", Env, ""),
            Extra = case Lib of
                        "" -> [];
                        _ -> ["--consumerd64-path=" ++
                                  filename:join([Lib, "lttng", "libexec",
                                                 "lttng-consumerd"]),
                              "--consumerd64-libdir=" ++ Lib]
                    end,
            sh(Env, [filename:join([Prefix, "bin", "lttng-sessiond"]),
                     "--daemonize", "--no-kernel" | Extra]),
            ?L:wait_until(fun() -> beamprobe_lttng:check() =:= ok end, 10000),
            Home = case os:getenv("LTTNG_HOME") of
                       false -> os:getenv("HOME");
                       H -> H
                   end,
            PidFiles = [filename:join([Home, ".lttng", "lttng-sessiond.pid"]),
                        "/var/run/lttng/lttng-sessiond.pid"],
            case [F || F <- PidFiles, filelib:is_regular(F)] of
                [F | _] ->
                    {ok, B} = file:read_file(F),
                    string:trim(binary_to_list(B));
                [] -> none
            end
    end.

stop_sessiond(none) -> ok;
stop_sessiond(Pid) -> _ = os:cmd("kill " ++ Pid), ok.

sh(Env, [Cmd | Args]) ->
    Port = open_port({spawn_executable, Cmd},
                     [{args, Args}, {env, Env}, binary, exit_status,
                      stderr_to_stdout]),
    case cli_collect(Port, []) of
        {0, Out} -> Out;
        {St, Out} -> ct:fail({command_failed, [Cmd | Args], St, Out})
    end.

cli_collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> cli_collect(Port, [D | Acc]);
        {Port, {exit_status, St}} -> {St, iolist_to_binary(lists:reverse(Acc))}
    after 60000 -> ct:fail(command_timeout)
    end.

py_events(Py, Mode, Dir) ->
    Script = filename:join(filename:dirname(code:which(?MODULE)),
                           "lttng_events.py"),
    Script1 = case filelib:is_regular(Script) of
                  true -> Script;
                  false -> filename:join([filename:dirname(filename:dirname(
                                                              code:which(beamprobe))),
                                          "test", "lttng_events.py"])
              end,
    Out = sh([], [Py, Script1, Mode, Dir]),
    [binary:split(L, <<"\t">>, [global])
     || L <- binary:split(Out, <<"\n">>, [global, trim_all])].

%%% ------------------------------------------------------------------------

%% (File in the case's directory: a /tmp name counted by this node alone
%% was another test run's too on the same machine.)
json_events(File, Json) ->
    Py = "import json,sys\n"
         "d=json.load(sys.stdin)\n"
         "for e in d['traceEvents']:\n"
         "  print(repr(e.get('ph')), repr(e.get('name')), "
         "json.dumps(e.get('args',{}).get('value')))\n",
    ok = file:write_file(File, Json),
    Out = os:cmd("python3 -c \"" ++ escape(Py) ++ "\" < " ++ File),
    ok = file:delete(File),
    [parse_py(L) || L <- string:split(Out, "\n", all), L =/= ""].

escape(S) -> lists:flatmap(fun($") -> "\\\""; (C) -> [C] end, S).

parse_py(L) ->
    [Ph, Rest] = string:split(L, " "),
    {Name, Val} = split_name(Rest),
    M = #{<<"ph">> => unq(Ph), <<"name">> => unq(Name)},
    case Val of
        "null" -> M;
        _ -> M#{<<"args">> => #{<<"value">> => num(Val)}}
    end.

split_name(S) ->
    I = string:rchr(S, $\s),
    {lists:sublist(S, I - 1), lists:nthtail(I, S)}.

unq("None") -> undefined;
unq([Q | T]) when Q =:= $'; Q =:= $" -> unicode:characters_to_binary(lists:droplast(T)).

num(S) ->
    try list_to_integer(S) catch _:_ -> list_to_float(S) end.

%% "Just watch long GCs": a session with only `monitor' (no calls, no
%% events, no procs) starts, traces no process, and writes the long GC.
monitor_only(Config) ->
    Dir = ?L:dir(Config, "t"),
    Other = spawn(fun() -> receive stop -> ok end end),
    S = ?L:start(#{monitor => #{long_gc => 1}, output => {file, Dir}}),
    %% no process got a trace flag from it
    ?assertEqual({flags, []}, erlang:trace_info(Other, flags)),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    P = big_gc(),
    timer:sleep(100),
    #{events := N} = ?L:stop(S),
    exit(P, kill),
    exit(Other, kill),
    ?assert(N >= 1),
    Mine = [E || E <- monitor_events(?L:trace(Dir), long_gc),
                 ?L:field(E, "process") =:= pid_text(P)],
    ?assertNotEqual([], Mine),
    ?assertEqual([], ?L:events(?L:trace(Dir), "call")),
    ?assertEqual(undefined, erlang:system_monitor()),
    ?assertEqual([], beamprobe:list()).

%% Waits (at most 10 s) until session S has written N events: a loaded
%% machine under the ASan NIF wrote fewer than 2 samples of a 20 ms
%% interval in a fixed 200 ms.
wait_events(S, N) ->
    Written = fun W(0) -> ct:fail({samples_not_written, N, beamprobe:info(S)});
                  W(K) -> case beamprobe:info(S) of
                              {ok, #{events := E}} when E >= N -> ok;
                              _ -> timer:sleep(50), W(K - 1)
                          end
              end,
    Written(200).

%% A session with only `sample' writes its counters.
sample_only(Config) ->
    Dir = ?L:dir(Config, "t"),
    S = ?L:start(#{sample => #{interval => 20, what => [process_count]},
                   output => {file, Dir}}),
    wait_events(S, 2),
    _ = ?L:stop(S),
    Samples = [E || E <- ?L:events(?L:trace(Dir), "sample"),
                    ?L:field(E, "counter") =:= <<"process_count">>],
    ?assert(length(Samples) >= 2),
    %% and with neither, still refused
    ?assertMatch({error, {nothing_to_trace, _}},
                 beamprobe:start(#{output => {file, ?L:dir(Config, "u")}})).

%% A port that gets busy (a `sleep' that never reads its stdin, a small
%% busy limit): the process writing to it is suspended, and the VM's
%% busy_port report is a monitor event naming the process and the port.
busy_port_event(Config) ->
    Dir = ?L:dir(Config, "t"),
    S = ?L:start(#{monitor => #{busy_port => true}, output => {file, Dir}}),
    Self = self(),
    Writer = spawn(fun() ->
                           Port = open_port({spawn, "sleep 60"},
                                            [binary, {busy_limits_port,
                                                      {4096, 8192}}]),
                           Self ! {port, self(), Port},
                           Chunk = binary:copy(<<"x">>, 65536),
                           catch [port_command(Port, Chunk)
                                  || _ <- lists:seq(1, 64)],
                           receive stop -> ok end
                   end),
    Port = receive {port, Writer, Pt} -> Pt end,
    ok = wait_status(Writer, suspended, 100),
    timer:sleep(100),
    _ = ?L:stop(S),
    {os_pid, OsPid} = erlang:port_info(Port, os_pid),
    _ = os:cmd("kill " ++ integer_to_list(OsPid)),
    exit(Writer, kill),
    Busy = [E || E <- monitor_events(?L:trace(Dir), busy_port),
                 ?L:field(E, "process") =:= pid_text(Writer)],
    ct:log("~p", [Busy]),
    ?assertNotEqual([], Busy),
    [E | _] = Busy,
    ?assertEqual(list_to_binary(erlang:port_to_list(Port)),
                 ?L:field(E, "port")),
    ?assertEqual(undefined, erlang:system_monitor()).

wait_status(P, Want, 0) -> {not_reached, Want, erlang:process_info(P, status)};
wait_status(P, Want, N) ->
    case erlang:process_info(P, status) of
        {status, Want} -> ok;
        _ -> timer:sleep(20), wait_status(P, Want, N - 1)
    end.

%% busy_dist_port: a peer node stopped (SIGSTOP) while a process sends it
%% megabytes: the distribution buffer fills up past its busy limit, the
%% sender is suspended, and the report is a monitor event.
busy_dist_port_event(Config) ->
    case node() of
        nonode@nohost -> {skip, "this node is not distributed"};
        _ -> busy_dist_port_event(Config, ?L:dir(Config, "t"))
    end.

busy_dist_port_event(_Config, Dir) ->
    {ok, Peer, Node} = peer:start_link(#{name => peer:random_name(?MODULE)}),
    true = net_kernel:connect_node(Node),
    OsPid = erpc:call(Node, os, getpid, []),
    Sink = spawn(Node, timer, sleep, [infinity]),
    S = ?L:start(#{monitor => #{busy_dist_port => true},
                   output => {file, Dir}}),
    _ = os:cmd("kill -STOP " ++ OsPid),
    Sender = spawn(fun() ->
                           B = binary:copy(<<"y">>, 1 bsl 20),
                           [Sink ! B || _ <- lists:seq(1, 64)],
                           receive stop -> ok end
                   end),
    R = wait_status(Sender, suspended, 250),
    timer:sleep(100),
    _ = ?L:stop(S),
    _ = os:cmd("kill -CONT " ++ OsPid),
    exit(Sender, kill),
    peer:stop(Peer),
    ok = R,
    Busy = [E || E <- monitor_events(?L:trace(Dir), busy_dist_port),
                 ?L:field(E, "process") =:= pid_text(Sender)],
    ct:log("~p ~p", [Node, Busy]),
    ?assertNotEqual([], Busy),
    [E | _] = Busy,
    %% the port field names the distribution port (#Port<...>)
    ?assertMatch(<<"#Port<", _/binary>>, ?L:field(E, "port")).

%% A heap of millions of words after a GC: a large_heap monitor event
%% naming the process, with the heap sizes the VM gives.
large_heap_event(Config) ->
    Dir = ?L:dir(Config, "t"),
    S = ?L:start(#{monitor => #{large_heap => 1000000}, output => {file, Dir}}),
    P = big_gc(),
    timer:sleep(100),
    _ = ?L:stop(S),
    exit(P, kill),
    Mine = [E || E <- monitor_events(?L:trace(Dir), large_heap),
                 ?L:field(E, "process") =:= pid_text(P)],
    ct:log("~p", [Mine]),
    ?assertNotEqual([], Mine),
    [E | _] = Mine,
    ?assertNotEqual(nomatch, binary:match(?L:field(E, "detail"), <<"heap_block_size">>)),
    ?assertEqual(undefined, erlang:system_monitor()).

%% beamprobe's monitor process killed (or crashed by a message of the
%% report's shape that any process can send): it comes back with the
%% sessions that had joined, sets the system monitor again, tells each
%% session in its trace that reports of the meantime are missing, and at
%% the end gives the other tool's monitor back.  It used to come back
%% empty: sessions silently got no more reports, and the other tool's
%% monitor was never given back.
owner_killed_resumes(Config) ->
    Dir = ?L:dir(Config, "t"),
    Tool = spawn(fun() -> receive stop -> ok end end),
    erlang:system_monitor(Tool, [{long_gc, 500}]),
    S = ?L:start(spec(Dir, #{monitor => #{long_gc => 1}, force => true})),
    Old = whereis(beamprobe_monitor),
    %% A malformed report is ignored, not a crash.
    Old ! {monitor, self(), "x", []},
    Old ! {monitor, self(), long_gc, not_a_list},
    timer:sleep(100),
    ?assertEqual(Old, whereis(beamprobe_monitor)),
    exit(Old, kill),
    _ = ?L:wait_until(fun() ->
                              case whereis(beamprobe_monitor) of
                                  P when is_pid(P), P =/= Old ->
                                      {P, [{long_gc, 1}]} =:=
                                          erlang:system_monitor();
                                  _ -> false
                              end
                      end, 5000),
    {ok, #{sessions := 1}} = beamprobe_monitor:stats(),
    P = big_gc(),
    timer:sleep(100),
    _ = ?L:stop(S),
    exit(P, kill),
    ?assertEqual({Tool, [{long_gc, 500}]}, erlang:system_monitor()),
    Evs = ?L:trace(Dir),
    ?assertMatch([_], [E || E <- ?L:events(Evs, "tampered"),
                            ?L:field(E, "how") =:= <<"restarted">>]),
    ?assertNotEqual([], [E || E <- monitor_events(Evs, long_gc),
                              ?L:field(E, "process") =:= pid_text(P)]),
    erlang:system_monitor(undefined),
    exit(Tool, kill).

%% monitor => #{busy_port => false}: asks for no report, so it neither
%% switches the node's monitor off nor is refused because a tool holds it.
false_flags_ask_nothing(Config) ->
    Tool = spawn(fun() -> receive stop -> ok end end),
    erlang:system_monitor(Tool, [{long_gc, 500}]),
    S = ?L:start(spec(?L:dir(Config, "t"),
                      #{monitor => #{busy_port => false,
                                     busy_dist_port => false}})),
    ?assertEqual({Tool, [{long_gc, 500}]}, erlang:system_monitor()),
    {ok, #{sessions := 0}} = beamprobe_monitor:stats(),
    _ = ?L:stop(S),
    ?assertEqual({Tool, [{long_gc, 500}]}, erlang:system_monitor()),
    erlang:system_monitor(undefined),
    exit(Tool, kill).
