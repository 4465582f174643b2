package rpc

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/ferrymsg/ferry/swim"
)

// OpSWIM carries one SWIM message (package swim's encoding) from a
// rank's SWIM context to another's: a one-way RPC of the SWIM protocol
// base, queued at the front and sent at high priority, served inline.
// Wire constant.
var OpSWIM = MakeOpcode(BaseSWIM, 0, 0)

// Authority says who changes the group's version when the failure
// detector's verdicts call for a new membership (a member dead, a
// removed member back at a higher incarnation).
type Authority uint8

// Authorities.
const (
	// AuthorityLowestLive (the default): the lowest rank that this rank
	// does not know dead proposes each new membership (Group.Propose):
	// the members not known dead, and removed ranks that came back at a
	// higher incarnation; it sends it to every rank. Every rank decides
	// for itself whether it is the lowest live one, from its own view.
	//
	// Under a partition each side's lowest live rank proposes for its
	// side: each side removes the other at the next version, and the two
	// memberships may share a version number. A rank applies only
	// versions newer than its own, so neither side takes the other's.
	// When the partition heals, a removed rank that reaches a member is
	// sent that member's membership; if it is newer than its own, it
	// applies it and learns it was excluded (EventExcluded). The
	// authority re-adds a removed rank it hears from at a higher
	// incarnation than the one it was removed at: one restarted, or one
	// that refuted a suspicion of itself. So the sides often merge back
	// into the membership of the side at the higher version, rank by
	// rank, and may stay apart (two groups, each excluding the other)
	// when neither condition comes; the application can merge them with
	// Propose (ModAdd).
	AuthorityLowestLive Authority = iota
	// AuthorityRank: only SWIMOptions.AuthorityRank proposes, as above.
	// If that rank is dead, the version does not change.
	AuthorityRank
	// AuthorityApplication: ferry never changes the group's version; the
	// application does, from its Watch callback or its own control plane,
	// by calling Group.Propose (or Group.Modify on every rank), as DAOS's
	// management service drives crt_group_primary_modify.
	AuthorityApplication
)

// SWIMOptions configure the SWIM failure detector of StartSWIM. The zero
// value is the default.
type SWIMOptions struct {
	// Config sets the protocol's timing; its zero fields take package
	// swim's defaults (DAOS CaRT's): a 1 s period, a 900 ms ping
	// timeout, 1.8 s for indirect pings through 2 members, a 20 s
	// suspicion that independent confirmations shrink to 4 s. With them
	// a crashed rank of a group of n is known dead to every live rank
	// within (n−1)·1 s + 2.7 s + 20 s: 26.7 s for 5 ranks, 29.7 s for 8
	// (swim.DetectionTime), and usually within about 10 s.
	// Config.Incarnation, if zero, is the instance clock's Unix
	// nanoseconds at the start, so a restarted rank comes back at a
	// higher incarnation (DAOS uses its hybrid logical clock).
	Config swim.Config
	// Rand drives the probe order and helper choice; default seeded
	// randomly.
	Rand *mrand.Rand
	// Authority says who changes the group's version; AuthorityRank
	// names the rank for AuthorityRank.
	Authority     Authority
	AuthorityRank uint32
	// ProposeTimeout bounds how long the authority waits for the ranks
	// it sends a new membership to; default 5 s.
	ProposeTimeout time.Duration
}

// SWIM is a rank's failure detector: package swim's machine in a context
// of its own (StartSWIM), fed with the SWIM messages that arrive and with
// the instance's clock, its verdicts applied to the group at once (see
// Group.SetState). All methods are safe for concurrent use.
type SWIM struct {
	in   *Instance
	c    *Context
	opts SWIMOptions
	cfg  swim.Config // with defaults

	mu sync.Mutex
	m  *swim.Machine
	rx swim.Message

	// deadInc is the incarnation at which a rank was declared dead here:
	// a removed rank heard from at a higher one has come back.
	deadInc map[uint32]uint64
	// back lists removed ranks heard from at a higher incarnation than
	// their death, for the authority to re-add.
	back map[uint32]bool
	// told: when each removed rank was last told of the membership.
	told map[uint32]time.Time

	kick    chan struct{}
	propose chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
}

