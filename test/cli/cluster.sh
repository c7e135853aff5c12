# test/cli/cluster.sh -- sourced by test/cli/run.sh (its helpers, $BP,
# $GEN, $WORK, ok/not_ok/check): `beamprobe cluster' on a directory of
# node traces, `print --follow' and `--follow --nodes'.
echo "# cluster: a directory of node traces"
CL="$WORK/cl"
mkdir -p "$CL/a" "$CL/b" "$CL/c"
cp $G/metadata $G/thread-* "$CL/a/"
cp $G/thread-* "$CL/b/"
cp $G/thread-* "$CL/c/"
# b: a node 5 us behind a, bounds recorded; c: hostile clock keys.
sed -e 's/node = "demo@testhost";/node = "b@testhost";\n\tcluster_control = "demo@testhost";\n\tdist_ids = "7=demo@testhost,0=b@testhost";\n\tclock_offset_ns = "5000";\n\tclock_offset_lo_ns = "4000";\n\tclock_offset_hi_ns = "6000";/' $G/metadata >"$CL/b/metadata"
sed -e 's/node = "demo@testhost";/node = "c@testhost";\n\tdist_ids = "x=,=,99999999999999999999=nobody,,=";\n\tclock_offset_ns = "12abc";\n\tclock_offset_lo_ns = "9";\n\tclock_offset_hi_ns = "-9";/' $G/metadata >"$CL/c/metadata"
run cluster "$CL"
check "cluster: reads three node traces, exit 0" "$rc $(grep -c '^Cluster: 3 node traces' "$WORK/out")" "0 1"
sanitizer_clean && ok "cluster: sanitizer clean" || not_ok "cluster: sanitizer clean" "$(head -20 "$WORK/err")"
check "cluster: b's recorded bounds are shown and kept" "$(grep -c 'b@testhost .*offset 5000  recorded \[4000, 6000\]  refined \[4000, 6000\]' "$WORK/out")" 1
check "cluster: c's contradictory clock keys are refused, and said" "$(grep -c 'c@testhost .*recorded \[refused\]' "$WORK/out") $(grep -c 'cl/c: clock_offset_ns = "12abc" is not an integer: the recorded clock bounds are ignored' "$WORK/err")" "1 1"
run cluster --print "$CL"
if have babeltrace2; then
	check "cluster --print: every event of every node, once (babeltrace2 counts them)" "$rc $(grep -c ' demo@testhost ' "$WORK/out") $(grep -c ' b@testhost ' "$WORK/out") $(grep -c ' c@testhost ' "$WORK/out")" "0 $(babeltrace2 $G 2>/dev/null | wc -l) $(babeltrace2 $G 2>/dev/null | wc -l) $(babeltrace2 $G 2>/dev/null | wc -l)"
else
	skip "cluster --print event count: babeltrace2 not installed"
