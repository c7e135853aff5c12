#!/bin/sh
# scripts/install.sh -- `make install' and `make uninstall' (the Makefile
# passes the directories).  Installs:
#
#   BINDIR/beamprobe                       the trace reader (CLI)
#   MANDIR/man1/beamprobe.1                its man page
#   ERL_LIBDIR/beamprobe-VSN/ebin          the Erlang application (and the
#                                          Elixir modules when built), where
#                          /priv           code:lib_dir() looks (ERL_LIBDIR
#                          /include        is PREFIX/lib/erlang/lib: with
#                          /doc/chunks     PREFIX=/usr that is Debian's
#                          /bin/beamprobe  /usr/lib/erlang/lib; elsewhere
#                                          add it to ERL_LIBS)
#   DOCDIR/LICENSE, README.md
#
# ERL_LIBDIR/beamprobe-VSN/bin/beamprobe is a link to BINDIR/beamprobe:
# code:lib_dir(beamprobe) ++ "/bin/beamprobe" is the CLI wherever beamprobe
# is built or installed (as in a checkout, a mix or rebar3 _build).  The
# installed CLI finds the application (for attach, profile and record) as
# PREFIX/lib/erlang/lib/beamprobe-VSN from BINDIR = PREFIX/bin; with
# another ERL_LIBDIR, set BEAMPROBE_HOME to ERL_LIBDIR/beamprobe-VSN.
#
# Every path is prefixed with DESTDIR (packagers stage into it; the links
# point to the final paths).  Nothing half-installed stays behind: every
# file is staged beside its place and renamed into it once all are
# staged; a failure removes the staged copies and the directories the
# install created.  The directories an install created are listed in
# APPDIR/.installed-dirs (without DESTDIR): uninstall removes them again
# where they are empty.
#
# Usage: install.sh install|uninstall  (environment: DESTDIR BINDIR MANDIR
#        ERL_LIBDIR DOCDIR VSN)
set -eu
cmd=${1:?usage: install.sh install|uninstall}
: "${BINDIR:?}" "${MANDIR:?}" "${ERL_LIBDIR:?}" "${DOCDIR:?}" "${VSN:?}"
D=${DESTDIR:-}
APPDIR=$ERL_LIBDIR/beamprobe-$VSN

say() { echo "install: $*" >&2; }
DIRS_FILE=.installed-dirs

# rmdirs LIST: removes the '|'-separated directories of LIST, the last
# first (LIST has parents before their children), where they are empty.
rmdirs() {
  (rev=""; IFS='|'
   for d in $1; do rev="$d|$rev"; done
   for d in $rev; do [ -z "$d" ] || rmdir "$d" 2>/dev/null || true; done)
}

