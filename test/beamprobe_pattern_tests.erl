%% beamprobe_pattern_tests -- EUnit tests of the pattern language
%% (src/beamprobe_pattern.erl): what each form compiles to, the errors
%% (column and message) of malformed patterns, that the real VM accepts
%% every compiled match spec, and that compiled specs filter real trace
%% events.
-module(beamprobe_pattern_tests).

-include_lib("eunit/include/eunit.hrl").

%% Targets for installing compiled specs and for the live traces.
-export([dummy/0, dummy/1, dummy/2, dummy/3, dummy/4, dummy/5, dummy/6,
         dummy/7, dummy/8, target/1]).

dummy() -> ok.
dummy(_) -> ok.
dummy(_, _) -> ok.
dummy(_, _, _) -> ok.
dummy(_, _, _, _) -> ok.
dummy(_, _, _, _, _) -> ok.
dummy(_, _, _, _, _, _) -> ok.
dummy(_, _, _, _, _, _, _) -> ok.
dummy(_, _, _, _, _, _, _, _) -> ok.

target(X) -> {ok, X}.

%% ---- helpers -------------------------------------------------------------

c(MFA, MS) -> c(MFA, MS, []).
c(MFA, MS, Actions) ->
    #{kind => call, mfa => MFA, match_spec => MS, actions => Actions}.

msg(Kind, MS) -> #{kind => Kind, match_spec => MS}.

-define(ANY, [{'_', [], []}]).
-define(RET, {exception_trace}).
-define(STACK, {message, {process_dump}}).
-define(CALLER, {message, {caller}}).

