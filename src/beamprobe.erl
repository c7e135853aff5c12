%%% @doc beamprobe: production-safe, high-throughput tracing for the BEAM.
%%%
%%% A session traces function calls and process events of some processes
%%% with a tracer written in C: each event is written by the traced process
%%% itself into a per-thread lock-free ring (no message, no lock, no
%%% allocation), and a collector thread writes the rings out as a CTF 1.8
%%% trace directory that `beamprobe print', babeltrace2 and Trace Compass
%%% read.
%%%
%%% ```
%%% 1> {ok, S} = beamprobe:start(#{calls => [{lists, seq, 2}], return => true,
%%%                                 output => {file, "/tmp/seq"}}).
%%% {ok,<0.93.0>}
%%% 2> lists:seq(1, 3).
%%% [1,2,3]
%%% 3> beamprobe:stop(S).
%%% {ok,#{bytes => 1020,dropped => #{total => 0,...},events => 2,
%%%       output => "/tmp/seq",seconds => 3.2,...}}
%%% '''
%%%
%%% ```
%%% traced processes ── tracer callbacks (C) ── per-thread rings
%%%                                               │
%%%             collector thread ── DIR/metadata, DIR/thread-NNN (CTF 1.8)
%%% this API ── session process (limits, timers, owner monitor) ── NIF
%%% '''
%%%
%%% Safe by default: return values and exceptions are traced only when
%% asked (`return', `exceptions': asking costs a stack frame per traced
%% call until it returns, which a tail-recursive loop never does); a
%% session ends after 60 seconds or 1 GiB written
%%% unless told otherwise (`limits'), never takes over a process another
%%% tracer traces (`force'), refuses to trace every module (`force'), and
%%% ends when the process that started it dies.  Memory is bounded by
%%% `buffer' bytes per scheduler thread that produces events; when a
%%% buffer is full, events are dropped and counted (`overflow').
-module(beamprobe).

-export([start/1, stop/1, info/1, list/0, dump/1, format_error/1]).
-export([calls/2, calls/3, messages/2, messages/3, clear/0]).
-export([start_matched/1]).
-export([annotate/1, annotate/2]).
-export([profile/2]).

-export_type([spec/0, session/0, summary/0]).

-opaque session() :: pid().
%% A running (or just stopped) session.

-type spec() ::
        #{procs => all | new | existing | [pid() | atom()],  % all
          calls => [mfa_pattern() | {mfa_pattern(), true | list()}], % []
          messages => [{send | 'receive', true | list()}], % []
          return => boolean(),           % false: return_from events
          exceptions => boolean(),       % false: exception_from events
          return_to => boolean(),        % false: return_to events
          events => [call | send | 'receive' | procs | running | gc
                     | ports],           % []
          output => sink() | [sink()],   % {file, "./beamprobe-NODE-TIME"}
          args => none | arity | full,   % full (bounded capture)
          capture => #{depth => pos_integer(),      % 4
                       list => pos_integer(),       % 16
                       binary => non_neg_integer(), % 64 bytes
                       bytes => pos_integer()},     % 512 bytes per term
          buffer => pos_integer(),       % 8 MiB per producing thread
          overflow => drop_newest | drop_oldest | stop, % drop_newest
          limits => #{events => pos_integer() | infinity,  % infinity
                      bytes => pos_integer() | infinity,   % 1 GiB
                      seconds => number() | infinity,      % 60
                      rate => {pos_integer(), pos_integer()} | infinity},
          on_rate => drop | stop,        % drop: rate surplus dropped
          meta => boolean(),             % false: meta-trace the calls
          tag => term(),                 % undefined: a label for list/info
          force => boolean()}.           % false
