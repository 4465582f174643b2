package rpc

import (
	"fmt"

	"github.com/ferrymsg/ferry/internal/bufpool"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/admit"
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
// requests (overflowing inputs, and the self-test's bulk sends): the
// admission queue, a pure machine (rpc/internal/admit) whose peers are
// the requests' connections (Incoming.conn). Guarded by the context's
// bmu; the code around it charges each request's peer account
// (chOverflowIn, chOvfWaiting) and acts on what it admits, refuses and
// drops outside the lock.
type overflowState struct {
	ovf *admit.Queue[any, ovfWaiter]
}

// ovfWaiter is a request for n bytes of overflow budget.
type ovfWaiter struct {
	r     *Incoming
	n     int64
	start func() // runs once the budget is taken
}

func (s *overflowState) initOverflow(limit int) {
	s.ovf = admit.New[any, ovfWaiter](int64(limit), maxOverflowWaiting, maxOverflowWaitingPerConn)
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
// for r: now if they fit and nobody waits, or later, connections taking
// turns (admit's rules). The waiting request is small (its input is not
// pulled yet); it is answered at its origin's deadline, and at most
// twice this side's timeout (a pull that holds the budget lasts at most
// one), so that requests without a deadline cannot hold the queue for
// ever; and at once if its connection goes.
func (c *Context) admitOverflow(r *Incoming, n int64, start func()) {
	now := c.in.now()
	until := now + 2*int64(c.Timeout())
	if rem, ok := r.Remaining(); ok {
		until = max(min(until, now+int64(rem)), 1)
	}
	c.bmu.Lock()
	if r.acct != nil && r.acct.gone.Load() {
		// Its connection has gone (and release has swept the queues, or
		// will after this: it sets gone first).
		c.bmu.Unlock()
		r.failCode(CodeUnreachable, "the request's connection has gone")
		return
	}
	admitted, refused, evicted, ok := c.ovf.Offer(r.conn, ovfWaiter{r: r, n: n, start: start}, n, until)
	switch {
	case admitted:
		r.acct.add(chOverflowIn, n)
	case refused == admit.Taken:
		r.acct.add(chOvfWaiting, 1)
	}
	if ok {
		evicted.r.acct.add(chOvfWaiting, -1)
	}
	c.bmu.Unlock()
	if ok {
		evicted.r.failCode(CodeBusy, "too many requests wait for overflow budget")
	}
	switch refused {
	case admit.Closed:
		r.failCode(CodeShutdown, "context closed")
	case admit.PerPeer:
		r.failCode(CodeBusy, "too many requests of this connection wait for overflow budget")
	case admit.Full:
		r.failCode(CodeBusy, "too many requests wait for overflow budget")
	default:
		if admitted {
			start()
		} else {
			c.armAt(until)
		}
	}
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
	c.bmu.Lock()
	a.add(chOverflowIn, -n)
	admitted := c.admittedLocked(c.ovf.Done(n, nil))
	c.bmu.Unlock()
	for _, w := range admitted {
		w.start()
	}
}

// admittedLocked moves the charges of requests the queue admitted from
// waiting to held. Called with bmu held.
func (c *Context) admittedLocked(ws []ovfWaiter) []ovfWaiter {
	for _, w := range ws {
		w.r.acct.add(chOvfWaiting, -1)
		w.r.acct.add(chOverflowIn, w.n)
	}
	return ws
}

// droppedLocked ends the waiting charges of requests the queue dropped.
// Called with bmu held.
func droppedLocked(ws []ovfWaiter) {
	for _, w := range ws {
		w.r.acct.add(chOvfWaiting, -1)
	}
}

// failOverflowWaiters answers the requests still waiting for budget;
// requests that overflow from now on are answered at once.
func (c *Context) failOverflowWaiters() {
	c.bmu.Lock()
	ws := c.ovf.Close(nil)
	droppedLocked(ws)
	c.bmu.Unlock()
	for _, w := range ws {
		w.r.failCode(CodeShutdown, "context closed")
	}
}

// dropOverflowPeer answers the requests of a's peer that wait for
// overflow budget, its connection having gone (peer.release), and admits
// the requests that then fit.
func (c *Context) dropOverflowPeer(a *peer) {
	c.bmu.Lock()
	gone, admitted := c.ovf.DropPeer(any(a.conn), nil, nil)
	droppedLocked(gone)
	c.admittedLocked(admitted)
	c.bmu.Unlock()
	for _, w := range gone {
		w.r.failCode(CodeUnreachable, "the request's connection has gone")
	}
	for _, w := range admitted {
		w.start()
	}
}

// ovfEarliest returns the earliest time a waiting request gives up (0:
// none waits).
func (c *Context) ovfEarliest() int64 {
	c.bmu.Lock()
	defer c.bmu.Unlock()
	return c.ovf.Earliest()
}

// expireOverflowWaiters answers the waiting requests that gave up by now
// (their origin's deadline or twice this side's timeout passed: pulling
// their inputs would be wasted) and admits the requests that then fit.
// Times are the instance's (in.now).
func (c *Context) expireOverflowWaiters(now int64) {
	c.bmu.Lock()
	expired, admitted := c.ovf.Expire(now, nil, nil)
	droppedLocked(expired)
	c.admittedLocked(admitted)
	c.bmu.Unlock()
	for _, w := range expired {
		w.r.failCode(CodeTimedOut, "the input waited for overflow budget until its deadline or twice this side's timeout")
	}
	for _, w := range admitted {
		w.start()
	}
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
