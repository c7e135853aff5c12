#!/usr/bin/env bash
# demo/run.sh -- `make demo`: traces a small workload (a gen_server with
# ETS, four workers, messages) for a few seconds, then summarises the trace
# and exports it for Perfetto.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${DEMO_DIR:-_build/demo}
secs=${DEMO_SECONDS:-3}
rm -rf "$out" && mkdir -p "$out"
erlc +warnings_as_errors -pa ebin -o "$out" demo/beamprobe_demo.erl
echo "== tracing the demo workload for $secs s =="
erl -noshell -pa ebin -pa "$out" -run beamprobe_demo run "$out/trace" "$secs"
echo
echo "== bin/beamprobe stats $out/trace --top 10 =="
bin/beamprobe stats "$out/trace" --top 10
bin/beamprobe export --format perfetto "$out/trace" -o "$out/demo.perfetto.json"
bin/beamprobe export --format speedscope "$out/trace" -o "$out/demo.speedscope.json"
bin/beamprobe export --format folded "$out/trace" -o "$out/demo.folded"
cat <<MSG

Written:
  $out/trace/                  the CTF trace: bin/beamprobe print $out/trace | less
                                               babeltrace2 $out/trace | less
  $out/demo.perfetto.json      open it in https://ui.perfetto.dev (Open trace file)
                               or chrome://tracing
  $out/demo.speedscope.json    open it in https://www.speedscope.app or 'npx speedscope'
  $out/demo.folded             flame-graph stacks (flamegraph.pl, speedscope)
MSG
