package msgr

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// The reader role: who reads a socket.
//
// Every msgr2 socket has a reader goroutine (readLoop), which reads
// frames and delivers them. A goroutine that waits for something the
// connection will deliver (a reply) can instead read the socket itself
// (Conn.Await), so that the netpoller wakes the goroutine that wants the
// message rather than the reader goroutine, which would then have to
// wake it: one wake-up per message instead of two, the leader/follower
// pattern. Exactly one party holds the role at a time (readRole.holder);
// it reads whole frames with the socket's frameReader, and delivers what
// it reads as the reader goroutine would (FastDispatchers on its own
// goroutine, others through the dispatch queue), whoever it is for.
//
// The role changes hands only at a frame boundary:
//
//   - A goroutine calling Await becomes the successor (one at a time;
//     others simply wait for what they want to be delivered). If the
//     reader goroutine holds the role and is waiting for a frame's first
//     byte, the successor moves the socket's read deadline into the past,
//     which returns the reader goroutine from the netpoller at once; the
//     reader hands the role over (grant) and parks until it is given
//     back.
//   - The holder of a caller's role returns from Await once what it waits
//     for is ready, giving the role to the next successor or back to the
//     reader goroutine; first it delivers the whole frames already
//     buffered (drainBuffered: no read, no throttle wait), so that the
//     replies of a burst are all there for the caller at once. Nudge interrupts its wait for a frame the same way
//     (the wait is over because its context ended, its request timed out,
//     or another goroutine delivered to it).
//   - An error while a caller reads is kept in the role and the socket is
//     failed; the reader goroutine, given the role back, returns the error
//     and runs the socket's failure path as if it had read it itself.
//
// An interrupted wait leaves the frame reader at a frame boundary with
// nothing consumed (bufio.Reader.Peek returns the deadline error and
// clears it), and the deadline is reset before anything more is read, so
// a frame is never cut.
type readRole struct {
	mu      sync.Mutex
	holder  uint8
	succ    bool  // a caller waits for grant
	waiting bool  // the holder waits for a frame's first byte and may be interrupted
	kicked  bool  // the read deadline was moved into the past to interrupt the holder
	recheck bool  // the caller holding the role should look at what it waits for
	park    bool  // the connection is idle: the reader goroutine is to park (park.go)
	parked  bool  // it is parked: no goroutine reads the socket, nor holds a read buffer
	watched bool  // parked in the process's poller (else a goroutine of its own waits)
	polled  bool  // the socket is in the poller's set (armed or not)
	token   int32 // its key in the poller while watched
	dead    bool  // the reader goroutine has exited
	err     error // a caller's read failed; the reader goroutine returns it
	grant   chan struct{}
	bg      chan struct{}
	fr      *frameReader // set by the reader goroutine before anyone else may hold the role

	// A caller that gives the role up leaves it free for roleLinger
	// before the reader goroutine takes it back (linger): a goroutine
	// making one call after another then finds it free, instead of
	// interrupting the reader goroutine each time, which would also write
	// the ack the next request carries anyway.
	//
	// Re-arming a timer a goroutine is blocked on wakes an idle thread
	// (time.Timer.Reset), which on every hand-back cost a bulk transfer
	// 30-50 µs of CPU per 1 MiB chunk, so the timer is armed only when
	// none is pending: lingerUntil moves on, and the reader goroutine,
	// woken by a timer that fired early, arms it again for what is left
	// (at most one wake-up per roleLinger while callers come and go).
	lingering   bool
	lingerArmed bool  // linger is pending (reset, not yet received)
	lingerUntil int64 // monoNanos when the current linger ends
	linger      *time.Timer
}

// monoBase anchors monoNanos.
var monoBase = time.Now()

// monoNanos is a monotonic clock reading in nanoseconds, for the linger
// (a scheduling heuristic with a real timer behind it, not protocol time).
func monoNanos() int64 { return int64(time.Since(monoBase)) }

// roleLinger is how long a role a caller gave up stays free for the next
// caller. Unsolicited messages that arrive meanwhile wait at most this
// long to be read; a goroutine calling one request after another (a
// round trip is tens of microseconds here) keeps the role. It was 500 µs
// while the timer was re-armed on every hand-back; armed lazily, the
// timer fires about once per roleLinger while callers come and go, each
// firing a wake-up of its own, so the period is longer.
const roleLinger = 2 * time.Millisecond

const (
	roleBG     uint8 = iota // the socket's reader goroutine
	roleCaller              // a goroutine in Await
	roleFree                // nobody: the reader goroutine is being given it back
)

