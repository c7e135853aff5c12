#!/usr/bin/env bash
# scripts/dialyzer.sh -- dialyzer over ebin with a PLT kept in _build.
set -euo pipefail
cd "$(dirname "$0")/.."
plt=_build/beamprobe.plt
mkdir -p _build
if [ ! -f "$plt" ]; then
  dialyzer --build_plt --output_plt "$plt" --apps erts kernel stdlib runtime_tools >/dev/null || true
fi
dialyzer --plt "$plt" -Wunmatched_returns -Werror_handling ebin
