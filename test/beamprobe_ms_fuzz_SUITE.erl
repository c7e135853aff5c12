%%% @doc Fuzz of user match specs: random match specs (heads, guards and
%%% bodies with every action, from a grammar) are given to
%%% beamprobe:start/1 in a `peer' node; for each one beamprobe accepts, a
%%% workload makes the traced calls with varied arguments, sends and
%%% receives messages, collects garbage and spawns, then the session stops.
%%% The peer must still be alive and answer erpc, with no process left
%%% traced and no pattern left installed.  A refusal must be a clean
%%% `{error, Reason}' that beamprobe:format_error/1 can print.
%%%
%%% Cases: one session at a time (`single'); two sessions on the same
%%% functions and messages (`combined': one combined match spec per
%%% function); one session next to dbg (`next_to_dbg').
%%%
%%% A node crash (or a hang) is recorded with its specs, the peer is
%%% started again, and the case fails at its end with every crash.
%%%
%%% Environment: BP_MSFUZZ_SEED (an integer: rerun that seed),
%%% BP_MSFUZZ_SPECS (specs over the three cases; default 200, the CI
%%% size: well under 60 s).
-module(beamprobe_ms_fuzz_SUITE).

-include_lib("common_test/include/ct.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([single/1, combined/1, next_to_dbg/1]).
%% In the peer.
-export([peer_run/2, t1/1, t2/2, t3/3]).

-define(TARGETS, [{?MODULE, t1, 1}, {?MODULE, t2, 2}, {?MODULE, t3, 3}]).
-define(RUN_MS, 30000).

all() -> [single, combined, next_to_dbg].

init_per_suite(Config) ->
    Seed = case os:getenv("BP_MSFUZZ_SEED") of
               false -> erlang:unique_integer([positive]) bxor
                            erlang:system_time();
               S -> list_to_integer(S)
           end,
    N = case os:getenv("BP_MSFUZZ_SPECS") of
            false -> 200;
            V -> list_to_integer(V)
        end,
    ct:pal("beamprobe_ms_fuzz: seed ~p, ~p specs (rerun: BP_MSFUZZ_SEED=~p "
           "BP_MSFUZZ_SPECS=~p)", [Seed, N, Seed, N]),
    [{seed, Seed}, {n_specs, N} | Config].

end_per_suite(_Config) ->
    ok.

%%% ------------------------------------------------------------------------
%%% Cases
%%% ------------------------------------------------------------------------

single(Config) ->
    fuzz(Config, single, 1, 6 * n(Config) div 10,
         fun() -> [gen_session()] end, known()).

%% The match specs known to crash an OTP 25 node, first in every run
%% (beamprobe must refuse them; with a refusal removed, the peer dies and
%% the case fails): a seq_trace label the match spec builds (unsafe_label)
%% and a flag action in a send pattern (unsafe_send_action), with and
%% without force; flag actions in call patterns (flag_action).
known() ->
    Call = fun(Body, Force) ->
                   [#{calls => [{{?MODULE, t2, 2}, [{['$1', '$2'], [], Body}]}],
                      messages => [], events => [], force => Force}]
           end,
    Send = fun(Body, Force) ->
                   [#{calls => [], events => [send], force => Force,
                      messages => [{send, [{'_', [], Body}]}]}]
           end,
    [F(B, Force) || Force <- [false, true],
                    {F, B} <- [{Call, [{set_seq_token, label, {{x, '$1'}}}]},
                               {Call, [{set_seq_token, label, {const, 1 bsl 70}}]},
                               {Call, [{message, {{ok, {set_seq_token, label, '$_'}}}}]},
                               {Send, [{disable_trace, send}]},
                               {Send, [{disable_trace, {self}, all}]},
                               {Send, [{trace, [send], []}, {message, '$$'}]},
                               {Call, [{silent, true}]},
                               {Call, [{trace, [], [send]}]}]].

combined(Config) ->
    fuzz(Config, combined, 2, 2 * n(Config) div 10,
         fun() -> same_targets(gen_session(), gen_session()) end, []).

next_to_dbg(Config) ->
    fuzz(Config, dbg, 3, max(1, 2 * n(Config) div 10),
         fun() -> [gen_session()] end, []).

n(Config) -> ?config(n_specs, Config).

%% Two sessions on the same function (and message kind): the combined path.
same_targets(#{calls := [{MFA, _} | _]} = A, #{calls := [{_, MS} | T]} = B) ->
    [A, B#{calls := [{MFA, MS} | T]}];
same_targets(A, B) ->
    [A, B].

fuzz(Config, Mode, SeedOff, N, Gen0, Fixed) ->
    Gen = fun() -> case get(bp_fixed) of
                       [F | T] -> put(bp_fixed, T), F;
                       _ -> Gen0()
                   end
          end,
    put(bp_fixed, Fixed),
    Seed = ?config(seed, Config) + SeedOff,
    rand:seed(exsss, Seed),
    Dir = ?config(priv_dir, Config),
    T0 = erlang:monotonic_time(millisecond),
    Peer0 = start_peer(Dir, Mode),
    {PeerN, Stats} =
        lists:foldl(fun(I, {P, St}) -> one(I, Gen(), Mode, P, Dir, St) end,
                    {Peer0, #{tried => 0, accepted => 0, refused => #{},
                              failures => []}},
                    lists:seq(1, length(Fixed) + N)),
    stop_peer(PeerN),
    #{tried := Tried, accepted := Acc, refused := Ref, failures := Fails} = Stats,
    ct:pal("~p: seed ~p: ~p runs (of ~p sessions each), ~p accepted, "
           "~p failures, ~p ms; refused by reason: ~p",
           [Mode, Seed, Tried, length(Gen0()), Acc, length(Fails),
            erlang:monotonic_time(millisecond) - T0, Ref]),
    case Fails of
        [] -> ok;
        _ ->
            [ct:pal("FAILURE ~p:~n~P", [Mode, F, 60]) || F <- lists:reverse(Fails)],
            ct:fail({Mode, seed, Seed, failures, length(Fails),
                     [element(1, F) || F <- lists:reverse(Fails)]})
    end.

one(I, Specs, Mode, {_, Node} = Peer, Dir, St) ->
    #{tried := Tried} = St,
    St1 = St#{tried := Tried + 1},
    Res = try erpc:call(Node, ?MODULE, peer_run, [Specs, Mode], ?RUN_MS)
          catch C:R -> {caught, C, R}
          end,
    Alive = try erpc:call(Node, erlang, node, [], 10000) of
                Node -> true
            catch _:_ -> false
            end,
    case {Res, Alive} of
        {{ok, Accepted, Refused}, true} ->
            [ct:log("refused: ~P", [R, 30]) || R <- Refused],
            {Peer, count(St1, Accepted, Refused)};
        {_, true} ->
            {Peer, fail(St1, {I, Res, Specs})};
        {_, false} ->
            Why = crash_slogan(Dir, Node),
            Full = filename:join(Dir, "crash_" ++ integer_to_list(I) ++ "_"
                                 ++ atom_to_list(Mode) ++ ".spec"),
            ok = file:write_file(Full, io_lib:format("~w.~n", [Specs])),
            ct:pal("run ~p: node down (~P): ~p~nspecs (in full: ~ts): ~P",
                   [I, Res, 20, Why, Full, Specs, 60]),
            stop_peer(Peer),
            {start_peer(Dir, Mode), fail(St1, {I, node_down, Why, Specs})}
    end.

count(#{accepted := A, refused := R} = St, Accepted, Refused) ->
    R1 = lists:foldl(fun(K, M) -> maps:update_with(K, fun(X) -> X + 1 end, 1, M) end,
                     R, [reason_key(E) || E <- Refused]),
    St#{accepted := A + Accepted, refused := R1}.

reason_key(T) when is_tuple(T), tuple_size(T) > 0 -> element(1, T);
reason_key(T) -> T.

fail(#{failures := F} = St, X) -> St#{failures := [X | F]}.

%%% ------------------------------------------------------------------------
%%% The peer
%%% ------------------------------------------------------------------------

start_peer(Dir, Mode) ->
    Paths = lists:append([["-pa", filename:dirname(code:which(M))]
                          || M <- [beamprobe, ?MODULE, beamprobe_test_handler]]),
    %% A name of this run's own (peer:random_name/1 adds the OS pid): a
    %% count of this node's alone repeats in another test run on the
    %% machine, whose peer then held the name (peer:start timed out).
    Name = peer:random_name("msfuzz_" ++ atom_to_list(Mode)),
    Dump = filename:join(Dir, Name ++ ".dump"),
    {ok, Peer, Node} = peer:start(#{name => Name, args => Paths,
                                    env => [{"ERL_CRASH_DUMP", Dump},
                                            {"ERL_CRASH_DUMP_SECONDS", "5"}]}),
    unlink(Peer),
    {ok, _} = erpc:call(Node, application, ensure_all_started, [beamprobe]),
    {module, _} = erpc:call(Node, code, ensure_loaded, [beamprobe_nif]),
    {Peer, Node}.

stop_peer({Peer, _}) ->
    catch peer:stop(Peer),
    ok.

crash_slogan(Dir, Node) ->
    Dump = filename:join(Dir, hd(string:split(atom_to_list(Node), "@")) ++ ".dump"),
    timer:sleep(200),
    case [F || F <- [Dump], filelib:is_regular(F)] of
        [F | _] ->
            {ok, B} = file:read_file(F),
            case [L || <<"Slogan: ", L/binary>> <- binary:split(B, <<"\n">>, [global])] of
                [Slogan | _] -> {dump, Slogan};
                _ -> {dump, no_slogan}
            end;
        [] -> no_dump                           % a signal (segfault, ...)
    end.

%% @doc In the peer: starts the sessions of Specs (those beamprobe
%% accepts), runs the workload, stops them; checks that nothing is left
%% traced.  Returns `{ok, Accepted, RefusalReasons}' or a failure.
-spec peer_run([map()], single | combined | dbg) -> term().
peer_run(Specs, Mode) ->
    Before = pattern_state(),
    Dbg = case Mode of
              dbg -> start_dbg();
              _ -> none
          end,
    Started = [{Sp, catch beamprobe:start(full_spec(Sp))} || Sp <- Specs],
    Bad = [{Sp, R} || {Sp, R} <- Started, not clean_result(R)],
    Sessions = [S || {_, {ok, S}} <- Started],
    Refused = [R || {_, {error, R}} <- Started],
    Work = case Sessions of
               [] -> skipped;
               _ -> workload()
           end,
    Stops = [catch beamprobe:stop(S) || S <- Sessions],
    BadStops = [X || X <- Stops, not is_tuple(X) orelse element(1, X) =/= ok],
    stop_dbg(Dbg),
    Left = left_traced(),
    After = pattern_state(),
    Lists = beamprobe:list(),
    case {Bad, Work, BadStops, Left, After =:= Before, Lists} of
        {[], W, [], [], true, []} when W =:= ok; W =:= skipped ->
            {ok, length(Sessions), Refused};
        _ ->
            {failed, #{bad_results => Bad, work => Work, bad_stops => BadStops,
                       left_traced => Left, patterns_before => Before,
                       patterns_after => After, sessions_left => Lists}}
    end.

