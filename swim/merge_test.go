package swim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// noStall is the default configuration for tests that feed inputs
// without ticking at Next.
var noStall = Config{StallThreshold: time.Hour}

// refMerge is the reference model of the merge rules, written plainly: the
// update wins if (incarnation, state) is greater, states ordered
// Alive < Suspect < Dead.
func refMerge(local Member, u Update) Member {
	if u.Incarnation > local.Incarnation || u.Incarnation == local.Incarnation && u.State > local.State {
		return u.Member
	}
	return local
}

// TestMergeMatrix checks every (local state, update state, older / equal /
// newer incarnation) against a table written by hand, and the machine
// against the same table.
func TestMergeMatrix(t *testing.T) {
	states := []State{Alive, Suspect, Dead}
	for _, ls := range states {
		for _, us := range states {
			for _, uinc := range []uint64{4, 5, 6} {
				var applies bool
				switch uinc {
				case 4:
					applies = false
				case 6:
					applies = true
				case 5:
					applies = ls == Alive && (us == Suspect || us == Dead) || ls == Suspect && us == Dead
				}
				local := Member{ID: 2, Incarnation: 5, State: ls}
				u := upd(2, us, uinc, 1)
				want := local
				if applies {
					want = u.Member
				}
				if got := refMerge(local, u); got != want {
					t.Fatalf("model: %v@5 + %v@%d = %v, table says %v", ls, us, uinc, got, want)
				}
				// The machine: bring 2 to local, then apply u from 1.
				r := newRig(t, Config{}, 0, 1, 2, 3)
				r.m.Add(2, 5)
				switch ls {
				case Suspect:
					r.recv(0, 3, Message{Kind: KindAck, Target: 3, Updates: []Update{upd(2, Suspect, 5, 3)}})
				case Dead:
					r.recv(0, 3, Message{Kind: KindAck, Target: 3, Updates: []Update{upd(2, Dead, 5, 3)}})
				}
				r.wantState(2, ls, 5)
				r.recv(ms, 1, Message{Kind: KindAck, Target: 1, Updates: []Update{u}})
				if got := r.state(2); got != want {
					t.Fatalf("machine: %v@5 + %v@%d = %v, want %v", ls, us, uinc, got, want)
				}
				// An event exactly when the state changed.
				wantEv := ""
				if want.State != ls {
					wantEv = fmt.Sprintf("2:%v@%d;", want.State, want.Incarnation)
				}
				r.wantEvents(wantEv)
				if r.ev != nil && len(r.ev) == 1 && r.ev[0].From != 1 {
					t.Fatalf("event from %d", r.ev[0].From)
				}
			}
		}
	}
}

// TestMergeAgainstModel drives a machine with random messages (random
// senders, some unknown; random updates, some about self or unknown
// members) and checks its table against the reference model after each.
func TestMergeAgainstModel(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 9))
		const self = 0
		peers := []ID{1, 2, 3, 4}
		r := newRig(t, Config{}, self, peers...)
		model := map[ID]Member{}
		for _, p := range peers {
			model[p] = Member{ID: p}
		}
		selfInc := uint64(0)
		for step := range 60 {
			from := ID(rng.IntN(6)) // 5: unknown; 0: self (ignored)
			var ups []Update
			for range rng.IntN(4) {
				ups = append(ups, upd(ID(rng.IntN(6)), State(rng.IntN(3)), uint64(rng.IntN(4)), ID(rng.IntN(6))))
			}
			kind := Kind(1 + rng.IntN(4))
			msg := Message{Kind: kind, Seq: uint32(rng.IntN(5)), Target: ID(rng.IntN(6)), Updates: ups}
			// Model.
			if from != self {
				fm, known := model[from]
				trusted := known && fm.State != Dead
				for _, u := range ups {
					if u.ID == self {
						if u.State != Alive && u.Incarnation >= selfInc {
							selfInc = u.Incarnation + 1
						}
						continue
					}
					local, known := model[u.ID]
					if !known {
						continue
					}
					if !trusted && (u.State != Alive || u.ID != from) {
						continue
					}
					model[u.ID] = refMerge(local, u)
				}
			}
			r.recv(time.Duration(step)*ms, from, msg)
			for _, p := range peers {
				if got := r.state(p); got != model[p] {
					t.Fatalf("seed %d step %d: %d is %v, model %v (msg from %d %+v)", seed, step, p, got, model[p], from, msg)
				}
			}
			if got := r.m.Self().Incarnation; got != selfInc {
				t.Fatalf("seed %d step %d: self incarnation %d, model %d", seed, step, got, selfInc)
			}
		}
	}
}

