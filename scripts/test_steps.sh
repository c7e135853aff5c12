#!/usr/bin/env bash
# scripts/test_steps.sh STEP... -- runs each test step (a shell command),
# every one even if an earlier one failed, and fails if any did.
#
# Each step's output goes to the terminal and to _build/test-logs/N.log.
# The closing summary repeats, for each failed step, the lines that say what
# failed (TAP "not ok", Common Test and EUnit failures, sanitizer reports),
# so that the last screen of a long run is enough to know why.
set -u
. "$(dirname "$0")/../test/guard.sh"
# A step that runs longer than this is stopped and fails, so that one hang
# cannot take the whole run past CI's limit (the longest step, the Erlang
# suites, takes about 8 minutes here).
step_secs=${STEP_TIMEOUT:-2400}
logs=_build/test-logs
rm -rf "$logs"
mkdir -p "$logs"
n=0
failed=()
times=()
for step in "$@"; do
	n=$((n + 1))
	echo "=== make test: $step"
	t0=$(date +%s)
	log="$logs/$n.log"
	# To the log, shown as it grows; stopped after STEP_TIMEOUT s; what
	# it left running is killed and fails it (test/guard.sh).
	guarded "$log" "$step_secs" sh -c "$step"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		failed+=("$n:$step")
	fi
	times+=("$(printf '%5d s  rc %d  %s' $(($(date +%s) - t0)) "$rc" "$step")")
done
echo "make test: the steps' times"
printf '  %s\n' "${times[@]}"
if [ ${#failed[@]} -eq 0 ]; then
	echo "make test: every step passed"
	exit 0
fi
echo "make test: FAILED steps:"
for f in "${failed[@]}"; do
	echo "  ${f#*:}"
done
for f in "${failed[@]}"; do
	n=${f%%:*}
	echo "--- what failed in: ${f#*:} (whole output: $logs/$n.log)"
	grep -a -n -E 'not ok|failed case|FAILED|[Ff]ailed:|^== .*(rc|exit)|Bail out|ERROR|Sanitizer|runtime error|Assertion|\*\*\* |{error,|Segmentation|core dumped|Killed|timed out|TIMEOUT' \
		"$logs/$n.log" | grep -v -E '^[0-9]+:(ok |=ERROR REPORT)' | tail -40
	echo "--- its last 15 lines:"
	tail -15 "$logs/$n.log"
done
exit 1
