%%% @doc The beamprobe NIF: the `erl_tracer' module and the session control
%%% calls.  Internal: use the {@link beamprobe} API.
%%%
%%% The tracer callbacks (`enabled/3', `trace/5', ...) are NIFs written
%%% in C (`c_src/bp_tracer.c'); the VM calls them in the context of the
%%% traced process.  It does not export `trace_call/5', which makes it safe
%%% as a meta tracer too (see `docs/design.md').
-module(beamprobe_nif).

%% Implements the erl_tracer behaviour (its callbacks are NIFs).

-export([enabled/3, enabled_call/3, enabled_send/3, enabled_receive/3,
         enabled_procs/3, enabled_ports/3, enabled_running_procs/3,
         enabled_garbage_collection/3,
         trace/5, trace_send/5, trace_receive/5,
         trace_procs/5, trace_ports/5, trace_running_procs/5,
         trace_garbage_collection/5]).
-export([start/1, stop/1, stopped/1, info/1, dump/1, annotate/2, tampered/3, notice/4, ack/2,
         render/2, render_args/2, render_mfa/3, elixir_text/2, thread_slot/0, clock/0,
         make_dir/1, create_file/1, live_sessions/0, hub_add/2, hub_remove/1,
         hub_members/0, hub_routes/1, hub_route_tags/0, hub_list/0, hub_stats/0,
         user_annotate/2, usdt_enabled/1]).
-export([loaded/0, is_loaded/0]).

-on_load(load/0).

-type session() :: reference().
-type tag() :: atom().
-export_type([session/0]).

-define(NOT_LOADED, erlang:nif_error({not_loaded, ?MODULE})).

-define(LOAD_ERROR, {?MODULE, load_error}).

%% Where `beamprobe attach' placed the library (the application's env,
%% set when it loaded beamprobe into a node that does not have it).
-define(NIF_PATH, application:get_env(beamprobe, nif_path)).

%% Loads the C library.  A library that cannot be loaded does not fail the
%% module (whose load would then be retried, and fail, at every call): the
%% module loads with its stubs, and the error, with the path looked at, is
%% kept for loaded/0, which every API call checks first.
load() ->
    Lib = lib_path(),
    case erlang:load_nif(Lib, 0) of
        ok ->
            _ = persistent_term:erase(?LOAD_ERROR),
            reloaded(),
            ok;
        {error, Why} ->
            persistent_term:put(?LOAD_ERROR, {Lib ++ ".so", Why}),
            ok
    end.

%% A reload (the module deleted, purged and loaded again) makes the VM drop
%% this module as a tracer from every process it traced: the running
%% sessions are told (through the janitor) so that they trace their
%% processes again, and so is the follow session, which the janitor does
%% not know (beamprobe_follow).  Never fails: nothing may stop the load.
reloaded() ->
    _ = [P ! beamprobe_nif_reloaded
         || Name <- [beamprobe_janitor, beamprobe_follow_session],
            P <- [whereis(Name)], is_pid(P)],
    ok.

lib_path() ->
    case {os:getenv("BEAMPROBE_NIF"), ?NIF_PATH} of
        {false, {ok, Placed}} -> Placed;
        {false, undefined} ->
            Dir = case code:priv_dir(beamprobe) of
                      {error, bad_name} ->
                          filename:join(filename:dirname(filename:dirname(
                                          code:which(?MODULE))), "priv");
                      D -> D
                  end,
            filename:join(Dir, "beamprobe_nif");
        {Path, _} -> Path
    end.

%% @doc `ok' when the C library is loaded; otherwise where it was looked
%% for and why it could not be loaded.
-spec loaded() -> ok | {error, {nif_not_loaded, file:filename(), term()}}.
loaded() ->
    case catch is_loaded() of
        true -> ok;
        _ ->
            {Path, Why} = persistent_term:get(?LOAD_ERROR,
                                              {lib_path() ++ ".so", unknown}),
            {error, {nif_not_loaded, Path, Why}}
    end.

%% @doc `true' from the C library; this stub raises when it is not loaded.
-spec is_loaded() -> true.
is_loaded() -> ?NOT_LOADED.

%% --- the hub (c_src/bp_hub.h) -------------------------------------------

%% @doc Makes `Session' a member of the hub, the tracer state
%% (`beamprobe_hub') of every process beamprobe traces: it records the
%% events its filter accepts.  `Spec': `kinds' (a mask of event kinds),
%% `procs' (`all | new | existing | list', with `pids' the set of pids
%% and ports for the last three) and `calls' (the `{M, F, A}' patterns,
%% `'_'' for any, naming the functions whose unrouted call events it
%% records).  Returns the member number.
-spec hub_add(session(), map()) -> {ok, 0..255} | {error, hub_full | badarg}.
hub_add(_, _) -> ?NOT_LOADED.

%% @doc Removes a member from the hub, by a job that returns at once
%% (c_src/bp_job.h): the caller is sent `{beamprobe_done, Ref, ok}' once
%% no tracer callback writes into its session through the hub
%% (beamprobe_nif_wait:hub_remove/1 waits for it).
-spec hub_remove(0..255) -> {ok, reference()} | {error, {job, atom()}}.
hub_remove(_) -> ?NOT_LOADED.

