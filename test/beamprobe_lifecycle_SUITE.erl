%%% @doc The traced node's resources over many session lifecycles, as an
%%% SRE who runs beamprobe for weeks on one production node sees them.
%%%
%%% A `peer' node (so that nothing left over leaks into other suites) runs
%%% a workload; each case starts and stops many sessions of one kind on it
%%% (file sink, flight recorder, handlers that work, crash or block, TCP
%%% with and without a receiver, LTTng, USDT, 2-8 overlapping sessions,
%%% the shell API and clear/0, profile/2, follow, the limits, killed
%%% owners, killed sessions, the NIF purged and loaded again), then checks
%%% that the node came back to where it was before: open descriptors, OS
%%% threads, memory mappings, VmRSS and VmSize, erlang:memory/0 by type,
%%% processes, ports, ETS tables, atoms, registered names, trace flags on
%%% every process and port, trace patterns on every loaded function,
%%% message patterns, the node's seq_trace tracer, system monitor and
%%% system profiler, and beamprobe's own session lists (list/0, the NIF's
%%% live sessions, the hub's members, the janitor's entries).
%%%
%%% The baseline is taken after one warm-up cycle of every kind: what is
%%% created once and kept for the life of the node (modules loaded, their
%%% atoms, the LTTng-UST listener threads, the C allocator's arenas for
%%% the collector threads) is not a leak; what grows with the number of
%%% sessions is.  The bounds (`slack/0') say how much is allowed and why.
%%%
%%% Cycles per kind: BEAMPROBE_LIFECYCLE_CYCLES in the environment
%%% (default 30: about 700 sessions, 30 s here; 150 cycles, 3,400
%%% sessions, take 2.5 minutes).
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_lifecycle_SUITE -logdir _build/ct_logs
-module(beamprobe_lifecycle_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([file_sink/1, flight_recorder/1, handler_sinks/1, tcp_sinks/1,
         lttng_sink/1, usdt_sink/1, overlapping/1, shell_api/1,
         profiles/1, follows/1, limits/1, owner_killed/1,
         session_killed/1, nif_reload/1, whole_run/1]).
%% Run on the peer.
-export([peer_setup/0, snapshot/0, cycles/3, null_io/0]).
%% A beamprobe_handler: `ok', `crash' or `block' in handle_events/2.
-export([init/1, handle_events/2, terminate/2]).

-define(L, beamprobe_test_lib).
-define(W, beamprobe_workload).
-define(ADD, {beamprobe_workload, add, 2}).
-define(PEER_TIMEOUT, 120000).

suite() -> [{timetrap, {seconds, 300}}].

all() ->
    [file_sink, flight_recorder, handler_sinks, tcp_sinks, lttng_sink,
     usdt_sink, overlapping, shell_api, profiles, follows, limits,
     owner_killed, session_killed, nif_reload, whole_run].

%% Every kind, in the order of all/0 (whole_run compares the end of the
%% run with the first baseline).
kinds() ->
    [file, dump, handler, tcp, lttng, usdt, overlap, shell, profile,
     follow, limits, owner_killed, session_killed, nif_reload].

cycles() ->
    case os:getenv("BEAMPROBE_LIFECYCLE_CYCLES") of
        false -> 30;
        N -> list_to_integer(N)
    end.

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Sessiond = ensure_sessiond(),
    {Peer, Node} = ?L:env_peer(?MODULE, []),
    unlink(Peer),
    Dir = filename:join(proplists:get_value(priv_dir, Config), "out"),
    ok = file:make_dir(Dir),
    Lttng = erpc:call(Node, ?MODULE, peer_setup, []),
    ct:log("peer ~p, lttng: ~p", [Node, Lttng]),
    %% One warm-up cycle of every kind, then the baseline.
    _ = [erpc:call(Node, ?MODULE, cycles, [K, 1, Dir], ?PEER_TIMEOUT)
         || K <- kinds(), K =/= lttng orelse Lttng =:= ok],
    Base = settled(Node),
    ct:log("baseline: ~p", [Base]),
    [{peer, Peer}, {node, Node}, {out, Dir}, {baseline, Base},
     {lttng, Lttng}, {sessiond, Sessiond} | Config].

end_per_suite(Config) ->
    ct:log("figures (resource: before -> after, per kind):~n~ts",
           [figures_text()]),
    catch peer:stop(proplists:get_value(peer, Config)),
    stop_sessiond(proplists:get_value(sessiond, Config)),
    ok.

%% An LTTng session daemon, started (as beamprobe_monitor_SUITE does) when
%% none runs and lttng-sessiond is installed: its OS pid, or none.
ensure_sessiond() ->
    Sessiond = os:find_executable("lttng-sessiond"),
    case beamprobe_lttng:check() of
        ok -> none;
        {error, _} when Sessiond =:= false -> none;
        {error, _} ->
            _ = os:cmd(Sessiond ++ " --daemonize --no-kernel 2>&1"),
            case catch ?L:wait_until(
                         fun() -> beamprobe_lttng:check() =:= ok end, 10000) of
                T when is_integer(T) ->
                    case file:read_file("/var/run/lttng/lttng-sessiond.pid") of
                        {ok, B} -> string:trim(binary_to_list(B));
                        _ -> none
                    end;
                _ -> none
            end
    end.

stop_sessiond(none) -> ok;
stop_sessiond(undefined) -> ok;
stop_sessiond(Pid) -> _ = os:cmd("kill " ++ Pid), ok.

init_per_testcase(_Case, Config) ->
    Config.

end_per_testcase(_Case, _Config) ->
    ok.

%%% ------------------------------------------------------------------------
%%% Cases: one kind of session each
%%% ------------------------------------------------------------------------

file_sink(Config) -> run_kind(file, Config).
flight_recorder(Config) -> run_kind(dump, Config).
handler_sinks(Config) -> run_kind(handler, Config).
tcp_sinks(Config) -> run_kind(tcp, Config).
lttng_sink(Config) ->
    case proplists:get_value(lttng, Config) of
        ok -> run_kind(lttng, Config);
        {error, {lttng_unavailable, Why}} ->
            ct:print("lttng_sink skipped: ~ts", [Why]),
            {skip, "LTTng unavailable on this host: " ++ Why}
    end.
usdt_sink(Config) -> run_kind(usdt, Config).
overlapping(Config) -> run_kind(overlap, Config).
shell_api(Config) -> run_kind(shell, Config).
profiles(Config) -> run_kind(profile, Config).
follows(Config) -> run_kind(follow, Config).
limits(Config) -> run_kind(limits, Config).
owner_killed(Config) -> run_kind(owner_killed, Config).
session_killed(Config) -> run_kind(session_killed, Config).
nif_reload(Config) -> run_kind(nif_reload, Config).

%% The end of the run against the first baseline: nothing grew over all
%% the kinds together either.
whole_run(Config) ->
    Node = proplists:get_value(node, Config),
    Base = proplists:get_value(baseline, Config),
    check(whole_run, Base, Node).

run_kind(Kind, Config) ->
    Node = proplists:get_value(node, Config),
    Dir = proplists:get_value(out, Config),
    Before = settled(Node),
    T0 = erlang:monotonic_time(millisecond),
    N = erpc:call(Node, ?MODULE, cycles, [Kind, cycles(), Dir],
                  ?PEER_TIMEOUT),
    ct:log("~p: ~b sessions in ~b ms", [Kind, N, ?L:elapsed_ms(T0)]),
    check(Kind, Before, Node).

%% Waits (at most 10 s) until the node is back to Before within the
%% slack, records the figures, fails with what is left otherwise.
check(Kind, Before, Node) ->
    Deadline = erlang:monotonic_time(millisecond) + 10000,
    {After, Problems} = wait_back(Before, Node, Deadline),
    record_figures(Kind, Before, After),
    ct:log("~p: before ~p~nafter ~p", [Kind, Before, After]),
    ?assertEqual([], Problems),
    ok.

wait_back(Before, Node, Deadline) ->
    After = erpc:call(Node, ?MODULE, snapshot, []),
    case problems(Before, After) of
        [] -> {After, []};
        P ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> {After, P};
                false -> timer:sleep(100), wait_back(Before, Node, Deadline)
            end
    end.

%% A snapshot once beamprobe has no session left and nothing of it is
%% installed (bounded wait; fails with what is left).
settled(Node) ->
    settled(Node, erlang:monotonic_time(millisecond) + 10000).

settled(Node, Deadline) ->
    S = erpc:call(Node, ?MODULE, snapshot, []),
    case problems(S, S) of
        [] -> S;
        P ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> ct:fail({not_settled, P});
                false -> timer:sleep(100), settled(Node, Deadline)
            end
    end.

%%% ------------------------------------------------------------------------
%%% What may differ, and by how much
%%% ------------------------------------------------------------------------

%% Growth allowed between two snapshots, with the reason.
%% - fds, threads, ports, processes, ETS tables, registered names: none.
%%   A session's are all gone when it is (the workload is paused while
%%   the snapshot is taken, so its processes are the same ones).
%% - atoms: 20.  Atoms are never collected: a leak per session shows as
%%   at least the number of cycles (30 by default); the 20 are for atoms a
%%   case may create once (a format_error text, a code path).
%% - mappings of more than 64 MiB (big_maps/0: a session's rings, larger
%%   than any of glibc's arenas): none.
%% - mappings: 32.  glibc gives each new thread an arena (at most 8 per
%%   core, reused after); arenas made by more threads at once than in
%%   the warm-up, and the VM's own allocator carriers, are a few
%%   mappings each.  A session's ring is one mapping: a leak of it per
%%   session exceeds this after 32 cycles.
%% - VmSize: 512 MiB.  An arena reserves 64 MiB of address space; up
%%   to 8 of them may be created after the warm-up.  A ring mapping is
%%   max_slots x buffer (hundreds of MiB by default), so a leaked one
%%   shows at once in the mappings count too.
%% - VmRSS: 48 MiB; erlang:memory(total): 24 MiB: the VM keeps freed
%%   carriers for reuse (mbcs pools) and the workload's heaps vary; 30
%%   sessions' worth of leaked 1 MiB prefaulted rings would exceed it.
%% - per memory type: 16 MiB processes, binary and system; 1 MiB ets;
%%   0 atom_used beyond the atoms above (checked through their count);
%%   code 4 MiB (the NIF module loaded again).
%% Under test/asan/run.sh (libasan preloaded: its allocator maps and
%% reserves as it goes, and keeps freed memory in quarantine) mappings,
%% VmSize and VmRSS say nothing of beamprobe: not bounded there.
slack() ->
    case string:find(os:getenv("LD_PRELOAD", ""), "asan") of
        nomatch -> slack1();
        _ -> (slack1())#{maps => 1 bsl 40, vm_size_kb => 1 bsl 40,
                         vm_rss_kb => 1 bsl 40, big_maps => 1 bsl 40}
    end.

