%%% @doc What a session costs the traced node: a tail-recursive server
%%% loop traced with the default options keeps a bounded stack (return and
%%% exception tracing are off unless asked, and asking is shown to cost
%%% stack growth); the owner's death clears every flag quickly on a node
%%% with 200 k processes without touching another tool's tracer.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_safety_SUITE -logdir _build/ct_logs
-module(beamprobe_safety_SUITE).
-behaviour(gen_server).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([default_keeps_tail_loop/1, return_grows_tail_loop/1,
         owner_death_many_procs/1, second_session_many_procs/1,
         stop_unrelated_pid/1,
         shell_return_only_when_asked/1, match_spec_asks_return/1,
         rings_mapped_ahead_flight_recorder/1, rings_mapped_ahead_drained/1,
         dirty_scheduler_toggles/1]).
%% The traced gen_server, and what the peer node runs.
-export([init/1, handle_call/3, handle_cast/2]).
-export([peer_owner_death/1, tail_loop/2, null_io/0, hit/1,
         peer_toggles/2, log/2, peer_second_session/1]).

-define(L, beamprobe_test_lib).
-define(CALLS, 100000).

suite() -> [{timetrap, {seconds, 180}}].

all() ->
    [default_keeps_tail_loop, return_grows_tail_loop,
     shell_return_only_when_asked, match_spec_asks_return,
     stop_unrelated_pid,
     rings_mapped_ahead_flight_recorder, rings_mapped_ahead_drained,
     owner_death_many_procs, second_session_many_procs,
     dirty_scheduler_toggles].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    _ = [beamprobe:stop(S) || S <- beamprobe:list()],
    erlang:trace_pattern({gen_server, '_', '_'}, false, [local]),
    ok.

%%% ------------------------------------------------------------------------
%%% Issue 7 item 2: the defaults never break a tail loop
%%% ------------------------------------------------------------------------

