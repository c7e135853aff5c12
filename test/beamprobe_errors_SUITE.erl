%%% @doc End-to-end tests of beamprobe's input validation: bad options,
%%% bad outputs and bad patterns are refused with a readable error and
%%% install nothing; processes traced by another tracer are refused unless
%%% forced.
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_errors_SUITE -logdir _build/ct_logs
%%%
%%% Each case traces only processes it spawned (procs => [Pid, ...]) or new
%%% ones (procs => new), writes into its own directory under priv_dir and
%%% leaves no session behind (end_per_testcase stops any).  The helpers
%%% shared with the other suites are in beamprobe_test_lib.
-module(beamprobe_errors_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([bad_message_pattern_undone/1, bad_match_spec_next_to_another/1]).
-export([bad_options/1, bad_output/1, bad_patterns/1,
         already_traced_pid/1, already_traced_new/1]).

-define(W, beamprobe_workload).
-define(L, beamprobe_test_lib).

-import(beamprobe_test_lib,
        [dir/2, start/1, stop/1, trace/1, one/3, assert_field/3,
         dead_pid/0, wait_dead/1, total/1, dropped/2, remote_pid/0,
         call_args_int/1]).

%%% ------------------------------------------------------------------------
%%% Setup
%%% ------------------------------------------------------------------------

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, errors}].

groups() ->
    [{errors, [], [bad_options, bad_output, bad_patterns,
                   bad_message_pattern_undone, bad_match_spec_next_to_another,
                   already_traced_pid, already_traced_new]}].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, ?W} = code:ensure_loaded(?W),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    %% Every case starts from a node with no session and no trace state,
    %% and writes under its own directory.
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    %% Stops any session; do not let a failed case (or a bug) leave trace
    %% state for the next.
    ?L:clear_trace_state().

%%% 6, 7. Bad input installs nothing
%%% ------------------------------------------------------------------------

%% Starts Spec (with an output dir added when it has none), expects
%% {error, Expected} (or a reason for which the fun Expected returns true)
%% and checks that nothing was installed or created.  Every problem is
%% collected, then the case fails naming them all.
expect_error(Config, Name, Spec0, Expected) ->
    Spec = case is_map(Spec0) andalso not maps:is_key(output, Spec0) of
               true -> Spec0#{output => {file, dir(Config, Name)}};
               false -> Spec0
           end,
    OutDir = case Spec of
                 #{output := {file, D}} when is_list(D) -> D;
                 _ -> dir(Config, Name)
             end,
    Before = listing(OutDir),
    Result = beamprobe:start(Spec),
    ResultOk = case Expected of
                   F when is_function(F, 1) -> (catch F(Result)) =:= true;
                   _ -> Result =:= {error, Expected}
               end,
    Text = case Result of
               {error, Reason} -> beamprobe:format_error(Reason);
               _ -> ""
           end,
    ct:log("~s: ~p~n    ~s", [Name, Result, Text]),
    MFAs = case Spec of
               #{calls := L} when is_list(L) -> [X || {_, _, _} = X <- L];
               _ -> []
           end,
    Leftover = [{MFA, erlang:trace_info(MFA, all)}
                || MFA <- lists:append([expand(X) || X <- [{?W, '_', '_'}
                                                           | MFAs]]),
                   not ?L:no_pattern(MFA)],
    Problems =
        [{result, Result, expected, Expected} || not ResultOk] ++
        [{format_error, Text} || not (io_lib:char_list(Text)
                                      andalso Text =/= "")] ++
        [{sessions_left, beamprobe:list()} || beamprobe:list() =/= []] ++
        [{flags_left, self(), erlang:trace_info(self(), flags)}
         || erlang:trace_info(self(), flags) =/= {flags, []}] ++
        [{new_flags_left, erlang:trace_info(new, flags)}
         || erlang:trace_info(new, flags) =/= {flags, []}] ++
        [{patterns_left, Leftover} || Leftover =/= []] ++
        [{output_changed, OutDir, Before, listing(OutDir)}
         || listing(OutDir) =/= Before],
    case Problems of
        [] -> element(2, Result);
        _ -> ct:fail({Name, Problems})
    end.

listing(Dir) ->
    case file:list_dir(Dir) of
        {ok, Files} -> {dir, lists:sort(Files)};
        {error, R} -> R
    end.

expand({M, F, A}) when is_atom(M), M =/= '_', is_atom(F) ->
    case code:is_loaded(M) of
        false -> [];
        _ -> [{M, Fn, Ar} || {Fn, Ar} <- M:module_info(functions),
                             F =:= '_' orelse F =:= Fn,
                             A =:= '_' orelse A =:= Ar]
    end;
expand(_) -> [].

