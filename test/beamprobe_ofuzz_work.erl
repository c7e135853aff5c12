%%% @doc The deterministic workload of beamprobe_overlap_fuzz_SUITE: a
%%% driver (the calling process) runs numbered phases in worker processes
%%% one worker at a time; in each phase a worker makes calls with
%%% arguments that depend on the worker and the phase (local recursion,
%%% remote calls, caught throws and errors), registers and unregisters a
%%% name, sends to the driver, and spawns and links a child that calls,
%%% sends to it and exits (normally or not) while the worker traps exits.
%%% Every process waits for one thing at a time, so each process's own
%%% events come in the same order in every run; processes are known by
%%% role (`w1'.., `c<W>_<P>' for worker W's child of phase P), since pids
%%% differ between runs.
-module(beamprobe_ofuzz_work).

-export([start/1, phase/3, stop/1, worker/2, child/3, tick/1, add/2,
         fact/1, thrower/1, raiser/1]).

%% @doc Spawns N workers; returns `{Workers, Roles}' (`Roles': pid =>
%% role name).
-spec start(pos_integer()) -> {[pid()], #{pid() => binary()}}.
start(N) ->
    Ws = [spawn(?MODULE, worker, [self(), I]) || I <- lists:seq(1, N)],
    {Ws, maps:from_list([{W, role(w, I)} || {I, W} <- lists:zip(lists:seq(1, N), Ws)])}.

%% @doc Runs phase P in each worker, one after the other; returns Roles
%% with the phase's children added.
-spec phase([pid()], pos_integer(), map()) -> map().
phase(Ws, P, Roles) ->
    lists:foldl(fun(W, R) ->
                        W ! {phase, self(), P},
                        receive {W, done, P, I, Child} ->
                                R#{Child => iolist_to_binary(
                                              io_lib:format("c~b_~b", [I, P]))}
                        end
                end, Roles, Ws).

%% @doc Stops the workers, one after the other (each waits until the
%% previous has ended).
-spec stop([pid()]) -> ok.
stop(Ws) ->
    lists:foreach(fun(W) ->
                          Ref = monitor(process, W),
                          W ! {stop, self()},
                          receive {'DOWN', Ref, process, W, _} -> ok end
                  end, Ws).

role(w, I) -> iolist_to_binary(io_lib:format("w~b", [I])).

%% @private
-spec worker(pid(), pos_integer()) -> ok.
worker(Driver, I) ->
    process_flag(trap_exit, true),
    worker_loop(Driver, I).

worker_loop(Driver, I) ->
    receive
        {phase, Driver, P} ->
            Child = work(Driver, I, P),
            Driver ! {self(), done, P, I, Child},
            worker_loop(Driver, I);
        {stop, Driver} ->
            case I rem 2 of
                0 -> ok;
                1 -> exit({shutdown, I})
            end
    end.

work(Driver, I, P) ->
    Xs = [(K * 7 + I * 13 + P * 5) rem 64 || K <- lists:seq(1, 6 + I + P)],
    _ = [X = ?MODULE:tick(X) || X <- Xs],
    S = ?MODULE:add(I, P),
    S = add(P, I),                          % local call
    _ = fact((I + P) rem 6),
    {thrown, _} = (catch thrower({I, P})),
    {caught, _} = try ?MODULE:raiser(P * I) catch error:R -> {caught, R} end,
    Name = list_to_atom("bp_ofuzz_w" ++ integer_to_list(I)),
    true = register(Name, self()),
    Driver ! {progress, I, P},
    true = unregister(Name),
    Child = spawn_link(?MODULE, child, [self(), I, P]),
    receive {Child, hello, _} -> ok end,
    Child ! {go, [I, P]},
    receive {'EXIT', Child, _} -> ok end,
    Child.

%% @private
-spec child(pid(), pos_integer(), pos_integer()) -> ok.
child(Parent, I, P) ->
    _ = ?MODULE:tick(I * P),
    Parent ! {self(), hello, add(I, P)},
    receive {go, L} -> _ = [?MODULE:tick(X) || X <- L] end,
    case P rem 3 of
        0 -> exit({shutdown, P});
        _ -> ok
    end.

%% @doc X.
-spec tick(integer()) -> integer().
tick(X) -> X.

%% @doc A + B.
-spec add(integer(), integer()) -> integer().
add(A, B) -> A + B.

%% @doc N!, by non-tail recursion.
-spec fact(non_neg_integer()) -> pos_integer().
fact(0) -> 1;
fact(N) -> N * fact(N - 1).

%% @doc throw({thrown, X}).
-spec thrower(term()) -> no_return().
thrower(X) -> throw({thrown, X}).

%% @doc error(X).
-spec raiser(term()) -> no_return().
raiser(X) -> erlang:error({raised, X}).
