#!/usr/bin/env bash
# bench/ab.sh -- A/B of one event kind between a git revision and the
# working tree, interleaved in the same run (docs/performance.md, "Rerun").
# Usage: bash bench/ab.sh REV|DIR KIND [ROUNDS] [VMFLAGS...]  (DIR: a built tree)
#   Builds REV (git archive) into _build/ab/REV, then ROUNDS times (default
#   5) runs KIND in a fresh VM under: the floor, then beamprobe at REV
#   and beamprobe of the working tree (which goes first alternates), each VM
#   running the kind 3 times and keeping the best of the runs that dropped
#   no event (runs that dropped are counted); prints the median over
#   the rounds of ns per operation and the added cost over the floor, and
#   the events per operation each build wrote (a build that writes fewer
#   events than the other is not measured on the same work).  The
#   untraced time, for the ratios, is one VM after the rounds.
#   VMFLAGS (e.g. +sbwt none) go to every VM.  KIND as in the `only'
#   mode of bench/beamprobe_kinds_bench.erl.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$1 kind=$2 rounds=${3:-5}
shift $(( $# < 3 ? $# : 3 ))
. bench/ab_prep.sh
# The best ns/op of the runs that dropped no event (a dropped event costs
# less than a written one: with the second core busy a collector falls
# behind and its ring fills); a run that dropped is counted in $ND/drops.
one() { # dir config [vmflags] -> best ns/op of AB_REPS (3) runs
  local d=$1 c=$2; shift 2
  erl "$@" -noshell -pa "$d/ebin" -pa "$B" -run beamprobe_kinds_bench main only "$kind" "$c" "${AB_REPS:-3}" \
    | awk -v f="$ND/drops" -v e="$ND/ev.$(basename "$(cd "$d" && pwd)")" '/ns per op/ {
        for (i = 1; i <= NF; i++) { if ($i == "ns") v = $(i - 1); if ($i == "events") ev = $(i - 1) }
        if (ev != "-") print ev >> e
        if ($(NF - 1) + 0 > 0) { dropped++; next }
        if (best == "" || v < best) best = v }
      END { if (best == "") best = "nan"; print best; if (dropped) print dropped >> f }'
}
ND=$(mktemp -d "$B/ab-drops.XXXXXX")
trap 'rm -rf "$ND"' EXIT
: > "$ND/drops"
declare -a fl old new
for r in $(seq 1 "$rounds"); do
  fl+=("$(one . floor "$@")")
  if [ $((r % 2)) = 1 ]; then # alternate which build goes first
    old+=("$(one "$A" bp "$@")")
    new+=("$(one . bp "$@")")
  else
    new+=("$(one . bp "$@")")
    old+=("$(one "$A" bp "$@")")
  fi
  echo "round $r: floor ${fl[-1]}  $sha ${old[-1]}  tree ${new[-1]}  ns/op" \
    "($(awk '{ n += $1 } END { print n + 0 }' "$ND/drops") runs dropped so far)"
done
med() { printf '%s\n' "$@" | grep -v nan | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
u=$(one . untraced "$@")
F=$(med "${fl[@]}") O=$(med "${old[@]}") N=$(med "${new[@]}")
awk -v u="$u" -v f="$F" -v o="$O" -v n="$N" -v s="$sha" -v k="$kind" 'BEGIN {
  printf "%s: untraced %.1f, floor %.1f, %s %.1f (%.2fx floor added), tree %.1f (%.2fx) ns/op (medians)\n",
    k, u, f, s, o, (o - u) / (f - u), n, (n - u) / (f - u) }'
for b in "$A" .; do
  n=$(basename "$(cd "$b" && pwd)")
  echo "events per op written by $n: $(sort -u "$ND/ev.$n" 2>/dev/null | tr '\n' ' ')"
done
