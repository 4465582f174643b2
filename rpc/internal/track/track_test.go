package track

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// req is the test's request: a name for readable traces.
type req struct{ n int }

type entry = Entry[*req]

// run formats a Ready batch as "send a b; done c:timed out" for scripted
// checks.
func format(out *Ready[*req]) string {
	var b strings.Builder
	for _, e := range out.Send {
		fmt.Fprintf(&b, "send %d;", e.V.n)
	}
	for _, c := range out.Done {
		fmt.Fprintf(&b, "done %d:%s;", c.E.V.n, c.Reason)
	}
	out.Reset()
	return b.String()
}

func newEntry(n int) *entry { return &entry{V: &req{n}} }

func TestScript(t *testing.T) {
	tr := New[*req](2)
	var out Ready[*req]
	es := make([]*entry, 10)
	for i := range es {
		es[i] = newEntry(i)
	}
	step := func(want string) {
		t.Helper()
		if got := format(&out); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	// Two credits on key 7: 0 and 1 go, 2 and 3 wait, 4 jumps the queue.
	tr.Submit(es[0], 7, 100, 0, &out)
	tr.Submit(es[1], 7, 200, 0, &out)
	step("send 0;send 1;")
	tr.Submit(es[2], 7, 300, 0, &out)
	tr.Submit(es[3], 7, 0, 0, &out)
	tr.Submit(es[4], 7, 0, Front, &out)
	step("")
	if st := tr.EndpointStats(7); st.InFlight != 2 || st.Waiting != 3 {
		t.Fatalf("stats %+v", st)
	}
	// Another endpoint is not affected.
	tr.Submit(es[5], 8, 0, 0, &out)
	step("send 5;")
	// The reply to 1 frees a credit: the front-queued 4 goes.
	if tr.Reply(es[1].ID(), &out) == nil {
		t.Fatal("reply not matched")
	}
	step("send 4;done 1:ok;")
	// A second reply to 1 is late.
	if tr.Reply(es[1].ID(), &out) != nil {
		t.Fatal("late reply matched")
	}
	step("")
	// Time 150: 0 expires; 2 goes.
	if n := tr.Expire(150, &out); n != 1 {
		t.Fatalf("expired %d", n)
	}
	step("send 2;done 0:timed out;")
	// The reply to 0 arrives after its timeout: late, nothing happens.
	if tr.Reply(es[0].ID(), &out) != nil {
		t.Fatal("reply after timeout matched")
	}
	// Abort queued 3.
	if !tr.Finish(es[3].ID(), Canceled, &out) {
		t.Fatal("abort failed")
	}
	step("done 3:canceled;")
	// Time 300: 2 expires (sent); nothing is waiting.
	tr.Expire(300, &out)
	step("done 2:timed out;")
	if d, ok := tr.NextDeadline(); ok {
		t.Fatalf("deadline %d left", d)
	}
	tr.Submit(es[6], 7, 0, 0, &out)
	tr.Submit(es[7], 7, 0, 0, &out)
	step("send 6;")
	tr.FailKey(7, Excluded, &out)
	step("done 6:excluded;done 7:excluded;done 4:excluded;") // slot order
	if tr.Len() != 1 {
		t.Fatalf("len %d", tr.Len())
	}
	st := tr.Stats()
	if st.Replied != 1 || st.TimedOut != 2 || st.Canceled != 1 || st.Excluded != 3 || st.LateReplies != 2 {
		t.Fatalf("stats %+v", st)
	}
	if es[3].State() != Free || tr.Lookup(es[3].ID()) != nil {
		t.Fatal("completed entry still tracked")
	}
}

// model is a naive reference tracker: slices and linear scans.
type model struct {
	credits int
	reqs    []*mreq // all tracked, in submission order
	queues  map[uint64][]*mreq
	out     []string
}

type mreq struct {
	n        int
	key      uint64
	deadline int64
	sent     bool
}

func (m *model) inflight(key uint64) int {
	c := 0
	for _, r := range m.reqs {
		if r.key == key && r.sent {
			c++
		}
	}
	return c
}

func (m *model) submit(n int, key uint64, deadline int64, front bool) {
	r := &mreq{n: n, key: key, deadline: deadline}
	m.reqs = append(m.reqs, r)
	if m.credits == 0 || m.inflight(key) < m.credits {
		r.sent = true
		m.out = append(m.out, fmt.Sprintf("send %d;", n))
		return
	}
	if front {
		m.queues[key] = append([]*mreq{r}, m.queues[key]...)
	} else {
		m.queues[key] = append(m.queues[key], r)
	}
}

func (m *model) remove(r *mreq, why Reason) {
	m.reqs = slices.DeleteFunc(m.reqs, func(x *mreq) bool { return x == r })
	m.queues[r.key] = slices.DeleteFunc(m.queues[r.key], func(x *mreq) bool { return x == r })
	m.out = append(m.out, fmt.Sprintf("done %d:%s;", r.n, why))
}

func (m *model) drain(key uint64) {
	for len(m.queues[key]) > 0 && (m.credits == 0 || m.inflight(key) < m.credits) {
		r := m.queues[key][0]
		m.queues[key] = m.queues[key][1:]
		r.sent = true
		m.out = append(m.out, fmt.Sprintf("send %d;", r.n))
	}
}

func (m *model) find(n int) *mreq {
	for _, r := range m.reqs {
		if r.n == n {
			return r
		}
	}
	return nil
}

// TestAgainstModel drives the tracker and the naive model with the same
// random operations and compares their outputs and invariants.
func TestAgainstModel(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 42))
		credits := rng.IntN(4) // 0: unlimited
		tr := New[*req](credits)
		m := &model{credits: credits, queues: map[uint64][]*mreq{}}
		var out Ready[*req]
		entries := map[int]*entry{}
		now := int64(0)
		next := 0
		var trace []string
		for step := range 300 {
			var op string
			switch k := rng.IntN(10); {
			case k < 4:
				n := next
				next++
				key := uint64(rng.IntN(3))
				var dl int64
				if rng.IntN(3) > 0 {
					dl = now + 1 + int64(rng.IntN(50))
				}
				front := rng.IntN(4) == 0
				op = fmt.Sprintf("submit %d key %d dl %d front %v", n, key, dl, front)
				e := newEntry(n)
				entries[n] = e
				tr.Submit(e, key, dl, flagsOf(front), &out)
				m.submit(n, key, dl, front)
			case k < 6 && len(m.reqs) > 0:
				r := m.reqs[rng.IntN(len(m.reqs))]
				op = fmt.Sprintf("reply %d", r.n)
				got := tr.Reply(entries[r.n].ID(), &out)
				if r.sent {
					if got == nil {
						t.Fatalf("seed %d step %d: reply to sent %d not matched", seed, step, r.n)
					}
					m.remove(r, OK)
					m.drain(r.key)
				} else if got != nil {
					t.Fatalf("seed %d step %d: reply to queued %d matched", seed, step, r.n)
				}
			case k < 7 && len(m.reqs) > 0:
				r := m.reqs[rng.IntN(len(m.reqs))]
				op = fmt.Sprintf("abort %d", r.n)
				tr.Finish(entries[r.n].ID(), Canceled, &out)
				m.remove(r, Canceled)
				m.drain(r.key)
			case k < 9:
				now += int64(rng.IntN(20))
				op = fmt.Sprintf("expire %d", now)
				tr.Expire(now, &out)
				var due []*mreq
				for _, r := range m.reqs {
					if r.deadline != 0 && r.deadline <= now {
						due = append(due, r)
					}
				}
				slices.SortStableFunc(due, func(a, b *mreq) int {
					if a.deadline != b.deadline {
						return int(a.deadline - b.deadline)
					}
					return a.n - b.n // ids grow with n within a run
				})
				keys := []uint64{}
				for _, r := range due {
					m.remove(r, TimedOut)
					if !slices.Contains(keys, r.key) {
						keys = append(keys, r.key)
					}
				}
				for _, k := range keys {
					m.drain(k)
				}
			default:
				key := uint64(rng.IntN(3))
				op = fmt.Sprintf("failkey %d", key)
				tr.FailKey(key, Excluded, &out)
				for _, r := range slices.Clone(m.reqs) {
					if r.key == key {
						m.remove(r, Excluded)
					}
				}
			}
			trace = append(trace, op)
			// Compare outputs as multisets per step (the order of drains
			// across several endpoints may differ), and sends in order per
			// endpoint.
			got := strings.SplitAfter(format(&out), ";")
			want := m.out
			m.out = nil
			got = slices.DeleteFunc(got, func(s string) bool { return s == "" })
			gs, ws := slices.Clone(got), slices.Clone(want)
			slices.Sort(gs)
			slices.Sort(ws)
			if !slices.Equal(gs, ws) {
				t.Fatalf("seed %d step %d (%s): got %v, want %v\ntrace: %v", seed, step, op, got, want, trace)
			}
			// Invariants.
			for key := range uint64(3) {
				st := tr.EndpointStats(key)
				if credits > 0 && st.InFlight > credits {
					t.Fatalf("seed %d: %d in flight to %d with %d credits", seed, st.InFlight, key, credits)
				}
				if st.InFlight != m.inflight(key) || st.Waiting != len(m.queues[key]) {
					t.Fatalf("seed %d step %d: key %d stats %+v, model %d/%d", seed, step, key, st, m.inflight(key), len(m.queues[key]))
				}
			}
			if tr.Len() != len(m.reqs) {
				t.Fatalf("seed %d: tracker holds %d, model %d", seed, tr.Len(), len(m.reqs))
			}
		}
	}
}