bad_options(Config) ->
    Add = [{?W, add, 2}],
    Dead = dead_pid(),
    Remote = remote_pid(),
    Cases =
        [{"not_a_map", [calls], {bad_spec, [calls], "a map is expected"}},
         {"unknown", #{calls => Add, colour => blue},
          {unknown_option, colour}},
         {"procs_atom", #{calls => Add, procs => everything},
          {bad_option, procs, everything}},
         {"procs_empty", #{calls => Add, procs => []},
          {bad_option, procs, []}},
         {"procs_string", #{calls => Add, procs => [self(), "x"]},
          {bad_option, procs, "x"}},
         {"procs_dead", #{calls => Add, procs => [self(), Dead]},
          {dead_process, Dead}},
         {"procs_remote", #{calls => Add, procs => [Remote]},
          {remote_process, Remote}},
         {"procs_name", #{calls => Add, procs => [beamprobe_no_such_name]},
          {no_such_process, beamprobe_no_such_name}},
         {"calls_atom", #{calls => add}, {bad_option, calls, add}},
         {"calls_tuple", #{calls => [{?W, add}]},
          {bad_option, calls, {?W, add}}},
         {"calls_arity", #{calls => [{?W, add, 256}]},
          {bad_option, calls, {?W, add, 256}}},
         {"calls_neg", #{calls => [{?W, add, -1}]},
          {bad_option, calls, {?W, add, -1}}},
         {"calls_string", #{calls => [{"lists", seq, 2}]},
          {bad_option, calls, {"lists", seq, 2}}},
         {"no_module", #{calls => [{beamprobe_no_such_module, f, 1}]},
          {no_such_module, beamprobe_no_such_module}},
         {"no_function", #{calls => [{?W, no_such_function, 1}]},
          {no_such_function, {?W, no_such_function, 1}}},
         {"wrong_arity", #{calls => [{?W, add, 3}]},
          {no_such_function, {?W, add, 3}}},
         {"force_all", #{calls => [{'_', '_', '_'}]},
          {force_required, {'_', '_', '_'}}},
         {"force_fn", #{calls => [{'_', add, 2}]},
          {force_required, {'_', add, 2}}},
         {"return", #{calls => Add, return => yes},
          {bad_option, return, yes}},
         {"exceptions", #{calls => Add, exceptions => 1},
          {bad_option, exceptions, 1}},
         {"return_to", #{calls => Add, return_to => "true"},
          {bad_option, return_to, "true"}},
         {"events_atom", #{events => send}, {bad_option, events, send}},
         {"events_bad", #{events => [send, bogus]},
          {bad_option, events, bogus}},
         {"args", #{calls => Add, args => some},
          {bad_option, args, some}},
         {"capture_atom", #{calls => Add, capture => big},
          {bad_option, capture, big}},
         {"capture_key", #{calls => Add, capture => #{colour => 1}},
          {unknown_option, {capture, colour}}},
         {"capture_depth", #{calls => Add, capture => #{depth => 0}},
          {bad_option, {capture, depth}, 0}},
         {"capture_list", #{calls => Add, capture => #{list => 4097}},
          {bad_option, {capture, list}, 4097}},
         {"capture_binary", #{calls => Add, capture => #{binary => -1}},
          {bad_option, {capture, binary}, -1}},
         {"capture_bytes", #{calls => Add, capture => #{bytes => 15}},
          {bad_option, {capture, bytes}, 15}},
         {"buffer_small", #{calls => Add, buffer => 16383},
          {bad_option, buffer, 16383}},
         {"buffer_big", #{calls => Add, buffer => (1 bsl 32) + 1},
          {bad_option, buffer, (1 bsl 32) + 1}},
         {"buffer_float", #{calls => Add, buffer => 65536.0},
          {bad_option, buffer, 65536.0}},
         {"overflow", #{calls => Add, overflow => drop_all},
          {bad_option, overflow, drop_all}},
         {"limits_atom", #{calls => Add, limits => none},
          {bad_option, limits, none}},
         {"limits_key", #{calls => Add, limits => #{calls => 1}},
          {unknown_option, {limits, calls}}},
         {"limits_events", #{calls => Add, limits => #{events => 0}},
          {bad_option, {limits, events}, 0}},
         {"limits_events_float", #{calls => Add, limits => #{events => 1.5}},
          {bad_option, {limits, events}, 1.5}},
         {"limits_bytes", #{calls => Add, limits => #{bytes => -5}},
          {bad_option, {limits, bytes}, -5}},
         {"limits_seconds", #{calls => Add, limits => #{seconds => 0}},
          {bad_option, {limits, seconds}, 0}},
         {"force", #{calls => Add, force => 1}, {bad_option, force, 1}},
         {"output_atom", #{calls => Add, output => stdout},
          {bad_option, output, stdout}},
         {"output_int", #{calls => Add, output => {file, 42}},
          {bad_option, output, {file, 42}}},
         {"nothing", #{}, fun({error, {nothing_to_trace, H}}) ->
                                  io_lib:char_list(H)
                          end},
         {"nothing_pids", #{procs => [self()], calls => [], events => []},
          fun({error, {nothing_to_trace, _}}) -> true end}],
    [expect_error(Config, Name, Spec, Exp) || {Name, Spec, Exp} <- Cases],
    ok.

bad_output(Config) ->
    Add = [{?W, add, 2}],
    Priv = ?config(case_dir, Config),
    %% Under /proc: nothing can be created there.
    R1 = expect_error(Config, "proc", #{calls => Add,
                                        output => {file, "/proc/beamprobe_x"}},
                      fun({error, {unwritable, "/proc/beamprobe_x", _}}) -> true
                      end),
    ct:log("~p", [R1]),
    ?assertNot(filelib:is_dir("/proc/beamprobe_x")),
    %% Under a regular file.
    File = filename:join(Priv, "a_file"),
    ok = file:write_file(File, <<"x">>),
    Sub = filename:join(File, "trace"),
    expect_error(Config, "under_file", #{calls => Add, output => {file, Sub}},
                 {unwritable, Sub, enotdir}),
    %% The output is a regular file.
    expect_error(Config, "is_file", #{calls => Add, output => {file, File}},
                 fun({error, {unwritable, F, _}}) -> F =:= File end),
    %% The parent does not exist.
    NoParent = filename:join([Priv, "no_such_parent", "trace"]),
    expect_error(Config, "no_parent", #{calls => Add,
                                        output => {file, NoParent}},
                 {unwritable, NoParent, enoent}),
    ?assertNot(filelib:is_dir(filename:dirname(NoParent))),
    %% A directory that is not empty: left as it was.
    Full = filename:join(Priv, "full"),
    ok = file:make_dir(Full),
    ok = file:write_file(filename:join(Full, "keep"), <<"keep">>),
    expect_error(Config, "full", #{calls => Add, output => {file, Full}},
                 {output_exists, Full}),
    ?assertEqual({ok, ["keep"]}, file:list_dir(Full)),
    ?assertEqual({ok, <<"keep">>}, file:read_file(filename:join(Full, "keep"))),
    %% A relative path is made absolute in the error.
    {ok, Cwd} = file:get_cwd(),
    expect_error(Config, "relative",
                 #{calls => Add,
                   output => {file, "beamprobe_no_such_dir/x/y"}},
                 {unwritable, filename:join(Cwd, "beamprobe_no_such_dir/x/y"),
                  enoent}),
    %% An empty existing directory is accepted.
    Empty = filename:join(Priv, "empty"),
    ok = file:make_dir(Empty),
    S = start(#{calls => Add, procs => [self()], output => {file, Empty}}),
    _ = stop(S),
    _ = trace(Empty),
    ok.

%% A pattern that matches nothing is refused, and nothing stays installed
%% (in particular not a pattern set before it, nor the directory).
%% erlang:trace_pattern/3 takes '_' only in the forms {M, F, '_'},
%% {M, '_', '_'} and {'_', '_', '_'}: {zlib, '_', 200} ("every function of
%% arity 200": there is none) must give {error, {no_match, MFA}} or
%% {error, {bad_option, calls, MFA}}, never a crashed session.
bad_patterns(Config) ->
    W = ?W:start_worker(),
    Refused = fun(MFA) ->
                      fun({error, {no_match, X}}) -> X =:= MFA;
                         ({error, {bad_option, calls, X}}) -> X =:= MFA
                      end
              end,
    %% {lists, seq, 2} sorts before {zlib, '_', 200}: it is set first.
    R1 = expect_error(Config, "no_match",
                      #{procs => [W], calls => [{lists, seq, 2},
                                                {zlib, '_', 200}]},
                      Refused({zlib, '_', 200})),
    ct:log("~p", [R1]),
    ?assert(?L:no_pattern({lists, seq, 2})),
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    NoFn = {'_', beamprobe_no_such_function_anywhere, '_'},
    expect_error(Config, "no_match_forced",
                 #{procs => [W], force => true, calls => [{?W, add, 2}, NoFn]},
                 Refused(NoFn)),
    expect_error(Config, "any_module_forced",
                 #{procs => [W], force => true, calls => [{'_', add, 2}]},
                 Refused({'_', add, 2})),
    ?assertEqual({flags, []}, erlang:trace_info(W, flags)),
    ?L:pattern_removed([{?W, add, 2}, {lists, seq, 2}]),
    ?W:stop_worker(W).

