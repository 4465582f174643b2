package rpc

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/window"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// BulkOp is a transfer's direction (crt_bulk_op_t).
type BulkOp uint8

// Transfer directions.
const (
	// BulkPut writes the local buffer into the remote handle (push).
	BulkPut BulkOp = 1
	// BulkGet reads the remote handle into the local buffer (pull).
	BulkGet BulkOp = 2
)

func (o BulkOp) String() string {
	switch o {
	case BulkPut:
		return "put"
	case BulkGet:
		return "get"
	}
	return fmt.Sprintf("bulkop(%d)", uint8(o))
}

// BulkDesc describes a transfer (crt_bulk_desc_t).
type BulkDesc struct {
	// Op is BulkPut or BulkGet.
	Op BulkOp
	// Remote is the peer's handle, RemoteOff the offset in it.
	Remote    BulkHandle
	RemoteOff int64
	// Local is this side's registered buffer, LocalOff the offset in it.
	Local    *Bulk
	LocalOff int64
	// Len is the number of bytes to move.
	Len int64

	// Where Remote lives: Via, the incoming RPC that carried the handle
	// (the transfer uses its connection, as CaRT's bd_rpc); else Remote's
	// origin if it is bound; else Peer.
	Via  *Incoming
	Peer *Endpoint

	// Timeout bounds the transfer; 0 means the context's timeout. It is
	// clamped to MaxTimeout.
	Timeout time.Duration
	// Arg is handed back in the completion.
	Arg any
}

// BulkCompletion is what a transfer's callback gets (crt_bulk_cb_info).
type BulkCompletion struct {
	Transfer *BulkTransfer
	Desc     BulkDesc
	// Err is nil on success, else an *Error: CodeCanceled (Abort),
	// CodeTimedOut, CodeUnreachable (the connection failed), CodeNoPerm,
	// CodeInvalid or CodeNotFound (the peer refused), CodeShutdown.
	Err error
}

// BulkCallback is called once per transfer started with Transfer, by the
// context's progress.
type BulkCallback func(BulkCompletion)

// BulkProtocol is how a transfer moves its bytes (libfabric rxm's
// choice by size).
type BulkProtocol uint8

// Transfer protocols.
const (
	// Eager: one message (up to the eager limit).
	Eager BulkProtocol = 1
	// Segmented: chunks pushed without waiting for the receiver, within
	// the window (SAR; PUT up to the segmentation limit).
	Segmented BulkProtocol = 2
	// Rendezvous: the receiver pulls chunks when it is ready (every GET
	// above the eager limit; a PUT above the segmentation limit asks the
	// receiver to pull).
	Rendezvous BulkProtocol = 3
)

func (p BulkProtocol) String() string {
	switch p {
	case Eager:
		return "eager"
	case Segmented:
		return "segmented"
	case Rendezvous:
		return "rendezvous"
	}
	return fmt.Sprintf("protocol(%d)", uint8(p))
}

// transfer states.
const (
	xActive uint8 = iota
	xFinishing
	xFinished
)

// BulkTransfer is a transfer in progress (the op id of crt_bulk_transfer).
type BulkTransfer struct {
	c     *Context
	id    uint64
	d     BulkDesc
	conn  *msgr.Conn
	acct  *peer // conn's peer account: the transfer is listed there, its bytes in flight counted
	proto BulkProtocol
	chunk int64
	cb    BulkCallback
	done  chan struct{}
	// deadline is when the transfer times out, in in.now() time (0:
	// never); hidx is its index in the context's deadline heap (-1: not
	// in it). Both guarded by the context's bmu.
	deadline int64
	hidx     int
	// internal completion, run where the transfer finishes (overflow
	// pulls and rendezvous PUTs served for a peer).
	onDone func(error)
	// tempReg: Local was registered for this transfer only.
	tempReg bool
	// direct: the transfer asked for the peer's addresses (startDirect).
	direct bool
	// awaiting: TransferWait's caller reads conn in Await; whoever
	// completes the transfer nudges it.
	awaiting atomic.Bool
	// spans asked for (GET) or sent (PUT) and not answered in full
	// (guarded by the context's bmu).
	spans []bulkSpan
	// span0 holds spans while a window's worth fits (two spans by
	// default), and self the one-transfer list completeLocked or
	// unplaceLocked returns when t finishes (once), so that a transfer
	// allocates neither.
	span0 [2]bulkSpan
	self  [1]*BulkTransfer

	// Guarded by the context's bmu.
	state   uint8
	fl      window.Flow[*msgr.Conn, *BulkTransfer] // its part of the context's windows: next byte to grant, bytes in flight
	acked   int64                                  // bytes landed
	placing int                                    // chunks being read into Local right now
	err     error
}

// Protocol returns the protocol the transfer uses.
func (t *BulkTransfer) Protocol() BulkProtocol { return t.proto }

// Done is closed when the transfer has completed.
func (t *BulkTransfer) Done() <-chan struct{} { return t.done }

// Err returns the transfer's result once Done is closed.
func (t *BulkTransfer) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// Abort cancels the transfer (crt_bulk_abort): it completes with
// ErrCanceled, and Abort returns true, unless it had already completed.
// Once it has completed nothing more is written into its local buffer.
func (t *BulkTransfer) Abort() bool {
	c := t.c
	c.bmu.Lock()
	if t.state != xActive {
		c.bmu.Unlock()
		return false
	}
	fin := c.failLocked(t, &Error{Code: CodeCanceled, Msg: "bulk transfer aborted"})
	c.bmu.Unlock()
	c.finishXfers(fin)
	return true
}

