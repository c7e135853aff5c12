%%% @doc Differential fuzz of overlapping sessions (issue 8): K random
%%% sessions run together over a deterministic workload
%%% (beamprobe_ofuzz_work), started and stopped at random phase
%%% boundaries, sometimes next to dbg tracing some of the workload's
%%% processes and functions; the oracle for each session is the same spec
%%% run ALONE on the same workload, with the same start and stop points
%%% (and the same dbg setup): per process (by role, pids differ between
%%% runs), the event sequences must be equal.  dbg's own output must be
%%% the same as with dbg alone, beamprobe must report what it skipped,
%%% and nothing may stay installed after a run.
%%%
%%% Environment: BP_OFUZZ_SEED (an integer: rerun that seed),
%%% BP_OFUZZ_ROUNDS (rounds; default 30, the CI size: about 15 s).
-module(beamprobe_overlap_fuzz_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2,
         end_per_testcase/2]).
-export([fuzz/1, all_next_to_existing/1, new_after_all_stops/1,
         full_args_on_relied_calls/1, meta_does_not_claim_local/1,
         message_pattern_disjoint_procs/1, concurrent_starts_not_skipped/1]).

-define(L, beamprobe_test_lib).
-define(W, beamprobe_ofuzz_work).
-define(FNS, [{tick, 1}, {add, 2}, {fact, 1}, {thrower, 1}, {raiser, 1},
              {child, 3}]).

all() ->
    [all_next_to_existing, new_after_all_stops, full_args_on_relied_calls,
     meta_does_not_claim_local, message_pattern_disjoint_procs,
     concurrent_starts_not_skipped, fuzz].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, ?W} = code:ensure_loaded(?W),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    catch dbg:stop(),
    ?L:clear_trace_state().

%%% ------------------------------------------------------------------------
%%% The fuzz
%%% ------------------------------------------------------------------------

fuzz(Config) ->
    Seed = case os:getenv("BP_OFUZZ_SEED") of
               false -> erlang:unique_integer([positive]) bxor
                            erlang:system_time();
               S -> list_to_integer(S)
           end,
    Rounds = case os:getenv("BP_OFUZZ_ROUNDS") of
                 false -> 30;
                 R -> list_to_integer(R)
             end,
    ct:pal("beamprobe_overlap_fuzz: seed ~p, ~p rounds "
           "(rerun: BP_OFUZZ_SEED=~p)", [Seed, Rounds, Seed]),
    rand:seed(exsss, Seed),
    Fails = lists:append([round(Config, N) || N <- lists:seq(1, Rounds)]),
    ct:pal("~p rounds, ~p events compared", [Rounds, get(bp_ofuzz_events)]),
    case Fails of
        [] -> ok;
        _ -> ct:pal("seed ~p: ~p mismatches:~n~p", [Seed, length(Fails), Fails]),
             ct:fail({mismatches, Seed, length(Fails), Fails})
    end.

