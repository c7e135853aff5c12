%%% @doc Fuzz/property tests of the Erlang input parsers:
%%% beamprobe_config:validate/1 (session specs) and beamprobe_pattern:parse/1
%%% (trace patterns).  Random and mutated inputs, from a generator seeded
%%% with `rand' (the seed is printed; BEAMPROBE_FUZZ_SEED=N repeats a run).
%%%
%%% Properties, for every input:
%%%   - the result is `{ok, _}' or `{error, _}': never an exception, never
%%%     another value;
%%%   - it returns within ?MAX_MS (each input runs in its own process);
%%%   - atoms are not leaked: parsing the same inputs a second time creates
%%%     no atom, and (patterns) one input creates no more atoms than it has
%%%     names in its text; (specs) a run over fresh random specs creates
%%%     at most a handful of atoms (specs are built from existing atoms).
%%%
%%% Validation has no side effect, so specs may name output directories:
%%% they all lie under a private temporary directory.
%%%
%%% Atoms are counted node-wide (erlang:system_info(atom_count)), so each
%%% property runs in a peer node of its own (no distribution: the
%%% standard_io connection) where nothing else runs: in the test's node an
%%% atom made by any other process meanwhile would count as a leak.
-module(beamprobe_fuzz_tests).

-include_lib("eunit/include/eunit.hrl").

-define(MAX_MS, 2000).
-define(N_SPECS, 3000).
-define(N_PATTERNS, 4000).

%%% ------------------------------------------------------------------------
%%% Tests
%%% ------------------------------------------------------------------------

-export([validate_fuzz/1, pattern_fuzz/1]).

validate_fuzz_test_() ->
    {timeout, 120, fun() -> check_validate(in_peer(validate_fuzz)) end}.

pattern_fuzz_test_() ->
    {timeout, 120, fun() -> check_pattern(in_peer(pattern_fuzz)) end}.

%% Runs ?MODULE:F(Seed) in a new peer node, returns its result.
in_peer(F) ->
    Seed = seed(),
    Paths = lists:usort([filename:dirname(code:which(M))
                         || M <- [beamprobe_config, ?MODULE,
                                  beamprobe_test_handler]]),
    {ok, Peer, _} = peer:start_link(
                      #{connection => standard_io,
                        args => lists:append([["-pa", P] || P <- Paths])}),
    try
        peer:call(Peer, ?MODULE, F, [Seed], 110000)
    after
        peer:stop(Peer)
    end.

check_validate(#{seed := Seed, runs := [R1, R2, R3],
                 atoms := [A0, A1, A2]}) ->
    report("validate/1", Seed, [R1, R2, R3]),
    %% (The figures in the reason: CI prints only its first terms.)
    ?assertEqual({same_specs_again_new_atoms, 0},
                 {same_specs_again_new_atoms, A1 - A0}),
    ?assert(A2 - A1 =< 20),
    ?assertEqual({seed, Seed, failures, []},
                 {seed, Seed, failures, distinct(failures([R1, R2, R3]))}).