fi
check "cluster --print: b's events shifted by its offset (5 us after a's twin)" "$(grep -c '^12:00:00.000006 b@testhost' "$WORK/out")" "$(grep -c '^12:00:00.000001 ' "$EXP/basic.print")"
run cluster --perfetto "$WORK/cl.json" "$CL"
if have python3 && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["traceEvents"]) > 3' "$WORK/cl.json" 2>"$WORK/py.err"; then ok "cluster --perfetto: valid JSON with events"; else not_ok "cluster --perfetto: valid JSON" "$(cat "$WORK/py.err")"; fi
run cluster --json "$CL"
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["nodes"] == 3 and d["control"] == "demo@testhost" and d["offsets"][1]["refined_lo_ns"] == 4000' "$WORK/out" 2>"$WORK/py.err"; then ok "cluster --json: valid, control node and bounds"; else not_ok "cluster --json" "$(cat "$WORK/py.err" "$WORK/out")"; fi
# A send to another node is stamped by the VM after it left: b's second
# pong is received on a 50 us before its send's stamp.  The constraint
# comes from the record b's thread wrote before that send (110 us), not
# from the send's stamp (200 us, which would put b 50 us behind a and
# contradict its recorded bounds) nor from the process record of the
# send's own callback (199 us); test/cli/gen_trace.c, gen_xnode.
"$GEN" xnode "$WORK/xn"
run cluster --json "$WORK/xn"
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); b=d["offsets"][1]
assert (d["consistent"], d["reversed"], d["late_send_stamps"], d["flows"]) == (True, 0, 1, 4), d
assert (b["node"], b["refined_lo_ns"], b["refined_hi_ns"]) == ("b@h", -25000, 30000), b
assert b["refined_lo_ns"] <= b["offset_ns"] <= b["refined_hi_ns"]' "$WORK/out" 2>"$WORK/py.err"
then ok "cluster: a send stamped after its receive is the VM's order: consistent, bounds from the record before it"
else not_ok "cluster: late send stamp" "$(cat "$WORK/py.err" "$WORK/out")"; fi
sanitizer_clean && ok "cluster (late send stamp): sanitizer clean" || not_ok "cluster (late send stamp): sanitizer clean" "$(head -20 "$WORK/err")"
# Lost events per node and in all, by cause, as stats says them of each
# node's trace: a@h's stop record says 5 ring_full, b@h's 4 limit and 2
# lost by its TCP stream alone (the files hold them: named, not counted).
# Before, cluster said nothing of losses.
cp -a "$WORK/xn" "$WORK/xlost2"
sed -i 's/^env {$/env {\n\tsession_lost = "ring_full=5,overwritten=0,too_big=0,limit=0,rate=0,stopped=0,no_buffer=0,dumping=0,io_error=0";/' "$WORK/xlost2/a/metadata"
sed -i 's/^env {$/env {\n\tsession_lost = "ring_full=0,overwritten=0,too_big=0,limit=4,rate=0,stopped=0,no_buffer=0,dumping=0,io_error=0,stream=2";/' "$WORK/xlost2/b/metadata"
run stats "$WORK/xlost2/b"
check "stats of b@h's trace: 4 lost (the figure cluster must give)" "$(grep -c '^Lost events: 4  limit=4 ' "$WORK/out")" 1
run cluster "$WORK/xlost2"
check "cluster: lost events in all and per node, by cause" \
	"$rc $(grep -c '^Lost events: 9 in all  ring_full=5  limit=4  (tcp_stream_only=2)$' "$WORK/out") $(grep -c '^  a@h  *lost 5  ring_full=5$' "$WORK/out") $(grep -c '^  b@h  *lost 4  limit=4  (tcp_stream_only=2)$' "$WORK/out")" "0 1 1 1"
sanitizer_clean && ok "cluster (losses): sanitizer clean" || not_ok "cluster (losses): sanitizer clean" "$(head -20 "$WORK/err")"
run cluster --json "$WORK/xlost2"
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d["lost"]
assert (l["total"], l["by_cause"]["ring_full"], l["by_cause"]["limit"], l["by_cause"]["tcp_stream_only"]) == (9, 5, 4, 2), l
assert [(n["node"], n["total"], n["by_cause"]["limit"]) for n in l["nodes"]] == [("a@h", 5, 0), ("b@h", 4, 4)], l' "$WORK/out" 2>"$WORK/py.err"
then ok "cluster --json: lost total, by cause, per node"
else not_ok "cluster --json: lost" "$(cat "$WORK/py.err" "$WORK/out")"; fi
run cluster "$WORK/xn"
check "cluster: a trace without losses says 0" "$(grep -c '^Lost events: 0 in all$' "$WORK/out")" 1
run cluster "$WORK/xn"
check "cluster: the late stamp counted apart from reversed, its negative latency shown" \
	"$rc $(grep -c 'reversed 0, sends stamped after they left 1,' "$WORK/out") $(grep -c 'b@h -> a@h: 2 messages, latency min -52.500us mean -15.000us max 22.500us' "$WORK/out")" "0 1 1"
run cluster --print "$WORK/xn"
check "cluster --print: both ends of the late-stamped flow marked, no other flow" \
	"$(grep -c '{pong,2}.*\[flow 4 .*, -52.500us, send stamped after it left\]$' "$WORK/out") $(grep -c 'stamped after' "$WORK/out")" "2 2"
run request --root 'm:f/0' "$WORK/xn"
check "request: a reply received before its send's stamp stays in its request (9 events)" \
	"$rc $(grep -c '^Request 1: root <0.100.0> on a@h, 9 events, 2 processes' "$WORK/out") $(grep -c 'a@h <0.100.0> received {pong,2}$' "$WORK/out")" "0 1 1"
