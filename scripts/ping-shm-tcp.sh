#!/bin/bash
# ping-shm-tcp.sh [ROUNDS [CC]]: issue 17's CLI comparison. Starts one
# `ferry serve` on tcp and one on shm, then runs `ferry ping` against
# each in turn, ROUNDS times (default 5), with SIZE (default 1M) and
# COUNT (default 3000) pings; CC (default: the system's) is the TCP
# congestion control of both processes' sockets (--tcp-congestion).
# Prints each run's rate and p50, then the medians and shm's ratio to
# tcp. FERRY=path runs that binary instead of building cmd/ferry.
set -eu
rounds=${1:-5}
cc=${2:-}
size=${SIZE:-1M}
count=${COUNT:-3000}
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
ferry=${FERRY:-}
if [ -z "$ferry" ]; then
	ferry=$dir/ferry
	go build -o "$ferry" ./cmd/ferry
fi
ccflag=()
[ -n "$cc" ] && ccflag=(--tcp-congestion "$cc")
"$ferry" serve --listen tcp://127.0.0.1:0 "${ccflag[@]}" >"$dir/tcp.out" 2>"$dir/tcp.err" &
pids+=($!)
"$ferry" serve --listen "shm://$dir/shm.sock" >"$dir/shm.out" 2>"$dir/shm.err" &
pids+=($!)
for _ in $(seq 100); do
	grep -q listening "$dir/tcp.out" 2>/dev/null && grep -q listening "$dir/shm.out" 2>/dev/null && break
	sleep 0.1
done
tcp=$(grep -o 'v2:[0-9.:]*/[0-9]*' "$dir/tcp.out" | head -1)
for _ in $(seq "$rounds"); do
	for addr in "$tcp" "shm://$dir/shm.sock"; do
		"$ferry" ping "$addr" --size "$size" --count "$count" --json "${ccflag[@]}" |
			python3 -c 'import json,sys; d=json.load(sys.stdin); a=sys.argv[1]; print("shm" if a.startswith("shm") else "tcp", d["msgs_per_s"], d["rtt_us_p50"], d["errors"] + d["mismatches"])' "$addr"
	done
done | tee "$dir/runs.txt"
python3 - "$dir/runs.txt" <<'PY'
import statistics, sys
runs = {"tcp": [], "shm": []}
for line in open(sys.argv[1]):
    t, rate, p50, bad = line.split()
    if int(bad):
        sys.exit("a run had errors or mismatches")
    runs[t].append((float(rate), float(p50)))
med = {t: (statistics.median(r for r, _ in v), statistics.median(p for _, p in v)) for t, v in runs.items()}
print("median rate/s: tcp %.0f shm %.0f (shm %.2fx); median p50 us: tcp %.1f shm %.1f (shm %.2fx)" % (
    med["tcp"][0], med["shm"][0], med["shm"][0] / med["tcp"][0], med["tcp"][1], med["shm"][1], med["shm"][1] / med["tcp"][1]))
PY
