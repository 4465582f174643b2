#!/bin/bash
# bench-table.sh [ROUNDS [OUT]]: runs every workload of BENCHMARKS.md's
# current table at the checked-out commit, ROUNDS times (default 3), each
# round under bbr and then cubic (set per socket, the machine's default
# untouched), every contender beside its floor in the same round, and
# writes the raw output to OUT (default /tmp/bench-table.txt). Then
# scripts/bench-table.py OUT prints each row's figures and ratios per
# round. Two processes on loopback, default GOMAXPROCS, unpinned, except
# the shm round trip, which is also run with the two processes apart
# (server on CPU 1, client on CPU 0). About 2 minutes a round and
# congestion control, plus one run of the idle-connection benchmark at
# the end (IDLE=0 skips it).
set -eu
rounds=${1:-3}
out=${2:-/tmp/bench-table.txt}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null || true
	rm -rf "$bin"
}
trap cleanup EXIT
cd "$root"
go test -c -o "$bin/msgr.test" ./bench/msgrbench
(cd bench/peers && go test -c -o "$bin/peers.test" .)
go test -c -o "$bin/tr.test" ./bench/transports
go test -c -o "$bin/ferry.test" ./cmd/ferry
go build -o "$bin/ferry" ./cmd/ferry
bench() { # DIR BINARY ARGS...: one benchmark run, its result lines only
	local d=$1 b=$2
	shift 2
	(cd "$d" && "$b" -test.run '^$' "$@" 2>&1 | grep -E '^Benchmark' || true)
}
cli() { # CC: ferry serve, then ferry ping and the self-test against it
	local cc=$1
	"$bin/ferry" serve --listen tcp://127.0.0.1:0 --tcp-congestion "$cc" >"$bin/serve.out" 2>"$bin/serve.err" &
	pid=$!
	for _ in $(seq 100); do
		grep -q listening "$bin/serve.out" && break
		sleep 0.1
	done
	local addr
	addr=$(grep -o 'v2:[0-9.:]*/[0-9]*' "$bin/serve.out" | head -1)
	"$bin/ferry" ping "$addr" --count 5000 --size 64 --warmup 300ms --tcp-congestion "$cc" --json >"$bin/ping.json"
	python3 -c 'import json,sys; d=json.load(sys.stdin); print("CLI ping64", d["rtt_us_p50"], "p50-µs", d["rtt_us_p99"], "p99-µs", d["errors"], "errors")' <"$bin/ping.json"
	for depth in 1 16; do
		"$bin/ferry" selftest --endpoints "$addr" --sizes '0 0' --reps 200000 --inflight $depth --tcp-congestion "$cc" --json >"$bin/st.json"
		python3 -c 'import json,sys; d=json.load(sys.stdin); print("CLI selftest%s" % sys.argv[1], d["rpcs_per_s"], "rpcs/s", d["lat_us_p50"], "p50-µs", d["lat_us_p99"], "p99-µs", d["failures"], "failures")' "$depth" <"$bin/st.json"
	done
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
}
{
	echo "# bench-table.sh at $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $(nproc) CPUs"
	for r in $(seq "$rounds"); do
		for cc in bbr cubic; do
			export FERRY_BENCH_CC=$cc
			echo "## round $r $cc $(awk '{print "load", $1}' /proc/loadavg) $(vmstat 1 2 | awk 'END {print "steal", $17 "%"}')"
			bench bench/msgrbench "$bin/msgr.test" -test.bench 'RoundTrip/size=64/impl=(raw|ferry-await|ferry-await-busy|ferry-await-secure)$'
			bench bench/msgrbench "$bin/msgr.test" -test.bench 'RoundTrip/size=1MiB/impl=(raw|ferry-await|ferry-await-secure)$'
			bench bench/peers "$bin/peers.test" -test.bench 'Null/impl=(raw|ferry|ferry-busy|grpc)$' -test.benchtime 20000x
			bench bench/peers "$bin/peers.test" -test.bench 'Echo64Inflight16/impl=(raw|ferry|ferry-send|grpc)$' -test.benchtime 3s
			bench bench/peers "$bin/peers.test" -test.bench 'Bulk(Get|Put)/size=(1|4|16)MiB/impl=(raw|raw-chunked|ferry)$'
			echo "# shm unpinned"
			bench bench/transports "$bin/tr.test" -test.bench 'RoundTrip64/impl=(raw|ferry)-shm$' -test.benchtime 2s
			echo "# shm apart"
			(cd bench/transports && FERRY_BENCH_SERVER_CPUS=1 taskset -c 0 "$bin/tr.test" -test.run '^$' -test.bench 'RoundTrip64/impl=(raw|ferry)-shm$' -test.benchtime 2s 2>&1 | grep -E '^Benchmark' | sed 's/^Benchmark/BenchmarkApart/' || true)
			cli "$cc"
			echo "# ping-shm-tcp 1M"
			FERRY="$bin/ferry" scripts/ping-shm-tcp.sh 3 "$cc" 2>&1 | tail -1
		done
	done
	if [ "${IDLE:-1}" != 0 ]; then
		echo "## idle"
		bench cmd/ferry "$bin/ferry.test" -test.bench IdleConnections -test.benchtime 1x
	fi
} | tee "$out"
