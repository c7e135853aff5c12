#!/bin/sh
# scripts/build_links.sh -- run by rebar3 after `compile' (rebar.config's
# post_hooks; the mix compiler does the same in mix.exs): makes bin/
# (the CLI) and doc/ (the EEP-48 chunks) of this checkout appear next to
# the ebin/ the build tool made, as priv/ already does, so that
# code:lib_dir(beamprobe) ++ "/bin/beamprobe" is the CLI and
# code:get_doc/1 (h(beamprobe, calls), h :beamprobe.calls) finds the
# chunks when beamprobe is the project, a dependency or a _checkouts app.
# The chunks also go into the beams of that ebin/ (their "Docs" chunk,
# scripts/embed_docs.escript): `rebar3 release' (relx) copies ebin/,
# priv/ and include/ only, so a release has h(beamprobe, calls) from
# them; the CLI reaches a release through priv/bin, a link to ../bin
# (relx copies the file it points to).
#
# Usage: build_links.sh [LIBDIR...]   (default: rebar3's lib directories)
set -eu
src=$(pwd -P)
[ -x "$src/bin/beamprobe" ] || { echo "build_links: $src/bin/beamprobe is missing (make cli failed?)" >&2; exit 1; }
if [ $# -eq 0 ]; then
  set -- "${REBAR_DEPS_DIR:-}/beamprobe" "${REBAR_CHECKOUTS_OUT_DIR:-}/beamprobe"
fi
for lib in "$@"; do
  [ -d "$lib" ] || continue
  out=$(cd "$lib" && pwd -P)
  [ "$out" = "$src" ] && continue          # built in place: nothing to link
  if [ -d "$src/doc/chunks" ] && [ -d "$out/ebin" ] && [ ! -L "$out/ebin" ]; then
    escript "$src/scripts/embed_docs.escript" "$src/doc/chunks" "$out/ebin"
  fi
  for d in bin doc; do
    [ -d "$src/$d" ] || continue
    if [ -L "$out/$d" ] || [ ! -e "$out/$d" ]; then
      ln -sfn "$src/$d" "$out/$d"
    else
      # a real directory (a copy made by an earlier build): refresh it
      rm -rf "${out:?}/$d" && cp -R "$src/$d" "$out/$d"
    fi
  done
done
