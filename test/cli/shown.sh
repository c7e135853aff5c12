# test/cli/shown.sh -- sourced by test/cli/run.sh (its helpers, $BP,
# $GEN, $WORK, ok/not_ok/check): what the reader shows is true, on
# synthetic traces from gen_trace (issue 7), and hostile files.
echo "# issue 7: what is shown is true (synthetic traces from gen_trace)"
I7=$WORK/i7; mkdir -p "$I7"
for m in flows names exitsched drops; do "$GEN" $m "$I7/$m"; done
"$GEN" deep "$I7/deep" 1000
if have python3; then
	# 12: flows keyed by the receiver's identity, names and aliases resolved
	run stats --json "$I7/flows"; cp "$WORK/out" "$I7/flows.json"
	fl() { json_get "$I7/flows.json" "$1"; }
	check "12 flows: one row per receiver (9 rows)" "$(fl "len(d['flows'])")" 9
	check "12 flows: <0.100.0> sent to 7 receivers, 1 message each" "$(fl "sorted(f['count'] for f in d['flows'] if f['from']=='<0.100.0>')")" "[1, 1, 1, 1, 1, 1, 1]"
	check "12 flows: n2, n3, alias, port and remote pid rows keep their text" "$(fl "sorted(f['to'] for f in d['flows'] if f['from']=='<0.100.0>' and not f['to'].startswith('<0.1'))")" "['#Port<0.7>', '#Ref<0.9.9.9>', '<9999.1.0>', 'n2', 'n3']"
	check "12 flows: a send to registered n1 goes to its holder <0.102.0>" "$(fl "[f['to'] for f in d['flows'] if f['from']=='<0.101.0>']")" "['<0.102.0>']"
	check "12 flows: the gen_server reply to an alias goes to the caller" "$(fl "[(f['to'], f.get('via')) for f in d['flows'] if f['from']=='<0.102.0>']")" "[('<0.101.0>', '#Ref<0.5.6.7>')]"
	run export -F perfetto -o "$I7/flows.perfetto" "$I7/flows"
	check "15 perfetto: arrows for sends to a pid, a name and an alias (4)" "$(json_get "$I7/flows.perfetto" "sum(1 for e in d['traceEvents'] if e['ph']=='s')")" 4
	# 14: a process that exits while scheduled in
	run stats --json "$I7/exitsched"; cp "$WORK/out" "$I7/es.json"
	check "14 stats: the run of a process that exits ends at its exit (165 ms)" "$(json_get "$I7/es.json" "[p['sched_ns'] for p in d['processes'] if p['pid']=='<0.100.0>'][0]")" 165000000
	run export -F perfetto -o "$I7/es.perfetto" "$I7/exitsched"
	check "14 perfetto: the same run is 165 ms, not until the trace ends" "$(json_get "$I7/es.perfetto" "[e['dur'] for e in d['traceEvents'] if e['ph']=='X' and e['cat']=='sched' and e['tid']==1]")" "[165000.0]"
	check "14 stats: open call ends at the exit (164 ms)" "$(json_get "$I7/es.json" "[f['total_ns'] for f in d['functions'] if f['function']=='w:run/0'][0]")" 164000000
	# 15: one rule for calls open at the end; stacks reset after losses
	run stats --json "$I7/drops"; cp "$WORK/out" "$I7/dr.json"
	dr() { json_get "$I7/dr.json" "$1"; }
	check "15 stats: m:open/0 open at the end, its time counted to the end (35us)" "$(dr "[(f['open'], f['total_ns']) for f in d['functions'] if f['function']=='m:open/0'][0]")" "(1, 35500)"
	check "15 stats: the stack of <0.100.0> reset after the loss" "$(dr "d['stack_resets']")" 1
	run export -F folded -o "$I7/dr.folded" "$I7/drops"
	check "15 folded weights sum = stats total own" "$(awk '{s += $NF} END {print s}' "$I7/dr.folded")" "$(dr "d['total_own_ns']")"
	run export -F callgrind -o "$I7/dr.cg" "$I7/drops"
	check "15 callgrind total = stats total own" "$(sed -n 's/^totals: //p' "$I7/dr.cg")" "$(dr "d['total_own_ns']")"
	run export -F perfetto -o "$I7/dr.perfetto" "$I7/drops"
	check "15 perfetto: 2 frames ended by the loss, marked" "$(json_get "$I7/dr.perfetto" "sum(1 for e in d['traceEvents'] if e['ph']=='E' and e.get('args',{}).get('events_lost'))")" 2
	check "15 perfetto: 1 frame open at the end, marked" "$(json_get "$I7/dr.perfetto" "sum(1 for e in d['traceEvents'] if e['ph']=='E' and e.get('args',{}).get('open_at_end'))")" 1
	check "15 perfetto: the call after the loss is not nested in phantom frames" "$(json_get "$I7/dr.perfetto" "max(sum(1 if x['ph']=='B' else -1 for x in d['traceEvents'] if x['ph'] in 'BE' and x['tid']==1 and x['ts']<e['ts'] or (x is e)) for e in d['traceEvents'] if e['ph']=='B' and e['name']=='m:after/0')")" 1
	run export -F speedscope -o "$I7/dr.ss" "$I7/drops"
	check "15 speedscope: open calls closed at the trace end, like perfetto" "$(json_get "$I7/dr.ss" "[p['endValue'] for p in d['profiles'] if 'open' in str(p['name']) or p['name'].startswith('<0.101.0>')]")" "[40500]"
	# 16: never-called functions are not listed
	check "16 stats: only functions with calls ('?' and m:ghost/0 left out)" "$(dr "sorted(f['function'] for f in d['functions'])")" "['m:after/0', 'm:inner/0', 'm:leaf/0', 'm:open/0', 'm:outer/0']"
	# 17: folded output linear in recursion depth
	run export -F folded -o "$I7/deep.folded" "$I7/deep"
	sz=$(wc -c <"$I7/deep.folded")
	if [ "$sz" -lt 1000000 ]; then ok "17 folded: 1000-deep recursion gives $sz bytes (< 1 MB; was 13 MB)"; else not_ok "17 folded size $sz"; fi
	check "17 folded: direct recursion is one frame, marked [rec]" "$(grep -c '^<0.100.0>;m:loop/1\[rec\];m:work/0 ' "$I7/deep.folded")" 1
	check "17 folded: mutual recursion cut at 256 frames + [deeper]" "$(awk -F';' '{ if (NF > m) m = NF } END {print m}' "$I7/deep.folded")" 258
	run stats --json "$I7/deep"; cp "$WORK/out" "$I7/deep.json"
	check "17 folded weights sum = stats total own" "$(awk '{s += $NF} END {print s}' "$I7/deep.folded")" "$(json_get "$I7/deep.json" "d['total_own_ns']")"
