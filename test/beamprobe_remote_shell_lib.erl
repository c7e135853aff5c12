%%% @doc Test helper for the suites of the shell API as operators use it
%%% (beamprobe_remote_shell_SUITE, beamprobe_shell_compat_SUITE): the
%%% traced module `bprs_target', compiled from source, and a real Erlang
%%% shell driven through its group leader, a small io server (tty/1) that
%%% is "typed into" line by line and keeps what the shell prints.
%%%
%%% Code that runs on another node (the shell's fun, the tty, load_target/0)
%%% needs this module loaded there.
-module(beamprobe_remote_shell_lib).

-include_lib("common_test/include/ct.hrl").

-export([load_target/0]).
-export([shell/1, type/2, out/1, wait_out/3, wait_after/4, after_mark/2,
         wait_until/3]).
%% The io server standing for the shell's group (spawned by MFA).
-export([tty/1]).

%%% ------------------------------------------------------------------------
%%% The traced module (compiled from source: the pattern language refuses
%%% beamprobe* modules without force)
%%% ------------------------------------------------------------------------

target_src() ->
    ["-module(bprs_target).\n",
     "-export([f/1, g/1, add/2, loop/3, ping/3, serve/1]).\n",
     "f(X) -> X * 2.\n",
     "g(X) -> X + 1.\n",
     "add(A, B) -> A + B.\n",
     "loop(_F, I, To) when I > To -> ok;\n",
     "loop(F, I, To) -> _ = bprs_target:F(I), loop(F, I + 1, To).\n",
     "ping(_P, I, To) when I > To -> ok;\n",
     "ping(P, I, To) -> P ! {ping, I}, ping(P, I + 1, To).\n",
     "serve(X) -> _ = bprs_target:f(X), receive stop -> ok end.\n"].

%% Compiles and loads bprs_target on this node.
load_target() ->
    Dir = filename:join("/tmp", "bprs-" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    Src = filename:join(Dir, "bprs_target.erl"),
    ok = file:write_file(Src, target_src()),
    %% Compiled from a file: the line table names bprs_target.erl (for
    %% caller_line).
    {ok, bprs_target, Bin} = compile:file(Src, [binary, return_errors]),
    {module, bprs_target} = code:load_binary(bprs_target, Src, Bin),
    %% The line table keeps the name; the file is no longer needed.
    ok = file:del_dir_r(Dir).

%%% ------------------------------------------------------------------------
%%% A shell on the peer, its group leader here
%%% ------------------------------------------------------------------------

%% Starts a real shell (shell:start/0) on the peer whose group leader is a
%% tty process of this node, and waits for its first prompt.
shell(Config) ->
    Node = ?config(node, Config),
    Tty = spawn(?MODULE, tty, [#{in => [], out => [], pending => none}]),
    Shell = erpc:call(Node, fun() ->
                                    group_leader(Tty, self()),
                                    shell:start()
                            end),
    wait_out(Tty, "1> ", 10000),
    {Tty, Shell}.

%% Types a line (a newline is added) and waits for the next prompt.
type(Tty, Line) ->
    N = prompts(Tty),
    Tty ! {type, Line ++ "\n"},
    wait_until(fun() -> prompts(Tty) > N end, 10000,
               {no_prompt_after, Line, fun() -> out(Tty) end}),
    ok.

%% Prompts printed so far ("(node@host)N> "; "=> " in typed text is no
%% prompt).
prompts(Tty) ->
    case re:run(out(Tty), "\\)[0-9]+> ", [global]) of
        {match, Ms} -> length(Ms);
        nomatch -> 0
    end.

out(Tty) ->
    Ref = make_ref(),
    Tty ! {out, self(), Ref},
    receive {Ref, B} -> B after 5000 -> ct:fail(tty_not_answering) end.

wait_out(Tty, Sub, Timeout) ->
    wait_until(fun() -> binary:match(out(Tty), iolist_to_binary(Sub)) =/= nomatch
               end, Timeout, {not_printed, iolist_to_binary(Sub),
                              fun() -> out(Tty) end}).

%% Waits until Sub is printed after the last occurrence of Marker (an
%% earlier session's line must not satisfy the wait).
wait_after(Tty, Marker, Sub, Timeout) ->
    wait_until(fun() -> binary:match(after_mark(Tty, Marker),
                                     iolist_to_binary(Sub)) =/= nomatch
               end, Timeout, {not_printed_after, iolist_to_binary(Marker),
                              iolist_to_binary(Sub), fun() -> out(Tty) end}).

%% Text printed after the last occurrence of Marker.
after_mark(Tty, Marker) ->
    B = out(Tty),
    case binary:matches(B, iolist_to_binary(Marker)) of
        [] -> <<>>;
        Ms ->
            {P, L} = lists:last(Ms),
            binary:part(B, P + L, byte_size(B) - P - L)
    end.

wait_until(F, Timeout, What) ->
    Deadline = erlang:monotonic_time(millisecond) + Timeout,
    wait_loop(F, Deadline, What).

wait_loop(F, Deadline, What) ->
    case F() of
        true -> ok;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true ->
                    ct:fail(case What of
                                {A, B, Fun} when is_function(Fun) ->
                                    {A, B, Fun()};
                                _ -> What
                            end);
                false -> timer:sleep(10), wait_loop(F, Deadline, What)
            end
    end.

%% The io server: answers the shell's input requests from the typed text
%% (get_until with erl_scan, get_line) and keeps every output.
tty(#{in := In, out := Out, pending := Pending} = St) ->
    receive
        {io_request, From, ReplyAs, Req0} when Pending =:= none ->
            Req = latin1_req(Req0),
            case io_req(Req, St) of
                {reply, R, St1} ->
                    From ! {io_reply, ReplyAs, R},
                    tty(St1);
                {wait, St1} ->
                    tty(St1#{pending := {From, ReplyAs, Req}})
            end;
        {type, Text} ->
            %% Echoed, as a terminal does.
            St1 = St#{in := In ++ Text, out := [Text | Out]},
            case Pending of
                none -> tty(St1);
                {From, ReplyAs, Req} ->
                    case io_req(latin1_req(Req),
                                St1#{pending := none, prompted => true}) of
                        {reply, R, St2} ->
                            From ! {io_reply, ReplyAs, R},
                            tty(maps:remove(prompted, St2));
                        {wait, St2} ->
                            tty(St2#{pending := Pending})
                    end
            end;
        {out, From, Ref} ->
            From ! {Ref, unicode:characters_to_binary(lists:reverse(Out))},
            tty(St);
        {io_request, From, ReplyAs, Req0} ->
            %% Output while an input request waits (trace lines).
            case latin1_req(Req0) of
                Req when element(1, Req) =:= put_chars;
                         element(1, Req) =:= requests ->
                    {reply, R, St1} = io_req(Req, St),
                    From ! {io_reply, ReplyAs, R},
                    tty(St1);
                _ ->
                    From ! {io_reply, ReplyAs, {error, busy}},
                    tty(St)
            end
    end.

%% The requests of a node that sends them without an encoding (io sends
%% those to an io server on another node).
latin1_req({put_chars, Chars}) -> {put_chars, latin1, Chars};
latin1_req({put_chars, M, F, A}) -> {put_chars, latin1, M, F, A};
latin1_req({get_until, Prompt, M, F, Xs}) -> {get_until, latin1, Prompt, M, F, Xs};
latin1_req({get_line, Prompt}) -> {get_line, latin1, Prompt};
latin1_req({requests, Rs}) -> {requests, [latin1_req(R) || R <- Rs]};
latin1_req(R) -> R.

io_req({put_chars, Enc, Chars}, #{out := Out} = St) ->
    {reply, ok, St#{out := [unicode:characters_to_list(Chars, Enc) | Out]}};
io_req({put_chars, Enc, M, F, A}, St) ->
    io_req({put_chars, Enc, apply(M, F, A)}, St);
io_req({requests, Rs}, St) ->
    lists:foldl(fun(R, {reply, ok, S}) -> io_req(R, S);
                   (_, Acc) -> Acc
                end, {reply, ok, St}, Rs);
io_req(nl, St) -> io_req({put_chars, unicode, "\n"}, St);
io_req({get_until, _Enc, Prompt, M, F, Xs}, #{in := In, out := Out} = St) ->
    St1 = case maps:is_key(prompted, St) of
              true -> St;
              false -> St#{out := [prompt(Prompt) | Out]}
          end,
    %% A typed line is a whole expression in these tests: it is scanned
    %% at once.
    case In of
        [] -> {wait, St1};
        _ ->
            case apply(M, F, [[], In | Xs]) of
                {done, Result, Rest} ->
                    {reply, Result, St1#{in := rest(Rest)}};
                {more, _} ->
                    {wait, St1}
            end
    end;
io_req({get_line, _Enc, _Prompt}, #{in := In} = St) ->
    case string:split(In, "\n") of
        [Line, Rest] -> {reply, Line ++ "\n", St#{in := Rest}};
        _ -> {wait, St}
    end;
io_req(getopts, St) ->
    {reply, [{binary, false}, {encoding, unicode}, {echo, true}], St};
io_req({setopts, _}, St) -> {reply, ok, St};
io_req({get_geometry, _}, St) -> {reply, {error, enotsup}, St};
io_req(_, St) -> {reply, {error, request}, St}.

rest(eof) -> [];
rest(R) -> R.

prompt(P) ->
    try io_lib:format("~ts", [P])
    catch _:_ ->
            case P of
                {format, F, A} -> io_lib:format(F, A);
                _ -> io_lib:format("~p", [P])
            end
    end.
