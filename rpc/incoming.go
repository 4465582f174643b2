package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymsg/ferry/internal/bufpool"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// Incoming is a request at its target, handed to the RPC's Handler. It
// is valid until it is answered (Reply or Fail), or, for a OneWay RPC,
// until the handler returns; it is recycled afterwards and must not be
// used. Reply and Fail may be called from any goroutine; the accessors
// are safe to call concurrently with each other before the answer.
type Incoming struct {
	in   *Instance
	c    *Context
	def  *rpcDef
	m    *msg.Message // the request, reused as the reply
	conn msg.Connection
	hdr  wire.Header
	tid  uint64
	prio msg.Priority
	body []byte
	data msg.Buffers
	rel  func(*msg.Message) // the request's own Release (pooled body)
	// taken is set once the handler has been given the data segment;
	// until then the request's buffers can go back to the messenger's
	// pool after the reply is sent.
	taken bool

	// state is gen<<1 | answered: the generation tells a recycled
	// Incoming from the one a handler was given.
	state atomic.Uint64

	scratch [][]byte // data buffers of the reply being built

	acct     *peer // the account of the peer that sent it (nil: not a messenger connection)
	ovfBytes int64 // overflow budget held for a pulled input
	held     int64 // bytes counted in the context's IncomingLimit and the peer's account
	ovfKey   uint64
	ovfLen   int64
	ovfBuf   *[]byte // the pulled input's pooled buffer (bufpool), until given back

	ctxp atomic.Pointer[incomingCtx] // made by Ctx, cancelled by release
}

// putOverflow gives the pulled input's buffer back to the pool unless the
// handler was given it.
func (r *Incoming) putOverflow() {
	if r.ovfBuf != nil {
		if !r.taken {
			bufpool.Put(r.ovfBuf)
		}
		r.ovfBuf = nil
	}
}

var incomingPool = sync.Pool{New: func() any { return new(Incoming) }}

func getIncoming() *Incoming { return incomingPool.Get().(*Incoming) }

func (r *Incoming) init(in *Instance, c *Context, def *rpcDef, m *msg.Message, h *wire.Header, body []byte) {
	gen := r.state.Load()>>1 + 1
	r.in, r.c, r.def, r.m, r.conn = in, c, def, m, m.Conn
	r.hdr, r.tid, r.prio = *h, m.Header.Tid, m.Header.Priority
	r.body, r.data = body, m.Data
	r.rel, r.taken = m.Release, false
	m.Release = nil
	r.state.Store(gen << 1)
}

// release recycles r. Its state keeps the generation, marked answered.
// A request whose data segment nobody took gives its buffers back.
func (r *Incoming) release() {
	r.endCtx()
	r.putOverflow()
	if r.ovfBytes > 0 {
		r.c.overflowDone(r.acct, r.ovfBytes)
		r.ovfBytes = 0
	}
	if r.held > 0 {
		r.c.inHeld.Add(-r.held)
		r.acct.add(chUnanswered, -r.held)
		r.held = 0
	}
	r.acct = nil
	if !r.taken && r.rel != nil && r.m != nil {
		r.m.Release = r.rel
		r.m.Done()
	}
	r.in, r.c, r.def, r.m, r.conn = nil, nil, nil, nil, nil
	r.body, r.data, r.rel = nil, nil, nil
	clear(r.scratch)
	r.scratch = r.scratch[:0]
	incomingPool.Put(r)
}

// claim marks r answered if it is still generation gen and unanswered.
func (r *Incoming) claim(gen uint64) bool {
	return r.state.CompareAndSwap(gen<<1, gen<<1|1)
}

// claimAny marks r answered if it is unanswered.
func (r *Incoming) claimAny() bool {
	s := r.state.Load()
	return s&1 == 0 && r.state.CompareAndSwap(s, s|1)
}

// Opcode returns the RPC's opcode.
func (r *Incoming) Opcode() Opcode { return Opcode(r.hdr.Opcode) }

// Source returns the origin's rank (RankNone for a client) and context
// tag.
func (r *Incoming) Source() Endpoint { return Endpoint{Rank: r.hdr.SrcRank, Tag: r.hdr.SrcTag} }

// Target returns the context the request arrived on.
func (r *Incoming) Target() *Context { return r.c }

