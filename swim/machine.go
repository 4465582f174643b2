package swim

import (
	"slices"
	"time"
)

// probe is the direct/indirect probe in progress (DAOS's PINGED, IPINGED).
type probe struct {
	active   bool
	indirect bool // ping-reqs sent
	target   ID
	seq      uint32
	deadline time.Duration
	nextAt   time.Duration // when the next probe may start
	helpers  int           // ping-reqs sent (nacks expected)
	nacks    int           // nacks received
}

// helping is an indirect ping this member serves for a requester (§1.7).
type helping struct {
	requester ID
	reqSeq    uint32 // the requester's probe seq, echoed in the ack or nack
	target    ID
	seq       uint32 // our ping's seq (shared by requests for one target)
	deadline  time.Duration
}

// suspicion is one suspected member at one incarnation.
type suspicion struct {
	id       ID
	inc      uint64
	start    time.Duration
	deadline time.Duration
	origin   ID // first accuser
	seq      uint32
	n        uint8 // confirmations: distinct accusers besides origin
	// accused: this member accused it itself (origin or confirmer), so
	// the deadline declares it dead without asking the origin.
	accused    bool
	confirming bool // the origin was asked (DAOS's confirm-with-origin round)
	conf       [MaxConfirmations]ID
}

// queued is an update waiting to be piggybacked.
type queued struct {
	u  Update
	tx int32
}

func (m *Machine) mult() time.Duration { return time.Duration(m.score + 1) }

func (m *Machine) nextSeq() uint32 {
	m.seq++
	return m.seq
}

// begin accepts an input's time: it keeps time monotonic and detects the
// machine's own delay (an input later than Next by more than
// StallThreshold), shifting every deadline by the time since the previous
// input, so that the machine does not blame others for the time it was not
// running: a probe waits, after the machine resumes, for as long as it had
// left, and the acks that queued up meanwhile are still counted.
func (m *Machine) begin(now time.Duration) {
	if !m.started {
		m.started = true
		m.now = now
		m.lastRecv = now
		var jitter time.Duration
		if m.cfg.Period > 0 {
			jitter = time.Duration(m.rnd.Int64N(int64(m.cfg.Period)))
		}
		m.probe.nextAt = now + jitter
		return
	}
	if now < m.now {
		now = m.now
	}
	if now-m.next > m.cfg.StallThreshold {
		// Every deadline keeps the time it had left when the machine
		// last ran.
		m.shift(now - m.now)
		m.stats.Stalls++
	}
	m.now = now
}

// shift moves every pending deadline d later.
func (m *Machine) shift(d time.Duration) {
	m.probe.deadline += d
	m.probe.nextAt += d
	for i := range m.helpers {
		m.helpers[i].deadline += d
	}
	for i := range m.susp {
		m.susp[i].start += d
		m.susp[i].deadline += d
	}
}

// recompute sets next to the earliest pending deadline.
func (m *Machine) recompute() {
	if !m.started {
		return
	}
	next := m.probe.nextAt
	if m.probe.active {
		next = m.probe.deadline
	}
	for i := range m.helpers {
		next = min(next, m.helpers[i].deadline)
	}
	for i := range m.susp {
		next = min(next, m.susp[i].deadline)
	}
	m.next = next
}

// Tick advances the machine to now: it fires the timers that are due
// (probe and indirect-probe deadlines, helper nacks, suspicion deadlines)
// and starts the next probe when its period has come. Call it at Next; an
// earlier call is harmless, a call more than StallThreshold later is taken
// as the machine's own delay (see Config.StallThreshold).
func (m *Machine) Tick(now time.Duration) {
	m.begin(now)
	now = m.now
	// Helper duties: nack the requests whose target stayed silent.
	for i := 0; i < len(m.helpers); {
		h := m.helpers[i]
		if now < h.deadline {
			i++
			continue
		}
		m.send(h.requester, KindNack, h.reqSeq, h.target)
		m.helpers = slices.Delete(m.helpers, i, i+1)
	}
	// The probe in progress.
	if m.probe.active && now >= m.probe.deadline {
		if !m.probe.indirect {
			m.indirect()
		} else {
			m.probeFailed()
		}
	}
	m.expireSuspicions()
	if !m.probe.active && now >= m.probe.nextAt {
		m.startProbe()
	}
	m.recompute()
}

