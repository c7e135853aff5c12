# test/guard.sh -- sourced by the test runners (scripts/test_steps.sh,
# test/run_erlang_tests.sh, test/asan/run.sh, test/elixir/run.sh, the
# bench smoke run): runs one test command so that it can neither hang the
# run nor leave processes behind.
#
# A process a test started and did not stop (a node whose case was
# skipped before its cleanup ran, say) keeps running after the test, with
# the test's output still open: a `| tee` then waits for it forever.  So:
# the output goes to a file, shown as it grows (tail --pid ends with the
# command, not with the last writer); the command runs under timeout(1),
# which kills its whole process group when the time is up; and what it
# left running is found by a mark every child inherits in its environment,
# named, killed, and counted as a failure.

guard_seq=0

# guard_leftovers MARK: "PID NAME COMMAND" of each live process whose
# environment holds BP_GUARD_MARK=1 (one variable per guarded command, so
# that a step's mark and those of the suites it runs all stay), epmd
# aside (the port mapper the first distributed node of a machine starts,
# shared by all that follow).
guard_leftovers() {
  local p comm
  for p in /proc/[0-9]*; do
    grep -qzxF "BP_GUARD_$1=1" "$p/environ" 2>/dev/null || continue
    comm=$(cat "$p/comm" 2>/dev/null) || continue
    [ "$comm" = epmd ] && continue
    echo "${p#/proc/} $comm $(tr '\0' ' ' < "$p/cmdline" 2>/dev/null | cut -c1-160)"
  done
}

# guarded LOG SECONDS CMD...: runs CMD, its output to LOG and shown; after
# SECONDS it is stopped (TERM, then KILL 15 s later).  Returns CMD's
# status, 124 if it timed out, 125 if it passed but left processes.
guarded() {
  local log=$1 secs=$2 mark pid tpid rc=0 left
  shift 2
  guard_seq=$((guard_seq + 1))
  mark="$$_${guard_seq}_$(date +%s%N)"
  : > "$log" # (before tail opens it: the job's own redirection may come later)
  env "BP_GUARD_$mark=1" timeout -k 15 "$secs" "$@" > "$log" 2>&1 < /dev/null &
  pid=$!
  tail -n +1 -s 0.2 -f --pid="$pid" "$log" &
  tpid=$!
  # (Written to hold under set -e and pipefail: bench/run.sh has them.)
  wait "$pid" || rc=$?
  wait "$tpid" || true
  if [ "$rc" -eq 124 ]; then
    echo "not ok - timed out after $secs s (stopped): $*" | tee -a "$log"
  fi
  left=$(guard_leftovers "$mark")
  if [ -n "$left" ]; then
    { echo "not ok - left running after it ended (killed now): $*"
      echo "$left" | sed 's/^/    /'; } | tee -a "$log"
    echo "$left" | awk '{print $1}' | xargs -r kill -9 2>/dev/null || true
    if [ "$rc" -eq 0 ]; then rc=125; fi
  fi
  return "$rc"
}
