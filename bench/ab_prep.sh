# bench/ab_prep.sh -- sourced by bench/ab.sh and bench/ab_overlap.sh:
# builds the floor tracer and the bench modules into B=_build/bench and
# sets A to the build to compare with: $rev itself when it is a built tree
# (its priv/ and ebin/), else the git revision $rev built into
# _build/ab/SHA (once).
B=_build/bench
mkdir -p "$B"
ERL_INCLUDE=$(erl -noshell -eval 'io:put_chars(filename:join([code:root_dir(), "usr", "include"])), halt().')
gcc -O2 -fPIC -shared -Wall -Wextra -Werror -I"$ERL_INCLUDE" -o "$B/floor_tracer.so" bench/floor_tracer.c
erlc +warnings_as_errors -pa ebin -o "$B" bench/*.erl
if [ -f "$rev/priv/beamprobe_nif.so" ]; then
  A=$rev sha=$(basename "$rev")
else
  sha=$(git rev-parse --short "$rev")
  A=_build/ab/$sha
  if [ ! -f "$A/priv/beamprobe_nif.so" ]; then
    rm -rf "$A" && mkdir -p "$A"
    git archive "$sha" | tar -x -C "$A"
    make -C "$A" c erl >/dev/null
  fi
fi
