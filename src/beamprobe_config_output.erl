%%% @doc The `output' option of a session spec (beamprobe_config): its
%%% sinks -- trace files (a directory made at start, or the default
%%% beamprobe-NODE-DATE-TIME), handler processes, USDT probes, LTTng, a TCP
%%% stream -- each checked with its own options, the file sink's directory
%%% checked writable and empty, a TCP address bound to loopback unless
%%% `remote => true'.  Errors are those of beamprobe_config (its
%%% format_error/1 says them).
-module(beamprobe_config_output).

-export([output/1]).

-include_lib("kernel/include/file.hrl").
-include("beamprobe_events.hrl").

-import(beamprobe_config, [resolve_procs/4, bad/2, proper/1]).

%% Processes a sink's own procs may list (BP_HANDLER_MAX_PIDS, c_src).
-define(MAX_SINK_PROCS, 64).
%% The NIF's directory name buffer (c_src/bp_session.h), NUL included.
-define(MAX_PATH, 4096).

%% @doc Checks the `output' of session spec S: S with `sinks' (the sinks,
%% checked, in the order given) and `dir' (the file sink's directory, or
%% undefined), or the first thing wrong.
%% output => Sink | [Sink]; at most one file sink.
-spec output(map()) -> {ok, map()} | {error, term()}.
output(#{output := O} = S) when is_list(O), O =/= [] ->
    case io_lib:char_list(O) orelse not proper(O) of
        true -> bad(output, O);
        false -> sinks(O, S, [])
    end;
output(#{output := O} = S) when is_tuple(O); O =:= usdt -> sinks([O], S, []);
output(#{output := lttng} = S) -> sinks([lttng], S, []);
output(#{output := O}) -> bad(output, O);
output(S) -> sinks([{file, default_dir()}], S, []).

sinks([], S, Acc) ->
    Sinks = lists:reverse(Acc),
    case [D || #{type := file, dir := D} <- Sinks] of
        [] -> {ok, S#{sinks => Sinks, dir => undefined}};
        [Dir] -> {ok, S#{sinks => Sinks, dir => Dir}};
        _ -> {error, {bad_option, output, "at most one file sink"}}
    end;
sinks([{file, Dir} = O | T], S, Acc) ->
    case file_name(Dir) of
        {ok, _} -> sinks([{file, Dir, #{}} | T], S, Acc);
        error -> bad(output, O)
    end;
sinks([{file, Dir, Opts} = O | T], S, Acc) when is_map(Opts) ->
    case file_name(Dir) of
        error -> bad(output, O);
        {ok, Name} -> file_sink(Name, Opts, O, T, S, Acc)
    end;
sinks([{handler, Mod, Arg} | T], S, Acc) when is_atom(Mod) ->
    sinks([{handler, Mod, Arg, #{}} | T], S, Acc);
sinks([{handler, Mod, Arg, Opts} | T], S, Acc)
  when is_atom(Mod), is_map(Opts) ->
    case code:ensure_loaded(Mod) of
        {module, Mod} ->
            case erlang:function_exported(Mod, handle_events, 2) andalso
                sink_opts(Opts, [events, procs, batch, credits, overflow]) of
                false -> {error, {not_a_handler, Mod}};
                {error, _} = E -> E;
                {ok, Common} ->
                    sinks(T, S, [Common#{type => handler, module => Mod,
                                         arg => Arg} | Acc])
            end;
        {error, _} -> {error, {no_such_module, Mod}}
    end;
sinks([usdt | T], S, Acc) -> sinks([{usdt, #{}} | T], S, Acc);
sinks([{usdt, Opts} | T], S, Acc) when is_map(Opts) ->
    case [X || #{type := usdt} = X <- Acc] of
        [_ | _] -> {error, {bad_option, output, "at most one usdt sink"}};
        [] ->
            case sink_opts(Opts, [events]) of
                {error, _} = E -> E;
                {ok, Common} -> sinks(T, S, [Common#{type => usdt} | Acc])
            end
    end;
sinks([lttng | T], S, Acc) ->
    sinks([{lttng, #{}} | T], S, Acc);
sinks([{lttng, Opts} | T], S, Acc) when is_map(Opts) ->
    case [L || #{type := lttng} = L <- Acc] of
        [] ->
            case sink_opts(Opts, [events]) of
                {error, _} = E -> E;
                {ok, Common} -> sinks(T, S, [Common#{type => lttng} | Acc])
            end;
        _ -> {error, {bad_option, output, "at most one lttng sink"}}
    end;
sinks([{tcp, Addr} | T], S, Acc) -> sinks([{tcp, Addr, #{}} | T], S, Acc);
sinks([{tcp, Addr, Opts} = O | T], S, Acc) when is_map(Opts) ->
    Remote = maps:get(remote, Opts, false),
    Queue = maps:get(queue, Opts, 8 bsl 20),
    Token = maps:get(token, Opts, <<>>),
    case [X || #{type := tcp} = X <- Acc] of
        [_ | _] -> {error, {bad_option, output, "at most one tcp sink"}};
        [] when not is_boolean(Remote) -> bad({output, remote}, Remote);
        [] when not (is_binary(Token) andalso byte_size(Token) =< 256) ->
            bad({output, token}, Token);
        [] when not (is_integer(Queue) andalso Queue >= 65536
                     andalso Queue =< 1 bsl 31) ->
            bad({output, queue}, Queue);
        [] ->
            case {tcp_address(Addr),
                  sink_opts(maps:without([remote, queue, token], Opts),
                            [events])} of
                {error, _} -> bad(output, O);
                {_, {error, _} = E} -> E;
                {{ok, IP, Port}, {ok, Common}} ->
                    case Remote orelse loopback(IP) of
                        true ->
                            sinks(T, S, [Common#{type => tcp, addr => IP,
                                                 port => Port,
                                                 queue => Queue,
                                                 token => Token} | Acc]);
                        false -> {error, {not_loopback, Addr}}
                    end
            end
    end;
sinks([O | _], _S, _Acc) -> bad(output, O).

%% A TCP address: "Host:Port", <<"Host:Port">>, {Host, Port} with Host an
%% IP tuple, a name or an address text ("[::1]:Port" for IPv6 text).
tcp_address(B) when is_binary(B) ->
    case unicode:characters_to_list(B) of
        L when is_list(L) -> tcp_address(L);
        _ -> error
    end;
tcp_address(L) when is_list(L), L =/= [] ->
    case io_lib:char_list(L) andalso string:split(L, ":", trailing) of
        [H, P] ->
            case string:to_integer(P) of
                {Port, []} -> tcp_address({string:trim(H, both, "[]"), Port});
                _ -> error
            end;
        _ -> error
    end;
tcp_address({Host, Port}) when is_integer(Port), Port > 0, Port < 65536 ->
    case Host of
        T when is_tuple(T) ->
            case inet:ntoa(T) of
                {error, _} -> error;
                _ -> {ok, T, Port}
            end;
        H when is_list(H), H =/= [] ->
            %% An address text needs no resolver (which would start the
            %% node's inet_gethost_native: attach leaves nothing behind).
            case io_lib:char_list(H) andalso inet:parse_address(H) of
                {ok, IPT} -> {ok, IPT, Port};
                _ -> tcp_name(H, Port)
            end;
        _ -> error
    end;
tcp_address(_) -> error.

tcp_name(H, Port) ->
    case inet:getaddr(H, inet) of
        {ok, IP} -> {ok, IP, Port};
        _ ->
            case inet:getaddr(H, inet6) of
                {ok, IP6} -> {ok, IP6, Port};
                _ -> error
            end
    end.

loopback({127, _, _, _}) -> true;
loopback({0, 0, 0, 0, 0, 0, 0, 1}) -> true;
loopback(_) -> false.

%% A file sink whose name is valid (see file_name/1).
file_sink(Name, Opts, O, T, S, Acc) ->
    case sink_opts(Opts, [events]) of
        {error, _} = E -> E;
        {ok, Common} ->
            case check_dir(Name) of
                {ok, Abs} ->
                    case byte_size(unicode:characters_to_binary(Abs)) of
                        N when N >= ?MAX_PATH -> bad(output, O);
                        _ -> sinks(T, S, [Common#{type => file, dir => Abs}
                                          | Acc])
                    end;
                {error, _} = E -> E
            end
    end.

%% A directory name as characters: a flat string of Unicode code points
%% or a UTF-8 binary, not empty, without NUL (the C side ends it there),
%% and only ASCII when the VM encodes file names in latin-1 (erl +fnl, or
%% a C locale: the NIF opens the UTF-8 bytes, the VM would create latin-1
%% ones).
file_name(B) when is_binary(B) ->
    case unicode:characters_to_list(B) of
        L when is_list(L) -> file_name(L);
        _ -> error
    end;
file_name(L) when is_list(L), L =/= [] ->
    Latin1 = file:native_name_encoding() =:= latin1,
    case io_lib:char_list(L) andalso not lists:member(0, L) andalso
        not (Latin1 andalso lists:any(fun(C) -> C > 127 end, L)) of
        true -> {ok, L};
        false -> error
    end;
file_name(_) -> error.

%% Options common to sinks: which events, which processes, batching.
sink_opts(Opts, Allowed) ->
    D = #{events => all, procs => all, batch => 1000, credits => 4,
          overflow => drop},
    case [K || K <- maps:keys(Opts), not lists:member(K, Allowed)] of
        [K | _] -> {error, {unknown_option, {output, K}}};
        [] ->
            M = maps:merge(D, Opts),
            #{events := Ev, procs := Ps, batch := B, credits := C,
              overflow := Ov} = M,
            Kinds = case is_list(Ev) andalso not proper(Ev) of
                        true -> error;
                        false -> kinds(Ev)
                    end,
            Procs = case Ps of
                        all -> {ok, all};
                        L when is_list(L) ->
                            case resolve_procs({output, procs}, L, L, []) of
                                {ok, R} -> {ok, lists:usort(R)};
                                {error, _} = E0 -> E0
                            end;
                        _ -> bad({output, procs}, Ps)
                    end,
            if
                Kinds =:= error -> bad({output, events}, Ev);
                not (is_integer(B) andalso B >= 1 andalso B =< 100000) ->
                    bad({output, batch}, B);
                not (is_integer(C) andalso C >= 1 andalso C =< 64) ->
                    bad({output, credits}, C);
                Ov =/= drop, Ov =/= stop -> bad({output, overflow}, Ov);
                true ->
                    case Procs of
                        {ok, P} when is_list(P),
                                     length(P) > ?MAX_SINK_PROCS ->
                            %% (the NIF holds at most this many per sink;
                            %% it refused more with bad_config)
                            {error, {too_many, {output, procs},
                                     ?MAX_SINK_PROCS}};
                        {ok, P} -> {ok, #{kinds => Kinds, procs => P,
                                          batch => B, credits => C,
                                          overflow => Ov}};
                        {error, _} = E -> E
                    end
            end
    end.

%% Event categories to a bit mask over event ids.
kinds(all) -> 16#FFFFFFFFFFFFFFFF;
kinds(L) when is_list(L) ->
    Ids = [kind_ids(K) || K <- L],
    case lists:member(error, Ids) of
        true -> error;
        false -> lists:foldl(fun(I, A) -> A bor (1 bsl I) end, 0,
                             lists:append(Ids))
    end;
kinds(_) -> error.

%% The ids of the event classes an `events' category selects, from the
%% schema (include/beamprobe_events.hrl, generated from bp_format.h).
kind_ids(internal) -> error;
kind_ids(K) ->
    case [Id || {_Name, Id, Cat, _Fields} <- ?BP_EVENTS, Cat =:= K] of
        [] -> error;
        Ids -> Ids
    end.