%% One round: specs, a together run, each spec alone, dbg alone.
round(Config, N) ->
    NW = 2 + rand:uniform(3),
    NP = 1 + rand:uniform(3),
    %% Sometimes more than eight sessions (match specs combined per call).
    K = case rand:uniform(5) of
            1 -> 8 + rand:uniform(4);
            _ -> 1 + rand:uniform(5)
        end,
    AtOnce = rand:uniform(3) =:= 1,
    Dbg = case rand:uniform(3) of
              1 -> dbg_spec(NW);
              _ -> none
          end,
    Specs = [spec(I, NW, NP, AtOnce, Dbg) || I <- lists:seq(1, K)],
    ct:log("round ~p: ~p workers, ~p phases, dbg ~p~nspecs ~p",
           [N, NW, NP, Dbg, Specs]),
    Tag = fun(T) -> "r" ++ integer_to_list(N) ++ T end,
    Together = run(Config, Tag("t"), Specs, Dbg, NW, NP),
    Alone = [{I, run(Config, Tag("a" ++ integer_to_list(I)), [Sp], Dbg, NW, NP)}
             || #{i := I} = Sp <- Specs],
    SessFails =
        lists:append(
          [compare(N, I, maps:get(I, maps:get(sessions, Together)),
                   maps:get(I, maps:get(sessions, A)))
           || {I, A} <- Alone]),
    DbgFails = case Dbg of
                   none -> [];
                   _ ->
                       DbgAlone = run(Config, Tag("d"), [], Dbg, NW, NP),
                       dbg_compare(N, Dbg, maps:get(dbg, DbgAlone),
                                   [{together, maps:get(dbg, Together)}
                                    | [{{alone, I}, maps:get(dbg, A)}
                                       || {I, A} <- Alone]])
               end,
    LimitFails = lists:append(
                   [limit_check(N, I, maps:get(I, maps:get(sessions, A)),
                                maps:get(I, maps:get(sessions,
                                                     run(Config, Tag("u" ++ integer_to_list(I)),
                                                         [maps:remove(limits, Sp)],
                                                         Dbg, NW, NP))), Lim)
                    || #{i := I, limits := #{events := Lim}} = Sp <- Specs,
                       {J, A} <- Alone, J =:= I]),
    ForeignFails = lists:append(
                     [foreign(N, Sp, maps:get(I, maps:get(sessions, R)))
                      || #{i := I} = Sp <- Specs,
                         R <- [Together | [A || {J, A} <- Alone, J =:= I]]]),
    SkipFails = lists:append([skip_check(N, Dbg, Sp, maps:get(I, maps:get(sessions, R)))
                              || #{i := I} = Sp <- Specs,
                                 R <- [Together | [A || {J, A} <- Alone, J =:= I]]]),
    SessFails ++ DbgFails ++ SkipFails ++ LimitFails ++ ForeignFails.

%%% ------------------------------------------------------------------------
%%% Regressions: cases the fuzz found, minimised
%%% ------------------------------------------------------------------------

%% Specs run together and each alone (as a fuzz round, fixed): no
%% mismatch.
together_alone(Config, Specs, NW, NP) ->
    together_alone(Config, Specs, NW, NP, none).

together_alone(Config, Specs, NW, NP, Dbg) ->
    Together = run(Config, "t", Specs, Dbg, NW, NP),
    Alone = [{I, run(Config, "a" ++ integer_to_list(I), [Sp], Dbg, NW, NP)}
             || #{i := I} = Sp <- Specs],
    Fails = lists:append(
              [compare(0, I, maps:get(I, maps:get(sessions, Together)),
                       maps:get(I, maps:get(sessions, A)))
               || {I, A} <- Alone]),
    DbgFails = case Dbg of
                   none -> [];
                   _ ->
                       DbgAlone = run(Config, "d", [], Dbg, NW, NP),
                       dbg_compare(0, Dbg, maps:get(dbg, DbgAlone),
                                   [{together, maps:get(dbg, Together)}])
               end,
    SkipFails = lists:append([skip_check(0, Dbg, Sp, maps:get(I, maps:get(sessions, R)))
                              || #{i := I} = Sp <- Specs,
                                 R <- [Together | [A || {J, A} <- Alone, J =:= I]]]),
    ?assertEqual([], Fails ++ DbgFails ++ SkipFails).

%% A `procs => all' session records the processes spawned while it runs
%% when an `existing' session with full arguments starts next to it
%% (seed 1, round 6: the janitor's erlang:trace(new_processes, false,
%% [arity]) without the tracer cleared the VM's defaults for new
%% processes).
all_next_to_existing(Config) ->
    together_alone(Config,
                   [#{i => 1, start => 0, stop => 2, procs => all,
                      calls => [], events => [procs]},
                    #{i => 2, start => 0, stop => 2, procs => existing,
                      calls => [{beamprobe_ofuzz_work, child, 3}],
                      events => []}], 1, 1
).

%% A `procs => new' session still records the processes spawned after an
%% `all' session with other flags stopped (the janitor removed the
%% leaving session's flags from the defaults for new processes without
%% naming the tracer: the VM cleared them all).
new_after_all_stops(Config) ->
    together_alone(Config,
                   [#{i => 1, start => 0, stop => 1, procs => all,
                      calls => [{beamprobe_ofuzz_work, tick, 1}], events => []},
                    #{i => 2, start => 0, stop => 3, procs => new,
                      calls => [], events => [procs]}], 1, 2).

