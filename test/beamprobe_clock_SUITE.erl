%%% beamprobe_clock_SUITE -- the trace's timestamps are true: each event's
%%% time, as babeltrace2 reads it from the trace (its own clock offset and
%%% the event's stamp), lies between the OS clock readings taken just
%%% before and just after the traced call, on the clock beamprobe chose for
%%% this machine (the TSC mapped to CLOCK_MONOTONIC where it can be
%%% trusted, c_src/bp_clock.h) and on clock_gettime, which
%%% BEAMPROBE_CLOCK=monotonic forces (on a peer node).
-module(beamprobe_clock_SUITE).

-include_lib("stdlib/include/assert.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([stamps_between_os_reads/1, monotonic_switch/1]).
%% Traced function and the helper the peer runs.
-export([stamp/1, bracketed/2]).

-define(L, beamprobe_test_lib).
%% How far an event's time may lie outside its bracket: the metadata's
%% realtime offset is taken from two clock reads at the session's start,
%% the TSC mapping is within a few hundred ns of CLOCK_MONOTONIC
%% (test/c/test_clock.c); a wrong mapping is off by milliseconds or more.
-define(SLACK_NS, 200000).
-define(CALLS, 20).

suite() -> [{timetrap, {seconds, 120}}].

all() -> [stamps_between_os_reads, monotonic_switch].

init_per_suite(Config) ->
    ok = ?L:require_tracer(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ?L:init_case(Case, Config).

end_per_testcase(_Case, _Config) ->
    ?L:clear_trace_state().

stamp(I) -> I.

%%% ------------------------------------------------------------------------

stamps_between_os_reads(Config) ->
    #{clock := Clock} = beamprobe_nif:hub_stats(),
    ct:log("this node's trace clock: ~p", [Clock]),
    ?assert(lists:member(Clock, [tsc, monotonic])),
    check(bracketed(?L:dir(Config, "t"), ?CALLS)).

%% BEAMPROBE_CLOCK=monotonic: the peer stamps with clock_gettime, and its
%% events are as true.
monotonic_switch(Config) ->
    {Peer, Node} = ?L:env_peer(?MODULE, [{"BEAMPROBE_CLOCK", "monotonic"}]),
    try
        Dir = ?L:dir(Config, "peer"),
        {Hub, Result} = erpc:call(
                          Node,
                          fun() ->
                                  {ok, _} = application:ensure_all_started(
                                              beamprobe),
                                  R = ?MODULE:bracketed(Dir, ?CALLS),
                                  {beamprobe_nif:hub_stats(), R}
                          end, 60000),
        ?assertMatch(#{clock := monotonic}, Hub),
        check(Result)
    after
        peer:stop(Peer)
    end.

%% Calls stamp(I) N times, 5 ms apart, each between two readings of the
%% OS's realtime clock; returns the brackets and the trace's events as
%% babeltrace2 prints them (times in seconds since the epoch).
bracketed(Dir, N) ->
    {ok, S} = beamprobe:start(#{procs => [self()],
                                calls => [{?MODULE, stamp, 1}],
                                args => full, return => false,
                                output => {file, Dir}}),
    Brackets = [begin
                    timer:sleep(5),
                    T0 = os:system_time(nanosecond),
                    I = ?MODULE:stamp(I),
                    {I, T0, os:system_time(nanosecond)}
                end || I <- lists:seq(1, N)],
    {ok, Sum} = beamprobe:stop(S),
    {Brackets, Sum, ?L:babeltrace_ok(Dir, ["--clock-seconds"])}.

check({Brackets, Sum, Out}) ->
    ct:log("summary: ~p", [Sum]),
    ?assertEqual(0, ?L:total(Sum)),
    Times = event_times(Out),
    ct:log("events: ~p", [Times]),
    ?assertEqual([I || {I, _, _} <- Brackets], [I || {I, _} <- Times]),
    Off = [begin
               {I, T} = lists:keyfind(I, 1, Times),
               Early = T0 - T, Late = T - T1,
               ?assert(Early =< ?SLACK_NS, {I, early_ns, Early}),
               ?assert(Late =< ?SLACK_NS, {I, late_ns, Late}),
               max(Early, Late)
           end || {I, T0, T1} <- Brackets],
    ct:log("worst distance outside a bracket: ~p ns (bound ~p)",
           [lists:max(Off), ?SLACK_NS]),
    %% And in the order the calls were made.
    Ts = [T || {_, T} <- Times],
    ?assertEqual(lists:sort(Ts), Ts).

%% [{I, Ns}] of the call events of stamp/1, from babeltrace2's
%% `[Seconds.Nanoseconds] ... vm call: ... args = "(I)"' lines.
event_times(Out) ->
    Re = "^\\[([0-9]+)\\.([0-9]{9})\\] .* vm call: .*mfa = \"" ++
         atom_to_list(?MODULE) ++ ":stamp/1\", args = \"\\(([0-9]+)\\)\"",
    [{list_to_integer(I),
      list_to_integer(Sec) * 1000000000 + list_to_integer(Ns)}
     || L <- binary:split(Out, <<"\n">>, [global]),
        {match, [Sec, Ns, I]} <- [re:run(L, Re, [{capture, all_but_first,
                                                   list}])]].
