package swim

import (
	"slices"
	"testing"
	"time"
)

var (
	ms  = time.Millisecond
	sec = time.Second
)

// TestDirectAck: a ping carries the target's and the prober's states, the
// ack ends the probe, nothing else happens.
func TestDirectAck(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2, 3)
	r.tick(0)
	if len(r.out) != 0 {
		t.Fatalf("sent before the jittered start: %s", fmtOut(r.out))
	}
	at := r.tickNext()
	if at >= sec {
		t.Fatalf("first probe at %v, want within one period", at)
	}
	p := r.one(KindPing)
	if p.Msg.Target != p.To {
		t.Fatalf("ping target %d to %d", p.Msg.Target, p.To)
	}
	ups := p.Msg.Updates
	if len(ups) != 2 || ups[0].Member != (Member{ID: p.To}) || ups[1].Member != (Member{ID: 0}) {
		t.Fatalf("mandatory entries: %s", fmtOut(r.out))
	}
	if r.m.Next() != at+900*ms {
		t.Fatalf("deadline %v, want ping timeout after %v", r.m.Next(), at)
	}
	r.recv(at+10*ms, p.To, ack(p.Msg.Seq, p.To, upd(p.To, Alive, 0, p.To)))
	if len(r.out) != 0 {
		t.Fatalf("sent %s", fmtOut(r.out))
	}
	if r.m.Next() != at+sec {
		t.Fatalf("next probe at %v, want %v", r.m.Next(), at+sec)
	}
	// The next probe goes to another member; a full pass visits each once.
	seen := map[ID]int{p.To: 1}
	for range 5 {
		at = r.tickNext()
		p = r.one(KindPing)
		seen[p.To]++
		r.recv(at+ms, p.To, ack(p.Msg.Seq, p.To))
	}
	if seen[1] != 2 || seen[2] != 2 || seen[3] != 2 {
		t.Fatalf("round robin over two passes: %v", seen)
	}
	if r.m.Stats().Probes != 6 || r.m.Stats().ProbeFails != 0 || r.m.Awareness() != 1 {
		t.Fatalf("stats %+v awareness %d", r.m.Stats(), r.m.Awareness())
	}
}

// TestAnyMessageFromTargetAcks: a request from the target during its probe
// counts as its ack (DAOS).
func TestAnyMessageFromTargetAcks(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2)
	r.tick(0)
	at := r.tickNext()
	p := r.one(KindPing)
	r.recv(at+ms, p.To, Message{Kind: KindPing, Seq: 99, Target: 0})
	if a := r.one(KindAck); a.To != p.To || a.Msg.Seq != 99 || a.Msg.Target != 0 {
		t.Fatalf("answer %s", fmtOut(r.out))
	}
	r.tick(at + 900*ms)
	if len(r.sent(KindPingReq)) != 0 {
		t.Fatal("ping-req after the target spoke")
	}
}

// TestIndirectAck: a missed ack sends k ping-reqs to alive members other
// than the target; a helper's ack ends the probe.
func TestIndirectAck(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2, 3, 4, 5)
	r.tick(0)
	at := r.tickNext()
	p := r.one(KindPing)
	r.tick(at + 900*ms)
	reqs := r.sent(KindPingReq)
	if len(reqs) != 2 {
		t.Fatalf("ping-reqs: %s", fmtOut(r.out))
	}
	for _, q := range reqs {
		if q.To == p.To || q.To == 0 || q.Msg.Target != p.To || q.Msg.Seq != p.Msg.Seq {
			t.Fatalf("bad ping-req %s", fmtOut(r.out))
		}
		// target, self, helper
		if u := q.Msg.Updates; len(u) != 3 || u[0].ID != p.To || u[1].ID != 0 || u[2].ID != q.To {
			t.Fatalf("ping-req entries %s", fmtOut(r.out))
		}
	}
	if reqs[0].To == reqs[1].To {
		t.Fatal("same helper twice")
	}
	if r.m.Next() != at+900*ms+1800*ms {
		t.Fatalf("indirect deadline %v", r.m.Next())
	}
	// A wrong seq is not an ack.
	r.recv(at+sec, reqs[0].To, ack(p.Msg.Seq+1, p.To))
	r.recv(at+sec, reqs[0].To, ack(p.Msg.Seq, p.To))
	r.tick(at + 2700*ms)
	r.wantState(p.To, Alive, 0)
	r.wantEvents("")
	if st := r.m.Stats(); st.ProbeFails != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSuspectThenDead: no ack at all, but both helpers nack: the target is