// TestUntrusted: an unknown sender, or one dead here, is believed only
// about this member (so it can refute) and about its own return.
func TestUntrusted(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2, 3)
	r.recv(0, 9, ack(0, 9, upd(1, Suspect, 0, 9), upd(2, Dead, 3, 9), upd(3, Alive, 4, 9)))
	r.wantState(1, Alive, 0)
	r.wantState(2, Alive, 0)
	r.wantState(3, Alive, 0)
	r.recv(ms, 9, ack(0, 9, upd(0, Suspect, 0, 9)))
	if r.m.Self().Incarnation != 1 {
		t.Fatal("no refutation of an untrusted accusation")
	}
	r.recv(2*ms, 1, ack(0, 1, upd(2, Dead, 0, 1)))
	r.wantState(2, Dead, 0)
	r.recv(3*ms, 2, ack(0, 2, upd(1, Dead, 0, 2), upd(3, Alive, 2, 2), upd(2, Alive, 0, 2)))
	r.wantState(1, Alive, 0)
	r.wantState(3, Alive, 0)
	r.wantState(2, Dead, 0) // equal incarnation: dead stays dead
	r.recv(4*ms, 2, ack(0, 2, upd(2, Alive, 1, 2)))
	r.wantState(2, Alive, 1)
	r.wantEvents("2:alive@1;")
}

// TestDeadIsFinal: a dead member stays dead whatever is said about it at
// its incarnation; only a higher one brings it back, and the dead member
// learns of its death from the receiver entry of any reply and refutes.
func TestDeadIsFinal(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2)
	r.recv(0, 1, ack(0, 1, upd(2, Dead, 3, 1)))
	r.wantState(2, Dead, 3)
	for _, u := range []Update{upd(2, Alive, 3, 2), upd(2, Suspect, 3, 1), upd(2, Alive, 2, 2), upd(2, Suspect, 2, 1)} {
		r.recv(ms, 1, ack(0, 1, u))
		r.wantState(2, Dead, 3)
	}
	// The dead member pings us: the ack tells it it is dead.
	r.recv(2*ms, 2, Message{Kind: KindPing, Seq: 5, Target: 0, Updates: []Update{upd(0, Alive, 0, 0), upd(2, Alive, 3, 2)}})
	a := r.one(KindAck)
	if a.To != 2 || a.Msg.Updates[len(a.Msg.Updates)-1].Member != (Member{ID: 2, Incarnation: 3, State: Dead}) && a.Msg.Updates[1].Member != (Member{ID: 2, Incarnation: 3, State: Dead}) {
		t.Fatalf("ack to the dead member: %s", fmtOut(r.out))
	}
	// Its refutation at 4 revives it.
	r.recv(3*ms, 2, Message{Kind: KindPing, Seq: 6, Target: 0, Updates: []Update{upd(2, Alive, 4, 2)}})
	r.wantState(2, Alive, 4)
	r.wantEvents("2:alive@4;")
}

// TestSuspicionPerIncarnation: a suspicion belongs to one incarnation: a
// refutation ends it, a stale one cannot restart it, a newer one restarts
// the clock (DAOS-19148).
func TestSuspicionPerIncarnation(t *testing.T) {
	r := newRig(t, noStall, 0, 1, 2, 3)
	r.recv(0, 1, ack(0, 1, upd(2, Suspect, 1, 1)))
	if len(r.m.susp) != 1 || r.m.susp[0].inc != 1 || r.m.susp[0].deadline != 20*sec {
		t.Fatalf("suspicion %+v", r.m.susp)
	}
	r.recv(5*sec, 1, ack(0, 1, upd(2, Alive, 2, 2)))
	if len(r.m.susp) != 0 {
		t.Fatal("refuted suspicion kept")
	}
	r.recv(6*sec, 1, ack(0, 1, upd(2, Suspect, 1, 1)))
	r.wantState(2, Alive, 2)
	r.recv(7*sec, 3, ack(0, 3, upd(2, Suspect, 2, 3)))
	r.recv(8*sec, 3, ack(0, 3, upd(2, Suspect, 3, 3)))
	if len(r.m.susp) != 1 || r.m.susp[0].inc != 3 || r.m.susp[0].start != 8*sec {
		t.Fatalf("suspicion %+v", r.m.susp)
	}
	r.wantEvents("")
}

