package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MemberState is a member's liveness in this instance's view of the
// group, as its failure detector (SWIM) last judged it.
type MemberState uint8

// Member states.
const (
	MemberAlive   MemberState = iota // answering, or not judged yet
	MemberSuspect                    // missed its probes; requests still go
	MemberDead                       // excluded here: requests fail with ErrExcluded
)

func (s MemberState) String() string {
	switch s {
	case MemberAlive:
		return "alive"
	case MemberSuspect:
		return "suspect"
	case MemberDead:
		return "dead"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// EventKind says what a MemberEvent reports.
type EventKind uint8

// Membership events.
const (
	// EventAlive: the failure detector has the member alive again (it
	// refuted a suspicion, or came back at a higher incarnation).
	EventAlive EventKind = iota
	// EventSuspect: the member missed its probes and is suspected.
	EventSuspect
	// EventDead: the member is dead; it is excluded here at once.
	EventDead
	// EventJoined: a new group version added the member.
	EventJoined
	// EventLeft: a new group version removed the member.
	EventLeft
	// EventExcluded: this instance learned that the group's membership
	// no longer includes it (Rank is this instance's own rank). CaRT
	// raises CRT_EVT_DEAD for itself here, and a DAOS engine kills itself;
	// what to do is the application's choice.
	EventExcluded
)

func (k EventKind) String() string {
	switch k {
	case EventAlive:
		return "alive"
	case EventSuspect:
		return "suspect"
	case EventDead:
		return "dead"
	case EventJoined:
		return "joined"
	case EventLeft:
		return "left"
	case EventExcluded:
		return "excluded"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// State returns the liveness the event leaves the member in: alive for
// EventAlive and EventJoined, suspect for EventSuspect, dead for the
// others.
func (k EventKind) State() MemberState {
	switch k {
	case EventAlive, EventJoined:
		return MemberAlive
	case EventSuspect:
		return MemberSuspect
	}
	return MemberDead
}

// MemberEvent is a change in the group as this instance sees it.
type MemberEvent struct {
	Kind EventKind
	// Rank is the member the event is about.
	Rank uint32
	// Incarnation is the member's incarnation for failure-detector events
	// (0 for group changes).
	Incarnation uint64
	// Version is the group version after the event.
	Version uint32
}

func (e MemberEvent) String() string {
	return fmt.Sprintf("rank %d %v (incarnation %d, group version %d)", e.Rank, e.Kind, e.Incarnation, e.Version)
}

// maxQueuedEvents bounds the events waiting for the watchers; beyond it
// the oldest are dropped (and counted), so a watcher that blocks costs
// events, never memory.
const maxQueuedEvents = 1 << 16

// watchers delivers events to the Watch callbacks, in order, on one
// goroutine started by the first Watch.
type watchers struct {
	mu      sync.Mutex
	fns     map[int]func(MemberEvent)
	nextID  int
	q       []MemberEvent
	dropped uint64
	sig     chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	started bool
	closed  bool
}

// Watch registers fn to be called with every membership event from now
// on: the failure detector's verdicts (alive, suspect, dead), members
// joining and leaving with a new group version, and this instance's own
// exclusion. fn runs on one goroutine of the group's, one event at a
// time, in the order the events happened; it may call the Group's
// methods. Events queue while fn runs (at most 65536; beyond it the
// oldest are dropped), so fn should not block for long. The returned
// function unregisters fn. Watch is safe for concurrent use.
func (g *Group) Watch(fn func(MemberEvent)) (cancel func()) {
	w := &g.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return func() {}
	}
	if w.fns == nil {
		w.fns = map[int]func(MemberEvent){}
		w.sig = make(chan struct{}, 1)
		w.done = make(chan struct{})
	}
	id := w.nextID
	w.nextID++
	w.fns[id] = fn
	if !w.started {
		w.started = true
		w.wg.Add(1)
		go w.loop()
	}
	return func() {
		w.mu.Lock()
		delete(w.fns, id)
		w.mu.Unlock()
	}
}

// DroppedEvents returns how many events were dropped because the
// watchers fell behind by more than 65536.
func (g *Group) DroppedEvents() uint64 {
	g.watch.mu.Lock()
	defer g.watch.mu.Unlock()
	return g.watch.dropped
}

func (w *watchers) emit(evs ...MemberEvent) {
	if len(evs) == 0 {
		return
	}
	w.mu.Lock()
	if w.closed || len(w.fns) == 0 {
		w.mu.Unlock()
		return
	}
	w.q = append(w.q, evs...)
	if n := len(w.q) - maxQueuedEvents; n > 0 {
		w.dropped += uint64(n)
		w.q = append(w.q[:0], w.q[n:]...)
	}
	w.mu.Unlock()
	select {
	case w.sig <- struct{}{}:
	default:
	}
}

func (w *watchers) loop() {
	defer w.wg.Done()
	var fns []func(MemberEvent)
	for {
		w.mu.Lock()
		batch := w.q
		w.q = nil
		fns = fns[:0]
		ids := make([]int, 0, len(w.fns))
		for id := range w.fns {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			fns = append(fns, w.fns[id])
		}
		w.mu.Unlock()
		for _, ev := range batch {
			for _, fn := range fns {
				fn(ev)
			}
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-w.sig:
		case <-w.done:
			return
		}
	}
}

// close stops the watchers' goroutine after it has delivered what is
// queued.
func (w *watchers) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	started := w.started
	w.mu.Unlock()
	if started {
		close(w.done)
		w.wg.Wait()
	}
}

// State returns rank's liveness and incarnation as the failure detector
// last judged them, and whether rank is a member (CaRT's
// crt_rank_state_get).
func (g *Group) State(rank uint32) (MemberState, uint64, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	m, ok := g.members[rank]
	if !ok {
		return 0, 0, false
	}
	return m.state, m.inc, true
}

// Live returns the ranks of the members not known dead, ascending.
func (g *Group) Live() []uint32 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []uint32
	for r, m := range g.members {
		if m.state != MemberDead {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// Excluded reports whether a request to rank fails with ErrExcluded: it
// was removed from the group, or the failure detector has it dead.
func (g *Group) Excluded(rank uint32) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if m, ok := g.members[rank]; ok {
		return m.state == MemberDead
	}
	_, gone := g.removed[rank]
	return gone
}

// SetState records the failure detector's verdict on rank at
// incarnation inc and acts on it at once: a dead member is excluded (its
// queued and in-flight requests, those waiting for credits included,
// complete with ErrExcluded, its connections are dropped, and requests
// to it fail at once without dialling it) until a later verdict has it
// alive. A verdict older than the one recorded (a lower incarnation) is
// ignored, as is any verdict but dead at the incarnation a member died
// at, one on a non-member, and a state that is none of MemberAlive,
// MemberSuspect and MemberDead. It reports whether the state changed,
// and emits the event. The SWIM service started by StartSWIM
// calls it; an application with its own failure detector may too. It
// does not change the group's version: that is the authority's (see
// Propose).
func (g *Group) SetState(rank uint32, st MemberState, inc uint64) bool {
	if rank == g.Self() || st > MemberDead {
		return false
	}
	g.mu.Lock()
	m, ok := g.members[rank]
	// Dead is final for its incarnation (SWIM's rule): only a verdict at
	// a higher one revives the member.
	if !ok || inc < m.inc || (m.state == st && m.inc == inc) || (m.state == MemberDead && inc == m.inc) {
		g.mu.Unlock()
		return false
	}
	was := m.state
	m.state, m.inc = st, inc
	v := g.version.Load()
	g.mu.Unlock()
	if st == MemberDead && was != MemberDead && g.inst != nil {
		g.inst.groupChanged([]uint32{rank}, nil)
	}
	if st != was {
		kind := EventAlive
		switch st {
		case MemberSuspect:
			kind = EventSuspect
		case MemberDead:
			kind = EventDead
		}
		g.watch.emit(MemberEvent{Kind: kind, Rank: rank, Incarnation: inc, Version: v})
	}
	return st != was
}

// ---- group updates ----

// groupUpdate is the input of OpGroupUpdate: a new membership and its
// version, sent by whoever changes the group (Propose).
type groupUpdate struct {
	version uint32
	op      ModOp
	members []Member
}

// Layout (little-endian): version u32, op u8, count u32, then per
// member rank u32, URI length u16, URI. Wire constants; append only.
const groupUpdateHeader = 9

func (u *groupUpdate) AppendBinary(b []byte) ([]byte, error) {
	if len(u.members) > maxAttachMembers {
		return b, fmt.Errorf("%w: %d members", ErrTooLarge, len(u.members))
	}
	b = binary.LittleEndian.AppendUint32(b, u.version)
	b = append(b, byte(u.op))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(u.members)))
	for _, m := range u.members {
		if len(m.URI) > maxURI {
			return b, fmt.Errorf("%w: URI of %d bytes", ErrTooLarge, len(m.URI))
		}
		b = binary.LittleEndian.AppendUint32(b, m.Rank)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m.URI)))
		b = append(b, m.URI...)
	}
	return b, nil
}

