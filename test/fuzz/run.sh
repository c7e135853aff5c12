#!/usr/bin/env bash
# test/fuzz/run.sh -- runs the libFuzzer target of the trace decoder
# (test/fuzz/fuzz_reader.c) for a bounded time, seeded with the golden
# traces in test/traces/.  FUZZ_SECONDS bounds it: 60 for `make fuzz`, 20
# in `make test`.  A crash, a sanitizer report, a leak or a timeout (one
# input taking more than 10 s) fails the run; the input is kept under
# _build/fuzz/ (crash-*, timeout-*, leak-*) and its name printed.
# Prints "fuzz: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
command -v clang >/dev/null || { echo "SKIP: clang (libFuzzer) not installed"; echo "fuzz: 0 passed, 0 failed"; exit 0; }
make -s -C c_src/cli fuzz || { echo "fuzz: 0 passed, 1 failed (build)"; exit 1; }
corpus=_build/fuzz/corpus
mkdir -p "$corpus" _build/fuzz/artifacts
find test/traces -type f ! -name '*.print' ! -name '*.stats' ! -name '*.info' \
  -size -64k -exec cp {} "$corpus/" \; 2>/dev/null || true
secs=${FUZZ_SECONDS:-60}
echo "fuzzing the decoder for $secs s (corpus: $corpus)"
_build/cli/fuzz_reader -max_total_time="$secs" -max_len=65536 "$corpus"
mcorpus=_build/fuzz/meta-corpus
mkdir -p "$mcorpus"
cp test/traces/good/basic/metadata test/fuzz/meta-cases/* "$mcorpus/"
echo "fuzzing the metadata parser for $secs s (corpus: $mcorpus)"
_build/cli/fuzz_meta -max_total_time="$secs" -timeout=60 -max_len=16384 "$mcorpus"
ecorpus=_build/fuzz/elixir-corpus
mkdir -p "$ecorpus"
cp test/fuzz/elixir-cases/* "$ecorpus/"
echo "fuzzing the Elixir re-renderer for $secs s (corpus: $ecorpus)"
_build/cli/fuzz_elixir -max_total_time="$secs" -timeout=10 -max_len=4096 "$ecorpus"