%% A session with full arguments whose only function has dbg's pattern
%% (skipped: its calls still reach the session through that pattern)
%% gets their arguments next to an `args => arity' session on the same
%% process (the janitor set the `arity' flag, as no other session had
%% calls left after the skip).
full_args_on_relied_calls(Config) ->
    together_alone(Config,
                   [#{i => 1, start => 0, stop => 2, procs => {idx, [1]},
                      calls => [{beamprobe_ofuzz_work, tick, 1}],
                      events => [], args => arity},
                    #{i => 2, start => 0, stop => 2, procs => {idx, [1]},
                      calls => [{beamprobe_ofuzz_work, raiser, 1}],
                      events => [], args => full}], 2, 1,
                   #{procs => [2], flags => [c], tpl => [{raiser, 1}]}).

%% A meta session on a function does not make dbg's (local) pattern on
%% it beamprobe's: a process session started next to it skips the
%% function and reports it, and dbg's pattern (and output) stays (seed
%% 777, round 21: it took dbg's pattern).
meta_does_not_claim_local(Config) ->
    together_alone(Config,
                   [#{i => 1, start => 0, stop => 2, procs => all, meta => true,
                      calls => [{beamprobe_ofuzz_work, raiser, 1}],
                      events => []},
                    #{i => 2, start => 0, stop => 2, procs => {idx, [1]},
                      calls => [{{beamprobe_ofuzz_work, raiser, 1},
                                 [{'_', [], [{exception_trace}]}]}],
                      events => [send]}], 2, 1,
                   #{procs => [2], flags => [c], tpl => [{raiser, 1}]}).

%% A message pattern is the node's: a session recording sends of other
%% processes than a session with a send pattern of its own is refused as
%% for overlapping processes (seed 1795910664938347478, round 93: it
%% started and lost the sends the other's pattern left out).
message_pattern_disjoint_procs(Config) ->
    {[W1, W2], _} = ?W:start(2),
    MS = [{['_', {progress, '_', '$1'}], [{'>', '$1', 1}], []}],
    S1 = ?L:start(#{procs => [W1], events => [send], messages => [{send, MS}],
                    output => {file, ?L:dir(Config, "a")}}),
    ?assertEqual({error, {conflict, S1, {message_pattern, send}}},
                 beamprobe:start(#{procs => [W2], events => [send],
                                   output => {file, ?L:dir(Config, "b")}})),
    ?assertEqual([S1], beamprobe:list()),
    _ = ?L:stop(S1),
    ok = ?W:stop([W1, W2]),
    nothing_left("disjoint").

%% Sessions started at once on one function, each with a condition of
%% its own: none takes another's freshly installed pattern for another
%% tool's (seed 1795911529058814694, round 63, a race: the skip asked
%% which patterns beamprobe's sessions claim, then the VM what the
%% function has; a session joining in between made the function
%% "another tool's": skipped, its calls lost).  A race: 50 tries (it did
%% not fail before the fix in 100 here; the fuzz round did, once).
concurrent_starts_not_skipped(Config) ->
    Self = self(),
    Try = fun(K) ->
                  Owners = [spawn(fun() ->
                                          R = beamprobe:start(
                                                #{calls => [{{?W, thrower, 1},
                                                             [{[{'$1', '_'}],
                                                               [{'>', '$1', J}], []}]}],
                                                  output => {file, ?L:dir(Config,
                                                               lists:concat([K, "_", J]))}}),
                                          Self ! {started, self(), R},
                                          receive stop -> ok end
                                  end) || J <- lists:seq(1, 4)],
                  Ss = [receive {started, O, {ok, S}} -> S end || O <- Owners],
                  Skipped = [C || S <- Ss, {ok, #{skipped := #{calls := C}}}
                                               <- [beamprobe:info(S)], C =/= []],
                  _ = [?L:stop(S) || S <- Ss],
                  _ = [O ! stop || O <- Owners],
                  Skipped
          end,
    ?assertEqual([], lists:append([Try(K) || K <- lists:seq(1, 50)])),
    nothing_left("concurrent").

%%% ------------------------------------------------------------------------
%%% Random specs
%%% ------------------------------------------------------------------------

pick(L) -> lists:nth(rand:uniform(length(L)), L).

subset(L) -> [X || X <- L, rand:uniform(2) =:= 1].

%% dbg traces some workers (calls and/or messages) and has a pattern on
%% some functions.
dbg_spec(NW) ->
    D = #{procs => lists:usort([rand:uniform(NW) || _ <- [1, 2]]),
          flags => pick([[c], [c, m], [m], [c, send]]),
          tpl => lists:usort([pick(?FNS) || _ <- [1, 2]])},
    %% Sometimes dbg also holds the default for new processes (calls
    %% only: every process spawned meanwhile gets it).
    case rand:uniform(4) of
        1 -> D#{new => true};
        _ -> D
    end.

