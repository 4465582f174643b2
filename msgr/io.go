package msgr

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

// frameReader is what the reader role of one socket carries from frame
// to frame: whoever holds the role (the socket's reader goroutine, or a
// goroutine waiting in Conn.Await, see readrole.go) reads with it, one
// frame per step.
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
type frameReader struct {
	c        *Conn
	r        *socketRun
	br       *bufio.Reader
	pol      Policy // the throttles this socket's budget comes from
	lossy    bool
	inj      int
	scratch  []byte
	ph       *msg.Header // the header offered to DataPlacers; allocated on first use
	lw       *lowat
	ackDue   bool
	framesIn uint64 // e.FramesIn already counted in the metrics

	// When (unix ns, Config.Clock) the last frame and the last message
	// were read: a reader that has read only control frames (keepalives)
	// for parkAfter parks as soon as it has read them (park.go), if it
	// has read one since it last parked (read).
	lastFrame, lastMsg int64
	read               bool

	ahead uint8 // frames in a row found buffered after the one read (growReadBuf)

	// fast: a message read since the holder last waited for the socket
	// went to a FastDispatcher, which may have woken callers waiting for
	// it (see the write-ownership protocol in write.go: deferLocalSends).
	fast bool
}

func (c *Conn) newFrameReader(r *socketRun, br *bufio.Reader) *frameReader {
	pol := c.Policy()
	now := c.m.cfg.Clock.Now().UnixNano()
	return &frameReader{c: c, r: r, br: br, pol: pol, lossy: pol.Lossy, inj: c.m.cfg.Inject.SocketFailures, lw: newLowat(r),
		lastFrame: now, lastMsg: now}
}

// burstReads is how many reads a reader goroutine makes in a row from
// its buffer, without waiting for the socket, before it writes what it
// was left to write (flushLeft) and lets other goroutines run. A read
// is one step: a frame's preamble or its body, so 8 reads are 4 message
// frames. The write keeps both peers busy at depth: with 16 requests in
// flight the replies to the first 4 of a burst reach the peer while the
// reader answers the rest, where a write per 8 frames made the two
// processes take turns (BENCHMARKS.md, "16 in flight, session 19": 8
// reads gave the most RPCs per second, 4 and 2 fewer, each write
// costing ~10 µs). The yield keeps a peer that keeps the socket full
// from holding the processor for the scheduler's whole time slice (10
// ms).
const burstReads = 8

// drainFrames is how many whole buffered frames a caller holding the
// reader role delivers before it gives the role up (drainBuffered).
const drainFrames = 8

// readLoop is the socket's reader goroutine: it holds the reader role
// whenever no waiting goroutine has taken it (readrole.go), and reads
// frames until the socket fails. It returns the error that ended it, or
// errParked when the connection went idle and the goroutine is to exit
// (park.go).
func (c *Conn) readLoop(r *socketRun, br *bufio.Reader) error {
	fr := c.newFrameReader(r, br)
	rr := &r.role
	rr.mu.Lock()
	rr.fr = fr // the role is the reader goroutine's to begin with
	rr.mu.Unlock()
	return c.readFrames(r, fr)
}

// readFrames is readLoop once its frame reader is set up; a parked
// reader goroutine started anew resumes here (park.go).
func (c *Conn) readFrames(r *socketRun, fr *frameReader) error {
	rr := &r.role
	for {
		for burst := 0; ; {
			yield, err := fr.step(true)
			if err != nil {
				c.dropHold()
				if err != errParked {
					rr.exit()
				}
				return err
			}
			if yield && rr.yieldBG() {
				c.dropHold()
				break
			}
			if fr.fast {
				c.holdLocalSends()
			}
			if fr.br.Buffered() == 0 {
				burst = 0
			} else if burst++; burst == burstReads {
				// A peer that keeps the socket full would hold the
				// processor for the scheduler's whole time slice (10
				// ms), an honest connection's turn waiting behind every
				// such reader's: give it to the others.
				// What the callers it delivered to send meanwhile is
				// written now, not once the buffer drains, which a
				// peer keeping it full could put off for good, and
				// which at depth would leave the peer idle meanwhile.
				burst = 0
				if !fr.fast || !c.deferLocalSends() {
					runtime.Gosched()
				}
				fr.fast = false
				c.flushLeft(r)
			}
		}
		if err := rr.acquireBG(r); err != nil {
			rr.exit()
			return err
		}
	}
}

