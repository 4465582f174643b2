package swim

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config holds a machine's parameters. The zero value of every field means
// its default; the defaults are DAOS CaRT's where DAOS has the knob and
// hashicorp/memberlist's (Lifeguard) where it does not. See the package doc
// for the sources and the detection arithmetic they give.
type Config struct {
	// Period is the protocol period: one direct probe starts per period.
	// Default 1 s (DAOS SWIM_PROTOCOL_PERIOD_LEN; memberlist LAN
	// ProbeInterval). A failed probe lasts PingTimeout+IndirectTimeout and
	// the next one starts when it has ended.
	Period time.Duration
	// PingTimeout is how long a direct ping waits for its ack before
	// indirect pings are sent, and how long a helper waits for the target
	// before it nacks. Default 900 ms (DAOS SWIM_PING_TIMEOUT).
	PingTimeout time.Duration
	// IndirectTimeout is how long the prober waits for an ack through its
	// helpers. Default 2·PingTimeout (DAOS sends IREQs with twice the ping
	// delay).
	IndirectTimeout time.Duration
	// SuspicionTimeout is the time from suspicion to death of a suspicion
	// nobody independently confirmed (Lifeguard's maximum). Default 20 s
	// (DAOS SWIM_SUSPECT_TIMEOUT since DAOS-14027).
	SuspicionTimeout time.Duration
	// SuspicionMinTimeout is the timeout that Confirmations independent
	// confirmations shrink a suspicion to. Default: memberlist's
	// SuspicionMult·max(1, log10(n))·Period for a group of n, at most
	// SuspicionTimeout.
	SuspicionMinTimeout time.Duration
	// SuspicionMult scales the default SuspicionMinTimeout. Default 4
	// (memberlist LAN).
	SuspicionMult int
	// Confirmations is the number of independent confirmations (distinct
	// accusers besides the first) that bring a suspicion's timeout down to
	// SuspicionMinTimeout, memberlist's formula in between. Default 2
	// (memberlist LAN, SuspicionMult−2); at most MaxConfirmations; at most
	// n−2 in a group of n.
	Confirmations int
	// IndirectPings is k, the number of helpers asked to ping a target that
	// missed its direct ping. Default 2 (DAOS SWIM_SUBGROUP_SIZE).
	IndirectPings int
	// MaxPiggyback is the number of recent updates piggybacked on each
	// message besides the mandatory target, sender and receiver entries.
	// Default 8 (DAOS SWIM_PIGGYBACK_ENTRIES); at most MaxUpdates−3.
	MaxPiggyback int
	// RetransmitMult is lambda: each update is piggybacked
	// lambda·ceil(log10(n+1)) times. Default 4 (memberlist LAN
	// RetransmitMult; DAOS sends each one 50 times whatever n).
	RetransmitMult int
	// AwarenessMax bounds the local health multiplier: a member whose
	// probes fail without nacks scales its period and ping timeouts by up
	// to this factor. Default 8 (memberlist AwarenessMaxMultiplier).
	AwarenessMax int
	// StallThreshold is how late an input may come after Next before the
	// machine takes it as its own delay (DAOS's progress-stall rule) and
	// shifts every deadline by the time since its previous input, so each
	// keeps the time it had left. Default Period/4.
	StallThreshold time.Duration
	// QueueLimit bounds the dissemination queue; when full the most
	// retransmitted entry is dropped. Default 256.
	QueueLimit int
	// HelperLimit bounds the indirect pings this member serves at once;
	// beyond it a PingReq is nacked at once. Default 64.
	HelperLimit int
	// Incarnation is the incarnation the machine starts with. A restarted
	// member should start above any incarnation it used before (DAOS uses
	// its hybrid logical clock); one that does not still rejoins, by
	// refuting the death it hears about itself.
	Incarnation uint64
}

// MaxConfirmations bounds Config.Confirmations.
const MaxConfirmations = 8