// errGroupUpdate: an OpGroupUpdate input does not decode.
var errGroupUpdate = fmt.Errorf("%w: bad group update", ErrMalformed)

func (u *groupUpdate) UnmarshalBinary(b []byte) error {
	if len(b) < groupUpdateHeader {
		return errGroupUpdate
	}
	u.version = binary.LittleEndian.Uint32(b)
	u.op = ModOp(b[4])
	n := binary.LittleEndian.Uint32(b[5:])
	b = b[groupUpdateHeader:]
	// Each member takes at least 6 bytes: check the count against what
	// is there before allocating for it.
	if u.op > ModReplace || uint64(n) > uint64(len(b)/6) || n > maxAttachMembers {
		return errGroupUpdate
	}
	u.members = make([]Member, 0, n)
	for range n {
		if len(b) < 6 {
			return errGroupUpdate
		}
		rank := binary.LittleEndian.Uint32(b)
		l := int(binary.LittleEndian.Uint16(b[4:]))
		b = b[6:]
		if len(b) < l || l > maxURI || rank == RankNone || (l == 0 && u.op != ModRemove) {
			return errGroupUpdate
		}
		u.members = append(u.members, Member{Rank: rank, URI: string(b[:l])})
		b = b[l:]
	}
	if len(b) != 0 {
		return errGroupUpdate
	}
	return nil
}

