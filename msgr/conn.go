package msgr

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/msgr1"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

type connState uint8

const (
	stateConnecting connState = iota // dialling, in the handshake, or waiting to reconnect
	stateOpen                        // a socket is up: messages flow
	stateStandby                     // lossless, no socket: waiting for the peer or for something to send
	stateClosed                      // done; nothing more is sent
)

func (s connState) String() string {
	return [...]string{"connecting", "open", "standby", "closed"}[s]
}

// Conn is a connection to one peer (Ceph's Connection). On a lossless
// policy it is a session that outlives its sockets: messages are numbered,
// kept until the peer acknowledges them and replayed after a reconnect, so
// each is delivered exactly once and in order. On a lossy policy a socket
// failure closes it.
//
// Messages sent on a Conn leave highest priority first, FIFO within a
// priority. All methods are safe for concurrent use.
type Conn struct {
	m       *Messenger
	id      uint64
	faulted atomic.Bool // Fault: what was received and not yet dispatched is dropped
	// liftLimits: Authenticated was called; the msgr1 reader restores
	// the messenger's limits. (Fields are ordered to leave no padding:
	// TestConnSizeClass.)
	liftLimits atomic.Bool

	target    transport.Addr  // outgoing: where to dial
	targetEA  *msg.EntityAddr // outgoing: the peer's address, when given in Ceph form (targetAddr)
	targetKey string          // key in Messenger.outgoing
	regKey    string          // key in Messenger.sessions

	ctx context.Context // connCtx: done when the connection closes

	mu          sync.Mutex
	policy      Policy
	err         error // why the connection closed
	run         *socketRun
	state       connState
	replacing   bool  // a new socket is taking over
	owner       uint8 // who holds the write side (ownNone, ownWriter, ...)
	dialer      bool  // an accepted session that now reconnects by itself (runOutgoing runs)
	readyClosed bool  // readyCh is closed
	outgoing    bool
	hsConn      net.Conn   // outgoing: the socket of a handshake in progress
	dialCancel  func()     // outgoing: cancels the dial in progress
	ws          writeState // the write side's buffers, used by its owner

	// Session state (Ceph's Pipe/ProtocolV2 fields).
	outq          outQueue
	replay        []*msg.Message // requeued after a fault: resent first, with their seqs
	sent          []*msg.Message // written, not yet acknowledged (lossless)
	outSeq        uint64
	clientCookie  uint64
	serverCookie  uint64
	connectSeq    uint64
	peerGlobalSeq uint64

	peerName   msg.EntityName
	peerAddrs  msg.AddrVec
	auth       AuthInfo // what the latest socket's authentication established
	features   uint64
	sendKA     bool        // a KEEPALIVE2 is due
	sendKAAck  bool        // a KEEPALIVE2_ACK is due
	kaAckStamp msgr2.Stamp // the stamp to echo
	ackPending bool        // an ACK frame is due (lossless)
	everReady  bool        // reached stateOpen at least once
	lastKASent int64       // unix ns (Config.Clock) when we last queued a KEEPALIVE2

	readyCh chan struct{} // closed when first open, or when closed; made by Ready

	wake chan struct{} // pokes the writer, or a connection in standby
	done chan struct{} // closed when the connection has closed

	inSeq            atomic.Uint64
	lastRecv         atomic.Int64 // unix ns of the last frame received
	lastKeepalive    atomic.Int64 // unix ns when the peer's last KEEPALIVE2 arrived
	lastKeepaliveAck atomic.Int64 // unix ns of the stamp the peer last acked
	reconnects       atomic.Uint64
	awaiters         atomic.Int32 // goroutines in Await
	paused           atomic.Bool  // not read from: over its share of the send budget (budget.go)
	holds            connHolds    // its accounts at the receive throttles (throttle.go)
	lastWrite        atomic.Int64 // unix ns (Config.Clock) of the last write that made progress, or of a Send to an empty queue

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

// DataCRC reports whether the socket the connection runs on now carries
// CRCs of message data: false only when both sides set
// Config.NoDataCRC. It is decided again for every socket (a peer that
// restarts with another setting changes it) and reports true while there
// is none, so it says how the connection runs, not how a given message
// travelled.
func (c *Conn) DataCRC() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run == nil || c.run.e == nil || c.run.e.DataCRC()
}