// TestExactlyOnce: whatever order reply, timeout, abort and failure come
// in, an entry completes once.
func TestExactlyOnce(t *testing.T) {
	events := []string{"reply", "expire", "abort", "fail"}
	perms := [][]int{}
	var permute func(p []int, k int)
	permute = func(p []int, k int) {
		if k == len(p) {
			perms = append(perms, slices.Clone(p))
			return
		}
		for i := k; i < len(p); i++ {
			p[k], p[i] = p[i], p[k]
			permute(p, k+1)
			p[k], p[i] = p[i], p[k]
		}
	}
	permute([]int{0, 1, 2, 3}, 0)
	for _, p := range perms {
		tr := New[*req](1)
		var out Ready[*req]
		e := newEntry(1)
		id := tr.Submit(e, 0, 10, 0, &out)
		out.Reset()
		done := 0
		for _, i := range p {
			switch events[i] {
			case "reply":
				tr.Reply(id, &out)
			case "expire":
				tr.Expire(10, &out)
			case "abort":
				tr.Finish(id, Canceled, &out)
			case "fail":
				tr.FailIf(func(*entry) bool { return true }, Failed, &out)
			}
			done += len(out.Done)
			out.Reset()
		}
		if done != 1 {
			t.Fatalf("order %v: %d completions", p, done)
		}
	}
}

