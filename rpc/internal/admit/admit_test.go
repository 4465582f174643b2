package admit

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// req is the test's request: a peer letter and a number, "a1".
type req string

// step is one input to the queue and the outputs it must give, written
// as "+a1" (admitted), "~a1" (refused, with why), "-b3" (evicted),
// "<a1" (admitted by a later call), "x a1" (expired or dropped).
type step struct {
	op   string // "offer PEER N BYTES [UNTIL]", "done BYTES", "expire NOW", "drop PEER", "close"
	want string // the outputs, in order, space separated
}

func run(t *testing.T, q *Queue[string, req], steps []step) {
	t.Helper()
	for i, s := range steps {
		f := strings.Fields(s.op)
		var out []string
		switch f[0] {
		case "offer":
			var n, until int64
			fmt.Sscan(f[3], &n)
			if len(f) > 4 {
				fmt.Sscan(f[4], &until)
			}
			v := req(f[1] + f[2])
			adm, ref, ev, ok := q.Offer(f[1], v, n, until)
			switch {
			case adm:
				out = append(out, "+"+string(v))
			case ref != Taken:
				out = append(out, "~"+string(v)+":"+ref.String())
			}
			if ok {
				out = append(out, "-"+string(ev))
			}
		case "done":
			var n int64
			fmt.Sscan(f[1], &n)
			for _, v := range q.Done(n, nil) {
				out = append(out, "<"+string(v))
			}
		case "expire":
			var now int64
			fmt.Sscan(f[1], &now)
			exp, adm := q.Expire(now, nil, nil)
			for _, v := range exp {
				out = append(out, "x"+string(v))
			}
			for _, v := range adm {
				out = append(out, "<"+string(v))
			}
		case "drop":
			gone, adm := q.DropPeer(f[1], nil, nil)
			for _, v := range gone {
				out = append(out, "x"+string(v))
			}
			for _, v := range adm {
				out = append(out, "<"+string(v))
			}
		case "close":
			for _, v := range q.Close(nil) {
				out = append(out, "x"+string(v))
			}
		default:
			t.Fatalf("step %d: bad op %q", i, s.op)
		}
		if got := strings.Join(out, " "); got != s.want {
			t.Fatalf("step %d (%s): got %q, want %q", i, s.op, got, s.want)
		}
	}
}

func TestQueue(t *testing.T) {
	cases := []struct {
		name  string
		limit int64
		steps []step
	}{
		{"admitted while it fits", 100, []step{
			{"offer a 1 60", "+a1"},
			{"offer a 2 40", "+a2"},
			{"offer a 3 1", ""},
			{"done 60", "<a3"},
		}},
		{"one always fits when none is held", 100, []step{
			{"offer a 1 500", "+a1"},
			{"offer b 1 1", ""},
			{"done 500", "<b1"},
		}},
		{"a waiter that does not fit stops the others", 100, []step{
			{"offer a 1 60", "+a1"},
			{"offer b 1 80", ""},
			{"offer c 1 10", ""}, // would fit, but b waits ahead of it
			{"done 0", ""},
			{"done 60", "<b1 <c1"},
		}},
		{"peers take turns", 10, []step{
			{"offer a 1 10", "+a1"},
			{"offer a 2 10", ""},
			{"offer a 3 10", ""},
			{"offer a 4 10", ""},
			{"offer b 1 10", ""},
			{"offer c 1 10", ""},
			// a, b and c began to wait at the same turn; a was admitted
			// last and loses the tie; then turns by when each was last
			// admitted or began to wait, arrival order among equals.
			{"done 10", "<b1"},
			{"done 10", "<a2"},
			{"done 10", "<c1"},
			{"done 10", "<a3"},
			{"done 10", "<a4"},
			{"done 10", ""},
		}},
		{"a peer admitted before is not overtaken by new peers", 10, []step{
			{"offer x 1 10", "+x1"},
			{"offer a 1 10", ""},
			{"offer y 1 10", ""},
			{"done 10", "<a1"},
			{"offer a 2 10", ""},
			{"offer z 1 10", ""},
			{"done 10", "<y1"},
			{"done 10", "<a2"},
			{"done 10", "<z1"},
		}},
		{"expired waiters give up; the head may have blocked the rest", 100, []step{
			{"offer a 1 100", "+a1"},
			{"offer b 1 100 50", ""},
			{"offer c 1 10 0", ""}, // no deadline
			{"offer d 1 10 80", ""},
			{"expire 49", ""},
			{"done 90", ""}, // b does not fit yet (10 held)
			{"expire 50", "xb1 <c1 <d1"},
			{"expire 1000", ""},
		}},
		{"a peer's waiters go with it", 10, []step{
			{"offer a 1 10", "+a1"},
			{"offer b 1 10", ""},
			{"offer b 2 10", ""},
			{"offer c 1 10", ""},
			{"drop b", "xb1 xb2"},
			{"drop nobody", ""},
			{"done 10", "<c1"},
		}},
		{"dropping the head admits the next", 100, []step{
			{"offer a 1 50", "+a1"},
			{"offer b 1 100", ""},
			{"offer c 1 50", ""},
			{"drop b", "xb1 <c1"},
		}},
		{"closed", 10, []step{
			{"offer a 1 10", "+a1"},
			{"offer b 1 10", ""},
			{"close", "xb1"},
			{"offer c 1 1", "~c1:closed"},
			{"done 10", ""},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run(t, New[string, req](tc.limit, 100, 100), tc.steps)
		})
	}
}