// step reads one frame and acts on it. With interruptible, the wait for
// a frame's first byte can be cut short by the role (readrole.go): step
// then returns yield=true having read nothing.
func (fr *frameReader) step(interruptible bool) (yield bool, err error) {
	c, r := fr.c, fr.r
	m := c.m
	e := r.e
	w := &c.ws
	pol := &fr.pol
	if fr.inj > 0 && injectHit(fr.inj) {
		return false, ErrInjectedFailure
	}
	n, retain := e.Need()
	if fr.br.Buffered() < n {
		// About to wait for the socket: write what was left for us,
		// with what the callers just delivered to send meanwhile.
		if fr.fast {
			fr.fast = false
			c.deferLocalSends()
		}
		c.flushLeft(r)
	}
	if interruptible && m.budget.pressure() && r.role.isBG() {
		if err := c.pauseIfOverShare(r); err != nil {
			return false, err
		}
	}
	if interruptible && fr.br.Buffered() == 0 {
		if stop, err := r.role.waitFrame(r, fr); stop || err != nil {
			return stop, err
		}
	}
	br := fr.br // waitFrame may have given it back and taken another
	// The whole frame is buffered: reading it is a copy, and the stamp
	// taken before it also says when it was fully read (one clock
	// reading fewer per message; a reading costs 60-150 ns here).
	whole := br.Buffered() >= n
	var buf []byte
	var held int64 // throttle budget taken for this frame
	var recvStamp, throttleStamp time.Time
	var release func(*msg.Message)
	var evs []msgr2.Event
	var placer DataPlacer // took this frame's data segment
	read := false         // the frame was read and fed by readPlaced
	if retain {
		recvStamp = m.cfg.Clock.Now()
		waited, err := c.takeBudget(pol, int64(n), r)
		if err != nil {
			return false, err
		}
		throttleStamp = recvStamp
		if waited {
			throttleStamp = m.cfg.Clock.Now()
		}
		held = int64(n)
		if n >= PlaceMin {
			if ps := m.placers.Load(); ps != nil {
				if sp, ok := e.Split(); ok && sp.Data >= PlaceMin {
					if fr.ph == nil {
						fr.ph = new(msg.Header)
					}
					var err error
					evs, placer, release, read, err = c.readPlaced(fr.lw, br, e, n, sp, *ps, fr.ph)
					if err != nil {
						c.putBudget(pol, held)
						return false, err
					}
				}
			}
		}
		if !read {
			buf, release = getBody(n)
		}
	} else {
		if cap(fr.scratch) < n {
			fr.scratch = make([]byte, n)
		}
		buf = fr.scratch[:n]
	}
	if !read {
		var err error
		evs, err = c.readBody(fr.lw, br, e, buf)
		if err != nil {
			c.putBudget(pol, held)
			return false, err
		}
	}
	if f := e.FramesIn(); f != fr.framesIn {
		m.met.framesReceived(f - fr.framesIn)
		fr.framesIn = f
	}
	now := throttleStamp // recvStamp, or when the throttle let the frame in
	// A preamble leaves the stamps to the step that reads its body, next
	// (one clock reading fewer per frame; 60-150 ns here).
	if retain || len(evs) > 0 || !e.InFrame() {
		if !retain || !whole {
			now = m.cfg.Clock.Now()
		}
		c.lastRecv.Store(now.UnixNano())
		fr.lastFrame, fr.read = now.UnixNano(), true
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
					placer.UnplaceData(c, fr.ph)
					placer = nil
				}
				continue
			}
			if ev.Skipped > 0 && !fr.lossy {
				m.log.Warn("sequence gap", "conn", c.id, "seq", ev.Seq, "skipped", ev.Skipped)
			}
			mm := ev.Msg
			mm.RecvStamp = recvStamp
			mm.RecvCompleteStamp = now
			mm.ThrottleStamp = throttleStamp
			mm.Conn = c
			mm.Release, release = release, nil
			m.injectDelay(c, mm)
			fast, err := c.deliver(pol, mm, held)
			fr.fast = fr.fast || fast
			held = 0
			// Deliver before advancing in_seq: an ack never covers a
			// message the dispatchers could still lose with the socket.
			c.inSeq.Store(ev.Seq)
			if err != nil {
				if placer != nil {
					placer.UnplaceData(c, fr.ph)
				}
				return false, err
			}
			placer = nil
			fr.ackDue = !fr.lossy
			fr.lastMsg = fr.lastFrame
		case msgr2.EvAck:
			if !fr.lossy {
				c.mu.Lock()
				c.discardAckedLocked(ev.Seq)
				c.mu.Unlock()
			}
		case msgr2.EvKeepalive:
			c.lastKeepalive.Store(now.UnixNano())
			c.mu.Lock()
			c.sendKAAck = true
			c.kaAckStamp = ev.Stamp
			c.tryInline(false) // written now, without starting the writer goroutine, if the side is free
		case msgr2.EvKeepaliveAck:
			c.lastKeepaliveAck.Store(int64(ev.Stamp.Sec)*1e9 + int64(ev.Stamp.Nsec))
			c.m.met.keepaliveAcked(unixTime(c.lastKeepaliveAck.Load()), c.m.cfg.Clock.Now())
		}
	}
	c.putBudget(pol, held) // a dropped duplicate
	// The engine reuses the events' array: let go of the messages, or an
	// idle connection would keep the last one it received (and its body).
	clear(evs)
	if fr.ackDue && br.Buffered() == 0 {
		// Acknowledge once per burst of messages read, not per message;
		// a message going the other way would carry the ack anyway.
		// The reader writes it with what it queued while delivering,
		// before it next waits for the socket.
		fr.ackDue = false
		c.mu.Lock()
		c.ackPending = true
		c.mu.Unlock()
		w.pending.Store(true)
	}
	if br.Size() < readBufSize {
		// Frames arriving faster than they are read, or frames larger
		// than the small buffer (each then takes a read of its own past
		// it): a large buffer, fewer reads from the socket.
		if n <= br.Size() && br.Buffered() == 0 {
			fr.ahead = 0
		} else if fr.ahead++; fr.ahead >= growAfter {
			fr.growReadBuf()
		}
	}
	return false, nil
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
func (c *Conn) readPlaced(lw *lowat, br *bufio.Reader, e *msgr2.Engine, n int, sp msgr2.BodySplit, placers []DataPlacer, ph *msg.Header) (evs []msgr2.Event, placer DataPlacer, release func(*msg.Message), read bool, err error) {
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
	left := sp.Data
	crc := msgr2.SegmentCRCInit
	pcrc := &crc
	if !e.DataCRC() {
		pcrc = nil
	}
	for _, p := range placed {
		if err != nil {
			break
		}
		err = lw.read(br, p, left, pcrc)
		left -= len(p)
	}
	lw.set(1)
	if err == nil {
		_, err = io.ReadFull(br, tail)
	}
	if err == nil {
		if pcrc == nil {
			evs, err = e.FeedSplit(head, placed, tail) // no data CRC to check
		} else {
			evs, err = e.FeedSplitCRC(head, placed, tail, crc)
			if err == nil {
				setReceivedDataCRC(evs, crc)
			}
		}
	}
	if err != nil {
		placer.UnplaceData(c, ph)
		return nil, nil, nil, true, err
	}
	return evs, placer, release, true, nil
}

