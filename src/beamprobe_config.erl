%%% @doc Validation of a session spec: turns the map given to
%%% {@link beamprobe:start/1} into a complete, checked configuration, or
%%% returns `{error, Reason}' naming the first thing wrong.
%%%
%%% Checking has no side effect on tracing: it may load a module named in
%%% `calls' (to know whether it exists) but installs nothing.
-module(beamprobe_config).

-export([validate/1, defaults/0, format_error/1]).
%% For beamprobe_config_output (the `output' option).
-export([resolve_procs/4, bad/2, proper/1, max_memory/0]).

-export_type([config/0]).

-type config() :: #{procs := all | new | existing | [pid()],
                    exclude := [pid()],
                    calls := [mfa_pat() | {mfa_pat(), true | list()}],
                    return := boolean(),
                    exceptions := boolean(),
                    return_to := boolean(),
                    events := [event()],
                    args := none | arity | full,
                    capture := #{depth := pos_integer(),
                                 list := pos_integer(),
                                 binary := non_neg_integer(),
                                 bytes := pos_integer()},
                    buffer := pos_integer(),
                    overflow := drop_newest | drop_oldest | stop,
                    limits := #{events := pos_integer() | infinity,
                                bytes := pos_integer() | infinity,
                                seconds := number() | infinity,
                                rate := {pos_integer(), pos_integer()}
                                      | infinity},
                    on_rate := drop | stop,
                    meta := boolean(),
                    messages := [{send | 'receive', true | list()}],
                    tag := term(),
                    sinks := [sink()],
                    dir := file:filename() | undefined,
                    force := boolean(),
                    on_tamper := report | reinstall,
                    monitor => beamprobe_monitor:thresholds(),
                    sample => beamprobe_sampler:config()}.
-type sink() :: #{type := file | handler | lttng | usdt | tcp,
                  module => module(), arg => term(),
                  addr => inet:ip_address(), port => inet:port_number(),
                  queue => pos_integer(),
                  kinds := non_neg_integer(), procs := all | [pid()],
                  batch := pos_integer(), credits := pos_integer(),
                  overflow := drop | stop}.
-export_type([sink/0]).
-type mfa_pat() :: {module() | '_', atom() | '_', arity() | '_'}.
-type event() :: call | send | 'receive' | procs | running | gc | ports
               | annotation.

-define(KEYS, [procs, exclude, calls, return, exceptions, return_to, events, output,
               args, capture, buffer, overflow, limits, force, on_rate,
               meta, messages, tag, on_tamper, monitor, sample]).
%% `annotation': the session records beamprobe:annotate/1,2 of its
%% processes (every session does); asked alone, it is a session of
%% annotations only, that sets no trace flag (docs/usdt.md).
-define(EVENTS, [call, send, 'receive', procs, running, gc, ports,
                 annotation]).
-define(MIN_BUFFER, 16384).
-define(MAX_BUFFER, 1 bsl 32).
-define(MAX_U64, 16#FFFFFFFFFFFFFFFF).
%% erlang:send_after/3 takes at most 2^32 - 1 ms: 4294967.295 s (the shell's
%% time => 4294967295 ms; its timer is round(Seconds * 1000) ms).
-define(MAX_SECONDS, 4294967.295).
%% The NIF keeps a rate window in ns in 64 bits.
-define(MAX_RATE_MS, 1 bsl 32).
%% Depth of a caller's value printed by format_error/1.
-define(SHOW, 20).

%% @doc The defaults used for every key a spec leaves out.
-spec defaults() -> map().
defaults() ->
    #{procs => all,
      exclude => [],
      calls => [],
      %% Off unless asked: return/exception tracing makes a traced
      %% tail-recursive loop (every gen_server) grow its stack.
      return => false,
      exceptions => false,
      return_to => false,
      events => [],
      args => full,
      capture => #{depth => 4, list => 16, binary => 64, bytes => 512},
      buffer => 8 * 1024 * 1024,
      overflow => drop_newest,
      limits => #{events => infinity, bytes => 1024 * 1024 * 1024,
                  seconds => 60, rate => infinity},
      on_rate => drop,
      meta => false,
      messages => [],
      tag => undefined,
      force => false,
      %% What the watchdog does when another tool removes or replaces
      %% the session's patterns or flags (beamprobe_watch): report it;
      %% `reinstall' also sets them again (it fights the other tool).
      on_tamper => report}.

%% @doc Checks a spec; returns the full configuration or the first error.
-spec validate(term()) -> {ok, config()} | {error, term()}.
validate(Spec) when is_map(Spec) ->
    case [K || K <- maps:keys(Spec), not lists:member(K, ?KEYS)] of
        [K | _] -> {error, {unknown_option, K}};
        [] -> check(maps:merge(defaults(), Spec))
    end;
validate(Spec) ->
    {error, {bad_spec, Spec, "a map is expected"}}.

check(S) ->
    Steps = [fun force/1, fun on_tamper/1, fun procs/1, fun exclude/1, fun calls/1, fun bools/1,
             fun events/1, fun args/1, fun capture/1, fun buffer/1,
             fun overflow/1, fun limits/1, fun on_rate/1, fun beamprobe_config_output:output/1,
             fun meta/1, fun messages/1, fun actions/1, fun compiles/1, fun vm/1,
             fun nothing/1],
    run(Steps, S).

%% Match-spec actions that change trace flags -- of the calling process
%% (`silent', `trace') or of others (`enable_trace', `disable_trace') --
%% are refused unless force => true.  They take flags from other tools
%% and outlive the session (nothing knows to undo them), and on OTP 25.2
%% a process left `silent' with no tracer by such a clause takes the
%% node down at the next send trace set on all processes (a segfault in
%% the VM, with no beamprobe involved once the flag is set).
%% An action is found anywhere in a body, not only at its top: the VM
%% runs one nested in another's argument (`{message, {silent, true}}'
%% made the process silent for every session and tool).
%%
%% A flag action in a `send' message pattern is refused even with
%% force => true: on OTP 25.2 one that takes the send flag from the
%% sending process ({disable_trace, send}, {disable_trace, {self}, all},
%% {trace, [send], []}) crashes the node at once (a segfault, the same
%% with plain erlang:trace_pattern(send, ...); found by
%% beamprobe_ms_fuzz_SUITE).  ('receive' patterns take no flag action:
%% the VM refuses them.)
%%
%% A seq_trace label that the match spec builds (a tuple, a bignum, ...:
%% anything but an atom, a small integer or an argument, `$N') is refused
%% even with force => true: on OTP 25 `set_seq_token' keeps a pointer into
%% the match spec's scratch heap, and the node dies at the process's next
%% send or GC ("eheap_alloc: Cannot allocate 17577028086376 bytes"; the
%% same with no beamprobe involved).
actions(#{calls := Calls, messages := Msgs} = S) ->
    MSs = [MS || {{_, _, _}, MS} <- Calls, is_list(MS)] ++
          [MS || {_, MS} <- Msgs, is_list(MS)],
    Bodies = [Body || MS <- MSs, {_, _, Body} <- MS, is_list(Body)],
    Unsafe = [A || Body <- Bodies, E <- Body, A <- unsafe_labels(E)],
    Flags = [A || Body <- Bodies, E <- Body, A <- flag_actions(E)],
    SendFlags = [A || {send, MS} <- Msgs, is_list(MS), {_, _, Body} <- MS,
                      is_list(Body), E <- Body, A <- flag_actions(E)],
    case {Unsafe, Flags, S} of
        {[A | _], _, _} -> {error, {unsafe_label, A}};
        {[], _, _} when SendFlags =/= [] ->
            {error, {unsafe_send_action, hd(SendFlags)}};
        {[], _, #{force := true}} -> {ok, S};
        {[], [], _} -> {ok, S};
        {[], [A | _], _} -> {error, {flag_action, A}}
    end.

%% Every match spec must compile on its own (erlang:match_spec_test/3):
%% the VM sees one session's match spec whole only when no other session
%% traces the function; combined with another's, a clause that can never
%% match (a head of another arity) is left out, and a match spec the VM
%% refuses was accepted -- then set alone when the other session stopped,
%% refused by the VM, and the combined one was left installed for good.
compiles(#{calls := Calls, messages := Msgs} = S) ->
    MSs = [{MFA, A, MS} || {{_, _, A} = MFA, MS} <- Calls, is_list(MS)] ++
          [{K, 0, MS} || {K, MS} <- Msgs, is_list(MS)],
    Bad = [{What, [E || {error, E} <- Errs]}
           || {What, A, MS} <- MSs,
              {error, Errs} <- [ms_test(A, MS)]],
    case Bad of
        [] -> {ok, S};
        [{What, Errs} | _] -> {error, {bad_match_spec, What, Errs}}
    end.

ms_test(A, MS) ->
    Args = [x || is_integer(A), _ <- lists:seq(1, A)],
    try erlang:match_spec_test(Args, MS, trace)
    catch error:_ -> {error, [{error, "not a match spec"}]}
    end.

%% The `set_seq_token' actions in body expression E that set a label the
%% match spec builds (see actions/1).
unsafe_labels({const, _}) -> [];
unsafe_labels({set_seq_token, label, V} = A) ->
    [A || not safe_label(V)] ++ unsafe_labels(V);
