%%% @doc Test helper for the suites that bring beamprobe to a node from
%%% outside (beamprobe_attach_SUITE, beamprobe_profile_cli_SUITE): their
%%% plain target nodes, what of beamprobe's is loaded or mapped there, the
%%% attach directories in /tmp, and waiting until a node is clean.  Each
%%% suite says what "clean" means for it: a fun returning the problems
%%% left, [] when there are none.
-module(bp_node_clean).
-export([start_target/5, kill_port/1, wait_problems/2, wait_clean/3,
         loaded_ours/1, loaded_libs/1, attach_dirs/0, clean_within/4]).

%% @doc Starts a plain node `Name@thishost' (`erl -sname', this node's
%% cookie, `WDir' and `Extra' on its command line, no ERL_LIBS) and waits
%% until it answers (`Connect': `ping', or `hidden' for a hidden
%% connection) with the workload module `Work' loaded; beamprobe is on its
%% code path only if `Extra' puts it there.  The node halts once its
%% standard input (the port from this node) closes, so none outlives this
%% node; if it does not come up it is killed before the error is raised
%% (a failed init_per_testcase gets no end_per_testcase).
-spec start_target(atom(), string(), [string()], module(), ping | hidden) ->
          {node(), port()}.
start_target(Name, WDir, Extra, Work, Connect) ->
    Port = open_port({spawn_executable, os:find_executable("erl")},
                     [{args, ["-noshell", "-sname", atom_to_list(Name),
                              "-setcookie", atom_to_list(erlang:get_cookie()),
                              "-pa", WDir | Extra ++
                                  ["-eval", "io:get_line(''), halt()"]]},
                      {env, [{"ERL_LIBS", false}]}]),
    try
        [_, Host] = string:split(atom_to_list(node()), "@"),
        Node = list_to_atom(atom_to_list(Name) ++ "@" ++ Host),
        Up = case Connect of
                 ping -> fun() -> net_adm:ping(Node) =:= pong end;
                 hidden ->
                     fun() -> net_kernel:hidden_connect_node(Node) =:= true end
             end,
        _ = beamprobe_test_lib:wait_until(Up, 10000),
        true = (Extra =/= []) =/= (non_existing =:= rpc:call(Node, code, which,
                                                              [beamprobe])),
        {module, Work} = rpc:call(Node, code, ensure_loaded, [Work]),
        {Node, Port}
    catch C:R:St ->
            kill_port(Port),
            erlang:raise(C, R, St)
    end.

%% @doc Kills the OS process of a port's node (none left: a case killed it).
-spec kill_port(port()) -> ok.
kill_port(Port) ->
    _ = case erlang:port_info(Port, os_pid) of
            {os_pid, Os} ->
                os:cmd("kill -9 " ++ integer_to_list(Os) ++ " 2>/dev/null");
            undefined -> ok
        end,
    ok.

%% @doc Polls Problems until it returns [] or Ms have passed; returns the
%% last problems ([] when clean).
-spec wait_problems(fun(() -> list()), non_neg_integer()) -> list().
wait_problems(Problems, Ms) ->
    poll(Problems, erlang:monotonic_time(millisecond) + Ms).

poll(Problems, Deadline) ->
    case Problems() of
        [] -> [];
        P ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> P;
                false -> timer:sleep(50), poll(Problems, Deadline)
            end
    end.

%% @doc Milliseconds from T0 (monotonic ms) until Problems returns [];
%% fails the test case with {not_clean, Problems} after Ms.
-spec wait_clean(fun(() -> list()), integer(), non_neg_integer()) ->
          integer().
wait_clean(Problems, T0, Ms) ->
    case Problems() of
        [] -> erlang:monotonic_time(millisecond) - T0;
        P ->
            case erlang:monotonic_time(millisecond) - T0 > Ms of
                true -> ct:fail({not_clean, P});
                false -> timer:sleep(20), wait_clean(Problems, T0, Ms)
            end
    end.

%% @doc Runs Kill, then waits (up to 10 s) until Problems returns [];
%% fails the case unless that took at most Bound ms of the nodes' own
%% time: the elapsed time less what the schedulers of Node or of this node
%% (which polls) waited for a CPU other processes had (timer_waited_ms/2
%% of beamprobe_test_lib, the larger of the two, at most the elapsed
%% time).  A loaded CI machine stretches a 100 ms clean-up past 1 s; the
%% failure names the figures (CI prints only the first terms of a
%% reason).  Returns the elapsed ms.
-spec clean_within(node(), fun(() -> term()), fun(() -> list()),
                   pos_integer()) -> integer().
clean_within(Node, Kill, Problems, Bound) ->
    L = beamprobe_test_lib,
    OsPid = rpc:call(Node, os, getpid, []),
    Self0 = L:sched_times(),
    Node0 = L:sched_times(OsPid),
    T0 = erlang:monotonic_time(millisecond),
    _ = Kill(),
    Ms = wait_clean(Problems, T0, 10000),
    {W1, _} = L:timer_waited_ms(Self0, L:sched_times()),
    {W2, Threads} = L:timer_waited_ms(Node0, L:sched_times(OsPid)),
    Waited = min(max(W1, W2), Ms),
    ct:log("clean after ~b ms, ~b ms of it waiting for a CPU (this node "
           "~b, the target ~b); the target's threads (name, ms run, ms "
           "waiting): ~p", [Ms, Waited, W1, W2, Threads]),
    Ms - Waited =< Bound orelse
        ct:fail("clean after ~b ms, ~b ms of it waiting for a CPU: ~b ms "
                "of the nodes' time, over ~b", [Ms, Waited, Ms - Waited,
                                                 Bound]),
    Ms.

%% @doc beamprobe's modules loaded on Node.
-spec loaded_ours(node()) -> [module()].
loaded_ours(Node) ->
    [M || {M, _} <- rpc:call(Node, code, all_loaded, []),
          lists:prefix("beamprobe", atom_to_list(M))].

%% @doc The files Node's OS process has mapped (its /proc maps).
-spec loaded_libs(node()) -> [string()].
loaded_libs(Node) ->
    Pid = rpc:call(Node, os, getpid, []),
    {ok, Maps} = file:read_file("/proc/" ++ Pid ++ "/maps"),
    lists:usort([binary_to_list(P) || L <- binary:split(Maps, <<"\n">>,
                                                         [global]),
                                      [_, _, _, _, _, P] <- [string:lexemes(
                                                               L, " ")]]).

%% @doc The attach directories in /tmp.
-spec attach_dirs() -> [string()].
attach_dirs() ->
    lists:sort(filelib:wildcard("/tmp/beamprobe-attach-*") ++
                   filelib:wildcard("/tmp/beamprobe-nif-*")).
