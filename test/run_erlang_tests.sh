#!/usr/bin/env bash
# test/run_erlang_tests.sh -- runs the EUnit modules (test/*_tests.erl) and
# the Common Test suites (test/*_SUITE.erl) against the built application,
# then prints one closing line "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
out=_build/test
mkdir -p "$out" _build/ct_logs
. test/ct_tally.sh
. test/guard.sh
# A suite that runs longer than this is stopped (and fails): a hang must
# not take the rest of the run with it.
suite_secs=${SUITE_TIMEOUT:-900}

# What a step leaves in /tmp (the trace directory of a failed start, a dead
# node's staged trace, ...) is a failure of that step: nothing beamprobe
# does may leave files nobody will remove.  (Another test run on the
# machine at the same time would be blamed too.)
tmp_entries() {
  ls -d /tmp/beamprobe-* /tmp/bp-* /tmp/bp_* /tmp/bprs-* 2>/dev/null | sort
}
check_tmp() { # $1: what ran; compares with $before, then resets it
  local left
  left=$(comm -13 <(echo "$before") <(tmp_entries))
  if [ -n "$left" ]; then
    echo "not ok - $1 left in /tmp:"; echo "$left" | sed 's/^/    /'
    failed=$((failed + 1))
    echo "$left" | xargs -r rm -rf
  fi
  before=$(tmp_entries)
}
before=$(tmp_entries)

for f in test/*.erl; do
  erlc +warnings_as_errors +debug_info -I include -pa ebin -o "$out" "$f" || { echo "compile failed: $f"; exit 1; }
done

# EUnit: one VM for all *_tests modules.
mods=$(ls test/*_tests.erl 2>/dev/null | xargs -r -n1 basename | sed 's/\.erl$//' | paste -sd, -)
if [ -n "$mods" ]; then
  log=$out/eunit.log
  guarded "$log" "$suite_secs" erl -noshell -pa ebin -pa "$out" -eval "
    R = eunit:test([$mods], [verbose]),
    halt(case R of ok -> 0; _ -> 1 end)."
  ct_left eunit $?
  p=$(grep -Eo 'All [0-9]+ tests passed' "$log" | grep -Eo '[0-9]+' | tail -1)
  if [ -n "$p" ]; then passed=$((passed + p)); else
    p=$(grep -Eo 'Failed: [0-9]+\.  Skipped: [0-9]+\.  Passed: [0-9]+' "$log" | tail -1)
    f=$(echo "$p" | sed -E 's/Failed: ([0-9]+).*/\1/'); ok=$(echo "$p" | sed -E 's/.*Passed: ([0-9]+).*/\1/')
    passed=$((passed + ${ok:-0})); failed=$((failed + ${f:-1}))
  fi
  check_tmp "the EUnit tests"
fi

# Common Test (a node name of its own: several runs may share the machine).
suites=$(ls test/*_SUITE.erl 2>/dev/null | xargs -r -n1 basename | sed 's/\.erl$//')
for s in $suites; do
  log=$out/$s.log
  # A node name of its own: ct_run's default (ct@host) clashes with any
  # other ct_run on the machine.
  guarded "$log" "$suite_secs" ct_run -noshell -sname "ct_$$_$s" -pa "$PWD/ebin" -pa "$PWD/$out" \
    -dir test -suite "$s" -logdir _build/ct_logs -cover_stop false
  rc=$?
  ct_tally "$s" "$log"
  ct_left "$s" "$rc"
  check_tmp "$s"
done

ct_failed_cases
echo "erlang: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