slack1() ->
    #{big_maps => 0, fds => 0, threads => 0, ports => 0, processes => 0, ets => 0,
      atoms => 20, maps => 32, vm_size_kb => 512 * 1024,
      vm_rss_kb => 48 * 1024, mem_total => 24 * 1024 * 1024,
      mem_processes => 16 * 1024 * 1024, mem_binary => 16 * 1024 * 1024,
      mem_system => 16 * 1024 * 1024, mem_ets => 1024 * 1024,
      mem_code => 4 * 1024 * 1024}.

numbers(S) ->
    #{memory := M} = S,
    maps:merge(maps:with([fds, threads, ports, processes, ets, atoms, maps,
                          big_maps, vm_size_kb, vm_rss_kb], S),
               #{mem_total => maps:get(total, M),
                 mem_processes => maps:get(processes, M),
                 mem_binary => maps:get(binary, M),
                 mem_system => maps:get(system, M),
                 mem_ets => maps:get(ets, M),
                 mem_code => maps:get(code, M)}).

problems(Before, After) ->
    NB = numbers(Before),
    NA = numbers(After),
    Grown = [{K, maps:get(K, NB), maps:get(K, NA)}
             || {K, Slack} <- lists:sort(maps:to_list(slack())),
                maps:get(K, NA) - maps:get(K, NB) > Slack],
    Same = [{K, maps:get(K, Before), maps:get(K, After)}
            || K <- [registered],
               maps:get(K, Before) =/= maps:get(K, After)],
    Empty = [{K, V} || K <- [sessions, live_sessions, hub_members,
                             janitor_entries, traced, patterns,
                             msg_patterns, new_flags, system_tracers],
                       V <- [maps:get(K, After)], not empty(V)],
    New = [{new_fds, maps:get(fd_info, After) -- maps:get(fd_info, Before)}
           || maps:get(fds, NA) > maps:get(fds, NB)] ++
        [{new_ets, maps:get(ets_info, After) -- maps:get(ets_info, Before)}
           || maps:get(ets, NA) > maps:get(ets, NB)] ++
        [{new_procs, maps:get(proc_info, After) -- maps:get(proc_info, Before)}
         || maps:get(processes, NA) > maps:get(processes, NB)] ++
        [{new_ports, maps:get(port_info, After) -- maps:get(port_info, Before)}
         || maps:get(ports, NA) > maps:get(ports, NB)],
    Grown ++ Same ++ Empty ++ New.