// TestConfirmationsShrink: independent accusers shrink the timeout by
// memberlist's formula; repeats and the first accuser do not count; each
// new confirmation is passed on, up to Confirmations.
func TestConfirmationsShrink(t *testing.T) {
	cfg := Config{}
	r := newRig(t, noStall, 0, 1, 2, 3, 4, 5) // n = 6: k = 2, min = 4 s
	if got := cfg.SuspicionTimeoutFor(6, 0); got != 20*sec {
		t.Fatalf("unconfirmed %v", got)
	}
	mid := cfg.SuspicionTimeoutFor(6, 1)
	if want := 20*sec - time.Duration(0.6309297535714574*float64(16*sec)); mid < want-ms || mid > want+ms {
		t.Fatalf("one confirmation %v, want %v", mid, want)
	}
	if got := cfg.SuspicionTimeoutFor(6, 2); got != 4*sec {
		t.Fatalf("two confirmations %v", got)
	}
	if got := cfg.SuspicionTimeoutFor(6, 5); got != 4*sec {
		t.Fatalf("more than k confirmations %v", got)
	}
	r.recv(0, 1, ack(0, 1, upd(3, Suspect, 0, 1)))
	s := &r.m.susp[0]
	if s.deadline != 20*sec {
		t.Fatalf("deadline %v", s.deadline)
	}
	r.recv(sec, 4, ack(0, 4, upd(3, Suspect, 0, 1))) // the same accuser, relayed
	if s.deadline != 20*sec || s.n != 0 {
		t.Fatalf("relay counted: %+v", *s)
	}
	r.recv(sec, 4, ack(0, 4, upd(3, Suspect, 0, 2)))
	if s.deadline != mid || s.n != 1 {
		t.Fatalf("after one confirmation: %+v, want deadline %v", *s, mid)
	}
	r.recv(sec, 5, ack(0, 5, upd(3, Suspect, 0, 2))) // repeat
	if s.n != 1 {
		t.Fatalf("repeat counted: %+v", *s)
	}
	queued := func(u Update) bool {
		for _, q := range r.m.queue {
			if q.u == u {
				return true
			}
		}
		return false
	}
	if !queued(upd(3, Suspect, 0, 2)) || !queued(upd(3, Suspect, 0, 1)) {
		t.Fatalf("confirmation not passed on: %+v", r.m.queue)
	}
	r.recv(2*sec, 5, ack(0, 5, upd(3, Suspect, 0, 5)))
	if s.deadline != 4*sec || s.n != 2 {
		t.Fatalf("after two confirmations: %+v", *s)
	}
	r.recv(2*sec, 5, ack(0, 5, upd(3, Suspect, 0, 4)))
	if queued(upd(3, Suspect, 0, 4)) {
		t.Fatal("confirmation beyond k passed on")
	}
	// In a group of 3, k = 1; in a group of 2, nobody can confirm and the
	// minimum applies at once (memberlist).
	if got := cfg.SuspicionTimeoutFor(3, 1); got != 4*sec {
		t.Fatalf("n=3 c=1: %v", got)
	}
	if got := cfg.SuspicionTimeoutFor(2, 0); got != 4*sec {
		t.Fatalf("n=2: %v", got)
	}
	// The minimum grows with log10(n).
	if got := cfg.SuspicionTimeoutFor(1000, 2); got != 12*sec {
		t.Fatalf("n=1000: %v", got)
	}
	if got := cfg.SuspicionTimeoutFor(1000000, 2); got != 20*sec {
		t.Fatalf("n=10^6: min capped at max: %v", got)
	}
}

