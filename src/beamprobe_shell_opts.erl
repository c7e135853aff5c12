%%% @doc The options of the shell API ({@link beamprobe:calls/3},
%%% {@link beamprobe:messages/3}): a map or a proplist, in beamprobe's
%%% names or in recon_trace's and redbug's.  Each option is either
%%% accepted with the meaning it has in those tools, or refused with
%%% `{error, {unsupported_option, Name, Hint}}', where `Hint' names what to
%%% use in beamprobe instead (docs/tutorial.md has the table).
%%%
%%% ```
%%% beamprobe      recon_trace:calls/3      redbug:start/2
%%% procs          {pid, Spec}              procs
%%% time           -                        time (timeout too)
%%% (the limit)    (the limit)              msgs
%%% args => N      {args, args | arity}     print_depth, arity
%%% timestamp      {timestamp, formatter | trace}
%%% io_server      io_server                print_file (refused)
%%% return_to      return_to                -
%%% -              {scope, local}           -
%%% print_re       -                        print_re
%%% '''
%%% The result is a map with beamprobe's keys only: `procs', `time',
%%% `msgs', `return', `args' (a capture depth), `arity', `timestamp',
%%% `io_server', `on_rate', `output', `force', `buffer', `return_to',
%%% `print_re', `syntax' (`erlang' or `elixir': the printed syntax,
%%% beamprobe_printer).
-module(beamprobe_shell_opts).

-export([normalize/1, hint/1, proplist/1]).

-define(MAX_MS, 4294967295).            % erlang:send_after/3's limit
-define(MAX_DEPTH, 64).                 % capture depth (beamprobe_config)
-define(TIMESTAMPS, [time, ns, none]).  % beamprobe_printer's

%% @doc Translates a map or a proplist of options.  The first bad option
%% is reported: `{unknown_option, K}', `{bad_option, K, V}' (K as the
%% caller wrote it) or `{unsupported_option, K, Hint}'.
-spec normalize(map() | list()) -> {ok, map()} | {error, term()}.
normalize(Opts) when is_map(Opts) ->
    translate(lists:sort(maps:to_list(Opts)), #{});
normalize(Opts) when is_list(Opts) ->
    case proplist(Opts) of
        {ok, L} -> translate(L, #{});
        error -> {error, {bad_option, opts, Opts}}
    end;
normalize(Opts) ->
    {error, {bad_option, opts, Opts}}.

%% @doc A proplist of options as its pairs, each key once: atoms are
%% `{A, true}'; the first of a key wins, as with proplists:get_value/2
%% (what recon and redbug read).  `error' for anything else (an improper
%% list, an element that is neither an atom nor `{atom(), term()}').
%% Also profile/2's (beamprobe_profile).
-spec proplist(term()) -> {ok, [{atom(), term()}]} | error.
proplist(L) ->
    case proper(L) of
        true ->
            Pairs = [case P of
                         A when is_atom(A) -> {A, true};
                         {K, V} when is_atom(K) -> {K, V};
                         _ -> bad
                     end || P <- L],
            case lists:member(bad, Pairs) of
                true -> error;
                false -> {ok, first_of_each(Pairs, [], [])}
            end;
        false -> error
    end.

first_of_each([], _Seen, Acc) -> lists:reverse(Acc);
first_of_each([{K, _} = P | T], Seen, Acc) ->
    case lists:member(K, Seen) of
        true -> first_of_each(T, Seen, Acc);
        false -> first_of_each(T, [K | Seen], [P | Acc])
    end.

