%%% @doc `beamprobe receive' run by the stream suites (beamprobe_stream_SUITE,
%%% beamprobe_losses_SUITE): started on a loopback port, its output
%%% gathered until it exits.
-module(beamprobe_receive_lib).

-export([receiver/1, receiver/2, receiver_on/3, receiver_at/3,
         receiver_at/4, wait_port/1]).

%% Starts `beamprobe receive' on a free loopback port.
receiver(Dir) -> receiver(Dir, []).
receiver(Dir, Extra) ->
    receiver_at(Dir, "127.0.0.1:0", Extra).

%% On port Port.
receiver_on(Dir, Port, Extra) ->
    {P, Port} = receiver_at(Dir, "127.0.0.1:" ++ integer_to_list(Port),
                            Extra),
    P.

receiver_at(Dir, Listen, Extra) ->
    receiver_at(Dir, Listen, Extra, []).

%% Shell (`sh -c Shell', the receiver run by `exec "$0" "$@"' at its end)
%% around the receiver, if not [].
receiver_at(Dir, Listen, Extra, Shell) ->
    Bin = filename:join([filename:dirname(filename:dirname(
                                            code:which(beamprobe))),
                         "bin", "beamprobe"]),
    Args = ["receive", "--listen", Listen, "-o", Dir | Extra],
    {Exe, Argv} = case Shell of
                      [] -> {Bin, Args};
                      _ -> {"/bin/sh",
                            ["-c", Shell ++ " exec \"$0\" \"$@\"", Bin
                             | Args]}
                  end,
    P = open_port({spawn_executable, Exe},
                  [{args, Argv},
                   exit_status, binary, stderr_to_stdout, {line, 1000}]),
    receive
        {P, {data, {eol, <<"beamprobe: listening on port ", R/binary>>}}} ->
            {match, [Num]} = re:run(R, "^[0-9]+", [{capture, first, list}]),
            {P, list_to_integer(Num)}
    after 10000 -> ct:fail(receiver_did_not_start)
    end.

wait_port(P) -> wait_port(P, []).
wait_port(P, Acc) ->
    receive
        {P, {data, {_, L}}} -> wait_port(P, [L, $\n | Acc]);
        {P, {exit_status, S}} -> {S, iolist_to_binary(lists:reverse(Acc))}
    after 20000 -> ct:fail(receiver_did_not_end)
    end.
