package swim_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ferrymsg/ferry/swim"
)

// Three members on a virtual clock; member 2 crashes at once. The loop
// delivers each machine's outbox to the others after 1 ms and ticks each
// machine at its Next; members 0 and 1 come to hold 2 dead.
func Example() {
	const n = 3
	ms := make([]*swim.Machine, n)
	for i := range ms {
		ms[i] = swim.New(swim.ID(i), swim.Config{}, rand.New(rand.NewPCG(1, uint64(i))))
		for j := range n {
			if j != i {
				ms[i].Add(swim.ID(j), 0)
			}
		}
	}
	type delivery struct {
		at       time.Duration
		from, to swim.ID
		msg      swim.Message
	}
	var inflight []delivery
	crashed := swim.ID(2)
	for now := time.Duration(0); now < 40*time.Second; now += time.Millisecond {
		// Deliver what is due.
		rest := inflight[:0]
		var due []delivery
		for _, d := range inflight {
			if d.at <= now {
				due = append(due, d)
			} else {
				rest = append(rest, d)
			}
		}
		inflight = rest
		for _, d := range due {
			if d.to != crashed {
				ms[d.to].Receive(now, d.from, &d.msg)
			}
		}
		for i, m := range ms {
			if swim.ID(i) == crashed {
				continue
			}
			if now >= m.Next() {
				m.Tick(now)
			}
			for _, env := range m.Outbox() {
				msg := env.Msg
				msg.Updates = append([]swim.Update(nil), msg.Updates...) // valid only until the next Outbox
				inflight = append(inflight, delivery{now + time.Millisecond, swim.ID(i), env.To, msg})
			}
			for _, e := range m.Events() {
				if e.State == swim.Dead {
					fmt.Printf("member %d: %d is %v\n", i, e.ID, e.State)
				}
			}
		}
	}
	// Unordered output:
	// member 0: 2 is dead
	// member 1: 2 is dead
}

// The detection arithmetic with the defaults, for a group of 8 and one of
// 1,024.
func ExampleDetectionTime() {
	for _, n := range []int{8, 1024} {
		d := swim.DetectionTime(swim.Config{}, n)
		fmt.Printf("n=%d: probe %v, confirmed suspicion %v, expected first death %.1fs, known to all within %v\n",
			n, d.Probe, d.Suspicion.Round(100*time.Millisecond), d.Expected.Seconds(), d.Bound())
	}
	// Output:
	// n=8: probe 2.7s, confirmed suspicion 4s, expected first death 8.3s, known to all within 29.7s
	// n=1024: probe 2.7s, confirmed suspicion 12s, expected first death 16.3s, known to all within 52.5s
}