// OneWay reports whether the origin expects no reply.
func (r *Incoming) OneWay() bool { return r.hdr.Flags&wire.FlagOneWay != 0 }

// GroupVersion returns the origin's primary group version.
func (r *Incoming) GroupVersion() uint32 { return r.hdr.GroupVersion }

// Deadline returns the origin's deadline for the request (its clock),
// and false if the request has none (NoTimeout).
func (r *Incoming) Deadline() (time.Time, bool) {
	if r.hdr.Flags&wire.FlagDeadline == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, r.hdr.Deadline), true
}

// Remaining returns the time left before the origin gives up, by this
// instance's clock (negative once past), and false if there is no
// deadline.
func (r *Incoming) Remaining() (time.Duration, bool) {
	d, ok := r.Deadline()
	if !ok {
		return 0, false
	}
	return d.Sub(r.in.clock.Now()), true
}

// Context returns a context.Context that ends at the request's deadline
// (never, without one) or when parent ends. Call its cancel function when
// done.
func (r *Incoming) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if d, ok := r.Deadline(); ok {
		return context.WithDeadline(parent, d)
	}
	return context.WithCancel(parent)
}

// Data returns the request's data segment as it arrived (not copied);
// the buffers belong to the handler afterwards.
func (r *Incoming) Data() msg.Buffers {
	if len(r.data) > 0 {
		r.taken = true
	}
	return r.data
}

// Decode decodes the input into v (UnmarshalBinary with the encoded part,
// ReceiveData with the data segment). A failure, including a panic in
// v's methods, is an *Error with CodeMalformed; returning it from the
// handler answers the origin with that code.
func (r *Incoming) Decode(v Output) error {
	if _, ok := v.(DataReceiver); ok && len(r.data) > 0 {
		// A DataPeeker keeps none of it: the buffers go back once the
		// request is answered, as a reply's do once it is decoded.
		if _, peeks := v.(DataPeeker); !peeks {
			r.taken = true
		}
	}
	if err := decodeOutput(v, r.body, r.data); err != nil {
		return &Error{Code: CodeMalformed, Opcode: r.Opcode(), Endpoint: r.Source(), Msg: "decoding input", Err: err}
	}
	return nil
}

// Reply answers the request with out (nil: an empty output). It fails
// with ErrAlreadyReplied if the request was already answered. For a
// OneWay RPC it sends nothing. An output that cannot be encoded or is
// too large is answered as an error instead, and that error returned. If
// the connection refuses the reply (it failed, or its out queue is full:
// the origin reads too slowly), Reply returns an error with
// CodeUnreachable; the origin's request then ends by its timeout.
func (r *Incoming) Reply(out Input) error {
	if !r.claimAny() {
		return ErrAlreadyReplied
	}
	return r.reply(out)
}

// Fail answers the request with err: its code (CodeOf) and its text. It
// fails with ErrAlreadyReplied if the request was already answered.
func (r *Incoming) Fail(err error) error {
	if !r.claimAny() {
		return ErrAlreadyReplied
	}
	r.fail(err)
	return nil
}

// fail answers a claimed request with err.
func (r *Incoming) fail(err error) {
	code := CodeOf(err)
	if code == CodeOK {
		code = CodeHandler
	}
	r.sendError(code, errText(err, code))
}

// failCode answers an unclaimed request with code (used before any
// handler saw it).
func (r *Incoming) failCode(code Code, text string) {
	if r.claimAny() {
		r.sendError(code, text)
	}
}

func (r *Incoming) replyHeader(rc Code) wire.Header {
	h := wire.Header{
		Opcode: r.hdr.Opcode, SrcRank: r.in.rank, DstRank: r.hdr.SrcRank,
		SrcTag: r.hdr.DstTag, DstTag: r.hdr.SrcTag, RC: int32(rc),
		GroupVersion: r.in.group.Version(),
	}
	return h
}

