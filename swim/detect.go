package swim

import (
	"math"
	"time"
)

// Detection is the detection arithmetic for one crashed member of a group
// of n, for a configuration, with members that run on time and are in good
// local health (multiplier 1). Own delays add their length; a local health
// multiplier s scales the Period and probe terms of that member by s;
// message loss makes probes fail now and then, each failed probe stretching
// its period to Probe.
type Detection struct {
	// FirstProbe is the expected time from the crash to the first probe
	// of the crashed member by anyone: each of the n−1 live members probes
	// one of n−1 targets per period, so a period passes without a probe of
	// it with probability about 1/e, and the wait is about e/(e−1)
	// periods (the SWIM paper's figure).
	FirstProbe time.Duration
	// Probe is how long a failed probe takes before the suspicion:
	// PingTimeout + IndirectTimeout.
	Probe time.Duration
	// Suspicion is the timeout of a suspicion with Confirmations
	// independent confirmations (other probers find the crashed member at
	// about one per period, so they come within a few periods).
	Suspicion time.Duration
	// Expected is the expected time to the first death declaration:
	// FirstProbe + Probe + Suspicion. The others hear of it within a few
	// periods of gossip.
	Expected time.Duration
	// Spread is an estimate of the time gossip takes to reach every
	// member: each member piggybacks on about two messages a period (its
	// own ping and its answer to one), so the informed members about
	// triple each period; Spread is twice that, 2·ceil(log3 n) periods.
	Spread time.Duration
	// Likely bounds, with probability 1−10⁻⁶, the time until every live
	// member holds the crashed one dead: it is probed within ln(10⁶) ≈ 14
	// periods, suspected Probe later, the suspicion reaches everyone
	// within Spread, and a member that heard of it declares it dead at most
	// SuspicionTimeout (no confirmation) + IndirectTimeout (its
	// confirm-with-origin round) later:
	//
	//	Likely = 14·Period + Probe + Spread + SuspicionTimeout + IndirectTimeout
	Likely time.Duration
	// Worst bounds the same time whatever the gossip does: every live
	// member probes the crashed one within (n−1) periods (its round-robin
	// order), suspects it Probe later with itself as accuser, and declares
	// it dead at most SuspicionTimeout after that (a suspicion heard of
	// earlier ends no later):
	//
	//	Worst = (n−1)·Period + Probe + SuspicionTimeout
	Worst time.Duration
}

// Bound is the smaller of Likely and Worst.
func (d Detection) Bound() time.Duration { return min(d.Likely, d.Worst) }

// DetectionTime returns the detection arithmetic of cfg (defaults applied)
// for a group of n members.
//
// With the defaults (Period 1 s, Probe 0.9 + 1.8 = 2.7 s, SuspicionTimeout
// 20 s, minimum 4·max(1, log10 n) s):
//
//	n      Expected  Spread  Likely  Worst
//	5      8.3 s     4 s     42.5 s  26.7 s
//	8      8.3 s     4 s     42.5 s  29.7 s
//	16     9.1 s     6 s     44.5 s  37.7 s
//	1024   16.3 s    14 s    52.5 s  1045.7 s
//	10000  20.3 s    18 s    56.5 s  10021.7 s
//
// So a crashed rank of a group of up to 8 is known dead to every live rank
// within 30 s whatever the gossip does, and, with gossip, within Likely in
// any group (measured in this package's tests: 16.2 s at worst over 20 runs
// of 16 members; 21.5 s at worst for 10 crashes among 1,024 members with
// 1% loss).
func DetectionTime(cfg Config, n int) Detection {
	c := cfg.withDefaults()
	n = max(n, 2)
	first := time.Duration(math.E / (math.E - 1) * float64(c.Period))
	probe := c.PingTimeout + c.IndirectTimeout
	susp := c.suspicionTimeout(n, c.Confirmations)
	spread := time.Duration(2*math.Ceil(math.Log(float64(n))/math.Log(3))) * c.Period
	return Detection{
		FirstProbe: first,
		Probe:      probe,
		Suspicion:  susp,
		Expected:   first + probe + susp,
		Spread:     spread,
		Likely:     14*c.Period + probe + spread + c.SuspicionTimeout + c.IndirectTimeout,
		Worst:      time.Duration(n-1)*c.Period + probe + c.SuspicionTimeout,
	}
}
