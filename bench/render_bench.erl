%%% @doc The term renderer alone (bench/render_bench.c): ns per rendered
%%% argument list, for the large argument of the kinds bench and each of
%%% its parts, with the default capture limits.  `make bench` part
%%% `render'; `smoke' runs it with tiny counts (CI).  In a tracer the same
%%% render costs more: between two events the VM's own work evicts the
%%% term and the renderer's tables from the core's caches
%%% (docs/performance.md).
%%%
%%% Next to each render: the deferred-rendering prototype of stop 37
%%% (bench/bp_snap.c, docs/performance/stop-37.md): ns to write the
%%% snapshot (the traced thread's part), its size, ns to render the text
%%% from it (a collector's part), and whether that text is the
%%% renderer's, byte for byte.  `verify' checks that on tricky terms under
%%% several capture limits.
-module(render_bench).
-export([main/0, main/1, run/3, snap/3]).
-on_load(load/0).

load() ->
    Dir = filename:dirname(code:which(?MODULE)),
    erlang:load_nif(filename:join(Dir, "render_bench"), 0).

%% @doc {NsPerRender, Text} of N renders of the argument list Args.
-spec run(list(), map(), pos_integer()) -> {float(), binary()}.
run(_Args, _Capture, _N) -> erlang:nif_error(not_loaded).

%% @doc {SnapNs, SnapBytes, RenderFromSnapNs, Text} of N snapshots of
%% Args and N renders of the text from one (bench/bp_snap.c).
-spec snap(list(), map(), pos_integer()) ->
          {float(), non_neg_integer(), float(), binary()}.
snap(_Args, _Capture, _N) -> erlang:nif_error(not_loaded).

-spec main() -> no_return().
main() -> main([]).

%% @doc Prints one line per term: ns per render (best of 5 runs) and the
%% text; then halts.
-spec main([atom() | string()]) -> no_return().
main(Args) ->
    case lists:member(verify, Args) orelse lists:member("verify", Args) of
        true -> verify();
        false -> ok
    end,
    Smoke = lists:member(smoke, Args) orelse lists:member("smoke", Args),
    N = case Smoke of true -> 100; false -> 200000 end,
    Cap = #{depth => 4, list => 16, binary => 64, bytes => 512},
    Large = {lists:seq(1, 100), list_to_binary(lists:duplicate(1024, $x)),
             #{a => 1, b => "a string", c => [{x, y}, {z, 1.5}]}},
    Terms = [{"large argument (kinds bench)", Large},
             {"  100-element list (16 shown)", element(1, Large)},
             {"  1 KiB binary (64 bytes shown)", element(2, Large)},
             {"  the map", element(3, Large)},
             {"  \"a string\"", "a string"},
             {"  [{x,y},{z,1.5}]", [{x, y}, {z, 1.5}]},
             {"  1.5", 1.5},
             {"small argument 42", 42},
             {"a pid", self()},
             {"a spawn's arguments [Fun, []]", [fun() -> ok end, []]},
             {"the atom normal", normal},
             {"a float with 17 digits", 0.1 + 0.2}],
    io:format("== the term renderer alone: ns per rendered argument list "
              "(best of 5 runs of ~p), default capture; then the snapshot "
              "of stop 37: ns to write it, its bytes, ns to render from it, "
              "text identical ==~n", [N]),
    Res = [begin
               {Ns, Text} = lists:min([run([T], Cap, N) || _ <- lists:seq(1, 5)]),
               Ss = [snap([T], Cap, N) || _ <- lists:seq(1, 5)],
               {SNs, SBytes, _, SText} = lists:min(Ss),
               RNs = lists:min([R || {_, _, R, _} <- Ss]),
               io:format("~-34s ~8.1f  snap ~6.1f ~4w B  from snap ~6.1f  ~s  ~s~n",
                         [Label, Ns, SNs, SBytes, RNs,
                          case SText of Text -> same; _ -> 'DIFFERENT' end,
                          Text]),
               Ns > 0 andalso byte_size(Text) > 2 andalso SText =:= Text
           end || {Label, T} <- Terms],
    Failed = length([R || R <- Res, R =/= true]),
    _ = Smoke andalso io:format("bench smoke part: ~p passed, ~p failed~n",
                                [length(Res) - Failed, Failed]),
    halt(case Smoke andalso Failed > 0 of true -> 1; false -> 0 end).

%% Snapshot text against the renderer's on tricky terms and limits;
%% prints the differences and a count.
verify() ->
    Caps = [#{depth => D, list => L, binary => B, bytes => By}
            || {D, L, B, By} <- [{4, 16, 64, 512}, {2, 3, 5, 40}, {1, 1, 1, 16},
                                 {3, 2, 100, 60}, {6, 40, 8, 300},
                                 {4, 16, 64, 17}, {4, 16, 64, 23}]],
    Ref = make_ref(),
    Bin = <<1:3, "abc\n\"x", 200, 0:5>>,
    Terms =
        [[], [a], [1, 2], "abc", "ab\"c\\\n\t\e\x7f", lists:seq(1, 100),
         lists:seq(60, 130), lists:duplicate(70, $x), lists:duplicate(300, $y),
         [$a, $b | c], [$a, $b, 256], [$a | $b], [1 | 2], [[]],
         lists:duplicate(20, $q) ++ [foo], [-1, 300, 1 bsl 59, -(1 bsl 59)],
         {}, {a}, {a, {b, {c, {d, {e}}}}}, list_to_tuple(lists:seq(1, 30)),
         #{}, #{a => 1}, maps:from_list([{I, I} || I <- lists:seq(1, 40)]),
         <<>>, <<"hello">>, <<"é">>, <<1, 2, 3>>, <<1:1>>, Bin,
         binary:part(<<0, "0123456789abcdef">>, 1, 16),
         list_to_binary(lists:duplicate(1024, $x)), <<"a\"b\\c", 10>>,
         1.5, 0.1 + 0.2, -0.0, 1.0e300, 123, -123, 1 bsl 59, 1 bsl 60,
         -(1 bsl 63), 1 bsl 64, -(1 bsl 100), 1 bsl 2000, -(1 bsl 5000),
         normal, 'Elixir.Foo', 'a b', 'receive', '', 'été', '\x{20AC}',
         self(), Ref, fun() -> ok end, fun lists:map/2, make_ref(),
         {self(), [self(), normal], #{self() => Ref}},
         {lists:seq(1, 100), list_to_binary(lists:duplicate(1024, $x)),
          #{a => 1, b => "a string", c => [{x, y}, {z, 1.5}]}}],
    rand:seed(exsss, {37, 37, 37}),
    Args = [[T] || T <- Terms] ++ [[T, T, T] || T <- Terms] ++
        [lists:duplicate(20, a), [a | b], [a, b | c]] ++
        [[random_term(5) || _ <- lists:seq(1, rand:uniform(4))]
         || _ <- lists:seq(1, 1500)],
    Bad = [{A, C, Text, SText}
           || C <- Caps, A <- Args ++ [[1, 2, 3], []],
              {_, Text} <- [run(A, C, 1)],
              {_, _, _, SText} <- [snap(A, C, 1)], SText =/= Text],
    [io:format("DIFFERENT ~0P ~0p:~n  render ~s~n  snap   ~s~n", [A, 20, C, T, S])
     || {A, C, T, S} <- Bad],
    io:format("verify: ~p argument lists x ~p capture limits, ~p different~n",
              [length(Args) + 2, length(Caps), length(Bad)]),
    halt(case Bad of [] -> 0; _ -> 1 end).

%% A random term of nesting depth at most D, of the kinds arguments hold.
random_term(D) ->
    case rand:uniform(case D of 0 -> 8; _ -> 14 end) of
        1 -> rand:uniform(300) - 20;
        2 -> rand:uniform() * 1000 - 500;
        3 -> lists:nth(rand:uniform(6), [ok, 'B', 'a b', 'if', 'é', x]);
        4 -> [rand:uniform(140) - 1 || _ <- lists:seq(1, rand:uniform(80) - 1)];
        5 -> << <<(rand:uniform(256) - 1)>> || _ <- lists:seq(1, rand:uniform(90) - 1) >>;
        6 -> list_to_binary([32 + rand:uniform(94) || _ <- lists:seq(1, rand:uniform(90))]);
        7 -> lists:duplicate(rand:uniform(100), $a + rand:uniform(3));
        8 -> <<(rand:uniform(1000)):(rand:uniform(20))>>;
        9 -> [random_term(D - 1) || _ <- lists:seq(1, rand:uniform(20) - 1)];
        10 -> list_to_tuple([random_term(D - 1) || _ <- lists:seq(1, rand:uniform(20) - 1)]);
        11 -> maps:from_list([{random_term(0), random_term(D - 1)}
                              || _ <- lists:seq(1, rand:uniform(40) - 1)]);
        12 -> [random_term(D - 1) | random_term(D - 1)];
        13 -> lists:seq(1, rand:uniform(30)) ++ [random_term(D - 1)];
        14 -> {self(), 1 bsl (60 + rand:uniform(100))}
    end.