unsafe_labels({T}) when is_tuple(T) ->
    lists:append([unsafe_labels(X) || X <- tuple_to_list(T)]);
unsafe_labels(T) when is_tuple(T), tuple_size(T) >= 1 ->
    lists:append([unsafe_labels(X) || X <- tl(tuple_to_list(T))]);
unsafe_labels(L) when is_list(L) ->
    lists:append([unsafe_labels(X) || X <- improper_to_list(L)]);
unsafe_labels(_) -> [].

safe_label(V) when is_atom(V) ->
    case atom_to_list(V) of
        "$_" -> false;
        "$$" -> false;
        _ -> true          % an atom, or an argument's variable ('$1')
    end;
safe_label({const, V}) -> safe_label_const(V);
safe_label(V) -> safe_label_const(V).

safe_label_const(V) when is_atom(V) -> true;
safe_label_const(V) when is_integer(V) ->
    V >= -(1 bsl 59) andalso V < 1 bsl 59;    % a small integer
safe_label_const(_) -> false.

-define(FLAG_ACTIONS, [silent, trace, enable_trace, disable_trace]).

%% The flag actions in body expression E, outermost first: E itself
%% (a tuple naming one is a call of it, as is the bare atom at the top),
%% and those in its arguments, a tuple literal's elements ({{...}}) and
%% a list's; nothing inside {const, _}.
flag_actions(A) when is_atom(A) ->
    [A || lists:member(A, ?FLAG_ACTIONS)];
