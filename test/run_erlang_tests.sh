#!/usr/bin/env bash
# test/run_erlang_tests.sh -- runs the EUnit modules (test/*_tests.erl) and
# the Common Test suites (test/*_SUITE.erl) against the built application,
# then prints one closing line "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
out=_build/test
mkdir -p "$out" _build/ct_logs
passed=0; failed=0

for f in test/*.erl; do
  erlc +warnings_as_errors +debug_info -I include -pa ebin -o "$out" "$f" || { echo "compile failed: $f"; exit 1; }
done

# EUnit: one VM for all *_tests modules.
mods=$(ls test/*_tests.erl 2>/dev/null | xargs -r -n1 basename | sed 's/\.erl$//' | paste -sd, -)
if [ -n "$mods" ]; then
  log=$out/eunit.log
  erl -noshell -pa ebin -pa "$out" -eval "
    R = eunit:test([$mods], [verbose]),
    halt(case R of ok -> 0; _ -> 1 end)." 2>&1 | tee "$log"
  p=$(grep -Eo 'All [0-9]+ tests passed' "$log" | grep -Eo '[0-9]+' | tail -1)
  if [ -n "$p" ]; then passed=$((passed + p)); else
    p=$(grep -Eo 'Failed: [0-9]+\.  Skipped: [0-9]+\.  Passed: [0-9]+' "$log" | tail -1)
    f=$(echo "$p" | sed -E 's/Failed: ([0-9]+).*/\1/'); ok=$(echo "$p" | sed -E 's/.*Passed: ([0-9]+).*/\1/')
    passed=$((passed + ${ok:-0})); failed=$((failed + ${f:-1}))
  fi
fi

# Common Test.
suites=$(ls test/*_SUITE.erl 2>/dev/null | xargs -r -n1 basename | sed 's/\.erl$//')
for s in $suites; do
  log=$out/$s.log
  # A node name of its own: another run on this host (ct@host) must not
  # make this one fail.
  ct_run -sname "ct$$" -noshell -pa "$PWD/ebin" -pa "$PWD/$out" -dir test -suite "$s" \
    -logdir _build/ct_logs -cover_stop false 2>&1 | tee "$log"
  line=$(grep -E 'TEST COMPLETE' "$log" | tail -1)
  p=$(echo "$line" | grep -Eo '[0-9]+ ok' | grep -Eo '[0-9]+'); passed=$((passed + ${p:-0}))
  f=$(echo "$line" | grep -Eo '[0-9]+ failed' | grep -Eo '[0-9]+'); failed=$((failed + ${f:-0}))
  [ -z "$line" ] && { echo "suite $s did not complete"; failed=$((failed + 1)); }
done

echo "erlang: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
