%%% @doc The NIF reloaded and purged under running sessions (issue 7 item
%%% 7), as OTP's own tracer_SUITE does with its tracer module (`reload/1':
%%% purge, load_file, purge, delete, purge, 15 times, a traced process
%%% looping meanwhile); and a node without the NIF (item 18): every API
%%% call says it is missing and where it was looked for.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_reload_SUITE -logdir _build/ct_logs
-module(beamprobe_reload_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([reload_15/1, upgrade_keeps_tracing/1, killed_after_reload/1,
         library_pinned/1, no_nif/1, dump_under_reloads/1,
         start_stop_under_reloads/1, each_worker_not_left/1]).
-export([tick/0]).

-define(L, beamprobe_test_lib).
-define(NIF, beamprobe_nif).

suite() -> [{timetrap, {seconds, 180}}].

all() ->
    [reload_15, upgrade_keeps_tracing, killed_after_reload, library_pinned,
     no_nif, dump_under_reloads, start_stop_under_reloads,
     each_worker_not_left].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    _ = [beamprobe:stop(S) || S <- beamprobe:list()],
    {module, ?NIF} = code:ensure_loaded(?NIF),
    erlang:trace_pattern({?MODULE, '_', '_'}, false, [local]),
    ok.

tick() -> ok.

looper() ->
    spawn_link(fun Loop() -> ?MODULE:tick(), Loop() end).

session(Config, Name, P) ->
    ?L:start(#{procs => [P], calls => [{?MODULE, tick, 0}],
               buffer => 65536, output => {file, ?L:dir(Config, Name)}}).