// Reading large data (placed, or into a body buffer), the reader raises the socket's receive low
// water mark (SO_RCVLOWAT) so that it is woken once per lowatMax bytes
// rather than for every segment that arrives: each wake-up costs the
// sender (whose write delivers the segment and wakes the reader) as much
// as copying tens of kilobytes. The mark never exceeds what is left of
// the frame, so a peer that sends nothing more still completes it (and
// Linux grows the receive buffer to hold a mark it accepts).
//
// lowatMax was 256 KiB until session 3. At 1 MiB (one bulk chunk), in 4
// interleaved rounds against the old value, the 1 MiB round trip went
// from 0.90–1.02 to 1.00–1.14 of the raw floor, and the medians of bulk
// over the floor from 0.62 to 0.78 (PUT 4 MiB), 0.88 to 0.96 (PUT 16 MiB),
// 0.69 to 0.75 (GET 4 MiB) and 0.68 to 0.71 (GET 16 MiB).
//
// The mark is raised only where the data can arrive paced (lowatPays):
// a TCP socket whose congestion control paces its sender (BBR), or a
// socket that is not TCP. On loopback under cubic, stock kernels' default,
// the sender's writes land in bursts, each wake-up already brings most of
// a chunk, and raising the mark costs more than it saves: interleaved
// against raising it, 5 rounds each, cubic, the medians of ferry over
// raw-chunked went from 0.62 to 0.71 (GET 1 MiB), 0.77 to 0.85 (GET 16
// MiB), 0.69 to 0.76 (PUT 16 MiB) and 0.59 to 0.60 (PUT 1 MiB), CPU per
// byte down in each; under BBR never raising it cost as much the other
// way (GET 16 MiB 1.07 to 0.88, PUT 16 MiB 1.00 to 0.68).
const (
	lowatMin = 256 << 10 // data at least this large is read with a raised mark
	lowatMax = 1 << 20
)

