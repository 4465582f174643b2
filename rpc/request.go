package rpc

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/track"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// Request describes an RPC to send with Context.Send (crt_req_create's
// arguments and input). The Context copies what it needs: the Request
// may be reused as soon as Send returns, but In's buffers (and Out) must
// stay untouched until the request completes.
type Request struct {
	// Endpoint is the target rank and tag.
	Endpoint Endpoint
	// Opcode is the RPC.
	Opcode Opcode
	// In is the input (nil: none).
	In Input
	// Out receives the output before the callback runs (nil: ignore it).
	Out Output
	// Timeout overrides the context's timeout (crt_req_set_timeout); 0
	// keeps it. It is clamped to MaxTimeout.
	Timeout time.Duration
	// Arg is handed back in the Completion.
	Arg any
}

// Completion is what a Send callback gets (crt_cb_info).
type Completion struct {
	// Handle is the request's handle (its id is no longer tracked).
	Handle Handle
	// Request is the request as sent; its Out holds the output if Err is
	// nil.
	Request Request
	// Err is nil on success, otherwise an *Error (timed out, canceled,
	// unreachable, excluded, shut down, or the target's code).
	Err error
}

// Callback is called once per request sent with Send, by the context's
// progress (Progress, or its own goroutine with Auto).
type Callback func(Completion)

// Handle refers to a request in flight. It stays safe to use after the
// request completed: it then refers to nothing.
type Handle struct {
	c  *Context
	id uint64
}

// ID returns the request's id (its message tid).
func (h Handle) ID() uint64 { return h.id }

// Abort cancels the request (crt_req_abort): if it is still queued or in
// flight it completes with ErrCanceled (a reply that comes later is
// ignored) and Abort returns true; if it already completed, Abort returns
// false.
func (h Handle) Abort() bool {
	if h.c == nil {
		return false
	}
	return h.c.finishID(h.id, track.Canceled, nil)
}

// completion modes of a request.
const (
	modeCall     uint8 = iota // Call waits on done
	modeCallback              // the callback runs in progress
	modeInline                // an internal callback runs where the request completes
)

// request is the origin's state of one RPC; pooled (the seed's reuse of
// HG handles).
type request struct {
	entry track.Entry[*request]
	c     *Context

	// refs counts the owners: the completion's consumer (Call, the
	// callback runner) and each goroutine transmitting it. The last one
	// recycles the request.
	refs atomic.Int32

	mode      uint8
	toRemoved bool // may reach a rank removed from the group (Context.call)
	flags     Flags
	oneWay    bool
	req       Request
	cb        Callback
	icb       func(r *request, err error) // modeInline
	done      chan struct{}               // modeCall; capacity 1

	m       *msg.Message       // the request message, reused
	buf     []byte             // the message's front, kept for its capacity
	scratch [][]byte           // data buffers while encoding
	relFn   func(*msg.Message) // m.Release while a connection holds m

	deadline int64                     // tracker deadline (monotonic ns), 0: none
	conn     atomic.Pointer[msgr.Conn] // where it was transmitted
	awaiting atomic.Bool               // modeCall: its caller waits in conn.Await

	// Completion, written before the consumer is told.
	reason    track.Reason
	failErr   error
	reply     *msg.Message
	rc        int32
	replyBody []byte

	ovf *Bulk // the input's overflow handle, freed at completion

	met   *opMetrics // the opcode's metrics
	start int64      // when it was prepared (monotonic ns since the instance's epoch)

	// The pull of an overflowing output (guarded by the context's mu):
	// outPulling from its reply on, outPull once started. The pull ends
	// with the request (complete aborts it).
	outPulling bool
	outPull    *BulkTransfer
}

var requestPool sync.Pool

func newRequest() *request {
	r := &request{done: make(chan struct{}, 1), m: new(msg.Message)}
	r.entry.V = r
	r.relFn = func(*msg.Message) { r.unref() }
	return r
}

func getRequest(c *Context) *request {
	r, _ := requestPool.Get().(*request)
	if r == nil {
		r = newRequest()
	}
	r.c = c
	r.refs.Store(1)
	return r
}

// unref drops one owner; the last one recycles r.
func (r *request) unref() {
	if r.refs.Add(-1) != 0 {
		return
	}
	if r.ovf != nil {
		r.ovf.Free() // never completed (submission failed)
		r.ovf = nil
	}
	// Every connection that was handed the message has released it
	// (msgr calls Release once it has written a lossy message or the peer
	// acknowledged a lossless one), so it can be reused.
	*r.m = msg.Message{}
	clear(r.scratch)
	r.scratch = r.scratch[:0]
	r.c, r.cb, r.icb, r.req = nil, nil, nil, Request{}
	r.failErr, r.reply, r.replyBody = nil, nil, nil
	r.conn.Store(nil)
	r.awaiting.Store(false)
	r.rc = 0
	r.toRemoved = false
	requestPool.Put(r)
}