// bulkState is a context's transfers and flow-control accounting.
type bulkState struct {
	bmu   sync.Mutex
	xfers map[uint64]*BulkTransfer
	// win is the windows of the context's transfers (bytes in flight per
	// transfer, per connection and in all; the transfers waiting for a
	// shared one), a pure machine; grants is its output's scratch.
	win    *window.Windows[*msgr.Conn, *BulkTransfer]
	grants []window.Grant[*msgr.Conn, *BulkTransfer]
	// finishing holds ended transfers whose chunk is still being read
	// into their buffer.
	finishing map[uint64]*BulkTransfer
	bclosed   bool
	// xdl holds the active transfers that have a deadline, earliest
	// first: the context's timer goroutine fails them when it passes, on
	// the instance's Clock (expireTransfers).
	xdl xferHeap
	// pumpDue: a transfer ended while others were parked; whoever
	// finishes it pumps (finishXfers). cancels: rendezvous PUTs that
	// failed, whose holders must stop pulling.
	pumpDue bool
	cancels []*BulkTransfer
	endDue  atomic.Bool // pumpDue or cancels set: afterEnd has work
	nDone   uint64
	nFailed uint64
	bytes   uint64
	nDirect uint64 // transfers that took the direct path (direct.go)
	// nProto counts the transfers started, by BulkProtocol.
	nProto [Rendezvous + 1]atomic.Uint64
}

// TransferWait runs a transfer and waits for it (no progress needed). If
// ctx ends first the transfer is aborted and ctx's error is returned.
func (c *Context) TransferWait(ctx context.Context, d BulkDesc) error {
	t, err := c.startTransfer(d, nil, nil)
	if err != nil {
		return err
	}
	// Read the transfer's answers in this goroutine if nobody else is
	// reading its connection (msgr's reader role): the network then wakes
	// this goroutine, which lands the chunks and asks for the next ones
	// itself, rather than the connection's reader goroutine, which would
	// have to wake it when the last chunk lands.
	t.awaiting.Store(true)
	// Otherwise ctx ended, or the connection closed and the transfer
	// fails through its account (or its timeout) as any other.
	if got, _ := t.conn.Await(ctx, t.done); got {
		return t.err
	}
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		if t.Abort() {
			<-t.done
			return ctx.Err()
		}
		<-t.done
		return t.err
	}
}

// Transfer starts a transfer (crt_bulk_transfer); cb, if not nil, runs
// in the context's progress when it completes. Errors in the descriptor
// are returned at once.
func (c *Context) Transfer(d BulkDesc, cb BulkCallback) (*BulkTransfer, error) {
	return c.startTransfer(d, cb, nil)
}

func (c *Context) descErr(d *BulkDesc) error {
	bad := func(code Code, f string, a ...any) error {
		return &Error{Code: code, Msg: fmt.Sprintf(f, a...)}
	}
	switch {
	case d.Op != BulkPut && d.Op != BulkGet:
		return bad(CodeInvalid, "bulk op %v", d.Op)
	case d.Local == nil || d.Local.freed.Load():
		return bad(CodeInvalid, "no registered local buffer")
	case d.Local.in != c.in:
		return bad(CodeInvalid, "local buffer of another instance")
	case d.Len < 0 || d.LocalOff < 0 || d.RemoteOff < 0:
		return bad(CodeInvalid, "negative length or offset")
	case !d.Local.inRange(uint64(d.LocalOff), uint64(d.Len)):
		return bad(CodeInvalid, "local range %d+%d outside %d bytes", d.LocalOff, d.Len, d.Local.size)
	case d.Remote.Len >= 0 && (d.RemoteOff > d.Remote.Len || d.Len > d.Remote.Len-d.RemoteOff):
		return bad(CodeInvalid, "remote range %d+%d outside %d bytes", d.RemoteOff, d.Len, d.Remote.Len)
	case d.Op == BulkGet && d.Local.perm&BulkWO == 0:
		return bad(CodeNoPerm, "GET into a read-only local buffer")
	case d.Op == BulkPut && d.Local.perm&BulkRO == 0:
		return bad(CodeNoPerm, "PUT from a write-only local buffer")
	case d.Op == BulkGet && d.Remote.Perm&BulkRO == 0:
		return bad(CodeNoPerm, "GET from a write-only remote handle")
	case d.Op == BulkPut && d.Remote.Perm&BulkWO == 0:
		return bad(CodeNoPerm, "PUT into a read-only remote handle")
	}
	return nil
}

// transferConn finds the connection to the remote handle's holder.
func (c *Context) transferConn(d *BulkDesc) (*msgr.Conn, error) {
	if d.Via != nil {
		if conn, ok := d.Via.conn.(*msgr.Conn); ok && conn != nil {
			return conn, nil
		}
		return nil, &Error{Code: CodeInvalid, Msg: "the incoming RPC has no connection"}
	}
	if c.in.opts.Bulk.SeparateConn {
		return c.laneConn(d)
	}
	if d.Remote.URI != "" {
		if c.in.group.Has(d.Remote.Rank) {
			return c.endpointConn(Endpoint{Rank: d.Remote.Rank, Tag: d.Remote.Tag})
		}
		conn, err := c.in.m.Connect(c.in.selectURI(d.Remote.URI))
		if err != nil {
			return nil, &Error{Code: CodeUnreachable, Msg: "connecting to " + d.Remote.URI, Err: err}
		}
		return conn, nil
	}
	if d.Peer != nil {
		return c.endpointConn(*d.Peer)
	}
	return nil, &Error{Code: CodeInvalid, Msg: "no peer: set Via or Peer, or use a bound handle"}
}

// laneConn is transferConn with BulkOptions.SeparateConn: the same
// peer, reached on the transfers' own connection.
func (c *Context) laneConn(d *BulkDesc) (*msgr.Conn, error) {
	uri := d.Remote.URI
	ep := Endpoint{Rank: d.Remote.Rank, Tag: d.Remote.Tag}
	if uri == "" || c.in.group.Has(d.Remote.Rank) {
		if uri == "" {
			if d.Peer == nil {
				return nil, &Error{Code: CodeInvalid, Msg: "no peer: set Via or Peer, or use a bound handle"}
			}
			ep = *d.Peer
		}
		var err error
		if uri, err = c.in.group.lookupURI(ep.Rank, ep.Tag); err != nil {
			if errors.Is(err, errNoURI) {
				c.startLookup(ep, 0) // as connFor does: a retry finds it
			}
			return nil, &Error{Code: CodeUnreachable, Endpoint: ep, Msg: "the endpoint's URI is not known", Err: err}
		}
	}
	return c.in.laneConn(c.in.selectURI(uri))
}