// lowat is the reader's handle on its socket's receive low water mark
// (one per socket, so that changing it does not allocate).
type lowat struct {
	raw  syscall.RawConn     // nil if the connection is not a socket
	cr   transport.CRCReader // copies and checksums in one pass (shm), if not a socket; else nil
	pace bool                // the mark may be raised: the socket's data can arrive paced (lowatPays)
	mark int                 // the mark in force (1 is the kernel's default)
	v    int
	fn   func(uintptr)
}

func newLowat(r *socketRun) *lowat {
	l := &lowat{raw: r.raw, mark: 1}
	if cr, ok := r.nc.(transport.CRCReader); ok && r.raw == nil {
		l.cr = cr
	}
	l.fn = l.setFD
	if l.raw != nil {
		_ = l.raw.Control(func(fd uintptr) { l.pace = lowatPays(fd) })
	}
	return l
}

func (l *lowat) setFD(fd uintptr) {
	setRcvLowat(fd, l.v)
}

func (l *lowat) set(v int) {
	if v != l.mark {
		l.v, l.mark = v, v
		_ = l.raw.Control(l.fn)
	}
}

// read fills p from br; left is what remains of the data being read,
// p included (at least len(p)). With at least lowatMin bytes left, reads
// that go to the socket wait for min(lowatMax, left) bytes once a read
// from the socket has come up short: the first takes what the kernel
// holds, and when that is all of p (under cubic the sender's write has
// usually landed whole by the time the reader is woken for its first
// byte) the mark is never raised nor reset. Raising it costs more than a
// read when the data is there already: the kernel checks the new mark
// against the queue at once (tcp_set_rcvlowat calls tcp_data_ready)
// and wakes the socket's pollers (the Go netpoller's thread on the other
// CPU): 5-28 µs per set in a trace of a 1 MiB GET under cubic. The caller resets the mark (set(1)) when the
// data is read, which costs nothing if it was never raised.
//
// With crc set, read folds each piece into *crc as it lands
// (msgr2.UpdateSegmentCRC), while the piece is still in the CPU's cache
// and before the rest of the data has arrived, so that checking the data
// segment's CRC costs next to nothing once its last byte is in.
//
// On a connection that checksums as it copies (transport.CRCReader,
// shm), read takes what br holds and then reads the rest straight from
// the connection, the copy and the CRC one pass over the data.
func (l *lowat) read(br *bufio.Reader, p []byte, left int, crc *uint32) error {
	if l.cr != nil && crc != nil {
		return l.readCRC(br, p, crc)
	}
	if left < lowatMin && l.mark == 1 || l.raw == nil || !l.pace {
		if crc == nil {
			_, err := io.ReadFull(br, p)
			return err
		}
		return readFolding(br, p, crc)
	}
	short := false // a read from the socket returned less than asked
	for len(p) > 0 {
		fromSocket := br.Buffered() == 0
		if want := min(lowatMax, left); fromSocket && (want < l.mark || l.mark == 1 && short) {
			l.set(max(1, want))
		}
		k, err := br.Read(p)
		if crc != nil {
			*crc = msgr2.UpdateSegmentCRC(*crc, p[:k])
		}
		short = short || fromSocket && k < len(p)
		p, left = p[k:], left-k
		if err != nil && (len(p) > 0 || !errors.Is(err, io.EOF)) {
			return err
		}
	}
	return nil
}

// readFolding fills p from br, folding each piece into *crc as it lands
// rather than all of p once it is in. Where the sender's write lands in
// pieces while the reader reads (the two processes on different CPUs:
// under cubic a 1 MiB message arrives in 64 KiB segments, about 17 reads),
// the CRC of what has arrived runs while the rest is on its way, and
// meets each piece in the cache; where the write has landed whole by the
// first read (one CPU) it is one read and one CRC, as before.
func readFolding(br *bufio.Reader, p []byte, crc *uint32) error {
	for len(p) > 0 {
		k, err := br.Read(p)
		*crc = msgr2.UpdateSegmentCRC(*crc, p[:k])
		p = p[k:]
		if err != nil && (len(p) > 0 || !errors.Is(err, io.EOF)) {
			return err
		}
	}
	return nil
}