// Policy returns the policy the connection runs under.
func (c *Conn) Policy() Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.policy
}

// IsConnected reports whether a socket is up.
func (c *Conn) IsConnected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == stateOpen
}

// State returns "connecting", "open", "standby" or "closed".
func (c *Conn) State() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.String()
}

// Reconnects returns how many times the session has been resumed or
// restarted on a new socket.
func (c *Conn) Reconnects() uint64 { return c.reconnects.Load() }

// QueuedBytes returns the payload bytes queued to send on the
// connection and not yet taken for writing.
func (c *Conn) QueuedBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.outq.bytes
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

// PeerProcess returns the process ID of the peer when the current socket
// connects two processes on the same host and the kernel vouches for the
// peer (transport.PeerPID: shm connections and Unix-domain sockets). ok
// is false on other transports, while no socket is up, and when the
// peer's process is not visible from this PID namespace. A later socket
// of the same session may lead to another process.
func (c *Conn) PeerProcess() (pid int, ok bool) {
	c.mu.Lock()
	r := c.run
	c.mu.Unlock()
	if r == nil {
		return 0, false
	}
	pid, err := transport.PeerPID(r.nc)
	return pid, err == nil && pid > 0
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

// Done returns a channel closed when the connection has closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Ready waits until the first handshake finished (nil) or the connection
// closed (its error), or ctx ends.
func (c *Conn) Ready(ctx context.Context) error {
	c.mu.Lock()
	if !c.readyClosed && c.readyCh == nil {
		c.readyCh = make(chan struct{})
	}
	ch, ready := c.readyCh, c.readyClosed
	c.mu.Unlock()
	if !ready {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateClosed {
		return nil
	}
	return &closedError{c.err}
}

// markReadyLocked releases the callers of Ready, once: the connection
// is open for the first time, or closed. readyCh is made by the first
// caller of Ready that has to wait, so that a connection nobody waits
// for does not keep a channel for it. c.mu is held.
func (c *Conn) markReadyLocked() {
	if !c.readyClosed {
		c.readyClosed = true
		if c.readyCh != nil {
			close(c.readyCh)
		}
	}
}

func (c *Conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == stateClosed
}

// Send queues m for the peer and returns without waiting. Messages go out
// highest priority first, FIFO within a priority; the connection assigns
// m.Header.Seq and m.Header.AckSeq. Send takes ownership of m: the caller
// must not touch m or its buffers afterwards. A lossless session keeps m
// until the peer has acknowledged it; once the messenger no longer needs
// m (written on a lossy session, acknowledged on a lossless one, or
// dropped from the queue unwritten) it calls m.Done, so a received
// message can be sent on as is and its pooled buffers are recycled; a
// written message a reset or close drops while a writer may still hold
// it is left to the garbage collector. Send fails with ErrClosed (wrapping the reason) once
// the connection has closed, with ErrTooLarge if m exceeds the limits, and
// with ErrOutQueueFull if the out queue is at its bound.
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
	if c.outq.n > 0 && c.m.budget.full(m.Len()) {
		c.mu.Unlock()
		return ErrSendBudget
	}
	c.outq.push(m)
	stamped := c.outq.n == 1
	if stamped {
		// Nothing was owed until now: the write side was caught up
		// (what closeIfSlowConsumer measures from).
		c.lastWrite.Store(c.m.cfg.Clock.Now().UnixNano())
	}
	c.tryInline(stamped)
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
	c.lastKASent = c.m.cfg.Clock.Now().UnixNano()
	c.mu.Unlock()
	c.poke()
}

// MarkDown closes the connection now, dropping its session and queued
// messages, without delivering a reset event (Ceph's mark_down).
func (c *Conn) MarkDown() { c.close(ErrMarkedDown, false) }

// Fault closes the connection now because its peer broke the protocol of
// a layer above the messenger: a message that does not decode, or that
// answers nothing that was asked on this connection. The session and
// the queued messages are dropped as by MarkDown, but the dispatchers'
// reset event is delivered (if the connection had been open), so that
// the layers above fail what was outstanding on it. Messages received on
// it and not yet dispatched are dropped. Err then reports an
// error that matches ErrPeerFault and wraps reason. The messenger's other
// connections are not affected. The first reason is kept; later calls do
// nothing.
func (c *Conn) Fault(reason error) {
	if reason == nil {
		reason = errors.New("unspecified")
	}
	c.faulted.Store(true)
	if c.State() != stateClosed.String() {
		c.m.log.Warn("msgr: closing the connection of a peer that broke the protocol",
			"conn", c.id, "peer", c.PeerName().String(), "reason", reason.Error())
	}
	c.close(&faultError{reason}, true)
}

// poke wakes the connection's goroutines: the dialer waiting in standby,
// or the current socket's writer goroutine, which it starts if it is not
// running (write.go).
func (c *Conn) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
	c.mu.Lock()
	r := c.run
	c.mu.Unlock()
	if r != nil {
		r.startWriter(c)
	}
}

