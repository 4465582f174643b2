package msgr

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

type connState uint8

const (
	stateConnecting connState = iota // dialling or in the handshake
	stateOpen                        // ready: messages flow
	stateClosed                      // done; nothing more is sent
)

// Conn is a connection to one peer (Ceph's Connection). Messages sent on
// it are delivered in order per priority, highest priority first. All
// methods are safe for concurrent use.
type Conn struct {
	m        *Messenger
	id       uint64
	outgoing bool

	target    transport.Addr // outgoing: where to dial
	targetKey string
	regKey    string // incoming: key in Messenger.registered

	ctx    context.Context // cancelled when the connection closes
	cancel context.CancelFunc

	mu          sync.Mutex
	state       connState
	policy      Policy
	err         error // why the connection closed
	nc          net.Conn
	outq        outQueue
	outSeq      uint64
	peerName    msg.EntityName
	peerAddrs   msg.AddrVec
	features    uint64
	sendKA      bool          // a KEEPALIVE2 is due
	sendKAAck   bool          // a KEEPALIVE2_ACK is due
	kaAckStamp  msgr2.Stamp   // the stamp to echo
	ackPending  bool          // an ACK frame is due (lossless, idle)
	markedDown  bool          // closed by MarkDown: no reset event
	everReady   bool          // reached stateOpen at least once
	lastKASent  time.Time     // when we last queued a KEEPALIVE2
	readyCh     chan struct{} // closed when open or closed
	readyClosed bool

	wake chan struct{} // pokes the writer
	done chan struct{} // closed when the connection's goroutines have exited

	inSeq            atomic.Uint64
	lastRecv         atomic.Int64 // unix ns of the last frame received
	lastKeepalive    atomic.Int64 // unix ns when the peer's last KEEPALIVE2 arrived
	lastKeepaliveAck atomic.Int64 // unix ns of the stamp the peer last acked

	priv atomic.Value
}

// ID returns the connection's id, unique within its messenger.
func (c *Conn) ID() uint64 { return c.id }

// Messenger returns the messenger the connection belongs to.
func (c *Conn) Messenger() *Messenger { return c.m }

// PeerName returns the peer's entity name (its type is known after
// HELLO, its number after the handshake).
func (c *Conn) PeerName() msg.EntityName {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerName
}

// PeerType returns the peer's entity type.
func (c *Conn) PeerType() msg.EntityType { return c.PeerName().Type }

// PeerAddrs returns the addresses the peer advertised.
func (c *Conn) PeerAddrs() msg.AddrVec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerAddrs
}

// Features returns the feature mask negotiated with the peer.
func (c *Conn) Features() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.features
}

// Policy returns the policy the connection runs under.
func (c *Conn) Policy() Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.policy
}

// IsConnected reports whether the connection is open.
func (c *Conn) IsConnected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == stateOpen
}

// Err returns why the connection closed, or nil while it is not closed.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// LastKeepalive returns when the peer's last KEEPALIVE2 arrived.
func (c *Conn) LastKeepalive() time.Time { return unixTime(c.lastKeepalive.Load()) }

// LastKeepaliveAck returns the send time of our last keepalive the peer
// acknowledged.
func (c *Conn) LastKeepaliveAck() time.Time { return unixTime(c.lastKeepaliveAck.Load()) }

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// SetPriv attaches a value to the connection (Ceph's priv).
func (c *Conn) SetPriv(v any) { c.priv.Store(&v) }

// Priv returns the value set by SetPriv, or nil.
func (c *Conn) Priv() any {
	if p, ok := c.priv.Load().(*any); ok {
		return *p
	}
	return nil
}