# F5: b's recorded bounds 5 ms off (xnode's b is within [-40, 40] us):
# the pongs b -> a then arrive 5 ms before they were sent; they are paired
# anyway (the pairing does not trust the bounds), so the bounds are found
# inconsistent and the flows reversed, not left "not received".
cp -a "$WORK/xn" "$WORK/xshift"
sed -i -E 's/clock_offset_lo_ns = "[-0-9]+"/clock_offset_lo_ns = "5000000"/; s/clock_offset_hi_ns = "[-0-9]+"/clock_offset_hi_ns = "5010000"/; s/clock_offset_ns = "[-0-9]+"/clock_offset_ns = "5005000"/' "$WORK/xshift/b/metadata"
# The timeline shown may be wrong: every mode prints what it can, says
# so on stderr and exits 2 (before: exit 0, and only --print and
# --perfetto said it).
run cluster --json "$WORK/xshift"
check "cluster --json: wrong bounds: exit 2, said on stderr" \
	"$rc $(grep -c 'contradict the recorded clock bounds (consistent: false).*2 flows received before sent' "$WORK/err")" "2 1"
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
assert (d["consistent"], d["reversed"], d["flows"], d["unmatched_sends"]) == (False, 2, 4, 0), d' "$WORK/out" 2>"$WORK/py.err"
then ok "cluster: bounds 5 ms wrong: inconsistent, 2 flows reversed, none unmatched"
else not_ok "cluster: wrong bounds caught" "$(cat "$WORK/py.err" "$WORK/out")"; fi
run cluster "$WORK/xshift"
check "cluster: wrong bounds: the summary printed and says so, exit 2, said on stderr" \
	"$rc $(grep -c '^Flows (cross-node messages matched send -> receive): 4, reversed 2,' "$WORK/out") $(grep -c 'the messages contradict the recorded bounds' "$WORK/out") $(grep -c 'contradict the recorded clock bounds (consistent: false)' "$WORK/err")" "2 1 1 1"
run cluster --perfetto "$WORK/xshift.json" "$WORK/xshift"
check "cluster --perfetto: wrong bounds: the file written, exit 2, said on stderr" \
	"$rc $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["traceEvents"]) > 3)' "$WORK/xshift.json" 2>&1) $(grep -c 'contradict the recorded clock bounds' "$WORK/err")" "2 True 1"
run cluster --print "$WORK/xshift"
check "cluster --print: wrong bounds said on stderr, exit 2, both ends of the reversed flows marked" \
	"$rc $(grep -c 'contradict the recorded clock bounds (consistent: false).*2 flows received before sent' "$WORK/err") $(grep -c '{pong,[12]}.*reversed: received before sent\]$' "$WORK/out")" "2 1 4"
sanitizer_clean && ok "cluster (wrong bounds): sanitizer clean" || not_ok "cluster (wrong bounds): sanitizer clean" "$(head -20 "$WORK/err")"
# F9: hostile clock metadata: no undefined behaviour (UBSan halts on
# it), the bounds refused with the node and the value named.
for v in "full -9223372036854775808 9223372036854775807 0" \
	 "huge 9000000000000000000 9000000000000000000 9000000000000000000" \
	 "near 2305843009213693000 2305843009213693000 2305843009213693000" \
	 "wall 7200000000000 7200000000010 7200000000005" \
	 "inverted 40000 -40000 0"; do
	set -- $v
	cp -a "$WORK/xn" "$WORK/x$1"
	sed -i -E "s/clock_offset_lo_ns = \"[-0-9]+\"/clock_offset_lo_ns = \"$2\"/; s/clock_offset_hi_ns = \"[-0-9]+\"/clock_offset_hi_ns = \"$3\"/; s/clock_offset_ns = \"[-0-9]+\"/clock_offset_ns = \"$4\"/" "$WORK/x$1/b/metadata"
	run cluster "$WORK/x$1"
	case $1 in
	wall) want="x$1/b: recorded clock offset bounds \\[$2, $3\\] ns are more than 3600 s from the 0 ns the wall clocks" ;;
	inverted) want="x$1/b: clock_offset_lo_ns $2 > clock_offset_hi_ns $3: the recorded clock bounds are ignored" ;;
	*) want="x$1/b: recorded clock offset bounds \\[$2, $3\\] ns are beyond .*: implausible, ignored" ;;
	esac
	check "cluster, clock bounds $1 ($2, $3): refused and named, exit 0, flows still matched" \
		"$rc $(grep -c "$want" "$WORK/err") $(grep -c 'b@h .*recorded \[refused\]' "$WORK/out") $(grep -c 'Flows .*: 4, reversed 0' "$WORK/out")" "0 1 1 1"
	sanitizer_clean && ok "cluster, clock bounds $1: sanitizer clean" || not_ok "cluster, clock bounds $1: sanitizer clean" "$(head -20 "$WORK/err")"
	for m in --json --print "--perfetto $WORK/x$1.json"; do
		run cluster $m "$WORK/x$1"
		sanitizer_clean || break
	done
	sanitizer_clean && ok "cluster --json/--print/--perfetto, clock bounds $1: sanitizer clean" || not_ok "cluster $m, clock bounds $1: sanitizer clean" "$(head -20 "$WORK/err")"
