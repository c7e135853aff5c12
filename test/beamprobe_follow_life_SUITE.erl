%%% @doc A follow session (beamprobe_follow) next to the rest of the node:
%%% other sessions' starts, a reload of the NIF module, its own process
%%% killed, another tool's pattern on its root.  Each time it keeps
%%% recording what it promises, and nothing of it stays installed.
-module(beamprobe_follow_life_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2,
         end_per_testcase/2]).
-export([sessions_refused_while_following/1, nif_reloaded/1,
         session_killed/1, root_pattern_replaced/1,
         label_outlives_session/1]).
-export([labelled_then_idle/1, label_outlives_session_peer/1]).

-define(L, beamprobe_test_lib).
-define(W, follow_request).

all() ->
    [sessions_refused_while_following, nif_reloaded, session_killed,
     root_pattern_replaced, label_outlives_session].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) ->
    Config1 = ?L:init_case(Case, Config),
    [{send_before, erlang:trace_info(send, match_spec)} | Config1].

end_per_testcase(_Case, _Config) ->
    catch dbg:stop(),
    ?L:clear_trace_state().

servers() -> ?W:servers().

follow(Dir, Budget) ->
    beamprobe:start(#{follow => #{from => "follow_request:root/2",
                                  budget => Budget},
                      output => {file, Dir}}).

%% Nothing of the follow session left (as beamprobe_follow_SUITE checks).
assert_clean(Config) ->
    ?assertEqual([], [P || P <- processes(),
                           {flags, [_ | _]} <- [erlang:trace_info(P, flags)]]),
    ?assertEqual(proplists:get_value(send_before, Config),
                 erlang:trace_info(send, match_spec)),
    ?assertEqual({all, false}, erlang:trace_info({?W, root, 2}, all)),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    ?assertEqual(false, seq_trace:get_system_tracer()),
    ?assertEqual([], beamprobe:list()).

