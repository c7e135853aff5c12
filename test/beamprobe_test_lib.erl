%%% @doc Helpers for the beamprobe Common Test suites: suite and case
%%% set-up shared by them, starting and stopping sessions, running
%%% babeltrace2 on a trace and parsing its text output, waiting, and
%%% checking that no trace state is left on the node.
%%%
%%% babeltrace2 prints one line per event:
%%%
%%% ```
%%% [20:11:06.428454767] (+0.000015323) vm call: { thread_id = 0 },
%%%     { pid = 309237645459 }, { mfa = "lists:seq/2", args = "(1, 10)",
%%%     info = "true" }
%%% '''
%%% (on one line).  parse/1 turns the output into `#{name, thread, key,
%%% fields}' maps, where `key' is the 64-bit process key and `fields' maps
%%% each field name (binary) to a binary (strings, unescaped) or an integer.
-module(beamprobe_test_lib).

-export([own_pids/1, babeltrace/1, babeltrace/2, babeltrace_ok/1, babeltrace_ok/2,
         parse/1, events/2, events/3,
         field/2, pid_key/2, count/2, has_event/3]).
-export([wait_until/2, wait_ended/2, elapsed_ms/1, sched_times/0,
         sched_times/1, waited_ms/2, timer_waited_ms/2]).
-export([cli/1, cli_ok/1]).
-export([pattern_removed/1, assert_no_trace_state/2, no_pattern/1,
         traced_by_others/0, dir_absent_or_empty/1,
         staged_dirs/1, env_peer/2]).
%% Set-up and the helpers the suites share (imported by them).
-export([require_tracer/0, init_case/2, clear_trace_state/0]).
-export([dir/2, start/1, stop/1, trace/1, one/3, assert_field/3,
         dead_pid/0, wait_dead/1, total/1, dropped/2, remote_pid/0,
         call_args_int/1]).

-include_lib("stdlib/include/assert.hrl").

-type event() :: #{name := binary(), thread := integer(), key := integer(),
                   fields := #{binary() => binary() | integer()}}.
-export_type([event/0]).

%%% ------------------------------------------------------------------------
%%% Suite and case set-up
%%% ------------------------------------------------------------------------

%% @doc For init_per_suite/1: fails unless babeltrace2 is installed;
%% starts beamprobe and loads its NIF.
-spec require_tracer() -> ok.
require_tracer() ->
    case os:find_executable("babeltrace2") of
        false -> ct:fail("babeltrace2 is not installed");
        _ -> ok
    end,
    {ok, _} = application:ensure_all_started(beamprobe),
    {module, beamprobe_nif} = code:ensure_loaded(beamprobe_nif),
    ok.

%% @doc For init_per_testcase/2: every case starts from a node with no
%% session and no trace state, and writes under its own directory
%% (`case_dir' in the returned Config).
-spec init_case(atom(), list()) -> list().
init_case(Case, Config) ->
    ?assertEqual([], beamprobe:list()),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    CaseDir = filename:join(proplists:get_value(priv_dir, Config),
                            atom_to_list(Case)),
    ok = file:make_dir(CaseDir),
    [{case_dir, CaseDir} | Config].

%% @doc For end_per_testcase/2: stops every session and removes every
%% call pattern and trace flag, so that a failed case (or a bug) leaves no
%% trace state for the next.
-spec clear_trace_state() -> ok.
clear_trace_state() ->
    _ = [beamprobe:stop(S) || S <- beamprobe:list()],
    erlang:trace_pattern({'_', '_', '_'}, false, [local]),
    %% One process at a time: the VM's one pass can crash OTP 25.2 while a
    %% process runs on a dirty scheduler (src/beamprobe_each.erl).
    beamprobe_each:trace(all, false, [all]),
    ok.

%%% ------------------------------------------------------------------------
%%% Shared helpers of the suites
%%% ------------------------------------------------------------------------

%% @doc Name under the case's own directory.
-spec dir(list(), string()) -> file:filename().
dir(Config, Name) ->
    filename:join(proplists:get_value(case_dir, Config), Name).