// endpointConn is connFor without URI lookups: the URI must be known.
func (c *Context) endpointConn(ep Endpoint) (*msgr.Conn, error) {
	conn, err := c.connFor(ep, 0, false)
	if errors.Is(err, errLookupPending) {
		return nil, &Error{Code: CodeUnreachable, Endpoint: ep, Msg: "the endpoint's URI is not known"}
	}
	return conn, err
}

// protocolFor picks the protocol and chunk size of a transfer.
func (in *Instance) protocolFor(op BulkOp, n int64) (BulkProtocol, int64) {
	o := &in.opts.Bulk
	switch {
	case n <= int64(o.EagerLimit):
		return Eager, max(n, 1)
	case op == BulkPut && n <= int64(o.SegmentLimit):
		return Segmented, int64(o.ChunkSize)
	}
	// A pull asks for spans of half the window, so two requests are
	// outstanding; the holder answers each with chunk-sized messages
	// that the connection interleaves with other traffic.
	return Rendezvous, max(int64(o.ChunkSize), int64(o.Window)/2)
}

func (c *Context) startTransfer(d BulkDesc, cb BulkCallback, onDone func(error)) (*BulkTransfer, error) {
	if err := c.descErr(&d); err != nil {
		return nil, err
	}
	conn, err := c.transferConn(&d)
	if err != nil {
		return nil, err
	}
	return c.startOn(conn, d, cb, onDone)
}

func (c *Context) startOn(conn *msgr.Conn, d BulkDesc, cb BulkCallback, onDone func(error)) (*BulkTransfer, error) {
	if conn == nil {
		return nil, &Error{Code: CodeUnreachable, Msg: "no connection for the bulk transfer"}
	}
	t := &BulkTransfer{c: c, d: d, conn: conn, acct: c.in.peerOf(conn), cb: cb, onDone: onDone, done: make(chan struct{}), hidx: -1}
	t.proto, t.chunk = c.in.protocolFor(d.Op, d.Len)
	t.spans = t.span0[:0]
	t.fl = window.Flow[*msgr.Conn, *BulkTransfer]{Conn: conn, Owner: t, Len: d.Len, Chunk: t.chunk}
	if int(t.proto) < len(c.nProto) {
		c.nProto[t.proto].Add(1)
	}
	if d.Op == BulkPut && t.proto == Rendezvous && d.Local.key == 0 {
		// An internal, unregistered source: the peer pulls it by key.
		c.in.bulks.add(d.Local)
		t.tempReg = true
	}
	to := d.Timeout
	if to <= 0 {
		to = c.Timeout()
	}
	to = min(to, MaxTimeout) // as a request's: no deadline overflows
	c.bmu.Lock()
	if c.bclosed {
		c.bmu.Unlock()
		if t.tempReg {
			d.Local.Free()
		}
		return nil, &Error{Code: CodeShutdown}
	}
	// Ids are unique in the instance, not only in the context: a tag is
	// reused after its context closes, and late answers to the old
	// context's transfers must not match the new one's.
	t.id = c.in.nextXfer.Add(1)
	c.xfers[t.id] = t
	if to > 0 && d.Len > 0 {
		t.deadline = c.in.now() + int64(to)
		heap.Push(&c.xdl, t)
	}
	var out []*msg.Message
	var fin []*BulkTransfer
	direct := false
	switch {
	case !t.acct.addXfer(t):
		fin = c.failLocked(t, &Error{Code: CodeUnreachable, Msg: "connection failed during a bulk transfer"})
	case d.Len == 0:
		fin = c.completeLocked(t, nil)
	case c.directOK(t):
		direct = true
		t.direct = true
	case d.Op == BulkPut && t.proto == Rendezvous:
		// Ask the holder of Remote to pull from Local.
		out = append(out, bulkMsg(&wire.BulkHeader{
			Op: wire.BulkRTS, SrcTag: c.tag, DstTag: d.Remote.Tag, Xfer: t.id,
			Key: d.Remote.Key, Off: uint64(d.RemoteOff), Len: uint64(d.Len),
			Key2: d.Local.key, Off2: uint64(d.LocalOff),
		}, nil, msg.PrioDefault))
		t.fl.Next = d.Len // the peer pulls it all; its final ack lands it
	default:
		out = c.issueLocked(t, out)
	}
	c.bmu.Unlock()
	if t.deadline != 0 {
		c.armAt(t.deadline)
	}
	c.finishXfers(fin)
	if direct {
		c.startDirect(t)
		return t, nil
	}
	c.sendAll(t, out)
	return t, nil
}

// fail completes t with err if it is still active.
func (t *BulkTransfer) fail(err error) {
	c := t.c
	c.bmu.Lock()
	var fin []*BulkTransfer
	if t.state == xActive {
		fin = c.failLocked(t, err)
	}
	c.bmu.Unlock()
	c.finishXfers(fin)
}

// sendAll sends t's chunk messages on its connection.
func (c *Context) sendAll(t *BulkTransfer, out []*msg.Message) {
	for i, m := range out {
		if err := t.conn.Send(m); err != nil {
			t.fail(&Error{Code: CodeUnreachable, Msg: "sending bulk chunk", Err: err})
			for _, m := range out[i:] {
				m.Done()
			}
			return
		}
	}
}

// setSegments gives m the front and the data buffers; one data buffer
// lives in m itself (no slice header to allocate). With scratch set,
// data is the caller's reusable list and is copied; otherwise m keeps it.
func setSegments(m *msg.Message, front []byte, data [][]byte, scratch bool) {
	switch len(data) {
	case 0:
		m.SetSegments(front, nil, nil)
	case 1:
		m.SetSegments(front, nil, data[0])
	default:
		m.SetSegments(front, nil, nil)
		if scratch {
			data = append(msg.Buffers(nil), data...)
		}
		m.Data = data
	}
}

