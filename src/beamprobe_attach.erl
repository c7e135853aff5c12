%%% @doc The node side of `beamprobe attach NODE' (c_src/cli/cmd_attach.c):
%%% an agent process that the command line's hidden C node starts on the
%%% node, that owns the session, and that leaves the node as it found it.
%%%
%%% The C node loads this module first when the node lacks it (by
%%% `code:load_binary/3', file name `"beamprobe-attach:MOD.beam"'), then
%%% spawns the agent ({@link spawn_agent/2}) before anything else is
%%% loaded: the agent takes a snapshot of what beamprobe code and
%%% application state the node has, and monitors the C node.  Everything
%%% attach brings afterwards (beamprobe's modules, the application, the
%%% NIF placed in a private 0700 directory) goes through the agent
%%% ({@link request/2}), which records it.  The session belongs to the
%%% agent: it runs until its limits end it, the command line asks it to
%%% stop (^C), or the connection to the C node drops (the command line
%%% was killed): then the agent stops the session and undoes what attach
%%% brought: the application stopped and unloaded, the modules purged and
%%% deleted (this one last, by a process of `code'), the NIF file and its
%%% directory removed.  Should the agent itself be killed (or crash), its
%%% guard, a process that holds the agent's latest state, does that
%%% clean-up instead and tells the command line.  A node that had beamprobe on its code path keeps
%%% it; only what was not loaded before attach is unloaded.
%%%
%%% `attach --cluster': the command line asks for the cluster's nodes
%%% (`cluster_nodes'), listens for one TCP stream per node, then
%%% (`{start_cluster, Patterns, Options}') the agent starts an agent of
%%% this module on every other node of its cluster (watching this node),
%%% brings beamprobe through it where missing, and owns one streamed
%%% cluster session (beamprobe_cluster, `output => {streams, ...}'): every
%%% node's session streams its events to the command line live, nothing
%%% is staged on any node.  At the end the agent sends each node's clock
%%% offsets (`{beamprobe_attach_env, <<"NODE">>, EnvLines}' messages
%%% before the done message; the command line adds them to that node's
%%% metadata) and has every node's agent undo what it brought.  If this
%%% node dies, the other nodes' sessions end (their coordinator is gone)
%%% and their agents undo what they were given (they watch this node).
-module(beamprobe_attach).

-export([spawn_agent/2, request/2, session_spec/2]).

-include_lib("kernel/include/file.hrl").

-define(PREFIX, "beamprobe-attach:").
-define(POLL_MS, 200).

-record(ag, {cli :: pid(),
             cli_node :: node(),
             mods_before :: [module()],
             app_loaded :: boolean(),
             app_started :: boolean(),
             files = [] :: [file:filename()],
             dirs = [] :: [file:filename()],
             session :: undefined | beamprobe:session(),
             %% `beamprobe profile': the run (beamprobe_attach_profile).
             profiler :: undefined | pid() | {done, {ok | error, binary()}},
             ended = false :: boolean(),
             %% What was brought, kept to bring it to the cluster's nodes.
             bins = [] :: [{module(), binary()}],
             nif :: undefined | binary(),
             app :: undefined | binary(),
             %% --cluster: the agents on the other nodes.
             cluster = false :: boolean(),
             remote = [] :: [{node(), pid()}],
             brought = 0 :: non_neg_integer(),
             %% The process that undoes all this should the agent be
             %% killed (guard/2); it is told every change of this state.
             guard :: undefined | pid()}).

%% @doc Starts the agent for the C node's process `Cli'; returns its pid.
%% `Self' is true when this module was loaded by attach (then it is
%% unloaded at the end too).  When this module was brought by an attach
%% (not on the node's own code path), the agent is registered as
%% `beamprobe_attach_agent': one such attach at a time, and a second one
%% that loaded this module at the same moment gets `{error, busy}' (the
%% first one's agent unloads it).  A module loaded by attach with no
%% agent registered is one whose attach died before its agent started:
%% the next attach removes it.
-spec spawn_agent(pid(), boolean()) -> {ok, pid()} | {error, busy | timeout}.
spawn_agent(Cli, LoadedSelf) when is_pid(Cli), is_boolean(LoadedSelf) ->
    Parent = self(),
    Pid = spawn(fun() -> init(Parent, Cli, LoadedSelf) end),
    Ref = monitor(process, Pid),
    receive
        {Pid, ready} -> demonitor(Ref, [flush]), {ok, Pid};
        {Pid, busy} -> demonitor(Ref, [flush]), {error, busy};
        {'DOWN', Ref, process, Pid, _} -> {error, busy}
    after 5000 -> exit(Pid, kill), demonitor(Ref, [flush]), {error, timeout}
    end.

%% @doc One request of the C node to its agent (run by `rpc'):
%% `{nif_dir, Dir, Nonce}' (is the C node's directory readable here, with
%% that nonce in `Dir/check'? then its NIF is used from there),
%% `{place_nif, Binary}' (write the NIF into a private directory here),
%% `{load_app, AppFileText, NifPath}', `{load, Module, Binary}',
%% `{start, Patterns, Options}', `cluster_nodes' (`{ok, Text}': this node
%% and the others of its cluster, one a line), `{start_cluster, Patterns,
%% Options}' (Options with `self_beam', this module's object code, for the
%% other nodes, and `streams', `[{NodeName, Port}]': where each node's
%% session streams to).
%% Replies `ok', `{ok, Text}' or
%% `{error, Text}' (Text: a binary the command line prints).
%% `{profile, Patterns, Options}' (`beamprobe profile'): a profile run
%% (src/beamprobe_attach_profile.erl), its table sent to the command line
%% as `{beamprobe_attach_profile, ok | error, Text}' before the done
%% message.
-spec request(pid(), term()) -> ok | {ok, binary()} | {error, binary()}.
request(Agent, Req) ->
    Ref = monitor(process, Agent),
    Agent ! {request, self(), Ref, Req},
    receive
        {Ref, Reply} -> demonitor(Ref, [flush]), Reply;
        {'DOWN', Ref, process, _, Why} ->
            {error, text("the attach agent ended: ~tp", [Why])}
    after 60000 -> {error, <<"the attach agent did not answer">>}
    end.

%%% ------------------------------------------------------------------------

init(Parent, Cli, LoadedSelf) ->
    Brought = case code:which(?MODULE) of
                  W when is_list(W) -> lists:prefix(?PREFIX, W);
                  _ -> false
              end,
    case not Brought orelse
        (catch register(beamprobe_attach_agent, self())) =:= true of
        true -> ok;
        false -> Parent ! {self(), busy}, exit(normal)
    end,
    CliNode = node(Cli),
    true = monitor_node(CliNode, true),
    Before = [M || {M, _} <- code:all_loaded(), is_ours(M),
                   not (LoadedSelf andalso M =:= ?MODULE)],
    Apps = fun(L) -> lists:keymember(beamprobe, 1, L) end,
    St = #ag{cli = Cli, cli_node = CliNode, mods_before = Before,
             app_loaded = Apps(application:loaded_applications()),
             app_started = Apps(application:which_applications())},
    Guard = spawn_guard(St),
    Parent ! {self(), ready},
    loop(St#ag{guard = Guard}).

%% The agent's guard: should the agent die other than by its own exit
%% (exit(Agent, kill) by someone on the node, a crash), nothing of the
%% agent's clean-up would run, and what it brought (modules, the
%% application, the NIF file) would stay loaded and placed for good while
%% the command line waited for a done message that never came.  The guard
%% holds the agent's latest state; when the agent dies abnormally it takes
%% the agent's name (so that no other attach takes this module from under
%% it), undoes what the agent brought, tells the command line and goes,
%% unloading this module last as the agent would have.
spawn_guard(St) ->
    Agent = self(),
    spawn(fun() ->
                  _ = erlang:trace(self(), false, [all]),
                  guard(monitor(process, Agent), St)
          end).

guard(Ref, St) ->
    receive
        {beamprobe_attach_state, St1} -> guard(Ref, St1);
        {'DOWN', Ref, process, _, normal} -> ok;
        {'DOWN', Ref, process, _, Why} ->
            _ = catch register(beamprobe_attach_agent, self()),
            _ = is_pid(St#ag.profiler) andalso profile_restored(),
            {_, Text} = cleanup(St#ag{guard = undefined}, false),
            St#ag.cli ! {beamprobe_attach_done,
                         text("the attach agent died (~tP); ~ts",
                              [Why, 5, Text]), failed},
            bye(St)
    end.

stop_guard(G) ->
    R = monitor(process, G),
    exit(G, kill),
    receive {'DOWN', R, process, _, _} -> ok end.

%% A profile run's worker restores the counters and flags when its caller
%% (linked to the agent) dies: wait for it before anything is unloaded.
profile_restored() ->
    case whereis(beamprobe_profile) of
        undefined -> ok;
        W ->
            R = monitor(process, W),
            receive {'DOWN', R, process, _, _} -> ok
            after 10000 -> demonitor(R, [flush])
            end
    end.

%% The guard is told of every change of the agent's state.
guarded(St, St) -> St;
guarded(#ag{guard = G} = St, _) when is_pid(G) ->
    G ! {beamprobe_attach_state, St},
    St;
guarded(St, _) -> St.

is_ours(M) ->
    lists:prefix("beamprobe", atom_to_list(M)) orelse
        lists:prefix("Elixir.Beamprobe", atom_to_list(M)).

loop(St) ->
    receive
        {request, From, Ref, Req} ->
            {Reply, St1} = try handle(Req, St)
                           catch C:R -> {{error, text("~tp:~tp", [C, R])}, St}
                           end,
            From ! {Ref, Reply},
            loop(guarded(St1, St));
        {nodedown, Node} when Node =:= St#ag.cli_node ->
            %% The command line was killed or the connection dropped.
            _ = cleanup(St, false),
            bye(St);
        {beamprobe_attach_stop} ->
            finish(St, stopped);
        {beamprobe_attach_profile, P, Outcome} when P =:= St#ag.profiler ->
            finish(guarded(St#ag{profiler = {done, Outcome}}, St), ended);
        _ ->
            loop(St)
    after ?POLL_MS ->
            case St#ag.session of
                undefined -> loop(St);
                S when St#ag.cluster ->
                    case cluster_running(S) of
                        true -> loop(St);
                        false -> finish(St, ended)
                    end;
                S ->
                    case catch beamprobe:info(S) of
                        {ok, #{state := _}} -> loop(St);
                        _ -> finish(St, ended)
                    end
            end
    end.

%% The session ended (its limits) or the command line asked: stop,
%% clean up, tell the command line, go.
-spec finish(#ag{}, atom()) -> no_return().
finish(St, _Why) ->
    {How, Text} = cleanup(St, true),
    St#ag.cli ! {beamprobe_attach_done, Text, How},
    bye(St).

-spec bye(#ag{}) -> no_return().
bye(#ag{mods_before = Before, guard = G}) ->
    %% The agent's own end: its guard goes first (no process then runs
    %% this module when it is unloaded).
    _ = is_pid(G) andalso G =/= self() andalso stop_guard(G),
    case lists:member(?MODULE, Before) of
        true -> ok;
        false -> unload_self_after_exit()
    end,
    exit(normal).

%% This module last, by a process that runs none of its code (erl_eval):
%% once this one is gone, every version of it is purged, whichever this
%% process runs (another attach that loaded it at the same moment made
%% this one's version old: a plain delete would then fail and leave the
%% newer one loaded).
unload_self_after_exit() ->
    {ok, Ts, _} = erl_scan:string(
                    "R = erlang:monitor(process, Agent), "
                    "receive {'DOWN', R, process, _, _} -> ok end, "
                    "code:purge(M), code:delete(M), code:purge(M)."),
    {ok, Es} = erl_parse:parse_exprs(Ts),
    B = erl_eval:add_binding('Agent', self(),
                             erl_eval:add_binding('M', ?MODULE,
                                                  erl_eval:new_bindings())),
    _ = spawn(erl_eval, exprs, [Es, B]),
    ok.

handle({nif_dir, Dir, Nonce}, St) when is_binary(Nonce) ->
    %% The command line's copy, readable here: the library is placed
    %% from its bytes all the same (at the path of nif_dir/1).
    Check = filename:join(Dir, "check"),
    case file:read_file(Check) of
        {ok, Nonce} ->
            So = filename:join(Dir, "beamprobe_nif.so"),
            Read = file:read_file(So),
            %% The command line's directory has done its job.
            _ = [file:delete(F) || F <- [So, Check]],
            _ = file:del_dir(Dir),
            case Read of
                {ok, Nif} -> handle({place_nif, Nif}, St);
                {error, R} ->
                    {{error, text("cannot read the library: ~tp", [R])}, St}
            end;
        _ -> {{error, <<"not readable here">>}, St}
    end;
handle({place_nif, Bin}, St) when is_binary(Bin) ->
    case tmp_base_safe() of
        ok -> place_nif(Bin, St);
        {error, Why} -> {{error, Why}, St}
    end;
handle({load_app, Text, NifPath}, St) ->
    {ok, Toks, _} = erl_scan:string(unicode:characters_to_list(Text)),
    {ok, {application, beamprobe, Props}} = erl_parse:parse_term(Toks),
    Env = [{nif_path, unicode:characters_to_list(NifPath)}
           | proplists:get_value(env, Props, [])],
    Props1 = lists:keystore(env, 1, Props, {env, Env}),
    case application:load({application, beamprobe, Props1}) of
        ok -> {ok, St#ag{app = unicode:characters_to_binary(Text)}};
        {error, R} -> {{error, text("cannot load the application: ~tp",
                                    [R])}, St}
    end;
handle({load, Mod, Bin}, St) when is_atom(Mod), is_binary(Bin) ->
    %% A module of the node's own (beamprobe itself not on its code path,
    %% one of its modules loaded some other way): replacing it would purge
    %% what runs it, and it would not come back.
    Own = Mod =/= ?MODULE andalso code:is_loaded(Mod),
    case Own =:= false andalso
        code:load_binary(Mod, ?PREFIX ++ atom_to_list(Mod) ++ ".beam", Bin) of
        false ->
            {file, Where} = Own,
            {{error, text("~tp is already loaded on this node (from ~tp): "
                          "attach would replace it, so it brings nothing; "
                          "put beamprobe on the node's code path to use "
                          "the node's own copy", [Mod, Where])}, St};
        {module, Mod} ->
            _ = Mod =:= beamprobe_nif andalso nif_file_loaded(St),
            {ok, St#ag{bins = [{Mod, Bin} | St#ag.bins]}};
        {error, R} -> {{error, text("cannot load ~tp: ~tp", [Mod, R])}, St}
    end;
handle({start, Patterns, Opts}, #ag{session = undefined} = St) ->
    case session_spec(Patterns, Opts) of
        {error, Text} -> {{error, Text}, St};
        {ok, Spec} ->
            case beamprobe:start(Spec) of
                {ok, S} ->
                    {ok, #{matched := M} = I} = beamprobe:info(S),
                    {{ok, iolist_to_binary(
                            [text("~b function~s matched", [M, s(M)]),
                             skipped_text(I)])},
                     St#ag{session = S}};
                {error, R} -> {{error, start_error(R)}, St}
            end
    end;
handle(cluster_nodes, St) ->
    {{ok, iolist_to_binary([[atom_to_list(N), "\n"]
                            || N <- [node() | lists:sort(nodes())]])}, St};
handle({start_cluster, Patterns, Opts}, #ag{session = undefined} = St) ->
    start_cluster(Patterns, Opts, St);
handle({profile, Patterns, Opts},
       #ag{session = undefined, profiler = undefined} = St) ->
    case beamprobe_attach_profile:start(Patterns, Opts) of
        {ok, P, Text} -> {{ok, Text}, St#ag{profiler = P}};
        {error, Text} -> {{error, Text}, St}
    end;
handle(Req, St) ->
    {{error, text("bad request ~tP", [Req, 8])}, St}.

%%% ---- --cluster ----------------------------------------------------------
%%% Every other node of this node's cluster that lacks beamprobe gets it
%%% from here over distribution, through an agent of its own (this module,
%%% spawned there for this agent: it watches this node and undoes what it
%%% was given when told to or when this node goes); then one cluster
%%% session (beamprobe_cluster) owned by this agent, every node's session
%%% streaming to the command line (a port per node).

start_cluster(Patterns, Opts, St0) ->
    case {session_spec(Patterns, Opts), streams(Opts)} of
        {{error, Text}, _} -> {{error, Text}, St0};
        {_, {error, Text}} -> {{error, Text}, St0};
        {{ok, Spec}, {ok, Streams}} ->
            Nodes = [node() | lists:sort(maps:keys(Streams) -- [node()])],
            St = St0#ag{cluster = true},
            case bring_all(Nodes -- [node()], Opts, St) of
                {error, Text, St1} -> {{error, Text}, St1};
                {ok, St2} ->
                    case beamprobe:start(Spec#{nodes => Nodes,
                                               output => {streams, Streams}}) of
                        {ok, S} ->
                            {{ok, text("cluster session on ~b node~s: ~ts",
                                       [length(Nodes), s(length(Nodes)),
                                        lists:join(", ", [atom_to_list(N)
                                                          || N <- Nodes])])},
                             St2#ag{session = S}};
                        {error, R} -> {{error, start_error(R)}, St2}
                    end
            end
    end.

%% Each node's stream: the command line's address, a port per node.
streams(#{streams := L, tcp := {IP, _, Remote, Token}})
  when is_list(L), L =/= [] ->
    try
        {ok, maps:from_list(
               [{binary_to_existing_atom(N, utf8),
                 {tcp, {IP, Port}, #{remote => Remote, token => Token}}}
                || {N, Port} <- L])}
    catch error:badarg ->
            {error, text("--cluster: a node the command line named is not "
                         "known here: ~tp", [[N || {N, _} <- L]])}
    end;
streams(_) -> {error, <<"--cluster: no streams">>}.

s(1) -> "";
s(_) -> "s".

bring_all([], _Opts, St) -> {ok, St};
bring_all([N | Ns], Opts, St) ->
    case catch bring(N, Opts, St) of
        {ok, St1} -> bring_all(Ns, Opts, St1);
        {error, Text, St1} -> {error, Text, St1};
        Other -> {error, text("~ts: ~tP", [N, Other, 10]), St}
    end.

bring(N, Opts, St) ->
    Which = fun(M) -> erpc:call(N, code, which, [M], 10000) end,
    case {Which(beamprobe), Which(?MODULE)} of
        {_, ?PREFIX ++ _} ->
            {error, text("~ts: another beamprobe attach is active there",
                         [N]), St};
        {BpWhere, SelfWhere} ->
            %% Every node gets an agent, which unloads what the session
            %% loads; a node lacking beamprobe gets it through its agent.
            Bring = BpWhere =:= non_existing,
            case Bring andalso versions(N) of
                false -> ok;
                ok -> ok;
                {error, _} = VE -> throw(erlang:append_element(VE, St))
            end,
            LoadedSelf = not erpc:call(N, erlang, module_loaded, [?MODULE],
                                       10000),
            _ = case SelfWhere of
                non_existing ->
                    {module, ?MODULE} =
                        erpc:call(N, code, load_binary,
                                  [?MODULE, ?PREFIX ++ "beamprobe_attach.beam",
                                   maps:get(self_beam, Opts)], 30000);
                _ -> ok
            end,
            Agent = case erpc:call(N, ?MODULE, spawn_agent,
                                   [self(), LoadedSelf], 10000) of
                        {ok, A} -> A;
                        {error, Why} ->
                            throw({error, text("~s: its attach agent did "
                                               "not start (~p: another "
                                               "attach is active there)",
                                               [N, Why]), St})
                    end,
            %% From here on that agent is ours to stop (cleanup), whatever
            %% fails.
            St1 = guarded(St#ag{remote = [{N, Agent} | St#ag.remote]}, St),
            try
                _ = Bring orelse throw(nothing_to_bring),
                {Bins, Nif, App} = what_to_bring(St1),
                Steps = [{place_nif, Nif}] ++ [{load, M, B} || {M, B} <- Bins,
                                                              M =/= ?MODULE],
                run_steps(N, Agent, Steps, App)
            of
                ok -> {ok, St1#ag{brought = St1#ag.brought + 1}};
                {error, Text} -> {error, text("~ts: ~ts", [N, Text]), St1}
            catch
                throw:nothing_to_bring -> {ok, St1};
                C:R -> {error, text("~ts: ~tp:~tP", [N, C, R, 10]), St1}
            end
    end.

run_steps(_N, _Agent, [], _App) -> ok;
run_steps(N, Agent, [Step | Steps], App) ->
    case request(Agent, Step) of
        ok -> run_steps(N, Agent, Steps, App);
        {ok, NifPath} when element(1, Step) =:= place_nif ->
            case request(Agent, {load_app, App, NifPath}) of
                ok -> run_steps(N, Agent, Steps, App);
                {error, _} = E -> E
            end;
        {error, _} = E -> E
    end.

%% The node must run the release and architecture of this one (the NIF
%% this node runs is sent there).
versions(N) ->
    Here = {erlang:system_info(otp_release),
            erlang:system_info(system_architecture)},
    There = erpc:call(N, erlang, system_info, [otp_release], 10000),
    Arch = erpc:call(N, erlang, system_info, [system_architecture], 10000),
    case {There, Arch} of
        Here -> ok;
        _ -> {error, text("~ts runs OTP ~ts on ~ts, the NIF is for OTP ~ts "
                          "on ~ts: nothing loaded there",
                          [N, There, Arch, element(1, Here),
                           element(2, Here)])}
    end.

%% What attach brought here, or (beamprobe on this node's code path)
%% what this node has.
what_to_bring(#ag{bins = Bins, nif = Nif, app = App})
  when Bins =/= [], is_binary(Nif), is_binary(App) ->
    {Bins, Nif, App};
what_to_bring(_) ->
    {ok, Mods} = application:get_key(beamprobe, modules),
    Bins = [{M, B} || M <- Mods,
                      {_, B, _} <- [code:get_object_code(M)]],
    Ebin = filename:dirname(code:which(beamprobe)),
    {ok, App} = file:read_file(filename:join(Ebin, "beamprobe.app")),
    NifPath = case application:get_env(beamprobe, nif_path) of
                  {ok, P} -> P;
                  undefined -> filename:join(code:priv_dir(beamprobe),
                                             "beamprobe_nif")
              end,
    {ok, Nif} = file:read_file(NifPath ++ ".so"),
    {Bins, Nif, App}.

%% Some node's session still runs.
cluster_running(S) ->
    case catch beamprobe:info(S) of
        {ok, #{nodes := Per}} ->
            lists:any(fun({ok, #{state := _}}) -> true; (_) -> false end,
                      maps:values(Per));
        _ -> false
    end.

%% Every node's clock offsets, to the command line (before the done
%% message; one sender, so they arrive in order): the metadata env lines
%% it adds to that node's streamed trace.
send_envs(#ag{cli = Cli}, #{nodes := Per}) ->
    _ = [Cli ! {beamprobe_attach_env, atom_to_binary(N, utf8), Env}
         || {N, #{clock_env := Env}} <- lists:sort(maps:to_list(Per))],
    ok;
send_envs(_, _) -> ok.

%% Tells every other node's agent to undo what it was given; waits for
%% them (a node gone cleans up by itself: its agent saw this node go).
stop_remote(#ag{remote = Remote}) ->
    Refs = [{monitor(process, A), A} || {_, A} <- Remote],
    _ = [A ! {beamprobe_attach_stop} || {_, A} <- Remote],
    [receive
         {'DOWN', R, process, _, _} -> ok
     after 15000 -> demonitor(R, [flush])
     end || {R, _} <- Refs],
    length(Remote).

%% What another tool (dbg, recon_trace, redbug) holds and the session
%% left to it (beamprobe takes nothing from them).
skipped_text(#{skipped := #{calls := C, procs_count := P}})
  when C =/= []; P > 0 ->
    text("; left to another tool that traces them: ~b function~s~ts, ~b "
         "process~ts", [length(C), s(length(C)),
                        case C of
                            [] -> "";
                            _ -> io_lib:format(" (~tP)", [C, 8])
                        end, P, case P of 1 -> ""; _ -> "es" end]);
skipped_text(_) -> "".

%% Patterns or flags another tool took from the session while it ran.
tampered_text(#{tampered_count := N}) when N > 0 ->
    text("; ~b pattern~s or flag~s removed by another tool while it ran",
         [N, s(N), s(N)]);
tampered_text(_) -> "".

place_nif(Bin, St) ->
    case nif_dir(Bin) of
        {ok, Dir} -> write_nif(Dir, Bin, St);
        {error, Why} -> {{error, Why}, St}
    end.

write_nif(Dir, Bin, St) ->
    File = filename:join(Dir, "beamprobe_nif.so"),
    St1 = guarded(St#ag{dirs = [Dir | St#ag.dirs], files = [File | St#ag.files],
                        nif = Bin}, St),
    case file:write_file(File, Bin) of
        ok ->
            ok = file:change_mode(File, 8#600),
            {{ok, unicode:characters_to_binary(
                    filename:join(Dir, "beamprobe_nif"))}, St1};
        {error, R} ->
            {{error, text("cannot write ~ts: ~tp", [File, R])}, St1}
    end.

%% Is the node's temporary directory one where the library's directory
%% stays ours until it is loaded?  In a directory others may write in
%% without the sticky bit, another user can rename ours away and put one
%% of theirs, with a library of theirs, at its name (which the node would
%% then load): refused, the directory named.
tmp_base_safe() ->
    Base = tmp_base(),
    case file:read_file_info(Base) of
        {ok, #file_info{type = directory, mode = M}}
          when M band 8#022 =/= 0, M band 8#1000 =:= 0 ->
            {error, text("the node's temporary directory ~ts (TMPDIR) is "
                         "writable by others without the sticky bit: "
                         "another user could replace the library before "
                         "it is loaded; give the node a TMPDIR of its own",
                         [Base])};
        {ok, #file_info{type = directory}} -> ok;
        {ok, _} -> {error, text("the node's TMPDIR ~ts is not a directory",
                                [Base])};
        {error, R} -> {error, text("the node's TMPDIR ~ts: ~tp", [Base, R])}
    end.

%% A fresh directory of this node's user alone, for the NIF sent over
%% distribution.
private_dir() ->
    Name = "beamprobe-attach-" ++ integer_to_list(
                                      erlang:unique_integer([positive]))
        ++ "-" ++ integer_to_list(rand:uniform(1 bsl 40)),
    Dir = filename:join(tmp_base(), Name),
    case file:make_dir(Dir) of
        ok -> secure_dir(Dir);
        {error, R} -> {error, text("cannot create ~ts: ~tp", [Dir, R])}
    end.

tmp_base() ->
    case os:getenv("TMPDIR") of
        false -> "/tmp";
        "" -> "/tmp";
        T -> T
    end.

%% The library is loaded (beamprobe_nif's on_load): its file and
%% directory go now.  The library is never unmapped nor read again
%% (docs/design.md, "Reloads"; a later attach placing it at the same path
%% gets the loaded one from the dynamic linker by its name), and a file
%% kept until the end stayed in the node's /tmp for good when the node
%% died first (killed, out of memory) with nobody left to remove it.
%% (The clean-up removes them again: nothing then.)
nif_file_loaded(#ag{files = Files, dirs = Dirs}) ->
    case catch beamprobe_nif:is_loaded() of
        true ->
            _ = [file:delete(F) || F <- Files],
            _ = [file:del_dir(D) || D <- Dirs],
            ok;
        _ -> ok
    end.

%% The directory of the library Nif: named by this node's OS pid and the
%% library's MD5, so that every attach that brings the same library loads
%% it from the same path.  The dynamic linker then finds it already
%% loaded (a loaded library stays mapped: docs/design.md, "Reloads")
%% instead of mapping one more copy of it per attach.  When that name is
%% taken (another attach at this moment, or anything left there) the
%% library goes to a directory of its own, as before.
nif_dir(Nif) ->
    Name = "beamprobe-nif-" ++ os:getpid() ++ "-"
        ++ string:lowercase(binary_to_list(binary:encode_hex(
                                             erlang:md5(Nif)))),
    Dir = filename:join(tmp_base(), Name),
    case file:make_dir(Dir) of
        ok -> secure_dir(Dir);
        {error, _} -> private_dir()
    end.

%% Dir, just created by this process: made 0700 and checked.  Under a
%% lax umask the directory was open to others until the chmod: it must
%% still be a directory of ours, and empty (nothing planted in it, such
%% as a symlink where the NIF is written).  Anything else is refused and
%% the directory left as it is (what is in it is not ours to remove).
secure_dir(Dir) ->
    case {file:change_mode(Dir, 8#700), file:read_link_info(Dir),
          file:list_dir(Dir)} of
        {ok, {ok, #file_info{type = directory}}, {ok, []}} -> {ok, Dir};
        {_, _, {ok, [_ | _] = Planted}} ->
            {error, text("~ts: ~b entr~s appeared in the library's new "
                         "directory before it was closed to others (~ts); "
                         "nothing was written (give the node a umask of "
                         "077 or a TMPDIR of its own)",
                         [Dir, length(Planted),
                          case Planted of [_] -> "y"; _ -> "ies" end,
                          lists:join(", ", lists:sublist(Planted, 3))])};
        Other ->
            {error, text("~ts: not a directory of this node's own after "
                         "it was created (~tp); nothing was written",
                         [Dir, Other])}
    end.

%% @doc The session spec of an attach: patterns in the language of
%% beamprobe:calls/2 and beamprobe:messages/2, options from the command
%% line (`procs', `events', `seconds', `max_events', `return', `args',
%% `force',
%% `tcp' => {IP, Port, Remote, Token}: where to stream, and the token the
%% command line's receiver checks).
-spec session_spec([binary() | string()], map()) ->
          {ok, beamprobe:spec()} | {error, binary()}.
session_spec(Patterns, Opts) ->
    try
        Force = maps:get(force, Opts, false) =:= true,
        Parsed = [parse(P, Force) || P <- Patterns],
        Return = maps:get(return, Opts, false),
        Calls = [{MFA, with_return(MS, Return)}
                 || #{kind := call, mfa := MFA, match_spec := MS} <- Parsed],
        Msgs = [{K, MS} || #{kind := K, match_spec := MS} <- Parsed,
                           K =/= call],
        Events = lists:usort([K || {K, _} <- Msgs] ++
                                 [event(E) || E <- maps:get(events, Opts, [])]),
        Procs = procs(maps:get(procs, Opts, <<"all">>)),
        {IP, Port, Remote, Token} = maps:get(tcp, Opts),
        Limits = #{seconds => maps:get(seconds, Opts, 60),
                   events => maps:get(max_events, Opts, infinity)},
        {ok, #{calls => Calls, messages => Msgs, events => Events,
               procs => Procs,
               meta => Procs =:= all andalso Events =:= [],
               return => true, exceptions => true,
               args => binary_to_existing_atom(
                         maps:get(args, Opts, <<"full">>), utf8),
               limits => Limits,
               force => Force,
               tag => beamprobe_attach,
               output => {tcp, {IP, Port}, #{remote => Remote,
                                             token => Token}}}}
    catch throw:{bad, Text} -> {error, Text}
    end.

parse(P, Force) ->
    case beamprobe_pattern:parse(P, #{force => Force}) of
        {ok, Parsed} -> Parsed;
        {error, {Col, Msg}} ->
            throw({bad, cli_words(text("pattern ~ts, column ~p: ~ts",
                                       [P, Col, Msg]))})
    end.

%% Why a session did not start, in the command line's words: its option
%% --force where the text names the spec's force => true.
start_error(R) ->
    cli_words(unicode:characters_to_binary(beamprobe:format_error(R))).

cli_words(Text) ->
    iolist_to_binary(string:replace(Text, <<"force => true">>, <<"--force">>,
                                    all)).

with_return(MS, true) ->
    [{H, G, lists:usort([{exception_trace} | B])} || {H, G, B} <- MS];
with_return(MS, false) -> MS.

event(E) ->
    try binary_to_existing_atom(E, utf8)
    catch error:badarg -> throw({bad, text("unknown event kind ~ts", [E])})
    end.

procs(<<"all">>) -> all;
procs(<<"new">>) -> new;
procs(<<"existing">>) -> existing;
procs(Text) ->
    [proc(P) || P <- string:lexemes(unicode:characters_to_list(Text), ",")].

proc("<" ++ _ = P) ->
    try list_to_pid(P)
    catch error:badarg -> throw({bad, text("bad pid ~ts", [P])})
    end;
proc(Name) ->
    try list_to_existing_atom(Name)
    catch error:badarg ->
            throw({bad, text("no process is registered as ~ts", [Name])})
    end.

%% Undoes what attach brought; returns `{ok | failed, Text}': the text
%% the command line prints, and `failed' when the session was killed,
%% its summary lost (the command line then exits 2).  Send: the command
%% line is there to receive the cluster's traces.
cleanup(#ag{session = S} = St, Send) ->
    %% A profile run ends (its counters removed) before anything unloads.
    _ = St#ag.profiler =:= undefined orelse
        beamprobe_attach_profile:finish(St#ag.profiler,
                                        Send andalso St#ag.cli),
    Sum = case S of
              undefined -> undefined;
              _ -> case catch beamprobe:stop(S) of
                       {ok, Summary} -> Summary;
                       %% The session was killed (its summary with it).
                       Other -> {failed, Other}
                   end
          end,
    _ = Send andalso is_map(Sum) andalso (catch send_envs(St, Sum)),
    _ = stop_remote(St),
    _ = case St#ag.app_started of
            false -> application:stop(beamprobe);
            true -> ok
        end,
    _ = case St#ag.app_loaded of
            false -> application:unload(beamprobe);
            true -> ok
        end,
    Unload = [M || {M, _} <- code:all_loaded(), is_ours(M), M =/= ?MODULE,
                   not lists:member(M, St#ag.mods_before)],
    _ = [begin
             _ = code:purge(M),
             _ = code:delete(M),
             code:purge(M)
         end || M <- Unload],
    _ = [file:delete(F) || F <- St#ag.files],
    _ = [file:del_dir(D) || D <- St#ag.dirs],
    {case Sum of {failed, _} -> failed; _ -> ok end,
     summary_text(Sum, length(Unload), St)}.

summary_text({failed, Why}, Mods, St) ->
    M = Mods + unloaded_self(St),
    F = length(St#ag.files),
    text("the session ended abnormally, its summary lost (~tP); node left "
         "as it was (~b module~s unloaded, ~b file~s removed)",
         [Why, 6, M, s(M), F, s(F)]);
summary_text(undefined, Mods, St) ->
    M = Mods + unloaded_self(St),
    F = length(St#ag.files),
    text("no session ran; node left as it was (~b module~s unloaded, ~b "
         "file~s removed)", [M, s(M), F, s(F)]);
summary_text(#{events := E, dropped := #{total := D}, stop_reason := R,
               nodes := Per}, Mods, #ag{cluster = true} = St) ->
    M = Mods + unloaded_self(St),
    F = length(St#ag.files),
    text("cluster session ended (~tp): ~b events, ~b lost, on ~b nodes "
         "(~ts); every node left as it was (here ~b module~s unloaded, ~b "
         "file~s removed; ~b other node~s cleaned by their agents, beamprobe "
         "brought to and removed from ~b)",
         [R, E, D, map_size(Per), per_node(Per), M, s(M), F, s(F),
          length(St#ag.remote), s(length(St#ag.remote)), St#ag.brought]);
summary_text(#{events := E, dropped := #{total := D}, stop_reason := R} = Sum,
             Mods, St) ->
    Matched = maps:get(matched, Sum, 0),
    M = Mods + unloaded_self(St),
    F = length(St#ag.files),
    text("session ended (~tp): ~b events, ~b lost, ~b function~s matched~ts; "
         "node left as it was (~b module~s unloaded, ~b file~s removed)",
         [R, E, D, Matched, s(Matched), tampered_text(Sum), M, s(M), F,
          s(F)]).

%% "NODE: E events, D lost; ..." (every loss counted, per node).
per_node(Per) ->
    lists:join("; ",
               [case R of
                    #{summary := {ok, #{events := E, dropped := #{total := D}}}} ->
                        io_lib:format("~ts: ~b events, ~b lost", [N, E, D]);
                    #{summary := Other} ->
                        io_lib:format("~ts: ~tP", [N, Other, 6]);
                    _ -> io_lib:format("~ts: ?", [N])
                end || {N, R} <- lists:sort(maps:to_list(Per))]).

unloaded_self(#ag{mods_before = B}) ->
    case lists:member(?MODULE, B) of
        true -> 0;
        false -> 1
    end.

text(Fmt, Args) ->
    unicode:characters_to_binary(io_lib:format(Fmt, Args)).
