%%% @doc USDT probes and user annotations (docs/usdt.md), with the real
%%% tools: readelf/gdb list the probes of the built NIF; bpftrace attached
%%% by pid to a node counts exactly N beamprobe:call probes for N traced
%%% calls and reads their typed arguments; gdb stops on
%%% `-probe-stap beamprobe:annotate' and reads its arguments; an annotation
%%% appears in the CTF trace (babeltrace2), `bin/beamprobe print', `stats'
%%% and the Perfetto export; an annotation goes into every session tracing
%%% the caller and costs no NIF call while nothing wants it (the gate); a
%%% usdt sink's own filter; gdb stops on `-probe-stap beamprobe:call';
%%% SystemTap lists the probes and checks the example script (and runs it
%%% where the kernel's build tree exists).  Cases that need root,
%%% bpftrace, tracefs, systemtap or the kernel's build tree skip with the
%%% reason where the machine forbids them.
-module(beamprobe_usdt_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include("../include/beamprobe_events.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([probes_listed/1, bpftrace_counts_calls/1, gdb_annotate/1,
         annotation_everywhere/1, annotate_unwanted/1, usdt_output_only/1,
         usdt_bad_config/1, examples_run/1, annotate_race/1,
         annotate_gate/1, gdb_call/1, gdb_call_richest/1,
         systemtap_listed/1,
         systemtap_runs/1, annotate_every_session/1,
         bpftrace_sink_filter/1, bpftrace_tid_past_slots/1,
         usdt_enabled_names/1]).

all() ->
    [probes_listed, usdt_enabled_names, usdt_bad_config, usdt_output_only, annotate_unwanted,
     annotate_gate, annotate_every_session,
     annotation_everywhere, annotate_race, gdb_annotate, bpftrace_counts_calls,
     examples_run, bpftrace_sink_filter, bpftrace_tid_past_slots, gdb_call, gdb_call_richest, systemtap_listed, systemtap_runs].

init_per_suite(Config) ->
    ok = beamprobe_test_lib:require_tracer(),
    Config.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    beamprobe_test_lib:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    beamprobe_test_lib:clear_trace_state().

%%% ------------------------------------------------------------------------

root() -> filename:dirname(filename:dirname(code:which(beamprobe))).
%% The checkout this suite was compiled from (c_src/, examples/): not
%% root() when a build tool's _build holds the application (rebar3 ct).
src_root() ->
    Src = proplists:get_value(source, ?MODULE:module_info(compile)),
    filename:dirname(filename:dirname(Src)).
%% The library the nodes load (BEAMPROBE_NIF: the ASan build, test/asan).
so() ->
    case os:getenv("BEAMPROBE_NIF") of
        false -> filename:join([root(), "priv", "beamprobe_nif.so"]);
        Path -> Path ++ ".so"
    end.

%% The probe names declared in c_src/beamprobe_probes.d.
declared() ->
    {ok, D} = file:read_file(filename:join([src_root(), "c_src",
                                            "beamprobe_probes.d"])),
    {match, Ms} = re:run(D, "probe\\s+([a-z_]+)\\s*\\(",
                         [global, {capture, all_but_first, binary}]),
    lists:usort([N || [N] <- Ms]).

%% Every declared probe is in the built library, with a semaphore, as
%% gdb's `info probes' lists them (and the list is not empty).
probes_listed(_Config) ->
    Names = declared(),
    ?assert(length(Names) >= 20),
    Gdb = os:find_executable("gdb"),
    ?assertNotEqual(false, Gdb),
    {0, Out} = run(Gdb, ["-batch", "-ex", "info probes", so()], 60000),
    ct:log("~s", [Out]),
    Lines = [L || L <- binary:split(Out, <<"\n">>, [global]),
                  binary:match(L, <<"beamprobe">>) =/= nomatch],
    Listed = lists:usort(
               [N || L <- Lines,
                     [<<"stap">>, <<"beamprobe">>, N, _Where, Sem | _]
                         <- [binary:split(L, <<" ">>, [global, trim_all])],
                     Sem =/= <<"0x0000000000000000">>]),
    ?assertEqual(Names, Listed).

%% A usdt sink alone: the session runs and counts its events (no file).
usdt_output_only(_Config) ->
    W = beamprobe_workload:start_worker(),
    S = beamprobe_test_lib:start(#{procs => [W],
                                   calls => [{beamprobe_workload, add, 2}],
                                   output => usdt}),
    [beamprobe_workload:run(W, fun() -> beamprobe_workload:add(I, 1) end)
     || I <- lists:seq(1, 5)],
    #{events := E, output := Out} = beamprobe_test_lib:stop(S),
    ?assertEqual(5, E),
    ?assertEqual([usdt], Out),
    beamprobe_workload:stop_worker(W).

