#!/usr/bin/env escript
%% -*- erlang -*-
%% scripts/embed_docs.escript CHUNKDIR EBIN -- puts each module's EEP-48
%% doc chunk (CHUNKDIR/MOD.chunk) into EBIN/MOD.beam as its "Docs" chunk,
%% where code:get_doc/1 looks first.  Run by scripts/build_links.sh on
%% the ebin/ rebar3 made: a release (relx) copies an application's ebin/,
%% priv/ and include/ only, so doc/chunks never reaches it, but the beams
%% do -- and with them h(beamprobe, calls) in the release's shell.
%% A beam that already carries the same chunk is left alone; one whose
%% module has no chunk file is left alone too.
main([ChunkDir, Ebin]) ->
    lists:foreach(fun(Chunk) -> embed(Chunk, Ebin) end,
                  filelib:wildcard(filename:join(ChunkDir, "*.chunk")));
main(_) ->
    io:format(standard_error, "usage: embed_docs.escript CHUNKDIR EBIN~n", []),
    halt(2).

embed(ChunkFile, Ebin) ->
    Beam = filename:join(Ebin, filename:basename(ChunkFile, ".chunk") ++ ".beam"),
    case filelib:is_regular(Beam) of
        false -> ok;
        true ->
            {ok, Docs} = file:read_file(ChunkFile),
            {ok, _Mod, Chunks} = beam_lib:all_chunks(Beam),
            case lists:keyfind("Docs", 1, Chunks) of
                {"Docs", Docs} -> ok;
                _ ->
                    {ok, Bin} = beam_lib:build_module(
                                  lists:keystore("Docs", 1, Chunks, {"Docs", Docs})),
                    ok = file:write_file(Beam, Bin)
            end
    end.
