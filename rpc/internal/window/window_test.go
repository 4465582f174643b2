package window

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

type flow = Flow[string, string]

func newFlow(name, conn string, n, chunk int64) *flow {
	return &flow{Conn: conn, Owner: name, Len: n, Chunk: chunk}
}

// format writes grants as "a@0+10 b@0+10".
func format(gs []Grant[string, string]) string {
	var b []string
	for _, g := range gs {
		b = append(b, fmt.Sprintf("%s@%d+%d", g.F.Owner, g.Pos, g.Len))
	}
	return strings.Join(b, " ")
}

func TestWindows(t *testing.T) {
	w := New[string, string](Limits{Window: 20, Conn: 30, Context: 50})
	step := func(what string, got []Grant[string, string], want string) {
		t.Helper()
		if g := format(got); g != want {
			t.Fatalf("%s: got %q, want %q", what, g, want)
		}
	}
	a := newFlow("a", "x", 100, 10)
	step("a's own window", w.Issue(a, nil), "a@0+10 a@10+10")
	b := newFlow("b", "x", 100, 10)
	step("the connection's window stops b", w.Issue(b, nil), "b@0+10")
	if w.Parked() != 1 || w.ConnInFlight("x") != 30 || w.InFlight() != 30 {
		t.Fatalf("parked %d conn %d ctx %d", w.Parked(), w.ConnInFlight("x"), w.InFlight())
	}
	c := newFlow("c", "y", 100, 10)
	step("another connection", w.Issue(c, nil), "c@0+10 c@10+10")
	d := newFlow("d", "z", 15, 10)
	step("the context's window stops d", w.Issue(d, nil), "")
	// a's first chunk lands: the parked flows take the window first (b
	// takes x's 10; d still finds the context full), then a itself.
	w.Release(a, 10)
	step("parked first", w.Pump(nil), "b@10+10")
	if w.Parked() != 1 {
		t.Fatalf("parked %d, want 1 (d: the context is full)", w.Parked())
	}
	step("a waits for its connection", w.Issue(a, nil), "")
	if w.Parked() != 2 {
		t.Fatalf("parked %d, want 2", w.Parked())
	}
	// c ends: its 20 bytes go back to the context; with b's 10 the
	// parked take turns, a chunk each, while they fit.
	if r, due := w.End(c); r != 20 || !due {
		t.Fatalf("End(c) = %d, %v", r, due)
	}
	step("ended flows get nothing", w.Issue(c, nil), "")
	w.Release(b, 10)
	step("turns", w.Pump(nil), "d@0+10 a@20+10 d@10+5")
	if w.Parked() != 0 {
		t.Fatalf("parked %d, want 0 (a got a chunk: it parks again when it must)", w.Parked())
	}
	// A chunk larger than every window still goes when they hold none.
	w2 := New[string, string](Limits{Window: 5, Conn: 5, Context: 5})
	e := newFlow("e", "x", 30, 20)
	step("one chunk always fits an empty window", w2.Issue(e, nil), "e@0+20")
	step("then it waits", w2.Issue(e, nil), "")
	w2.Release(e, 20)
	step("next", w2.Issue(e, nil), "e@20+10")
	// A flow the peer pulls (Next at Len) is granted nothing.
	f := newFlow("f", "x", 30, 10)
	f.Next = f.Len
	step("pulled by the peer", w2.Issue(f, nil), "")
}

// Random operations keep the invariants: in flight per connection and
// in all is the sum of the flows', no flow exceeds its window unless it
// holds a single chunk, the shared windows likewise, every byte of a
// flow is granted exactly once and in order, and a flow is parked only
// while a shared window stops it.
func TestWindowsRandom(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 9))
		lim := Limits{Window: 40, Conn: 60, Context: 100}
		w := New[string, string](lim)
		var flows []*flow
		granted := map[*flow]int64{}
		check := func(gs []Grant[string, string]) {
			for _, g := range gs {
				if g.Pos != granted[g.F] || g.Len <= 0 || g.Pos+g.Len > g.F.Len {
					t.Fatalf("seed %d: grant %s@%d+%d after %d", seed, g.F.Owner, g.Pos, g.Len, granted[g.F])
				}
				granted[g.F] += g.Len
			}
		}
		for i := range 3000 {
			switch op := rng.IntN(10); {
			case op < 3 || len(flows) == 0:
				f := newFlow(fmt.Sprint(i), string(rune('a'+rng.IntN(3))), rng.Int64N(200)+1, rng.Int64N(50)+1)
				flows = append(flows, f)
				check(w.Issue(f, nil))
			case op < 7:
				f := flows[rng.IntN(len(flows))]
				w.Release(f, rng.Int64N(f.InFlight()+1))
				check(w.Pump(nil))
				check(w.Issue(f, nil))
			case op < 9:
				check(w.Pump(nil))
			default:
				k := rng.IntN(len(flows))
				w.End(flows[k])
				flows = append(flows[:k], flows[k+1:]...)
				check(w.Pump(nil))
			}
			var all int64
			conns := map[string]int64{}
			for _, f := range flows {
				all += f.InFlight()
				conns[f.Conn] += f.InFlight()
				if f.InFlight() > max(lim.Window, f.Chunk) {
					t.Fatalf("seed %d: flow %s has %d in flight", seed, f.Owner, f.InFlight())
				}
			}
			if all != w.InFlight() {
				t.Fatalf("seed %d: %d in flight, flows hold %d", seed, w.InFlight(), all)
			}
			for c, n := range conns {
				if w.ConnInFlight(c) != n || n > lim.Conn+50 {
					t.Fatalf("seed %d: connection %s: %d vs %d", seed, c, w.ConnInFlight(c), n)
				}
			}
			if all > lim.Context+50 {
				t.Fatalf("seed %d: %d in flight in all", seed, all)
			}
		}
	}
}