flag_actions(E) -> nested_flag_actions(E).

nested_flag_actions({const, _}) -> [];
nested_flag_actions({T}) when is_tuple(T) ->
    lists:append([nested_flag_actions(X) || X <- tuple_to_list(T)]);
nested_flag_actions(T) when is_tuple(T), tuple_size(T) >= 1 ->
    [T || lists:member(element(1, T), ?FLAG_ACTIONS)] ++
        lists:append([nested_flag_actions(X)
                      || X <- tl(tuple_to_list(T))]);
nested_flag_actions(L) when is_list(L) ->
    lists:append([nested_flag_actions(X) || X <- improper_to_list(L)]);
nested_flag_actions(_) -> [].

improper_to_list([H | T]) -> [H | improper_to_list(T)];
improper_to_list([]) -> [];
improper_to_list(X) -> [X].

run([], S) -> {ok, maps:remove(output, S)};
run([F | Fs], S) ->
    case F(S) of
        {ok, S1} -> run(Fs, S1);
        {error, _} = E -> E
    end.

force(#{force := F} = S) when is_boolean(F) -> {ok, S};
force(#{force := F}) -> bad(force, F).

on_tamper(#{on_tamper := T} = S) when T =:= report; T =:= reinstall ->
    {ok, S};
on_tamper(#{on_tamper := T}) -> bad(on_tamper, T).

procs(#{procs := P} = S) when P =:= all; P =:= new; P =:= existing ->
    {ok, S};
procs(#{procs := L} = S) when is_list(L), L =/= [] ->
    case resolve_procs(procs, L, L, []) of
        {ok, Pids} -> {ok, S#{procs := lists:usort(Pids)}};
        {error, _} = E -> E
    end;
procs(#{procs := P}) -> bad(procs, P).

%% Processes the session does not record, whatever `procs' says: pids or
%% registered names of live local processes, resolved now.
exclude(#{exclude := []} = S) -> {ok, S};
exclude(#{exclude := L} = S) when is_list(L) ->
    case resolve_procs(exclude, L, L, []) of
        {ok, Pids} -> {ok, S#{exclude := lists:usort(Pids)}};
        {error, _} = E -> E
    end;
exclude(#{exclude := X}) -> bad(exclude, X).

%% Key names the option in errors; All is the whole list (reported when it
%% is improper).
%% @private Pids and registered names of option Key (its whole value All)
%% to local pids, or the option's error.
-spec resolve_procs(term(), term(), term(), [pid()]) ->
          {ok, [pid()]} | {error, term()}.
resolve_procs(_Key, _All, [], Acc) -> {ok, Acc};
resolve_procs(Key, All, [P | T], Acc) when is_pid(P), node(P) =:= node() ->
    case is_process_alive(P) of
        true -> resolve_procs(Key, All, T, [P | Acc]);
        false -> {error, {dead_process, P}}
    end;
resolve_procs(_Key, _All, [P | _], _) when is_pid(P) ->
    {error, {remote_process, P}};
resolve_procs(Key, All, [N | T], Acc) when is_atom(N) ->
    case whereis(N) of
        undefined -> {error, {no_such_process, N}};
        Pid when is_pid(Pid) -> resolve_procs(Key, All, T, [Pid | Acc]);
        Port -> {error, {not_a_process, N, Port}}
    end;
resolve_procs(Key, _All, [P | _], _) -> bad(Key, P);
resolve_procs(Key, All, _Tail, _) -> bad(Key, All).

calls(#{calls := L} = S) ->
    case proper(L) of
        true -> calls(L, S);
        false -> bad(calls, L)
    end.

calls(L, S) ->
    MFAs = [case C of {{_, _, _} = MFA, _MS} -> MFA; _ -> C end || C <- L],
    BadMS = [C || {{_, _, _}, MS} = C <- L,
                  not (MS =:= true orelse proper(MS))],
    case BadMS of
        [C | _] -> bad(calls, C);
        [] ->
            case check_mfas(MFAs, maps:get(force, S)) of
                ok -> {ok, S#{calls := lists:usort(L)}};
                {error, _} = E -> E
            end
    end.

check_mfas([], _) -> ok;
check_mfas([{'_', _, _} = MFA | _], false) ->
    {error, {force_required, MFA}};
check_mfas([{M, F, A} = MFA | _], _)
  when (F =:= '_' andalso A =/= '_') orelse
       (M =:= '_' andalso {F, A} =/= {'_', '_'}) ->
    %% erlang:trace_pattern/3 takes '_' only as {M,F,'_'}, {M,'_','_'}
    %% or {'_','_','_'}.
    {error, {bad_option, calls, MFA}};
check_mfas([{M, F, A} = MFA | T], Force)
  when is_atom(M), is_atom(F),
       (A =:= '_' orelse (is_integer(A) andalso A >= 0 andalso A =< 255)) ->
    case M =:= '_' orelse code:ensure_loaded(M) of
        true -> check_mfas(T, Force);
        {module, M} when F =:= '_' -> check_mfas(T, Force);
        {module, M} ->
            %% Not M:module_info/1: that call is a traced call of M in
            %% the caller's process (an earlier trace of M shows it).
            Exported = [{N, Ar} || {N, Ar} <- erlang:get_module_info(
                                                 M, functions),
                                   N =:= F, A =:= '_' orelse Ar =:= A],
            case Exported of
                [] -> {error, {no_such_function, MFA}};
                _ -> check_mfas(T, Force)
            end;
        {error, _} -> {error, {no_such_module, M}}
    end;
check_mfas([X | _], _) -> bad(calls, X).

bools(S) ->
    case [K || K <- [return, exceptions, return_to, meta],
               not is_boolean(maps:get(K, S))] of
        [] -> {ok, S};
        [K | _] -> bad(K, maps:get(K, S))
    end.

events(#{events := L} = S) ->
    case proper(L) andalso [E || E <- L, not lists:member(E, ?EVENTS)] of
        false -> bad(events, L);
        [] -> {ok, S#{events := lists:usort(L)}};
        [E | _] -> bad(events, E)
    end.

args(#{args := A} = S) when A =:= none; A =:= arity; A =:= full -> {ok, S};
args(#{args := A}) -> bad(args, A).

capture(#{capture := C} = S) when is_map(C) ->
    D = maps:get(capture, defaults()),
    Lims = #{depth => {1, 64}, list => {1, 4096}, binary => {0, 65536},
             bytes => {16, 65536}},
    case [K || K <- maps:keys(C), not maps:is_key(K, D)] of
        [K | _] -> {error, {unknown_option, {capture, K}}};
        [] ->
            M = maps:merge(D, C),
            Bad = [{K, V} || {K, V} <- maps:to_list(M),
                             {Lo, Hi} <- [maps:get(K, Lims)],
                             not (is_integer(V) andalso V >= Lo
                                  andalso V =< Hi)],
            case Bad of
                [] -> {ok, S#{capture := M}};
                [{K, V} | _] -> bad({capture, K}, V)
            end
    end;
capture(#{capture := C}) -> bad(capture, C).

buffer(#{buffer := B} = S)
  when is_integer(B), B >= ?MIN_BUFFER, B =< ?MAX_BUFFER ->
    {ok, S};
buffer(#{buffer := B}) -> bad(buffer, B).

overflow(#{overflow := O} = S)
  when O =:= drop_newest; O =:= drop_oldest; O =:= stop ->
    {ok, S};
overflow(#{overflow := O}) -> bad(overflow, O).

limits(#{limits := L} = S) when is_map(L) ->
    D = maps:get(limits, defaults()),
    case [K || K <- maps:keys(L), not maps:is_key(K, D)] of
        [K | _] -> {error, {unknown_option, {limits, K}}};
        [] ->
            M = maps:merge(D, L),
            Bad = [{K, V} || {K, V} <- maps:to_list(M),
                             not (V =:= infinity orelse
                                  (K =:= seconds andalso is_number(V)
                                   andalso V > 0 andalso
                                   V =< ?MAX_SECONDS) orelse
                                  (K =:= rate andalso rate_ok(V)) orelse
                                  (K =/= rate andalso K =/= seconds andalso
                                   is_integer(V) andalso V > 0 andalso
                                   V =< ?MAX_U64))],
            case Bad of
                [] -> {ok, S#{limits := M}};
                [{K, V} | _] -> bad({limits, K}, V)
            end
    end;
limits(#{limits := L}) -> bad(limits, L).

rate_ok({N, Ms}) -> is_integer(N) andalso N > 0 andalso N =< ?MAX_U64
                        andalso is_integer(Ms) andalso Ms > 0
                        andalso Ms =< ?MAX_RATE_MS;
rate_ok(_) -> false.

%% on_rate says what a rate limit does when it trips: `stop' with no rate
%% limit could never trip, and the caller would believe the trace bounded.
on_rate(#{on_rate := stop, limits := #{rate := infinity}}) ->
    {error, {bad_option, on_rate,
             "on_rate => stop needs a rate limit, limits => #{rate => "
             "{N, Ms}}: without one it never trips"}};
on_rate(#{on_rate := R} = S) when R =:= drop; R =:= stop -> {ok, S};
on_rate(#{on_rate := R}) -> bad(on_rate, R).

%% Meta tracing (per-pattern tracer, every process): calls only.
meta(#{meta := false} = S) -> {ok, S};
meta(#{meta := true, procs := all, events := [], return_to := false} = S) ->
    {ok, S};
meta(#{meta := true}) ->
    {error, {bad_option, meta,
             "meta => true traces calls of every process: it needs "
             "procs => all, no events and no return_to"}}.

%% Message trace patterns (erlang:trace_pattern(send | 'receive', MS, [])):
%% they need the matching event flag.
messages(#{messages := L} = S) ->
    case proper(L) of
        true -> messages(L, S);
        false -> bad(messages, L)
    end.

messages(L, #{events := Ev} = S) ->
    Bad = [X || X <- L, not is_message_pattern(X)],
    Missing = [K || {K, _} <- L, not lists:member(K, Ev)],
    case {Bad, Missing} of
        %% A pattern that takes every message as it is (the shell's
        %% "'receive'" is [{['_', '_', '_'], [], []}]) is `true', the
        %% VM's own: it does not conflict with a session recording the
        %% same messages without a pattern, nor filter another tool's.
        {[], []} -> {ok, S#{messages := [case takes_all(X) of
                                             true -> {K, true};
                                             false -> X
                                         end || {K, _} = X <- L]}};
        {[X | _], _} -> bad(messages, X);
        {[], [K | _]} ->
            {error, {bad_option, messages,
                     lists:flatten(io_lib:format(
                                     "a ~p pattern needs events => [~p]",
                                     [K, K]))}}
    end.

takes_all({_, [{'_', [], []}]}) -> true;
takes_all({_, [{H, [], []}]}) when is_list(H) ->
    lists:all(fun(X) -> X =:= '_' end, H);
takes_all(_) -> false.

is_message_pattern({K, MS}) when K =:= send; K =:= 'receive' ->
    MS =:= true orelse proper(MS);
is_message_pattern(_) -> false.

%% monitor => #{...} (beamprobe_monitor) and sample => #{...}
%% (beamprobe_sampler): optional, checked by their modules.
vm(S) ->
    Checks = [{monitor, fun beamprobe_monitor:check/1},
              {sample, fun beamprobe_sampler:check/1}],
    lists:foldl(fun({K, F}, {ok, Acc}) ->
                        case Acc of
                            #{K := V} ->
                                case F(V) of
                                    {ok, V1} -> {ok, Acc#{K := V1}};
                                    {error, _} = E -> E
                                end;
                            _ -> {ok, Acc}
                        end;
                   (_, E) -> E
                end, {ok, S}, Checks).

%% Calls, events, VM monitor reports or counter samples: a session that
%% writes nothing is a mistake.  A session with only `monitor' and/or
%% `sample' traces no process (it only writes the VM's reports and
%% samples: "just watch long GCs"); one with only `events =>
%% [annotation]' sets no flag either: it records the annotations
%% (beamprobe:annotate/1,2) its processes make.
nothing(#{calls := [], events := []} = S) when is_map_key(monitor, S);
                                              is_map_key(sample, S) ->
    {ok, S};
nothing(#{calls := [], events := []}) ->
    {error, {nothing_to_trace,
             "give calls => [{M, F, A}], events (events => [annotation] "
             "for annotations only), monitor or sample"}};
nothing(S) -> {ok, S}.

%% @private The error for a bad value of option Key.
-spec bad(term(), term()) -> {error, {bad_option, term(), term()}}.
bad(Key, Value) -> {error, {bad_option, Key, Value}}.

%% @private true for a proper list (an improper one would crash the list
%% functions).
-spec proper(term()) -> boolean().
proper(L) when is_list(L) ->
    try length(L) >= 0
    catch error:badarg -> false
    end;
proper(_) -> false.

%% @doc A sentence describing an error returned by {@link validate/1} or
%% {@link beamprobe:start/1}.
-spec format_error(term()) -> string().
%% Values given by the caller are printed with ~P (at most ?SHOW levels and
%% elements): a bad value may be a huge or deep term.
format_error({unknown_option, K}) ->
    f("unknown option ~tP", [K, ?SHOW]);
format_error({bad_option, calls, V}) ->
    f("bad value for option calls: ~tP: calls is a list of {M, F, A} (F "
      "and A may be '_', as {M, F, '_'} or {M, '_', '_'}; M only with "
      "force => true) or {{M, F, A}, MatchSpec | true}; for pattern "
      "strings use beamprobe:calls/2,3", [V, ?SHOW]);
format_error({bad_option, K, V}) ->
    f("bad value for option ~tP: ~tP", [K, ?SHOW, V, ?SHOW]);
format_error({too_many, {output, procs}, N}) ->
    f("a sink's procs lists at most ~b processes (the session's own "
      "procs, which that sink then follows, takes any number)", [N]);
format_error({dead_process, P}) -> f("process ~p is not alive", [P]);
format_error({not_loopback, A}) ->
    f("tcp address ~tP is not a loopback address; add remote => true to "
      "send the trace over the network", [A, ?SHOW]);
format_error({remote_process, P}) ->
    f("process ~p is on another node", [P]);
format_error({untraceable, [_ | _] = U}) ->
    Sens = [P || {P, sensitive} <- U],
    Taken = [P || {P, already_traced} <- U],
    f("no listed process can be traced: ~ts",
      [lists:join("; ",
                  [f("~tP ~s sensitive (process_flag/2: the VM makes no "
                     "trace event of such a process, for any tracer; "
                     "beamprobe's own processes, a session's handlers "
                     "among them, are sensitive)",
                     [Sens, ?SHOW, is_are(Sens)]) || Sens =/= []] ++
                  [f("~tP ~s traced by another tracer; add force => "
                     "true to take ~s over",
                     [Taken, ?SHOW, is_are(Taken),
                      case Taken of [_] -> "it"; _ -> "them" end])
                   || Taken =/= []])]);
format_error({no_such_process, N}) ->
    f("no process is registered as ~tp", [N]);
format_error({not_a_process, N, Port}) ->
    f("~tp is registered to ~p, not a process", [N, Port]);
format_error({no_such_module, M}) -> f("module ~tp cannot be loaded", [M]);
format_error({no_such_function, {M, F, A}}) ->
    f("~tp:~tp/~p does not exist", [M, F, A]);
format_error({no_match, MFA}) ->
    f("pattern ~tP matches no function", [MFA, ?SHOW]);
format_error({unsafe_label, A}) ->
    f("match spec action ~tP sets a seq_trace label the match spec builds: "
      "OTP 25 keeps a pointer to it that dies with the match spec's run, "
      "and the node crashes at the process's next send or garbage "
      "collection; use an atom, a small integer or an argument ('$1')",
      [A, ?SHOW]);
format_error({unsafe_send_action, A}) ->
    f("send message pattern action ~tP changes trace flags: on OTP 25 one "
      "that takes the send flag from the sending process crashes the node "
      "at once (a segfault); refused even with force => true: leave it out",
      [A, ?SHOW]);
format_error({flag_action, A}) ->
    f("match spec action ~tP changes trace flags: it takes them from other "
      "tools, outlives the session (nothing undoes it), and `silent' can "
      "crash an OTP 25 node at the next send trace; add force => true if "
      "you mean it", [A, ?SHOW]);
format_error({force_required, X}) ->
    f("~tP would trace every module; add force => true if you mean it",
      [X, ?SHOW]);
format_error({output_exists, D}) ->
    f("output directory ~ts exists and is not empty", [short(D)]);
format_error({unwritable, D, R}) when R =:= symlink; R =:= not_owner;
                                     R =:= group_or_world_writable ->
    f("cannot write to ~ts: ~s", [short(D), unsafe_dir(R)]);
format_error({unwritable, D, {job, R}}) ->
    f("cannot create ~ts: no thread could be started to do it (~s): ~s",
      [short(D), R, no_thread()]);
format_error({unwritable, D, R}) ->
    f("cannot write to ~ts: ~ts", [short(D), file:format_error(R)]);
format_error({start, thread}) ->
    f("the session's collector thread could not be started: ~s",
      [no_thread()]);
format_error({too_much_memory, #{need := N, threads := T, in_use := U,
                                 max := M}}) ->
    f("the session's rings may take ~s (buffer x ~b threads that can "
      "produce); the running sessions hold ~s of the ~s all may take "
      "(application env max_memory): use a smaller buffer or stop a "
      "session", [bytes(N), T, bytes(U), bytes(M)]);
format_error({too_many_files, Free, Reserve, Limit}) ->
    f("too many open files: ~b descriptors free, and the node keeps ~b of "
      "its ~b (ulimit -n) for itself", [Free, Reserve, Limit]);
format_error({file, E}) when E =:= emfile; E =:= enfile ->
    f("too many open files (~s): raise ulimit -n or stop a session",
      [E]);
format_error({too_many_sessions, Max}) ->
    f("too many sessions: ~b run already (application env max_sessions)",
      [Max]);
format_error({already_traced, Pids}) ->
    f("~p process(es) are traced by another tracer (~p...); add force => "
      "true to take them over", [length(Pids), hd(Pids)]);
format_error({message_pattern_taken, K, Cur}) ->
    f("the node's ~p pattern is another tool's (~tP, dbg:tpe/2 or the "
      "like: one per node); add force => true to take it (it is given "
      "back when the last session using it ends)", [K, Cur, ?SHOW]);
format_error({message_pattern_shared, K, Who}) ->
    f("another tracer traces ~p messages (~tP): a ~p pattern, one per node, "
      "would filter them too; add force => true to set it anyway",
      [K, Who, ?SHOW, K]);
format_error({nothing_to_trace, Hint}) -> f("nothing to trace: ~ts", [Hint]);
format_error({not_a_handler, M}) ->
    f("module ~tp does not export handle_events/2 (beamprobe_handler)", [M]);
format_error({conflict, S, {message_pattern, K}}) ->
    f("session ~p records ~p messages with another message pattern "
      "(one per node: give the same messages => pattern, or stop it)",
      [S, K]);
format_error({cannot_combine, MFA, Why}) ->
    f("~tP is traced by another session with another match spec, and this "
      "one cannot be combined with it (~tP): conditions, return_trace, "
      "exception_trace and message actions combine", [MFA, ?SHOW, Why, ?SHOW]);
format_error({conflict, S, What}) ->
    f("session ~p already traces ~tP", [S, What, ?SHOW]);
format_error({bad_pattern, P, Col, Msg}) ->
    f("bad pattern ~tP: column ~b: ~ts", [P, ?SHOW, Col, Msg]);
format_error({bad_pattern, P, Msg}) when is_list(Msg); is_binary(Msg) ->
    f("bad pattern ~tP: ~ts", [P, ?SHOW, Msg]);
format_error({bad_limit, L, Hint}) ->
    f("bad limit ~tP: expected ~ts", [L, ?SHOW, Hint]);
format_error({bad_pattern, P}) when not is_tuple(P) ->
    f("bad pattern ~tP: a pattern is a string, or a list of strings",
      [P, ?SHOW]);
format_error({bad_match_spec, What, Errs}) ->
    f("the match spec of ~tP does not compile: ~ts", [What, ?SHOW, lists:join("; ", Errs)]);
format_error({bad_pattern, MFA}) ->
    f("~tP is not a pattern erlang:trace_pattern/3 accepts", [MFA, ?SHOW]);
format_error({handler_init, M, {bad_option, _, _} = R}) ->
    f("handler ~tp: ~ts", [M, format_error(R)]);
format_error({handler_init, M, {unknown_option, _} = R}) ->
    f("handler ~tp: ~ts", [M, format_error(R)]);
format_error({handler_init, M, R}) ->
    f("handler ~tp failed to start: ~tP", [M, R, ?SHOW]);
format_error({bad_spec, S, Hint}) when is_list(Hint) ->
    f("bad spec ~tP: ~ts", [S, ?SHOW, Hint]);
format_error({too_many_functions, N, Max}) ->
    f("the patterns match ~b functions, more than ~b (max_functions); add "
      "force => true or raise max_functions if you mean it", [N, Max]);
format_error({counters_in_use, MFAs}) ->
    f("~b function(s) already have call_count or call_time counters on "
      "(cprof, eprof, fprof, tprof or another profile: ~tP); add "
      "force => true to profile the others and leave those alone",
      [length(MFAs), hd(MFAs), ?SHOW]);
format_error({profile_match_spec, P}) ->
    f("pattern ~tP selects calls by argument or guard or has actions: "
      "counters count every call; use M:F/A", [P, ?SHOW]);
format_error({not_loaded, Mods}) ->
    f("module(s) ~ts not loaded: profile mode never loads a module (that "
      "would run its on_load and change the node); call it once, or "
      "code:ensure_loaded/1 it, if you mean to",
      [lists:join(", ", [io_lib:format("~tw", [M]) || M <- Mods])]);
format_error({follow_conflict, {profile, Pid}}) ->
    f("a profile runs (~p, beamprobe:profile/2): it holds the call flag of "
      "every process nobody traces, and a follow session would record none "
      "of them; start it once the profile has ended", [Pid]);
format_error({follow_running, Pid}) ->
    f("a follow session runs (~p): it needs the node's trace flags and "
      "patterns to itself; stop it first", [Pid]);
format_error({profile_running, Pid}) ->
    f("a profile already runs (~p); one at a time", [Pid]);
format_error({profile_failed, Why}) ->
    f("the profile process failed: ~tP (everything it set was removed)",
      [Why, ?SHOW]);
format_error(caller_down) -> "the caller of profile/2 died";
format_error({io_server, Io, R}) ->
    f("the profile ran (its counters are removed) but its table could not "
      "be printed to ~tp: ~tP; print => false returns it", [Io, R, ?SHOW]);
format_error({system_monitor_taken, Pid}) ->
    f("the node's system monitor (erlang:system_monitor/2) is held by ~p; "
      "force => true takes it (it is given back when the session ends)",
      [Pid]);
format_error({lttng_unavailable, Why}) when is_list(Why) ->
    f("the LTTng-UST sink cannot run: ~ts", [Why]);
format_error(Other) -> f("~tP", [Other, ?SHOW]).

%% A file name cut to 200 characters.
short(D) ->
    case unicode:characters_to_list(D) of
        L when is_list(L), length(L) > 200 -> lists:sublist(L, 200) ++ "...";
        L when is_list(L) -> L;
        _ -> f("~tP", [D, ?SHOW])
    end.

f(Fmt, Args) -> lists:flatten(io_lib:format(Fmt, Args)).

no_thread() ->
    "the node is at its limit of threads (ulimit -u) or of memory".

bytes(N) when N >= 1 bsl 30 -> f("~.1f GiB", [N / (1 bsl 30)]);
bytes(N) when N >= 1 bsl 20 -> f("~.1f MiB", [N / (1 bsl 20)]);
bytes(N) -> f("~b bytes", [N]).

%% @doc The node-wide budget of ring memory for the NIF's start: the
%% application env `max_memory' in bytes, or 0 for `auto' (the default:
%% half of the memory the node may use, c_src/bp_budget.h).  Any other
%% value is passed on, for start to refuse as `{bad_config, max_memory}'.
-spec max_memory() -> term().
max_memory() ->
    case application:get_env(beamprobe, max_memory, auto) of
        auto -> 0;
        V -> V
    end.

is_are([_]) -> "is";
is_are(_) -> "are".

unsafe_dir(symlink) -> "it is a symbolic link (never followed)";
unsafe_dir(not_owner) -> "the directory belongs to another user";
unsafe_dir(group_or_world_writable) ->
    "the directory is writable by group or others".