// reply sends out on a claimed request and recycles r.
func (r *Incoming) reply(out Input) error {
	if r.OneWay() {
		r.release()
		return nil
	}
	h := r.replyHeader(CodeOK)
	bp := getBuf()
	front := h.Append((*bp)[:0])
	front, data, err := encodeInput(out, front, r.scratch[:0])
	r.scratch = data
	if err == nil && len(front)-wire.HeaderLen+msg.Buffers(data).Len() > MaxPayload {
		err = fmt.Errorf("%w: output of %d bytes", ErrTooLarge, len(front)-wire.HeaderLen+msg.Buffers(data).Len())
	}
	if err != nil {
		*bp = front
		putBuf(bp)
		e := &Error{Code: CodeOf(err), Opcode: r.Opcode(), Endpoint: r.Source(), Msg: "encoding output", Err: err}
		if e.Code == CodeHandler {
			e.Code = CodeMalformed
		}
		r.sendError(e.Code, e.detail())
		return e
	}
	var ovf *Bulk
	if len(data) > 0 {
		h.Flags |= wire.FlagHasData
		if n := msg.Buffers(data).Len(); n > r.in.opts.Bulk.EagerLimit {
			if a := r.acct; a != nil {
				if !a.takeBeside(chOutputs, int64(n), int64(r.in.opts.IncomingLimit), r.held) {
					*bp = front
					putBuf(bp)
					e := &Error{Code: CodeBusy, Opcode: r.Opcode(), Endpoint: r.Source(),
						Msg: "the origin has IncomingLimit bytes of outputs it has not pulled, or the target owes its peers its PeerBudget (or this origin its share)"}
					r.sendError(e.Code, e.Msg)
					return e
				}
				// The origin pulls the output and then releases the
				// handle (or its connection fails).
				ovf = r.in.overflowBulk(data, a, int64(n))
				h.Flags |= wire.FlagBulkOut
				front = insertOverflow(front, ovf.key, uint64(n))
				data = data[:0]
			}
		}
		h.Put(front)
	}
	op, src := r.Opcode(), r.Source()
	if err := r.send(front, bp, data); err != nil {
		if ovf != nil {
			ovf.Free() // nobody will pull or release it
		}
		return &Error{Code: CodeUnreachable, Opcode: op, Endpoint: src, Msg: "the reply was not sent", Err: err}
	}
	return nil
}

// sendError sends an error reply (rc and text) on a claimed request and
// recycles r.
func (r *Incoming) sendError(code Code, text string) {
	if r.OneWay() {
		r.release()
		return
	}
	text = trimPrefixes(text, code)
	if len(text) > maxErrText {
		text = text[:maxErrText]
	}
	h := r.replyHeader(code)
	bp := getBuf()
	front := append(h.Append((*bp)[:0]), text...)
	if c := r.c; c != nil {
		c.nErrors.Add(1)
	}
	_ = r.send(front, bp, nil) // recycles r; the origin's timeout ends a lost error reply
}

// send turns the request message into the reply and sends it. The reply
// front is copied into the request's front buffer when it fits (the
// handler is done with its input by now, and decoders copy what they
// keep), so a small reply costs no allocation; otherwise the pooled
// buffer itself becomes the reply's front. It returns the connection's
// error if the reply was not sent.
func (r *Incoming) send(front []byte, bp *[]byte, data [][]byte) error {
	m, conn, c := r.m, r.conn, r.c
	r.putOverflow() // the reply does not carry it unless the handler took it
	var rel func(*msg.Message)
	if !r.taken {
		rel = r.rel // nobody keeps the request's buffers
	}
	var reqFront []byte
	if len(m.Front) == 1 {
		reqFront = m.Front[0]
	}
	if len(front) <= len(reqFront) {
		n := copy(reqFront, front)
		front = reqFront[:n:n]
		*bp = (*bp)[:0]
		putBuf(bp)
	} else if cap(front) > 4*len(front) && cap(front) > 4096 {
		front = append([]byte(nil), front...) // do not pin a big buffer
		putBuf(bp)
	}
	*m = msg.Message{Header: msg.Header{Type: wire.TypeReply, Tid: r.tid, Priority: r.prio}, Release: rel}
	setSegments(m, front, data, true)
	r.rel = nil // m carries it now
	r.release()
	if conn == nil {
		m.Done()
		return errNoConn
	}
	if err := conn.Send(m); err != nil {
		m.Done()
		if c != nil {
			c.in.log.Debug("reply not sent", "tag", c.tag, "err", err)
		}
		return err
	}
	if c != nil {
		c.nReplied.Add(1)
	}
	return nil
}

// errNoConn: a request that came without a connection cannot be answered.
var errNoConn = errors.New("rpc: no connection to answer on")

// bufPool holds front buffers for replies.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > 64<<10 {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}