func bulkMsg(h *wire.BulkHeader, data [][]byte, prio msg.Priority) *msg.Message {
	m := msg.New(wire.TypeBulk)
	m.Header.Priority = prio
	m.Header.Tid = h.Xfer
	front := h.Append(make([]byte, 0, wire.BulkHeaderLen))
	setSegments(m, front, data, false)
	return m
}

// issueLocked queues as many of t's chunks as its window, its
// connection's and the context's allow (the windows' machine, package
// window); t is parked if a shared window is what stops it.
func (c *Context) issueLocked(t *BulkTransfer, out []*msg.Message) []*msg.Message {
	gs := c.win.Issue(&t.fl, c.grants[:0])
	for _, g := range gs {
		out = append(out, c.grantedLocked(t, g.Pos, g.Len))
	}
	clear(gs)
	c.grants = gs[:0]
	return out
}

// pumpLocked gives the shared windows to parked transfers, a chunk each
// in turn, and returns the messages to send per transfer.
func (c *Context) pumpLocked(sends map[*BulkTransfer][]*msg.Message) {
	c.pumpDue = false
	gs := c.win.Pump(c.grants[:0])
	for _, g := range gs {
		t := g.F.Owner
		sends[t] = append(sends[t], c.grantedLocked(t, g.Pos, g.Len))
	}
	clear(gs)
	c.grants = gs[:0]
}

// grantedLocked makes the message of a span of t the windows granted.
func (c *Context) grantedLocked(t *BulkTransfer, pos, n int64) *msg.Message {
	t.askedLocked(pos, n)
	t.acct.add(chXferBytes, n)
	return c.chunkMsg(t, pos, n)
}

func (c *Context) chunkMsg(t *BulkTransfer, pos, n int64) *msg.Message {
	d := &t.d
	h := wire.BulkHeader{
		SrcTag: c.tag, DstTag: d.Remote.Tag, Xfer: t.id, Key: d.Remote.Key,
		Off: uint64(d.RemoteOff + pos), Pos: uint64(pos), Len: uint64(n),
	}
	if d.Op == BulkGet {
		h.Op = wire.BulkGetReq
		return bulkMsg(&h, nil, msg.PrioDefault)
	}
	h.Op = wire.BulkPut
	return bulkMsg(&h, d.Local.slice(nil, d.LocalOff+pos, n), msg.PrioLow)
}

// landed accounts n bytes of t that arrived (GET) or were acknowledged
// (PUT) and issues more; it returns what to send and what finished.
func (c *Context) landedLocked(t *BulkTransfer, n int64, sends map[*BulkTransfer][]*msg.Message) []*BulkTransfer {
	c.releaseLocked(t, n)
	t.acked += n
	c.bytes += uint64(n)
	var fin []*BulkTransfer
	// Parked transfers take the window given back first, a chunk each in
	// turn; then t, which parks too if the shared windows stop it.
	c.pumpLocked(sends)
	if t.acked >= t.d.Len {
		fin = c.completeLocked(t, nil)
	} else if out := c.issueLocked(t, sends[t]); len(out) > 0 {
		sends[t] = out
	}
	return fin
}

// releaseLocked returns n bytes of t's window to the shared windows.
func (c *Context) releaseLocked(t *BulkTransfer, n int64) {
	if r := c.win.Release(&t.fl, n); r > 0 {
		t.acct.add(chXferBytes, -r)
	}
}

func (c *Context) failLocked(t *BulkTransfer, err error) []*BulkTransfer {
	c.nFailed++
	return c.completeLocked(t, err)
}

// completeLocked ends t: it leaves the table and gives its window back at
// once; it finishes (callback, Done) when no chunk is being read into its
// local buffer any more.
func (c *Context) completeLocked(t *BulkTransfer, err error) []*BulkTransfer {
	if t.state != xActive {
		return nil
	}
	t.err = err
	if err == nil {
		c.nDone++
	}
	delete(c.xfers, t.id)
	if t.hidx >= 0 {
		heap.Remove(&c.xdl, t.hidx)
	}
	r, pumpDue := c.win.End(&t.fl)
	t.acct.add(chXferBytes, -r)
	t.acct.dropXfer(t)
	if pumpDue {
		c.pumpDue = true // the window it gave back, or its place in the queue
		c.endDue.Store(true)
	}
	if err != nil && t.d.Op == BulkPut && t.proto == Rendezvous {
		c.cancels = append(c.cancels, t) // the holder is pulling: stop it
		c.endDue.Store(true)
	}
	t.state = xFinishing
	if t.placing > 0 {
		c.finishing[t.id] = t // the reader finishing the chunk finishes it
		return nil
	}
	t.state = xFinished
	return t.finished()
}

// finished returns the list of one finished transfer, t (its own
// storage: the callers only read it or append to it, which copies).
func (t *BulkTransfer) finished() []*BulkTransfer {
	t.self[0] = t
	return t.self[:]
}

// joinFin is append(a, b...) that returns b itself when a is empty (b
// is often a transfer's own list, finished).
func joinFin(a, b []*BulkTransfer) []*BulkTransfer {
	if len(a) == 0 {
		return b
	}
	return append(a, b...)
}

// finishXfers delivers the completions of finished transfers, then does
// what transfers that ended left to do (afterEnd). Every path that ends
// a transfer calls it, with or without finished ones.
func (c *Context) finishXfers(fin []*BulkTransfer) {
	defer c.afterEnd()
	for _, t := range fin {
		if t.tempReg {
			t.d.Local.Free()
		}
		if t.err != nil {
			if e, ok := t.err.(*Error); ok && e.Opcode == 0 && e.Endpoint == (Endpoint{}) && t.d.Peer != nil {
				e.Endpoint = *t.d.Peer
			}
		}
		close(t.done)
		if t.awaiting.Load() {
			t.conn.Nudge() // its caller may be reading the connection in Await
		}
		if t.direct {
			forgetDirect(t) // after done: startDirect checks it
		}
		if t.onDone != nil {
			t.onDone(t.err)
		}
		if t.cb != nil && !c.pushWork(work{bt: t}) {
			c.runBulkCallback(t)
		}
	}
}

