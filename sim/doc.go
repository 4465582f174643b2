// Package sim is a deterministic simulator of a cluster of thousands of
// ranks. It runs the real SWIM machines of package swim, one per rank, and
// the real collective machines of package coll (see Collectives), in one
// goroutine, over a simulated network (per-message delay, loss,
// partitions) and a virtual clock, with crashes and pauses (as SIGSTOP)
// injected on a schedule drawn from one seed. Every random choice — the
// machines', the network's, the schedule's — comes from math/rand/v2 PCG
// sources derived from that seed, and simultaneous events run in the order
// they were scheduled, so one seed gives one trace byte for byte: Result's
// TraceHash is the SHA-256 of the canonical encoding of every message
// delivered or dropped and every membership, fault and collective event.
//
// What a run reports (Result): for each crash, when it was first detected
// and when every live rank held it dead; false positives (ranks declared
// dead that had not crashed, paused ones included); for each pause, how
// many ranks suspected and declared the paused rank dead; messages per
// rank per protocol period; each collective's reach, latency and whether
// its aggregate checked out; the speed (setup excluded), the CPU time, the
// peak RSS and the trace hash. The machines need O(n) memory each, so a
// run needs O(n²): see RELIABILITY.md for measured figures.
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
