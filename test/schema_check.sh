#!/usr/bin/env bash
# test/schema_check.sh -- runs the suites that write every event kind
# (beamprobe_events_SUITE, beamprobe_schema_SUITE) against the NIF built
# with -DBP_SCHEMA_CHECK (c_src/Makefile `check'), in which every field
# the tracer writes is checked against its kind in the schema of
# c_src/bp_format.h: a writer of the wrong kind, a field left out or one
# too many aborts the test node, and the suite fails.
# Prints "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
make -s -C c_src check >/dev/null || { echo "schema_check: cannot build the checked NIF"; echo "0 passed, 1 failed"; exit 1; }
out=_build/test
mkdir -p "$out" _build/ct_logs
for f in test/*.erl; do
  erlc +warnings_as_errors +debug_info -I include -pa ebin -o "$out" "$f" || { echo "compile failed: $f"; exit 1; }
done
passed=0; failed=0
for s in beamprobe_events_SUITE beamprobe_schema_SUITE; do
  log=$out/schema_check-$s.log
  BEAMPROBE_NIF="$PWD/_build/c/check/beamprobe_nif" \
    ct_run -noshell -sname "schema_check_$$" -pa "$PWD/ebin" -pa "$PWD/$out" \
      -dir test -suite "$s" -logdir _build/ct_logs -cover_stop false >"$log" 2>&1
  line=$(grep -E 'TEST COMPLETE' "$log" | tail -1)
  echo "schema-checked NIF, $s: ${line:-did not complete}"
  p=$(echo "$line" | grep -Eo '[0-9]+ ok' | grep -Eo '[0-9]+'); passed=$((passed + ${p:-0}))
  f=$(echo "$line" | grep -Eo '[0-9]+ failed' | grep -Eo '[0-9]+'); failed=$((failed + ${f:-0}))
  [ -z "$line" ] && { tail -20 "$log"; failed=$((failed + 1)); }
done
echo "schema_check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