else
	skip "issue 7 JSON checks: python3 not found"
fi
# 13: names follow register/unregister in time, one form, escaped
run print "$I7/names"; cp "$WORK/out" "$I7/names.print"
check "13 print: labelled srv before unregister" "$(grep -c '<0.100.0> srv call foo:a' "$I7/names.print")" 1
check "13 print: no name after unregister" "$(grep 'call foo:b' "$I7/names.print" | grep -c srv)" 0
check "13 print: the next holder has no name before it registers" "$(grep 'call foo:c' "$I7/names.print" | grep -c srv)" 0
check "13 print: ... and has it after" "$(grep -c '<0.101.0> srv call foo:d' "$I7/names.print")" 1
check "13 print: one form for a name written raw and quoted" "$(grep -c "<0.102.0> 'my name' " "$I7/names.print")" 3
check "13 print: a newline in a name never splits a line" "$(wc -l <"$I7/names.print") $(grep -c "<0.103.0> 'a\\\\nb' " "$I7/names.print") $(grep -c "<0.105.0> 'c\\\\nd' " "$I7/names.print")" "23 3 2"
check "13 print: a name written in both forms at start and end shows one form" "$(grep -c "<0.104.0> 'x y' " "$I7/names.print")" 2
check "13 print: a name the tracer writes plainly (maybe, OTP 25) stays plain" "$(grep -c '<0.106.0> maybe ' "$I7/names.print") $(grep -c "'maybe'" "$I7/names.print")" "3 0"
run print --proc 'my name' "$I7/names"; check "13 --proc matches the raw form" "$(wc -l <"$WORK/out")" 3
run print --proc "'my name'" "$I7/names"; check "13 --proc matches the Erlang form" "$(wc -l <"$WORK/out")" 3
run print --proc srv "$I7/names"; check "13 --proc srv: the lines of each holder while it held it" "$(wc -l <"$WORK/out")" 5
# issue 8: a `tampered' event (another tool changed the session's tracing)
"$GEN" tampered "$I7/tampered"
run print "$I7/tampered"; cp "$WORK/out" "$I7/ta.print"
check "8 print: the pattern line" "$(grep -c '^12:00:00.000003 - tampered pattern m:f/1 removed: the trace pattern is gone$' "$I7/ta.print")" 1
check "8 print: the process line, on its process" "$(grep -c '^12:00:00.000004 <0.100.0> tampered procs <0.100.0> replaced: now traced by <0.90.0> with flags \[call\]$' "$I7/ta.print")" 1
run print --event tampered "$I7/tampered"; check "8 print --event tampered: just those" "$(wc -l <"$WORK/out")" 2
run print --event calls "$I7/tampered"; check "8 print --event calls: none of those" "$(grep -c tampered "$WORK/out")" 0
run stats "$I7/tampered"
check "8 stats: says the tracing was changed, how often" "$(grep -c '^Changed by another tool (patterns or flags removed or replaced): 2 ' "$WORK/out")" 1
run stats --json "$I7/tampered"; check "8 stats --json: tampered 2" "$(grep -o '"tampered":[0-9]*' "$WORK/out")" '"tampered":2'
run info "$I7/tampered"; check "8 info: counted as an event kind" "$(grep -cE '^  tampered +2$' "$WORK/out")" 1
if have python3; then
	run export -F perfetto -o "$I7/ta.perfetto" "$I7/tampered"
	check "8 perfetto: two global instants" "$(json_get "$I7/ta.perfetto" "sorted(e['name'] for e in d['traceEvents'] if e['ph']=='i' and e.get('s')=='g')")" "['tampered: pattern m:f/1 removed', 'tampered: procs <0.100.0> replaced']"