full_spec(Sp) ->
    Sp#{output => {handler, beamprobe_test_handler, #{forward => none}},
        limits => #{seconds => 60}}.

clean_result({ok, S}) when is_pid(S) -> true;
clean_result({error, R}) ->
    try beamprobe:format_error(R) of
        Msg -> io_lib:char_list(lists:flatten(Msg))
    catch _:_ -> false
    end;
clean_result(_) -> false.

pattern_state() ->
    [{MFA, erlang:trace_info(MFA, traced), erlang:trace_info(MFA, match_spec)}
     || MFA <- ?TARGETS] ++
        [{K, erlang:trace_info(K, match_spec)} || K <- [send, 'receive']] ++
        [{K, erlang:trace_info(K, flags)} || K <- [new, new_processes, new_ports]].

left_traced() ->
    [{P, F} || P <- processes(),
               {flags, F} <- [erlang:trace_info(P, flags)], F =/= []] ++
        [{P, T} || P <- processes(),
                   {tracer, T} <- [erlang:trace_info(P, tracer)], T =/= []].

start_dbg() ->
    Self = self(),
    {ok, _} = dbg:tracer(process, {fun(_, N) -> N + 1 end, 0}),
    P = spawn(fun() -> dbg_loop(Self) end),
    {ok, _} = dbg:p(P, [call, send]),
    {ok, _} = dbg:tpl({?MODULE, t2, 2}, [{'_', [], [{return_trace}]}]),
    P ! go,
    P.