// suspected (self origin) without harm to local health, then declared dead
// at the unconfirmed suspicion timeout, then no longer probed.
func TestSuspectThenDead(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2, 3)
	r.tick(0)
	at := r.tickNext()
	p := r.one(KindPing)
	r.tick(at + 900*ms)
	for _, q := range r.sent(KindPingReq) {
		r.recv(at+1800*ms, q.To, nack(q.Msg.Seq, p.To))
	}
	susAt := at + 2700*ms
	r.tick(susAt)
	r.wantState(p.To, Suspect, 0)
	r.wantEvents(itoa(p.To) + ":suspect@0;")
	if r.m.Awareness() != 1 {
		t.Fatalf("awareness %d after a probe the helpers nacked", r.m.Awareness())
	}
	if len(r.sent(KindPing)) != 1 { // the next probe starts at once: the period is over
		t.Fatalf("next probe: %s", fmtOut(r.out))
	}
	// The suspicion spreads on the next messages with self as origin.
	found := false
	for _, u := range r.out[0].Msg.Updates {
		if u == upd(p.To, Suspect, 0, 0) {
			found = true
		}
	}
	if !found {
		t.Fatalf("suspicion not piggybacked: %s", fmtOut(r.out))
	}
	// Keep acking the others; the suspect is still probed (and told).
	deadAt := susAt + 20*sec // n=4: k=2, no confirmation: SuspicionTimeout
	probedSuspect := false
	for now := susAt; now < deadAt; {
		for _, e := range r.sent(KindPing) {
			if e.To != p.To {
				r.recv(now+ms, e.To, ack(e.Msg.Seq, e.To))
			} else {
				probedSuspect = true
				if e.Msg.Updates[0] != upd(p.To, Suspect, 0, 0) {
					t.Fatalf("ping to suspect does not tell it: %s", fmtOut(r.out))
				}
			}
		}
		for _, q := range r.sent(KindPingReq) {
			r.recv(now+ms, q.To, nack(q.Msg.Seq, q.Msg.Target))
		}
		now = r.tickNext()
	}
	if !probedSuspect {
		t.Fatal("suspect not probed")
	}
	r.wantState(p.To, Dead, 0)
	if r.ev[len(r.ev)-1].Member != (Member{ID: p.To, State: Dead}) || r.ev[len(r.ev)-1].Time != deadAt {
		t.Fatalf("events %+v, want dead at %v", r.ev, deadAt)
	}
	// Dead members are not probed.
	for range 10 {
		now := r.tickNext()
		for _, e := range r.sent(KindPing) {
			if e.To == p.To {
				t.Fatal("dead member probed")
			}
			r.recv(now+ms, e.To, ack(e.Msg.Seq, e.To))
		}
	}
}

func itoa(id ID) string { return string(rune('0' + id)) }

// TestLocalHealth: probes that fail without nacks raise the awareness
// score by the missing nacks, which scales the period and ping timeouts;
// successful probes bring it down one at a time.
func TestLocalHealth(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2, 3, 4, 5)
	r.tick(0)
	at := r.tickNext()
	r.tick(at + 900*ms)
	r.tick(at + 2700*ms) // no nack, no ack
	if got := r.m.Awareness(); got != 3 {
		t.Fatalf("awareness %d, want 1+2 missing nacks", got)
	}
	p := r.one(KindPing) // the next probe, scaled
	at = at + 2700*ms
	if r.m.Next() != at+3*900*ms {
		t.Fatalf("scaled ping timeout: next %v, want %v", r.m.Next(), at+3*900*ms)
	}
	r.recv(at+ms, p.To, ack(p.Msg.Seq, p.To))
	if r.m.Awareness() != 2 {
		t.Fatalf("awareness %d after a success", r.m.Awareness())
	}
	if r.m.Next() != at+3*sec {
		t.Fatalf("scaled period: next %v, want %v", r.m.Next(), at+3*sec)
	}
	// It is capped at AwarenessMax.
	for range 100 {
		r.tickNext()
	}
	if r.m.Awareness() != 8 {
		t.Fatalf("awareness %d, want the cap 8", r.m.Awareness())
	}
	// Refuting a suspicion of oneself also counts against local health.
	r2 := newRig(t, Config{}, 0, 1, 2)
	r2.recv(0, 1, Message{Kind: KindPing, Seq: 1, Target: 0, Updates: []Update{upd(0, Suspect, 0, 2)}})
	if r2.m.Awareness() != 2 {
		t.Fatalf("awareness %d after a refutation", r2.m.Awareness())
	}
}