// afterEnd gives the windows of transfers that ended to parked ones, and
// tells the holders of failed rendezvous PUTs to stop pulling (their
// sources may be reused as soon as the failure is reported).
func (c *Context) afterEnd() {
	if !c.endDue.Load() {
		return // the common case: a chunk landed, nothing ended
	}
	c.bmu.Lock()
	c.endDue.Store(false)
	if !c.pumpDue && len(c.cancels) == 0 {
		c.bmu.Unlock()
		return
	}
	var sends map[*BulkTransfer][]*msg.Message
	if c.pumpDue {
		sends = map[*BulkTransfer][]*msg.Message{}
		c.pumpLocked(sends)
	}
	cancels := c.cancels
	c.cancels = nil
	c.bmu.Unlock()
	for _, t := range cancels {
		// At the RTS's priority, so that it cannot overtake the RTS in
		// the connection's queue (the holder ignores a cancel for a pull
		// it does not know).
		m := bulkMsg(&wire.BulkHeader{Op: wire.BulkCancel, SrcTag: c.tag, DstTag: t.d.Remote.Tag, Xfer: t.id}, nil, msg.PrioDefault)
		if err := t.conn.Send(m); err != nil {
			m.Done()
		}
	}
	for t, out := range sends {
		c.sendAll(t, out)
	}
}

func (c *Context) runBulkCallback(t *BulkTransfer) {
	defer func() {
		if p := recover(); p != nil {
			c.in.log.Error("bulk completion callback panicked", "tag", c.tag, "panic", p)
		}
	}()
	t.cb(BulkCompletion{Transfer: t, Desc: t.d, Err: t.err})
}

// expireTransfers fails the transfers whose deadline is at or before
// now (in.now() time) with ErrTimedOut; the context's timer goroutine
// calls it (expire).
func (c *Context) expireTransfers(now int64) {
	var fin []*BulkTransfer
	c.bmu.Lock()
	for len(c.xdl) > 0 && c.xdl[0].deadline <= now {
		t := c.xdl[0]
		fin = joinFin(fin, c.failLocked(t, &Error{Code: CodeTimedOut, Msg: "bulk transfer timed out"}))
		if t.hidx >= 0 { // (failLocked removes it; never loop on one it did not)
			heap.Remove(&c.xdl, t.hidx)
		}
	}
	c.bmu.Unlock()
	c.finishXfers(fin)
}

// xferEarliest returns the earliest deadline of an active transfer (0:
// none has one).
func (c *Context) xferEarliest() int64 {
	c.bmu.Lock()
	defer c.bmu.Unlock()
	if len(c.xdl) == 0 {
		return 0
	}
	return c.xdl[0].deadline
}

// xferHeap is a min-heap of transfers by deadline (container/heap);
// each transfer knows its index, so that one that ends is removed at
// once rather than when its deadline passes.
type xferHeap []*BulkTransfer

func (h xferHeap) Len() int           { return len(h) }
func (h xferHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h xferHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *xferHeap) Push(x any) {
	t := x.(*BulkTransfer)
	t.hidx = len(*h)
	*h = append(*h, t)
}
func (h *xferHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.hidx = -1
	return t
}

// closeBulk fails every transfer with ErrShutdown and refuses new ones.
func (c *Context) closeBulk() {
	c.bmu.Lock()
	c.bclosed = true
	var fin []*BulkTransfer
	for _, t := range c.xfers {
		fin = joinFin(fin, c.failLocked(t, &Error{Code: CodeShutdown}))
	}
	c.bmu.Unlock()
	c.finishXfers(fin)
}

// BulkStats are a context's transfer counters.
type BulkStats struct {
	Active    int    // transfers in progress
	Completed uint64 // transfers that succeeded
	Failed    uint64 // transfers that failed or were aborted
	Bytes     uint64 // bytes moved
	InFlight  int64  // bytes requested or sent and not yet landed
	Parked    int    // transfers waiting for a shared window
	Direct    uint64 // transfers that succeeded by the direct path (process_vm_readv/writev)
	// Transfers started, by protocol.
	Eager, Segmented, Rendezvous uint64
	// Target side of the overflow path (BulkOptions.OverflowLimit).
	OverflowHeld    int64 // bytes of pulled inputs held for requests not yet answered
	OverflowWaiting int   // requests whose inputs wait for overflow budget
}

// BulkStats returns the context's transfer counters.
func (c *Context) BulkStats() BulkStats {
	c.bmu.Lock()
	defer c.bmu.Unlock()
	return BulkStats{Active: len(c.xfers), Completed: c.nDone, Failed: c.nFailed, Bytes: c.bytes, InFlight: c.win.InFlight(), Parked: c.win.Parked(), Direct: c.nDirect,
		OverflowHeld: c.ovf.Held(), OverflowWaiting: c.ovf.Waiting(),
		Eager: c.nProto[Eager].Load(), Segmented: c.nProto[Segmented].Load(), Rendezvous: c.nProto[Rendezvous].Load()}
}

// ---- receiving side: the dispatcher's part ----

// bulkDst returns where a BulkData message's data goes (the transfer is
// looked up in the context that asked), or nil with the code to refuse it
// with. PUT chunks go by putTarget.
func (in *Instance) bulkDst(conn *msgr.Conn, h *wire.BulkHeader, n int, dst [][]byte) ([][]byte, *BulkTransfer, Code) {
	switch h.Op {
	case wire.BulkData:
		c := in.Context(h.DstTag)
		if c == nil {
			return nil, nil, CodeBadTarget
		}
		c.bmu.Lock()
		defer c.bmu.Unlock()
		t := c.xfers[h.Xfer]
		if t == nil || t.conn != conn || t.d.Op != BulkGet || uint64(n) != h.Len || t.spanFor(h) < 0 {
			return nil, nil, CodeNotFound
		}
		return t.d.Local.slice(dst, t.d.LocalOff+int64(h.Pos), int64(h.Len)), t, CodeOK
	}
	return nil, nil, CodeInvalid
}

