%%% @doc Every loss is counted and reported the same way three times:
%%% by the session (beamprobe:stop/1's summary, `dropped'), by the trace
%%% on disk alone (`bin/beamprobe info', `stats', `stats --json', `print',
%%% which read the drops events and the stop record, env session_lost)
%%% and by a trace streamed over TCP to `bin/beamprobe receive'.  Each
%%% case makes losses of one cause for real (a tiny ring, the events
%%% limit, a stalled receiver, a follow session's per-request budget, the
%%% bytes limit of a session that also streams) and compares the views;
%%% babeltrace2 reads every trace.
-module(beamprobe_losses_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([ring_full_file/1, ring_full_tcp/1, limit_events_file/1,
         limit_events_tcp/1, stalled_receiver/1, file_and_stalled_stream/1,
         follow_budget/1, limit_bytes_streamed/1, too_big_file/1,
         too_big_tcp/1, rate_file/1, rate_tcp/1, overwritten_file/1,
         overwritten_tcp/1, file_and_stream_both/1]).

-define(W, beamprobe_workload).
-define(L, beamprobe_test_lib).
-import(beamprobe_receive_lib, [receiver/1, wait_port/1]).

suite() -> [{timetrap, {seconds, 120}}].

all() -> [ring_full_file, ring_full_tcp, limit_events_file, limit_events_tcp,
          stalled_receiver, file_and_stalled_stream, follow_budget,
          limit_bytes_streamed, too_big_file, too_big_tcp, rate_file,
          rate_tcp, overwritten_file, overwritten_tcp,
          file_and_stream_both].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) -> ok.

init_per_testcase(Case, Config) -> ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) -> ?L:clear_trace_state().

%%% ------------------------------------------------------------------------
%%% Cases