spec(I, NW, NP, AtOnce, Dbg) ->
    {Start, Stop} = case AtOnce of
                        true -> {0, NP + 1};
                        false -> Sa = rand:uniform(NP + 1) - 1,
                                 {Sa, Sa + rand:uniform(NP + 1 - Sa)}
                    end,
    Procs = case rand:uniform(6) of
                1 -> all;
                2 -> existing;
                3 -> new;
                _ -> {idx, lists:usort([rand:uniform(NW) || _ <- [1, 2]])}
            end,
    Calls = [call(F) || F <- subset(?FNS)],
    Events0 = subset([send, 'receive', procs]),
    Events = case {Calls, Events0} of
                 {[], []} -> [send];
                 _ -> Events0
             end,
    S0 = #{i => I, start => Start, stop => Stop, procs => Procs,
           calls => Calls, events => Events,
           args => pick([full, full, arity])},
    S1 = case rand:uniform(4) of
             1 -> S0#{return => true};
             _ -> S0
         end,
    S2 = case rand:uniform(5) of
             1 -> S1#{exceptions => true};
             _ -> S1
         end,
    %% A count limit where the first N events are well defined: a list of
    %% workers (never another process's events), which run one at a time.
    S3 = case {Procs, rand:uniform(5)} of
             %% (No receive events: traced in the sender's context, they
             %% race with the receiver's own for the first N.)
             {{idx, _}, 1} ->
                 S2#{limits => #{events => rand:uniform(60)},
                     events => case Events -- ['receive'] of
                                   [] when Calls =:= [] -> [send];
                                   Ev -> Ev
                               end};
             _ -> S2
         end,
    S4 = case rand:uniform(8) of
             %% (meta: procs => all, no events, no count limit here.)
             1 when Calls =/= [] -> (maps:remove(limits, S3))#{meta => true,
                                                               procs => all,
                                                               events => []};
             _ -> S3
         end,
    S5 = case rand:uniform(6) of
             1 -> S4#{capture => #{list => rand:uniform(4),
                                   depth => rand:uniform(3)}};
             _ -> S4
         end,
    _ = Dbg,
    S5.

call({F, A} = FA) ->
    MFA = {?W, F, A},
    case rand:uniform(3) of
        1 -> MFA;
        _ -> {MFA, match_spec(FA)}
    end.

acts() ->
    pick([[], [], [{return_trace}], [{exception_trace}],
          [{message, {caller}}], [{return_trace}, {message, {caller}}]]).

match_spec({tick, 1}) ->
    pick([[{['$1'], [{'>', '$1', rand:uniform(60)}], acts()}],
          [{['$1'], [{'=<', '$1', rand:uniform(60)}], acts()}],
          [{['$1'], [{'==', {'rem', '$1', 2}, 0}], acts()}],
          [{[3], [], acts()}, {['$1'], [{'>', '$1', 40}], acts()}],
          [{'_', [], acts()}]]);
match_spec({add, 2}) ->
    pick([[{['$1', '$2'], [{'>', '$1', '$2'}], acts()}],
          [{['$1', '$1'], [], acts()}],
          [{['_', '$2'], [{'<', '$2', 2}], acts()}],
          [{'_', [], acts()}]]);
match_spec({fact, 1}) ->
    pick([[{['$1'], [{'>', '$1', 2}], acts()}],
          [{[0], [], acts()}],
          [{'_', [], acts()}]]);
match_spec({thrower, 1}) ->
    pick([[{[{'$1', '_'}], [{'>', '$1', 1}], acts()}],
          [{'_', [], acts()}]]);
match_spec({raiser, 1}) ->
    pick([[{['$1'], [{'is_integer', '$1'}, {'>', '$1', 3}], acts()}],
          [{'_', [], acts()}]]);
match_spec({child, 3}) ->
    pick([[{['_', '$1', '_'], [{'>', '$1', 1}], acts()}],
          [{'_', [], acts()}]]).