%% {Pattern, Opts, Expected}
valid_cases() ->
    F = #{force => true},
    N = #{},
    [%% redbug's MFA forms
     {"m", N, c({m, '_', '_'}, ?ANY)},
     {"m:f", N, c({m, f, '_'}, ?ANY)},
     {"m:f/2", N, c({m, f, 2}, ?ANY)},
     {"m:f/0", N, c({m, f, 0}, ?ANY)},
     {"m:f/_", N, c({m, f, '_'}, ?ANY)},
     {"m:f()", N, c({m, f, 0}, [{[], [], []}])},
     {"m:f(A, b, _)", N, c({m, f, 3}, [{['$1', b, '_'], [], []}])},
     {"m:f(A, A)", N, c({m, f, 2}, [{['$1', '$1'], [], []}])},
     {"m:f(A, B, A)", N, c({m, f, 3}, [{['$1', '$2', '$1'], [], []}])},
     {"m:f(_, _)", N, c({m, f, 2}, [{['_', '_'], [], []}])},
     {"m:f(_X, _X)", N, c({m, f, 2}, [{['$1', '$1'], [], []}])},
     {"m:f('_', atom, X)", N, c({m, f, 3}, [{['_', atom, '$1'], [], []}])},
     {"m:_", N, c({m, '_', '_'}, ?ANY)},
     {"m:'_'", N, c({m, '_', '_'}, ?ANY)},
     {"m:_(X, X)", N, c({m, '_', '_'}, [{['$1', '$1'], [], []}])},
     {"m:_/2", N, c({m, '_', '_'}, [{['_', '_'], [], []}])},
     {"'Elixir.Foo':bar/1", N, c({'Elixir.Foo', bar, 1}, ?ANY)},
     {"'my mod':'my fun'(1)", N, c({'my mod', 'my fun', 1}, [{[1], [], []}])},
     {"m:f.", N, c({m, f, '_'}, ?ANY)},
     {"  m : f / 2  ", N, c({m, f, 2}, ?ANY)},
     {<<"m:f/2">>, N, c({m, f, 2}, ?ANY)},
     %% literal arguments
     {"m:f(\"string\")", N, c({m, f, 1}, [{["string"], [], []}])},
     {"m:f(<<\"bin\">>, <<1, 2:16>>)", N,
      c({m, f, 2}, [{[<<"bin">>, <<1, 0, 2>>], [], []}])},
     {"m:f([a|_], [])", N, c({m, f, 2}, [{[[a | '_'], []], [], []}])},
     {"m:f([1, X | T])", N, c({m, f, 1}, [{[[1, '$1' | '$2']], [], []}])},
     {"m:f({a, B, _}, {})", N, c({m, f, 2}, [{[{a, '$1', '_'}, {}], [], []}])},
     {"m:f(#{k := V}) when V > 1", N,
      c({m, f, 1}, [{[#{k => '$1'}], [{'>', '$1', 1}], []}])},
     {"m:f(#{k => 1, \"s\" := {_, S}}, #{})", N,
      c({m, f, 2}, [{[#{k => 1, "s" => {'_', '$1'}}, #{}], [], []}])},
     {"m:f(-1, -2.5, +3)", N, c({m, f, 3}, [{[-1, -2.5, 3], [], []}])},
     {"m:f($a, 1.0e3, 16#ff)", N, c({m, f, 3}, [{[97, 1000.0, 255], [], []}])},
     {"m:f(\"ab\" ++ T)", N, c({m, f, 1}, [{[[$a, $b | '$1']], [], []}])},
     {"m:f('Quoted', 'with space')", N,
      c({m, f, 2}, [{['Quoted', 'with space'], [], []}])},
     {"m:f(\"é\")", N, c({m, f, 1}, [{[[233]], [], []}])},
     %% guards
     {"lists:seq(A, B) when A > B -> return", N,
      c({lists, seq, 2}, [{['$1', '$2'], [{'>', '$1', '$2'}], [?RET]}], [return])},
     {"m:f(A, B) when A > B, is_list(B)", N,
      c({m, f, 2}, [{['$1', '$2'], [{'>', '$1', '$2'}, {is_list, '$2'}], []}])},
     {"m:f(X) when X > 10; X < 0", N,
      c({m, f, 1}, [{['$1'], [{'>', '$1', 10}], []},
                    {['$1'], [{'<', '$1', 0}], []}])},
     {"m:f(X) when is_integer(X) andalso X >= 0 orelse X =:= undefined", N,
      c({m, f, 1}, [{['$1'], [{'orelse',
                               {'andalso', {is_integer, '$1'}, {'>=', '$1', 0}},
                               {'=:=', '$1', undefined}}], []}])},
     {"m:f(X) when not is_atom(X), X =/= []", N,
      c({m, f, 1}, [{['$1'], [{'not', {is_atom, '$1'}}, {'=/=', '$1', []}], []}])},
     {"m:f(X) when X == {a, 1}", N,
      c({m, f, 1}, [{['$1'], [{'==', '$1', {{a, 1}}}], []}])},
     {"m:f(X) when X == [a, {b}]", N,
      c({m, f, 1}, [{['$1'], [{'==', '$1', [a, {{b}}]}], []}])},
     {"m:f(X) when X == '_'; X == '$1'", N,
      c({m, f, 1}, [{['$1'], [{'==', '$1', {const, '_'}}], []},
                    {['$1'], [{'==', '$1', {const, '$1'}}], []}])},
     {"m:f(X) when element(1, X) =:= ok, map_size(X) > 0", N,
      c({m, f, 1}, [{['$1'], [{'=:=', {element, 1, '$1'}, ok},
                              {'>', {map_size, '$1'}, 0}], []}])},
     {"m:f(X) when is_boolean(X)", N,
      c({m, f, 1}, [{['$1'], [{'orelse', {'=:=', '$1', true},
                               {'=:=', '$1', false}}], []}])},
     {"m:f(X) when -X > 1", N,
      c({m, f, 1}, [{['$1'], [{'>', {'-', '$1'}, 1}], []}])},
     {"m:f(X) when X + 1 * 2 > 3 - X div 2", N,
      c({m, f, 1}, [{['$1'], [{'>', {'+', '$1', {'*', 1, 2}},
                               {'-', 3, {'div', '$1', 2}}}], []}])},
     {"m:f(X) when node() == X; self() == X", N,
      c({m, f, 1}, [{['$1'], [{'==', {node}, '$1'}], []},
                    {['$1'], [{'==', {self}, '$1'}], []}])},
     {"m:f(X) when erlang:is_list(X)", N,
      c({m, f, 1}, [{['$1'], [{is_list, '$1'}], []}])},
     {"m:f(X, Y) when (X band 3 =:= 1) xor Y", N,
      c({m, f, 2}, [{['$1', '$2'], [{'xor', {'=:=', {'band', '$1', 3}, 1}, '$2'}],
                     []}])},
     {"m:f(R) when is_record(R, state, 3)", N,
      c({m, f, 1}, [{['$1'], [{is_record, '$1', state, 3}], []}])},
     {"m:f(A, B)\n  when A > B -> return", N,
      c({m, f, 2}, [{['$1', '$2'], [{'>', '$1', '$2'}], [?RET]}], [return])},
     {"ets:lookup(T, hostname) when is_integer(T) -> stack", N,
      c({ets, lookup, 2}, [{['$1', hostname], [{is_integer, '$1'}], [?STACK]}],
        [stack])},
     %% actions
     {"m:f -> return", N, c({m, f, '_'}, [{'_', [], [?RET]}], [return])},
     {"m:f(X) -> return;stack", N,
      c({m, f, 1}, [{['$1'], [], [?RET, ?STACK]}], [return, stack])},
     {"m:f/1 -> caller", N, c({m, f, 1}, [{'_', [], [?CALLER]}], [caller])},
     {"m:f -> stack", N, c({m, f, '_'}, [{'_', [], [?STACK]}], [stack])},
     {"m:f -> caller;stack", N,
      c({m, f, '_'}, [{'_', [], [{message, {{{caller}, {process_dump}}}}]}],
        [caller, stack])},
     {"m:f->return,stack,caller", N,
      c({m, f, '_'}, [{'_', [], [?RET, {message, {{{caller}, {process_dump}}}}]}],
        [return, stack, caller])},
     {"m:f -> return;return", N, c({m, f, '_'}, [{'_', [], [?RET]}], [return])},
     %% caller_line (OTP 25): the caller and the line of the call.
     {"m:f/1 -> caller_line", N,
      c({m, f, 1}, [{'_', [], [{message, {caller_line}}]}], [caller_line])},
     {"m:f -> caller_line;stack", N,
      c({m, f, '_'}, [{'_', [], [{message, {{{caller_line}, {process_dump}}}}]}],
        [caller_line, stack])},
     {"m:f -> caller;caller_line", N,
      c({m, f, '_'}, [{'_', [], [{message, {caller_line}}]}],
        [caller, caller_line])},
     {"M.f(x) :: caller_line", N,
      c({'Elixir.M', f, 1}, [{['$1'], [], [{message, {caller_line}}]}],
        [caller_line])},
     {"erlang:demonitor->return", N,
      c({erlang, demonitor, '_'}, [{'_', [], [?RET]}], [return])},
     {"m:f(X) when X > 1; X < -1 -> return", N,
      c({m, f, 1}, [{['$1'], [{'>', '$1', 1}], [?RET]},
                    {['$1'], [{'<', '$1', -1}], [?RET]}], [return])},
     %% message patterns
     {"send", N, msg(send, [{['_', '_'], [], []}])},
     {"'receive'", N, msg('receive', [{['_', '_', '_'], [], []}])},
     {"receive", N, msg('receive', [{['_', '_', '_'], [], []}])},
     {"send({ping, _})", N, msg(send, [{['_', {ping, '_'}], [], []}])},
     {"send(To, Msg) when is_pid(To), is_tuple(Msg)", N,
      msg(send, [{['$1', '$2'], [{is_pid, '$1'}, {is_tuple, '$2'}], []}])},
     {"'receive'(X) when is_atom(X)", N,
      msg('receive', [{['_', '_', '$1'], [{is_atom, '$1'}], []}])},
     {"'receive'(Node, From, {reply, _})", N,
      msg('receive', [{['$1', '$2', {reply, '_'}], [], []}])},
     {"send:_", N, c({send, '_', '_'}, ?ANY)},
     %% Elixir syntax
     {"Mod.fun(a, b) when a > 1 :: return", N,
      c({'Elixir.Mod', 'fun', 2}, [{['$1', '$2'], [{'>', '$1', 1}], [?RET]}],
        [return])},
     {"Mod.fun/2", N, c({'Elixir.Mod', 'fun', 2}, ?ANY)},
     {"Mod.fun", N, c({'Elixir.Mod', 'fun', '_'}, ?ANY)},
     {"Mod", N, c({'Elixir.Mod', '_', '_'}, ?ANY)},
     {":ets.lookup/2", N, c({ets, lookup, 2}, ?ANY)},
     {":ets", N, c({ets, '_', '_'}, ?ANY)},
     {"Foo.Bar.baz(x)", N, c({'Elixir.Foo.Bar', baz, 1}, [{['$1'], [], []}])},
     {"Elixir.Foo.bar/1", N, c({'Elixir.Foo', bar, 1}, ?ANY)},
     {":\"Elixir.Foo\".bar/1", N, c({'Elixir.Foo', bar, 1}, ?ANY)},
     {"Foo.bar(:ok, \"x\", 'x', _, _y, _y, nil, Baz)", N,
      c({'Elixir.Foo', bar, 8},
        [{[ok, <<"x">>, "x", '_', '_', '_', nil, 'Elixir.Baz'], [], []}])},
     {"Foo.bar(x, x)", N, c({'Elixir.Foo', bar, 2}, [{['$1', '$1'], [], []}])},
     {"Foo.bar(\"é\")", N, c({'Elixir.Foo', bar, 1}, [{[<<"é"/utf8>>], [], []}])},
     {"Foo.bar(%{k: v, \"s\" => _}, %{})", N,
      c({'Elixir.Foo', bar, 2}, [{[#{k => '$1', <<"s">> => '_'}, #{}], [], []}])},
     {"Foo.bar([h | t], {:ok, x}) when is_list(t) && x !== nil :: caller", N,
      c({'Elixir.Foo', bar, 2},
        [{[['$1' | '$2'], {ok, '$3'}],
          [{'andalso', {is_list, '$2'}, {'=/=', '$3', nil}}], [?CALLER]}],
        [caller])},
     {"Foo.bar(a) when a != 1 and not is_nil(a) or a === 2 :: return;stack", N,
      c({'Elixir.Foo', bar, 1},
        [{['$1'],
          [{'orelse', {'andalso', {'/=', '$1', 1}, {'not', {'==', '$1', nil}}},
            {'=:=', '$1', 2}}],
          [?RET, ?STACK]}], [return, stack])},
     {"Foo.valid?(x) when elem(x, 0) == :a", N,
      c({'Elixir.Foo', 'valid?', 1},
        [{['$1'], [{'==', {element, 1, '$1'}, a}], []}])},
     {"Foo.run!(x) when !is_atom(x) || x <= 5", N,
      c({'Elixir.Foo', 'run!', 1},
        [{['$1'], [{'orelse', {'not', {is_atom, '$1'}}, {'=<', '$1', 5}}], []}])},
     {"Foo.bar(m) when is_map_key(m, :k)", N,
      c({'Elixir.Foo', bar, 1}, [{['$1'], [{is_map_key, k, '$1'}], []}])},
     {"Foo.bar(x) when div(x, 2) == 1 or rem(x, 3) == 0", N,
      c({'Elixir.Foo', bar, 1},
        [{['$1'], [{'orelse', {'==', {'div', '$1', 2}, 1},
                    {'==', {'rem', '$1', 3}, 0}}], []}])},
     {"Foo.bar(-1, 1_000, :\"a b\", true)", N,
      c({'Elixir.Foo', bar, 4}, [{[-1, 1000, 'a b', true], [], []}])},
     {"Foo.bar(x) when x > 1; x < -1 :: return", N,
      c({'Elixir.Foo', bar, 1}, [{['$1'], [{'>', '$1', 1}], [?RET]},
                                 {['$1'], [{'<', '$1', -1}], [?RET]}], [return])},
     {":send({:ping, _})", N, msg(send, [{['_', {ping, '_'}], [], []}])},
     {":receive", N, msg('receive', [{['_', '_', '_'], [], []}])},
     {":send", N, msg(send, [{['_', '_'], [], []}])},
     %% refused without force, accepted with it
     {"io:format/2", F, c({io, format, 2}, ?ANY)},
     {"_", F, c({'_', '_', '_'}, ?ANY)},
     {"_:_", F, c({'_', '_', '_'}, ?ANY)},
     {"beamprobe_pattern_tests:target(X) when is_atom(X)", F,
      c({beamprobe_pattern_tests, target, 1}, [{['$1'], [{is_atom, '$1'}], []}])},
     {"erlang:display/1 -> return", F,
      c({erlang, display, 1}, [{'_', [], [?RET]}], [return])}].

%% {Pattern, Column, MessageSubstring}
error_cases() ->
    [{"", 1, "empty pattern"},
     {"   ", 1, "empty pattern"},
     {".", 1, "empty pattern"},
     {"m:", 3, "expected a function name after ':'"},
     {"m x", 3, "expected ':' or '.' after the module name"},
     {"m(X)", 2, "expected ':' or '.' after the module name"},
     {"1:f", 1, "expected a module name"},
     {"m:F", 3, "expected a function name after ':'"},
     {"m:f/x", 5, "arity must be an integer 0..255"},
     {"m:f/256", 5, "arity must be an integer 0..255"},
     {"m:f/-1", 5, "arity must be an integer 0..255"},
     {"m:f/", 5, "arity must be an integer 0..255"},
     {"m:f/2 x", 7, "unexpected 'x' after the arity"},
     {"m:f(A) x", 8, "unexpected 'x' after the argument list"},
     {"m:f x", 5, "expected '/', '(', 'when' or '->' after the function name"},
     {"m:f(A", 4, "unbalanced parenthesis"},
     {"m:f(A))", 7, "unbalanced parenthesis"},
     {"m:f((A)", 4, "unbalanced parenthesis"},
     {"m:f([A)", 7, "unbalanced bracket"},
     {"m:f({A)", 7, "unbalanced brace"},
     {"m:f(A, B) when A > B) -> return", 21, "unbalanced parenthesis"},
     {"m:f(A,)", 7, "syntax error before: ')'"},
     {"m:f(A) when", 12, "expected a guard after 'when'"},
     {"m:f(A) when -> return", 13, "expected a guard after 'when'"},
     {"m:f(X) when X >", 16, "incomplete guard"},
     {"m:f(X) when X > -> return", 17, "syntax error before: '->'"},
     {"m:f -> retrun", 8, "unknown action 'retrun' (expected return, stack, caller or caller_line)"},
     {"m:f -> return;staak", 15, "unknown action 'staak'"},
     {"m:f ->", 7, "expected an action after '->'"},
     {"m:f(X) -> return;", 18, "expected an action after ';'"},
     {"m:f -> return stack", 15, "expected ';' between actions"},
     {"m:f -> 42", 8, "expected an action"},
     {"m:f -> return -> stack", 15, "expected ';' between actions"},
     {"m:f(#r{a=1})", 5, "records are not supported"},
     {"m:f(X) when X#r.a == 1", 14, "records are not supported"},
     {"m:f(A) when B > 1", 13, "variable 'B' is unbound"},
     {"m:f(A) when lists:member(A, [1])", 13, "illegal guard expression"},
     {"m:f(A) when foo(A)", 13, "illegal guard expression"},
     {"m:f(A) when A ! 1", 15, "illegal guard expression"},
     {"m:f(A) when A ++ [1] == []", 15, "illegal guard expression"},
     {"m:f(A) when A = 1", 13, "illegal guard expression: '=' matches"},
     {"m:f(A) when tuple_size(A) == 2", 13, "tuple_size/1 is not supported by match specs"},
     {"m:f(A) when _ == 1", 13, "'_' cannot be used in a guard"},
     {"m:f(A) when <<A>> == <<1>>", 13, "binaries in guards must be constant"},
     {"m:f(\"abc", 5, "unterminated string"},
     {"m:f(<<X:8>>)", 5, "binary patterns must be constant"},
     {"m:f('$1')", 5, "cannot be matched in a match spec head"},
     {"m:f(#{K := 1})", 7, "map keys must be constants"},
     {"m:f(X = {a, _})", 5, "pattern aliases"},
     {"m:f(g(X))", 5, "illegal pattern"},
     {"m:f(X ++ \"a\")", 7, "left side of '++'"},
     {"m:f. x", 4, "unexpected '.'"},
     {"m:f % comment", 5, "unexpected '%'"},
     {"m:f(A, B)\n  when C > B", 18, "variable 'C' is unbound"},
     {"send -> return", 6, "actions are not allowed in send/'receive' patterns"},
     {"send(a, b, c)", 5, "a send pattern takes (Msg) or (Receiver, Msg)"},
     {"'receive'(a, b)", 10, "a 'receive' pattern takes"},
     {"send(X) when Y > 1", 14, "variable 'Y' is unbound"},
     {"when X", 1, "missing function pattern before 'when'"},
     {"-> return", 1, "missing function pattern before '->'"},
     %% Elixir
     {"Foo.bar(%s{})", 9, "a struct pattern needs its module's name"},
     {"Foo.bar(%_{})", 9, "a struct pattern needs its module's name"},
     {"Foo.bar(%S)", 11, "expected '{' after the struct's name"},
     {"Foo.bar(x) when x in y", 19, "'in' needs a literal list"},
     {"Foo.bar(x) when x in [y]", 23, "'in' needs a list of literals"},
     {"Foo.bar(x) when f(x) in [1]", 22, "'in' needs a variable"},
     {"Foo.bar(a <> b)", 11, "only \"literal prefix\" <> _rest is supported"},
     {"Foo.bar(\"a\" <> rest)", 16, "the rest of a \"prefix\" <> rest pattern cannot be bound"},
     {"Foo.bar(\"a\" <> \"b\")", 16, "only \"literal prefix\" <> _rest"},
     {"Foo.bar(x) when x > @limit", 21, "module attributes (@name) cannot be used"},
     {"Foo.bar(@x)", 9, "module attributes"},
     {"Foo.bar(x) when x |> f", 19, "'|>' is not supported"},
     {"Foo.bar(x) :: retrun", 15, "unknown action 'retrun'"},
     {"Foo.bar(\"a#{x}\")", 9, "string interpolation is not supported"},
     {"Foo.bar([a: 1, 2])", 17, "unexpected expression after a keyword list"},
     {"Foo.bar({a: 1})", 10, "a keyword pair (key: value) belongs in a list"},
     {"Foo.bar(&f/1)", 9, "captures (&) are not supported"},
     {"Foo.bar(y) when x > 1", 17, "variable 'x' is unbound"},
     {"Foo.bar(x) # comment", 12, "unexpected '#'"},
     {"Foo.bar(x", 8, "unbalanced parenthesis"},
     {"Foo.bar/x", 9, "arity must be an integer 0..255"},
     {"Foo bar", 5, "expected ':' or '.' after the module name"},
     {"Foo.bar(x) when tuple_size(x) == 2", 17, "not supported by match specs"},
     %% safety
     {"io:format/2", 1, "would trace the tracer itself / flood the node; use force => true"},
     {"io", 1, "would trace the tracer itself"},
     {"io_lib:format", 1, "would trace the tracer itself"},
     {"io_lib_format:fwrite/2", 1, "would trace the tracer itself"},
     {"io_lib_pretty", 1, "would trace the tracer itself"},
     {"beamprobe", 1, "would trace the tracer itself"},
     {"beamprobe_session:init/1", 1, "would trace the tracer itself"},
     {"beamprobe_pattern:parse(X) -> return", 1, "use force => true"},
     {"erlang:display/1", 1, "would trace the tracer itself"},
     {"erlang:display", 1, "would trace the tracer itself"},
     {"erlang", 1, "would trace the tracer itself"},
     {"group:server/3", 1, "would trace the tracer itself"},
     {"user_drv", 1, "would trace the tracer itself"},
     {"prim_file:read_file/1", 1, "would trace the tracer itself"},
     {"_", 1, "would trace the tracer itself / flood the node"},
     {"_:_", 1, "would trace the tracer itself / flood the node"},
     {"'_':'_'/2", 1, "would trace the tracer itself / flood the node"},
     {":io.format/2", 1, "would trace the tracer itself"},
     {"_:f/1", 1, "the module '_' needs the function '_' too"}].

%% ---- valid forms ---------------------------------------------------------

valid_test_() ->
    [{label(P), ?_assertEqual({ok, Want}, beamprobe_pattern:parse(P, Opts))}
     || {P, Opts, Want} <- valid_cases()].

%% Options default to #{}: parse/1 is parse/2 without force.
parse1_test_() ->
    [{label(P), ?_assertEqual({ok, Want}, beamprobe_pattern:parse(P))}
     || {P, Opts, Want} <- valid_cases(), Opts =:= #{}].

%% The forced cases are refused without force.
force_needed_test_() ->
    [{label(P), ?_assertMatch({error, {1, "" ++ _}}, beamprobe_pattern:parse(P))}
     || {P, #{force := true}, _} <- valid_cases()].

%% ---- errors --------------------------------------------------------------

error_test_() ->
    [{label(P),
      fun() ->
              Result = beamprobe_pattern:parse(P),
              ?assertMatch({error, {_, _}}, Result),
              {error, {Col, Msg}} = Result,
              ?assertEqual({P, Col0}, {P, Col}),
              ?assert(io_lib:char_list(Msg)),
              case string:find(Msg, Sub) of
                  nomatch -> ?assertEqual(Sub, Msg);
                  _ -> ok
              end
      end}
     || {P, Col0, Sub} <- error_cases()].

%% Forcing does not silence errors other than the safety check.
force_keeps_syntax_errors_test() ->
    ?assertMatch({error, {6, "arity" ++ _}},
                 beamprobe_pattern:parse("io:f/x", #{force => true})),
    ?assertMatch({error, {1, "the module '_' needs" ++ _}},
                 beamprobe_pattern:parse("_:f/1", #{force => true})).

bad_input_test() ->
    ?assertEqual({error, {1, "a pattern must be a string or a binary"}},
                 beamprobe_pattern:parse([foo])),
    %% Not UTF-8: the column and the byte, not "not a string".
    ?assertEqual({error, {1, "byte 1 (16#FF) is not UTF-8 here: patterns "
                          "are UTF-8 text"}},
                 beamprobe_pattern:parse(<<255, 0>>)),
    ?assertEqual({error, {7, "byte 8 (16#E9) is not UTF-8 here: patterns "
                          "are UTF-8 text"}},
                 beamprobe_pattern:parse(<<"m:f(", 16#c3, 16#a9, "t", 16#e9,
                                           ")">>)),
    %% Cut in the middle of a character.
    ?assertMatch({error, {4, "byte 4 (16#C3) is not UTF-8" ++ _}},
                 beamprobe_pattern:parse(<<"m:f", 16#c3>>)),
    ?assertError(badarg, beamprobe_pattern:parse("m", #{force => yes})).

format_error_test() ->
    {error, E} = beamprobe_pattern:parse("m:f/x"),
    ?assertEqual("column 5: arity must be an integer 0..255",
                 beamprobe_pattern:format_error(E)),
    ?assertEqual("column 3: \x{e9}",
                 beamprobe_pattern:format_error({3, [16#e9]})).

%% Enough cases (the brief asks for at least 60).
case_count_test() ->
    ?assert(length(valid_cases()) + length(error_cases()) >= 60).

%% Random fragment soup never makes parse/2 raise: every result is a
%% spec the VM accepts or an error with a column inside the pattern.
robustness_test() ->
    rand:seed(exsss, {17, 42, 4711}),
    Frags = {"m", ":", "f", "(", ")", "[", "]", "{", "}", "<<", ">>", "#{",
             "%{", "%", "#", "X", "x", "_", "_x", "Foo", ".", ",", ";", "|",
             "->", "::", "when", " ", "\"s\"", "'q'", "1", "-", "/", "==",
             "!", "=", "&&", "||", "<>", ":=", "=>", "and", "not", "div",
             "is_atom", "elem", "return", "stack", "caller", "send",
             "receive", "'receive'", "$", "?", "\n", "1.5", "in", "fun",
             "<=", "===", "!=", "'$1'", "#r", "++"},
    lists:foreach(
      fun(_) ->
              S = lists:append([element(rand:uniform(tuple_size(Frags)), Frags)
                                || _ <- lists:seq(1, rand:uniform(12))]),
              case beamprobe_pattern:parse(S, #{force => true}) of
                  {ok, P} ->
                      ?assertMatch({S, {ok, _, _, _}},
                                   {S, erlang:match_spec_test(
                                         ms_args(P), maps:get(match_spec, P),
                                         trace)});
                  {error, {Col, Msg}} ->
                      ?assert(is_integer(Col) andalso Col >= 1
                              andalso Col =< length(S) + 1),
                      ?assert(io_lib:char_list(Msg))
              end
      end, lists:seq(1, 20000)).

ms_args(#{kind := send}) -> [self(), x];
ms_args(#{kind := 'receive'}) -> [node(), self(), x];
ms_args(#{match_spec := [{'_', _, _} | _]}) -> [x];
ms_args(#{match_spec := [{Head, _, _} | _]}) -> [x || _ <- Head].

%% ---- the real VM accepts every compiled spec -----------------------------

vm_accepts_test_() ->
    [{label(P), fun() -> vm_accepts(Want) end}
     || {P, _Opts, Want} <- valid_cases()].

vm_accepts(#{kind := call, match_spec := MS}) ->
    Arity = case MS of
                [{'_', _, _} | _] -> '_';
                [{Head, _, _} | _] -> length(Head)
            end,
    Args = case Arity of '_' -> [x]; _ -> lists:duplicate(Arity, x) end,
    ?assertMatch({ok, _, _, _}, erlang:match_spec_test(Args, MS, trace)),
    MFA = {?MODULE, dummy, Arity},
    try
        ?assert(erlang:trace_pattern(MFA, MS, [local]) >= 1)
    after
        erlang:trace_pattern(MFA, false, [local])
    end;
vm_accepts(#{kind := Kind, match_spec := MS}) ->
    Args = case Kind of
               send -> [self(), x];
               'receive' -> [node(), self(), x]
           end,
    ?assertMatch({ok, _, _, _}, erlang:match_spec_test(Args, MS, trace)),
    try
        ?assert(is_integer(erlang:trace_pattern(Kind, MS, [])))
    after
        erlang:trace_pattern(Kind, true, [])
    end.

%% ---- compiled specs filter real trace events -----------------------------

%% return = exception_trace: a return_from for a normal return and an
%% exception_from when the call raises; the guard filters the rest.
live_guard_and_return_test() ->
    {ok, #{mfa := MFA, match_spec := MS}} =
        beamprobe_pattern:parse("lists:seq(A, B) when A > B -> return"),
    Events = with_call_trace(
               MFA, MS,
               fun() ->
                       [1, 2, 3] = lists:seq(1, 3),
                       [] = lists:seq(3, 2),
                       {'EXIT', _} = (catch lists:seq(5, 1)),
                       ok
               end),
    ?assertMatch([{call, {lists, seq, [3, 2]}},
                  {return_from, {lists, seq, 2}, []},
                  {call, {lists, seq, [5, 1]}},
                  {exception_from, {lists, seq, 2}, {error, _}}],
                 Events).

%% caller;stack: one message carrying {CallerMFA, ProcessDump}; the guard
%% keeps only atom arguments.
live_caller_and_stack_test() ->
    {ok, #{mfa := MFA, match_spec := MS}} =
        beamprobe_pattern:parse("beamprobe_pattern_tests:target(X) when is_atom(X)"
                                " -> caller;stack", #{force => true}),
    ?assertEqual({?MODULE, target, 1}, MFA),
    Events = with_call_trace(MFA, MS, fun() -> call_targets([1, a, "s", b]) end),
    ?assertMatch([{call, {?MODULE, target, [a]},
                   {{?MODULE, call_targets, 1}, Dump1}},
                  {call, {?MODULE, target, [b]},
                   {{?MODULE, call_targets, 1}, Dump2}}]
                   when is_binary(Dump1) andalso is_binary(Dump2),
                 Events).

%% An Elixir-syntax pattern on an Erlang module, with a head match and
%% repeated variables.
live_elixir_head_match_test() ->
    {ok, #{mfa := MFA, match_spec := MS}} =
        beamprobe_pattern:parse(":lists.seq(x, x) :: return"),
    ?assertEqual({lists, seq, 2}, MFA),
    Events = with_call_trace(
               MFA, MS,
               fun() -> [1, 2] = lists:seq(1, 2), [7] = lists:seq(7, 7), ok end),
    ?assertEqual([{call, {lists, seq, [7, 7]}},
                  {return_from, {lists, seq, 2}, [7]}], Events).

%% send({ping, _}) reports only the matching sends.
live_send_test() ->
    {ok, #{kind := send, match_spec := MS}} =
        beamprobe_pattern:parse("send({ping, _})"),
    Sink = spawn(fun() -> receive stop -> ok end end),
    Events = with_trace(
               [send],
               fun() -> erlang:trace_pattern(send, MS, []) end,
               fun() -> erlang:trace_pattern(send, true, []) end,
               fun() -> Sink ! {ping, 1}, Sink ! {pong, 2}, Sink ! {ping, 3}, ok end),
    Sink ! stop,
    ?assertEqual([{send, {ping, 1}, Sink}, {send, {ping, 3}, Sink}], Events).

%% 'receive'(X) when is_atom(X) reports only atoms received.
live_receive_test() ->
    {ok, #{kind := 'receive', match_spec := MS}} =
        beamprobe_pattern:parse("'receive'(X) when is_atom(X)"),
    Self = self(),
    Events = with_trace(
               ['receive'],
               fun() -> erlang:trace_pattern('receive', MS, []) end,
               fun() -> erlang:trace_pattern('receive', true, []) end,
               fun() ->
                       Self ! {send_me, self(), [{x}, hello, 42, world]},
                       [receive M -> M end || _ <- [1, 2, 3, 4]],
                       ok
               end,
               fun(P) ->
                       receive {send_me, P, Ms} -> [P ! M || M <- Ms] end
               end),
    %% 'go' is an atom too: it starts the traced process.
    ?assertEqual([{'receive', go}, {'receive', hello}, {'receive', world}], Events).

call_targets([]) ->
    ok;
call_targets([X | Xs]) ->
    {ok, X} = ?MODULE:target(X),
    call_targets(Xs).

with_call_trace(MFA, MS, Fun) ->
    with_trace([call],
               fun() -> erlang:trace_pattern(MFA, MS, [local]) end,
               fun() -> erlang:trace_pattern(MFA, false, [local]) end,
               Fun).

with_trace(Flags, Setup, Cleanup, Fun) ->
    with_trace(Flags, Setup, Cleanup, Fun, fun(_) -> ok end).

%% Runs Fun in a new process traced with Flags (tracer: this process),
%% with Setup/Cleanup around it; Helper(P) runs here while P works.
%% Returns the trace events of P, without the {trace, P} prefix.
with_trace(Flags, Setup, Cleanup, Fun, Helper) ->
    Self = self(),
    P = spawn(fun() ->
                      receive go -> ok end,
                      Result = Fun(),
                      Self ! {done, self(), Result}
              end),
    Setup(),
    try
        1 = erlang:trace(P, true, [{tracer, Self} | Flags]),
        P ! go,
        Helper(P),
        receive {done, P, ok} -> ok after 5000 -> error(timeout) end,
        Ref = erlang:trace_delivered(P),
        receive {trace_delivered, P, Ref} -> ok after 5000 -> error(timeout) end,
        collect(P)
    after
        catch erlang:trace(P, false, [all]),
        Cleanup()
    end.

collect(P) ->
    receive
        T when element(1, T) =:= trace, element(2, T) =:= P ->
            [list_to_tuple(tl(tl(tuple_to_list(T)))) | collect(P)]
    after 0 ->
            []
    end.

label(P) when is_binary(P) -> label(binary_to_list(P));
label(P) -> lists:flatten(io_lib:format("~tp", [P])).

%% One test per {Pattern, Yes, No}: the VM's erlang:match_spec_test/3 runs
%% the pattern's compiled match spec on argument lists that must (Yes)
%% and must not (No) match.
match_cases(Cases) ->
    [{label(P),
      fun() ->
              {ok, #{match_spec := MS}} = beamprobe_pattern:parse(P),
              [?assertMatch({Args, {ok, true, _, _}},
                            {Args, erlang:match_spec_test(Args, MS, trace)})
               || Args <- Yes],
              [?assertMatch({Args, {ok, false, _, _}},
                            {Args, erlang:match_spec_test(Args, MS, trace)})
               || Args <- No]
      end} || {P, Yes, No} <- Cases].

%% ---- Elixir: structs, in, "prefix" <> _ (issue 11) -------------------------
%% Checked against the VM: erlang:match_spec_test/3 runs the compiled match
%% spec on arguments that must and must not match.

elixir_semantics_test_() ->
    Order = fun(S) -> #{'__struct__' => 'Elixir.Shop.Order', id => 1, status => S} end,
    Cases =
        [{"Shop.buy(%Shop.Order{status: :paid})",
          [[Order(paid)]], [[Order(sent)], [#{status => paid}],
                            [#{'__struct__' => 'Elixir.Other', status => paid}]]},
         {"Shop.buy(%Shop.Order{})", [[Order(x)]], [[#{}], [x]]},
         {"Shop.buy(%Shop.Order{status: s}) when s in [:paid, :sent]",
          [[Order(paid)], [Order(sent)]], [[Order(new)]]},
         {"Shop.buy(x) when x in [1, :a, \"s\", 2.5]",
          [[1], [a], [<<"s">>], [2.5]], [[1.0], [b], ["s"], [2]]},
         {"Shop.buy(x) when x not in [1, 2]", [[3], [a]], [[1], [2]]},
         {"Shop.buy(x) when x in 1..9", [[1], [9]], [[0], [10], [1.5]]},
         %% Elixir's decreasing range: 3 in 5..1 (it never matched)
         {"Shop.buy(x) when x in 5..1", [[1], [3], [5]], [[0], [6]]},
         {"Shop.buy(x) when x not in -1..-5", [[0], [-6]], [[-1], [-3], [-5]]},
         {"Shop.buy(x) when x in []", [], [[1]]},
         {"Shop.buy(x, y) when x in [1] and y in [:a]", [[1, a]], [[1, b], [2, a]]},
         {"Shop.buy(\"ab\" <> _rest)", [[<<"ab">>], [<<"abc">>]],
          [[<<"a">>], [<<"xab">>], ["abc"], [ab]]},
         {"Shop.buy(\"hé\" <> _, n) when n > 1", [[<<"héllo"/utf8>>, 2]],
          [[<<"héllo"/utf8>>, 1], [<<"he">>, 2]]}],
    match_cases(Cases).

%% ---- Elixir: Elixir's escapes, negative ranges, reserved-word keys ---------
%% A string was read with Erlang's escapes ("\u{1F600}" matched <<"u{1F600}">>,
%% "\101" matched "A" where Elixir reads "101"); x in -5..5 was refused;
%% %{end: e} was a syntax error and [in: 1] an error about 'in'; "" was
%% refused as a non-constant binary.

elixir_literals_test_() ->
    Cases =
        [{"Shop.buy(\"\\u{1F600}\")", [[<<"😀"/utf8>>]], [[<<"u{1F600}">>]]},
         {"Shop.buy(\"\\u00e9\")", [[<<"é"/utf8>>]], [[<<"u00e9">>]]},
         {"Shop.buy(\"\\101\\^A\")", [[<<"101^A">>]], [[<<"A", 1>>]]},
         {"Shop.buy(\"\\d\\e\\s\\0\")", [[<<127, 27, 32, 0>>]], [[<<"des0">>]]},
         {"Shop.buy(\"\\xE9\")", [[<<16#E9>>]], [[<<"é"/utf8>>]]},
         {"Shop.buy('\\u00e9')", [[[16#E9]]], [["u00e9"]]},
         {"Shop.buy(:\"\\u00e9\")", [['é']], [[u00e9]]},
         {"Shop.buy(\"\\u{1F600}\" <> _)", [[<<"😀!"/utf8>>]], [[<<"u{1F600}">>]]},
         {"Shop.buy(\"\")", [[<<>>]], [[<<"a">>], [[]]]},
         {"Shop.buy(x) when x in -5..5", [[-5], [0], [5]], [[-6], [6], [a]]},
         {"Shop.buy(x) when x in -9..-3", [[-9], [-3]], [[-10], [-2]]},
         {"Shop.buy(x) when x not in -1..1", [[-2], [2]], [[-1], [1]]},
         {"Shop.buy(?a, ?\\n, ?é)", [[97, 10, 16#E9]], [[98, 10, 16#E9]]},
         {"Shop.buy(c) when c in [?\\a, ?\\s, ?\\\\, ?%]", [[7], [32], [92], [37]], [[97], [$s]]},
         {"Shop.valid?(?x)", [[$x]], [[$y]]},
         {"Shop.buy(%{end: e}) when e > 1", [[#{'end' => 2}]], [[#{'end' => 1}], [#{}]]},
         {"Shop.buy(%{in: 1, when: w, do: :x, not: n})",
          [[#{in => 1, 'when' => 2, do => x, 'not' => 3}]],
          [[#{in => 2, 'when' => 2, do => x, 'not' => 3}]]}],
    match_cases(Cases).

%% not(...) / not (...), the common way to negate a guard in Elixir, was
%% taken for a call of a function 'not'/1 ("illegal guard expression").
elixir_not_call_test_() ->
    match_cases([{"Shop.buy(x) when not (x > 1)", [[1]], [[2]]},
                 {"Shop.buy(x) when not(x > 1) and x > 0", [[1]], [[0], [2]]},
                 {"Shop.buy(x) when not not (x in [1, 2])", [[1], [2]], [[3]]},
                 {"Shop.buy(x) when not(is_integer(x))", [[a]], [[1]]}]).

%% Elixir's integer literals in other bases (0x1F, 0b101, 0o17, with
%% underscores) were a syntax error ("syntax error before: x1F").
elixir_bases_test_() ->
    Cases =
        [{"Shop.buy(0x1F, 0b101, 0o17)", [[31, 5, 15]], [[0, 5, 15], [1, 101, 17]]},
         {"Shop.buy(x) when x > 0xff_ff", [[65536]], [[65535]]},
         {"Shop.buy(x) when x in 0x0..0xF", [[0], [15]], [[16], [-1]]},
         {"Shop.buy(-0x10)", [[-16]], [[16]]}],
    match_cases(Cases) ++
    %% where Elixir reads no integer, an error at the literal (columns
    %% after a converted literal are those of the text)
    [{label(P), fun() -> ?assertMatch({error, {11, _}}, beamprobe_pattern:parse(P)) end}
     || P <- ["Shop.buy(0x)", "Shop.buy(0x1G)", "Shop.buy(0b102)", "Shop.buy(0x1_)"]] ++
    [{"column after 0x1F",
      fun() -> ?assertMatch({error, {33, _}},
                            beamprobe_pattern:parse("Shop.buy(0x1F, y) when y > 0 :: bogus"))
      end}].

%% A quoted function name, as the printer writes it (Shop."odd name"/1),
%% was {error, "expected a function name after '.', found '<<'"}.
elixir_quoted_function_name_test_() ->
    [{label(P), fun() ->
                        {ok, #{mfa := Got}} = beamprobe_pattern:parse(P),
                        ?assertEqual(Want, Got)
                end}
     || {P, Want} <- [{"Shop.\"odd name\"(x)", {'Elixir.Shop', 'odd name', 1}},
                      {"Shop.\"odd name\"/2", {'Elixir.Shop', 'odd name', 2}},
                      {"Shop.\"Abc\"", {'Elixir.Shop', 'Abc', '_'}},
                      {":ets.\"a b\"(_, _) :: return", {ets, 'a b', 2}}]] ++
    [{"interpolation refused",
      ?_assertMatch({error, {6, "string interpolation" ++ _}},
                    beamprobe_pattern:parse("Shop.\"x#{y}\"(1)"))}].

%% Atoms as the printer writes them: :node@host was refused as a module
%% attribute (@host), :valid? and :run! were syntax errors.
elixir_atom_literals_test_() ->
    match_cases([{"Shop.buy(:nonode@nohost)", [[nonode@nohost]], [[nonode]]},
                 {"Shop.buy(n) when n == :a@b", [[a@b]], [[a]]},
                 {"Shop.buy(:valid?, :run!)", [['valid?', 'run!']], [[valid, run]]},
                 {"Shop.buy([:a?, x]) when x != :b!", [[['a?', c]]], [[['a?', 'b!']]]}]) ++
    [{"@attr still refused",
      ?_assertMatch({error, {22, "module attributes" ++ _}},
                    beamprobe_pattern:parse("Shop.buy(x) when x > @max"))}].

%% What the printer writes for "#{" in a string (\#{) was refused as an
%% interpolation; a ? after a letter beyond ASCII (:é?, [é?: 1]) was read
%% as a character literal (syntax error).
elixir_printed_forms_test_() ->
    match_cases([{"Shop.buy(\"\\#{a}\")", [[<<"#{a}">>]], [[<<"a">>]]},
                 {"Shop.buy(\"x\\#{\" <> _)", [[<<"x#{y">>]], [[<<"x">>]]},
                 {"Shop.buy(:é?)", [['é?']], [['é']]},
                 {"Shop.buy([é?: 1])", [[[{'é?', 1}]]], [[[{'é', 1}]]]}]) ++
    [{"interpolation still refused",
      ?_assertMatch({error, {10, "string interpolation" ++ _}},
                    beamprobe_pattern:parse("Shop.buy(\"#{a}\")"))}].

elixir_literal_errors_test_() ->
    Cases = [{"Shop.buy([a: 1, :b])", "keyword pairs (key: value) come last"},
             %% was "syntax error before: '/'"
             {"Shop.buy(x) when x in 1..10//2", "a range with a step"},
             {"Shop.buy(x) when x not in 10..1//-1", "a range with a step"},
             {"Shop.buy(\"\\u{110000}\")", "invalid code point"},
             {"Shop.buy(\"\\uZZ\")", "invalid \\u escape"},
             {"Shop.buy('\\xE9')", "invalid UTF-8"}],
    [{label(P),
      fun() ->
              {error, {_Col, Msg}} = beamprobe_pattern:parse(P),
              ?assertNotEqual(nomatch, string:find(Msg, Want))
      end} || {P, Want} <- Cases].

%% Names over 255 characters that the Elixir translation makes into atoms
%% itself (an alias's joined segments, a name with its ? or ! suffix) are
%% an error at the name: list_to_atom/1's system_limit escaped parse/1
%% (and beamprobe:calls/2, which crashed the caller).  255 still parses.
elixir_long_names_test_() ->
    A = fun(N) -> lists:duplicate(N, $a) end,
    Long = [lists:duplicate(250, $A) ++ ".f",                 % Elixir.AAA...: 257
            "Elixir." ++ lists:duplicate(249, $A) ++ ".f",
            "M.f(%" ++ lists:duplicate(250, $A) ++ "{})",
            "M." ++ A(255) ++ "?",
            "M.f(" ++ A(255) ++ "!)",
            "M.f([" ++ A(255) ++ "?: 1])",
            "M.f(%{" ++ A(255) ++ "?: 1})"],
    Fit = ["M." ++ A(254) ++ "?", lists:duplicate(248, $A) ++ ".f"],
    [{label(P), fun() ->
                        R = (catch beamprobe_pattern:parse(P)),
                        ?assertMatch({error, {_, _}}, R),
                        {error, {_, Msg}} = R,
                        ?assertNotEqual(nomatch, string:find(Msg, "too long"))
                end} || P <- Long] ++
    [{label(P), fun() -> ?assertMatch({ok, _}, beamprobe_pattern:parse(P)) end}
     || P <- Fit] ++
    [{"calls/2 returns the error",
      fun() ->
              ?assertMatch({error, _},
                           catch beamprobe:calls(lists:duplicate(250, $A) ++ ".f", 1))
      end}].

%% A binary segment that does not fit its byte: <<"\x{1F600}">> and <<256>>
%% were <<0>> (Erlang cuts them to 8 bits, the compiler warns), a pattern
%% that never matched what was written; now refused, naming the fix.
binary_byte_fit_test_() ->
    Bad = [{"lists:reverse(<<\"\\x{1F600}\">>)", "/utf8"},
           {"lists:reverse(<<\"a\\x{100}\">>)", "/utf8"},
           {"lists:reverse(<<256>>)", "<<256:16>>"},
           {"lists:reverse(<<-129>>)", "does not fit a byte"},
           {"lists:reverse(X) when X == <<300>>", "does not fit a byte"}],
    Good = [{"lists:reverse(<<\"\\x{1F600}\"/utf8>>)", <<"😀"/utf8>>},
            {"lists:reverse(<<\"\\xff\">>)", <<255>>},
            {"lists:reverse(<<255, -1>>)", <<255, 255>>},
            {"lists:reverse(<<256:16>>)", <<1, 0>>}],
    [{label(P), fun() ->
                        {error, {_, Msg}} = beamprobe_pattern:parse(P),
                        ?assertNotEqual(nomatch, string:find(Msg, Want))
                end} || {P, Want} <- Bad] ++
    [{label(P), fun() ->
                        {ok, #{match_spec := [{[B], _, _}]}} = beamprobe_pattern:parse(P),
                        ?assertEqual(Want, B)
                end} || {P, Want} <- Good].

%% Keyword lists in Elixir patterns, read as Elixir reads them: each
%% argument list below, as `f(ARGS)' given to the real Elixir's
%% Code.string_to_quoted!/1 (literals only, so the quoted form is the
%% term once evaluated), equals the head of the match spec of `Shop.buy(ARGS)'.  Keys that
%% are reserved words, quoted keys, keys like aliases or `_a', a keyword
%% list at the end of a list ([1, a: 2]) and at the end of a call's
%% arguments (f(1, a: 2) is f(1, [a: 2])), nested, in maps.  They were
%% refused ("keyword lists are not supported").
elixir_keyword_lists_test_() ->
    Args = ["[in: 1]", "[a: 1, b: :x]", "[1, a: 2]", "[1, 2, a: [b: 3]]",
            "[\"a b\": 1]", "['x y': 2]", "[\"é\": 1]", "[Foo: 1, _a: 2]",
            "[do: 1, end: 2, when: 3, not: 4, and: 5, in: 6, fn: 7]",
            "[nil: 1, true: 2, false: 3]", "[valid?: true, run!: false]",
            "1, a: 2", "a: 1, b: [c: 2]", "[a: %{b: [c: 1]}]",
            "%{\"a b\": 1, in: 2}", "[a: 1,]", "{1, [a: {2, [b: 3]}]}",
            "[[a: 1], [b: 2]]", "[a: \"s\", b: 'c', c: ?x, d: -1.5]"],
    case os:find_executable("elixir") of
        false ->
            io:format(user, "elixir_keyword_lists: skipped: elixir is not installed~n", []),
            [];
        Exe ->
            Dir = string:trim(os:cmd("mktemp -d")),
            In = filename:join(Dir, "in"),
            Script = filename:join(Dir, "read.exs"),
            ok = file:write_file(In, term_to_binary(
                                       [unicode:characters_to_binary("f(" ++ A ++ ")")
                                        || A <- Args])),
            ok = file:write_file(Script,
                "File.read!(System.argv() |> hd) |> :erlang.binary_to_term()\n"
                "|> Enum.map(fn s -> {:f, _, args} = Code.string_to_quoted!(s)\n"
                "     Enum.map(args, &elem(Code.eval_quoted(&1), 0)) end)\n"
                "|> :erlang.term_to_binary() |> Base.encode64() |> IO.puts()\n"),
            Out = os:cmd(Exe ++ " " ++ Script ++ " " ++ In ++ " 2>/dev/null"),
            _ = os:cmd("rm -rf " ++ Dir),
            Read = binary_to_term(base64:decode(string:trim(lists:last(
                                                            string:lexemes(Out, "\n"))))),
            ?assertEqual(length(Args), length(Read)),
            [{label(A),
              fun() ->
                      {ok, #{match_spec := [{Head, [], []}]}} =
                          beamprobe_pattern:parse("Shop.buy(" ++ A ++ ")"),
                      ?assertEqual(Want, Head)
              end} || {A, Want} <- lists:zip(Args, Read)]
    end.

%% With variables (Elixir's quoted form has {x, Meta, nil} there): by hand.
elixir_keyword_vars_test() ->
    {ok, #{match_spec := MS}} = beamprobe_pattern:parse("Shop.buy([a: x, b: _], y) when x > y"),
    ?assertEqual([{[[{a, '$1'}, {b, '_'}], '$2'], [{'>', '$1', '$2'}], []}], MS),
    {ok, #{match_spec := MS2}} = beamprobe_pattern:parse("Shop.buy(opts) when opts == [in: 1]"),
    ?assertEqual([{['$1'], [{'==', '$1', [{{in, 1}}]}], []}], MS2),
    Ok = [{[[{a, 2}], 1], true}, {[[{a, 3}], 1], true}, {[[{b, 2}], 1], false},
          {[[{a, 2}, {c, 1}], 1], false}],
    {ok, #{match_spec := MS3}} = beamprobe_pattern:parse("Shop.buy([a: n], 1) when n > 1"),
    [?assertEqual({Call, Match},
                  {Call, element(2, erlang:match_spec_test(Call, MS3, trace))})
     || {Call, Match} <- Ok].

%% Atoms at the limit: 255 characters (of any script) are one atom, 256
%% an error that says why, at the atom, in either syntax.
long_atoms_test() ->
    A255 = lists:duplicate(255, 16#65E5),
    Bin = fun(S) -> unicode:characters_to_binary(S) end,
    ?assertMatch({ok, #{mfa := {m, _, 1}}}, beamprobe_pattern:parse(Bin("m:'" ++ A255 ++ "'/1"))),
    {ok, #{mfa := {m, F, 1}}} = beamprobe_pattern:parse(Bin("m:'" ++ A255 ++ "'/1")),
    ?assertEqual(A255, atom_to_list(F)),
    {error, {3, Msg}} = beamprobe_pattern:parse(Bin("m:'" ++ [$a | A255] ++ "'/1")),
    ?assertNotEqual(nomatch, string:find(Msg, "255")),
    {error, {3, Msg2}} = beamprobe_pattern:parse("m:" ++ lists:duplicate(256, $a) ++ "/1"),
    ?assertNotEqual(nomatch, string:find(Msg2, "255")),
    ?assertMatch({ok, #{mfa := {'Elixir.M', _, 1}}},
                 beamprobe_pattern:parse(Bin("M." ++ A255 ++ "/1"))),
    ?assertMatch({error, {3, "atom too long" ++ _}},
                 beamprobe_pattern:parse(Bin("M." ++ [$a | A255] ++ "/1"))).

%% Quoted atoms in Erlang syntax denote what erl_scan reads: escapes,
%% operators, the empty atom, letters of any script.
erl_quoted_atoms_test_() ->
    Texts = ["'\\x{43f}'", "'\\''", "'\\\\'", "'\\101'", "'\\^A'", "'a\\sb'", "''",
             "'+'", "'=='", "'!'", "'andalso'", "'receive'", "'a b'", "'Elixir.Foo'",
             [$', 16#65E5, 16#672C, $'], [$', 16#43F, $\\, $n, $'], "'\\x{1F600}'"],
    [{T, fun() ->
                 {ok, [{atom, _, Want}], _} = erl_scan:string(T),
                 {ok, #{mfa := {m, F, 1}}} = beamprobe_pattern:parse(
                                               unicode:characters_to_binary("m:" ++ T ++ "/1")),
                 ?assertEqual(Want, F),
                 {ok, #{mfa := {M, f, 0}}} = beamprobe_pattern:parse(
                                               unicode:characters_to_binary(T ++ ":f/0"), #{force => true}),
                 ?assertEqual(Want, M)
         end} || T <- Texts].
