package rpc

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/track"
	"github.com/ferrymsg/ferry/rpc/internal/window"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// Context is a CaRT context: the origin of requests (ids, credits, wait
// queues, timeouts) and the target of requests addressed to its tag. Its
// index in the instance is its tag.
//
// Completion callbacks of Send and handlers without the Inline flag run
// in the context's progress: in Progress, called by the user, or on the
// context's own goroutine (ContextOptions.Auto). Replies, timeouts and
// credits do not need progress: a context that nobody progresses still
// completes Call, times requests out and sends queued requests.
//
// All methods are safe for concurrent use.
type Context struct {
	// progressed: Progress has been called; noProgressArmed: the warning
	// for callbacks waiting on a context nobody progresses is armed.
	progressed, noProgressArmed atomic.Bool

	in   *Instance
	tag  uint16
	opts ContextOptions

	timeout atomic.Int64 // default request timeout, ns

	// mu guards the tracker and armed.
	mu     sync.Mutex
	tr     *track.Tracker[*request]
	closed bool
	armed  int64 // the deadline the timer goroutine waits for (0: none)

	cacheMu sync.Mutex                            // serialises cache updates
	cache   atomic.Pointer[map[uint64]*msgr.Conn] // (rank<<16 | tag) → connection

	lkMu    sync.Mutex
	lookups map[uint64]*lookup // URI lookups in progress, by (rank<<16 | tag)

	// Work for progress: completions to call back and requests to serve.
	wmu     sync.Mutex
	wq      []work
	wq2     []work // the batch being run
	wclosed bool
	wsig    chan struct{} // capacity 1: work was queued

	// progConn is the connection the last request went out on: a
	// goroutine in ProgressUntil (or Progress waiting without a
	// timeout) reads it in msgr's Conn.Await while it waits for work, so
	// that the replies it waits for wake it, not a reader goroutine that
	// would have to hand them over. awaitingWork says one does; pushWork
	// then nudges the connection.
	progConn     atomic.Pointer[msgr.Conn]
	awaitingWork atomic.Bool
	progMu       sync.Mutex // one Progress at a time

	kick chan struct{} // capacity 1: the timer must look at armed again
	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	readyPool sync.Pool

	// Target-side counters.
	nReceived atomic.Uint64
	nReplied  atomic.Uint64
	nErrors   atomic.Uint64
	nBusy     atomic.Uint64
	inHeld    atomic.Int64 // bytes of requests received and not answered (IncomingLimit)
	// Origin-side counters beyond the tracker's.
	nTransmitted atomic.Uint64
	nLookups     atomic.Uint64

	bulkState     // bulk transfers started here
	overflowState // inputs pulled here
}

// work is one item for progress: a completed request to call back, or an
// incoming request to serve.
type work struct {
	r  *request
	in *Incoming
	bt *BulkTransfer
}

// maxIncomingQueued bounds the work waiting for progress as far as
// incoming requests are concerned: beyond it they are answered CodeBusy
// at once. (Completions are bounded by the requests tracked, so they are
// always queued.)
const maxIncomingQueued = 1 << 16

