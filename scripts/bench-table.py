#!/usr/bin/env python3
"""Summarize scripts/bench-table.sh's output as BENCHMARKS.md's table rows.

usage: bench-table.py OUT

For each workload and congestion control: the floor's, the peers' and
ferry's figures over the rounds (min-max), ferry's ratio to the floor of
the same round (min-max and median), and in how many rounds issue 15's
target for it was met. Ratios are only ever taken within one round.
"""

import re
import statistics
import sys

BENCH = re.compile(r"^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$")


def parse(path):
    rounds = []  # [(cc, {name: {unit: value}}, extra lines)]
    idle = {}
    cur = None
    for line in open(path):
        line = line.rstrip("\n")
        m = re.match(r"^## round (\d+) (\S+)", line)
        if m:
            cur = (m.group(2), {}, [])
            rounds.append(cur)
            continue
        if line.startswith("## idle"):
            cur = ("idle", idle, [])
            continue
        m = BENCH.match(line)
        if m and cur is not None:
            f = m.group(3).split()
            cur[1][m.group(1)] = {f[i + 1]: float(f[i]) for i in range(0, len(f) - 1, 2)}
            continue
        if line.startswith("CLI ") and cur is not None:
            f = line.split()
            cur[1][f[1]] = {f[i + 1]: float(f[i]) for i in range(2, len(f) - 1, 2)}
            continue
        m = re.search(r"tcp ([\d.]+) shm ([\d.]+) \(shm ([\d.]+)x\); median p50 us: tcp ([\d.]+) shm ([\d.]+)", line)
        if m and cur is not None:
            cur[1]["ping1M"] = {"tcp/s": float(m.group(1)), "shm/s": float(m.group(2)), "ratio": float(m.group(3))}
    return rounds, idle


def rng(xs, fmt="%.1f"):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return (fmt % lo) if lo == hi else (fmt % lo) + "-" + (fmt % hi)


def get(r, name, unit):
    return r.get(name, {}).get(unit)


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


class Row:
    def __init__(self, title):
        self.title = title
        self.cols = {}  # cc -> {label: [values]}
        self.targets = {}  # cc -> [met bools]

    def add(self, cc, label, v):
        self.cols.setdefault(cc, {}).setdefault(label, []).append(v)

    def target(self, cc, ok):
        if ok is not None:
            self.targets.setdefault(cc, []).append(ok)

    def show(self):
        print("### " + self.title)
        for cc in sorted(self.cols):
            parts = []
            for label, vs in self.cols[cc].items():
                fmt = "%.2f" if label.endswith("×") else "%.1f"
                s = "%s %s" % (label, rng(vs, fmt))
                if label.endswith("×") and len([v for v in vs if v is not None]) > 2:
                    s += " (median %.2f)" % statistics.median(v for v in vs if v is not None)
                parts.append(s)
            t = self.targets.get(cc)
            met = "; target met in %d of %d" % (sum(t), len(t)) if t else ""
            print("- %s: %s%s" % (cc, "; ".join(parts), met))


