#!/usr/bin/env bash
# test/fuzz/run.sh -- `make fuzz`: runs the libFuzzer target of the trace
# decoder (test/fuzz/fuzz_reader.c) for a bounded time, seeded with the
# golden traces in test/traces/.  FUZZ_SECONDS (default 60) bounds it.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v clang >/dev/null || { echo "SKIP: clang (libFuzzer) not installed"; exit 0; }
make -s -C c_src/cli fuzz
corpus=_build/fuzz/corpus
mkdir -p "$corpus"
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
