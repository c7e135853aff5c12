#!/usr/bin/python3
# lttng_events.py -- prints the events of a trace read by python3-bt2 (the
# babeltrace2 library), one per line, in one form for both sinks, for
# beamprobe_monitor_SUITE:lttng_capture:
#
#   NAME <TAB> TS <TAB> KEY <TAB> FIELD=VALUE <TAB> ...   (fields sorted)
#
# (lttng: the payload field `session', which session recorded the event,
# comes right after KEY as session=N.)
#
# file DIR   a beamprobe CTF trace: TS is the event's clock value, KEY
#            its common-context pid
# lttng DIR  an LTTng trace of provider beamprobe: NAME without
#            "beamprobe:", TS and KEY the payload fields ts and key
import sys

import bt2


def main():
    mode, path = sys.argv[1], sys.argv[2]
    for msg in bt2.TraceCollectionMessageIterator(path):
        if type(msg) is not bt2._EventMessageConst:
            continue
        ev = msg.event
        fields = {k: ev.payload_field[k] for k in ev.payload_field}
        if mode == "lttng":
            if not ev.name.startswith("beamprobe:"):
                continue
            name = ev.name[len("beamprobe:"):]
            ts, key = int(fields.pop("ts")), int(fields.pop("key"))
            out = [name, str(ts), str(key),
                   "session=%d" % int(fields.pop("session"))]
        else:
            name = ev.name
            ts = msg.default_clock_snapshot.value
            key = int(ev.common_context_field["pid"])
            out = [name, str(ts), str(key)]
        for k in sorted(fields):
            v = fields[k]
            text = isinstance(v, bt2._StringFieldConst)
            out.append("%s=%s" % (k, str(v) if text else int(v)))
        print("\t".join(x.replace("\t", "\\t").replace("\n", "\\n")
                        for x in out))


main()