%% A gen_server traced with the default options (its loop functions
%% included) for 100 k calls keeps its stack as it was.
default_keeps_tail_loop(Config) ->
    {Before, After, Sum} = traced_server(Config, "default", #{}),
    ct:log("stack ~p -> ~p words; ~p", [Before, After, Sum]),
    ?assert(maps:get(events, Sum) + maps:get(total, maps:get(dropped, Sum))
            >= ?CALLS),
    ?assert(After < Before + 1000).

%% The same with `return => true': each loop iteration keeps a frame, the
%% cost the documentation names (so the test above is not vacuous).
return_grows_tail_loop(Config) ->
    {Before, After, Sum} = traced_server(Config, "return",
                                         #{return => true}),
    ct:log("stack ~p -> ~p words; ~p", [Before, After, Sum]),
    ?assert(After > Before + ?CALLS).

traced_server(Config, Name, Opts) ->
    {ok, P} = gen_server:start(?MODULE, [], []),
    {stack_size, Before} = process_info(P, stack_size),
    Spec = maps:merge(#{procs => [P],
                        calls => [{gen_server, loop, '_'},
                                  {?MODULE, handle_call, 3}],
                        output => {file, ?L:dir(Config, Name)}}, Opts),
    S = ?L:start(Spec),
    [ok = gen_server:call(P, ping) || _ <- lists:seq(1, ?CALLS)],
    {stack_size, After} = process_info(P, stack_size),
    Sum = ?L:stop(S),
    gen_server:stop(P),
    {Before, After, Sum}.

%% With the default options, a call pattern whose own match spec asks for
%% `exception_trace' gets its return_from events (asking per pattern is
%% how to trace returns of functions that return), the others none; a
%% wider pattern of the same session (`{M, '_', '_'}') does not undo it.
match_spec_asks_return(Config) ->
    Dir = ?L:dir(Config, "ms"),
    {ok, P} = gen_server:start(?MODULE, [], []),
    S = ?L:start(#{procs => [P],
                   calls => [{gen_server, loop, '_'},
                             {{?MODULE, handle_call, 3},
                              [{'_', [], [{exception_trace}]}]},
                             {?MODULE, '_', '_'}],
                   output => {file, Dir}}),
    [ok = gen_server:call(P, ping) || _ <- lists:seq(1, 10)],
    _ = ?L:stop(S),
    gen_server:stop(P),
    Evs = ?L:trace(Dir),
    Rets = ?L:events(Evs, "return_from", P),
    ?assertEqual(10, length(Rets)),
    ?assert(lists:all(fun(E) -> ?L:field(E, "mfa") =:=
                                    <<"beamprobe_safety_SUITE:handle_call/3">>
                      end, Rets)).

%% The shell API return-traces only the patterns that ask (`-> return'):
%% a loop whose tail call is traced without it keeps its stack; with it,
%% the stack grows (the rate limit drops the events, not the tracing).
shell_return_only_when_asked(_Config) ->
    Io = spawn_link(?MODULE, null_io, []),
    Pat = "beamprobe_safety_SUITE:tail_loop/2",
    Opts = #{io_server => Io, force => true, time => 60000},
    {B1, A1} = shell_loop(Pat, Opts),
    {B2, A2} = shell_loop(Pat ++ " -> return", Opts),
    ct:log("no return: ~p -> ~p; -> return: ~p -> ~p", [B1, A1, B2, A2]),
    ?assert(A1 < B1 + 1000),
    ?assert(A2 > B2 + ?CALLS).

shell_loop(Pat, Opts) ->
    Parent = self(),
    P = spawn_link(fun() -> receive go -> tail_loop(?CALLS, Parent) end end),
    {stack_size, Before} = process_info(P, stack_size),
    1 = beamprobe:calls(Pat, {1, 60000}, Opts),
    P ! go,
    After = receive {looped, S} -> S after 60000 -> timeout end,
    ok = beamprobe:clear(),
    {Before, After}.

%% @private A loop that tail-calls itself through the export.
tail_loop(0, Parent) ->
    {stack_size, S} = process_info(self(), stack_size),
    Parent ! {looped, S};
tail_loop(N, Parent) ->
    ?MODULE:tail_loop(N - 1, Parent).

%% @private An io server that accepts and discards everything.
null_io() ->
    receive
        {io_request, From, ReplyAs, _} ->
            From ! {io_reply, ReplyAs, ok},
            null_io();
        _ -> null_io()
    end.

init([]) -> {ok, 0}.
handle_call(stop, _From, N) -> {stop, normal, {ok, #{}}, N};
handle_call(ping, _From, N) -> {reply, ok, N + 1}.
handle_cast(_, N) -> {noreply, N}.

%%% ------------------------------------------------------------------------
%%% Issue 7 item 8: stop/1, info/1, dump/1 only ever call a session
%%% ------------------------------------------------------------------------

%% A gen_server that would stop on `stop' (and answer like a session) is
%% not a session: stop/1 leaves it running; so do info/1 and dump/1.
stop_unrelated_pid(Config) ->
    {ok, P} = gen_server:start(?MODULE, [], []),
    ?assertEqual({error, not_found}, beamprobe:stop(P)),
    ?assertEqual({error, not_found}, beamprobe:info(P)),
    ?assertEqual({error, not_found}, beamprobe:dump(P)),
    ?assert(is_process_alive(P)),
    ?assertEqual({error, not_found}, beamprobe:stop(self())),
    %% A real session still stops.
    S = ?L:start(#{procs => [P], calls => [{?MODULE, handle_call, 3}],
                   output => {file, ?L:dir(Config, "s")}}),
    ok = gen_server:call(P, ping),
    ?assertMatch(#{events := 1}, ?L:stop(S)),
    ?assertEqual({error, not_found}, beamprobe:stop(S)),
    gen_server:stop(P).

%%% ------------------------------------------------------------------------
%%% Issue 7 item 8: owner death on a node with many processes
%%% ------------------------------------------------------------------------

%% A peer node with 500 k processes (issue 7's largest case): the owner
%% of a `procs => existing' session (the node-wide removal) is killed;
%% within 1 s no process has beamprobe's tracer any more: 1 s of the
%% node's own time, without the time it waited for a CPU another
%% process had (a loaded CI machine: 1.3-2.5 s of wall time, of which
%% 0.9-1.8 s waiting, for 0.4-0.7 s of work).  Two processes
%% traced by another tool keep their tracer: one traced before the
%% session started (beamprobe_each knows it: not one error report names
%% it), one after (unknown to beamprobe on a node this big: the VM
%% refuses to clear it, with its one error report).
owner_death_many_procs(_Config) ->
    R = on_big_peer(?FUNCTION_NAME, peer_owner_death, 500000),
    #{cleared_ms := Ms, waited_ms := Waited, other_tracer := Other,
      left := Left, before_tracer := Before,
      one_tracer_reports := Reports} = R,
    ?assertEqual(0, Left),
    ?assertMatch({tracer, T} when T =/= [], Other),
    ?assertMatch({tracer, T} when T =/= [], Before),
    ?assertEqual(1, Reports),
    %% Measured 0.65 s for 500 k here (src/beamprobe_each.erl).
    %% (the figures in the reason: CI prints only its first terms)
    Ms - Waited =< 1000 orelse
        ct:fail("flags cleared in ~b ms, ~b ms of it waiting for a CPU: "
                "~b ms of work", [Ms, Waited, Ms - Waited]).

%% Runs ?MODULE:F(N) on a new peer node made for N processes, logs and
%% returns its result.
on_big_peer(Name, F, N) ->
    Ebin = filename:dirname(code:which(beamprobe)),
    Test = filename:dirname(code:which(?MODULE)),
    {ok, Peer, Node} = peer:start_link(
                         #{name => peer:random_name(Name),
                           args => ["+P", integer_to_list(4 * N),
                                    "-pa", Ebin, "-pa", Test]}),
    try
        R = erpc:call(Node, ?MODULE, F, [N], 120000),
        ct:log("~p", [R]),
        R
    after
        peer:stop(Peer)
    end.

%% A second node-wide session on a peer node of 100 k processes, all
%% traced by the first (src/beamprobe_each.erl: the flags are added
%% without asking each process its tracer, the other tools' processes
%% being those the session just found): every process gets both
%% sessions' flags; a process another tool traced before either session
%% keeps its tracer, and no error report is logged; after both stop no
%% process has beamprobe's tracer.
second_session_many_procs(_Config) ->
    R = on_big_peer(?FUNCTION_NAME, peer_second_session, 100000),
    ?assertMatch(#{both_flags := 1000, other_tracer := {tracer, T},
                   one_tracer_reports := 0, left := 0}
                   when is_pid(T), R).

