#!/bin/sh
# bench-interleaved.sh [OUT]: runs the large-transfer benchmarks ROUNDS
# times (default 5), each round running the raw-TCP floor and ferry one
# after the other, and prints for every benchmark the median over rounds
# of ferry's MB/s divided by the floor's from the same round, with the
# range. Then the same against the chunked floor (raw-chunked: raw TCP in
# ferry's chunks and windows), which separates what ferry's code costs
# from what its chunked transfer protocol costs. On a shared VM whose floor drifts by ±30% between minutes,
# ratios taken within a round are steadier than medians taken apart.
# With ANALYZE=FILE it only prints the medians of an earlier raw output.
# FERRY_BENCH_CC=cubic (say) runs every contender's TCP sockets with that
# congestion control instead of the system's (BBR's pacing throttles the
# raw floor on loopback; see BENCHMARKS.md).
set -eu
ROUNDS=${ROUNDS:-5}
out=${1:-/tmp/ferry-interleaved.txt}
if [ -n "${ANALYZE:-}" ]; then
	out=$ANALYZE
else
	root=$(cd "$(dirname "$0")/.." && pwd)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$root/bench/peers" && go test -c -o "$tmp/peers.test" .)
	(cd "$root/bench/msgrbench" && go test -c -o "$tmp/msgrbench.test" .)
	: >"$out"
	for i in $(seq "$ROUNDS"); do
		"$tmp/peers.test" -test.run '^$' -test.bench 'Bulk(Put|Get)/.*(1MiB|4MiB|16MiB)/impl=(raw|raw-chunked|ferry|ferry-nocrc)$' \
			-test.benchtime 1s | grep '^Benchmark' | sed "s/^/round=$i /" >>"$out"
		"$tmp/msgrbench.test" -test.run '^$' -test.bench 'RoundTrip/size=1MiB' \
			-test.benchtime 2s | grep '^Benchmark' | sed "s/^/round=$i /" >>"$out"
	done
	echo "raw output: $out"
fi
# ratios BASE: for each benchmark and contender other than BASE, the
# median over rounds of its MB/s over BASE's in the same round.
ratios() {
	awk -v base="$1" '{
		r = $1; name = $2; sub(/-[0-9]+$/, "", name)
		impl = name; sub(/.*\/impl=/, "", impl); key = name; sub(/\/impl=.*/, "", key)
		for (i = 3; i < NF; i++) if ($(i+1) == "MB/s") v[r, key, impl] = $i
		keys[key] = 1; impls[key, impl] = 1; rounds[r] = 1
	}
	END {
		for (k in keys) for (ki in impls) {
			split(ki, p, SUBSEP); if (p[1] != k || p[2] == base || p[2] ~ /^raw/) continue
			for (r in rounds) if ((r, k, base) in v && (r, k, p[2]) in v)
				printf "%s %s %.3f\n", k, p[2], v[r, k, p[2]] / v[r, k, base]
		}
		if (base == "raw") for (k in keys) for (r in rounds)
			if ((r, k, "raw") in v && (r, k, "raw-chunked") in v)
				printf "%s %s %.3f\n", k, "raw-chunked", v[r, k, "raw-chunked"] / v[r, k, "raw"]
	}' "$out" | sort -k1,1 -k2,2 -k3,3g | awk '
	function flush() { if (n) printf "%-40s %-12s median %.2f  [%.2f .. %.2f]  rounds %d\n", k, im, a[int((n+1)/2)], a[1], a[n], n }
	$1 != k || $2 != im { flush(); k = $1; im = $2; n = 0 }
	{ a[++n] = $3 }
	END { flush() }'
}
echo "over the raw-TCP floor (raw):"
ratios raw
if grep -q 'impl=raw-chunked' "$out"; then
	echo "over the chunked floor (raw-chunked):"
	ratios raw-chunked
fi
