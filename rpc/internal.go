package rpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/ferrymsg/ferry/internal/bufpool"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/track"
)

// registerInternal registers the internal protocol and the self-test
// service (CaRT's crt_internal_rpc_register).
func (in *Instance) registerInternal() error {
	if err := in.reg.register(Protocol{Name: "internal", Base: BaseInternal, Version: 0, RPCs: []RPC{
		{Name: "ping", Handler: func(r *Incoming) error { return r.Reply(nil) }, Flags: Inline},
		{Name: "proto-query", Handler: in.handleProtoQuery, Flags: Inline},
		{Name: "uri-lookup", Handler: in.handleURILookup, Flags: Inline | QueueFront},
		{Name: "group-update", Handler: in.handleGroupUpdate, Flags: Inline | QueueFront},
	}}, true); err != nil {
		return err
	}
	return in.reg.register(Protocol{Name: "self-test", Base: BaseSelfTest, Version: 0, RPCs: []RPC{
		{Name: "test-msg", Handler: handleSelfTest, Flags: Inline},
	}}, true)
}

// ---- ping ----

// Ping sends the null RPC OpPing to ep and waits for its reply.
func (c *Context) Ping(ctx context.Context, ep Endpoint) error {
	return c.Call(ctx, ep, OpPing, nil, nil)
}

// ---- proto-query ----

type protoQueryIn struct {
	base uint8
	vers []uint8
}

func (q *protoQueryIn) AppendBinary(b []byte) ([]byte, error) {
	if len(q.vers) > 255 {
		return b, fmt.Errorf("%w: %d versions", ErrInvalid, len(q.vers))
	}
	b = append(b, q.base, uint8(len(q.vers)))
	return append(b, q.vers...), nil
}

func (q *protoQueryIn) UnmarshalBinary(b []byte) error {
	if len(b) < 2 || len(b) != 2+int(b[1]) {
		return errShortPayload
	}
	q.base = b[0]
	q.vers = append(q.vers[:0], b[2:]...)
	return nil
}

type byteOut struct{ v uint8 }

func (o *byteOut) AppendBinary(b []byte) ([]byte, error) { return append(b, o.v), nil }

func (o *byteOut) UnmarshalBinary(b []byte) error {
	if len(b) != 1 {
		return errShortPayload
	}
	o.v = b[0]
	return nil
}

var errShortPayload = fmt.Errorf("%w: payload length does not match", ErrMalformed)

// ProtoQuery asks ep for the highest of versions of protocol base it has
// registered (crt_proto_query). It fails with ErrUnregistered if it has
// none of them.
func (c *Context) ProtoQuery(ctx context.Context, ep Endpoint, base uint8, versions []uint8) (uint8, error) {
	var out byteOut
	if err := c.Call(ctx, ep, OpProtoQuery, &protoQueryIn{base: base, vers: versions}, &out); err != nil {
		return 0, err
	}
	return out.v, nil
}

func (in *Instance) handleProtoQuery(r *Incoming) error {
	var q protoQueryIn
	if err := r.Decode(&q); err != nil {
		return err
	}
	v, ok := in.reg.highest(q.base, q.vers)
	if !ok {
		return &Error{Code: CodeUnregistered, Msg: fmt.Sprintf("no version of protocol %#x in %v", q.base, q.vers)}
	}
	return r.Reply(&byteOut{v})
}

// ---- URI lookup ----

type uriLookupIn struct {
	rank uint32
	tag  uint16
}

func (q *uriLookupIn) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint32(b, q.rank)
	return binary.LittleEndian.AppendUint16(b, q.tag), nil
}

func (q *uriLookupIn) UnmarshalBinary(b []byte) error {
	if len(b) != 6 {
		return errShortPayload
	}
	q.rank = binary.LittleEndian.Uint32(b)
	q.tag = binary.LittleEndian.Uint16(b[4:])
	return nil
}

type uriLookupOut struct {
	tag uint16
	uri string
}

// maxURI bounds a URI in a lookup reply.
const maxURI = 1024

func (o *uriLookupOut) AppendBinary(b []byte) ([]byte, error) {
	if len(o.uri) > maxURI {
		return b, fmt.Errorf("%w: URI of %d bytes", ErrTooLarge, len(o.uri))
	}
	b = binary.LittleEndian.AppendUint16(b, o.tag)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(o.uri)))
	return append(b, o.uri...), nil
}