%% 15 rounds of tracer_SUITE's reload: in each, a new session on a tight
%% loop, then purge, load_file, purge, delete, purge while it runs; a
%% session started before the first round runs across all of them.  The
%% VM survives, every session returns its summary, the janitor and the
%% supervisor are the same processes, and start/1 still works after.
reload_15(Config) ->
    Janitor = whereis(beamprobe_janitor),
    Sup = whereis(beamprobe_sup),
    Long = session(Config, "long", looper()),
    timer:sleep(20),
    Rounds = [begin
                  P = looper(),
                  S = session(Config, "r" ++ integer_to_list(I), P),
                  timer:sleep(10),
                  _ = code:purge(?NIF),
                  {module, ?NIF} = code:load_file(?NIF),
                  _ = code:purge(?NIF),
                  true = code:delete(?NIF),
                  _ = code:purge(?NIF),
                  timer:sleep(10),
                  %% Loaded again by the call, as in any interactive node.
                  R = beamprobe:stop(S),
                  unlink(P),
                  exit(P, kill),
                  R
              end || I <- lists:seq(1, 15)],
    ct:log("~p", [Rounds]),
    ?assertEqual(15, length([ok || {ok, #{events := E, stop_reason :=
                                             requested}} <- Rounds,
                                   E > 0])),
    {ok, LongSum} = beamprobe:stop(Long),
    ct:log("long: ~p", [LongSum]),
    ?assertMatch(#{events := E, stop_reason := requested} when E > 0,
                 LongSum),
    ?assertNot(maps:is_key(nif_error, LongSum)),
    ?assertEqual(Janitor, whereis(beamprobe_janitor)),
    ?assertEqual(Sup, whereis(beamprobe_sup)),
    %% start/1 works after, and its trace is readable.
    P = looper(),
    S = session(Config, "after", P),
    timer:sleep(20),
    {ok, #{events := N}} = beamprobe:stop(S),
    ?assert(N > 0),
    ?assert(?L:count(?L:trace(?L:dir(Config, "after")), "call") > 0),
    ?assertEqual([], beamprobe:list()).

%% A plain upgrade (load_file, purge of the old code) 15 times: a session
%% started before keeps recording after each one, and stops with its
%% summary and a readable trace.
upgrade_keeps_tracing(Config) ->
    P = looper(),
    S = session(Config, "upgrade", P),
    Events = fun() -> {ok, #{events := E}} = beamprobe:info(S), E end,
    Counts = lists:foldl(
               fun(_, Acc) ->
                       {module, ?NIF} = code:load_file(?NIF),
                       _ = code:purge(?NIF),
                       %% Events count once in the file: the collector
                       %% writes at least every 100 ms (c_src/bp_dio.h),
                       %% later when the disk is busy (a hunt with a disk
                       %% writer running saw 300 ms without growth): it
                       %% must grow after each upgrade, within 10 s.
                       Prev = hd(Acc ++ [0]),
                       _ = ?L:wait_until(fun() -> Events() > Prev end,
                                         10000),
                       [Events() | Acc]
               end, [], lists:seq(1, 15)),
    ct:log("events after each upgrade: ~p", [lists:reverse(Counts)]),
    ?assertEqual(lists:reverse(Counts), lists:usort(Counts)),  % growing
    {ok, Sum} = beamprobe:stop(S),
    ?assertMatch(#{stop_reason := requested}, Sum),
    ?assert(?L:count(?L:trace(?L:dir(Config, "upgrade")), "call") > 0),
    unlink(P),
    exit(P, kill).

%% A flight recorder dumped in a loop while another process upgrades the
%% NIF module every 20 ms (load_file, purge): the purge of the old code
%% kills the processes running it, and a session process waiting in a
%% dirty dump NIF called before the load_file was one (dump/1 now waits
%% for the collector's message in the session's own code).  The session
%% lives through 5 s of it, each dump returns ok (or an error, never an
%% exit), and stop/1 gives its summary.
dump_under_reloads(Config) ->
    P = looper(),
    S = ?L:start(#{procs => [P], calls => [{?MODULE, tick, 0}],
                   return => false, overflow => drop_oldest,
                   buffer => 262144,
                   output => {file, ?L:dir(Config, "dump_reload")}}),
    MRef = monitor(process, S),
    Reloader = reloader(),
    End = erlang:monotonic_time(millisecond) + 5000,
    Results = dump_loop(S, End, #{}),
    ok = stop_reloader(Reloader),
    ct:log("dump results: ~p", [Results]),
    ?assertEqual([], [R || R <- maps:keys(Results), R =/= ok,
                           not is_tuple(R) orelse element(1, R) =/= error]),
    ?assert(maps:get(ok, Results, 0) > 0),
    ?assert(is_process_alive(S)),
    {ok, Sum} = beamprobe:stop(S),
    ct:log("summary: ~p", [Sum]),
    ?assertMatch(#{stop_reason := requested}, Sum),
    ?assert(maps:get(nif_reloads, Sum) > 0),
    receive {'DOWN', MRef, process, S, Why} -> ?assertEqual(normal, Why) end,
    unlink(P),
    exit(P, kill).

%% 150 sessions started and stopped on a looping process while another
%% process upgrades the NIF module every 20 ms (load_file, purge): the
%% purge of the old code kills every process inside a dirty NIF of the
%% old instance, and start/1, stop/1 and the janitor's hub removal were
%% dirty NIFs that waited (for the files, the collector's final drain,
%% the producers): start/1 returned {error, {session_failed, killed}},
%% stop/1 exited with `killed' in the caller, the janitor was restarted.
%% Now each start gives a session, each stop its summary, the janitor is
%% the same process, and nothing is left counted (sessions' places, hub
%% members).
start_stop_under_reloads(Config) ->
    Janitor = whereis(beamprobe_janitor),
    P = looper(),
    Reloader = reloader(),
    Results = [start_stop(Config, P, I) || I <- lists:seq(1, 150)],
    ok = stop_reloader(Reloader),
    Tally = lists:foldl(fun(R, M) -> maps:update_with(R, fun(N) -> N + 1 end,
                                                      1, M)
                        end, #{}, Results),
    ct:log("start/stop results: ~p", [Tally]),
    ?assertEqual(#{ok => 150}, Tally),
    ?assertEqual(Janitor, whereis(beamprobe_janitor)),
    ?assertEqual([], beamprobe:list()),
    ?assertEqual(0, beamprobe_nif:live_sessions()),
    ?assertEqual(0, beamprobe_nif:hub_members()),
    unlink(P),
    exit(P, kill).

%% One cycle: ok, or what went wrong.
start_stop(Config, P, I) ->
    Spec = #{procs => [P], calls => [{?MODULE, tick, 0}], buffer => 65536,
             output => {file, ?L:dir(Config, "ss" ++ integer_to_list(I))}},
    case beamprobe:start(Spec) of
        {ok, S} ->
            timer:sleep(5),
            try beamprobe:stop(S) of
                {ok, #{stop_reason := requested, events := E}}
                  when is_integer(E) -> ok;
                Other -> {stop, Other}
            catch Class:Why -> {stop_raised, Class, Why}
            end;
        Other -> {start, Other}
    end.

dump_loop(S, End, Acc) ->
    case erlang:monotonic_time(millisecond) < End of
        false -> Acc;
        true ->
            R = try beamprobe:dump(S)
                catch exit:Why -> {exit, Why}
                end,
            Acc1 = maps:update_with(R, fun(N) -> N + 1 end, 1, Acc),
            case R of
                {exit, _} -> Acc1;
                _ -> dump_loop(S, End, Acc1)
            end
    end.

%% A session process killed after the NIF was deleted, purged and loaded
%% again: the janitor cleans up (flags and pattern gone) and survives.
killed_after_reload(Config) ->
    Janitor = whereis(beamprobe_janitor),
    P = looper(),
    S = session(Config, "killed", P),
    true = code:delete(?NIF),
    _ = code:purge(?NIF),
    {module, ?NIF} = code:load_file(?NIF),
    exit(S, kill),
    _ = ?L:wait_until(fun() -> beamprobe:list() =:= [] end, 5000),
    _ = sys:get_state(beamprobe_janitor),
    ?assertEqual(Janitor, whereis(beamprobe_janitor)),
    ?assertEqual({flags, []}, erlang:trace_info(P, flags)),
    ?assertEqual({all, false}, erlang:trace_info({?MODULE, tick, 0}, all)),
    unlink(P),
    exit(P, kill).

%% The library stays mapped after its module is deleted and purged (erts
%% dlclose()s it): a collector thread or a destructor still running its
%% code never jumps into unmapped memory.
library_pinned(_Config) ->
    case file:read_file("/proc/self/maps") of
        {error, _} -> {skip, "no /proc/self/maps on this system"};
        {ok, _} ->
            ?assert(mapped()),
            true = code:delete(?NIF),
            _ = code:purge(?NIF),
            ?assertEqual(false, code:is_loaded(?NIF)),
            ?assert(mapped()),
            {module, ?NIF} = code:load_file(?NIF)
    end.

mapped() ->
    {ok, B} = file:read_file("/proc/self/maps"),
    binary:match(B, <<"beamprobe_nif.so">>) =/= nomatch.

%% A node whose beamprobe has no priv/: start/1, calls/2 and messages/2
%% return {error, {nif_not_loaded, Path, Why}} naming the library's path,
%% and format_error/1 says it in words.
no_nif(Config) ->
    Base = ?L:dir(Config, "nopriv"),
    Ebin = filename:join(Base, "ebin"),
    ok = filelib:ensure_dir(filename:join(Ebin, "x")),
    Src = filename:dirname(code:which(beamprobe)),
    {ok, Files} = file:list_dir(Src),
    [{ok, _} = file:copy(filename:join(Src, F), filename:join(Ebin, F))
     || F <- Files],
    {ok, Peer, Node} = peer:start_link(
                         #{name => peer:random_name(?FUNCTION_NAME),
                           args => ["-pa", Ebin],
                           env => [{"BEAMPROBE_NIF", false}]}),
    try
        Expected = filename:join([Base, "priv", "beamprobe_nif.so"]),
        Start = erpc:call(Node, beamprobe, start,
                          [#{calls => [{lists, seq, 2}]}]),
        ct:log("~p", [Start]),
        ?assertMatch({error, {nif_not_loaded, Expected, _}}, Start),
        ?assertMatch({error, {nif_not_loaded, Expected, _}},
                     erpc:call(Node, beamprobe, calls, ["lists:seq/2", 1])),
        ?assertMatch({error, {nif_not_loaded, Expected, _}},
                     erpc:call(Node, beamprobe, messages, ["send", 1])),
        {error, Reason} = Start,
        Text = erpc:call(Node, beamprobe, format_error, [Reason]),
        ct:log("~ts", [Text]),
        ?assertNotEqual(nomatch, string:find(Text, Expected)),
        ?assertEqual([], erpc:call(Node, beamprobe, list, []))
    after
        peer:stop(Peer)
    end.

%% A process upgrading the NIF module every 20 ms (load_file, then purge
%% of the old code) until stop_reloader/1.
reloader() ->
    Self = self(),
    spawn_link(fun Loop() ->
                       {module, ?NIF} = code:load_file(?NIF),
                       _ = code:purge(?NIF),
                       receive stop -> Self ! {reloader, done}
                       after 20 -> Loop()
                       end
               end).

stop_reloader(Reloader) ->
    Reloader ! stop,
    receive {reloader, done} -> ok end.

%% beamprobe_each:trace/4 whose erlang:trace/3 raises (a tracer module
%% the VM does not have, as during a NIF reload, when the janitor sets
%% every session's flags again) ends its worker: the worker waited for
%% its go for good, linked to the caller (the janitor), and
%% beamprobe_lifecycle_SUITE:nif_reload found it left now and then.
each_worker_not_left(_Config) ->
    Own = fun() -> [P || P <- processes(),
                         {initial_call, {beamprobe_own, own, 2}} <-
                             [erlang:process_info(P, initial_call)]]
          end,
    Before = Own(),
    [?assertError(_,
                  beamprobe_each:trace(W, true,
                                       [call, {tracer, bp_no_such_tracer, []}]))
     || W <- [all, processes, new]],
    _ = ?L:wait_until(fun() -> Own() -- Before =:= [] end, 2000),
    ?assertEqual([], Own() -- Before).