// readCRC is read on a transport.CRCReader.
func (l *lowat) readCRC(br *bufio.Reader, p []byte, crc *uint32) error {
	for len(p) > 0 {
		if n := br.Buffered(); n > 0 {
			k, _ := br.Read(p[:min(n, len(p))])
			*crc = msgr2.UpdateSegmentCRC(*crc, p[:k])
			p = p[k:]
			continue
		}
		// br is empty, so the connection's next bytes are p's. The
		// segment CRC is ceph_crc32c, crc32.Update's with both
		// inversions left out.
		k, c, err := l.cr.ReadCRC(p, ^*crc)
		*crc = ^c
		p = p[k:]
		if err != nil && (len(p) > 0 || !errors.Is(err, io.EOF)) {
			return err
		}
	}
	return nil
}

// crcAheadMin is the smallest data segment whose CRC the reader computes
// as the data arrives (lowat.read) rather than leaving it to the engine.
const crcAheadMin = 64 << 10

// readBody reads the body of the frame the engine waits for into buf
// (exactly its length) and feeds it. A MESSAGE with at least crcAheadMin bytes of data is
// read in three parts, the data's CRC computed as it arrives.
func (c *Conn) readBody(lw *lowat, br *bufio.Reader, e *msgr2.Engine, buf []byte) ([]msgr2.Event, error) {
	sp, ok := e.Split()
	if !ok || sp.Data < crcAheadMin || !e.DataCRC() {
		err := lw.read(br, buf, len(buf), nil)
		lw.set(1)
		if err != nil {
			return nil, err
		}
		return e.Feed(buf)
	}
	crc := msgr2.SegmentCRCInit
	_, err := io.ReadFull(br, buf[:sp.Head])
	if err == nil {
		err = lw.read(br, buf[sp.Head:sp.Head+sp.Data], sp.Data, &crc)
		lw.set(1)
	}
	if err == nil {
		_, err = io.ReadFull(br, buf[sp.Head+sp.Data:])
	}
	if err != nil {
		return nil, err
	}
	evs, err := e.FeedBodyCRC(buf, crc)
	if err == nil {
		setReceivedDataCRC(evs, crc)
	}
	return evs, err
}