fi
if have babeltrace2; then
	check "8 babeltrace2 reads both (the oracle)" "$(babeltrace2 "$I7/tampered" 2>&1 | grep -c 'tampered: .*what = ')" 2
fi
# issue 9: system monitor reports and counter samples
"$GEN" monitor "$I7/monitor"
run print "$I7/monitor"; cp "$WORK/out" "$I7/mon.print"
check "9 print: a long_gc report on its process" "$(grep -cE '^12:00:00.000002 <0.100.0> +monitor long_gc <0.100.0> 42 ms: \[\{timeout,42\},\{heap_size,100\}\]$' "$I7/mon.print")" 1
check "9 print: a busy_port report names the port" "$(grep -cE '^12:00:00.000003 <0.100.0> +monitor busy_port <0.100.0> on #Port<0.7>$' "$I7/mon.print")" 1
check "9 print: samples, scaled" "$(grep -cE -e '- sample run_queue 3$' -e '- sample scheduler_utilization 0.250000$' -e '<0.100.0> +sample message_queue_len <0.100.0> 7$' "$I7/mon.print")" 3
run print --event monitor "$I7/monitor"; check "9 print --event monitor: just those" "$(wc -l <"$WORK/out")" 2
run stats "$I7/monitor"
check "9 stats: the reports and the samples" "$(grep -c -e '^System monitor reports .*: 2 ' -e '^Counter samples: 4$' "$WORK/out")" 2
run stats --json "$I7/monitor"; check "9 stats --json: monitor 2, samples 4" "$(grep -o -e '"monitor":[0-9]*' -e '"samples":[0-9]*' "$WORK/out" | tr '\n' ' ')" '"monitor":2 "samples":4 '
if have python3; then
	run export -F perfetto -o "$I7/mon.perfetto" "$I7/monitor"
	check "9 perfetto: counter tracks with their values" "$(json_get "$I7/mon.perfetto" "[(e['name'], e['args']['value']) for e in d['traceEvents'] if e['ph']=='C']")" "[('run_queue', 3), ('scheduler_utilization', 0.25), ('message_queue_len <0.100.0>', 7), ('run_queue', 5)]"
	check "9 perfetto: reports are instants on the process's track" "$(json_get "$I7/mon.perfetto" "[(e['name'], e['s'], e['tid']) for e in d['traceEvents'] if e.get('cat')=='monitor']")" "[('long_gc (42 ms)', 't', 1), ('busy_port', 't', 1)]"
fi
if have babeltrace2; then
	check "9 babeltrace2 reads them (the oracle)" "$(babeltrace2 "$I7/monitor" 2>&1 | grep -c -e 'monitor: .*duration_ms = 42' -e 'sample: .*scale = 1000000')" 2