func (o *uriLookupOut) UnmarshalBinary(b []byte) error {
	if len(b) < 4 {
		return errShortPayload
	}
	n := int(binary.LittleEndian.Uint16(b[2:]))
	if n == 0 || n > maxURI || len(b) != 4+n {
		return errShortPayload
	}
	o.tag = binary.LittleEndian.Uint16(b)
	o.uri = string(b[4:])
	return nil
}

func (in *Instance) handleURILookup(r *Incoming) error {
	var q uriLookupIn
	if err := r.Decode(&q); err != nil {
		return err
	}
	if q.rank == in.rank && in.uri != "" {
		if c, closed := in.contextSlot(q.tag); closed {
			return &Error{Code: CodeShutdown, Msg: fmt.Sprintf("rank %d's context with tag %d is closed", q.rank, q.tag)}
		} else if c == nil {
			return &Error{Code: CodeBadTarget, Msg: fmt.Sprintf("rank %d has no context with tag %d", q.rank, q.tag)}
		}
		return r.Reply(&uriLookupOut{tag: q.tag, uri: in.uri})
	}
	if u, err := in.group.lookupURI(q.rank, q.tag); err == nil {
		return r.Reply(&uriLookupOut{tag: q.tag, uri: u})
	}
	// Only the rank's tag 0 is known here: the origin asks it next.
	if u, err := in.group.lookupURI(q.rank, 0); err == nil {
		return r.Reply(&uriLookupOut{tag: 0, uri: u})
	}
	return &Error{Code: CodeNotFound, Msg: fmt.Sprintf("URI of rank %d tag %d not known", q.rank, q.tag)}
}

// maxLookupTries bounds the lookup RPCs for one URI (CaRT retries 8
// times).
const maxLookupTries = 8

// lookup is a URI lookup in progress and the requests waiting for it.
type lookup struct {
	ep      Endpoint
	waiters []uint64
	tries   int
	asked   map[uint32]bool
}

// startLookup looks the URI of ep up (crt_issue_uri_lookup) and transmits
// request id when it is known; concurrent requests to the same endpoint
// share one lookup.
func (c *Context) startLookup(ep Endpoint, id uint64) {
	key := cacheKey(ep.Rank, ep.Tag)
	c.lkMu.Lock()
	if l := c.lookups[key]; l != nil {
		l.waiters = append(l.waiters, id)
		c.lkMu.Unlock()
		return
	}
	l := &lookup{ep: ep, waiters: []uint64{id}, asked: map[uint32]bool{}}
	c.lookups[key] = l
	c.lkMu.Unlock()
	c.nLookups.Add(1)
	c.issueLookup(l, nil)
}

// issueLookup sends the next lookup RPC: to the rank's own tag 0 if its
// URI is known, otherwise to a random member that has not been asked.
func (c *Context) issueLookup(l *lookup, lastErr error) {
	for {
		if l.tries >= maxLookupTries {
			c.endLookup(l, lastErr)
			return
		}
		target, ok := c.lookupTarget(l)
		if !ok {
			if lastErr == nil {
				lastErr = &Error{Code: CodeNotFound, Endpoint: l.ep, Msg: "no group member to ask for the URI"}
			}
			c.endLookup(l, lastErr)
			return
		}
		l.tries++
		out := new(uriLookupOut)
		err := c.sendInternal(target, OpURILookup, &uriLookupIn{rank: l.ep.Rank, tag: l.ep.Tag}, out, 0,
			func(_ *request, err error) { c.lookupDone(l, out, err) })
		if err == nil {
			return
		}
		lastErr = err
	}
}

func (c *Context) lookupTarget(l *lookup) (Endpoint, bool) {
	g := c.in.group
	if _, err := g.lookupURI(l.ep.Rank, 0); err == nil && !l.asked[l.ep.Rank] && l.ep.Tag != 0 {
		l.asked[l.ep.Rank] = true
		return Endpoint{Rank: l.ep.Rank}, true
	}
	var cands []uint32
	g.mu.RLock()
	for rank, m := range g.members {
		if rank != g.self && rank != l.ep.Rank && m.uri(0) != "" && !l.asked[rank] {
			cands = append(cands, rank)
		}
	}
	g.mu.RUnlock()
	if len(cands) == 0 {
		return Endpoint{}, false
	}
	rank := cands[rand.IntN(len(cands))]
	l.asked[rank] = true
	return Endpoint{Rank: rank}, true
}

