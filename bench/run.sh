#!/usr/bin/env bash
# bench/run.sh -- `make bench`: builds the benchmark helpers and runs them.
# Usage: bash bench/run.sh [cost|rate|firehose|handler|kinds|overlap|firstpass|usdt|stream|render|files|reader ...]
#        (default: all), or bash bench/run.sh smoke (make test: every
#        configuration once, tiny counts, no thresholds, < 30 s).
# kinds: the per-event-kind bench (bench/beamprobe_kinds_bench.erl), on a
# VM with the default flags and again with +sbwt none +sbwtdcpu none
# +sbwtdio none.  overlap: 1, 2 and 8 overlapping sessions next to one
# and the floor (bench/beamprobe_overlap_bench.erl), default VM and +sbwt
# none.  firstpass: the first calls traced after a session starts, while
# the rings are new memory (bench/beamprobe_firstpass_bench.erl, default
# VM).  files: the trace files' writer, O_DIRECT against the page cache
# (bench/beamprobe_files_bench.erl, default VM).  usdt: the cost of a
# usdt sink per event with no tool attached
# and per probe fired with bpftrace attached (bench/beamprobe_usdt_bench.erl,
# +sbwt none).  rate runs on a VM with the default flags; cost, handler
# and firehose under +sbwt none +sbwtdcpu none +sbwtdio none, as they
# always have; profile under +sbwt none alone.  Each bench prints the
# emulator flags its VM got.
set -euo pipefail
cd "$(dirname "$0")/.."
B=_build/bench
mkdir -p "$B"
ERL_INCLUDE=$(erl -noshell -eval 'io:put_chars(filename:join([code:root_dir(), "usr", "include"])), halt().')
gcc -O2 -fPIC -shared -Wall -Wextra -Werror -I"$ERL_INCLUDE" -o "$B/floor_tracer.so" bench/floor_tracer.c
# The term renderer alone, from the library's own sources, and the
# deferred-rendering prototype of stop 37 (bench/bp_snap.c) next to it.
gcc -std=gnu11 -O2 -fPIC -shared -Wall -Wextra -Werror -Ic_src -I"$ERL_INCLUDE" \
  -o "$B/render_bench.so" bench/render_bench.c bench/bp_snap.c c_src/bp_term.c c_src/bp_term_scalar.c c_src/bp_erts_layout.c c_src/bp_float.c