fi
# +SECS counts from the first event (stats' first event), not from the
# process records the session writes at its start: '--until +0.000002'
# printed nothing where the first call is 1 ms after them.
"$GEN" late "$I7/late"
run print --until +0.000002 "$I7/late"
check "print --until +0.000002: the events of the first 2 us after the first event" "$(cut -c1-15 "$WORK/out" | tr '\n' ' ')" "12:00:00.001000 12:00:00.001001 12:00:00.001002 "
run print --since +0.000003 "$I7/late"
check "print --since +0.000003: from 3 us after the first event" "$(cut -c1-15 "$WORK/out" | tr '\n' ' ')" "12:00:00.001003 "
# 16: --until is inclusive at the printed precision
run print --until 12:00:00.000040 "$I7/drops"
check "16 print --until T includes the line printed at T" "$(grep -c '12:00:00.000040 .* received x' "$WORK/out")" 1
# 20: hostile files
cp -r $G "$I7/metaloop"; cp test/fuzz/meta-cases/loop-string-attr "$I7/metaloop/metadata"
timeout 20 "$BP" info "$I7/metaloop" >/dev/null 2>"$WORK/err"; rc=$?
check "20 damaged metadata (fuzzer case): info ends, exit 2" "$rc" 2
# A metadata file edited to say big-endian was decoded as little-endian
# without a word (babeltrace2 refuses the trace): named, exit 2.
cp -r $G "$I7/bigend"; chmod u+w "$I7/bigend/metadata"
sed -i 's/byte_order = le;/byte_order = be;/' "$I7/bigend/metadata"
run print "$I7/bigend"
check "20 metadata byte_order = be: exit 2" "$rc" 2
grep -q 'bigend/metadata: offset [0-9]*: byte_order be unsupported (le expected)' "$WORK/err" && ok "20 byte_order = be: named, with its offset" || not_ok "20 byte_order = be: named, with its offset" "$(cat "$WORK/err")"
mkdir "$I7/fifo"; mkfifo "$I7/fifo/metadata"; cp $G/thread-000 "$I7/fifo/"
timeout 20 "$BP" print "$I7/fifo" >/dev/null 2>"$WORK/err"; rc=$?
check "20 FIFO named metadata: no hang, exit 2" "$rc" 2
grep -q 'fifo/metadata: not a regular file' "$WORK/err" && ok "20 FIFO: error names the file" || not_ok "20 FIFO: error names the file" "$(cat "$WORK/err")"
mkdir "$I7/fifo2"; cp $G/metadata "$I7/fifo2/"; mkfifo "$I7/fifo2/thread-000"
timeout 20 "$BP" stats "$I7/fifo2" >/dev/null 2>"$WORK/err"; rc=$?
check "20 FIFO named thread-000: no hang, exit 2" "$rc" 2
# 20: the stream files a session listed at its stop (env stream_files):
# one gone, one listed longer than it is, hostile entries (a path out of
# the trace, garbage, a number past 64 bits): each named, the gone file's
# events lost, nothing opened outside the trace, exit 2.
mkdir "$I7/listed"; cp $G/metadata $G/thread-000 "$I7/listed/"
sz0=$(stat -c %s $G/thread-000)
sed -i -e "s|^env {\$|env {\n\tstream_files = \"../../../etc/passwd:1:1:1,thread-000:$((sz0 + 8)):3:0,thread-001:77:41:2,thread-9x:1:1:1,thread-002:99999999999999999999:1:1,,:\";|" "$I7/listed/metadata"
grep -q 'stream_files = ' "$I7/listed/metadata" || not_ok "20 stream_files planted in the metadata"
run info "$I7/listed"
check "20 stream_files: a listed file gone: exit 2" "$rc" 2
grep -q 'listed/thread-001: missing: the session wrote 41 events' "$WORK/err" && ok "20 stream_files: the gone file named" || not_ok "20 stream_files: the gone file named" "$(cat "$WORK/err")"
grep -q 'missing from the files  *41' "$WORK/out" && ok "20 stream_files: its events counted as lost" || not_ok "20 stream_files: its events counted as lost" "$(cat "$WORK/out")"
grep -q "thread-000: offset $sz0: cut: $sz0 of the $((sz0 + 8)) bytes" "$WORK/err" && ok "20 stream_files: a file shorter than listed named" || not_ok "20 stream_files: a file shorter than listed named" "$(cat "$WORK/err")"
check "20 stream_files: hostile entries named, not followed" "$(grep -c "malformed entry" "$WORK/err")" 5
# 20: the session's losses recorded at stop (env session_lost): a trace
# of a 1-byte limit holds only its metadata, and info, stats and print
# said "lost events: 0" where the session lost 40,000 as limit.  Losses
# the streams also tell of are not counted twice; those in no stream are
# named; an unknown cause is counted; a malformed record is named.
mkdir "$I7/slost"; cp $G/metadata "$I7/slost/"
sed -i -e 's|^env {$|env {\n\tstream_files = "";\n\tsession_lost = "ring_full=0,overwritten=0,too_big=0,limit=40000,rate=0,stopped=0,no_buffer=0,dumping=0,io_error=0";|' "$I7/slost/metadata"
run info "$I7/slost"
check "20 session_lost, no stream file: info exit 0" "$rc" 0
check "20 session_lost, no stream file: info's total, limit, in no stream" \
	"$(grep -E '^lost events:|^  limit |in no stream file' "$WORK/out" | tr -s ' ' | tr '\n' '|')" \
	"lost events: 40000| limit 40000| (in no stream file) 40000|"
