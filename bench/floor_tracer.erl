%%% @doc A do-nothing NIF tracer (bench/floor_tracer.c): the VM floor.
%%% Every erl_tracer callback is there: each event kind takes its own.
-module(floor_tracer).
-export([thread_cpu_ns/0]).
-export([enabled/3, enabled_call/3, enabled_send/3, enabled_receive/3,
         enabled_procs/3, enabled_ports/3, enabled_running_procs/3,
         enabled_running_ports/3, enabled_garbage_collection/3,
         trace/5, trace_call/5, trace_send/5, trace_receive/5,
         trace_procs/5, trace_ports/5, trace_running_procs/5,
         trace_running_ports/5, trace_garbage_collection/5]).
-on_load(load/0).

load() ->
    Dir = filename:dirname(code:which(?MODULE)),
    erlang:load_nif(filename:join(Dir, "floor_tracer"), 0).

%% @doc CPU time of the calling scheduler thread in ns (benches on a busy
%% machine: time the thread was not running does not count).
-spec thread_cpu_ns() -> non_neg_integer().
thread_cpu_ns() -> erlang:nif_error(not_loaded).

-define(E(F), F(_, _, _) -> erlang:nif_error(not_loaded)).
-define(T(F), F(_, _, _, _, _) -> erlang:nif_error(not_loaded)).

%% @doc Always trace.
-spec enabled(atom(), term(), term()) -> trace.
?E(enabled).
%% @doc Always trace.
-spec enabled_call(atom(), term(), term()) -> trace.
?E(enabled_call).
%% @doc Always trace.
-spec enabled_send(atom(), term(), term()) -> trace.
?E(enabled_send).
%% @doc Always trace.
-spec enabled_receive(atom(), term(), term()) -> trace.
?E(enabled_receive).
%% @doc Always trace.
-spec enabled_procs(atom(), term(), term()) -> trace.
?E(enabled_procs).
%% @doc Always trace.
-spec enabled_ports(atom(), term(), term()) -> trace.
?E(enabled_ports).
%% @doc Always trace.
-spec enabled_running_procs(atom(), term(), term()) -> trace.
?E(enabled_running_procs).
%% @doc Always trace.
-spec enabled_running_ports(atom(), term(), term()) -> trace.
?E(enabled_running_ports).
%% @doc Always trace.
-spec enabled_garbage_collection(atom(), term(), term()) -> trace.
?E(enabled_garbage_collection).
%% @doc Does nothing.
-spec trace(atom(), term(), term(), term(), map()) -> ok.
?T(trace).
%% @doc Does nothing.
-spec trace_call(atom(), term(), term(), term(), map()) -> ok.
?T(trace_call).
%% @doc Does nothing.
-spec trace_send(atom(), term(), term(), term(), map()) -> ok.
?T(trace_send).
%% @doc Does nothing.
-spec trace_receive(atom(), term(), term(), term(), map()) -> ok.
?T(trace_receive).
%% @doc Does nothing.
-spec trace_procs(atom(), term(), term(), term(), map()) -> ok.
?T(trace_procs).
%% @doc Does nothing.
-spec trace_ports(atom(), term(), term(), term(), map()) -> ok.
?T(trace_ports).
%% @doc Does nothing.
-spec trace_running_procs(atom(), term(), term(), term(), map()) -> ok.
?T(trace_running_procs).
%% @doc Does nothing.
-spec trace_running_ports(atom(), term(), term(), term(), map()) -> ok.
?T(trace_running_ports).
%% @doc Does nothing.
-spec trace_garbage_collection(atom(), term(), term(), term(), map()) -> ok.
?T(trace_garbage_collection).