uninstall() {
  made=""
  [ -f "$D$APPDIR/$DIRS_FILE" ] && made=$(cat "$D$APPDIR/$DIRS_FILE")
  rm -f "$D$BINDIR/beamprobe" "$D$MANDIR/man1/beamprobe.1" \
        "$D$DOCDIR/LICENSE" "$D$DOCDIR/README.md"
  rm -rf "$D$APPDIR"
  rmdir "$D$DOCDIR" 2>/dev/null || true
  full=""; rest=$made
  while [ -n "$rest" ]; do
    d=${rest%%|*}; rest=${rest#*|}
    [ -z "$d" ] || full="$full$D$d|"
  done
  rmdirs "$full"
}

if [ "$cmd" = uninstall ]; then
  uninstall
  echo "uninstalled beamprobe $VSN from ${D:-/} (bin $BINDIR, man $MANDIR, app $APPDIR)"
  exit 0
fi
[ "$cmd" = install ] || { say "unknown command '$cmd' (install or uninstall)"; exit 2; }

# What must have been built (make all) -- named, before anything is copied.
for f in bin/beamprobe priv/beamprobe_nif.so priv/beamprobe_nif.build \
         ebin/beamprobe.app ebin/beamprobe.beam \
         doc/chunks/beamprobe.chunk docs/beamprobe.1 LICENSE; do
  [ -f "$f" ] || { say "$f is missing: run 'make all' first"; exit 1; }
done

# Everything is staged beside its final place (NAME.new.PID), then renamed
# into place at the end: a failure removes the staged copies and leaves
# what was there before (an earlier install) as it was.
tag=new.$$
new=$D$APPDIR.$tag
FILES="$D$BINDIR/beamprobe|$D$MANDIR/man1/beamprobe.1|$D$DOCDIR/LICENSE|$D$DOCDIR/README.md"
done_ok=no
made=""   # the directories this install created, parents first, '|'-separated
cleanup() {
  if [ "$done_ok" != yes ]; then
    say "failed: nothing installed (removing the staged copies)"
    rm -rf "$new"
    (IFS='|'; for f in $FILES; do rm -f "$f.$tag"; done)
    rmdirs "$made"
  fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

mkdirs() {  # mkdirs DIR: install -d DIR, noting the directories it creates
  d=$1; missing=""
  while [ -n "$d" ] && [ "$d" != / ] && [ "$d" != . ] && [ ! -e "$d" ]; do
    missing="$d|$missing"; d=$(dirname "$d")
  done
  made="$made$missing"
  install -d -m 0755 "$1"
}

stage() {  # stage MODE SRC DESTFILE
  mkdirs "$(dirname "$3")"
  install -m "$1" "$2" "$3.$tag"
}

# The application directory.
mkdirs "$D$ERL_LIBDIR"
install -d -m 0755 "$new/ebin" "$new/priv" "$new/include" "$new/doc/chunks" "$new/bin"
install -m 0644 ebin/*.beam ebin/beamprobe.app "$new/ebin/"
# The Elixir modules, where make elixir built them (elixirc installed).
ex=no
for f in _build/elixir/ebin/*.beam; do
  [ -f "$f" ] && install -m 0644 "$f" "$new/ebin/" && ex=yes
done
# The installed .app lists every module installed (releases, mix's and
# relx's, copy the modules the .app lists; Application.spec/2 reports
# them), and, with the Elixir modules, the elixir application as an
# optional dependency: started before beamprobe where it is there, not
# needed where it is not.
if [ "$ex" = yes ]; then
  erl -noshell -eval '
    [App, Ebin] = init:get_plain_arguments(),
    {ok, [{application, A, P}]} = file:consult(App),
    Ms = lists:sort([list_to_atom(filename:basename(F, ".beam"))
                     || F <- filelib:wildcard(filename:join(Ebin, "*.beam"))]),
    Apps = proplists:get_value(applications, P),
    P1 = lists:keystore(modules, 1, P, {modules, Ms}),
    P2 = lists:keystore(applications, 1, P1, {applications, Apps ++ [elixir]}),
    P3 = lists:keystore(optional_applications, 1, P2,
                        {optional_applications, [elixir]}),
    ok = file:write_file(App, io_lib:format("~p.~n", [{application, A, P3}])),
    halt().' -extra "$new/ebin/beamprobe.app" "$new/ebin" \
    || { say "could not list the Elixir modules in the installed beamprobe.app"; exit 1; }
fi
install -m 0755 priv/*.so "$new/priv/"
# What attach, profile and record check the node against (its OTP release
# and architecture).
install -m 0644 priv/beamprobe_nif.build "$new/priv/"
install -m 0644 include/*.hrl "$new/include/"
install -m 0644 doc/chunks/*.chunk "$new/doc/chunks/"
ln -s "$BINDIR/beamprobe" "$new/bin/beamprobe"

stage 0755 bin/beamprobe "$D$BINDIR/beamprobe"
stage 0644 docs/beamprobe.1 "$D$MANDIR/man1/beamprobe.1"
stage 0644 LICENSE "$D$DOCDIR/LICENSE"
stage 0644 README.md "$D$DOCDIR/README.md"

# The directories an install created, for uninstall (an earlier install's
# too: a reinstall creates none).
list=""
[ -f "$D$APPDIR/$DIRS_FILE" ] && list=$(cat "$D$APPDIR/$DIRS_FILE")
rest=$made
while [ -n "$rest" ]; do
  d=${rest%%|*}; rest=${rest#*|}
  case $d in "$D"/*) list="$list${d#"$D"}|" ;; esac
done
printf '%s' "$list" > "$new/$DIRS_FILE"

# Into place.
rm -rf "$D$APPDIR"
mv "$new" "$D$APPDIR"
(IFS='|'; for f in $FILES; do mv -f "$f.$tag" "$f"; done)
done_ok=yes
echo "installed beamprobe $VSN into ${D:-/}: $BINDIR/beamprobe, $MANDIR/man1/beamprobe.1, $APPDIR"
case ":${ERL_LIBS:-}:$(erl -noshell -eval 'io:put_chars(code:lib_dir()), halt().' 2>/dev/null):" in
  *":$ERL_LIBDIR:"*) ;;
  *) echo "note: $ERL_LIBDIR is not where erl looks; run erl with ERL_LIBS=$ERL_LIBDIR" ;;
esac