run stats --json "$I7/slost"; cp "$WORK/out" "$I7/slost.json"
check "20 session_lost, no stream file: stats --json lost" \
	"$(json_get "$I7/slost.json" "(d['lost']['total'], d['lost']['by_cause']['limit'], d['lost']['in_no_stream'])")" "(40000, 40000, 40000)"
run stats "$I7/slost"
check "20 session_lost, no stream file: stats" "$(grep '^Lost events' "$WORK/out")" "Lost events: 40000  limit=40000  (in_no_stream_file=40000)"
run print "$I7/slost"
check "20 session_lost, no stream file: print names them" "$rc $(cat "$WORK/out")" \
	"0 lost events in no stream file: 40000 (recorded at the session's stop; its losses: limit=40000)"
run print --event calls "$I7/slost"
check "20 session_lost: print --event calls leaves the line out" "$rc $(wc -c <"$WORK/out")" "0 0"
# With the basic trace's streams (ring_full=2 overwritten=1 too_big=1 in
# its drops events): the same counts recorded are not added again; 5
# more of limit and 3 of a cause this reader does not know are.
for v in same:ring_full=2,overwritten=1,too_big=1 more:ring_full=2,overwritten=1,too_big=1,limit=5,future_cause=3; do
	cp -r $G "$I7/slost_${v%%:*}"; chmod u+w "$I7/slost_${v%%:*}/metadata"
	sed -i -e "s|^env {\$|env {\n\tsession_lost = \"${v#*:}\";|" "$I7/slost_${v%%:*}/metadata"
done
run info "$I7/slost_same"
check "20 session_lost as the streams tell: info as without it" "$(sed -n '/^lost events/,/^files/p' "$WORK/out")" "$(sed -n '/^lost events/,/^files/p' "$EXP/basic.info")"
run print "$I7/slost_same"
check "20 session_lost as the streams tell: print as without it" "$rc $(cat "$WORK/out" | md5sum)" "0 $(md5sum <"$EXP/basic.print")"
run info "$I7/slost_more"
check "20 session_lost beyond the streams: info" \
	"$(grep -E '^lost events:|^  (limit|other causes|\(in no stream file\)) ' "$WORK/out" | tr -s ' ' | tr '\n' '|')" \
	"lost events: 12| limit 5| other causes 3| (in no stream file) 8|"
# A follow session's request budget and a TCP stream sink's losses
# (causes no drops event has): the budget's counted and named; the
# stream's named apart, not in the total (the files hold those events).
cp -r $G "$I7/slost_req"; chmod u+w "$I7/slost_req/metadata"
sed -i -e 's|^env {$|env {\n\tsession_lost = "ring_full=2,overwritten=1,too_big=1,request_events=7,request_ms=0,request_table=0,stream=50";|' "$I7/slost_req/metadata"
run info "$I7/slost_req"
check "20 session_lost request budget and stream: info" \
	"$(grep -E '^lost events:|^  (request_events|other causes|\(in no stream file\)|\(tcp stream only\)) ' "$WORK/out" | tr -s ' ' | tr '\n' '|')" \
	"lost events: 11| request_events 7| (in no stream file) 7| (tcp stream only) 50|"
