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
-define(MAX_CACHED, 10000).
%% The largest heap (words) whose dictionary is copied for a name.
-define(MAX_DICT_WORDS, 262144).

-type opts() :: #{io := pid() | atom(),
                  timestamp => time | ns | none,
                  proc_names => registered | initial_call,
                  print_re => iodata(),
                  rate => {pos_integer(), pos_integer()} | undefined,
                  on_rate => drop | stop,
                  limit => pos_integer() | undefined,
                  time => pos_integer() | infinity,
                  owner => pid(),
                  syntax => erlang | elixir,
                  follows_names => boolean(),
                  returns => boolean(),
                  untimed => [{atom(), atom(), arity() | '_'}],
                  calls => [{atom(), atom(), arity() | '_'}],
                  cut => atomics:atomics_ref()}.

-record(st, {io :: pid() | atom(),
             ts :: time | ns | none,
             offset :: integer(),        % wall ns - trace clock ns
             initial_call = false :: boolean(),
             re = undefined :: undefined | tuple(),  % a compiled regex
             rate = undefined :: undefined | {pos_integer(), pos_integer()},
             on_rate = drop :: drop | stop,
             limit = undefined :: undefined | pos_integer(),
             elixir = false :: boolean(),
             names = #{} :: #{pid() | port() => iodata()},
             %% The names at the start, when register events follow.
             at_start = undefined :: undefined | #{pid() => atom()},
             icalls = #{} :: #{pid() => iodata()},
             stacks = #{} :: #{pid() | port() => stack()},
             returns = true :: boolean(),
             %% Patterns whose calls have no return event, as texts
             %% ('_': any), and what they said of each function met.
             untimed = [] :: [{binary() | '_', binary() | '_', binary() | '_'}],
             calls = [] :: [{binary() | '_', binary() | '_', binary() | '_'}],
             untimed_seen = #{} :: #{binary() => boolean()},
             owner = undefined :: pid() | undefined,
             io_gone = false :: boolean(),
             %% Lines the io server refused (an error reply, such as a
             %% file's {error, enospc}), and whether the owner was told.
             io_lost = 0 :: non_neg_integer(),
             time = undefined :: undefined | pos_integer() | infinity,
             %% The shell's cut (`cut'): [trace clock ns from which events
             %% are the replacing trace's (0: none), events hidden so].
             cut = undefined :: undefined | atomics:atomics_ref(),
             latin1 = false :: boolean(),   % chars past 255 escaped
             lines = 0 :: non_neg_integer()}).

-define(OPTS, [io, timestamp, proc_names, print_re, rate, on_rate, limit,
               time, owner, syntax, follows_names, returns, untimed, calls,
               cut]).

%% @doc `Opts': `io' (the io server; one that takes latin-1 only, such as
%% a file opened without `{encoding, utf8}', gets characters above 255 as
%% `\x{...}'), `timestamp' (`time' = local
%% HH:MM:SS.micro, the default; `ns' = trace clock; `none'), and for the
%% shell API: `proc_names' (`registered', the default: a process is
%% followed by its registered name, as in `beamprobe print';
%% `initial_call': an unnamed process is printed with its initial call,
%% `<0.93.0>(gen_server:init_it/6)', translated by proc_lib for its
%% processes (whose heap is at most 2 MiB: the dictionary is copied for
%% it), as redbug does; the receiver of a send too, and a port by
%% its name, a pid of another node by its node), `print_re' (only
%% event lines matching this regular expression are printed), `rate' and
%% `on_rate' (the session's rate limit, for the line that says it
%% tripped), `limit' (its count limit, likewise), `time' (its time
%% limit in ms, likewise), `owner' (the shell
%% that started the session), `syntax' (`erlang', the default, or
%% `elixir': terms, functions, pids and names as Elixir's `inspect/2'
%% prints them, `Shop.buy(:apple, 2)', `%Shop.Order{id: 1}', `"héllo"',
%% `#PID<0.1.0>': the text of `beamprobe print --syntax elixir',
%% c_src/bp_elixir.h; the Elixir module `Beamprobe' sets it),
%% `follows_names' (set by the session when the printer receives
%% `register' events: a traced process is then named as it was named at
%% the session's start, and after by those events, as `beamprobe print'
%% does; without them its name is looked up when it is first met, and
%% may be one it took after that event), `returns' (`false', set by the
%% session when no call it traces can have a return event: no line is
%% indented, since no call is known to have ended; default `true'),
%% `untimed' (set by the session: the patterns, `{M, F, A}' with `'_'',
%% whose calls have no return event in a session where others have: their
%% calls do not indent what follows; with `calls', every pattern of the
%% session in its order, a function follows its most specific pattern,
%% the last of equal ones, as its match spec did), `cut' (set by the
%% shell API: an `atomics' array of two; while its first element is a
%% trace clock time T > 0, the events of T and after are not printed but
%% counted in its second: a trace typed again replaces this one from T on,
%% and the new trace prints them, beamprobe_shell).
%% Any other argument is `{error, {bad_option, Key, Value}}' (Key `opts'
%% for something that is not such a map).
-spec init(opts() | term()) -> {ok, #st{}} | {error, term()}.
init(#{io := Io} = Opts) ->
    Ts = maps:get(timestamp, Opts, time),
    Names = maps:get(proc_names, Opts, registered),
    Syntax = maps:get(syntax, Opts, erlang),
    Returns = maps:get(returns, Opts, true),
    Untimed = untimed_texts(maps:get(untimed, Opts, [])),
    Calls = untimed_texts(maps:get(calls, Opts, [])),
    Re = case maps:find(print_re, Opts) of
             error -> {ok, undefined};
             {ok, R} ->
                 try re:compile(R, [unicode])
                 catch error:badarg -> {error, bad}
                 end
         end,
    case [K || K <- maps:keys(Opts), not lists:member(K, ?OPTS)] of
        [K | _] -> {error, {unknown_option, K}};
        _ when not (is_pid(Io) orelse is_atom(Io)) ->
            {error, {bad_option, io, Io}};
        _ when Ts =/= time, Ts =/= ns, Ts =/= none ->
            {error, {bad_option, timestamp, Ts}};
        _ when Names =/= registered, Names =/= initial_call ->
            {error, {bad_option, proc_names, Names}};
        _ when Syntax =/= erlang, Syntax =/= elixir ->
            {error, {bad_option, syntax, Syntax}};
        _ when element(1, Re) =:= error ->
            {error, {bad_option, print_re, maps:get(print_re, Opts)}};
        _ when not is_boolean(Returns) ->
            {error, {bad_option, returns, maps:get(returns, Opts)}};
        _ when Untimed =:= error ->
            {error, {bad_option, untimed, maps:get(untimed, Opts)}};
        _ when Calls =:= error ->
            {error, {bad_option, calls, maps:get(calls, Opts)}};
        _ when is_map_key(cut, Opts),
               not is_reference(map_get(cut, Opts)) ->
            {error, {bad_option, cut, maps:get(cut, Opts)}};
        [] ->
            Offset = os:system_time(nanosecond) - beamprobe_nif:clock(),
            {ok, MP} = Re,
            AtStart = case maps:get(follows_names, Opts, false) of
                          true -> maps:from_list(
                                    [{P, N} || N <- registered(),
                                               P <- [whereis(N)],
                                               is_pid(P)]);
                          _ -> undefined
                      end,
            {ok, #st{io = Io, ts = Ts, offset = Offset, at_start = AtStart,
                     initial_call = Names =:= initial_call, re = MP,
                     elixir = Syntax =:= elixir,
                     rate = maps:get(rate, Opts, undefined),
                     on_rate = maps:get(on_rate, Opts, drop),
                     limit = maps:get(limit, Opts, undefined),
                     owner = maps:get(owner, Opts, undefined),
                     time = maps:get(time, Opts, undefined),
                     cut = maps:get(cut, Opts, undefined),
                     latin1 = latin1(Io),
                     returns = Returns, untimed = Untimed, calls = Calls}}
    end;
init(Opts) ->
    {error, {bad_option, opts, Opts}}.

%% @doc Prints a batch with one io request.  An io server that cannot
%% take a character of it (a file opened without `{encoding, utf8}', as
%% redbug's `print_file' hint says to open one) gets the batch again with
%% such characters as `\x{...}' escapes, as `user' prints them: the whole
%% batch was lost before.  An io server that is gone ends the session
%% (`{stop, _}'), as recon's formatter does: its lines would all be lost.
%% Lines an io server refuses (an error reply: a file on a full disk) are
%% counted; the shell that started the session is told at the first, and
%% of the count at the end.  They were lost in silence, the handler's
%% counters saying they were delivered.
-spec handle_events([beamprobe_handler:event()], #st{}) ->
          {ok, #st{}} | {stop, #st{}}.
handle_events(Events0, St) ->
    Events = before_cut(Events0, St#st.cut),
    {Lines, St1} = lists:mapfoldl(fun line/2, St, Events),
    St2 = St1#st{lines = St#st.lines + length(Events)},
    case write(St1#st.io, Lines, St1#st.latin1) of
        ok -> {ok, St2};
        failed -> {ok, refused(Lines, St2)};
        gone -> {stop, St2#st{io_gone = true}}
    end.

%% The events a trace that replaces this one prints (the cut's time and
%% after) are not printed here, but counted: both traces printed the
%% calls made while one replaced the other (a function called 1,000 times
%% a second, retyped 10 times: 6-10 calls printed twice).  What the
%% session itself says (its losses, tampering, process names) stays.
before_cut(Events, undefined) -> Events;
before_cut(Events, Cut) ->
    case atomics:get(Cut, 1) of
        0 -> Events;
        T ->
            {Keep, Hide} =
                lists:partition(
                  fun(#{event := K}) when K =:= dropped; K =:= tampered;
                                          K =:= process -> true;
                     (#{ts := Ts}) -> Ts < T;
                     (_) -> true
                  end, Events),
            _ = Hide =/= [] andalso atomics:add(Cut, 2, length(Hide)),
            Keep
    end.

refused(Lines, #st{io_lost = Lost} = St) ->
    N = length([L || L <- Lines, L =/= []]),
    _ = Lost =:= 0 andalso N > 0 andalso
        tell_owner(St, "% beamprobe: the io server ~p refuses the trace's "
                   "lines (an error reply): they are lost, and counted~n",
                   [St#st.io]),
    St#st{io_lost = Lost + N}.

%% A line to the shell that started the session, when it is not the io
%% server (which is gone or failing).
tell_owner(#st{owner = Owner, io = Io}, Fmt, Args)
  when is_pid(Owner), Owner =/= Io ->
    _ = (catch io:format(Owner, Fmt, Args)),
    true;
tell_owner(_, _, _) -> false.

write(Io, Lines, true) ->
    write_escaped(Io, Lines);
write(Io, Lines, false) ->
    try io:put_chars(Io, Lines) of
        _ -> ok
    catch
        error:terminated -> gone;       % io: the server is down
        error:_ when is_atom(Io) ->
            case whereis(Io) of
                undefined -> gone;
                _ -> write_escaped(Io, Lines)
            end;
        error:_ -> write_escaped(Io, Lines)
    end.

%% (io:put_chars/2 raises badarg for any error reply: an encoding the
%% server cannot take, or its own failure, which escaping does not mend)
write_escaped(Io, Lines) ->
    case unicode:characters_to_list(Lines) of
        Chars when is_list(Chars) ->
            Esc = [if C > 255 -> io_lib:format("\\x{~.16B}", [C]);
                      true -> C
                   end || C <- Chars],
            try io:put_chars(Io, Esc) of
                _ -> ok
            catch error:terminated -> gone;
                  error:_ -> failed
            end;
        _ -> failed
    end.

%% Whether the io server takes only latin1 (a file opened without
%% `{encoding, utf8}', which stops at the first character past 255 it is
%% given): asked once, waiting at most a second (an io server that does
%% not answer in time is taken as Unicode).
latin1(Io) ->
    Pid = if is_atom(Io) -> whereis(Io);
             true -> Io
          end,
    case is_pid(Pid) of
        true ->
            Ref = monitor(process, Pid),
            Pid ! {io_request, self(), Ref, getopts},
            receive
                {io_reply, Ref, Opts} ->
                    demonitor(Ref, [flush]),
                    is_list(Opts) andalso
                        lists:member({encoding, latin1}, Opts);
                {'DOWN', Ref, process, _, _} -> false
            after 1000 ->
                    demonitor(Ref, [flush]),
                    false
            end;
        false -> false
    end.


%% @doc Says why the session ended (and, when the rate limit of a
%% session with `on_rate => stop' tripped, what the limit was).
-spec terminate(term(), #st{}) -> ok.
terminate(Reason, #st{io = Io} = St) ->
    Why = case {Reason, St#st.rate, St#st.limit} of
              {rate, {N, Ms}, _} ->
                  io_lib:format("% beamprobe: rate limit tripped: more than "
                                "~b events in ~b ms, tracing stopped "
                                "(on_rate => stop)~n", [N, Ms]);
              {events, _, N} when is_integer(N) ->
                  io_lib:format("% beamprobe: event limit reached: ~b "
                                "event~ts, tracing stopped~n",
                                [N, [$s || N =/= 1]]);
              {seconds, _, _} when is_integer(St#st.time) ->
                  %% (redbug: "quitting: timeout")
                  io_lib:format("% beamprobe: time limit reached: ~b ms, "
                                "tracing stopped (time => Ms for longer)~n",
                                [St#st.time]);
              _ -> ""
          end,
    _ = St#st.io_lost > 0 andalso
        tell_owner(St, "% beamprobe: ~b lines lost: the io server ~p "
                   "refused them~n", [St#st.io_lost, Io]),
    _ = case St#st.io_gone of
            false ->
                catch io:format(Io, "% beamprobe: session ended (~p)~n~ts",
                                [Reason, Why]);
            true when is_pid(St#st.owner), St#st.owner =/= Io ->
                %% (the shell that started it)
                catch io:format(St#st.owner, "% beamprobe: session ended: "
                                "its io server ~p is gone~n", [Io]);
            true -> ok
        end,
    ok.

%% @doc One event as a line (without the time and process columns when
%% `Prefix' is false).  Exported for tests.
-spec format_event(beamprobe_handler:event(), boolean()) -> iodata().
format_event(E, _Prefix) ->
    describe(E).

line(#{event := dropped, count := N} = E, St) ->
    %% Events were lost: the call stacks are no longer known.
    {io_lib:format("% beamprobe: dropped ~b events (~ts)~n",
                   [N, causes(E)]), St#st{stacks = #{}}};
line(#{event := tampered, what := <<"pattern">>, subject := S0,
       how := <<"reloaded">>, detail := D}, St) ->
    %% Not another tool: the module was loaded again (beamprobe_watch).
    {["% beamprobe: ", fun_subject(S0, St), ": ", D, "\n"], St};
line(#{event := tampered, what := <<"pattern">>, subject := S0,
       how := <<"restored">>, detail := D}, St) ->
    %% beamprobe set again a pattern another tool had removed.
    {["% beamprobe: the pattern on ", fun_subject(S0, St), " is back: ", D,
      "\n"], St};
line(#{event := tampered, what := W, subject := S0, how := H,
       detail := D}, St) ->
    S = case W of
            <<"pattern">> -> fun_subject(S0, St);
            _ -> S0
        end,
    %% Another tool changed what the session installed (beamprobe_watch).
    {["% beamprobe: another tool ", H, " ", case W of
                                                 <<"pattern">> -> "the pattern on ";
                                                 <<"messages">> -> "the message pattern of ";
                                                 <<"system_monitor">> -> "the system monitor of ";
                                                 _ -> "the trace flags of "
                                             end, S, ": ", D, "\n"], St};
line(#{event := monitor, what := W, process := P, duration_ms := Ms,
       port := O, detail := D}, St) ->
    %% A report of the VM's system monitor (beamprobe_monitor).
    {["% beamprobe: monitor ", W, " ", P,
      [[" ", integer_to_list(Ms), " ms"] || Ms > 0],
      [[" on ", O] || O =/= <<>>], [[": ", D] || D =/= <<>>], "\n"], St};
line(#{event := sample, counter := C, value := V, scale := Sc,
       process := P}, St) ->
    %% A counter sample (beamprobe_sampler).
    Val = case Sc > 1 of
              true -> io_lib:format("~.6f", [V / Sc]);
              false -> integer_to_list(V)
          end,
    {["% beamprobe: sample ", C, [[" ", P] || P =/= <<>>], " ", Val, "\n"],
     St};
