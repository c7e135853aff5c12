%%% @doc Test helper for the suites of `beamprobe attach NODE'
%%% (beamprobe_attach_SUITE: one node; beamprobe_attach_cluster_SUITE:
%%% --cluster): the workload module compiled for the plain target nodes,
%%% the case set-up and clean-up around them, running the command (its
%%% output, its exit) and what "the node is left as it was" means for
%%% these suites (what of beamprobe's is loaded, registered, traced or
%%% left in /tmp; the generic checks are test/bp_node_clean.erl's).
-module(beamprobe_attach_lib).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-import(bp_node_clean, [loaded_ours/1, loaded_libs/1, attach_dirs/0,
                        kill_port/1]).

-export([init_suite/1, init_per_testcase/3, end_per_testcase/1,
         started/1, started_target/4]).
-export([short/1, attach/2, attach/3, attach/4, wait_attached/1,
         wait_output/3, wait_exit/2, interrupt/1]).
-export([snapshot/1, assert_clean/3, wait_clean_problems/4,
         wait_clean/5, clean_problems/3]).

%% The workload module bp_attach_work, compiled into the suite's private
%% directory ({work_dir, Dir} added to Config), or a skip when this node
%% is not distributed.
init_suite(Config) ->
    case node() of
        nonode@nohost -> {skip, "the suite needs a distributed node"};
        _ ->
            Dir = ?config(priv_dir, Config),
            %% The workload module, in a directory of its own: the target
            %% node's only code path addition (no beamprobe there).
            WDir = filename:join(Dir, "workload"),
            ok = filelib:ensure_dir(filename:join(WDir, "x")),
            Src = filename:join(WDir, "bp_attach_work.erl"),
            ok = file:write_file(Src,
                "-module(bp_attach_work).\n"
                "-export([work/1, double/1, remote/2, hold_dbg/1]).\n"
                "hold_dbg(To) -> spawn(fun() -> {ok, _} = dbg:tracer(),\n"
                "    P = spawn(timer, sleep, [60000]),\n"
                "    {ok, _} = dbg:p(P, [c]),\n"
                "    {ok, _} = dbg:tpl(?MODULE, double, 1, []),\n"
                "    To ! {dbg_on, P}, receive stop -> dbg:stop() end end).\n"
                "work(N) -> [?MODULE:double(I) || I <- lists:seq(1, N)], ok.\n"
                "remote(Peers, N) -> [erpc:call(P, ?MODULE, double, [I])\n"
                "                     || P <- Peers, I <- lists:seq(1, N)], ok.\n"
                "double(X) -> X * 2.\n"),
            {ok, _} = compile:file(Src, [{outdir, WDir}]),
            [{work_dir, WDir} | Config]
    end.

%% Runs Init(Case, Config), the suite's own set-up of the case.  A case
%% whose init fails is skipped without end_per_testcase: the nodes it
%% started (started/1) would live on (and hold Common Test's output
%% open), so they go here.  (They also halt by themselves when this node
%% exits: bp_node_clean:start_target/5.)
init_per_testcase(Init, Case, Config) ->
    put(started_ports, []),
    try Init(Case, Config)
    catch C:R:St ->
            _ = [kill_port(P) || P <- get(started_ports)],
            erlang:raise(C, R, St)
    end.

%% The attach commands a case started and its target nodes (`targets',
%% else `target' and `target_port' of Config) go.
end_per_testcase(Config) ->
    %% An attach a failed case left running goes too.
    _ = [os:cmd("kill -9 " ++ P ++ " 2>/dev/null")
         || P <- string:lexemes(case file:read_file(pids_file(Config)) of
                                    {ok, B} -> binary_to_list(B);
                                    _ -> ""
                                end, "\n"),
            is_our_attach(P, Config)],
    _ = file:delete(pids_file(Config)),
    Targets = case ?config(targets, Config) of
                  undefined -> [{?config(target, Config),
                                 ?config(target_port, Config)}];
                  Ts -> Ts
              end,
    _ = [begin
             _ = rpc:call(Node, erlang, halt, [], 2000),
             kill_port(Port)
         end || {Node, Port} <- Targets],
    ok.

%% A node of the case's, to go should its init fail.
started(Port) -> put(started_ports, [Port | get(started_ports)]).

%% A plain node (plus Extra arguments), reached over a hidden connection
%% or a normal one (Connect: hidden | ping); in started_ports.
started_target(Name, WDir, Extra, Connect) ->
    {_, Port} = T = bp_node_clean:start_target(Name, WDir, Extra,
                                               bp_attach_work, Connect),
    started(Port),
    T.

short(Node) -> atom_to_list(Node).

attach(Config, Args) -> attach(Config, Args, []).
attach(Config, Args, Env) ->
    attach(Config, Args, Env, atom_to_list(erlang:get_cookie())).
attach(Config, Args, Env, Cookie) ->
    Bin = filename:join([filename:dirname(filename:dirname(
                                            code:which(beamprobe))),
                         "bin", "beamprobe"]),
    CookieArgs = case Cookie of
                     none -> [];
                     _ -> ["--cookie", Cookie]
                 end,
    Port = open_port({spawn_executable, Bin},
                     [{args, ["attach" | CookieArgs] ++ Args}, {env, Env},
                      exit_status, binary, stderr_to_stdout, stream]),
    {os_pid, Os} = erlang:port_info(Port, os_pid),
    ok = file:write_file(pids_file(Config), [integer_to_list(Os), "\n"],
                         [append]),
    Port.

