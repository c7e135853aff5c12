%%% @doc beamprobe's own processes, sensitive (process_flag/2) from their
%%% first traced call: the VM generates no trace event of any kind for
%%% them, also for another session running meanwhile (see
%%% beamprobe_shell.erl).  A process made sensitive only in its init/1
%%% callback is traced before that: gen_server:start_link/3 runs gen's
%%% option handling (lists:keyfind/3 for debug and hibernate_after) and
%%% erlang:trace/3 its own (lists:keyfind/3 for tracer) in the new
%%% process, and a session's watchdog starts after its patterns are
%%% installed: a shell trace of lists:keyfind/3 with a count of 5 printed
%%% 3 calls of its own watchdog starting, and one running while another
%%% session started recorded that session's start (one call per process
%%% of the node from the worker that sets their flags).
-module(beamprobe_own).

-export([start_link/2, spawn_link/1]).
-export([init_it/3]).

%% @doc As `gen_server:start_link(Module, Arg, [])', with the process
%% sensitive before any code of gen or of `Module' runs.
-spec start_link(module(), term()) -> {ok, pid()} | {error, term()}.
start_link(Module, Arg) ->
    proc_lib:start_link(?MODULE, init_it, [self(), Module, Arg]).

%% @doc As `erlang:spawn_link(Fun)', with the process sensitive first.
-spec spawn_link(fun(() -> term())) -> pid().
spawn_link(Fun) ->
    erlang:spawn_link(fun() ->
                              _ = process_flag(sensitive, true),
                              Fun()
                      end).

%% @private
-spec init_it(pid(), module(), term()) -> term().
init_it(Parent, Module, Arg) ->
    _ = process_flag(sensitive, true),
    case Module:init(Arg) of
        {ok, St} ->
            proc_lib:init_ack(Parent, {ok, self()}),
            gen_server:enter_loop(Module, [], St);
        {stop, Reason} ->
            proc_lib:init_ack(Parent, {error, Reason}),
            exit(Reason)
    end.