%% @private Runs on the peer node.
-spec peer_second_session(pos_integer()) -> map().
peer_second_session(N) ->
    {Idle, Dbg} = peer_setup(N),
    Other = spawn(fun() -> receive stop -> ok end end),
    1 = erlang:trace(Other, true, [send, {tracer, Dbg}]),
    Dir = "/tmp/bp-second-" ++ os:getpid(),
    {ok, S1} = beamprobe:start(#{procs => all, events => [send],
                                 output => {file, Dir ++ "-1"}}),
    {ok, S2} = beamprobe:start(#{procs => all, events => ['receive'],
                                 output => {file, Dir ++ "-2"}}),
    Sample = [lists:nth(I * (N div 1000), Idle) || I <- lists:seq(1, 1000)],
    Both = length([P || P <- Sample,
                        {flags, F} <- [erlang:trace_info(P, flags)],
                        lists:member(send, F), lists:member('receive', F)]),
    OtherT = erlang:trace_info(Other, tracer),
    _ = beamprobe:stop(S2),
    _ = beamprobe:stop(S1),
    Left = length([P || P <- processes(), traced_by_beamprobe(P)]),
    _ = [P ! stop || P <- [Other | Idle]],
    timer:sleep(200),
    ok = logger:remove_handler(bp_capture),
    _ = [file:del_dir_r(Dir ++ X) || X <- ["-1", "-2"]],
    #{both_flags => Both, other_tracer => OtherT, left => Left,
      one_tracer_reports => one_tracer_reports(0)}.

