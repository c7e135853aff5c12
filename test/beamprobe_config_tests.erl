%%% @doc EUnit tests of beamprobe_config:validate/1: valid specs give the
%%% full configuration (defaults filled in, lists sorted, output turned into
%%% an absolute `dir'), invalid ones the exact error term.  Validation
%%% installs nothing and creates nothing.
%%%
%%% Run: erl -noshell -pa ebin -pa _build/test
%%%          -eval 'eunit:test(beamprobe_config_tests, [verbose]), halt().'
-module(beamprobe_config_tests).

-include_lib("eunit/include/eunit.hrl").
-include_lib("kernel/include/file.hrl").

-define(ADD, {lists, seq, 2}).

%%% ------------------------------------------------------------------------
%%% Fixture: a private temporary directory
%%% ------------------------------------------------------------------------

setup() ->
    Base = filename:join(tmp_root(), "beamprobe_config_tests-" ++
                             os:getpid() ++ "-" ++
                             integer_to_list(erlang:unique_integer([positive]))),
    ok = file:make_dir(Base),
    Base.

cleanup(Base) ->
    ok = del_tree(Base).

tmp_root() ->
    case os:getenv("TMPDIR") of
        false -> "/tmp";
        "" -> "/tmp";
        T -> T
    end.

del_tree(Path) ->
    case file:read_link_info(Path) of
        {ok, #file_info{type = directory}} ->
            {ok, Fs} = file:list_dir(Path),
            [ok = del_tree(filename:join(Path, F)) || F <- Fs],
            file:del_dir(Path);
        {ok, _} -> file:delete(Path);
        {error, enoent} -> ok
    end.

validate_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     fun(Base) -> valid(Base) ++ invalid(Base) ++ outputs(Base) end}.

out(Base, Name) -> {file, filename:join(Base, Name)}.

v(Spec) -> beamprobe_config:validate(Spec).

%%% ------------------------------------------------------------------------
%%% Valid specs
%%% ------------------------------------------------------------------------

valid(Base) ->
    Out = out(Base, "t"),
    Dir = filename:join(Base, "t"),
    [{"defaults are filled in and output becomes dir",
      fun() ->
              {ok, C} = v(#{calls => [?ADD], output => Out}),
              D = beamprobe_config:defaults(),
              ?assertEqual(maps:merge(D, #{calls => [?ADD], dir => Dir}),
                           maps:remove(sinks, C)),
              ?assertMatch([#{type := file, dir := Dir}], maps:get(sinks, C)),
              ?assertNot(maps:is_key(output, C)),
              ?assertEqual(all, maps:get(procs, C)),
              ?assertEqual(false, maps:get(return, C)),
              ?assertEqual(false, maps:get(exceptions, C)),
              ?assertEqual(false, maps:get(return_to, C)),
              ?assertEqual(full, maps:get(args, C)),
              ?assertEqual(8 * 1024 * 1024, maps:get(buffer, C)),
              ?assertEqual(drop_newest, maps:get(overflow, C)),
              ?assertEqual(#{depth => 4, list => 16, binary => 64,
                             bytes => 512}, maps:get(capture, C)),
              ?assertEqual(#{events => infinity, bytes => 1024 * 1024 * 1024,
                             seconds => 60, rate => infinity}, maps:get(limits, C)),
              ?assertEqual(false, maps:get(force, C)),
              ?assertNot(filelib:is_dir(Dir))
      end},
     {"calls and events are sorted and deduplicated",
      fun() ->
              {ok, C} = v(#{calls => [{lists, seq, 2}, {lists, reverse, 1},
                                      {lists, seq, 2}],
                            events => [send, gc, send, 'receive'],
                            output => Out}),
              ?assertEqual([{lists, reverse, 1}, {lists, seq, 2}],
                           maps:get(calls, C)),
              ?assertEqual(lists:usort([send, gc, 'receive']),
                           maps:get(events, C))
      end},
     {"procs: names resolve to pids, sorted and deduplicated",
      fun() ->
              Me = self(),
              Code = whereis(code_server),
              {ok, C} = v(#{procs => [code_server, Me, Me], events => [send],
                            output => Out}),
              ?assertEqual(lists:usort([Code, Me]), maps:get(procs, C))
      end},
     {"procs: all, new and existing",
      fun() ->
              [?assertMatch({ok, #{procs := P}},
                            v(#{procs => P, events => [procs], output => Out}))
               || P <- [all, new, existing]]
      end},
     {"every event kind and all of them",
      fun() ->
              All = [call, send, 'receive', procs, running, gc, ports],
              [?assertMatch({ok, #{events := [E]}},
                            v(#{events => [E], output => Out})) || E <- All],
              ?assertMatch({ok, #{events := _}},
                           v(#{events => All, output => Out}))
      end},
     {"wildcards: {M, '_', '_'}, {M, F, '_'}; {'_', '_', '_'} with force",
      fun() ->
              ?assertMatch({ok, _}, v(#{calls => [{lists, '_', '_'}],
                                        output => Out})),
              ?assertMatch({ok, _}, v(#{calls => [{lists, seq, '_'}],
                                        output => Out})),
              ?assertMatch({ok, #{force := true, calls := [{'_', '_', '_'}]}},
                           v(#{calls => [{'_', '_', '_'}], force => true,
                               output => Out}))
      end},
     {"a module that is not loaded yet is loaded to check it",
      fun() ->
              ?assertMatch({ok, _}, v(#{calls => [{calendar, '_', '_'}],
                                        output => Out})),
              ?assertMatch({file, _}, code:is_loaded(calendar))
      end},
     {"options at their bounds",
      fun() ->
              ?assertMatch({ok, #{buffer := 16384}},
                           v(#{calls => [?ADD], buffer => 16384,
                               output => Out})),
              ?assertMatch({ok, #{buffer := 4294967296}},
                           v(#{calls => [?ADD], buffer => 1 bsl 32,
                               output => Out})),
              ?assertMatch({ok, #{capture := #{depth := 64, list := 4096,
                                               binary := 0, bytes := 16}}},
                           v(#{calls => [?ADD],
                               capture => #{depth => 64, list => 4096,
                                            binary => 0, bytes => 16},
                               output => Out})),
              ?assertMatch({ok, #{capture := #{depth := 1, list := 1,
                                               binary := 65536,
                                               bytes := 65536}}},
                           v(#{calls => [?ADD],
                               capture => #{depth => 1, list => 1,
                                            binary => 65536, bytes => 65536},
                               output => Out}))
      end},
     {"a partial capture map keeps the other defaults",
      fun() ->
              ?assertMatch({ok, #{capture := #{depth := 2, list := 16,
                                               binary := 64, bytes := 512}}},
                           v(#{calls => [?ADD], capture => #{depth => 2},
                               output => Out}))
      end},
     {"limits: partial map, infinity, float seconds",
      fun() ->
              ?assertMatch({ok, #{limits := #{events := 100,
                                              bytes := 1073741824,
                                              seconds := 60}}},
                           v(#{calls => [?ADD], limits => #{events => 100},
                               output => Out})),
              ?assertMatch({ok, #{limits := #{events := infinity,
                                              bytes := infinity,
                                              seconds := infinity}}},
                           v(#{calls => [?ADD],
                               limits => #{events => infinity,
                                           bytes => infinity,
                                           seconds => infinity},
                               output => Out})),
              ?assertMatch({ok, #{limits := #{seconds := 0.5}}},
                           v(#{calls => [?ADD], limits => #{seconds => 0.5},
                               output => Out}))
      end},
     {"every overflow mode and args mode",
      fun() ->
              [?assertMatch({ok, #{overflow := O}},
                            v(#{calls => [?ADD], overflow => O,
                                output => Out}))
               || O <- [drop_newest, drop_oldest, stop]],
              [?assertMatch({ok, #{args := A}},
                            v(#{calls => [?ADD], args => A, output => Out}))
               || A <- [none, arity, full]]
      end},
     {"validation sets no trace pattern and no flag",
      fun() ->
              {ok, _} = v(#{calls => [{lists, reverse, 1}], procs => [self()],
                            output => Out}),
              ?assertEqual({all, false},
                           erlang:trace_info({lists, reverse, 1}, all)),
              ?assertEqual({flags, []}, erlang:trace_info(self(), flags))
      end}].

%%% ------------------------------------------------------------------------
%%% Invalid specs: the exact error terms
%%% ------------------------------------------------------------------------

invalid(Base) ->
    Out = out(Base, "bad"),
    Dead = spawn(fun() -> ok end),
    Ref = monitor(process, Dead),
    receive {'DOWN', Ref, process, Dead, _} -> ok end,
    Cases =
        [{[calls], {bad_spec, [calls], "a map is expected"}},
         {#{colour => red}, {unknown_option, colour}},
         {#{calls => [?ADD], output => Out, colour => red},
          {unknown_option, colour}},
         {#{procs => everyone, calls => [?ADD]},
          {bad_option, procs, everyone}},
         {#{procs => [], calls => [?ADD]}, {bad_option, procs, []}},
         {#{procs => [self(), 42], calls => [?ADD]}, {bad_option, procs, 42}},
         {#{procs => self(), calls => [?ADD]},
          {bad_option, procs, self()}},
         {#{procs => [self(), Dead], calls => [?ADD]}, {dead_process, Dead}},
         {#{procs => [no_such_registered_name_x], calls => [?ADD]},
          {no_such_process, no_such_registered_name_x}},
         {#{calls => {lists, seq, 2}}, {bad_option, calls, {lists, seq, 2}}},
         {#{calls => [lists]}, {bad_option, calls, lists}},
         {#{calls => [{lists, seq, 256}]}, {bad_option, calls, {lists, seq, 256}}},
         {#{calls => [{lists, seq, x}]}, {bad_option, calls, {lists, seq, x}}},
         {#{calls => [{no_such_module_x, f, 1}]},
          {no_such_module, no_such_module_x}},
         {#{calls => [{lists, no_such_function_x, 1}]},
          {no_such_function, {lists, no_such_function_x, 1}}},
         {#{calls => [{lists, seq, 9}]}, {no_such_function, {lists, seq, 9}}},
         {#{calls => [{lists, no_such_function_x, '_'}]},
          {no_such_function, {lists, no_such_function_x, '_'}}},
         {#{calls => [{'_', '_', '_'}]}, {force_required, {'_', '_', '_'}}},
         {#{calls => [?ADD, {'_', '_', '_'}], force => false},
          {force_required, {'_', '_', '_'}}},
         {#{calls => [?ADD], force => maybe}, {bad_option, force, maybe}},
         {#{calls => [?ADD], return => 1}, {bad_option, return, 1}},
         {#{calls => [?ADD], exceptions => no}, {bad_option, exceptions, no}},
         {#{calls => [?ADD], return_to => []}, {bad_option, return_to, []}},
         {#{events => call}, {bad_option, events, call}},
         {#{events => [send, exit]}, {bad_option, events, exit}},
         {#{calls => [?ADD], args => all}, {bad_option, args, all}},
         {#{calls => [?ADD], capture => [{depth, 1}]},
          {bad_option, capture, [{depth, 1}]}},
         {#{calls => [?ADD], capture => #{width => 1}},
          {unknown_option, {capture, width}}},
         {#{calls => [?ADD], capture => #{depth => 65}},
          {bad_option, {capture, depth}, 65}},
         {#{calls => [?ADD], capture => #{list => 0}},
          {bad_option, {capture, list}, 0}},
         {#{calls => [?ADD], capture => #{binary => 65537}},
          {bad_option, {capture, binary}, 65537}},
         {#{calls => [?ADD], capture => #{bytes => 16.0}},
          {bad_option, {capture, bytes}, 16.0}},
         {#{calls => [?ADD], buffer => 16383}, {bad_option, buffer, 16383}},
         {#{calls => [?ADD], buffer => (1 bsl 32) + 1},
          {bad_option, buffer, (1 bsl 32) + 1}},
         {#{calls => [?ADD], buffer => "8M"}, {bad_option, buffer, "8M"}},
         {#{calls => [?ADD], overflow => block}, {bad_option, overflow, block}},
         {#{calls => [?ADD], limits => 10}, {bad_option, limits, 10}},
         {#{calls => [?ADD], limits => #{time => 1}},
          {unknown_option, {limits, time}}},
         {#{calls => [?ADD], limits => #{events => 0}},
          {bad_option, {limits, events}, 0}},
         {#{calls => [?ADD], limits => #{bytes => 1.0e6}},
          {bad_option, {limits, bytes}, 1.0e6}},
         {#{calls => [?ADD], limits => #{seconds => -1}},
          {bad_option, {limits, seconds}, -1}},
         {#{calls => [?ADD], limits => #{seconds => forever}},
          {bad_option, {limits, seconds}, forever}},
         {#{calls => [?ADD], output => "dir"}, {bad_option, output, "dir"}},
         {#{calls => [?ADD], output => {file, 'dir'}},
          {bad_option, output, {file, 'dir'}}},
         {#{calls => [?ADD], output => {dir, "x"}},
          {bad_option, output, {dir, "x"}}}],
    [{lists:flatten(io_lib:format("invalid: ~0p", [Exp])),
      fun() ->
              Spec = case is_map(Spec0) andalso
                         not maps:is_key(output, Spec0) of
                         true -> Spec0#{output => Out};
                         false -> Spec0
                     end,
              ?assertEqual({error, Exp}, v(Spec)),
              Text = beamprobe_config:format_error(Exp),
              ?assert(io_lib:char_list(Text)),
              ?assertNotEqual("", Text)
      end} || {Spec0, Exp} <- Cases] ++
    [{"nothing to trace",
      fun() ->
              ?assertMatch({error, {nothing_to_trace, _}},
                           v(#{output => Out})),
              ?assertMatch({error, {nothing_to_trace, _}},
                           v(#{calls => [], events => [], output => Out}))
      end},
     {"the first error in checking order is reported",
      fun() ->
              %% force is checked before procs, procs before calls.
              ?assertEqual({error, {bad_option, force, x}},
                           v(#{force => x, procs => x, calls => x})),
              ?assertEqual({error, {bad_option, procs, x}},
                           v(#{procs => x, calls => x}))
      end}].

%%% ------------------------------------------------------------------------
%%% Output directories
%%% ------------------------------------------------------------------------

outputs(Base) ->
    [{"a new directory under a writable parent",
      fun() ->
              D = filename:join(Base, "new"),
              ?assertMatch({ok, #{dir := D}},
                           v(#{calls => [?ADD], output => {file, D}})),
              ?assertNot(filelib:is_dir(D))
      end},
     {"a binary path is accepted and made a string",
      fun() ->
              D = filename:join(Base, "bin"),
              ?assertMatch({ok, #{dir := D}},
                           v(#{calls => [?ADD],
                               output => {file, list_to_binary(D)}}))
      end},
     {"a relative path is made absolute",
      fun() ->
              {ok, Cwd} = file:get_cwd(),
              ?assertMatch({ok, #{dir := _}},
                           v(#{calls => [?ADD],
                               output => {file, "beamprobe_rel_x"}})),
              {ok, #{dir := D}} = v(#{calls => [?ADD],
                                       output => {file, "beamprobe_rel_x"}}),
              ?assertEqual(filename:join(Cwd, "beamprobe_rel_x"), D)
      end},
     {"no output: a directory named after the node and time in the cwd",
      fun() ->
              {ok, Cwd} = file:get_cwd(),
              {ok, #{dir := D}} = v(#{calls => [?ADD]}),
              ?assertEqual(Cwd, filename:dirname(D)),
              ?assertMatch({match, _},
                           re:run(filename:basename(D),
                                  "^beamprobe-.+-[0-9]{8}-[0-9]{6}$")),
              ?assertNot(lists:member($@, filename:basename(D)))
      end},
     {"an existing empty directory is accepted",
      fun() ->
              D = filename:join(Base, "empty"),
              ok = file:make_dir(D),
              ?assertMatch({ok, #{dir := D}},
                           v(#{calls => [?ADD], output => {file, D}}))
      end},
     {"a non-empty directory is refused",
      fun() ->
              D = filename:join(Base, "full"),
              ok = file:make_dir(D),
              ok = file:write_file(filename:join(D, "f"), <<>>),
              ?assertEqual({error, {output_exists, D}},
                           v(#{calls => [?ADD], output => {file, D}}))
      end},
     {"a path under a regular file is refused",
      fun() ->
              F = filename:join(Base, "regular"),
              ok = file:write_file(F, <<"x">>),
              D = filename:join(F, "sub"),
              ?assertEqual({error, {unwritable, D, enotdir}},
                           v(#{calls => [?ADD], output => {file, D}})),
              ?assertEqual({error, {unwritable, F, enotdir}},
                           v(#{calls => [?ADD], output => {file, F}}))
      end},
     {"a missing parent is refused",
      fun() ->
              D = filename:join([Base, "missing", "sub"]),
              ?assertEqual({error, {unwritable, D, enoent}},
                           v(#{calls => [?ADD], output => {file, D}}))
      end},
     {"format_error of every output error is a sentence",
      fun() ->
              [?assertNotEqual("", beamprobe_config:format_error(E))
               || E <- [{output_exists, "/x"}, {unwritable, "/x", eacces},
                        {unwritable, "/x", enotdir}, {no_match, ?ADD},
                        {already_traced, [self()]}, {remote_process, self()},
                        {something_else, 1}]]
      end}].

%% Match-spec actions that change trace flags are refused unless forced:
%% {silent, true} left a process in a state where OTP 25.2 segfaulted at
%% the next send trace on all processes (reached from calls/2 without
%% force); trace/enable_trace/disable_trace take other tools' flags.
flag_actions_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     fun(Base) ->
             Out = out(Base, "fa"),
             MS = fun(A) -> [{'_', [], [A]}] end,
             Bad = [{silent, true}, {trace, [send], []},
                    {trace, self(), [], [call]}, {enable_trace, send},
                    {disable_trace, self(), call}],
             [?_assertEqual({error, {flag_action, A}},
                            v(#{calls => [{{lists, seq, 2}, MS(A)}],
                                output => Out}))
              || A <- Bad] ++
             %% Nested in another action's argument, the VM runs it too
             %% ({message, {silent, true}} made the process silent for
             %% every session and tool): found at any depth, in tuple
             %% literals ({{...}}) and lists, not in {const, _}.
             [?_assertEqual({error, {flag_action, A}},
                            v(#{calls => [{{lists, seq, 2}, MS(Wrap)}],
                                output => Out}))
              || {Wrap, A} <-
                     [{{message, {silent, true}}, {silent, true}},
                      {{message, {{ok, {trace, [], [send]}}}},
                       {trace, [], [send]}},
                      {{message, [a, {enable_trace, call}]},
                       {enable_trace, call}},
                      {{display, {disable_trace, self(), call}},
                       {disable_trace, self(), call}},
                      {{message, ['$1' | {silent, false}]}, {silent, false}}]] ++
             [?_assertMatch({ok, _},
                            v(#{calls => [{{lists, seq, 2},
                                           MS({message,
                                               {const, {silent, true}}})}],
                                output => Out})),
              %% (In a send pattern: refused even with force,
              %% unsafe_send_action_test_.)
              ?_assertEqual({error, {unsafe_send_action, {silent, true}}},
                            v(#{events => [send],
                                messages => [{send, MS({silent, true})}],
                                output => Out})),
              ?_assertMatch({ok, _},
                            v(#{calls => [{{lists, seq, 2}, MS({silent, true})}],
                                force => true, output => Out})),
              ?_assertMatch({ok, _},
                            v(#{calls => [{{lists, seq, 2},
                                           MS({return_trace})}],
                                output => Out})),
              ?_assertMatch("match spec action {silent,true} changes trace "
                            "flags" ++ _,
                            beamprobe_config:format_error(
                              {flag_action, {silent, true}}))]
     end}.

%% A seq_trace label the match spec builds crashes an OTP 25 node (the
%% token keeps a pointer into the match spec's scratch heap: "eheap_alloc:
%% Cannot allocate 17577028086376 bytes" at the next send; the old check
%% accepted all of these, with or without force): refused even with force,
%% at any depth; atoms, small integers and arguments are fine.
unsafe_labels_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     fun(Base) ->
             Out = out(Base, "ul"),
             MS = fun(A) -> [{['$1'], [], [A]}] end,
             V = fun(A, Force) ->
                         v(#{calls => [{{lists, reverse, 1}, MS(A)}],
                             force => Force, output => Out})
                 end,
             Bad = [{set_seq_token, label, {{my_app, x}}},
                    {set_seq_token, label, {const, {my_app, x}}},
                    {set_seq_token, label, 100000000000000000000000},
                    {set_seq_token, label, {get_seq_token}},
                    {set_seq_token, label, '$_'},
                    {set_seq_token, label, [a]},
                    {set_seq_token, label, <<"l">>}],
             [?_assertEqual({error, {unsafe_label, A}}, V(A, F))
              || A <- Bad, F <- [false, true]] ++
             [?_assertEqual({error, {unsafe_label, hd(Bad)}},
                            V({message, {{ok, hd(Bad)}}}, true)),
              ?_assertEqual({error, {unsafe_label, hd(Bad)}},
                            v(#{events => [send],
                                messages => [{send, MS(hd(Bad))}],
                                output => Out}))] ++
             [?_assertMatch({ok, _}, V(A, false))
              || A <- [{set_seq_token, label, my_label},
                       {set_seq_token, label, 17},
                       {set_seq_token, label, {const, 17}},
                       {set_seq_token, label, '$1'},
                       {set_seq_token, serial, {{1, 2}}}]] ++
             [?_assertMatch("match spec action {set_seq_token,label," ++ _,
                            beamprobe_config:format_error(
                              {unsafe_label, hd(Bad)}))]
     end}.

%% A flag action in a send message pattern is refused even with force:
%% {disable_trace, send} there segfaults an OTP 25.2 node at the next
%% traced send (found by beamprobe_ms_fuzz_SUITE; the same with plain
%% erlang:trace_pattern(send, ...)).  The old check took it with force.
unsafe_send_actions_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     fun(Base) ->
             Out = out(Base, "usa"),
             V = fun(A, Force) ->
                         v(#{events => [send], force => Force, output => Out,
                             messages => [{send, [{'_', [], [A]}]}]})
                 end,
             Bad = [{disable_trace, send}, {disable_trace, {self}, send},
                    {disable_trace, all}, {trace, [send], []}, {silent, true}],
             [?_assertEqual({error, {unsafe_send_action, A}}, V(A, F))
              || A <- Bad, F <- [false, true]] ++
             [?_assertEqual({error, {unsafe_send_action, {disable_trace, send}}},
                            V({message, {{ok, {disable_trace, send}}}}, true)),
              ?_assertMatch({ok, _}, V({message, '$$'}, false)),
              %% Flag actions in call patterns: forced, as before.
              ?_assertMatch({ok, _},
                            v(#{calls => [{{lists, reverse, 1},
                                           [{'_', [], [{disable_trace, send}]}]}],
                                force => true, output => Out})),
              ?_assertMatch("send message pattern action {disable_trace,send}" ++ _,
                            lists:flatten(beamprobe_config:format_error(
                                            {unsafe_send_action,
                                             {disable_trace, send}})))]
     end}.

%% A match spec the VM would refuse on its own is refused at validation,
%% whatever the clause's arity: combined with another session's on the
%% same function, a clause of another arity was left out and the match
%% spec accepted; set alone when the other session stopped, the VM refused
%% it and the combined one stayed installed after both sessions (found by
%% beamprobe_ms_fuzz_SUITE).
bad_match_spec_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     fun(Base) ->
             Out = out(Base, "bms"),
             C = fun(MS) -> v(#{calls => [{{lists, reverse, 2}, MS}],
                                force => true, output => Out})
                 end,
             [?_assertEqual({error, {bad_match_spec, {lists, reverse, 2},
                                     ["Variable $1 is unbound."]}},
                            C([{[], ['$1'], []}])),
              ?_assertEqual({error, {bad_match_spec, {lists, reverse, 2},
                                     ["Function foo/0 does_not_exist."]}},
                            C([{'_', [], [{foo}]}])),
              ?_assertMatch({error, {bad_match_spec, send, [_]}},
                            v(#{events => [send], output => Out,
                                messages => [{send, [{'_', [{'==', '$9', 1}], []}]}]})),
              ?_assertMatch({ok, _}, C([{['$1', '$2'], [{is_list, '$1'}],
                                         [{message, '$2'}]}])),
              ?_assertMatch({ok, _}, C([{[], [], []}])),
              ?_assertEqual("the match spec of {lists,reverse,2} does not compile: "
                            "Variable $1 is unbound.",
                            lists:flatten(beamprobe_config:format_error(
                                            {bad_match_spec, {lists, reverse, 2},
                                             ["Variable $1 is unbound."]})))]
     end}.

%% A fun typed in the shell whose match spec is not valid: an error to
%% return, not a throw out of calls/2 (it killed the shell's evaluator).
shell_fun_invalid_ms_test() ->
    {ok, Toks, _} = erl_scan:string("fun([A, _]) -> self() ! hi end."),
    {ok, [Expr]} = erl_parse:parse_exprs(Toks),
    {value, F, _} = erl_eval:expr(Expr, []),
    ?assertMatch({error, "not a valid match specification" ++ _},
                 beamprobe_pattern_recon:parse({lists, seq, F}, false)).

%% A calls entry that is no pattern at all: the sentence names the forms
%% calls takes (it said only "bad value for option calls: 42").
bad_calls_hint_test() ->
    {error, {bad_option, calls, 42} = E} = beamprobe_config:validate(#{calls => [42]}),
    Text = beamprobe:format_error(E),
    ?assertMatch({match, _}, re:run(Text, "bad value for option calls: 42: calls is "
                                    "a list of \\{M, F, A\\}")),
    ?assertMatch({match, _}, re:run(Text, "\\{\\{M, F, A\\}, MatchSpec \\| true\\}")).

%% A sink's procs holds at most 64 processes (the NIF's per-sink table):
%% before, 65 passed validation and beamprobe:start/1 then failed with
%% {error, {bad_config, handlers}}, which says nothing of what is wrong.
sink_procs_limit_test() ->
    Ps = [spawn(fun() -> receive stop -> ok end end) || _ <- lists:seq(1, 65)],
    Sink = fun(L) -> {handler, beamprobe_test_handler, #{}, #{procs => L}} end,
    try
        E = {too_many, {output, procs}, 64},
        ?assertEqual({error, E}, v(#{calls => [?ADD], output => Sink(Ps)})),
        ?assertMatch("a sink's procs lists at most 64 processes" ++ _,
                     beamprobe:format_error(E)),
        %% 64, one listed twice: one entry each.
        P64 = lists:sublist(Ps, 64),
        {ok, #{sinks := [#{procs := Got}]}} =
            v(#{calls => [?ADD], output => Sink([hd(Ps) | P64])}),
        ?assertEqual(lists:usort(P64), Got)
    after
        [P ! stop || P <- Ps]
    end.