// bulkSpan is a span of a transfer asked for (a GET's request, a PUT's
// chunk) and not yet answered in full: done bytes of it have landed.
type bulkSpan struct {
	pos, n, done int64
}

// askedLocked records that t asked for (GET) or sent (PUT) n bytes at
// pos. Called with the context's bmu held, as are the two below.
func (t *BulkTransfer) askedLocked(pos, n int64) {
	t.spans = append(t.spans, bulkSpan{pos: pos, n: n})
}

// spanFor returns the span h answers, or -1: a holder answers a span
// with pieces in order (possibly smaller than the span, by its own
// chunk size), so a piece must start where what has landed of its span
// ends and stay within it; spans themselves may be answered in any
// order (they are sent by several goroutines). Anything else is a
// duplicate or was never asked for; counting it would complete the
// transfer with bytes missing.
func (t *BulkTransfer) spanFor(h *wire.BulkHeader) int {
	for i, s := range t.spans {
		if h.Pos == uint64(s.pos+s.done) && h.Len > 0 && h.Len <= uint64(s.n-s.done) {
			return i
		}
	}
	return -1
}

// landSpan counts n bytes of span i as landed.
func (t *BulkTransfer) landSpan(i int, n int64) {
	s := &t.spans[i]
	if s.done += n; s.done >= s.n {
		last := len(t.spans) - 1
		t.spans[i] = t.spans[last]
		t.spans = t.spans[:last]
	}
}

// PlaceData lands the data of bulk chunks straight in the registered
// buffer they are for (msgr.DataPlacer).
func (d *dispatcher) PlaceData(conn *msgr.Conn, mh *msg.Header, front []byte, n int) [][]byte {
	if mh.Type != wire.TypeBulk {
		return nil
	}
	h, err := wire.DecodeBulk(front)
	if err != nil || (h.Op != wire.BulkData && h.Op != wire.BulkPut) {
		return nil
	}
	in := d.in
	if h.Op == wire.BulkData {
		c := in.Context(h.DstTag)
		if c == nil {
			return nil
		}
		bufs, t, code := in.bulkDst(conn, &h, n, nil)
		if code != CodeOK {
			return nil
		}
		c.bmu.Lock()
		// The reader dispatches this chunk (dataArrived), unplaces it,
		// or drops it while the instance closes; each settles it through
		// the account (takePlaced), which finds t even after its context
		// has closed.
		if t.state != xActive || !t.acct.placing(nil, t) {
			c.bmu.Unlock()
			return nil
		}
		t.placing++
		c.bmu.Unlock()
		return bufs
	}
	b, code := in.putTarget(conn, &h, n)
	if code != CodeOK || !b.acquireWrite() {
		return nil
	}
	// The reader dispatches this chunk (servePut) or unplaces it next;
	// either ends the write.
	if !in.peerOf(conn).placing(b, nil) {
		b.releaseWrite()
		return nil
	}
	return b.slice(nil, int64(h.Off), int64(h.Len))
}

// putTarget returns the registered buffer a PUT chunk is for, or the
// code to refuse it with.
func (in *Instance) putTarget(conn *msgr.Conn, h *wire.BulkHeader, n int) (*Bulk, Code) {
	b := in.peerBulk(conn, h.Key)
	switch {
	case b == nil || b.freed.Load():
		return nil, CodeNotFound
	case b.perm&BulkWO == 0:
		return nil, CodeNoPerm
	case uint64(n) != h.Len || !b.inRange(h.Off, h.Len):
		return nil, CodeInvalid
	}
	return b, CodeOK
}

// UnplaceData: a placed chunk will not arrive on this socket. On a
// lossless session that goes on (Options.Messenger) the chunk is
// replayed on the next socket and placed again, so the transfer waits
// for it; otherwise the chunk is lost with its connection.
func (d *dispatcher) UnplaceData(conn *msgr.Conn, mh *msg.Header) {
	if mh.Type != wire.TypeBulk {
		return
	}
	var err error = &Error{Code: CodeUnreachable, Msg: "bulk chunk lost with its connection"}
	if conn != nil && !conn.Policy().Lossy && conn.State() != "closed" {
		err = nil
	}
	d.in.settlePlaced(conn, err)
}

// settlePlaced ends the placement of the chunk conn's reader was reading
// straight into a registered buffer, if any, when it will not be
// dispatched: a PUT chunk's write ends; a GET's transfer fails with err
// (or finishes, if it had ended already); with err nil it goes on,
// waiting for the chunk to come again.
func (in *Instance) settlePlaced(conn *msgr.Conn, err error) {
	b, t := in.peerOf(conn).takePlaced()
	if b != nil {
		b.releaseWrite()
	}
	if t != nil {
		c := t.c
		c.bmu.Lock()
		fin := c.unplaceLocked(t)
		if t.state == xActive && err != nil {
			fin = joinFin(fin, c.failLocked(t, err))
		}
		c.bmu.Unlock()
		c.finishXfers(fin)
	}
}

// unplaceLocked ends one chunk's placement into t's buffer; t finishes
// if it had ended and that was its last chunk being placed.
func (c *Context) unplaceLocked(t *BulkTransfer) []*BulkTransfer {
	t.placing--
	if t.placing == 0 && t.state == xFinishing {
		t.state = xFinished
		delete(c.finishing, t.id)
		return t.finished()
	}
	return nil
}