empty(0) -> true;
empty([]) -> true;
empty(_) -> false.

%%% ------------------------------------------------------------------------
%%% Figures
%%% ------------------------------------------------------------------------

-define(FIG, {?MODULE, figures}).

record_figures(Kind, Before, After) ->
    NB = numbers(Before),
    NA = numbers(After),
    Figs = persistent_term:get(?FIG, []),
    persistent_term:put(?FIG, Figs ++ [{Kind, NB, NA}]),
    ct:log("~p:~n~ts", [Kind, fig_lines(NB, NA)]),
    %% The processes whose memory grew most (what mem_processes says).
    MB = maps:from_list(maps:get(proc_mem, Before)),
    Info = maps:from_list(maps:get(proc_info, After)),
    Grew = lists:sublist(lists:reverse(lists:sort(
             [{M - maps:get(P, MB, 0), pid_to_list(P), M, maps:get(P, Info)}
              || {P, M} <- maps:get(proc_mem, After)])), 5),
    ct:log("~p: processes grown most: ~p", [Kind, Grew]).

fig_lines(NB, NA) ->
    [io_lib:format("  ~-14s ~14b -> ~14b (~s)~n",
                   [K, maps:get(K, NB), maps:get(K, NA),
                    signed(maps:get(K, NA) - maps:get(K, NB))])
     || K <- lists:sort(maps:keys(NB))].