%% Malformed usdt sinks are refused with a reason.
usdt_bad_config(_Config) ->
    ?assertMatch({error, _}, beamprobe:start(#{output => {usdt, #{bogus => 1}}})),
    ?assertMatch({error, _}, beamprobe:start(#{output => {usdt, #{events => [nope]}}})),
    ?assertMatch({error, _}, beamprobe:start(#{output => [usdt, usdt]})),
    ?assertMatch({error, _}, beamprobe:start(#{output => {usdt, notamap}})),
    ?assertEqual([], beamprobe:list()).

%% Nothing wants an annotation: ok, no session disturbed; and a process
%% no session traces writes nothing into a running session.
annotate_unwanted(Config) ->
    ?assertEqual(ok, beamprobe:annotate(nobody_listens)),
    ?assertEqual(ok, beamprobe:annotate(tag, {deep, [1, 2, 3]})),
    Dir = beamprobe_test_lib:dir(Config, "t"),
    W = beamprobe_workload:start_worker(),
    S = beamprobe_test_lib:start(#{procs => [W], events => [procs],
                                   output => {file, Dir}}),
    ok = beamprobe:annotate(untraced_caller, 1),
    beamprobe_workload:run(W, fun() -> beamprobe:annotate(traced, 2) end),
    _ = beamprobe_test_lib:stop(S),
    Evs = beamprobe_test_lib:trace(Dir),
    [A] = beamprobe_test_lib:events(Evs, "annotation"),
    ?assertEqual(<<"traced">>, beamprobe_test_lib:field(A, "tag")),
    beamprobe_workload:stop_worker(W).

%% The gate: while no session runs and no tool is attached,
%% beamprobe:annotate/2 does not call the NIF at all (the VM's call_count
%% on beamprobe_nif:user_annotate/2 stays 0); once start/1 returned, every
%% annotation reaches the NIF; after the last session, within the gate's
%% poll (1 s), none again.
annotate_gate(_Config) ->
    ?assertEqual(ok, wait_flag(false, 30)),
    MFA = {beamprobe_nif, user_annotate, 2},
    1 = erlang:trace_pattern(MFA, true, [call_count]),
    try
        [ok = beamprobe:annotate(idle, I) || I <- lists:seq(1, 1000)],
        ?assertEqual({call_count, 0}, erlang:trace_info(MFA, call_count)),
        W = beamprobe_workload:start_worker(),
        S = beamprobe_test_lib:start(#{procs => [W], events => [procs],
                                       output => usdt}),
        ?assertEqual(true, beamprobe_gate_flag:on()),
        [ok = beamprobe:annotate(busy, I) || I <- lists:seq(1, 1000)],
        ?assertEqual({call_count, 1000}, erlang:trace_info(MFA, call_count)),
        _ = beamprobe_test_lib:stop(S),
        beamprobe_workload:stop_worker(W),
        ?assertEqual(ok, wait_flag(false, 30)),
        1 = erlang:trace_pattern(MFA, true, [call_count]),
        [ok = beamprobe:annotate(idle, I) || I <- lists:seq(1, 1000)],
        ?assertEqual({call_count, 0}, erlang:trace_info(MFA, call_count)),
        {ok, #{flag := false, wanted := false, loads := L}} = beamprobe_gate:state(),
        ?assert(L >= 2)
    after
        erlang:trace_pattern(MFA, false, [call_count])
    end.

wait_flag(Want, 0) -> {timeout, Want};
wait_flag(Want, N) ->
    case beamprobe_gate_flag:on() of
        Want -> ok;
        _ -> timer:sleep(100), wait_flag(Want, N - 1)
    end.

%% Processes annotate in a loop while sessions (with file, usdt and handler
%% sinks, all processes) start and stop under them: no crash, every
%% annotator alive and answering, every session's annotations readable.
annotate_race(Config) ->
    Parent = self(),
    Spam = [spawn_link(fun() -> spam(Parent, I, 0) end) || I <- lists:seq(1, 4)],
    Dirs = [begin
                Dir = beamprobe_test_lib:dir(Config, "r" ++ integer_to_list(K)),
                S = beamprobe_test_lib:start(
                      #{procs => Spam, events => [procs],
                        limits => #{events => 5000},
                        output => [{file, Dir}, usdt]}),
                timer:sleep(20),
                _ = beamprobe_test_lib:stop(S),
                Dir
            end || K <- lists:seq(1, 15)],
    Counts = [begin P ! {count, self()}, receive {P, N} -> N end end
              || P <- Spam],
    [begin unlink(P), exit(P, kill) end || P <- Spam],
    ?assert(lists:all(fun(N) -> N > 0 end, Counts)),
    Total = lists:sum([beamprobe_test_lib:count(beamprobe_test_lib:trace(D),
                                                "annotation") || D <- Dirs]),
    ct:log("annotations per spammer ~p, in the traces ~p", [Counts, Total]),
    ?assert(Total > 0).

spam(Parent, I, N) ->
    receive {count, From} -> From ! {self(), N}, spam(Parent, I, N)
    after 0 ->
            ok = beamprobe:annotate({spammer, I}, N),
            spam(Parent, I, N + 1)
    end.

%% An annotation of a traced process: in the CTF trace (babeltrace2, both
%% fields, bounded), in `print', `stats' and the Perfetto export.
annotation_everywhere(Config) ->
    Dir = beamprobe_test_lib:dir(Config, "t"),
    W = beamprobe_workload:start_worker(),
    S = beamprobe_test_lib:start(#{procs => [W],
                                   calls => [{beamprobe_workload, add, 2}],
                                   capture => #{bytes => 100},
                                   output => [{file, Dir},
                                              {handler, beamprobe_test_handler,
                                               #{parent => self()}}]}),
    Huge = binary:copy(<<"x">>, 1 bsl 20),
    beamprobe_workload:run(
      W, fun() ->
                 beamprobe_workload:add(1, 1),
                 ok = beamprobe:annotate(phase, <<"warmup done">>),
                 ok = beamprobe:annotate({request, 7}),
                 ok = beamprobe:annotate(huge, Huge)
         end),
    _ = beamprobe_test_lib:stop(S),
    %% The handler sink gets them as maps, with the caller's pid.
    HAs = [E || #{event := annotation} = E <- handler_events([])],
    ?assertMatch([#{pid := W, tag := <<"phase">>,
                    value := <<"<<\"warmup done\">>">>},
                  #{pid := W, tag := <<"undefined">>, value := <<"{request,7}">>},
                  #{pid := W, tag := <<"huge">>}], HAs),
    %% beamprobe_printer (the printing handler) as `print' does.
    ?assertEqual(<<"annotation phase: <<\"warmup done\">>">>,
                 iolist_to_binary(beamprobe_printer:format_event(hd(HAs), false))),
    Evs = beamprobe_test_lib:trace(Dir),
    As = beamprobe_test_lib:events(Evs, "annotation", W),
    ?assertEqual(3, length(As)),
    [A1, A2, A3] = As,
    ?assertEqual(<<"phase">>, beamprobe_test_lib:field(A1, "tag")),
    ?assertEqual(<<"<<\"warmup done\">>">>, beamprobe_test_lib:field(A1, "value")),
    ?assertEqual(<<"undefined">>, beamprobe_test_lib:field(A2, "tag")),
    ?assertEqual(<<"{request,7}">>, beamprobe_test_lib:field(A2, "value")),
    ?assert(byte_size(beamprobe_test_lib:field(A3, "value")) =< 100),
    {0, Print} = cli(["print", Dir]),
    ?assertNotEqual(nomatch, binary:match(Print, <<"annotation phase: <<\"warmup done\">>">>)),
    ?assertNotEqual(nomatch, binary:match(Print, <<"annotation {request,7}">>)),
    {0, Stats} = cli(["stats", Dir]),
    ?assertNotEqual(nomatch, binary:match(Stats, <<"Annotations: 3">>)),
    Json = filename:join([Dir, "..", "p.json"]),
    {0, _} = cli(["export", "-F", "perfetto", "-o", Json, Dir]),
    {ok, JB} = file:read_file(Json),
    %% python3's json module as the reader of the export.
    Py = "import json,sys\n"
         "d=json.load(open(sys.argv[1]))\n"
         "d=d.get('traceEvents',d) if isinstance(d,dict) else d\n"
         "a=[e for e in d if e.get('cat')=='annotation']\n"
         "print(len(a), sorted(e['name'] for e in a), "
         "all(e['ph']=='i' and e['s']=='t' for e in a))\n",
    PyFile = filename:join([Dir, "..", "check.py"]),
    ok = file:write_file(PyFile, Py),
    {0, PyOut} = run(os:find_executable("python3"), [PyFile, Json], 60000),
    ct:log("~s~n~s", [PyOut, binary:part(JB, 0, min(2000, byte_size(JB)))]),
    ?assertEqual(<<"3 ['annotation', 'huge', 'phase'] True\n">>, PyOut),
    beamprobe_workload:stop_worker(W).

%% gdb (batch mode) attached to a node stops on beamprobe:annotate and
%% reads its six arguments.
gdb_annotate(_Config) ->
    Gdb = os:find_executable("gdb"),
    ?assertNotEqual(false, Gdb),
    {Node, OsPid} = start_node(["annotate", "go"]),
    {Status, Out} =
        run(Gdb, ["-batch", "-nx", "-p", OsPid,
                  "-ex", "handle SIGUSR1 SIGUSR2 SIGALRM SIGCHLD SIGPIPE nostop noprint pass",
                  "-ex", "break -probe-stap beamprobe:annotate",
                  "-ex", "continue",
                  "-ex", "printf \"ARGC %d\\n\", $_probe_argc",
                  "-ex", "printf \"KEY %lu\\n\", $_probe_arg0",
                  "-ex", "printf \"TID %lu\\n\", $_probe_arg1",
                  "-ex", "printf \"TAG %s LEN %d\\n\", (char *)$_probe_arg2, (int)$_probe_arg3",
                  "-ex", "printf \"VALUE %s LEN %d\\n\", (char *)$_probe_arg4, (int)$_probe_arg5",
                  "-ex", "detach"], 120000),
    NodeOut = node_wait(Node),
    ct:log("gdb ~p:~n~s~nnode:~n~s", [Status, Out, NodeOut]),
    case binary:match(Out, <<"ptrace: Operation not permitted">>) of
        nomatch -> gdb_check(Out, NodeOut);
        _ -> {skip, "gdb may not ptrace the node here"}
    end.

gdb_check(Out, NodeOut) ->
    ?assertNotEqual(nomatch, binary:match(Out, <<"ARGC 6">>)),
    ?assertNotEqual(nomatch, binary:match(Out, <<"TAG usdt_tag LEN 8">>)),
    ?assertNotEqual(nomatch, binary:match(Out, <<"VALUE {value,42,\"text\"} LEN 17">>)),
    {match, [Tid]} = re:run(Out, "TID ([0-9]+)", [{capture, all_but_first, list}]),
    ?assert(list_to_integer(Tid) > 0),
    ?assertNotEqual(nomatch, binary:match(NodeOut, <<"attached true">>)),
    ?assertNotEqual(nomatch, binary:match(NodeOut, <<"gate true">>)).

%% bpftrace attached by pid counts exactly N beamprobe:call probes for N
%% traced calls, reads their typed arguments, binds the process key to its
%% <0.N.0> text and registered name through beamprobe:process and the
%% function key to its
%% m:f/a text through beamprobe:function; the file sink next to it has the
%% same N calls and N returns.
bpftrace_counts_calls(Config) ->
    case bpftrace_ready() of
        {skip, _} = Skip -> Skip;
        {ok, Bt} -> bpftrace_counts_calls(Bt, Config)
    end.

bpftrace_counts_calls(Bt, Config) ->
    N = 25,
    Dir = beamprobe_test_lib:dir(Config, "t"),
    {Node, OsPid} = start_node(["calls", integer_to_list(N), Dir]),
    P = "usdt:" ++ so() ++ ":beamprobe:",
    Script =
        P ++ "call { @calls = count(); printf(\"C %lu %lu %lu %s|%s\\n\", "
             "arg0, arg1, arg2, str(arg3, arg4), str(arg5)); }\n" ++
        P ++ "return_from { @returns = count(); }\n" ++
        P ++ "process { printf(\"P %lu %s %s|\\n\", arg0, str(arg1, arg2), "
             "str(arg3, arg4)); }\n" ++
        P ++ "function { printf(\"F %lu %s\\n\", arg0, str(arg1, arg2)); }\n",
    {_, Out} = run(Bt, ["-p", OsPid, "-e", Script], 120000),
    NodeOut = node_wait(Node),
    ct:log("bpftrace:~n~s~nnode:~n~s", [Out, NodeOut]),
    case re:run(Out, "ERROR: (?!.*RLIMIT_MEMLOCK).*",
                [{capture, first, binary}]) of
        {match, [Err]} -> ct:fail({bpftrace_error, Err});
        nomatch -> ok
    end,
    Lines = binary:split(Out, <<"\n">>, [global]),
    Calls = [binary:split(Rest, <<" ">>, [global]) ||
                <<"C ", Rest/binary>> <- Lines],
    ?assertEqual(N, length(Calls)),
    ?assertNotEqual(nomatch, binary:match(Out, <<"@calls: 25">>)),
    ?assertNotEqual(nomatch, binary:match(Out, <<"@returns: 25">>)),
    {match, [WText]} = re:run(NodeOut, "done worker (<[0-9.]+>)",
                              [{capture, all_but_first, binary}]),
    Keys = lists:usort([K || [K, _T, _F | _] <- Calls]),
    [Key] = Keys,
    %% the process's <0.N.0> text and its registered name
    ?assert(lists:member(<<"P ", Key/binary, " ", WText/binary,
                           " usdt_worker|">>, Lines)),
    FKeys = lists:usort([F || [_, _, F | _] <- Calls]),
    [FKey] = FKeys,
    ?assert(lists:member(<<"F ", FKey/binary, " beamprobe_workload:add/2">>, Lines)),
    ?assert(lists:all(fun([_, T | _]) -> binary_to_integer(T) > 0 end, Calls)),
    Texts = [iolist_to_binary(lists:join(<<" ">>, Rest)) || [_, _, _ | Rest] <- Calls],
    ?assertEqual([iolist_to_binary(["beamprobe_workload:add/2|(",
                                    integer_to_list(I), ", 1)"])
                  || I <- lists:seq(1, N)], Texts),
    %% The file sink next to it: every call and every return.
    Evs = beamprobe_test_lib:trace(Dir),
    ?assertEqual(N, beamprobe_test_lib:count(Evs, "call")),
    ?assertEqual(N, beamprobe_test_lib:count(Evs, "return_from")).

%% bpftrace needs root and tracefs (mounted here when missing), and the
%% right to load BPF programs and attach uprobes, which root lacks in a
%% container without CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN: checked by
%% attaching to the library's beamprobe:annotate probe once.
bpftrace_ready() ->
    case {os:find_executable("bpftrace"), os:cmd("id -u")} of
        {false, _} -> {skip, "bpftrace is not installed (make deps)"};
        {_, "0\n"} = {Bt, _} ->
            case filelib:is_file("/sys/kernel/tracing/uprobe_events") of
                true -> bpftrace_attaches(Bt);
                false ->
                    R = os:cmd("mount -t tracefs nodev /sys/kernel/tracing 2>&1"),
                    case filelib:is_file("/sys/kernel/tracing/uprobe_events") of
                        true -> bpftrace_attaches(Bt);
                        false -> {skip, "cannot mount tracefs: " ++ R}
                    end
            end;
        _ -> {skip, "bpftrace 0.17 runs only as root"}
    end.

bpftrace_attaches(Bt) ->
    Script = "usdt:" ++ so() ++ ":beamprobe:annotate { } "
        "BEGIN { printf(\"attached\\n\"); exit(); }",
    {Status, Out} = run(Bt, ["-e", Script], 60000),
    case {Status, binary:match(Out, <<"attached\n">>)} of
        {0, {_, _}} -> {ok, Bt};
        _ ->
            Errs = [L || L <- binary:split(Out, <<"\n">>, [global]),
                         binary:match(L, <<"ERROR">>) =/= nomatch,
                         binary:match(L, <<"RLIMIT_MEMLOCK">>) =:= nomatch],
            {skip, lists:flatten(
                     io_lib:format("bpftrace cannot attach here (exit ~p; "
                                   "privileges: CAP_BPF, CAP_PERFMON or "
                                   "CAP_SYS_ADMIN): ~ts",
                                   [Status, iolist_to_binary(
                                              lists:join(<<"; ">>, Errs))]))}
    end.

%% Every bpftrace script of examples/bpftrace runs against a node with a
%% usdt sink and prints what it promises, about the node's processes.
examples_run(_Config) ->
    case bpftrace_ready() of
        {skip, _} = Skip -> Skip;
        {ok, Bt} -> run_examples(Bt)
    end.

run_examples(Bt) ->
    Timeout = os:find_executable("timeout"),
    Ex = filename:join([src_root(), "examples", "bpftrace"]),
    Scripts = [{"calls_per_function.bt", ["@calls[beamprobe_workload:add/2]"]},
               {"call_latency.bt", ["@us[beamprobe_workload:add/2]"]},
               {"messages.bt", ["@msgs[~s, ~s]: ", "@bytes[~s, ~s]: "]},
               {"gc_pauses.bt", ["@pause_us[~s, minor]", "@max_us[~s]"]},
               {"offcpu.bt", ["@erlang_wait_us[~s]"]},
               {"annotations.bt", ["usdt_loop: "]}],
    %% A budget far beyond the scripts' 4 s each (bpftrace's own start
    %% takes 1-3 s here, more on a loaded machine: with 4 s a script the
    %% node once ended before the last one attached); ended when they are
    %% done (SIGTERM: init:stop/0).
    {Node, OsPid} = start_node(["loop", integer_to_list(15 * length(Scripts))]),
    {match, [W, Sink]} = re:run(element(2, Node), "worker (<[0-9.]+>) sink (<[0-9.]+>)",
                                [{capture, all_but_first, list}]),
    Results =
        [begin
             {_, Out} = run(Timeout, ["-s", "INT", "4", Bt, "-p", OsPid,
                                      filename:join(Ex, Script)], 60000),
             ct:log("~s:~n~s", [Script, Out]),
             [{Script, Want} || Want0 <- Wants,
                                Want <- [fmt(Want0, W, Sink)],
                                binary:match(Out, Want) =:= nomatch]
         end || {Script, Wants} <- Scripts],
    _ = os:cmd("kill -TERM " ++ OsPid),
    _ = node_wait(Node),
    ?assertEqual([], lists:append(Results)).

%% F with its ~s filled by the worker's text, then the sink's.
fmt(F, W, Sink) ->
    N = length(string:split(F, "~s", all)) - 1,
    iolist_to_binary(io_lib:format(F, lists:sublist([W, Sink], N))).

handler_events(Acc) ->
    receive
        {handler_events, _, Evs} -> handler_events(Acc ++ Evs);
        {handler_done, _, _, _} -> Acc;
        {handler_init, _} -> handler_events(Acc)
    after 10000 -> ct:fail({no_handler_done, Acc})
    end.

%%% ------------------------------------------------------------------------

%% Starts beamprobe_usdt_node Cmd Args in a VM of its own; returns its
%% port and OS pid once it has printed it.
start_node(Args) -> start_node([], Args).

%% The same with emulator flags (`+S 280:280').
start_node(Flags, Args) ->
    Erl = os:find_executable("erl"),
    Test = filename:dirname(code:which(beamprobe_usdt_node)),
    Port = open_port({spawn_executable, Erl},
                     [{args, Flags ++
                              ["-noshell", "-pa", filename:join(root(), "ebin"),
                              "-pa", Test, "-s", "beamprobe_usdt_node"
                              | Args]},
                      binary, exit_status, stderr_to_stdout]),
    node_pid(Port, <<>>).

node_pid(Port, Acc) ->
    receive
        {Port, {data, D}} ->
            Acc1 = <<Acc/binary, D/binary>>,
            case re:run(Acc1, "ospid ([0-9]+)\n", [{capture, all_but_first, list}]) of
                {match, [P]} -> {{Port, Acc1}, P};
                nomatch -> node_pid(Port, Acc1)
            end;
        {Port, {exit_status, S}} -> ct:fail({node_exited, S, Acc})
    after 30000 -> ct:fail({node_no_pid, Acc})
    end.

node_wait({Port, Acc}) ->
    receive
        {Port, {data, D}} -> node_wait({Port, <<Acc/binary, D/binary>>});
        {Port, {exit_status, _}} -> Acc
    after 60000 -> ct:fail({node_did_not_end, Acc})
    end.

%% Runs a tool (gdb, bpftrace, the CLI) without the sanitizer runtime the
%% ASan run preloads into the VMs (test/asan/run.sh).
run(Exe, Args, Timeout) ->
    Port = open_port({spawn_executable, Exe},
                     [{args, Args}, exit_status, binary, stream,
                      stderr_to_stdout, {env, [{"LD_PRELOAD", false}]}]),
    collect(Port, [], Timeout).

collect(Port, Acc, Timeout) ->
    receive
        {Port, {data, D}} -> collect(Port, [D | Acc], Timeout);
        {Port, {exit_status, S}} -> {S, iolist_to_binary(lists:reverse(Acc))}
    after Timeout -> ct:fail({timeout, iolist_to_binary(lists:reverse(Acc))})
    end.

cli(Args) -> run(filename:join([root(), "bin", "beamprobe"]), Args, 60000).

%%% ------------------------------------------------------------------------
%%% gdb on beamprobe:call

%% `break -probe-stap beamprobe:call' in gdb attached to a node whose
%% session has a usdt sink: gdb stops on the first traced call and reads
%% its typed arguments (key, tid, fkey, mfa and its length, args).
gdb_call(Config) ->
    Gdb = os:find_executable("gdb"),
    ?assertNotEqual(false, Gdb),
    Dir = beamprobe_test_lib:dir(Config, "t"),
    {Node, OsPid} = start_node(["calls", "3", Dir]),
    {Status, Out} =
        run(Gdb, ["-batch", "-nx", "-p", OsPid,
                  "-ex", "handle SIGUSR1 SIGUSR2 SIGALRM SIGCHLD SIGPIPE nostop noprint pass",
                  "-ex", "break -probe-stap beamprobe:call",
                  "-ex", "continue",
                  "-ex", "printf \"ARGC %d\\n\", $_probe_argc",
                  "-ex", "printf \"KEY %lu FKEY %lu\\n\", $_probe_arg0, $_probe_arg2",
                  "-ex", "printf \"MFA %s LEN %d\\n\", (char *)$_probe_arg3, (int)$_probe_arg4",
                  "-ex", "printf \"ARGS %s\\n\", (char *)$_probe_arg5",
                  "-ex", "delete",
                  "-ex", "detach"], 120000),
    NodeOut = node_wait(Node),
    ct:log("gdb ~p:~n~s~nnode:~n~s", [Status, Out, NodeOut]),
    case binary:match(Out, <<"ptrace: Operation not permitted">>) of
        _ when Status =/= 0 -> ct:fail({gdb_status, Status});
        nomatch ->
            ?assertNotEqual(nomatch, binary:match(Out, <<"ARGC 6">>)),
            ?assertNotEqual(nomatch, binary:match(Out, <<"MFA beamprobe_workload:add/2 LEN 24">>)),
            ?assertNotEqual(nomatch, binary:match(Out, <<"ARGS (1, 1)">>)),
            {match, [K, F]} = re:run(Out, "KEY ([0-9]+) FKEY ([0-9]+)",
                                     [{capture, all_but_first, list}]),
            ?assert(list_to_integer(K) > 0),
            ?assert(list_to_integer(F) > 0),
            %% the node went on and traced its calls
            ?assertNotEqual(nomatch, binary:match(NodeOut, <<"attached true">>)),
            ?assertEqual(3, beamprobe_test_lib:count(beamprobe_test_lib:trace(Dir), "call"));
        _ -> {skip, "gdb may not ptrace the node here"}
    end.

%% Two sessions with usdt sinks record the same calls: the probe fires
%% once per call with the richer of their renderings (docs/usdt.md), the
%% arguments of the `args => full' session over the `args => arity' one's
%% "undefined", whichever started first (the first session's rendering
%% before: "undefined" when it was the arity one), and the larger
%% capture's over the smaller's.  Each file keeps its own rendering.
gdb_call_richest(Config) ->
    Gdb = os:find_executable("gdb"),
    ?assertNotEqual(false, Gdb),
    gdb_call_richest(Gdb, Config, [{arity_first, full, arity},
                                   {full_first, full, arity},
                                   {small_first, big, small}]).

gdb_call_richest(_Gdb, _Config, []) -> ok;
gdb_call_richest(Gdb, Config, [{Case, Rich, Poor} | Rest]) ->
    Dir = beamprobe_test_lib:dir(Config, atom_to_list(Case)),
    {Node, OsPid} = start_node(["two", atom_to_list(Case), Dir]),
    Stop = ["-ex", "continue",
            "-ex", "printf \"ARGS %s\\n\", (char *)$_probe_arg5"],
    {Status, Out} =
        run(Gdb, ["-batch", "-nx", "-p", OsPid,
                  "-ex", "handle SIGUSR1 SIGUSR2 SIGALRM SIGCHLD SIGPIPE nostop noprint pass",
                  "-ex", "break -probe-stap beamprobe:call"]
                 ++ Stop ++ Stop ++ Stop ++
                 ["-ex", "delete", "-ex", "detach"], 120000),
    NodeOut = node_wait(Node),
    ct:log("~p: gdb ~p:~n~s~nnode:~n~s", [Case, Status, Out, NodeOut]),
    case binary:match(Out, <<"ptrace: Operation not permitted">>) of
        _ when Status =/= 0 -> ct:fail({gdb_status, Status});
        nomatch ->
            {match, Ms} = re:run(Out, "ARGS ([^\n]*)\n",
                                 [global, {capture, all_but_first, binary}]),
            Probe = [A || [A] <- Ms],
            ?assertNotEqual(nomatch, binary:match(NodeOut, <<"attached true">>)),
            File = fun(Name) ->
                           [beamprobe_test_lib:field(E, "args")
                            || E <- beamprobe_test_lib:events(
                                      beamprobe_test_lib:trace(
                                        filename:join(Dir, atom_to_list(Name))),
                                      "call")]
                   end,
            ct:log("probe ~p~n~p ~p~n~p ~p",
                   [Probe, Rich, File(Rich), Poor, File(Poor)]),
            %% one stop per call: the probe fired once for each
            ?assertEqual(3, length(Probe)),
            ?assertEqual(File(Rich), Probe),
            ?assertNotEqual(File(Poor), Probe),
            gdb_call_richest(Gdb, Config, Rest);
        _ -> {skip, "gdb may not ptrace the node here"}
    end.

%%% ------------------------------------------------------------------------
%%% SystemTap: examples/systemtap/beamprobe_calls.stp

%% stap needs a kernel build tree for every pass, even parsing (it reads
%% the kernel's .config).  The real one where it exists; else a stub made
%% from the running kernel's release and /proc/config.gz, enough for
%% passes 1-3 (parse, elaborate against the library's notes, translate),
%% never for building or running a module.
stap_tree(Config) ->
    Rel = string:trim(os:cmd("uname -r")),
    Real = filename:join(["/lib/modules", Rel, "build"]),
    case filelib:is_file(filename:join(Real, ".config")) of
        true -> {real, Real};
        false ->
            Stub = filename:join(?config(priv_dir, Config), "ktree"),
            ok = filelib:ensure_dir(filename:join([Stub, "include", "config", "x"])),
            Cfg = case file:read_file("/proc/config.gz") of
                      {ok, Z} -> zlib:gunzip(Z);
                      {error, _} -> <<"CONFIG_UPROBES=y\n">>
                  end,
            ok = file:write_file(filename:join(Stub, ".config"), Cfg),
            ok = file:write_file(filename:join([Stub, "include", "config",
                                                "kernel.release"]), Rel ++ "\n"),
            ok = file:write_file(filename:join(Stub, "Module.symvers"), <<>>),
            {stub, Stub, Real}
    end.

stap_r({real, T}) -> T;
stap_r({stub, T, _}) -> T.

stap_script() -> filename:join([root(), "examples", "systemtap", "beamprobe_calls.stp"]).

%% systemtap's own listing of the library's marks is every declared
%% probe; the example script parses, elaborates (its three probes resolve
%% to the addresses gdb gives for beamprobe:call, return_from and
%% exception_from, its $argN to the notes' arguments) and translates.
systemtap_listed(Config) ->
    case os:find_executable("stap") of
        false -> skip("systemtap is not installed (make deps installs it)");
        Stap -> systemtap_listed(Config, Stap)
    end.

systemtap_listed(Config, Stap) ->
    R = stap_r(stap_tree(Config)),
    {0, L} = run(Stap, ["-r", R, "-l", "process(\"" ++ so() ++ "\").mark(\"*\")"], 300000),
    ct:log("stap -l:~n~s", [L]),
    Marks = lists:usort([M || {match, [M]} <- [re:run(Line, "\\.mark\\(\"([a-z_]+)\"\\)",
                                                     [{capture, all_but_first, binary}])
                                             || Line <- binary:split(L, <<"\n">>, [global])]]),
    ?assertEqual(declared(), Marks),
    {S1, P1} = run(Stap, ["-r", R, "-p1", stap_script(), so()], 300000),
    ct:log("-p1 ~p:~n~s", [S1, P1]),
    ?assertEqual(0, S1),
    {S2, P2} = run(Stap, ["-r", R, "-p2", stap_script(), so()], 300000),
    ct:log("-p2 ~p:~n~s", [S2, P2]),
    ?assertEqual(0, S2),
    {0, Gdb} = run(os:find_executable("gdb"), ["-batch", "-ex", "info probes", so()], 60000),
    Addrs = [begin
                 {match, [A]} = re:run(Gdb, "stap +beamprobe +" ++ N ++ " +0x0*([0-9a-f]+) ",
                                       [{capture, all_but_first, binary}]),
                 A
             end || N <- ["call", "return_from", "exception_from"]],
    [?assertNotEqual(nomatch, binary:match(P2, <<".statement(0x", A/binary, ")">>))
     || A <- Addrs],
    {S3, P3} = run(Stap, ["-r", R, "-p3", stap_script(), so()], 300000),
    ?assertEqual(0, S3),
    %% the translated C reads the mfa string of return_from
    ?assertNotEqual(nomatch, binary:match(P3, <<"user_string_n">>)).

%% The script run for real (stap -x PID) against a node calling
%% beamprobe_workload:add/2 with a usdt sink: its report names the
%% function with its calls.  Needs the kernel's build tree (stap builds
%% and loads a kernel module; its bpf runtime cannot read mark arguments).
systemtap_runs(Config) ->
    case {os:find_executable("stap"), os:cmd("id -u")} of
        {false, _} -> skip("systemtap is not installed (make deps installs it)");
        {_, U} when U =/= "0\n" -> skip("stap -x loads a kernel module: root only");
        {Stap, _} ->
            case stap_tree(Config) of
                {stub, _, Real} ->
                    skip("no kernel build tree at " ++ Real ++
                         " (linux-headers for this kernel): stap cannot build "
                         "its kernel module here; systemtap_listed checked "
                         "passes 1-3 of the script");
                {real, _} -> systemtap_runs(Config, Stap)
            end
    end.

systemtap_runs(_Config, Stap) ->
    Timeout = os:find_executable("timeout"),
    {Node, OsPid} = start_node(["loop", "40"]),
    {S, Out} = run(Timeout, ["-s", "INT", "30", Stap, "-x", OsPid,
                             stap_script(), so()], 600000),
    _ = node_wait(Node),
    ct:log("stap ~p:~n~s", [S, Out]),
    ?assertMatch({match, _}, re:run(Out, "beamprobe_workload:add/2 +[1-9][0-9]* calls")).

%% A skip, with its reason printed on the console too.
skip(Why) ->
    ct:pal("~p: skipped: ~s", [?MODULE, Why]),
    {skip, Why}.

%% Three sessions at once: two trace the annotating process (one by pid,
%% one all processes), one traces another process: the annotation is in
%% the first two, once each, and not in the third.
annotate_every_session(Config) ->
    W = beamprobe_workload:start_worker(),
    Other = beamprobe_workload:start_worker(),
    [DA, DB, DC] = [beamprobe_test_lib:dir(Config, D) || D <- ["a", "b", "c"]],
    A = beamprobe_test_lib:start(#{procs => [W], events => [procs],
                                   output => {file, DA}}),
    B = beamprobe_test_lib:start(#{events => [procs], output => {file, DB}}),
    C = beamprobe_test_lib:start(#{procs => [Other], events => [procs],
                                   output => {file, DC}}),
    beamprobe_workload:run(W, fun() -> beamprobe:annotate(everywhere, 1) end),
    [_ = beamprobe_test_lib:stop(S) || S <- [A, B, C]],
    Of = fun(D) -> [beamprobe_test_lib:field(E, "tag")
                    || E <- beamprobe_test_lib:events(
                              beamprobe_test_lib:trace(D), "annotation", W)]
         end,
    ?assertEqual([<<"everywhere">>], Of(DA)),
    ?assertEqual([<<"everywhere">>], Of(DB)),
    ?assertEqual(0, beamprobe_test_lib:count(beamprobe_test_lib:trace(DC),
                                             "annotation")),
    beamprobe_workload:stop_worker(W),
    beamprobe_workload:stop_worker(Other).

%% A usdt sink's own filter: a session tracing calls and gc with a usdt
%% sink for gc only fires gc probes and no call probe (bpftrace attached
%% to both); the `process' probe names a process registered after the
%% session started (from its register trace event).
bpftrace_sink_filter(Config) ->
    case bpftrace_ready() of
        {skip, _} = Skip -> Skip;
        {ok, Bt} -> bpftrace_sink_filter(Bt, Config)
    end.

bpftrace_sink_filter(Bt, _Config) ->
    {Node, OsPid} = start_node(["filtered", "20"]),
    P = "usdt:" ++ so() ++ ":beamprobe:",
    Script = P ++ "call { @calls = count(); }\n" ++
             P ++ "gc_start { @gcs = count(); }\n" ++
             P ++ "process { printf(\"P %s %s|\\n\", str(arg1, arg2), "
                  "str(arg3, arg4)); }\n",
    {_, Out} = run(Bt, ["-p", OsPid, "-e", Script], 120000),
    NodeOut = node_wait(Node),
    ct:log("bpftrace:~n~s~nnode:~n~s", [Out, NodeOut]),
    ?assertNotEqual(nomatch, binary:match(NodeOut, <<"attached true">>)),
    %% bpftrace prints a count that never counted as 0 (or not at all)
    ?assertEqual(nomatch, re:run(Out, "@calls: [1-9]")),
    {match, [Gcs]} = re:run(Out, "@gcs: ([0-9]+)",
                            [{capture, all_but_first, list}]),
    ?assert(list_to_integer(Gcs) > 0),
    %% the session itself recorded the calls (its events count them)
    {match, [E]} = re:run(NodeOut, "done events ([0-9]+)",
                          [{capture, all_but_first, list}]),
    ?assert(list_to_integer(E) >= 40),
    %% the worker, registered after the session started, is defined with
    %% the name its register event gave
    {match, [W]} = re:run(NodeOut, "worker (<[0-9.]+>)",
                          [{capture, all_but_first, binary}]),
    ?assertNotEqual(nomatch, binary:match(Out, <<"P ", W/binary, " usdt_late|">>)).

%% The `tid' argument is the OS thread that fired the probe, also on a
%% thread without one of the NIF's 256 thread slots: a node of 280
%% schedulers annotates once on each, and bpftrace's own `tid' equals the
%% probe's arg1 every time.  (Before, the threads without a slot shared
%% one row whose cached tid was the first such thread's: 24 of 280
%% annotations gave another thread's id.)
bpftrace_tid_past_slots(_Config) ->
    case bpftrace_ready() of
        {skip, _} = Skip -> Skip;
        {ok, Bt} ->
            N = 280,
            NS = integer_to_list(N),
            {Node, OsPid} = start_node(["+S", NS ++ ":" ++ NS, "+sbwt", "none",
                                        "+sbwtdcpu", "none", "+sbwtdio",
                                        "none"], ["tids", "go"]),
            %% Counted in maps, which bpftrace prints whole at its end:
            %% lines printf'd just before exit() can be lost (197 of 280
            %% came out on a loaded machine, with @n at 280).  @all
            %% counts every probe (per CPU: exact); @n, a plain variable,
            %% only ends the run early.
            Script = "usdt:" ++ so() ++ ":beamprobe:annotate { "
                "@all = count(); "
                "if ((uint64)tid != arg1) { @other[tid, arg1] = count(); } "
                "@n = @n + 1; if (@n >= " ++ NS ++ ") { exit(); } }",
            Timeout = os:find_executable("timeout"),
            {_, Out} = run(Timeout, ["-s", "INT", "60", Bt, "-p", OsPid,
                                     "-e", Script], 120000),
            NodeOut = node_wait(Node),
            ct:log("bpftrace:~n~s~nnode:~n~s", [Out, NodeOut]),
            {match, [Slotless]} = re:run(NodeOut, "done schedulers 280 "
                                         "slotless ([0-9]+) attached true",
                                         [{capture, all_but_first, binary}]),
            %% some schedulers had no slot: the case this is about
            ?assert(binary_to_integer(Slotless) > 0),
            {match, [All]} = re:run(Out, "@all: ([0-9]+)",
                                    [{capture, all_but_first, binary}]),
            ?assertEqual(N, binary_to_integer(All)),
            %% no annotation gave another thread's id
            ?assertEqual(nomatch, re:run(Out, "@other\\["))
    end.

%% beamprobe_nif:usdt_enabled/1 (docs/usdt.md) for every name: a boolean
%% for each probe declared in c_src/beamprobe_probes.d, badarg for every
%% other event class of the schema (drops, tampered, monitor, sample,
%% annotation, gc_minor_start, ...) and for any other atom.  Asked in a VM
%% of its own, which must end normally.  (Before, `tampered', `monitor'
%% and `sample' read a NULL semaphore pointer: the VM died of SIGSEGV.)
usdt_enabled_names(_Config) ->
    Probes = [binary_to_atom(N) || N <- declared()],
    Classes = [N || {N, _, _, _} <- ?BP_EVENTS],
    Others = (Classes -- Probes) ++ [nosuch, '', 'gc_start ', 'call\0'],
    Erl = os:find_executable("erl"),
    Expr = lists:flatten(
             io_lib:format(
               "R = [{N, try beamprobe_nif:usdt_enabled(N) "
               "catch error:badarg -> badarg end} || N <- ~w ++ ~w], "
               "io:format(\"result ~~w~~n\", [R]), halt().",
               [Probes, Others])),
    %% (The VM as the suite's: under test/asan/run.sh with the sanitizer
    %% preloaded and BEAMPROBE_NIF naming the sanitized library.)
    Port = open_port({spawn_executable, Erl},
                     [{args, ["-noshell", "-pa", filename:join(root(), "ebin"),
                              "-eval", Expr]},
                      exit_status, binary, stream, stderr_to_stdout]),
    {Status, Out} = collect(Port, [], 60000),
    ct:log("~s", [Out]),
    ?assertEqual(0, Status),
    {match, [T]} = re:run(Out, "result (.*)\n", [{capture, all_but_first,
                                                   list}]),
    {ok, Toks, _} = erl_scan:string(T ++ "."),
    {ok, R} = erl_parse:parse_term(Toks),
    ?assertEqual([], [{N, V} || {N, V} <- R, lists:member(N, Probes),
                                not is_boolean(V)]),
    ?assertEqual([], [{N, V} || {N, V} <- R, lists:member(N, Others),
                                V =/= badarg]),
    ?assertEqual(length(Probes) + length(Others), length(R)).
