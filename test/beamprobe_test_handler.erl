%%% @doc A {@link beamprobe_handler} for the tests: it can be made slow
%%% (sleeps per batch) and reports what it receives to a parent process.
%%%
%%% Argument (a map, every key optional):
%%% ```
%%% parent  => pid()            where to report (default: nobody)
%%% sleep   => non_neg_integer() ms to sleep per batch (default 0)
%%% forward => events | counts | none
%%%            events: {handler_events, self(), Events} per batch (default)
%%%            counts: {handler_counts, self(), NEvents, NDropped} per batch
%%%                    (NDropped: the sum of the batch's `dropped' counts)
%%%            none:   nothing per batch
%%% '''
%%% It also sends `{handler_init, self()}' from init/1 and
%%% `{handler_done, self(), Reason, Totals}' from terminate/2, where
%%% `Totals' is `#{batches, events, calls, dropped_events, dropped,
%%% max_batch, bad}': `events' counts every map but the `dropped' ones,
%%% `calls' the `call' events, `dropped_events' the `dropped' maps,
%%% `dropped' the sum of their counts, `bad' the events that are not well
%%% formed (no `event' atom, a `call' without a pid or a binary `mfa').
-module(beamprobe_test_handler).
-behaviour(beamprobe_handler).

-export([init/1, handle_events/2, terminate/2]).

-type arg() :: #{parent => pid(), sleep => non_neg_integer(),
                 forward => events | counts | none}.
-type state() :: #{parent := pid() | undefined,
                   sleep := non_neg_integer(),
                   forward := events | counts | none,
                   batches := non_neg_integer(),
                   events := non_neg_integer(),
                   calls := non_neg_integer(),
                   dropped_events := non_neg_integer(),
                   dropped := non_neg_integer(),
                   max_batch := non_neg_integer(),
                   bad := non_neg_integer()}.

%% @doc Reads the options and tells the parent the handler's pid.
-spec init(arg()) -> {ok, state()} | {error, term()}.
init(Arg) when is_map(Arg) ->
    Parent = maps:get(parent, Arg, undefined),
    Forward = maps:get(forward, Arg, events),
    case lists:member(Forward, [events, counts, none]) of
        false -> {error, {bad_forward, Forward}};
        true ->
            notify(Parent, {handler_init, self()}),
            {ok, #{parent => Parent, sleep => maps:get(sleep, Arg, 0),
                   forward => Forward, batches => 0, events => 0,
                   calls => 0, dropped_events => 0, dropped => 0,
                   max_batch => 0, bad => 0}}
    end;
init(Arg) ->
    {error, {bad_arg, Arg}}.

%% @doc Counts the batch, reports it, then sleeps (a slow consumer).
-spec handle_events([beamprobe_handler:event()], state()) -> {ok, state()}.
handle_events(Events, #{parent := Parent, sleep := Sleep,
                        forward := Forward} = St) ->
    Drops = [N || #{event := dropped, count := N} <- Events],
    Others = [E || E <- Events, not is_drop(E)],
    Calls = [E || #{event := call} = E <- Others],
    Bad = [E || E <- Others, not well_formed(E)],
    case Forward of
        events -> notify(Parent, {handler_events, self(), Events});
        counts -> notify(Parent, {handler_counts, self(), length(Others),
                                  lists:sum(Drops)});
        none -> ok
    end,
    Sleep > 0 andalso timer:sleep(Sleep),
    #{batches := B, events := E0, calls := C0, dropped_events := DE,
      dropped := D, max_batch := MB, bad := Bd} = St,
    {ok, St#{batches := B + 1, events := E0 + length(Others),
             calls := C0 + length(Calls),
             dropped_events := DE + length(Drops),
             dropped := D + lists:sum(Drops),
             max_batch := max(MB, length(Others)),
             bad := Bd + length(Bad)}}.

%% @doc Reports the totals.
-spec terminate(term(), state()) -> ok.
terminate(Reason, #{parent := Parent} = St) ->
    Totals = maps:with([batches, events, calls, dropped_events, dropped,
                        max_batch, bad], St),
    notify(Parent, {handler_done, self(), Reason, Totals}),
    ok.

is_drop(#{event := dropped}) -> true;
is_drop(_) -> false.

well_formed(#{event := call, pid := P, mfa := M, ts := T})
  when is_pid(P), is_binary(M), is_integer(T) -> true;
well_formed(#{event := call}) -> false;
well_formed(#{event := Ev, ts := T}) when is_atom(Ev), is_integer(T) -> true;
well_formed(_) -> false.

notify(undefined, _) -> ok;
notify(Pid, Msg) -> Pid ! Msg, ok.