func (c *Context) lookupDone(l *lookup, out *uriLookupOut, err error) {
	if e, ok := err.(*Error); ok && e.Remote && e.Code == CodeBadTarget {
		c.endLookup(l, err)
		return
	}
	if err == nil {
		if !c.in.group.setURI(l.ep.Rank, out.tag, out.uri) {
			c.endLookup(l, &Error{Code: CodeExcluded, Endpoint: l.ep})
			return
		}
		if out.tag == l.ep.Tag {
			c.endLookup(l, nil)
			return
		}
		// We learned the rank's tag 0: ask it for the tag next.
		delete(l.asked, l.ep.Rank)
	}
	c.issueLookup(l, err)
}

// endLookup transmits the waiting requests, or fails them with err.
func (c *Context) endLookup(l *lookup, err error) {
	c.lkMu.Lock()
	delete(c.lookups, cacheKey(l.ep.Rank, l.ep.Tag))
	waiters := l.waiters
	l.waiters = nil
	c.lkMu.Unlock()
	var fail error
	if err != nil {
		fail = &Error{Code: CodeUnreachable, Endpoint: l.ep, Msg: "URI lookup failed", Err: err}
		if e, ok := err.(*Error); ok && e.Remote && e.Code == CodeBadTarget {
			// The rank itself says it has no such context.
			fail = &Error{Code: CodeBadTarget, Endpoint: l.ep, Remote: true, Msg: e.Msg}
		}
	}
	for _, id := range waiters {
		if fail != nil {
			c.finishID(id, track.Failed, fail)
			continue
		}
		c.mu.Lock()
		e := c.tr.Lookup(id)
		if e == nil || e.State() != track.Sent {
			c.mu.Unlock()
			continue
		}
		r := e.V
		r.refs.Add(1)
		c.mu.Unlock()
		c.transmit(r)
	}
}

// ---- self-test ----

// SelfTestInput is the input of OpSelfTest: the size of the reply the
// target is to send, and a payload that travels in the data segment
// (CaRT's self-test "test msg" with iov payloads). With CaRT's bulk
// sizes, SendBulk names the origin's read-only buffer that the target
// pulls (GET) instead of a payload, and ReplyBulk the origin's
// write-only buffer that the target pushes (PUT) the reply into instead
// of replying with it.
type SelfTestInput struct {
	ReplySize uint32
	Payload   []byte
	SendBulk  *BulkHandle
	ReplyBulk *BulkHandle
}

// Self-test input flags. Wire constants; append only.
const (
	stSendBulk  = 1 << 0
	stReplyBulk = 1 << 1
)

// AppendBinary appends the reply size and, if bulk buffers are named,
// a flags byte and their handles.
func (s *SelfTestInput) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint32(b, s.ReplySize)
	if s.SendBulk == nil && s.ReplyBulk == nil {
		return b, nil
	}
	var flags byte
	if s.SendBulk != nil {
		flags |= stSendBulk
	}
	if s.ReplyBulk != nil {
		flags |= stReplyBulk
	}
	b = append(b, flags)
	var err error
	for _, h := range []*BulkHandle{s.SendBulk, s.ReplyBulk} {
		if h != nil {
			if b, err = h.AppendBinary(b); err != nil {
				return b, err
			}
		}
	}
	return b, nil
}

// AppendData appends the payload.
func (s *SelfTestInput) AppendData(bufs [][]byte) [][]byte {
	if len(s.Payload) == 0 {
		return bufs
	}
	return append(bufs, s.Payload)
}

// UnmarshalBinary reads the reply size and the bulk handles.
func (s *SelfTestInput) UnmarshalBinary(b []byte) error {
	if len(b) < 4 {
		return errShortPayload
	}
	s.ReplySize = binary.LittleEndian.Uint32(b)
	s.SendBulk, s.ReplyBulk = nil, nil
	b = b[4:]
	if len(b) == 0 {
		return nil
	}
	flags := b[0]
	b = b[1:]
	var err error
	if flags&stSendBulk != 0 {
		s.SendBulk = new(BulkHandle)
		if b, err = s.SendBulk.Decode(b); err != nil {
			return err
		}
	}
	if flags&stReplyBulk != 0 {
		s.ReplyBulk = new(BulkHandle)
		if b, err = s.ReplyBulk.Decode(b); err != nil {
			return err
		}
	}
	if len(b) != 0 || flags&^(stSendBulk|stReplyBulk) != 0 {
		return errShortPayload
	}
	return nil
}