// Done returns a channel closed when the connection has closed and its
// goroutines have exited.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Ready waits until the handshake finished (nil) or the connection closed
// (its error), or ctx ends.
func (c *Conn) Ready(ctx context.Context) error {
	select {
	case <-c.readyCh:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateOpen {
		return nil
	}
	return c.err
}

func (c *Conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == stateClosed
}

// Send queues m for the peer and returns without waiting. Messages go out
// highest priority first, FIFO within a priority; the connection assigns
// m.Header.Seq. The caller must not modify m or its buffers afterwards.
// Send fails with ErrClosed (wrapping the reason) once the connection has
// closed, with ErrTooLarge if m exceeds the limits, and with
// ErrOutQueueFull if the out queue is at its bound.
func (c *Conn) Send(m *msg.Message) error {
	lim := c.m.cfg.Limits
	if n := m.Len(); uint64(n) > uint64(lim.MaxMessage) || uint64(m.Data.Len()) > uint64(lim.MaxSegment) ||
		uint64(m.Front.Len()) > uint64(lim.MaxSegment) || uint64(m.Middle.Len()) > uint64(lim.MaxSegment) {
		return ErrTooLarge
	}
	if m.Header.Priority == 0 {
		m.Header.Priority = msg.PrioDefault
	}
	c.mu.Lock()
	if c.state == stateClosed {
		err := c.err
		c.mu.Unlock()
		return &closedError{err}
	}
	if c.outq.n > 0 && c.outq.bytes+m.Len() > c.m.cfg.OutQueueBytes {
		c.mu.Unlock()
		return ErrOutQueueFull
	}
	c.outq.push(m)
	open := c.state == stateOpen
	c.mu.Unlock()
	if open {
		c.poke()
	}
	return nil
}

// closedError wraps the reason a connection closed so that
// errors.Is(err, ErrClosed) holds as well as errors.Is(err, reason).
type closedError struct{ reason error }

func (e *closedError) Error() string {
	if e.reason == nil {
		return ErrClosed.Error()
	}
	return ErrClosed.Error() + ": " + e.reason.Error()
}

func (e *closedError) Is(target error) bool { return target == ErrClosed }
func (e *closedError) Unwrap() error        { return e.reason }

// SendKeepalive queues a KEEPALIVE2.
func (c *Conn) SendKeepalive() {
	c.mu.Lock()
	c.sendKA = true
	c.lastKASent = time.Now()
	open := c.state == stateOpen
	c.mu.Unlock()
	if open {
		c.poke()
	}
}

// MarkDown closes the connection now, dropping queued messages, without
// delivering a reset event (Ceph's mark_down).
func (c *Conn) MarkDown() { c.close(ErrMarkedDown, false) }

func (c *Conn) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// close moves the connection to closed. notify says whether dispatchers
// hear about it (a lossy fault does; a local mark-down or shutdown does
// not).
func (c *Conn) close(reason error, notify bool) {
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		return
	}
	wasOpen := c.everReady
	c.state = stateClosed
	c.err = reason
	if errors.Is(reason, ErrMarkedDown) || errors.Is(reason, ErrShutdown) {
		c.markedDown = true
		notify = false
	}
	c.outq.drain()
	nc := c.nc
	if !c.readyClosed {
		c.readyClosed = true
		close(c.readyCh)
	}
	c.mu.Unlock()

	c.cancel()
	if nc != nil {
		_ = nc.Close()
	}
	c.m.removeConn(c)
	if notify && c.m.ctx.Err() == nil {
		if wasOpen {
			c.m.queueEvent(itemReset, c)
		} else if c.outgoing {
			c.m.queueEvent(itemRefused, c)
		}
	}
	if notify || wasOpen {
		c.m.log.Debug("connection closed", "conn", c.id, "peer", c.PeerName().String(), "reason", reason)
	}
}

// fault is called by the connection's goroutines on an I/O or protocol
// error. On a lossy connection it closes the connection and tells the
// dispatchers.
func (c *Conn) fault(err error) {
	if c.ctx.Err() == nil {
		var pe *msgr2.Error
		if errors.As(err, &pe) {
			c.m.log.Warn("closing connection on protocol error", "conn", c.id, "peer", c.PeerName().String(), "err", err)
		} else {
			c.m.log.Debug("connection fault", "conn", c.id, "peer", c.PeerName().String(), "err", err)
		}
	}
	c.close(err, true)
}

func (c *Conn) tick(now time.Time, interval, timeout time.Duration) {
	c.mu.Lock()
	open := c.state == stateOpen
	dueKA := open && interval > 0 && now.Sub(c.lastKASent) >= interval
	c.mu.Unlock()
	if !open {
		return
	}
	if timeout > 0 && now.UnixNano()-c.lastRecv.Load() > int64(timeout) {
		c.fault(ErrKeepaliveTimeout)
		return
	}
	if dueKA {
		c.SendKeepalive()
	}
}