// handleGroupUpdate applies a membership sent by the group's authority
// if its version is newer than this instance's.
func (in *Instance) handleGroupUpdate(r *Incoming) error {
	var u groupUpdate
	if err := r.Decode(&u); err != nil {
		return err
	}
	if err := in.group.apply(u.op, u.members, u.version); err != nil {
		return err
	}
	return r.Reply(nil)
}

// apply is Modify for an update that came from elsewhere: it also tells
// this instance when the new membership leaves it out.
func (g *Group) apply(op ModOp, ms []Member, version uint32) error {
	self := g.Self()
	excluded := false
	if self != RankNone {
		listed := false
		for _, m := range ms {
			if m.Rank == self {
				listed = true
			}
		}
		excluded = (op == ModReplace && !listed) || (op == ModRemove && listed)
	}
	var own []Member
	for _, m := range ms {
		if m.Rank != self || op == ModReplace {
			own = append(own, m)
		}
	}
	if err := g.Modify(op, own, version); err != nil {
		return err
	}
	if excluded {
		g.mu.Lock()
		g.excluded = version
		g.mu.Unlock()
		g.watch.emit(MemberEvent{Kind: EventExcluded, Rank: self, Version: version})
	} else if op == ModReplace && self != RankNone {
		g.mu.Lock()
		g.excluded = 0 // a membership that lists it again
		g.mu.Unlock()
	}
	return nil
}

// ExcludedAt returns the group version that left this instance out of
// the membership, or 0 if it has not learned of one or a later
// membership lists it again.
func (g *Group) ExcludedAt() uint32 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.excluded
}

// Propose changes the group's membership as its authority
// (crt_group_primary_modify on every rank): it applies op and ms here at
// the next version, then sends the whole new membership (ModReplace, so
// a rank that missed an earlier update catches up) to every member of
// the new membership and to every rank it removed, so that those learn
// they are excluded. It returns the new version and the ranks that
// could not be told (they catch up from the next update, or, if
// excluded, when they next reach a member: see StartSWIM). It uses
// context c (any of this instance's) and waits for the answers until
// ctx ends. Ranks that apply the update check that its version is newer
// than theirs.
//
// Only the group's authority should call it, so that versions grow from
// one place: by default with SWIM, the lowest live rank (see
// SWIMOptions.Authority); with AuthorityApplication, the application.
func (g *Group) Propose(ctx context.Context, c *Context, op ModOp, ms []Member) (uint32, []uint32, error) {
	g.mu.RLock()
	before := make(map[uint32]bool, len(g.members))
	for r := range g.members {
		before[r] = true
	}
	g.mu.RUnlock()
	v, err := g.change(op, ms, nextVersion) // the version taken under the change's lock
	if err != nil {
		return 0, nil, err
	}
	full := g.Members()
	self := g.Self()
	targets := map[uint32]bool{}
	for _, m := range full {
		if m.Rank != self {
			targets[m.Rank] = true
		}
	}
	for r := range before {
		if !g.Has(r) {
			targets[r] = true // removed: told so
		}
	}
	upd := &groupUpdate{version: v, op: ModReplace, members: full}
	return v, g.broadcast(ctx, c, upd, targets), nil
}

// broadcast sends upd to the targets at once and returns those that did
// not take it (an update it already had counts as taken).
func (g *Group) broadcast(ctx context.Context, c *Context, upd *groupUpdate, targets map[uint32]bool) []uint32 {
	var (
		mu     sync.Mutex
		failed []uint32
		wg     sync.WaitGroup
	)
	for r := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A removed rank is reached at the URI it had, on a
			// connection the contexts do not cache.
			err := c.call(ctx, Endpoint{Rank: r}, OpGroupUpdate, upd, nil, !g.Has(r))
			if err != nil && !errors.Is(err, ErrGroupVersion) {
				mu.Lock()
				failed = append(failed, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(failed)
	return failed
}

// proposeTimeout bounds how long the default authority waits for the
// ranks it tells of a new membership.
const proposeTimeout = 5 * time.Second
