package swim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// rig drives one machine by hand: the test plays every other member.
type rig struct {
	t   *testing.T
	m   *Machine
	out []Envelope // what the last step sent (copied)
	ev  []Event
}

// newRig makes machine self with the given peers, all alive at
// incarnation 0.
func newRig(t *testing.T, cfg Config, self ID, peers ...ID) *rig {
	t.Helper()
	m := New(self, cfg, rand.New(rand.NewPCG(7, uint64(self))))
	for _, p := range peers {
		m.Add(p, 0)
	}
	return &rig{t: t, m: m}
}

func (r *rig) collect() {
	r.out = r.out[:0]
	for _, e := range r.m.Outbox() {
		e.Msg.Updates = append([]Update(nil), e.Msg.Updates...)
		r.out = append(r.out, e)
	}
	r.ev = append(r.ev[:0], r.m.Events()...)
}

func (r *rig) tick(now time.Duration) *rig {
	r.m.Tick(now)
	r.collect()
	return r
}

// tickNext ticks at Next and returns that time.
func (r *rig) tickNext() time.Duration {
	at := r.m.Next()
	r.tick(at)
	return at
}

func (r *rig) recv(now time.Duration, from ID, msg Message) *rig {
	r.m.Receive(now, from, &msg)
	r.collect()
	return r
}

// sent returns the envelopes of kind k sent in the last step.
func (r *rig) sent(k Kind) []Envelope {
	var es []Envelope
	for _, e := range r.out {
		if e.Msg.Kind == k {
			es = append(es, e)
		}
	}
	return es
}

// one returns the only envelope of kind k sent in the last step.
func (r *rig) one(k Kind) Envelope {
	r.t.Helper()
	es := r.sent(k)
	if len(es) != 1 {
		r.t.Fatalf("want one %v, sent %s", k, fmtOut(r.out))
	}
	return es[0]
}

func (r *rig) state(id ID) Member {
	st, ok := r.m.State(id)
	if !ok {
		r.t.Fatalf("member %d unknown", id)
	}
	return st
}

func (r *rig) wantState(id ID, s State, inc uint64) {
	r.t.Helper()
	if st := r.state(id); st.State != s || st.Incarnation != inc {
		r.t.Fatalf("member %d is %v@%d, want %v@%d", id, st.State, st.Incarnation, s, inc)
	}
}

func (r *rig) wantEvents(want string) {
	r.t.Helper()
	var b strings.Builder
	for _, e := range r.ev {
		fmt.Fprintf(&b, "%d:%v@%d;", e.ID, e.State, e.Incarnation)
	}
	if b.String() != want {
		r.t.Fatalf("events %q, want %q", b.String(), want)
	}
}

func fmtOut(es []Envelope) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%v->%d seq=%d target=%d [", e.Msg.Kind, e.To, e.Msg.Seq, e.Msg.Target)
		for _, u := range e.Msg.Updates {
			fmt.Fprintf(&b, " %d:%v@%d/%d", u.ID, u.State, u.Incarnation, u.Origin)
		}
		b.WriteString(" ]; ")
	}
	return b.String()
}

func upd(id ID, s State, inc uint64, origin ID) Update {
	return Update{Member: Member{ID: id, Incarnation: inc, State: s}, Origin: origin}
}

func ack(seq uint32, target ID, ups ...Update) Message {
	return Message{Kind: KindAck, Seq: seq, Target: target, Updates: ups}
}

func nack(seq uint32, target ID) Message {
	return Message{Kind: KindNack, Seq: seq, Target: target}
}

// advance ticks at Next until Next passes until, playing the other
// members: pings to members not in down are acked, ping-reqs are acked by
// the helper when the target is up and nacked when it is down. Events of
// every step are appended to all.
func (r *rig) advance(until time.Duration, all *[]Event, down ...ID) {
	r.t.Helper()
	isDown := func(id ID) bool { return slices.Contains(down, id) }
	for r.m.Next() <= until {
		now := r.tickNext()
		for len(r.out) > 0 || len(r.ev) > 0 {
			if all != nil {
				*all = append(*all, r.ev...)
			}
			out := append([]Envelope(nil), r.out...)
			r.out, r.ev = r.out[:0], r.ev[:0]
			for _, e := range out {
				switch e.Msg.Kind {
				case KindPing:
					if !isDown(e.To) {
						r.recv(now+ms, e.To, ack(e.Msg.Seq, e.To))
					}
				case KindPingReq:
					if isDown(e.Msg.Target) {
						r.recv(now+ms, e.To, nack(e.Msg.Seq, e.Msg.Target))
					} else {
						r.recv(now+ms, e.To, ack(e.Msg.Seq, e.Msg.Target))
					}
				}
			}
		}
	}
}
