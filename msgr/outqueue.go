package msgr

import "github.com/ferrymsg/ferry/msg"

// outQueue is a connection's send queue (Ceph's out_q): FIFO within a
// priority, highest priority first. Priorities in use are few, so the
// per-priority FIFOs live in a short slice sorted by descending priority.
// Not safe for concurrent use; the Conn's mutex guards it.
type outQueue struct {
	prios []prioFIFO
	n     int         // messages queued
	bytes int         // payload bytes queued
	b     *sendBudget // the messenger's account of every queue (budget.go)
}

type prioFIFO struct {
	prio msg.Priority
	q    []*msg.Message
	head int
}

func (q *outQueue) push(m *msg.Message) {
	p := m.Header.Priority
	i := 0
	for i < len(q.prios) && q.prios[i].prio > p {
		i++
	}
	if i == len(q.prios) || q.prios[i].prio != p {
		q.prios = append(q.prios, prioFIFO{})
		copy(q.prios[i+1:], q.prios[i:])
		q.prios[i] = prioFIFO{prio: p}
	}
	f := &q.prios[i]
	f.q = append(f.q, m)
	q.n++
	q.bytes += m.Len()
	q.b.added(q, m.Len())
}

// pushFront puts m ahead of everything at its priority (used to requeue).
func (q *outQueue) pushFront(m *msg.Message) {
	q.push(m)
	for i := range q.prios {
		f := &q.prios[i]
		if f.prio == m.Header.Priority {
			// Move the just-appended message to the head.
			last := len(f.q) - 1
			copy(f.q[f.head+1:], f.q[f.head:last])
			f.q[f.head] = m
			return
		}
	}
}

// pop removes the next message, or returns nil.
func (q *outQueue) pop() *msg.Message {
	for i := range q.prios {
		f := &q.prios[i]
		if f.head < len(f.q) {
			m := f.q[f.head]
			f.q[f.head] = nil
			f.head++
			if f.head == len(f.q) {
				f.q, f.head = f.q[:0], 0
			}
			q.n--
			q.bytes -= m.Len()
			q.b.removed(q, m.Len())
			return m
		}
	}
	return nil
}

// popBatch appends up to maxBytes of payload (at least one message, if
// any) to dst in send order.
func (q *outQueue) popBatch(dst []*msg.Message, maxBytes int) []*msg.Message {
	total := 0
	for q.n > 0 && (total < maxBytes || len(dst) == 0) {
		m := q.pop()
		total += m.Len() + 64
		dst = append(dst, m)
	}
	return dst
}

// drain removes and returns everything.
func (q *outQueue) drain() []*msg.Message {
	var out []*msg.Message
	for m := q.pop(); m != nil; m = q.pop() {
		out = append(out, m)
	}
	return out
}
