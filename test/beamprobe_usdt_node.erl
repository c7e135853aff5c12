%%% @doc A node for beamprobe_usdt_SUITE: started as a separate OS process
%%% (`erl -s beamprobe_usdt_node Cmd Arg...'), so that bpftrace and gdb
%%% attach to it by OS pid.  It prints `ospid PID', waits until a tool has
%%% raised the probe's semaphore (beamprobe_nif:usdt_enabled/1), does its
%%% work, prints `done ...' and halts.
-module(beamprobe_usdt_node).

-export([calls/1, annotate/1, loop/1, filtered/1, tids/1, two/1]).

%% @doc [N, Dir]: a session with a usdt sink next to a file sink traces
%% N calls of beamprobe_workload:add/2 in a worker (with return_from),
%% registered as `usdt_worker'.
-spec calls([atom()]) -> no_return().
calls([NA, DirA]) ->
    N = list_to_integer(atom_to_list(NA)),
    {ok, _} = application:ensure_all_started(beamprobe),
    W = beamprobe_workload:start_worker(),
    %% a registered name, for the `process' definition probe
    true = register(usdt_worker, W),
    {ok, S} = beamprobe:start(#{procs => [W],
                                calls => [{beamprobe_workload, add, 2}],
                                return => true,
                                output => [{usdt, #{events => [call]}},
                                           {file, atom_to_list(DirA)}]}),
    hello(),
    Attached = wait(call, 300),
    timer:sleep(300),
    [beamprobe_workload:run(W, fun() -> beamprobe_workload:add(I, 1) end)
     || I <- lists:seq(1, N)],
    {ok, _} = beamprobe:stop(S),
    io:format("done worker ~p attached ~p~n", [W, Attached]),
    timer:sleep(500),
    Detached = beamprobe_nif:usdt_enabled(call),
    io:format("after ~p~n", [Detached]),
    halt().

%% @doc [Case, Dir]: two sessions with usdt sinks (and a file each, in
%% Dir/Name) trace 3 calls in a worker.  Case `arity_first' and
%% `full_first': `arity' (`args => arity', no arguments in its events)
%% and `full' (`args => full') on beamprobe_workload:add(I, 1), the one
%% named first started first; `small_first': `small' (`capture' of at
%% most 2 list elements) then `big' (the default capture) on
%% beamprobe_workload:sink([I, 2, 3, 4, 5]).
-spec two([atom()]) -> no_return().
two([Case, DirA]) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    W = beamprobe_workload:start_worker(),
    {Sessions, Call} =
        case Case of
            arity_first -> {[{arity, #{args => arity}}, {full, #{}}], add};
            full_first -> {[{full, #{}}, {arity, #{args => arity}}], add};
            small_first -> {[{small, #{capture => #{list => 2}}}, {big, #{}}],
                            sink}
        end,
    MFA = case Call of
              add -> {beamprobe_workload, add, 2};
              sink -> {beamprobe_workload, sink, 1}
          end,
    Start = fun({Name, Opts}) ->
                    Dir = filename:join(atom_to_list(DirA),
                                        atom_to_list(Name)),
                    ok = filelib:ensure_dir(Dir),
                    {ok, S} = beamprobe:start(
                                maps:merge(
                                  #{procs => [W], calls => [MFA],
                                    args => full,
                                    output => [{usdt, #{events => [call]}},
                                               {file, Dir}]},
                                  Opts)),
                    S
            end,
    Ss = [Start(X) || X <- Sessions],
    hello(),
    Attached = wait(call, 300),
    timer:sleep(300),
    [beamprobe_workload:run(
       W, fun() ->
                  case Call of
                      add -> beamprobe_workload:add(I, 1);
                      sink -> beamprobe_workload:sink([I, 2, 3, 4, 5])
                  end
          end)
     || I <- lists:seq(1, 3)],
    [{ok, _} = beamprobe:stop(S) || S <- Ss],
    io:format("done worker ~p attached ~p~n", [W, Attached]),
    halt().

%% @doc [go]: calls beamprobe:annotate(usdt_tag, {value, 42, "text"}) once
%% a tool is attached to beamprobe:annotate.
-spec annotate([atom()]) -> no_return().
annotate([go]) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    hello(),
    Attached = wait(annotate, 300),
    %% No session runs: the gate (beamprobe_gate) lets annotations through
    %% to the NIF within a second of the tool's attaching.
    Gate = wait_gate(50),
    ok = beamprobe:annotate(usdt_tag, {value, 42, "text"}),
    io:format("gate ~p~n", [Gate]),
    io:format("done self ~p attached ~p~n", [self(), Attached]),
    halt().

%% @doc [Secs]: for the examples/ scripts: a session with a usdt sink for
%% calls (with returns), messages, gc and scheduling of two workers, one
%% calling beamprobe_workload:add/2 and garbage/1, sending to the other
%% and annotating, for Secs seconds.
-spec loop([atom()]) -> no_return().
loop([SecsA]) ->
    Secs = list_to_integer(atom_to_list(SecsA)),
    {ok, _} = application:ensure_all_started(beamprobe),
    Sink = spawn(fun Rec() -> receive _ -> Rec() end end),
    Until = erlang:monotonic_time(millisecond) + Secs * 1000,
    W = spawn(fun() -> work(Sink, Until, 0) end),
    {ok, S} = beamprobe:start(#{procs => [W, Sink],
                                calls => [{beamprobe_workload, add, 2}],
                                return => true,
                                events => [call, send, 'receive', gc,
                                           running],
                                output => usdt}),
    io:format("worker ~p sink ~p~n", [W, Sink]),
    hello(),
    timer:sleep(Secs * 1000 + 200),
    _ = beamprobe:stop(S),
    halt().

work(Sink, Until, I) ->
    case erlang:monotonic_time(millisecond) > Until of
        true -> ok;
        false ->
            _ = beamprobe_workload:add(I, 1),
            _ = beamprobe_workload:garbage(200),
            Sink ! {hello, I},
            ok = beamprobe:annotate(usdt_loop, I),
            timer:sleep(2),
            work(Sink, Until, I + 1)
    end.

hello() -> io:format("ospid ~s~n", [os:getpid()]).

wait(_Probe, 0) -> false;
wait(Probe, N) ->
    case beamprobe_nif:usdt_enabled(Probe) of
        true -> true;
        false -> timer:sleep(100), wait(Probe, N - 1)
    end.

wait_gate(0) -> false;
wait_gate(N) ->
    case beamprobe_gate_flag:on() of
        true -> true;
        false -> timer:sleep(100), wait_gate(N - 1)
    end.

%% @doc [N]: a session tracing N calls of beamprobe_workload:add/2 and the
%% worker's garbage collections, with a usdt sink for gc only: the call
%% probes must not fire, the gc ones must.  The worker is registered as
%% `usdt_late' once the tool is attached.
-spec filtered([atom()]) -> no_return().
filtered([NA]) ->
    N = list_to_integer(atom_to_list(NA)),
    {ok, _} = application:ensure_all_started(beamprobe),
    W = beamprobe_workload:start_worker(),
    {ok, S} = beamprobe:start(#{procs => [W],
                                calls => [{beamprobe_workload, add, 2}],
                                return => true, events => [gc, procs],
                                output => {usdt, #{events => [gc]}}}),
    hello(),
    Attached = wait(gc_start, 300) andalso wait(call, 300),
    timer:sleep(300),
    %% registered after the session started: the name reaches the
    %% `process' probe through the register trace event
    true = register(usdt_late, W),
    io:format("worker ~p~n", [W]),
    [beamprobe_workload:run(W, fun() ->
                                       beamprobe_workload:add(I, 1),
                                       beamprobe_workload:garbage(2000)
                               end) || I <- lists:seq(1, N)],
    {ok, #{events := E}} = beamprobe:stop(S),
    io:format("done events ~p attached ~p~n", [E, Attached]),
    timer:sleep(500),
    halt().

%% @doc [go]: once a tool is attached to beamprobe:annotate (and the gate
%% is open), one process on each scheduler (started with more scheduler
%% threads than the NIF has thread slots, 256) takes its thread's slot and
%% annotates `tid_test' with {Scheduler, Slot}.
-spec tids([atom()]) -> no_return().
tids([go]) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    N = erlang:system_info(schedulers_online),
    hello(),
    Attached = wait(annotate, 300),
    Gate = wait_gate(50),
    Me = self(),
    [spawn_opt(fun() ->
                       Slot = beamprobe_nif:thread_slot(),
                       ok = beamprobe:annotate(tid_test, {I, Slot}),
                       Me ! {done, Slot}
               end, [{scheduler, I}]) || I <- lists:seq(1, N)],
    Slots = [receive {done, Slot} -> Slot end || _ <- lists:seq(1, N)],
    io:format("done schedulers ~p slotless ~p attached ~p gate ~p~n",
              [N, length([S || S <- Slots, S < 0]), Attached, Gate]),
    timer:sleep(300),
    halt().
