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

-export([start_link/2, spawn_link/1, spawn/1, prestart/0, become/3, own/2]).
-compile({no_auto_import, [spawn/1]}).
-export([mark_handle/1, unmark_handle/0, is_handle/2, sensitive/0]).

%% The handles of cluster and follow sessions ({Pid, Kind}), and
%% beamprobe's own sensitive processes ({Pid, sensitive}: sensitive/0), in
%% a table of the top supervisor's (beamprobe_sup): beamprobe:stop/1 and info/1 ask
%% whether a pid is one before calling it, and reading a mark from the
%% pid's dictionary instead copied the whole dictionary of whatever
%% process the caller named (255 MB for info/1 on a process holding
%% that much: 1.4 s and the caller's heap).
-define(HANDLES, beamprobe_handles).

%% @doc As `gen_server:start_link(Module, Arg, [])', with the process
%% sensitive before any code of gen or of `Module' runs.
-spec start_link(module(), term()) -> {ok, pid()} | {error, term()}.
start_link(Module, Arg) ->
    %% Arg goes in a message, not in the new process's arguments: a
    %% session recording process events of every process renders those
    %% (the `spawned' event) -- another session's whole configuration,
    %% its TCP token included.
    become(prestart(), Module, Arg).

%% @doc As `erlang:spawn_link(Fun)', with the process sensitive first.
-spec spawn_link(fun(() -> term())) -> pid().
spawn_link(Fun) ->
    Pid = erlang:spawn(?MODULE, own, [self(), Fun]),
    %% Returns once the process is sensitive: a message sent to it
    %% before (become/3's, which carries a session's configuration) was
    %% a `receive' event of it for a session tracing new processes.
    Ref = monitor(process, Pid),
    receive
        {?MODULE, sensitive, Pid} -> demonitor(Ref, [flush]);
        {'DOWN', Ref, process, Pid, _} -> ok
    end,
    Pid.

%% @doc As `erlang:spawn(Fun)', with the process sensitive first; unlike
%% {@link spawn_link/1} it returns at once: send the process nothing it
%% must keep to itself before it has run.
-spec spawn(fun(() -> term())) -> pid().
spawn(Fun) ->
    erlang:spawn(?MODULE, own, [none, Fun]).

%% @private The first function of each of beamprobe's own processes:
%% makes it sensitive, then links it to `Parent' and runs `Fun'.  The VM
%% makes two events of a new process before its first instruction, from
%% the flags of new processes another session may have set: `spawned'
%% (which the tracer does not record for a process started as this
%% function, c_src/bp_dispatch.c) and, for a spawn_link, `getting_linked'
%% (none here: the link is made once the process is sensitive).  Before,
%% a session recording process events of new processes recorded both for
%% every process another session's start spawned.  A parent gone before
%% the link: the process ends (noproc).
-spec own(pid() | none, fun(() -> term())) -> term().
own(Parent, Fun) ->
    ok = sensitive(),
    _ = Parent =:= none orelse (link(Parent) andalso
                                (Parent ! {?MODULE, sensitive, self()})),
    Fun().

%% @doc Makes the calling process sensitive (process_flag/2: the VM makes
%% no trace event of it, for any tracer) and notes it as one of
%% beamprobe's, so that a session listing it in `procs' is told it would
%% record nothing of it ({@link is_handle/2} with `sensitive';
%% beamprobe_skip).  No BIF says whether a process is sensitive, and the
%% one sign (an empty backtrace) costs printing every term on the
%% process's stack, literals included, in one go: seconds of a scheduler
%% for a large bignum.
-spec sensitive() -> ok.
sensitive() ->
    _ = process_flag(sensitive, true),
    mark_handle(sensitive).

%% @doc A process of beamprobe's own, linked to the caller and sensitive
%% from its first instruction, that waits to be given a gen_server to run
%% ({@link become/3}).  The VM generates a process's first scheduled-in
%% event before that instruction: a process started once the caller's
%% session has set the trace flags of new processes is scheduled in,
%% recorded, then never seen again, and the readers charged it the whole
%% trace as running (`procs => new, events => [running]' showed the
%% session's own watchdog 25 ms scheduled in a 25 ms trace).  Started
%% before the flags, it is not a new process to them.
-spec prestart() -> pid().
prestart() ->
    Parent = self(),
    ?MODULE:spawn_link(fun() -> spare(Parent) end).

%% @doc Makes the process of {@link prestart/0} run gen_server `Module'
%% with `init(Arg)', as `start_link(Module, Arg)' does: `{ok, Pid}' once
%% its init/1 has returned, else `{error, Reason}' (the process has then
%% ended).  Called by the process that prestarted it.
-spec become(pid(), module(), term()) -> {ok, pid()} | {error, term()}.
become(Pid, Module, Arg) ->
    Ref = monitor(process, Pid),
    Pid ! {?MODULE, become, self(), Ref, Module, Arg},
    receive
        {Ref, Reply} ->
            demonitor(Ref, [flush]),
            Reply;
        {'DOWN', Ref, process, Pid, Why} -> {error, Why}
    end.

spare(Parent) ->
    receive
        {?MODULE, become, Parent, Ref, Module, Arg} ->
            %% What proc_lib would have set: gen_server:enter_loop/3
            %% needs the parent.
            put('$ancestors', [Parent]),
            put('$initial_call', {Module, init, 1}),
            case Module:init(Arg) of
                {ok, St} ->
                    Parent ! {Ref, {ok, self()}},
                    gen_server:enter_loop(Module, [], St);
                {stop, Reason} ->
                    Parent ! {Ref, {error, Reason}},
                    exit(Reason)
            end
    end.

%% @doc Marks the calling process as a handle of kind `Kind' (a cluster
%% or follow session), or as sensitive (`sensitive': a mark of its own,
%% kept beside a handle's), for {@link is_handle/2}.  Also forgets the
%% marks of processes that died without {@link unmark_handle/0}
%% (killed).  Without the beamprobe application (no table) nothing is
%% marked.
-spec mark_handle(cluster | follow | sensitive) -> ok.
mark_handle(Kind) ->
    try
        Dead = [K || {K, _} <- ets:tab2list(?HANDLES),
                     not is_process_alive(mark_pid(K))],
        _ = [ets:delete(?HANDLES, K) || K <- Dead],
        true = ets:insert(?HANDLES, {mark_key(self(), Kind), Kind}),
        ok
    catch error:badarg -> ok
    end.

%% @doc The calling process is no longer a handle (its sensitive mark, if
%% any, stays: it is sensitive for good).
-spec unmark_handle() -> ok.
unmark_handle() ->
    _ = (catch ets:delete(?HANDLES, self())),
    ok.

%% @doc True if `Pid' is a live handle of kind `Kind' on this node, or
%% (`sensitive') one of beamprobe's sensitive processes: one table
%% lookup, nothing read from the process.
-spec is_handle(term(), cluster | follow | sensitive) -> boolean().
is_handle(Pid, Kind) when is_pid(Pid), node(Pid) =:= node() ->
    try ets:lookup(?HANDLES, mark_key(Pid, Kind)) of
        [{_, Kind}] -> is_process_alive(Pid);
        _ -> false
    catch error:badarg -> false
    end;
is_handle(_, _) -> false.

mark_key(Pid, sensitive) -> {sensitive, Pid};
mark_key(Pid, _) -> Pid.

mark_pid({sensitive, Pid}) -> Pid;
mark_pid(Pid) -> Pid.