run stats "$I7/slost_req"
check "20 session_lost request budget and stream: stats" "$(grep '^Lost events' "$WORK/out")" "Lost events: 11  ring_full=2  overwritten=1  too_big=1  request_events=7  (in_no_stream_file=7)  (tcp_stream_only=50)"
run stats --json "$I7/slost_req"; cp "$WORK/out" "$I7/slost_req.json"
check "20 session_lost request budget and stream: stats --json" \
	"$(json_get "$I7/slost_req.json" "(d['lost']['total'], d['lost']['by_cause']['request_events'], d['lost']['tcp_stream_only'], d['lost']['other_causes'])")" "(11, 7, 50, 0)"
cp -r $G "$I7/slost_bad"; chmod u+w "$I7/slost_bad/metadata"
sed -i -e 's|^env {$|env {\n\tsession_lost = "limit=5,,ring_full";|' "$I7/slost_bad/metadata"
run info "$I7/slost_bad"
check "20 session_lost malformed: exit 2, the trace's own losses" "$rc $(grep '^lost events' "$WORK/out")" "2 lost events:  4"
grep -q 'slost_bad/metadata: env session_lost: malformed' "$WORK/err" && ok "20 session_lost malformed: named" || not_ok "20 session_lost malformed: named" "$(cat "$WORK/err")"
# A stream file holding its packets twice (appended to itself, e.g. a
# copy gone wrong): packet_seq_num goes back.  Their events were decoded
# and counted twice, and the report said "packets missing".
cp -r $G "$I7/twice"; chmod u+w "$I7/twice"/*; cat $G/thread-000 >>"$I7/twice/thread-000"
run stats --json "$I7/twice"; cp "$WORK/out" "$I7/twice.json"
run stats --json $G; cp "$WORK/out" "$I7/once.json"
check "20 stream file appended to itself: its events counted once (events, calls)" \
	"$(json_get "$I7/twice.json" "(d['events'], d['total_calls'])")" "$(json_get "$I7/once.json" "(d['events'], d['total_calls'])")"
run print "$I7/twice"
check "20 stream file appended to itself: print as the trace, exit 2" "$rc $(wc -l <"$WORK/out")" "2 $(wc -l <"$EXP/basic.print")"
grep -q 'twice/thread-000: offset [0-9]*: packet_seq_num 0 after [0-9]*: a packet repeated or out of order; its events skipped' "$WORK/err" && ! grep -q 'packets missing' "$WORK/err" && ok "20 stream file appended to itself: repeated packets named as such" || not_ok "20 stream file appended to itself: repeated packets named as such" "$(cat "$WORK/err")"
mkdir "$I7/notrace"; cp $G/thread-000 "$I7/notrace/notes.txt"; echo hello >"$I7/notrace/README"
run print "$I7/notrace"
check "20 print on a directory that is not a trace: exit 2, nothing decoded" "$rc $(wc -c <"$WORK/out")" "2 0"
grep -q 'notrace: not a beamprobe trace' "$WORK/err" && ok "20 not a trace: error names the directory" || not_ok "20 not a trace: error names the directory" "$(cat "$WORK/err")"
cp -r $G "$I7/extra"; cp $G/thread-000 "$I7/extra/copy.bak"
run print "$I7/extra"
check "20 only thread-* files are streams (copy.bak ignored)" "$rc $(wc -l <"$WORK/out")" "0 $(wc -l <"$EXP/basic.print")"
if [ -x /usr/bin/time ]; then
	"$GEN" many "$I7/many1" 20000; "$GEN" many "$I7/many2" 200000
	m1=$(/usr/bin/time -f %M bin/beamprobe stats "$I7/many1" 2>&1 >/dev/null | tail -1)
	m2=$(/usr/bin/time -f %M bin/beamprobe stats "$I7/many2" 2>&1 >/dev/null | tail -1)
	per=$(( (m2 - m1) * 1024 / 180000 ))
	if [ "$per" -lt 450 ]; then ok "20 stats memory: $per bytes per process (max RSS ${m1} -> ${m2} KB for 20k -> 200k processes; was ~700)"
	else not_ok "20 stats memory per process: $per bytes (max RSS $m1 -> $m2 KB)"; fi
	rm -rf "$I7/many1" "$I7/many2"
else
	skip "20 stats memory: /usr/bin/time not found"
fi