%% What to trace and how; every key is optional (defaults on the right).
%%
%% `return' and `exceptions' are off unless asked: they install
%% `return_trace'/`exception_trace', which keep a stack frame per traced
%% call until it returns.  A traced function called as the tail of a loop
%% that never returns (a gen_server loop, a `loop/1') then grows the
%% process's stack by a frame per iteration for as long as the process
%% runs, even after the session stops.  Ask for them on functions that
%% return, never on a loop function: per pattern, with a match spec such
%% as `{{M, F, A}, [{'_', [], [{exception_trace}]}]}' (its events are
%% recorded whatever `return' and `exceptions' say).

-type mfa_pattern() :: {module() | '_', atom() | '_', arity() | '_'}.
-type sink() :: {file, file:filename()}
              | {file, file:filename(), #{events => all | [atom()]}}
              | {handler, module(), term()}
              | {handler, module(), term(), map()}
              | usdt
              | {usdt, #{events => all | [atom()]}}.
%% Where events go: CTF files, or an Erlang handler (beamprobe_handler)
%% with options `events', `procs', `batch', `credits', `overflow', or
%% the USDT probes of the NIF (`usdt': the events of the kinds in
%% `events' fire their probe when a tool is attached, docs/usdt.md).

-type summary() ::
        #{events := non_neg_integer(),
          dropped := #{total := non_neg_integer(), atom() => non_neg_integer()},
          bytes := non_neg_integer(),
          seconds := number(),
          output := file:filename() | [{handler, module()} | usdt],
          stop_reason := atom(),
          atom() => term()}.
%% What a session recorded: `events' written, `dropped' by cause
%% (ring_full, overwritten, limit, stopped, ...), bytes written; and
%% `handlers', per handler sink, `#{delivered, dropped, in_flight}':
%% events in batches the handler acknowledged, events lost (no credit,
%% handler dead), and events in batches sent but not yet acknowledged when
%% the summary was taken (a live handler still handles them); the three
%% add up to the events given to the handler.

%% @doc Starts a tracing session owned by the calling process.
%%
%% Sessions overlap freely: several may trace the same processes and
%% functions, each receiving exactly the events it asked for
%% (docs/design.md, "Sessions that overlap").
%%
%% Returns `{error, Reason}' (see {@link format_error/1}) for any bad input:
%% an unknown option or value, a dead pid or unknown registered name, a
%% module that does not exist, a pattern that matches nothing, an
%% unwritable or non-empty output directory, named processes already
%% traced by another tracer (`{already_traced, Pids}', unless `force =>
%% true'; `procs => all' leaves them alone), or what cannot run next to
%% another session (`{cannot_combine, MFA, Why}', `{conflict, Session,
%% What}'). Nothing stays installed after an error.
-spec start(spec()) -> {ok, session()} | {error, term()}.
start(Spec) ->
    case start_matched(Spec) of
        {ok, S, _Matched} -> {ok, S};
        {error, _} = E -> E
    end.

%% @private
%% start/1 that also returns how many functions the patterns matched, as
%% the session counted them when it installed them (the shell API: its
%% session may have ended before anyone could ask info/1).
-spec start_matched(spec()) ->
          {ok, session(), non_neg_integer()} | {error, term()}.
start_matched(Spec) ->
    case nif_loaded() of
        ok -> start_app(Spec);
        {error, _} = E -> E
    end.

%% The C library first: without it nothing else can work, and the error
%% says where it was looked for.
nif_loaded() ->
    try beamprobe_nif:loaded()
    catch error:undef ->
            {error, {nif_not_loaded, code:where_is_file("beamprobe_nif.beam"),
                     module_not_found}}
    end.

start_app(Spec) ->
    case application:ensure_all_started(beamprobe) of
        {ok, _} ->
            case beamprobe_config:validate(Spec) of
                {ok, Config} -> start_session(Config);
                {error, _} = E -> E
            end;
        {error, _} = E -> E
    end.

start_session(Config) ->
    case beamprobe_sup:start_session(self(), Config) of
        {ok, Pid} ->
            try gen_server:call(Pid, install, infinity) of
                {error, _} = E -> gone(Pid), E;
                Ok -> Ok
            catch exit:{Reason, _} -> {error, {session_failed, Reason}}
            end;
        {error, _} = E -> E
    end.

%% @doc Stops a session: removes its trace flags and patterns, writes what
%% is buffered and returns the summary.  Anything that is not a running
%% (or ended, not yet stopped) session of this node, an unrelated pid
%% included, is `{error, not_found}' and is left alone.
-spec stop(session() | pid()) -> {ok, summary()} | {error, not_found}.
stop(Session) ->
    case call(Session, stop) of
        {ok, _} = Ok -> gone(Session), Ok;
        Other -> Other
    end.

%% @doc Counters and configuration of a running session.
-spec info(session() | pid()) -> {ok, map()} | {error, term()}.
info(Session) ->
    call(Session, info).

%% @doc The running sessions.
-spec list() -> [session()].
list() ->
    case whereis(beamprobe_sup) of
        undefined -> [];
        _ -> beamprobe_sup:sessions()
    end.

%% @doc Writes a flight recorder's window (`overflow => drop_oldest') to
%% the trace now; recording goes on.
-spec dump(session() | pid()) ->
          ok | {error, not_flight_recorder | stopped | not_found
                | {nif_error, term()}}.
dump(Session) ->
    call(Session, dump).

%% @doc Traces calls matching `Pattern' (or a list of patterns) in every
%% process and prints them in this shell, one line each; returns how many
%% functions the patterns matched.  Same as `calls(Pattern, Limit, #{})'.
%%
%% ```
%% 1> beamprobe:calls("lists:seq(A, B) when A > B -> return", 10).
%% 1
%% 12:00:01.123456 <0.90.0> call lists:seq(5, 1)
%% 12:00:01.123470 <0.90.0> returned from lists:seq/2 -> []
%% '''
%% `Limit' is `N' (stop after N events) or `{N, Ms}' (at most N events per
%% Ms window: the surplus is dropped where it happens, before any message
%% exists, and reported as `dropped N events' lines).  The session also
%% ends after 15 seconds.  Patterns: see beamprobe_pattern (redbug's
%% syntax, and Elixir's: `"Mod.fun(a) when a > 1 :: return"').
-spec calls(string() | binary() | [string() | binary()],
            pos_integer() | {pos_integer(), pos_integer()}) ->
          non_neg_integer() | {error, term()}.
calls(Pattern, Limit) ->
    calls(Pattern, Limit, #{}).

%% @doc {@link calls/2} with options: `procs' (`all', the default, or a
%% list of pids and names), `time' (ms, default 15000), `return' (add
%% return values and exceptions to every pattern), `args' (capture depth,
%% default 4), `timestamp' (`time', `ns' or `none'), `io_server' (where to
%% print; default the caller's group leader, so a remote shell works),
%% `on_rate' (`drop', the default, or `stop'), `output' (more sinks, e.g.
%% `[{file, Dir}]'), `force' (allow patterns refused as dangerous).
%% Return values are traced only where asked (`-> return' in a pattern, or
%% `return => true'): on a function a loop tail-calls, that makes the
%% loop's stack grow while traced (see {@link spec()}).
-spec calls(string() | binary() | [string() | binary()],
            pos_integer() | {pos_integer(), pos_integer()}, map()) ->
          non_neg_integer() | {error, term()}.
calls(Pattern, Limit, Opts) ->
    case nif_loaded() of
        ok -> beamprobe_shell:calls(Pattern, Limit, Opts);
        {error, _} = E -> E
    end.

%% @doc Traces messages sent or received matching `Pattern' (`"send"',
%% `"'receive'"', `"send({ping, _})"', ...) and prints them; see
%% {@link calls/2}.  Returns the number of patterns installed.
-spec messages(string() | binary() | [string() | binary()],
               pos_integer() | {pos_integer(), pos_integer()}) ->
          non_neg_integer() | {error, term()}.
messages(Pattern, Limit) ->
    messages(Pattern, Limit, #{}).

%% @doc {@link messages/2} with the options of {@link calls/3}.
-spec messages(string() | binary() | [string() | binary()],
               pos_integer() | {pos_integer(), pos_integer()}, map()) ->
          non_neg_integer() | {error, term()}.
messages(Pattern, Limit, Opts) ->
    case nif_loaded() of
        ok -> beamprobe_shell:messages(Pattern, Limit, Opts);
        {error, _} = E -> E
    end.

%% @doc Stops every session started by {@link calls/2}, {@link calls/3},
%% {@link messages/2} or {@link messages/3}.
-spec clear() -> ok.
clear() ->
    beamprobe_shell:clear().

%% @doc Counts calls and time per function with the VM's own counters
%% (`call_count', `call_time') instead of events, for a bounded time, and
%% prints the table `bin/beamprobe stats' prints (calls, own, mean per
%% function; the columns only events give are `-', and one line says so).
%% Costs less per call than any tracer (docs/performance.md).
%%
%% ```
%% 1> beamprobe:profile("lists:seq/2", #{time => 2000}).
%% Profile: 1 functions called, 101 calls, own time 1.234ms over 2.000123s; sorted by own
%%      calls      total        own       mean        max        p50        p99   open  function
%%        101          -    1.234ms   12.217us          -          -          -      -  lists:seq/2
%% '''
%% `Patterns': a pattern of {@link calls/2} (without guards, literal
%% arguments or actions: counters count every call) or `{M, F, A}' (`'_'
%% allowed), or a list of them.  Options: `time' (ms, default 5000, at
%% most an hour), `timing' (default `true': also `call_time', which needs
%% the `call' flag on the processes nobody else traces; `false': counts
%% only, cheapest), `per_process' (time per process too), `procs' (`all'
%% or a list of pids to time), `sort' (`own', `calls', `mean'), `top',
%% `json' (return and print the JSON text of `stats --json''s function
%% entries), `print' (default `true'), `io_server' (default the caller's
%% group leader), `max_functions' (10000), `force' (allow a `'_'' module,
%% more than `max_functions', and skip, without touching, functions whose
%% counters another tool holds instead of refusing).  Everything set is
%% removed at the end, also when the caller dies meanwhile; trace
%% patterns of running sessions are left as they are.
-spec profile(term(), map()) ->
          {ok, beamprobe_profile:result() | binary()} | {error, term()}.
profile(Patterns, Opts) ->
    beamprobe_profile:profile(Patterns, Opts).

%% @doc A readable sentence for an error returned by this module.
-spec format_error(term()) -> string().
format_error({nif_not_loaded, Path, Why}) ->
    lists:flatten(
      io_lib:format("beamprobe's C library is not loaded: looked for ~ts "
                    "(~tp); build it with make, put the application's priv/ "
                    "next to its ebin/, or set BEAMPROBE_NIF to the library's "
                    "path without .so", [Path, Why]));
format_error(Reason) ->
    beamprobe_config:format_error(Reason).

%% Only a beamprobe session is ever called: any other pid (an unrelated
%% gen_server would stop on `stop') is `{error, not_found}'.
call(Session, Req) when is_pid(Session) ->
    case is_session(Session) of
        true ->
            try gen_server:call(Session, Req, 60000)
            catch exit:{noproc, _} -> {error, not_found};
                  exit:{normal, _} -> {error, not_found};
                  exit:{shutdown, _} -> {error, not_found}
            end;
        false -> {error, not_found}
    end;
call(_, _) ->
    {error, not_found}.

%% Waits (at most 5 s) until a session that replied for the last time has
%% exited, so that list/0 no longer shows it when stop/1 or a failed
%% start/1 returns.
gone(Pid) ->
    Ref = monitor(process, Pid),
    receive {'DOWN', Ref, process, _, _} -> ok
    after 5000 -> demonitor(Ref, [flush]), ok
    end.

is_session(Pid) ->
    node(Pid) =:= node() andalso lists:member(Pid, list()).

%% @doc Annotates the calling process's trace with `Term' (tag
%% `undefined'): see annotate/2.
-spec annotate(term()) -> ok.
annotate(Term) -> annotate(undefined, Term).

%% @doc The `dyntrace:p' of beamprobe: writes an `annotation' event
%% (`Tag' and `Term' rendered like any term, cut by the capture limits)
%% into every session tracing the calling process, and fires the USDT
%% probe `beamprobe:annotate' (docs/usdt.md).  Costs one NIF call that
%% returns at once when no session runs and no tool is attached; never
%% fails (`ok' also when the NIF is not loaded).
-spec annotate(term(), term()) -> ok.
annotate(Tag, Term) ->
    try beamprobe_nif:user_annotate(Tag, Term)
    catch error:_ -> ok
    end.