%% A start refused on its second message pattern (one the VM refuses)
%% leaves no first one behind: the 'receive' pattern set before the bad
%% send pattern used to stay installed, filtering every other tool's
%% receive trace (found by beamprobe_ms_fuzz_SUITE).
bad_message_pattern_undone(Config) ->
    Recv = [{['$1', '$2', '$3'], [{is_atom, '$3'}], []}],
    %% (Compiles: the VM refuses {caller} only in a message pattern.)
    Bad = [{'_', [], [{caller}]}],
    R = expect_error(Config, "bad_send",
                     #{events => ['receive', send],
                       messages => [{'receive', Recv}, {send, Bad}]},
                     fun({error, {bad_pattern, {send, _}}}) -> true end),
    ct:log("~p", [R]),
    ?assertEqual({{'receive', {match_spec, true}}, {send, {match_spec, true}}},
                 {{'receive', erlang:trace_info('receive', match_spec)},
                  {send, erlang:trace_info(send, match_spec)}}),
    ?assertEqual([], beamprobe:list()).

%% A match spec the VM refuses on its own, given next to another
%% session's on the same function: refused at start.  (It was accepted --
%% combined, its clause of another arity was left out -- and after both
%% sessions stopped the combined match spec stayed on the function.)
bad_match_spec_next_to_another(Config) ->
    MFA = {?W, add, 2},
    A = ?L:start(#{calls => [{MFA, [{'_', [], []}]}], procs => new,
                   output => {file, dir(Config, "a")}}),
    R = beamprobe:start(#{calls => [{MFA, [{[], ['$1'], []}]}],
                          output => {file, dir(Config, "b")}}),
    ct:log("~p", [R]),
    ?assertMatch({error, {bad_match_spec, MFA, [_]}}, R),
    ?L:stop(A),
    ?assertEqual({[], {match_spec, false}},
                 {beamprobe:list(), erlang:trace_info(MFA, match_spec)}).