// startProbe pings the next target of the round-robin order.
func (m *Machine) startProbe() {
	now := m.now
	m.probe.nextAt = now + m.cfg.Period*m.mult()
	t, ok := m.nextTarget()
	if !ok {
		return
	}
	seq := m.nextSeq()
	m.probe = probe{
		active:   true,
		target:   t,
		seq:      seq,
		deadline: now + m.cfg.PingTimeout*m.mult(),
		nextAt:   m.probe.nextAt,
	}
	m.stats.Probes++
	m.send(t, KindPing, seq, t)
}

// nextTarget walks the probe order from the cursor to the next member that
// is not dead (suspects are probed: that is how they learn of it).
func (m *Machine) nextTarget() (ID, bool) {
	if m.order.dirty {
		m.reorder()
	}
	o := &m.order
	for range o.n {
		i := (o.a*o.pos + o.b) % o.n
		o.pos++
		if o.pos >= o.n {
			o.pos = 0
		}
		if m.tab.state[i] != Dead {
			return m.tab.id(i), true
		}
	}
	return 0, false
}

// indirect asks k alive members to ping the probe's target.
func (m *Machine) indirect() {
	p := &m.probe
	p.indirect = true
	p.deadline = m.now + m.cfg.IndirectTimeout*m.mult()
	var picked [16]ID
	n := m.pickHelpers(p.target, picked[:m.cfg.IndirectPings])
	p.helpers = n
	for _, h := range picked[:n] {
		m.send(h, KindPingReq, p.seq, p.target)
	}
}

// pickHelpers fills dst with distinct alive members other than self and
// target, chosen at random, and returns how many it found.
func (m *Machine) pickHelpers(target ID, dst []ID) int {
	n := 0
	nm := m.tab.len()
	if len(dst) == 0 || nm == 0 {
		return 0
	}
	ok := func(i int) bool {
		id := m.tab.id(i)
		return m.tab.state[i] == Alive && id != target && !slices.Contains(dst[:n], id)
	}
	for range 4 * len(dst) {
		if n == len(dst) {
			return n
		}
		if i := m.rnd.IntN(nm); ok(i) {
			dst[n] = m.tab.id(i)
			n++
		}
	}
	// Few candidates: scan from a random start.
	start := m.rnd.IntN(nm)
	for j := range nm {
		if n == len(dst) {
			break
		}
		if i := (start + j) % nm; ok(i) {
			dst[n] = m.tab.id(i)
			n++
		}
	}
	return n
}

// probeFailed ends a probe that got no ack directly or indirectly: the
// target is suspected, and the local health score rises by the nacks that
// did not come (Lifeguard: if the helpers answered, the fault is the
// target's, not ours).
func (m *Machine) probeFailed() {
	p := m.probe
	m.probe.active = false
	m.stats.ProbeFails++
	if p.helpers == 0 {
		m.health(1)
	} else {
		m.health(p.helpers - p.nacks)
	}
	m.accuse(p.target)
}

func (m *Machine) probeSucceeded() {
	m.probe.active = false
	m.health(-1)
}

// health moves the local health score by d within [0, AwarenessMax−1].
func (m *Machine) health(d int) {
	m.score = min(max(m.score+d, 0), m.cfg.AwarenessMax-1)
}

// accuse records this member's own evidence against id: an alive member
// becomes suspect with self as origin; a suspect one gets self as a
// confirmation.
func (m *Machine) accuse(id ID) {
	i := m.find(id)
	if i < 0 {
		return
	}
	switch m.tab.state[i] {
	case Alive:
		m.tab.state[i] = Suspect
		inc := m.tab.incs[i]
		m.stats.Suspicions++
		m.suspect(id, inc, m.self)
		m.enqueue(Update{Member: Member{ID: id, Incarnation: inc, State: Suspect}, Origin: m.self})
		m.event(id, m.self)
	case Suspect:
		m.confirm(id, m.self)
	}
}

// suspect starts (or restarts) the suspicion of id at inc.
func (m *Machine) suspect(id ID, inc uint64, origin ID) {
	m.dropSuspicion(id)
	s := suspicion{id: id, inc: inc, start: m.now, origin: origin, accused: origin == m.self}
	s.deadline = s.start + m.cfg.suspicionTimeout(m.Len(), 0)
	m.susp = append(m.susp, s)
}

