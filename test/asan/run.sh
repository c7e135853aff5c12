#!/usr/bin/env bash
# test/asan/run.sh -- the NIF itself under AddressSanitizer + UBSan.
#
# Builds _build/c/asan/beamprobe_nif.so (`make -C c_src asan`: -fsanitize=
# address,undefined -fno-sanitize-recover=undefined) and runs Common Test
# suites in a VM that loads it: beam.smp is started with libasan preloaded
# (LD_PRELOAD; the VM itself is not instrumented, its malloc is ASan's) and
# BEAMPROBE_NIF pointing at the sanitized library (src/beamprobe_nif.erl
# honours it).  Every sanitizer report is written under _build/asan/log/
# (log_path); any report fails the run, even if the suites passed.
#
#   bash test/asan/run.sh [SUITE ...]   default: ASAN_SUITES below, then
#                                       the EUnit modules in ASAN_EUNIT
#
# Prints "asan: N passed, M failed" (the suites' cases, plus one failure per
# sanitizer report file).
set -uo pipefail
cd "$(dirname "$0")/../.."
SUITES=${*:-${ASAN_SUITES:-beamprobe_SUITE beamprobe_stats_SUITE beamprobe_events_SUITE beamprobe_diff_SUITE beamprobe_coexist_SUITE beamprobe_tamper_SUITE beamprobe_overlap_SUITE beamprobe_monitor_SUITE beamprobe_monitor_share_SUITE beamprobe_usdt_SUITE beamprobe_stream_SUITE}}
out=_build/test
logdir=$PWD/_build/asan/log
mkdir -p "$out" "$logdir" _build/ct_logs
rm -f "$logdir"/*

libasan=$(gcc -print-file-name=libasan.so)
libubsan=$(gcc -print-file-name=libubsan.so)
if [ ! -f "$libasan" ] || [ "$libasan" = libasan.so ]; then
  echo "SKIP: libasan.so not found (gcc -print-file-name=libasan.so)"
  echo "asan: 0 passed, 0 failed"; exit 0
fi
make -s -C c_src asan || { echo "asan: 0 passed, 1 failed (build)"; exit 1; }
nif=$PWD/_build/c/asan/beamprobe_nif

for f in test/*.erl; do
  erlc +warnings_as_errors +debug_info -I include -pa ebin -o "$out" "$f" || { echo "compile failed: $f"; exit 1; }
done

# detect_leaks=0: the VM is not built for LeakSanitizer (it keeps memory to
# the end by design).  abort_on_error=0 + halt_on_error=1: a report ends the
# node (the suite then fails) and is written to the log.  UBSan cannot
# recover (-fno-sanitize-recover), so a report also ends the node.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1:log_path=$logdir/asan:detect_odr_violation=0:allocator_may_return_null=1:handle_segv=0:handle_sigbus=0:handle_abort=0:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logdir/ubsan"
export BEAMPROBE_NIF=$nif
export BEAMPROBE_ASAN=1

. test/ct_tally.sh
. test/guard.sh
suite_secs=${SUITE_TIMEOUT:-900}
for s in $SUITES; do
  [ -f "test/$s.erl" ] || { echo "no suite $s"; failed=$((failed + 1)); continue; }
  log=$out/asan-$s.log
  guarded "$log" "$suite_secs" env LD_PRELOAD="$libasan${libubsan:+ $libubsan}" ct_run -noshell \
    -sname "asan_$$_$s" -pa "$PWD/ebin" -pa "$PWD/$out" -dir test \
    -suite "$s" -logdir _build/ct_logs -cover_stop false
  rc=$?
  ct_tally "$s" "$log" "asan: "
  ct_left "$s" "$rc"
done

# The renderer's EUnit tests (its hostile terms: 100 MB and unaligned
# binaries, million-element lists, random terms cut at every limit) under
# the sanitizers too: they drive bp_term*.c and bp_float.c harder than any
# suite.  Each test counts as a case.
for m in ${ASAN_EUNIT-beamprobe_term_tests}; do
  log=$out/asan-$m.log
  guarded "$log" "$suite_secs" env LD_PRELOAD="$libasan${libubsan:+ $libubsan}" erl -noshell \
    -pa "$PWD/ebin" -pa "$PWD/$out" -eval "eunit:test($m, []), halt()."
  ct_left "$m" $?
  if line=$(grep -Eo 'All [0-9]+ tests passed' "$log"); then
    passed=$((passed + $(echo "$line" | grep -Eo '[0-9]+')))
  elif line=$(grep -E 'Failed: [0-9]+\. +Skipped: [0-9]+\. +Passed: [0-9]+' "$log"); then
    p=$(echo "$line" | sed -E 's/.*Passed: ([0-9]+).*/\1/'); passed=$((passed + p))
    f=$(echo "$line" | sed -E 's/.*Failed: ([0-9]+).*/\1/'); failed=$((failed + f))
  else
    echo "asan: $m did not complete"; failed=$((failed + 1))
  fi
  if grep -qE 'AddressSanitizer|runtime error' "$log"; then
    echo "asan: sanitizer report in $log"; failed=$((failed + 1))
  fi
done

# The sanitized NIF must actually have been loaded: its build has the ASan
# runtime symbols; check the node loaded it from $nif (the suites' node logs
# nothing about it, so ask a fresh node).
loaded=$(LD_PRELOAD="$libasan${libubsan:+ $libubsan}" erl -noshell -pa ebin -eval '
  {module, _} = code:ensure_loaded(beamprobe_nif),
  {ok, M} = file:read_file("/proc/self/maps"),
  io:put_chars(case binary:match(M, <<"asan/beamprobe_nif.so">>) of nomatch -> "no"; _ -> "yes" end),
  halt().' 2>&1)
if [ "$loaded" != yes ]; then
  echo "asan: the sanitized NIF was not loaded ($loaded)"; failed=$((failed + 1))
fi

reports=$(ls "$logdir" 2>/dev/null | wc -l)
if [ "$reports" -gt 0 ]; then
  for r in "$logdir"/*; do echo "=== sanitizer report $r"; head -60 "$r"; done
  failed=$((failed + reports))
fi
ct_failed_cases
echo "asan: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
