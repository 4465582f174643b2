package swim

import (
	"math"
	"time"
)

// Detection is the detection arithmetic for a crashed member of a group of
// n with a configuration, assuming a lossless network, members that run on
// time and whose local health is good (multiplier 1).
type Detection struct {
	// FirstProbe is the expected time from the crash to the first probe
	// of the crashed member by anyone: each of the n−1 live members probes
	// one of n−1 targets per period, so about e/(e−1) periods (the SWIM
	// paper's figure for random targets; round-robin is no worse).
	FirstProbe time.Duration
	// Probe is how long a failed probe takes before the suspicion:
	// PingTimeout + IndirectTimeout.
	Probe time.Duration
	// Suspicion is the timeout of a suspicion confirmed Confirmations
	// times (every live member probes the crashed one within n−1 periods,
	// so the confirmations do come).
	Suspicion time.Duration
	// Expected is the expected time to the first death declaration:
	// FirstProbe + Probe + Suspicion; the rest of the group then learns it
	// within a few periods of gossip.
	Expected time.Duration
	// Worst bounds the time from the crash until every live member has the
	// crashed one as dead, whatever the gossip does: each live member
	// probes it within (n−1) periods of the crash (its round-robin order),
	// suspects it Probe later with itself as accuser, and declares it dead
	// at most SuspicionTimeout after that:
	//
	//	Worst = (n−1)·Period + PingTimeout + IndirectTimeout + SuspicionTimeout
	//
	// A suspicion heard of earlier ends no later: by then this member's own
	// probe has confirmed it, or its confirm-with-origin round
	// (IndirectTimeout) ends before the own probe would have.
	// Own delays (stalls) add their length; a local health multiplier s
	// scales the Period and probe terms by s.
	Worst time.Duration
}

// DetectionTime returns the detection arithmetic of cfg (defaults applied)
// for a group of n members.
//
// With the defaults: Probe = 0.9 + 1.8 = 2.7 s; Worst = (n−1)·1 s + 2.7 s +
// 20 s, which is 29.7 s for n = 8, so a crashed rank of a group of up to 8
// is known dead to every live rank within 30 s whatever the gossip does;
// for n = 16 the bound is 37.7 s and the expected time to the first death
// is 1.6 + 2.7 + 4.8 = 9.1 s, the others hearing of it within a few
// periods.
func DetectionTime(cfg Config, n int) Detection {
	c := cfg.withDefaults()
	n = max(n, 2)
	first := time.Duration(math.E / (math.E - 1) * float64(c.Period))
	probe := c.PingTimeout + c.IndirectTimeout
	susp := c.suspicionTimeout(n, c.Confirmations)
	return Detection{
		FirstProbe: first,
		Probe:      probe,
		Suspicion:  susp,
		Expected:   first + probe + susp,
		Worst:      time.Duration(n-1)*c.Period + probe + c.SuspicionTimeout,
	}
}