signed(D) when D > 0 -> [$+ | integer_to_list(D)];
signed(D) -> integer_to_list(D).

figures_text() ->
    Figs = persistent_term:get(?FIG, []),
    _ = persistent_term:erase(?FIG),
    [[io_lib:format("~p~n", [K]), fig_lines(NB, NA)] || {K, NB, NA} <- Figs].

%%% ------------------------------------------------------------------------
%%% On the peer
%%% ------------------------------------------------------------------------

-define(WORKERS, beamprobe_lifecycle_workers).

%% @doc Starts beamprobe, a null io server, a TCP receiver and the
%% workload on the peer; returns whether LTTng can be used there.
-spec peer_setup() -> ok | {error, term()}.
peer_setup() ->
    {ok, _} = application:ensure_all_started(beamprobe),
    %% A blocked handler is killed after 100 ms, not 5 s.
    ok = application:set_env(beamprobe, handler_stop_timeout, 100),
    {module, beamprobe_nif} = code:ensure_loaded(beamprobe_nif),
    _ = [code:ensure_loaded(M) || M <- [?W, follow_request]],
    Null = spawn(fun ?MODULE:null_io/0),
    register(beamprobe_lifecycle_null, Null),
    Recv = spawn(fun receiver/0),
    register(beamprobe_lifecycle_recv, Recv),
    {Mid, _Srv} = follow_request:servers(),
    Workers = [spawn(fun() -> work(I, Mid) end) || I <- lists:seq(1, 3)],
    persistent_term:put(?WORKERS, Workers),
    beamprobe_lttng:check().

%% @doc An io server that accepts everything and writes nothing.
-spec null_io() -> no_return().
null_io() ->
    receive
        {io_request, From, Ref, Req} ->
            From ! {io_reply, Ref, null_reply(Req)},
            null_io();
        _ -> null_io()
    end.

null_reply({get_geometry, _}) -> {error, enotsup};
null_reply({get_chars, _, _}) -> eof;
null_reply({get_chars, _, _, _}) -> eof;
null_reply({get_line, _}) -> eof;
null_reply({get_line, _, _}) -> eof;
null_reply({get_until, _, _, _, _, _}) -> eof;
null_reply(getopts) -> [];
null_reply(_) -> ok.

%% A TCP receiver on loopback: takes every connection and reads it to its
%% end (as `beamprobe receive' would); replies its port to `port'.
receiver() ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {ip, loopback},
                                 {reuseaddr, true}]),
    {ok, Port} = inet:port(L),
    Self = self(),
    spawn_link(fun() -> accept(L, Self) end),
    receiver_loop(Port).

receiver_loop(Port) ->
    receive {port, From} -> From ! {port, Port}, receiver_loop(Port) end.

accept(L, Owner) ->
    {ok, A} = gen_tcp:accept(L),
    P = spawn(fun() -> receive go -> drain(A) end end),
    ok = gen_tcp:controlling_process(A, P),
    P ! go,
    accept(L, Owner).

drain(A) ->
    case gen_tcp:recv(A, 0) of
        {ok, _} -> drain(A);
        {error, _} -> gen_tcp:close(A)
    end.

%% A worker: calls, messages, garbage; answers `pause' (until `resume').
work(I, Mid) ->
    receive
        {pause, From} ->
            From ! {paused, self()},
            receive resume -> ok end
    after 0 ->
            _ = ?W:add(I, 1),
            self() ! {tick, I},
            receive {tick, I} -> ok end,
            _ = lists:seq(1, 20 + I rem 10),
            _ = follow_request:root(Mid, I),
            timer:sleep(1)
    end,
    %% (A bounded counter: the lists above stay the same size.)
    work((I + 1) rem 1000, Mid).

with_workload_paused(F) ->
    Ws = persistent_term:get(?WORKERS),
    _ = [W ! {pause, self()} || W <- Ws],
    _ = [receive {paused, W} -> ok end || W <- Ws],
    try F() after [W ! resume || W <- Ws] end.

%% @doc The node's resources and trace state (see the module doc).
-spec snapshot() -> map().
snapshot() ->
    with_workload_paused(fun snapshot_paused/0).

