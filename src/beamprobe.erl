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
%%% unless told otherwise (`limits'), never takes a process or a trace
%%% pattern from another tool (dbg, recon_trace, redbug: it traces the
%%% rest and lists what it skipped, `info/1' key `skipped'; `force'
%%% takes them), reports within a second when another tool removes or
%%% replaces its patterns or flags (`info/1' key `tampered', a `tampered'
%%% event; beamprobe_watch), refuses to trace every module (`force'), and
%%% ends when the process that started it dies.  Memory is bounded by
%%% `buffer' bytes per scheduler thread that produces events; when a
%%% buffer is full, events are dropped and counted (`overflow').
-module(beamprobe).

-export([start/1, stop/1, info/1, list/0, dump/1, format_error/1]).
-export([calls/2, calls/3, messages/2, messages/3, clear/0, help/0]).
-export([start_matched/1, start_matched/2, stop_as/2]).
-export([annotate/1, annotate/2, annotate_nif/2]).
-export([profile/2]).

-export_type([spec/0, session/0, summary/0]).

-opaque session() :: pid().
%% A running (or just stopped) session.

-type spec() ::
        #{procs => all | new | existing | [pid() | atom()],  % all
          exclude => [pid() | atom()],   % []: processes not recorded
          calls => [mfa_pattern() | {mfa_pattern(), true | list()}], % []
          messages => [{send | 'receive', true | list()}], % []
          return => boolean(),           % false: return_from events
          exceptions => boolean(),       % false: exception_from events
          return_to => boolean(),        % false: return_to events
          events => [call | send | 'receive' | procs | running | gc
                     | ports | annotation], % []
          output => sink() | [sink()]    % {file, "./beamprobe-NODE-TIME"}
                    | {streams, #{node() => sink()}}, % nodes: one each
          args => none | arity | full,   % full (bounded capture)
          capture => #{depth => pos_integer(),      % 4
                       list => pos_integer(),       % 16
                       binary => non_neg_integer(), % 64 bytes
                       bytes => pos_integer()},     % 512 bytes per term
          buffer => pos_integer(),       % 8 MiB per producing thread
          overflow => drop_newest | drop_oldest | stop, % drop_newest
          limits => #{events => pos_integer() | infinity,  % infinity;
                                  % counts events lost to a full buffer too
                      bytes => pos_integer() | infinity,   % 1 GiB; the
                                  % trace files never pass it, the
                                  % events that would: `limit' losses
                      seconds => number() | infinity,      % 60
                      rate => {pos_integer(), pos_integer()} | infinity},
          on_rate => drop | stop,        % drop: rate surplus dropped;
                                         % stop needs limits.rate
          meta => boolean(),             % false: meta-trace the calls
          tag => term(),                 % undefined: a label for list/info
          force => boolean(),            % false: leave other tools' own
          on_tamper => report | reinstall, % report (beamprobe_watch)
          monitor => #{long_gc => pos_integer(),       % ms
                       long_schedule => pos_integer(), % ms
                       large_heap => pos_integer(),    % words
                       busy_port => boolean(),
                       busy_dist_port => boolean()},   % none: no reports
          nodes => [node()],             % this node only: a session per
                                         % listed node (beamprobe_cluster)
          sample => #{interval => pos_integer(),       % 1000 ms, >= 10
                      what => [run_queues | memory | scheduler_utilization
                               | process_count | message_queues_top
                               | {message_queues_top, pos_integer()}]}}.
                                         % none: no samples
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
%%
%% `exclude' names processes (pids or registered names, alive now) this
%% session does not record, whatever `procs' says; other sessions on the
%% same processes still record them (a shell trace leaves out the io
%% server it prints to this way: its own output would feed it).
%%
%% `monitor' writes the VM's system monitor reports as `monitor' events
%% (the one system monitor of the node is shared by the sessions:
%% beamprobe_monitor; `{error, {system_monitor_taken, Pid}}' when another
%% tool holds it, unless `force => true'); `sample' writes counter samples
%% as `sample' events (beamprobe_sampler).  docs/tutorial.md, section 18.
%%
%% `nodes' starts one session per listed node (this one included only if
%% listed) and returns one handle that {@link stop/1} and {@link info/1}
%% take; the traces end up in `Dir/<node>/' of `output => {file, Dir}' on
%% this node with their clock offsets (beamprobe_cluster;
%% `bin/beamprobe cluster Dir' reads them as one; docs/tutorial.md,
%% section 22), or, with `output => {streams, #{Node => {tcp, ...}}}',
%% each node streams to its own receiver and the summary gives each
%% node's clock offsets as metadata env lines (`clock_env').  Each node's
%% session excludes the `exclude' pids of its node and the names
%% registered there (a name registered on no node: `no_such_process').

-type mfa_pattern() :: {module() | '_', atom() | '_', arity() | '_'}.
-type sink() :: {file, file:filename()}
              | {file, file:filename(), #{events => all | [atom()]}}
              | {handler, module(), term()}
              | {handler, module(), term(), map()}
              | lttng | {lttng, #{events => all | [atom()]}}
              | usdt | {usdt, #{events => all | [atom()]}}
              | {tcp, tcp_address()}
              | {tcp, tcp_address(), #{events => all | [atom()],
                                       remote => boolean(),
                                       queue => pos_integer(),
                                       token => binary()}}.
-type tcp_address() :: string() | binary()
                     | {inet:ip_address() | string(), inet:port_number()}.
%% Where events go: CTF files, an Erlang handler (beamprobe_handler)
%% with options `events', `procs', `batch', `credits', `overflow',
%% LTTng-UST tracepoints of provider `beamprobe' (beamprobe_lttng;
%% `{error, {lttng_unavailable, Why}}' where that cannot run;
%% docs/tutorial.md, section 19), or the USDT probes of the NIF (`usdt':
%% the events of the kinds in `events' fire their probe when a tool is
%% attached, docs/usdt.md), or a TCP stream (`{tcp, "127.0.0.1:9100"}'):
%% the trace's packets, unchanged, to `beamprobe receive' or `attach'
%% (docs/format.md, "Stream"); loopback addresses only unless `remote =>
%% true'; a receiver that cannot keep up makes the sink drop whole packets
%% at the source once its `queue' (bytes, 8 MiB) is full, counted in the
%% summary (`dropped' key `stream', and `stream' counters); `token' (up to
%% 256 bytes): both ends prove they know it before anything is sent (a
%% challenge and an HMAC-SHA-256 each way; the token itself is never
%% sent), for a receiver started with `--token-file' (attach makes and
%% checks one by itself); a receiver that cannot prove it gets nothing but
%% a nonce, counted in the `stream' map's `auth_failures' (the last reason
%% in `auth_failure').

-type summary() ::
        #{events := non_neg_integer(),
          dropped := #{total := non_neg_integer(), atom() => non_neg_integer()},
          bytes := non_neg_integer(),
          seconds := number(),
          output := file:filename() | [{handler, module()} | usdt],
          stop_reason := atom(),
          atom() => term()}.
%% What a session recorded: `events' written, `dropped' by cause
%% (ring_full, overwritten, limit, stopped, ...; `total' counts an event
%% lost by both a file sink and a TCP stream once, under the files'
%% cause, `stream' being the stream's losses of events the files hold),
%% bytes written; with a TCP stream, `lost_by_sink' (`#{file => N, tcp
%% => N}'): the events each sink's trace lacks; and
%% `handlers', per handler sink, `#{delivered, dropped, in_flight,
%% slow_output, handler_down}': events in batches the handler
%% acknowledged, events lost (`dropped', by cause: `slow_output', batches
%% dropped for want of a credit, the handler too slow; `handler_down',
%% lost with a handler that crashed or was killed), and events in batches
%% sent but not yet acknowledged when the summary was taken (a live
%% handler still handles them); delivered, dropped and in_flight add up to
%% the events given to the handler.  stop/1 returns the account once the
%% handlers have ended (the batches a handler never handled, being killed
%% or crashed, are then `dropped', `handler_down': `in_flight' is 0 unless
%% the handler is the caller); info/1 of a session that ended by itself
%% too, once they have ended.

%% @doc Starts a tracing session owned by the calling process.
%%
%% Sessions overlap freely: several may trace the same processes and
%% functions, each receiving exactly the events it asked for
%% (docs/design.md, "Sessions that overlap").
%%
%% Returns `{error, Reason}' (see {@link format_error/1}) for any bad input:
%% an unknown option or value, a dead pid or unknown registered name, a
%% module that does not exist, a pattern that matches nothing, an
%% unwritable or non-empty output directory, nothing left to trace once
%% what another tool holds is left to it (`{already_traced, What}': every
%% listed process, `new', or every function of a meta session; `force =>
%% true' takes them), listed processes no trace can see
%% (`{untraceable, [{Pid, sensitive}]}': every listed process is
%% `sensitive', process_flag/2, as beamprobe's own processes are; with
%% others left, they are listed under `skipped' key `untraceable'; when
%% the others are all another tool's, every listed process with its
%% reason, `{untraceable, [{Pid, sensitive | already_traced}]}'), or
%% what cannot run next to another beamprobe session
%% (`{cannot_combine, MFA, Why}', `{conflict, Session, What}').  Nothing
%% stays installed after an error.  `events => [annotation]' alone is a
%% session of annotations only ({@link annotate/2}): it sets no flag.
%%
%% Sessions overlap freely: each receives exactly the events it asked for
%% (docs/design.md, "Sessions that overlap").  What another tool holds is
%% skipped, not refused: processes it traces, functions it has a trace
%% pattern on (meta: a meta pattern); `info/1' and the summary list them
%% (`skipped => #{procs, procs_count, calls, untraceable}'), and what
%% another tool later
%% removes or replaces is reported there too (`tampered',
%% `tampered_count'), in the trace (`tampered' events) and by the shell
%% printer, as is a removed pattern beamprobe sets again (`restored': a
%% session naming the function started, or `on_tamper => reinstall')
%% (beamprobe_skip and beamprobe_watch have the details and limits).
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
    start_matched(Spec, self()).

%% @private
%% start_matched/1 for a session owned by `Owner' (it ends when Owner
%% exits): the shell API gives the shell's group leader, so that a crash
%% of the evaluator does not end the trace.
-spec start_matched(spec(), pid()) ->
          {ok, session(), non_neg_integer()} | {error, term()}.
start_matched(Spec, Owner) when is_pid(Owner) ->
    case nif_loaded() of
        ok when is_map(Spec), is_map_key(follow, Spec),
                not is_map_key(nodes, Spec) ->
            case application:ensure_all_started(beamprobe) of
                {ok, _} ->
                    case beamprobe_follow:start(Spec, Owner) of
                        {ok, H} -> {ok, H, 0};
                        {error, _} = E -> E
                    end;
                {error, _} = E -> E
            end;
        ok when is_map(Spec), is_map_key(nodes, Spec) ->
            %% A follow spec is checked here, once, before any node.
            Follow = case Spec of
                         #{follow := _} ->
                             beamprobe_follow:check(maps:remove(nodes, Spec));
                         #{} -> {ok, #{}}
                     end,
            case Follow of
                {error, _} = FE -> FE;
                {ok, _} -> start_cluster(Spec, Owner)
            end;
        ok -> start_app(Spec, Owner);
        {error, _} = E -> E
    end.

start_cluster(Spec, Owner) ->
    case application:ensure_all_started(beamprobe) of
        {ok, _} ->
            case beamprobe_cluster:start(Spec, Owner) of
                {ok, H} -> {ok, H, 0};
                {error, _} = E -> E
            end;
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

start_app(Spec, Owner) ->
    case application:ensure_all_started(beamprobe) of
        {ok, _} ->
            case beamprobe_config:validate(Spec) of
                {ok, Config} -> start_session(Owner, Config);
                {error, _} = E -> E
            end;
        {error, _} = E -> E
    end.

start_session(Owner, Config) ->
    case beamprobe_sup:start_session(Owner, Config) of
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
%% included, is `{error, not_found}' and is left alone.  Returns when the
%% session's handlers (a `{handler, ...}' output: the printer of `output:
%% shell') have handled every event and ended, or were killed for taking
%% longer than `handler_stop_timeout' (application env, ms, default
%% 5000): what the printer prints is printed when stop/1 returns.
-spec stop(session() | pid()) -> {ok, summary()} | {error, not_found}.
stop(Session) ->
    case call(Session, stop) of
        {ok, _} = Ok -> gone(Session), Ok;
        Other -> Other
    end.

%% @private
%% Ends a session as if by one of its limits, with `Why' as its stop
%% reason (the shell API's `replaced'), and waits until it is gone.
-spec stop_as(session() | pid(), atom()) -> ok | {error, not_found}.
stop_as(Session, Why) when is_pid(Session), is_atom(Why) ->
    case is_session(Session) of
        true -> Session ! {beamprobe_stop, Why}, gone(Session), ok;
        false -> {error, not_found}
    end;
stop_as(_, _) ->
    {error, not_found}.

%% @doc Counters and configuration of a running session.  Among them:
%% `events', `dropped' (per cause), `bytes', `threads' (threads that
%% wrote), `memory' (their rings' bytes and their trace files' write
%% buffers', about 584 KiB each: the bound of what is resident)
%% and `prefaulted' (how many of those bytes the collector has mapped
%% ahead of the traced processes: what they reached plus 1 MiB).
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
%% 2> lists:seq(5, 4).
%% []
%% 12:00:01.123456 <0.90.0>(erlang:apply/2) call lists:seq(5, 4)
%% 12:00:01.123470 <0.90.0>(erlang:apply/2) returned from lists:seq/2 -> []
%% 3> beamprobe:calls({queue, in, 2}, 10).                % recon_trace's forms
%% 4> beamprobe:calls({queue, in, fun([X, _]) when X > 1 -> return_trace() end}, 10).
%% 5> beamprobe:calls("ets:lookup", [{time, 5000}, {msgs, 3}]).  % redbug's
%% '''
%% `Pattern': a string in redbug's syntax (`"m:f(X, _) when X > 1 ->
%% return;caller_line"', see beamprobe_pattern) or Elixir's
%% (`"Mod.fun(a) when a > 1 :: return"'); or recon_trace's tuples `{M, F,
%% A}' (`A' an arity or `_'), `{M, F, MatchSpec}', `{M, F, return_trace}',
%% `{M, F, fun(Args) when Guard -> Actions end}' (a fun typed in the shell,
%% ms_transform syntax); or a list of these.
%%
%% `Limit' is `N' (stop after N events) or `{N, Ms}' (at most N events per
%% Ms window: the surplus is dropped where it happens, before any message
%% exists, and reported as `dropped N events (rate limit: N)' lines; with
%% `on_rate => stop' the first surplus event ends the trace instead, and a
%% "rate limit tripped" line says so).  Instead of a limit, options may
%% come second, as in redbug:start/2 (the count is `msgs', default 10).
%% The trace also ends after 15 seconds (`time').
%%
%% The trace belongs to the shell (its group leader), not to the process
%% evaluating the command: an exception typed in the shell leaves it
%% running, closing the shell (also a remote shell) ends it, and so does
%% {@link clear/0}.  Calling `calls' again on a function a trace of this
%% shell traces replaces that trace (as recon_trace does) and prints
%% `% beamprobe: replaced the shell trace on m:f/1'.
-spec calls(term(), pos_integer() | {pos_integer(), pos_integer()}
                    | map() | list()) ->
          non_neg_integer() | {error, term()}.
calls(Pattern, LimitOrOpts) ->
    case nif_loaded() of
        ok -> beamprobe_shell:calls(Pattern, LimitOrOpts);
        {error, _} = E -> E
    end.

%% @doc {@link calls/2} with options, a map or a proplist; recon_trace's
%% and redbug's names are accepted with their meaning, or refused with
%% `{error, {unsupported_option, Name, Hint}}' naming the beamprobe way
%% (the table is in docs/tutorial.md).  Two names of one setting with
%% different values (`time' and `timeout', `pid' and `procs') are
%% `{error, {conflicting_options, Name1, Name2}}'; `msgs' and a Limit
%% argument that differ, `{error, {conflicting_options, msgs, limit}}'.
%%
%% <ul>
%% <li>`procs' (recon: `pid'): `all' (default), `new', `existing', a pid,
%%   a registered name, `{A, B, C}', `"<A.B.C>"', `{global, Name}',
%%   `{via, Mod, Name}', `{pid, B, C}' (redbug), or a list of these.</li>
%% <li>`time' (also `timeout'): ms, default 15000, or `infinity'.</li>
%% <li>`msgs': the count limit (redbug).</li>
%% <li>`return': add return values and exceptions to every pattern.</li>
%% <li>`args': capture depth (default 4; redbug `print_depth'), or recon's
%%   `arity' (redbug: `arity => true'): print `m:f/N' instead of the
%%   arguments, the cheapest capture.</li>
%% <li>`timestamp': `time' (HH:MM:SS.micro, default; also recon's
%%   `formatter' and `trace'), `ns' (trace clock) or `none'.</li>
%% <li>`io_server': where to print (default: the group leader).
%%   `return_to' (recon): `returned to m:f/N' events too.  `print_re'
%%   (redbug): only the lines matching a regex.</li>
%% <li>`scope' (recon): `local' is accepted (beamprobe always traces local
%%   calls too); `global' is refused.</li>
%% <li>`syntax': `erlang' (default) or `elixir': terms, functions and
%%   pids as Elixir prints them (`Shop.buy(:apple, 2)'; the Elixir module
%%   `Beamprobe' sets it; docs/elixir.md).</li>
%% <li>`on_rate' (a rate only): `drop' (default) or `stop'.  `output':
%%   more sinks, e.g. `[{file, Dir}]'.  `force': allow patterns refused as
%%   dangerous.  `buffer': bytes per thread.</li>
%% </ul>
%% Return values are traced only where asked (`-> return' in a pattern,
%% `return_trace' in a match spec, or `return => true'): on a function a
%% loop tail-calls, that makes the loop's stack grow while traced (see
%% {@link spec()}).
-spec calls(term(), pos_integer() | {pos_integer(), pos_integer()},
            map() | list()) ->
          non_neg_integer() | {error, term()}.
calls(Pattern, Limit, Opts) ->
    case nif_loaded() of
        ok -> beamprobe_shell:calls(Pattern, Limit, Opts);
        {error, _} = E -> E
    end.

%% @doc Traces messages sent or received matching `Pattern' (`"send"',
%% `"receive"', `"send({ping, _})"', ..., redbug's atoms `send' and
%% `'receive'', or a list of these) and prints them; see
%% {@link calls/2} (limits, options as second argument, ownership by the
%% shell).  Returns the number of patterns installed.
%%
%% ```
%% 1> beamprobe:messages("send({ping, _})", 5).
%% 1
%% 12:00:01.123456 <0.90.0>(erlang:apply/2) sent {ping,1} to <0.95.0>(my_server)
%% '''
-spec messages(string() | binary() | send | 'receive'
               | [string() | binary() | send | 'receive'],
               pos_integer() | {pos_integer(), pos_integer()}
               | map() | list()) ->
          non_neg_integer() | {error, term()}.
messages(Pattern, LimitOrOpts) ->
    case nif_loaded() of
        ok -> beamprobe_shell:messages(Pattern, LimitOrOpts);
        {error, _} = E -> E
    end.

%% @doc {@link messages/2} with the options of {@link calls/3}.
-spec messages(string() | binary() | send | 'receive'
               | [string() | binary() | send | 'receive'],
               pos_integer() | {pos_integer(), pos_integer()},
               map() | list()) ->
          non_neg_integer() | {error, term()}.
messages(Pattern, Limit, Opts) ->
    case nif_loaded() of
        ok -> beamprobe_shell:messages(Pattern, Limit, Opts);
        {error, _} = E -> E
    end.

%% @doc Stops every session started by {@link calls/2}, {@link calls/3},
%% {@link messages/2} or {@link messages/3}, from any shell, all at once
%% (a printer whose io server does not answer is waited for at most
%% `handler_stop_timeout', once for all of them).
-spec clear() -> ok.
clear() ->
    beamprobe_shell:clear().

%% @doc Prints a one-screen summary of the shell API, with examples.
-spec help() -> ok.
help() ->
    io:put_chars(help_text()).

help_text() ->
    "beamprobe -- safe tracing from the shell (more: h(beamprobe, calls))\n"
    "  beamprobe:calls(Pattern, Limit [, Opts])   print matching calls\n"
    "  beamprobe:calls(Pattern, Opts)             redbug style: msgs, time\n"
    "  beamprobe:messages(\"send({ping, _})\", 5)   sent/received messages\n"
    "  beamprobe:clear()                          stop every shell trace\n"
    "Pattern: one or a list of; actions: return, caller, caller_line, stack\n"
    "  \"lists:seq/2\"   \"lists:seq(A, B) when A > B -> return;caller_line\"\n"
    "  {queue, in, 2}   {queue, '_', '_'}   {queue, in, return_trace}\n"
    "  {queue, in, fun([X, _]) when X > 1 -> return_trace() end}\n"
    "  {queue, in, [{['$1', '_'], [], [{return_trace}]}]}\n"
    "  \"Mod.fun(x) when x > 1 :: return\"   (Elixir syntax)\n"
    "Limit: N events, or {N, Ms}: at most N per Ms, the rest dropped\n"
    "  (on_rate => stop ends the trace).  Always: time (15000 ms).\n"
    "Opts (a map or a proplist): procs|pid, time|timeout, msgs, return,\n"
    "  args (depth | arity), arity, print_depth, timestamp, io_server,\n"
    "  return_to, scope => local, print_re, on_rate, output, force, syntax\n"
    "  beamprobe:calls({ets, lookup, 2}, {10, 1000}, [{pid, whereis(srv)}]).\n"
    "  beamprobe:calls(\"m:f\", [{msgs, 20}, {time, 5000}, {print_re, \"err\"}]).\n"
    "A trace belongs to this shell (an exception typed here leaves it running);\n"
    "calls/2 again on the same function replaces this shell's trace of it.\n"
    "Sessions to files: start/1, stop/1, info/1, list/0, dump/1; profile/2.\n".

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
%% allowed), or a list of them.  Options (a map, or a proplist as for
%% {@link calls/3}): `time' (ms, default 5000, at
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
%%
%% The counters are the VM's, one of each per function, whoever set
%% it: a tool that sets, pauses or removes `call_count' or `call_time'
%% on the profiled functions during the run (`cprof:start/0',
%% `eprof:start_profiling/1', `erlang:trace_pattern/3') restarts,
%% stops or removes this run's counters, and the run's end removes its
%% counters on them; the VM does not say who set a counter, so the run
%% cannot tell, except for counters removed (listed as `lost').  Start
%% such a tool after the run.  A module loaded again during the run
%% loses its counters (`lost').
%%
%% Profile mode never loads a module: loading runs the module's `on_load'
%% and changes the node a profile only observes (and `call_count' on a
%% module not loaded counts nothing: erlang:trace_pattern/3 sets nothing
%% there).  A module the patterns name that exists but is not loaded is
%% listed in the result's `not_loaded' (and a line of the table, and
%% `bin/beamprobe profile''s output); when no pattern names a loaded
%% function the result is `{error, {not_loaded, Modules}}'.  A module that
%% does not exist is `{error, {no_such_module, M}}'.  (Unlike
%% {@link calls/2} and {@link start/1}, which load the module, as
%% dbg:tp/2 does: a trace is set up before the calls it is for.)
-spec profile(term(), map() | list()) ->
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
format_error({unsupported_option, Name, Hint}) ->
    lists:flatten(io_lib:format("option ~tp is not supported: ~ts",
                                [Name, Hint]));
format_error({conflicting_options, msgs, limit}) ->
    "option msgs and the Limit argument both set the event count, to "
    "different values: give one of them";
format_error({conflicting_options, A, B}) ->
    lists:flatten(io_lib:format("options ~tp and ~tp name the same setting "
                                "with different values: give one of them",
                                [A, B]));
format_error(Reason) ->
    beamprobe_config:format_error(Reason).

%% Only a beamprobe session is ever called: any other pid (an unrelated
%% gen_server would stop on `stop') is `{error, not_found}'.
call(Session, Req) when is_pid(Session), Req =:= stop orelse Req =:= info ->
    case {beamprobe_cluster:is_handle(Session),
          beamprobe_follow:is_handle(Session)} of
        {true, _} -> beamprobe_cluster:call(Session, Req);
        {_, true} -> beamprobe_follow:call(Session, Req);
        _ -> call_session(Session, Req)
    end;
call(Session, Req) when is_pid(Session) ->
    call_session(Session, Req);
call(_, _) ->
    {error, not_found}.

call_session(Session, stop) ->
    case call_session(Session, stop_handlers) of
        {ok, Sum, Handlers, Wait, Res} ->
            ok = handlers_gone(Handlers, Wait),
            %% Their account once they have ended: what a killed handler
            %% never handled is lost, not in flight.
            {ok, beamprobe_session:settle_handlers(Sum, Handlers, Res)};
        {ok, Sum, Handlers, Wait} ->        % a session of an older release
            ok = handlers_gone(Handlers, Wait),
            {ok, Sum};
        {ok, Sum, Handlers} ->              % a session of an older release
            ok = handlers_gone(Handlers, 6000),
            {ok, Sum};
        Other -> Other
    end;
call_session(Session, Req) ->
    case is_session(Session) of
        true ->
            try gen_server:call(Session, Req, 60000)
            catch exit:{noproc, _} -> {error, not_found};
                  exit:{normal, _} -> {error, not_found};
                  exit:{shutdown, _} -> {error, not_found}
            end;
        false -> {error, not_found}
    end.

%% Waits (at most Ms each) until a stopped session's handlers have ended;
%% a handler that stops its own session does not wait for itself.
handlers_gone(Handlers, Ms) ->
    _ = [gone(H, Ms) || H <- Handlers, H =/= self()],
    ok.

%% Waits (at most 5 s) until a session that replied for the last time has
%% exited, so that list/0 no longer shows it when stop/1 or a failed
%% start/1 returns.
gone(Pid) -> gone(Pid, 5000).

gone(Pid, Ms) ->
    Ref = monitor(process, Pid),
    receive {'DOWN', Ref, process, _, _} -> ok
    after Ms -> demonitor(Ref, [flush]), ok
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
%% probe `beamprobe:annotate' (docs/usdt.md).  While no session runs and
%% no tool is attached it costs one more remote call, of a function that
%% returns `ok' (beamprobe_gate_flag, kept by beamprobe_gate): no NIF call.
%% Never fails (`ok' also when the NIF is not loaded).
-spec annotate(term(), term()) -> ok.
annotate(Tag, Term) -> beamprobe_gate_flag:annotate(Tag, Term).

%% @private The NIF part of annotate/2, past the gate.
-spec annotate_nif(term(), term()) -> ok.
annotate_nif(Tag, Term) ->
    try beamprobe_nif:user_annotate(Tag, Term)
    catch error:_ -> ok
    end.
