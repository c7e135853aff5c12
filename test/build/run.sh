#!/usr/bin/env bash
# test/build/run.sh -- beamprobe built the ways its users build it, each
# checked by tracing a real call through the result:
#
#   app_metadata     ebin/beamprobe.app lists every module; runtime_dependencies
#                    cover every application beamprobe calls (xref); LICENSE
#                    is the Apache-2.0 text the .app declares
#   mix_path         a fresh mix project, {:beamprobe, path: CHECKOUT}
#   mix_release      that project as a release (MIX_ENV=prod mix release)
#   mix_git          a fresh mix project, {:beamprobe, git: "file://CHECKOUT"}
#   rebar3_git       a fresh rebar3 project, {beamprobe, {git, "file://..."}}
#   rebar3_checkouts a fresh rebar3 project, _checkouts/beamprobe -> CHECKOUT
#   rebar3_release   that project as a release (rebar3 release, a minimal
#                    relx config): the NIF, the CLI (priv/bin) and the docs
#                    (in the beams) travel in it; a node started from it
#                    traces, and the release's CLI profiles it
#   rebar3_eunit     `rebar3 eunit' on the checkout
#   rebar3_ct        `rebar3 ct' on the checkout (two suites; the whole set,
#                    about 5 minutes, with REBAR3_CT_ALL=1)
#   install          make install PREFIX=/usr DESTDIR=tmp: man -l, the
#                    installed application traces, the installed CLI reads
#   install_cli      the installed CLI's profile and attach on a plain node
#   install_atomic   a failing install leaves nothing, a failing reinstall
#                    keeps the earlier one; uninstall removes beamprobe's files
#   missing_tool     no dtrace / no erl_nif.h: the build stops naming the package
#   mix_test         `mix test' in a clone of the checkout: the ExUnit suite
#   clean            make all, a trace, make clean in a clone under a path
#                    with spaces: nothing built is left
#
# The dependency projects trace a function of their own into a file sink
# and read it back with the dependency's CLI (code:lib_dir(beamprobe) ++
# "/bin/beamprobe"), and ask for the docs (h(beamprobe, calls)).  Offline:
# no hex (HEX_OFFLINE, an empty MIX_HOME), git deps from this checkout.
# Prints "N passed, M failed, K skipped".  Arguments: run only the named
# tests (e.g. `bash test/build/run.sh mix_path install').
set -uo pipefail
ONLY=" $* "
want() { [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $1 "* ]]; }
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bp_build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export HEX_OFFLINE=1 MIX_HOME=$TMP/mix_home HEX_HOME=$TMP/hex_home \
       REBAR_CACHE_DIR=$TMP/rebar_cache MIX_ENV=dev
unset MIX_EXS MIX_BUILD_PATH MIX_DEPS_PATH ERL_LIBS
passed=0; failed=0; skipped=0

ok() { echo "ok - $1"; passed=$((passed + 1)); }
not_ok() {  # not_ok NAME REASON [LOG]
  echo "not ok - $1: $2"; failed=$((failed + 1))
  [ -n "${3:-}" ] && [ -f "$3" ] && tail -30 "$3" | sed 's/^/    /'
  return 0
}
skip() { echo "skip - $1: $2"; skipped=$((skipped + 1)); }

[ -x bin/beamprobe ] && [ -f priv/beamprobe_nif.so ] && [ -f ebin/beamprobe.app ] || {
  echo "test/build: run 'make all' first"; echo "build: 0 passed, 1 failed"; exit 1; }

# --- app_metadata ----------------------------------------------------------
t=app_metadata; log=$TMP/$t.log
if ! want $t; then :
elif erl -noshell -eval '
    Fail = fun(F, A) -> io:format(F ++ "~n", A), halt(1) end,
    {ok, [{application, beamprobe, P}]} = file:consult("ebin/beamprobe.app"),
    Src = lists:sort([list_to_atom(filename:basename(F, ".erl")) || F <- filelib:wildcard("src/*.erl")]),
    Mods = lists:sort(proplists:get_value(modules, P)),
    Mods =:= Src orelse Fail("modules ~p, src/ has ~p", [Mods, Src]),
    Deps = [begin [A, V] = string:split(D, "-"), {list_to_atom(A), V} end
            || D <- proplists:get_value(runtime_dependencies, P, [])],
    Deps =/= [] orelse Fail("no runtime_dependencies", []),
    xref:start(s), xref:set_default(s, [{warnings, false}]),
    {ok, _} = xref:add_directory(s, "ebin"),
    {ok, Calls} = xref:q(s, "XC"),
    Called = lists:usort([M || {_, {M, _, _}} <- Calls, is_atom(M),
                               not lists:prefix("beamprobe", atom_to_list(M)),
                               M =/= list_to_atom("$M_EXPR")]),
    App = fun(M) -> case code:which(M) of
                        preloaded -> erts;
                        F when is_list(F) ->
                            list_to_atom(hd(string:split(filename:basename(
                                filename:dirname(filename:dirname(F))), "-")))
                    end end,
    Used = lists:usort([App(M) || M <- Called]),
    Missing = Used -- [A || {A, _} <- Deps],
    Missing =:= [] orelse Fail("runtime_dependencies ~p lack ~p (xref: beamprobe calls them)", [Deps, Missing]),
    Running = fun(erts) -> erlang:system_info(version);
                 (A) -> _ = application:load(A), {ok, X} = application:get_key(A, vsn), X end,
    Num = fun(V) -> [list_to_integer(X) || X <- string:lexemes(V, ".")] end,
    [Fail("~s-~s is newer than the running ~s", [A, V, Running(A)])
     || {A, V} <- Deps, Num(V) > Num(Running(A))],
    io:format("uses ~w, declares ~s~n", [Used, lists:join(" ", proplists:get_value(runtime_dependencies, P))]),
    halt(0).' > "$log" 2>&1; then
  lic=$(erl -noshell -eval '{ok, [{application, _, P}]} = file:consult("ebin/beamprobe.app"),
          io:put_chars(lists:join(",", proplists:get_value(licenses, P))), halt().')
  if [ "$lic" != "Apache-2.0" ]; then not_ok $t ".app licenses: '$lic', LICENSE is Apache-2.0"
  elif ! grep -q "Apache License" LICENSE || ! grep -q "Version 2.0, January 2004" LICENSE \
       || ! grep -q "END OF TERMS AND CONDITIONS" LICENSE; then not_ok $t "LICENSE is not the full Apache-2.0 text"
  elif [ -f /usr/share/common-licenses/Apache-2.0 ] && ! cmp -s LICENSE /usr/share/common-licenses/Apache-2.0; then
    not_ok $t "LICENSE differs from Debian's /usr/share/common-licenses/Apache-2.0"
  else ok "$t ($(tail -1 "$log"))"; fi
else not_ok $t "see below" "$log"; fi

# --- missing_tool: a first build without dtrace / erl_nif.h names the package -
t=missing_tool; log=$TMP/$t.log
if want $t; then
  make -C c_src PRIV="$TMP/mt_priv" BUILD="$TMP/mt_build" DTRACE=/nonexistent/dtrace > "$log" 2>&1; rc1=$?
  make -C c_src PRIV="$TMP/mt_priv" BUILD="$TMP/mt_build" ERL_INCLUDE=/nonexistent "$TMP/mt_priv/beamprobe_nif.so" >> "$log" 2>&1; rc2=$?
  if [ $rc1 -eq 0 ] || ! grep -q "install systemtap-sdt-dev" "$log"; then not_ok $t "no dtrace: rc $rc1, no message naming systemtap-sdt-dev" "$log"
  elif [ $rc2 -eq 0 ] || ! grep -q "install erlang-dev" "$log"; then not_ok $t "no erl_nif.h: rc $rc2, no message naming erlang-dev" "$log"
  elif [ -e "$TMP/mt_priv/beamprobe_nif.so" ]; then not_ok $t "a NIF was built anyway" "$log"
  else ok $t; fi
fi

# --- helpers ----------------------------------------------------------------
have() { command -v "$1" >/dev/null 2>&1; }
HEAD_SHA=$(git rev-parse HEAD 2>/dev/null || true)
DIRTY=$(git status --porcelain --untracked-files=no 2>/dev/null | head -1)

# check_trace NAME LOG [nocli]: the run traced bpdep_work:double(21) (or
# the Elixir BpdepWork.double), read it back with the dependency's CLI
# (unless nocli) and printed the docs of beamprobe:calls from its chunks.
check_trace() {
  local t=$1 log=$2
  if ! grep -q "^lib_dir " "$log"; then not_ok "$t" "the traced run did not complete" "$log"
  elif [ "${3:-}" != nocli ] && ! grep -Eq "call .*([Bb]pdep_?[Ww]ork)['.:]+double\(21\)" "$log"; then
    not_ok "$t" "the dependency's CLI did not print the traced call double(21)" "$log"
  elif ! grep -q "events 1\b" "$log"; then not_ok "$t" "the session did not count 1 event" "$log"
  elif ! grep -Eq "(-spec|@spec) calls\(" "$log" || grep -Eiq "not compiled with doc|no documentation" "$log"; then
    not_ok "$t" "h(beamprobe, calls) did not find the doc chunks" "$log"
  else ok "$t ($(grep '^lib_dir ' "$log" | head -1))"; fi
}

# The Erlang side of a traced run (rebar3 projects, the installed app):
# the code path is given by the caller.
ERL_TRACE='
  Dir = os:getenv("TRACE_DIR"),
  {ok, _} = application:ensure_all_started(beamprobe),
  {ok, S} = beamprobe:start(#{calls => [{bpdep_work, double, 1}], output => {file, Dir}}),
  42 = bpdep_work:double(21),
  {ok, Sum} = beamprobe:stop(S),
  io:format("events ~p~n", [maps:get(events, Sum)]),
  Cli = filename:join([code:lib_dir(beamprobe), "bin", "beamprobe"]),
  io:format("cli ~s~n~s", [Cli, os:cmd(Cli ++ " print " ++ Dir ++ " 2>&1")]),
  c:h(beamprobe, calls),
  io:format("lib_dir ~s~n", [code:lib_dir(beamprobe)]),
  halt(0).'

write_erl_work() {  # a module of the dependent project, to trace
  mkdir -p "$1/src"
  printf '%s\n' '-module(bpdep_work).' '-export([double/1]).' \
    'double(X) -> 2 * X.' > "$1/src/bpdep_work.erl"
}

# --- mix --------------------------------------------------------------------
MIX_TRACE='
dir = System.fetch_env!("TRACE_DIR")
{:ok, s} = :beamprobe.start(%{calls: [{BpdepWork, :double, 1}], output: {:file, String.to_charlist(dir)}})
42 = BpdepWork.double(21)
{:ok, sum} = :beamprobe.stop(s)
IO.puts("events #{sum.events}")
cli = Path.join(:code.lib_dir(:beamprobe), "bin/beamprobe")
{out, _} = System.cmd(cli, ["print", dir], stderr_to_stdout: true)
IO.puts("cli #{cli}\n#{out}")
IEx.Introspection.h({:beamprobe, :calls})
if Code.ensure_loaded?(Beamprobe), do: IEx.Introspection.h({Beamprobe, :calls})
IO.puts("\nlib_dir #{:code.lib_dir(:beamprobe)}")
'

mix_project() {  # mix_project NAME DEP-LINE: a fresh project, compiled and traced
  local t=$1 dep=$2 p=$TMP/$1 log=$TMP/$1.log
  (cd "$TMP" && mix new "$t" >/dev/null) || { not_ok "$t" "mix new failed"; return; }
  sed -i "s|# {:dep_from_hexpm, \"~> 0.3.0\"},|$dep,|" "$p/mix.exs"
  grep -q beamprobe "$p/mix.exs" || { not_ok "$t" "could not add the dependency to mix.exs"; return; }
  printf '%s\n' 'defmodule BpdepWork do' '  def double(x), do: x * 2' 'end' > "$p/lib/bpdep_work.ex"
  if ! (cd "$p" && mix deps.get && mix compile) > "$log" 2>&1; then
    not_ok "$t" "mix compile failed" "$log"; return; fi
  local lib=$p/_build/dev/lib/beamprobe
  for f in priv/beamprobe_nif.so bin/beamprobe doc/chunks/beamprobe.chunk ebin/beamprobe.app; do
    [ -e "$lib/$f" ] || { not_ok "$t" "$lib/$f is missing after mix compile" "$log"; return; }
  done
  (cd "$p" && TRACE_DIR=$TMP/$t.trace mix run -e "$MIX_TRACE") >> "$log" 2>&1
  # The Elixir module (lib/), where the checkout has it: compiled by mix
  # with its docs (h Beamprobe.calls).
  if [ -f "$ROOT/lib/beamprobe.ex" ] && ! grep -q "def calls(" "$log"; then
    not_ok "$t" "h Beamprobe.calls printed no docs (lib/ not compiled by mix?)" "$log"; return; fi
  check_trace "$t" "$log"
}

if ! have mix; then
  skip mix_path "elixir (mix) is not installed (make deps installs it)"
  skip mix_git "elixir (mix) is not installed (make deps installs it)"
else
  before=$(git status --porcelain 2>/dev/null)
  want mix_path && mix_project mix_path "{:beamprobe, path: \"$ROOT\"}"
  # mix_release: the mix_path project as a release (MIX_ENV=prod): the
  # NIF travels in its priv/, and a node started from it traces.
  t=mix_release; p=$TMP/mix_path; log=$TMP/$t.log
  if ! want $t; then :
  elif [ ! -d "$p/_build" ]; then skip $t "the mix_path project was not built"
  elif ! (cd "$p" && MIX_ENV=prod mix release --quiet) > "$log" 2>&1; then not_ok $t "mix release failed" "$log"
  else
    rel=$p/_build/prod/rel/mix_path
    lib=$(ls -d "$rel"/lib/beamprobe-* 2>/dev/null | head -1)
    TRACE_DIR=$TMP/$t.trace "$rel/bin/mix_path" eval "
      dir = System.fetch_env!(\"TRACE_DIR\")
      {:ok, _} = Application.ensure_all_started(:beamprobe)
      {:ok, s} = :beamprobe.start(%{calls: [{BpdepWork, :double, 1}], output: {:file, String.to_charlist(dir)}})
      42 = BpdepWork.double(21)
      {:ok, sum} = :beamprobe.stop(s)
      IO.puts(\"events #{sum.events} nif #{:code.priv_dir(:beamprobe)}\")" \
      >> "$log" 2>&1 < /dev/null
    out=$("$ROOT/bin/beamprobe" print "$TMP/$t.trace" 2>&1)
    if [ -z "$lib" ] || [ ! -f "$lib/priv/beamprobe_nif.so" ]; then not_ok $t "the release has no beamprobe priv/beamprobe_nif.so" "$log"
    elif ! grep -q "events 1 nif $lib/priv" "$log"; then not_ok $t "the release node did not trace with its own NIF" "$log"
    elif ! echo "$out" | grep -Eq "BpdepWork['.:]+double\(21\)"; then not_ok $t "the trace lacks the call: $out" "$log"
    else ok "$t ($lib)"; fi
  fi
  after=$(git status --porcelain 2>/dev/null)
  [ "$before" = "$after" ] || not_ok mix_path_clean "mix compile left files in the checkout: $(echo "$after" | head -3)"
  if ! want mix_git; then :
  elif [ -z "$HEAD_SHA" ]; then skip mix_git "the checkout is not a git repository"
  else
    [ -n "$DIRTY" ] && echo "# mix_git, rebar3_git: the committed HEAD $HEAD_SHA (the work tree has changes)"
    mix_project mix_git "{:beamprobe, git: \"file://$ROOT\", ref: \"$HEAD_SHA\"}"
  fi
fi

# --- rebar3 -----------------------------------------------------------------
rebar3_project() {  # rebar3_project NAME DEPS-TERM [CHECKOUT]
  local t=$1 deps=$2 p=$TMP/$1 log=$TMP/$1.log
  mkdir -p "$p/src"
  printf '%s\n' "{erl_opts, [debug_info]}." "{deps, [$deps]}." \
    "{relx, [{release, {$t, \"0.1.0\"}, [$t, beamprobe]}, {dev_mode, false}," \
    "        {include_erts, false}, {vm_args, \"vm.args\"}]}." \
    > "$p/rebar.config"
  printf '%s\n' "{application, $t, [{vsn, \"0.1.0\"}, {description, \"test\"}," \
    "  {applications, [kernel, stdlib, beamprobe]}, {modules, []}]}." > "$p/src/$t.app.src"
  write_erl_work "$p"
  if [ -n "${3:-}" ]; then mkdir -p "$p/_checkouts" && ln -s "$3" "$p/_checkouts/beamprobe"; fi
  if ! (cd "$p" && rebar3 compile) > "$log" 2>&1; then not_ok "$t" "rebar3 compile failed" "$log"; return; fi
  if grep -Eiq "hex|package registry" "$log"; then not_ok "$t" "rebar3 went to hex" "$log"; return; fi
  local paths; paths=$(cd "$p" && rebar3 path 2>/dev/null | tail -1)
  [ -n "$paths" ] || { not_ok "$t" "rebar3 path printed nothing" "$log"; return; }
  # shellcheck disable=SC2086
  (cd "$p" && TRACE_DIR=$TMP/$t.trace erl -noshell -pa ${paths} -eval "$ERL_TRACE") >> "$log" 2>&1
  check_trace "$t" "$log"
}

if ! have rebar3; then
  for t in rebar3_git rebar3_checkouts rebar3_release rebar3_eunit rebar3_ct; do skip $t "rebar3 is not installed (make deps installs it)"; done
else
  if ! want rebar3_git; then :
  elif [ -z "$HEAD_SHA" ]; then skip rebar3_git "the checkout is not a git repository"
  else rebar3_project rebar3_git "{beamprobe, {git, \"file://$ROOT\", {ref, \"$HEAD_SHA\"}}}"; fi
  want rebar3_checkouts && rebar3_project rebar3_checkouts "beamprobe" "$ROOT"

  # The release's CLI (priv/bin/beamprobe, no BEAMPROBE_HOME) profiles a
  # plain node that has no beamprobe: it must find the application's
  # ebin/ and priv/ two levels above itself (it looked in priv/ and
  # failed: "cannot read .../priv/priv/beamprobe_nif.build").
  rel_bare_profile() { # CLI LOG
    local tgt=bp_rel_bare_$$ tpid rc
    erl -noshell -sname $tgt -setcookie bprel -eval 'F = fun L() -> lists:seq(1, 3), timer:sleep(20), L() end, F()' >/dev/null 2>&1 &
    tpid=$!
    for _ in $(seq 1 50); do erl_call -sname $tgt -c bprel -a 'erlang node' >/dev/null 2>&1 && break; sleep 0.2; done
    (cd "$TMP" && env -u BEAMPROBE_HOME timeout 60 "$1" profile --cookie bprel --seconds 1 $tgt 'lists:seq/2') > "$TMP/rel_bare_prof.txt" 2>> "$2"; rc=$?
    kill $tpid 2>/dev/null; wait $tpid 2>/dev/null
    [ $rc -eq 0 ] && grep -q "lists:seq/2" "$TMP/rel_bare_prof.txt"
  }

  # rebar3_release: the rebar3_checkouts project as a release.  relx
  # copies an application's ebin/, priv/ and include/ only: the NIF is in
  # priv/, the CLI in priv/bin (a link to ../bin, copied as a file), the
  # docs in the beams' "Docs" chunks (scripts/build_links.sh).
  t=rebar3_release; p=$TMP/rebar3_checkouts; log=$TMP/$t.log
  if ! want $t; then :
  elif [ ! -d "$p/_build" ]; then skip $t "the rebar3_checkouts project was not built"
  elif ! { printf '%s\n' '-module(bpdep_check).' '-export([run/0]).' 'run() ->' \
             '  Dir = os:getenv("TRACE_DIR"),' \
             '  {ok, S} = beamprobe:start(#{calls => [{bpdep_work, double, 1}], output => {file, Dir}}),' \
             '  42 = bpdep_work:double(21),' \
             '  {ok, Sum} = beamprobe:stop(S),' \
             '  io:format("events ~p nif ~s~n", [maps:get(events, Sum), code:priv_dir(beamprobe)]),' \
             '  Cli = filename:join([code:priv_dir(beamprobe), "bin", "beamprobe"]),' \
             '  io:format("cli ~s~n~s", [Cli, os:cmd(Cli ++ " print " ++ Dir ++ " 2>&1")]),' \
             '  c:h(beamprobe, calls),' \
             '  Loop = spawn(fun L() -> bpdep_work:double(1), timer:sleep(5), L() end),' \
             '  Prof = os:cmd(Cli ++ " profile --seconds 1 " ++ atom_to_list(node()) ++ " bpdep_work:double/1 2>&1"),' \
             '  exit(Loop, kill),' \
             '  io:format("profile~n~s~n", [Prof]),' \
             '  io:format("lib_dir ~s~n", [code:lib_dir(beamprobe)]),' \
             '  halt(0).' > "$p/src/bpdep_check.erl"
           echo "-sname bp_rel_$$" > "$p/vm.args"
           (cd "$p" && rebar3 release); } > "$log" 2>&1; then not_ok $t "rebar3 release failed" "$log"
  else
    rel=$p/_build/default/rel/rebar3_checkouts
    lib=$(ls -d "$rel"/lib/beamprobe-* 2>/dev/null | head -1)
    TRACE_DIR=$TMP/$t.trace ERL_FLAGS="-s bpdep_check run" timeout 120 \
      "$rel/bin/rebar3_checkouts" foreground >> "$log" 2>&1 < /dev/null
    if [ -z "$lib" ] || [ ! -f "$lib/priv/beamprobe_nif.so" ]; then not_ok $t "the release has no beamprobe priv/beamprobe_nif.so" "$log"
    elif [ ! -x "$lib/priv/bin/beamprobe" ] || [ -L "$lib/priv/bin" ] || [ -L "$lib/priv/bin/beamprobe" ]; then
      not_ok $t "the release has no CLI of its own in priv/bin/beamprobe" "$log"
    elif ! grep -q "events 1 nif $lib/priv" "$log"; then not_ok $t "the release node did not trace with its own NIF" "$log"
    elif ! sed -n '/^profile$/,/^lib_dir /p' "$log" | grep -q "bpdep_work:double/1"; then
      not_ok $t "the release's CLI could not profile the release's node (its application directory?)" "$log"
    elif ! rel_bare_profile "$lib/priv/bin/beamprobe" "$log"; then
      not_ok $t "the release's CLI could not bring beamprobe to a node without it: $(head -c 300 "$TMP/rel_bare_prof.txt")" "$log"
    else check_trace $t "$log"; fi
  fi

  # rebar3 eunit / ct on the checkout itself (its _build/test).
  t=rebar3_eunit; log=$TMP/$t.log
  if want $t; then
  (rebar3 eunit) > "$log" 2>&1; rc=$?
  n=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -Eo '^[0-9]+ tests, [0-9]+ failures' | tail -1)
  if [ $rc -eq 0 ] && [ -n "$n" ] && [ "${n%% *}" -gt 0 ] && echo "$n" | grep -q " 0 failures"; then ok "$t ($n)"
  else not_ok $t "rebar3 eunit: rc $rc, '${n:-no summary}'" "$log"; fi
  fi

  t=rebar3_ct; log=$TMP/$t.log
  if want $t; then
  # Two suites (the core one, and one that runs the CLI through the bin/
  # link); REBAR3_CT_ALL=1: every suite (about 5 minutes).
  suites=test/beamprobe_SUITE,test/beamprobe_printer_SUITE
  [ "${REBAR3_CT_ALL:-0}" = 1 ] && suites=$(ls test/*_SUITE.erl | paste -sd, -)
  (rebar3 ct --suite "$suites") > "$log" 2>&1; rc=$?
  n=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^All [0-9]+ tests passed|^Failed [0-9]+ tests' | tail -1)
  if [ $rc -eq 0 ] && echo "$n" | grep -Eq '^All [1-9][0-9]* tests passed'; then ok "$t ($n)"
  else not_ok $t "rebar3 ct: rc $rc, '${n:-no summary}'" "$log"; fi
  fi
fi

# --- make install -------------------------------------------------------------
t=install; log=$TMP/$t.log; D=$TMP/stage
VSN=$(sed -n 's/^ *{vsn, *"\([^"]*\)"}.*/\1/p' src/beamprobe.app.src)
APP=$D/usr/lib/erlang/lib/beamprobe-$VSN
if ! want $t && ! want install_atomic; then :
elif ! make --no-print-directory install PREFIX=/usr DESTDIR="$D" > "$log" 2>&1; then
  not_ok $t "make install failed" "$log"
else
  bad=""
  for f in usr/bin/beamprobe:755 usr/share/man/man1/beamprobe.1:644 \
           "usr/lib/erlang/lib/beamprobe-$VSN/priv/beamprobe_nif.so:755" \
           "usr/lib/erlang/lib/beamprobe-$VSN/ebin/beamprobe.app:644" \
           "usr/lib/erlang/lib/beamprobe-$VSN/ebin/beamprobe.beam:644" \
           "usr/lib/erlang/lib/beamprobe-$VSN/include/beamprobe_events.hrl:644" \
           "usr/lib/erlang/lib/beamprobe-$VSN/doc/chunks/beamprobe.chunk:644" \
           usr/share/doc/beamprobe/LICENSE:644; do
    m=$(stat -c %a "$D/${f%:*}" 2>/dev/null); [ "$m" = "${f##*:}" ] || bad="$bad ${f%:*}(mode ${m:-missing})"
  done
  [ "$(readlink "$APP/bin/beamprobe")" = /usr/bin/beamprobe ] || bad="$bad $APP/bin/beamprobe(not a link to /usr/bin/beamprobe)"
  nbeam=$(ls "$APP"/ebin/*.beam | grep -vc '/Elixir\.'); nsrc=$(ls src/*.erl | wc -l)
  [ "$nbeam" -eq "$nsrc" ] || bad="$bad ebin($nbeam beams for $nsrc modules)"
  # The installed .app lists exactly the modules installed (Elixir's too).
  appmods=$(erl -noshell -eval '[E] = init:get_plain_arguments(), {ok, [{application, _, P}]} = file:consult(filename:join(E, "beamprobe.app")), Ms = lists:sort([list_to_atom(filename:basename(F, ".beam")) || F <- filelib:wildcard(filename:join(E, "*.beam"))]), io:format("~s", [case lists:sort(proplists:get_value(modules, P)) of Ms -> "same"; L -> io_lib:format("listed ~p, installed ~p", [L -- Ms, Ms -- L]) end]), halt().' -extra "$APP/ebin" 2>&1)
  [ "$appmods" = same ] || bad="$bad beamprobe.app(modules: $appmods)"
  # The Elixir modules too, where elixir is installed: the installed
  # Beamprobe module loads from ERL_LIBS and has its docs.
  if have elixir; then
    nex=$(ls "$APP"/ebin/Elixir.*.beam 2>/dev/null | wc -l); nlib=$(ls lib/*.ex lib/*/*.ex 2>/dev/null | wc -l)
    [ "$nex" -ge "$nlib" ] && [ "$nlib" -gt 0 ] || bad="$bad ebin($nex Elixir beams for $nlib lib/ files)"
    ERL_LIBS=$D/usr/lib/erlang/lib elixir -e '{:docs_v1, _, :elixir, _, _, _, docs} = Code.fetch_docs(Beamprobe); true = Enum.any?(docs, &match?({{:function, :calls, _}, _, _, %{}, _}, &1)); :ok = Application.load(:beamprobe); true = Beamprobe in Application.spec(:beamprobe, :modules); IO.puts(:code.which(Beamprobe))' > "$TMP/ex_install.txt" 2>&1 \
      && grep -q "^$APP/ebin/Elixir.Beamprobe.beam" "$TMP/ex_install.txt" \
      || bad="$bad Beamprobe(not loaded with its docs from the install: $(head -c 300 "$TMP/ex_install.txt"))"
  else echo "# install: elixir not installed: the Elixir modules not checked"; fi
  if [ -n "$bad" ]; then not_ok $t "installed files wrong:$bad" "$log"
  elif ! have man; then not_ok $t "man is not installed"
  elif ! MANWIDTH=80 man -l "$D/usr/share/man/man1/beamprobe.1" 2>>"$log" | col -b > "$TMP/man.txt" \
       || ! grep -q "^NAME" "$TMP/man.txt" || ! grep -Eq "beamprobe.*(print|stats)" "$TMP/man.txt"; then
    not_ok $t "man -l on the installed page printed no NAME section" "$log"
  else
    # The installed application, found through ERL_LIBS as erl finds
    # anything in code:lib_dir(), traces; the installed CLI reads (its
    # link in the application directory points to /usr/bin/beamprobe,
    # not there under DESTDIR: nocli).
    w=$TMP/install_work; write_erl_work "$w"; mkdir -p "$w/ebin"
    erlc -o "$w/ebin" "$w/src/bpdep_work.erl"
    (cd "$w" && ERL_LIBS=$D/usr/lib/erlang/lib TRACE_DIR=$TMP/install.trace \
       erl -noshell -pa ebin -eval 'io:format("app ~s~n", [code:which(beamprobe)]).' \
       -eval "$ERL_TRACE") >> "$log" 2>&1
    out=$("$D/usr/bin/beamprobe" print "$TMP/install.trace" 2>&1)
    if ! grep -q "^app $APP/ebin/beamprobe.beam" "$log"; then
      not_ok $t "erl did not load beamprobe from the installed directory" "$log"
    elif ! echo "$out" | grep -q "bpdep_work:double(21)"; then
      not_ok $t "the installed CLI did not print the traced call: $out" "$log"
    else check_trace $t "$log" nocli; fi
  fi
fi

# --- install_cli: the installed CLI's attach and profile find the application ---
# (PREFIX/lib/erlang/lib/beamprobe-VSN from PREFIX/bin, its
# beamprobe_nif.build installed); a profile then an attach on one plain
# node, which keeps none of beamprobe's modules (the Elixir ones included:
# an installed ebin/ holds them).
t=install_cli; log=$TMP/$t.log
if ! want $t; then :
elif [ ! -x "$D/usr/bin/beamprobe" ]; then skip $t "the install test did not install"
else
  tgt=bp_inst_tgt_$$
  erl -noshell -sname $tgt -setcookie bpinst -eval 'F = fun L() -> lists:seq(1, 3), timer:sleep(20), L() end, F()' >/dev/null 2>&1 &
  tpid=$!
  for _ in $(seq 1 50); do erl_call -sname $tgt -c bpinst -a 'erlang node' >/dev/null 2>&1 && break; sleep 0.2; done
  (cd "$TMP" && timeout 60 "$D/usr/bin/beamprobe" profile --cookie bpinst --seconds 1 $tgt 'lists:seq/2') > "$TMP/inst_prof.txt" 2>> "$log"; rc1=$?
  (cd "$TMP" && timeout 60 "$D/usr/bin/beamprobe" attach --cookie bpinst --seconds 1 -q -o "$TMP/inst_attach" $tgt 'lists:seq/2') >> "$log" 2>&1; rc2=$?
  left=$(erl -noshell -sname bp_inst_chk_$$ -setcookie bpinst -eval "io:format(\"~p~n\", [[M || {M, _} <- rpc:call('$tgt@$(hostname -s)', code, all_loaded, []), lists:prefix(\"beamprobe\", atom_to_list(M)) orelse lists:prefix(\"Elixir.Beamprobe\", atom_to_list(M))]]), halt()." 2>&1)
  kill $tpid 2>/dev/null; wait $tpid 2>/dev/null
  if [ $rc1 -ne 0 ] || ! grep -q "lists:seq/2" "$TMP/inst_prof.txt"; then
    not_ok $t "the installed CLI's profile failed (rc $rc1): $(head -c 300 "$TMP/inst_prof.txt")" "$log"
  elif [ $rc2 -ne 0 ]; then not_ok $t "the installed CLI's attach after a profile failed (rc $rc2)" "$log"
  elif ! "$D/usr/bin/beamprobe" info "$TMP/inst_attach" 2>>"$log" | grep -Eq '^events: +[1-9]'; then
    not_ok $t "the installed CLI's attach wrote no event" "$log"
  elif [ "$left" != "[]" ]; then not_ok $t "beamprobe's modules left on the node: $left" "$log"
  else ok $t; fi
fi

# --- install_atomic: all or nothing; uninstall leaves nothing -------------------
t=install_atomic; log=$TMP/$t.log; D2=$TMP/stage2
mkdir -p "$D2/usr/share"; echo "a file where the man directory goes" > "$D2/usr/share/man"
if ! want $t; then :
elif make --no-print-directory install PREFIX=/usr DESTDIR="$D2" > "$log" 2>&1; then
  not_ok $t "make install succeeded although $D2/usr/share/man is a file" "$log"
elif left=$(find "$D2" -mindepth 1 \( -type f -o -type l \) ! -path "$D2/usr/share/man" | head -5); [ -n "$left" ]; then
  not_ok $t "a failed install left files behind: $left" "$log"
elif left=$(find "$D2" -mindepth 1 -type d ! -path "$D2/usr" ! -path "$D2/usr/share" | head -5); [ -n "$left" ]; then
  not_ok $t "a failed install left directories it created: $left" "$log"
elif ! grep -q "nothing installed" "$log"; then not_ok $t "the failure was not reported" "$log"
elif [ ! -f "$D/usr/bin/beamprobe" ]; then skip $t "the install test did not install"
else
  # A reinstall that fails keeps the earlier install whole; uninstall
  # removes beamprobe's files and nothing else.
  # (the installed CLI marked: a reinstall that overwrote it before
  # failing shows)
  printf 'mark' >> "$D/usr/bin/beamprobe"; sum=$(md5sum < "$D/usr/bin/beamprobe")
  echo "another tool" > "$D/usr/bin/other-tool"
  rm -rf "$D/usr/share/doc/beamprobe"; echo "not a directory" > "$D/usr/share/doc/beamprobe"
  if make --no-print-directory install PREFIX=/usr DESTDIR="$D" >> "$log" 2>&1; then
    not_ok $t "a reinstall succeeded although DOCDIR is a file" "$log"
  elif [ "$(md5sum < "$D/usr/bin/beamprobe" 2>/dev/null)" != "$sum" ] || [ ! -f "$APP/ebin/beamprobe.beam" ] \
       || [ ! -f "$D/usr/share/man/man1/beamprobe.1" ]; then
    not_ok $t "a failed reinstall damaged the earlier install" "$log"
  elif left=$(find "$D" -name "*.new.*" | head -3); [ -n "$left" ]; then
    not_ok $t "a failed reinstall left staged copies: $left" "$log"
  else
    rm -f "$D/usr/share/doc/beamprobe"
    if ! make --no-print-directory uninstall PREFIX=/usr DESTDIR="$D" >> "$log" 2>&1; then
      not_ok $t "make uninstall failed" "$log"
    elif left=$(find "$D" \( -type f -o -type l \) ! -path "$D/usr/bin/other-tool" | head -5); [ -n "$left" ]; then
      not_ok $t "make uninstall left files: $left" "$log"
    elif [ ! -f "$D/usr/bin/other-tool" ]; then not_ok $t "make uninstall removed another tool's file" "$log"
    elif left=$(find "$D" -mindepth 1 -type d -empty | head -5); [ -n "$left" ]; then
      not_ok $t "make uninstall left the directories the install created: $left" "$log"
    else ok $t; fi
  fi
fi

# --- mix_test: `mix test` in a clone of the checkout runs the ExUnit suite
t=mix_test; log=$TMP/$t.log
if ! want $t; then :
elif ! have mix; then skip $t "elixir (mix) is not installed (make deps installs it)"
elif [ -z "$HEAD_SHA" ]; then skip $t "the checkout is not a git repository"
else
  c=$TMP/mix_test_clone
  if ! { git clone -q "$ROOT" "$c" && (cd "$c" && git checkout -q "$HEAD_SHA"); } >> "$log" 2>&1; then
    not_ok $t "git clone failed" "$log"
  elif ! (cd "$c" && MIX_ENV=test mix test) >> "$log" 2>&1; then
    not_ok $t "mix test failed" "$log"
  elif ! grep -Eq "^[0-9]+ doctests?, [0-9]+ tests?, 0 failures" "$log"; then
    not_ok $t "mix test ran no suite" "$log"
  else ok "$t ($(grep -E "tests?, 0 failures" "$log" | tail -1))"; fi
fi

# --- clean: make all then make clean in a fresh clone leaves it as cloned;
# the clone's path has spaces (a checkout under "My Projects" builds) -------
t=clean; log=$TMP/$t.log
if ! want $t; then :
elif [ -z "$HEAD_SHA" ]; then skip $t "the checkout is not a git repository"
else
  c="$TMP/with space/beam probe"
  mkdir -p "$TMP/with space"
  if ! { git clone -q "$ROOT" "$c" && (cd "$c" && git checkout -q "$HEAD_SHA" && make all); } >> "$log" 2>&1; then
    not_ok $t "clone or make all in \"$c\" failed" "$log"
  elif ! (cd "$c" && erl -noshell -pa ebin -eval 'N = beamprobe:calls("lists:seq/2", 1), lists:seq(1, 2), timer:sleep(300), io:format("matched ~p~n", [N]), halt().') >> "$log" 2>&1 \
       || ! grep -q "call lists:seq(1, 2)" "$log"; then
    not_ok $t "the build in \"$c\" did not trace" "$log"
  elif ! (cd "$c" && make clean) >> "$log" 2>&1; then not_ok $t "make clean failed" "$log"
  elif left=$(cd "$c" && git status --porcelain --ignored | head -5); [ -n "$left" ]; then
    not_ok $t "make clean left build products: $left" "$log"
  else ok $t; fi
fi

echo "build: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
