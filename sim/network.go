package sim

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Network describes the simulated network between the ranks. The zero
// value is a lossless network with the default delays.
type Network struct {
	// DelayMin and DelayMax bound a message's one-way delay, drawn
	// uniformly from [DelayMin, DelayMax]. Zero for both means 100 µs to
	// 2 ms, a loaded LAN.
	DelayMin, DelayMax time.Duration
	// Loss is the probability, 0 to 1, that a message is lost.
	Loss float64
	// Partitions cut the network for a while.
	Partitions []Partition
	// PauseBuffer is how many messages a paused rank's inbound buffer
	// holds. A stopped process does not read its sockets, but the kernel
	// keeps what arrives (ferry carries SWIM over TCP, so a peer's
	// messages wait in the receive buffer and then in the sender's queue);
	// the simulator queues them and hands them to the machine, in arrival
	// order, when the rank resumes. Beyond PauseBuffer messages they are
	// dropped. Zero means 4096; negative means none are kept.
	PauseBuffer int
}

// Partition cuts the ranks in Side off from the others from Start until
// End (simulated time since the start of the run): every message between
// a rank in Side and a rank outside it is dropped while the partition is
// in force. Messages within Side, and within the rest, still pass. At most
// 64 partitions may be given.
type Partition struct {
	Start, End time.Duration
	Side       []int
}

// Default network delays.
const (
	DefaultDelayMin = 100 * time.Microsecond
	DefaultDelayMax = 2 * time.Millisecond
	defaultPauseBuf = 4096
)

func (n *Network) validate(ranks int) error {
	if n.Loss < 0 || n.Loss > 1 || n.Loss != n.Loss {
		return fmt.Errorf("%w: loss %v is not a probability", ErrConfig, n.Loss)
	}
	if n.DelayMin < 0 || n.DelayMax < n.DelayMin {
		return fmt.Errorf("%w: delay range [%v, %v]", ErrConfig, n.DelayMin, n.DelayMax)
	}
	if len(n.Partitions) > 64 {
		return fmt.Errorf("%w: %d partitions (at most 64)", ErrConfig, len(n.Partitions))
	}
	for i, p := range n.Partitions {
		if p.Start < 0 || p.End < p.Start {
			return fmt.Errorf("%w: partition %d: [%v, %v)", ErrConfig, i, p.Start, p.End)
		}
		for _, r := range p.Side {
			if r < 0 || r >= ranks {
				return fmt.Errorf("%w: partition %d: rank %d out of range", ErrConfig, i, r)
			}
		}
	}
	return nil
}

// net is the running network: the random source for delays and losses,
// and the partitions in force.
type net struct {
	rnd      *rand.Rand
	min, max int64
	loss     float64
	side     []uint64 // per rank: a bit for each partition whose Side holds it
	active   uint64   // partitions in force
}

func newNet(cfg *Network, ranks int, rnd *rand.Rand) *net {
	n := &net{rnd: rnd, min: int64(cfg.DelayMin), max: int64(cfg.DelayMax), loss: cfg.Loss}
	if n.min == 0 && n.max == 0 {
		n.min, n.max = int64(DefaultDelayMin), int64(DefaultDelayMax)
	}
	if len(cfg.Partitions) > 0 {
		n.side = make([]uint64, ranks)
		for i, p := range cfg.Partitions {
			for _, r := range p.Side {
				n.side[r] |= 1 << i
			}
		}
	}
	return n
}

// cut reports whether a partition in force separates a and b.
func (n *net) cut(a, b uint32) bool {
	return n.active != 0 && (n.side[a]^n.side[b])&n.active != 0
}

// delay draws a message's delay (for messages the random loss spares).
func (n *net) delay() int64 {
	if n.max > n.min {
		return n.min + n.rnd.Int64N(n.max-n.min+1)
	}
	return n.min
}

// send decides a message's fate: its delay, or a reason it is dropped.
// The random source is drawn the same number of times whatever the
// outcome, so one message's fate does not shift the draws of the next.
func (n *net) send(from, to uint32) (delay int64, drop uint8) {
	lost := n.loss > 0 && n.rnd.Float64() < n.loss
	delay = n.min
	if n.max > n.min {
		delay += n.rnd.Int64N(n.max - n.min + 1)
	}
	switch {
	case n.cut(from, to):
		return 0, dropPartition
	case lost:
		return 0, dropLoss
	}
	return delay, 0
}
