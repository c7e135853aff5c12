#!/usr/bin/env python3
"""test/browser/perfetto_check.py -- structural check of a Chrome
trace-event JSON file (bin/beamprobe export --format perfetto), the
format ui.perfetto.dev and chrome://tracing load.

    python3 perfetto_check.py FILE.json NAME [NAME...] [--inside OUTER INNER]

Checks: the file is valid JSON, an object with a non-empty "traceEvents"
list; every event has a string "ph"; "B"/"E" pairs balance per (pid, tid)
track and never end before they begin; "X" events have "dur" >= 0; every
NAME is the name of at least one slice (B or X); with --inside, some
INNER slice lies within an OUTER slice on the same track.  Prints one
summary line; exits 0 when all hold, 1 with the reasons otherwise.
"""
import json
import sys


def main(argv):
    args = argv[1:]
    inside = None
    if "--inside" in args:
        i = args.index("--inside")
        inside = (args[i + 1], args[i + 2])
        del args[i:i + 3]
    if not args:
        print(__doc__)
        return 2
    path, names = args[0], args[1:]
    errors = []
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: not valid JSON: {e}")
        return 1
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not events:
        print(f"{path}: no non-empty traceEvents list")
        return 1

    stacks = {}   # (pid, tid) -> [(name, ts)]
    slices = []   # (track, name, begin, end)
    counts = {}
    for n, e in enumerate(events):
        ph = e.get("ph") if isinstance(e, dict) else None
        if not isinstance(ph, str):
            errors.append(f"event {n} has no string ph")
            continue
        counts[ph] = counts.get(ph, 0) + 1
        track = (e.get("pid"), e.get("tid"))
        if ph == "B":
            stacks.setdefault(track, []).append((e.get("name"), e.get("ts")))
        elif ph == "E":
            st = stacks.get(track)
            if not st:
                errors.append(f"event {n}: E without B on track {track}")
                continue
            name, ts = st.pop()
            if not isinstance(ts, (int, float)) or not isinstance(e.get("ts"), (int, float)) \
                    or e["ts"] < ts:
                errors.append(f"event {n}: E of {name} before its B")
            else:
                slices.append((track, name, ts, e["ts"]))
        elif ph == "X":
            dur = e.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                errors.append(f"event {n}: X without a dur >= 0")
            else:
                slices.append((track, e.get("name"), e.get("ts"), e["ts"] + dur))
    for track, st in stacks.items():
        if st:
            errors.append(f"{len(st)} unclosed B on track {track} (first {st[0][0]})")

    have = {s[1] for s in slices}
    for name in names:
        if name not in have:
            errors.append(f"no slice named {name}")
    if inside:
        outer, inner = inside
        outers = {}
        for track, name, b, e in slices:
            if name == outer:
                outers.setdefault(track, []).append((b, e))
        if not any(name == inner and any(ob <= b and e <= oe for ob, oe in outers.get(track, []))
                   for track, name, b, e in slices):
            errors.append(f"no {inner} slice inside a {outer} slice")

    summary = (f"{path}: {len(events)} events ("
               + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
               + f"), {len(slices)} slices, {len(have)} names")
    if errors:
        print(summary + "; " + "; ".join(errors[:10]))
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
