#!/bin/bash
# shm-membw.sh [RUNS]: how `ferry ping --size 1M` over shm follows this
# machine's memory bandwidth. Starts one `ferry serve` on shm, then RUNS
# times (default 10) measures one thread's memory read and streamed write
# bandwidth (BenchmarkMemory in bench/transports, 200 ms each) and runs
# COUNT (default 5000) 1 MiB pings after a 300 ms warm-up, printing both
# on one line. Session 15 saw reads at 20.6-33.0 GB/s from one minute to
# the next and shm's rate loosely following them.
set -eu
runs=${1:-10}
count=${COUNT:-5000}
dir=$(mktemp -d)
srv=
cleanup() {
	[ -n "$srv" ] && kill "$srv" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
go build -o "$dir/ferry" ./cmd/ferry
go test -c -o "$dir/transports.test" ./bench/transports
"$dir/ferry" serve --listen "shm://$dir/s.sock" >"$dir/serve.out" 2>&1 &
srv=$!
for _ in $(seq 100); do grep -q listening "$dir/serve.out" 2>/dev/null && break; sleep 0.1; done
for _ in $(seq "$runs"); do
	bw=$(cd bench/transports && "$dir/transports.test" -test.run '^$' -test.bench 'Memory' -test.benchtime 200ms |
		awk '/op=stream-write/ {w=$(NF-1)} /op=crc-read/ {r=$(NF-1)} END {printf "write %.1f GB/s, read %.1f GB/s", w/1000, r/1000}')
	"$dir/ferry" ping --size 1M --count "$count" --warmup 300ms --json "shm://$dir/s.sock" >"$dir/ping.json"
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%s | shm 1 MiB: %.0f round trips/s, p50 %.1f us" % (sys.argv[2], d["msgs_per_s"], d["rtt_us_p50"]))' "$dir/ping.json" "$bw"
done
