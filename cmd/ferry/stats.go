package main

import (
	"math"
	"slices"
	"time"
)

// rttStats summarises round-trip times.
type rttStats struct {
	N                       int
	Min, Max, Avg, P50, P99 time.Duration
}

// summarize computes the statistics of rtts. It does not modify rtts. An
// empty slice gives zero statistics.
func summarize(rtts []time.Duration) rttStats {
	if len(rtts) == 0 {
		return rttStats{}
	}
	s := slices.Clone(rtts)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return rttStats{
		N:   len(s),
		Min: s[0],
		Max: s[len(s)-1],
		Avg: sum / time.Duration(len(s)),
		P50: percentile(s, 50),
		P99: percentile(s, 99),
	}
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value such that at least p% of the
// values are less than or equal to it. sorted must be ascending and not
// empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// micros returns d in microseconds, rounded to 0.1 µs.
func micros(d time.Duration) float64 {
	return math.Round(float64(d)/100) / 10
}

// rate returns n per second over elapsed, or 0 when elapsed is 0.
func rate(n float64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return n / elapsed.Seconds()
}

// round2 rounds x to two decimals (for JSON output).
func round2(x float64) float64 { return math.Round(x*100) / 100 }