// close moves the connection to closed for good. notify says whether
// dispatchers hear about it (a lossy fault does; a local mark-down or
// shutdown does not).
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
		notify = false
	}
	dropped := c.outq.drain()
	dropped = append(dropped, c.replay...)
	dropped = append(dropped, c.sent...)
	c.replay, c.sent = nil, nil
	r := c.run
	c.run = nil
	if c.hsConn != nil {
		_ = c.hsConn.Close()
	}
	if c.dialCancel != nil {
		c.dialCancel()
	}
	c.markReadyLocked()
	c.mu.Unlock()

	close(c.done) // ends c.ctx too
	if r != nil {
		r.fail(reason)
	}
	if r == nil {
		// No writer can be using them: release what was dropped.
		for _, mm := range dropped {
			mm.Done()
		}
	}
	c.m.removeConn(c)
	if notify && c.m.ctx.Err() == nil && wasOpen {
		c.m.queueEvent(itemReset, c)
	}
	c.m.log.Debug("connection closed", "conn", c.id, "peer", c.PeerName().String(), "reason", reason)
}

// socketRun is one socket carrying a connection: its engine, and the
// reader and writer goroutines working on it.
type socketRun struct {
	nc  net.Conn
	src io.Reader           // what the reader reads nc through (socketSource)
	raw syscall.RawConn     // for non-blocking inline writes; nil if nc is not a socket
	tw  transport.TryWriter // for inline writes when nc is not a socket but has them (shm); else nil
	cw  transport.CRCWriter // checksums data as it copies it (shm); nil on sockets

	e  *msgr2.Engine
	v1 *msgr1.Engine // instead of e on a msgr1 socket (v1.go)
	// stop is closed by fail (the writer stops), done by finish (reader
	// and writer have exited). Each is made by its first waiter
	// (stopCh, doneCh), or set to closedChan by a fail or finish that
	// comes first: most sockets are never waited on, and ten thousand
	// idle connections need not keep two channels each (96 bytes each).
	chMu   sync.Mutex
	stop   chan struct{}
	done   chan struct{}
	failed atomic.Bool // fail has run: stop is closed (for polling without the channel)

	once sync.Once
	err  error // why it failed (set before the socket is closed)

	role   readRole // who reads it (readrole.go)
	dialed bool     // its reader goes on with the connector loop (runOutgoing) when it ends

	// The writer goroutine (write.go): running, or no more to be started.
	wmu         sync.Mutex
	writerOn    bool
	writersDone bool
	wwg         sync.WaitGroup
}

// fail records why the socket is being dropped and closes it; the reader
// and writer then stop.
func (r *socketRun) fail(err error) {
	r.once.Do(func() {
		r.err = err
		r.chMu.Lock()
		closeOrSet(&r.stop)
		r.chMu.Unlock()
		r.failed.Store(true)
		_ = r.nc.Close()
		r.role.wakeParked(r)
	})
}

// reason returns the recorded failure, or err if none was recorded.
func (r *socketRun) reason(err error) error {
	r.fail(err)
	return r.err
}

// openRuns counts the sockets this process's messengers run (from
// newRun to finish): what raw() weighs the process's load by.
var openRuns atomic.Int32

