#!/usr/bin/env bash
# scripts/dialyzer.sh -- dialyzer over ebin with a PLT kept in _build.
set -euo pipefail
cd "$(dirname "$0")/.."
plt=_build/beamprobe.plt
apps="erts kernel stdlib runtime_tools compiler"
mkdir -p _build
# The PLT is rebuilt when the list of applications changes.
if [ ! -f "$plt" ] || [ "$(cat "$plt.apps" 2>/dev/null)" != "$apps" ]; then
  rm -f "$plt"
  # shellcheck disable=SC2086
  dialyzer --build_plt --output_plt "$plt" --apps $apps >/dev/null || true
  echo "$apps" > "$plt.apps"
fi
dialyzer --plt "$plt" -Wunmatched_returns -Werror_handling ebin