%% While a follow session runs, another session's start is refused, as
%% the follow session refuses to start next to one: it needs the node's
%% flags to itself.  Before, a session started anyway and took the default
%% flags of new processes for the hub: the follow session then recorded no
%% request whose root was a process spawned after that (its summary said
%% 1 request started of 3, nothing dropped), and after that session
%% stopped, none at all.
sessions_refused_while_following(Config) ->
    {Mid, _Srv} = servers(),
    {ok, H} = follow(?L:dir(Config, "f"), #{}),
    Self = self(),
    Request = fun() ->
                      C = spawn(fun() -> Self ! {done, self(), ?W:root(Mid, 7)} end),
                      receive {done, C, R} -> R after 10000 -> ct:fail(no_reply) end
              end,
    107 = Request(),
    Refused = {error, {follow_running, H}},
    ?assertEqual(Refused, beamprobe:start(#{calls => [{lists, seq, 2}],
                                            output => {file, ?L:dir(Config, "s")}})),
    ?assertEqual(Refused, beamprobe:start(#{calls => [{lists, seq, 2}], meta => true,
                                            output => {file, ?L:dir(Config, "m")}})),
    ?assertEqual(Refused, beamprobe:calls("lists:seq/2", 5)),
    ?assertEqual({flags, [call]}, erlang:trace_info(new, flags)),
    ?assertNotEqual({tracer, {beamprobe_nif, beamprobe_hub}},
                    erlang:trace_info(new, tracer)),
    ?assertEqual([], beamprobe:list()),
    107 = Request(),
    107 = Request(),
    {ok, Sum} = beamprobe:stop(H),
    ?assertMatch(#{requests := #{started := 3}}, Sum),
    ?assertEqual(0, ?L:total(Sum)),
    assert_clean(Config).

%% Reloading the NIF module (delete, purge, load: safe while sessions
%% run) makes the VM drop it as the tracer of every process, of new
%% processes and of seq_trace.  The follow session sets them again and
%% counts the reload, as a session does; before, it recorded nothing
%% after a reload, with no loss and no reload in its summary (1 request
%% started of 3).
nif_reloaded(Config) ->
    {Mid, _Srv} = servers(),
    {ok, H} = follow(?L:dir(Config, "f"), #{}),
    Self = self(),
    Request = fun() ->
                      C = spawn(fun() -> Self ! {done, self(), ?W:root(Mid, 7)} end),
                      receive {done, C, R} -> R after 10000 -> ct:fail(no_reply) end
              end,
    107 = Request(),
    _ = code:delete(beamprobe_nif),
    _ = code:purge(beamprobe_nif),
    {module, beamprobe_nif} = code:load_file(beamprobe_nif),
    %% It traces again asynchronously (told by the module's on_load).
    ?L:wait_until(fun() -> {flags, [call]} =:= erlang:trace_info(new, flags) end, 5000),
    ?assertMatch({beamprobe_nif, _}, seq_trace:get_system_tracer()),
    107 = Request(),
    107 = Request(),
    {ok, Sum} = beamprobe:stop(H),
    ?assertMatch(#{requests := #{started := 3}, nif_reloads := 1}, Sum),
    ?assertEqual(0, ?L:total(Sum)),
    assert_clean(Config).

%% A follow session process that is killed (its terminate/2 does not
%% run) leaves nothing installed, as a killed session: before, the root's
%% pattern stayed, labelling every caller's seq_trace token (with a
%% return frame per call) and refusing every later follow session
%% ({follow_conflict, {pattern, Root}}).
session_killed(Config) ->
    {Mid, _Srv} = servers(),
    Dir = ?L:dir(Config, "f"),
    {ok, H} = follow(Dir, #{}),
    107 = ?W:root(Mid, 7),
    exit(H, kill),
    ?L:wait_until(fun() ->
                          {all, false} =:= erlang:trace_info({?W, root, 2}, all)
                  end, 5000),
    ?L:wait_until(fun() -> [] =:= [P || P <- processes(),
                                        {flags, [_ | _]} <- [erlang:trace_info(P, flags)]]
                  end, 5000),
    assert_clean(Config),
    %% The killed session's trace is whole, and a new one starts.
    _ = ?L:cli_ok(["print", Dir]),
    {ok, H2} = follow(?L:dir(Config, "f2"), #{}),
    107 = ?W:root(Mid, 7),
    ?assertMatch({ok, #{requests := #{started := 1}}}, beamprobe:stop(H2)),
    assert_clean(Config).

%% A pattern another tool set on the root while the session ran is that
%% tool's: the stop leaves it, and the trace says the root's calls were no
%% longer followed (a `tampered' event).  Before, the stop removed it
%% (dbg traced nothing more) and the trace said nothing.
root_pattern_replaced(Config) ->
    Dir = ?L:dir(Config, "f"),
    {ok, H} = follow(Dir, #{}),
    DbgMS = [{'_', [], [{return_trace}]}],
    _ = beamprobe_coexist_lib:dbg_collector(),
    {ok, _} = dbg:tpl(?W, root, 2, DbgMS),
    {ok, _} = beamprobe:stop(H),
    ?assertEqual({match_spec, DbgMS}, erlang:trace_info({?W, root, 2}, match_spec)),
    ?assertEqual([], [P || P <- processes(),
                           {tracer, {beamprobe_nif, _}} <- [erlang:trace_info(P, tracer)]]),
    ?assertEqual(false, seq_trace:get_system_tracer()),
    Print = ?L:cli_ok(["print", Dir]),
    ?assertMatch({_, _}, binary:match(Print, <<"tampered pattern follow_request:root/2 replaced">>)),
    dbg:stop(),
    erlang:trace_pattern({?W, root, 2}, false, [local]),
    assert_clean(Config).

%% A process the root's match spec labelled keeps its seq_trace token
%% after the session stopped (until it takes an unlabelled message), and
%% sends it with its next message.  The label was the tuple
%% {beamprobe_follow, Node, Session}: OTP 25's `{set_seq_token, label,
%% {const, L}}' leaves a pointer to the match spec's copy of L in the
%% token, and removing the root's pattern at stop freed it.  Here 20
%% processes are labelled (a root call that sends nothing), the session
%% stops, other match specs take the freed memory, then each sends its
%% token: the labels came back as `{}' or garbage, or the VM crashed
%% ("eheap_alloc: Cannot allocate 17552637133976 bytes"; the lifecycle
%% suite's follow cycles brought a node down in 1 run of 12).  Now the
%% label is a small integer and comes back intact.  On a peer: a crash
%% must not take this node down.
label_outlives_session(Config) ->
    Paths = lists:append([["-pa", filename:dirname(code:which(M))]
                          || M <- [beamprobe, ?W, ?MODULE]]),
    {ok, Peer, Node} = peer:start_link(#{name => peer:random_name(),
                                         args => Paths}),
    try
        Dir = ?L:dir(Config, "f"),
        Labels = erpc:call(Node, ?MODULE, label_outlives_session_peer,
                           [Dir], 60000),
        ct:log("labels sent after the stop: ~p", [Labels]),
        [Want] = lists:usort([W || {W, _} <- Labels]),
        ?assert(is_integer(Want)),
        ?assertEqual([{Want, {label, Want}}], lists:usort(Labels))
    after
        catch peer:stop(Peer)
    end.

%% @private On the peer: the processes labelled, the session stopped, the
%% memory reused; returns {label at the root call, label sent after}.
-spec label_outlives_session_peer(file:filename()) -> [{term(), term()}].
label_outlives_session_peer(Dir) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    {ok, H} = beamprobe:start(#{follow => #{from => "follow_request:plain/2"},
                                output => {file, Dir}}),
    Self = self(),
    Ps = [spawn(?MODULE, labelled_then_idle, [Self]) || _ <- lists:seq(1, 20)],
    Before = [receive {labelled, P, L} -> {P, L} end || P <- Ps],
    %% (Their messages gave this process the token: not passed on.)
    _ = seq_trace:set_token([]),
    {ok, _} = beamprobe:stop(H),
    %% Match specs compiled and dropped: their memory is the freed one's.
    _ = [ets:match_spec_compile([{'_', [], [{const, {x, I, lists:seq(1, 5)}}]}])
         || I <- lists:seq(1, 20000)],
    _ = [erlang:trace_pattern({?W, plain, 2},
                              [{'_', [], [{message, {const, {y, I, I}}}]}],
                              [local]) || I <- lists:seq(1, 2000)],
    erlang:trace_pattern({?W, plain, 2}, false, [local]),
    persistent_term:put({?MODULE, go}, true),
    [{L, receive {sent, P, S} -> S after 10000 -> no_reply end}
     || {P, {label, L}} <- Before].

%% @private A root call that sends nothing (the caller is labelled), then
%% waiting without taking a message, then one message with the token.
-spec labelled_then_idle(pid()) -> ok.
labelled_then_idle(Parent) ->
    ok = ?W:plain([], 1),
    Parent ! {labelled, self(), seq_trace:get_token(label)},
    wait_for_go(Parent).

%% Polls without taking a message: one taken without a token would clear
%% the label.
wait_for_go(Parent) ->
    case persistent_term:get({?MODULE, go}, false) of
        false -> receive after 10 -> wait_for_go(Parent) end;
        true -> Parent ! {sent, self(), seq_trace:get_token(label)}, ok
    end.