// ReceiveData takes the payload (not copied).
func (s *SelfTestInput) ReceiveData(data [][]byte) error {
	s.Payload = nil
	if len(data) > 0 {
		return (*Bytes)(&s.Payload).ReceiveData(data)
	}
	return nil
}

// zeros is a shared read-only buffer the self-test replies are cut from.
var zeros struct {
	mu sync.Mutex
	b  []byte
}

func zeroBytes(n int) []byte {
	zeros.mu.Lock()
	defer zeros.mu.Unlock()
	if len(zeros.b) < n {
		zeros.b = make([]byte, n)
	}
	return zeros.b[:n]
}

func handleSelfTest(r *Incoming) error {
	// Only the reply size is read: the payload is not taken, so its
	// buffer goes back to the messenger's pool once the reply is sent.
	var in SelfTestInput
	if err := in.UnmarshalBinary(r.body); err != nil {
		return &Error{Code: CodeMalformed, Opcode: r.Opcode(), Msg: "decoding input: " + err.Error()}
	}
	if in.ReplySize > MaxPayload {
		return &Error{Code: CodeTooLarge, Msg: fmt.Sprintf("reply of %d bytes asked", in.ReplySize)}
	}
	if in.SendBulk != nil || in.ReplyBulk != nil {
		return selfTestBulk(r, &in)
	}
	if in.ReplySize == 0 {
		return r.Reply(nil)
	}
	out := Bytes(zeroBytes(int(in.ReplySize)))
	return r.Reply(&out)
}

// selfTestBulk serves a bulk self-test request as CaRT's does: GET the
// send buffer, PUT the reply into the reply buffer, then reply empty.
// The transfers complete on the connection's reader goroutine (the
// handler runs inline and must not wait for them).
func selfTestBulk(r *Incoming, in *SelfTestInput) error {
	c, conn := r.c, r.conn.(*msgr.Conn)
	reply := func(err error) {
		if err != nil {
			r.Fail(err)
			return
		}
		r.Reply(nil)
	}
	put := func() {
		if in.ReplyBulk == nil {
			reply(nil)
			return
		}
		n := int64(in.ReplySize)
		src := newBulk(c.in, [][]byte{zeroBytes(int(n))}, BulkRO)
		d := BulkDesc{Op: BulkPut, Remote: *in.ReplyBulk, Local: src, Len: n}
		if err := c.descErr(&d); err != nil {
			reply(err)
			return
		}
		if _, err := c.startOn(conn, d, nil, reply); err != nil {
			reply(err)
		}
	}
	if in.SendBulk == nil {
		put()
		return nil
	}
	n := in.SendBulk.Len
	if n < 0 || n > MaxPayload {
		return &Error{Code: CodeTooLarge, Msg: fmt.Sprintf("bulk send of %d bytes", n)}
	}
	// The buffer counts against the context's overflow budget, like an
	// overflowing input's: the test waits for its turn, and peers cannot
	// make the target allocate beyond the budget.
	a := r.acct
	c.admitOverflow(r, n, func() {
		done := func() { c.overflowDone(a, n) }
		// The data is only measured, not kept: it lands in a pooled
		// buffer that goes back once the GET is over.
		buf, pooled := bufpool.Get(int(n))
		dst := newBulk(c.in, [][]byte{buf}, BulkWO)
		d := BulkDesc{Op: BulkGet, Remote: *in.SendBulk, Local: dst, Len: n, Timeout: c.Timeout()}
		if rem, ok := r.Remaining(); ok && rem > 0 {
			d.Timeout = min(rem, d.Timeout)
		}
		if err := c.descErr(&d); err != nil {
			bufpool.Put(pooled)
			done()
			reply(err)
			return
		}
		if _, err := c.startOn(conn, d, nil, func(err error) {
			bufpool.Put(pooled)
			done()
			if err != nil {
				reply(err)
				return
			}
			put()
		}); err != nil {
			bufpool.Put(pooled)
			done()
			reply(err)
		}
	})
	return nil
}
