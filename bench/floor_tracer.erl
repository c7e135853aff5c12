%%% @doc A do-nothing NIF tracer (bench/floor_tracer.c): the VM floor.
-module(floor_tracer).
-export([enabled/3, enabled_call/3, trace/5, trace_call/5]).
-on_load(load/0).

load() ->
    Dir = filename:dirname(code:which(?MODULE)),
    erlang:load_nif(filename:join(Dir, "floor_tracer"), 0).

%% @doc Always trace.
-spec enabled(atom(), term(), term()) -> trace.
enabled(_, _, _) -> erlang:nif_error(not_loaded).
%% @doc Always trace.
-spec enabled_call(atom(), term(), term()) -> trace.
enabled_call(_, _, _) -> erlang:nif_error(not_loaded).
%% @doc Does nothing.
-spec trace(atom(), term(), term(), term(), map()) -> ok.
trace(_, _, _, _, _) -> erlang:nif_error(not_loaded).
%% @doc Does nothing.
-spec trace_call(atom(), term(), term(), term(), map()) -> ok.
trace_call(_, _, _, _, _) -> erlang:nif_error(not_loaded).
