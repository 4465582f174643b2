#!/bin/bash
# syscall-sources.sh: per process, the write(2)s and data-returning
# read(2)s a benchmark makes per operation, and which ferry code makes
# them (innermost ferry callers). Used for BENCHMARKS.md's "16 in flight,
# session 19" (docs/bench/s19-inflight16.txt). Needs perf and root.
#
# usage: scripts/syscall-sources.sh TESTBIN BENCH N [DIR]
#   TESTBIN  a test binary (cd bench/peers && go test -c -o /tmp/peers.test .)
#   BENCH    its -test.bench pattern, one benchmark
#   N        operations (-test.benchtime Nx): the divisor
#   DIR      where to run it (default: the current directory)
# The environment passes through (FERRY_BENCH_CC, FERRY_BENCH_SERVER_CPUS);
# PRE="taskset -c 0" runs the client under a prefix. Example:
#   FERRY_BENCH_CC=cubic scripts/syscall-sources.sh /tmp/peers.test \
#     'Echo64Inflight16/impl=ferry$' 200000 bench/peers
set -eu
bin=$1 bench=$2 n=$3 dir=${4:-.}
data=$(mktemp)
trap 'rm -f "$data"' EXIT
(cd "$dir" && perf record -q -g -o "$data" -e syscalls:sys_enter_write -e syscalls:sys_exit_read -- \
	${PRE:-} "$bin" -test.run '^$' -test.bench "$bench" -test.benchtime "${n}x") 2>&1 | grep '^Benchmark' || true
perf script -i "$data" -F pid,event,ip,sym,trace 2>/dev/null | N=$n python3 -c '
import collections, os, re, sys
n = int(os.environ["N"])
skip = re.compile(r"sockCall|writeFD|writevFD|writev$|writeOut|writeInline|rawReader|carryReader|bufio|-fm")
by = collections.Counter()
cur, stack = None, []
def done():
    if cur is None or not cur[2]:
        return
    ferry = [s.split("ferry/")[-1] for s in stack if "ferry/" in s and not skip.search(s)]
    by[(cur[0], cur[1], " < ".join(ferry[:3]) or "(not ferry)")] += 1
for line in sys.stdin:
    m = re.match(r"^\s*(\d+)\s+syscalls:(\S+):(.*)", line)
    if m:
        done()
        ok = True
        if m.group(2) == "sys_exit_read":
            v = int(m.group(3).split()[-1], 16)
            ok = 0 < v < (1 << 40)  # returned data, not EAGAIN
        cur, stack = (m.group(1), m.group(2), ok), []
    elif line.strip():
        parts = line.split(None, 1)
        if len(parts) > 1:
            stack.append(parts[1].strip())
done()
for (pid, ev, key), c in sorted(by.items(), key=lambda kv: (int(kv[0][0]), kv[0][1], -kv[1])):
    if c >= n / 1000:
        what = "write" if "write" in ev else "read "
        print("pid %s %s %.3f/op  %s" % (pid, what, c / n, key))
'