func TestSetCreditsDrains(t *testing.T) {
	tr := New[*req](1)
	var out Ready[*req]
	for i := range 4 {
		tr.Submit(newEntry(i), 1, 0, 0, &out)
	}
	if got := format(&out); got != "send 0;" {
		t.Fatal(got)
	}
	tr.SetCredits(3, &out)
	if got := format(&out); got != "send 1;send 2;" {
		t.Fatal(got)
	}
	tr.SetCredits(0, &out)
	if got := format(&out); got != "send 3;" {
		t.Fatal(got)
	}
}

func TestIDsNotReused(t *testing.T) {
	tr := New[*req](0)
	var out Ready[*req]
	seen := map[uint64]bool{}
	e := newEntry(0)
	for range 1000 {
		id := tr.Submit(e, 0, 0, 0, &out)
		if id == 0 || seen[id] {
			t.Fatalf("id %#x reused", id)
		}
		seen[id] = true
		tr.Reply(id, &out)
		out.Reset()
	}
	if len(tr.slots) != 1 {
		t.Fatalf("%d slots for one request at a time", len(tr.slots))
	}
}

func BenchmarkSubmitReply(b *testing.B) {
	tr := New[*req](32)
	var out Ready[*req]
	es := make([]*entry, 16)
	for i := range es {
		es[i] = newEntry(i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e := es[i%16]
		id := tr.Submit(e, uint64(i%4), int64(i+1000), 0, &out)
		tr.Reply(id, &out)
		out.Reset()
	}
}

func flagsOf(front bool) SubmitFlags {
	if front {
		return Front
	}
	return 0
}

func TestBypass(t *testing.T) {
	tr := New[*req](1)
	var out Ready[*req]
	tr.Submit(newEntry(0), 5, 0, 0, &out)
	tr.Submit(newEntry(1), 5, 0, 0, &out)
	if got := format(&out); got != "send 0;" {
		t.Fatal(got)
	}
	b := newEntry(2)
	tr.Submit(b, 5, 0, Bypass, &out)
	if got := format(&out); got != "send 2;" {
		t.Fatal(got)
	}
	if st := tr.EndpointStats(5); st.InFlight != 1 || st.Waiting != 1 {
		t.Fatalf("bypass took a credit: %+v", st)
	}
	tr.Reply(b.ID(), &out)
	if got := format(&out); got != "done 2:ok;" {
		t.Fatal(got)
	}
	if tr.Len() != 2 {
		t.Fatal(tr.Len())
	}
}