// StartSWIM starts the failure detector on this rank (crt_swim_init): it
// creates a context for it (the next tag: every rank of the group must
// start SWIM on the same tag, so create their contexts in the same
// order), adds every member of the group to the SWIM machine and keeps
// them in step with the group's versions. Its verdicts change the
// members' states at once (Group.SetState: a dead rank is excluded), are
// reported to Watch callbacks, and, as the Authority decides, lead to a
// new group version. A rank removed from the group that sends this rank a
// SWIM message is sent the current membership, so it learns it was
// excluded. StartSWIM fails on a client instance, with an Authority it
// does not know, and if SWIM already runs. Instance.Close stops it.
func (in *Instance) StartSWIM(o SWIMOptions) (*SWIM, error) {
	if in.rank == RankNone {
		return nil, fmt.Errorf("%w: SWIM needs a rank (a listening instance)", ErrInvalid)
	}
	if err := o.Config.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if o.Authority > AuthorityApplication {
		return nil, fmt.Errorf("%w: SWIM authority %d", ErrInvalid, o.Authority)
	}
	if o.Config.Incarnation == 0 {
		o.Config.Incarnation = uint64(in.clock.Now().UnixNano())
	}
	if o.Rand == nil {
		o.Rand = mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64()))
	}
	if o.ProposeTimeout <= 0 {
		o.ProposeTimeout = proposeTimeout
	}
	s := &SWIM{
		in: in, opts: o,
		m:       swim.New(swim.ID(in.rank), o.Config, o.Rand),
		deadInc: map[uint32]uint64{},
		back:    map[uint32]bool{},
		told:    map[uint32]time.Time{},
		kick:    make(chan struct{}, 1),
		propose: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	s.cfg = s.m.Config()
	in.swimMu.Lock()
	defer in.swimMu.Unlock()
	if in.swim != nil {
		return nil, fmt.Errorf("%w: SWIM already runs", ErrExists)
	}
	if !in.swimRegistered {
		if err := in.reg.register(Protocol{Name: "swim", Base: BaseSWIM, Version: 0, RPCs: []RPC{
			{Name: "swim", Handler: in.handleSWIM, Flags: OneWay | QueueFront | Inline},
		}}, true); err != nil {
			return nil, err
		}
		in.swimRegistered = true
	}
	c, err := in.NewContext(ContextOptions{})
	if err != nil {
		return nil, err
	}
	s.c = c
	s.mu.Lock()
	for _, r := range in.group.Ranks() {
		if r != in.rank {
			s.m.Add(swim.ID(r), 0)
		}
	}
	s.m.Events() // adding members reports nothing worth telling
	s.mu.Unlock()
	in.group.mu.Lock()
	in.group.onChange = s.groupChanged
	in.group.mu.Unlock()
	in.swim = s
	s.wg.Add(2)
	go s.loop()
	go s.proposer()
	return s, nil
}

// swimSvc returns the running SWIM service, if any.
func (in *Instance) swimSvc() *SWIM {
	in.swimMu.Lock()
	defer in.swimMu.Unlock()
	return in.swim
}

// Context returns the context SWIM runs in.
func (s *SWIM) Context() *Context { return s.c }

// Self returns this rank's SWIM entry (its incarnation).
func (s *SWIM) Self() swim.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Self()
}

// Members returns the other members as the SWIM machine knows them.
func (s *SWIM) Members() []swim.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Members(nil)
}

// Stats returns the SWIM machine's counters.
func (s *SWIM) Stats() swim.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Stats()
}

// Close stops SWIM and closes its context. Members keep the states it
// gave them. It is idempotent.
func (s *SWIM) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.in.group.mu.Lock()
	s.in.group.onChange = nil
	s.in.group.mu.Unlock()
	close(s.done)
	s.wg.Wait()
	err := s.c.Close()
	s.in.swimMu.Lock()
	if s.in.swim == s {
		s.in.swim = nil
	}
	s.in.swimMu.Unlock()
	return err
}

