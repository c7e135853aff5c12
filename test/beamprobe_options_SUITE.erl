%%% @doc Bad input is always a clear error (issue 7, item 18), table-driven:
%%% every option key of beamprobe:start/1 and of the shell API
%%% (beamprobe:calls/3, beamprobe:messages/3, their limit and pattern
%%% arguments, and the printer's options) with several bad values: wrong
%%% type, improper lists, deep and huge terms, atoms vs binaries vs strings,
%%% negative numbers, floats where integers are expected, out-of-range
%%% integers, invalid UTF-8 and invalid code points, NUL bytes.  For each:
%%%   - the exact `{error, Reason}' (never an exception, never accepted);
%%%   - beamprobe:format_error/1 gives a flat, non-empty, bounded sentence;
%%%   - nothing was started or left installed: no session, trace flags of
%%%     new processes unchanged (erlang:trace_info(new, flags | tracer)), no call or meta pattern on the traced
%%%     function, no directory created (the case's output directory and
%%%     the current directory, where the default output goes, unchanged).
%%% `tag' takes any term and has no bad value.
-module(beamprobe_options_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([start_options/1, shell_options/1, printer_options/1,
         default_dirs_distinct/1]).

-define(L, beamprobe_test_lib).
-define(MFA, {lists, seq, 2}).
-define(MAX_TEXT, 3000).
%% beamprobe_shell's hint for a term that is no pattern at all.
-define(PATTERN_HINT,
        "a pattern is a string (\"m:f/2\", \"m:f(A, _) -> return\", "
        "Elixir's \"M.f/2\"), recon_trace's {M, F, A} or {M, F, MatchSpec "
        "| fun}, or a list of these").

suite() -> [{timetrap, {minutes, 2}}].

all() -> [start_options, shell_options, printer_options,
          default_dirs_distinct].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) -> ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) -> ?L:clear_trace_state().

%%% ------------------------------------------------------------------------
%%% Bad values
%%% ------------------------------------------------------------------------

improper(L) -> L ++ improper_tail.
huge() -> lists:seq(1, 1000000).
deep() -> lists:foldl(fun(_, A) -> {A} end, x, lists:seq(1, 100000)).
bad_utf8() -> <<255, 254>>.

%% Bad values of an option that is an atom from a fixed set or a boolean.
enum_bad() ->
    [yes, 1, 1.0, -1, "true", <<"true">>, [true | x], {}, huge(), deep()].