// isTimeout reports whether err is a read deadline's: os.ErrDeadlineExceeded
// from net and shm sockets, a net.Error timeout from other transports.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// aLongTimeAgo is a read deadline in the past: a blocked read returns.
var aLongTimeAgo = time.Unix(1, 0)

// The role's channels and timer are made when first needed (under mu),
// so that a connection no caller ever awaits on, such as most idle ones,
// does not keep them: grant by the first successor (Await), bg and
// linger by the first hand-back (acquireBG, releaseLocked). A send finds
// nil only when nobody can be waiting for it.

// lingerTimerLocked returns the linger timer, made on first use.
func (rr *readRole) lingerTimerLocked() *time.Timer {
	if rr.linger == nil {
		rr.linger = time.NewTimer(time.Hour)
		rr.linger.Stop()
	}
	return rr.linger
}

// signal sends on a wake-up channel of capacity 1 without blocking; nil
// (not made yet: nobody waits on it) takes nothing.
func signal(ch chan struct{}) {
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// kickLocked interrupts the holder's wait for a frame, if it waits. A
// reader parked in the poller is started anew instead (park.go).
func (rr *readRole) kickLocked(r *socketRun) {
	if rr.parked && rr.watched {
		rr.resumeLocked(r)
		return
	}
	if rr.waiting && !rr.kicked {
		rr.kicked = true
		_ = r.nc.SetReadDeadline(aLongTimeAgo)
	}
}

// waitFrame is called by the holder at a frame boundary with nothing
// buffered: it waits until the socket has a byte to read. It returns
// yield=true, having read nothing, when the holder should look up from
// reading: the reader goroutine has a successor, or the caller holding
// the role was nudged.
func (rr *readRole) waitFrame(r *socketRun, fr *frameReader) (yield bool, err error) {
	rr.mu.Lock()
	if (rr.holder == roleBG && rr.succ) || (rr.holder == roleCaller && rr.recheck) {
		rr.recheck = false
		rr.mu.Unlock()
		return true, nil
	}
	if rr.holder == roleBG && fr.quiet() && canPark(r) {
		// It read only keepalives since the connection went idle:
		// park now rather than hold the read buffer until the timer's
		// next tick (with keepalives every 5 s each way, most idle
		// connections would hold one most of the time).
		return rr.parkLocked(r, fr)
	}
	rr.waiting = true
	rr.mu.Unlock()
	_, err = fr.br.Peek(1)
	rr.mu.Lock()
	rr.waiting = false
	kicked := rr.kicked
	rr.kicked = false
	rr.mu.Unlock()
	if kicked {
		// No one kicks once waiting is false: reset the deadline before
		// the frame is read.
		_ = r.nc.SetReadDeadline(time.Time{})
		if err != nil && isTimeout(err) {
			rr.mu.Lock()
			park := rr.park && rr.holder == roleBG && !rr.succ
			rr.park = false
			if park {
				return rr.parkLocked(r, fr)
			}
			rr.mu.Unlock()
			return true, nil
		}
	}
	return false, err
}

// parkIdle asks the reader goroutine of a connection that has been idle
// to park (park.go).
func (rr *readRole) parkIdle(r *socketRun) {
	if !canPark(r) {
		return
	}
	rr.mu.Lock()
	if rr.holder == roleBG && rr.waiting && !rr.parked && !rr.kicked && !rr.succ && rr.fr != nil {
		rr.park = true
		rr.kickLocked(r)
	}
	rr.mu.Unlock()
}

// isBG reports whether the reader goroutine holds the role: only it
// pauses for the send budget (a caller in Await reads for itself).
func (rr *readRole) isBG() bool {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return rr.holder == roleBG
}

// acquireBG waits until the reader goroutine may hold the role again. It
// returns the error a caller's read ended with, if one did.
func (rr *readRole) acquireBG(r *socketRun) error {
	var stop <-chan struct{} // fetched before the first wait (stopCh makes it)
	failed := false          // stop was closed
	for {
		rr.mu.Lock()
		if err := rr.err; err != nil {
			rr.mu.Unlock()
			return err
		}
		if rr.holder == roleFree && (!rr.lingering || failed) {
			rr.holder = roleBG
			rr.lingering = false
			rr.mu.Unlock()
			return nil
		}
		if rr.bg == nil {
			rr.bg = make(chan struct{}, 1)
		}
		bg, linger := rr.bg, rr.lingerTimerLocked().C
		rr.mu.Unlock()
		if stop == nil && !failed {
			stop = r.stopCh()
		}
		select {
		case <-bg:
		case <-linger:
			rr.mu.Lock()
			rr.lingerArmed = false
			if rr.lingering {
				if left := rr.lingerUntil - monoNanos(); left > 0 {
					rr.lingerArmed = true
					rr.linger.Reset(time.Duration(left))
				} else {
					rr.lingering = false
				}
			}
			rr.mu.Unlock()
		case <-stop:
			// The socket failed: read it to the error at once.
			stop, failed = nil, true
		}
	}
}

// yieldBG gives the reader goroutine's role to the successor, if there is
// one.
func (rr *readRole) yieldBG() bool {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if !rr.succ {
		return false
	}
	rr.succ = false
	rr.holder = roleCaller
	signal(rr.grant)
	return true
}

// exit records that the reader goroutine has stopped; a successor
// waiting for the role is told.
func (rr *readRole) exit() {
	rr.mu.Lock()
	rr.dead = true
	if rr.succ {
		rr.succ = false
		rr.holder = roleCaller
		signal(rr.grant)
	}
	rr.mu.Unlock()
}

// releaseLocked gives the role up: to the successor, else back to the
// reader goroutine.
func (rr *readRole) releaseLocked() {
	rr.recheck = false
	if rr.succ && !rr.dead && rr.err == nil {
		rr.succ = false
		rr.holder = roleCaller
		signal(rr.grant)
		return
	}
	rr.holder = roleFree
	if rr.err == nil && !rr.dead {
		rr.lingering = true
		rr.lingerUntil = monoNanos() + int64(roleLinger)
		if !rr.lingerArmed {
			rr.lingerArmed = true
			rr.lingerTimerLocked().Reset(roleLinger)
		}
		return
	}
	signal(rr.bg)
}

// Await waits until done is ready (and receives from it) or ctx ends,
// reading the connection in the calling goroutine meanwhile when nobody
// else is: the messages it reads are delivered as the connection's reader
// goroutine would deliver them, FastDispatchers running on this goroutine.
// When the message that makes done ready arrives on this connection, the
// goroutine that waits for it is thus the one the network wakes, which
// saves a goroutine hand-off per round trip (see readrole.go).
//
// Whoever makes done ready from another goroutine must then call Nudge,
// so that a goroutine reading in Await looks up. Await reports whether
// it received from done; otherwise it returns ctx.Err(), or an error
// matching ErrClosed once the connection has closed for good (a lossless
// session's reconnects do not end it). It reads on tcp and unix sockets
// and on connections that take inline writes (transport.TryWriter: shm);
// elsewhere (inproc, msgr1, a connection not open) it only waits. Over
// shm, reading in the caller saves the 1 MiB round trip a hand-off that
// cost as much as the copies once both sides wrote inline (the reader
// goroutine spun on one CPU while the caller waited to run).
func (c *Conn) Await(ctx context.Context, done <-chan struct{}) (bool, error) {
	if c.ws.corks.Load() > 0 {
		// What it waits for may answer a message held by a cork
		// (write.go): write it now.
		c.flushHeld()
	}
	if c.awaiters.Add(1) > 1 {
		// Others wait on this connection too: many requests are in
		// flight, and whoever reads delivers a burst of replies at a
		// time. Moving the role between waiters would cost more wake-ups
		// than it saves.
		defer c.awaiters.Add(-1)
		return c.waitDone(ctx, done)
	}
	defer c.awaiters.Add(-1)
	c.mu.Lock()
	r := c.run
	ok := c.state == stateOpen && r != nil && r.e != nil && (r.raw != nil || r.tw != nil)
	c.mu.Unlock()
	if !ok {
		return c.waitDone(ctx, done)
	}
	rr := &r.role
	rr.mu.Lock()
	switch {
	case rr.dead || rr.err != nil || rr.fr == nil:
		rr.mu.Unlock()
		return c.waitDone(ctx, done)
	case rr.holder == roleFree:
		rr.holder = roleCaller
		rr.mu.Unlock()
	case rr.succ:
		// Someone else is next: what we wait for is delivered to us.
		rr.mu.Unlock()
		return c.waitDone(ctx, done)
	default:
		rr.succ = true
		if rr.grant == nil {
			rr.grant = make(chan struct{}, 1)
		}
		grant := rr.grant
		if rr.holder == roleBG {
			rr.kickLocked(r)
		}
		rr.mu.Unlock()
		select {
		case <-done:
			rr.cancelSucc(c, r)
			return true, nil
		case <-ctx.Done():
			rr.cancelSucc(c, r)
			return false, ctx.Err()
		case <-c.done:
			rr.cancelSucc(c, r)
			return c.waitDone(ctx, done)
		case <-grant:
		}
		rr.mu.Lock()
		if rr.dead || rr.err != nil {
			rr.releaseLocked()
			rr.mu.Unlock()
			return c.waitDone(ctx, done)
		}
		rr.mu.Unlock()
	}
	return c.readAwaiting(ctx, r, done)
}

// cancelSucc withdraws a successor that no longer wants the role; if it
// was granted meanwhile, it is given up.
func (rr *readRole) cancelSucc(c *Conn, r *socketRun) {
	rr.mu.Lock()
	if rr.succ {
		rr.succ = false
		rr.mu.Unlock()
		return
	}
	rr.mu.Unlock()
	<-rr.grant // granted: the token was sent under mu before succ cleared
	c.releaseRole(r)
}

// readAwaiting reads frames while the calling goroutine holds the role of
// r, until done is ready or ctx ends.
func (c *Conn) readAwaiting(ctx context.Context, r *socketRun, done <-chan struct{}) (bool, error) {
	rr := &r.role
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { rr.nudge(r) })
		defer stop()
	}
	fr := rr.fr
	for {
		select {
		case <-done:
			if err := c.drainBuffered(r, fr); err != nil {
				return c.waitDone(ctx, done)
			}
			c.releaseRole(r)
			return true, nil
		default:
		}
		if err := ctx.Err(); err != nil {
			c.releaseRole(r)
			return false, err
		}
		if _, err := fr.step(true); err != nil {
			c.readFailed(r, err)
			return c.waitDone(ctx, done)
		}
	}
}