// prepare builds r's message: the RPC header and the encoded input.
func (c *Context) prepare(r *request, ep Endpoint, op Opcode, in Input, timeout time.Duration) error {
	inst := c.in
	var flags Flags
	r.met = inst.met.other
	if def := inst.reg.lookup(op); def != nil {
		flags = def.flags
		if def.met != nil {
			r.met = def.met
		}
	}
	now := inst.clock.Now() // one reading for the start and the deadline
	r.start = int64(now.Sub(inst.epoch))
	r.flags = flags
	r.oneWay = flags&OneWay != 0
	h := wire.Header{
		Opcode: uint32(op), SrcRank: inst.rank, DstRank: ep.Rank,
		SrcTag: c.tag, DstTag: ep.Tag, GroupVersion: inst.group.Version(),
	}
	if r.oneWay {
		h.Flags |= wire.FlagOneWay
	}
	r.deadline = 0
	if flags&NoTimeout == 0 {
		if timeout <= 0 {
			timeout = c.Timeout()
		}
		timeout = min(timeout, MaxTimeout)
		h.Flags |= wire.FlagDeadline
		h.Deadline = now.Add(timeout).UnixNano()
		r.deadline = int64(now.Sub(inst.epoch)) + 1 + int64(timeout)
	}
	front := h.Append(r.buf[:0])
	front, data, err := encodeInput(in, front, r.scratch[:0])
	r.scratch = data
	r.buf = front
	if err != nil {
		return &Error{Code: CodeMalformed, Opcode: op, Endpoint: ep, Msg: "encoding input", Err: err}
	}
	if n := len(front) - wire.HeaderLen + msg.Buffers(data).Len(); n > MaxPayload {
		return &Error{Code: CodeTooLarge, Opcode: op, Endpoint: ep, Msg: fmt.Sprintf("input of %d bytes", n)}
	}
	if len(data) > 0 {
		h.Flags |= wire.FlagHasData
		if n := msg.Buffers(data).Len(); n > inst.opts.Bulk.EagerLimit && !r.oneWay {
			// Mercury's overflow: the data goes as a read-only handle
			// that the target pulls; it is freed when the request
			// completes (the target pulls before it replies).
			r.ovf = inst.overflowBulk(data, nil, 0)
			h.Flags |= wire.FlagBulkIn
			front = insertOverflow(front, r.ovf.key, uint64(n))
			r.buf = front
			data = data[:0]
		}
		h.Put(front)
	}
	m := r.m
	m.Header = msg.Header{Type: wire.TypeRequest, Priority: msg.PrioDefault}
	if flags&QueueFront != 0 {
		m.Header.Priority = msg.PrioHigh
	}
	setSegments(m, front, data, true)
	return nil
}

// result turns r's completion into the error the caller sees, decoding
// the output into out on success.
func (r *request) result(out Output) error {
	ep, op := r.req.Endpoint, r.req.Opcode
	switch r.reason {
	case track.OK:
		if r.oneWay {
			return nil
		}
		if r.rc != 0 {
			return &Error{Code: Code(r.rc), Opcode: op, Endpoint: ep, Remote: true, Msg: string(r.replyBody)}
		}
		var data msg.Buffers
		if r.reply != nil {
			data = r.reply.Data
		}
		err := decodeOutput(out, r.replyBody, data)
		_, took := out.(DataReceiver)
		if _, peeked := out.(DataPeeker); peeked {
			took = false
		}
		if r.reply != nil && (!took || len(data) == 0) {
			// Nothing of the reply is kept: its buffers may go back to
			// the messenger's pool.
			r.reply.Done()
		}
		r.reply, r.replyBody = nil, nil
		if err != nil {
			return &Error{Code: CodeMalformed, Opcode: op, Endpoint: ep, Msg: "decoding output", Err: err}
		}
		return nil
	case track.TimedOut:
		return &Error{Code: CodeTimedOut, Opcode: op, Endpoint: ep, Err: r.failErr}
	case track.Canceled:
		return &Error{Code: CodeCanceled, Opcode: op, Endpoint: ep, Err: r.failErr}
	case track.Excluded:
		return &Error{Code: CodeExcluded, Opcode: op, Endpoint: ep}
	case track.Shutdown:
		return &Error{Code: CodeShutdown, Opcode: op, Endpoint: ep}
	default:
		if e, ok := r.failErr.(*Error); ok {
			// The cause may be shared by several requests (a failed
			// connection's): each gets its own copy naming its opcode
			// and endpoint.
			c := *e
			c.Opcode, c.Endpoint = op, ep
			return &c
		}
		return &Error{Code: CodeUnreachable, Opcode: op, Endpoint: ep, Err: r.failErr}
	}
}
