#!/bin/bash
# ping-shm-tcp.sh [ROUNDS [CC]]: issue 17's CLI comparison. Starts one
# `ferry serve` on tcp and one on shm, then runs `ferry ping` against
# each in turn, ROUNDS times (default 5), with SIZE (default 1M) and
# COUNT (default 3000) pings; CC (default: the system's) is the TCP
# congestion control of both processes' sockets (--tcp-congestion).
# Prints each run's rate and p50, then the medians and shm's ratio to
# tcp. WARMUP (default 300ms; 0 for none) is each ping's --warmup: on
# this VM the first 100-150 ms of every run are 2-6x slower, tcp and shm
# alike, which a short run would measure instead of the transport.
#
# FERRY=path runs that binary instead of building cmd/ferry; FERRY="A B"
# (several paths) compares builds: each gets its own servers, and every
# round runs each build in turn, so the builds share the machine's
# drift. PIN=same runs every server and ping on CPU 0, PIN=split the
# servers on CPU 1 and the pings on CPU 0 (taskset), to separate what
# placement costs from what the code does.
set -eu
rounds=${1:-5}
cc=${2:-}
size=${SIZE:-1M}
count=${COUNT:-3000}
warmup=${WARMUP:-300ms}
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
read -r -a builds <<<"${FERRY:-}"
if [ ${#builds[@]} -eq 0 ]; then
	go build -o "$dir/ferry" ./cmd/ferry
	builds=("$dir/ferry")
fi
srvpin=() clipin=()
case "${PIN:-}" in
"") ;;
same) srvpin=(taskset -c 0) clipin=(taskset -c 0) ;;
split) srvpin=(taskset -c 1) clipin=(taskset -c 0) ;;
*) echo "PIN must be same or split" >&2; exit 2 ;;
esac
ccflag=()
[ -n "$cc" ] && ccflag=(--tcp-congestion "$cc")
tcp=()
for i in "${!builds[@]}"; do
	b=${builds[$i]}
	"${srvpin[@]}" "$b" serve --listen tcp://127.0.0.1:0 "${ccflag[@]}" >"$dir/tcp$i.out" 2>"$dir/tcp$i.err" &
	pids+=($!)
	"${srvpin[@]}" "$b" serve --listen "shm://$dir/shm$i.sock" >"$dir/shm$i.out" 2>"$dir/shm$i.err" &
	pids+=($!)
	for _ in $(seq 100); do
		grep -q listening "$dir/tcp$i.out" 2>/dev/null && grep -q listening "$dir/shm$i.out" 2>/dev/null && break
		sleep 0.1
	done
	tcp+=("$(grep -o 'v2:[0-9.:]*/[0-9]*' "$dir/tcp$i.out" | head -1)")
done
for _ in $(seq "$rounds"); do
	for i in "${!builds[@]}"; do
		for addr in "${tcp[$i]}" "shm://$dir/shm$i.sock"; do
			label=$i
			[ ${#builds[@]} -eq 1 ] && label=-
			# The JSON goes to a file and is read once the ping is done:
			# python3 takes 0.4 s of CPU to start on this VM, and a
			# reader started beside the ping competed with it for the
			# two vCPUs (shm 1 MiB: 4700-6400 against 7100-8600 round
			# trips/s with the output in a file).
			"${clipin[@]}" "${builds[$i]}" ping "$addr" --size "$size" --count "$count" --warmup "$warmup" --json "${ccflag[@]}" >"$dir/ping.json" || true
			python3 -c 'import json,sys; d=json.load(sys.stdin); a=sys.argv[1]; print(("shm" if a.startswith("shm") else "tcp") + ("" if sys.argv[2] == "-" else "@" + sys.argv[2]), d["msgs_per_s"], d["rtt_us_p50"], d["errors"] + d["mismatches"])' "$addr" "$label" <"$dir/ping.json"
		done
	done
done | tee "$dir/runs.txt"
python3 - "$dir/runs.txt" "${builds[@]}" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    t, rate, p50, bad = line.split()
    if int(bad):
        sys.exit("a run had errors or mismatches")
    runs.setdefault(t, []).append((float(rate), float(p50)))
builds = sys.argv[2:]
for i, b in enumerate(builds):
    sfx = "" if len(builds) == 1 else "@%d" % i
    med = {t: (statistics.median(r for r, _ in runs[t + sfx]), statistics.median(p for _, p in runs[t + sfx])) for t in ("tcp", "shm")}
    name = "" if len(builds) == 1 else b + ": "
    print("%smedian rate/s: tcp %.0f shm %.0f (shm %.2fx); median p50 us: tcp %.1f shm %.1f (shm %.2fx)" % (name,
        med["tcp"][0], med["shm"][0], med["shm"][0] / med["tcp"][0], med["tcp"][1], med["shm"][1], med["shm"][1] / med["tcp"][1]))
PY