snapshot_paused() ->
    Os = os:getpid(),
    Proc = "/proc/" ++ Os,
    {ok, Fds} = file:list_dir(Proc ++ "/fd"),
    {ok, Tasks} = file:list_dir(Proc ++ "/task"),
    {ok, Maps} = file:read_file(Proc ++ "/maps"),
    {ok, Status} = file:read_file(Proc ++ "/status"),
    Janitor = element(2, sys:get_state(beamprobe_janitor)),
    Procs = lists:sort(processes()) -- [self()],
    Ets = lists:sort(ets:all()),
    #{fds => length(Fds), threads => length(Tasks),
      fd_info => lists:sort([{F, catch file:read_link(Proc ++ "/fd/" ++ F)}
                             || F <- Fds]),
      maps => length(binary:split(Maps, <<"\n">>, [global, trim])),
      big_maps => length(big_maps()),
      vm_size_kb => status_kb(Status, <<"VmSize:">>),
      vm_rss_kb => status_kb(Status, <<"VmRSS:">>),
      memory => maps:from_list(erlang:memory()),
      processes => length(Procs), ports => length(erlang:ports()),
      ets => length(Ets), atoms => erlang:system_info(atom_count),
      registered => lists:sort(registered()),
      proc_info => [{P, catch erlang:process_info(P, [registered_name,
                                                      initial_call])}
                    || P <- Procs],
      port_info => [{P, erlang:port_info(P, name)} || P <- erlang:ports()],
      proc_mem => [{P, M} || P <- Procs,
                             {memory, M} <- [erlang:process_info(P, memory)]],
      ets_info => [{T, ets:info(T, name), ets:info(T, owner)} || T <- Ets],
      sessions => beamprobe:list(),
      live_sessions => beamprobe_nif:live_sessions(),
      hub_members => beamprobe_nif:hub_members(),
      janitor_entries => maps:size(Janitor),
      traced => traced(),
      patterns => patterns(),
      msg_patterns => [{K, MS} || K <- [send, 'receive'],
                                  {match_spec, MS} <-
                                      [erlang:trace_info(K, match_spec)],
                                  MS =/= true],
      system_tracers => [{K, T} || {K, T} <-
                                      [{seq_trace, seq_trace:get_system_tracer()},
                                       {monitor, erlang:system_monitor()},
                                       {profile, erlang:system_profile()}],
                                  T =/= false, T =/= undefined],
      new_flags => [{K, F} || K <- [new_processes, new_ports],
                              {flags, F} <- [erlang:trace_info(K, flags)],
                              F =/= []]}.

status_kb(Status, Key) ->
    [_, Rest] = binary:split(Status, Key),
    [Num | _] = string:lexemes(Rest, " \t\nk"),
    binary_to_integer(Num).

%% Processes and ports with trace flags or a tracer.
traced() ->
    [{P, F, T} || P <- processes() ++ erlang:ports(),
                  {flags, F} <- [erlang:trace_info(P, flags)],
                  {tracer, T} <- [erlang:trace_info(P, tracer)],
                  F =/= [] orelse T =/= []].

%% Functions of every loaded module with a trace pattern (local, global,
%% meta, counters).
patterns() ->
    [{MFA, I} || {M, _} <- code:all_loaded(),
                 {F, A} <- functions(M),
                 MFA <- [{M, F, A}],
                 {all, I} <- [erlang:trace_info(MFA, all)],
                 not ?L:no_pattern(MFA) orelse counters(I)].

functions(M) ->
    try M:module_info(functions) catch _:_ -> [] end.

counters(false) -> false;
counters(I) ->
    lists:any(fun({K, V}) ->
                      lists:member(K, [call_count, call_time]) andalso
                          V =/= false
              end, I).

%%% ------------------------------------------------------------------------
%%% The cycles, on the peer
%%% ------------------------------------------------------------------------

%% @doc Runs N cycles of Kind; returns the number of sessions started.
-spec cycles(atom(), pos_integer(), file:filename()) -> non_neg_integer().
cycles(Kind, N, Dir) ->
    group_leader(whereis(beamprobe_lifecycle_null), self()),
    rand:seed(exsss, {N, erlang:phash2(Kind), 7}),
    lists:sum([cycle(Kind, I, Dir) || I <- lists:seq(1, N)]).

out(Dir, Kind, I) ->
    filename:join(Dir, lists:concat([Kind, "-", I, "-",
                                     erlang:unique_integer([positive])])).

rm(D) -> _ = file:del_dir_r(D), ok.