// ErrConfig is returned (wrapped) by Config.Validate.
var ErrConfig = errors.New("swim: invalid config")

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Period == 0 {
		c.Period = time.Second
	}
	if c.PingTimeout == 0 {
		c.PingTimeout = 900 * time.Millisecond
	}
	if c.IndirectTimeout == 0 {
		c.IndirectTimeout = 2 * c.PingTimeout
	}
	if c.SuspicionTimeout == 0 {
		c.SuspicionTimeout = 20 * time.Second
	}
	if c.SuspicionMult == 0 {
		c.SuspicionMult = 4
	}
	if c.Confirmations == 0 {
		c.Confirmations = 2
	}
	if c.IndirectPings == 0 {
		c.IndirectPings = 2
	}
	if c.MaxPiggyback == 0 {
		c.MaxPiggyback = 8
	}
	if c.RetransmitMult == 0 {
		c.RetransmitMult = 4
	}
	if c.AwarenessMax == 0 {
		c.AwarenessMax = 8
	}
	if c.StallThreshold == 0 {
		c.StallThreshold = c.Period / 4
	}
	if c.QueueLimit == 0 {
		c.QueueLimit = 256
	}
	if c.HelperLimit == 0 {
		c.HelperLimit = 64
	}
	return c
}

// Validate reports a field out of range, after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(f string, v any) error { return fmt.Errorf("%w: %s = %v", ErrConfig, f, v) }
	switch {
	case c.Period < 0:
		return bad("Period", c.Period)
	case c.PingTimeout < 0:
		return bad("PingTimeout", c.PingTimeout)
	case c.IndirectTimeout < 0 || c.IndirectTimeout <= c.PingTimeout:
		// The helpers wait PingTimeout before they nack; the prober must
		// wait longer or it counts their nacks as missing.
		return bad("IndirectTimeout (must exceed PingTimeout)", c.IndirectTimeout)
	case c.SuspicionTimeout < 0:
		return bad("SuspicionTimeout", c.SuspicionTimeout)
	case c.SuspicionMinTimeout < 0 || c.SuspicionMinTimeout > c.SuspicionTimeout:
		return bad("SuspicionMinTimeout", c.SuspicionMinTimeout)
	case c.SuspicionMult < 0:
		return bad("SuspicionMult", c.SuspicionMult)
	case c.Confirmations < 0 || c.Confirmations > MaxConfirmations:
		return bad("Confirmations", c.Confirmations)
	case c.IndirectPings < 0 || c.IndirectPings > 16:
		return bad("IndirectPings", c.IndirectPings)
	case c.MaxPiggyback < 0 || c.MaxPiggyback > MaxUpdates-3:
		return bad("MaxPiggyback", c.MaxPiggyback)
	case c.RetransmitMult < 0:
		return bad("RetransmitMult", c.RetransmitMult)
	case c.AwarenessMax < 1 || c.AwarenessMax > 64:
		return bad("AwarenessMax", c.AwarenessMax)
	case c.StallThreshold < 0:
		return bad("StallThreshold", c.StallThreshold)
	case c.QueueLimit < 0:
		return bad("QueueLimit", c.QueueLimit)
	case c.HelperLimit < 0:
		return bad("HelperLimit", c.HelperLimit)
	}
	return nil
}

// minSuspicion is the confirmed-suspicion timeout in a group of n.
func (c *Config) minSuspicion(n int) time.Duration {
	if c.SuspicionMinTimeout > 0 {
		return c.SuspicionMinTimeout
	}
	scale := 1.0
	if n > 10 {
		scale = math.Log10(float64(n))
	}
	d := time.Duration(float64(c.SuspicionMult) * scale * float64(c.Period))
	return min(d, c.SuspicionTimeout)
}

// SuspicionTimeoutFor is the timeout of a suspicion with c independent
// confirmations in a group of n members (memberlist's formula):
//
//	k = min(Confirmations, n−2); if k ≤ 0 the result is min
//	max(min, max − (max−min)·ln(c+1)/ln(k+1))
//
// with max = SuspicionTimeout and min = SuspicionMinTimeout (or its
// n-scaled default).
func (c Config) SuspicionTimeoutFor(n, confirmations int) time.Duration {
	c = c.withDefaults()
	return c.suspicionTimeout(n, confirmations)
}

func (c *Config) suspicionTimeout(n, conf int) time.Duration {
	lo, hi := c.minSuspicion(n), c.SuspicionTimeout
	k := min(c.Confirmations, n-2)
	if k <= 0 {
		return lo
	}
	frac := math.Log(float64(conf+1)) / math.Log(float64(k+1))
	t := hi - time.Duration(frac*float64(hi-lo))
	return max(t, lo)
}

// retransmitLimit is lambda·ceil(log10(n+1)) for a group of n.
func (c *Config) retransmitLimit(n int) int {
	return c.RetransmitMult * int(math.Ceil(math.Log10(float64(n+1))))
}
