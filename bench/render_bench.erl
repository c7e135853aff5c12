%%% @doc The term renderer alone (bench/render_bench.c): ns per rendered
%%% argument list, for the large argument of the kinds bench and each of
%%% its parts, with the default capture limits.  `make bench` part
%%% `render'; `smoke' runs it with tiny counts (CI).  In a tracer the same
%%% render costs more: between two events the VM's own work evicts the
%%% term and the renderer's tables from the core's caches
%%% (docs/performance.md).
-module(render_bench).
-export([main/0, main/1, run/3]).
-on_load(load/0).

load() ->
    Dir = filename:dirname(code:which(?MODULE)),
    erlang:load_nif(filename:join(Dir, "render_bench"), 0).

%% @doc {NsPerRender, Text} of N renders of the argument list Args.
-spec run(list(), map(), pos_integer()) -> {float(), binary()}.
run(_Args, _Capture, _N) -> erlang:nif_error(not_loaded).

-spec main() -> no_return().
main() -> main([]).

%% @doc Prints one line per term: ns per render (best of 5 runs) and the
%% text; then halts.
-spec main([atom() | string()]) -> no_return().
main(Args) ->
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
              "(best of 5 runs of ~p), default capture ==~n", [N]),
    Res = [begin
               {Ns, Text} = lists:min([run([T], Cap, N) || _ <- lists:seq(1, 5)]),
               io:format("~-34s ~8.1f  ~s~n", [Label, Ns, Text]),
               Ns > 0 andalso byte_size(Text) > 2
           end || {Label, T} <- Terms],
    Failed = length([R || R <- Res, R =/= true]),
    _ = Smoke andalso io:format("bench smoke part: ~p passed, ~p failed~n",
                                [length(Res) - Failed, Failed]),
    halt(case Smoke andalso Failed > 0 of true -> 1; false -> 0 end).
