%%% @doc Test helper for the suites that bring beamprobe to a node from
%%% outside (beamprobe_attach_SUITE, beamprobe_profile_cli_SUITE): what of
%%% beamprobe's is loaded or mapped there, the attach directories in /tmp,
%%% and waiting until a node is clean.  Each suite says what "clean" means
%%% for it: a fun returning the problems left, [] when there are none.
-module(bp_node_clean).
-export([wait_problems/2, wait_clean/3, loaded_ours/1, loaded_libs/1,
         attach_dirs/0]).

%% @doc Polls Problems until it returns [] or Ms have passed; returns the
%% last problems ([] when clean).
-spec wait_problems(fun(() -> list()), non_neg_integer()) -> list().
wait_problems(Problems, Ms) ->
    poll(Problems, erlang:monotonic_time(millisecond) + Ms).

poll(Problems, Deadline) ->
    case Problems() of
        [] -> [];
        P ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> P;
                false -> timer:sleep(50), poll(Problems, Deadline)
            end
    end.

%% @doc Milliseconds from T0 (monotonic ms) until Problems returns [];
%% fails the test case with {not_clean, Problems} after Ms.
-spec wait_clean(fun(() -> list()), integer(), non_neg_integer()) ->
          integer().
wait_clean(Problems, T0, Ms) ->
    case Problems() of
        [] -> erlang:monotonic_time(millisecond) - T0;
        P ->
            case erlang:monotonic_time(millisecond) - T0 > Ms of
                true -> ct:fail({not_clean, P});
                false -> timer:sleep(20), wait_clean(Problems, T0, Ms)
            end
    end.

%% @doc beamprobe's modules loaded on Node.
-spec loaded_ours(node()) -> [module()].
loaded_ours(Node) ->
    [M || {M, _} <- rpc:call(Node, code, all_loaded, []),
          lists:prefix("beamprobe", atom_to_list(M))].

%% @doc The files Node's OS process has mapped (its /proc maps).
-spec loaded_libs(node()) -> [string()].
loaded_libs(Node) ->
    Pid = rpc:call(Node, os, getpid, []),
    {ok, Maps} = file:read_file("/proc/" ++ Pid ++ "/maps"),
    lists:usort([binary_to_list(P) || L <- binary:split(Maps, <<"\n">>,
                                                         [global]),
                                      [_, _, _, _, _, P] <- [string:lexemes(
                                                               L, " ")]]).

%% @doc The attach directories in /tmp.
-spec attach_dirs() -> [string()].
attach_dirs() ->
    lists:sort(filelib:wildcard("/tmp/beamprobe-attach-*")).
