#!/usr/bin/env bash
# bench/ab_overlap.sh -- A/B of the overlap bench between a git revision
# and the working tree, interleaved (docs/performance.md, "Rerun").
# Usage: bash bench/ab_overlap.sh REV|DIR [ROUNDS] [VMFLAGS...]
#   Builds REV into _build/ab/REV (as bench/ab.sh), then ROUNDS times
#   (default 5) runs one round of bench/beamprobe_overlap_bench.erl in a
#   fresh VM of each build (which goes first alternates) and prints, per
#   round and as medians, the added ns of 1 session, the ns per extra
#   session (2 and 8 sessions, 8 flight recorders) and the floor.
#   A run in which a session dropped or lost an event is not counted by
#   the bench (a dropped event costs less than a written one): the round's
#   `refused' column says how many, and a round the bench gave no figures
#   for reads nan (left out of the medians).
#   DIR: a built tree (its priv/ and ebin/) instead of a revision.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$1 rounds=${2:-5}
shift $(( $# < 2 ? $# : 2 ))
. bench/ab_prep.sh
one() { # dir [vmflags] -> "floor one extra2 extra8 fr_extra8 refused"
  local d=$1; shift
  BEAMPROBE_BENCH_ROUNDS=1 erl "$@" -noshell -pa "$d/ebin" -pa "$B" \
    -run beamprobe_overlap_bench main bench ab \
    | awk 'BEGIN { fl = one = e2 = e8 = f8 = "nan" }
           /floor\+/ { sub(/ ns;.*/, ""); sub(/.*floor\+ /, ""); fl = $0 }
           /^1 session  / { one = $3; rf += $NF }
           /^2 sessions, same/ { e2 = $(NF - 3); rf += $NF }
           /^8 sessions, same/ { e8 = $(NF - 3); rf += $NF }
           /^8 flight/ { f8 = $(NF - 3); rf += $NF }
           /FAILED/ { failed = 1 }
           END { if (failed) print "nan nan nan nan nan FAILED"
                 else print fl, one, e2, e8, f8, rf + 0 }'
}
printf '%-6s %-5s %8s %8s %8s %8s %8s %8s\n' round build floor+ 1sess extra2 extra8 fr_ex8 refused
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for b in $order; do
    if [ "$b" = A ]; then d=$A; else d=.; fi
    printf '%-6s %-5s %8s %8s %8s %8s %8s %8s\n' "$r" "$b" $(one "$d" "$@")
  done
done | tee /tmp/ab_overlap.$$
awk 'NR > 1 { k = $2; for (i = 3; i <= 7; i++) if ($i != "nan") v[k, i, ++n[k, i]] = $i
       if ($8 == "FAILED") nf[k]++; else rf[k] += $8 }
     function med(k, i,   m, a, j, t, x) { m = n[k, i]; for (j = 1; j <= m; j++) a[j] = v[k, i, j];
       for (j = 1; j <= m; j++) for (x = j + 1; x <= m; x++) if (a[x] < a[j]) { t = a[j]; a[j] = a[x]; a[x] = t }
       return a[int((m + 1) / 2)] }
     END { for (k = 0; k < 2; k++) { b = k ? "B" : "A";
       printf "median %-5s %8.1f %8.1f %8.1f %8.1f %8.1f (runs refused: %d; rounds without figures: %d)\n", b, med(b, 3), med(b, 4), med(b, 5), med(b, 6), med(b, 7), rf[b], nf[b] } }' /tmp/ab_overlap.$$
rm -f /tmp/ab_overlap.$$