%% OTP 25.2 crashes (SIGSEGV on a dirty I/O scheduler, erlang/otp#6448)
%% when flags of every process are changed in one pass of the VM while
%% processes run dirty NIFs; beamprobe changes them one process at a time
%% (src/beamprobe_each.erl).  On a peer node, 8 processes call
%% file:read_file_info/1 (a dirty I/O NIF) in a loop while the hub's
%% `send' flag is set on `all' and cleared, as the janitor does it, for
%% 25 s: the peer must still answer.  (With the clear in one pass the
%% peer died within 2 s; with set and clear in one pass, `bulk' here, the
%% do-nothing tracer's VM within 22 s in 4 runs of 4: docs/design.md,
%% "Dirty schedulers".)
dirty_scheduler_toggles(_Config) ->
    Ebin = filename:dirname(code:which(beamprobe)),
    Test = filename:dirname(code:which(?MODULE)),
    {ok, Peer, Node} = peer:start_link(
                         #{name => peer:random_name(?FUNCTION_NAME),
                           args => ["-pa", Ebin, "-pa", Test]}),
    try
        R = (catch erpc:call(Node, ?MODULE, peer_toggles, [each, 25000],
                             120000)),
        ct:log("~p", [R]),
        ?assertEqual(pong, net_adm:ping(Node)),
        ?assertMatch(#{toggles := N} when N > 100, R)
    after
        catch peer:stop(Peer)
    end.

%% @private Runs on the peer node: Mode each (beamprobe_each) or bulk
%% (the VM's one pass, to show the crash by hand).
peer_toggles(Mode, Ms) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    Dir = "/tmp/bp-toggles-" ++ os:getpid(),
    %% A live hub member, so that the tracer says `trace'.
    {ok, S} = beamprobe:start(#{procs => [self()], events => [gc],
                                output => {file, Dir}}),
    Io = [spawn(fun Loop() -> _ = file:read_file_info("/tmp"), Loop() end)
          || _ <- lists:seq(1, 8)],
    T = {tracer, beamprobe_nif, beamprobe_hub},
    End = erlang:monotonic_time(millisecond) + Ms,
    N = toggle(Mode, T, End, 0),
    _ = [exit(P, kill) || P <- Io],
    _ = beamprobe_each:trace(all, false, [all, T]),
    {ok, _} = beamprobe:stop(S),
    os:cmd("rm -rf " ++ Dir),
    #{toggles => N}.

toggle(Mode, T, End, N) ->
    case erlang:monotonic_time(millisecond) > End of
        true -> N;
        false ->
            _ = case Mode of
                    each -> beamprobe_each:trace(all, true, [send, T]),
                            beamprobe_each:trace(all, false, [send, T]);
                    bulk -> erlang:trace(all, true, [send, T]),
                            erlang:trace(all, false, [send, T])
                end,
            toggle(Mode, T, End, N + 1)
    end.

%% @private Runs on the peer node.
peer_owner_death(N) ->
    {Idle, Dbg} = peer_setup(N),
    %% Another tool's tracer on a process before the session starts.
    Before = spawn(fun() -> receive stop -> ok end end),
    1 = erlang:trace(Before, true, ['receive', {tracer, Dbg}]),
    Parent = self(),
    Dir = "/tmp/bp-owner-death-" ++ os:getpid(),
    Owner = spawn(fun() ->
                          R = beamprobe:start(#{procs => existing,
                                                events => [gc],
                                                output => {file, Dir}}),
                          Parent ! {started, R},
                          receive never -> ok end
                  end),
    {ok, S} = receive {started, R} -> R after 60000 -> timeout end,
    true = traced_by_beamprobe(hd(Idle)),
    %% Another tool's tracer on a process spawned after (not the session's).
    Other = spawn(fun() -> receive stop -> ok end end),
    1 = erlang:trace(Other, true, [send, {tracer, Dbg}]),
    Ref = monitor(process, S),
    Sched0 = ?L:sched_times(),
    T0 = erlang:monotonic_time(millisecond),
    exit(Owner, kill),
    Sample = [hd(Idle), lists:nth(N div 2, Idle), lists:last(Idle)],
    wait_untraced(Sample, T0 + 60000),
    Ms = erlang:monotonic_time(millisecond) - T0,
    {Waited, Threads} = ?L:waited_ms(Sched0, ?L:sched_times()),
    receive {'DOWN', Ref, process, S, _} -> ok after 60000 -> ok end,
    wait_janitor(),
    Left = length([P || P <- processes(), traced_by_beamprobe(P)]),
    OtherT = erlang:trace_info(Other, tracer),
    BeforeT = erlang:trace_info(Before, tracer),
    _ = [P ! stop || P <- [Other, Before | Idle]],
    timer:sleep(200),
    ok = logger:remove_handler(bp_capture),
    _ = file:del_dir_r(Dir),
    #{cleared_ms => Ms, waited_ms => Waited, threads => Threads,
      left => Left, other_tracer => OtherT,
      before_tracer => BeforeT, one_tracer_reports => one_tracer_reports(0)}.