%% @doc Tells the hub how many combined match specs (whose calls carry a
%% route, beamprobe_combine) are installed: calls look for a route only
%% while there is one.
-spec hub_routes(non_neg_integer()) -> ok.
hub_routes(_) -> ?NOT_LOADED.

%% @doc The tags of a route and of a route whose return is traced, in
%% the match-spec results of combined match specs (beamprobe_combine):
%% atoms `bp_route_<N>' and `bp_route_ret_<N>', N drawn at random when
%% the library is first loaded (kept across its reloads, as the hub is).
%% The tracer takes only a result tagged so for a route: a term a traced
%% function gets (sent by a `message' action) cannot name one.
-spec hub_route_tags() -> {atom(), atom()}.
hub_route_tags() -> ?NOT_LOADED.

%% @doc The hub's members, each with the process of its session.
-spec hub_list() -> [{0..255, pid() | undefined}].
hub_list() -> ?NOT_LOADED.

%% @doc The hub's counters: members, combined match specs installed
%% (`routes'), and the return frames that could not be kept
%% (`return_frames_lost': their returns were routed by function,
%% c_src/bp_retstack.h); how the producers' busy flags are ordered
%% against session stops (`barrier': `membarrier' when the kernel takes
%% the remover's side, else `fence'; c_src/bp_membar.h) and the
%% membarrier calls that failed (`barrier_failures', expected 0); how
%% events are stamped (`clock': `tsc', the TSC mapped to CLOCK_MONOTONIC,
%% or `monotonic', clock_gettime; c_src/bp_clock.h) and how many times
%% a re-anchoring found the TSC jumped (`clock_jumps'; from the first on,
%% the clock is `monotonic').
-spec hub_stats() -> #{members := non_neg_integer(),
                       routes := non_neg_integer(),
                       return_frames_lost := non_neg_integer(),
                       barrier := membarrier | fence,
                       barrier_failures := non_neg_integer(),
                       clock := tsc | monotonic,
                       clock_jumps := non_neg_integer()}.
hub_stats() -> ?NOT_LOADED.

%% @doc The number of the hub's members (for tests).
-spec hub_members() -> non_neg_integer().
hub_members() -> ?NOT_LOADED.

%% --- erl_tracer callbacks (NIFs) ---------------------------------------

%% @doc Tracer callback: `trace' while the session runs, `remove' after.
-spec enabled(tag(), session(), pid() | port() | undefined) ->
          trace | discard | remove.
enabled(_, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback, as {@link enabled/3}.
-spec enabled_call(tag(), session(), pid()) -> trace | discard | remove.
enabled_call(_, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback, as {@link enabled/3}.
-spec enabled_send(tag(), session(), pid()) -> trace | discard | remove.
enabled_send(_, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback, as {@link enabled/3}.
-spec enabled_receive(tag(), session(), pid()) -> trace | discard | remove.
enabled_receive(_, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback, as {@link enabled/3}.
-spec enabled_procs(tag(), session(), pid()) -> trace | discard | remove.
enabled_procs(_, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback, as {@link enabled/3}.
-spec enabled_ports(tag(), session(), port()) -> trace | discard | remove.
enabled_ports(_, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback, as {@link enabled/3}.
-spec enabled_running_procs(tag(), session(), pid()) ->
          trace | discard | remove.
enabled_running_procs(_, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback, as {@link enabled/3}.
-spec enabled_garbage_collection(tag(), session(), pid()) ->
          trace | discard | remove.
enabled_garbage_collection(_, _, _) -> ?NOT_LOADED.

%% @doc Tracer callback: call, return_from, exception_from, return_to
%% (`trace_call/5' is deliberately not exported, so that this module is
%% safe as a meta tracer too), and anything without a specific callback.
-spec trace(tag(), session(), term(), term(), map()) -> ok.
trace(_, _, _, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback: send, send_to_non_existing_process.
-spec trace_send(tag(), session(), pid(), term(), map()) -> ok.
trace_send(_, _, _, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback: 'receive'.
-spec trace_receive(tag(), session(), pid(), term(), map()) -> ok.
trace_receive(_, _, _, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback: spawn, exit, link, register, ...
-spec trace_procs(tag(), session(), pid(), term(), map()) -> ok.
trace_procs(_, _, _, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback: port open, closed, ...
-spec trace_ports(tag(), session(), port(), term(), map()) -> ok.
trace_ports(_, _, _, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback: scheduling in and out.
-spec trace_running_procs(tag(), session(), pid(), term(), map()) -> ok.
trace_running_procs(_, _, _, _, _) -> ?NOT_LOADED.
%% @doc Tracer callback: garbage collection start and end.
-spec trace_garbage_collection(tag(), session(), pid(), term(), map()) -> ok.
trace_garbage_collection(_, _, _, _, _) -> ?NOT_LOADED.

%% --- control -------------------------------------------------------------

%% @doc Creates a session and starts its collector thread, which opens the
%% trace directory, writes the metadata and sends the caller
%% `{beamprobe_started, Ref, ok | {error, Reason}}'; returns at once (not
%% a dirty NIF that waits on the disk: a hard purge of this module's old
%% code after a reload kills a process inside one).  Use
%% beamprobe_nif_wait:start/1, which waits in its own code.
-spec start(map()) -> {ok, session(), reference()}
                      | {error, {atom(), term()}}.
start(_Config) -> ?NOT_LOADED.

%% @doc Asks a session's collector to end (final drain, files closed) and
%% returns at once: the caller is sent `{beamprobe_stopped, Ref}' once it
%% has; stopped/1 then gives the counters.  Not a dirty NIF that waits: a
%% process in a dirty NIF of this module is running its code, and a hard
%% purge of that code after a reload kills it.  Use
%% beamprobe_nif_wait:stop/1, which waits in its own code.
-spec stop(session()) -> {ok, reference()} | {error, {stop, enomem}}.
stop(_Session) -> ?NOT_LOADED.

%% @doc The counters of a session whose collector has ended (after stop/1's
%% message): its place given back, its directory closed.
-spec stopped(session()) -> {ok, map()} | {error, running}.
stopped(_Session) -> ?NOT_LOADED.

%% @doc A session's counters.
-spec info(session()) -> map().
info(_Session) -> ?NOT_LOADED.

%% @doc Asks the collector to write the flight-recorder window now and
%% returns at once: the caller is sent `{beamprobe_dumped, M}', `M >= N',
%% once it is written (or the collector has finished, its final drain
%% writing the window).  Not a dirty NIF that waits: a process in a dirty
%% NIF of this module is running its code, and a hard purge of that code
%% after a reload kills it.
-spec dump(session()) -> {ok, pos_integer()}
                         | {error, not_flight_recorder | stopped}.
dump(_Session) -> ?NOT_LOADED.

%% @doc Writes `process' events naming processes and ports: the
%% registered name (or `undefined') and the initial call (or a port's
%% name), rendered by the NIF in Erlang syntax as the tracer renders them.
-spec annotate(session(), [{pid() | port(), atom(),
                            mfa() | binary() | undefined}]) ->
          {ok, non_neg_integer()}.
annotate(_Session, _List) -> ?NOT_LOADED.

%% @doc Writes a `tampered' event (docs/format.md) into the session's
%% trace: another tool removed or replaced what the session installed.
%% `Pid' is the process concerned (`undefined' for a pattern or `new');
%% `Fields' are the texts `what', `subject', `how' and `detail', each cut
%% at 1024 bytes.  Counted as an event; a full ring counts it as lost.
-spec tampered(session(), pid() | undefined, [binary()]) ->
          ok | {error, stopped | no_buffer | ring_full}.
tampered(_Session, _Pid, _Fields) -> ?NOT_LOADED.

%% @doc Writes a `monitor' or `sample' event (docs/format.md) into the
%% session's trace: `Fields' in the schema's order, binaries for texts
%% (cut at 1024 bytes), non-negative integers for numbers.  `Who' is the
%% process or port concerned, or `undefined'.  Counted as an event; a
%% full ring counts it as lost.
-spec notice(session(), monitor | sample, pid() | port() | undefined,
             [binary() | non_neg_integer()]) ->
          ok | {error, stopped | no_buffer | ring_full}.
notice(_Session, _Kind, _Who, _Fields) -> ?NOT_LOADED.

%% @doc beamprobe:annotate/2: an `annotation' event into every session
%% tracing the calling process, and the USDT probe beamprobe:annotate;
%% returns at once when neither wants it.
-spec user_annotate(term(), term()) -> ok.
user_annotate(_Tag, _Term) -> ?NOT_LOADED.

%% @doc Is a tool (bpftrace, gdb, SystemTap) attached to USDT probe
%% beamprobe:Name (its is-enabled semaphore raised)?
-spec usdt_enabled(atom()) -> boolean().
usdt_enabled(_Name) -> ?NOT_LOADED.

%% @doc A handler consumed batch number `Index''s worth: one credit back.
-spec ack(session(), non_neg_integer()) -> ok.
ack(_Session, _Index) -> ?NOT_LOADED.

%% @doc Renders a term the way the tracer does (for tests).
-spec render(term(), map()) -> binary().
render(_Term, _Capture) -> ?NOT_LOADED.

%% @doc Renders an argument list the way the tracer does (for tests).
-spec render_args(list(), map()) -> binary().
render_args(_Args, _Capture) -> ?NOT_LOADED.

%% @doc Renders `M:F/A' the way the tracer does (for tests).
-spec render_mfa(atom(), atom(), non_neg_integer()) -> binary().
render_mfa(_M, _F, _A) -> ?NOT_LOADED.

%% @doc The Elixir-syntax text of a captured Erlang-syntax text (a term,
%% an argument list `(A, B)', an `m:f/N' or a registered name):
%% c_src/bp_elixir.h.  Used by beamprobe_printer for `syntax => elixir'.
-spec elixir_text(binary(), term | args | mfa | name) -> binary().
elixir_text(_Text, _Kind) -> ?NOT_LOADED.

%% @doc The calling scheduler thread's slot number (for tests).
-spec thread_slot() -> integer().
thread_slot() -> ?NOT_LOADED.

%% @doc The trace clock now: `CLOCK_MONOTONIC' in ns (event `ts' values).
-spec clock() -> non_neg_integer().
clock() -> ?NOT_LOADED.

%% @doc Creates a trace directory with mode 0700 from the first instant
%% (`created'), or accepts an existing one (`existing') only if it is
%% empty, not a symlink, owned by this user and not group/world-writable.
%% A job that returns at once (c_src/bp_job.h): the caller is sent
%% `{beamprobe_done, Ref, Result}'; beamprobe_nif_wait:make_dir/1 waits.
-spec make_dir(iodata()) -> {ok, reference()} | {error, {job, atom()}}.
make_dir(_Dir) -> ?NOT_LOADED.

%% @doc Creates the new, empty file `File' with mode 0600 from the first
%% instant (whatever the umask: no moment in which another user could
%% open it and keep reading what is written later), never through a
%% symlink and never over an existing file (`{error, eexist}').  Write
%% it then with file:open/2 or file:write_file/2, which keep its mode.
%% A job that returns at once (c_src/bp_job.h): the caller is sent
%% `{beamprobe_done, Ref, ok | {error, Why}}';
%% beamprobe_nif_wait:create_file/1 waits.
-spec create_file(iodata()) -> {ok, reference()} | {error, {job, atom()}}.
create_file(_File) -> ?NOT_LOADED.

%% @doc Sessions started and not yet stopped, node-wide (for tests).
-spec live_sessions() -> non_neg_integer().
live_sessions() -> ?NOT_LOADED.