%% The beamprobe spec of S in a run whose workers are Ws.
bp_spec(#{procs := Procs} = S, Ws, Dir) ->
    P = case Procs of
            {idx, Is} -> [lists:nth(I, Ws) || I <- Is];
            _ -> Procs
        end,
    (maps:without([i, start, stop], S))#{procs => P,
                                         output => {file, Dir},
                                         buffer => 4 * 1024 * 1024}.

%%% ------------------------------------------------------------------------
%%% A run: the workload with the sessions Specs (and dbg)
%%% ------------------------------------------------------------------------

run(Config, Tag, Specs, Dbg, NW, NP) ->
    {Ws, Roles0} = ?W:start(NW),
    ok = dbg_start(Dbg, Ws),
    {Roles, Live} =
        lists:foldl(
          fun(B, {R0, L0}) ->
                  L1 = lists:foldl(fun(#{i := I, stop := E}, L) when E =:= B ->
                                           stop_session(I, L);
                                      (_, L) -> L
                                   end, L0, Specs),
                  L2 = lists:foldl(fun(#{i := I, start := St} = S, L) when St =:= B ->
                                           start_session(Config, Tag, S, Ws, L, I);
                                      (_, L) -> L
                                   end, L1, Specs),
                  R1 = if B < NP -> ?W:phase(Ws, B + 1, R0);
                          B =:= NP -> ok = ?W:stop(Ws), R0;
                          true -> R0
                       end,
                  {R1, L2}
          end, {Roles0, #{}}, lists:seq(0, NP + 1)),
    flush_progress(),
    DbgEvs = dbg_stop(Dbg, Roles),
    nothing_left(Tag),
    RoleText = maps:from_list([{list_to_binary(pid_to_list(P)), R}
                               || {P, R} <- maps:to_list(Roles)]
                              ++ [{list_to_binary(pid_to_list(self())),
                                   <<"driver">>}]),
    Sessions = maps:map(fun(_, {refused, _} = Rf) -> Rf;
                           (I, {done, Dir, Sum, Skipped}) ->
                                #{events => norm(Dir, RoleText), summary => Sum,
                                  meta => meta(Specs, I),
                                  skipped => Skipped, ws => Ws}
                        end, Live),
    #{sessions => Sessions, dbg => DbgEvs}.

meta(Specs, I) ->
    [S] = [S || #{i := J} = S <- Specs, J =:= I],
    maps:get(meta, S, false).

start_session(Config, Tag, S, Ws, Live, I) ->
    Dir = ?L:dir(Config, Tag ++ "s" ++ integer_to_list(I)),
    case beamprobe:start(bp_spec(S, Ws, Dir)) of
        {ok, Pid} ->
            {ok, Info} = beamprobe:info(Pid),
            Live#{I => {Pid, Dir, maps:get(skipped, Info, none)}};
        {error, Why} ->
            ct:log("~s: session ~p refused: ~p", [Tag, I, Why]),
            Live#{I => {refused, Why}}
    end.

stop_session(I, Live) ->
    case maps:get(I, Live) of
        {refused, _} -> Live;
        {Pid, Dir, Skipped} ->
            {ok, Sum} = beamprobe:stop(Pid),
            Live#{I => {done, Dir, Sum, Skipped}}
    end.

flush_progress() ->
    receive {progress, _, _} -> flush_progress()
    after 0 -> ok
    end.

hub_flags_left() ->
    [{P, F} || P <- processes() ++ erlang:ports(),
               {flags, F} <- [erlang:trace_info(P, flags)], F =/= [],
               erlang:trace_info(P, tracer) =:=
                   {tracer, {beamprobe_nif, beamprobe_hub}}].

%% Nothing of any session (nor of dbg, stopped) is left.
nothing_left(Tag) ->
    ?assertEqual({Tag, []}, {Tag, beamprobe:list()}),
    ?assertEqual({Tag, []}, {Tag, hub_flags_left()}),
    ?assertEqual({Tag, {flags, []}}, {Tag, erlang:trace_info(new, flags)}),
    ?assertEqual({Tag, 0}, {Tag, beamprobe_nif:hub_members()}),
    [?assertEqual({Tag, {?W, F, A}, {all, false}},
                  {Tag, {?W, F, A}, erlang:trace_info({?W, F, A}, all)})
     || {F, A} <- ?FNS],
    ok.

%%% ------------------------------------------------------------------------
%%% dbg
%%% ------------------------------------------------------------------------

dbg_start(none, _Ws) -> ok;
dbg_start(#{procs := Is, flags := Flags, tpl := Fns} = Dbg, Ws) ->
    Self = self(),
    {ok, _} = dbg:tracer(process, {fun(M, N) -> Self ! {bp_ofuzz_dbg, M}, N end, 0}),
    [{ok, _} = dbg:p(lists:nth(I, Ws), Flags) || I <- Is],
    _ = maps:get(new, Dbg, false) andalso
        begin {ok, _} = dbg:p(new, [c]), true end,
    [{ok, _} = dbg:tpl(?W, F, A, []) || {F, A} <- Fns],
    {tracer, T} = erlang:trace_info(lists:nth(hd(Is), Ws), tracer),
    put(dbg_tracer, T),
    ok.

dbg_stop(none, _Roles) -> none;
dbg_stop(_, Roles) ->
    Ref = erlang:trace_delivered(all),
    receive {trace_delivered, all, Ref} -> ok end,
    ok = wait_idle(get(dbg_tracer)),
    dbg:stop(),
    Evs = collect_dbg([]),
    RM = Roles#{self() => <<"driver">>},
    Per = lists:foldl(fun(M, Acc) ->
                              Who = maps:get(element(2, M), RM, other),
                              maps:update_with(Who, fun(L) -> [subst(M, RM) | L] end,
                                               [subst(M, RM)], Acc)
                      end, #{}, Evs),
    maps:map(fun(_, L) -> lists:reverse(L) end, maps:remove(other, Per)).

wait_idle(P) ->
    case erlang:process_info(P, [message_queue_len, status]) of
        [{message_queue_len, 0}, {status, waiting}] -> ok;
        undefined -> ok;
        _ -> timer:sleep(5), wait_idle(P)
    end.

collect_dbg(Acc) ->
    receive {bp_ofuzz_dbg, M} -> collect_dbg([M | Acc])
    after 0 -> lists:reverse(Acc)
    end.

subst(P, RM) when is_pid(P) -> maps:get(P, RM, other);
subst(T, RM) when is_tuple(T) -> list_to_tuple(subst(tuple_to_list(T), RM));
subst([H | T], RM) -> [subst(H, RM) | subst(T, RM)];
subst(X, _) -> X.

%% dbg's output next to beamprobe (together and each alone) is dbg's
%% output alone.
%% (Calls of functions that have beamprobe's pattern but not dbg's, in
%% a process dbg traces with `c', also reach dbg: on OTP 25 a pattern is
%% global and a process has one tracer.  They are left out here and
%% counted in the log.)
dbg_compare(N, #{tpl := Fns} = Dbg, Alone, Others0) ->
    Own = fun(M) -> case M of
                        {trace, _, call, {?W, F, Args}} -> lists:member({F, length(Args)}, Fns);
                        {trace, _, call, {?W, F, Args}, _} -> lists:member({F, length(Args)}, Fns);
                        {trace, _, K, {?W, F, A}, _} when K =:= return_from;
                                                          K =:= exception_from ->
                            lists:member({F, A}, Fns);
                        _ -> true
                    end
          end,
    Others = [{Which, maps:map(fun(_, L) -> [M || M <- L, Own(M)] end, Per)}
              || {Which, Per} <- Others0],
    ct:log("round ~p: dbg got ~p calls of beamprobe's patterns (not its own)",
           [N, [{Which, length([M || L <- maps:values(Per), M <- L, not Own(M)])}
                || {Which, Per} <- Others0]]),
    [{N, dbg, Which, Role, first_diff(A, O)}
     || {Which, Per} <- Others,
        Role <- lists:usort(maps:keys(Alone) ++ maps:keys(Per)),
        A <- [loose(maps:get(Role, Alone, []))],
        O <- [loose(maps:get(Role, Per, []))],
        A =/= O, _ <- [ct:log("dbg ~p ~p ~p: alone ~p~nwith beamprobe ~p",
                             [N, Which, Role, A, O])], Dbg =/= none].

%% What a session skipped because of dbg is reported in info/1.
skip_check(_N, none, _Sp, _) -> [];
skip_check(_N, _Dbg, _Sp, {refused, _}) -> [];
skip_check(_N, _Dbg, #{meta := true}, _) -> [];   % dbg holds no meta pattern
skip_check(N, #{procs := DIs, tpl := DFns} = Dbg, #{i := I, procs := Procs, calls := Calls},
           #{skipped := Skipped, ws := Ws}) ->
    WantCalls = lists:usort([{?W, F, A} || C <- Calls,
                                           {_, F, A} <- [case C of
                                                             {M, _} when is_tuple(M) -> M;
                                                             M -> M
                                                         end],
                                           lists:member({F, A}, DFns)]),
    DPids = [lists:nth(D, Ws) || D <- DIs],
    WantProcs = case Procs of
                    {idx, Is} -> [lists:nth(X, Ws) || X <- Is, lists:member(X, DIs)];
                    new -> [];
                    _ -> DPids
                end ++ [new || maps:get(new, Dbg, false), Procs =/= existing,
                               not is_tuple(Procs)],
    #{calls := SC, procs := SP} = Skipped,
    Bad = [{calls, C} || C <- WantCalls, not lists:member(C, SC)] ++
        [{procs, P} || P <- WantProcs, not lists:member(P, SP)],
    case Bad of
        [] -> [];
        _ -> [{N, I, skipped_not_reported, Bad, Skipped}]
    end.

%%% ------------------------------------------------------------------------
%%% Reading and comparing traces
%%% ------------------------------------------------------------------------

%% A trace as #{Role => [{Name, Fields}]}, in order, for the workload's
%% processes; pid texts in fields replaced by roles, the raw pid keys
%% (`to', `other') left out (their `_text' fields say the same).
norm(Dir, RoleText) ->
    Evs = ?L:trace(Dir),
    Names = maps:from_list([{K, ?L:field(E, "pid")}
                            || #{name := <<"process">>, key := K} = E <- Evs]),
    L = [{Role, {Name, maps:map(fun(_, V) -> subst_text(V, RoleText) end,
                                maps:without([<<"to">>, <<"other">>], F))}}
         || #{name := Name, key := K, fields := F} <- Evs,
            Name =/= <<"process">>, Name =/= <<"drops">>,
            Role <- [maps:get(maps:get(K, Names, none), RoleText, none)],
            Role =/= none, Role =/= <<"driver">>],
    lists:foldr(fun({R, E}, Acc) -> maps:update_with(R, fun(Es) -> [E | Es] end,
                                                     [E], Acc)
                end, #{}, L).

subst_text(V, RoleText) when is_binary(V) ->
    case re:run(V, "<[0-9]+\\.[0-9]+\\.[0-9]+>", [global, {capture, first, index}]) of
        nomatch -> V;
        {match, Ms} ->
            {Parts, Last} =
                lists:foldl(fun([{Pos, Len}], {Acc, From}) ->
                                    Pid = binary:part(V, Pos, Len),
                                    {[maps:get(Pid, RoleText, <<"<other>">>),
                                      binary:part(V, From, Pos - From) | Acc],
                                     Pos + Len}
                            end, {[], 0}, Ms),
            iolist_to_binary(lists:reverse([binary:part(V, Last, byte_size(V) - Last)
                                            | Parts]))
    end;
subst_text(V, _) -> V.

%% Session I of round N: together against alone.
compare(N, I, {refused, W1}, {refused, W2}) ->
    ct:log("round ~p session ~p refused together (~p) and alone (~p)",
           [N, I, W1, W2]),
    [];
compare(N, I, {refused, W}, _) ->
    ct:log("round ~p session ~p refused together only: ~p", [N, I, W]),
    [];
compare(N, I, _, {refused, W}) ->
    [{N, I, refused_alone_only, W}];
compare(N, I, #{events := T0, summary := ST, meta := Meta},
        #{events := A0, summary := SA}) ->
    T = meta_quirk(Meta, T0),
    A = meta_quirk(Meta, A0),
    put(bp_ofuzz_events, (case get(bp_ofuzz_events) of undefined -> 0; C -> C end)
        + lists:sum([length(L) || L <- maps:values(A)])),
    Drops = [{N, I, dropped, D} || {_, Sum} <- [{t, ST}, {a, SA}],
                                   D <- [maps:get(dropped, Sum)],
                                   maps:get(total, D) =/=
                                       maps:get(limit, D) + maps:get(stopped, D)],
    Diffs = [{N, I, Role, first_diff(EA, ET)}
             || Role <- lists:usort(maps:keys(T) ++ maps:keys(A)),
                EA <- [loose(maps:get(Role, A, []))],
                ET <- [loose(maps:get(Role, T, []))],
                EA =/= ET,
                _ <- [ct:log("round ~p session ~p role ~s:~nalone ~p~ntogether ~p",
                             [N, I, Role, EA, ET])]],
    Drops ++ Diffs.

%% Nothing a session did not ask for: event kinds, functions.
foreign(_N, _Sp, {refused, _}) -> [];
foreign(N, #{i := I, calls := Calls, events := Ev}, #{events := Per}) ->
    Fns = [iolist_to_binary(io_lib:format("~p:~p/~p", [M, F, A]))
           || C <- Calls, {M, F, A} <- [case C of
                                            {{_, _, _} = X, _} -> X;
                                            X -> X
                                        end]],
    Kinds = [<<"call">> || Calls =/= []] ++
        [K || Calls =/= [], K <- [<<"return_from">>, <<"exception_from">>]] ++
        [K || lists:member(send, Ev),
              K <- [<<"send">>, <<"send_to_non_existing_process">>]] ++
        [<<"receive">> || lists:member('receive', Ev)] ++
        [K || lists:member(procs, Ev),
              K <- [<<"spawn">>, <<"spawned">>, <<"exit">>, <<"link">>,
                    <<"unlink">>, <<"getting_linked">>, <<"getting_unlinked">>,
                    <<"register">>, <<"unregister">>]],
    [{N, I, foreign, Role, E}
     || {Role, Es} <- maps:to_list(Per), {Name, F} = E <- Es,
        not lists:member(Name, Kinds) orelse
            (lists:member(Name, [<<"call">>, <<"return_from">>, <<"exception_from">>])
             andalso not lists:member(maps:get(<<"mfa">>, F, none), Fns))].

%% A session with `limits => #{events => Lim}' (on a list of workers,
%% which run one at a time) has, per process, a prefix of what it has
%% without the limit, Lim events in all (or all of them if fewer).
limit_check(_N, _I, {refused, _}, _, _) -> [];
limit_check(_N, _I, _, {refused, _}, _) -> [];
limit_check(N, I, #{events := L}, #{events := U}, Lim) ->
    Count = fun(M) -> lists:sum([length(X) || X <- maps:values(M)]) end,
    Prefix = [{N, I, limit_not_prefix, Role, first_diff(maps:get(Role, U, []), Es)}
              || {Role, Es} <- maps:to_list(L),
                 not lists:prefix(Es, maps:get(Role, U, []))],
    Want = min(Lim, Count(U)),
    Prefix ++ [{N, I, limit_count, Lim, Count(L), Count(U)} || Count(L) =/= Want].

%% A meta session's exception_from of child/3 (a process's initial call,
%% ended by exit/1) comes or not with the process's own trace flags
%% (another session's: the VM unwinds through return-trace frames only
%% then): left out of the comparison (docs/design.md, "known
%% differences").
meta_quirk(false, Per) -> Per;
meta_quirk(true, Per) ->
    maps:map(fun(_, Es) ->
                     [E || {Name, F} = E <- Es,
                           not (Name =:= <<"exception_from">> andalso
                                maps:get(<<"mfa">>, F, none) =:=
                                    <<"beamprobe_ofuzz_work:child/3">>)]
             end, Per).

%% A process's events with its `receive' events after the others: a
%% receive is traced in the sender's context, as the message is queued,
%% so it may be stamped (and reach dbg) after what the receiver does
%% next.  Each of the two subsequences is in a deterministic order.
loose(Es) ->
    {R, O} = lists:partition(fun({<<"receive">>, _}) -> true;
                                ({trace, _, 'receive', _}) -> true;
                                (_) -> false
                             end, Es),
    O ++ R.

%% Where two sequences first differ: {Index, AloneEvent, OtherEvent,
%% lengths}.
first_diff(A, B) -> first_diff(A, B, 1, {length(A), length(B)}).

first_diff([X | A], [X | B], K, Ls) -> first_diff(A, B, K + 1, Ls);
first_diff(A, B, K, Ls) ->
    {at, K, alone, hd_or_end(A), other, hd_or_end(B), lengths, Ls}.

hd_or_end([H | _]) -> H;
hd_or_end([]) -> 'end'.