%% Full rings (16 KiB, drop_newest) under four busy processes.
ring_full_file(Config) ->
    Dir = ?L:dir(Config, "t"),
    Sum = rings(#{output => {file, Dir}}),
    ?assert(?L:dropped(Sum, ring_full) > 0),
    assert_views(Dir, ?L:total(Sum)).

ring_full_tcp(Config) ->
    Dir = ?L:dir(Config, "recv"),
    {Rx, Port} = receiver(Dir),
    Sum = rings(#{output => {tcp, "127.0.0.1:" ++ integer_to_list(Port)}}),
    ?assert(?L:dropped(Sum, ring_full) > 0),
    {0, _} = wait_port(Rx),
    received(Dir, Sum).

%% limits => #{events => 1000}: every later event is the limit's.
limit_events_file(Config) ->
    Dir = ?L:dir(Config, "t"),
    Sum = limited(#{output => {file, Dir}}),
    ?assert(?L:dropped(Sum, limit) > 0),
    assert_views(Dir, ?L:total(Sum)).

limit_events_tcp(Config) ->
    Dir = ?L:dir(Config, "recv"),
    {Rx, Port} = receiver(Dir),
    Sum = limited(#{output => {tcp, "127.0.0.1:" ++ integer_to_list(Port)}}),
    ?assert(?L:dropped(Sum, limit) > 0),
    {0, _} = wait_port(Rx),
    received(Dir, Sum).

%% A receiver that stops reading (SIGSTOP) while the session streams:
%% the send queue fills and packets are dropped at the source (`stream');
%% it reads again before the stop, so that the end is delivered.  The
%% received trace tells them (as io_error, its drops events having no
%% `stream' field), the same total.
stalled_receiver(Config) ->
    Dir = ?L:dir(Config, "recv"),
    {Rx, Port} = receiver(Dir),
    Sum = stalled(Rx, #{output => {tcp, {{127, 0, 0, 1}, Port},
                                   #{queue => 65536}}}),
    ?assert(?L:dropped(Sum, stream) > 0),
    {0, _} = wait_port(Rx),
    received(Dir, Sum).

%% The same with a file sink too: the file trace holds every event the
%% stream lost, so its total leaves them out, and says them apart as the
%% TCP stream's (on the old tree the stop record did not have them: the
%% files said nothing of the summary's `stream' losses); the received
%% trace has the same total as the summary.
file_and_stalled_stream(Config) ->
    Dir = ?L:dir(Config, "t"),
    RDir = ?L:dir(Config, "recv"),
    {Rx, Port} = receiver(RDir),
    Sum = stalled(Rx, #{output => [{file, Dir},
                                   {tcp, {{127, 0, 0, 1}, Port},
                                    #{queue => 65536}}]}),
    Stream = ?L:dropped(Sum, stream),
    ?assert(Stream > 0),
    {0, _} = wait_port(Rx),
    Total = ?L:total(Sum),
    Views = assert_views(Dir, Total - Stream),
    S = integer_to_list(Stream),
    ?assertEqual({tcp_stream_only, [S]},
                 {tcp_stream_only,
                  re_all(maps:get(info, Views),
                         "\\(tcp stream only\\) +([0-9]+)")}),
    ?assertEqual({tcp_stream_only_stats, [S]},
                 {tcp_stream_only_stats,
                  re_all(maps:get(stats, Views), "tcp_stream_only=([0-9]+)")}),
    ?assertEqual({tcp_stream_only_json, [S]},
                 {tcp_stream_only_json,
                  re_all(maps:get(json, Views),
                         "\"tcp_stream_only\":([0-9]+)")}),
    received(RDir, Sum).

%% A follow session's per-request budget: 182 events cut (request_events)
%% are lost to every sink, and no drops event has a field for them.  On
%% the old tree info/stats said "lost events: 0" of a trace whose
%% summary said 182 lost.
follow_budget(Config) ->
    Dir = ?L:dir(Config, "f"),
    Echo = spawn(follow_request, echo, []),
    {ok, H} = beamprobe_follow_lib:ask_follow(Dir, #{events => 20}),
    beamprobe_follow_lib:run_asks(Echo, [{1, lists:duplicate(50, 0)},
                                         {2, [0]}]),
    Sum = ?L:stop(H),
    exit(Echo, kill),
    ?assertEqual(182, ?L:dropped(Sum, request_events)),
    ?assertEqual(182, ?L:total(Sum)),
    Views = assert_views(Dir, 182),
    ?assertMatch([_], re_all(maps:get(info, Views),
                             "\n  request_events +(182)\n")),
    ?assertMatch([_], re_all(maps:get(stats, Views),
                             "  request_events=(182)")),
    ?assertMatch([_], re_all(maps:get(json, Views),
                             "\"request_events\":(182)")),
    ?assertMatch([_], re_all(maps:get(print, Views),
                             "lost events in no stream file: (182) ")).

%% A session that writes files under a 1000-byte limit and streams over
%% TCP: the events past the limit are lost to the files alone (the
%% stream has them), so the received trace's calls and its losses add
%% up to the files' calls and losses: the calls the session saw (all of
%% them, or fewer when the limit's stop came before the workload's end:
%% calls after it are no event of the session's; the fresh-clone CI of
%% e902452 saw 7,332 of 8,000 in both).  On the old tree its drops events
%% counted the files' `limit' losses as its own: calls received + lost >
%% calls made.
limit_bytes_streamed(Config) ->
    Dir = ?L:dir(Config, "t"),
    RDir = ?L:dir(Config, "recv"),
    {Rx, Port} = receiver(RDir),
    N = 2000,
    Ps = [?W:start_looper(self(), fun() -> ?W:loop_add(N) end)
          || _ <- [1, 2, 3, 4]],
    {ok, S} = beamprobe:start(
                #{procs => Ps, calls => [{?W, add, 2}],
                  limits => #{bytes => 1000},
                  output => [{file, Dir},
                             {tcp, "127.0.0.1:" ++ integer_to_list(Port)}]}),
    ok = ?W:go(Ps),
    [ok, ok, ok, ok] = ?W:wait_done(Ps, 60000),
    Sum = ?L:stop(S),
    {0, _} = wait_port(Rx),
    ?assert(?L:dropped(Sum, limit) > 0),
    %% The files: everything the summary says but the stream's.
    assert_views(Dir, ?L:total(Sum) - ?L:dropped(Sum, stream)),
    _ = received(RDir, Sum),
    Evs = ?L:trace(RDir),
    Calls = ?L:count(Evs, "call"),
    Lost = lost(cli(["info", RDir])),
    ct:log("received ~p calls, ~p lost, of ~p", [Calls, Lost, 4 * N]),
    {Lo, _} = streamed(Sum),
    Unconfirmed = ?L:total(Sum) - Lo,
    Seen = ?L:count(?L:trace(Dir), "call") +
        (?L:total(Sum) - ?L:dropped(Sum, stream)),
    ct:log("the files: ~p calls seen", [Seen]),
    ?assert(Seen =< 4 * N),
    ?assert(Calls + Lost =< Seen andalso Calls + Lost >= Seen - Unconfirmed).

%% Events lost by both sinks: the files past their bytes limit, the
%% stream behind a stopped receiver.  Each call has its own argument, so
%% the traces say which events each sink has: the summary's total is the
%% events missing from either (each once; at most events_unconfirmed
%% more, counted lost but arrived), never more than the calls made; its
%% lost_by_sink says each sink's own, as the files' and the received
%% trace's views say them.  On the old tree the total added both sinks'
%% losses: 1,519 calls made, total 2,748 (file 1,397 + stream 1,351).
file_and_stream_both(Config) ->
    {Dir, RDir, N, Sum} = both_lost(Config, 1),
    #{dropped := #{total := T, stream := Only},
      stream := #{events_dropped := StreamAll, events_unconfirmed := U},
      lost_by_sink := #{file := LF, tcp := LT}} = Sum,
    Files = ticks(?L:trace(Dir)),
    Recv = ticks(?L:trace(RDir)),
    Both = ordsets:intersection(Files, Recv),
    ct:log("~b calls; files ~b, received ~b, both ~b; total ~b, file ~b, "
           "tcp ~b, stream ~b of ~b, unconfirmed ~b",
           [N, length(Files), length(Recv), length(Both), T, LF, LT, Only,
            StreamAll, U]),
    ?assert(T =< N),
    ?assert(T >= N - length(Both) andalso T =< N - length(Both) + U),
    ?assertEqual(N - length(Files), LF),
    ?assert(LT >= N - length(Recv) andalso LT - U =< N - length(Recv)),
    ?assertEqual(T - Only, LF),
    assert_views(Dir, LF),
    received(RDir, Sum).

%% The session of file_and_stream_both, made again (at most 5 times)
%% until the stream lost events the files lost too: those the rings held
%% when the files reached their limit, but for the last packet, which
%% the receiver, let go on, gets (576 to 2,908 in 5 runs here; none is
%% possible).  Returns {Dir, RDir, calls made, summary}.  (On the old
%% tree `stream' was all the stream lost: never less.)
both_lost(_Config, 6) -> ct:fail(no_loss_of_both_sinks);
both_lost(Config, K) ->
    Dir = ?L:dir(Config, "t" ++ integer_to_list(K)),
    RDir = ?L:dir(Config, "recv" ++ integer_to_list(K)),
    {Rx, Port} = receiver(RDir),
    {os_pid, Os} = erlang:port_info(Rx, os_pid),
    S = ?L:start(#{procs => [self()], calls => [{?W, tick, 1}],
                   limits => #{bytes => 300000},
                   output => [{file, Dir},
                              {tcp, {{127, 0, 0, 1}, Port},
                               #{queue => 65536}}]}),
    0 = ?W:tick(0),
    wait_connected(S, 500),
    _ = os:cmd("kill -STOP " ++ integer_to_list(Os)),
    %% The session process would end the session at the bytes limit at
    %% once, and its end waits only a second for the stopped receiver:
    %% held meanwhile (the NIF's counters read through its state).
    ok = sys:suspend(S),
    N = try ticks_until_both(element(5, sys:get_state(S)), 1, 200)
        after
            os:cmd("kill -CONT " ++ integer_to_list(Os)),
            sys:resume(S)
        end,
    Sum = ?L:stop(S),
    {0, _} = wait_port(Rx),
    case Sum of
        %% The stream lost events the files lost too.
        #{dropped := #{stream := Only},
          stream := #{events_dropped := All}} when All > Only ->
            {Dir, RDir, N, Sum};
        _ -> both_lost(Config, K + 1)
    end.

%% Calls of tick/1 (I, I + 1, ...) in rounds of 500 until the session
%% of NIF resource Res has stopped at its bytes limit with the stream
%% losing; returns how many calls were made (tick(0) with them).
ticks_until_both(_Res, _I, 0) -> ct:fail(no_loss_of_both);
ticks_until_both(Res, I, K) ->
    [?W:tick(J) || J <- lists:seq(I, I + 499)],
    case beamprobe_nif:info(Res) of
        #{stop_reason := bytes, stream := #{events_dropped := D}}
          when D > 0 -> I + 500;
        _ -> ticks_until_both(Res, I + 500, K - 1)
    end.

ticks(Evs) ->
    ordsets:from_list([?L:call_args_int(E) || E <- Evs,
                                              maps:get(name, E) =:= <<"call">>]).

%% Events too big for half a 16 KiB ring (arguments of up to 64 KiB
%% rendered): too_big.
too_big_file(Config) ->
    cause(Config, file, too_big, #{buffer => 16384, args => full,
                                   capture => #{binary => 65536,
                                                bytes => 65536}},
          fun() -> [erlang:md5(binary:copy(<<I>>, 20000))
                    || I <- lists:seq(1, 50)] end,
          [{erlang, md5, 1}]).

too_big_tcp(Config) ->
    cause(Config, tcp, too_big, #{buffer => 16384, args => full,
                                  capture => #{binary => 65536,
                                               bytes => 65536}},
          fun() -> [erlang:md5(binary:copy(<<I>>, 20000))
                    || I <- lists:seq(1, 50)] end,
          [{erlang, md5, 1}]).

%% A rate limit of 10 events a second: the rest is rate's.
rate_file(Config) ->
    cause(Config, file, rate, #{limits => #{rate => {10, 1000}}},
          fun() -> [lists:seq(1, 3) || _ <- lists:seq(1, 2000)] end,
          [{lists, seq, 2}]).

rate_tcp(Config) ->
    cause(Config, tcp, rate, #{limits => #{rate => {10, 1000}}},
          fun() -> [lists:seq(1, 3) || _ <- lists:seq(1, 2000)] end,
          [{lists, seq, 2}]).

%% A flight recorder of 16 KiB rings, dumped: what was evicted before the
%% dump is overwritten's.
overwritten_file(Config) ->
    cause(Config, file, overwritten,
          #{buffer => 16384, overflow => drop_oldest, dump => true},
          fun() -> [lists:seq(1, 3) || _ <- lists:seq(1, 5000)] end,
          [{lists, seq, 2}]).

overwritten_tcp(Config) ->
    cause(Config, tcp, overwritten,
          #{buffer => 16384, overflow => drop_oldest, dump => true},
          fun() -> [lists:seq(1, 3) || _ <- lists:seq(1, 5000)] end,
          [{lists, seq, 2}]).

%% A session of Opts (and calls Calls, this process) over Sink that runs
%% Work (then a dump with dump => true): Cause lost, the summary's total
%% told by the trace.
cause(Config, Sink, Cause, Opts0, Work, Calls) ->
    {Dump, Opts} = {maps:get(dump, Opts0, false), maps:remove(dump, Opts0)},
    {Dir, Out, Rx} =
        case Sink of
            file -> D = ?L:dir(Config, "t"), {D, {file, D}, none};
            tcp ->
                D = ?L:dir(Config, "recv"),
                {R, Port} = receiver(D),
                {D, {tcp, "127.0.0.1:" ++ integer_to_list(Port)}, R}
        end,
    S = ?L:start(Opts#{procs => [self()], calls => Calls, output => Out}),
    _ = Work(),
    _ = Dump andalso beamprobe:dump(S),
    Sum = ?L:stop(S),
    ?assert(?L:dropped(Sum, Cause) > 0),
    _ = Rx =:= none orelse ({0, _} = wait_port(Rx)),
    Views = case Sink of
                tcp -> received(Dir, Sum);
                file -> assert_views(Dir, ?L:total(Sum))
            end,
    ?assertMatch([_], re_all(maps:get(stats, Views),
                             "  " ++ atom_to_list(Cause) ++ "=([0-9]+)")).

%%% ------------------------------------------------------------------------
%%% Workloads

%% Four processes of 20,000 calls each (full arguments) into 16 KiB
%% rings, round after round until some were lost (a collector that kept
%% up on a quiet machine would make no loss to compare).
rings(Out) ->
    Self = self(),
    Ps = [spawn_link(fun() -> looper(Self) end) || _ <- [1, 2, 3, 4]],
    S = ?L:start(Out#{procs => Ps, calls => [{?W, add, 2}], args => full,
                      buffer => 16384, overflow => drop_newest}),
    rounds(S, Ps, 20),
    Sum = ?L:stop(S),
    [begin unlink(P), exit(P, kill) end || P <- Ps],
    Sum.

looper(Parent) ->
    receive go -> ok end,
    ok = ?W:loop_add(20000),
    Parent ! {done, self()},
    looper(Parent).

rounds(_S, _Ps, 0) -> ct:fail(no_ring_full);
rounds(S, Ps, K) ->
    [P ! go || P <- Ps],
    [receive {done, P} -> ok end || P <- Ps],
    case beamprobe:info(S) of
        {ok, #{dropped := #{ring_full := RF}}} when RF > 0 -> ok;
        _ -> rounds(S, Ps, K - 1)
    end.

limited(Out) ->
    N = 5000,
    Ps = [?W:start_looper(self(), fun() -> ?W:loop_add(N) end)
          || _ <- [1, 2]],
    S = ?L:start(Out#{procs => Ps, calls => [{?W, add, 2}],
                      limits => #{events => 1000}}),
    ok = ?W:go(Ps),
    [ok, ok] = ?W:wait_done(Ps, 60000),
    _ = ?L:wait_ended(S, 10000),
    ?L:stop(S).

%% The receiver Rx is stopped (SIGSTOP) while 100,000 calls are traced
%% into a 64 KiB send queue, then let go on before the stop.
stalled(Rx, Out) ->
    {os_pid, Os} = erlang:port_info(Rx, os_pid),
    S = ?L:start(Out#{procs => [self()], calls => [{lists, seq, 2}]}),
    lists:seq(1, 3),
    wait_connected(S, 500),
    _ = os:cmd("kill -STOP " ++ integer_to_list(Os)),
    try
        stall_until_lost(S, 50)
    after
        os:cmd("kill -CONT " ++ integer_to_list(Os))
    end,
    ?L:stop(S).

stall_until_lost(_S, 0) -> ct:fail(no_stream_loss);
stall_until_lost(S, K) ->
    [lists:seq(1, I rem 7) || I <- lists:seq(1, 20000)],
    case beamprobe:info(S) of
        {ok, #{stream := #{events_dropped := D}}} when D > 0 -> ok;
        _ -> timer:sleep(20), stall_until_lost(S, K - 1)
    end.

wait_connected(_S, 0) -> ct:fail(not_connected);
wait_connected(S, K) ->
    case beamprobe:info(S) of
        {ok, #{stream := #{connected := true, packets_sent := P}}}
          when P > 0 -> ok;
        _ -> lists:seq(1, 3), timer:sleep(10), wait_connected(S, K - 1)
    end.

%%% ------------------------------------------------------------------------
%%% The views

%% What a trace streamed by the session of summary Sum says it lost:
%% {Lo, Hi}, its total, less the events the sink called lost at the end
%% (no confirmation within its second) that may have arrived all the same
%% (events_unconfirmed: the count errs towards loss).
streamed(#{stream := #{events_unconfirmed := U}} = Sum) ->
    {?L:total(Sum) - U, ?L:total(Sum)}.

%% The trace in Dir received from the session of summary Sum: its stop
%% record (env session_lost, from the stream's END frame) says what the
%% receiver lacks, the summary's lost_by_sink tcp less the frames it
%% wrote but confirmed too late (events_unconfirmed); with no file sink,
%% cause by cause the summary's (the stream's own losses as io_error,
%% as its drops events say them).  info, stats and babeltrace2 agree.
%% On the old tree a streamed trace had no stop record.
received(Dir, #{lost_by_sink := #{tcp := LT} = By, dropped := D,
                stream := #{events_unconfirmed := U,
                            events_dropped := SD}}) ->
    {ok, Meta} = file:read_file(filename:join(Dir, "metadata")),
    Rec = case re:run(Meta, "\n\tsession_lost = \"([a-z_0-9=,]*)\";",
                      [{capture, all_but_first, list}]) of
              {match, [R]} ->
                  maps:from_list(
                    [{list_to_atom(K), list_to_integer(V)}
                     || KV <- string:split(R, ",", all),
                        [K, V] <- [string:split(KV, "=")]]);
              nomatch -> ct:fail({no_stop_record, Dir})
          end,
    ct:log("stop record of ~s: ~p", [Dir, Rec]),
    ?assertEqual({record_total, LT - U},
                 {record_total, lists:sum(maps:values(Rec))}),
    _ = maps:is_key(file, By) orelse
        [?assertEqual({C, maps:get(C, D) + case C of
                                               io_error -> SD - U;
                                               _ -> 0
                                           end},
                      {C, N})
         || {C, N} <- maps:to_list(Rec)],
    assert_views(Dir, LT - U).

%% The trace in Dir: babeltrace2 reads it, and info, stats, stats --json
%% say Total lost ({Lo, Hi}: the same number, within); returns their
%% outputs.
assert_views(Dir, Total) when is_integer(Total) ->
    assert_views(Dir, {Total, Total});
assert_views(Dir, {Lo, Hi}) ->
    _ = ?L:trace(Dir),
    Info = cli(["info", Dir]),
    Stats = cli(["stats", Dir]),
    Json = cli(["stats", "--json", Dir]),
    Print = cli(["print", Dir]),
    ct:log("~s, want ~b to ~b lost:~n~s~n~s~n~s",
           [Dir, Lo, Hi, Info, Stats, Json]),
    [T] = re_all(Info, "lost events: +([0-9]+)"),
    ?assertEqual({stats, Dir, [T]},
                 {stats, Dir, re_all(Stats, "Lost events: ([0-9]+)")}),
    ?assertEqual({json, Dir, [T]},
                 {json, Dir, re_all(Json, "\"lost\":\\{\"total\":([0-9]+)")}),
    ?assert(list_to_integer(T) >= Lo andalso list_to_integer(T) =< Hi),
    #{info => Info, stats => Stats, json => Json, print => Print}.

lost(Info) ->
    [T] = re_all(Info, "lost events: +([0-9]+)"),
    list_to_integer(T).

cli(Args) -> binary_to_list(?L:cli_ok(Args)).

re_all(Text, Re) ->
    case re:run(Text, Re, [global, {capture, all_but_first, list}]) of
        {match, Ms} -> [M || [M] <- Ms];
        nomatch -> []
    end.