done
# F8: more node traces than beamprobe reads at once (64): refused, the
# count and the limit named, exit 2 -- never a part cut by readdir order.
mkdir -p "$WORK/many"
cp -a "$WORK/xn/a" "$WORK/xn/b" "$WORK/many/"
for i in $(seq -w 3 64); do
	mkdir "$WORK/many/n$i" && cp "$WORK/xn/b/thread-000" "$WORK/many/n$i/"
	sed "s/node = \"b@h\"/node = \"n$i@h\"/" "$WORK/xn/b/metadata" >"$WORK/many/n$i/metadata"
done
run cluster "$WORK/many"
check "cluster: 64 node traces read, exit 0" "$rc $(grep -c '^Cluster: 64 node traces' "$WORK/out")" "0 1"
mkdir "$WORK/many/n65" && cp "$WORK/xn/b/thread-000" "$WORK/xn/b/metadata" "$WORK/many/n65/"
run cluster "$WORK/many"
check "cluster: 65 node traces refused, count and limit named, exit 2" \
	"$rc $(grep -c 'many: 65 node traces, more than the 64 beamprobe reads as one cluster; none read' "$WORK/err") $(wc -c <"$WORK/out")" "2 1 0"
sanitizer_clean && ok "cluster (65 node traces): sanitizer clean" || not_ok "cluster (65 node traces): sanitizer clean" "$(head -20 "$WORK/err")"
run request "$WORK/many"
check "request: 65 node traces refused too, exit 2" "$rc $(grep -c '65 node traces, more than the 64' "$WORK/err")" "2 1"
# F6: a node the session ran on (cluster_nodes) whose trace is lost: named,
# the sends to it counted as not received, exit 2; a send to a node in
# no cluster_nodes is counted apart.
"$GEN" xlost "$WORK/xlost"
run cluster "$WORK/xlost"
check "cluster: a lost node trace named on stderr, its 2 sends counted, exit 2" \
	"$rc $(grep -c 'xlost: node c@h ran the session (env cluster_nodes) but its trace c@h/ is not here: its events are missing; 2 sends to it counted as not received' "$WORK/err")" "2 1"
check "cluster: the summary names it and counts the sends (2 to it, 1 outside)" \
	"$(grep -c '^Missing node traces (the session ran on them): c@h (2 sends to it not received)$' "$WORK/out") $(grep -c 'sends not received in the traces 2, sends to nodes outside the cluster 1$' "$WORK/out")" "1 1"
sanitizer_clean && ok "cluster (lost node trace): sanitizer clean" || not_ok "cluster (lost node trace): sanitizer clean" "$(head -20 "$WORK/err")"
run cluster --json "$WORK/xlost"
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
assert (d["nodes"], d["unmatched_sends"], d["outside_sends"], d["missing_nodes"], d["flows"]) == (2, 2, 1, [{"node": "c@h", "sends": 2}], 4), d' "$WORK/out" 2>"$WORK/py.err"
then ok "cluster --json: missing_nodes and the sends to them"
else not_ok "cluster --json: missing nodes" "$(cat "$WORK/py.err" "$WORK/out")"; fi
run request --root 'm:f/0' "$WORK/xlost"
check "request: the lost node trace said too, exit 2" "$rc $(grep -c 'node c@h ran the session' "$WORK/err")" "2 1"
# F11: a node's events are counted as info counts them (its process
# records aside: b's trace has one).
run cluster --json "$WORK/xn"
cl_ev=$(json_get "$WORK/out" "' '.join(str(o['events']) for o in d['offsets'])")
info_ev=$(for nd in a b; do "$BP" info "$WORK/xn/$nd" | sed -n 's/^events: *\([0-9]*\).*/\1/p'; done | tr '\n' ' ' | sed 's/ $//')
check "cluster: per-node events equal info's (process records aside)" "$cl_ev" "$info_ev"
# F2: a follow session's request that sends to {Name, Node}: the name is
# in no process record of the receiving trace (or only in the one written
# at the session's end); the hops and the replies stay in the request,
# and the receive of no request's message is counted, not dropped.
"$GEN" xname "$WORK/xname"
run request "$WORK/xname"
check "request: sends to {Name, Node} matched, the whole request (10 events, 3 processes)" \
	"$rc $(grep -c '^Request 1: root <0.100.0> on a@h, 10 events, 3 processes' "$WORK/out") $(grep -c 'b@h   <0.20[01].0> \(received\|sent\)' "$WORK/out") $(grep -c 'a@h <0.100.0> received' "$WORK/out")" "0 1 4 2"
