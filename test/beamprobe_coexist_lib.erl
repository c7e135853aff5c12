%%% @doc Test helper for the suites of coexistence with other tracing
%%% tools (beamprobe_coexist_SUITE: what a session leaves to them;
%%% beamprobe_tamper_SUITE: what it reports when they change what it
%%% installed): the suite and case set-up, dbg with a tracer that counts
%%% its calls, and the real recon_trace and redbug compiled from their
%%% source at test time (never vendored; see load_recon/1).
-module(beamprobe_coexist_lib).

-include_lib("common_test/include/ct.hrl").

-export([init_suite/1, end_case/0]).
-export([dbg_collector/0, traced_by_other/1, load_recon/1, load_redbug/1]).

-define(W, beamprobe_workload).
-define(L, beamprobe_test_lib).

%% beamprobe started (babeltrace2 there to read traces back), the
%% workload module loaded, runtime_tools (dbg) started.
init_suite(Config) ->
    ok = ?L:require_tracer(),
    {module, ?W} = code:ensure_loaded(?W),
    {ok, _} = application:ensure_all_started(runtime_tools),
    Config.

%% Whatever a case left of dbg, recon_trace, redbug and beamprobe goes.
end_case() ->
    catch dbg:stop(),
    catch recon_trace:clear(),
    catch redbug:stop(),
    erlang:trace_pattern({'_', '_', '_'}, false, [meta]),
    ?L:clear_trace_state().

%% dbg with a tracer process that counts call messages per process.
dbg_collector() ->
    Parent = self(),
    {ok, _} = dbg:tracer(process,
                         {fun({trace, P, call, _}, N) ->
                                  Parent ! {dbg_call, P}, N + 1;
                             (_, N) -> N
                          end, 0}),
    Parent.

%% P has a tracer (another tool's: beamprobe traces none of these).
traced_by_other(P) ->
    case erlang:trace_info(P, tracer) of
        {tracer, []} -> false;
        {tracer, _} -> true;
        _ -> false
    end.

%%% Third-party tools compiled from their source at test time --------------

%% recon: $RECON_SRC (a directory with recon_trace.erl), $RECON_GIT (a git
%% directory of github.com/ferd/recon), an installed recon, or the local
%% mirror /work/.mirror/ferd+recon/repo when it exists.
load_recon(Config) ->
    load_tool(Config, recon_trace, "RECON_SRC", "RECON_GIT",
              ["/work/.mirror/ferd+recon/repo"],
              ["recon.erl", "recon_lib.erl", "recon_trace.erl",
               "recon_rec.erl", "recon_map.erl", "recon_alloc.erl"]).

%% redbug: $REDBUG_SRC, $REDBUG_GIT, installed, or the local mirror.
load_redbug(Config) ->
    load_tool(Config, redbug, "REDBUG_SRC", "REDBUG_GIT",
              ["/work/.mirror/massemanet+redbug/repo"],
              ["redbug.erl", "redbug_compiler.erl", "redbug_dtop.erl",
               "redbug_targ.erl", "redbug_lexer.xrl", "redbug_parser.yrl",
               "redbug_dbg.hrl"]).

load_tool(Config, Mod, SrcVar, GitVar, Mirrors, Files) ->
    case code:ensure_loaded(Mod) of
        {module, Mod} -> ok;
        _ ->
            Dest = filename:join(?config(priv_dir, Config), atom_to_list(Mod)),
            case tool_source(SrcVar, GitVar, Mirrors, Files, Dest) of
                {ok, SrcDir} -> compile_tool(SrcDir, Dest, Files, Mod);
                {skip, Why} ->
                    io:format("~p skipped: ~s~n", [Mod, Why]),
                    {skip, Why}
            end
    end.

tool_source(SrcVar, GitVar, Mirrors, Files, Dest) ->
    case os:getenv(SrcVar) of
        Dir when is_list(Dir), Dir =/= "" -> {ok, Dir};
        _ ->
            Gits = [G || G <- [os:getenv(GitVar) | Mirrors], is_list(G),
                         G =/= "", filelib:is_file(G)],
            case Gits of
                [Git | _] -> from_git(Git, Files, Dest);
                [] -> {skip, lists:flatten(
                               io_lib:format("no source: set ~s (a source "
                                             "directory) or ~s (a git "
                                             "directory)", [SrcVar, GitVar]))}
            end
    end.

from_git(Git, Files, Dest) ->
    ok = filelib:ensure_path(filename:join(Dest, "src")),
    Src = filename:join(Dest, "src"),
    Results = [begin
                   Out = filename:join(Src, F),
                   os:cmd("git --git-dir='" ++ Git ++ "' show HEAD:src/" ++ F ++
                              " > '" ++ Out ++ "' 2>/dev/null"),
                   filelib:file_size(Out) > 0
               end || F <- Files],
    case lists:all(fun(X) -> X end, Results) of
        true -> {ok, Src};
        false -> {skip, "cannot read the source from " ++ Git}
    end.

compile_tool(Src, Dest, Files, Mod) ->
    Ebin = filename:join(Dest, "ebin"),
    ok = filelib:ensure_path(Ebin),
    Gen = [begin
               In = filename:join(Src, F),
               Out = filename:join(Ebin, filename:rootname(F) ++ ".erl"),
               case filename:extension(F) of
                   ".xrl" -> {ok, _} = leex:file(In, [{scannerfile, Out}]);
                   ".yrl" -> {ok, _} = yecc:file(In, [{parserfile, Out}])
               end,
               Out
           end || F <- Files, lists:member(filename:extension(F),
                                           [".xrl", ".yrl"])],
    Erls = [filename:join(Src, F) || F <- Files,
                                     filename:extension(F) =:= ".erl"] ++ Gen,
    Res = [compile:file(E, [{outdir, Ebin}, {i, Src}, return_errors,
                            nowarn_deprecated_function])
           || E <- Erls],
    case [R || R <- Res, element(1, R) =/= ok] of
        [] ->
            true = code:add_patha(Ebin),
            {module, Mod} = code:ensure_loaded(Mod),
            ok;
        Errors ->
            Why = lists:flatten(io_lib:format("~p does not compile here: ~p",
                                              [Mod, Errors])),
            io:format("~s~n", [Why]),
            {skip, Why}
    end.
