%%% @doc A {@link beamprobe_handler} that prints events, one line each, in
%%% the format of `beamprobe print' (c_src/cli/cmd_print.c):
%%% ```
%%% 12:00:01.123456 <0.123.0> my_server call lists:seq(1, 10)
%%% 12:00:01.123470 <0.123.0> my_server returned from lists:seq/2 -> [1,2,...]
%%% % beamprobe: dropped 1200 events (rate limit or slow output)
%%% '''
%%% It follows the rules of `beamprobe print' (docs/beamprobe.1, "Call
%%% stacks, open calls and lost events"; c_src/cli/bp_model.h): the same
%%% call stack per process for the indentation (a return ends the topmost
%%% frame of its function and the frames above it, return_to ends the
%%% frames above its function, exit and lost events empty the stack), the
%%% same text per event, names in Erlang atom syntax that follow register
%%% and unregister.  beamprobe_printer_SUITE runs one workload into a file
%%% sink and this printer at once and compares the lines.
%%% Lines go to an io server (`io'), by default the group leader of the
%%% process that started the session, so that printing works in a remote
%%% shell (`erl -remsh'): the io requests travel to the shell's node.
-module(beamprobe_printer).
-behaviour(beamprobe_handler).

-export([init/1, handle_events/2, terminate/2, format_event/2]).

%% A process's call stack as in c_src/cli/bp_model.c: frames (function
%% texts, top first, at most ?MAX_DEPTH), calls beyond that counted, and
%% whether its last call-trace event was a return.
-record(stack, {frames = [] :: [binary()], depth = 0 :: non_neg_integer(),
                lost = 0 :: non_neg_integer(), just_returned = false :: boolean()}).
-type stack() :: #stack{}.
-define(MAX_DEPTH, 4096).

-type opts() :: #{io := pid() | atom(),
                  timestamp => time | ns | none}.

-record(st, {io :: pid() | atom(),
             ts :: time | ns | none,
             offset :: integer(),        % wall ns - trace clock ns
             names = #{} :: #{pid() | port() => binary()},
             stacks = #{} :: #{pid() | port() => stack()},
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
    %% Events were lost: the call stacks are no longer known.
    {io_lib:format("% beamprobe: dropped ~b events (rate limit, or output "
                   "too slow)~n", [N]), St#st{stacks = #{}}};
line(#{event := process}, St) ->
    {[], St}; % annotations: `beamprobe print' shows them only on request
line(#{ts := Ts, pid := Pid} = E, St) ->
    St0 = rename(E, St),
    {Name, St1} = name(Pid, St0),
    {Indent, St2} = indent(E, Pid, St1),
    Line = [ts(Ts, St2), pid_text(Pid), Name, " ", Indent, describe(E), "\n"],
    {Line, St2}.

%% Names follow register/unregister/exit events (a cached name is only
%% right until then).
rename(#{event := register, pid := P, name := N}, #st{names = Ns} = St) ->
    St#st{names = Ns#{P => [" ", N]}};
rename(#{event := Ev, pid := P}, #st{names = Ns} = St)
  when Ev =:= unregister; Ev =:= exit ->
    St#st{names = Ns#{P => ""}};
rename(_, St) -> St.

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
                       {registered_name, R} -> [" ", io_lib:write_atom(R)];
                       _ -> ""
                   end,
            {Name, St#st{names = N#{P => Name}}}
    end;
name(_, St) -> {"", St}.

%% Per-process call stack, for indentation like `beamprobe print': a
%% call is indented by the depth before it, any other event by the depth
%% after it.
indent(#{event := Ev} = E, P, #st{stacks = D} = St) ->
    S0 = maps:get(P, D, #stack{}),
    S = apply_stack(Ev, E, S0),
    Depth = case Ev of
                call -> S0#stack.depth + S0#stack.lost;
                _ -> S#stack.depth + S#stack.lost
            end,
    {pad(Depth), St#st{stacks = D#{P => S}}}.

apply_stack(call, _, #stack{lost = L, depth = N} = S)
  when L > 0; N >= ?MAX_DEPTH ->
    S#stack{lost = L + 1, just_returned = false};
apply_stack(call, #{mfa := F}, #stack{frames = Fs, depth = N} = S) ->
    S#stack{frames = [F | Fs], depth = N + 1, just_returned = false};
apply_stack(Ev, #{mfa := F}, #stack{lost = L} = S)
  when Ev =:= return_from; Ev =:= exception_from ->
    S1 = case L > 0 of
             true -> S#stack{lost = L - 1};
             false -> pop_through(F, S)
         end,
    S1#stack{just_returned = true};
apply_stack(return_to, #{mfa := F}, #stack{frames = Fs} = S) ->
    S1 = case lists:member(F, Fs) of
             true -> (pop_above(F, S))#stack{lost = 0};
             false when S#stack.just_returned -> S;
             false when S#stack.lost > 0 -> S#stack{lost = S#stack.lost - 1};
             false when Fs =:= [] -> S;
             false -> S#stack{frames = tl(Fs), depth = S#stack.depth - 1}
         end,
    S1#stack{just_returned = false};
apply_stack(exit, _, _) ->
    #stack{};
apply_stack(_, _, S) ->
    S.

%% Pops the topmost frame of F and those above it; none: nothing.
pop_through(F, #stack{frames = Fs, depth = N} = S) ->
    case lists:member(F, Fs) of
        true ->
            {Above, [F | Rest]} = lists:splitwith(fun(X) -> X =/= F end, Fs),
            S#stack{frames = Rest, depth = N - length(Above) - 1};
        false ->
            S
    end.

%% Pops the frames above the topmost frame of F.
pop_above(F, #stack{frames = Fs, depth = N} = S) ->
    {Above, Rest} = lists:splitwith(fun(X) -> X =/= F end, Fs),
    S#stack{frames = Rest, depth = N - length(Above)}.

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
describe(#{event := Ev, mfa := MFA, exiting := X})
  when Ev =:= sched_in; Ev =:= sched_out ->
    [case Ev of sched_in -> "scheduled in"; sched_out -> "scheduled out" end,
     case X of 0 -> ""; _ -> " (exiting)" end, " ", MFA];
describe(#{event := Ev, heap_size := H, heap_block_size := HB,
           old_heap_size := O, old_heap_block_size := OB, mbuf_size := MB,
           stack_size := SS})
  when Ev =:= gc_minor_start; Ev =:= gc_minor_end; Ev =:= gc_major_start;
       Ev =:= gc_major_end ->
    [atom_to_list(Ev) |
     [[" ", K, "=", integer_to_list(V)]
      || {K, V} <- [{"heap_size", H}, {"heap_block_size", HB},
                    {"old_heap_size", O}, {"old_heap_block_size", OB},
                    {"mbuf_size", MB}, {"stack_size", SS}]]];
describe(#{event := port_open, other_text := O, name := N}) ->
    ["port_open ", N, " by ", O];
describe(#{event := port_closed, reason := R}) ->
    ["port_closed ", R];
describe(#{event := annotation, tag := <<"undefined">>, value := V}) ->
    ["annotation ", V];
describe(#{event := annotation, tag := T, value := V}) ->
    ["annotation ", T, ": ", V];
describe(#{event := Ev} = E) ->
    Fields = [[" ", atom_to_list(K), "=", val(V)]
              || {K, V} <- lists:sort(maps:to_list(E)),
                 not lists:member(K, [event, ts, pid])],
    [atom_to_list(Ev), Fields].

val(V) when is_binary(V) -> V;
val(V) -> io_lib:format("~p", [V]).

%% "m:f/2" + "(1, 2)" -> "m:f(1, 2)"; without args, "m:f/2".
call_text(MFA, <<"undefined">>) -> ["call ", MFA];
call_text(MFA, <<>>) -> ["call ", MFA];
call_text(MFA, Args) ->
    case string:split(MFA, "/", trailing) of
        [MF, _Arity] -> ["call ", MF, Args];
        _ -> ["call ", MFA, Args]
    end.

%% The match specification's result; `true' (no action) and nothing are
%% not shown, as in `beamprobe print'.
info(<<"true">>) -> [];
info(<<>>) -> [];
info(Info) -> [" % ", Info].