// setReceivedDataCRC records on the messages of evs the data CRC the
// reader computed and the engine checked (msg.Message.ReceivedDataCRC).
func setReceivedDataCRC(evs []msgr2.Event, crc uint32) {
	for i := range evs {
		if ev := &evs[i]; ev.Kind == msgr2.EvMessage && ev.Msg != nil {
			ev.Msg.SetReceivedDataCRC(crc)
		}
	}
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

// deliver fast-dispatches a received message or queues it for the
// dispatch goroutine; budget is the throttle budget it holds, returned
// once it has been dispatched. It reports whether a FastDispatcher took
// it.
func (c *Conn) deliver(p *Policy, mm *msg.Message, budget int64) (fast bool, err error) {
	m := c.m
	it := dispatchItem{kind: itemMessage, c: c, pol: p, m: mm, bytes: budget}
	m.met.received(mm.Header.Src.Type, mm)
	if c.faulted.Load() {
		// Its peer broke the protocol: nothing more it sent is taken,
		// and the reader stops.
		mm.Done()
		m.release(it)
		return false, ErrPeerFault
	}
	for _, d := range *m.dispatchers.Load() {
		if fd, ok := d.(FastDispatcher); ok && fd.CanFastDispatch(mm) {
			mm.DispatchStamp = mm.RecvCompleteStamp // now, to within the delivery's own cost
			c.ws.rd.Store(true)
			fd.FastDispatch(mm)
			if !c.ws.hold {
				c.ws.rd.Store(false)
			}
			m.release(it)
			return true, nil
		}
	}
	if err := m.dq.Enqueue(c.ctx, c.id, uint16(mm.Header.Priority), int(budget), it); err != nil {
		m.release(it)
		return false, err
	}
	return false, nil
}

// Coalescing: payload buffers smaller than copyMax are copied into the
// write buffer; larger ones are handed to writev as they are. A batch
// stops growing at batchBytes.
const (
	copyMax    = 16 << 10
	batchBytes = 1 << 20
	keepBuf    = 4 << 20 // a write buffer grown past this is dropped after use
)

// writeState is the encoder's buffers, used by whoever owns the write side
// (Conn.owner), so the writer goroutine and inline senders share them.
//
// A batch is written in stages when it holds messages whose data CRC is
// deferred (crcFix): the bytes up to the end of such a message's data go
// out first, then the CRC is computed and patched into the epilogue that
// starts the next stage. The data is then read for the CRC right after
// the kernel copied it, from the cache, instead of from memory before the
// copy; on the sender of a bulk stream that halves what the CRC costs.
type writeState struct {
	wbuf  []byte
	iov   net.Buffers // the batch: pieces of wbuf and large data buffers
	batch []*msg.Message
	lossy bool

	deferOK bool // encode may defer data CRCs (the writes go through RawConn)
	// Cork minus Uncork calls (write.go); here, where the two flags
	// above leave room, so that Conn keeps its allocation size class.
	corks atomic.Int32
	fix   []crcFix // deferred data CRCs, in iov order

	// Progress through iov: pieces before pos are written, and skip
	// bytes of iov[pos]; fixes before fi are patched.
	pos, skip, fi int

	// Handoff: an inline write was partial; the rest of the batch is for
	// the writer goroutine of restRun (a later socket's writer drops it:
	// the session replays the batch instead).
	restRun *socketRun

	// encErr: the batch could not be encoded (secure mode out of
	// nonces); its owner fails the socket instead of writing it.
	encErr error

	// writevFD's arguments and result, kept here so that a writev does
	// not allocate a closure.
	iovecs []iovec
	one    []byte // or the one buffer to write
	vfn    func(uintptr) bool
	vblock bool // wait for the socket (writer) rather than give up (inline)
	hold   bool // the reader goroutine keeps rd set between frames (holdLocalSends); its own
	vn     int
	verr   error

	// Reader-side flushing. rd is set while the reader goroutine runs a
	// FastDispatcher: small messages sent meanwhile (typically the
	// dispatcher answering on the reader goroutine) are left queued
	// with pending set, and the reader writes them itself, all in one
	// write, before it next waits for the socket (readLoop). This saves
	// the hand-off to the writer goroutine, which costs more than the
	// write. The pair follows Dekker's pattern: a sender stores pending
	// then loads rd, the reader stores rd then loads pending, so at least
	// one of them sees the other and the output is not stranded.
	rd      atomic.Bool
	pending atomic.Bool
}

// crcFix is a data CRC that encode left as zero in an epilogue: once
// iov[after] (the message's last data buffer) is written, the CRC of
// data goes into iov[piece][off:off+4].
type crcFix struct {
	data       msg.Buffers
	after      int
	piece, off int
	pos        int // the CRC's offset in wbuf, until piece is known

	// fused: iov[first..after] is the data (but for small buffers
	// before it, whose CRC is crc0), each buffer a piece of its own, and
	// the CRC is folded into crc as they are written (writeFused).
	fused     bool
	first     int
	crc0, crc uint32
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
	// Deferring data CRCs (crcFix) pays when the batch streams several
	// messages; for a lone message it only adds a system call for the
	// epilogue, which the receiver waits for anyway (1 MiB msgr round
	// trip under cubic, 3 interleaved rounds: 1645-1887 round trips/s
	// deferred, 2043-2159 not).
	w.deferOK = c.run != nil && c.run.raw != nil && len(w.batch) > 1
	for _, mm := range w.batch[nReplay:] {
		c.outSeq++
		mm.Header.Seq = c.outSeq
		c.m.met.sent(c.peerName.Type, mm)
	}
	if nReplay > 0 {
		c.m.met.resentAdd(nReplay)
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
	c.m.met.framesSent(len(w.batch), ka, kaAck, ack)
	return true
}

// encode writes the frames of w.batch and the control frames into w.wbuf
// and w.iov.
func (w *writeState) encode(c *Conn, e *msgr2.Engine, ka, kaAck bool, stamp msgr2.Stamp, ack bool) {
	if r := c.run; r != nil && r.v1 != nil {
		w.encodeV1(c, r.v1, ka, kaAck, stamp, ack)
		return
	}
	rev1 := e.Rev1()
	w.wbuf = w.wbuf[:0]
	w.iov = w.iov[:0]
	w.fix = w.fix[:0]
	w.pos, w.skip, w.fi = 0, 0, 0
	if e.Secure() {
		w.encErr = w.encodeSecure(c, e, ka, kaAck, stamp, ack)
		return
	}
	mark := 0 // start of wbuf not yet in iov
	// addPiece appends wbuf[mark:] to iov, placing the deferred CRCs
	// that fall in it.
	addPiece := func() {
		for k := range w.fix {
			if f := &w.fix[k]; f.piece < 0 && f.pos >= mark {
				f.piece, f.off = len(w.iov), f.pos-mark
			}
		}
		w.iov = append(w.iov, w.wbuf[mark:])
		mark = len(w.wbuf)
	}
	inSeq := c.inSeq.Load()
	if kaAck {
		w.wbuf = e.AppendKeepaliveAck(w.wbuf, stamp)
	}
	if ka {
		now := c.m.cfg.Clock.Now()
		w.wbuf = e.AppendKeepalive(w.wbuf, msgr2.Stamp{Sec: uint32(now.Unix()), Nsec: uint32(now.Nanosecond())})
	}
	if ack && len(w.batch) == 0 {
		w.wbuf = e.AppendAck(w.wbuf, inSeq)
	}
	var mf msgr2.MessageFrame // on the stack: not kept in writeState (its 200 bytes were every idle Conn's)
	for _, mm := range w.batch {
		mm.Header.AckSeq = inSeq
		mf = msgr2.MessageFrame{Header: header2(&mm.Header, inSeq), Front: mm.Front, Middle: mm.Middle, Data: mm.Data}
		mf.DataCRC, mf.DataCRCSet = mm.DataCRCAhead()
		if !e.DataCRC() {
			mf.DataCRC, mf.DataCRCSet = 0, true // FeatureNoDataCRC
		}
		deferCRC := false
		fused, big := false, 0
		if !mf.DataCRCSet && c.run != nil && c.run.cw != nil {
			big, fused = fusedCRC(mm.Data)
		}
		if fused {
			// Checksummed as it is copied out (writeFused).
			mf.DataCRC, mf.DataCRCSet = 0, true
		}
		if w.deferOK && !mf.DataCRCSet {
			for _, p := range mm.Data {
				if len(p) >= copyMax {
					// Written from its own buffer: CRC it once written.
					deferCRC = true
					mf.DataCRC, mf.DataCRCSet = 0, true
					break
				}
			}
		}
		w.wbuf = mf.AppendHead(w.wbuf, rev1)
		first := -1
		for _, p := range mm.Data {
			if len(p) < copyMax {
				w.wbuf = append(w.wbuf, p...)
				continue
			}
			if len(w.wbuf) > mark {
				addPiece()
			}
			if first < 0 {
				first = len(w.iov)
			}
			w.iov = append(w.iov, p)
		}
		w.wbuf = mf.AppendTail(w.wbuf, rev1)
		if fused {
			w.fix = append(w.fix, crcFix{data: mm.Data, first: first, after: len(w.iov) - 1, piece: -1, pos: len(w.wbuf) - 4,
				fused: true, crc0: mm.Data[:big].CRC(msgr2.SegmentCRCInit)})
		}
		if deferCRC {
			// The data CRC is the epilogue's last word (segment 3 of 4).
			w.fix = append(w.fix, crcFix{data: mm.Data, after: len(w.iov) - 1, piece: -1, pos: len(w.wbuf) - 4})
		}
	}
	if len(w.wbuf) > mark || len(w.iov) == 0 {
		addPiece()
	}
}

// header2 is the msgr2 header of a message with header h, acknowledging
// inSeq.
func header2(h *msg.Header, inSeq uint64) msgr2.Header2 {
	return msgr2.Header2{
		Seq: h.Seq, Tid: h.Tid, Type: h.Type, Priority: uint16(h.Priority),
		Version: h.Version, DataOff: h.DataOff, AckSeq: inSeq,
		Flags: msg.FooterComplete | msg.FooterNoCRC, CompatVersion: h.CompatVersion,
	}
}

// encodeSecure is encode in secure mode: every frame is sealed into
// w.wbuf, in the order it goes on the wire (each takes the next nonces),
// the data copied once into wbuf and encrypted there. It runs under the
// write-side ownership, like every encode, so frames are sealed in the
// order their owners write them.
func (w *writeState) encodeSecure(c *Conn, e *msgr2.Engine, ka, kaAck bool, stamp msgr2.Stamp, ack bool) error {
	var err error
	seal := func(f msgr2.ControlFrame) {
		if err == nil {
			w.wbuf, err = e.AppendControl(w.wbuf, f)
		}
	}
	inSeq := c.inSeq.Load()
	if kaAck {
		seal(msgr2.Keepalive2Ack{Sec: stamp.Sec, Nsec: stamp.Nsec})
	}
	if ka {
		now := c.m.cfg.Clock.Now()
		seal(msgr2.Keepalive2{Sec: uint32(now.Unix()), Nsec: uint32(now.Nanosecond())})
	}
	if ack && len(w.batch) == 0 {
		seal(msgr2.Ack{Seq: inSeq})
	}
	var hdr msgr2.Header2
	for _, mm := range w.batch {
		if err != nil {
			break
		}
		mm.Header.AckSeq = inSeq
		hdr = header2(&mm.Header, inSeq)
		w.wbuf, err = e.AppendMessage(w.wbuf, &hdr, mm.Front, mm.Middle, mm.Data)
	}
	w.iov = append(w.iov, w.wbuf)
	return err
}

// maxIovecs bounds the buffers handed to one writev (Linux's IOV_MAX).
const maxIovecs = 1024

// writeOut writes what is left of the batch to r, stage by stage,
// patching deferred CRCs between stages. Blocking, it returns once all is
// written (or the socket failed); otherwise it makes one write attempt
// per stage and reports done=false as soon as the socket does not take a
// whole stage, leaving the progress in w for a blocking call to finish.
func (w *writeState) writeOut(r *socketRun, blocking bool) (done bool, err error) {
	if r.cw != nil && len(w.fix) > 0 {
		return w.writeFused(r, blocking)
	}
	if r.raw == nil && r.tw != nil && !blocking {
		// Not a socket, but it takes bytes without waiting (shm): an
		// inline write of what fits, the rest for the writer goroutine.
		wv := w.iov[w.pos:]
		if w.skip > 0 {
			wv[0] = wv[0][w.skip:]
			w.skip = 0
		}
		n, err := r.tw.TryWriteBuffers(wv)
		w.advance(n)
		return w.pos == len(w.iov), err
	}
	if r.raw == nil {
		// Not a socket: one blocking write of everything (no deferred
		// CRCs, see collectLocked).
		wv := w.iov[w.pos:]
		if w.skip > 0 {
			wv[0] = wv[0][w.skip:]
		}
		_, err = wv.WriteTo(r.nc)
		w.pos, w.skip = len(w.iov), 0
		return err == nil, err
	}
	for {
		end := len(w.iov)
		if w.fi < len(w.fix) {
			end = w.fix[w.fi].after + 1
		}
		for w.pos < end {
			n, err := w.writev(r, end, blocking)
			if err != nil {
				return false, err
			}
			w.advance(n)
			if !blocking && w.pos < end {
				return false, nil
			}
		}
		if w.fi == len(w.fix) {
			return true, nil
		}
		f := &w.fix[w.fi]
		binary.LittleEndian.PutUint32(w.iov[f.piece][f.off:], msgr2.SegmentCRC(f.data))
		w.fi++
	}
}

// writev makes one writev(2) of iov[w.pos:end] (less the skip bytes
// written of the first), waiting for the socket if blocking, and returns
// how much it took (0 if it would block).
func (w *writeState) writev(r *socketRun, end int, blocking bool) (int, error) {
	first := w.iov[w.pos][w.skip:]
	if end == w.pos+1 {
		// One buffer: write(2), through package syscall, whose race
		// annotations order it before the peer's read (as the writes
		// through net.Conn did).
		w.one = first
	} else {
		w.iovecs = append(w.iovecs, makeIovec(first))
		for _, p := range w.iov[w.pos+1 : min(end, w.pos+maxIovecs)] {
			w.iovecs = append(w.iovecs, makeIovec(p))
		}
	}
	if w.vfn == nil {
		w.vfn = w.writevFD
	}
	w.vblock = blocking
	err := r.raw.Write(w.vfn)
	n, werr := w.vn, w.verr
	clear(w.iovecs)
	w.iovecs, w.one, w.vn, w.verr = w.iovecs[:0], nil, 0, nil
	switch {
	case err != nil:
		return 0, err
	case werr != nil:
		return 0, werr
	}
	return n, nil
}

// writevFD is the function handed to RawConn.Write: one writev(2); when
// the socket would block it asks RawConn to wait (w.vblock) or gives up.
func (w *writeState) writevFD(fd uintptr) bool {
	var n int
	var err error
	if w.one != nil {
		n, err = writeFD(fd, w.one)
	} else {
		n, err = writevFD(fd, w.iovecs)
	}
	switch {
	case err == nil:
		w.vn = max(n, 0)
	case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR):
		return !w.vblock
	default:
		w.verr = err
	}
	return true
}

// advance moves the progress n bytes on.
func (w *writeState) advance(n int) {
	for n > 0 {
		left := len(w.iov[w.pos]) - w.skip
		if n < left {
			w.skip += n
			return
		}
		n -= left
		w.pos, w.skip = w.pos+1, 0
	}
	for w.pos < len(w.iov) && len(w.iov[w.pos]) == w.skip {
		w.pos, w.skip = w.pos+1, 0 // empty pieces
	}
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
	clear(w.iov)
	w.iov = w.iov[:0]
	clear(w.fix)
	w.fix = w.fix[:0]
	if cap(w.wbuf) > keepBuf {
		w.wbuf = nil
	}
}

// takeEncErr returns and clears the batch's encoding error.
func (w *writeState) takeEncErr() error {
	err := w.encErr
	w.encErr = nil
	return err
}
