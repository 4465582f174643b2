package msgr

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// The send budget: what every connection of a messenger may hold queued
// to send, together (issue 18).
//
// A connection's out queue is bounded by Config.OutQueueBytes; the
// messenger's queues together by Config.SendBudget. Once they hold more
// than half the budget (pressure), a connection holding more than its
// share (half the budget divided among the connections that have
// something queued, at least minShare) is not read from: its reader goroutine waits
// at a frame boundary until the queue is down to half its share or the
// pressure is gone, so a peer that sends requests and never reads the
// replies is slowed down in the kernel (its requests wait in its socket
// buffers) instead of growing the process. A connection paused so is
// not faulted by its own keepalive timeout (it stopped reading the
// peer's keepalives itself); if it has written nothing for
// Config.SlowConsumerTimeout it is closed with ErrSlowConsumer, as is a
// connection with something queued of which nothing was written for that
// long, paused or not (closeIfSlowConsumer). Send
// fails with ErrSendBudget when the budget is used up and the
// connection already has something queued.
//
// What a lossless session keeps for replay (messages written but not yet
// acknowledged) is not queued: it is bounded by what the peer
// acknowledges, at most the socket buffers' worth beyond what was queued.
//
// What a slow but live peer costs: its share (or what it held when
// pressure began) and the answers to what was received before its reader
// paused, which the dispatch throttle bounds (Config.DispatchThrottleBytes
// of messages dispatched later, Throttle's fair share of it under
// pressure), plus its unacknowledged messages as above. While the
// budget's other half covers that, its Sends never fail and it loses
// nothing (TestSlowLosslessPeerSlowedNotClosed); a dispatcher that
// answers from the dispatch goroutine and must not drop an answer sizes
// the dispatch throttle below half the send budget.
type sendBudget struct {
	limit  int64        // Config.SendBudget; 0: no budget
	queued atomic.Int64 // bytes in every connection's out queue
	active atomic.Int64 // connections with something queued
}

// minShare is the smallest share of the budget a connection is paused
// at: a bulk window (2 MiB by default) never is.
const minShare = 4 << 20

// pauseCheck is how often a paused reader looks at its queue again.
const pauseCheck = 20 * time.Millisecond

var (
	// ErrSendBudget: Send found the messenger's send budget used up
	// (Config.SendBudget). It matches ErrOutQueueFull.
	ErrSendBudget = fmt.Errorf("%w: the messenger's send budget is used up", ErrOutQueueFull)
	// ErrSlowConsumer: the connection was closed because its peer read
	// nothing for Config.SlowConsumerTimeout while the connection held
	// more than its share of the send budget, or while it had
	// something queued.
	ErrSlowConsumer = errors.New("msgr: slow consumer: the peer reads nothing")
)

func (b *sendBudget) added(q *outQueue, n int) {
	if b == nil {
		return
	}
	if q.n == 1 {
		b.active.Add(1)
	}
	b.queued.Add(int64(n))
}

func (b *sendBudget) removed(q *outQueue, n int) {
	if b == nil {
		return
	}
	if q.n == 0 {
		b.active.Add(-1)
	}
	b.queued.Add(-int64(n))
}

// pressure reports whether the queues hold more than half the budget.
func (b *sendBudget) pressure() bool {
	return b.limit > 0 && b.queued.Load() > b.limit/2
}

// share is what one connection may hold under pressure: half the budget
// divided among the connections with something queued, so that reading
// stops well before Send would have to fail.
func (b *sendBudget) share() int64 {
	return max(b.limit/2/max(b.active.Load(), 1), minShare)
}

// full reports whether adding n bytes would exceed the budget.
func (b *sendBudget) full(n int) bool {
	return b.limit > 0 && b.queued.Load()+int64(n) > b.limit
}

// pauseIfOverShare is called by the reader goroutine at a frame boundary
// under pressure: it waits while the connection holds more than its
// share (see above), and returns an error only if the socket or the
// connection ended meanwhile.
func (c *Conn) pauseIfOverShare(r *socketRun) error {
	b := &c.m.budget
	c.mu.Lock()
	mine := int64(c.outq.bytes)
	c.mu.Unlock()
	if mine <= b.share() {
		return nil
	}
	c.paused.Store(true)
	defer c.paused.Store(false)
	c.m.met.readPause()
	c.m.log.Debug("not reading: the connection holds more than its share of the send budget",
		"conn", c.id, "queued", mine, "share", b.share())
	t := c.m.cfg.Clock.NewTimer(pauseCheck)
	defer t.Stop()
	stop := r.stopCh()
	for {
		select {
		case <-stop:
			return net.ErrClosed
		case <-c.ctx.Done():
			return net.ErrClosed
		case <-t.C():
		}
		c.mu.Lock()
		mine = int64(c.outq.bytes)
		c.mu.Unlock()
		if !b.pressure() || mine <= b.share()/2 {
			return nil
		}
		t.Reset(pauseCheck)
	}
}

// testHookSlowConsumerCheck, when set by a test, runs in
// closeIfSlowConsumer between its first look at lastWrite and its look
// at the queue.
var testHookSlowConsumerCheck func()

// closeIfSlowConsumer closes c with ErrSlowConsumer, and reports so, if
// it has written nothing for Config.SlowConsumerTimeout while it was
// paused (above) or had something queued: a peer that reads nothing goes
// even when its connection stays under its share, as nats-server closes
// a client whose writes stall past their deadline. The time counts from
// the last write that made progress or the Send that found the queue
// empty, whichever is later. A peer that reads, however slowly, is never
// closed so.
func (c *Conn) closeIfSlowConsumer(now time.Time, r *socketRun) bool {
	sc := c.m.cfg.SlowConsumerTimeout
	if sc <= 0 || now.UnixNano()-c.lastWrite.Load() <= int64(sc) {
		return false
	}
	paused := c.paused.Load()
	if h := testHookSlowConsumerCheck; h != nil {
		h()
	}
	c.mu.Lock()
	queued, n := c.outq.bytes, c.outq.n
	// Read again under mu: a Send to an empty queue stamps lastWrite in
	// the same critical section as its push, so a message found queued
	// here comes with its stamp. Read before the lock only, a Send
	// between the two would make an idle connection that has just sent
	// look stalled since its last write, however long ago.
	idle := now.UnixNano() - c.lastWrite.Load()
	c.mu.Unlock()
	if idle <= int64(sc) || !paused && n == 0 {
		return false
	}
	c.m.met.slowConsumer()
	c.m.log.Warn("msgr: closing a slow consumer", "conn", c.id, "peer", c.PeerName().String(),
		"idle_write", time.Duration(idle).String(), "queued", queued, "paused", paused)
	r.fail(ErrSlowConsumer)
	c.close(ErrSlowConsumer, true)
	return true
}
