%%% beamprobe_exhaust_SUITE -- what beamprobe may take of the node: ring
%%% memory and file descriptors, node-wide (c_src/bp_budget.h).
%%%
%%% Before: a start with buffer => 4 GiB was accepted (22 slots x 4 GiB =
%%% 88 GiB of rings on a 2-scheduler node, each thread that produces
%%% filling its own; any number of sessions added up), and sessions took
%%% descriptors until the node had none (under ulimit -n 64, 12 sessions
%%% left the node's own file:list_dir/1 failing with emfile; the next
%%% start said {file, errno_24}).
-module(beamprobe_exhaust_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_testcase/2, end_per_testcase/2]).
-export([max_buffer_refused/1, memory_budget_shared/1, fd_reserve_at_start/1,
         fd_reserve_at_run/1, thread_limit/1]).
-export([traced/1, work/1, work_everywhere/1, hold_fds/1, start_owned/1,
         tasks/0]).

-define(L, beamprobe_test_lib).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [max_buffer_refused, memory_budget_shared, fd_reserve_at_start,
     fd_reserve_at_run, thread_limit].

init_per_testcase(Case, Config) ->
    ok = ?L:require_tracer(),
    {ok, _} = application:ensure_all_started(beamprobe),
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    ok = application:unset_env(beamprobe, max_memory),
    ?L:clear_trace_state().

%% @doc Traced by the cases.
-spec traced(integer()) -> integer().
traced(I) -> I + 1.

%% @doc N calls of traced/1 in a new process; returns when they are done.
-spec work(pos_integer()) -> ok.
work(N) ->
    {P, R} = spawn_monitor(fun() -> [?MODULE:traced(I) || I <- lists:seq(1, N)] end),
    receive {'DOWN', R, process, P, normal} -> ok end.

spec(Dir, Buffer) ->
    #{calls => [{?MODULE, traced, 1}], buffer => Buffer,
      output => {file, Dir}}.