erlc +warnings_as_errors -pa ebin -o "$B" bench/*.erl
# The USDT hook alone (needs the probes header/object of `make c').
gcc -std=gnu11 -O2 -Wall -Wextra -Werror -Ic_src -I_build/c/gen -I"$ERL_INCLUDE" \
  -o "$B/usdt_guard" bench/usdt_guard.c _build/c/gen/beamprobe_probes.o
args=("$@")
erl_args=()
run_reader=0
run_kinds=0
run_rate=0
run_profile=0
run_overlap=0
run_firstpass=0
run_usdt=0
run_stream=0
run_render=0
run_files=0
if [ "${1:-}" = smoke ]; then
  # One VM, default flags: every kind x configuration once with tiny
  # counts, then the call-cost and rate code paths, tiny too.
  # Each part under test/guard.sh: its output to a log of its own, shown
  # and added to smoke.out; stopped after 600 s; what it leaves running is
  # killed and counts as a failure (as does a part that hangs).
  . test/guard.sh
  : > "$B/smoke.out"
  f_parts=0
  part() {
    local rc=0
    guarded "$B/smoke-part.log" 600 "$@" || rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 125 ]; then f_parts=$((f_parts + 1)); fi
    cat "$B/smoke-part.log" >> "$B/smoke.out"
  }
  part erl -noshell -pa ebin -pa "$B" -run beamprobe_kinds_bench main smoke default flags
  part env BEAMPROBE_BENCH_SMOKE=1 erl +sbwt none +sbwtdcpu none +sbwtdio none -noshell \
    -pa ebin -pa "$B" -run beamprobe_bench main cost rate
  part erl +sbwt none -noshell -pa ebin -pa "$B" -run beamprobe_profile_bench main smoke
  part erl -noshell -pa ebin -pa "$B" -run beamprobe_overlap_bench main smoke default flags
  part erl -noshell -pa ebin -pa "$B" -run beamprobe_firstpass_bench main smoke default flags
  part erl +sbwt none -noshell -pa ebin -pa "$B" -run beamprobe_usdt_bench main smoke
  part erl +sbwt none -noshell -pa ebin -pa "$B" -run beamprobe_stream_bench main smoke
  part erl -noshell -pa ebin -pa "$B" -run beamprobe_files_bench main smoke
  part erl -noshell -pa "$B" -run render_bench main smoke
  "$B/usdt_guard" 100000 || f_guard=1
  p=$(awk '/^bench smoke part:/ { p += $4 } END { print p + 0 }' "$B/smoke.out")
  f=$(awk '/^bench smoke part:/ { f += $6 } END { print f + 0 }' "$B/smoke.out")
  n=$(grep -c '^bench smoke part:' "$B/smoke.out" || true)
  [ "$n" = 9 ] || f=$((f + 1))
  [ -z "${f_guard:-}" ] || f=$((f + 1))   # a VM that died before its closing line
  f=$((f + f_parts))
  echo "bench smoke: $p passed, $f failed"
  [ "$f" = 0 ]
  exit
fi
for a in "${args[@]}"; do
  case "$a" in
    reader) run_reader=1 ;;
    kinds) run_kinds=1 ;;
    rate) run_rate=1 ;;
    profile) run_profile=1 ;;
    overlap) run_overlap=1 ;;
    firstpass) run_firstpass=1 ;;
    usdt) run_usdt=1 ;;
    stream) run_stream=1 ;;
    render) run_render=1 ;;
    files) run_files=1 ;;
    *) erl_args+=("$a") ;;
  esac
done
bench() {
  erl +sbwt none +sbwtdcpu none +sbwtdio none -noshell -pa ebin -pa "$B" -run beamprobe_bench main "$@"
}
bench_default() {
  erl -noshell -pa ebin -pa "$B" -run beamprobe_bench main "$@"
}
# Profile mode (call_count/call_time counters) next to the NIF tracer floor.
profile() {
  erl +sbwt none -noshell -pa ebin -pa "$B" -run beamprobe_profile_bench main
}
kinds() {
  erl -noshell -pa ebin -pa "$B" -run beamprobe_kinds_bench main kinds default flags
  erl +sbwt none +sbwtdcpu none +sbwtdio none -noshell -pa ebin -pa "$B" \
    -run beamprobe_kinds_bench main kinds sbwt=none sbwtdcpu=none sbwtdio=none
}
firstpass() {
  erl -noshell -pa ebin -pa "$B" -run beamprobe_firstpass_bench main bench default flags
}
usdt() {
  "$B/usdt_guard"
  erl +sbwt none +sbwtdcpu none +sbwtdio none -noshell -pa ebin -pa "$B" \
    -run beamprobe_usdt_bench main bench
}
# The TCP stream sink next to the file sink (bench/beamprobe_stream_bench.erl).
stream() {
  erl +sbwt none +sbwtdcpu none +sbwtdio none -noshell -pa ebin -pa "$B" \
    -run beamprobe_stream_bench main bench
}
# The term renderer alone (bench/render_bench.c), ns per rendered term.
render() {
  erl -noshell -pa "$B" -run render_bench main
}
# The trace files' writer: O_DIRECT against the page cache
# (BEAMPROBE_NO_DIRECT_IO), three VMs of each, alternating; default VM.
files() {
  for r in 1 2 3; do
    erl -noshell -pa ebin -pa "$B" -run beamprobe_files_bench main bench
    BEAMPROBE_NO_DIRECT_IO=1 erl -noshell -pa ebin -pa "$B" -run beamprobe_files_bench main bench
  done
}
overlap() {
  erl -noshell -pa ebin -pa "$B" -run beamprobe_overlap_bench main bench default flags
  erl +sbwt none +sbwtdcpu none +sbwtdio none -noshell -pa ebin -pa "$B" \
    -run beamprobe_overlap_bench main bench sbwt=none sbwtdcpu=none sbwtdio=none
}
if [ ${#args[@]} -eq 0 ]; then
  # The firehose in a node of its own (its memory figures want a fresh
  # node), then let the 1-2 GB it wrote reach the disk before timing.
  bench firehose
  sync
  sleep 2
  bench cost handler
  bench_default rate
  kinds
  profile
  overlap
  firstpass
  usdt
  stream
  render
  files
else
  if [ ${#erl_args[@]} -gt 0 ]; then bench "${erl_args[@]}"; fi
  if [ $run_rate = 1 ]; then bench_default rate; fi
  if [ $run_kinds = 1 ]; then kinds; fi
  if [ $run_profile = 1 ]; then profile; fi
  if [ $run_overlap = 1 ]; then overlap; fi
  if [ $run_firstpass = 1 ]; then firstpass; fi
  if [ $run_usdt = 1 ]; then usdt; fi
  if [ $run_stream = 1 ]; then stream; fi
  if [ $run_render = 1 ]; then render; fi
  if [ $run_files = 1 ]; then files; fi
fi
if [ ${#args[@]} -eq 0 ] || [ $run_reader = 1 ]; then
  if [ -f bench/reader.sh ]; then bash bench/reader.sh; fi
fi
