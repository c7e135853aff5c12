%%% @doc Tests of the one event schema (c_src/bp_format.h): every field is
%%% written as its kind says, whoever reads it (babeltrace2, a handler sink,
%%% `bin/beamprobe print').
%%%
%%% * pid_fields_are_local_keys (issue 7 item 1): a link to a pid on another
%%%   node is written `other = 0' (never the word of a remote pid, which the
%%%   handler sink used to turn back into a term and crash the VM), the
%%%   handler gets `other => undefined'; local parties are keys/pids.
%%% * names_one_form (item 13): a registered name is written in Erlang
%%%   syntax through one renderer, in `process' and `register' events alike
%%%   ('a\nb' escaped, 'My Name' quoted), so print shows one line per event.
%%% * return_to_undefined (item 16): a return_to with no known target is
%%%   `undefined', as format.md says, not `?'.
%%% * metadata_40_patterns (item 16): the env block keeps every pattern of
%%%   a 40-pattern session; what does not fit is cut with a marker.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_schema_SUITE -logdir _build/ct_logs
-module(beamprobe_schema_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include("../include/beamprobe_events.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([pid_fields_are_local_keys/1, peer_node_link/1, names_one_form/1,
         return_to_undefined/1, metadata_40_patterns/1,
         metadata_cut_is_marked/1, header_matches_schema/1]).
%% Traced functions.
-export([leaf/0, linker/2]).
%% 40 functions for metadata_40_patterns.
-export([f01/0, f02/0, f03/0, f04/0, f05/0, f06/0, f07/0, f08/0, f09/0,
         f10/0, f11/0, f12/0, f13/0, f14/0, f15/0, f16/0, f17/0, f18/0,
         f19/0, f20/0, f21/0, f22/0, f23/0, f24/0, f25/0, f26/0, f27/0,
         f28/0, f29/0, f30/0, f31/0, f32/0, f33/0, f34/0, f35/0, f36/0,
         f37/0, f38/0, f39/0, f40/0]).

-define(L, beamprobe_test_lib).
-define(H, beamprobe_test_handler).

