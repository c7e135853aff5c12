%%% @doc Safe tracing from a production shell: the implementation of
%%% {@link beamprobe:calls/3}, {@link beamprobe:messages/3} and
%%% {@link beamprobe:clear/0}.
%%%
%%% A shell session is an ordinary beamprobe session with a pattern
%%% language (beamprobe_pattern, and recon_trace's tuple forms:
%%% beamprobe_pattern_recon), options in beamprobe's, recon_trace's or
%%% redbug's names (beamprobe_shell_opts), limits that are always on (a
%%% count or a rate, and 15 seconds), and a printer handler
%%% (beamprobe_printer) that writes to the caller's group leader.  Call
%%% patterns are meta-traced when all processes are traced: no process gets
%%% a trace flag, so a session never collides with dbg or another session
%%% on other functions.
%%%
%%% A shell session belongs to the shell, not to the process that typed
%%% the command: its owner is the caller's group leader (the shell's io
%%% server, on the user's node in a remote shell).  An exception typed in
%%% the shell restarts the evaluator and leaves the trace running; closing
%%% the shell (the group leader exits, or its node disconnects) ends it.
%%% Starting a trace on a function that a trace of the same shell is
%%% tracing replaces that trace, as recon_trace's calls/2 does, and says
%%% so ("% beamprobe: replaced the shell trace on m:f/1").
-module(beamprobe_shell).

-export([calls/2, calls/3, messages/2, messages/3, clear/0]).

%% What a pattern is, for an argument that is none.
-define(PATTERN_FORMS,
        "a pattern is a string (\"m:f/2\", \"m:f(A, _) -> return\", "
        "Elixir's \"M.f/2\"), recon_trace's {M, F, A} or {M, F, MatchSpec "
        "| fun}, or a list of these").

-define(ON_RATE_COUNT,
        "on_rate applies to a rate limit {N, Ms} only, not to a count N "
        "(the trace ends after N events): give a rate, or leave on_rate "
        "out").

-define(TAG, beamprobe_shell).
-define(LOCKS, beamprobe_shell_locks).  % beamprobe_sup's table
-define(LOCK_MS, 10000).
-define(DEFAULT_MS, 15000).
-define(DEFAULT_MSGS, 10).              % redbug's msgs default
-define(SAY_MS, 60000).                 % how long a line waits for its reply
-define(SAY_WAIT_MS, 1000).             % ... and the shell for the line

-type limit() :: pos_integer() | {pos_integer(), pos_integer()}.
-type patterns() :: term().

