package msgr

import (
	"bufio"
	"errors"
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
//
// When a dispatcher is a DataPlacer, a MESSAGE whose data segment is at
// least PlaceMin bytes is read in parts (readPlaced) so that its data
// can land in the placer's buffers; every other frame takes the one-buffer
// path, which costs nothing more than before.
func (c *Conn) readLoop(r *socketRun, br *bufio.Reader) error {
	m := c.m
	e := r.e
	pol := c.Policy() // the throttles this socket's budget comes from
	lossy := pol.Lossy
	inj := m.cfg.Inject.SocketFailures
	var scratch []byte
	var ph *msg.Header // the header offered to DataPlacers; allocated on first use
	ackDue := false
	for {
		if inj > 0 && injectHit(inj) {
			return ErrInjectedFailure
		}
		n, retain := e.Need()
		var buf []byte
		var held int64 // throttle budget taken for this frame
		var recvStamp time.Time
		var release func(*msg.Message)
		var evs []msgr2.Event
		var placer DataPlacer // took this frame's data segment
		read := false         // the frame was read and fed by readPlaced
		if retain {
			recvStamp = time.Now()
			if err := c.takeBudget(&pol, int64(n)); err != nil {
				return err
			}
			held = int64(n)
			if n >= PlaceMin {
				if ps := m.placers.Load(); ps != nil {
					if sp, ok := e.Split(); ok && sp.Data >= PlaceMin {
						if ph == nil {
							ph = new(msg.Header)
						}
						var err error
						evs, placer, release, read, err = c.readPlaced(br, e, n, sp, *ps, ph)
						if err != nil {
							c.putBudget(&pol, held)
							return err
						}
					}
				}
			}
			if !read {
				buf, release = getBody(n)
			}
		} else {
			if cap(scratch) < n {
				scratch = make([]byte, n)
			}
			buf = scratch[:n]
		}
		if !read {
			if _, err := io.ReadFull(br, buf); err != nil {
				c.putBudget(&pol, held)
				return err
			}
		}
		now := time.Now()
		c.lastRecv.Store(now.UnixNano())
		if !read {
			var err error
			evs, err = e.Feed(buf)
			if err != nil {
				c.putBudget(&pol, held)
				return err
			}
		}
		for i := range evs {
			ev := &evs[i]
			switch ev.Kind {
			case msgr2.EvMessage:
				if ev.Dropped {
					m.log.Debug("dropping duplicate message", "conn", c.id, "seq", ev.Seq, "in_seq", e.InSeq())
					if release != nil {
						release(&msg.Message{})
						release = nil
					}
					if placer != nil {
						// Not reached: PeekMessage reports duplicates
						// before anything is placed.
						placer.UnplaceData(c, ph)
						placer = nil
					}
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
				mm.Release, release = release, nil
				m.injectDelay(c, mm)
				err := c.deliver(&pol, mm, held)
				held = 0
				// Deliver before advancing in_seq: an ack never covers a
				// message the dispatchers could still lose with the socket.
				c.inSeq.Store(ev.Seq)
				if err != nil {
					if placer != nil {
						placer.UnplaceData(c, ph)
					}
					return err
				}
				placer = nil
				ackDue = !lossy
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
		if ackDue && br.Buffered() == 0 {
			// Acknowledge once per burst of messages read, not per message;
			// a message going the other way would carry the ack anyway.
			ackDue = false
			c.mu.Lock()
			c.ackPending = true
			c.tryInline()
		}
	}
}

// readPlaced reads the body of a MESSAGE frame of n bytes that splits as
// sp, offering its data segment to placers (Messenger.placers) once the
// head (header, front, middle) is known. It reports read=false, having
// consumed nothing, when the head fits the read buffer and no placer took
// the data (or the message is a duplicate): the caller then reads the body
// as usual. Otherwise it has read the whole frame and fed it to e, and
// returns the events, the placer that took the data (nil if none) and the
// release function of the body buffer it allocated (nil if none).
//
// The head is peeked from br without copying and read into a buffer of
// its own (with room for the tail) only once a placer has taken the data;
// the data is read straight into the placed buffers (bufio.Reader hands
// large reads to the socket once its buffer is drained). A head larger
// than br's buffer is read into the prefix of a body buffer for the whole
// frame, whose remainder then takes the data if no placer does.
//
// On any error after placing it calls the placer's UnplaceData. *ph is the
// header offered to the placers.
func (c *Conn) readPlaced(br *bufio.Reader, e *msgr2.Engine, n int, sp msgr2.BodySplit, placers []DataPlacer, ph *msg.Header) (evs []msgr2.Event, placer DataPlacer, release func(*msg.Message), read bool, err error) {
	var head, body []byte
	head, err = br.Peek(sp.Head)
	if errors.Is(err, bufio.ErrBufferFull) {
		body, release = getBody(n)
		head = body[:sp.Head]
		if _, err = io.ReadFull(br, head); err != nil {
			return nil, nil, nil, true, err
		}
	} else if err != nil {
		return nil, nil, nil, true, err
	}
	pk, err := e.PeekMessage(head)
	if err != nil {
		return nil, nil, nil, true, err
	}
	var placed [][]byte
	if !pk.Dup {
		*ph = pk.Header
		placed, placer = c.placeData(placers, ph, pk.Front, sp.Data)
	}
	if placed == nil {
		if body == nil {
			return nil, nil, nil, false, nil
		}
		if _, err = io.ReadFull(br, body[sp.Head:]); err != nil {
			return nil, nil, nil, true, err
		}
		evs, err = e.Feed(body)
		return evs, nil, release, true, err
	}
	var tail []byte
	if body != nil {
		tail = body[sp.Head : sp.Head+sp.Tail]
	} else {
		// head aliases br's buffer: move it out before reading on.
		body, release = getBody(sp.Head + sp.Tail)
		head, tail = body[:sp.Head], body[sp.Head:]
		_, err = io.ReadFull(br, head)
	}
	for _, p := range placed {
		if err != nil {
			break
		}
		_, err = io.ReadFull(br, p)
	}
	if err == nil {
		_, err = io.ReadFull(br, tail)
	}
	if err == nil {
		evs, err = e.FeedSplit(head, placed, tail)
	}
	if err != nil {
		placer.UnplaceData(c, ph)
		return nil, nil, nil, true, err
	}
	return evs, placer, release, true, nil
}

// placeData offers the data of the message with header h to placers in
// order and returns the buffers of the first that takes it, or nil.
func (c *Conn) placeData(placers []DataPlacer, h *msg.Header, front []byte, dataLen int) ([][]byte, DataPlacer) {
	for _, p := range placers {
		bufs := p.PlaceData(c, h, front, dataLen)
		if bufs == nil {
			continue
		}
		if got := msg.Buffers(bufs).Len(); got != dataLen {
			c.m.log.Error("DataPlacer returned buffers of the wrong length; the messenger allocates instead",
				"conn", c.id, "type", h.Type, "tid", h.Tid, "placed", got, "data", dataLen)
			p.UnplaceData(c, h)
			return nil, nil
		}
		return bufs, p
	}
	return nil, nil
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

// Who is writing to the socket: the write state below belongs to them.
const (
	ownNone    uint8 = iota
	ownWriter        // the writer goroutine
	ownInline        // a Send caller writing inline (never blocks)
	ownHandoff       // an inline write was partial: the writer goroutine must finish it
)

// writeState is the encoder's buffers, used by whoever owns the write side
// (Conn.owner), so the writer goroutine and inline senders share them.
type writeState struct {
	wbuf  []byte
	iov   net.Buffers
	wv    net.Buffers // WriteTo consumes it; iov keeps the capacity
	batch []*msg.Message
	mf    msgr2.MessageFrame
	rest  []byte // handoff: the unwritten tail of an inline write
	lossy bool
}

// collectLocked moves the next batch of work into w: requeued messages
// first (keeping their sequence numbers), then the out queue by priority,
// numbering new messages; on a lossless session they join the sent list
// before they are written, so a failed write loses nothing. It reports
// whether there is anything to write. c.mu must be held.
func (c *Conn) collectLocked(w *writeState, e *msgr2.Engine) bool {
	w.batch = w.batch[:0]
	total := 0
	nReplay := 0
	for len(c.replay) > 0 && total < batchBytes {
		mm := c.replay[0]
		c.replay[0] = nil
		c.replay = c.replay[1:]
		w.batch = append(w.batch, mm)
		total += mm.Len() + 64
		nReplay++
	}
	if len(c.replay) == 0 {
		c.replay = nil
	}
	if total < batchBytes {
		w.batch = c.outq.popBatch(w.batch, batchBytes-total)
	}
	w.lossy = c.policy.Lossy
	for _, mm := range w.batch[nReplay:] {
		c.outSeq++
		mm.Header.Seq = c.outSeq
	}
	if !w.lossy {
		c.sent = append(c.sent, w.batch...)
	}
	ka, kaAck, stamp, ack := c.sendKA, c.sendKAAck, c.kaAckStamp, c.ackPending
	c.sendKA, c.sendKAAck, c.ackPending = false, false, false
	if len(w.batch) == 0 && !ka && !kaAck && !ack {
		return false
	}
	w.encode(c, e, ka, kaAck, stamp, ack)
	return true
}

// encode writes the frames of w.batch and the control frames into w.wbuf
// and w.iov.
func (w *writeState) encode(c *Conn, e *msgr2.Engine, ka, kaAck bool, stamp msgr2.Stamp, ack bool) {
	rev1 := e.Rev1()
	w.wbuf = w.wbuf[:0]
	w.iov = w.iov[:0]
	mark := 0 // start of wbuf not yet in iov
	inSeq := c.inSeq.Load()
	if kaAck {
		w.wbuf = e.AppendKeepaliveAck(w.wbuf, stamp)
	}
	if ka {
		now := time.Now()
		w.wbuf = e.AppendKeepalive(w.wbuf, msgr2.Stamp{Sec: uint32(now.Unix()), Nsec: uint32(now.Nanosecond())})
	}
	if ack && len(w.batch) == 0 {
		w.wbuf = e.AppendAck(w.wbuf, inSeq)
	}
	for _, mm := range w.batch {
		mm.Header.AckSeq = inSeq
		h := &mm.Header
		w.mf = msgr2.MessageFrame{
			Header: msgr2.Header2{
				Seq: h.Seq, Tid: h.Tid, Type: h.Type, Priority: uint16(h.Priority),
				Version: h.Version, DataOff: h.DataOff, AckSeq: inSeq,
				Flags: msg.FooterComplete | msg.FooterNoCRC, CompatVersion: h.CompatVersion,
			},
			Front: mm.Front, Middle: mm.Middle, Data: mm.Data,
		}
		w.mf.DataCRC, w.mf.DataCRCSet = mm.DataCRCAhead()
		w.wbuf = w.mf.AppendHead(w.wbuf, rev1)
		for _, p := range mm.Data {
			if len(p) < copyMax {
				w.wbuf = append(w.wbuf, p...)
				continue
			}
			if len(w.wbuf) > mark {
				w.iov = append(w.iov, w.wbuf[mark:])
			}
			w.iov = append(w.iov, p)
			mark = len(w.wbuf)
		}
		w.wbuf = w.mf.AppendTail(w.wbuf, rev1)
	}
	if len(w.iov) > 0 && len(w.wbuf) > mark {
		w.iov = append(w.iov, w.wbuf[mark:])
	}
}

// write writes what encode produced, blocking until it is all written.
func (w *writeState) write(nc net.Conn) error {
	var err error
	if len(w.iov) == 0 {
		_, err = nc.Write(w.wbuf)
	} else {
		w.wv = w.iov
		_, err = w.wv.WriteTo(nc)
		clear(w.iov)
	}
	return err
}

// done releases the batch after it was written.
func (w *writeState) done() {
	if w.lossy {
		// Nothing to keep: release what the messages hold.
		for _, mm := range w.batch {
			mm.Done()
		}
	}
	clear(w.batch)
	w.batch = w.batch[:0]
	if cap(w.wbuf) > keepBuf {
		w.wbuf = nil
	}
}

// writeLoop is the connection's writer (the seed's Pipe::Writer): woken
// by Send, keepalives and acks, it drains everything pending onto r with
// one write or writev per batch, unless an inline sender holds the write
// side, in which case that sender pokes it when done.
func (c *Conn) writeLoop(r *socketRun) {
	w := &c.ws
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
			if c.owner == ownInline {
				c.mu.Unlock()
				break
			}
			if c.owner == ownHandoff {
				c.owner = ownWriter
				c.mu.Unlock()
				_, err := r.nc.Write(w.rest)
				w.rest = nil
				w.done()
				if err != nil {
					c.release()
					r.fail(err)
					return
				}
				c.mu.Lock()
			}
			if !c.collectLocked(w, r.e) {
				c.owner = ownNone
				c.mu.Unlock()
				break
			}
			c.owner = ownWriter
			c.mu.Unlock()
			if inj > 0 && injectHit(inj) {
				c.release()
				r.fail(ErrInjectedFailure)
				return
			}
			c.lastWrite.Store(nanotime())
			err := w.write(r.nc)
			w.done()
			c.release()
			if err != nil {
				r.fail(err)
				return
			}
		}
	}
}

// release gives up the write side.
func (c *Conn) release() {
	c.mu.Lock()
	c.owner = ownNone
	c.mu.Unlock()
}

// inlineIdle is how long the socket must have been idle (no write) and
// the sender quiet (no Send) for a Send to write inline: a sender that is
// streaming messages leaves them to the writer goroutine, which coalesces
// them into one write.
const inlineIdle = int64(30 * time.Microsecond)

// inlineWrites enables writing from Send. Measured on the 2-vCPU VM it did
// not lower the 64 B round trip and halved the 16-in-flight rate (the
// writer coalesces better), so it is off; the code stays for machines
// where a wake-up costs more than a write.
var inlineWrites = false

func nanotime() int64 { return time.Now().UnixNano() }

// tryInline writes what is queued from the calling goroutine when the
// write side is free and the socket accepts it without blocking, saving
// the hand-off to the writer goroutine (a wake-up, which costs more than
// the write itself for small messages). It never blocks: what the socket
// does not take at once is handed to the writer. c.mu is held on entry
// and released on return.
func (c *Conn) tryInline() {
	r := c.run
	now := nanotime()
	prevSend := c.lastSend.Swap(now)
	if !inlineWrites || c.owner != ownNone || c.state != stateOpen || r == nil || r.raw == nil ||
		c.outq.bytes >= copyMax || len(c.replay) > 0 || c.m.cfg.Inject.SocketFailures > 0 ||
		now-c.lastWrite.Load() < inlineIdle || now-prevSend < inlineIdle {
		// Busy, not a socket, or large data (which the writer sends with
		// writev without copying): the writer goroutine does it.
		c.mu.Unlock()
		c.poke()
		return
	}
	w := &c.ws
	if !c.collectLocked(w, r.e) {
		c.mu.Unlock()
		return
	}
	c.owner = ownInline
	c.mu.Unlock()
	c.lastWrite.Store(now)
	n, err := r.tryWrite(w.wbuf)
	switch {
	case err != nil:
		w.done()
		c.release()
		r.fail(err)
	case n == len(w.wbuf):
		w.done()
		c.mu.Lock()
		c.owner = ownNone
		more := c.outq.n > 0 || len(c.replay) > 0 || c.sendKA || c.sendKAAck || c.ackPending
		c.mu.Unlock()
		if more {
			c.poke()
		}
	default:
		w.rest = w.wbuf[n:]
		w.wbuf = nil // the tail belongs to the writer now
		c.mu.Lock()
		c.owner = ownHandoff
		c.mu.Unlock()
		c.poke()
	}
}