ok(S) -> {ok, #{}} = beamprobe:stop(S), ok.

%% stop/1 has returned (or the session's process has ended): its trace
%% directory D is no longer open in this node (it was until the session's
%% resource was garbage collected, which a long-lived process holding an
%% old reference put off indefinitely).
%% The mappings of more than 64 MiB (a session's rings are one mapping of
%% `buffer' x its thread slots; glibc's arenas are 64 MiB at most).
big_maps() ->
    {ok, M} = file:read_file("/proc/" ++ os:getpid() ++ "/maps"),
    [{A, B} || L <- binary:split(M, <<"\n">>, [global, trim]),
               [R | _] <- [binary:split(L, <<" ">>)],
               [A0, B0] <- [binary:split(R, <<"-">>)],
               A <- [binary_to_integer(A0, 16)],
               B <- [binary_to_integer(B0, 16)],
               B - A > 64 * 1024 * 1024].

%% Once stop/1 has returned and the janitor (and the system monitor's
%% process, for a session with `monitor') have handled the leave, the
%% session's ring mapping is gone (it stayed until those long-lived
%% processes, holding the session's resource in their heap's garbage,
%% collected).
%% (Not checked under test/asan/run.sh: AddressSanitizer's allocator maps
%% regions of that size as it goes.)
unmapped(Before) ->
    _ = sys:get_state(beamprobe_janitor),
    _ = sys:get_state(beamprobe_monitor),
    case string:find(os:getenv("LD_PRELOAD", ""), "asan") of
        nomatch -> [] = big_maps() -- Before;
        _ -> ok
    end,
    ok.

closed(D) ->
    Fd = "/proc/" ++ os:getpid() ++ "/fd/",
    {ok, Fds} = file:list_dir(Fd),
    Open = [F || F <- Fds, {ok, T} <- [file:read_link(Fd ++ F)],
                 lists:prefix(D, T)],
    [] = Open,
    ok.

start(Spec) ->
    case beamprobe:start(Spec) of
        {ok, S} -> S;
        E -> error({start_failed, Spec, E})
    end.

%% A short wait for the workload to produce some events (not an
%% assertion: any number is fine).
some() -> timer:sleep(rand:uniform(4) - 1).

cycle(file, I, Dir) ->
    D = out(Dir, file, I),
    Spec = case I rem 3 of
               0 -> #{calls => [?ADD], return => true};
               1 -> #{calls => [?ADD, {lists, seq, 2}],
                      events => [send, 'receive', procs, gc],
                      buffer => 65536};
               2 -> #{procs => new, events => [call, send, running],
                      calls => [?ADD],
                      %% The node's one system monitor, and a sampler.
                      monitor => #{long_gc => 50, busy_port => true,
                                   long_schedule => 100},
                      sample => #{interval => 10,
                                  what => [memory, run_queues]}}
           end,
    Big = big_maps(),
    S = start(Spec#{output => {file, D}, buffer => 24 * 1024 * 1024}),
    some(),
    ok(S),
    ok = closed(D),
    ok = unmapped(Big),
    rm(D),
    1;
cycle(dump, I, Dir) ->
    D = out(Dir, dump, I),
    S = start(#{calls => [?ADD], overflow => drop_oldest, buffer => 65536,
                output => {file, D}}),
    some(),
    _ = [ok = beamprobe:dump(S) || _ <- lists:seq(1, 1 + I rem 2)],
    ok(S),
    ok = closed(D),
    rm(D),
    1;
