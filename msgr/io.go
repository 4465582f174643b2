package msgr

import (
	"bufio"
	"io"
	"net"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// readLoop reads frames from r until the socket fails, throttles what it
// receives and hands it to the dispatchers. It returns the error that
// ended it.
//
// Budget is taken before a message body is allocated, sized from the
// preamble (message count, then bytes, then dispatch bytes, as Ceph
// does): a peer cannot make the messenger hold more memory than the
// throttles allow, and waiting for budget stops this socket's reads,
// which is the back-pressure a slow consumer exerts on its senders.
func (c *Conn) readLoop(r *socketRun, br *bufio.Reader) error {
	m := c.m
	e := r.e
	pol := c.Policy() // the throttles this socket's budget comes from
	lossy := pol.Lossy
	inj := m.cfg.Inject.SocketFailures
	var scratch []byte
	for {
		if inj > 0 && injectHit(inj) {
			return ErrInjectedFailure
		}
		n, retain := e.Need()
		var buf []byte
		var held int64 // throttle budget taken for this frame
		var recvStamp time.Time
		if retain {
			recvStamp = time.Now()
			if err := c.takeBudget(&pol, int64(n)); err != nil {
				return err
			}
			held = int64(n)
			buf = make([]byte, n)
		} else {
			if cap(scratch) < n {
				scratch = make([]byte, n)
			}
			buf = scratch[:n]
		}
		if _, err := io.ReadFull(br, buf); err != nil {
			c.putBudget(&pol, held)
			return err
		}
		now := time.Now()
		c.lastRecv.Store(now.UnixNano())
		evs, err := e.Feed(buf)
		if err != nil {
			c.putBudget(&pol, held)
			return err
		}
		for i := range evs {
			ev := &evs[i]
			switch ev.Kind {
			case msgr2.EvMessage:
				if ev.Dropped {
					m.log.Debug("dropping duplicate message", "conn", c.id, "seq", ev.Seq, "in_seq", e.InSeq())
					continue
				}
				if ev.Skipped > 0 && !lossy {
					m.log.Warn("sequence gap", "conn", c.id, "seq", ev.Seq, "skipped", ev.Skipped)
				}
				mm := ev.Msg
				mm.RecvStamp = recvStamp
				mm.RecvCompleteStamp = now
				mm.ThrottleStamp = recvStamp
				mm.Conn = c
				m.injectDelay(c, mm)
				err := c.deliver(&pol, mm, held)
				held = 0
				// Deliver before advancing in_seq: an ack never covers a
				// message the dispatchers could still lose with the socket.
				c.inSeq.Store(ev.Seq)
				if err != nil {
					return err
				}
				if !lossy {
					c.mu.Lock()
					c.ackPending = true
					c.mu.Unlock()
					c.poke()
				}
			case msgr2.EvAck:
				if !lossy {
					c.mu.Lock()
					c.discardAckedLocked(ev.Seq)
					c.mu.Unlock()
				}
			case msgr2.EvKeepalive:
				c.lastKeepalive.Store(now.UnixNano())
				c.mu.Lock()
				c.sendKAAck = true
				c.kaAckStamp = ev.Stamp
				c.mu.Unlock()
				c.poke()
			case msgr2.EvKeepaliveAck:
				c.lastKeepaliveAck.Store(int64(ev.Stamp.Sec)*1e9 + int64(ev.Stamp.Nsec))
			}
		}
		c.putBudget(&pol, held) // a dropped duplicate
	}
}

// takeBudget takes one message and size bytes from the policy throttles
// and size bytes from the dispatch throttle, in Ceph's order, waiting as
// long as the connection is open.
func (c *Conn) takeBudget(p *Policy, size int64) error {
	if err := p.ThrottleMessages.Get(c.ctx, 1); err != nil {
		return err
	}
	if err := p.ThrottleBytes.Get(c.ctx, size); err != nil {
		p.ThrottleMessages.Put(1)
		return err
	}
	if err := c.m.dispatch.Get(c.ctx, size); err != nil {
		p.ThrottleBytes.Put(size)
		p.ThrottleMessages.Put(1)
		return err
	}
	return nil
}

// putBudget returns what takeBudget took (nothing if size is 0).
func (c *Conn) putBudget(p *Policy, size int64) {
	if size == 0 {
		return
	}
	c.m.release(dispatchItem{kind: itemMessage, c: c, pol: p, bytes: size})
}

// deliver fast-dispatches a received message or queues it for the
// dispatch goroutine; budget is the throttle budget it holds, returned
// once it has been dispatched.
func (c *Conn) deliver(p *Policy, mm *msg.Message, budget int64) error {
	m := c.m
	it := dispatchItem{kind: itemMessage, c: c, pol: p, m: mm, bytes: budget}
	for _, d := range *m.dispatchers.Load() {
		if fd, ok := d.(FastDispatcher); ok && fd.CanFastDispatch(mm) {
			mm.DispatchStamp = time.Now()
			fd.FastDispatch(mm)
			m.release(it)
			return nil
		}
	}
	if err := m.dq.Enqueue(c.ctx, c.id, uint16(mm.Header.Priority), int(budget), it); err != nil {
		m.release(it)
		return err
	}
	return nil
}

// Coalescing: payload buffers smaller than copyMax are copied into the
// write buffer; larger ones are handed to writev as they are. A batch
// stops growing at batchBytes.
const (
	copyMax    = 16 << 10
	batchBytes = 1 << 20
	keepBuf    = 4 << 20 // a write buffer grown past this is dropped after use
)

// writeLoop drains the connection's queues onto r: requeued messages
// first (with their sequence numbers), then the out queue by priority,
// plus keepalives and acks. Everything pending is encoded into one buffer
// (large data segments by reference) and written with one write or
// writev. On a lossless session each message moves to the sent list
// before it is written, so a failed write loses nothing.
func (c *Conn) writeLoop(r *socketRun) {
	var (
		wbuf  []byte
		iov   net.Buffers
		batch []*msg.Message
		mf    msgr2.MessageFrame
	)
	e := r.e
	nc := r.nc
	rev1 := e.Rev1()
	inj := c.m.cfg.Inject.SocketFailures
	for {
		select {
		case <-c.wake:
		case <-r.stop:
			return
		case <-c.ctx.Done():
			return
		}
		for {
			c.mu.Lock()
			if c.run != r || c.state != stateOpen {
				c.mu.Unlock()
				return
			}
			batch = batch[:0]
			total := 0
			nReplay := 0
			for len(c.replay) > 0 && total < batchBytes {
				mm := c.replay[0]
				c.replay[0] = nil
				c.replay = c.replay[1:]
				batch = append(batch, mm)
				total += mm.Len() + 64
				nReplay++
			}
			if len(c.replay) == 0 {
				c.replay = c.replay[:0:0]
			}
			if total < batchBytes {
				batch = c.outq.popBatch(batch, batchBytes-total)
			}
			lossy := c.policy.Lossy
			for _, mm := range batch[nReplay:] {
				c.outSeq++
				mm.Header.Seq = c.outSeq
			}
			if !lossy {
				c.sent = append(c.sent, batch...)
			}
			ka, kaAck, stamp, ack := c.sendKA, c.sendKAAck, c.kaAckStamp, c.ackPending
			c.sendKA, c.sendKAAck, c.ackPending = false, false, false
			c.mu.Unlock()
			if len(batch) == 0 && !ka && !kaAck && !ack {
				break
			}
			wbuf = wbuf[:0]
			iov = iov[:0]
			mark := 0 // start of wbuf not yet in iov
			inSeq := c.inSeq.Load()
			if kaAck {
				wbuf = e.AppendKeepaliveAck(wbuf, stamp)
			}
			if ka {
				now := time.Now()
				wbuf = e.AppendKeepalive(wbuf, msgr2.Stamp{Sec: uint32(now.Unix()), Nsec: uint32(now.Nanosecond())})
			}
			if ack && len(batch) == 0 {
				wbuf = e.AppendAck(wbuf, inSeq)
			}
			for _, mm := range batch {
				mm.Header.AckSeq = inSeq
				h := &mm.Header
				mf = msgr2.MessageFrame{
					Header: msgr2.Header2{
						Seq: h.Seq, Tid: h.Tid, Type: h.Type, Priority: uint16(h.Priority),
						Version: h.Version, DataOff: h.DataOff, AckSeq: inSeq,
						Flags: msg.FooterComplete | msg.FooterNoCRC, CompatVersion: h.CompatVersion,
					},
					Front: mm.Front, Middle: mm.Middle, Data: mm.Data,
				}
				wbuf = mf.AppendHead(wbuf, rev1)
				for _, p := range mm.Data {
					if len(p) < copyMax {
						wbuf = append(wbuf, p...)
						continue
					}
					if len(wbuf) > mark {
						iov = append(iov, wbuf[mark:])
					}
					iov = append(iov, p)
					mark = len(wbuf)
				}
				wbuf = mf.AppendTail(wbuf, rev1)
			}
			if inj > 0 && injectHit(inj) {
				r.fail(ErrInjectedFailure)
				return
			}
			var err error
			if len(iov) == 0 {
				_, err = nc.Write(wbuf)
			} else {
				if len(wbuf) > mark {
					iov = append(iov, wbuf[mark:])
				}
				_, err = iov.WriteTo(nc)
			}
			clear(iov[:cap(iov)])
			clear(batch)
			if err != nil {
				r.fail(err)
				return
			}
			if cap(wbuf) > keepBuf {
				wbuf = nil
			}
		}
	}
}