check_dir(Dir) ->
    Abs = filename:absname(Dir),
    case file:read_file_info(Abs) of
        {ok, _} ->
            case file:list_dir(Abs) of
                {ok, []} -> {ok, Abs};
                {ok, _} -> {error, {output_exists, Abs}};
                {error, R} -> {error, {unwritable, Abs, R}}
            end;
        {error, enoent} ->
            parent_writable(filename:dirname(Abs), Abs);
        {error, R} -> {error, {unwritable, Abs, R}}
    end.

parent_writable(Parent, Abs) ->
    case file:read_file_info(Parent) of
        {ok, #file_info{type = directory, access = A}}
          when A =:= read_write; A =:= write ->
            {ok, Abs};
        {ok, #file_info{type = directory}} ->
            {error, {unwritable, Abs, eacces}};
        {ok, _} -> {error, {unwritable, Abs, enotdir}};
        {error, R} -> {error, {unwritable, Abs, R}}
    end.

%% beamprobe-NODE-YYYYMMDD-HHMMSS, and -2, -3, ... when that is taken (a
%% second session started in the same second was refused:
%% output_exists).  A name taken between this look and the session's
%% exclusive mkdir is still output_exists, never shared.
default_dir() ->
    {{Y, Mo, D}, {H, Mi, Se}} = calendar:local_time(),
    Node = lists:map(fun ($@) -> $-; (C) -> C end, atom_to_list(node())),
    Base = lists:flatten(io_lib:format(
                           "beamprobe-~s-~4..0w~2..0w~2..0w-~2..0w~2..0w~2..0w",
                           [Node, Y, Mo, D, H, Mi, Se])),
    free_dir(Base, 1).

free_dir(Base, N) ->
    Dir = case N of
              1 -> Base;
              _ -> Base ++ "-" ++ integer_to_list(N)
          end,
    case file:read_link_info(Dir) of
        {error, enoent} -> Dir;
        _ when N < 1000 -> free_dir(Base, N + 1);
        _ -> Dir
    end.
