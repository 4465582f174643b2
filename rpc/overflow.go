package rpc

import (
	"fmt"
	"slices"

	"github.com/ferrymsg/ferry/internal/bufpool"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/track"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// Overflow (Mercury's HG_CORE_MORE_DATA): an RPC input or output larger
// than the eager limit is not sent inline; its sender registers it as a
// read-only handle, puts the handle's key and length after the RPC
// header, and the receiver pulls it (a rendezvous GET) into a buffer of
// its own before it runs the handler or completes the request. The
// caller and the handler see the data segment as usual.

// maxOverflowWaiting bounds the requests a context keeps waiting for
// overflow budget, and maxOverflowWaitingPerConn those of one
// connection; beyond them requests are answered CodeBusy.
const (
	maxOverflowWaiting        = 4096
	maxOverflowWaitingPerConn = 256
)

// overflowState is a context's budget for the inputs it pulls for
// requests (overflowing inputs, and the self-test's bulk sends). Guarded
// by the context's bmu.
type overflowState struct {
	ovfBytes  int64                 // bytes of pulled inputs held
	ovfWait   []ovfWaiter           // requests waiting for budget, in arrival order
	ovfConns  map[any]*ovfConnState // the connections (Incoming.conn) that have requests waiting
	ovfSeq    uint64                // admissions so far
	ovfLast   any                   // the connection admitted last
	ovfClosed bool                  // the context is closing: admit nothing more
}

// ovfConnState is a connection's place in the turns for overflow budget.
type ovfConnState struct {
	waiting int    // its requests waiting
	turn    uint64 // ovfSeq when it last had a request admitted, or when it began to wait
}

// ovfWaiter is a request waiting for n bytes of overflow budget.
type ovfWaiter struct {
	r     *Incoming
	n     int64
	until int64  // when it gives up waiting, in in.now() time
	start func() // runs once the budget is taken
}

// pullInput admits r (whose input overflowed) within the context's
// overflow budget and pulls its input, then delivers it.
func (c *Context) pullInput(r *Incoming) {
	key, n, rest, err := wire.DecodeOverflow(r.body)
	if err != nil || n > MaxPayload {
		r.failCode(CodeMalformed, "bad overflow descriptor")
		return
	}
	r.body = rest
	r.ovfKey, r.ovfLen = key, int64(n)
	c.admitOverflow(r, int64(n), func() { c.startPull(r) })
}

// admitOverflow runs start once n bytes of the overflow budget are taken
// for r: now if they fit and nobody waits, or later, in arrival order (a
// request that would fit does not overtake one already waiting, or a
// large input could wait for ever behind a stream of small ones). The
// waiting request is small (its input is not pulled yet); it is answered
// at its origin's deadline if it is still waiting then.
func (c *Context) admitOverflow(r *Incoming, n int64, start func()) {
	c.bmu.Lock()
	if c.ovfClosed {
		c.bmu.Unlock()
		r.failCode(CodeShutdown, "context closed")
		return
	}
	if r.acct != nil && r.acct.gone.Load() {
		// Its connection has gone (and release has swept the queues, or
		// will after this: it sets gone first).
		c.bmu.Unlock()
		r.failCode(CodeUnreachable, "the request's connection has gone")
		return
	}
	if len(c.ovfWait) == 0 && c.ovfFits(n) {
		c.ovfBytes += n
		c.ovfSeq++
		c.ovfLast = r.conn
		r.acct.add(chOverflowIn, n)
		c.bmu.Unlock()
		start()
		return
	}
	cs := c.ovfConns[r.conn]
	mine := 0
	if cs != nil {
		mine = cs.waiting
	}
	var evicted *Incoming
	if mine >= maxOverflowWaitingPerConn {
		c.bmu.Unlock()
		r.failCode(CodeBusy, "too many requests of this connection wait for overflow budget")
		return
	}
	if len(c.ovfWait) >= maxOverflowWaiting {
		// Full: the connection with the most requests waiting gives up
		// its newest for this one, if it has more than this one's.
		if i := c.ovfNewestOfLargest(mine + 1); i >= 0 {
			evicted = c.ovfRemoveLocked(i).r
		} else {
			c.bmu.Unlock()
			r.failCode(CodeBusy, "too many requests wait for overflow budget")
			return
		}
	}
	// It waits until its origin's deadline, and at most twice this
	// side's timeout (a pull that holds the budget lasts at most one), so
	// that requests without a deadline cannot hold the queue for ever.
	now := c.in.now()
	w := ovfWaiter{r: r, n: n, start: start, until: now + 2*int64(c.Timeout())}
	if rem, ok := r.Remaining(); ok {
		w.until = max(min(w.until, now+int64(rem)), 1)
	}
	if cs == nil {
		if c.ovfConns == nil {
			c.ovfConns = map[any]*ovfConnState{}
		}
		// It joins the back of the turns (ahead of the connection
		// admitted last, which loses ties).
		cs = &ovfConnState{turn: c.ovfSeq}
		c.ovfConns[r.conn] = cs
	}
	cs.waiting++
	r.acct.add(chOvfWaiting, 1)
	c.ovfWait = append(c.ovfWait, w)
	c.bmu.Unlock()
	if evicted != nil {
		evicted.failCode(CodeBusy, "too many requests wait for overflow budget")
	}
	c.armAt(w.until)
}

// ovfRemoveLocked removes waiter i and returns it. Called with bmu held.
func (c *Context) ovfRemoveLocked(i int) ovfWaiter {
	w := c.ovfWait[i]
	c.ovfWait = slices.Delete(c.ovfWait, i, i+1)
	c.ovfLeftLocked(w.r)
	return w
}

// ovfLeftLocked counts one of r's connection's waiters gone (r stopped
// waiting); a connection with none left loses its turn. Called with bmu
// held.
func (c *Context) ovfLeftLocked(r *Incoming) {
	r.acct.add(chOvfWaiting, -1)
	if cs := c.ovfConns[r.conn]; cs != nil {
		if cs.waiting--; cs.waiting <= 0 {
			delete(c.ovfConns, r.conn)
		}
	}
}

// ovfNewestOfLargest returns the index of the newest waiter of the
// connection with the most waiters, if it has more than than waiters, or -1.
// Called with bmu held.
func (c *Context) ovfNewestOfLargest(than int) int {
	var big any
	most := than
	for conn, cs := range c.ovfConns {
		if cs.waiting > most {
			big, most = conn, cs.waiting
		}
	}
	if big == nil {
		return -1
	}
	for i := len(c.ovfWait) - 1; i >= 0; i-- {
		if c.ovfWait[i].r.conn == big {
			return i
		}
	}
	return -1
}

// ovfFits reports whether an input of n bytes may be pulled now. One
// input is always admitted when none is held, however large (up to
// MaxPayload), so that a limit below an input's size cannot block it
// forever. Called with bmu held.
func (c *Context) ovfFits(n int64) bool {
	return c.ovfBytes == 0 || c.ovfBytes+n <= int64(c.in.opts.Bulk.OverflowLimit)
}

func (c *Context) startPull(r *Incoming) {
	r.ovfBytes = r.ovfLen
	conn, _ := r.conn.(*msgr.Conn)
	if conn == nil || conn.Err() != nil {
		// (Admitted after its connection failed: allocate nothing.)
		r.failCode(CodeUnreachable, "no connection to pull the input from")
		return
	}
	buf, pooled := bufpool.Get(int(r.ovfLen))
	r.ovfBuf = pooled // given back once the reply is sent (putOverflow) unless the handler takes the data
	d := BulkDesc{
		Op: BulkGet, Remote: BulkHandle{Key: r.ovfKey, Len: r.ovfLen, Perm: BulkRO, Tag: r.hdr.SrcTag},
		Local: newBulk(c.in, [][]byte{buf}, BulkWO), Len: r.ovfLen,
	}
	// The pull holds budget that other origins' requests may wait for:
	// it is bounded by this side's own timeout, not only by the origin's
	// deadline (which a peer may set a century away).
	d.Timeout = c.Timeout()
	if rem, ok := r.Remaining(); ok && rem > 0 {
		d.Timeout = min(rem, d.Timeout)
	}
	_, err := c.startOn(conn, d, nil, func(err error) {
		if err != nil {
			r.failCode(CodeOf(err), fmt.Sprintf("pulling the %d-byte input: %s", r.ovfLen, errText(err, CodeOf(err))))
			return
		}
		r.data = msg.Buffers{buf}
		c.deliverIncoming(r)
	})
	if err != nil {
		r.failCode(CodeOf(err), "pulling the input: "+errText(err, CodeOf(err)))
	}
}

// overflowDone returns n bytes of overflow budget, which a's peer held,
// and admits the requests that now fit.
func (c *Context) overflowDone(a *peer, n int64) {
	var admit []func()
	c.bmu.Lock()
	c.ovfBytes -= n
	a.add(chOverflowIn, -n)
	for len(c.ovfWait) > 0 && !c.ovfClosed {
		i := c.ovfNextLocked()
		if !c.ovfFits(c.ovfWait[i].n) {
			break // the others do not overtake it
		}
		c.ovfSeq++
		c.ovfLast = c.ovfWait[i].r.conn
		if cs := c.ovfConns[c.ovfLast]; cs != nil {
			cs.turn = c.ovfSeq
		}
		w := c.ovfRemoveLocked(i)
		c.ovfBytes += w.n
		w.r.acct.add(chOverflowIn, w.n)
		admit = append(admit, w.start)
	}
	c.bmu.Unlock()
	for _, start := range admit {
		start()
	}
}

// ovfNextLocked returns the index of the waiting request to admit next:
// connections take turns (the earliest waiter of the connection whose
// turn is oldest: it was admitted, or began to wait, longest ago; the
// connection admitted last loses ties), so
// that one peer's requests, however many, delay another's by at most one
// admission per connection waiting; within a connection, arrival order.
// Called with bmu held and ovfWait not empty.
func (c *Context) ovfNextLocked() int {
	best, bestTurn, bestLast := -1, uint64(0), false
	for i, w := range c.ovfWait {
		cs := c.ovfConns[w.r.conn]
		if cs == nil {
			continue
		}
		last := w.r.conn == c.ovfLast
		if best < 0 || cs.turn < bestTurn || (cs.turn == bestTurn && bestLast && !last) {
			best, bestTurn, bestLast = i, cs.turn, last
		}
	}
	return max(best, 0)
}

// failOverflowWaiters answers the requests still waiting for budget;
// requests that overflow from now on are answered at once.
func (c *Context) failOverflowWaiters() {
	c.bmu.Lock()
	ws := c.ovfWait
	c.ovfWait = nil
	for _, w := range ws {
		w.r.acct.add(chOvfWaiting, -1)
	}
	clear(c.ovfConns)
	c.ovfLast = nil
	c.ovfClosed = true
	c.bmu.Unlock()
	for _, w := range ws {
		w.r.failCode(CodeShutdown, "context closed")
	}
}

// dropOverflowPeer answers the requests of a's peer that wait for
// overflow budget, its connection having gone (peer.release), and admits
// the requests that then fit.
func (c *Context) dropOverflowPeer(a *peer) {
	var gone []*Incoming
	c.bmu.Lock()
	kept := c.ovfWait[:0]
	for _, w := range c.ovfWait {
		if w.r.acct == a {
			gone = append(gone, w.r)
			c.ovfLeftLocked(w.r)
			continue
		}
		kept = append(kept, w)
	}
	clear(c.ovfWait[len(kept):])
	c.ovfWait = kept
	if c.ovfLast == any(a.conn) {
		c.ovfLast = nil
	}
	c.bmu.Unlock()
	if len(gone) == 0 {
		return
	}
	for _, r := range gone {
		r.failCode(CodeUnreachable, "the request's connection has gone")
	}
	c.overflowDone(nil, 0)
}

// ovfEarliest returns the earliest time a waiting request gives up (0:
// none waits).
func (c *Context) ovfEarliest() int64 {
	c.bmu.Lock()
	defer c.bmu.Unlock()
	var next int64
	for _, w := range c.ovfWait {
		if w.until != 0 && (next == 0 || w.until < next) {
			next = w.until
		}
	}
	return next
}

// expireOverflowWaiters answers the waiting requests that gave up by now
// (their origin's deadline or twice this side's timeout passed: pulling
// their inputs would be wasted) and admits the requests that then fit.
// Times are the instance's (in.now).
func (c *Context) expireOverflowWaiters(now int64) {
	var expired []*Incoming
	c.bmu.Lock()
	kept := c.ovfWait[:0]
	for _, w := range c.ovfWait {
		if w.until != 0 && w.until <= now {
			expired = append(expired, w.r)
			c.ovfLeftLocked(w.r)
			continue
		}
		kept = append(kept, w)
	}
	clear(c.ovfWait[len(kept):])
	c.ovfWait = kept
	c.bmu.Unlock()
	if len(expired) == 0 {
		return
	}
	for _, r := range expired {
		r.failCode(CodeTimedOut, "the input waited for overflow budget until its deadline or twice this side's timeout")
	}
	// The head may have been what blocked the others.
	c.overflowDone(nil, 0)
}

// pullReply pulls an overflowing output, releases the target's handle
// and then completes the request as handleReply does.
func (c *Context) pullReply(m *msg.Message, hp *wire.Header, body []byte) {
	// A copy for the closures below: hp is the dispatcher's, which must
	// not escape (it would cost an allocation for every RPC message).
	hh := *hp
	h := &hh
	tid := m.Header.Tid
	conn, _ := m.Conn.(*msgr.Conn)
	key, n, rest, err := wire.DecodeOverflow(body)
	release := func() {
		if conn == nil {
			return
		}
		rm := bulkMsg(&wire.BulkHeader{Op: wire.BulkRelease, SrcTag: c.tag, DstTag: h.SrcTag, Key: key}, nil, msg.PrioDefault)
		if err := conn.Send(rm); err != nil {
			rm.Done()
		}
	}
	fail := func(code Code, text string, cause error) {
		m.Done()
		c.finishID(tid, track.Failed, &Error{Code: code, Opcode: Opcode(h.Opcode), Msg: text, Err: cause})
	}
	if err != nil || n > MaxPayload || conn == nil {
		release()
		fail(CodeMalformed, "bad output overflow descriptor", err)
		return
	}
	// Pull only for a request still waiting: a late reply (the request
	// timed out or was canceled) or one for an unknown tid is released
	// unread, so a peer cannot make this side allocate for nothing.
	c.mu.Lock()
	if what := c.foreignReplyLocked(m, true); what != "" {
		c.mu.Unlock()
		release()
		c.in.fault(conn, what)
		m.Done()
		return
	}
	var r *request
	if e := c.tr.Lookup(tid); e != nil && e.State() == track.Sent {
		r = e.V
		r.outPulling = true
	}
	c.mu.Unlock()
	if r == nil {
		release()
		c.handleReply(m, h, rest) // counted as a late reply, and dropped
		return
	}
	// The output lands in a pooled buffer that goes back with the reply
	// message (Release) when the caller keeps none of its data.
	buf, pooled := bufpool.Get(int(n))
	d := BulkDesc{
		Op: BulkGet, Remote: BulkHandle{Key: key, Len: int64(n), Perm: BulkRO, Tag: h.SrcTag},
		Local: newBulk(c.in, [][]byte{buf}, BulkWO), Len: int64(n),
	}
	t, err := c.startOn(conn, d, nil, func(err error) {
		release()
		if err != nil {
			bufpool.Put(pooled) // the transfer is over: nothing writes into buf any more
			fail(CodeOf(err), "pulling the output", err)
			return
		}
		m.Data = msg.Buffers{buf}
		if pooled != nil {
			prev := m.Release
			m.Release = func(m *msg.Message) {
				bufpool.Put(pooled)
				if prev != nil {
					prev(m)
				}
			}
		}
		c.handleReply(m, h, rest)
	})
	if err != nil {
		release()
		bufpool.Put(pooled)
		fail(CodeOf(err), "pulling the output", err)
		return
	}
	// The pull ends with its request: if the request completed in the
	// meantime (timed out, aborted), end it now.
	c.mu.Lock()
	e := c.tr.Lookup(tid)
	live := e != nil && e.V == r && r.outPulling
	if live {
		r.outPull = t
	}
	c.mu.Unlock()
	if !live {
		t.Abort()
	}
}