// now is the machine's time: the instance clock since the instance
// started.
func (s *SWIM) now() time.Duration { return time.Duration(s.in.now()) }

// outMsg is a SWIM message to send, encoded, with what SendFailed needs.
type outMsg struct {
	to   uint32
	head swim.Message // Kind, Seq, Target; no updates
	b    swimBytes
}

// swimBytes is an encoded SWIM message as an RPC input.
type swimBytes []byte

func (b swimBytes) AppendBinary(dst []byte) ([]byte, error) { return append(dst, b...), nil }

// collect takes the machine's outbox and events. Called with s.mu held.
func (s *SWIM) collect() ([]outMsg, []swim.Event) {
	env := s.m.Outbox()
	var out []outMsg
	for _, e := range env {
		out = append(out, outMsg{
			to:   uint32(e.To),
			head: swim.Message{Kind: e.Msg.Kind, Seq: e.Msg.Seq, Target: e.Msg.Target},
			b:    e.Msg.Append(nil),
		})
	}
	evs := append([]swim.Event(nil), s.m.Events()...)
	return out, evs
}

// flush acts on the events, then sends the messages (so that a member
// come back alive is dialled for the answer).
func (s *SWIM) flush(out []outMsg, evs []swim.Event) {
	s.act(evs)
	timeout := s.cfg.PingTimeout
	for _, o := range out {
		err := s.c.sendInternal(Endpoint{Rank: o.to, Tag: s.c.tag}, OpSWIM, o.b, nil, timeout, func(_ *request, err error) {
			if err != nil {
				s.sendFailed(o)
			}
		})
		if err != nil {
			s.sendFailed(o)
		}
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// sendFailed tells the machine; a failed ping makes the indirect pings
// due, and the loop, kicked, sends them.
func (s *SWIM) sendFailed(o outMsg) {
	s.mu.Lock()
	s.m.SendFailed(s.now(), swim.ID(o.to), &o.head)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// act applies the machine's verdicts to the group.
func (s *SWIM) act(evs []swim.Event) {
	g := s.in.group
	for _, e := range evs {
		rank := uint32(e.ID)
		var st MemberState
		switch e.State {
		case swim.Alive:
			st = MemberAlive
		case swim.Suspect:
			st = MemberSuspect
		default:
			st = MemberDead
			s.mu.Lock()
			s.deadInc[rank] = e.Incarnation
			s.mu.Unlock()
		}
		g.SetState(rank, st, e.Incarnation)
		if st == MemberDead {
			s.wantProposal()
		}
	}
}

func (s *SWIM) wantProposal() {
	select {
	case s.propose <- struct{}{}:
	default:
	}
}

// loop ticks the machine at the times it asks for, by the instance's
// clock.
func (s *SWIM) loop() {
	defer s.wg.Done()
	t := s.in.clock.NewTimer(time.Hour)
	t.Stop()
	for {
		s.mu.Lock()
		now := s.now()
		next := s.m.Next()
		if next <= now {
			s.m.Tick(now)
			out, evs := s.collect()
			s.mu.Unlock()
			s.flush(out, evs)
			select {
			case <-s.kick: // our own
			default:
			}
			continue
		}
		s.mu.Unlock()
		t.Reset(next - now)
		select {
		case <-t.C():
		case <-s.kick:
			t.Stop()
		case <-s.done:
			t.Stop()
			return
		}
	}
}

// handleSWIM feeds a SWIM message to the machine (on the connection's
// reader goroutine).
func (in *Instance) handleSWIM(r *Incoming) error {
	s := in.swimSvc()
	from := r.Source().Rank
	if s == nil || from == RankNone || from == in.rank {
		return nil
	}
	s.mu.Lock()
	if err := swim.DecodeMessage(r.body, &s.rx); err != nil {
		s.mu.Unlock()
		in.malformed.Add(1)
		return &Error{Code: CodeMalformed, Opcode: OpSWIM, Msg: err.Error()}
	}
	var ownInc uint64
	for _, u := range s.rx.Updates {
		if uint32(u.ID) == from && u.State == swim.Alive {
			ownInc = u.Incarnation
		}
	}
	s.m.Receive(s.now(), swim.ID(from), &s.rx)
	out, evs := s.collect()
	removed := false
	if !in.group.Has(from) {
		if _, ok := in.group.removedURI(from); ok {
			removed = true
			if d, dead := s.deadInc[from]; dead && ownInc > d {
				s.back[from] = true
			}
		}
	}
	s.mu.Unlock()
	s.flush(out, evs)
	if removed {
		s.tellRemoved(from)
		s.wantProposal()
	}
	return nil
}

// tellRemoved sends a removed rank the current membership (at most once
// per 5 s per rank), so that it learns it was excluded.
func (s *SWIM) tellRemoved(rank uint32) {
	now := s.in.clock.Now()
	s.mu.Lock()
	if last, ok := s.told[rank]; ok && now.Sub(last) < 5*time.Second {
		s.mu.Unlock()
		return
	}
	s.told[rank] = now
	s.mu.Unlock()
	upd := &groupUpdate{version: s.in.group.Version(), op: ModReplace, members: s.in.group.Members()}
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return
	}
	s.wg.Add(1) // before Close waits: it sets closed first
	s.closeMu.Unlock()
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.ProposeTimeout)
		defer cancel()
		go func() {
			select {
			case <-s.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		_ = s.c.call(ctx, Endpoint{Rank: rank}, OpGroupUpdate, upd, nil, true)
	}()
}

// groupChanged keeps the machine's members those of the group.
func (s *SWIM) groupChanged(added, removed []uint32) {
	s.mu.Lock()
	for _, r := range added {
		if r != s.in.rank {
			s.m.Add(swim.ID(r), 0)
			delete(s.back, r)
		}
	}
	for _, r := range removed {
		// Remember the incarnation it left at: heard from higher, it
		// has come back (restarted, or refuted its death).
		if st, ok := s.m.State(swim.ID(r)); ok {
			if d, seen := s.deadInc[r]; !seen || st.Incarnation > d {
				s.deadInc[r] = st.Incarnation
			}
		}
		s.m.Remove(swim.ID(r))
	}
	out, evs := s.collect()
	s.mu.Unlock()
	s.flush(out, evs)
}

// isAuthority reports whether this rank proposes new memberships.
func (s *SWIM) isAuthority() bool {
	switch s.opts.Authority {
	case AuthorityRank:
		return s.in.rank == s.opts.AuthorityRank
	case AuthorityApplication:
		return false
	}
	live := s.in.group.Live()
	return len(live) > 0 && live[0] == s.in.rank
}

// proposer is the authority's goroutine: when the verdicts call for a
// new membership (a member dead, a removed rank back), and this rank is
// the authority, it proposes one. It also looks once per period, so a
// proposal that failed, or an authority that takes over from a dead
// one, is retried.
func (s *SWIM) proposer() {
	defer s.wg.Done()
	period := s.cfg.Period
	t := s.in.clock.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-s.propose:
		case <-t.C():
			t.Reset(period)
		case <-s.done:
			return
		}
		if !s.isAuthority() {
			continue
		}
		g := s.in.group
		var ms []Member
		changed := false
		for _, m := range g.Members() {
			if st, _, _ := g.State(m.Rank); st == MemberDead && m.Rank != s.in.rank {
				changed = true
				continue
			}
			ms = append(ms, m)
		}
		s.mu.Lock()
		for r := range s.back {
			if u, ok := g.removedURI(r); ok && !g.Has(r) {
				ms = append(ms, Member{Rank: r, URI: u})
				changed = true
			}
		}
		s.mu.Unlock()
		if !changed {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.ProposeTimeout)
		go func() {
			select {
			case <-s.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		v, failed, err := g.Propose(ctx, s.c, ModReplace, ms)
		cancel()
		if err != nil {
			s.in.log.Debug("SWIM authority: proposal failed", "err", err)
			continue
		}
		s.in.log.Debug("SWIM authority: new membership", "version", v, "members", len(ms), "not_told", failed)
	}
}