%% @doc Starts a session; fails the case if it cannot.
-spec start(map()) -> pid().
start(Spec) ->
    case beamprobe:start(Spec) of
        {ok, S} -> S;
        Other -> ct:fail({start_failed, Spec, Other})
    end.

%% @doc Stops a session; returns (and logs) its summary.
-spec stop(pid()) -> map().
stop(S) ->
    {ok, Sum} = beamprobe:stop(S),
    ct:log("summary: ~p", [Sum]),
    Sum.

%% @doc The events of the trace in Dir, read by babeltrace2.
-spec trace(file:filename()) -> [event()].
trace(Dir) ->
    parse(babeltrace_ok(Dir)).

%% @doc The only event named Name of P (fails if none or several).
-spec one([event()], string() | binary(), pid() | port()) -> event().
one(Evs, Name, P) ->
    case events(Evs, Name, P) of
        [E] -> E;
        L -> ct:fail({expected_one, Name, P, length(L), L})
    end.

%% @doc Asserts field K of E is V (an integer, or text).
-spec assert_field(event(), string(), integer() | iodata()) -> ok.
assert_field(E, K, V) when is_integer(V) ->
    ?assertEqual({K, V}, {K, field(E, K)});
assert_field(E, K, V) ->
    ?assertEqual({K, iolist_to_binary(V)}, {K, field(E, K)}).

%% @doc A pid of a process that has ended.
-spec dead_pid() -> pid().
dead_pid() ->
    P = spawn(fun() -> ok end),
    Ref = monitor(process, P),
    receive {'DOWN', Ref, process, P, _} -> P end.

%% @doc Waits (at most 10 s) until P has ended.
-spec wait_dead(pid()) -> ok.
wait_dead(P) ->
    Ref = monitor(process, P),
    receive {'DOWN', Ref, process, P, _} -> ok
    after 10000 -> ct:fail({still_alive, P})
    end.