cycle(handler, I, _Dir) ->
    Mode = lists:nth(1 + I rem 3, [ok, crash, block]),
    S = start(#{calls => [?ADD], output => {handler, ?MODULE, Mode}}),
    timer:sleep(5),
    ok(S),
    1;
cycle(tcp, I, Dir) ->
    %% A real receiver (bin/beamprobe receive: handshake, ACKs) every
    %% third time, a client that connects and never answers (the sink
    %% waits about a second for its ACKs at the end) every sixth time,
    %% else nobody listening (the sink retries until the end).
    D = out(Dir, tcp, I),
    {Addr, Rx} = case I rem 6 of
                     0 -> {"127.0.0.1:" ++ integer_to_list(recv_port()),
                           none};
                     R when R =:= 1; R =:= 4 ->
                         case receiver_cli(D ++ "-rx") of
                             {Port, P} ->
                                 {"127.0.0.1:" ++ integer_to_list(Port), P};
                             none ->  % no bin/beamprobe (a rebar3 build)
                                 {"127.0.0.1:" ++
                                      integer_to_list(recv_port()), none}
                         end;
                     _ -> {"127.0.0.1:" ++ integer_to_list(closed_port()),
                           none}
                 end,
    Out = case I rem 4 of
              3 -> [{file, D}, {tcp, Addr}];
              _ -> {tcp, Addr}
          end,
    S = start(#{calls => [?ADD], output => Out}),
    some(),
    ok(S),
    ok = receiver_done(Rx),
    rm(D),
    rm(D ++ "-rx"),
    1;
cycle(lttng, I, Dir) ->
    D = out(Dir, lttng, I),
    Out = case I rem 2 of 0 -> lttng; 1 -> [{file, D}, lttng] end,
    S = start(#{calls => [?ADD], output => Out}),
    some(),
    ok(S),
    rm(D),
    1;
cycle(usdt, I, Dir) ->
    D = out(Dir, usdt, I),
    Out = case I rem 2 of 0 -> usdt; 1 -> [{file, D}, usdt] end,
    S = start(#{calls => [?ADD], output => Out}),
    some(),
    ok(S),
    rm(D),
    1;
cycle(overlap, I, Dir) ->
    K = 2 + rand:uniform(7) - 1,
    Ds = [out(Dir, overlap, I * 10 + J) || J <- lists:seq(1, K)],
    Ss = [start(overlap_spec(J, D)) || {J, D} <- lists:enumerate(Ds)],
    some(),
    %% Stopped in a random order; one in three killed instead.
    Order = [S || {_, S} <- lists:sort([{rand:uniform(), S} || S <- Ss])],
    _ = [case rand:uniform(3) of
             1 -> kill_session(S);
             _ -> ok(S)
         end || S <- Order],
    _ = [rm(D) || D <- Ds],
    K;
cycle(shell, I, _Dir) ->
    Null = whereis(beamprobe_lifecycle_null),
    Opts = [{io_server, Null}],
    %% A trace that ends by its count, one that runs until clear/0, and
    %% one replaced by calling again on the same function.
    _ = beamprobe:calls("beamprobe_workload:add/2", 3, Opts),
    _ = beamprobe:calls("lists:seq/2 -> return", {1000, 1000}, Opts),
    _ = beamprobe:calls("lists:seq/2", 100000, Opts),
    _ = beamprobe:messages("send", 10, Opts),
    some(),
    case I rem 2 of
        0 -> ok = beamprobe:clear();
        1 ->
            _ = wait_until(fun() -> length(beamprobe:list()) =< 3 end),
            ok = beamprobe:clear()
    end,
    [] = beamprobe:list(),
    4;
cycle(profile, I, _Dir) ->
    Opts = case I rem 3 of
               0 -> #{time => 10, print => false};
               1 -> #{time => 10, print => false, timing => false};
               2 -> #{time => 10, print => false, per_process => true}
           end,
    {ok, _} = beamprobe:profile([?ADD, {lists, seq, 2}], Opts),
    %% One whose caller is killed while it runs.
    P = spawn(fun() -> beamprobe:profile(?ADD, #{time => 1000,
                                                   print => false}) end),
    timer:sleep(5),
    exit(P, kill),
    %% Its worker sees the caller gone and restores what it set; the
    %% next run is refused (profile_running) until then.
    _ = wait_until(fun() -> whereis(beamprobe_profile) =:= undefined andalso
                                whereis(beamprobe_profile_guard) =:= undefined
                   end),
    2;
cycle(follow, I, Dir) ->
    D = out(Dir, follow, I),
    Big = big_maps(),
    Limits = case I rem 2 of
                 0 -> #{};
                 1 -> #{limits => #{seconds => 0.02}}
             end,
    S = start(Limits#{follow => #{from => "follow_request:root/2"},
                      output => {file, D}}),
    some(),
    case I rem 2 of
        0 -> ok;
        1 ->
            %% Ended by its limit: as any session, it keeps its summary,
            %% not its directory and rings (cycle(limits, ...)).
            _ = wait_until(fun() ->
                                   case beamprobe:info(S) of
                                       {ok, #{stop_reason := R}} -> R =/= none;
                                       _ -> false
                                   end
                           end),
            ok = closed(D),
            ok = unmapped(Big)
    end,
    ok(S),
    rm(D),
    1;
cycle(limits, I, Dir) ->
    D = out(Dir, limits, I),
    Spec = case I rem 4 of
               0 -> #{limits => #{events => 3}};
               1 -> #{limits => #{seconds => 0.01}};
               2 -> #{limits => #{bytes => 4096}};
               3 -> #{limits => #{rate => {1, 1000}}, on_rate => stop}
           end,
    Big = big_maps(),
    S = start(Spec#{calls => [?ADD, {lists, seq, 2}], return => true,
                    output => {file, D}}),
    _ = ?L:wait_ended(S, 10000),
    %% An ended session keeps its summary for stop/1, not its directory
    %% and rings: an owner that never calls stop/1 (and lives on) would
    %% otherwise keep them mapped, and resident, for as long as it lives.
    ok = closed(D),
    ok = unmapped(Big),
    %% The summary taken every other time; else the session stays until
    %% its owner (the process running the cycles) ends.
    case I rem 2 of
        0 -> ok(S);
        1 -> ok
    end,
    rm(D),
    1;
cycle(owner_killed, I, Dir) ->
    D = out(Dir, owner, I),
    Self = self(),
    Owner = spawn(fun() ->
                          S = start(#{calls => [?ADD], output => {file, D}}),
                          Self ! {session, self(), S},
                          receive after infinity -> ok end
                  end),
    S = receive {session, Owner, S0} -> S0 end,
    some(),
    Ref = monitor(process, S),
    exit(Owner, kill),
    receive {'DOWN', Ref, _, _, _} -> ok end,
    ok = closed(D),
    rm(D),
    1;
cycle(session_killed, I, Dir) ->
    D = out(Dir, killed, I),
    Spec = case I rem 2 of
               0 -> #{calls => [?ADD], output => {file, D}};
               1 -> #{calls => [?ADD], events => [send],
                      output => [{file, D}, {handler, ?MODULE, ok}]}
           end,
    S = start(Spec),
    some(),
    kill_session(S),
    rm(D),
    1;
cycle(nif_reload, I, Dir) ->
    D = out(Dir, reload, I),
    S = start(#{calls => [?ADD], output => {file, D}}),
    some(),
    NIF = beamprobe_nif,
    _ = code:purge(NIF),
    {module, NIF} = code:load_file(NIF),
    _ = code:purge(NIF),
    true = code:delete(NIF),
    _ = code:purge(NIF),
    {module, NIF} = code:ensure_loaded(NIF),
    ok(S),
    rm(D),
    1.

overlap_spec(J, D) ->
    Base = #{calls => [lists:nth(1 + J rem 2, [?ADD, {lists, seq, 2}])]},
    case J rem 4 of
        0 -> Base#{output => {file, D}};
        1 -> Base#{output => {file, D}, overflow => drop_oldest,
                   buffer => 65536, events => [send]};
        2 -> Base#{output => [{file, D}, {handler, ?MODULE, ok}],
                   return => true};
        3 -> Base#{output => usdt, events => ['receive']}
    end.

kill_session(S) ->
    Ref = monitor(process, S),
    exit(S, kill),
    receive {'DOWN', Ref, _, _, _} -> ok end,
    %% The janitor cleans up after it.
    _ = wait_until(fun() -> not lists:member(S, beamprobe:list()) end),
    ok.

wait_until(F) -> ?L:wait_until(F, 10000).

%% `bin/beamprobe receive' on a free loopback port, writing into Dir:
%% {its port, the Erlang port running it}, or none without the command.
receiver_cli(Dir) ->
    Bin = filename:join([filename:dirname(code:which(beamprobe)), "..",
                         "bin", "beamprobe"]),
    case filelib:is_regular(Bin) of
        true -> receiver_cli(Bin, Dir);
        false -> none
    end.

receiver_cli(Bin, Dir) ->
    P = open_port({spawn_executable, Bin},
                  [{args, ["receive", "--listen", "127.0.0.1:0", "-o", Dir]},
                   stderr_to_stdout, exit_status, {line, 256}, binary]),
    receive
        {P, {data, {eol, <<"beamprobe: listening on port ", Rest/binary>>}}} ->
            [N | _] = binary:split(Rest, <<",">>),
            {binary_to_integer(N), P}
    after 10000 -> error(receiver_not_listening)
    end.

%% The receiver ends by itself once the session has ended.
receiver_done(none) -> ok;
receiver_done(P) ->
    receive
        {P, {exit_status, 0}} -> ok;
        {P, {exit_status, St}} -> error({receiver_failed, St})
    after 10000 -> error(receiver_still_running)
    end.

recv_port() ->
    beamprobe_lifecycle_recv ! {port, self()},
    receive {port, P} -> P end.

%% A loopback port nobody listens on.
closed_port() ->
    {ok, L} = gen_tcp:listen(0, [{ip, loopback}]),
    {ok, P} = inet:port(L),
    ok = gen_tcp:close(L),
    P.

%%% ------------------------------------------------------------------------
%%% The handler
%%% ------------------------------------------------------------------------

%% @doc The handler's mode is its state.
-spec init(ok | crash | block) -> {ok, ok | crash | block}.
init(Mode) -> {ok, Mode}.

%% @doc `ok' takes the events, `crash' raises, `block' never returns.
-spec handle_events(list(), ok | crash | block) -> {ok, ok}.
handle_events(_Events, ok) -> {ok, ok};
handle_events(_Events, crash) -> error(handler_crash);
handle_events(_Events, block) -> receive after infinity -> {ok, ok} end.

%% @doc Nothing to clean.
-spec terminate(term(), term()) -> ok.
terminate(_Reason, _State) -> ok.
