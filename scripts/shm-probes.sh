#!/bin/bash
# shm-probes.sh membw|colocation [RUNS [SCHEME]]: what bounds and what
# perturbs `ferry ping --size 1M` over shm (issue 17's shm against tcp).
# Each mode builds cmd/ferry, starts one `ferry serve` and runs RUNS
# (default 10 / 6) rounds of COUNT (default 5000) 1 MiB pings after a
# 300 ms warm-up.
#
# membw: before each round, one thread's memory read and streamed write
# bandwidth (BenchmarkMemory in bench/transports, 200 ms each), printed
# beside the round's rate. Session 15 saw reads at 20.6-33.0 GB/s from one
# minute to the next and shm's rate loosely following them.
#
# colocation: each round under `perf sched record`, printing its rate and
# p50 beside the share of the client's run time spent in 2 ms windows in
# which the server ran on the same vCPU. SCHEME is shm (the default) or
# tcp (under cubic). Needs perf (linux-perf) and root. Session 15: 5-16%
# over shm, the two processes alternating every 70-80 us on one vCPU
# while the other idled.
set -eu
mode=${1:-}
count=${COUNT:-5000}
dir=$(mktemp -d)
srv=
cleanup() {
	[ -n "$srv" ] && kill "$srv" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
# serve ARGS...: starts `ferry serve ARGS` and waits for its listening line.
serve() {
	"$dir/ferry" serve "$@" >"$dir/serve.out" 2>&1 &
	srv=$!
	for _ in $(seq 100); do grep -q listening "$dir/serve.out" 2>/dev/null && break; sleep 0.1; done
}
case "$mode" in
membw | colocation) go build -o "$dir/ferry" ./cmd/ferry ;;
esac
case "$mode" in
membw)
	runs=${2:-10}
	go test -c -o "$dir/transports.test" ./bench/transports
	serve --listen "shm://$dir/s.sock"
	for _ in $(seq "$runs"); do
		bw=$(cd bench/transports && "$dir/transports.test" -test.run '^$' -test.bench 'Memory' -test.benchtime 200ms |
			awk '/op=stream-write/ {w=$(NF-1)} /op=crc-read/ {r=$(NF-1)} END {printf "write %.1f GB/s, read %.1f GB/s", w/1000, r/1000}')
		"$dir/ferry" ping --size 1M --count "$count" --warmup 300ms --json "shm://$dir/s.sock" >"$dir/ping.json"
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%s | shm 1 MiB: %.0f round trips/s, p50 %.1f us" % (sys.argv[2], d["msgs_per_s"], d["rtt_us_p50"]))' "$dir/ping.json" "$bw"
	done
	;;
colocation)
	runs=${2:-6}
	scheme=${3:-shm}
	case "$scheme" in
	shm) listen="shm://$dir/s.sock" cc=() ;;
	tcp) listen="tcp://127.0.0.1:0" cc=(--tcp-congestion cubic) ;;
	*) echo "SCHEME must be shm or tcp" >&2; exit 2 ;;
	esac
	serve --listen "$listen" "${cc[@]}"
	addr=$listen
	[ "$scheme" = tcp ] && addr=$(grep -o 'v2:[0-9.:]*/[0-9]*' "$dir/serve.out" | head -1)
	for _ in $(seq "$runs"); do
		perf sched record -o "$dir/sched.data" -- "$dir/ferry" ping "${cc[@]}" --size 1M --count "$count" --warmup 300ms --json "$addr" >"$dir/ping.json" 2>"$dir/perf.err"
		perf sched timehist -i "$dir/sched.data" 2>/dev/null >"$dir/timehist"
		python3 - "$dir/ping.json" "$dir/timehist" "$srv" <<'PY'
import collections, json, re, sys
d = json.load(open(sys.argv[1]))
srv, win = sys.argv[3], 0.002
run = collections.defaultdict(float)  # (window, cpu, who) -> seconds run
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) < 6:
        continue
    m = re.match(r"ferry[^\[]*\[(?:\d+/)?(\d+)\]", f[2])
    if not m:
        continue
    try:
        end, length = float(f[0]), float(f[5]) / 1000
    except ValueError:
        continue
    who = "srv" if m.group(1) == srv else "cli"
    t = end - length
    while t < end:
        w = int(t / win)
        e = min(end, (w + 1) * win)
        run[(w, f[1], who)] += e - t
        t = e
cli = sum(v for k, v in run.items() if k[2] == "cli")
both = sum(min(v, run.get((w, c, "srv"), 0)) for (w, c, who), v in run.items() if who == "cli")
print("%.0f round trips/s, p50 %.1f us; client ran %.0f ms, %.0f ms of it (%.0f%%) beside the server on its vCPU"
      % (d["msgs_per_s"], d["rtt_us_p50"], cli * 1e3, both * 1e3, 100 * both / cli if cli else 0))
PY
	done
	;;
*)
	echo "usage: $0 membw|colocation [RUNS [SCHEME]]" >&2
	exit 2
	;;
esac
