%%% @doc Safe tracing from a production shell: the implementation of
%%% {@link beamprobe:calls/3}, {@link beamprobe:messages/3} and
%%% {@link beamprobe:clear/0}.
%%%
%%% A shell session is an ordinary beamprobe session with a pattern
%%% language (beamprobe_pattern), limits that are always on (a count or a
%%% rate, and 15 seconds), and a printer handler (beamprobe_printer) that
%%% writes to the caller's group leader.  Call patterns are meta-traced when
%%% all processes are traced: no process gets a trace flag, so a session
%%% never collides with dbg or another session on other functions.
-module(beamprobe_shell).

-export([calls/3, messages/3, clear/0]).

-define(TAG, beamprobe_shell).
-define(DEFAULT_MS, 15000).
-define(OPTS, [procs, time, return, args, timestamp, io_server, on_rate,
               output, force, buffer]).
-define(TIMESTAMPS, [time, ns, none]).  % beamprobe_printer's
-define(MAX_MS, 4294967295).            % erlang:send_after/3's limit
-define(MAX_DEPTH, 64).                 % capture depth (beamprobe_config)

-type limit() :: pos_integer() | {pos_integer(), pos_integer()}.

%% @doc See {@link beamprobe:calls/3}.
-spec calls(string() | binary() | [string() | binary()], limit(), map()) ->
          non_neg_integer() | {error, term()}.