// TestRefutation: a member that hears itself suspected or dead at its
// incarnation or above takes a higher one and says so first in every
// message; older accusations are ignored.
func TestRefutation(t *testing.T) {
	r := newRig(t, Config{Incarnation: 5}, 0, 1, 2)
	r.recv(0, 1, Message{Kind: KindPing, Seq: 1, Target: 0, Updates: []Update{upd(0, Suspect, 5, 2)}})
	if r.m.Self().Incarnation != 6 {
		t.Fatalf("incarnation %d after refuting", r.m.Self().Incarnation)
	}
	a := r.one(KindAck)
	if a.Msg.Updates[0] != upd(0, Alive, 6, 0) {
		t.Fatalf("ack does not refute: %s", fmtOut(r.out))
	}
	// The accuser is told directly.
	if p := r.one(KindPing); p.To != 2 || p.Msg.Updates[1] != upd(0, Alive, 6, 0) {
		t.Fatalf("refutation to the accuser: %s", fmtOut(r.out))
	}
	r.recv(ms, 1, Message{Kind: KindPing, Seq: 2, Target: 0, Updates: []Update{upd(0, Suspect, 5, 2), upd(0, Dead, 4, 2), upd(0, Alive, 9, 0)}})
	if r.m.Self().Incarnation != 6 {
		t.Fatalf("stale accusations moved incarnation to %d", r.m.Self().Incarnation)
	}
	if len(r.sent(KindPing)) != 0 {
		t.Fatalf("stale accusers pinged: %s", fmtOut(r.out))
	}
	r.recv(2*ms, 1, Message{Kind: KindPing, Seq: 3, Target: 0, Updates: []Update{upd(0, Dead, 8, 2)}})
	if r.m.Self().Incarnation != 9 {
		t.Fatalf("incarnation %d after refuting a death at 8", r.m.Self().Incarnation)
	}
	if r.m.Stats().Refutations != 2 {
		t.Fatalf("stats %+v", r.m.Stats())
	}
}

// TestHelper: one ping per target however many ask; acks forwarded with
// each requester's seq; nacks at PingTimeout; ping-reqs about self and
// unknown members.
func TestHelper(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2, 3)
	r.tick(10 * sec) // start; the first probe is later
	now := 10 * sec
	r.recv(now, 1, Message{Kind: KindPingReq, Seq: 11, Target: 2})
	p := r.one(KindPing)
	if p.To != 2 || p.Msg.Target != 2 {
		t.Fatalf("helper ping %s", fmtOut(r.out))
	}
	r.recv(now+ms, 3, Message{Kind: KindPingReq, Seq: 33, Target: 2})
	if len(r.sent(KindPing)) != 0 {
		t.Fatal("second ping for the same target")
	}
	r.recv(now+ms, 3, Message{Kind: KindPingReq, Seq: 33, Target: 2}) // duplicate
	r.recv(now+2*ms, 2, ack(p.Msg.Seq, 2))
	acks := r.sent(KindAck)
	if len(acks) != 2 || acks[0].To != 1 || acks[0].Msg.Seq != 11 || acks[1].To != 3 || acks[1].Msg.Seq != 33 {
		t.Fatalf("forwarded acks %s", fmtOut(r.out))
	}
	for _, a := range acks {
		if a.Msg.Target != 2 || a.Msg.Updates[0].ID != 2 || a.Msg.Updates[1].ID != 0 || a.Msg.Updates[2].ID != a.To {
			t.Fatalf("ack entries %s", fmtOut(r.out))
		}
	}
	// No answer: nack at PingTimeout.
	now += sec / 10
	r.recv(now, 1, Message{Kind: KindPingReq, Seq: 12, Target: 3})
	r.one(KindPing)
	if r.m.Next() > now+900*ms {
		t.Fatalf("next %v, want the nack deadline %v", r.m.Next(), now+900*ms)
	}
	// Tick at Next (the machine's own probes go on meanwhile).
	for r.m.Next() < now+900*ms {
		at := r.tickNext()
		if r.m.Stats().Stalls != 0 || len(r.sent(KindNack)) != 0 {
			t.Fatalf("at %v: %s", at, fmtOut(r.out))
		}
	}
	r.tickNext()
	if n := r.one(KindNack); n.To != 1 || n.Msg.Seq != 12 || n.Msg.Target != 3 {
		t.Fatalf("nack %s", fmtOut(r.out))
	}
	// About self: ack at once. About an unknown member: nack at once.
	r.recv(now+sec, 1, Message{Kind: KindPingReq, Seq: 13, Target: 0})
	if a := r.one(KindAck); a.To != 1 || a.Msg.Seq != 13 || a.Msg.Target != 0 {
		t.Fatalf("self ping-req %s", fmtOut(r.out))
	}
	r.recv(now+sec, 1, Message{Kind: KindPingReq, Seq: 14, Target: 77})
	if n := r.one(KindNack); n.To != 1 || n.Msg.Seq != 14 {
		t.Fatalf("unknown ping-req %s", fmtOut(r.out))
	}
}