%% {Key, [{Value, ExpectedReason}]} for beamprobe:start/1.  V(X) is
%% {X, {bad_option, Key, X}}.
start_table(Dir) ->
    Self = self(),
    Dead = ?L:dead_pid(),
    Remote = ?L:remote_pid(),
    V = fun(K) -> fun(X) -> {X, {bad_option, K, X}} end end,
    [{procs, [(V(procs))(X) || X <- [everything, [], 42, <<"all">>,
                                      improper([Self]), {Self}, 1.5, deep()]]
      ++ [{[Self, 42], {bad_option, procs, 42}},
          {"all", {bad_option, procs, $a}},
          {[Self, <<"x">>], {bad_option, procs, <<"x">>}},
          {[Dead], {dead_process, Dead}},
          {[Remote], {remote_process, Remote}},
          {[no_such_registered_name], {no_such_process, no_such_registered_name}},
          {huge(), {bad_option, procs, 1}}]},
     {exclude, [(V(exclude))(X) || X <- [everything, 42, <<"all">>,
                                          improper([Self]), {Self}, 1.5,
                                          deep()]]
      ++ [{[Self, 42], {bad_option, exclude, 42}},
          {[Dead], {dead_process, Dead}},
          {[Remote], {remote_process, Remote}},
          {[no_such_registered_name], {no_such_process, no_such_registered_name}}]},
     {calls, [(V(calls))(X) || X <- [?MFA, lists, <<"lists:seq/2">>,
                                      improper([?MFA]), 1.5, deep()]]
      ++ [{[{lists, seq, -1}], {bad_option, calls, {lists, seq, -1}}},
          {[{lists, seq, 2.0}], {bad_option, calls, {lists, seq, 2.0}}},
          {[{lists, seq, 256}], {bad_option, calls, {lists, seq, 256}}},
          {[{<<"lists">>, seq, 2}], {bad_option, calls, {<<"lists">>, seq, 2}}},
          {[{lists, "seq", 2}], {bad_option, calls, {lists, "seq", 2}}},
          {[{?MFA, improper([])}], {bad_option, calls, {?MFA, improper([])}}},
          {[{?MFA, yes}], {bad_option, calls, {?MFA, yes}}},
          {[{lists, '_', 2}], {bad_option, calls, {lists, '_', 2}}},
          {huge(), {bad_option, calls, 1}}]},
     {return, [(V(return))(X) || X <- enum_bad()]},
     {exceptions, [(V(exceptions))(X) || X <- enum_bad()]},
     {return_to, [(V(return_to))(X) || X <- enum_bad()]},
     {meta, [(V(meta))(X) || X <- enum_bad()]},
     {force, [(V(force))(X) || X <- enum_bad()]},
     {on_tamper, [(V(on_tamper))(X) || X <- [ignore, <<"report">>, 1,
                                              improper([report]), deep()]]},
     {events, [(V(events))(X) || X <- [send, <<"send">>, improper([send]),
                                        1, 1.5, deep()]]
      ++ [{[send, exit], {bad_option, events, exit}},
          {[<<"send">>], {bad_option, events, <<"send">>}},
          {["send"], {bad_option, events, "send"}},
          {huge(), {bad_option, events, 1}}]},
     {args, [(V(args))(X) || X <- [all, <<"full">>, "full", 4, 1.5, -1,
                                    improper([full]), deep(), huge()]]},
     {capture, [(V(capture))(X) || X <- [[depth], 4, <<>>, improper([a]), deep()]]
      ++ [{#{K => X}, {bad_option, {capture, K}, X}}
          || K <- [depth, list, binary, bytes],
             X <- [-1, 1.5, 1 bsl 70, foo, <<"4">>, "4", improper([1])]]
      ++ [{#{depth => 0}, {bad_option, {capture, depth}, 0}},
          {#{depth => 65}, {bad_option, {capture, depth}, 65}},
          {#{bytes => 15}, {bad_option, {capture, bytes}, 15}},
          {#{colour => 1}, {unknown_option, {capture, colour}}}]},
     {buffer, [(V(buffer))(X) || X <- [-1, 0, 100, 1.5e7, 1 bsl 40, big,
                                        <<"8">>, "8", improper([1]), deep()]]},
     {overflow, [(V(overflow))(X) || X <- [drop, <<"stop">>, "stop", 1,
                                            improper([stop]), deep()]]},
     {limits, [(V(limits))(X) || X <- [[{events, 1}], 10, <<>>, deep()]]
      ++ [{#{K => X}, {bad_option, {limits, K}, X}}
          || K <- [events, bytes],
             X <- [0, -1, 1.5, 1 bsl 64, foo, <<"1">>, "1", improper([1])]]
      ++ [{#{seconds => X}, {bad_option, {limits, seconds}, X}}
          || X <- [0, -1, -0.5, 1.0e300, 1 bsl 40, foo, {}, "1"]]
      ++ [{#{rate => X}, {bad_option, {limits, rate}, X}}
          || X <- [{0, 10}, {1, 0}, {-1, 10}, {1.5, 10}, {1, 1 bsl 40},
                   {1 bsl 64, 1}, {1, 2, 3}, 10, improper([1])]]
      ++ [{#{colour => 1}, {unknown_option, {limits, colour}}}]},
     {on_rate, [(V(on_rate))(X) || X <- [ignore, <<"drop">>, "drop", 1,
                                          improper([drop]), deep()]]
      %% stop with no rate limit could never trip.
      ++ [{stop, {bad_option, on_rate,
                  "on_rate => stop needs a rate limit, limits => #{rate => "
                  "{N, Ms}}: without one it never trips"}}]},
     {messages, [(V(messages))(X) || X <- [send, improper([{send, true}]),
                                            <<>>, deep()]]
      ++ [{[{send, improper([])}], {bad_option, messages, {send, improper([])}}},
          {[{sent, true}], {bad_option, messages, {sent, true}}},
          {[{<<"send">>, true}], {bad_option, messages, {<<"send">>, true}}},
          {[{send, yes}], {bad_option, messages, {send, yes}}}]},
     {output, [(V(output))(X) || X <- [[], "dir", <<"dir">>, 42, deep(),
                                        improper([{file, Dir}])]]
      ++ [{O, {bad_option, output, O}}
          || O <- [{file, bad_utf8()}, {file, [16#110000]}, {file, [-1]},
                   {file, Dir ++ [0] ++ "x"}, {file, <<"a", 0, "b">>},
                   {file, ""}, {file, <<>>}, {file, 42}, {file, deep()},
                   {file, [Dir]}, {file, dir}, {file, Dir, []},
                   {handler, "mod", x}, {handler, beamprobe_printer}]]
      ++ [{{file, Dir, #{events => X}}, {bad_option, {output, events}, X}}
          || X <- [improper([call]), [call, exit], call, <<"call">>]]
      ++ [{{file, Dir, #{colour => 1}}, {unknown_option, {output, colour}}},
          {{handler, beamprobe_printer, #{io => Self}, #{batch => 0}},
           {bad_option, {output, batch}, 0}},
          {{handler, beamprobe_printer, #{io => Self}, #{batch => 1.5}},
           {bad_option, {output, batch}, 1.5}},
          {{handler, beamprobe_printer, #{io => Self}, #{credits => -1}},
           {bad_option, {output, credits}, -1}},
          {{handler, beamprobe_printer, #{io => Self}, #{overflow => foo}},
           {bad_option, {output, overflow}, foo}},
          {{handler, beamprobe_printer, #{io => Self}, #{procs => improper([Self])}},
           {bad_option, {output, procs}, improper([Self])}},
          {{handler, beamprobe_printer, #{io => Self, timestamp => foo}},
           {handler_init, beamprobe_printer, {bad_option, timestamp, foo}}},
          {{handler, beamprobe_printer, #{io => "x"}},
           {handler_init, beamprobe_printer, {bad_option, io, "x"}}},
          {{handler, beamprobe_printer, not_a_map},
           {handler_init, beamprobe_printer, {bad_option, opts, not_a_map}}},
          {{handler, no_such_module_xyz, x}, {no_such_module, no_such_module_xyz}}]}].

start_options(Config) ->
    Dir = ?L:dir(Config, "out"),
    Table = start_table(Dir),
    %% Every key of the spec is in the table (tag takes any term).
    Keys = lists:sort([tag | [K || {K, _} <- Table]]),
    ?assertEqual(lists:sort([output | maps:keys(beamprobe_config:defaults())]),
                 Keys),
    Cases = [{K, X, E} || {K, Vs} <- Table, {X, E} <- Vs]
        ++ [{spec, S, {bad_spec, S, "a map is expected"}}
            || S <- [[calls], <<>>, improper([a]), deep()]]
        ++ [{colour, blue, {unknown_option, colour}},
            {<<"calls">>, [?MFA], {unknown_option, <<"calls">>}}],
    N = check_all(Config, Dir, fun(spec, S) -> beamprobe:start(S);
                                  (K, X) ->
                                       Base = #{calls => [?MFA],
                                                output => {file, Dir}},
                                       beamprobe:start(Base#{K => X})
                               end, Cases),
    ct:log("~b bad start/1 inputs, each a clear error, nothing left", [N]).

shell_options(Config) ->
    Dir = ?L:dir(Config, "out"),
    Self = self(),
    V = fun(K) -> fun(X) -> {X, {bad_option, K, X}} end end,
    Table =
        [{procs, [(V(procs))(X) || X <- [[], 42, <<"all">>,
                                           improper([Self]), 1.5, deep()]]
          %% A single name is a process (redbug's procs): an unknown one
          %% says so.
          ++ [{everything, {no_such_process, everything}}]},
         {time, [(V(time))(X) || X <- [{}, 0, -1, 1.5, 1 bsl 40, foo,
                                        <<"1000">>, "1000", improper([1]),
                                        deep()]]},
         {return, [(V(return))(X) || X <- enum_bad()]},
         {args, [(V(args))(X) || X <- [0, -1, 1.5, 65, full, <<"4">>, "4",
                                        improper([4]), deep()]]},
         {timestamp, [(V(timestamp))(X) || X <- [foo, <<"time">>, "time", 1,
                                                  improper([time]), deep()]]},
         {io_server, [(V(io_server))(X) || X <- ["x", <<"x">>, 1, {},
                                                  undefined, improper([a]),
                                                  deep()]]},
         {on_rate, [(V(on_rate))(X) || X <- [ignore, <<"drop">>, 1,
                                              improper([drop])]]},
         {output, [(V(output))(X) || X <- [[], improper([{file, Dir}]), 42,
                                            "dir", <<"dir">>]]
          ++ [{{file, bad_utf8()}, {bad_option, output, {file, bad_utf8()}}},
              {[{file, [16#110000]}], {bad_option, output, {file, [16#110000]}}}]},
         {force, [(V(force))(X) || X <- enum_bad()]},
         {buffer, [(V(buffer))(X) || X <- [-1, 0, 1.5, <<"1">>, "1",
                                            improper([1]), deep()]]
          ++ [{100, {bad_option, buffer, 100}}]}],
    ShellKeys = [procs, time, return, args, timestamp, io_server, on_rate,
                 output, force, buffer],
    ?assertEqual(lists:sort(ShellKeys), lists:sort([K || {K, _} <- Table])),
    Cases = [{K, X, E} || {K, Vs} <- Table, {X, E} <- Vs]
        ++ [{colour, blue, {unknown_option, colour}},
            %% A proplist is options too (recon, redbug), but not any list.
            {opts, [{time, 1}, "x"], {bad_option, opts, [{time, 1}, "x"]}},
            {opts, improper([a]), {bad_option, opts, improper([a])}}],
    Cap = spawn_link(fun() -> sink() end),
    Call = fun(opts, O) -> beamprobe:calls("lists:seq/2", 5, O);
              (K, X) -> beamprobe:calls("lists:seq/2", 5,
                                        #{io_server => Cap, K => X})
           end,
    Msgs = fun(opts, O) -> beamprobe:messages("send", 5, O);
              (K, X) -> beamprobe:messages("send", 5,
                                           #{io_server => Cap, K => X})
           end,
    N1 = check_all(Config, Dir, Call, Cases),
    N2 = check_all(Config, Dir, Msgs, Cases),
    %% The limit and the patterns.
    Limits = [{limit, L, {bad_limit, L, "a count N or a rate {N, Milliseconds}"}}
              || L <- [0, -1, 1.5, foo, <<"5">>, "5", {0, 10}, {5, 0}, {5, -1},
                       {1.5, 10}, {5, 1.5}, {1, 2, 3}, improper([5]), deep(),
                       infinity]],
    N3 = check_all(Config, Dir, fun(limit, L) ->
                                        beamprobe:calls("lists:seq/2", L,
                                                        #{io_server => Cap})
                                end, Limits),
    %% (past the session's bounds: the limit argument is named, not the
    %% {limits, events | rate} option it becomes inside)
    BigLimit = [{limit, L, {bad_limit, L, "a count N or a rate {N, Milliseconds}"}}
                || L <- [1 bsl 64, {1, 1 bsl 40}]],
    N4 = check_all(Config, Dir, fun(limit, L) ->
                                        beamprobe:calls("lists:seq/2", L,
                                                        #{io_server => Cap})
                                end, BigLimit),
    Pats = [{pattern, P, {bad_pattern, P, ?PATTERN_HINT}}
            || P <- [[], foo, 42, improper(["lists:seq/2"]), {}, deep()]]
        ++ [{pattern, [P], {bad_pattern, P, ?PATTERN_HINT}}
            || P <- [foo, 4.2, self()]],
    N5 = check_all(Config, Dir, fun(pattern, P) ->
                                        beamprobe:calls(P, 5, #{io_server => Cap})
                                end, Pats),
    unlink(Cap),
    exit(Cap, kill),
    ct:log("~b bad shell inputs, each a clear error, nothing left",
           [N1 + N2 + N3 + N4 + N5]).

%% The printer given bad options directly (as a handler of start/1).
printer_options(_Config) ->
    Self = self(),
    [?assertEqual({error, E}, beamprobe_printer:init(O))
     || {O, E} <- [{#{io => Self, timestamp => foo}, {bad_option, timestamp, foo}},
                   {#{io => Self, timestamp => <<"ns">>},
                    {bad_option, timestamp, <<"ns">>}},
                   {#{io => "x"}, {bad_option, io, "x"}},
                   {#{io => Self, colour => 1}, {unknown_option, colour}},
                   {#{}, {bad_option, opts, #{}}},
                   {[{io, Self}], {bad_option, opts, [{io, Self}]}}]],
    ?assertMatch({ok, _}, beamprobe_printer:init(#{io => Self, timestamp => ns})).

%%% ------------------------------------------------------------------------
%%% Checking
%%% ------------------------------------------------------------------------

sink() -> receive {io_request, F, R, _} -> F ! {io_reply, R, ok}, sink() end.

%% Runs every case; fails naming all the cases that went wrong.
check_all(Config, Dir, Fun, Cases) ->
    Problems = lists:append([check(Config, Dir, Fun, C) || C <- Cases]),
    case Problems of
        [] -> length(Cases);
        _ -> ct:fail({length(Problems), bad_cases,
                      [lists:flatten(io_lib:format("~P", [P, 12]))
                       || P <- Problems]})
    end.

check(_Config, Dir, Fun, {K, X, Expected}) ->
    NewBefore = new_state(),
    {ok, Cwd} = file:get_cwd(),
    CwdBefore = file:list_dir(Cwd),
    Result = try Fun(K, X) catch C:R -> {exception, C, R} end,
    Text = case Result of
               {error, Reason} ->
                   try beamprobe:format_error(Reason)
                   catch C2:R2 -> {exception, C2, R2}
                   end;
               _ -> none
           end,
    Problems =
        [{K, X, result, Result, expected, Expected}
         || Result =/= {error, Expected}] ++
        [{K, X, format_error, Text}
         || not (is_list(Text) andalso io_lib:char_list(Text) andalso
                 Text =/= [] andalso length(Text) < ?MAX_TEXT)] ++
        [{K, X, sessions_left, beamprobe:list()} || beamprobe:list() =/= []] ++
        [{K, X, new_flags, new_state()} || new_state() =/= NewBefore] ++
        [{K, X, pattern_left, erlang:trace_info(?MFA, all)}
         || not no_pattern(?MFA)] ++
        [{K, X, output_created, Dir} || filelib:is_file(Dir)] ++
        [{K, X, cwd_changed} || file:list_dir(Cwd) =/= CwdBefore],
    %% Whatever a failed case left must not spoil the next ones.
    case Problems of
        [] -> ok;
        _ -> ?L:clear_trace_state()
    end,
    Problems.

%% What erlang:trace_info(new, all) would say (OTP 25 has no `all' for
%% `new'): the flags and the tracer new processes get.
new_state() ->
    [erlang:trace_info(new, I) || I <- [flags, tracer]].

no_pattern(MFA) ->
    case erlang:trace_info(MFA, all) of
        {all, false} -> true;
        {all, undefined} -> true;
        {all, L} -> not lists:member({traced, local}, L) andalso
                        not lists:member({traced, global}, L) andalso
                        proplists:get_value(meta, L, false) =:= false
    end.

%% Two sessions with the default output started in the same second each
%% get a directory (the second one was refused: output_exists).
default_dirs_distinct(Config) ->
    {ok, Cwd} = file:get_cwd(),
    Dir = proplists:get_value(case_dir, Config),
    ok = file:set_cwd(Dir),
    try
        {ok, A} = beamprobe:start(#{calls => [?MFA]}),
        {ok, B} = beamprobe:start(#{calls => [?MFA]}),
        {ok, #{output := OA}} = beamprobe:stop(A),
        {ok, #{output := OB}} = beamprobe:stop(B),
        ct:log("~s~n~s", [OA, OB]),
        ?assertNotEqual(OA, OB),
        ?assert(filelib:is_dir(OA) andalso filelib:is_dir(OB))
    after
        ok = file:set_cwd(Cwd)
    end.
