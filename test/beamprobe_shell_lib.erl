%%% @doc Helpers shared by the shell API suites (beamprobe_shell_SUITE and
%%% beamprobe_handler_SUITE): the traced module `bpsh_target' (and
%%% `Elixir.Bpsh.Target'), compiled from source, suite and case set-up,
%%% a capture io server, and waiting for sessions and handler messages.
%%%
%%% Printed output goes to a capture process (cap/0): a minimal io server
%%% that accumulates every put_chars request.
%%%
%%% The traced modules are compiled from source in init_suite/1: the
%%% pattern language refuses beamprobe* modules (the tracer's own) without
%%% `force'.
%%%
%%% no_pattern/1 here (no meta or local pattern) is not
%%% beamprobe_test_lib:no_pattern/1 (checks trace_info(MFA, all)).
-module(beamprobe_shell_lib).

-include_lib("stdlib/include/assert.hrl").

-export([target_src/0, elixir_src/0, load_src/1, compile_src/1]).
-export([init_suite/1, init_case/2, clear_trace_state/0]).
%% Capture io server (cap_loop/1 is spawned by MFA).
-export([cap/0, cap_loop/1, cap_text/1, lines/1, event_lines/1,
         dropped_lines/1, wait_text/3, indent/1, what/1, pid_of/1]).
-export([ok_calls/3, the_session/0, session_of/1, wait_no_session/0,
         handler_pid/0, handler_done/1, handler_events/1, worker/0, run/2,
         no_pattern/1, beamprobe_tracer/1]).

-define(L, beamprobe_test_lib).
-define(T, bpsh_target).
-define(H, beamprobe_test_handler).

%%% ------------------------------------------------------------------------
%%% The traced modules
%%% ------------------------------------------------------------------------

%% The traced module.  loop/3 calls F(I) for I = From..To through a remote
%% call (so every call is a real call of the traced function).
target_src() ->
    "-module(bpsh_target).
     -export([f/1, g/1, add/2, loop/3, loop_sleep/4, ping/3, spin/2]).
     f(X) -> X * 2.
     g(X) -> h(X) + 1.
     h(X) -> X.
     add(A, B) -> A + B.
     loop(_F, I, To) when I > To -> ok;
     loop(F, I, To) -> _ = bpsh_target:F(I), loop(F, I + 1, To).
     loop_sleep(_F, I, To, _Ms) when I > To -> ok;
     loop_sleep(F, I, To, Ms) ->
         _ = bpsh_target:F(I), timer:sleep(Ms), loop_sleep(F, I + 1, To, Ms).
     ping(_P, I, To) when I > To -> ok;
     ping(P, I, To) ->
         P ! {ping, I}, P ! {pong, I}, ping(P, I + 1, To).
     spin(F, Until) ->
         case erlang:monotonic_time(millisecond) < Until of
             true -> loop(F, 1, 1000), spin(F, Until);
             false -> ok
         end.
    ".

elixir_src() ->
    "-module('Elixir.Bpsh.Target').
     -export([f/1]).
     f(X) -> X * 2.
    ".

load_src(Src) ->
    {Mod, Bin} = compile_src(Src),
    {module, Mod} = code:load_binary(Mod, atom_to_list(Mod) ++ ".erl", Bin),
    Mod.

compile_src(Src) ->
    {ok, Mod, Bin} = compile:forms(forms(Src), [return_errors]),
    {Mod, Bin}.

forms(Src) ->
    {ok, Toks, _} = erl_scan:string(Src),
    split_forms(Toks, []).

split_forms([], []) -> [];
split_forms([{dot, _} = D | T], Acc) ->
    {ok, F} = erl_parse:parse_form(lists:reverse([D | Acc])),
    [F | split_forms(T, [])];
split_forms([Tok | T], Acc) -> split_forms(T, [Tok | Acc]).

%%% ------------------------------------------------------------------------
%%% Suite and case set-up
%%% ------------------------------------------------------------------------

%% For init_per_suite/1: beamprobe running, the test handler and the
%% traced modules loaded.
init_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, ?H} = code:ensure_loaded(?H),
    _ = [load_src(Src) || Src <- [target_src(), elixir_src()]],
    Config.

%% For init_per_testcase/2.
init_case(Case, Config) ->
    ?L:init_case(Case, Config).

%% For end_per_testcase/2.
clear_trace_state() ->
    ok = beamprobe:clear(),
    _ = [beamprobe:stop(S) || S <- beamprobe:list()],
    %% Never let a failed case leave trace state for the next one.
    erlang:trace_pattern({?T, '_', '_'}, false, [local]),
    erlang:trace_pattern({?T, '_', '_'}, false, [meta]),
    erlang:trace_pattern({lists, reverse, 1}, false, [meta]),
    erlang:trace_pattern(send, true, []),
    erlang:trace_pattern('receive', true, []),
    %% One process at a time: the VM's one pass can crash OTP 25.2 while a
    %% process runs on a dirty scheduler (src/beamprobe_each.erl).
    beamprobe_each:trace(all, false, [all]),
    ok.

%%% ------------------------------------------------------------------------
%%% Capture io server
%%% ------------------------------------------------------------------------

%% A process answering io requests; it accumulates the text of every
%% put_chars request.  cap_text/1 returns it all as a binary.
cap() ->
    spawn(?MODULE, cap_loop, [[]]).

cap_loop(Acc) ->
    receive
        {io_request, From, ReplyAs, Req} ->
            {Reply, Acc1} = io_req(Req, Acc),
            From ! {io_reply, ReplyAs, Reply},
            cap_loop(Acc1);
        {cap_text, From, Ref} ->
            From ! {Ref, iolist_to_binary(lists:reverse(Acc))},
            cap_loop(Acc);
        cap_stop -> ok
    end.

io_req({put_chars, Enc, Chars}, Acc) ->
    case unicode:characters_to_binary(Chars, Enc, unicode) of
        B when is_binary(B) -> {ok, [B | Acc]};
        _ -> {{error, put_chars}, Acc}
    end;
io_req({put_chars, Enc, M, F, A}, Acc) ->
    try apply(M, F, A) of
        Chars -> io_req({put_chars, Enc, Chars}, Acc)
    catch _:_ -> {{error, F}, Acc}
    end;
io_req({put_chars, Chars}, Acc) -> io_req({put_chars, latin1, Chars}, Acc);
io_req({put_chars, M, F, A}, Acc) -> io_req({put_chars, latin1, M, F, A}, Acc);
io_req({requests, Reqs}, Acc) ->
    lists:foldl(fun(R, {ok, A}) -> io_req(R, A);
                   (_, Err) -> Err
                end, {ok, Acc}, Reqs);
io_req(getopts, Acc) -> {[{binary, false}, {encoding, unicode}], Acc};
io_req({get_geometry, _}, Acc) -> {{error, enotsup}, Acc};
io_req(_, Acc) -> {{error, request}, Acc}.

cap_text(Cap) ->
    Ref = make_ref(),
    Cap ! {cap_text, self(), Ref},
    receive {Ref, T} -> T
    after 5000 -> ct:fail({capture_not_answering, Cap})
    end.

lines(Cap) ->
    binary:split(cap_text(Cap), <<"\n">>, [global, trim_all]).

%% Lines describing events (everything but "% beamprobe: ..." lines).
event_lines(Cap) ->
    [L || L <- lines(Cap), not is_meta(L)].

is_meta(<<"% beamprobe:", _/binary>>) -> true;
is_meta(_) -> false.

%% Sum of the N of every "dropped N events" line.
dropped_lines(Cap) ->
    lists:sum([binary_to_integer(N)
               || L <- lines(Cap),
                  {match, [N]} <- [re:run(L, "^% beamprobe: dropped ([0-9]+) "
                                          "events", [{capture, all_but_first,
                                                      binary}])]]).

%% Waits until the captured text contains Sub; returns elapsed ms.
wait_text(Cap, Sub, Timeout) ->
    try ?L:wait_until(fun() ->
                              binary:match(cap_text(Cap),
                                           iolist_to_binary(Sub)) =/= nomatch
                      end, Timeout)
    catch error:{timeout, _} ->
            ct:fail({text_not_printed, iolist_to_binary(Sub),
                     {within_ms, Timeout}, {printed, cap_text(Cap)}})
    end.

%% The number of spaces before the event's description.
indent(Line) ->
    {match, [Sp]} = re:run(Line, "^[0-9:.]+ <[0-9.]+>(?:\\([^ ]*\\))? ( *)",
                           [{capture, all_but_first, binary}]),
    byte_size(Sp).

%% The text of an event line after the time and process columns (the
%% shell printer prints an unnamed process with its initial call,
%% "<0.90.0>(m:f/1)"), without indentation: "call bpsh_target:f(1)".
what(Line) ->
    case re:run(Line, "^[0-9:.]+ (?:<[0-9.]+>(?:\\([^ ]*\\))?|#Port<[0-9.]+>) +(.*)$",
                [{capture, all_but_first, binary}]) of
        {match, [W]} -> W;
        nomatch -> ct:fail({unexpected_line, Line})
    end.

%% The pid of an event line (without the initial call after it).
pid_of(Line) ->
    case re:run(Line, "^[0-9:.]+ (<[0-9.]+>|#Port<[0-9.]+>)",
                [{capture, all_but_first, binary}]) of
        {match, [P]} -> P;
        nomatch -> ct:fail({unexpected_line, Line})
    end.

%%% ------------------------------------------------------------------------
%%% Other helpers
%%% ------------------------------------------------------------------------

ok_calls(Pattern, Limit, Opts) ->
    case beamprobe:calls(Pattern, Limit, Opts) of
        N when is_integer(N) -> N;
        Other -> ct:fail({calls_failed, Pattern, Limit, Other})
    end.

%% The only shell session running.
the_session() ->
    case [S || S <- beamprobe:list(), is_shell(S)] of
        [S] -> S;
        L -> ct:fail({expected_one_shell_session, L})
    end.

is_shell(S) ->
    case beamprobe:info(S) of
        {ok, #{tag := beamprobe_shell}} -> true;
        _ -> false
    end.

%% The running shell session tracing MFA.
session_of(MFA) ->
    [S] = [S || S <- beamprobe:list(),
                {ok, #{config := #{calls := Calls}}} <- [beamprobe:info(S)],
                lists:keymember(MFA, 1, Calls)],
    S.

wait_no_session() ->
    try ?L:wait_until(fun() -> beamprobe:list() =:= [] end, 3000)
    catch error:{timeout, _} -> ct:fail({sessions_left, beamprobe:list()})
    end.

%% Handler messages.
handler_pid() ->
    receive {handler_init, H} -> H
    after 5000 -> ct:fail(handler_not_started)
    end.

handler_done(H) ->
    receive {handler_done, H, Reason, Totals} -> {Reason, Totals}
    after 10000 -> ct:fail({handler_not_done, H})
    end.

%% Every {handler_events, H, Events} received so far, in order.
handler_events(H) ->
    receive {handler_events, H, Evs} -> Evs ++ handler_events(H)
    after 0 -> []
    end.

%% A process that runs bpsh_target functions on request.
worker() ->
    beamprobe_workload:start_worker().

run(W, F) -> beamprobe_workload:run(W, F).

%% Trace state left on a function: meta or local pattern.
no_pattern(MFA) ->
    {meta, Meta} = erlang:trace_info(MFA, meta),
    {traced, Traced} = erlang:trace_info(MFA, traced),
    {Meta, Traced} =:= {false, false}.

beamprobe_tracer(P) ->
    case erlang:trace_info(P, tracer) of
        {tracer, {beamprobe_nif, _}} -> true;
        _ -> false
    end.
