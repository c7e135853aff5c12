%%% @doc The deterministic workload of beamprobe_diff_SUITE: every event
%%% kind, in processes whose own event order does not depend on timing
%%% (each waits for one thing at a time), so that two runs -- one traced by
%%% beamprobe, one by the VM's own tracer -- give the same events per
%%% process.
%%%
%%% Roles (the processes and the port it creates, returned by run/1):
%%%   main     calls (local, remote, recursive, tail), exceptions of every
%%%            class, spawn/link/unlink, sends to a pid, a registered name,
%%%            an alias, a remote pid, a dead pid and a port; link/unlink to
%%%            a remote pid; opens and closes a port; kills child2
%%%   child1   spawned and linked by main; registered, then unregistered;
%%%            receives by pid, name and alias; exits {shutdown, done}
%%%   child2   tells main it waits, then is killed by main
%%%   gc1      allocates and collects (minor and major GCs); no messages
%%%   named    registered as 'diff named', alive until the test ends
%%%   unnamed  registered as 'diff gone' then unregistered, alive until the
%%%            test ends
%%%   port1    the port main opens (/bin/cat)
-module(beamprobe_diff_workload).

-export([run/1, child/1, gc_proc/1, idle/2, add/2, fact/1, count/2,
         thrower/1, exiter/1, raiser/1]).

%% @doc Runs the workload in a new process; returns when every role has
%% done its part: `#{Role => pid() | port()}' (named and unnamed still
%% alive: stop them with their `stop' message).
-spec run(pid()) -> #{atom() => pid() | port()}.
run(Remote) ->
    Parent = self(),
    Main = spawn(fun() -> main(Parent, Remote) end),
    receive {Main, roles, Roles} -> Roles#{main => Main} end.

main(Parent, Remote) ->
    %% Calls: local non-tail recursion, tail recursion, a remote
    %% (fully qualified) call, exceptions of every class, caught.
    120 = fact(5),
    3 = count(3, 0),
    3 = ?MODULE:add(1, 2),
    {thrown, t1} = (catch thrower(t1)),
    {'EXIT', e1} = (catch exiter(e1)),
    {caught, {error, r1}} = try raiser(r1) catch error:R -> {caught, {error, R}} end,
    %% Processes and messages.
    Child1 = spawn_link(?MODULE, child, [self()]),
    Alias = receive {Child1, alias, A} -> A end,
    register('diff child', Child1),
    Child1 ! {by_pid, 1},
    receive {Child1, got, 1} -> ok end,
    'diff child' ! {by_name, 2},
    receive {Child1, got, 2} -> ok end,
    Alias ! {by_alias, 3},
    receive {Child1, got, 3} -> ok end,
    unregister('diff child'),
    unlink(Child1),
    %% Each process that ends is monitored before it is made to end, so
    %% its 'DOWN' reason is the same in every run (not noproc when it
    %% happened to end first).
    Ref1 = monitor(process, Child1),
    Child1 ! stop,
    down(Ref1, Child1),
    Remote ! {remote, 4},
    link(Remote),
    unlink(Remote),
    Dead = dead_pid(),
    Dead ! {dead, 5},
    %% child2 is killed once it waits: killed at once, it would have run
    %% its first call or not depending on whether the other scheduler
    %% took it first (one run of the two had `call idle/2', the other
    %% nothing: seen once in CI, under ASan on a loaded machine).
    Child2 = spawn(?MODULE, idle, [self(), none]),
    receive {Child2, idle} -> ok end,
    Ref2 = monitor(process, Child2),
    exit(Child2, kill),
    down(Ref2, Child2),
    {Gc, RefGc} = spawn_monitor(?MODULE, gc_proc, [self()]),
    receive {Gc, gc_done} -> ok end,
    down(RefGc, Gc),
    %% A port: open, a command sent to it, its reply, close.
    Port = open_port({spawn_executable, "/bin/cat"}, [binary]),
    Port ! {self(), {command, <<"ping">>}},
    receive {Port, {data, <<"ping">>}} -> ok end,
    %% Closed by a message, which the port always answers: port_close/1
    %% answers with {Ref, true} only when the port is busy on another
    %% scheduler at that moment, a message main never takes: one run of
    %% the two had it, the other not.
    Port ! {self(), close},
    receive {Port, closed} -> ok end,
    Named = spawn(?MODULE, idle, [self(), 'diff named']),
    receive {Named, idle} -> ok end,
    Unnamed = spawn(?MODULE, idle, [self(), 'diff gone']),
    receive {Unnamed, idle} -> ok end,
    Parent ! {self(), roles, #{child1 => Child1, child2 => Child2, gc1 => Gc,
                               named => Named, unnamed => Unnamed,
                               port1 => Port}}.

down(Ref, P) ->
    receive {'DOWN', Ref, process, P, _} -> ok end.

dead_pid() ->
    {P, Ref} = spawn_monitor(fun() -> ok end),
    down(Ref, P),
    P.

%% @doc child1: sends main an alias, answers three messages, exits.
-spec child(pid()) -> no_return().
child(Main) ->
    A = alias(),
    Main ! {self(), alias, A},
    receive {by_pid, N1} -> Main ! {self(), got, N1} end,
    receive {by_name, N2} -> Main ! {self(), got, N2} end,
    receive {by_alias, N3} -> Main ! {self(), got, N3} end,
    receive stop -> exit({shutdown, done}) end.

%% @doc gc1: minor GCs while building a list, then a major GC.
-spec gc_proc(pid()) -> ok.
gc_proc(Main) ->
    %% Built outside this (traced) module: 3000 traced calls returning
    %% long lists would make the VM's tracer copy them all.
    L = lists:zip(lists:seq(1, 3000), lists:seq(1, 3000)),
    true = erlang:garbage_collect(),
    3000 = length(L),
    Main ! {self(), gc_done},
    ok.

%% @doc Waits for `stop'; registers (and for 'diff gone' unregisters) a
%% name first (none: no name) and tells Main it is ready.
-spec idle(pid(), atom()) -> ok.
idle(Main, none) ->
    Main ! {self(), idle},
    receive stop -> ok end;
idle(Main, N) ->
    register(N, self()),
    _ = N =:= 'diff gone' andalso unregister(N),
    Main ! {self(), idle},
    receive stop -> ok end.

%% @doc A + B (called as a remote call).
-spec add(integer(), integer()) -> integer().
add(A, B) -> A + B.

%% @doc N! by non-tail recursion.
-spec fact(non_neg_integer()) -> pos_integer().
fact(0) -> 1;
fact(N) -> N * fact(N - 1).

%% @doc Counts N down by tail recursion; returns Acc + N.
-spec count(non_neg_integer(), integer()) -> integer().
count(0, Acc) -> Acc;
count(N, Acc) -> count(N - 1, Acc + 1).

%% @doc throw(X).
-spec thrower(term()) -> no_return().
thrower(X) -> throw({thrown, X}).

%% @doc exit(X).
-spec exiter(term()) -> no_return().
exiter(X) -> exit(X).

%% @doc error(X).
-spec raiser(term()) -> no_return().
raiser(X) -> erlang:error(X).
