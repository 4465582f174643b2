package sim

import (
	"testing"
	"time"

	"github.com/ferrymsg/ferry/coll"
)

// TestCollectives runs collectives over 1,000 simulated ranks for each
// topology, with ranks crashed before them (still in the root's view, so
// in scope), a rank crashed in the middle of one and a rank paused across
// one: every collective ends, its aggregate is right, and the crashed and
// paused ranks are listed as failed.
func TestCollectives(t *testing.T) {
	ranks := 1000
	if testing.Short() {
		ranks = 256
	}
	for _, topo := range []coll.Topology{coll.Flat(), coll.KAry(4), coll.KNomial(4)} {
		t.Run(topo.String(), func(t *testing.T) {
			res := run(t, Config{
				Ranks:    ranks,
				Seed:     21,
				Duration: 8 * time.Second,
				Faults: Faults{
					Crashes: []Crash{{Rank: 7, At: time.Second / 2}, {Rank: 500 % ranks, At: time.Second},
						// Mid-collective: the second one starts at 4 s.
						{Rank: 3, At: 4*time.Second + 2*time.Millisecond}},
					Pauses: []Pause{{Rank: 11, At: 1500 * time.Millisecond, For: 3 * time.Second}},
				},
				Collectives: Collectives{Every: 2 * time.Second, Topology: topo, Timeout: 2 * time.Second},
			})
			if res.CollErrors != 0 {
				t.Fatalf("%d collective inputs refused", res.CollErrors)
			}
			if len(res.Colls) != 3 {
				t.Fatalf("%d collectives, want 3 (at 2, 4, 6 s)", len(res.Colls))
			}
			for _, c := range res.Colls {
				if c.Latency < 0 || c.RootCrashed {
					t.Fatalf("collective %+v did not finish", c)
				}
				if !c.AggregateOK || !c.CrashedListed {
					t.Errorf("collective %+v: aggregate ok %v, crashed listed %v", c, c.AggregateOK, c.CrashedListed)
				}
				if c.Latency > 2*time.Second {
					t.Errorf("collective %d took %v, past its 2 s timeout", c.ID, c.Latency)
				}
			}
			// At 2 s: ranks 7 and 500 crashed (unreachable) and rank 11
			// paused (timed out) are in scope.
			c0 := res.Colls[0]
			if c0.Scope != ranks || c0.Unreachable < 2 || c0.TimedOut < 1 || c0.Answered > ranks-3 {
				t.Errorf("first collective %+v", c0)
			}
			if c0.Latency < time.Second/2 {
				t.Errorf("first collective took %v: it did not wait for the paused rank", c0.Latency)
			}
			// At 4 s rank 3 crashes 2 ms in: it is unreachable or, had it
			// answered first, answered; either way the collective ends.
			if c1 := res.Colls[1]; c1.Answered+c1.Failed != c1.Scope {
				t.Errorf("second collective %+v", c1)
			}
			cs := res.CollSummary()
			if cs.Finished != 3 || cs.AggregateOK != 3 || cs.ReachMin < 0.9 {
				t.Errorf("summary %+v", cs)
			}
		})
	}
}

// TestCollectivesDeterministic: collectives are part of the trace.
func TestCollectivesDeterministic(t *testing.T) {
	c := small(8)
	c.Collectives = Collectives{Every: 5 * time.Second, Timeout: time.Second}
	a, b := run(t, c), run(t, c)
	if a.TraceHash != b.TraceHash || a.CollMsgs == 0 {
		t.Fatalf("hashes %s %s, %d collective messages", a.TraceHash, b.TraceHash, a.CollMsgs)
	}
	c.Collectives = Collectives{}
	if run(t, c).TraceHash == a.TraceHash {
		t.Fatal("collectives left the trace unchanged")
	}
}
