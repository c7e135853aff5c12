#!/bin/bash
# test/elixir/run.sh -- the ExUnit suite of the Elixir modules (lib/):
# compiles them (make elixir, into _build/elixir/ebin) and runs
# test/elixir/*_test.exs in a VM that has ebin/ (the Erlang application)
# and the compiled Elixir modules on its path.  Skipped, with the reason
# printed, where elixir is not installed.  Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
if ! command -v elixir >/dev/null 2>&1; then
	echo "test/elixir: skipped: elixir is not installed (make deps installs it)"
	echo "0 passed, 0 failed"
	exit 0
fi
make --no-print-directory elixir >/dev/null || { echo "test/elixir: make elixir failed"; echo "0 passed, 1 failed"; exit 1; }
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
# (test/guard.sh: no pipe a leftover process could hold open; a hang is
# stopped after 600 s; what the suite leaves running fails it.)
. test/guard.sh
guarded "$OUT" 600 elixir -pa ebin -pa _build/elixir/ebin -r test/elixir/test_helper.exs -r "test/elixir/*_test.exs" -e ":ok"
rc=$?
line=$(grep -E '^[0-9]+ (tests?|doctests?)' "$OUT" | tail -1)
# "3 doctests, 20 tests, 1 failure" -> passed = doctests + tests - failures
total=$(echo "$line" | grep -oE '[0-9]+ (doctests?|tests?)' | awk '{s += $1} END {print s + 0}')
failed=$(echo "$line" | grep -oE '[0-9]+ failures?' | awk '{print $1 + 0}')
failed=${failed:-0}
if [ -z "$line" ]; then
	echo "test/elixir: the suite did not run"
	echo "0 passed, 1 failed"
	exit 1
fi
echo "$((total - failed)) passed, $failed failed"
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