// runOutgoing dials, runs the handshake as client, then reads until the
// connection fails.
func (c *Conn) runOutgoing() {
	m := c.m
	defer m.wg.Done()
	defer close(c.done)

	ctx, cancel := context.WithTimeout(c.ctx, m.cfg.HandshakeTimeout)
	nc, err := m.cfg.Transports.Dial(ctx, c.target.String())
	cancel()
	if err != nil {
		c.fault(err)
		return
	}
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		_ = nc.Close()
		return
	}
	c.nc = nc
	lossy := c.policy.Lossy
	c.mu.Unlock()

	target := remoteEntityAddr(nc, c.target.Nonce)
	cfg := msgr2.Config{
		Role:       msgr2.Client,
		MyName:     m.cfg.Name,
		MyAuthName: msg.AuthName{Type: m.cfg.Name.Type, ID: m.cfg.AuthID},
		MyAddrs:    m.Addrs(),
		Nonce:      m.cfg.Nonce,
		PeerAddr:   target,
		Supported:  m.cfg.Supported,
		Required:   m.cfg.Required,
		Lossy:      lossy,
		GlobalSeq:  m.globalSeq.Add(1),
		Limits:     m.cfg.Limits,
	}
	if !lossy {
		cfg.ClientCookie = randomCookie()
	}
	e := msgr2.NewEngine(cfg)
	c.serve(nc, e)
}

// runIncoming runs the handshake as server on an accepted socket, then
// reads until the connection fails.
func (c *Conn) runIncoming(nc net.Conn) {
	m := c.m
	defer m.wg.Done()
	defer close(c.done)
	c.mu.Lock()
	c.nc = nc
	c.mu.Unlock()
	cfg := msgr2.Config{
		Role:      msgr2.Server,
		MyName:    m.cfg.Name,
		MyAddrs:   m.Addrs(),
		Nonce:     m.cfg.Nonce,
		PeerAddr:  remoteEntityAddr(nc, 0),
		Supported: m.cfg.Supported,
		Required:  m.cfg.Required,
		GlobalID:  m.globalID.Add(1),
		Limits:    m.cfg.Limits,
	}
	e := msgr2.NewEngine(cfg)
	c.serve(nc, e)
}

func remoteEntityAddr(nc net.Conn, nonce uint32) msg.EntityAddr {
	a := msg.EntityAddr{Type: msg.AddrMsgr2, Nonce: nonce}
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		a.IP = ta.AddrPort()
		if a.IP.Addr().Is4In6() {
			a.IP = netipUnmap(a.IP)
		}
	}
	return a
}

func randomCookie() uint64 {
	var b [8]byte
	for {
		if _, err := io.ReadFull(cryptoRand, b[:]); err == nil {
			if v := leUint64(b[:]); v != 0 {
				return v
			}
		}
	}
}

// readBufSize is the size of the buffered reader in front of the socket:
// small frames are parsed from it without a system call each.
const readBufSize = 64 << 10

// serve runs the handshake and then the read loop on the calling
// goroutine; the writer runs on its own goroutine once the connection is
// open.
func (c *Conn) serve(nc net.Conn, e *msgr2.Engine) {
	m := c.m
	if m.cfg.HandshakeTimeout > 0 {
		_ = nc.SetDeadline(time.Now().Add(m.cfg.HandshakeTimeout))
	}
	br := bufio.NewReaderSize(nc, readBufSize)
	e.Start()
	if _, err := nc.Write(e.Output()); err != nil {
		c.fault(err)
		return
	}
	var scratch []byte
	for !e.Ready() {
		n, _ := e.Need()
		if n == 0 {
			c.fault(errors.New("msgr: handshake stalled"))
			return
		}
		if cap(scratch) < n {
			scratch = make([]byte, n)
		}
		buf := scratch[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			c.fault(handshakeErr(err))
			return
		}
		evs, err := e.Feed(buf)
		if err != nil {
			// Send what the engine queued (a refusal) before closing.
			if out := e.Output(); len(out) > 0 {
				_, _ = nc.Write(out)
			}
			c.fault(err)
			return
		}
		for _, ev := range evs {
			switch ev.Kind {
			case msgr2.EvClientIdent:
				c.setPeer(e)
				if err := m.accepted(c, e); err != nil {
					c.fault(err)
					return
				}
			case msgr2.EvWait:
				c.fault(ErrWait)
				return
			}
		}
		if out := e.Output(); len(out) > 0 {
			if _, err := nc.Write(out); err != nil {
				c.fault(err)
				return
			}
		}
	}
	_ = nc.SetDeadline(time.Time{})
	c.setPeer(e)

	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		return
	}
	c.state = stateOpen
	c.everReady = true
	c.lastKASent = time.Now()
	if !c.readyClosed {
		c.readyClosed = true
		close(c.readyCh)
	}
	c.mu.Unlock()
	c.lastRecv.Store(time.Now().UnixNano())
	if c.outgoing {
		m.queueEvent(itemConnect, c)
	} else {
		m.queueEvent(itemAccept, c)
	}

	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop(nc, e)
	}()
	c.poke()
	c.readLoop(br, e)
	<-writerDone
}

func handshakeErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrHandshakeTimeout
	}
	return err
}

func (c *Conn) setPeer(e *msgr2.Engine) {
	p := e.Peer()
	c.mu.Lock()
	c.peerName = p.Name
	c.peerAddrs = p.Addrs
	c.features = p.Features
	c.mu.Unlock()
}

// readLoop reads frames until the connection fails, throttles what it
// receives and hands it to the dispatchers.
//
// Budget is taken before a message body is allocated, sized from the
// preamble (message count, then bytes, then dispatch bytes, as Ceph
// does): a peer cannot make the messenger hold more memory than the
// throttles allow, and waiting for budget stops this connection's reads,
// which is the back-pressure a slow consumer exerts on its senders.
func (c *Conn) readLoop(br *bufio.Reader, e *msgr2.Engine) {
	m := c.m
	var scratch []byte
	for {
		n, retain := e.Need()
		var buf []byte
		var held int64 // throttle budget taken for this frame
		var recvStamp time.Time
		if retain {
			recvStamp = time.Now()
			if err := c.takeBudget(int64(n)); err != nil {
				c.fault(err)
				return
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
			c.putBudget(held)
			c.fault(err)
			return
		}
		now := time.Now()
		c.lastRecv.Store(now.UnixNano())
		evs, err := e.Feed(buf)
		if err != nil {
			c.putBudget(held)
			c.fault(err)
			return
		}
		for i := range evs {
			ev := &evs[i]
			switch ev.Kind {
			case msgr2.EvMessage:
				if ev.Dropped {
					m.log.Debug("dropping duplicate message", "conn", c.id, "seq", ev.Seq, "in_seq", e.InSeq())
					continue
				}
				if ev.Skipped > 0 {
					m.log.Warn("sequence gap", "conn", c.id, "seq", ev.Seq, "skipped", ev.Skipped)
				}
				c.inSeq.Store(ev.Seq)
				mm := ev.Msg
				mm.RecvStamp = recvStamp
				mm.RecvCompleteStamp = now
				mm.ThrottleStamp = recvStamp
				mm.Conn = c
				err := c.deliver(mm, held)
				held = 0
				if err != nil {
					c.fault(err)
					return
				}
			case msgr2.EvAck:
				// Lossless sessions trim their sent list here.
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
		c.putBudget(held) // a dropped duplicate
	}
}

// takeBudget takes one message and size bytes from the policy throttles
// and size bytes from the dispatch throttle, in Ceph's order, waiting as
// long as the connection is open.
func (c *Conn) takeBudget(size int64) error {
	p := &c.policy
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
func (c *Conn) putBudget(size int64) {
	if size == 0 {
		return
	}
	c.m.release(dispatchItem{kind: itemMessage, c: c, bytes: size})
}

// deliver fast-dispatches a received message or queues it for the
// dispatch goroutine; budget is the throttle budget it holds, returned
// once it has been dispatched.
func (c *Conn) deliver(mm *msg.Message, budget int64) error {
	m := c.m
	it := dispatchItem{kind: itemMessage, c: c, m: mm, bytes: budget}
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

// writeLoop drains the out queue: it encodes every queued message and
// control frame into one buffer (large data segments by reference) and
// writes the lot with one write or writev.
func (c *Conn) writeLoop(nc net.Conn, e *msgr2.Engine) {
	var (
		wbuf  []byte
		iov   net.Buffers
		batch []*msg.Message
		mf    msgr2.MessageFrame
	)
	rev1 := e.Rev1()
	for {
		select {
		case <-c.wake:
		case <-c.ctx.Done():
			return
		}
		for {
			c.mu.Lock()
			if c.state != stateOpen {
				c.mu.Unlock()
				return
			}
			batch = c.outq.popBatch(batch[:0], batchBytes)
			ka, kaAck, stamp, ack := c.sendKA, c.sendKAAck, c.kaAckStamp, c.ackPending
			c.sendKA, c.sendKAAck, c.ackPending = false, false, false
			lossy := c.policy.Lossy
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
				c.outSeq++
				mm.Header.Seq = c.outSeq
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
			if err != nil {
				c.fault(err)
				return
			}
			if lossy {
				// Nothing to keep: a lossy session never replays.
				clear(batch)
			}
			if cap(wbuf) > keepBuf {
				wbuf = nil
			}
		}
	}
}