// readFailed records that a caller's read of r ended with err, gives the
// role up and fails the socket.
func (c *Conn) readFailed(r *socketRun, err error) {
	rr := &r.role
	rr.mu.Lock()
	rr.err = err
	rr.releaseLocked()
	rr.mu.Unlock()
	r.fail(err)
}

// drainBuffered is called by a caller holding the role whose wait is
// over: it delivers the whole frames already buffered, up to drainFrames,
// before it gives the role up, so that what they make ready (the
// replies of other requests in flight, queued for the RPC layer's
// progress) is there at once rather than one frame per Await, and the
// requests they are answered with can go out together. It reads nothing
// from the socket and stops at a frame boundary. An error has already
// given the role up and failed the socket.
func (c *Conn) drainBuffered(r *socketRun, fr *frameReader) error {
	e := r.e
	for range drainFrames {
		b, _ := fr.br.Peek(fr.br.Buffered())
		n, ok := e.NextFrameLen(b)
		if !ok || n > len(b) || !c.budgetFree(&fr.pol, int64(n)) {
			return nil
		}
		// The preamble, then the body if it has one: both buffered.
		for steps := 0; steps == 0 || (steps == 1 && n > msgr2.PreambleLen); steps++ {
			if _, err := fr.step(true); err != nil {
				c.readFailed(r, err)
				return err
			}
		}
	}
	return nil
}

