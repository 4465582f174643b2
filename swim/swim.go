package swim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// ID names a member: a rank.
type ID uint32

// State is a member's SWIM status. The values are wire constants (DAOS's
// swim_member_status order).
type State uint8

// Member states.
const (
	Alive   State = 0
	Suspect State = 1
	Dead    State = 2
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Member is a member's identity and state as one machine knows it.
type Member struct {
	ID          ID
	Incarnation uint64
	State       State
}

// Envelope is a message to send to a member.
type Envelope struct {
	To  ID
	Msg Message
}

// Event reports a member's state transition, for the application: a member
// became Alive (it refuted a suspicion, or came back at a higher
// incarnation), Suspect or Dead.
type Event struct {
	Member
	Time time.Duration // the now of the call that caused it
	From ID            // the member whose message caused it (the machine's own ID for its own verdicts)
}

// Stats counts what a machine did.
type Stats struct {
	Sent         uint64 // messages put in the outbox
	Received     uint64 // messages passed to Receive
	Probes       uint64 // direct probes started
	ProbeFails   uint64 // probes that failed directly and indirectly
	Suspicions   uint64 // suspicions this machine raised itself
	Deaths       uint64 // members this machine declared dead itself
	Refutations  uint64 // suspicions or deaths of itself it refuted
	Confirms     uint64 // second-hand suspicions checked with their origin
	Stalls       uint64 // own delays detected (inputs later than Next by more than StallThreshold)
	Outages      uint64 // own network outages detected (no message for 2/3 of SuspicionTimeout)
	Nacks        uint64 // nacks received
	QueueDropped uint64 // updates dropped from a full dissemination queue
}

// Machine is one member's SWIM protocol state. It does no I/O and reads no
// clock: inputs are Tick, Receive, Add and Remove, outputs are Outbox and
// Events. A Machine is not safe for concurrent use.
type Machine struct {
	cfg  Config
	rnd  *rand.Rand
	self ID
	inc  uint64

	tab   table // the other members
	order order // probe order over tab

	probe   probe
	helpers []helping
	susp    []suspicion
	queue   []queued
	seq     uint32
	score   int // local health: 0 … AwarenessMax−1

	// Accusers of this member heard in the message being received, told
	// of its refutation directly (recvInc: its incarnation when the
	// message came).
	accusers [4]ID
	nacc     int
	recvInc  uint64

	started  bool
	lastRecv time.Duration // when a message last came
	outage   bool          // no message for OutageTimeout (see Config)
	now      time.Duration // the time of the current (or last) input
	next     time.Duration

	out, outSpare       []Envelope
	arena, arenaSpare   []Update
	events, eventsSpare []Event

	stats Stats
}

// New returns the machine of member self. rnd drives target order, helper
// choice and jitter; seed it for reproducible runs. cfg's zero fields take
// their defaults; New panics if cfg does not Validate.
func New(self ID, cfg Config, rnd *rand.Rand) *Machine {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	m := &Machine{cfg: cfg.withDefaults(), rnd: rnd, self: self, inc: cfg.Incarnation, tab: table{self: self}}
	// Room for the usual load, allocated with the machine rather than in
	// its first busy seconds (about 2.5 KB).
	m.out, m.outSpare = make([]Envelope, 0, 4), make([]Envelope, 0, 4)
	m.arena, m.arenaSpare = make([]Update, 0, 24), make([]Update, 0, 24)
	m.queue = make([]queued, 0, 16)
	m.susp = make([]suspicion, 0, 2)
	return m
}

// Config returns the machine's configuration with defaults applied.
func (m *Machine) Config() Config { return m.cfg }

// Self returns the machine's own member entry (always Alive).
func (m *Machine) Self() Member { return Member{ID: m.self, Incarnation: m.inc, State: Alive} }

// Len returns the number of members, self included.
func (m *Machine) Len() int { return m.tab.len() + 1 }

// find returns the index of id in the table, or -1.
func (m *Machine) find(id ID) int { return m.tab.find(id) }

// State returns what the machine knows of id; ok is false for a member it
// does not know. For self it is Alive at the current incarnation.
func (m *Machine) State(id ID) (Member, bool) {
	if id == m.self {
		return m.Self(), true
	}
	i := m.find(id)
	if i < 0 {
		return Member{}, false
	}
	return m.tab.member(i), true
}

// Members appends every member, self included, in ID order, to dst.
func (m *Machine) Members(dst []Member) []Member {
	selfDone := false
	for i := range m.tab.len() {
		if !selfDone && m.self < m.tab.id(i) {
			dst = append(dst, m.Self())
			selfDone = true
		}
		dst = append(dst, m.tab.member(i))
	}
	if !selfDone {
		dst = append(dst, m.Self())
	}
	return dst
}

// Awareness returns the local health multiplier (1 when healthy, up to
// AwarenessMax): the factor applied to the machine's period and ping
// timeouts.
func (m *Machine) Awareness() int { return m.score + 1 }

// Stats returns the machine's counters.
func (m *Machine) Stats() Stats { return m.stats }

// Add makes id a member at incarnation inc (from the group layer). A new
// member is Alive and takes a random place in the probe order. A known
// member with a higher incarnation becomes Alive at it and any suspicion of
// it is dropped (CaRT's crt_swim_rank_check); otherwise Add changes
// nothing. Adding self raises the machine's incarnation to inc if higher.
func (m *Machine) Add(id ID, inc uint64) {
	if id == m.self {
		m.inc = max(m.inc, inc)
		return
	}
	i, added := m.tab.insert(id, inc)
	if !added {
		if inc > m.tab.incs[i] {
			was := m.tab.state[i]
			m.tab.incs[i], m.tab.state[i] = inc, Alive
			m.dropSuspicion(id)
			m.dropQueued(id)
			if was != Alive {
				m.event(id, m.self)
			}
		}
		return
	}
	m.order.dirty = true
	m.recompute()
}

// Grow reserves room for n more members, so that adding a large group
// member by member does not reallocate the table.
func (m *Machine) Grow(n int) {
	m.tab.grow(n)
}

// Remove forgets id (from the group layer): its entry, suspicion, queued
// updates and any probe about it; ping-reqs this member serves about it
// are nacked. Removing self does nothing.
func (m *Machine) Remove(id ID) {
	i := m.find(id)
	if i < 0 {
		return
	}
	m.tab.delete(i)
	m.order.dirty = true
	m.dropSuspicion(id)
	m.dropQueued(id)
	if m.probe.active && m.probe.target == id {
		m.probe.active = false
	}
	m.helpers = slices.DeleteFunc(m.helpers, func(h helping) bool {
		if h.target == id {
			m.send(h.requester, KindNack, h.reqSeq, h.target) // every PingReq is answered
			return true
		}
		return false
	})
	m.recompute()
}

// reorder draws a new probe order after the table changed size.
func (m *Machine) reorder() {
	n := m.tab.len()
	o := &m.order
	o.n, o.dirty = n, false
	if n == 0 {
		o.a, o.b, o.pos = 1, 0, 0
		return
	}
	o.b = m.rnd.IntN(n)
	o.a = 1
	if n > 2 {
		for {
			o.a = 1 + m.rnd.IntN(n-1)
			if gcd(o.a, n) == 1 {
				break
			}
		}
	}
	o.pos %= n
}

// Next returns the time at which Tick must next be called. Before the first
// Tick or Receive it is 0.
func (m *Machine) Next() time.Duration { return m.next }

// Outbox returns the messages queued since the previous Outbox call and
// clears the queue. The slice and the messages' Updates stay valid until the
// next Outbox call.
func (m *Machine) Outbox() []Envelope {
	out := m.out
	m.out, m.outSpare = m.outSpare[:0], out
	m.arena, m.arenaSpare = m.arenaSpare[:0], m.arena
	return out
}

// Events returns the transitions since the previous Events call and clears
// them. The slice stays valid until the next Events call.
func (m *Machine) Events() []Event {
	ev := m.events
	m.events, m.eventsSpare = m.eventsSpare[:0], ev
	return ev
}

// event records id's current state as an event.
func (m *Machine) event(id ID, from ID) {
	st, _ := m.State(id)
	m.events = append(m.events, Event{Member: st, Time: m.now, From: from})
}
