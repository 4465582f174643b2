#!/usr/bin/env python3
"""Split a Go CPU profile into exclusive categories, per operation.

usage: profile-split.py BINARY PROFILE [OPS]

Each sample goes to the first category (in the order below) that one of
its frames matches, or else to the package of the innermost ferry
function on its stack, so the rows add up to the profile's total: a
write system call counts as "write syscall" and not also under the msgr
code that made it. With OPS (the operations the profiled run made, such as
the benchmark's b.N), each row is also given in microseconds per
operation. Used for BENCHMARKS.md's accountings (16 in flight, shm
64 B); the categories name ferry's functions, so they need updating when
those are renamed.
"""

import re
import subprocess
import sys

# (category, regex on a frame's function name), first match wins; a
# sample is matched against its frames from the leaf up, category by
# category in this order.
CATEGORIES = [
    ("write syscall (incl. waking the peer)", r"msgr\.writeFD|msgr\.\(\*writeState\)\.writevFD|internal/poll\.\(\*FD\)\.Write|syscall\.write"),
    ("read syscall", r"msgr\.\(\*rawReader\)\.sysRead|internal/poll\.\(\*FD\)\.(RawRead|Read)|syscall\.read"),
    ("epoll wait and netpoll", r"runtime\.netpoll|runtime\.epollwait|msgr\.\(\*readRole\)\.waitFrame"),
    ("futex (thread sleep and wake-up)", r"runtime\.futex"),
    ("GC", r"runtime\.gcBgMarkWorker|runtime\.gcAssistAlloc|runtime\.bgsweep|runtime\.bgscavenge|runtime\.gcStart"),
    ("allocation", r"runtime\.mallocgc|runtime\.newobject|runtime\.makeslice|runtime\.growslice"),
    ("CRC32C", r"hash/crc32\."),
    ("msgr2 decode (Engine.Feed)", r"msgr2\.\(\*Engine\)\.Feed"),
    ("msgr2 encode and batch collection", r"msgr\.\(\*writeState\)\.encode|msgr\.\(\*Conn\)\.(collectLocked|nextBatchLocked)|msgr2\.\(\*MessageFrame\)"),
    ("channel and goroutine wake-up", r"runtime\.(chansend|chanrecv|selectgo|goready|ready|wakep)"),
    ("scheduler (park, yield, find work)", r"runtime\.(schedule|park_m|mcall|gosched|goschedImpl|findRunnable|gopark)"),
]

# What no category above took goes by the innermost ferry function on
# its stack: its own code, and what it calls in the runtime and the
# standard library (maps, pools, locks, clock readings).
PACKAGES = [
    ("rpc layer", "ferry/rpc"),
    ("msgr, other (reader loop, stamps, budgets, delivery)", "ferry/msgr"),
    ("benchmark harness", "ferry/bench/"),
]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, profile = sys.argv[1], sys.argv[2]
    ops = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    res = subprocess.run(["go", "tool", "pprof", "-traces", binary, profile],
                         capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("go tool pprof: " + res.stderr.strip())
    out = res.stdout
    pats = [(name, re.compile(rx)) for name, rx in CATEGORIES]
    totals = {name: 0.0 for name, _ in CATEGORIES + PACKAGES}
    totals["other"] = 0.0
    total = 0.0
    for block in out.split("-----------+-------------------------------------------------------")[1:]:
        lines = [l for l in block.strip("\n").split("\n") if l.strip()]
        if not lines:
            continue
        m = re.match(r"\s*([\d.]+)(ms|s|us|µs)\s+(.*)", lines[0])
        if not m:
            continue
        v = float(m.group(1)) * {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}[m.group(2)]
        frames = [m.group(3).strip()] + [l.strip() for l in lines[1:]]
        total += v
        cat = "other"
        for name, rx in pats:
            if any(rx.search(f) for f in frames):
                cat = name
                break
        else:
            own = next((f for f in frames if "ferry/" in f), "")
            for name, pkg in PACKAGES:
                if pkg in own:
                    cat = name
                    break
        totals[cat] += v
    print("%-55s %8s %6s %s" % ("category", "seconds", "share", "µs/op" if ops else ""))
    for name, v in sorted(totals.items(), key=lambda kv: -kv[1]):
        if v == 0:
            continue
        per = "%.2f" % (v / ops * 1e6) if ops else ""
        print("%-55s %8.2f %5.1f%% %s" % (name, v, 100 * v / total, per))
    per = "%.2f" % (total / ops * 1e6) if ops else ""
    print("%-55s %8.2f %5.1f%% %s" % ("total", total, 100.0, per))


if __name__ == "__main__":
    main()