func newContext(in *Instance, tag uint16, o ContextOptions) (*Context, error) {
	c := &Context{
		in:      in,
		tag:     tag,
		opts:    o,
		tr:      track.New[*request](in.opts.Credits),
		lookups: map[uint64]*lookup{},
		wsig:    make(chan struct{}, 1),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	// Request ids differ from those of an earlier context with this tag:
	// its late replies must not complete this one's requests.
	c.tr.SetGenBase(mrand.Uint32())
	c.readyPool.New = func() any { return new(track.Ready[*request]) }
	c.xfers = map[uint64]*BulkTransfer{}
	c.finishing = map[uint64]*BulkTransfer{}
	c.initOverflow(in.opts.Bulk.OverflowLimit)
	b := &in.opts.Bulk
	c.win = window.New[*msgr.Conn, *BulkTransfer](window.Limits{Window: int64(b.Window), Conn: int64(b.ConnLimit), Context: int64(b.ContextLimit)})
	to := o.Timeout
	if to == 0 {
		to = in.opts.Timeout
	}
	c.timeout.Store(int64(min(to, MaxTimeout)))
	empty := map[uint64]*msgr.Conn{}
	c.cache.Store(&empty)
	c.wg.Add(1)
	go c.timerLoop()
	if o.Auto {
		started := make(chan error, 1)
		c.wg.Add(1)
		go c.autoLoop(started)
		if err := <-started; err != nil {
			close(c.done)
			c.wg.Wait()
			return nil, err
		}
	}
	return c, nil
}

// Tag returns the context's tag (its index).
func (c *Context) Tag() uint16 { return c.tag }

// Instance returns the instance the context belongs to.
func (c *Context) Instance() *Instance { return c.in }

// Timeout returns the default timeout of the context's requests.
func (c *Context) Timeout() time.Duration { return time.Duration(c.timeout.Load()) }

// SetTimeout sets the default timeout of requests sent from now on
// (crt_context_set_timeout); 0 restores the instance's. It is clamped to
// MaxTimeout.
func (c *Context) SetTimeout(d time.Duration) {
	if d <= 0 {
		d = c.in.opts.Timeout
	}
	c.timeout.Store(int64(min(d, MaxTimeout)))
}

// SetCredits changes the per-rank in-flight limit of this context
// (Options.Credits semantics: 0 the default, UnlimitedCredits none).
// Raising it sends waiting requests at once.
func (c *Context) SetCredits(n int) {
	o := Options{Credits: n}.withDefaults()
	out := c.getReady()
	c.mu.Lock()
	c.tr.SetCredits(o.Credits, out)
	c.takeSendRefs(out)
	c.mu.Unlock()
	c.perform(out)
}

func (c *Context) getReady() *track.Ready[*request] {
	return c.readyPool.Get().(*track.Ready[*request])
}

// takeSendRefs gives each request to transmit a reference for its
// transmitter. Called with c.mu held, right after a tracker operation.
func (c *Context) takeSendRefs(out *track.Ready[*request]) {
	for _, e := range out.Send {
		e.V.refs.Add(1)
	}
	for _, d := range out.Done {
		d.E.V.reason = d.Reason
	}
}

// perform transmits and completes what a tracker operation returned, then
// recycles out. Called without c.mu.
func (c *Context) perform(out *track.Ready[*request]) {
	for _, e := range out.Send {
		c.transmit(e.V)
	}
	for _, d := range out.Done {
		c.complete(d.E.V)
	}
	out.Reset()
	c.readyPool.Put(out)
}

// complete hands a completed request to its consumer.
func (c *Context) complete(r *request) {
	r.met.done(r, int64(c.in.clock.Now().Sub(c.in.epoch)))
	if r.ovf != nil {
		r.ovf.Free()
		r.ovf = nil
	}
	c.mu.Lock()
	pull := r.outPull
	r.outPull, r.outPulling = nil, false
	c.mu.Unlock()
	if pull != nil {
		// Its output is no longer wanted (the request timed out or was
		// aborted), or the pull is what completed it (Abort does nothing).
		pull.Abort()
	}
	switch r.mode {
	case modeCall:
		r.done <- struct{}{}
		if r.awaiting.Load() {
			// Its caller may be reading a connection in Await.
			if conn := r.conn.Load(); conn != nil {
				conn.Nudge()
			}
		}
	case modeInline:
		err := r.result(r.req.Out)
		r.icb(r, err)
		r.unref()
	default:
		if !c.pushWork(work{r: r}) {
			// Close drains the queue itself; this cannot happen while
			// requests are tracked, but never lose a callback.
			c.runCallback(r)
		}
	}
}

// submit starts tracking a prepared request and transmits it if its
// target has a credit free.
func (c *Context) submit(r *request) error {
	out := c.getReady()
	var flags track.SubmitFlags
	if r.flags&QueueFront != 0 {
		flags |= track.Front
	}
	if r.mode == modeInline {
		flags |= track.Bypass
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.readyPool.Put(out)
		return &Error{Code: CodeShutdown, Opcode: r.req.Opcode, Endpoint: r.req.Endpoint}
	}
	id := c.tr.Submit(&r.entry, uint64(r.req.Endpoint.Rank), r.deadline, flags, out)
	r.m.Header.Tid = id
	kick := c.armLocked(r.deadline)
	c.takeSendRefs(out)
	c.mu.Unlock()
	if kick {
		c.kickTimer()
	}
	c.perform(out)
	return nil
}

// armLocked makes the timer goroutine wake by deadline (unix ns; 0:
// none) and reports whether it must be kicked to see it. Called with mu
// held.
func (c *Context) armLocked(deadline int64) bool {
	if deadline != 0 && (c.armed == 0 || deadline < c.armed) {
		c.armed = deadline
		return true
	}
	return false
}

// armAt makes the timer goroutine wake by deadline (unix ns).
func (c *Context) armAt(deadline int64) {
	c.mu.Lock()
	kick := c.armLocked(deadline)
	c.mu.Unlock()
	if kick {
		c.kickTimer()
	}
}

func (c *Context) kickTimer() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// finishID completes request id with reason (and cause for the error) if
// it is still tracked.
func (c *Context) finishID(id uint64, reason track.Reason, cause error) bool {
	out := c.getReady()
	c.mu.Lock()
	e := c.tr.Lookup(id)
	ok := e != nil
	if ok {
		e.V.failErr = cause
		c.tr.Finish(id, reason, out)
		c.takeSendRefs(out)
	}
	c.mu.Unlock()
	c.perform(out)
	return ok
}

// Call sends an RPC and waits for its completion: the output is decoded
// into out (nil: ignored). It returns nil or an *Error. The request's
// timeout is the context's, shortened to ctx's deadline; when ctx ends
// first the request is aborted and Call returns an error matching
// ctx.Err() (ErrTimedOut for a deadline, ErrCanceled otherwise). Call does
// not need the context's progress.
func (c *Context) Call(ctx context.Context, ep Endpoint, op Opcode, in Input, out Output) error {
	if len(c.in.opts.CallInterceptors) > 0 {
		return chainCallInterceptors(c.in.opts.CallInterceptors, func(ctx context.Context, ep Endpoint, op Opcode, in Input, out Output) error {
			return c.call(ctx, ep, op, in, out, false)
		})(ctx, ep, op, in, out)
	}
	return c.call(ctx, ep, op, in, out, false)
}

// ctxEnded is the error of a request whose ctx has ended before it was
// sent (ErrTimedOut for a deadline, ErrCanceled otherwise), or nil. The
// callers check a deadline that has passed but not yet fired themselves,
// with the one clock reading that also bounds the request's timeout.
func ctxEnded(ctx context.Context, op Opcode, ep Endpoint) error {
	if err := ctx.Err(); err != nil {
		code := CodeCanceled
		if errors.Is(err, context.DeadlineExceeded) {
			code = CodeTimedOut
		}
		return &Error{Code: code, Opcode: op, Endpoint: ep, Err: err}
	}
	return nil
}

// ctxReason is how a request whose ctx ended with err completes:
// TimedOut for a deadline, Canceled otherwise.
func ctxReason(err error) track.Reason {
	if errors.Is(err, context.DeadlineExceeded) {
		return track.TimedOut
	}
	return track.Canceled
}

// call is Call; toRemoved lets the request reach a rank removed from the
// group, at the URI it had, on a connection that is not cached (to tell
// it it was removed).
func (c *Context) call(ctx context.Context, ep Endpoint, op Opcode, in Input, out Output, toRemoved bool) error {
	timeout := c.Timeout()
	if dl, ok := ctx.Deadline(); ok {
		d := time.Until(dl)
		if d <= 0 {
			return &Error{Code: CodeTimedOut, Opcode: op, Endpoint: ep, Err: context.DeadlineExceeded}
		}
		timeout = min(timeout, d)
	}
	if err := ctxEnded(ctx, op, ep); err != nil {
		return err // nothing sent: the target never runs it
	}
	r := getRequest(c)
	r.mode = modeCall
	r.toRemoved = toRemoved
	r.req.Endpoint, r.req.Opcode = ep, op
	if err := c.prepare(r, ep, op, in, timeout); err != nil {
		r.unref()
		return err
	}
	if err := c.submit(r); err != nil {
		r.unref()
		return err
	}
	id := r.entry.ID()
	if c.opts.Spin == 0 || spinWait(r.done, c.opts.Spin) {
		var err error
		if conn := r.conn.Load(); conn != nil {
			// Read the reply in this goroutine if nobody else is reading
			// the connection (msgr's reader role): the network then wakes
			// this goroutine, not a reader that would have to wake it.
			r.awaiting.Store(true)
			var got bool
			got, err = conn.Await(ctx, r.done)
			switch {
			case got:
				err = nil
			case ctx.Err() == nil:
				// The connection closed: the request completes through
				// connFailed (or its timeout) as any other.
				select {
				case <-r.done:
					err = nil
				case <-ctx.Done():
					err = ctx.Err()
				}
			}
		} else {
			select {
			case <-r.done:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if err != nil {
			c.finishID(id, ctxReason(err), err)
			<-r.done
		}
	}
	err := r.result(out)
	r.unref()
	return err
}

// Send sends an RPC (crt_req_send); cb (which may be nil) is called once
// by the context's progress when it completes. Send returns an error, and
// does not call cb, only if the request cannot be sent at all (the
// context is closed, the input cannot be encoded or is too large).
func (c *Context) Send(req Request, cb Callback) (Handle, error) {
	r := getRequest(c)
	r.mode = modeCallback
	r.req, r.cb = req, cb
	if err := c.prepare(r, req.Endpoint, req.Opcode, req.In, req.Timeout); err != nil {
		r.unref()
		return Handle{}, err
	}
	if err := c.submit(r); err != nil {
		r.unref()
		return Handle{}, err
	}
	return Handle{c: c, id: r.entry.ID()}, nil
}

// sendInternal sends an internal request whose callback runs where it
// completes (it must not block) and which takes no credit.
func (c *Context) sendInternal(ep Endpoint, op Opcode, in Input, out Output, timeout time.Duration, cb func(*request, error)) error {
	r := getRequest(c)
	r.mode = modeInline
	r.req.Endpoint, r.req.Opcode, r.req.Out = ep, op, out
	r.icb = cb
	if err := c.prepare(r, ep, op, in, timeout); err != nil {
		r.unref()
		return err
	}
	if err := c.submit(r); err != nil {
		r.unref()
		return err
	}
	return nil
}

// transmit hands a Sent request to its connection, looking the target's
// address up first if needed. It consumes one reference.
func (c *Context) transmit(r *request) {
	defer r.unref()
	ep := r.req.Endpoint
	id := r.entry.ID()
	for attempt := 0; ; attempt++ {
		conn, err := c.connFor(ep, id, r.toRemoved)
		if errors.Is(err, errLookupPending) {
			return // the lookup transmits it when it completes
		}
		if err != nil {
			reason := track.Failed
			if CodeOf(err) == CodeExcluded {
				reason = track.Excluded
			}
			c.finishID(id, reason, err)
			return
		}
		r.conn.Store(conn)
		if c.progConn.Load() != conn {
			c.progConn.Store(conn)
		}
		// The connection holds a reference until it releases the message.
		r.refs.Add(1)
		r.m.Release = r.relFn
		err = conn.Send(r.m)
		if err == nil {
			break
		}
		r.m.Release = nil
		r.refs.Add(-1) // not the last: this transmit holds one
		if errors.Is(err, msgr.ErrClosed) && attempt == 0 {
			c.forgetConn(conn) // a stale cached connection: dial again once
			continue
		}
		c.finishID(id, track.Failed, &Error{Code: CodeUnreachable, Opcode: r.req.Opcode, Endpoint: ep, Err: err})
		return
	}
	c.nTransmitted.Add(1)
	if r.oneWay {
		c.finishID(id, track.OK, nil)
	}
}

func cacheKey(rank uint32, tag uint16) uint64 { return uint64(rank)<<16 | uint64(tag) }

// errLookupPending: the target's URI is being looked up.
var errLookupPending = errors.New("rpc: URI lookup pending")

// connFor returns the connection for ep from the cache, or dials the
// target's URI and caches it; if the URI is not known it starts a URI
// lookup that will transmit request id.
//
// A rank known dead or removed is not dialled: ErrExcluded, unless
// toRemoved, for which a removed rank is dialled at the URI of its tag 0
// it had, and the connection is not cached.
func (c *Context) connFor(ep Endpoint, id uint64, toRemoved bool) (*msgr.Conn, error) {
	key := cacheKey(ep.Rank, ep.Tag)
	if conn := (*c.cache.Load())[key]; conn != nil {
		return conn, nil
	}
	uri, err := c.in.group.lookupURI(ep.Rank, ep.Tag)
	switch {
	case errors.Is(err, errRemoved) && toRemoved:
		u, ok := c.in.group.removedURI(ep.Rank)
		if !ok {
			return nil, &Error{Code: CodeExcluded, Endpoint: ep}
		}
		conn, err := c.in.m.Connect(c.in.selectURI(u))
		if err != nil {
			return nil, &Error{Code: CodeUnreachable, Endpoint: ep, Msg: "connecting to " + u, Err: err}
		}
		return conn, nil
	case errors.Is(err, errNoURI):
		c.startLookup(ep, id)
		return nil, errLookupPending
	case errors.Is(err, errRemoved):
		return nil, &Error{Code: CodeExcluded, Endpoint: ep}
	case errors.Is(err, errDead):
		return nil, &Error{Code: CodeExcluded, Endpoint: ep, Msg: "known dead"}
	case err != nil:
		return nil, &Error{Code: CodeNotFound, Endpoint: ep, Msg: err.Error()}
	}
	uri = c.in.selectURI(uri)
	conn, err := c.in.m.Connect(uri)
	if err != nil {
		return nil, &Error{Code: CodeUnreachable, Endpoint: ep, Msg: "connecting to " + uri, Err: err}
	}
	c.cacheMu.Lock()
	old := *c.cache.Load()
	n := make(map[uint64]*msgr.Conn, len(old)+1)
	for k, v := range old {
		n[k] = v
	}
	n[key] = conn
	c.cache.Store(&n)
	c.cacheMu.Unlock()
	return conn, nil
}

// forgetConns drops cache entries for which drop returns true.
func (c *Context) forgetConns(drop func(key uint64, conn *msgr.Conn) bool) {
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	old := *c.cache.Load()
	n := make(map[uint64]*msgr.Conn, len(old))
	for k, v := range old {
		if !drop(k, v) {
			n[k] = v
		}
	}
	c.cache.Store(&n)
}

func (c *Context) forgetConn(conn *msgr.Conn) {
	c.forgetConns(func(_ uint64, v *msgr.Conn) bool { return v == conn })
}

// connFailed fails the requests transmitted on conn and forgets it.
func (c *Context) connFailed(conn *msgr.Conn) {
	c.forgetConn(conn)
	out := c.getReady()
	c.mu.Lock()
	err := &Error{Code: CodeUnreachable, Msg: "connection failed", Err: conn.Err()}
	c.tr.FailIf(func(e *track.Entry[*request]) bool {
		if e.V.conn.Load() == conn {
			e.V.failErr = err
			return true
		}
		return false
	}, track.Failed, out)
	c.takeSendRefs(out)
	c.mu.Unlock()
	c.perform(out)
	// Its transfers fail with the peer's account (Instance.peerGone).
}

// ranksChanged fails the requests to removed ranks and forgets the
// connections of removed and re-addressed ones.
func (c *Context) ranksChanged(removed, changed []uint32) {
	gone := map[uint32]bool{}
	for _, r := range removed {
		gone[r] = true
	}
	for _, r := range changed {
		gone[r] = true
	}
	c.forgetConns(func(k uint64, _ *msgr.Conn) bool { return gone[uint32(k>>16)] })
	if len(removed) == 0 {
		return
	}
	out := c.getReady()
	c.mu.Lock()
	for _, rank := range removed {
		c.tr.FailKey(uint64(rank), track.Excluded, out)
	}
	c.takeSendRefs(out)
	c.mu.Unlock()
	c.perform(out)
}

// handleReply matches a reply to its request (on the reader goroutine).
func (c *Context) handleReply(m *msg.Message, h *wire.Header, body []byte) {
	out := c.getReady()
	c.mu.Lock()
	if what := c.foreignReplyLocked(m, false); what != "" {
		c.mu.Unlock()
		c.readyPool.Put(out)
		conn, _ := m.Conn.(*msgr.Conn)
		c.in.fault(conn, what)
		m.Done()
		return
	}
	e := c.tr.Reply(m.Header.Tid, out)
	if e != nil {
		r := e.V
		r.reply, r.rc, r.replyBody = m, h.RC, body
		c.takeSendRefs(out)
	}
	c.mu.Unlock()
	if e == nil {
		m.Done() // a late reply: nobody will look at it
	}
	c.perform(out)
}

// foreignReplyLocked says what is wrong with reply m if it answers a
// request this context has in flight but did not send on m's connection
// (a peer guessing ids to complete other peers' requests), or, with
// pulling, if a pull of that request's output has started already (a
// second reply). Replies for ids not in flight are late, not foreign:
// "" then, as for a good reply. Called with mu held.
func (c *Context) foreignReplyLocked(m *msg.Message, pulling bool) string {
	e := c.tr.Lookup(m.Header.Tid)
	if e == nil || e.State() != track.Sent {
		return ""
	}
	conn, _ := m.Conn.(*msgr.Conn)
	if r := e.V; r.conn.Load() != conn {
		return fmt.Sprintf("a reply (tid %#x) to a request sent on another connection", m.Header.Tid)
	} else if pulling && r.outPulling {
		return fmt.Sprintf("a second reply (tid %#x) while the first one's output is pulled", m.Header.Tid)
	}
	return ""
}

// timerLoop expires requests at their deadlines. It sleeps until the
// deadline in armed; submit kicks it when a request's deadline is earlier.
// When it finds nothing due it re-arms at the earliest deadline tracked,
// so in steady state it wakes about once per timeout, not per request.
func (c *Context) timerLoop() {
	defer c.wg.Done()
	t := c.in.clock.NewTimer(time.Hour)
	t.Stop()
	for {
		c.mu.Lock()
		armed := c.armed
		c.mu.Unlock()
		var tc <-chan time.Time
		if armed != 0 {
			d := time.Duration(armed - c.in.now())
			if d <= 0 {
				c.expire()
				continue
			}
			t.Reset(d)
			tc = t.C()
			// A clock that moved between reading it and arming the timer
			// (a fake one in tests) must not make the deadline late.
			if c.in.now() >= armed {
				t.Stop()
				c.expire()
				continue
			}
		}
		select {
		case <-tc:
			c.expire()
		case <-c.kick:
			t.Stop()
		case <-c.done:
			t.Stop()
			return
		}
	}
}

// expire times out the requests whose deadline has passed, the
// incoming requests whose origin's deadline passed while they waited for
// overflow budget and the bulk transfers whose timeout passed, and
// re-arms.
func (c *Context) expire() {
	now := c.in.now()
	c.expireOverflowWaiters(now)
	out := c.getReady()
	c.mu.Lock()
	c.tr.Expire(now, out)
	c.armed, _ = c.tr.NextDeadline()
	c.takeSendRefs(out)
	c.mu.Unlock()
	c.perform(out)
	c.expireTransfers(now)
	// Re-arm for the overflow waiters and the transfers after armed was
	// overwritten, so that one that began to wait meanwhile is not
	// missed.
	if next := c.ovfEarliest(); next != 0 {
		c.armAt(next)
	}
	if next := c.xferEarliest(); next != 0 {
		c.armAt(next)
	}
}

// pushWork queues an item for progress; false once the context is closed.
func (c *Context) pushWork(w work) bool {
	c.wmu.Lock()
	if c.wclosed {
		c.wmu.Unlock()
		return false
	}
	if w.in != nil && len(c.wq) >= maxIncomingQueued {
		c.wmu.Unlock()
		c.nBusy.Add(1)
		w.in.failCode(CodeBusy, "target context's progress queue is full")
		return true
	}
	c.wq = append(c.wq, w)
	c.wmu.Unlock()
	select {
	case c.wsig <- struct{}{}:
	default:
	}
	if c.awaitingWork.Load() {
		if conn := c.progConn.Load(); conn != nil {
			conn.Nudge()
		}
	}
	if !c.opts.Auto && !c.progressed.Load() && c.noProgressArmed.CompareAndSwap(false, true) {
		c.warnIfNoProgress()
	}
	return true
}

// runWork runs the queued items in the calling goroutine and returns how
// many ran.
func (c *Context) runWork() int {
	c.wmu.Lock()
	batch := c.wq
	c.wq = c.wq2[:0]
	c.wmu.Unlock()
	// Completion callbacks in a row typically send the next requests:
	// those go out together once the run of callbacks ends (msgr's
	// Conn.Cork), one system call instead of one each. A callback
	// waiting in Call has its request written first (Conn.Await);
	// handlers and bulk callbacks, which may wait for anything, run
	// uncorked.
	var corked *msgr.Conn
	uncork := func() {
		if corked != nil {
			corked.Uncork()
			corked = nil
		}
	}
	defer uncork()
	for i := range batch {
		w := batch[i]
		batch[i] = work{}
		if w.r != nil {
			if corked == nil && i+1 < len(batch) && batch[i+1].r != nil {
				if corked = c.progConn.Load(); corked != nil {
					corked.Cork()
				}
			}
			c.runCallback(w.r)
			continue
		}
		uncork()
		if w.bt != nil {
			c.runBulkCallback(w.bt)
		} else {
			c.serve(w.in)
		}
	}
	n := len(batch)
	c.wmu.Lock()
	c.wq2 = batch[:0]
	c.wmu.Unlock()
	return n
}

// runCallback decodes a completed request's output and calls its
// callback.
func (c *Context) runCallback(r *request) {
	err := r.result(r.req.Out)
	if r.cb != nil {
		func() {
			defer func() {
				if p := recover(); p != nil {
					c.in.log.Error("RPC completion callback panicked", "tag", c.tag, "opcode", r.req.Opcode, "panic", p)
				}
			}()
			r.cb(Completion{Handle: Handle{c: c, id: r.entry.ID()}, Request: r.req, Err: err})
		}()
	}
	r.unref()
}

// serve runs a handler and answers for it if it returns an error or
// panics.
func (c *Context) serve(r *Incoming) {
	gen := r.state.Load() >> 1
	h, oneWay, op := r.def.handler, r.OneWay(), r.Opcode()
	defer func() {
		if p := recover(); p != nil {
			c.in.log.Error("RPC handler panicked", "tag", c.tag, "opcode", op, "panic", p)
			if r.claim(gen) {
				r.fail(&Error{Code: CodeHandler, Opcode: op, Msg: fmt.Sprintf("handler panicked: %v", p)})
			}
		}
	}()
	err := c.in.runHandler(r, h)
	switch {
	case err != nil:
		if r.claim(gen) {
			r.fail(err)
		}
	case oneWay:
		if r.claim(gen) {
			r.release()
		}
	}
}

// spinWait polls ch for up to d, yielding the processor between polls.
// It returns true if nothing came (the caller blocks next) and false if
// it received from ch.
func spinWait(ch chan struct{}, d time.Duration) bool {
	start := time.Now()
	for i := 0; ; i++ {
		select {
		case <-ch:
			return false
		default:
		}
		if i&15 == 15 && time.Since(start) >= d {
			return true
		}
		runtime.Gosched()
	}
}

// Progress runs the completion callbacks and handlers that are ready, in
// the calling goroutine (crt_progress: HG_Progress + HG_Trigger). If none
// is ready it waits up to timeout for one (0: do not wait; negative: wait
// until there is one or the context closes). It returns how many it ran;
// after Close it returns ErrShutdown. Only one goroutine progresses a
// context at a time; concurrent calls wait their turn. It fails with
// ErrAutoProgress on a context with Auto progress.
func (c *Context) Progress(timeout time.Duration) (int, error) {
	if c.opts.Auto {
		return 0, ErrAutoProgress
	}
	c.progressed.Store(true)
	c.progMu.Lock()
	defer c.progMu.Unlock()
	if n := c.runWork(); n > 0 || timeout == 0 {
		return n, c.closedErr()
	}
	if spin := c.opts.Spin; spin > 0 {
		if timeout > 0 {
			spin = min(spin, timeout)
		}
		if !spinWait(c.wsig, spin) {
			return c.runWork(), c.closedErr()
		}
	}
	var tc <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-c.wsig:
	case <-tc:
	case <-c.done:
	}
	return c.runWork(), c.closedErr()
}

// ProgressUntil progresses the context until cond returns true (checked
// after each batch, and first), ctx ends (its error is returned) or the
// context closes (ErrShutdown) (crt_progress_cond).
func (c *Context) ProgressUntil(ctx context.Context, cond func() bool) error {
	if c.opts.Auto {
		return ErrAutoProgress
	}
	c.progressed.Store(true)
	c.progMu.Lock()
	defer c.progMu.Unlock()
	for {
		c.runWork()
		if cond() {
			return nil
		}
		if err := c.closedErr(); err != nil {
			return err
		}
		if c.opts.Spin > 0 && !spinWait(c.wsig, c.opts.Spin) {
			continue
		}
		if err := c.awaitWork(ctx); err != nil {
			return err
		}
	}
}

// awaitWork waits until work is queued, ctx ends or the context closes,
// reading the connection of the last request meanwhile when nobody else
// is (msgr's Conn.Await): in progress mode, as Mercury's progress polls
// the network in the calling thread, the replies this goroutine waits
// for are read by it.
func (c *Context) awaitWork(ctx context.Context) error {
	if conn := c.progConn.Load(); conn != nil {
		c.awaitingWork.Store(true)
		_, err := conn.Await(ctx, c.wsig)
		c.awaitingWork.Store(false)
		if errors.Is(err, msgr.ErrClosed) {
			c.progConn.CompareAndSwap(conn, nil) // wait without it next time
			return nil
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return nil
	}
	select {
	case <-c.wsig:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
	}
	return nil
}

func (c *Context) closedErr() error {
	select {
	case <-c.done:
		return ErrShutdown
	default:
		return nil
	}
}

// autoLoop is the progress goroutine of an Auto context.
func (c *Context) autoLoop(started chan<- error) {
	defer c.wg.Done()
	if len(c.opts.CPUs) > 0 {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := setAffinity(c.opts.CPUs); err != nil {
			started <- fmt.Errorf("%w: pinning progress to CPUs %v: %w", ErrInvalid, c.opts.CPUs, err)
			return
		}
	}
	started <- nil
	for {
		if c.runWork() > 0 {
			continue
		}
		if c.opts.Spin > 0 && !spinWait(c.wsig, c.opts.Spin) {
			continue
		}
		select {
		case <-c.wsig:
		case <-c.done:
			c.runWork()
			return
		}
	}
}

// Close destroys the context (crt_context_destroy with force): requests
// still queued or in flight complete with ErrShutdown and their
// callbacks run (here or on the progress goroutine) before Close returns;
// requests that arrive for it are answered ErrShutdown. Its goroutines
// are stopped. It is idempotent.
func (c *Context) Close() error {
	out := c.getReady()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.readyPool.Put(out)
		return nil
	}
	c.closed = true
	c.tr.FailIf(func(*track.Entry[*request]) bool { return true }, track.Shutdown, out)
	c.takeSendRefs(out)
	c.mu.Unlock()
	c.perform(out)
	c.closeBulk()
	c.failOverflowWaiters()
	c.in.removeContext(c)
	close(c.done)
	// A goroutine reading a connection in awaitWork looks up.
	select {
	case c.wsig <- struct{}{}:
	default:
	}
	if conn := c.progConn.Load(); conn != nil {
		conn.Nudge()
	}
	c.wg.Wait()
	// Whatever is left runs here; nothing can be queued after this.
	c.progMu.Lock()
	c.wmu.Lock()
	c.wclosed = true
	c.wmu.Unlock()
	for {
		c.wmu.Lock()
		batch := c.wq
		c.wq = nil
		c.wmu.Unlock()
		if len(batch) == 0 {
			break
		}
		for _, w := range batch {
			if w.r != nil {
				c.runCallback(w.r)
			} else if w.bt != nil {
				c.runBulkCallback(w.bt)
			} else {
				w.in.failCode(CodeShutdown, "context closed")
			}
		}
	}
	c.progMu.Unlock()
	return nil
}

// Stats are a context's counters (CaRT's per-context CM_* metrics).
type Stats struct {
	// Origin side.
	Submitted   uint64 // requests submitted
	Queued      uint64 // requests that waited for a credit
	Transmitted uint64 // requests handed to a connection
	Replied     uint64 // completed by a reply
	TimedOut    uint64 // completed by their timeout
	Canceled    uint64 // aborted
	Failed      uint64 // failed (unreachable...)
	Excluded    uint64 // their rank left the group
	LateReplies uint64 // replies that came after their request completed
	URILookups  uint64 // URI lookups started
	InFlight    int    // requests holding a credit now
	Waiting     int    // requests waiting for a credit now
	MaxWaiting  int    // most waiting at once
	// Target side.
	Received uint64 // requests handed to a handler
	Replies  uint64 // replies sent (including errors)
	Errors   uint64 // error replies sent
	Busy     uint64 // requests refused because the progress queue or IncomingLimit was full
	Held     int64  // bytes of requests received and not answered yet (IncomingLimit)
}

// Stats returns the context's counters.
func (c *Context) Stats() Stats {
	c.mu.Lock()
	t := c.tr.Stats()
	c.mu.Unlock()
	return Stats{
		Submitted: t.Submitted, Queued: t.Queued, Transmitted: c.nTransmitted.Load(),
		Replied: t.Replied, TimedOut: t.TimedOut, Canceled: t.Canceled, Failed: t.Failed,
		Excluded: t.Excluded, LateReplies: t.LateReplies, URILookups: c.nLookups.Load(),
		InFlight: t.InFlight, Waiting: t.Waiting, MaxWaiting: t.MaxWaiting,
		Received: c.nReceived.Load(), Replies: c.nReplied.Load(), Errors: c.nErrors.Load(), Busy: c.nBusy.Load(), Held: c.inHeld.Load(),
	}
}

// EndpointStats are the credit counters of one target rank
// (crt_ep_inflight).
type EndpointStats struct {
	InFlight    int    // requests holding a credit now
	Waiting     int    // requests on the wait queue now
	MaxInFlight int    // most ever in flight at once
	MaxWaiting  int    // longest the wait queue has been
	Sent        uint64 // requests that got a credit
	Completed   uint64 // requests that returned one
	Queued      uint64 // requests that had to wait
}

// EndpointStats returns the credit counters of target rank.
func (c *Context) EndpointStats(rank uint32) EndpointStats {
	c.mu.Lock()
	s := c.tr.EndpointStats(uint64(rank))
	c.mu.Unlock()
	return EndpointStats(s)
}