%% Still our attach (not a pid reused since): its command line names this
%% case's target node.
is_our_attach(P, Config) ->
    case file:read_file("/proc/" ++ P ++ "/cmdline") of
        {ok, Cmd} ->
            binary:match(Cmd, <<"attach">>) =/= nomatch andalso
                binary:match(Cmd, atom_to_binary(?config(target, Config)))
                =/= nomatch;
        _ -> false
    end.

pids_file(Config) ->
    filename:join(?config(priv_dir, Config), "attach-pids").

wait_attached(A) ->
    wait_output(A, fun(T) -> binary:match(T, <<"attached to">>) =/= nomatch
                   end, 20000).

%% Output gathered so far (kept in the process dictionary per port).
wait_output(A, Pred, Ms) ->
    Deadline = erlang:monotonic_time(millisecond) + Ms,
    wait_output1(A, Pred, Deadline).
wait_output1(A, Pred, Deadline) ->
    T = get_out(A),
    case Pred(T) of
        true -> T;
        false ->
            Left = Deadline - erlang:monotonic_time(millisecond),
            receive
                {A, {data, D}} -> put({out, A}, <<T/binary, D/binary>>),
                                  wait_output1(A, Pred, Deadline);
                {A, {exit_status, S}} ->
                    ct:fail({attach_exited, S, T})
            after max(Left, 0) -> ct:fail({no_output, T})
            end
    end.

get_out(A) ->
    case get({out, A}) of
        undefined -> <<>>;
        B -> B
    end.

wait_exit(A, Ms) ->
    receive
        {A, {data, D}} -> put({out, A}, <<(get_out(A))/binary, D/binary>>),
                          wait_exit(A, Ms);
        {A, {exit_status, S}} -> {S, get_out(A)}
    after Ms -> ct:fail({attach_did_not_exit, get_out(A)})
    end.

interrupt(A) ->
    {os_pid, Os} = erlang:port_info(A, os_pid),
    os:cmd("kill -INT " ++ integer_to_list(Os)).

%% What the node has that attach must leave alone or restore.
snapshot(Node) ->
    %% Once the node has booted: a node still starting adds its own
    %% names (logger_std_h_default) after the snapshot.
    booted(Node, 100),
    #{mods => loaded_ours(Node),
      apps => [A || {A, _, _} <- rpc:call(Node, application,
                                          loaded_applications, [])],
      procs => length(rpc:call(Node, erlang, processes, [])),
      names => lists:sort(rpc:call(Node, erlang, registered, []))}.

booted(Node, 0) -> ct:fail({not_booted, Node});
booted(Node, N) ->
    %% (init:get_status/0 says `starting' while the node's -eval runs:
    %% the test nodes' -eval never returns.)  The logger's default
    %% handler is registered late in the boot.
    case rpc:call(Node, erlang, whereis, [logger_std_h_default]) of
        P when is_pid(P) -> ok;
        _ -> timer:sleep(50), booted(Node, N - 1)
    end.

%% What is left on Node of beamprobe against Before (snapshot/1): [] when
%% clean.
clean_problems(Node, Before, Config) ->
    Now = snapshot(Node),
    New = loaded_ours(Node) -- maps:get(mods, Before),
    P = [{modules, New} || New =/= []] ++
        [{apps, maps:get(apps, Now)} || maps:get(apps, Now) =/=
                                            maps:get(apps, Before)] ++
        [{registered, maps:get(names, Now) -- maps:get(names, Before)}
         || maps:get(names, Now) -- maps:get(names, Before) =/= []] ++
        [{new_flags, F} || {flags, F} <- [rpc:call(Node, erlang, trace_info,
                                                  [new, flags])], F =/= []] ++
        [{pattern, T} || T <- [rpc:call(Node, erlang, trace_info,
                                        [{bp_attach_work, double, 1}, all])],
                         T =/= {all, false}] ++
        [{files, attach_dirs() -- ?config(tmp_before, Config)}
         || attach_dirs() -- ?config(tmp_before, Config) =/= []] ++
        [{nif_mapped, L} || L <- loaded_libs(Node),
                            lists:suffix("beamprobe_nif.so", L)],
    %% Every process traced by nobody; none runs beamprobe's code.
    Traced = [Pid || Pid <- rpc:call(Node, erlang, processes, []),
                     {flags, Fs} <- [rpc:call(Node, erlang, trace_info,
                                             [Pid, flags])], Fs =/= []],
    Ours = [{Pid, I} || Pid <- rpc:call(Node, erlang, processes, []),
                        I <- [rpc:call(Node, erlang, process_info,
                                       [Pid, [current_function,
                                              initial_call]])],
                        is_list(I),
                        lists:any(fun({_, {M, _, _}}) ->
                                          lists:prefix("beamprobe",
                                                       atom_to_list(M));
                                     (_) -> false
                                  end, I)],
    P ++ [{traced, Traced} || Traced =/= []] ++
        [{beamprobe_procs, Ours} || Ours =/= []].

assert_clean(Node, Before, Config) ->
    ?assertEqual([], wait_clean_problems(Node, Before, Config, 3000)).

wait_clean_problems(Node, Before, Config, Ms) ->
    bp_node_clean:wait_problems(
      fun() -> clean_problems(Node, Before, Config) end, Ms).

%% Milliseconds from T0 until the node is clean (fails after Ms).
wait_clean(Node, Before, Config, T0, Ms) ->
    bp_node_clean:wait_clean(
      fun() -> clean_problems(Node, Before, Config) end, T0, Ms).
