%%% EUnit tests of beamprobe_printer's own state, fed events directly.
-module(beamprobe_printer_tests).

-include_lib("eunit/include/eunit.hrl").

%% A printer that sees events of ever new processes (a long shell session
%% on a function many short-lived processes call) keeps a bounded state:
%% its name, initial-call and call-stack maps start again when full.
bounded_state_test_() ->
    {timeout, 60, fun bounded_state/0}.

bounded_state() ->
    Io = spawn(fun Sink() ->
                       receive
                           {io_request, From, Ref, _} ->
                               From ! {io_reply, Ref, ok}, Sink();
                           stop -> ok
                       end
               end),
    {ok, St0} = beamprobe_printer:init(#{io => Io,
                                          proc_names => initial_call}),
    Feed = fun(N, St) ->
                   Evs = [#{event => call, ts => 0, pid => P,
                            mfa => <<"m:f/1">>, args => <<"(1)">>,
                            info => <<"true">>}
                          || P <- [spawn(fun() -> ok end)
                                   || _ <- lists:seq(1, N)]],
                   {ok, St1} = beamprobe_printer:handle_events(Evs, St),
                   St1
           end,
    St10 = lists:foldl(fun(_, S) -> Feed(1000, S) end, St0, lists:seq(1, 10)),
    Size10 = erts_debug:flat_size(St10),
    St40 = lists:foldl(fun(_, S) -> Feed(1000, S) end, St10, lists:seq(1, 30)),
    Size40 = erts_debug:flat_size(St40),
    Io ! stop,
    ?assert(Size40 =< 2 * Size10).