check "request: what is in no request is counted and said" \
	"$(grep -c '^Left out (in no request): 1 receive of messages no request.s process is seen sending, 0 other events' "$WORK/out")" 1
sanitizer_clean && ok "request (sends to names): sanitizer clean" || not_ok "request (sends to names): sanitizer clean" "$(head -20 "$WORK/err")"
# --request N past the last request printed nothing, exit 0.
run request --request 2 "$WORK/xname"
check "request --request 2 of a trace with 1 request: exit 1, nothing on stdout" "$rc $(wc -c <"$WORK/out")" "1 0"
grep -q "xname: no request 2: the trace has 1 request$" "$WORK/err" && ok "request --request 2: says how many there are" || not_ok "request --request 2: says how many there are" "$(cat "$WORK/err")"
run request --request 1 "$WORK/xname"
check "request --request 1: that request" "$rc $(grep -c '^Request 1: ' "$WORK/out")" "0 1"
run cluster --json "$WORK/xname"
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
assert (d["flows"], d["unmatched_sends"]) == (4, 0), d' "$WORK/out" 2>"$WORK/py.err"
then ok "cluster: sends to a name the receiving trace does not give matched by node and text"
else not_ok "cluster: sends to unnamed names" "$(cat "$WORK/py.err" "$WORK/out")"; fi
run cluster "$G"
check "cluster on a single trace: exit 2, says why" "$rc $(grep -c 'no node traces in it' "$WORK/err")" "2 1"
run cluster
check "cluster without DIR: usage, exit 1" "$rc" 1
run cluster --json --print "$CL"
check "cluster --json --print: usage, exit 1" "$rc" 1
run cluster --help
check "cluster --help: exit 0" "$rc $(grep -c 'Usage: beamprobe cluster' "$WORK/out")" "0 1"

run request "$G"
check "request on a trace without follow_root: says so, exit 0" "$rc $(grep -c '^No request' "$WORK/out")" "0 1"
sanitizer_clean && ok "request: sanitizer clean" || not_ok "request: sanitizer clean" "$(head -20 "$WORK/err")"
run request --root 'lists:seq/2' "$CL"
check "request --root on a directory of node traces: exit 0, sanitizer clean" "$rc $(grep -cE 'AddressSanitizer|runtime error' "$WORK/err")" "0 0"
run request --request 0 "$G"
check "request --request 0: usage, exit 1" "$rc" 1

echo "# --follow"
mkdir "$WORK/live"
cp $G/metadata $G/thread-000 "$WORK/live/"
"$BP" print --follow "$WORK/live" >"$WORK/follow.out" 2>"$WORK/follow.err" &
fpid=$!
# thread-000's lines printed: it follows; then the stream file comes.
wait_lines "$WORK/follow.out" .
cp $G/thread-001 "$WORK/live/.thread-001.tmp" && mv "$WORK/live/.thread-001.tmp" "$WORK/live/thread-001"
wait_lines "$WORK/follow.out" '<0.101.0>' "$(grep -c '<0.101.0>' "$EXP/basic.print")"
kill -INT $fpid
wait $fpid; frc=$?
check "--follow: exits 0 on SIGINT" "$frc" 0
check "--follow: picked up the stream file added later" "$(grep -c '<0.101.0>' "$WORK/follow.out")" "$(grep -c '<0.101.0>' "$EXP/basic.print")"

