package swim

import "slices"

// apply merges one piggybacked update sent by from (§1.9):
//
//   - a higher incarnation wins; at an equal one Dead > Suspect > Alive;
//   - only a member raises its own incarnation: hearing itself suspected
//     or dead at its incarnation or above, it refutes with a higher one;
//   - an update about an unknown member is ignored (membership is the
//     group layer's, through Add and Remove);
//   - from an untrusted sender (unknown, or dead here) only updates about
//     this member and the sender's own Alive are taken (DAOS takes every
//     Alive from them; taking only the sender's own keeps a dead member
//     from reviving others while still letting it rejoin).
func (m *Machine) apply(from ID, u Update, trusted bool) {
	if u.State > Dead {
		return // not from DecodeMessage, which refuses it
	}
	if u.ID == m.self {
		if u.State == Alive {
			return
		}
		if u.Incarnation >= m.inc {
			m.inc = u.Incarnation + 1
			m.stats.Refutations++
			m.health(1)
			m.enqueue(Update{Member: m.Self(), Origin: m.self})
		}
		// Remember who accused us at the incarnation we had when the
		// message came: Receive tells them directly.
		if u.Incarnation >= m.recvInc && u.Origin != m.self && m.nacc < len(m.accusers) && !slices.Contains(m.accusers[:m.nacc], u.Origin) {
			m.accusers[m.nacc] = u.Origin
			m.nacc++
		}
		return
	}
	i := m.find(u.ID)
	if i < 0 {
		return
	}
	if !trusted && (u.State != Alive || u.ID != from) {
		return
	}
	st, inc := &m.tab.state[i], &m.tab.incs[i]
	was := *st
	switch u.State {
	case Alive:
		if u.Incarnation <= *inc {
			return
		}
		*inc, *st = u.Incarnation, Alive
		m.dropSuspicion(u.ID)
		m.enqueue(Update{Member: u.Member, Origin: u.ID})
	case Suspect:
		if u.Incarnation < *inc {
			return
		}
		if u.Incarnation == *inc {
			switch *st {
			case Dead:
				return
			case Suspect:
				m.confirm(u.ID, u.Origin)
				return
			}
		}
		*inc, *st = u.Incarnation, Suspect
		m.suspect(u.ID, u.Incarnation, u.Origin)
		m.enqueue(u)
	case Dead:
		if u.Incarnation < *inc || u.Incarnation == *inc && *st == Dead {
			return
		}
		*inc, *st = u.Incarnation, Dead
		m.dropSuspicion(u.ID)
		m.enqueue(u)
	default:
		return
	}
	if *st != was {
		m.event(u.ID, from)
	}
}

// enqueue queues u for piggybacking, replacing what it supersedes: every
// older entry about the member, except other accusers' suspicions at the
// same incarnation (they are independent confirmations).
func (m *Machine) enqueue(u Update) {
	m.queue = slices.DeleteFunc(m.queue, func(q queued) bool {
		e := q.u
		if e.ID != u.ID {
			return false
		}
		keep := u.State == Suspect && e.State == Suspect && e.Incarnation == u.Incarnation && e.Origin != u.Origin
		return !keep
	})
	if m.cfg.QueueLimit > 0 && len(m.queue) >= m.cfg.QueueLimit {
		worst := 0
		for i := range m.queue {
			if m.queue[i].tx >= m.queue[worst].tx {
				worst = i
			}
		}
		m.queue = slices.Delete(m.queue, worst, worst+1)
		m.stats.QueueDropped++
	}
	m.queue = append(m.queue, queued{u: u})
}

func (m *Machine) dropQueued(id ID) {
	m.queue = slices.DeleteFunc(m.queue, func(q queued) bool { return q.u.ID == id })
}

// entry is the mandatory piggyback entry for id as this member knows it.
func (m *Machine) entry(id ID) (Update, bool) {
	if id == m.self {
		return Update{Member: m.Self(), Origin: m.self}, true
	}
	i := m.find(id)
	if i < 0 {
		return Update{}, false
	}
	u := Update{Member: m.tab.member(i), Origin: id}
	switch u.State {
	case Suspect:
		if s := m.findSuspicion(id); s != nil {
			u.Origin = s.origin
		}
	case Dead:
		u.Origin = m.self
	}
	return u, true
}

// send queues a message for to, with the mandatory entries (target, self,
// receiver) and up to MaxPiggyback queued updates, those sent least often
// first (newest first among equals). An update is dropped from the queue
// once sent lambda·ceil(log10(n+1)) times.
func (m *Machine) send(to ID, kind Kind, seq uint32, target ID) {
	start := len(m.arena)
	var mand [3]ID
	nm := 0
	add := func(id ID) {
		if slices.Contains(mand[:nm], id) {
			return
		}
		if u, ok := m.entry(id); ok {
			m.arena = append(m.arena, u)
			mand[nm] = id
			nm++
		}
	}
	add(target)
	add(m.self)
	add(to)
	mandEnd := len(m.arena)

	if p := m.cfg.MaxPiggyback; p > 0 && len(m.queue) > 0 {
		var selBuf [MaxUpdates]int
		sel := selBuf[:0]
		for i := len(m.queue) - 1; i >= 0; i-- { // newest first
			tx := m.queue[i].tx
			// insertion into sel, ordered by tx ascending (stable: newer first)
			j := len(sel)
			for j > 0 && m.queue[sel[j-1]].tx > tx {
				j--
			}
			if j >= p {
				continue
			}
			if len(sel) < p {
				sel = append(sel, 0)
			}
			copy(sel[j+1:], sel[j:len(sel)-1])
			sel[j] = i
		}
		limit := int32(max(m.cfg.retransmitLimit(m.Len()), 1))
		expired := false
		for _, i := range sel {
			q := &m.queue[i]
			dup := false
			for _, u := range m.arena[start:mandEnd] {
				if u == q.u {
					dup = true
					break
				}
			}
			if !dup {
				m.arena = append(m.arena, q.u)
			}
			q.tx++
			if q.tx >= limit {
				expired = true
			}
		}
		if expired {
			m.queue = slices.DeleteFunc(m.queue, func(q queued) bool { return q.tx >= limit })
		}
	}
	ups := m.arena[start:len(m.arena):len(m.arena)]
	m.out = append(m.out, Envelope{To: to, Msg: Message{Kind: kind, Seq: seq, Target: target, Updates: ups}})
	m.stats.Sent++
}