// TestConfirmWithOrigin: a second-hand suspicion is not declared dead at
// its deadline: the origin is asked to ping the suspect and the suspect is
// pinged; silence for IndirectTimeout then means dead.
func TestConfirmWithOrigin(t *testing.T) {
	for _, tc := range []string{"silence", "ack", "refute"} {
		t.Run(tc, func(t *testing.T) {
			r := newRig(t, Config{}, 0, 1, 2, 3, 4, 5)
			r.tick(0)
			r.recv(0, 1, ack(0, 1, upd(3, Suspect, 0, 1)))
			var all []Event
			// 3 answers our probes (without refuting: it is not told), so
			// this member never accuses it itself.
			for r.m.Next() < 20*sec {
				r.advance(r.m.Next(), &all)
			}
			s := r.m.findSuspicion(3)
			if s == nil || s.accused || s.deadline != 20*sec {
				t.Fatalf("suspicion %+v", s)
			}
			r.tick(20 * sec)
			var req, ping *Envelope
			for i, e := range r.out {
				if e.Msg.Kind == KindPingReq && e.To == 1 && e.Msg.Target == 3 {
					req = &r.out[i]
				}
				if e.Msg.Kind == KindPing && e.To == 3 && e.Msg.Seq == s.seq {
					ping = &r.out[i]
				}
			}
			if req == nil || ping == nil || req.Msg.Seq != ping.Msg.Seq {
				t.Fatalf("confirm round: %s", fmtOut(r.out))
			}
			r.wantState(3, Suspect, 0)
			seq := req.Msg.Seq
			switch tc {
			case "silence":
				r.advance(21800*ms, &all, 3)
				r.wantState(3, Dead, 0)
				if st := r.m.Stats(); st.Confirms != 1 || st.Deaths != 1 {
					t.Fatalf("stats %+v", st)
				}
			case "ack":
				r.recv(20*sec+500*ms, 1, ack(seq, 3))
				r.advance(30*sec, &all)
				r.wantState(3, Suspect, 0) // restarted, not dead
				if s := r.m.findSuspicion(3); s == nil || s.start != 20*sec+500*ms {
					t.Fatalf("suspicion %+v", s)
				}
			case "refute":
				r.recv(20*sec+500*ms, 1, ack(seq, 3, upd(3, Alive, 1, 3)))
				r.wantState(3, Alive, 1)
			}
		})
	}
}

// TestOwnDelay: a machine whose input comes late (it was stopped) moves
// its deadlines: the probe in progress keeps the time it had left, the ack
// that waited meanwhile still counts, suspicions are not shortened.
func TestOwnDelay(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2, 3)
	r.tick(0)
	r.recv(0, 1, ack(0, 1, upd(2, Suspect, 0, 1)))
	at := r.tickNext()
	p := r.one(KindPing)
	left := r.m.Next() - at // 900 ms
	susDeadline := r.m.findSuspicion(2).deadline
	// Stopped for 5 s right after sending the ping.
	late := at + 5*sec
	r.tick(late)
	if r.m.Stats().Stalls != 1 {
		t.Fatalf("stall not seen: %+v", r.m.Stats())
	}
	if len(r.sent(KindPingReq)) != 0 {
		t.Fatalf("accused after its own delay: %s", fmtOut(r.out))
	}
	if r.m.Next() != late+left {
		t.Fatalf("probe deadline %v, want %v", r.m.Next(), late+left)
	}
	if d := r.m.findSuspicion(2).deadline; d != susDeadline+5*sec {
		t.Fatalf("suspicion deadline %v, want %v", d, susDeadline+5*sec)
	}
	// The ack that queued up while stopped arrives now.
	r.recv(late+ms, p.To, ack(p.Msg.Seq, p.To))
	r.tick(late + left)
	if len(r.sent(KindPingReq)) != 0 || r.m.Stats().ProbeFails != 0 {
		t.Fatalf("probe failed: %s %+v", fmtOut(r.out), r.m.Stats())
	}
	// A Receive that comes late detects the stall as well.
	r2 := newRig(t, Config{}, 0, 1, 2)
	r2.tick(0)
	r2.recv(r2.m.Next()+2*sec, 1, ack(0, 1))
	if r2.m.Stats().Stalls != 1 {
		t.Fatal("late receive not seen as a stall")
	}
	// Inputs on time are not stalls.
	var all []Event
	r3 := newRig(t, Config{}, 0, 1, 2, 3)
	r3.tick(0)
	r3.advance(60*sec, &all)
	if r3.m.Stats().Stalls != 0 || len(all) != 0 {
		t.Fatalf("stalls %d events %v", r3.m.Stats().Stalls, all)
	}
}