%% On the peer: beamprobe started, the logger's events sent to this
%% process (one_tracer_reports/1), N idle processes and a tracer process
%% of "another tool" that takes every message.
peer_setup(N) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    ok = logger:add_handler(bp_capture, ?MODULE,
                            #{config => #{pid => self()}}),
    Idle = [spawn(fun() -> receive stop -> ok end end)
            || _ <- lists:seq(1, N)],
    {Idle, spawn(fun Sink() -> receive _ -> Sink() end end)}.

%% The error reports "can only have one tracer per process" the peer's
%% logger received (the VM's refusal to change another tracer's process).
one_tracer_reports(N) ->
    receive
        {bp_log, Text} ->
            case string:find(Text, "can only have one tracer") of
                nomatch -> one_tracer_reports(N);
                _ -> one_tracer_reports(N + 1)
            end
    after 0 -> N
    end.

%% @private A logger handler on the peer: sends each event's text to the
%% process in its config.
-spec log(logger:log_event(), logger:handler_config()) -> ok.
log(#{msg := Msg}, #{config := #{pid := Pid}}) ->
    Text = case Msg of
               {string, S} -> unicode:characters_to_list(S);
               {report, R} -> io_lib:format("~p", [R]);
               {Format, Args} -> io_lib:format(Format, Args)
           end,
    Pid ! {bp_log, lists:flatten(Text)},
    ok.

%% The removal is one pass over the process table: when the first, a
%% middle and the last process are clear, the pass is over (the full
%% count after checks it).
wait_untraced(Sample, Deadline) ->
    case lists:any(fun traced_by_beamprobe/1, Sample) of
        true ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> ok;
                false -> timer:sleep(5), wait_untraced(Sample, Deadline)
            end;
        false -> ok
    end.

traced_by_beamprobe(P) ->
    case erlang:trace_info(P, tracer) of
        {tracer, {beamprobe_nif, _}} -> true;
        _ -> false
    end.

%% The janitor handles the session's 'DOWN' message after the session
%% finished: a call to it returns after.
wait_janitor() ->
    _ = sys:get_state(beamprobe_janitor),
    ok.

%%% ------------------------------------------------------------------------
%%% The traced process takes no page faults on beamprobe's rings
%%% (c_src/bp_prefault.h: the collector maps them ahead)
%%% ------------------------------------------------------------------------

-define(RING, (8 * 1024 * 1024)).
-define(HITS, 400000).
-define(AHEAD, (1024 * 1024)).  % BP_PREFAULT_AHEAD
%% Events that may wait in the collector's packet (64 KiB, ~1,050 of
%% these) rather than in the ring: not counted as written yet.
-define(UNWRITTEN, 2000).

%% The traced function.
-spec hit(term()) -> term().
hit(X) -> X.

hits(0) -> ok;
hits(N) -> _ = ?MODULE:hit(N), hits(N - 1).

%% The minor page faults of the node's scheduler threads so far (field 10
%% of /proc/self/task/T/stat of each thread named N_scheduler): the
%% traced process's, not those of the collector's mapping.
minflt() ->
    {ok, Ts} = file:list_dir("/proc/self/task"),
    lists:sum([task_minflt("/proc/self/task/" ++ T) || T <- Ts]).