check_pattern(#{seed := Seed, runs := [W, R1, R2], atoms := [A0, A1]}) ->
    report("parse/1", Seed, [W, R1, R2]),
    ?assertEqual({same_patterns_again_new_atoms, 0},
                 {same_patterns_again_new_atoms, A1 - A0}),
    ?assertEqual({seed, Seed, failures, []},
                 {seed, Seed, failures, distinct(failures([W, R1, R2]))}).

%% @doc In the peer (in_peer/1): the runs of the spec properties.
-spec validate_fuzz(pos_integer()) -> map().
validate_fuzz(Seed) ->
    Tmp = tmp_dir(),
    try
        Ctx = #{tmp => Tmp, dead => dead_pid()},
        Gen = fun() -> [gen_spec(Ctx) || _ <- lists:seq(1, ?N_SPECS)] end,
        _ = rand:seed(exsss, Seed),
        Specs = Gen(),
        %% First pass: loads modules and warms every code path.
        V = fun beamprobe_config:validate/1,
        R1 = run_all(V, Specs, fun ok_spec/1, fun(_) -> infinity end),
        A0 = erlang:system_info(atom_count),
        R2 = run_all(V, Specs, fun ok_spec/1, fun(_) -> 2 end),
        A1 = erlang:system_info(atom_count),
        _ = rand:seed(exsss, Seed + 1),
        Fresh = Gen(),
        R3 = run_all(V, Fresh, fun ok_spec/1, fun(_) -> 2 end),
        A2 = erlang:system_info(atom_count),
        #{seed => Seed, runs => [R1, R2, R3], atoms => [A0, A1, A2]}
    after
        del_tree(Tmp)
    end.

%% @doc In the peer (in_peer/1): the runs of the pattern properties.
-spec pattern_fuzz(pos_integer()) -> map().
pattern_fuzz(Seed) ->
    %% parse/1, and parse/2 with force => true (which accepts more).
    P = fun({Force, In}) -> beamprobe_pattern:parse(In, #{force => Force}) end,
    %% Warm-up on other inputs: loads the scanner, parser, error paths.
    _ = rand:seed(exsss, Seed + 1),
    %% Fixed inputs first, so the warm-up covers every construct whatever
    %% the seed (seed 170157 drew no binary: eval_bits, erl_bits and epp
    %% were then loaded by the first pass, 46 atoms, a false leak).
    Fixed = [{F, S} || F <- [false, true],
                       S <- ["lists:reverse(<<\"a\", 1:8>>)",
                             "m:f(#{k := V}, [H | T], {a, \"s\"}) when V > 1 -> return",
                             "m:f(X) when is_binary(X), byte_size(X) > 2",
                             "'Elixir.M':f(%{a: 1}, \"b\" <> _)",
                             "M.f(x) when x in [1, 2]", "m:f/1", "send", "receive",
                             "m:f(", "m:f(<<X/binary>>)", ":lists.reverse(x)",
                             ":send'receive'", "Shop.buy(%Shop.Order{a: 1})"]],
    %% ... and the modules any construct may load (a module's first load
    %% adds its atoms).
    [{module, _} = code:ensure_loaded(M)
     || M <- [beamprobe_pattern, beamprobe_pattern_elixir, beamprobe_pattern_ms,
              beamprobe_pattern_recon, io_lib_pretty, io_lib_format, eval_bits,
              erl_bits, epp, erl_scan, erl_parse, erl_eval]],
    W = run_all(P, Fixed ++ [{chance(0.3), gen_pattern()}
                             || _ <- lists:seq(1, ?N_PATTERNS div 4)],
                fun(_) -> true end, fun(_) -> infinity end),
    _ = rand:seed(exsss, Seed),
    Inputs = [{chance(0.3), gen_pattern()} || _ <- lists:seq(1, ?N_PATTERNS)],
    %% First pass: per-input atom bound.
    R1 = run_all(P, Inputs, fun ok_pattern/1, fun atom_bound/1),
    A0 = erlang:system_info(atom_count),
    R2 = run_all(P, Inputs, fun ok_pattern/1, fun(_) -> 2 end),
    A1 = erlang:system_info(atom_count),
    #{seed => Seed, runs => [W, R1, R2], atoms => [A0, A1]}.

%%% ------------------------------------------------------------------------
%%% Running inputs
%%% ------------------------------------------------------------------------

%% Each input in its own process: a crash, a hang or a bad return value is
%% a failure; atoms created by the call are measured around it.
run_all(F, Inputs, Check, Bound) ->
    lists:foldl(fun(In, {Fails, MaxMs}) ->
                        {Res, Ms} = run_one(F, In, Check, Bound),
                        {case Res of ok -> Fails; _ -> [Res | Fails] end,
                         max(Ms, MaxMs)}
                end, {[], 0}, Inputs).

run_one(F, In, Check, Bound) ->
    T0 = erlang:monotonic_time(microsecond),
    A0 = erlang:system_info(atom_count),
    {Pid, Ref} = spawn_monitor(fun() ->
                                       exit(try {result, F(In)}
                                            catch C:R:St -> {C, R, top(St)}
                                            end)
                               end),
    Res = receive
              {'DOWN', Ref, process, Pid, {result, R}} ->
                  case Check(R) of
                      true ->
                          Atoms = erlang:system_info(atom_count) - A0,
                          case Atoms =< Bound(In) of
                              true -> ok;
                              false -> {atom_leak, Atoms, In}
                          end;
                      false -> {bad_return, R, In}
                  end;
              {'DOWN', Ref, process, Pid, Reason} ->
                  {exception, short(Reason), In}
          after ?MAX_MS ->
                  exit(Pid, kill),
                  receive {'DOWN', Ref, process, Pid, _} -> ok end,
                  {timeout, ?MAX_MS, In}
          end,
    {Res, (erlang:monotonic_time(microsecond) - T0) div 1000}.

short({C, R, Top}) -> {{C, R}, Top};
short(Reason) -> Reason.

top([{M, F, A, Loc} | _]) -> {M, F, if is_list(A) -> length(A); true -> A end,
                             proplists:get_value(line, Loc)};
top(_) -> unknown.

ok_spec({ok, M}) -> is_map(M);
ok_spec({error, _}) -> true;
ok_spec(_) -> false.

ok_pattern({ok, M}) -> is_map(M);
ok_pattern({error, {Col, Msg}}) ->
    is_integer(Col) andalso Col >= 1 andalso io_lib:char_list(Msg);
ok_pattern(_) -> false.

%% Atoms an input may create: for a pattern, its names (one atom for each
%% name or quoted text, a few for an Elixir alias); none for a spec.
atom_bound({_Force, In}) -> atom_bound(In);
atom_bound(In) when is_list(In); is_binary(In) ->
    case catch unicode:characters_to_list(In) of
        S when is_list(S) ->
            Names = length(re_runs(S)),
            Quotes = length([C || C <- S, C =:= $' orelse C =:= $"]),
            3 * Names + Quotes + 2;
        _ -> 2
    end;
atom_bound(_) -> 2.

re_runs(S) ->
    case re:run(S, "[A-Za-z0-9_@.]+", [global, unicode]) of
        {match, L} -> L;
        nomatch -> []
    end.

failures(Runs) ->
    lists:append([Fs || {Fs, _} <- Runs]).

report(What, Seed, Runs) ->
    Fails = failures(Runs),
    MaxMs = lists:max([M || {_, M} <- Runs]),
    Kinds = lists:usort([kind(F) || F <- Fails]),
    io:format(user, "~n~s fuzz: seed ~p (BEAMPROBE_FUZZ_SEED=~p repeats), "
              "~p failures, slowest input ~p ms~n",
              [What, Seed, Seed, length(Fails), MaxMs]),
    [io:format(user, "  ~P~n", [first_of(K, Fails), 40]) || K <- Kinds],
    ok.

%% One failure of each kind, for the assertion's message.
distinct(Fails) ->
    [first_of(K, Fails) || K <- lists:usort([kind(F) || F <- Fails])].

kind({exception, {R, Top}, _}) -> {exception, reason_kind(R), Top};
kind({exception, R, _}) -> {exception, reason_kind(R)};
kind(F) -> element(1, F).

reason_kind(R) when is_tuple(R) -> element(1, R);
reason_kind(R) -> R.

first_of(K, Fails) ->
    hd([F || F <- lists:reverse(Fails), kind(F) =:= K]).

seed() ->
    case os:getenv("BEAMPROBE_FUZZ_SEED") of
        false -> erlang:phash2(erlang:monotonic_time()) rem 1000000 + 1;
        S -> list_to_integer(S)
    end.

%%% ------------------------------------------------------------------------
%%% Spec generator
%%% ------------------------------------------------------------------------

-define(KEYS, [procs, calls, return, exceptions, return_to, events, output,
               args, capture, buffer, overflow, limits, force, on_rate,
               meta, messages, tag]).

pick(L) -> lists:nth(rand:uniform(length(L)), L).
chance(P) -> rand:uniform() < P.

gen_spec(Ctx) ->
    case rand:uniform(20) of
        1 -> gen_term(3, Ctx);                       % not a map at all
        _ ->
            Keys = [K || K <- ?KEYS, chance(0.35)] ++
                [pick([unknown, 'Calls', foo, []]) || chance(0.05)],
            Base = #{calls => [{lists, seq, 2}]},
            M = maps:from_list([{K, gen_value(K, Ctx)} || K <- Keys]),
            Spec = maps:merge(Base, M),
            %% Most specs name an output under the private directory (the
            %% default is the current directory).
            case maps:is_key(output, Spec) orelse chance(0.1) of
                true -> Spec;
                false -> Spec#{output => {file, fresh_dir(Ctx)}}
            end
    end.

gen_value(K, Ctx) ->
    case rand:uniform(10) of
        1 -> gen_term(3, Ctx);
        2 -> mutate_term(good_value(K, Ctx), Ctx);
        _ -> good_value(K, Ctx)
    end.

good_value(procs, Ctx) ->
    pick([all, new, existing, [self()], [self(), kernel_sup], [],
          [maps:get(dead, Ctx)], [no_such_registered_name], [erl_prim_loader],
          [self() | self()], [{self()}]]);
good_value(calls, _) ->
    pick([[{lists, seq, 2}], [{lists, '_', '_'}], [{lists, seq, '_'}],
          [{'_', '_', '_'}], [{lists, '_', 2}], [{lists, seq, 256}],
          [{no_such_module_zz, f, 1}], [{lists, no_such_fun_zz, 1}],
          [{{lists, seq, 2}, true}], [{{lists, seq, 2}, [{'_', [], []}]}],
          [{{lists, seq, 2}, maybe}], [{lists, seq, -1}],
          [{lists, seq, 2} | {lists, seq, 3}], [{"lists", seq, 2}],
          [{ets, lookup, 2}, {lists, reverse, 1}]]);
good_value(K, _) when K =:= return; K =:= exceptions; K =:= return_to;
                      K =:= meta; K =:= force ->
    pick([true, false, yes, 1, "true"]);
good_value(events, _) ->
    pick([[], [call], [send, 'receive'], [procs, running, gc, ports],
          [call | send], [nope], call]);
good_value(output, Ctx) ->
    D = fresh_dir(Ctx),
    pick([{file, D}, {file, list_to_binary(D)}, {file, D, #{}},
          {file, D, #{events => [call]}}, {file, D, #{events => all}},
          {file, D, #{bogus => 1}},
          {file, <<(list_to_binary(D))/binary, 255, 254>>},
          {file, D ++ [16#10FFFF]}, {file, ""}, {file, "/"},
          {file, "/proc/self/no/such/dir"}, {file, [$a | b]},
          {file, D ++ [0]}, {file, 'atom_dir'}, {file, 123},
          [{file, D}, {file, fresh_dir(Ctx)}],
          {handler, beamprobe_test_handler, self()},
          {handler, beamprobe_test_handler, x, #{batch => 10, credits => 2}},
          {handler, beamprobe_test_handler, x, #{batch => 0}},
          {handler, beamprobe_test_handler, x, #{procs => [self()]}},
          {handler, beamprobe_test_handler, x, #{events => [bogus]}},
          {handler, lists, x}, {handler, no_such_module_zz, x},
          {handler, "mod", x}, [], [{file, D} | {file, D}], D]);
good_value(args, _) -> pick([none, arity, full, half]);
good_value(capture, _) ->
    pick([#{}, #{depth => 1}, #{depth => 0}, #{list => 4096},
          #{binary => 65537}, #{bytes => 15}, #{bytes => 1.5},
          #{depth => 64, list => 1, binary => 0, bytes => 65536},
          #{other => 1}]);
good_value(buffer, _) ->
    pick([16384, 16383, 8 * 1024 * 1024, 1 bsl 32, (1 bsl 32) + 1, 0, -1,
          1 bsl 70, 1.0e6]);
good_value(overflow, _) -> pick([drop_newest, drop_oldest, stop, drop]);
good_value(limits, _) ->
    pick([#{}, #{events => 10}, #{events => 0}, #{bytes => infinity},
          #{seconds => 0.001}, #{seconds => 0}, #{seconds => -1},
          #{rate => {10, 1000}}, #{rate => {0, 1}}, #{rate => {1, 0, 0}},
          #{rate => infinity}, #{time => {}}, #{seconds => 1.0e308}]);
good_value(on_rate, _) -> pick([drop, stop, ignore]);
good_value(messages, _) ->
    pick([[], [{send, true}], [{'receive', []}], [{send, [{'_', [], []}]}],
          [{send, maybe}], [send], [{send, true} | x]]);
good_value(_, Ctx) -> gen_term(3, Ctx).             % tag, unknown keys

%% A random term: atoms from existing ones only, odd numbers, invalid
%% UTF-8, improper and deep lists, pids (live and dead), refs, funs.
gen_term(0, Ctx) -> leaf(Ctx);
gen_term(D, Ctx) ->
    case rand:uniform(8) of
        1 -> list_to_tuple([gen_term(D - 1, Ctx) || _ <- lists:seq(1, rand:uniform(4) - 1)]);
        2 -> [gen_term(D - 1, Ctx) || _ <- lists:seq(1, rand:uniform(4) - 1)];
        3 -> [gen_term(D - 1, Ctx) | gen_term(D - 1, Ctx)];
        4 -> maps:from_list([{gen_term(D - 1, Ctx), gen_term(D - 1, Ctx)}
                             || _ <- lists:seq(1, rand:uniform(3))]);
        _ -> leaf(Ctx)
    end.

leaf(Ctx) ->
    case rand:uniform(12) of
        1 -> pick([true, false, undefined, infinity, all, '_', '', 'Elixir.Foo',
                   lists, file, handler, call, send, 'receive']);
        2 -> rand:uniform(1 bsl 20) - (1 bsl 19);
        3 -> pick([0, -1, 1 bsl 64, -(1 bsl 64), 1 bsl 200, 255, 256]);
        4 -> pick([0.0, -0.0, 1.5, 1.0e300, -1.0e-300]);
        5 -> rand:bytes(rand:uniform(8) - 1);
        6 -> <<255, 0, 192, 128>>;
        7 -> pick(["", "abc", [0], [16#10FFFF], [-1], [16#110000]]);
        8 -> self();
        9 -> maps:get(dead, Ctx);
        10 -> make_ref();
        11 -> fun() -> ok end;
        _ -> {}
    end.

mutate_term(T, Ctx) when is_map(T), map_size(T) > 0 ->
    [K | _] = maps:keys(T),
    pick([T#{K => gen_term(2, Ctx)}, maps:remove(K, T), T#{gen_term(1, Ctx) => 1}]);
mutate_term(T, Ctx) when is_tuple(T), tuple_size(T) > 0 ->
    I = rand:uniform(tuple_size(T)),
    pick([setelement(I, T, gen_term(2, Ctx)), erlang:delete_element(I, T),
          erlang:append_element(T, gen_term(1, Ctx))]);
mutate_term([H | T], Ctx) when is_list(T) ->
    pick([[mutate_term(H, Ctx) | T], T, [H | gen_term(1, Ctx)], [H, H | T]]);
mutate_term(_, Ctx) -> gen_term(2, Ctx).

fresh_dir(#{tmp := Tmp}) ->
    filename:join(Tmp, "out-" ++ integer_to_list(rand:uniform(1 bsl 30))).

%%% ------------------------------------------------------------------------
%%% Pattern generator
%%% ------------------------------------------------------------------------

templates() ->
    ["lists", "lists:seq", "lists:seq/2", "lists:seq/_", "lists:_",
     "lists:'_'", "lists:seq(A, B) when A > B -> return",
     "lists:seq(1, _) -> return;stack", "lists:seq(A, A) -> caller",
     "ets:lookup(T, hostname) when is_integer(T) -> stack",
     "lists:reverse(\"prefix\" ++ Rest)", "lists:reverse([a | _])",
     "lists:reverse({x, <<\"bin\">>, #{k := V}})",
     "lists:seq(X) when X > 10; X < 0", "lists:map(F, L) when is_function(F, 1)",
     "lists:nth(N, L) when N =:= length(L) andalso hd(L) =/= 0",
     "'Elixir.Foo':bar/1", "send", "send({ping, _})",
     "send(To, Msg) when is_atom(To)", "'receive'", "receive",
     "'receive'(X) when is_atom(X)", "'receive'(Node, From, Msg)",
     "Foo.Bar.baz(x, :ok, \"bin\", 'chars')", "Mod.fun/2", ":ets.lookup/2",
     "Mod.fun(a, b) when a > 1 and is_list(b) :: return;stack",
     "Mod.fun(%{k: v, \"s\" => _}, [h | _])", ":send", ":receive",
     ":send({:ping, _})", "lists:seq(-1, 1.5e3, $a, 'x y')",
     "lists:seq(#rec{a = 1})", "lists:seq(<<X:8>>)", "_", "_:_",
     "io:format/2", "beamprobe:start/1", "lists:seq/256", "lists:seq/-1",
     "lists:seq(A) when element(1, A) == x orelse map_get(k, A) -> return",
     "Enum.map(l, f) when is_nil(l) or l != [] :: caller"].

gen_pattern() ->
    S = case rand:uniform(10) of
            1 -> token_soup();
            2 -> pick(templates()) ++ pick(templates());
            _ -> mutate_str(pick(templates()), rand:uniform(4))
        end,
    case rand:uniform(12) of
        1 -> unicode:characters_to_binary(S);
        2 -> <<(unicode:characters_to_binary(S))/binary, 255>>;
        3 -> pick([[$a | b], [lists, $:], 42, lists, [[$l, "ists"], ":seq"],
                   [16#110000], [-1], <<>>, "", {"lists"}]);
        _ -> S
    end.

token_soup() ->
    Toks = ["lists", ":", "seq", "/", "2", "(", ")", "[", "]", "{", "}",
            "<<", ">>", ",", ";", "->", "::", "when", "A", "_", "|", "++",
            "#{", "=>", ":=", "return", "stack", "caller", "\"s\"", "'q'",
            "Foo", ".", "%{", "and", "not", "$x", "1.0e400", "1e", "#",
            "fun", "end", "\n", " ", "%", "\\", "..."],
    lists:append([pick(Toks) || _ <- lists:seq(1, rand:uniform(12))]).

-define(CHARS, "()[]{}<>,;:/|-=.#%&!~^*+\"'$ _\\\n\t0123456789" ++
        [0, 7, 127, 16#E9, 16#3B1, 16#1F600, 16#FEFF, 16#10FFFF]).

mutate_str(S, 0) -> S;
mutate_str(S, N) ->
    Len = length(S),
    I = rand:uniform(Len + 1) - 1,
    {A, B} = lists:split(I, S),
    S1 = case rand:uniform(6) of
             1 -> A;                                   % truncate
             2 -> A ++ safe_tl(B);                     % delete a char
             3 -> A ++ [pick(?CHARS)] ++ B;            % insert a char
             4 -> A ++ [pick(?CHARS)] ++ safe_tl(B);   % replace a char
             5 -> A ++ A ++ B;                         % duplicate a prefix
             _ -> A ++ lists:duplicate(rand:uniform(40), pick("([{<")) ++ B
         end,
    mutate_str(S1, N - 1).

safe_tl([]) -> [];
safe_tl([_ | T]) -> T.

%%% ------------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------------

dead_pid() ->
    {P, Ref} = spawn_monitor(fun() -> ok end),
    receive {'DOWN', Ref, process, P, _} -> P end.

tmp_dir() ->
    Root = case os:getenv("TMPDIR") of
               false -> "/tmp";
               "" -> "/tmp";
               T -> T
           end,
    D = filename:join(Root, "beamprobe_fuzz_tests-" ++ os:getpid() ++ "-" ++
                          integer_to_list(erlang:unique_integer([positive]))),
    ok = file:make_dir(D),
    D.

del_tree(Path) ->
    case file:read_link_info(Path) of
        {ok, {file_info, _, directory, _, _, _, _, _, _, _, _, _, _, _}} ->
            {ok, Fs} = file:list_dir_all(Path),
            [del_tree(filename:join(Path, F)) || F <- Fs],
            file:del_dir(Path);
        {ok, _} -> file:delete(Path);
        {error, _} -> ok
    end.