// TestPiggybackLimits: at most MaxPiggyback queued updates per message
// besides the mandatory ones, the least sent first, each sent exactly
// lambda·ceil(log10(n+1)) times, then dropped.
func TestPiggybackLimits(t *testing.T) {
	var peers []ID
	for i := 1; i <= 20; i++ {
		peers = append(peers, ID(i))
	}
	r := newRig(t, Config{}, 0, peers...) // n = 21: limit 4·ceil(log10 22) = 8
	if got := r.m.cfg.retransmitLimit(21); got != 8 {
		t.Fatalf("limit %d", got)
	}
	var ups []Update
	for i := 1; i <= 12; i++ {
		ups = append(ups, upd(ID(i), Suspect, 0, 13))
	}
	r.recv(0, 13, ack(0, 13, ups...))
	if len(r.m.queue) != 12 {
		t.Fatalf("queue %d", len(r.m.queue))
	}
	count := map[ID]int{}
	for k := 0; ; k++ {
		r.recv(time.Duration(k)*ms, 14, Message{Kind: KindPing, Seq: uint32(k), Target: 0})
		a := r.one(KindAck)
		u := a.Msg.Updates
		if len(u) < 2 || u[0].ID != 0 || u[1].ID != 14 {
			t.Fatalf("mandatory entries: %s", fmtOut(r.out))
		}
		if len(u) > 2+8 {
			t.Fatalf("%d entries", len(u))
		}
		if len(u) == 2 {
			break
		}
		for _, x := range u[2:] {
			count[x.ID]++
		}
		// Least sent first: after every full round all are even.
		if (k+1)*8%12 == 0 {
			for id := ID(1); id <= 12; id++ {
				if count[id] != (k+1)*8/12 {
					t.Fatalf("after %d acks: %v", k+1, count)
				}
			}
		}
	}
	for id := ID(1); id <= 12; id++ {
		if count[id] != 8 {
			t.Fatalf("update %d sent %d times, want 8", id, count[id])
		}
	}
	// A full queue drops the most sent entry.
	r2 := newRig(t, Config{QueueLimit: 4}, 0, peers...)
	r2.recv(0, 13, ack(0, 13, ups[:6]...))
	if len(r2.m.queue) != 4 || r2.m.Stats().QueueDropped != 2 {
		t.Fatalf("queue %d dropped %d", len(r2.m.queue), r2.m.Stats().QueueDropped)
	}
}

// TestOwnOutage: a member that hears nobody for 2/3 of the suspicion
// timeout blames its own network: it declares nobody dead while the
// silence lasts, and when messages come again every suspect gets a full
// timeout to refute. With one other member, silence is a crash.
func TestOwnOutage(t *testing.T) {
	r := newRig(t, Config{}, 0, 1, 2, 3, 4)
	r.tick(0)
	var all []Event
	for r.m.Next() < 60*sec {
		r.tickNext()
		all = append(all, r.ev...)
	}
	for _, id := range []ID{1, 2, 3, 4} {
		r.wantState(id, Suspect, 0)
	}
	for _, e := range all {
		if e.State == Dead {
			t.Fatalf("declared %d dead during its own outage", e.ID)
		}
	}
	if st := r.m.Stats(); st.Outages != 1 || st.Deaths != 0 {
		t.Fatalf("stats %+v", st)
	}
	back := r.m.Next()
	r.recv(back, 1, ack(0, 1, upd(1, Alive, 1, 1)))
	r.wantState(1, Alive, 1)
	for _, s := range r.m.susp {
		if s.start != back {
			t.Fatalf("suspicion %+v not restarted at %v", s, back)
		}
	}
	all = all[:0]
	r.advance(back+19*sec, &all, 2, 3, 4)
	for _, e := range all {
		if e.State == Dead {
			t.Fatalf("%d dead %v after the outage", e.ID, e.Time-back)
		}
	}
	r.advance(back+40*sec, &all, 2, 3, 4)
	for _, id := range []ID{2, 3, 4} {
		r.wantState(id, Dead, 0)
	}
	r.wantState(1, Alive, 1)

	r2 := newRig(t, Config{}, 0, 1)
	r2.tick(0)
	for r2.m.Next() < 40*sec {
		r2.tickNext()
	}
	r2.wantState(1, Dead, 0)
}