// TestHelperLimit: beyond HelperLimit served ping-reqs, a request is nacked
// at once.
func TestHelperLimit(t *testing.T) {
	r := newRig(t, Config{HelperLimit: 2}, 0, 1, 2, 3, 4)
	r.tick(10 * sec)
	r.recv(10*sec, 1, Message{Kind: KindPingReq, Seq: 1, Target: 2})
	r.recv(10*sec, 1, Message{Kind: KindPingReq, Seq: 2, Target: 3})
	r.recv(10*sec, 1, Message{Kind: KindPingReq, Seq: 3, Target: 4})
	if n := r.one(KindNack); n.Msg.Seq != 3 || len(r.sent(KindPing)) != 0 {
		t.Fatalf("over the limit: %s", fmtOut(r.out))
	}
}

// TestSendFailed: a probe ping the transport could not send moves straight
// to indirect probing.
func TestSendFailed(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2, 3)
	r.tick(0)
	at := r.tickNext()
	p := r.one(KindPing)
	r.m.SendFailed(at+ms, p.To, &p.Msg)
	if r.m.Next() != at+ms {
		t.Fatalf("next %v after a failed send, want %v", r.m.Next(), at+ms)
	}
	r.tick(at + ms)
	if len(r.sent(KindPingReq)) != 2 {
		t.Fatalf("after failed send: %s", fmtOut(r.out))
	}
}

// TestRemove: a removed member's probe, suspicion and queued updates go.
func TestRemove(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2, 3)
	r.recv(0, 1, Message{Kind: KindPing, Seq: 1, Target: 0, Updates: []Update{upd(2, Suspect, 0, 1)}})
	r.m.Remove(2)
	if _, ok := r.m.State(2); ok || r.m.Len() != 3 || len(r.m.susp) != 0 {
		t.Fatalf("after remove: len %d susp %v", r.m.Len(), r.m.susp)
	}
	for _, q := range r.m.queue {
		if q.u.ID == 2 {
			t.Fatal("queued update of a removed member")
		}
	}
	// A ping-req served about a member that is then removed is nacked.
	r.recv(ms, 1, Message{Kind: KindPingReq, Seq: 21, Target: 3})
	r.one(KindPing)
	r.m.Remove(3)
	r.collect()
	if n := r.one(KindNack); n.To != 1 || n.Msg.Seq != 21 || len(r.m.helpers) != 0 {
		t.Fatalf("after removing the target: %s", fmtOut(r.out))
	}
	r.m.Add(3, 0)
	got := r.m.Members(nil)
	if !slices.Equal(got, []Member{{ID: 0}, {ID: 1}, {ID: 3}}) {
		t.Fatalf("members %v", got)
	}
	// Adding back at a higher incarnation, and an existing one at a
	// higher incarnation revives it.
	r.m.Add(2, 4)
	r.wantState(2, Alive, 4)
	r.recv(ms, 1, Message{Kind: KindAck, Seq: 9, Target: 1, Updates: []Update{upd(3, Dead, 0, 1)}})
	r.wantState(3, Dead, 0)
	r.m.Add(3, 0)
	r.wantState(3, Dead, 0)
	r.m.Add(3, 1)
	r.wantState(3, Alive, 1)
	r.collect()
	r.wantEvents("3:alive@1;")
}