// handleBulk handles a bulk message on the connection's reader goroutine.
func (in *Instance) handleBulk(m *msg.Message) {
	defer m.Done()
	h, err := wire.DecodeBulk(frontOf(m))
	conn, _ := m.Conn.(*msgr.Conn)
	if err != nil || conn == nil {
		if conn != nil {
			in.settlePlaced(conn, &Error{Code: CodeMalformed, Msg: "bulk chunk with a bad header"})
		}
		in.fault(conn, fmt.Sprintf("bulk message with a bad header: %v", err))
		return
	}
	switch h.Op {
	case wire.BulkGetReq:
		in.serveGet(conn, &h)
	case wire.BulkPut:
		in.servePut(conn, &h, m.Data)
	case wire.BulkData:
		in.dataArrived(conn, &h, m.Data)
	case wire.BulkAck:
		in.ackArrived(conn, &h)
	case wire.BulkRTS:
		in.serveRTS(conn, &h)
	case wire.BulkRelease:
		if b := in.bulks.get(h.Key); b != nil && b.conn == conn {
			b.Free()
		}
	case wire.BulkCancel:
		if t := in.peerOf(conn).rtsOf(rtsKey{h.SrcTag, h.Xfer}); t != nil {
			t.fail(&Error{Code: CodeCanceled, Msg: "the initiator aborted the PUT"})
		}
	default:
		in.handleDirect(conn, &h, m)
	}
}

// reply sends a bulk answer to the context that asked.
func (in *Instance) bulkReply(conn *msgr.Conn, req *wire.BulkHeader, op uint8, rc Code, data [][]byte, prio msg.Priority) {
	h := wire.BulkHeader{Op: op, SrcTag: req.DstTag, DstTag: req.SrcTag, RC: int32(rc), Xfer: req.Xfer,
		Key: req.Key, Off: req.Off, Pos: req.Pos, Len: req.Len}
	if rc != CodeOK {
		data = nil
	}
	m := bulkMsg(&h, data, prio)
	if err := conn.Send(m); err != nil {
		m.Done()
	}
}

// bulkData sends a data chunk. Its CRC is left to the messenger, which
// computes it right after the chunk is written to the socket, while the
// bytes are still in the cache (computing it ahead, as this once did,
// reads the chunk from memory twice), or not at all on a connection
// without data CRCs (Options.NoDataCRC). A chunk sent from the reader
// goroutine that asked for it is written by that goroutine, without a
// hand-off to the connection's writer.
// bulkData sends a piece of a span; false if the connection refused it.
func (in *Instance) bulkData(conn *msgr.Conn, req *wire.BulkHeader, op uint8, data [][]byte) bool {
	h := wire.BulkHeader{Op: op, SrcTag: req.DstTag, DstTag: req.SrcTag, Xfer: req.Xfer,
		Key: req.Key, Off: req.Off, Pos: req.Pos, Len: req.Len}
	m := bulkMsg(&h, data, msg.PrioLow)
	if err := conn.Send(m); err != nil {
		m.Done()
		return false
	}
	return true
}

func (in *Instance) serveGet(conn *msgr.Conn, h *wire.BulkHeader) {
	b := in.peerBulk(conn, h.Key)
	var code Code
	switch {
	case b == nil || b.freed.Load():
		code = CodeNotFound
	case b.perm&BulkRO == 0:
		code = CodeNoPerm
	case !b.inRange(h.Off, h.Len):
		code = CodeInvalid
	}
	if code != CodeOK {
		in.bulkReply(conn, h, wire.BulkData, code, nil, msg.PrioLow)
		return
	}
	// One message per chunk: a span is not written as one block, so the
	// connection can put other messages between its chunks.
	chunk := uint64(in.opts.Bulk.ChunkSize)
	piece := *h
	for done := uint64(0); done < h.Len || h.Len == 0; {
		n := min(chunk, h.Len-done)
		piece.Off, piece.Pos, piece.Len = h.Off+done, h.Pos+done, n
		if !in.bulkData(conn, &piece, wire.BulkData, b.slice(nil, int64(piece.Off), int64(n))) {
			// The connection is gone or its queue is full (its peer does
			// not read): the rest of the span would not follow in order,
			// so none of it goes, and the initiator's transfer ends by
			// its timeout or the connection's failure.
			break
		}
		done += n
		if h.Len == 0 {
			break
		}
	}
}

func (in *Instance) servePut(conn *msgr.Conn, h *wire.BulkHeader, data msg.Buffers) {
	if b, _ := in.peerOf(conn).takePlaced(); b != nil {
		// Read straight into the buffer by PlaceData: it has landed.
		b.releaseWrite()
		in.bulkReply(conn, h, wire.BulkAck, CodeOK, nil, msg.PrioDefault)
		return
	}
	b, code := in.putTarget(conn, h, data.Len())
	if code == CodeOK {
		if b.acquireWrite() {
			b.copyIn(int64(h.Off), data)
			b.releaseWrite()
		} else {
			code = CodeNotFound
		}
	}
	in.bulkReply(conn, h, wire.BulkAck, code, nil, msg.PrioDefault)
}

func (in *Instance) dataArrived(conn *msgr.Conn, h *wire.BulkHeader, data msg.Buffers) {
	// A chunk read straight into its transfer's buffer (PlaceData) is
	// settled first, through the connection rather than the context's
	// table, so that it finishes a transfer whose context has closed.
	_, pt := in.peerOf(conn).takePlaced()
	c := in.Context(h.DstTag)
	if pt != nil && pt.c != c {
		pc := pt.c
		pc.bmu.Lock()
		pfin := pc.unplaceLocked(pt)
		pc.bmu.Unlock()
		pc.finishXfers(pfin)
		pt = nil
	}
	if c == nil {
		return
	}
	sends := map[*BulkTransfer][]*msg.Message{}
	var fin []*BulkTransfer
	var bad string
	c.bmu.Lock()
	t := c.xfers[h.Xfer]
	placed := pt != nil && pt == t
	if pt != nil {
		fin = joinFin(fin, c.unplaceLocked(pt))
	}
	switch {
	case t == nil || t.state != xActive || t.conn != conn || t.d.Op != BulkGet:
		// Late (the transfer ended) or not ours: nothing to do.
	case h.RC != 0:
		fin = joinFin(fin, c.failLocked(t, &Error{Code: Code(h.RC), Remote: true, Msg: "bulk GET refused"}))
	case t.spanFor(h) < 0 || uint64(data.Len()) != h.Len:
		bad = fmt.Sprintf("bulk data [%d,+%d) of %d bytes for a GET that did not ask for it", h.Pos, h.Len, data.Len())
		fin = joinFin(fin, c.failLocked(t, &Error{Code: CodeMalformed, Msg: "bulk data not asked for"}))
	default:
		t.landSpan(t.spanFor(h), int64(h.Len))
		if !placed {
			t.d.Local.copyIn(t.d.LocalOff+int64(h.Pos), data)
		}
		fin = joinFin(fin, c.landedLocked(t, int64(h.Len), sends))
	}
	c.bmu.Unlock()
	c.finishXfers(fin)
	if bad != "" {
		in.fault(conn, bad)
		return
	}
	for t, out := range sends {
		c.sendAll(t, out)
	}
}

