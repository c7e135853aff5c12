%%% @doc The shell API outside a shell session, as operators coming from
%%% recon_trace and redbug meet it (issue 8): the option table (every
%%% recon_trace:calls/3 and redbug:start/2 option accepted or refused
%%% with a hint), drop causes with a slow io server, and the EEP-48 doc
%%% chunks (h/2 in erl, and in iex when Elixir is installed).
%%%
%%% In a real shell on a peer node: beamprobe_remote_shell_SUITE (whose
%%% helpers, beamprobe_remote_shell_lib, compile the traced module
%%% `bprs_target').
%%%
%%% Run: make && ct_run -noshell -pa ebin -pa _build/test -dir test
%%%      -suite beamprobe_shell_compat_SUITE -logdir _build/ct_logs
-module(beamprobe_shell_compat_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-import(beamprobe_remote_shell_lib, [wait_until/3]).

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([options_table/1, drop_causes_slow_output/1, doc_chunks/1,
         iex_docs/1]).
%% The io server standing for a slow terminal (spawned by MFA).
-export([slow_io/1]).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [options_table, drop_causes_slow_output, doc_chunks, iex_docs].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(beamprobe),
    beamprobe_remote_shell_lib:load_target(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(_Case, Config) ->
    Config.

end_per_testcase(_Case, _Config) ->
    ok = beamprobe:clear().

%%% ------------------------------------------------------------------------
%%% 1. The option table: every recon_trace:calls/3 and redbug:start/2
%%% option is accepted or refused with the beamprobe way
%%% ------------------------------------------------------------------------

options_table(_Config) ->
    %% An io server that answers (clear/0 waits for the printer's last
    %% lines: one that never answered would hold each clear 5 s).
    Io = beamprobe_shell_lib:cap(),
    O = [{io_server, Io}],
    P = {bprs_target, f, 1},
    Ok = fun(Opts) ->
                 R = beamprobe:calls(P, 5, O ++ Opts),
                 ok = beamprobe:clear(),
                 R
         end,
    %% Accepted with their meaning.
    Accepted = [[{pid, all}], [{pid, new}], [{pid, existing}], [{pid, self()}],
                [{pid, [self(), whereis(code_server)]}], [{pid, code_server}],
                [{pid, pid_to_list(self())}],
                [{pid, list_to_tuple([list_to_integer(X) || X <- string:lexemes(
                                          pid_to_list(self()), "<.>")])}],
                [{procs, [self()]}], [{procs, {pid, element(2, pid_parts(self())),
                                                element(3, pid_parts(self()))}}],
                [{timestamp, formatter}], [{timestamp, trace}],
                [{args, args}], [{args, arity}], [{args, 3}],
                [return_to], [{return_to, true}], [{scope, local}],
                [{time, 1000}], [{timeout, 1000}], [{msgs, 5}], [{arity, true}],
                [{print_depth, 999999}], [{print_re, "x"}], [{print_msec, true}],
                #{io_server => Io, pid => all}],
    [?assertEqual({Opts, 1}, {Opts, case Opts of
                                       M when is_map(M) ->
                                           R = beamprobe:calls(P, 5, M),
                                           ok = beamprobe:clear(), R;
                                       _ -> Ok(Opts)
                                   end})
     || Opts <- Accepted],
    %% Refused, each with a hint that names a beamprobe option or function.
    Refused = [{scope, global}, {formatter, fun(_) -> "" end}, {use_dbg, true},
               {target, node()}, {cookie, c}, {blocking, true},
               {max_queue, 10}, {max_msg_size, 10}, {debug, true},
               {trace_child, true}, {discard, true}, {buffered, true},
               {records, [m]}, {print_calls, false}, {print_return, false},
               {print_node, true}, {print_fun, fun(_) -> ok end},
               {print_time_unit, millisecond}, {print_file, "/tmp/x"},
               {file, "/tmp/x"}, {file_size, 1}, {file_count, 8}],
    [begin
         {K, _} = Opt,
         R = beamprobe:calls(P, 5, O ++ [Opt]),
         ?assertMatch({Opt, {error, {unsupported_option, K, [_ | _]}}}, {Opt, R}),
         {error, {unsupported_option, K, Hint}} = R,
         ?assertMatch({K, {match, _}},
                      {K, re:run(Hint, "=>|beamprobe|procs|args|-> return|"
                                       "leave|records|pids|remsh|timestamp")}),
         %% format_error/1 says it in words.
         ?assertNotEqual(nomatch, string:find(beamprobe:format_error(
                                                element(2, R)), Hint))
     end || Opt <- Refused],
    %% Bad values are bad options, named as the caller wrote them.
    [?assertEqual({error, {bad_option, K, V}}, beamprobe:calls(P, 5, O ++ [{K, V}]))
     || {K, V} <- [{pid, []}, {pid, "<garbage>"}, {pid, {global, bprs_nobody}},
                   {timeout, -1}, {msgs, 0}, {args, deep}, {timestamp, never},
                   {scope, galaxy}, {print_re, "("}, {print_depth, 0},
                   {return_to, maybe}]],
    %% The caller is no io server (`{io_server, self()}' typed in the
    %% shell): the printer waited for its answer all session long, every
    %% event dropped, and stopping it took 5 s.
    ?assertEqual({error, {bad_option, io_server, self()}},
                 beamprobe:calls(P, 5, [{io_server, self()}])),
    ?assertEqual({error, {unknown_option, bogus}},
                 beamprobe:calls(P, 5, O ++ [{bogus, 1}])),
    %% msgs must agree with an explicit limit; the error names both (it
    %% was {bad_option, msgs, 3}: a valid count said to be wrong).
    ?assertEqual({error, {conflicting_options, msgs, limit}},
                 beamprobe:calls(P, 5, O ++ [{msgs, 3}])),
    ?assertMatch("option msgs and the Limit argument both" ++ _,
                 beamprobe:format_error({conflicting_options, msgs, limit})),
    ?assertEqual(1, beamprobe:calls(P, 5, O ++ [{msgs, 5}])),
    ok = beamprobe:clear(),
    %% on_rate says what a rate {N, Ms} does when it trips: with a count
    %% (the argument, msgs, or the default 10) it is refused, saying why,
    %% not taken and ignored.  With a rate it is taken.
    [begin
         R = Call(),
         ?assertMatch({What, {error, {unsupported_option, on_rate, _}}},
                      {What, R}),
         {error, {unsupported_option, on_rate, Hint}} = R,
         ?assertNotEqual(nomatch, string:find(Hint, "{N, Ms}")),
         ?assertNotEqual(nomatch, string:find(beamprobe:format_error(
                                                element(2, R)), "count"))
     end || {What, Call} <-
                [{count, fun() -> beamprobe:calls(P, 5, O ++ [{on_rate, stop}]) end},
                 {count_drop, fun() -> beamprobe:calls(P, 5, #{io_server => Io,
                                                              on_rate => drop})
                              end},
                 {msgs, fun() -> beamprobe:calls(P, O ++ [{msgs, 5},
                                                         {on_rate, stop}])
                        end},
                 {default, fun() -> beamprobe:calls(P, O ++ [{on_rate, stop}]) end},
                 {messages, fun() -> beamprobe:messages("send", 5,
                                                        O ++ [{on_rate, stop}])
                            end}]],
    ?assertEqual([], beamprobe:list()),
    ?assertEqual(1, beamprobe:calls(P, {5, 1000}, O ++ [{on_rate, stop}])),
    ok = beamprobe:clear(),
    %% (a bad limit is still the limit's error)
    ?assertMatch({error, {bad_limit, 0, _}},
                 beamprobe:calls(P, 0, O ++ [{on_rate, stop}])),
    %% The first of a key wins, as with proplists:get_value/2.
    ?assertEqual(1, Ok([{time, 1000}, {time, -1}])),
    ?assertEqual([], beamprobe:list()),
    Io ! cap_stop.

pid_parts(P) ->
    [A, B, C] = [list_to_integer(X) || X <- string:lexemes(pid_to_list(P), "<.>")],
    {A, B, C}.

%%% ------------------------------------------------------------------------
%%% 6. A drop line says "output too slow" when the io server is slow
%%% ------------------------------------------------------------------------

drop_causes_slow_output(_Config) ->
    Io = spawn(?MODULE, slow_io, [[]]),
    1 = beamprobe:calls({bprs_target, f, 1}, 1000000,
                        #{io_server => Io, time => 60000}),
    bprs_target:loop(f, 1, 50000),
    timer:sleep(1500),
    ok = beamprobe:clear(),
    Text = fun() -> Io ! {text, self()},
                    receive {Io, T} -> T after 5000 -> <<>> end
           end,
    wait_until(fun() -> binary:match(Text(), <<"session ended">>) =/= nomatch
               end, 20000, slow_io_never_ended),
    Lines = [L || L <- binary:split(Text(), <<"\n">>, [global]),
                  binary:match(L, <<"dropped">>) =/= nomatch],
    ct:log("~p", [Lines]),
    ?assertNotEqual([], Lines),
    [?assertMatch({match, _}, re:run(L, "^% beamprobe: dropped [0-9]+ events "
                                     "\\(.*\\)$"))
     || L <- Lines],
    %% The handler could not keep up: at least one line says so.
    ?assert(lists:any(fun(L) -> re:run(L, "output too slow: [0-9]+") =/= nomatch
                      end, Lines)),
    Io ! stop.

%% An io server that takes 20 ms per request.
slow_io(Acc) ->
    receive
        {io_request, From, Ref, {put_chars, Enc, Chars}} ->
            timer:sleep(20),
            From ! {io_reply, Ref, ok},
            slow_io([unicode:characters_to_binary(Chars, Enc) | Acc]);
        {io_request, From, Ref, {put_chars, Enc, M, F, A}} ->
            From ! {io_reply, Ref, ok},
            slow_io([unicode:characters_to_binary(apply(M, F, A), Enc) | Acc]);
        {io_request, From, Ref, _} ->
            From ! {io_reply, Ref, {error, request}},
            slow_io(Acc);
        {text, From} ->
            From ! {self(), iolist_to_binary(lists:reverse(Acc))},
            slow_io(Acc);
        stop -> ok
    end.

%%% ------------------------------------------------------------------------
%%% 4. EEP-48 doc chunks
%%% ------------------------------------------------------------------------

doc_chunks(_Config) ->
    {ok, {docs_v1, _, erlang, _, #{<<"en">> := _}, _, Docs}} =
        code:get_doc(beamprobe),
    Documented = [{F, A} || {{function, F, A}, _, _, #{<<"en">> := D}, _}
                                <- Docs, D =/= []],
    Hidden = [{F, A} || {{function, F, A}, _, _, hidden, _} <- Docs],
    Exports = [FA || FA <- beamprobe:module_info(exports),
                     not lists:member(element(1, FA), [module_info]),
                     not lists:member(FA, Hidden)],
    ?assertEqual([], Exports -- Documented),
    ?assert(lists:member({calls, 2}, Documented)),
    %% What h(beamprobe, calls) prints fits the shell's page where the
    %% terminal gives no size (100 rows, a remote shell's io server):
    %% longer, c:h/2 stops at "more (y/n)?" and a scripted shell waits
    %% (the remote shell suite's help_and_docs hung at 101 lines).
    {ok, Chunk} = code:get_doc(beamprobe),
    Lines = length(string:split(shell_docs:render(beamprobe, calls, Chunk),
                                "\n", all)),
    ct:log("h(beamprobe, calls): ~b lines", [Lines]),
    ?assert(Lines =< 99),
    %% h(beamprobe, calls) prints it (c:h/2 through shell_docs).
    Cap = spawn(fun() -> cap([]) end),
    Me = self(),
    spawn(fun() -> group_leader(Cap, self()), c:h(beamprobe, calls),
                   Me ! h_done end),
    receive h_done -> ok after 10000 -> ct:fail(h_timeout) end,
    Cap ! {text, self()},
    Text = receive {Cap, T} -> T after 5000 -> ct:fail(cap) end,
    ct:log("~s", [Text]),
    ?assertNotEqual(nomatch, binary:match(Text, <<"Traces calls matching Pattern">>)),
    ?assertNotEqual(nomatch, binary:match(Text, <<"-spec calls(">>)).

cap(Acc) ->
    receive
        {io_request, From, Ref, {put_chars, Enc, Chars}} ->
            From ! {io_reply, Ref, ok},
            cap([unicode:characters_to_binary(Chars, Enc) | Acc]);
        {io_request, From, Ref, {put_chars, Enc, M, F, A}} ->
            From ! {io_reply, Ref, ok},
            cap([unicode:characters_to_binary(apply(M, F, A), Enc) | Acc]);
        {io_request, From, Ref, {requests, Rs}} ->
            From ! {io_reply, Ref, ok},
            cap(lists:reverse([unicode:characters_to_binary(C, E)
                               || {put_chars, E, C} <- Rs]) ++ Acc);
        {io_request, From, Ref, getopts} ->
            From ! {io_reply, Ref, [{encoding, unicode}]},
            cap(Acc);
        %% The pager's "more (y/n)?" when the text is longer than a
        %% screen: answered as an operator would.
        {io_request, From, Ref, {get_line, _, _}} ->
            From ! {io_reply, Ref, "y\n"},
            cap(Acc);
        {io_request, From, Ref, _} ->
            From ! {io_reply, Ref, {error, enotsup}},
            cap(Acc);
        {text, From} ->
            From ! {self(), iolist_to_binary(lists:reverse(Acc))},
            cap(Acc)
    end.

%% `h :beamprobe.calls' in iex prints the same documentation.
iex_docs(_Config) ->
    case os:find_executable("iex") of
        false ->
            {skip, "elixir (iex) is not installed: h :beamprobe.calls not "
                   "checked"};
        Iex ->
            Ebin = filename:dirname(code:which(beamprobe)),
            Out = os:cmd(Iex ++ " --erl \"-pa " ++ Ebin ++ "\" -e "
                         "'require IEx.Helpers; IEx.Helpers.h(:beamprobe.calls); "
                         "System.halt()' 2>&1 < /dev/null"),
            ct:log("~s", [Out]),
            ?assertNotEqual(nomatch, string:find(Out, "Traces calls matching"))
    end.