dbg_loop(Parent) ->
    receive
        go -> [t2(X, Parent) || X <- [1, a, <<"b">>]], dbg_loop(Parent);
        stop -> ok
    end.

stop_dbg(none) -> ok;
stop_dbg(P) ->
    Ref = monitor(process, P),
    P ! stop,
    receive {'DOWN', Ref, process, P, _} -> ok after 5000 -> exit(P, kill) end,
    dbg:stop().

%%% ------------------------------------------------------------------------
%%% The workload (in the peer)
%%% ------------------------------------------------------------------------

%% @doc Traced functions.
-spec t1(term()) -> term().
t1(X) -> {t1, X}.
-spec t2(term(), term()) -> term().
t2(X, Y) -> [X | Y].
-spec t3(term(), term(), term()) -> term().
t3(X, Y, Z) when is_integer(X), X rem 3 =:= 0 -> throw({t3, Y, Z});
t3(X, _, Z) when is_integer(X), X rem 5 =:= 0 -> error({t3, Z});
t3(X, Y, Z) -> {X, Y, Z}.

%% Workers that end with the run, and a resident process that lives as
%% long as the peer: what a match spec leaves on a process (a flag, a
%% seq_trace token, `silent') meets the next runs' sessions.
workload() ->
    Self = self(),
    Ws = [spawn_monitor(fun() -> worker(I, Self) end) || I <- lists:seq(1, 4)],
    R = resident(),
    Ref = monitor(process, R),
    R ! {work, Self, Ref},
    case wait(Ws, 10000) of
        ok ->
            receive
                {Ref, done} -> demonitor(Ref, [flush]), ok;
                {'DOWN', Ref, process, R, Why} -> {resident_died, Why}
            after 10000 -> demonitor(Ref, [flush]), resident_hang
            end;
        Other -> demonitor(Ref, [flush]), Other
    end.

resident() ->
    case whereis(bp_msfuzz_resident) of
        undefined ->
            P = spawn(fun resident_loop/0),
            try register(bp_msfuzz_resident, P) of
                true -> P
            catch error:badarg -> exit(P, kill), resident()
            end;
        P -> P
    end.

resident_loop() ->
    receive
        {work, From, Ref} ->
            [begin
                 _ = ?MODULE:t1(A),
                 _ = ?MODULE:t2(A, From),
                 _ = (catch ?MODULE:t3(A, A, 0)),
                 self() ! {msg, A},
                 receive {msg, _} -> ok end
             end || A <- lists:sublist(args(), 12)],
            erlang:garbage_collect(),
            From ! {Ref, done},
            resident_loop()
    end.

wait([], _) -> ok;
wait([{P, Ref} | T], Ms) ->
    receive
        {'DOWN', Ref, process, P, normal} -> wait(T, Ms);
        {'DOWN', Ref, process, P, R} -> {worker_died, R}
    after Ms ->
            [exit(Q, kill) || {Q, _} <- [{P, Ref} | T]],
            hang
    end.

args() ->
    [0, 1, 3, 5, -7, 1 bsl 70, -(1 bsl 64), 2.5, -0.0, a, '$1', "str", [],
     [1, 2 | 3], <<>>, <<1, 2, 3>>, binary:copy(<<"x">>, 300),
     <<1:3>>, {}, {a, {b, [c]}}, #{}, #{k => v, 1 => [2]},
     maps:from_list([{I, I} || I <- lists:seq(1, 40)]), self(),
     make_ref(), fun() -> ok end, lists:seq(1, 50),
     list_to_tuple(lists:seq(1, 20))].

worker(I, _Parent) ->
    As = args(),
    Partner = spawn(fun() -> partner() end),
    lists:foreach(
      fun(A) ->
              B = lists:nth(1 + (erlang:phash2(A) rem length(As)), As),
              _ = ?MODULE:t1(A),
              _ = ?MODULE:t2(A, B),
              _ = (catch ?MODULE:t3(A, B, I)),
              Partner ! {self(), A},
              receive {Partner, _} -> ok after 2000 -> ok end,
              self() ! {msg, A, B},
              receive {msg, _, _} -> ok end
      end, As),
    erlang:garbage_collect(),
    Me = self(),
    {C, Ref} = spawn_monitor(fun() -> _ = ?MODULE:t1(I), Me ! {child, I} end),
    receive {'DOWN', Ref, process, C, _} -> ok end,
    receive {child, I} -> ok after 2000 -> ok end,
    Partner ! stop,
    _ = ?MODULE:t2(I, binary:copy(<<"y">>, 100)),
    erlang:garbage_collect(),
    ok.

partner() ->
    receive
        {From, X} -> From ! {self(), X}, _ = ?MODULE:t1(X), partner();
        stop -> erlang:garbage_collect(), ok
    end.

%%% ------------------------------------------------------------------------
%%% The grammar
%%% ------------------------------------------------------------------------

pick(L) -> lists:nth(rand:uniform(length(L)), L).
chance(P) -> rand:uniform() < P.

gen_session() ->
    NC = rand:uniform(3) - 1,
    Calls = [begin {M, F, A} = pick(?TARGETS), {{M, F, A}, gen_ms(A)} end
             || _ <- lists:seq(1, NC)],
    Msgs = case NC =:= 0 orelse chance(0.4) of
               true -> [{K, gen_ms(msg_arity(K))}
                        || K <- lists:usort([pick([send, 'receive'])
                                             || _ <- lists:seq(1, rand:uniform(2))])];
               false -> []
           end,
    Sp = #{calls => case Calls of
                        [] when Msgs =:= [] -> [{{?MODULE, t1, 1}, gen_ms(1)}];
                        _ -> Calls
                    end,
           messages => Msgs, events => [K || {K, _} <- Msgs],
           force => chance(0.3), procs => pick([all, all, new])},
    case chance(0.2) of
        true -> Sp#{return => true, exceptions => chance(0.5)};
        false -> Sp
    end.

msg_arity(send) -> 2;
msg_arity('receive') -> 3.

gen_ms(Arity) ->
    [gen_clause(Arity) || _ <- lists:seq(1, rand:uniform(3))].

%% (The variables a clause's expressions use are mostly those its head
%% binds: a match spec with an unbound one is refused, bad_match_spec.)
gen_clause(Arity) ->
    Head = gen_head(Arity),
    put(bp_vars, lists:usort(head_vars(Head))),
    {Head,
     [gen_guard(rand:uniform(3)) || _ <- lists:seq(1, rand:uniform(3) - 1)],
     [gen_action(rand:uniform(3) - 1) || _ <- lists:seq(1, rand:uniform(3) - 1)]}.

%% Heads.
gen_head(Arity) ->
    case rand:uniform(6) of
        1 -> '_';
        N when N =< 4 -> [list_to_atom([$$ | integer_to_list(I)]) || I <- lists:seq(1, Arity)];
        3 -> [gen_pat(2) || _ <- lists:seq(1, Arity + rand:uniform(2) - 2)];
        _ -> [gen_pat(2) || _ <- lists:seq(1, Arity)]
    end.

gen_pat(0) -> pick(['_', pat_var(), a, 1]);
gen_pat(D) ->
    case rand:uniform(9) of
        1 -> '_';
        2 -> pat_var();
        3 -> gen_literal(1);
        4 -> list_to_tuple([gen_pat(D - 1) || _ <- lists:seq(1, rand:uniform(3) - 1)]);
        5 -> [gen_pat(D - 1) | gen_pat(D - 1)];
        6 -> [gen_pat(D - 1)];
        7 -> #{pick([k, 1, <<"b">>]) => gen_pat(D - 1)};
        _ -> pat_var()
    end.

pat_var() -> pick(['$1', '$2', '$3', '$4']).

var() ->
    case get(bp_vars) of
        [_ | _] = Vs -> case chance(0.95) of
                            true -> pick(Vs);
                            false -> pat_var()
                        end;
        _ -> pick(['$_', '$$', pat_var()])
    end.

head_vars(A) when is_atom(A) ->
    case atom_to_list(A) of
        [$$ | N] -> [A || N =/= [], lists:all(fun(C) -> C >= $0 andalso C =< $9 end, N)];
        _ -> []
    end;
head_vars([H | T]) -> head_vars(H) ++ head_vars(T);
head_vars(T) when is_tuple(T) -> head_vars(tuple_to_list(T));
head_vars(M) when is_map(M) -> head_vars(maps:values(M));
head_vars(_) -> [].

%% Guards: boolean expressions.
gen_guard(0) -> pick([true, false, {is_integer, var()}, {'==', var(), 1}]);
gen_guard(D) ->
    case rand:uniform(14) of
        1 -> {pick([is_atom, is_binary, is_bitstring, is_boolean, is_float,
                    is_function, is_integer, is_list, is_map, is_number,
                    is_pid, is_port, is_reference, is_tuple]),
              gen_expr(D - 1)};
        2 -> {is_record, gen_expr(D - 1), pick([t1, a]), rand:uniform(3)};
        3 -> {is_map_key, gen_expr(D - 1), gen_expr(D - 1)};
        4 -> {pick(['==', '/=', '=:=', '=/=', '<', '>', '=<', '>=']),
              gen_expr(D - 1), gen_expr(D - 1)};
        5 -> {pick(['andalso', 'orelse', 'and', 'or', 'xor']),
              gen_guard(D - 1), gen_guard(D - 1)};
        6 -> {'not', gen_guard(D - 1)};
        7 -> deep_not(rand:uniform(200));
        8 -> {is_function, gen_expr(D - 1)};
        9 -> {'andalso', gen_guard(D - 1),
              {'orelse', gen_guard(D - 1), gen_guard(D - 1)}};
        _ -> gen_expr(D)
    end.

deep_not(0) -> {is_pid, var()};
deep_not(N) -> {'not', deep_not(N - 1)}.

%% Expressions (guards and action arguments).
gen_expr(0) ->
    pick([var(), var(), var(), '$_', '$$', {self}, {node}, small_lit(), small_lit()]);
gen_expr(D) ->
    E = fun() -> gen_expr(D - 1) end,
    case rand:uniform(26) of
        1 -> {element, pick([1, 2, 3, E()]), E()};
        2 -> {map_get, E(), E()};
        3 -> {map_size, E()};
        4 -> {pick([hd, tl, length, size, tuple_size, byte_size, bit_size,
                    abs, float, round, trunc, 'bnot', '-', '+', node,
                    is_list]), E()};
        5 -> {binary_part, E(), E(), E()};
        6 -> {binary_part, E(), pick([0, 1]), pick([0, 1, 2])};
        7 -> {pick(['+', '-', '*', '/', 'div', 'rem', 'band', 'bor', 'bxor',
                    'bsl', 'bsr']), E(), E()};
        8 -> {const, gen_literal(2)};
        9 -> {gen_literal_tuple(E)};
        10 -> [E() | E()];
        11 -> [E(), E()];
        12 -> #{pick([k, 1]) => E()};
        13 -> gen_guard(D - 1);
        14 -> {'bsl', 1, pick([10, 64, 1000, 100000, E()])};
        15 -> {'*', {const, 1 bsl 100}, E()};
        16 -> {get_tcw};
        17 -> {self};
        18 -> deep_expr(rand:uniform(100));
        _ -> gen_expr(0)
    end.

gen_literal_tuple(E) ->
    list_to_tuple([E() || _ <- lists:seq(1, rand:uniform(3))]).

deep_expr(0) -> var();
deep_expr(N) -> {element, 1, {{deep_expr(N - 1)}}}.

small_lit() ->
    pick([0, 1, -1, 3, 255, 1 bsl 59, (1 bsl 59) - 1, 1 bsl 60, 1 bsl 64,
          -(1 bsl 100), 1.5, -0.0, 1.0e300, a, true, false, k, [], <<>>,
          <<"bin">>, "str"]).

gen_literal(0) -> small_lit();
gen_literal(D) ->
    case rand:uniform(10) of
        1 -> binary:copy(<<(rand:uniform(255))>>, pick([1, 65, 300, 5000]));
        2 -> 1 bsl rand:uniform(3000);
        3 -> list_to_tuple([gen_literal(D - 1) || _ <- lists:seq(1, rand:uniform(4))]);
        4 -> [gen_literal(D - 1) || _ <- lists:seq(1, rand:uniform(4))];
        5 -> deep_term(rand:uniform(300));
        6 -> #{gen_literal(0) => gen_literal(D - 1)};
        7 -> rand:uniform() * 1.0e10;
        8 -> <<1:(rand:uniform(20))>>;
        9 -> lists:seq(1, rand:uniform(500));
        _ -> small_lit()
    end.

deep_term(0) -> leaf;
deep_term(N) ->
    case chance(0.5) of
        true -> {deep_term(N - 1)};
        false -> [deep_term(N - 1)]
    end.

%% Body actions (D: how deep an argument's expressions go).
gen_action(D) ->
    case rand:uniform(3) of
        1 -> any_action(D);
        _ -> pick([{message, gen_expr(D)}, {return_trace}, {exception_trace},
                   {caller}, {caller_line}, {get_seq_token}, {get_tcw},
                   {message, {{var(), {caller_line}}}}, {process_dump},
                   {message, '$_'}, {message, '$$'}, {message, false}])
    end.

any_action(D) ->
    E = fun() -> gen_expr(D) end,
    case rand:uniform(32) of
        1 -> {message, E()};
        2 -> {message, pick([true, false, '$_', '$$', {{var(), {caller}}}])};
        3 -> {return_trace};
        4 -> {exception_trace};
        5 -> {caller};
        6 -> {caller_line};
        7 -> {process_dump};
        8 -> {display, pick([a, var(), {{x}}, 1])};
        9 -> {get_seq_token};
        10 -> {set_seq_token, seq_component(), seq_value(E)};
        11 -> {set_seq_token, label, seq_value(E)};
        12 -> {get_tcw};
        13 -> {set_tcw, pick([0, 1, 7, 1 bsl 70, -1, a, E()])};
        14 -> {silent, pick([true, false, E()])};
        15 -> {trace, trace_flags(), trace_flags()};
        16 -> {trace, pick([var(), {self}, E()]), trace_flags(), trace_flags()};
        17 -> {enable_trace, trace_flag()};
        18 -> {enable_trace, pick([var(), {self}, E()]), trace_flag()};
        19 -> {disable_trace, trace_flag()};
        20 -> {disable_trace, pick([var(), {self}]), trace_flag()};
        21 -> pick(['$_', '$$', var(), var()]);
        22 -> gen_literal(2);
        23 -> {message, {gen_action(0)}};
        24 -> {message, [gen_action(0), E()]};
        25 -> {{gen_action(0), E()}};
        26 -> {message, {{E(), {caller_line}, {process_dump}}}};
        27 -> {message, {const, gen_literal(3)}};
        28 -> {message, {'+', E(), {const, 1 bsl 200}}};
        29 -> {set_seq_token, pick([serial, label]), {{E(), E()}}};
        _ -> {message, E()}
    end.

seq_component() ->
    pick([label, serial, send, 'receive', print, timestamp,
          monotonic_timestamp, strict_monotonic_timestamp, prev_cnt,
          bogus]).

seq_value(E) ->
    pick([true, false, 0, 7, -1, 1 bsl 59, 1 bsl 60, 1 bsl 100, a, var(),
          '$_', '$$', {const, {1, 2}}, {{1, 2}}, {const, <<"label">>},
          {{a, b}}, {const, 1 bsl 70}, [1, 2], 1.5, E()]).

trace_flags() ->
    lists:usort([trace_flag() || _ <- lists:seq(1, rand:uniform(3) - 1)]).

trace_flag() ->
    pick([send, 'receive', call, procs, timestamp, return_to, arity,
          garbage_collection, running, silent, set_on_spawn, cpu_timestamp,
          bogus]).