-import(beamprobe_test_lib, [dir/2, start/1, stop/1, trace/1, one/3,
                             assert_field/3, remote_pid/0]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [pid_fields_are_local_keys, peer_node_link, names_one_form,
     return_to_undefined,
     metadata_40_patterns, metadata_cut_is_marked, header_matches_schema].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    ?L:clear_trace_state().

%%% ------------------------------------------------------------------------
%%% Item 1: PID fields
%%% ------------------------------------------------------------------------

%% A traced process links to and unlinks from a remote pid and a local
%% one, and sends to the remote pid, under a file sink and a handler sink.
pid_fields_are_local_keys(Config) ->
    Dir = dir(Config, "link"),
    Remote = remote_pid(),
    Local = spawn(fun() -> receive stop -> ok end end),
    P = spawn(?MODULE, linker, [Remote, Local]),
    %% Local is traced too, so that a process event gives its key.
    S = start(#{procs => [P, Local], events => [procs, send],
                output => [{file, Dir},
                           {handler, ?H, #{parent => self()},
                            #{events => [procs, send]}}]}),
    H = receive {handler_init, H0} -> H0 after 5000 -> ct:fail(no_handler) end,
    P ! {go, self()},
    receive {linked, P} -> ok after 5000 -> ct:fail(no_link) end,
    _ = stop(S),
    Local ! stop,
    Evs = trace(Dir),
    RemoteText = list_to_binary(pid_to_list(Remote)),
    LocalKey = ?L:pid_key(Evs, Local),
    [begin
         Es = ?L:events(Evs, Name, P),
         ?assertMatch({Name, [_, _]}, {Name, Es}),
         ?assertEqual(lists:sort([{0, RemoteText},
                                  {LocalKey, list_to_binary(
                                               pid_to_list(Local))}]),
                      lists:sort([{?L:field(E, "other"),
                                   ?L:field(E, "other_text")} || E <- Es]))
     end || Name <- ["link", "unlink"]],
    Send = [E || E <- ?L:events(Evs, "send", P),
                 ?L:field(E, "to_text") =:= RemoteText],
    ?assertMatch([_], Send),
    ?assertEqual(0, ?L:field(hd(Send), "to")),
    %% The handler: pid terms for local parties, undefined for the remote.
    {_, _} = beamprobe_shell_lib:handler_done(H),
    HEvs = beamprobe_shell_lib:handler_events(H),
    Links = [{O, T} || #{event := link, pid := Pid, other := O,
                         other_text := T} <- HEvs, Pid =:= P],
    ?assertEqual(lists:sort([{undefined, RemoteText},
                             {Local, list_to_binary(pid_to_list(Local))}]),
                 lists:sort(Links)),
    ?assertMatch([#{to := undefined}],
                 [E || #{event := send, to_text := T} = E <- HEvs,
                       T =:= RemoteText]),
    %% Every other pid-valued field is a pid, a port or undefined.
    PidFields = [V || E <- HEvs, K <- [to, other],
                      {ok, V} <- [maps:find(K, E)]],
    ?assertEqual([], [V || V <- PidFields, not is_pid(V), not is_port(V),
                           V =/= undefined]),
    ?assert(erlang:is_process_alive(self())).

%% The same with a real process on another node (a `peer' node), linked
%% both ways: the VM must not crash, the handler gets `other => undefined'
%% and the file `other = 0' for the remote party.
peer_node_link(Config) ->
    case is_alive() of
        false -> {skip, "this node is not distributed: no peer node"};
        true -> peer_node_link_(Config)
    end.

peer_node_link_(Config) ->
    Dir = dir(Config, "peer"),
    {ok, Peer, Node} = peer:start_link(#{name => peer:random_name()}),
    try
        Remote = erpc:call(Node, erlang, spawn,
                           [timer, sleep, [infinity]]),
        P = spawn(?MODULE, linker, [Remote, self()]),
        S = start(#{procs => [P], events => [procs, send],
                    output => [{file, Dir},
                               {handler, ?H, #{parent => self()},
                                #{events => [procs]}}]}),
        H = receive {handler_init, H0} -> H0
            after 5000 -> ct:fail(no_handler)
            end,
        P ! {go, self()},
        receive {linked, P} -> ok after 5000 -> ct:fail(no_link) end,
        _ = stop(S),
        RemoteText = list_to_binary(pid_to_list(Remote)),
        Evs = trace(Dir),
        [?assertEqual({Name, 0},
                      {Name, ?L:field(E, "other")})
         || Name <- ["link", "unlink"], E <- ?L:events(Evs, Name, P),
            ?L:field(E, "other_text") =:= RemoteText],
        ?assertEqual(2, length([E || Name <- ["link", "unlink"],
                                     E <- ?L:events(Evs, Name, P),
                                     ?L:field(E, "other_text") =:=
                                         RemoteText])),
        {_, _} = beamprobe_shell_lib:handler_done(H),
        HEvs = beamprobe_shell_lib:handler_events(H),
        ?assertEqual([undefined, undefined],
                     [O || #{event := Ev, other := O, other_text := T}
                               <- HEvs,
                           Ev =:= link orelse Ev =:= unlink,
                           T =:= RemoteText])
    after
        peer:stop(Peer)
    end.

linker(Remote, Local) ->
    process_flag(trap_exit, true),
    receive {go, From} -> ok end,
    true = link(Remote),
    true = link(Local),
    Remote ! hello,
    true = unlink(Remote),
    true = unlink(Local),
    From ! {linked, self()},
    receive stop -> ok after 2000 -> ok end.

%%% ------------------------------------------------------------------------
%%% Item 13: one form for names
%%% ------------------------------------------------------------------------

names_one_form(Config) ->
    Dir = dir(Config, "names"),
    Names = ['a\nb', 'My Name'],
    Ps = [spawn(fun() -> receive {reg, N} -> register(N, self()) end,
                         receive stop -> ok end end) || _ <- Names],
    S = start(#{procs => Ps, events => [procs], output => {file, Dir}}),
    [begin P ! {reg, N}, ok = wait_registered(N, P) end
     || {P, N} <- lists:zip(Ps, Names)],
    _ = stop(S),
    [P ! stop || P <- Ps],
    Evs = trace(Dir),
    Want = [<<"'a\\nb'">>, <<"'My Name'">>],
    [begin
         Reg = ?L:field(one(Evs, "register", P), "name"),
         ?assertEqual(W, Reg),
         ProcNames = [?L:field(E, "name")
                      || E <- ?L:events(Evs, "process", P),
                         ?L:field(E, "name") =/= <<"undefined">>],
         ?assertMatch([_ | _], ProcNames),
         ?assertEqual([W], lists:usort(ProcNames))
     end || {P, W} <- lists:zip(Ps, Want)],
    %% bin/beamprobe print: one line per event, names as written.
    Out = print(Dir),
    Lines = [L || L <- binary:split(Out, <<"\n">>, [global, trim_all]),
                  binary:match(L, <<" lost events: ">>) =:= nomatch],
    ?assertEqual(length([E || #{name := N} = E <- Evs,
                              N =/= <<"process">>, N =/= <<"drops">>]),
                 length(Lines)),
    [?assertMatch({_, _}, binary:match(Out, W)) || W <- Want].

wait_registered(N, P) ->
    ?L:wait_until(fun() -> whereis(N) =:= P end, 5000),
    ok.

print(Dir) ->
    Exe = filename:join([filename:dirname(code:which(beamprobe)), "..",
                         "bin", "beamprobe"]),
    Port = open_port({spawn_executable, Exe},
                     [{args, ["print", Dir]}, exit_status, binary, stream]),
    collect(Port, []).

collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> collect(Port, [D | Acc]);
        {Port, {exit_status, 0}} -> iolist_to_binary(lists:reverse(Acc));
        {Port, {exit_status, S}} -> ct:fail({print_exit, S})
    after 30000 -> ct:fail(print_timeout)
    end.

%%% ------------------------------------------------------------------------
%%% Item 16: return_to undefined, metadata not cut silently
%%% ------------------------------------------------------------------------

%% A process started in leaf/0 returns to no function: the VM reports
%% return_to `undefined', written `undefined'.
return_to_undefined(Config) ->
    Dir = dir(Config, "return_to"),
    S = start(#{procs => new, calls => [{?MODULE, leaf, 0}],
                return_to => true, output => {file, Dir}}),
    P = spawn(?MODULE, leaf, []),
    ?L:wait_dead(P),
    _ = stop(S),
    Evs = trace(Dir),
    ?assertEqual([<<"undefined">>],
                 [?L:field(E, "mfa") || E <- ?L:events(Evs, "return_to", P)]).

leaf() -> ok.

%% 40 call patterns: `calls' in the metadata names every one of them.
metadata_40_patterns(Config) ->
    Dir = dir(Config, "forty"),
    Fs = [list_to_atom(lists:flatten(io_lib:format("f~2..0b", [I])))
          || I <- lists:seq(1, 40)],
    S = start(#{procs => [self()], calls => [{?MODULE, F, 0} || F <- Fs],
                output => {file, Dir}}),
    [?MODULE:F() || F <- Fs],
    _ = stop(S),
    Env = env(Dir),
    Calls = maps:get(<<"calls">>, Env),
    [?assertMatch({F, {_, _}},
                  {F, binary:match(Calls, iolist_to_binary(
                                            io_lib:format("~p:~p/0",
                                                          [?MODULE, F])))})
     || F <- Fs],
    ?assertEqual(error, maps:find(<<"truncated">>, Env)),
    %% babeltrace2 reads it.
    ?assertEqual(40, length(?L:events(trace(Dir), "call", self()))).

%% A value beyond the limit is cut with "..." and named in `truncated'.
metadata_cut_is_marked(Config) ->
    Dir = dir(Config, "cut"),
    ok = file:make_dir(Dir),
    Long = binary:copy(<<"x">>, 20000),
    Entries = [{<<"calls">>, Long} |
               [{iolist_to_binary(io_lib:format("k~b", [I])), <<"v">>}
                || I <- lists:seq(1, 200)]],
    {ok, Res} = beamprobe_nif_wait:start(nif_config(Dir, Entries)),
    {ok, _} = beamprobe_nif_wait:stop(Res),
    Env = env(Dir),
    Calls = maps:get(<<"calls">>, Env),
    ?assert(byte_size(Calls) < byte_size(Long)),
    ?assertMatch(<<_:1/binary, _/binary>>, Calls),
    ?assertEqual(<<"...">>, binary:part(Calls, byte_size(Calls), -3)),
    Trunc = maps:get(<<"truncated">>, Env),
    ?assertMatch({_, _}, binary:match(Trunc, <<"calls">>)),
    ?assertMatch({_, _}, binary:match(Trunc, <<"keys">>)),
    _ = trace(Dir).

%% The generated header agrees with the NIF's own tables.
header_matches_schema(_Config) ->
    ?assertEqual(0, ?BP_EV_PROCESS),
    ?assertEqual(11, ?BP_EV_LINK),
    ?assertEqual(link, element(1, lists:keyfind(?BP_EV_LINK, 2,
                                                ?BP_EVENTS))),
    {link, ?BP_EV_LINK, procs, Fields} =
        lists:keyfind(link, 1, ?BP_EVENTS),
    ?assertEqual([{other, pid}, {other_text, term}], Fields),
    ?assertEqual(lists:seq(0, length(?BP_EVENTS) - 1),
                 [Id || {_, Id, _, _} <- ?BP_EVENTS]),
    [?assertEqual(pid, K) || {_, _, _, Fs} <- ?BP_EVENTS,
                             {Name, K} <- Fs, Name =:= to orelse
                                                  Name =:= other].

%%% ------------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------------

%% The metadata's env block as a map of binaries.
env(Dir) ->
    {ok, Text} = file:read_file(filename:join(Dir, "metadata")),
    [_, Rest] = binary:split(Text, <<"env {">>),
    [Block | _] = binary:split(Rest, <<"};">>),
    {match, Ms} = re:run(Block, "\\s*([a-z_0-9]+) = (\"((?:[^\"\\\\]|\\\\.)*)\"|[0-9]+);",
                         [global, {capture, all_but_first, binary}]),
    maps:from_list([{K, case V of
                            [_, Q] -> Q;
                            [N] -> N
                        end} || [K | V0] <- Ms,
                                V <- [case V0 of
                                          [_Raw, Q0] -> [x, Q0];
                                          [Raw] -> [Raw]
                                      end]]).

%% The smallest session config the NIF takes, with a file sink in Dir.
nif_config(Dir, Env) ->
    #{file => true, dir => unicode:characters_to_binary(Dir),
      buffer => 1 bsl 20, max_slots => 4, env => Env}.

f01() -> ok. f02() -> ok. f03() -> ok. f04() -> ok. f05() -> ok.
f06() -> ok. f07() -> ok. f08() -> ok. f09() -> ok. f10() -> ok.
f11() -> ok. f12() -> ok. f13() -> ok. f14() -> ok. f15() -> ok.
f16() -> ok. f17() -> ok. f18() -> ok. f19() -> ok. f20() -> ok.
f21() -> ok. f22() -> ok. f23() -> ok. f24() -> ok. f25() -> ok.
f26() -> ok. f27() -> ok. f28() -> ok. f29() -> ok. f30() -> ok.
f31() -> ok. f32() -> ok. f33() -> ok. f34() -> ok. f35() -> ok.
f36() -> ok. f37() -> ok. f38() -> ok. f39() -> ok. f40() -> ok.
