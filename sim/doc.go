// Package sim is a deterministic simulator of a cluster of thousands of
// ranks. It runs the real SWIM machines of package swim, one per rank, in
// one goroutine, over a simulated network (per-message delay, loss,
// partitions) and a virtual clock, with crashes and pauses (as SIGSTOP)
// injected on a schedule drawn from one seed. Every random choice — the
// machines', the network's, the schedule's — comes from math/rand/v2 PCG
// sources derived from that seed, and simultaneous events run in the order
// they were scheduled, so one seed gives one trace byte for byte: Result's
// TraceHash is the SHA-256 of the canonical encoding of every message
// delivered or dropped and every membership and fault event.
//
// The scheduler is a heap of timed events. A rank's machine is ticked at
// the time its Next asks for, and handed each message at the time the
// network delivers it; what it puts in its outbox is sent at once, through
// the network, encoded with swim's codec (or copied as a struct, see
// Config.Codec).
//
// Nothing here reads the wall clock except to measure the run's speed
// (Result.SimPerWall), and nothing starts goroutines.
package sim

import "errors"

// ErrConfig is returned, wrapped, by Run for a configuration it cannot
// simulate.
var ErrConfig = errors.New("sim: bad configuration")
