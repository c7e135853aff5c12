#!/usr/bin/env bash
# bench/run.sh -- `make bench`: builds the benchmark helpers and runs them.
# Usage: bash bench/run.sh [cost|rate|firehose|reader ...]  (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
B=_build/bench
mkdir -p "$B"
ERL_INCLUDE=$(erl -noshell -eval 'io:put_chars(filename:join([code:root_dir(), "usr", "include"])), halt().')
gcc -O2 -fPIC -shared -Wall -Wextra -Werror -I"$ERL_INCLUDE" -o "$B/floor_tracer.so" bench/floor_tracer.c
erlc +warnings_as_errors -pa ebin -o "$B" bench/*.erl
args=("$@")
erl_args=()
run_reader=0
for a in "${args[@]}"; do
  if [ "$a" = reader ]; then run_reader=1
  elif [ "$a" = profile ]; then erl +sbwt none -noshell -pa ebin -pa "$B" -run beamprobe_profile_bench main  # issue 12: profile mode
  else erl_args+=("$a"); fi
done
bench() {
  erl +sbwt none +sbwtdcpu none +sbwtdio none -noshell -pa ebin -pa "$B" -run beamprobe_bench main "$@"
}
if [ ${#args[@]} -eq 0 ]; then
  # The firehose in a node of its own (its memory figures want a fresh
  # node), then let the 1-2 GB it wrote reach the disk before timing.
  bench firehose
  sync
  sleep 2
  bench cost rate handler
elif [ ${#erl_args[@]} -gt 0 ]; then
  bench "${erl_args[@]}"
fi
if [ ${#args[@]} -eq 0 ] || [ $run_reader = 1 ]; then
  if [ -f bench/reader.sh ]; then bash bench/reader.sh; fi
fi
