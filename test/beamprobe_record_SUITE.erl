%%% @doc `beamprobe record [PATTERN...] -- CMD...': an Erlang program run
%%% with a session started before its own code, its trace written when it
%%% ends: `erl -s' ending with init:stop, an escript (which ends with
%%% halt: the last events still arrive), the program's exit status passed
%%% on, a bad pattern refused before the program runs, and the caller's
%%% ERL_AFLAGS kept.
-module(beamprobe_record_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([erl_s_program/1, escript_halts/1, exit_status/1, bad_pattern/1,
         keeps_erl_aflags/1, squatter_gives_way/1]).

all() -> [erl_s_program, escript_halts, exit_status, bad_pattern,
          keeps_erl_aflags, squatter_gives_way].

init_per_suite(Config) ->
    Dir = ?config(priv_dir, Config),
    W = filename:join(Dir, "prog"),
    ok = filelib:ensure_dir(filename:join(W, "x")),
    Src = filename:join(W, "bp_rec_prog.erl"),
    ok = file:write_file(Src,
        "-module(bp_rec_prog).\n"
        "-export([main/0, main/1, double/1]).\n"
        "main() -> [?MODULE:double(I) || I <- lists:seq(1, 300)], ok.\n"
        "main([N]) -> [?MODULE:double(I) || I <- lists:seq(1, list_to_integer(N))],\n"
        "             io:format(\"done~n\").\n"
        "double(X) -> X * 2.\n"),
    {ok, _} = compile:file(Src, [{outdir, W}]),
    Es = filename:join(W, "prog.escript"),
    ok = file:write_file(Es, ["#!/usr/bin/env escript\n%%! -pa ", W, "\n",
                              "main(Args) -> bp_rec_prog:main(Args).\n"]),
    ok = file:change_mode(Es, 8#755),
    [{prog_dir, W}, {escript, Es} | Config].

end_per_suite(_Config) -> ok.

%% erl -s M F -s init stop: every call of the program is in the trace.
erl_s_program(Config) ->
    Out = out(Config, "erl_s"),
    {0, Text} = record(["-o", Out, "bp_rec_prog:double/1", "--",
                        "erl", "-noshell", "-pa", ?config(prog_dir, Config),
                        "-s", "bp_rec_prog", "main", "-s", "init", "stop"]),
    ct:log("~s", [Text]),
    ?assertEqual(nomatch, binary:match(Text, <<"may be missing">>)),
    ?assertEqual(300, calls(Out)).

%% An escript ends with halt/1: the trace still holds every call.
escript_halts(Config) ->
    Out = out(Config, "escript"),
    {0, Text} = record(["-o", Out, "bp_rec_prog:double/1 -> return", "--",
                        ?config(escript, Config), "1000"]),
    ct:log("~s", [Text]),
    ?assertMatch({match, _}, re:run(Text, "done")),
    ?assertEqual(1000, calls(Out)),
    Evs = beamprobe_test_lib:trace(Out),
    ?assertEqual(1000, length([E || #{name := <<"return_from">>} = E <- Evs])).

exit_status(Config) ->
    Out = out(Config, "status"),
    {3, _} = record(["-o", Out, "bp_rec_prog:double/1", "--", "erl",
                     "-noshell", "-pa", ?config(prog_dir, Config), "-eval",
                     "bp_rec_prog:main(), halt(3)"]),
    ?assertEqual(300, calls(Out)).

%% A pattern that cannot be traced: the program does not run untraced.
bad_pattern(Config) ->
    Out = out(Config, "bad"),
    {2, Text} = record(["-o", Out, "no_such_module_xyz:f/1", "--", "erl",
                        "-noshell", "-eval", "io:format(\"ran~n\"), halt()"]),
    ?assertMatch({match, _}, re:run(Text, "no_such_module_xyz")),
    ?assertEqual(nomatch, re:run(Text, "^ran", [multiline])),
    {1, _} = beamprobe_test_lib:cli(["record", "bp_rec_prog:double/1"]),
    {1, _} = beamprobe_test_lib:cli(["record", "--", "erl"]).

%% The caller's ERL_AFLAGS still apply to the program.
keeps_erl_aflags(Config) ->
    Out = out(Config, "aflags"),
    {0, Text} = record(["-o", Out, "bp_rec_prog:double/1", "--", "erl",
                        "-noshell", "-pa", ?config(prog_dir, Config), "-eval",
                        "io:format(\"flag=~p~n\", [init:get_argument(bp_mark)]),"
                        " bp_rec_prog:main(), init:stop()"],
                       [{"ERL_AFLAGS", "-bp_mark yes"}]),
    ?assertMatch({match, _}, re:run(Text, "flag=\\{ok,\\[\\[\"yes\"\\]\\]\\}")),
    ?assertEqual(300, calls(Out)).

%% Another local user connects to record's port before the program's
%% session and sends nothing: the session's handshake completes beside
%% it in the receiver's lobby, and it is closed.  (Earlier it held the
%% one place for 3 s; before that, for as long as it liked: the trace
%% came out empty.)
squatter_gives_way(Config) ->
    Out = out(Config, "squat"),
    P = record_port(["-o", Out, "bp_rec_prog:double/1", "--", "erl",
                     "-noshell", "-pa", ?config(prog_dir, Config), "-eval",
                     "timer:sleep(4500), bp_rec_prog:main(), init:stop()"], []),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    Port = listen_port(OsPid, 400),
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    {0, Text} = collect(P, <<>>),
    gen_tcp:close(S),
    ct:log("~s", [Text]),
    ?assertEqual(300, calls(Out)).

%% The loopback port the process OsPid listens on (from /proc).
listen_port(_OsPid, 0) -> ct:fail(no_listening_socket);
listen_port(OsPid, Tries) ->
    Fd = "/proc/" ++ integer_to_list(OsPid) ++ "/fd",
    Inodes = [I || F <- element(2, file:list_dir(Fd)),
                   {ok, L} <- [file:read_link(filename:join(Fd, F))],
                   {match, [I]} <- [re:run(L, "^socket:\\[(\\d+)\\]$",
                                           [{capture, [1], list}])]],
    {ok, Tcp} = file:read_file("/proc/net/tcp"),
    Ports = [list_to_integer(binary_to_list(PortHex), 16)
             || Line <- tl(binary:split(Tcp, <<"\n">>, [global])),
                [_, <<"0100007F:", PortHex/binary>>, _, <<"0A">>,
                 _, _, _, _, _, Inode | _] <-
                    [binary:split(Line, <<" ">>, [global, trim_all])],
                lists:member(binary_to_list(Inode), Inodes)],
    case Ports of
        [Port | _] -> Port;
        [] -> timer:sleep(5), listen_port(OsPid, Tries - 1)
    end.

%%% ------------------------------------------------------------------------

out(Config, Name) -> filename:join(?config(priv_dir, Config), Name).

record(Args) -> record(Args, []).
record(Args, Env) ->
    collect(record_port(Args, Env), <<>>).

record_port(Args, Env) ->
    Bin = filename:join([filename:dirname(filename:dirname(
                                            code:which(beamprobe))),
                         "bin", "beamprobe"]),
    open_port({spawn_executable, Bin},
              [{args, ["record" | Args]}, {env, Env}, exit_status, binary,
               stderr_to_stdout, stream]).

collect(P, Acc) ->
    receive
        {P, {data, D}} -> collect(P, <<Acc/binary, D/binary>>);
        {P, {exit_status, S}} -> {S, Acc}
    after 60000 -> ct:fail({record_timeout, Acc})
    end.

calls(Dir) ->
    length([E || #{name := <<"call">>} = E <- beamprobe_test_lib:trace(Dir)]).