task_minflt(Dir) ->
    case {file:read_file(Dir ++ "/comm"), file:read_file(Dir ++ "/stat")} of
        {{ok, Comm}, {ok, Stat}} ->
            case binary:match(Comm, <<"_scheduler">>) of
                nomatch -> 0;
                _ ->
                    [_, Rest] = binary:split(Stat, <<") ">>),
                    binary_to_integer(
                      lists:nth(8, binary:split(Rest, <<" ">>, [global])))
            end;
        _ -> 0   % a thread that just ended
    end.

%% A process that runs hits(N) for each {run, N} and answers with the
%% minor faults of the scheduler threads meanwhile.
hitter() ->
    Parent = self(),
    spawn_link(fun Loop() ->
                       receive
                           {run, N} ->
                               F0 = minflt(),
                               hits(N),
                               Parent ! {ran, self(), minflt() - F0},
                               Loop()
                       end
               end).

run_hits(W, N) ->
    W ! {run, N},
    receive {ran, W, Faults} -> Faults after 60000 -> error(hits_timeout) end.

%% N hits in bursts of 5,000 (≈ 240 KiB of records, under half the hot
%% part), each followed by Pause(Done) (Done: the hits of this run so
%% far): the collector is a thread of its own that a loaded machine may
%% hold back, and what is checked is that it maps ahead and drains
%% between bursts, not that it outruns a tight loop.  Without its mapping
%% ahead the producer still faults on every new page.  The faults, summed.
run_paced(W, N, Pause) -> run_paced(W, N, Pause, 0).

run_paced(W, N, _Pause, _Done) when N =< 5000 -> run_hits(W, N);
run_paced(W, N, Pause, Done) ->
    F = run_hits(W, 5000),
    ok = Pause(Done + 5000),
    F + run_paced(W, N - 5000, Pause, Done + 5000).

%% A few collector periods (2 ms, POLL_NS).
pause(_Done) -> timer:sleep(5).

%% Until session S has written all but ?UNWRITTEN of its events (Before
%% before the run, and Done since): the ring holds less than half its hot
%% part when the next burst starts.  (A fixed 5 ms pause let a collector
%% held back on a loaded machine fall 3 MiB behind: the producer went on
%% into the cold part, which was then mapped, 4.2 MiB in all, and the
%% bound below failed although the collector did what it should.)
drained(S, Before) ->
    fun(Done) -> drained(S, Before + Done - ?UNWRITTEN, Done,
                         erlang:monotonic_time(millisecond) + 30000)
    end.

