# test/ct_tally.sh -- sourced by the runners of Common Test suites
# (test/run_erlang_tests.sh, test/asan/run.sh): counts a suite's cases
# from its console log and keeps its failed cases, to be repeated last.
passed=0; failed=0; cases=

# ct_tally SUITE LOG [PREFIX]: adds the suite's ok and failed cases to
# $passed and $failed (a suite that did not complete counts as one
# failure) and its failed cases, with their line and reason, to $cases
# (a failure inside a fun names the fun: SUITE:'-case/1-fun-0-').
ct_tally() {
  local s=$1 log=$2 prefix=${3:-} line p f
  line=$(grep -E 'TEST COMPLETE' "$log" | tail -1)
  p=$(echo "$line" | grep -Eo '[0-9]+ ok' | grep -Eo '[0-9]+'); passed=$((passed + ${p:-0}))
  f=$(echo "$line" | grep -Eo '[0-9]+ failed' | grep -Eo '[0-9]+'); failed=$((failed + ${f:-0}))
  if [ -z "$line" ]; then
    echo "${prefix}suite $s did not complete"
    failed=$((failed + 1))
    cases+="$s: did not complete"$'\n'
  fi
  cases+=$(grep -aE -A1 "^$s:[^ ]+ failed" "$log" | grep -v "^--$" | paste -d" " - -)$'\n'
  # A case skipped because its init crashed (auto_skipped in the suite's
  # log) is a failure: the console line is the same as for a case that
  # skips itself with a reason (a tool this machine lacks).
  local dir slog c r
  dir=$(grep -aoE 'CWD set to: "[^"]+"' "$log" | tail -1 | sed -E 's/^CWD set to: "(.*)"$/\1/')
  [ -n "$dir" ] || return 0
  for slog in "$dir"/*.logs/run.*/suite.log; do
    [ -f "$slog" ] || continue
    while IFS=$'\t' read -r c r; do
      echo "${prefix}not ok - $c: skipped because its setup failed: $r"
      failed=$((failed + 1))
      cases+="$c: auto-skipped: $r"$'\n'
    done < <(awk '/^=case / { c = $2 } /^=result +auto_skipped/ { sub(/^=result +auto_skipped: */, ""); print c "\t" substr($0, 1, 200) }' "$slog")
  done
}

# ct_left NAME STATUS: a guarded run (test/guard.sh) that left processes
# running (status 125) is one more failure, even if every case passed.
ct_left() {
  if [ "$2" -eq 125 ]; then
    failed=$((failed + 1))
    cases+="$1: left processes running"$'\n'
  fi
}

# The failed cases again, last: a long run's closing lines are all some
# readers get to see.
ct_failed_cases() {
  echo "$cases" | sed '/^$/d; s/^/failed case: /'
}