calls(Patterns, Limit, Opts) ->
    with_patterns(Patterns, Opts, call, fun(Parsed) ->
        Calls = [{MFA, with_return(MS, Opts)}
                 || #{mfa := MFA, match_spec := MS} <- Parsed],
        start(#{calls => Calls, events => []}, Limit, Opts)
    end).

%% @doc See {@link beamprobe:messages/3}.
-spec messages(string() | binary() | [string() | binary()], limit(), map()) ->
          non_neg_integer() | {error, term()}.
messages(Patterns, Limit, Opts) ->
    with_patterns(Patterns, Opts, message, fun(Parsed) ->
        Msgs = [{K, MS} || #{kind := K, match_spec := MS} <- Parsed],
        Events = lists:usort([K || {K, _} <- Msgs]),
        start(#{messages => Msgs, events => Events}, Limit, Opts)
    end).

%% @doc See {@link beamprobe:clear/0}.
-spec clear() -> ok.
clear() ->
    _ = [catch beamprobe:stop(S) || S <- beamprobe:list(), is_shell(S)],
    ok.

is_shell(S) ->
    case beamprobe:info(S) of
        {ok, #{tag := ?TAG}} -> true;
        _ -> false
    end.

%%% ------------------------------------------------------------------------

with_patterns(Patterns, Opts, Want, Fun) when is_map(Opts) ->
    case check_opts(Opts) of
        {error, _} = E -> E;
        ok ->
            List = case Patterns of
                       [C | _] when is_integer(C) -> [Patterns];
                       B when is_binary(B) -> [B];
                       L when is_list(L), L =/= [] ->
                           case proper(L) of
                               true -> L;
                               false -> bad
                           end;
                       _ -> bad
                   end,
            case List of
                bad -> {error, {bad_pattern, Patterns}};
                _ -> parse_all(List, maps:get(force, Opts, false), Want,
                               Fun, [])
            end
    end;
with_patterns(_, Opts, _, _) ->
    {error, {bad_option, opts, Opts}}.

%% Every shell option, checked here so that a bad value is an error before
%% anything starts (the printer and the limits use some of them as they
%% are); the rest are checked again by beamprobe_config.  Unknown keys are
%% refused.  The first bad key in ?OPTS order is reported.
check_opts(Opts) ->
    case [K || K <- maps:keys(Opts), not lists:member(K, ?OPTS)] of
        [K | _] -> {error, {unknown_option, K}};
        [] ->
            Bad = [{K, V} || K <- ?OPTS, {ok, V} <- [maps:find(K, Opts)],
                             not opt_ok(K, V)],
            case Bad of
                [] -> ok;
                [{K, V} | _] -> {error, {bad_option, K, V}}
            end
    end.

opt_ok(procs, P) ->
    P =:= all orelse P =:= new orelse P =:= existing orelse
        (P =/= [] andalso proper(P));
opt_ok(time, T) ->
    T =:= infinity orelse (is_integer(T) andalso T > 0 andalso T =< ?MAX_MS);
opt_ok(return, R) -> is_boolean(R);
opt_ok(args, D) -> is_integer(D) andalso D >= 1 andalso D =< ?MAX_DEPTH;
opt_ok(timestamp, T) -> lists:member(T, ?TIMESTAMPS);
opt_ok(io_server, Io) -> is_pid(Io) orelse (is_atom(Io) andalso Io =/= undefined);
opt_ok(on_rate, R) -> R =:= drop orelse R =:= stop;
opt_ok(output, O) ->
    is_tuple(O) orelse
        (O =/= [] andalso proper(O) andalso not io_lib:char_list(O));
opt_ok(force, F) -> is_boolean(F);
opt_ok(buffer, B) -> is_integer(B) andalso B > 0.

proper(L) when is_list(L) ->
    try length(L) >= 0
    catch error:badarg -> false
    end;
proper(_) -> false.

parse_all([], _Force, _Want, Fun, Acc) -> Fun(lists:reverse(Acc));
parse_all([P | T], Force, Want, Fun, Acc) ->
    case beamprobe_pattern:parse(P, #{force => Force}) of
        {ok, #{kind := call} = Parsed} when Want =:= call ->
            parse_all(T, Force, Want, Fun, [Parsed | Acc]);
        {ok, #{kind := K} = Parsed} when Want =:= message, K =/= call ->
            parse_all(T, Force, Want, Fun, [Parsed | Acc]);
        {ok, _} when Want =:= call ->
            {error, {bad_pattern, P, "a message pattern: use messages/2,3"}};
        {ok, _} ->
            {error, {bad_pattern, P, "a call pattern: use calls/2,3"}};
        {error, {Col, Msg}} ->
            {error, {bad_pattern, P, Col, Msg}}
    end.

%% `return => true' adds exception_trace (return values and exceptions).
with_return(MS, #{return := true}) ->
    [{H, G, lists:usort([{exception_trace} | B])} || {H, G, B} <- MS];
with_return(MS, _) -> MS.

start(Base, Limit, Opts) ->
    case limits(Limit, Opts) of
        {error, _} = E -> E;
        Limits ->
            Io = maps:get(io_server, Opts, group_leader()),
            Procs = maps:get(procs, Opts, all),
            Printer = {handler, beamprobe_printer,
                       #{io => Io,
                         timestamp => maps:get(timestamp, Opts, time)},
                       #{batch => 200, credits => 4}},
            Output = case maps:get(output, Opts, []) of
                         T when is_tuple(T) -> [Printer, T];
                         L -> [Printer | L]
                     end,
            Capture = case maps:get(args, Opts, 4) of
                          D when is_integer(D) -> #{depth => D};
                          _ -> #{}
                      end,
            Spec = Base#{procs => Procs,
                         meta => Procs =:= all andalso
                                 maps:get(events, Base) =:= [],
                         %% The patterns carry their own actions; record
                         %% whatever they produce.
                         return => true, exceptions => true,
                         output => Output,
                         capture => Capture,
                         limits => Limits,
                         on_rate => maps:get(on_rate, Opts, drop),
                         force => maps:get(force, Opts, false),
                         buffer => maps:get(buffer, Opts, 1024 * 1024),
                         tag => ?TAG},
            start_session(Spec, 3)
    end.

%% The shell API never raises: in a remote shell an exception kills the
%% evaluator and with it the user's other sessions.  The number of
%% matched functions comes with the start (the session may have reached
%% its count and ended before any info/1), and a conflict with a shell
%% session that has already reached its limit and is ending is waited out
%% (the user sees it as done), not reported.
start_session(Spec, Tries) ->
    try start_once(Spec, Tries)
    catch
        Class:Reason -> {error, {internal, Class, Reason}}
    end.

start_once(Spec, Tries) ->
    case beamprobe:start_matched(Spec) of
        {ok, S, N} -> skipped_note(S, Spec), N;
        {error, {conflict, S, _}} = E when Tries > 1 ->
            case ending_shell_session(S) of
                true -> start_once(Spec, Tries - 1);
                false -> E
            end;
        {error, _} = E -> E
    end.

%% One line naming what was left to another tool (beamprobe_watch).
skipped_note(S, #{output := [{handler, beamprobe_printer, #{io := Io}, _} | _]}) ->
    case beamprobe:info(S) of
        {ok, #{skipped := Sk}} ->
            case beamprobe_watch:skipped_note(Sk) of
                none -> ok;
                Line -> _ = (catch io:put_chars(Io, Line)), ok
            end;
        _ -> ok
    end;
skipped_note(_S, _Spec) -> ok.

%% Is `S' a shell session that has ended (or is ending: its limit is
%% reached)?  If so, waits (at most 5 s) until it is gone.
ending_shell_session(S) ->
    Ref = monitor(process, S),
    Ending = case beamprobe:info(S) of
                 {error, not_found} -> true;
                 {ok, #{tag := ?TAG, stop_reason := R}} -> R =/= none;
                 _ -> false
             end,
    _ = case Ending of
        true -> receive {'DOWN', Ref, process, S, _} -> ok
                after 5000 -> ok
                end;
        false -> ok
    end,
    demonitor(Ref, [flush]),
    Ending.

limits(N, Opts) when is_integer(N), N > 0 ->
    #{events => N, seconds => secs(Opts)};
limits({N, Ms}, Opts) when is_integer(N), N > 0, is_integer(Ms), Ms > 0 ->
    #{rate => {N, Ms}, seconds => secs(Opts)};
limits(L, _) ->
    {error, {bad_limit, L, "a count N or a rate {N, Milliseconds}"}}.

secs(Opts) ->
    case maps:get(time, Opts, ?DEFAULT_MS) of
        infinity -> infinity;
        Ms -> Ms / 1000
    end.
