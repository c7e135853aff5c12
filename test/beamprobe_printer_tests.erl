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
