#!/bin/sh
# bench-interleaved.sh [OUT]: runs the large-transfer benchmarks ROUNDS
# times (default 5), each round running the raw-TCP floor and ferry one
# after the other, and prints for every benchmark the median over rounds
# of ferry's MB/s divided by the floor's from the same round, with the
# range. Then the same against the chunked floor (raw-chunked: raw TCP in
# ferry's chunks and windows), which separates what ferry's code costs
# from what its chunked transfer protocol costs. On a shared VM whose
# floor drifts by ±30% between minutes, ratios taken within a round are
# steadier than medians taken apart.
#
# VARIANTS="A B ..." runs every round once per variant, one after the
# other: a variant is a comma-separated list of environment settings (the
# bench/peers knobs FERRY_BULK_CHUNK, FERRY_BULK_WINDOW, FERRY_BULK_EAGER,
# FERRY_BULK_SEGMENT, FERRY_BULK_SEPARATE, or FERRY_BENCH_CC), or "-" for none; each ratio is
# taken within one variant's run and reported per variant. HOL=1 also runs
# the head-of-line benchmark (64 B RPCs behind 16 MiB transfers on
# their connection and on another) and
# prints the medians of its p50, p99 and background MB/s.
# With ANALYZE=FILE it only prints the medians of an earlier raw output.
# FERRY_BENCH_CC=cubic (say) runs every contender's TCP sockets with that
# congestion control instead of the system's (BBR's pacing throttles the
# raw floor on loopback; see BENCHMARKS.md).
#
#	VARIANTS="- FERRY_BULK_WINDOW=8388608" HOL=1 ROUNDS=4 scripts/bench-interleaved.sh
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
		for v in ${VARIANTS:--}; do
			tag="" envs=""
			if [ "$v" != - ]; then
				tag="@$v" envs=$(echo "$v" | tr , ' ')
			fi
			# shellcheck disable=SC2086 # envs is a list of settings
			env $envs "$tmp/peers.test" -test.run '^$' -test.bench 'Bulk(Put|Get)/.*(1MiB|4MiB|16MiB)/impl=(raw|raw-chunked|ferry|ferry-nocrc)$' \
				-test.benchtime 1s | grep '^Benchmark' | sed "s/^/round=$i$tag /" >>"$out"
			# shellcheck disable=SC2086
			env $envs "$tmp/msgrbench.test" -test.run '^$' -test.bench 'RoundTrip/size=1MiB' \
				-test.benchtime 2s | grep '^Benchmark' | sed "s/^/round=$i$tag /" >>"$out"
			if [ "${HOL:-0}" = 1 ]; then
				# shellcheck disable=SC2086
				env $envs "$tmp/peers.test" -test.run '^$' -test.bench 'HOL/bg=(none|get16MiB|put16MiB|get16MiB-otherconn|put16MiB-otherconn)$' \
					-test.benchtime 1s | grep '^Benchmark' | sed "s/^/round=$i$tag /" >>"$out"
			fi
		done
	done
	echo "raw output: $out"
fi
# ratios BASE: for each benchmark (and variant) and contender other than
# BASE, the median over rounds of its MB/s over BASE's in the same run.
ratios() {
	awk -v base="$1" '$2 !~ /^BenchmarkHOL/ {
		r = $1; var = r; sub(/@.*/, "", r); if (!sub(/^[^@]*@/, "", var)) var = ""
		name = $2; sub(/-[0-9]+$/, "", name)
		impl = name; sub(/.*\/impl=/, "", impl); key = name; sub(/\/impl=.*/, "", key)
		if (var != "") key = key "[" var "]"
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
if grep -q 'BenchmarkHOL' "$out"; then
	echo "head of line (medians over rounds):"
	# "key metric value" per run, then the median of each.
	awk '$2 ~ /^BenchmarkHOL/ {
		var = $1; if (!sub(/^[^@]*@/, "", var)) var = ""
		key = $2; sub(/-[0-9]+$/, "", key); if (var != "") key = key "[" var "]"
		for (i = 3; i < NF; i++) if ($(i+1) ~ /^(p50-us|p99-us|bg-MB\/s)$/) print key, $(i+1), $i
	}' "$out" | sort -k1,1 -k2,2 -k3,3g | awk '
	function flush() { if (n) printf "%-48s %-8s median %8.0f  [%.0f .. %.0f]  rounds %d\n", k, m, a[int((n+1)/2)], a[1], a[n], n }
	$1 != k || $2 != m { flush(); k = $1; m = $2; n = 0 }
	{ a[++n] = $3 }
	END { flush() }'
fi