drained(S, Want, Done, Deadline) ->
    {ok, #{events := E, dropped := #{total := D}}} = beamprobe:info(S),
    Late = erlang:monotonic_time(millisecond) > Deadline,
    if E + D >= Want -> ok;
       Late -> ct:fail("~b events written (~b dropped) after ~b hits: "
                       "the collector did not drain in 30 s", [E, D, Done]);
       true -> timer:sleep(2), drained(S, Want, Done, Deadline)
    end.

%% Polls info/1 until the collector has mapped at least Bytes.
wait_prefaulted(S, Bytes, Deadline) ->
    {ok, #{prefaulted := P}} = beamprobe:info(S),
    case P >= Bytes of
        true -> P;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> P;
                false -> timer:sleep(20), wait_prefaulted(S, Bytes, Deadline)
            end
    end.

%% Faults taken while W runs ?HITS traced calls into session Opts, once
%% the collector has mapped what it maps for W's slot (one event creates
%% it), minus the faults of the same run untraced.
ring_faults(Config, Name, Opts) ->
    W = hitter(),
    _ = run_hits(W, ?HITS),                    % warm: code, heap
    Untraced = run_paced(W, ?HITS, fun pause/1),
    S = ?L:start(maps:merge(#{procs => [W], calls => [{?MODULE, hit, 1}],
                              args => arity, buffer => ?RING,
                              output => {file, ?L:dir(Config, Name)}},
                            Opts)),
    _ = run_hits(W, 1),                        % W's slot now exists
    %% The collector maps the slot's header and a window past the
    %% producer's first record (c_src/bp_prefault.h), then follows it.
    Mapped = wait_prefaulted(S, ?AHEAD, erlang:monotonic_time(millisecond)
                             + 10000),
    %% A flight recorder writes only at dumps: paced by time alone.
    Drained = maps:get(overflow, Opts, drop_newest) =/= drop_oldest,
    Pause = case Drained of
                true ->
                    {ok, #{events := E0, dropped := #{total := D0}}} =
                        beamprobe:info(S),
                    drained(S, E0 + D0 + 1);     % + the run_hits(W, 1)
                false -> fun pause/1
            end,
    Traced = run_paced(W, ?HITS, Pause),
    {ok, #{memory := Mem, prefaulted := MappedEnd}} = beamprobe:info(S),
    %% Once W's trace file has bytes, its write buffer (c_src/bp_dio.h)
    %% counts too.
    _ = Drained andalso
        ?L:wait_until(fun() -> {ok, #{bytes := B}} = beamprobe:info(S),
                               B > 0
                      end, 5000),
    {ok, #{memory := MemFile}} = beamprobe:info(S),
    Sum = ?L:stop(S),
    unlink(W),
    exit(W, kill),
    ct:log("~s: ring memory ~p (~p with the file buffers), mapped ahead ~p before the run, ~p after; "
           "faults untraced ~p, traced ~p; ~p",
           [Name, Mem, MemFile, Mapped, MappedEnd, Untraced, Traced, Sum]),
    ?assert(Mem >= ?RING),
    _ = Drained andalso ?assert(MemFile >= ?RING + 512 * 1024),
    ?assert(Mapped >= ?AHEAD),
    ?assert(MappedEnd =< Mem),
    {Traced - Untraced, MappedEnd, maps:get(threads, Sum), Sum}.

%% A flight recorder (one 8 MiB part, written all through and over again
%% by 400 k call records): its producer used to take a fault on each of
%% its 2,048 pages; the collector maps them first.
rings_mapped_ahead_flight_recorder(Config) ->
    {Faults, Mapped, Threads, Sum} = ring_faults(Config, "fr",
                                                 #{overflow => drop_oldest}),
    ?assert(Mapped >= ?RING),   % written through: all of it mapped
    ?assert(maps:get(events, Sum) + maps:get(overwritten,
                                             maps:get(dropped, Sum), 0)
            >= ?HITS),
    %% (per slot: see rings_mapped_ahead_drained)
    Faults < 300 * Threads orelse
        ct:fail("~b faults more than untraced, ~b slots", [Faults, Threads]).

%% A drained session: the producer writes the 512 KiB hot part (128
%% pages, each a fault before) while the collector keeps up; what is
%% mapped is that and a window past it, not the 8 MiB ring.
%%
%% Per slot: the traced process may move to another scheduler thread (on
%% a loaded machine it did), whose first event makes a slot of its own,
%% with its hot part and window mapped as the first's, its first pages
%% raced by the producer: with two slots, 3.2 MiB mapped and 102 faults,
%% against bounds made for one (4 MiB, 100).  A mutant that maps a slot
%% whole: 16.9 MB of the 18 MB of two slots.
rings_mapped_ahead_drained(Config) ->
    {Faults, Mapped, Threads, Sum} = ring_faults(Config, "drained", #{}),
    %% (the figures in the reason: CI prints only its first terms)
    Mapped < Threads * (?RING div 2) orelse
        ct:fail("~b bytes mapped of ~b rings of ~b bytes",
                [Mapped, Threads, ?RING]),
    ?assertEqual(?HITS + 1, maps:get(events, Sum)
                 + maps:get(total, maps:get(dropped, Sum))),
    Faults < 100 * Threads orelse
        ct:fail("~b faults more than untraced, ~b slots", [Faults, Threads]).