# print --follow started before the trace (the tutorial: receive, then
# print --follow, then the session): it waits for the metadata; it used
# to decode without it at once (times without the wall-clock offset,
# calls indented in a trace without returns) and exit 2.
mkdir "$WORK/early"
"$BP" print --follow "$WORK/early" >"$WORK/early.out" 2>"$WORK/early.err" &
fpid=$!
wait_lines "$WORK/early.err" "waiting for the trace to start"
cp $G/metadata "$WORK/early/.m" && mv "$WORK/early/.m" "$WORK/early/metadata"
cp $G/thread-* "$WORK/early/"
touch "$WORK/early/.complete"
for _ in $(seq 300); do kill -0 $fpid 2>/dev/null || break; sleep 0.1; done
if kill -0 $fpid 2>/dev/null; then kill -INT $fpid; wait $fpid; frc=still_running; else wait $fpid; frc=$?; fi
check "--follow before the metadata exists: waits for it, exit 0 at .complete" "$frc" 0
if cmp -s "$WORK/early.out" "$EXP/basic.print"; then ok "--follow before the metadata exists: print's lines, wall-clock times"
else not_ok "--follow before the metadata exists: print's lines, wall-clock times" "$(diff "$WORK/early.out" "$EXP/basic.print" | head; cat "$WORK/early.err")"; fi
grep -q "early: waiting for the trace to start" "$WORK/early.err" && ok "--follow before the metadata exists: says it waits" || not_ok "--follow before the metadata exists: says it waits" "$(cat "$WORK/early.err")"
mkdir "$WORK/early2"
"$BP" print --follow "$WORK/early2" >"$WORK/out" 2>"$WORK/err" &
fpid=$!
wait_lines "$WORK/err" "waiting for the trace to start"
kill -INT $fpid; wait $fpid; frc=$?
check "--follow, ^C while waiting for the metadata: exit 0, nothing printed" "$frc $(wc -c <"$WORK/out")" "0 0"
run print --follow "$WORK/no-such-dir"
check "--follow on a directory that does not exist: exit 2 at once" "$rc" 2
# The followed directory removed: print says so and ends (exit 2); it
# used to wait for more until killed.
mkdir "$WORK/gone"
cp $G/metadata $G/thread-* "$WORK/gone/"
"$BP" print --follow "$WORK/gone" >"$WORK/out" 2>"$WORK/err" &
fpid=$!
wait_lines "$WORK/out" '<0.101.0>' "$(grep -c '<0.101.0>' "$EXP/basic.print")"
rm -rf "$WORK/gone"
for _ in $(seq 300); do kill -0 $fpid 2>/dev/null || break; sleep 0.1; done
if kill -0 $fpid 2>/dev/null; then kill -INT $fpid; wait $fpid; frc=still_running; else wait $fpid; frc=$?; fi
check "--follow, directory removed: ends, exit 2, says so" "$frc $(grep -c 'removed while followed' "$WORK/err")" "2 1"
check "--follow, directory removed: what was there is printed" "$(grep -c '<0.101.0>' "$WORK/out")" "$(grep -c '<0.101.0>' "$EXP/basic.print")"

echo "# --follow --nodes (attach --cluster's printer)"
mkdir -p "$WORK/nodes/a@h"
cp $G/metadata $G/thread-* "$WORK/nodes/a@h/"
timeout 20 "$BP" print --follow --nodes "$WORK/nodes" >"$WORK/nodes.out" 2>"$WORK/nodes.err" &
fpid=$!
# A node whose trace appears later (a@h's lines are out); then every
# stream is in.
wait_lines "$WORK/nodes.out" " a@h " "$(grep -c . "$EXP/basic.print")"
mkdir "$WORK/nodes/.tmp" && cp $G/metadata $G/thread-* "$WORK/nodes/.tmp/" && mv "$WORK/nodes/.tmp" "$WORK/nodes/b@h"
touch "$WORK/nodes/.complete"
wait $fpid; frc=$?
check "--follow --nodes: ends 0 once DIR/.complete is there" "$frc" 0
for nd in a@h b@h; do
	sed -n "s/^\([^ ]*\) $nd /\1 /p" "$WORK/nodes.out" >"$WORK/nodes.$nd"
	if cmp -s "$WORK/nodes.$nd" "$EXP/basic.print"; then ok "--follow --nodes: $nd's lines are print's, with its name after the time"
	else not_ok "--follow --nodes: $nd's lines are print's, with its name after the time" "$(diff "$WORK/nodes.$nd" "$EXP/basic.print" | head)"; fi
done
check "--follow --nodes: no other lines" "$(grep -c . "$WORK/nodes.out")" "$((2 * $(grep -c . "$EXP/basic.print")))"
! grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$WORK/nodes.err" && ok "--follow --nodes: sanitizer clean" || not_ok "--follow --nodes: sanitizer clean" "$(head -20 "$WORK/nodes.err")"