line(#{event := process}, St) ->
    {[], St}; % annotations: `beamprobe print' shows them only on request
line(#{ts := Ts, pid := Pid} = E, St) ->
    St0 = rename(E, St),
    {Name, St1} = own_name(Pid, St0),
    {Indent, St2} = indent(E, Pid, St1),
    {What, St3} = describe_named(E, syntax(E, St2), St2),
    Line = [ts(Ts, St3), pid_text(Pid, St3), Name, " ", Indent, What, "\n"],
    case St3#st.re of
        undefined -> {Line, St3};
        MP ->
            %% (a line that is not valid Unicode is printed: never lost
            %% to a filter that cannot read it)
            case unicode:characters_to_binary(Line) of
                B when is_binary(B) ->
                    case re:run(B, MP, [{capture, none}]) of
                        match -> {Line, St3};
                        nomatch -> {[], St3}
                    end;
                _ -> {Line, St3}
            end
    end.

%% Why events were lost, cause by cause (the handler sink gives a count
%% per cause; without them, both possible causes are named).
causes(E) ->
    case [io_lib:format("~ts: ~b", [cause_text(C), maps:get(C, E)])
          || C <- [rate, slow_output, ring_full, overwritten, too_big,
                   no_buffer, dumping, io_error],
             maps:get(C, E, 0) > 0] of
        [] -> "rate limit, or output too slow";
        L -> lists:join(", ", L)
    end.

cause_text(rate) -> "rate limit";
cause_text(slow_output) -> "output too slow";
cause_text(ring_full) -> "buffer full";
cause_text(overwritten) -> "overwritten";
cause_text(too_big) -> "event too big";
cause_text(no_buffer) -> "no buffer";
cause_text(dumping) -> "dumping";
cause_text(io_error) -> "write error".

%% The receiver of a send named as the sender is (initial_call mode), as
%% redbug does: a local process by its registered name or its initial
%% call, a port by its name, a process of another node by its node (the
%% event carries only the pid's text, as captured here: asking that node
%% for a name would be a remote call per event).  A registered name, `{Name,
%% Node}' or an alias is what was given to `!', printed as it is.
describe_named(#{event := Ev, to := To, to_text := T0},
               #{to_text := T} = E, #st{initial_call = true} = St)
  when Ev =:= send; Ev =:= send_to_non_existing_process ->
    {Label, St1} = if is_pid(To) -> label(To, St);
                      is_port(To) -> {port_label(To), St};
                      true -> {node_label(T0, St), St}
                   end,
    {describe(E#{to_text := [T, Label]}), St1};
describe_named(_, E, St) ->
    {describe(E), St}.

%% "(name)" after a port: its name's first word, without a directory
%% ("cat" for "/bin/cat -n", "efile"), as redbug prints it.
port_label(P) ->
    case catch erlang:port_info(P, name) of
        {name, N} when is_list(N) ->
            case string:lexemes(N, " ") of
                [W | _] -> ["(", filename:basename(W), ")"];
                [] -> ""
            end;
        _ -> ""
    end.

%% "('node@host')" after a pid of another node: the captured text read
%% back into a pid here (no message, no call to that node); nothing when
%% the node is no longer connected.
node_label(<<"<", _/binary>> = T, St) ->
    try list_to_pid(binary_to_list(T)) of
        P when node(P) =/= node() -> ["(", name_text(node(P), St), ")"];
        _ -> ""
    catch error:badarg -> ""
    end;
node_label(_, _) -> "".

%% "(name)" or "(m:f/N)" after a receiver's pid.
label(P, St) ->
    case name(P, St) of
        {[" ", N], St1} -> {["(", N, ")"], St1};
        {_, St1} -> icall(P, St1)
    end.

%% Names follow register/unregister/exit events (a cached name is only
%% right until then).
rename(#{event := register, pid := P, name := N}, #st{names = Ns} = St) ->
    N1 = case St#st.elixir of
             true -> elixir_text(N, name);
             false -> N
         end,
    St#st{names = Ns#{P => [" ", N1]}};
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

pid_text(P, #st{elixir = true}) when is_pid(P) -> ["#PID", pid_to_list(P)];
pid_text(P, _) when is_pid(P) -> pid_to_list(P);
pid_text(P, _) when is_port(P) -> erlang:port_to_list(P);
pid_text(_, _) -> "-".

%% The event's texts in Elixir syntax when asked (`syntax => elixir'),
%% re-rendered from the captured Erlang-syntax text by the C code that
%% `beamprobe print --syntax elixir' uses (c_src/bp_elixir.h).
syntax(E, #st{elixir = false}) -> E;
syntax(E, #st{}) ->
    maps:map(fun(K, V) when is_binary(V) ->
                     case kind(K) of
                         none -> V;
                         Kind -> elixir_text(V, Kind)
                     end;
                (_, V) -> V
             end, E#{elixir => true}).

%% A `tampered' event's function (`m:f/a', as the watchdog renders it) in
%% Elixir syntax when asked (`N functions' stays as it is).
fun_subject(S, #st{elixir = true}) ->
    case binary:match(S, <<"/">>) of
        nomatch -> S;
        _ -> elixir_text(S, mfa)
    end;
fun_subject(S, _) -> S.

kind(mfa) -> mfa;
kind(args) -> args;
kind(name) -> name;
kind(K) when K =:= result; K =:= message; K =:= reason; K =:= to_text;
             K =:= other_text; K =:= tag; K =:= value; K =:= info -> term;
kind(_) -> none.

elixir_text(Text, Kind) ->
    try beamprobe_nif:elixir_text(Text, Kind)
    catch error:_ -> Text   % too long, or no NIF: as captured
    end.

%% The name of a traced process (the event's own): when register events
%% follow (at_start), its name at the session's start, not a name it
%% registered since (the events printed so far may precede it).
own_name(P, #st{at_start = AtStart, names = N} = St)
  when is_map(AtStart), is_pid(P), not is_map_key(P, N) ->
    Name0 = case AtStart of
                #{P := R} -> [" ", name_text(R, St)];
                _ -> ""
            end,
    name(P, St#st{names = (bounded(N))#{P => Name0}});
own_name(P, St) -> name(P, St).

%% Registered names, looked up once per process (on this node); in
%% initial_call mode an unnamed process gets its initial call instead.
name(P, #st{names = N} = St) when is_pid(P) ->
    {Name, St1} = case N of
                      #{P := Name0} -> {Name0, St};
                      _ ->
                          Name0 = registered(P, St),
                          {Name0, St#st{names = (bounded(N))#{P => Name0}}}
                  end,
    case {Name, St1#st.initial_call} of
        {"", true} -> icall(P, St1);
        _ -> {Name, St1}
    end;
name(_, St) -> {"", St}.

registered(P, St) when node(P) =:= node() ->
    case catch erlang:process_info(P, registered_name) of
        {registered_name, R} -> [" ", name_text(R, St)];
        _ -> ""
    end;
registered(_, _) -> "".

name_text(R, #st{elixir = true}) ->
    elixir_text(iolist_to_binary(io_lib:write_atom(R)), name);
name_text(R, _) -> io_lib:write_atom(R).

%% "(m:f/N)": the initial call, as proc_lib translates it for its
%% processes (a gen_server shows its callback module); looked up once.
icall(P, #st{icalls = C} = St) ->
    case C of
        #{P := T} -> {T, St};
        _ ->
            T = case initial_call(P) of
                    {M, F, A} when is_atom(M), is_atom(F), is_integer(A) ->
                        Text = io_lib:format("~tw:~tw/~b", [M, F, A]),
                        ["(", case St#st.elixir of
                                  true -> elixir_text(
                                            unicode:characters_to_binary(Text),
                                            mfa);
                                  false -> Text
                              end, ")"];
                    _ -> ""
                end,
            {T, St#st{icalls = (bounded(C))#{P => T}}}
    end.

%% The name caches and the call stacks hold at most ?MAX_CACHED processes
%% (a long session over many short-lived processes must not grow the
%% printer forever): when full they start again empty; names are looked up
%% again, and stacks start again from depth 0.
bounded(M) when map_size(M) >= ?MAX_CACHED -> #{};
bounded(M) -> M.

initial_call(P) when node(P) =:= node() ->
    case catch erlang:process_info(P, initial_call) of
        {initial_call, {proc_lib, init_p, 5} = Init} -> proc_lib_call(P, Init);
        {initial_call, MFA} -> MFA;
        _ -> undefined
    end;
initial_call(_) -> undefined.

%% A proc_lib process's own initial call is in its dictionary, which OTP
%% 25 gives only whole (proc_lib:translate_initial_call/1 copies it with
%% process_info(P, dictionary)): a traced process holding 125 MB there
%% made the printer copy all of it to print one line (its heap went to
%% 271 MB).  It is read only from a process whose heap, where the
%% dictionary lives, is at most ?MAX_DICT_WORDS; a bigger one is shown by
%% its VM initial call, proc_lib:init_p/5.
proc_lib_call(P, Init) ->
    case catch erlang:process_info(P, total_heap_size) of
        {total_heap_size, W} when W =< ?MAX_DICT_WORDS ->
            case catch proc_lib:translate_initial_call(P) of
                {_, _, _} = MFA -> MFA;
                _ -> Init
            end;
        _ -> Init
    end.

%% Per-process call stack, for indentation like `beamprobe print': a
%% call is indented by the depth before it, any other event by the depth
%% after it.
indent(_E, _P, #st{returns = false} = St) ->
    {[], St};
indent(#{event := call, mfa := F} = E, P, #st{untimed = [_ | _]} = St) ->
    {Untimed, St1} = untimed(F, St),
    case Untimed of
        true -> {pad(stack_depth(P, St1)), St1};
        false -> indent_stack(E, P, St1)
    end;
indent(E, P, St) ->
    indent_stack(E, P, St).

indent_stack(#{event := Ev} = E, P, #st{stacks = D} = St) ->
    S0 = maps:get(P, D, #stack{}),
    S = apply_stack(Ev, E, S0),
    Depth = case Ev of
                call -> S0#stack.depth + S0#stack.lost;
                _ -> S#stack.depth + S#stack.lost
            end,
    D1 = case D of
             #{P := _} -> D;
             _ -> bounded(D)
         end,
    {pad(Depth), St#st{stacks = D1#{P => S}}}.

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

stack_depth(P, #st{stacks = D}) ->
    case D of
        #{P := #stack{depth = N, lost = L}} -> N + L;
        _ -> 0
    end.

%% Whether the function text F ("m:f/1", as the tracer renders it) is
%% one the session traced without returns (a call of it is never known
%% to end, so it pushes no frame, as in `beamprobe print').
untimed(F, #st{untimed = U, calls = Calls, untimed_seen = Seen} = St) ->
    case Seen of
        #{F := V} -> {V, St};
        _ ->
            V = case split_mfa(F) of
                    {M, Fn, A} ->
                        Names = fun({PM, PF, PA}) ->
                                        part(PM, M) andalso part(PF, Fn)
                                            andalso part(PA, A)
                                end,
                        case most_specific(lists:filter(Names, Calls)) of
                            none -> lists:any(Names, U);
                            P -> lists:member(P, U)
                        end;
                    error -> false
                end,
            {V, St#st{untimed_seen = (bounded(Seen))#{F => V}}}
    end.

%% The pattern with the fewest '_', the last of equal ones.
most_specific([]) -> none;
most_specific(Ps) ->
    Wild = fun(P) -> length([x || '_' <- tuple_to_list(P)]) end,
    lists:foldl(fun(P, Best) ->
                        case Wild(P) =< Wild(Best) of
                            true -> P;
                            false -> Best
                        end
                end, hd(Ps), tl(Ps)).

part('_', _) -> true;
part(P, T) -> P =:= T.

untimed_texts(L) when is_list(L) ->
    try [{text(M), text(F), case A of
                                '_' -> '_';
                                _ when is_integer(A), A >= 0, A =< 255 ->
                                    integer_to_binary(A)
                            end} || {M, F, A} <- L,
                                    is_atom(M), is_atom(F)] of
        T when length(T) =:= length(L) -> T;
        _ -> error
    catch error:_ -> error
    end;
untimed_texts(_) -> error.

text('_') -> '_';
text(A) -> beamprobe_nif:render(A, #{}).

%% "M:F/A" split at the first ':' and the last '/' outside quotes.
split_mfa(B) -> split_mfa(B, 0, false, none, none).

split_mfa(B, I, _Q, C, S) when I >= byte_size(B) ->
    case {C, S} of
        {none, _} -> error;
        {_, none} -> error;
        _ -> {binary:part(B, 0, C), binary:part(B, C + 1, S - C - 1),
              binary:part(B, S + 1, byte_size(B) - S - 1)}
    end;
split_mfa(B, I, true, C, S) ->
    case binary:at(B, I) of
        $\\ -> split_mfa(B, I + 2, true, C, S);
        $' -> split_mfa(B, I + 1, false, C, S);
        _ -> split_mfa(B, I + 1, true, C, S)
    end;
split_mfa(B, I, false, C, S) ->
    case binary:at(B, I) of
        $' -> split_mfa(B, I + 1, true, C, S);
        $: when C =:= none -> split_mfa(B, I + 1, false, I, S);
        $/ when C =/= none -> split_mfa(B, I + 1, false, C, I);
        _ -> split_mfa(B, I + 1, false, C, S)
    end.

%% Capped at 256 levels, as in `beamprobe print'.
pad(Depth) -> lists:duplicate(min(Depth, 256), "  ").

describe(#{event := call, mfa := MFA, args := Args, info := Info}) ->
    [call_text(MFA, Args), info(Info)];
describe(#{event := return_from, mfa := MFA, result := R}) ->
    ["returned from ", MFA, " -> ", R];
describe(#{event := exception_from, mfa := MFA, class := C, reason := R,
           elixir := true}) ->
    %% as Elixir's Exception.format_banner/2
    ["exception from ", MFA, ": ** (", C, ") ", R];
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
describe(#{event := annotation, tag := T, value := V})
  when T =:= <<"undefined">>; T =:= <<":undefined">> ->
    %% No tag given (annotate/1); `:undefined' in Elixir syntax.
    ["annotation ", V];
describe(#{event := annotation, tag := T, value := V}) ->
    ["annotation ", T, ": ", V];
describe(#{event := Ev} = E) ->
    Fields = [[" ", atom_to_list(K), "=", val(V)]
              || {K, V} <- lists:sort(maps:to_list(E)),
                 not lists:member(K, [event, ts, pid, elixir])],
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
