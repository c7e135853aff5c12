#!/bin/bash
# make_traces.sh -- regenerates the golden traces under test/traces/ from
# test/cli/gen_trace.c: good/basic, and damaged copies of it (one kind of
# damage each).  Run from the repo root after `make -C c_src/cli gen`;
# then regenerate the expected outputs with `bash test/cli/run.sh --bless`
# and review the diff.  Deterministic: same input, same bytes.
set -euo pipefail
GEN=_build/cli/gen_trace
T=test/traces
rm -rf "$T/good/basic" "$T/damaged"
mkdir -p "$T/good" "$T/damaged"
"$GEN" basic "$T/good/basic"
chmod 644 "$T"/good/basic/*

# Byte offset of packet number $2 (0-based) in stream file $1.
packet_off() {
	python3 - "$1" "$2" <<'PY'
import struct, sys
data = open(sys.argv[1], 'rb').read()
off = 0
for _ in range(int(sys.argv[2])):
    off += struct.unpack_from('<Q', data, off + 48)[0] // 8
print(off)
PY
}
# Overwrites bytes at offset $2 of file $1 with the hex string $3.
patch() {
	python3 - "$1" "$2" "$3" <<'PY'
import sys
path, off, hexs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = bytearray(open(path, 'rb').read())
b = bytes.fromhex(hexs)
data[off:off + len(b)] = b
open(path, 'wb').write(data)
PY
}
copy() { cp -r "$T/good/basic" "$T/damaged/$1"; }

copy truncated_last_packet          # the last packet cut in the middle
f=$T/damaged/truncated_last_packet/thread-000
truncate -s $(( $(stat -c %s "$f") - 40 )) "$f"

# (Packet 0 of every stream is the empty one that starts it.)
copy bad_magic                      # third packet's magic overwritten
f=$T/damaged/bad_magic/thread-000
patch "$f" "$(packet_off "$f" 3)" deadbeef

copy bad_packet_size                # second packet claims 999999 bytes
f=$T/damaged/bad_packet_size/thread-001
patch "$f" $(( $(packet_off "$f" 2) + 48 )) "$(printf '%016x' $((999999 * 8)) |
	sed 's/\(..\)/\1 /g' | awk '{for (i = NF; i > 0; i--) printf "%s", $i}')"

copy bad_event_id                   # first event of packet 2: id 999
f=$T/damaged/bad_event_id/thread-000
patch "$f" $(( $(packet_off "$f" 2) + 76 )) e703

copy garbage_metadata               # metadata replaced by junk
head -c 600 /dev/zero | tr '\0' 'x' > "$T/damaged/garbage_metadata/metadata"

copy missing_metadata               # no metadata file at all
rm "$T/damaged/missing_metadata/metadata"

copy empty_stream                   # a stream file with no packet
: > "$T/damaged/empty_stream/thread-002"
chmod 644 "$T"/damaged/*/*
echo "traces written under $T"