func (in *Instance) ackArrived(conn *msgr.Conn, h *wire.BulkHeader) {
	c := in.Context(h.DstTag)
	if c == nil {
		return
	}
	sends := map[*BulkTransfer][]*msg.Message{}
	var fin []*BulkTransfer
	var bad string
	c.bmu.Lock()
	t := c.xfers[h.Xfer]
	switch {
	case t == nil || t.state != xActive || t.conn != conn || t.d.Op != BulkPut:
	case h.RC != 0:
		fin = c.failLocked(t, &Error{Code: Code(h.RC), Remote: true, Msg: "bulk PUT refused"})
	case h.Flags&wire.BulkFlagFinal != 0 && t.proto == Rendezvous:
		fin = c.landedLocked(t, t.d.Len-t.acked, sends)
	case h.Flags&wire.BulkFlagFinal != 0 || t.spanFor(h) < 0:
		// A duplicate ack, or one for bytes never sent: counting it could
		// complete the PUT while its chunks (the caller's buffer) are
		// still queued.
		bad = fmt.Sprintf("bulk ack [%d,+%d) for a PUT that did not send it", h.Pos, h.Len)
		fin = c.failLocked(t, &Error{Code: CodeMalformed, Msg: "bulk ack for nothing sent"})
	default:
		t.landSpan(t.spanFor(h), int64(h.Len))
		fin = c.landedLocked(t, int64(h.Len), sends)
	}
	c.bmu.Unlock()
	c.finishXfers(fin)
	if bad != "" {
		in.fault(conn, bad)
		return
	}
	for t, out := range sends {
		c.sendAll(t, out)
	}
}

// serveRTS pulls a rendezvous PUT into the handle it names and
// acknowledges it when done.
func (in *Instance) serveRTS(conn *msgr.Conn, h *wire.BulkHeader) {
	req := *h
	ack := func(code Code) {
		r := req
		r.Pos, r.Len = 0, req.Len
		hh := wire.BulkHeader{Op: wire.BulkAck, Flags: wire.BulkFlagFinal, SrcTag: r.DstTag, DstTag: r.SrcTag,
			RC: int32(code), Xfer: r.Xfer, Key: r.Key, Off: r.Off, Len: r.Len}
		m := bulkMsg(&hh, nil, msg.PrioDefault)
		if err := conn.Send(m); err != nil {
			m.Done()
		}
	}
	b := in.peerBulk(conn, h.Key)
	switch {
	case b == nil || b.freed.Load():
		ack(CodeNotFound)
		return
	case b.perm&BulkWO == 0:
		ack(CodeNoPerm)
		return
	case !b.inRange(h.Off, h.Len), h.Off2 > math.MaxInt64-h.Len:
		// (Off2 is the initiator's offset, which its own side checks;
		// it must at least be an offset.)
		ack(CodeInvalid)
		return
	}
	c := in.Context(h.DstTag)
	if c == nil {
		ack(CodeBadTarget)
		return
	}
	// Each pull is a transfer, a timer and a table entry: a peer gets a
	// bounded number at once per connection, and CodeBusy beyond it.
	a := in.peerOf(conn)
	if !a.take(chPulls, 1, maxPullsPerConn) {
		ack(CodeBusy)
		return
	}
	endPull := func() { a.add(chPulls, -1) }
	// The pull writes into b for the peer: b.Free waits for it, and stops
	// it (it fails the pull, found in the account's rts).
	if !b.acquireWrite() {
		endPull()
		ack(CodeNotFound)
		return
	}
	d := BulkDesc{
		Op: BulkGet, Remote: BulkHandle{Key: h.Key2, Len: -1, Perm: BulkRO, Tag: h.SrcTag},
		RemoteOff: int64(h.Off2), Local: b, LocalOff: int64(h.Off), Len: int64(h.Len),
	}
	// Chunks of the pull are issued by the protocol rules of a GET.
	key := rtsKey{h.SrcTag, h.Xfer}
	var started atomic.Pointer[BulkTransfer]
	t, err := c.startOn(conn, d, nil, func(err error) {
		if t := started.Load(); t != nil {
			a.dropRTS(key, t)
		}
		b.releaseWrite()
		endPull()
		ack(CodeOf(err))
	})
	if err != nil {
		b.releaseWrite()
		endPull()
		ack(CodeOf(err))
		return
	}
	started.Store(t)
	switch {
	case !a.addRTS(key, t):
		t.fail(&Error{Code: CodeUnreachable, Msg: "connection failed during a bulk transfer"})
	case t.Err() != nil || isDone(t):
		a.dropRTS(key, t)
	case b.freed.Load():
		t.fail(errTargetFreed()) // Free ran before the pull was listed
	}
}

// maxPullsPerConn bounds the rendezvous PUTs a holder pulls at once for
// the peer on one connection. The pulls share the context's windows, so
// more at once would not move bytes faster.
const maxPullsPerConn = 256

// errTargetFreed fails a rendezvous PUT whose target was freed.
func errTargetFreed() error {
	return &Error{Code: CodeNotFound, Msg: "the PUT's target was freed"}
}

// rtsKey names a rendezvous PUT being pulled for a peer, in its account.
type rtsKey struct {
	tag  uint16 // the initiator's context: transfer ids are per context
	xfer uint64
}

func isDone(t *BulkTransfer) bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}
