#!/usr/bin/env bash
# bench/reader.sh -- reader speed (part of `make bench`): events/s of
# `beamprobe stats` and `beamprobe print > /dev/null` on a >= 10 M event
# trace, and of `babeltrace2 DIR > /dev/null` on the same trace, in one run.
# READER_EVENTS (default 10000000) sets the trace size.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${READER_EVENTS:-10000000}
make -s -C c_src/cli all gen
dir=_build/bench/reader-trace
if [ ! -f "$dir/metadata" ] || [ "$(cat "$dir/.events" 2>/dev/null)" != "$N" ]; then
  rm -rf "$dir"
  _build/cli/gen_trace big "$dir" "$N" >/dev/null
  echo "$N" > "$dir/.events"
fi
echo
echo "== reader speed on a $N-event trace ($(du -sh "$dir" | cut -f1)) =="
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s.%N); echo "$e - $s" | bc -l; }
rss() { /usr/bin/time -f %M "$@" >/dev/null 2>/tmp/bp_rss.$$ || true; tail -1 /tmp/bp_rss.$$; rm -f /tmp/bp_rss.$$; }
ts=$(t bin/beamprobe stats "$dir")
tp=$(t bin/beamprobe print "$dir")
if command -v babeltrace2 >/dev/null; then tb=$(t babeltrace2 "$dir"); else tb=""; fi
rate() { echo "$N / $1 / 1000000" | bc -l | xargs printf "%.2f"; }
printf "beamprobe stats   %6.2f s  %6s M events/s  (max RSS %s kB)\n" "$ts" "$(rate "$ts")" "$(rss bin/beamprobe stats "$dir")"
printf "beamprobe print   %6.2f s  %6s M events/s  (max RSS %s kB)\n" "$tp" "$(rate "$tp")" "$(rss bin/beamprobe print "$dir")"
if [ -n "$tb" ]; then
  printf "babeltrace2       %6.2f s  %6s M events/s\n" "$tb" "$(rate "$tb")"
  printf "speed-up: stats %.1fx, print %.1fx babeltrace2 (target >= 20x)\n" \
    "$(echo "$tb / $ts" | bc -l)" "$(echo "$tb / $tp" | bc -l)"
fi
echo "targets: stats >= 10 M events/s, print >= 3 M events/s"