// releaseRole gives up a caller's role on r. What was left for the
// reader to write (ws.pending: typically the ack of the reply) is left
// for the next holder, which writes it before it waits for the socket,
// unless a message the caller sends first carries it: writing it here
// would cost the caller a system call before it sees its reply.
func (c *Conn) releaseRole(r *socketRun) {
	rr := &r.role
	rr.mu.Lock()
	rr.releaseLocked()
	rr.mu.Unlock()
}

// nudge makes the caller holding the role look up from its wait.
func (rr *readRole) nudge(r *socketRun) {
	rr.mu.Lock()
	if rr.holder == roleCaller {
		rr.recheck = true
		rr.kickLocked(r)
	}
	rr.mu.Unlock()
}

// Nudge makes a goroutine reading the connection in Await check whether
// what it waits for is ready. Call it after making an Await's done ready
// from any goroutine; it costs little when nobody awaits.
func (c *Conn) Nudge() {
	c.mu.Lock()
	r := c.run
	c.mu.Unlock()
	if r != nil && r.e != nil {
		r.role.nudge(r)
	}
}

// waitDone waits for done, ctx or the connection's end without reading.
func (c *Conn) waitDone(ctx context.Context, done <-chan struct{}) (bool, error) {
	select {
	case <-done:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-c.done:
		select {
		case <-done:
			return true, nil
		default:
		}
		return false, c.closedErr()
	}
}

// closedErr is the error Send returns on the closed connection.
func (c *Conn) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &closedError{c.err}
}