%% @doc A summary's total of dropped events, and one of its counters.
-spec total(map()) -> non_neg_integer().
total(#{dropped := #{total := T}}) -> T.
-spec dropped(map(), atom()) -> non_neg_integer().
dropped(#{dropped := D}, K) -> maps:get(K, D).

%% @doc A pid on another node (for remote_process).
-spec remote_pid() -> pid().
remote_pid() ->
    Node = <<"other@nohost">>,
    binary_to_term(<<131, 88, 119, (byte_size(Node)), Node/binary,
                     0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1>>).

%% @doc The call events' integer argument ("(123)" -> 123).
-spec call_args_int(event()) -> integer().
call_args_int(E) ->
    <<"(", Rest/binary>> = field(E, "args"),
    binary_to_integer(binary:part(Rest, 0, byte_size(Rest) - 1)).

%%% ------------------------------------------------------------------------
%%% babeltrace2
%%% ------------------------------------------------------------------------

%% @doc Runs bin/beamprobe with Args; returns {ExitStatus, Output}
%% (stdout and stderr together).
-spec cli([string()]) -> {integer(), binary()}.
cli(Args) ->
    Bin = filename:join([filename:dirname(filename:dirname(
                                            code:which(beamprobe))),
                         "bin", "beamprobe"]),
    Port = open_port({spawn_executable, Bin},
                     [{args, Args}, exit_status, binary, stream,
                      stderr_to_stdout]),
    cli_collect(Port, []).

cli_collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> cli_collect(Port, [D | Acc]);
        {Port, {exit_status, S}} -> {S, iolist_to_binary(lists:reverse(Acc))}
    after 60000 -> erlang:error(cli_timeout)
    end.

%% @doc Runs bin/beamprobe with Args, fails unless it exits 0; returns
%% its output.
-spec cli_ok([string()]) -> binary().
cli_ok(Args) ->
    case cli(Args) of
        {0, Out} -> Out;
        {N, Out} -> erlang:error({cli_failed, N, Out})
    end.

%% @doc Runs `babeltrace2 Dir'; returns {ExitStatus, Stdout, Stderr}.
-spec babeltrace(file:filename()) -> {integer(), binary(), binary()}.
babeltrace(Dir) ->
    babeltrace(Dir, []).

%% @doc Runs `babeltrace2 Opts... Dir' (e.g. ["--clock-seconds"]).
-spec babeltrace(file:filename(), [string()]) ->
          {integer(), binary(), binary()}.
babeltrace(Dir, Opts) ->
    Bt = case os:find_executable("babeltrace2") of
             false -> erlang:error(babeltrace2_not_found);
             B -> B
         end,
    Err = filename:join(filename:dirname(filename:absname(Dir)),
                        "bt-stderr-" ++ integer_to_list(
                                          erlang:unique_integer([positive]))),
    Sh = os:find_executable("sh"),
    Port = open_port({spawn_executable, Sh},
                     [{args, ["-c", "e=$1; shift; exec \"$@\" 2>\"$e\"",
                              "sh", Err, Bt | Opts ++ [Dir]]},
                      exit_status, binary, stream, use_stdio]),
    {Status, Out} = collect(Port, []),
    {ok, ErrText} = file:read_file(Err),
    ok = file:delete(Err),
    {Status, Out, ErrText}.

collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> collect(Port, [D | Acc]);
        {Port, {exit_status, S}} ->
            {S, iolist_to_binary(lists:reverse(Acc))}
    after 120000 ->
            erlang:error(babeltrace_timeout)
    end.

%% @doc Runs babeltrace2 on Dir, asserts exit status 0, returns stdout.
-spec babeltrace_ok(file:filename()) -> binary().
babeltrace_ok(Dir) ->
    babeltrace_ok(Dir, []).

%% @doc The same with babeltrace2's options Opts before Dir.
-spec babeltrace_ok(file:filename(), [string()]) -> binary().
babeltrace_ok(Dir, Opts) ->
    {Status, Out, Err} = babeltrace(Dir, Opts),
    case Status of
        0 -> Out;
        _ ->
            ct:pal("babeltrace2 ~s exited with ~p:~n~s", [Dir, Status, Err]),
            ?assertEqual({babeltrace2_exit, 0}, {babeltrace2_exit, Status}),
            Out
    end.

%%% ------------------------------------------------------------------------
%%% Parsing babeltrace2's text output
%%% ------------------------------------------------------------------------

%% @doc Every event line of babeltrace2's output, in order.
-spec parse(binary()) -> [event()].
parse(Out) ->
    Lines = binary:split(Out, <<"\n">>, [global, trim_all]),
    [E || L <- Lines, {ok, E} <- [parse_line(L)]].

parse_line(L) ->
    Re = "^\\[[^]]*\\] \\([^)]*\\) vm ([a-z_]+): \\{ thread_id = ([0-9]+) \\},"
         " \\{ pid = ([0-9]+) \\}, \\{ (.*) \\}$",
    case re:run(L, Re, [{capture, all_but_first, binary}]) of
        {match, [Name, Thread, Key, Fields]} ->
            {ok, #{name => Name, thread => binary_to_integer(Thread),
                   key => binary_to_integer(Key),
                   fields => parse_fields(Fields, #{})}};
        nomatch -> nomatch
    end.

parse_fields(<<>>, Acc) -> Acc;
parse_fields(<<", ", Rest/binary>>, Acc) -> parse_fields(Rest, Acc);
parse_fields(Bin, Acc) ->
    [Key, Rest] = binary:split(Bin, <<" = ">>),
    case Rest of
        <<$", Str/binary>> ->
            {Val, Rest1} = string_value(Str, <<>>),
            parse_fields(Rest1, Acc#{Key => Val});
        _ ->
            {Digits, Rest1} = digits(Rest, <<>>),
            parse_fields(Rest1, Acc#{Key => binary_to_integer(Digits)})
    end.

string_value(<<$\\, $n, R/binary>>, Acc) -> string_value(R, <<Acc/binary, $\n>>);
string_value(<<$\\, $t, R/binary>>, Acc) -> string_value(R, <<Acc/binary, $\t>>);
string_value(<<$\\, C, R/binary>>, Acc) -> string_value(R, <<Acc/binary, C>>);
string_value(<<$", R/binary>>, Acc) -> {Acc, R};
string_value(<<C, R/binary>>, Acc) -> string_value(R, <<Acc/binary, C>>).

digits(<<C, R/binary>>, Acc) when C >= $0, C =< $9; C =:= $- ->
    digits(R, <<Acc/binary, C>>);
digits(R, Acc) -> {Acc, R}.

%% @doc The events named Name (e.g. "call").
-spec events([event()], string() | binary()) -> [event()].
events(Evs, Name) ->
    N = iolist_to_binary(Name),
    [E || #{name := EN} = E <- Evs, EN =:= N].

%% @doc The events named Name of process (or port) P, found through the
%% `process' event that gives P's text.
-spec events([event()], string() | binary(), pid() | port()) -> [event()].
events(Evs, Name, P) ->
    Key = pid_key(Evs, P),
    [E || #{key := K} = E <- events(Evs, Name), K =:= Key].

%% @doc A field of an event (binary for strings, integer for numbers).
-spec field(event(), string() | binary()) -> binary() | integer().
field(#{fields := F} = E, Name) ->
    N = iolist_to_binary(Name),
    case maps:find(N, F) of
        {ok, V} -> V;
        error -> erlang:error({no_field, N, E})
    end.

%% @doc The 64-bit key of P from its `process' event (fails if none).
-spec pid_key([event()], pid() | port()) -> integer().
pid_key(Evs, P) ->
    Text = list_to_binary(case P of
                              _ when is_pid(P) -> pid_to_list(P);
                              _ when is_port(P) -> erlang:port_to_list(P)
                          end),
    case lists:usort([K || #{name := <<"process">>, key := K} = E <- Evs,
                           field(E, "pid") =:= Text]) of
        [K] -> K;
        [] -> erlang:error({no_process_event, Text});
        Ks -> erlang:error({several_keys, Text, Ks})
    end.

%% @doc The number of events named Name.
-spec count([event()], string() | binary()) -> non_neg_integer().
count(Evs, Name) -> length(events(Evs, Name)).

%% @doc True if an event named Name has every field of Fields
%% ([{Field, Value}], values as strings, binaries or integers).
-spec has_event([event()], string() | binary(),
                [{string(), string() | binary() | integer()}]) -> boolean().
has_event(Evs, Name, Fields) ->
    Want = [{iolist_to_binary(K), norm(V)} || {K, V} <- Fields],
    lists:any(fun(#{fields := F}) ->
                      lists:all(fun({K, V}) -> maps:get(K, F, undefined) =:= V
                                end, Want)
              end, events(Evs, Name)).

norm(V) when is_integer(V) -> V;
norm(V) -> iolist_to_binary(V).

%%% ------------------------------------------------------------------------
%%% Waiting
%%% ------------------------------------------------------------------------

%% @doc Polls F every 5 ms until it returns true; returns the elapsed ms,
%% or fails after Timeout ms.
-spec wait_until(fun(() -> boolean()), non_neg_integer()) -> integer().
wait_until(F, Timeout) ->
    T0 = erlang:monotonic_time(millisecond),
    wait_until(F, T0, T0 + Timeout).

wait_until(F, T0, Deadline) ->
    case F() of
        true -> erlang:monotonic_time(millisecond) - T0;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> erlang:error({timeout, F});
                false ->
                    timer:sleep(5),
                    wait_until(F, T0, Deadline)
            end
    end.

%% @doc Waits until session S has ended by itself (info/1 returns the
%% final summary, which has no `config'); returns elapsed ms.
-spec wait_ended(pid(), non_neg_integer()) -> integer().
wait_ended(S, Timeout) ->
    wait_until(fun() ->
                       case beamprobe:info(S) of
                           {ok, M} -> not maps:is_key(config, M);
                           {error, not_found} -> true
                       end
               end, Timeout).

%% @doc Milliseconds since T0 (erlang:monotonic_time(millisecond)).
-spec elapsed_ms(integer()) -> integer().
elapsed_ms(T0) -> erlang:monotonic_time(millisecond) - T0.

%% @doc Each thread of this OS process: `{Tid, Name} => {Run, Wait}', the
%% ns it spent on a CPU and runnable but waiting for one so far
%% (/proc/self/task/T/schedstat).  See waited_ms/2.
-spec sched_times() -> #{{string(), binary()} =>
                             {non_neg_integer(), non_neg_integer()}}.
sched_times() ->
    sched_times("self").

%% @doc sched_times/0 of another OS process of this machine, by its pid
%% (os:getpid/0 there: e.g. a target node's).
-spec sched_times(string()) -> #{{string(), binary()} =>
                                     {non_neg_integer(), non_neg_integer()}}.
sched_times(OsPid) ->
    Dir = "/proc/" ++ OsPid ++ "/task/",
    Ts = case file:list_dir(Dir) of
             {ok, L} -> L;
             {error, _} -> []                   % the process is gone
         end,
    maps:from_list(
      [{{T, string:trim(C)}, {binary_to_integer(R), binary_to_integer(W)}}
       || T <- Ts,
          {ok, St} <- [file:read_file(Dir ++ T ++ "/schedstat")],
          {ok, C} <- [file:read_file(Dir ++ T ++ "/comm")],
          [R, W | _] <- [binary:split(string:trim(St), <<" ">>, [global])]]).

%% @doc Between two sched_times/0 readings: how long (ms) the node's work
%% waited for a CPU that other processes of the machine had -- the least
%% any of its busy threads (at least a quarter of the busiest one's CPU
%% time) spent runnable but not running, 0 on a quiet machine -- and
%% `{Name, RunMs, WaitMs}' of each thread that ran.  A time the node
%% promises ("within 1 s") is its elapsed time less that wait: a loaded
%% CI machine made 0.4-0.7 s of work take 1.2-2.5 s.
-spec waited_ms(map(), map()) ->
          {non_neg_integer(), [{binary(), integer(), integer()}]}.
waited_ms(Before, After) ->
    Threads = [{Name, (R1 - R0) div 1000000, (W1 - W0) div 1000000}
               || {{_, Name} = T, {R1, W1}} <- maps:to_list(After),
                  {R0, W0} <- [maps:get(T, Before, {0, 0})],
                  R1 > R0],
    Max = lists:max([0 | [Run || {_, Run, _} <- Threads]]),
    Waited = case [W || {_, Run, W} <- Threads, Run > 0, Run >= Max div 4] of
                 [] -> 0;
                 Ws -> lists:min(Ws)
             end,
    {Waited, Threads}.

%% @doc Between two sched_times/0 readings, for a stretch that is mostly
%% waiting for timers (a watchdog's tick, a stop's timeout) rather than
%% work: how long (ms) the node's normal schedulers waited for a CPU that
%% other processes of the machine had -- the most any of them waited, 0
%% on a quiet machine (an idle scheduler sleeps, which is not waiting) --
%% and `{Name, RunMs, WaitMs}' of each thread that ran.  waited_ms/2 (the
%% least wait of the busy threads) suits work; here the threads hardly
%% run: a loaded machine made a 500 ms tick report after 1,217 ms, its
%% schedulers runnable but not running for up to 1,219 ms of it while an
%% aux thread that ran 1 ms waited 25 ms.  A thread's wait is counted
%% when it gets a CPU, so a wait begun before `Before' may be counted
%% whole: callers take at most the elapsed time (min/2).
-spec timer_waited_ms(map(), map()) ->
          {non_neg_integer(), [{binary(), integer(), integer()}]}.
timer_waited_ms(Before, After) ->
    {_, Threads} = waited_ms(Before, After),
    Scheds = [(W1 - W0) div 1000000
              || {{_, Name} = T, {_, W1}} <- maps:to_list(After),
                 {_, W0} <- [maps:get(T, Before, {0, 0})],
                 re:run(Name, "^[0-9]+_scheduler$") =/= nomatch],
    {lists:max([0 | Scheds]), Threads}.

%%% ------------------------------------------------------------------------
%%% Trace state of the node
%%% ------------------------------------------------------------------------

%% @doc True if no trace pattern is set on MFA.
-spec no_pattern({module(), atom(), arity()}) -> boolean().
no_pattern(MFA) ->
    case erlang:trace_info(MFA, all) of
        {all, false} -> true;
        {all, L} when is_list(L) ->
            proplists:get_value(traced, L) =:= false andalso
                proplists:get_value(match_spec, L, false) =:= false
                andalso proplists:get_value(meta, L, false) =:= false;
        _ -> false
    end.

%% @doc Asserts no pattern is set on any of MFAs ({M,'_','_'} is expanded
%% to every function of M).
-spec pattern_removed([{atom(), atom(), arity() | '_'}]) -> ok.
pattern_removed(MFAs) ->
    All = lists:append([expand(MFA) || MFA <- MFAs]),
    Left = [{MFA, erlang:trace_info(MFA, all)} || MFA <- All,
                                                 not no_pattern(MFA)],
    ?assertEqual([], Left),
    ok.

expand({M, F, A}) when is_atom(M), M =/= '_' ->
    case code:is_loaded(M) of
        false -> [];
        _ ->
            [{M, Fn, Ar} || {Fn, Ar} <- M:module_info(functions),
                            F =:= '_' orelse F =:= Fn,
                            A =:= '_' orelse A =:= Ar]
    end;
expand(_) -> [].

%% @doc Asserts: no trace flags on Pids (those alive), none for new
%% processes/ports, no pattern on MFAs.
-spec assert_no_trace_state([pid()], [{atom(), atom(), arity() | '_'}]) -> ok.
assert_no_trace_state(Pids, MFAs) ->
    Flags = [{P, F} || P <- Pids, {flags, F} <- [erlang:trace_info(P, flags)],
                       F =/= []],
    ?assertEqual([], Flags),
    Tracers = [{P, T} || P <- Pids, {tracer, T} <- [erlang:trace_info(P, tracer)],
                         T =/= []],
    ?assertEqual([], Tracers),
    ?assertEqual({flags, []}, erlang:trace_info(new, flags)),
    ?assertEqual({flags, []}, erlang:trace_info(new_processes, flags)),
    ?assertEqual({flags, []}, erlang:trace_info(new_ports, flags)),
    pattern_removed(MFAs).

%% @doc Processes and ports traced by some tracer now.
-spec traced_by_others() -> [pid() | port()].
traced_by_others() ->
    [P || P <- processes() ++ erlang:ports(),
          case erlang:trace_info(P, tracer) of
              {tracer, []} -> false;
              undefined -> false;
              _ -> true
          end].

%% @doc Starts a linked peer node that has beamprobe's and Suite's code,
%% with Env (`[{Name, Value}]') in its environment.
-spec env_peer(module(), [{string(), string()}]) -> {pid(), node()}.
env_peer(Suite, Env) ->
    Paths = lists:append([["-pa", filename:dirname(code:which(M))]
                          || M <- [beamprobe, Suite]]),
    {ok, Peer, Node} = peer:start_link(#{name => peer:random_name(Suite),
                                         args => Paths, env => Env}),
    {Peer, Node}.

%% @doc The staging directories of cluster sessions on Node
%% (beamprobe_cluster: `beamprobe-cluster-<Id>-<Node>' in its /tmp).
-spec staged_dirs(node()) -> [string()].
staged_dirs(Node) ->
    lists:sort(erpc:call(Node, filelib, wildcard,
                         ["/tmp/beamprobe-cluster-*-" ++ atom_to_list(Node)])).

%% @doc True if Dir does not exist or is an empty directory.
-spec dir_absent_or_empty(file:filename()) -> boolean().
dir_absent_or_empty(Dir) ->
    case file:list_dir(Dir) of
        {error, enoent} -> true;
        {ok, []} -> true;
        _ -> false
    end.

%% @doc The processes session S started for itself (watchdog, sampler,
%% handlers) as the janitor records them: beamprobe's own processes are
%% `sensitive', so process_info/2 no longer shows their proc_lib initial
%% call (their dictionary reads as empty).
-spec own_pids(pid()) -> [pid()].
own_pids(S) ->
    St = sys:get_state(beamprobe_janitor),
    Sessions = element(2, St),
    lists:append([maps:get(handlers, E, []) ++ maps:get(own, E, [])
                  || #{pid := P} = E <- maps:values(Sessions), P =:= S]).