%% @doc See {@link beamprobe:calls/2}: `calls(Patterns, Limit)' or, as
%% redbug's start/2, `calls(Patterns, Opts)' (a map or a proplist; the
%% count is `msgs', default 10).
-spec calls(patterns(), limit() | map() | list()) ->
          non_neg_integer() | {error, term()}.
calls(Patterns, Opts) when is_map(Opts); is_list(Opts) ->
    calls(Patterns, undefined, Opts);
calls(Patterns, Limit) ->
    calls(Patterns, Limit, #{}).

%% @doc See {@link beamprobe:calls/3}.
-spec calls(patterns(), limit() | undefined, map() | list()) ->
          non_neg_integer() | {error, term()}.
calls(Patterns, Limit, Opts0) ->
    with_patterns(Patterns, Opts0, call, fun(Parsed, Opts) ->
        Calls = merge_same(last_wins([{MFA, with_return(MS, Opts)}
                                      || #{mfa := MFA, match_spec := MS}
                                             <- Parsed])),
        start(#{calls => Calls, events => []}, Limit, Opts)
    end).

%% Two patterns of one list on the same function: the later one is in
%% force, as recon_trace and redbug set them one after another
%% (erlang:trace_pattern/3).  A pattern that a later one covers (the same
%% function, or a wildcard over it) is dropped; a later, narrower one
%% stays, and a session's function pattern wins over its wildcard.
%% Before, the one that sorted first won: [{m, f, 1}, {m, f,
%% [{'_', [], [{return_trace}]}]}] printed no return values.
%% Covering is by the arity the match spec selects: "m:_/1" and "m:_/2"
%% are both {m, '_', '_'}, and the first was dropped (only m:_/2 traced).
last_wins([]) -> [];
last_wins([{MFA, MS} = C | T]) ->
    Mine = arity_of(MFA, MS),
    case lists:any(fun({Later, LMS}) -> covers(arity_of(Later, LMS), Mine) end,
                   T) of
        true -> last_wins(T);
        false -> [C | last_wins(T)]
    end.

%% Patterns left on one function pattern (m:_/1 and m:_/2, both {m, '_',
%% '_'}) become one: their clauses together, the later one's first (where
%% both match a call, the later one is in force).
merge_same(Calls) ->
    lists:foldl(fun({MFA, MS}, Acc) ->
                        case lists:keyfind(MFA, 1, Acc) of
                            {MFA, Old} ->
                                lists:keyreplace(MFA, 1, Acc, {MFA, MS ++ Old});
                            false -> Acc ++ [{MFA, MS}]
                        end
                end, [], Calls).

covers({M1, F1, A1}, {M2, F2, A2}) ->
    wide(M1, M2) andalso wide(F1, F2) andalso wide(A1, A2).

wide('_', _) -> true;
wide(X, X) -> true;
wide(_, _) -> false.

%% @doc See {@link beamprobe:messages/2}.
-spec messages(patterns(), limit() | map() | list()) ->
          non_neg_integer() | {error, term()}.
messages(Patterns, Opts) when is_map(Opts); is_list(Opts) ->
    messages(Patterns, undefined, Opts);
messages(Patterns, Limit) ->
    messages(Patterns, Limit, #{}).

%% @doc See {@link beamprobe:messages/3}.
-spec messages(patterns(), limit() | undefined, map() | list()) ->
          non_neg_integer() | {error, term()}.
messages(Patterns, Limit, Opts0) ->
    with_patterns(Patterns, Opts0, message, fun(Parsed, Opts) ->
        Msgs = [{K, MS} || #{kind := K, match_spec := MS} <- Parsed],
        Events = lists:usort([K || {K, _} <- Msgs]),
        start(#{messages => Msgs, events => Events}, Limit, Opts)
    end).

%% @doc See {@link beamprobe:clear/0}.
-spec clear() -> ok.
clear() ->
    %% All at once: a stop waits up to handler_stop_timeout (5 s) for a
    %% printer whose io server does not answer (a stuck terminal, the
    %% very case for clear/0), and one after another a shell with 5
    %% traces waited 25 s, its later traces printing all the while.
    %% (the stopping processes are beamprobe's own: no trace sees them)
    Stops = [spawn_monitor(fun() ->
                                   ok = beamprobe_own:sensitive(),
                                   _ = (catch beamprobe:stop(S))
                           end)
             || {S, _} <- shell_sessions()],
    _ = [receive {'DOWN', Ref, process, Pid, _} -> ok end
         || {Pid, Ref} <- Stops],
    ok.

%% The running shell sessions, each with its configuration.
shell_sessions() ->
    [{S, C} || S <- beamprobe:list(),
               {ok, #{tag := ?TAG, config := C}} <- [beamprobe:info(S)]].

%%% ------------------------------------------------------------------------

with_patterns(Patterns, Opts0, Want, Fun) ->
    case beamprobe_shell_opts:normalize(Opts0) of
        {error, _} = E -> E;
        {ok, Opts} ->
            List = case Patterns of
                       [C | _] when is_integer(C) -> [Patterns];
                       %% redbug's message forms, redbug:start(send)
                       A when A =:= send; A =:= 'receive' ->
                           [atom_to_list(A)];
                       B when is_binary(B) -> [B];
                       T when is_tuple(T) ->
                           case beamprobe_pattern_recon:is_form(T) of
                               true -> [T];
                               false -> bad
                           end;
                       L when is_list(L), L =/= [] ->
                           case proper(L) of
                               %% redbug's list, ['send', 'receive'] or
                               %% ["m:f", send]
                               true -> [redbug_atom(X) || X <- L];
                               false -> bad
                           end;
                       _ -> bad
                   end,
            case List of
                bad -> {error, {bad_pattern, Patterns, ?PATTERN_FORMS}};
                _ -> parse_all(List, maps:get(force, Opts, false), Want,
                               fun(Parsed) -> Fun(Parsed, Opts) end, [])
            end
    end.

redbug_atom(A) when A =:= send; A =:= 'receive' -> atom_to_list(A);
redbug_atom(X) -> X.

proper(L) when is_list(L) ->
    try length(L) >= 0
    catch error:badarg -> false
    end;
proper(_) -> false.

parse_all([], _Force, _Want, Fun, Acc) -> Fun(lists:reverse(Acc));
parse_all([P | T], Force, Want, Fun, Acc) ->
    case parse(P, Force) of
        {ok, #{kind := call} = Parsed} when Want =:= call ->
            parse_all(T, Force, Want, Fun, [Parsed | Acc]);
        {ok, #{kind := K} = Parsed} when Want =:= message, K =/= call ->
            parse_all(T, Force, Want, Fun, [Parsed | Acc]);
        {ok, _} when Want =:= call ->
            {error, {bad_pattern, P, "a message pattern: use messages/2,3"}};
        {ok, _} ->
            {error, {bad_pattern, P, "a call pattern: use calls/2,3"}};
        {error, _} when not (is_list(P) orelse is_binary(P) orelse
                             is_tuple(P)) ->
            %% Not a pattern at all (an atom, a number in a list).
            {error, {bad_pattern, P, ?PATTERN_FORMS}};
        {error, {Col, Msg}} ->
            {error, {bad_pattern, P, Col, Msg}};
        {error, Msg} ->
            {error, {bad_pattern, P, Msg}}
    end.

parse(P, Force) ->
    case beamprobe_pattern_recon:is_form(P) of
        true -> beamprobe_pattern_recon:parse(P, Force);
        false -> beamprobe_pattern:parse(P, #{force => Force})
    end.

%% `return => true' adds exception_trace (return values and exceptions).
with_return(MS, #{return := true}) ->
    [{H, G, lists:usort([{exception_trace} | B])} || {H, G, B} <- MS];
with_return(MS, _) -> MS.

start(Base, Limit0, Opts) ->
    case limit(Limit0, Opts) of
        {error, _} = E -> E;
        N when is_integer(N), N > 0, is_map_key(on_rate, Opts) ->
            %% on_rate says what a rate limit does when it trips; a count
            %% has no rate to trip (recon's count limit just ends the
            %% trace): taking it silently would promise what never
            %% happens.
            {error, {unsupported_option, on_rate, ?ON_RATE_COUNT}};
        Limit -> start_limited(Base, Limit, Opts)
    end.

%% The limit: the argument, or redbug's `msgs' (which must agree with it
%% when both are given: `{conflicting_options, msgs, limit}', which names
%% both, where `{bad_option, msgs, M}' let a valid count look wrong).
limit(undefined, Opts) -> maps:get(msgs, Opts, ?DEFAULT_MSGS);
limit(L, #{msgs := M}) when M =/= L -> {error, {conflicting_options, msgs, limit}};
limit(L, _) -> L.

start_limited(Base, Limit, Opts) ->
    case limits(Limit, Opts) of
        {error, _} = E -> E;
        Limits ->
            %% The shell's group leader owns the session: an evaluator
            %% that crashes does not end it, a shell that closes does.
            Owner = group_leader(),
            Io = maps:get(io_server, Opts, Owner),
            Procs = maps:get(procs, Opts, all),
            ReturnTo = maps:get(return_to, Opts, false),
            {Rate, Count} = case Limit of
                                {_, _} -> {Limit, undefined};
                                _ -> {undefined, Limit}
                            end,
            Printer = {handler, beamprobe_printer,
                       maps:merge(
                         #{io => Io,
                           timestamp => maps:get(timestamp, Opts, time),
                           proc_names => initial_call,
                           owner => Owner,
                           on_rate => maps:get(on_rate, Opts, drop),
                           rate => Rate, limit => Count,
                           time => maps:get(time, Opts, ?DEFAULT_MS),
                           cut => atomics:new(2, [{signed, true}])},
                         maps:with([print_re, syntax], Opts)),
                       #{batch => 200, credits => 4}},
            Output = case maps:get(output, Opts, []) of
                         T when is_tuple(T) -> [Printer, T];
                         L -> [Printer | L]
                     end,
            Args = case maps:get(arity, Opts, false) of
                       true -> #{args => arity};
                       false -> #{capture => #{depth => maps:get(args, Opts, 4)}}
                   end,
            Spec0 = Base#{procs => Procs,
                          %% The printer's own output is no event of its
                          %% trace (it would feed on itself).
                          exclude => io_chain(Io),
                          meta => Procs =:= all andalso not ReturnTo andalso
                                  maps:get(events, Base) =:= [],
                          %% The patterns carry their own actions; record
                          %% whatever they produce.
                          return => true, exceptions => true,
                          return_to => ReturnTo,
                          output => Output,
                          limits => Limits,
                          on_rate => maps:get(on_rate, Opts, drop),
                          force => maps:get(force, Opts, false),
                          buffer => maps:get(buffer, Opts, 1024 * 1024),
                          tag => ?TAG},
            Spec = maps:merge(Spec0, Args),
            %% A new trace that cannot start (a dead pid, an unknown
            %% module, an unwritable output) replaces nothing: it starts
            %% first, and the trace it replaces ends after.  (Where the
            %% two cannot run at once -- one message pattern per node --
            %% the old one ends first.)
            case beamprobe_config:validate(Spec) of
                {ok, _} ->
                    locked(Owner, fun() -> replace_start(Spec, Owner, Io) end);
                %% (a count or rate past the session's bounds: the
                %% argument named, not the option it became)
                {error, {bad_option, {limits, K}, _}} when K =:= events;
                                                           K =:= rate ->
                    bad_limit(Limit);
                {error, _} = E -> E
            end
    end.

replace_start(Spec, Owner, Io) ->
    Old = to_replace(Owner, Spec),
    OldS = [S || {S, _, _} <- Old],
    %% The traces replaced print no event from now on: the new one prints
    %% them (cut/2).
    Cuts = cut(Old, beamprobe_nif:clock()),
    case start_session(Spec, Owner, 3) of
        {error, {conflict, S, _}} = E ->
            case lists:member(S, OldS) of
                true ->
                    replace(Old, Spec, Io),
                    start_session(Spec, Owner, 3);
                false -> uncut(Cuts, Io), E
            end;
        {error, {cannot_combine, K, _}} = E when Old =/= [] ->
            %% Its match spec cannot be combined with the one it replaces
            %% (a `{message, false}', a body term, a head the combiner
            %% cannot translate): retyping a trace of a function with
            %% another match spec returned this error and left the old
            %% trace running.  When no other session traces that
            %% function, the old one ends first, as recon_trace does.
            case only_replaced_on(K, OldS) of
                true ->
                    replace(Old, Spec, Io),
                    start_session(Spec, Owner, 3);
                false -> uncut(Cuts, Io), E
            end;
        {error, _} = E -> uncut(Cuts, Io), E;
        N ->
            replace(Old, Spec, Io),
            N
    end.

%% Sets the cut of the printers of the traces in Old (to_replace/2) to
%% trace clock time T: they print no event of T and after, which the
%% trace replacing them records and prints.  Both printed the calls made
%% while one replaced the other: the new trace starts before the old one
%% ends (a function called 1,000 times a second and retyped 10 times
%% printed 6-10 calls twice).  The printers' cuts.
cut(Old, T) ->
    [begin atomics:put(C, 1, T), C end
     || {S, _, _} <- Old, {ok, #{config := Conf}} <- [catch beamprobe:info(S)],
        C <- cut_of(Conf)].

cut_of(#{sinks := Sinks}) ->
    [C || #{type := handler, module := beamprobe_printer,
            arg := #{cut := C}} <- Sinks];
cut_of(_) -> [].

%% The new trace did not start: the traces it was to replace print again,
%% and the events they did not print meanwhile are said.
uncut(Cuts, Io) ->
    lists:foreach(
      fun(C) ->
              atomics:put(C, 1, 0),
              case atomics:exchange(C, 2, 0) of
                  0 -> ok;
                  N -> say(Io, "% beamprobe: ~b event~ts of the running "
                           "trace not printed while the new one tried to "
                           "start~n", [N, [$s || N =/= 1]])
              end
      end, Cuts).

%% Are the sessions that trace a function of pattern K (other than
%% beamprobe's own ones being replaced) all among OldS?  Then one of them
%% is what the new trace could not be combined with.
only_replaced_on(K, OldS) ->
    Others = [S || S <- beamprobe:list(), not lists:member(S, OldS),
                   {ok, #{config := C}} <- [catch beamprobe:info(S)],
                   lists:any(fun(T) -> overlap(T, K) end,
                             [MFA || {MFA, _} <- maps:get(calls, C, [])])],
    Others =:= [] andalso
        lists:any(fun(S) ->
                          case catch beamprobe:info(S) of
                              {ok, #{config := C}} ->
                                  lists:any(fun(T) -> overlap(T, K) end,
                                            targets(C));
                              _ -> false
                          end
                  end, OldS).

%% The traces of one shell are replaced and started one at a time: five
%% processes of a shell starting a trace of the same function at once
%% each found nothing to replace, and five sessions printed each call
%% five times.  A lock per shell in a public table (beamprobe_sup's),
%% taken with ets:insert_new/2: its holder is a process of this node,
%% and one that died holding it is replaced.  Nothing is called
%% (global's locks wait on the global name server, which a partition
%% can hold for seconds); a caller waits at most ?LOCK_MS, then goes on.
locked(Owner, Fun) ->
    Key = {shell, Owner},
    Deadline = erlang:monotonic_time(millisecond) + ?LOCK_MS,
    Got = case ets:whereis(?LOCKS) of
              undefined ->
                  %% The first trace on this node: the application (and
                  %% the table) start now, not inside the session start.
                  _ = application:ensure_all_started(beamprobe),
                  lock(Key, Deadline);
              _ -> lock(Key, Deadline)
          end,
    try Fun()
    after
        _ = Got andalso (catch ets:delete_object(?LOCKS, {Key, self()}))
    end.

lock(Key, Deadline) ->
    %% (the table is gone only with the application: no lock then)
    try lock_loop(Key, Deadline)
    catch error:badarg -> false
    end.

lock_loop(Key, Deadline) ->
    case ets:insert_new(?LOCKS, {Key, self()}) of
        true -> true;
        false ->
            case ets:lookup(?LOCKS, Key) of
                [{_, Holder} = Obj] ->
                    case is_process_alive(Holder) of
                        false -> _ = ets:delete_object(?LOCKS, Obj);
                        true -> timer:sleep(5)
                    end;
                [] -> ok
            end,
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> false;
                false -> lock_loop(Key, Deadline)
            end
    end.

%% The local processes a line printed to Io passes through: the io
%% server, and the terminal driver (user_drv) behind a shell's group
%% process.  A trace of every process's messages (or of the io
%% server's calls) would otherwise record each printed line, whose
%% printing is recorded again: `messages("'receive'", {5, 1000})' filled
%% every rate window with its own io_request and io_reply messages.  A
%% remote io server (a remote shell's) is no such loop.
io_chain(Io) ->
    Local = fun(P) -> is_pid(P) andalso node(P) =:= node() andalso
                          is_process_alive(P) end,
    IoPid = case Io of
                P when is_pid(P) -> P;
                N when is_atom(N) -> whereis(N);
                _ -> undefined
            end,
    case Local(IoPid) of
        true -> lists:usort([IoPid | [D || D <- [whereis(user_drv)],
                                           Local(D)]]);
        false -> []
    end.

%% recon_trace:calls/2 clears the previous trace: a new trace of a shell
%% on a function (or message kind) that a running trace of the same shell
%% traces replaces that trace, and says so: [{Session, Common, Others}],
%% what it has in common with the new one and what else it traced.
to_replace(Owner, Spec) ->
    New = targets(Spec),
    [{S, Common, targets(C) -- Common}
     || {S, C} <- shell_sessions(), owner(C) =:= Owner,
        Common <- [[T || T <- targets(C), overlaps(T, New)]],
        Common =/= []].

replace(Old, Spec, Io) ->
    Elixir = syntax(Spec) =:= elixir,
    Text = fun(Ts) -> lists:join(", ", [target_text(T, Elixir) || T <- Ts]) end,
    %% The line first, then the stop: the replaced printer's `session
    %% ended (replaced)' follows it.  (Said after the stop, the two lines
    %% came in either order: the printer writes its last line as it ends,
    %% after the session process the stop waits for.)  say/3 waits for the
    %% io server's reply, at most ?SAY_WAIT_MS.
    _ = [begin
             say(Io, "% beamprobe: replaced the shell trace on ~ts~ts~n",
                 [Text(Common),
                  case Others of
                      [] -> "";
                      _ -> [" (its trace of ", Text(Others),
                            " ended with it)"]
                  end]),
             stop_replaced(S)
         end || {S, Common, Others} <- Old],
    ok.

%% A line to the trace's io server from a process of its own, which waits
%% for the reply at most ?SAY_MS; the caller (the shell's evaluator) waits
%% for it at most ?SAY_WAIT_MS (the line comes before the shell's result
%% when the io server answers).  Retyping a trace whose io_server did not
%% answer (a stuck terminal, a file on a hung disk) hung the shell for
%% good, the shell's lock held: its next calls/2 waited 10 s each.
say(Io, Fmt, Args) ->
    Chars = unicode:characters_to_binary(io_lib:format(Fmt, Args)),
    {Pid, Ref} =
        spawn_monitor(fun() ->
                              ok = beamprobe_own:sensitive(),
                              case Io of
                                  P when is_pid(P) -> put_chars(P, Chars);
                                  N when is_atom(N) ->
                                      put_chars(whereis(N), Chars);
                                  _ -> ok
                              end
                      end),
    receive {'DOWN', Ref, process, Pid, _} -> ok
    after ?SAY_WAIT_MS -> demonitor(Ref, [flush]), ok
    end.

put_chars(Pid, Chars) when is_pid(Pid) ->
    Ref = monitor(process, Pid),
    Pid ! {io_request, self(), Ref, {put_chars, unicode, Chars}},
    receive
        {io_reply, Ref, _} -> ok;
        {'DOWN', Ref, process, _, _} -> ok
    after ?SAY_MS -> ok
    end;
put_chars(_, _) -> ok.

owner(#{sinks := Sinks}) ->
    case [O || #{type := handler, module := beamprobe_printer,
                 arg := #{owner := O}} <- Sinks] of
        [O | _] -> O;
        [] -> undefined
    end;
owner(_) -> undefined.

targets(C) ->
    lists:append([arities(MFA, MS) || {MFA, MS} <- maps:get(calls, C, [])]) ++
        [K || {K, _} <- maps:get(messages, C, [])].

%% A function pattern per arity its match spec selects ("m:_/1" and
%% "m:_/2" of one trace are one {m, '_', '_'} with heads of both lengths).
arities({M, F, '_'} = MFA, MS) when is_list(MS) ->
    Ls = lists:usort([case H of
                          L when is_list(L) -> length(L);
                          _ -> any
                      end || {H, _, _} <- MS]),
    case lists:member(any, Ls) orelse Ls =:= [] of
        true -> [MFA];
        false -> [{M, F, N} || N <- Ls]
    end;
arities(MFA, _) -> [MFA].

%% The arity a match spec selects where the function pattern leaves it
%% open ("m:_/2" and {m, '_', 2} are {m, '_', '_'} with heads of two
%% arguments): a trace of m:_/2 replaced the shell's trace of m:f/1,
%% which it does not trace.
arity_of({M, F, '_'} = MFA, MS) when is_list(MS) ->
    case lists:usort([case H of
                          L when is_list(L) -> length(L);
                          _ -> any
                      end || {H, _, _} <- MS]) of
        [N] when is_integer(N) -> {M, F, N};
        _ -> MFA
    end;
arity_of(MFA, _) -> MFA.

overlaps(T, New) -> lists:any(fun(N) -> overlap(T, N) end, New).

overlap({M1, F1, A1}, {M2, F2, A2}) ->
    same(M1, M2) andalso same(F1, F2) andalso same(A1, A2);
overlap(K, K) -> true;
overlap(_, _) -> false.

any('_') -> "_";
any(X) -> io_lib:format("~tw", [X]).

same(X, X) -> true;
same('_', _) -> true;
same(_, '_') -> true;
same(_, _) -> false.

target_text({M, F, A}) -> [any(M), ":", any(F), "/", any(A)];
target_text(K) -> io_lib:format("~tw", [K]).

%% In the printer's syntax (`syntax => elixir': `Enum.sum/_').
target_text({_, _, _} = T, true) ->
    try beamprobe_nif:elixir_text(unicode:characters_to_binary(target_text(T)), mfa)
    catch error:_ -> target_text(T)
    end;
target_text(T, _) -> target_text(T).

syntax(#{output := Out}) when is_list(Out) ->
    case [Sx || {handler, beamprobe_printer, #{syntax := Sx}, _} <- Out] of
        [Sx | _] -> Sx;
        [] -> erlang
    end;
syntax(_) -> erlang.

%% Ends a replaced session (its printer says `session ended (replaced)')
%% and waits until it has removed its patterns.
stop_replaced(S) ->
    case beamprobe:stop_as(S, replaced) of
        ok -> ok;
        {error, not_found} -> ok
    end.

%% The shell API never raises: in a remote shell an exception kills the
%% evaluator and with it the user's other sessions.  The number of
%% matched functions comes with the start (the session may have reached
%% its count and ended before any info/1), and a conflict with a shell
%% session that has already reached its limit and is ending is waited out
%% (the user sees it as done), not reported.
start_session(Spec, Owner, Tries) ->
    try start_once(Spec, Owner, Tries)
    catch
        Class:Reason -> {error, {internal, Class, Reason}}
    end.

start_once(Spec, Owner, Tries) ->
    case beamprobe:start_matched(Spec, Owner) of
        {ok, S, N} -> skipped_note(S, Spec), N;
        {error, {conflict, S, _}} = E when Tries > 1 ->
            case ending_shell_session(S) of
                true -> start_once(Spec, Owner, Tries - 1);
                false -> E
            end;
        {error, _} = E -> E
    end.

%% Not traced: beamprobe's own processes -- sessions, watchdogs, printers
%% and handlers, the janitor, the system monitor's owner, the gate, the
%% sampler -- are `sensitive' (process_flag/2): the VM generates no trace
%% event of any kind for them, also for other tools.  A shell trace of a
%% common function through meta patterns (every process) recorded them:
%% `lists:_' showed the janitor and the session at work, never the user's
%% call; an idle node filled a rate-limited trace with the watchdog's and
%% the printer's own calls (2,248 printed, 210,978 dropped in 5 s); the
%% printer tracing a function it calls fed itself.

%% One line naming what was left to another tool (beamprobe_skip).
%% Asked and printed by a process of its own that no trace sees
%% (sensitive): the trace has started, and the shell's own info/1 call
%% and io request would be the first events of a `send' trace of every
%% process (with a count of 2, the only ones).
skipped_note(S, #{output := [{handler, beamprobe_printer, #{io := Io}, _} | _]}) ->
    _ = beamprobe_own:spawn(fun() ->
                      ok = beamprobe_own:sensitive(),
                      case beamprobe:info(S) of
                          {ok, #{skipped := Sk}} ->
                              case beamprobe_skip:skipped_note(Sk) of
                                  none -> ok;
                                  Line -> _ = (catch io:put_chars(Io, Line)),
                                          ok
                              end;
                          _ -> ok
                      end
              end),
    ok;
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
    bad_limit(L).

bad_limit(L) ->
    {error, {bad_limit, L, "a count N or a rate {N, Milliseconds}"}}.

secs(Opts) ->
    case maps:get(time, Opts, ?DEFAULT_MS) of
        infinity -> infinity;
        Ms -> Ms / 1000
    end.