func (m *Machine) findSuspicion(id ID) *suspicion {
	for i := range m.susp {
		if m.susp[i].id == id {
			return &m.susp[i]
		}
	}
	return nil
}

func (m *Machine) dropSuspicion(id ID) {
	for i := range m.susp {
		if m.susp[i].id == id {
			m.susp = slices.Delete(m.susp, i, i+1)
			return
		}
	}
}

// confirm counts an independent accuser of suspect id (Lifeguard's
// LHA-Suspicion): the timeout shrinks and the confirmation is passed on,
// until Confirmations are counted.
func (m *Machine) confirm(id ID, by ID) {
	s := m.findSuspicion(id)
	if s == nil || by == s.origin || slices.Contains(s.conf[:s.n], by) {
		return
	}
	if by == m.self {
		s.accused = true
	}
	k := min(m.cfg.Confirmations, m.Len()-2)
	if int(s.n) >= k {
		return
	}
	s.conf[s.n] = by
	s.n++
	if !s.confirming {
		s.deadline = s.start + m.cfg.suspicionTimeout(m.Len(), int(s.n))
	}
	m.enqueue(Update{Member: Member{ID: id, Incarnation: s.inc, State: Suspect}, Origin: by})
}

// expireSuspicions handles the suspicions whose deadline has passed: one
// this member accused itself (or already checked) is declared dead; a
// second-hand one is first checked with its origin and with the suspect
// (DAOS's confirm-with-origin, §1.10).
func (m *Machine) expireSuspicions() {
	now := m.now
	if len(m.susp) > 0 && m.inOutage() {
		// This member hears nobody: its own network is the likelier
		// fault. Nobody dies until messages come again (DAOS's outage
		// rule), then the suspicions start over (Receive).
		for i := range m.susp {
			if s := &m.susp[i]; now >= s.deadline {
				s.deadline = now + m.cfg.Period
			}
		}
		return
	}
	for i := 0; i < len(m.susp); {
		s := &m.susp[i]
		if now < s.deadline {
			i++
			continue
		}
		if !s.accused && !s.confirming {
			s.confirming = true
			s.seq = m.nextSeq()
			s.deadline = now + m.cfg.IndirectTimeout*m.mult()
			m.stats.Confirms++
			if oi := m.find(s.origin); oi >= 0 && m.tab.state[oi] != Dead {
				m.send(s.origin, KindPingReq, s.seq, s.id)
			}
			m.send(s.id, KindPing, s.seq, s.id)
			i++
			continue
		}
		id, inc := s.id, s.inc
		m.susp = slices.Delete(m.susp, i, i+1)
		if j := m.find(id); j >= 0 {
			m.tab.state[j] = Dead
			m.stats.Deaths++
			m.enqueue(Update{Member: Member{ID: id, Incarnation: inc, State: Dead}, Origin: m.self})
			m.event(id, m.self)
		}
	}
}

// inOutage reports whether the machine has received nothing for 2/3 of
// SuspicionTimeout while at least two other members are not dead (DAOS's
// network-outage detection, §1.12: with fewer, silence is what a crash
// looks like).
func (m *Machine) inOutage() bool {
	if m.outage {
		return true
	}
	if m.now-m.lastRecv <= 2*m.cfg.SuspicionTimeout/3 {
		return false
	}
	live := 0
	for _, st := range m.tab.state {
		if st != Dead {
			live++
			if live >= 2 {
				m.outage = true
				m.stats.Outages++
				return true
			}
		}
	}
	return false
}

