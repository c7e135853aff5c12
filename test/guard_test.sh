#!/usr/bin/env bash
# test/guard_test.sh -- the test runners' own guards (test/guard.sh,
# test/ct_tally.sh) against what they must catch: a command that leaves a
# process running (named, killed, status 125) or hangs (stopped, 124), a
# command that passes or fails by itself (its own status, nothing said),
# and a Common Test case skipped because its init crashed (a failure)
# next to one that skips itself with a reason (not one).  Prints "N
# passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
. test/guard.sh
pass=0; fail=0
ok() { echo "ok - $1"; pass=$((pass + 1)); }
nok() { echo "not ok - $1"; fail=$((fail + 1)); }
# (Not /tmp/bp-*: the Erlang runner counts those as left by its suites.)
d=$(mktemp -d /tmp/guard-test.XXXXXX)
trap 'rm -rf "$d"' EXIT

# A leftover: a sleep in the background, in its own session (setsid), so
# that it is not in the command's process group either.
rc=0; guarded "$d/1.log" 20 sh -c "setsid sleep 300 & echo started" > "$d/1.out" || rc=$?
left=$(awk '/^    [0-9]+ sleep/ {print $1}' "$d/1.out")
[ "$rc" -eq 125 ] && ok "a leftover process fails the command (125)" || nok "leftover: status $rc"
[ -n "$left" ] && ok "the leftover is named ($left)" || nok "leftover not named: $(cat "$d/1.out")"
sleep 0.2
if [ -n "$left" ] && ! kill -0 "$left" 2>/dev/null || grep -q zombie "/proc/$left/status" 2>/dev/null; then
  ok "the leftover was killed"
else nok "the leftover $left still runs"; kill -9 "$left" 2>/dev/null; fi
grep -q "^started" "$d/1.log" && ok "the output is in the log" || nok "log: $(cat "$d/1.log")"

# A hang: stopped after its time, with its children.
t0=$(date +%s)
rc=0; guarded "$d/2.log" 2 sh -c "sleep 60 & sleep 60" > "$d/2.out" || rc=$?
t=$(( $(date +%s) - t0 ))
[ "$rc" -eq 124 ] && ok "a hang is stopped (124)" || nok "hang: status $rc"
[ "$t" -lt 10 ] && ok "within its time ($t s)" || nok "hang took $t s"
grep -q "timed out after 2 s" "$d/2.out" && ok "the timeout is said" || nok "timeout not said"

# Own statuses pass through; nothing is said about a clean command.
rc=0; guarded "$d/3.log" 20 sh -c "echo fine" > "$d/3.out" || rc=$?
[ "$rc" -eq 0 ] && ! grep -q "not ok" "$d/3.out" && ok "a clean command passes silently" || nok "clean: $rc $(cat "$d/3.out")"
rc=0; guarded "$d/4.log" 20 sh -c "exit 3" > /dev/null || rc=$?
[ "$rc" -eq 3 ] && ok "a failing command keeps its status" || nok "status 3 became $rc"
# Under set -e (bench/run.sh has it): the caller goes on.
out=$(bash -c "set -euo pipefail; . test/guard.sh; rc=0; guarded '$d/5.log' 20 sh -c 'exit 4' > /dev/null || rc=\$?; echo after \$rc")
[ "$out" = "after 4" ] && ok "set -e callers go on" || nok "set -e: '$out'"

# ct_tally: an auto-skipped case fails, a case skipped with a reason not.
mkdir -p "$d/ct/m.logs/run.1"
printf '=case          m_SUITE:a\n=result        ok\n=case          m_SUITE:b\n=result        auto_skipped: {failed,{m_SUITE,init_per_testcase,{badmatch,1}}}\n=case          m_SUITE:c\n=result        skipped: "no tool here"\n' > "$d/ct/m.logs/run.1/suite.log"
printf 'CWD set to: "%s"\nTesting m_SUITE: TEST COMPLETE, 1 ok, 0 failed, 2 skipped of 3 test cases\n' "$d/ct" > "$d/ct/console.log"
out=$(bash -c ". test/ct_tally.sh; ct_tally m_SUITE '$d/ct/console.log'; echo \"passed=\$passed failed=\$failed\"")
echo "$out" | grep -q "passed=1 failed=1" && ok "ct_tally: init crash = failure, own skip = none" || nok "ct_tally: $out"
echo "$out" | grep -q "m_SUITE:b: skipped because its setup failed" && ok "ct_tally names the case" || nok "ct_tally: $out"

out=$(bash -c ". test/ct_tally.sh; ct_left m_SUITE 0; ct_left m_SUITE 1; ct_left m_SUITE 125; echo \"failed=\$failed\"; ct_failed_cases")
echo "$out" | grep -q "failed=1" && echo "$out" | grep -q "m_SUITE: left processes running" \
  && ok "ct_left: a run that left processes (125) is one failure, named" || nok "ct_left: $out"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
