%%% @doc The node side of `beamprobe record -- CMD...' (c_src/cli/
%%% cmd_record.c): started by `-s beamprobe_record start' (put first on
%%% the command line through ERL_AFLAGS, so it runs before the program's
%%% own `-s', `-run', `-eval' or escript `main/1'), it starts a session
%%% described by the environment and streams it to the command line over
%%% the TCP sink.  The session belongs to a process of its own that lives
%%% as long as the node: when the program ends with `init:stop/0' (or
%%% returns from an escript), the beamprobe application stops and writes
%%% the session's last events; `halt/0,1' ends the VM at once and the
%%% command line reports that the end of the trace may be missing.
%%%
%%% Environment: `BEAMPROBE_RECORD_ADDR' ("127.0.0.1:PORT"),
%%% `BEAMPROBE_RECORD_PATTERNS' (patterns separated by newlines) and
%%% `BEAMPROBE_RECORD_OPTS' (`key=value' separated by `;': seconds,
%%% max_events, procs, events, return, args).  The variables are removed
%%% once read: the program's own child VMs are not recorded.
-module(beamprobe_record).

-export([start/0]).

%% @doc Starts the recording session, or ends the VM with a message saying
%% why it cannot (a bad pattern, say): the program must not run untraced
%% when a trace was asked for.
-spec start() -> ok.
start() ->
    Addr = os:getenv("BEAMPROBE_RECORD_ADDR"),
    Pats = os:getenv("BEAMPROBE_RECORD_PATTERNS", ""),
    OptText = os:getenv("BEAMPROBE_RECORD_OPTS", ""),
    _ = [os:unsetenv(V) || V <- ["BEAMPROBE_RECORD_ADDR",
                                 "BEAMPROBE_RECORD_PATTERNS",
                                 "BEAMPROBE_RECORD_OPTS"]],
    case Addr of
        false -> ok;
        _ ->
            Self = self(),
            Pid = spawn(fun() -> owner(Self, Addr, Pats, OptText) end),
            receive
                {Pid, ok} -> ok;
                {Pid, {error, Text}} ->
                    io:format(standard_error, "beamprobe record: ~ts~n",
                              [Text]),
                    erlang:halt(2)
            end
    end.

owner(Parent, Addr, Pats, OptText) ->
    [Host, Port] = string:split(Addr, ":", trailing),
    Opts0 = maps:from_list([kv(KV) || KV <- string:lexemes(OptText, ";")]),
    Token = binary:decode_hex(list_to_binary(
                                os:getenv("BEAMPROBE_RECORD_TOKEN", ""))),
    Opts = maps:merge(#{seconds => infinity},
                      Opts0#{tcp => {Host, list_to_integer(Port), false,
                                     Token}}),
    Patterns = [unicode:characters_to_binary(P)
                || P <- string:lexemes(Pats, "\n")],
    Reply = case beamprobe_attach:session_spec(Patterns, Opts) of
                {ok, Spec} ->
                    case beamprobe:start(Spec#{tag => beamprobe_record}) of
                        {ok, _} -> ok;
                        {error, R} ->
                            {error, unicode:characters_to_binary(
                                      beamprobe:format_error(R))}
                    end;
                {error, _} = E -> E
            end,
    Parent ! {self(), Reply},
    case Reply of
        ok -> receive never -> ok end;
        _ -> ok
    end.

kv(KV) ->
    [K, V] = string:split(KV, "="),
    Key = list_to_existing_atom(K),
    {Key, case Key of
              seconds -> list_to_integer(V);
              max_events -> list_to_integer(V);
              return -> V =:= "1";
              events -> [unicode:characters_to_binary(E)
                         || E <- string:lexemes(V, ",")];
              _ -> unicode:characters_to_binary(V)
          end}.