%% A process traced by another tracer is refused when named, skipped by
%% procs => all, and taken over with force => true.
already_traced_pid(Config) ->
    Other = spawn(fun Sink() -> receive _ -> Sink() end end),
    P = ?W:start_worker(),
    1 = erlang:trace(P, true, [send, {tracer, Other}]),
    expect_error(Config, "taken", #{procs => [P], calls => [{?W, add, 2}]},
                 {already_traced, [P]}),
    ?assertEqual({tracer, Other}, erlang:trace_info(P, tracer)),
    ?assertEqual({flags, [send]}, erlang:trace_info(P, flags)),
    %% procs => all traces the others, says it skipped P
    %% (beamprobe_coexist_SUITE has more), and P keeps its tracer.
    SA = start(#{procs => all, calls => [{?W, add, 2}],
                 output => {file, dir(Config, "taken_all")}}),
    {ok, #{skipped := #{procs := [P]}}} = beamprobe:info(SA),
    ?assertEqual({tracer, Other}, erlang:trace_info(P, tracer)),
    _ = stop(SA),
    ?assertEqual({tracer, Other}, erlang:trace_info(P, tracer)),
    ?assertEqual({flags, [send]}, erlang:trace_info(P, flags)),
    %% procs => all with force => true takes it over.
    SF = start(#{procs => all, calls => [{?W, add, 2}], force => true,
                 output => {file, dir(Config, "taken_all_forced")}}),
    ?assertEqual({tracer, {beamprobe_nif, beamprobe_hub}},
                 erlang:trace_info(P, tracer)),
    _ = stop(SF),
    ?assertEqual({tracer, []}, erlang:trace_info(P, tracer)),
    1 = erlang:trace(P, true, [send, {tracer, Other}]),
    Dir = dir(Config, "forced"),
    S = start(#{procs => [P], calls => [{?W, add, 2}], force => true,
                output => {file, Dir}}),
    ?assertMatch({tracer, {beamprobe_nif, _}}, erlang:trace_info(P, tracer)),
    5 = ?W:run(P, fun() -> ?W:add(2, 3) end),
    _ = stop(S),
    ?assertEqual({tracer, []}, erlang:trace_info(P, tracer)),
    Evs = trace(Dir),
    assert_field(one(Evs, "call", P), "args", "(2, 3)"),
    ?W:stop_worker(P),
    exit(Other, kill).

%% New processes traced by another tracer: procs => new is refused.
already_traced_new(Config) ->
    Other = spawn(fun Sink() -> receive _ -> Sink() end end),
    try
        _ = erlang:trace(new, true, [procs, {tracer, Other}]),
        Dir = dir(Config, "new_taken"),
        Result = beamprobe:start(#{procs => new, events => [procs],
                                   output => {file, Dir}}),
        ?assertEqual({error, {already_traced, [new]}}, Result),
        ?assertEqual({tracer, Other}, erlang:trace_info(new, tracer)),
        ?assert(?L:dir_absent_or_empty(Dir)),
        ?assertEqual([], beamprobe:list()),
        {error, R} = Result,
        ?assert(length(beamprobe:format_error(R)) > 0)
    after
        erlang:trace(new, false, [all]),
        exit(Other, kill)
    end.