%% Two names of one beamprobe option (recon's `pid' and redbug's `procs',
%% `time' and `timeout', `args' and `print_depth' or `arity') that say
%% different things are refused: neither "the first wins" (a proplist)
%% nor the order of a map's keys is what the user meant.
translate(L, Acc) -> translate(L, Acc, #{}).

translate([], Acc, _From) -> {ok, Acc};
translate([{K, V} | T], Acc, From) ->
    case opt(K, V) of
        {set, Pairs} ->
            case [maps:get(BK, From) || {BK, BV} <- Pairs,
                                        maps:is_key(BK, Acc),
                                        maps:get(BK, Acc) =/= BV] of
                [K0 | _] -> {error, {conflicting_options, K0, K}};
                [] ->
                    translate(T, maps:merge(Acc, maps:from_list(Pairs)),
                              maps:merge(From, maps:from_list(
                                                 [{BK, K} || {BK, _} <- Pairs])))
            end;
        ignore -> translate(T, Acc, From);
        bad -> {error, {bad_option, K, V}};
        {unsupported, Hint} -> {error, {unsupported_option, K, Hint}};
        unknown -> {error, {unknown_option, K}}
    end.

%%% ---- one option ----------------------------------------------------------

opt(K, V) when K =:= procs; K =:= pid ->
    case procs(V) of
        {ok, P} -> {set, [{procs, P}]};
        {unsupported, Hint} -> {unsupported, Hint};
        error -> bad
    end;
opt(K, V) when K =:= time; K =:= timeout ->
    case V =:= infinity orelse
        (is_integer(V) andalso V > 0 andalso V =< ?MAX_MS) of
        true -> {set, [{time, V}]};
        false -> bad
    end;
opt(msgs, N) when is_integer(N), N > 0 -> {set, [{msgs, N}]};
opt(return, B) when is_boolean(B) -> {set, [{return, B}]};
opt(args, D) when is_integer(D), D >= 1, D =< ?MAX_DEPTH -> {set, [{args, D}]};
opt(args, args) -> ignore;                      % recon's default
opt(args, arity) -> {set, [{arity, true}]};     % recon
opt(arity, B) when is_boolean(B) -> {set, [{arity, B}]}; % redbug
opt(print_depth, D) when is_integer(D), D >= 1 ->   % redbug's ~P depth
    {set, [{args, min(D, ?MAX_DEPTH)}]};
opt(timestamp, T) when T =:= formatter; T =:= trace ->
    %% recon: beamprobe's timestamps are always taken in the traced
    %% process, when the event happens (recon's `trace').
    {set, [{timestamp, time}]};
opt(timestamp, T) ->
    case lists:member(T, ?TIMESTAMPS) of
        true -> {set, [{timestamp, T}]};
        false -> bad
    end;
opt(io_server, Io) when is_pid(Io); is_atom(Io), Io =/= undefined ->
    %% One that is not there would lose every line while the counters
    %% say they were delivered; the caller itself (`{io_server, self()}'
    %% typed in the shell: the evaluator) answers no io request, and the
    %% printer would wait for it for the whole session.
    case Io =/= self() andalso whereis_io(Io) =/= self() andalso is_there(Io) of
        true -> {set, [{io_server, Io}]};
        false -> bad
    end;
opt(on_rate, R) when R =:= drop; R =:= stop -> {set, [{on_rate, R}]};
opt(output, O) ->
    case is_tuple(O) orelse
        (O =/= [] andalso proper(O) andalso not io_lib:char_list(O)) of
        true -> {set, [{output, O}]};
        false -> bad
    end;
opt(force, F) when is_boolean(F) -> {set, [{force, F}]};
opt(buffer, B) when is_integer(B), B > 0 -> {set, [{buffer, B}]};
opt(return_to, B) when is_boolean(B) -> {set, [{return_to, B}]};
opt(scope, local) -> ignore;    % beamprobe traces local calls too
opt(scope, global) -> {unsupported, hint({scope, global})};
opt(print_re, Re) ->
    case (is_list(Re) orelse is_binary(Re)) andalso
        re:compile(Re, [unicode]) of
        {ok, _} -> {set, [{print_re, Re}]};
        _ -> bad
    end;
opt(print_msec, B) when is_boolean(B) -> ignore;  % microseconds anyway
opt(syntax, S) when S =:= erlang; S =:= elixir ->   % beamprobe_printer's
    {set, [{syntax, S}]};
opt(K, _) ->
    case hint(K) of
        undefined ->
            case lists:member(K, known()) of
                true -> bad;
                false -> unknown
            end;
        Hint -> {unsupported, Hint}
    end.

%% Every option accepted with some value (a bad value is `bad_option').
known() ->
    [procs, pid, time, timeout, msgs, return, args, arity, print_depth,
     timestamp, io_server, on_rate, output, force, buffer, return_to, scope,
     print_re, print_msec, syntax].

%% @doc The beamprobe equivalent of an option of recon_trace or redbug
%% that beamprobe does not take (`undefined' for any other).
-spec hint(term()) -> string() | undefined.
hint({scope, global}) ->
    "beamprobe traces every call of the function, local or fully "
        "qualified (meta tracing); leave out {scope, global}";
hint(formatter) ->
    "use output => [{handler, Module, Args}] (a beamprobe_handler) to "
        "format events yourself";
hint(print_fun) -> hint(formatter);
hint(use_dbg) ->
    "beamprobe has its own tracer (a NIF) and never uses dbg; leave it out";
hint(K) when K =:= target; K =:= cookie ->
    "run the shell on the traced node (erl -remsh Node) or call "
        "beamprobe there through erpc";
hint(blocking) ->
    "use beamprobe:start/1 with output => {handler, Module, Args} to "
        "collect the events";
hint(max_queue) ->
    "beamprobe queues no messages: each thread's ring is bounded "
        "(buffer => Bytes) and every loss is counted and printed";
hint(max_msg_size) ->
    "every captured term is bounded: args => Depth (and "
        "beamprobe:start/1's capture => #{bytes => N})";
hint(debug) ->
    "errors are {error, Reason}; beamprobe:format_error/1 says them in "
        "words";
hint(trace_child) -> "use procs => new (or all)";
hint(discard) ->
    "use beamprobe:profile/2 to count calls without an event each";
hint(buffered) ->
    "lines are printed in batches already; output => [{file, Dir}] keeps "
        "every event";
hint(records) -> "records are printed as tuples";
hint(print_calls) -> "use print_re => Regex to choose the lines printed";
hint(print_return) ->
    "leave `-> return' out of the pattern (return values are printed only "
        "where asked)";
hint(print_node) -> "events come from this node; pids are printed as local";
hint(print_time_unit) ->
    "timestamps are printed as HH:MM:SS.microseconds (timestamp => ns: "
        "the trace clock)";
hint(print_file) ->
    "use io_server => IoDevice (from file:open(Name, [write, {encoding, "
        "utf8}])), or output => [{file, Dir}] for a trace file";
hint(K) when K =:= file; K =:= file_size; K =:= file_count ->
    "use output => [{file, Dir}]: a CTF trace (bin/beamprobe print Dir), "
        "bounded by the session's limits";
hint(_) -> undefined.

%%% ---- process specifications ----------------------------------------------

%% beamprobe's `procs' (all | new | existing | [pid() | atom()]) from
%% recon's pid specs (all, new, existing, a pid, a name, {A, B, C},
%% "<A.B.C>", {global, Name}, {via, Registry, Name}, or a list) and
%% redbug's (all, a pid, a name, {pid, I2, I3}, or a list).  A name
%% stays a name (beamprobe_config resolves it and says when it is
%% unknown).
procs(P) when P =:= all; P =:= new; P =:= existing -> {ok, P};
procs([]) -> error;
procs([Single]) when Single =:= all; Single =:= new; Single =:= existing ->
    {ok, Single};
procs(L) when is_list(L) ->
    case io_lib:printable_list(L) of
        true -> one(L);
        false ->
            case proper(L) of
                true ->
                    Sets = [X || X <- L, X =:= all orelse X =:= new orelse
                                             X =:= existing],
                    Ps = [one(X) || X <- L, not lists:member(X, Sets)],
                    case lists:all(fun(R) -> R =/= error end, Ps) of
                        true -> mixed(lists:usort(Sets),
                                      lists:append([X || {ok, X} <- Ps]));
                        false -> error
                    end;
                false -> error
            end
    end;
procs(X) -> one(X).

%% recon's list of specs mixes processes and sets of them, as recon
%% traces each: `[Pid, new]' is that process and every new one.  The
%% listed processes exist: with `existing' or `all' they are in the set.
mixed([], Pids) -> {ok, Pids};
mixed([new], []) -> {ok, new};
mixed([new], _) ->
    {unsupported,
     "beamprobe traces a list of processes, or all, new or existing ones, "
     "not a list and new ones together: use procs => all (the listed "
     "processes and every new one among them)"};
mixed([existing], _) -> {ok, existing};
mixed(_, _) -> {ok, all}.               % all, or existing and new

one(P) when is_pid(P) -> {ok, [P]};
one(N) when is_atom(N), N =/= all, N =/= new, N =/= existing,
            N =/= undefined -> {ok, [N]};
one({pid, B, C}) when is_integer(B), is_integer(C) -> pid(0, B, C);
one({A, B, C}) when is_integer(A), is_integer(B), is_integer(C) ->
    pid(A, B, C);
one({global, Name}) -> named(catch global:whereis_name(Name));
one({via, Reg, Name}) when is_atom(Reg) -> named(catch Reg:whereis_name(Name));
one(S) when is_list(S) ->
    try list_to_pid(S) of P -> {ok, [P]}
    catch error:badarg -> error
    end;
one(_) -> error.

pid(A, B, C) ->
    try c:pid(A, B, C) of P -> {ok, [P]}
    catch error:_ -> error
    end.

named(P) when is_pid(P) -> {ok, [P]};
named(_) -> error.

proper(L) when is_list(L) ->
    try length(L) >= 0 catch error:badarg -> false end;
proper(_) -> false.

whereis_io(Name) when is_atom(Name) -> whereis(Name);
whereis_io(Pid) -> Pid.

%% A local pid that is alive, a name registered here; a remote pid is
%% taken as it is (asking its node would block the caller).
is_there(Pid) when is_pid(Pid) ->
    node(Pid) =/= node() orelse is_process_alive(Pid);
is_there(Name) ->
    whereis(Name) =/= undefined.