%% syntax => elixir (issue 11): every text field of an event in Elixir
%% syntax, from texts rendered by the tracer's own renderer; the default
%% stays Erlang; a bad value is refused.
elixir_syntax_test() ->
    Self = self(),
    Io = collector(Self),
    Cap = #{depth => 8, list => 16, binary => 64, bytes => 512},
    Mfa = beamprobe_nif:render_mfa('Elixir.Shop', buy, 2),
    Order = #{'__struct__' => 'Elixir.Shop.Order', id => 1},
    Events =
        [#{event => call, ts => 0, pid => Self, mfa => Mfa,
           args => beamprobe_nif:render_args([apple, <<"héllo"/utf8>>], Cap),
           info => <<"true">>},
         #{event => return_from, ts => 0, pid => Self, mfa => Mfa,
           result => beamprobe_nif:render({ok, Order}, Cap)},
         #{event => exception_from, ts => 0, pid => Self, mfa => Mfa,
           class => <<"error">>, reason => beamprobe_nif:render(badarg, Cap)},
         #{event => send, ts => 0, pid => Self, to => undefined,
           to_text => beamprobe_nif:render('Elixir.Shop.Server', Cap),
           message => beamprobe_nif:render([{a, "abc"}], Cap)},
         #{event => register, ts => 0, pid => Self, name => <<"'Elixir.Shop.Srv'">>}],
    Print = fun(Opts) ->
                    {ok, St} = beamprobe_printer:init(Opts#{io => Io, timestamp => none}),
                    {ok, _} = beamprobe_printer:handle_events(Events, St),
                    receive {chars, B} -> string:split(B, "\n", all) end
            end,
    Pid = list_to_binary(pid_to_list(Self)),
    Ex = Print(#{syntax => elixir}),
    ?assertEqual([<<"#PID", Pid/binary, " call Shop.buy(:apple, \"héllo\")"/utf8>>,
                     <<"#PID", Pid/binary, " returned from Shop.buy/2 -> {:ok, %Shop.Order{id: 1}}">>,
                     <<"#PID", Pid/binary, " exception from Shop.buy/2: ** (error) :badarg">>,
                     <<"#PID", Pid/binary, " sent [a: 'abc'] to Shop.Server">>,
                     <<"#PID", Pid/binary, " Shop.Srv register Shop.Srv">>, <<>>], Ex),
    Erl = Print(#{}),
    ?assertEqual(<<Pid/binary, " call 'Elixir.Shop':buy(apple, <<\"hÃ©llo\">>)"/utf8>>, hd(Erl)),
    ?assertEqual(Erl, Print(#{syntax => erlang})),
    ?assertEqual({error, {bad_option, syntax, cobol}},
                 beamprobe_printer:init(#{io => Io, syntax => cobol})),
    Io ! stop.

%% untimed (set by a session that traced some functions without their
%% returns): a call of such a function pushes no frame, so the lines
%% after it are not indented as if it were still running.
untimed_calls_test() ->
    Self = self(),
    Io = collector(Self),
    Call = fun(M, F, A) -> #{event => call, ts => 0, pid => Self,
                             mfa => beamprobe_nif:render_mfa(M, F, A),
                             args => <<"(1)">>, info => <<"true">>}
           end,
    Ret = fun(M, F, A) -> #{event => return_from, ts => 0, pid => Self,
                            mfa => beamprobe_nif:render_mfa(M, F, A),
                            result => <<"1">>}
          end,
    Events = [Call(m, b, 1), Call(m, a, 1), Call(m, b, 1), Ret(m, a, 1),
              Call('x y', 'z/w', 2), Call(m, a, 1)],
    Pad = list_to_binary(pid_to_list(Self) ++ " "),
    Lines = fun(Opts) ->
                    {ok, St} = beamprobe_printer:init(Opts#{io => Io, timestamp => none}),
                    {ok, _} = beamprobe_printer:handle_events(Events, St),
                    receive {chars, B} -> [L || L <- string:split(B, "\n", all), L =/= <<>>] end
            end,
    Indents = fun(Ls) -> [begin
                              <<Pad:(byte_size(Pad))/binary, Rest/binary>> = L,
                              (byte_size(Rest) - byte_size(string:trim(Rest, leading))) div 2
                          end || L <- Ls]
              end,
    %% Without the option every call of b/1 stays open: a/1 is indented.
    ?assertEqual([0, 1, 2, 1, 1, 2], Indents(Lines(#{}))),
    ?assertEqual([0, 0, 1, 0, 0, 0],
                 Indents(Lines(#{untimed => [{m, b, 1}, {'x y', '_', '_'}]}))),
    ?assertEqual([0, 0, 1, 0, 0, 0],
                 Indents(Lines(#{untimed => [{'_', b, '_'}, {'_', '_', 2}]}))),
    %% A function follows its most specific pattern, as its match spec
    %% did: m:a/1 traced with its returns next to m:'_'/'_' without them
    %% is timed (it was untimed: its call pushed no frame, so b/1 after
    %% it was not indented), m:b/1 is not.
    ?assertEqual([0, 0, 1, 0, 0, 0],
                 Indents(Lines(#{untimed => [{m, '_', '_'}, {'x y', '_', '_'}],
                                 calls => [{m, a, 1}, {m, '_', '_'},
                                           {'x y', '_', '_'}]}))),
    %% Of equal ones the last: m:a/1 given last untimed is untimed.
    ?assertEqual([0, 0, 0, 0, 0, 0],
                 Indents(Lines(#{untimed => [{m, '_', 1}, {'_', '_', 2}],
                                 calls => [{m, a, '_'}, {m, '_', 1},
                                           {'_', '_', 2}]}))),
    ?assertEqual({error, {bad_option, calls, [x]}},
                 beamprobe_printer:init(#{io => Io, calls => [x]})),
    ?assertEqual({error, {bad_option, untimed, [{m, b}]}},
                 beamprobe_printer:init(#{io => Io, untimed => [{m, b}]})),
    ?assertEqual({error, {bad_option, untimed, nope}},
                 beamprobe_printer:init(#{io => Io, untimed => nope})),
    Io ! stop.

%% The receiver of a send in the shell's mode (initial_call), as redbug
%% names it: a port by its program's name; a pid of a node that is not
%% (or no longer) connected, or a text that is no pid, as it is, never a
%% crash.  (A pid of a connected node, followed by its node:
%% beamprobe_remote_shell_SUITE printer_names.)
receiver_labels_test() ->
    Self = self(),
    Io = collector(Self),
    Port = open_port({spawn, "/bin/cat -u"}, []),
    PortText = list_to_binary(erlang:port_to_list(Port)),
    Send = fun(To, Text) -> #{event => send, ts => 0, pid => Self, to => To,
                              to_text => Text, message => <<"x">>}
           end,
    {ok, St} = beamprobe_printer:init(#{io => Io, timestamp => none,
                                        proc_names => initial_call}),
    {ok, _} = beamprobe_printer:handle_events(
                [Send(Port, PortText),
                 Send(undefined, <<"<4242.1.0>">>),
                 Send(undefined, <<"<not a pid>">>),
                 Send(undefined, <<"{srv,'n@h'}">>)], St),
    Lines = receive {chars, B} -> string:split(B, "\n", all) end,
    port_close(Port),
    Io ! stop,
    ?assertEqual([<<"sent x to ", PortText/binary, "(cat)">>,
                  <<"sent x to <4242.1.0>">>, <<"sent x to <not a pid>">>,
                  <<"sent x to {srv,'n@h'}">>],
                 [iolist_to_binary(["sent ", tl(string:split(L, " sent "))])
                  || L <- Lines, L =/= <<>>]).

%% An io server that sends the caller {chars, Text} for each put_chars
%% request, says it takes unicode, and ends on `stop'.
collector(Parent) ->
    spawn_link(fun Sink() ->
                       receive
                           {io_request, From, Ref, {put_chars, _, Chars}} ->
                               Parent ! {chars, unicode:characters_to_binary(Chars)},
                               From ! {io_reply, Ref, ok}, Sink();
                           {io_request, From, Ref, {put_chars, _, M, F, A}} ->
                               Parent ! {chars, unicode:characters_to_binary(apply(M, F, A))},
                               From ! {io_reply, Ref, ok}, Sink();
                           {io_request, From, Ref, getopts} ->
                               From ! {io_reply, Ref, [{encoding, unicode}]},
                               Sink();
                           stop -> ok
                       end
               end).
