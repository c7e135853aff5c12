#!/usr/bin/env escript
%%% scripts/chunks_pre_code.escript CHUNK...: rewrites EEP-48 doc chunks
%%% made by edoc_layout_chunks so that every {pre, Attrs, Content} holds
%%% {code, [], Content}, as the application/erlang+html format has it
%%% (shell_docs renders both; Elixir's IEx showed a bare pre's <pre> tags
%%% as text).  Run by the Makefile's chunks rule.
-mode(compile).

main(Files) ->
    lists:foreach(fun rewrite/1, Files).

rewrite(File) ->
    {ok, Bin} = file:read_file(File),
    {docs_v1, Anno, Lang, Format, ModDoc, Meta, Docs} = binary_to_term(Bin),
    Docs1 = [{K, A, S, doc(D), M} || {K, A, S, D, M} <- Docs],
    Out = {docs_v1, Anno, Lang, Format, doc(ModDoc), Meta, Docs1},
    ok = file:write_file(File, term_to_binary(Out)).

doc(#{} = ByLang) -> maps:map(fun(_, D) -> html(D) end, ByLang);
doc(D) -> D.  % none | hidden

html(L) when is_list(L) -> [html(E) || E <- L];
html({pre, A, [{code, _, _}] = C}) -> {pre, A, C};
html({pre, A, C}) -> {pre, A, [{code, [], C}]};
html({E, A, C}) when is_list(C) -> {E, A, html(C)};
html(X) -> X.
