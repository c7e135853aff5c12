%%% @doc A {@link beamprobe_handler} that prints events, one line each, in
%%% the format of `beamprobe print' (c_src/cli/cmd_print.c):
%%% ```
%%% 12:00:01.123456 <0.123.0> my_server call lists:seq(1, 10)
%%% 12:00:01.123470 <0.123.0> my_server returned from lists:seq/2 -> [1,2,...]
%%% % beamprobe: dropped 1200 events (rate limit or slow output)
%%% '''
%%% Lines go to an io server (`io'), by default the group leader of the
%%% process that started the session, so that printing works in a remote
%%% shell (`erl -remsh'): the io requests travel to the shell's node.
-module(beamprobe_printer).
-behaviour(beamprobe_handler).

-export([init/1, handle_events/2, terminate/2, format_event/2]).

-type opts() :: #{io := pid() | atom(),
                  timestamp => time | ns | none}.

-record(st, {io :: pid() | atom(),
             ts :: time | ns | none,
             offset :: integer(),        % wall ns - trace clock ns
             names = #{} :: #{pid() | port() => binary()},
             depth = #{} :: #{pid() | port() => non_neg_integer()},
             lines = 0 :: non_neg_integer()}).

%% @doc `Opts': `io' (the io server), `timestamp' (`time' = local
%% HH:MM:SS.micro, the default; `ns' = trace clock; `none').
%% Any other argument is `{error, {bad_option, Key, Value}}' (Key `opts'
%% for something that is not such a map).
-spec init(opts() | term()) -> {ok, #st{}} | {error, term()}.
init(#{io := Io} = Opts) ->
    Ts = maps:get(timestamp, Opts, time),
    case [K || K <- maps:keys(Opts), K =/= io, K =/= timestamp] of
        [K | _] -> {error, {unknown_option, K}};
        _ when not (is_pid(Io) orelse is_atom(Io)) ->
            {error, {bad_option, io, Io}};
        _ when Ts =/= time, Ts =/= ns, Ts =/= none ->
            {error, {bad_option, timestamp, Ts}};
        [] ->
            Offset = os:system_time(nanosecond) - beamprobe_nif:clock(),
            {ok, #st{io = Io, ts = Ts, offset = Offset}}
    end;
init(Opts) ->
    {error, {bad_option, opts, Opts}}.

%% @doc Prints a batch with one io request.
-spec handle_events([beamprobe_handler:event()], #st{}) -> {ok, #st{}}.
handle_events(Events, St) ->
    {Lines, St1} = lists:mapfoldl(fun line/2, St, Events),
    _ = (catch io:put_chars(St1#st.io, Lines)),
    {ok, St1#st{lines = St#st.lines + length(Events)}}.

%% @doc Says why the session ended.
-spec terminate(term(), #st{}) -> ok.
terminate(Reason, #st{io = Io}) ->
    _ = (catch io:format(Io, "% beamprobe: session ended (~p)~n", [Reason])),
    ok.

%% @doc One event as a line (without the time and process columns when
%% `Prefix' is false).  Exported for tests.
-spec format_event(beamprobe_handler:event(), boolean()) -> iodata().
format_event(E, _Prefix) ->
    describe(E).

line(#{event := dropped, count := N}, St) ->
    {io_lib:format("% beamprobe: dropped ~b events (rate limit, or output "
                   "too slow)~n", [N]), St};
line(#{event := Ev, ts := Ts, pid := Pid} = E, St) ->
    {Name, St1} = name(Pid, St),
    {Indent, St2} = indent(Ev, Pid, St1),
    Line = [ts(Ts, St2), pid_text(Pid), Name, " ", Indent, describe(E), "\n"],
    {Line, St2}.

ts(_, #st{ts = none}) -> "";
ts(Ts, #st{ts = ns}) -> [integer_to_list(Ts), " "];
ts(Ts, #st{ts = time, offset = Off}) ->
    Ns = Ts + Off,
    {_, {H, M, S}} = calendar:system_time_to_local_time(Ns div 1000000000,
                                                         second),
    io_lib:format("~2..0b:~2..0b:~2..0b.~6..0b ",
                  [H, M, S, (Ns rem 1000000000) div 1000]).

pid_text(P) when is_pid(P) -> pid_to_list(P);
pid_text(P) when is_port(P) -> erlang:port_to_list(P);
pid_text(_) -> "-".

%% Registered names, looked up once per process (on this node).
name(P, #st{names = N} = St) when is_pid(P) ->
    case N of
        #{P := Name} -> {Name, St};
        _ ->
            Name = case catch erlang:process_info(P, registered_name) of
                       {registered_name, R} -> [" ", atom_to_list(R)];
                       _ -> ""
                   end,
            {Name, St#st{names = N#{P => Name}}}
    end;
name(_, St) -> {"", St}.

%% Per-process call depth, for indentation like `beamprobe print'.
indent(Ev, P, #st{depth = D} = St) ->
    Cur = maps:get(P, D, 0),
    case Ev of
        call -> {pad(Cur), St#st{depth = D#{P => Cur + 1}}};
        _ when Ev =:= return_from; Ev =:= exception_from ->
            New = max(Cur - 1, 0),
            {pad(New), St#st{depth = D#{P => New}}};
        _ -> {pad(Cur), St}
    end.

%% Capped at 256 levels, as in `beamprobe print'.
pad(Depth) -> lists:duplicate(min(Depth, 256), "  ").

describe(#{event := call, mfa := MFA, args := Args, info := Info}) ->
    [call_text(MFA, Args), info(Info)];
describe(#{event := return_from, mfa := MFA, result := R}) ->
    ["returned from ", MFA, " -> ", R];
describe(#{event := exception_from, mfa := MFA, class := C, reason := R}) ->
    ["exception from ", MFA, ": ", C, ":", R];
describe(#{event := return_to, mfa := MFA}) ->
    ["returned to ", MFA];
describe(#{event := send, to_text := To, message := M}) ->
    ["sent ", M, " to ", To];
describe(#{event := send_to_non_existing_process, to_text := To,
           message := M}) ->
    ["sent ", M, " to ", To, " (no such process)"];
describe(#{event := 'receive', message := M}) ->
    ["received ", M];
describe(#{event := spawn, other_text := O, mfa := MFA}) ->
    ["spawned ", O, " as ", MFA];
describe(#{event := spawned, other_text := O, mfa := MFA}) ->
    ["spawned by ", O, " as ", MFA];
describe(#{event := exit, reason := R}) ->
    ["exit ", R];
describe(#{event := Ev, other_text := O})
  when Ev =:= link; Ev =:= unlink; Ev =:= getting_linked;
       Ev =:= getting_unlinked ->
    [atom_to_list(Ev), " ", O];
describe(#{event := Ev, name := N}) when Ev =:= register;
                                         Ev =:= unregister ->
    [atom_to_list(Ev), " ", N];
describe(#{event := Ev} = E) ->
    Fields = [[" ", atom_to_list(K), "=", val(V)]
              || {K, V} <- lists:sort(maps:to_list(E)),
                 not lists:member(K, [event, ts, pid])],
    [atom_to_list(Ev), Fields].

val(V) when is_binary(V) -> V;
val(V) -> io_lib:format("~p", [V]).

%% "m:f/2" + "(1, 2)" -> "m:f(1, 2)"; without args, "m:f/2".
call_text(MFA, <<"undefined">>) -> ["call ", MFA];
call_text(MFA, Args) ->
    case string:split(MFA, "/", trailing) of
        [MF, _Arity] -> ["call ", MF, Args];
        _ -> ["call ", MFA, Args]
    end.

info(<<"true">>) -> [];
info(Info) -> [" % ", Info].