func TestQueueBounds(t *testing.T) {
	t.Run("per peer", func(t *testing.T) {
		run(t, New[string, req](10, 100, 2), []step{
			{"offer a 1 10", "+a1"},
			{"offer a 2 10", ""},
			{"offer a 3 10", ""},
			{"offer a 4 10", "~a4:per peer"},
			{"offer b 1 10", ""}, // another peer is not affected
		})
	})
	t.Run("full: the largest peer gives up its newest", func(t *testing.T) {
		run(t, New[string, req](10, 4, 100), []step{
			{"offer x 1 10", "+x1"},
			{"offer a 1 10", ""},
			{"offer a 2 10", ""},
			{"offer a 3 10", ""},
			{"offer b 1 10", ""},
			{"offer c 1 10", "-a3"},      // a has 3 waiting, c would have 1
			{"offer c 2 10", "~c2:full"}, // a 2, c would have 2: not more
			{"offer b 2 10", "~b2:full"},
			{"done 10", "<a1"}, // x was admitted last; a, b, c began to wait at one turn
			{"done 10", "<b1"},
			{"done 10", "<c1"},
			{"done 10", "<a2"},
		})
	})
	t.Run("full: ties go to the newest waiter", func(t *testing.T) {
		run(t, New[string, req](10, 4, 100), []step{
			{"offer x 1 10", "+x1"},
			{"offer a 1 10", ""},
			{"offer b 1 10", ""},
			{"offer a 2 10", ""},
			{"offer b 2 10", ""},
			{"offer c 1 10", "-b2"},
		})
	})
}

func TestQueueEarliest(t *testing.T) {
	q := New[string, req](10, 100, 100)
	q.Offer("a", "a1", 10, 0)
	if e := q.Earliest(); e != 0 {
		t.Fatalf("Earliest %d with nobody waiting", e)
	}
	q.Offer("a", "a2", 10, 0)
	q.Offer("b", "b1", 10, 300)
	q.Offer("c", "c1", 10, 200)
	if e := q.Earliest(); e != 200 {
		t.Fatalf("Earliest %d, want 200 (a waiter without a deadline is skipped)", e)
	}
}

// Random operations keep the invariants: bytes held are what was
// admitted less what was given back, every request is accounted for
// exactly once (admitted, waiting, refused, evicted, expired or
// dropped), peers with waiters are exactly those the queue keeps, and
// no peer waits more than MaxPerPeer nor the queue more than MaxWaiting.
func TestQueueRandom(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 7))
		const limit, maxW, maxP = 100, 12, 5
		q := New[string, int](limit, maxW, maxP)
		state := map[int]string{} // request → "held", "waiting", "gone"
		size := map[int]int64{}
		var held int64
		var live []int // held requests
		admit := func(vs []int) {
			for _, v := range vs {
				if state[v] != "waiting" {
					t.Fatalf("seed %d: %d admitted while %q", seed, v, state[v])
				}
				state[v] = "held"
				held += size[v]
				live = append(live, v)
			}
		}
		gone := func(vs []int) {
			for _, v := range vs {
				if state[v] != "waiting" {
					t.Fatalf("seed %d: %d removed while %q", seed, v, state[v])
				}
				state[v] = "gone"
			}
		}
		next := 0
		for range 2000 {
			switch op := rng.IntN(10); {
			case op < 5:
				v := next
				next++
				size[v] = rng.Int64N(60) + 1
				peer := string(rune('a' + rng.IntN(4)))
				state[v] = "waiting"
				adm, ref, ev, ok := q.Offer(peer, v, size[v], rng.Int64N(1000))
				switch {
				case adm:
					admit([]int{v})
				case ref != Taken:
					state[v] = "gone"
				}
				if ok {
					gone([]int{ev})
				}
			case op < 8 && len(live) > 0:
				i := rng.IntN(len(live))
				v := live[i]
				live = append(live[:i], live[i+1:]...)
				state[v] = "gone"
				held -= size[v]
				admit(q.Done(size[v], nil))
			case op == 8:
				exp, adm := q.Expire(rng.Int64N(1000), nil, nil)
				gone(exp)
				admit(adm)
			default:
				dropped, adm := q.DropPeer(string(rune('a'+rng.IntN(4))), nil, nil)
				gone(dropped)
				admit(adm)
			}
			waiting, perPeer := 0, map[string]int{}
			for _, w := range q.wait {
				if state[w.v] != "waiting" {
					t.Fatalf("seed %d: %d in the queue while %q", seed, w.v, state[w.v])
				}
				waiting++
				perPeer[w.peer]++
			}
			for v, s := range state {
				if s == "waiting" && !inQueue(q, v) {
					t.Fatalf("seed %d: %d lost", seed, v)
				}
			}
			if q.Held() != held || waiting > maxW || len(perPeer) != q.Peers() {
				t.Fatalf("seed %d: held %d (want %d), %d waiting, peers %d vs %d", seed, q.Held(), held, waiting, len(perPeer), q.Peers())
			}
			for p, n := range perPeer {
				if n > maxP || q.peers[p].waiting != n {
					t.Fatalf("seed %d: peer %s has %d waiting (counted %d)", seed, p, n, q.peers[p].waiting)
				}
			}
			if q.Waiting() > 0 && held == 0 {
				t.Fatalf("seed %d: %d waiting with nothing held", seed, q.Waiting())
			}
		}
	}
}

func inQueue(q *Queue[string, int], v int) bool {
	for _, w := range q.wait {
		if w.v == v {
			return true
		}
	}
	return false
}
