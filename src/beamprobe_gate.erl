%%% @doc The annotation gate: keeps beamprobe:annotate/1,2 from calling the
%%% NIF while nothing wants annotations (docs/usdt.md, "What it costs").
%%%
%%% An annotation is wanted while a session runs (a member of the hub: the
%%% NIF writes annotations into the sessions that trace the caller) or
%%% while a tool (bpftrace, gdb, SystemTap) holds the `beamprobe:annotate'
%%% probe's semaphore.  The cheapest flag Erlang code can read is a
%%% constant returned by a function: cheaper than a NIF call (the call
%%% itself costs ~13 ns here), than persistent_term:get/1 (~12 ns) or an
%%% atomics read (~38 ns) (bench/beamprobe_usdt_bench.erl measures them).
%%% So this process compiles {@link beamprobe_gate_flag} from a constant
%%% and loads it whenever the answer changes:
%%%
%%% <ul>
%%% <li>`check/0' (synchronous): a session calls it once installed, before
%%%   beamprobe:start/1 returns, so a session's annotations are never
%%%   gated off;</li>
%%% <li>every ?POLL_MS ms: the semaphore is raised by the kernel when a tool
%%%   attaches, which no Erlang code is told about: a tool attached while
%%%   no session runs sees annotations within ?POLL_MS ms; and the flag
%%%   goes off again once the last session ended and the tool left.</li>
%%% </ul>
%%%
%%% Errors never gate annotations off: when the compiler is missing, the
%%% old code of the flag module cannot be purged (a process is still in
%%% it) or the NIF cannot say, the flag stays (or becomes) `true' and the
%%% NIF decides.  When this process ends the version on disk (`true') is
%%% loaded back.
-module(beamprobe_gate).
-behaviour(gen_server).

-export([start_link/0, open/0, check/0, state/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

-define(FLAG, beamprobe_gate_flag).
-define(POLL_MS, 1000).

-record(st, {flag :: boolean(), loads = 0 :: non_neg_integer(),
             %% the two versions, compiled once ('error': no compiler)
             bins = #{} :: #{boolean() => binary() | error}}).

%% @doc Starts the registered gate (from beamprobe_sup).
-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Sets the flag from the state now (a session started): returns the
%% flag.  `true' when the gate does not run (the NIF then decides).
-spec check() -> boolean().
check() ->
    try gen_server:call(?MODULE, check, 10000)
    catch exit:_ -> true
    end.

%% @doc Sets the flag `true' now: a session is about to be installed.
%% The flag module is loaded before the session traces anything (loaded
%% by check/0 after, the code server's and the code purger's messages
%% were the first events of a session recording every process's
%% messages); if the session does not start, the poll turns it off.
-spec open() -> boolean().
open() ->
    try gen_server:call(?MODULE, open, 10000)
    catch exit:_ -> true
    end.

%% @doc The flag, whether annotations are wanted now, and how many times
%% the flag module was loaded (for tests).
-spec state() -> {ok, #{flag := boolean(), wanted := boolean(),
                        loads := non_neg_integer()}}.
state() ->
    gen_server:call(?MODULE, state, 10000).

%% @private
-spec init([]) -> {ok, #st{}}.
init([]) ->
    process_flag(trap_exit, true),
    ok = beamprobe_own:sensitive(), % no trace events of it (see beamprobe_shell.erl)
    Bins = #{true => compile_flag(true), false => compile_flag(false)},
    St = set(wanted(), #st{flag = ?FLAG:on(), bins = Bins}),
    _ = erlang:send_after(?POLL_MS, self(), poll),
    {ok, St}.

%% @private
-spec handle_call(term(), gen_server:from(), #st{}) ->
          {reply, term(), #st{}}.
handle_call(check, _From, St) ->
    St1 = set(wanted(), St),
    {reply, St1#st.flag, St1};
handle_call(open, _From, St) ->
    St1 = set(true, St),
    {reply, St1#st.flag, St1};
handle_call(state, _From, #st{flag = F, loads = L} = St) ->
    {reply, {ok, #{flag => F, wanted => wanted(), loads => L}}, St};
handle_call(_Other, _From, St) ->
    {reply, {error, unknown_request}, St}.

%% @private
-spec handle_cast(term(), #st{}) -> {noreply, #st{}}.
handle_cast(_Msg, St) -> {noreply, St}.

%% @private
-spec handle_info(term(), #st{}) -> {noreply, #st{}}.
handle_info(poll, St) ->
    _ = erlang:send_after(?POLL_MS, self(), poll),
    {noreply, set(wanted(), St)};
handle_info(_Msg, St) ->
    {noreply, St}.

%% @private
-spec terminate(term(), #st{}) -> ok.
terminate(_Why, _St) ->
    %% The version on disk: always ask the NIF.
    _ = code:soft_purge(?FLAG),
    _ = code:load_file(?FLAG),
    _ = code:soft_purge(?FLAG),
    ok.

%%% ------------------------------------------------------------------------

%% Does a session run, or a tool hold the annotate probe?  `true' when the
%% NIF cannot say: also while its module is not loaded (deleted, purged:
%% this process never loads it; annotate/2 then loads it as before).
wanted() ->
    erlang:module_loaded(beamprobe_nif) =:= false orelse
        try beamprobe_nif:hub_members() > 0 orelse
                beamprobe_nif:usdt_enabled(annotate)
        catch _:_ -> true
        end.

%% The flag made Want (if it is not already), by loading a flag module
%% compiled from the constant; on any failure the flag becomes `true'
%% where it can (the NIF decides) and stays as it is where it cannot.
set(Want, #st{flag = Want} = St) -> St;
set(Want, #st{loads = L, bins = Bins} = St) ->
    case load(maps:get(Want, Bins)) of
        ok -> St#st{flag = Want, loads = L + 1};
        error when Want -> St;
        error ->
            %% Could not gate off: make sure the NIF decides.
            case load(maps:get(true, Bins)) of
                ok -> St#st{flag = true, loads = L + 1};
                error -> St
            end
    end.

load(error) -> error;
load(Bin) ->
    try
        true = purged(20),
        {module, ?FLAG} = code:load_binary(?FLAG, code:which(?FLAG), Bin),
        %% The code just replaced: purged now if no process is in it
        %% (else before the next load).
        _ = code:soft_purge(?FLAG),
        ok
    catch _:_ -> error
    end.

%% The flag module compiled from the constant Want (once, at start).
compile_flag(Want) ->
    Annotate = case Want of
                   true -> "annotate(T, V) -> beamprobe:annotate_nif(T, V).";
                   false -> "annotate(_, _) -> ok."
               end,
    Source = ["-module(" ++ atom_to_list(?FLAG) ++ ").",
              "-export([on/0, annotate/2]).",
              "on() -> " ++ atom_to_list(Want) ++ ".",
              Annotate],
    try
        Forms = [parse_form(S) || S <- Source],
        {ok, ?FLAG, Bin} = compile:forms(Forms, [binary, return_errors]),
        Bin
    catch _:_ -> error
    end.

parse_form(Text) ->
    {ok, Tokens, _} = erl_scan:string(Text),
    {ok, Form} = erl_parse:parse_form(Tokens),
    Form.

%% Old code of the flag module purged (a process may be in it for the
%% moment a call takes: retried for N ms).
purged(0) -> false;
purged(N) ->
    case code:soft_purge(?FLAG) of
        true -> true;
        false -> timer:sleep(1), purged(N - 1)
    end.
