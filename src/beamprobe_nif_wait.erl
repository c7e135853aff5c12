%%% @doc The calls into the NIF that wait (for the collector, the disk, the
%%% producers), made of a short NIF call that asks and a message that says
%%% it is done, waited for here.
%%%
%%% Not in a dirty NIF of `beamprobe_nif', nor in that module's Erlang
%%% code: a process inside either is running the module's code, and the
%%% hard purge of its old code after a reload (`code:load_file/1' then
%%% `code:purge/1', or erts_code_purger after a load) kills every such
%%% process: a session process, a caller of stop/1, the janitor.
-module(beamprobe_nif_wait).

-export([start/1, stop/1, make_dir/1, create_file/1, hub_remove/1,
         remove_dir/1]).

%% @doc Starts a NIF session (beamprobe_nif:start/1): returns once its
%% directory is open and its metadata written, or with why not.
-spec start(map()) -> {ok, beamprobe_nif:session()} | {error, term()}.
start(Config) ->
    case beamprobe_nif:start(Config) of
        {ok, Res, Ref} ->
            receive
                {beamprobe_started, Ref, ok} -> {ok, Res};
                {beamprobe_started, Ref, {error, _} = E} -> E
            end;
        {error, _} = E -> E
    end.

%% @doc Stops a NIF session: its collector's final drain written, its
%% files closed, its place given back.  Returns its counters, as
%% `beamprobe_nif:stopped/1' gives them.
-spec stop(beamprobe_nif:session()) -> {ok, map()} | {error, term()}.
stop(Res) ->
    case beamprobe_nif:stop(Res) of
        {ok, Ref} ->
            receive {beamprobe_stopped, Ref} -> ok end,
            beamprobe_nif:stopped(Res);
        {error, _} = E -> E
    end.

%% @doc beamprobe_nif:make_dir/1's result: the trace directory `created'
%% with mode 0700, or an `existing' one accepted.
-spec make_dir(iodata()) -> created | existing | {error, term()}.
make_dir(Dir) ->
    job(beamprobe_nif:make_dir(Dir)).

%% @doc beamprobe_nif:create_file/1's result: the new empty file, 0600.
-spec create_file(iodata()) -> ok | {error, term()}.
create_file(File) ->
    job(beamprobe_nif:create_file(File)).

%% @doc Takes hub member `N' out of the hub; returns once no producer
%% writes into its session through the hub.
-spec hub_remove(0..255) -> ok | {error, term()}.
hub_remove(N) ->
    job(beamprobe_nif:hub_remove(N)).

%% A job's result (c_src/bp_job.h).
job({ok, Ref}) ->
    receive {beamprobe_done, Ref, R} -> R end;
job({error, _} = E) ->
    E.

%% @doc Undoes make_dir/1 after a start that failed: removes the directory
%% it `created', with what the session wrote in it (its metadata); a
%% directory already gone is left as it is.  Plain Erlang, no NIF: here,
%% not in beamprobe_nif, whose code a purge after a reload kills its
%% callers running.
-spec remove_dir(file:filename()) -> ok.
remove_dir(Dir) ->
    _ = file:del_dir_r(Dir),
    ok.