// Receive handles msg from member from, received at now: it merges the
// piggybacked updates, answers pings, serves ping-reqs, and matches acks
// and nacks to the probes in progress.
func (m *Machine) Receive(now time.Duration, from ID, msg *Message) {
	m.begin(now)
	m.stats.Received++
	if from == m.self {
		m.recompute()
		return
	}
	if m.outage {
		// The outage is over: give every suspect a full timeout to
		// refute now that it can be heard.
		m.outage = false
		for i := range m.susp {
			s := &m.susp[i]
			s.start, s.confirming = m.now, false
			s.deadline = s.start + m.cfg.suspicionTimeout(m.Len(), int(s.n))
		}
	}
	m.lastRecv = m.now
	fi := m.find(from)
	trusted := fi >= 0 && m.tab.state[fi] != Dead
	m.nacc, m.recvInc = 0, m.inc
	for i := range msg.Updates {
		m.apply(from, msg.Updates[i], trusted)
	}
	// A refutation goes at once to the accusers named in the message (a
	// ping: its first entries are their view of us and our own state),
	// not only by gossip: in a paused member's race against their
	// suspicion timeouts, gossip alone lost a few times in twenty. The
	// sender learns it from the answer when there is one.
	for _, a := range m.accusers[:m.nacc] {
		if a == from && (msg.Kind == KindPing || msg.Kind == KindPingReq) {
			continue
		}
		if i := m.find(a); i >= 0 && m.tab.state[i] != Dead {
			m.send(a, KindPing, m.nextSeq(), a)
		}
	}
	switch msg.Kind {
	case KindPing:
		if msg.Target == m.self {
			m.send(from, KindAck, msg.Seq, m.self)
		}
	case KindAck:
		m.acked(from, msg)
	case KindPingReq:
		m.help(from, msg)
	case KindNack:
		p := &m.probe
		if p.active && p.indirect && msg.Seq == p.seq && msg.Target == p.target && p.nacks < p.helpers {
			p.nacks++
			m.stats.Nacks++
		}
	}
	// Any message from the target proves it alive (DAOS §1.6).
	if m.probe.active && from == m.probe.target {
		m.probeSucceeded()
	}
	m.recompute()
}

// SendFailed tells the machine that msg, from its outbox, could not be sent
// to to (for example the transport found the member unreachable). A failed
// direct probe ping moves the probe's deadline to now, so the indirect
// pings go out at the next Tick (CaRT zeroes the deadline the same way);
// other failures change nothing, their deadlines run out as for a lost
// message.
func (m *Machine) SendFailed(now time.Duration, to ID, msg *Message) {
	m.begin(now)
	if p := &m.probe; p.active && !p.indirect && msg.Kind == KindPing && to == p.target && msg.Seq == p.seq {
		p.deadline = min(p.deadline, m.now)
	}
	m.recompute()
}

// acked matches an ack to the probe, to served ping-reqs and to
// confirm-with-origin rounds.
func (m *Machine) acked(from ID, msg *Message) {
	if p := &m.probe; p.active && msg.Seq == p.seq && msg.Target == p.target {
		m.probeSucceeded()
	}
	if from == msg.Target {
		for i := 0; i < len(m.helpers); {
			h := m.helpers[i]
			if h.target == from && h.seq == msg.Seq {
				m.send(h.requester, KindAck, h.reqSeq, h.target)
				m.helpers = slices.Delete(m.helpers, i, i+1)
				continue
			}
			i++
		}
	}
	if s := m.findSuspicion(msg.Target); s != nil && s.confirming && s.seq == msg.Seq {
		// The suspect answered (directly or through the origin) without
		// refuting: it is reachable, so the suspicion starts over.
		s.confirming = false
		s.start = m.now
		s.deadline = m.now + m.cfg.suspicionTimeout(m.Len(), int(s.n))
	}
}

// help serves a ping-req: ping the target (once, however many requesters
// ask) and answer each requester with an ack when it answers or a nack at
// PingTimeout.
func (m *Machine) help(from ID, msg *Message) {
	t := msg.Target
	if t == m.self {
		m.send(from, KindAck, msg.Seq, m.self)
		return
	}
	if m.find(t) < 0 || len(m.helpers) >= m.cfg.HelperLimit {
		m.send(from, KindNack, msg.Seq, t)
		return
	}
	var seq uint32
	var deadline time.Duration
	found := false
	for _, h := range m.helpers {
		if h.target == t {
			if h.requester == from && h.reqSeq == msg.Seq {
				return // duplicate
			}
			seq, deadline, found = h.seq, h.deadline, true
		}
	}
	if !found {
		seq = m.nextSeq()
		deadline = m.now + m.cfg.PingTimeout
		m.send(t, KindPing, seq, t)
	}
	m.helpers = append(m.helpers, helping{requester: from, reqSeq: msg.Seq, target: t, seq: seq, deadline: deadline})
}