%% The largest buffer the options allow: its rings could take more than
%% the node's budget (half its memory), so start refuses it, naming the
%% figures, and leaves nothing behind.
max_buffer_refused(Config) ->
    Dir = ?L:dir(Config, "big"),
    Threads0 = threads(),
    Live0 = beamprobe_nif:live_sessions(),
    R = beamprobe:start(spec(Dir, 1 bsl 32)),
    ct:log("~p", [R]),
    case mem_total() div 2 >= 22 * (1 bsl 32) of
        true -> {skip, "more memory than 22 rings of 4 GiB"};
        false ->
            ?assertMatch({error, {too_much_memory, #{need := _, max := _}}}, R),
            {error, {too_much_memory, #{need := Need, max := Max,
                                        threads := T} = M} = Why} = R,
            ?assert(Need > Max),
            ?assert(Need >= T * (1 bsl 32)),
            ?assert(Max =< mem_total() div 2),
            ?assertEqual(0, maps:get(in_use, M)),
            Text = beamprobe:format_error(Why),
            ct:log("~ts", [Text]),
            ?assertMatch({match, _}, re:run(Text, "max_memory")),
            ?assertEqual([], beamprobe:list()),
            ?assertEqual(Live0, beamprobe_nif:live_sessions()),
            ?assert(?L:dir_absent_or_empty(Dir)),
            ?assertEqual(Threads0, threads()),
            ok
    end.

%% max_memory is shared by every session: the third of three that fit
%% only two is refused, and stopping one gives its part back.
memory_budget_shared(Config) ->
    ok = application:set_env(beamprobe, max_memory, 1),
    {error, {too_much_memory, #{need := Need}}} =
        beamprobe:start(spec(?L:dir(Config, "probe"), 1 bsl 20)),
    ok = application:set_env(beamprobe, max_memory, 2 * Need + Need div 2),
    {ok, S1} = beamprobe:start(spec(?L:dir(Config, "s1"), 1 bsl 20)),
    {ok, S2} = beamprobe:start(spec(?L:dir(Config, "s2"), 1 bsl 20)),
    Dir3 = ?L:dir(Config, "s3"),
    R3 = beamprobe:start(spec(Dir3, 1 bsl 20)),
    ct:log("need ~b: ~p", [Need, R3]),
    ?assertMatch({error, {too_much_memory, #{in_use := _}}}, R3),
    {error, {too_much_memory, #{in_use := InUse}}} = R3,
    ?assertEqual(2 * Need, InUse),
    ?assert(?L:dir_absent_or_empty(Dir3)),
    ?assertEqual(2, length(beamprobe:list())),
    _ = ?L:stop(S1),
    {ok, S3} = beamprobe:start(spec(Dir3, 1 bsl 20)),
    _ = ?L:stop(S2),
    _ = ?L:stop(S3),
    %% A TCP sink's send queue counts too.
    ok = application:set_env(beamprobe, max_memory, 1),
    Tcp = fun(Q) ->
                  R = beamprobe:start(#{calls => [{?MODULE, traced, 1}],
                                        buffer => 1 bsl 20,
                                        output => {tcp, "127.0.0.1:9",
                                                   #{queue => Q}}}),
                  ?assertMatch({error, {too_much_memory, _}}, R),
                  {error, {too_much_memory, #{need := N}}} = R,
                  N
          end,
    ?assertEqual((1 bsl 30) - 65536, Tcp(1 bsl 30) - Tcp(65536)),
    ok = application:set_env(beamprobe, max_memory, "lots"),
    ?assertEqual({error, {bad_config, max_memory}},
                 beamprobe:start(spec(?L:dir(Config, "bad"), 1 bsl 20))),
    ok.

%% Under a low descriptor limit, starts are refused with too_many_files
%% while the node still has its reserve (an eighth of the limit, at least
%% 16); the refused start leaves no directory and no session, and stopping
%% them gives every descriptor back.
fd_reserve_at_start(Config) ->
    Node = peer(Config),
    Base = fds(Node),
    Limit = Base + 40,
    set_nofile(Node, Limit),
    Dir = fun(I) -> ?L:dir(Config, "s" ++ integer_to_list(I)) end,
    {Started, Err, I} = start_until_error(Node, Dir, 1, []),
    ct:log("base ~b, limit ~b: ~b sessions, then ~p", [Base, Limit,
                                                      length(Started), Err]),
    ?assertMatch({error, {too_many_files, _, 16, Limit}}, Err),
    {error, {too_many_files, Free, 16, Limit} = Why} = Err,
    ?assert(Free >= 16),
    ?assert(Free < 16 + 3),
    ?assert(length(Started) >= 1),
    ?assertMatch({match, _}, re:run(beamprobe:format_error(Why), "ulimit")),
    ?assert(?L:dir_absent_or_empty(Dir(I))),
    ?assertEqual(length(Started),
                 length(erpc:call(Node, beamprobe, list, []))),
    %% The node can still open files.
    ?assertMatch({ok, _}, erpc:call(Node, file, read_file_info, ["/tmp"])),
    ?assert(Limit - fds(Node) >= 16),
    [{ok, _} = erpc:call(Node, beamprobe, stop, [S]) || S <- Started],
    ?L:wait_until(fun() -> fds(Node) =< Base end, 10000),
    ok.

%% A thread that produces for the first time while opening its stream
%% file would eat into the reserve: the file is not opened, its events
%% are io_error losses (emfile), the session ends with io_error, and the
%% node keeps its descriptors.  (Each of the peer's 2 schedulers runs the
%% calls; at most one had a stream before, for the start's notice.)
fd_reserve_at_run(Config) ->
    Node = peer(Config),
    Dir = ?L:dir(Config, "run"),
    {ok, S} = erpc:call(Node, ?MODULE, start_owned, [spec(Dir, 1 bsl 20)]),
    Open = fds(Node),
    Limit = max(Open + 16, 64),
    set_nofile(Node, Limit),
    %% Half the reserve (16 at this limit) left: the node's, not
    %% beamprobe's.
    Fill = erpc:call(Node, ?MODULE, hold_fds, [Limit - Open - 8]),
    ok = erpc:call(Node, ?MODULE, work_everywhere, [100]),
    ?L:wait_until(fun() ->
                          {ok, Info} = erpc:call(Node, beamprobe, info, [S]),
                          ct:log("~b free: ~p", [Limit - fds(Node),
                                                 maps:with([dropped, events,
                                                            io_error, threads],
                                                           Info)]),
                          maps:get(io_error, Info) =/= none
                  end, 10000),
    ?assertMatch({ok, _}, erpc:call(Node, file, read_file_info, ["/tmp"])),
    ?assert(Limit - fds(Node) >= 8),
    {ok, Sum} = erpc:call(Node, beamprobe, stop, [S]),
    ct:log("~p", [Sum]),
    ?assertMatch(#{stop_reason := io_error,
                   io_error := {error, {file, emfile}}}, Sum),
    #{events := E, dropped := #{io_error := IoE, total := D}} = Sum,
    ?assert(IoE >= 1),
    ?assertEqual(200, E + D),
    ?assertMatch({match, _}, re:run(beamprobe:format_error({file, emfile}),
                                    "too many open files")),
    Fill ! stop,
    ok.

%% @doc N calls of traced/1 on each normal scheduler (a process bound to
%% each); returns when they are done.
-spec work_everywhere(pos_integer()) -> ok.
work_everywhere(N) ->
    Ms = [spawn_monitor(fun() ->
                                _ = process_flag(scheduler, Sched),
                                erlang:yield(),
                                [?MODULE:traced(I) || I <- lists:seq(1, N)]
                        end)
          || Sched <- lists:seq(1, erlang:system_info(schedulers))],
    [receive {'DOWN', R, process, P, normal} -> ok end || {P, R} <- Ms],
    ok.

%% At the limit of threads (RLIMIT_NPROC, of an unprivileged user: root
%% is not held to it), a start that cannot make its thread (the job that
%% creates the directory, or the collector) is refused with words that
%% say so, and leaves no session, no directory and no thread.  Before:
%% "cannot write to ...: unknown POSIX error" ({job, errno_11}).
thread_limit(Config) ->
    Setpriv = os:find_executable("setpriv"),
    %% Not under test/asan/run.sh (BEAMPROBE_NIF set): ps of the
    %% sanitized peer hung there.
    case {os:cmd("id -u"), Setpriv, os:getenv("BEAMPROBE_NIF")} of
        {"0\n", S, false} when is_list(S) -> thread_limit(Config, S);
        _ -> {skip, "needs root and setpriv (a peer run as nobody), "
              "and no ASan library"}
    end.

thread_limit(Config, Setpriv) ->
    Paths = lists:append([["-pa", filename:dirname(code:which(M))]
                          || M <- [beamprobe, ?MODULE]]),
    {ok, Peer, _} = peer:start_link(
                   #{exec => {Setpriv, ["--reuid=65534", "--regid=65534",
                                        "--clear-groups",
                                        os:find_executable("erl")]},
                     args => Paths, connection => standard_io}),
    Call = fun(M, F, A) -> peer:call(Peer, M, F, A, 30000) end,
    {ok, _} = Call(application, ensure_all_started, [beamprobe]),
    Out = ?L:dir(Config, "out"),
    ok = file:make_dir(Out),
    ok = file:change_mode(Out, 8#777),
    OsPid = Call(os, getpid, []),
    Tasks0 = Call(?MODULE, tasks, []),
    %% Every thread of the user counts: room for two more.
    Users = length(string:lexemes(os:cmd("ps -L -u 65534 -o lwp="), "\n")),
    %% (By the peer itself: root may not change another user's limits
    %% here.)
    ?assertEqual("", Call(os, cmd, ["prlimit --pid " ++ OsPid ++
                                        " --nproc=" ++
                                        integer_to_list(Users + 2) ++
                                        ": 2>&1"])),
    Dir = fun(I) -> filename:join(Out, integer_to_list(I)) end,
    {Started, Err, I} = start_until_error(Call, Dir, 1, []),
    ct:log("~b threads of nobody, ~b sessions, then ~p", [Users,
                                                         length(Started),
                                                         Err]),
    {error, Why} = Err,
    Text = beamprobe:format_error(Why),
    ct:log("~ts", [Text]),
    ?assertMatch({match, _}, re:run(Text, "limit of threads")),
    ?assert(?L:dir_absent_or_empty(Dir(I))),
    ?assertEqual(length(Started), length(Call(beamprobe, list, []))),
    [{ok, _} = Call(beamprobe, stop, [S]) || S <- Started],
    ?L:wait_until(fun() -> Call(?MODULE, tasks, []) =< Tasks0 end, 10000),
    ok.

%% @doc The threads of this OS process.
-spec tasks() -> non_neg_integer().
tasks() ->
    {ok, L} = file:list_dir("/proc/self/task"),
    length(L).

%% @doc A process on this node holding N descriptors open (of /dev/null)
%% until sent stop.
-spec hold_fds(non_neg_integer()) -> pid().
hold_fds(N) ->
    Self = self(),
    P = spawn(fun() ->
                      Fs = [begin {ok, F} = file:open("/dev/null", [read, raw]),
                                  F end || _ <- lists:seq(1, N)],
                      Self ! {held, self()},
                      receive stop -> [file:close(F) || F <- Fs] end
              end),
    receive {held, P} -> P end.

%% @doc beamprobe:start(Spec) on this node, by a process that lives on
%% (a session ends with its owner; an erpc call's process does not live).
-spec start_owned(map()) -> {ok, pid()} | {error, term()}.
start_owned(Spec) ->
    Self = self(),
    P = spawn(fun() -> Self ! {owned, self(), beamprobe:start(Spec)},
                       receive stop -> ok end
              end),
    receive {owned, P, R} -> R end.

%%% ------------------------------------------------------------------------

start_until_error(Call, Dir, I, Acc) when is_function(Call), I =< 200 ->
    case Call(?MODULE, start_owned, [spec(Dir(I), 65536)]) of
        {ok, S} ->
            ok = Call(?MODULE, work, [5]),
            start_until_error(Call, Dir, I + 1, [S | Acc]);
        Err -> {lists:reverse(Acc), Err, I}
    end;
start_until_error(Node, Dir, I, Acc) when is_atom(Node) ->
    start_until_error(fun(M, F, A) -> erpc:call(Node, M, F, A) end, Dir, I,
                      Acc).

%% A peer node (linked: it ends with the case) running beamprobe.
peer(_Config) ->
    Paths = lists:append([["-pa", filename:dirname(code:which(M))]
                          || M <- [beamprobe, ?MODULE]]),
    {ok, _Peer, Node} = peer:start_link(#{name => peer:random_name(?MODULE),
                                          args => ["+S", "2" | Paths]}),
    {ok, _} = erpc:call(Node, application, ensure_all_started, [beamprobe]),
    Node.

set_nofile(Node, Limit) ->
    Pid = erpc:call(Node, os, getpid, []),
    Out = os:cmd("prlimit --pid " ++ Pid ++ " --nofile=" ++
                     integer_to_list(Limit) ++ ": 2>&1"),
    ?assertEqual("", Out).

fds(Node) ->
    {ok, L} = erpc:call(Node, file, list_dir, ["/proc/self/fd"]),
    length(L) - 1.

threads() ->
    {ok, L} = file:list_dir("/proc/self/task"),
    length(L).

mem_total() ->
    {ok, B} = file:read_file("/proc/meminfo"),
    {match, [K]} = re:run(B, "MemTotal:\\s+(\\d+) kB",
                          [{capture, all_but_first, binary}]),
    binary_to_integer(K) * 1024.