// finish marks the run ended: its reader and writer are done.
func (r *socketRun) finish() {
	openRuns.Add(-1)
	r.chMu.Lock()
	closeOrSet(&r.done)
	r.chMu.Unlock()
}

// stopCh returns a channel closed when the socket has failed.
func (r *socketRun) stopCh() <-chan struct{} { return r.lazyCh(&r.stop) }

// doneCh returns a channel closed when the run has ended (finish).
func (r *socketRun) doneCh() <-chan struct{} { return r.lazyCh(&r.done) }

// lazyCh returns *ch, made now if no waiter or event has set it.
func (r *socketRun) lazyCh(ch *chan struct{}) <-chan struct{} {
	r.chMu.Lock()
	defer r.chMu.Unlock()
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

// closeOrSet closes *ch if a waiter made it, else sets it to closedChan.
// Called once per channel, with socketRun.chMu held.
func closeOrSet(ch *chan struct{}) {
	if *ch == nil {
		*ch = closedChan
		return
	}
	close(*ch)
}

// closedChan is a closed channel: what stopCh and doneCh return once
// their event has happened, without a channel of the run's own.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// newRun returns the run of socket nc; src is what its handshake read
// it through (socketSource), nil for a new one.
func newRun(nc net.Conn, e *msgr2.Engine, src io.Reader) *socketRun {
	if src == nil {
		src = socketSource(nc)
	}
	r := &socketRun{nc: nc, src: src, e: e}
	openRuns.Add(1)
	if sc, ok := nc.(syscall.Conn); ok && rawSockets {
		if raw, err := sc.SyscallConn(); err == nil {
			r.raw = raw
		}
	}
	if tw, ok := nc.(transport.TryWriter); ok && r.raw == nil {
		r.tw = tw
	}
	if cw, ok := nc.(transport.CRCWriter); ok && r.raw == nil {
		r.cw = cw
	}
	return r
}

// socketFailed is called (by the reader, once its writer has stopped)
// when run r has ended. A lossy connection closes; a lossless one requeues
// what the peer has not acknowledged and waits for a new socket.
func (c *Conn) socketFailed(r *socketRun, err error) {
	c.mu.Lock()
	if c.run != r || c.state == stateClosed {
		// Superseded by a newer socket, or closed already.
		c.mu.Unlock()
		return
	}
	c.run = nil
	c.m.met.fault(err)
	if c.policy.Lossy {
		c.mu.Unlock()
		var pe *msgr2.Error
		if errors.As(err, &pe) {
			c.m.log.Warn("closing connection on protocol error", "conn", c.id, "peer", c.PeerName().String(), "err", err)
		}
		c.close(err, true)
		return
	}
	c.requeueLocked()
	startDialer := false
	if !c.outgoing && !c.dialer && !c.policy.Server {
		// An accepted session whose policy is not server-side reconnects
		// too, as Ceph's does, when the peer listens somewhere.
		if a, ok := c.peerAddrs.Msgr2(); ok && a.IP.IsValid() && a.IP.Port() != 0 {
			if ta, err := transport.ParseAddr(a.String()); err == nil {
				c.dialer, c.target, c.targetEA = true, ta, &a
				startDialer = true
			}
		}
	}
	reconnects := (c.outgoing || c.dialer) && !c.policy.Server
	if c.serverCookie != 0 && reconnects {
		// The side that reconnects counts its attempts (Ceph's connect_seq).
		c.connectSeq++
	}
	if reconnects {
		c.state = stateConnecting
	} else {
		c.state = stateStandby
	}
	c.mu.Unlock()
	if startDialer {
		c.m.wg.Add(1)
		go c.runOutgoing()
	}
	var pe *msgr2.Error
	if errors.As(err, &pe) {
		c.m.log.Warn("protocol error; session kept for reconnect", "conn", c.id, "peer", c.PeerName().String(), "err", err)
	} else {
		c.m.log.Debug("socket fault; session kept for reconnect", "conn", c.id, "peer", c.PeerName().String(), "err", err)
	}
	c.poke()
}

// requeueLocked moves the unacknowledged messages back in front of
// whatever is still waiting to be replayed (Ceph's requeue_sent).
func (c *Conn) requeueLocked() {
	if len(c.sent) == 0 {
		return
	}
	n := make([]*msg.Message, 0, len(c.sent)+len(c.replay))
	n = append(n, c.sent...)
	n = append(n, c.replay...)
	clear(c.sent)
	c.sent = c.sent[:0]
	c.replay = n
}

// discardAckedLocked drops sent and requeued messages the peer has
// received (seq <= upTo).
func (c *Conn) discardAckedLocked(upTo uint64) {
	i := 0
	for i < len(c.sent) && c.sent[i].Header.Seq <= upTo {
		c.sent[i].Done()
		c.sent[i] = nil
		i++
	}
	if i > 0 {
		c.sent = append(c.sent[:0], c.sent[i:]...)
	}
	if len(c.replay) > 0 && c.replay[0].Header.Seq <= upTo {
		c.m.log.Debug("discarding replayed messages the peer has", "conn", c.id, "up_to", upTo, "first", c.replay[0].Header.Seq, "replay", len(c.replay))
	}
	i = 0
	for i < len(c.replay) && c.replay[i].Header.Seq <= upTo {
		c.replay[i].Done()
		c.replay[i] = nil
		i++
	}
	if i > 0 {
		c.replay = append(c.replay[:0], c.replay[i:]...)
	}
}

// resetSessionLocked forgets the session (Ceph's reset_session): queued,
// sent and requeued messages are dropped and numbering restarts.
func (c *Conn) resetSessionLocked() {
	c.m.log.Debug("session reset", "conn", c.id, "queued", c.outq.n, "replay", len(c.replay), "sent", len(c.sent), "out_seq", c.outSeq)
	for _, mm := range c.outq.drain() {
		mm.Done() // never handed to a writer
	}
	clear(c.replay)
	clear(c.sent)
	c.replay, c.sent = c.replay[:0], c.sent[:0]
	c.outSeq = 0
	c.inSeq.Store(0)
	c.serverCookie, c.connectSeq, c.peerGlobalSeq = 0, 0, 0
	c.clientCookie = 0
}

func (c *Conn) tick(now time.Time, interval, timeout time.Duration) {
	c.mu.Lock()
	open := c.state == stateOpen
	r := c.run
	dueKA := open && interval > 0 && now.UnixNano()-c.lastKASent >= int64(interval)
	c.mu.Unlock()
	if !open || r == nil {
		return
	}
	if c.closeIfSlowConsumer(now, r) {
		return
	}
	if c.paused.Load() {
		// Not read from for its send queue (budget.go): its peer's
		// silence is ours.
		return
	}
	if timeout > 0 && now.UnixNano()-c.lastRecv.Load() > int64(timeout) {
		r.fail(ErrKeepaliveTimeout)
		return
	}
	if dueKA {
		c.SendKeepalive()
	}
	if now.UnixNano()-c.lastRecv.Load() >= parkAfter.Load() {
		r.role.parkIdle(r)
	}
}

func (c *Conn) sessionState(myAddr msg.EntityAddr) msgr2.SessionState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := msgr2.SessionState{
		Exists:       true,
		Closed:       c.state == stateClosed,
		Replacing:    c.replacing,
		Lossy:        c.policy.Lossy,
		Server:       c.policy.Server,
		ResetCheck:   c.policy.ResetCheck,
		Open:         c.state == stateOpen || c.state == stateStandby,
		Outgoing:     c.outgoing,
		Connecting:   c.state == stateConnecting && c.everReady,
		ClientCookie: c.clientCookie,
		ServerCookie: c.serverCookie,
		PeerGlobal:   c.peerGlobalSeq,
		ConnectSeq:   c.connectSeq,
		MyAddr:       myAddr,
	}
	if a, ok := c.peerAddrs.Msgr2(); ok {
		st.PeerAddr = a
	} else {
		// Still connecting: the address we dial is the peer's.
		st.PeerAddr = c.targetAddr()
	}
	return st
}

// targetAddr is the peer's address an outgoing connection was given in
// Ceph form, or the zero address; it is set before the connection dials.
func (c *Conn) targetAddr() msg.EntityAddr {
	if c.targetEA == nil {
		return msg.EntityAddr{}
	}
	return *c.targetEA
}