def main():
    rounds, idle = parse(sys.argv[1])
    rows = {}

    def row(t):
        return rows.setdefault(t, Row(t))

    for cc, r, _ in rounds:
        B = "BenchmarkRoundTrip/size=64/impl="
        raw50, raw99 = get(r, B + "raw", "p50-µs"), get(r, B + "raw", "p99-µs")
        for impl, t50, t99 in (("ferry-await", 1.25, 2), ("ferry-await-busy", 1.25, 2)):
            f50, f99 = get(r, B + impl, "p50-µs"), get(r, B + impl, "p99-µs")
            x = row("msgr 64 B round trip, %s (p50 ≤ 1.25×, p99 ≤ 2× raw)" % impl)
            x.add(cc, "raw p50 µs", raw50), x.add(cc, "ferry p50 µs", f50), x.add(cc, "p50 ×", ratio(f50, raw50))
            x.add(cc, "raw p99 µs", raw99), x.add(cc, "ferry p99 µs", f99), x.add(cc, "p99 ×", ratio(f99, raw99))
            if f50 and raw50:
                x.target(cc, f50 <= t50 * raw50 and f99 <= t99 * raw99)
        a, s = get(r, B + "ferry-await", "p50-µs"), get(r, B + "ferry-await-secure", "p50-µs")
        x = row("secure 64 B p50 against crc (issue 14: ≤ 1.2×)")
        x.add(cc, "crc µs", a), x.add(cc, "secure µs", s), x.add(cc, "secure/crc ×", ratio(s, a))
        x.target(cc, None if not (a and s) else s <= 1.2 * a)

        B = "BenchmarkRoundTrip/size=1MiB/impl="
        raw, f, sec = (get(r, B + i, "msgs/s") for i in ("raw", "ferry-await", "ferry-await-secure"))
        x = row("msgr 1 MiB round trips/s (≥ 0.9× raw)")
        x.add(cc, "raw", raw), x.add(cc, "ferry", f), x.add(cc, "ferry/raw ×", ratio(f, raw))
        x.target(cc, None if not (f and raw) else f >= 0.9 * raw)
        x = row("secure 1 MiB round trips/s against crc (issue 14: ≥ 0.7×)")
        x.add(cc, "crc", f), x.add(cc, "secure", sec), x.add(cc, "secure/crc ×", ratio(sec, f))

        B = "BenchmarkNull/impl="
        raw50, raw99 = get(r, B + "raw", "p50-µs"), get(r, B + "raw", "p99-µs")
        g50 = get(r, B + "grpc", "p50-µs")
        for impl in ("ferry", "ferry-busy"):
            f50, f99 = get(r, B + impl, "p50-µs"), get(r, B + impl, "p99-µs")
            x = row("RPC null Call, %s (p50 ≤ 1.3×, p99 ≤ 2× raw)" % impl)
            x.add(cc, "raw p50 µs", raw50), x.add(cc, "gRPC p50 µs", g50), x.add(cc, "ferry p50 µs", f50), x.add(cc, "p50 ×", ratio(f50, raw50))
            x.add(cc, "raw p99 µs", raw99), x.add(cc, "ferry p99 µs", f99), x.add(cc, "p99 ×", ratio(f99, raw99))
            x.add(cc, "CPU µs/RPC client", get(r, B + impl, "cli-cpu-µs/op")), x.add(cc, "server", get(r, B + impl, "srv-cpu-µs/op"))
            if f50 and raw50:
                x.target(cc, f50 <= 1.3 * raw50 and f99 <= 2 * raw99)

        B = "BenchmarkEcho64Inflight16/impl="
        raw, g = get(r, B + "raw", "rpcs/s"), get(r, B + "grpc", "rpcs/s")
        for impl in ("ferry", "ferry-send"):
            f = get(r, B + impl, "rpcs/s")
            x = row("RPC 64 B, 16 in flight, %s (≥ 5× gRPC, ≥ raw16)" % ("Call from 16 goroutines" if impl == "ferry" else "Send + progress"))
            x.add(cc, "raw16 k/s", raw and raw / 1e3), x.add(cc, "gRPC k/s", g and g / 1e3), x.add(cc, "ferry k/s", f and f / 1e3)
            x.add(cc, "ferry/raw ×", ratio(f, raw)), x.add(cc, "ferry/gRPC ×", ratio(f, g))
            if f and raw and g:
                x.target(cc, f >= 5 * g and f >= raw)
        st = get(r, "selftest16", "rpcs/s")
        x = row("ferry selftest --inflight 16 against ferry serve (≥ 5× gRPC and ≥ raw16 of the same round)")
        x.add(cc, "k/s", st and st / 1e3), x.add(cc, "p50 µs", get(r, "selftest16", "p50-µs"))
        x.add(cc, "/raw16 ×", ratio(st, raw)), x.add(cc, "/gRPC ×", ratio(st, g))
        if st and raw and g:
            x.target(cc, st >= 5 * g and st >= raw)
        x = row("ferry ping 64 B and selftest --inflight 1 against ferry serve")
        x.add(cc, "ping p50 µs", get(r, "ping64", "p50-µs")), x.add(cc, "ping p99 µs", get(r, "ping64", "p99-µs"))
        x.add(cc, "selftest p50 µs", get(r, "selftest1", "p50-µs")), x.add(cc, "k/s", (get(r, "selftest1", "rpcs/s") or 0) / 1e3)

        for op in ("Put", "Get"):
            for size in ("1MiB", "4MiB", "16MiB"):
                B = "BenchmarkBulk%s/size=%s/impl=" % (op, size)
                raw, ch, f = (get(r, B + i, "MB/s") for i in ("raw", "raw-chunked", "ferry"))
                cpu = {i: (get(r, B + i, "cli-cpu-µs/op") or 0) + (get(r, B + i, "srv-cpu-µs/op") or 0) for i in ("raw", "ferry")}
                x = row("bulk %s %s MB/s (≥ 0.8× raw, ≥ 0.95× raw-chunked, CPU ≤ 1.3× raw's)" % (op.upper(), size))
                x.add(cc, "raw", raw), x.add(cc, "raw-chunked", ch), x.add(cc, "ferry", f)
                x.add(cc, "/raw ×", ratio(f, raw)), x.add(cc, "/chunked ×", ratio(f, ch)), x.add(cc, "CPU/raw's ×", ratio(cpu["ferry"], cpu["raw"]))
                if f and raw and ch:
                    x.target(cc, f >= 0.8 * raw and f >= 0.95 * ch and cpu["ferry"] <= 1.3 * cpu["raw"])

        for place, pre in (("unpinned", "BenchmarkRoundTrip64"), ("apart", "BenchmarkApartRoundTrip64")):
            raw, f = get(r, pre + "/impl=raw-shm", "ns/op"), get(r, pre + "/impl=ferry-shm", "ns/op")
            x = row("shm 64 B RPC round trip, %s (≤ 3× the raw ring)" % place)
            x.add(cc, "raw µs", raw and raw / 1e3), x.add(cc, "ferry µs", f and f / 1e3), x.add(cc, "ferry/raw ×", ratio(f, raw))
            if f and raw:
                x.target(cc, f <= 3 * raw)

        p = r.get("ping1M")
        if p:
            x = row("ferry ping 1 MiB, shm against tcp (issue 17: ≥ 3×; medians of 3)")
            x.add(cc, "tcp /s", p["tcp/s"]), x.add(cc, "shm /s", p["shm/s"]), x.add(cc, "shm/tcp ×", p["ratio"])
            x.target(cc, p["ratio"] >= 3)

    for x in rows.values():
        x.show()
    for name, v in idle.items():
        print("### idle connections (≤ 12 KiB each side): client %.2f KiB, server %.2f KiB at %d connections" % (
            v.get("client-KiB/conn", 0), v.get("server-KiB/conn", 0), v.get("conns", 0)))


if __name__ == "__main__":
    main()
