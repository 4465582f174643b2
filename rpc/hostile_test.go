package rpc_test

// Peers that break the protocol on purpose: what they send is refused,
// their connection is closed with the reason, and other peers' requests,
// transfers and buffers are not affected.

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// Server V (rank 0) calls server S (rank 1), which holds the request. A
// third party E, merely connected to V, sends V a reply with the id of
// V's request. Replies are taken only from the connection the request
// went on: E's connection is closed, and V's request completes with S's
// answer.
func TestHostileReplyFromOtherConnection(t *testing.T) {
	n := newNet()
	hS := newHolder()
	S := n.server(t, 1, 1, rpc.Options{}, testProto(hS))
	V := n.server(t, 0, 1, rpc.Options{}, testProto(nil))
	if err := V.Group().Add(1, S.URI()); err != nil {
		t.Fatal(err)
	}
	c := V.Context(0)
	done := make(chan rpc.Completion, 1)
	out := new(pair)
	hd, err := c.Send(rpc.Request{Endpoint: rpc.Endpoint{Rank: 1}, Opcode: op(opHold), In: &pair{1, 2}, Out: out, Timeout: 10 * time.Second},
		func(cp rpc.Completion) { done <- cp })
	if err != nil {
		t.Fatal(err)
	}
	held := recv(t, hS.held, "the request at S") // in flight, unanswered
	E := newRawPeer(t, n, "")
	conn, err := E.m.Connect(V.URI())
	if err != nil {
		t.Fatal(err)
	}
	body := (&pair{666, 666}).mustAppend()
	rh := wire.Header{Opcode: uint32(op(opHold)), SrcRank: 1, DstTag: 0}
	if err := conn.Send(rpcMsg(wire.TypeReply, hd.ID(), rh, body, nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection that sent a forged reply is still up")
	}
	if st := c.Stats(); st.Replied != 0 || st.InFlight != 1 {
		cp := recv(t, done, "the completion")
		t.Fatalf("V's request to rank 1 completed by a reply from another connection: err=%v out=%+v (stats %+v)", cp.Err, *out, st)
	}
	if err := held.Reply(&pair{3, 4}); err != nil {
		t.Fatal(err)
	}
	if cp := recv(t, done, "the completion"); cp.Err != nil || *out != (pair{3, 4}) {
		t.Fatalf("V's request: %v %+v, want S's answer", cp.Err, *out)
	}
}

func (p *pair) mustAppend() []byte {
	b, _ := p.AppendBinary(nil)
	return b
}

// overflowReply sends the server an echo request with data from raw peer
// p and returns the connection and the key of the reply's overflowing
// output.
func overflowReply(t *testing.T, p *rawPeer, srv *rpc.Instance, data []byte) (*msgr.Conn, uint64) {
	t.Helper()
	conn, err := p.m.Connect(srv.URI())
	if err != nil {
		t.Fatal(err)
	}
	h := wire.Header{Opcode: uint32(opOvfEcho), Flags: wire.FlagHasData}
	if err := conn.Send(rpcMsg(wire.TypeRequest, 1, h, nil, data)); err != nil {
		t.Fatal(err)
	}
	m := p.next(t, wire.TypeReply, "the overflowing reply")
	rh, body, err := wire.Decode(rawFront(m))
	if err != nil || rh.Flags&wire.FlagBulkOut == 0 || rh.RC != 0 {
		t.Fatalf("reply %+v %v", rh, err)
	}
	key, ln, _, err := wire.DecodeOverflow(body)
	if err != nil || int(ln) != len(data) {
		t.Fatalf("descriptor %d %v", ln, err)
	}
	return conn, key
}

// An overflowing output is for the peer it answers: another peer that
// has its key (leaked, or guessed) cannot read it. Keys are not
// consecutive, so one peer's key does not give away the next.
func TestHostileGetOtherConnOverflowHandle(t *testing.T) {
	n := newNet()
	srv := n.server(t, 0, 1, rpc.Options{}, echoProto())
	const size = 20 << 10 // above the 16 KiB eager limit: the output overflows
	secret := bytes.Repeat([]byte("A's secret "), size/11+1)[:size]
	A := newRawPeer(t, n, "")
	_, keyA := overflowReply(t, A, srv, secret)
	B := newRawPeer(t, n, "")
	connB, keyB := overflowReply(t, B, srv, make([]byte, size))
	if d := keyB - keyA; d < 1<<16 || -d < 1<<16 {
		t.Errorf("keys %#x and %#x are %d apart: guessable", keyA, keyB, int64(d))
	}
	if err := connB.Send(rawBulk(wire.BulkHeader{Op: wire.BulkGetReq, Xfer: 9, Key: keyA, Len: size}, nil)); err != nil {
		t.Fatal(err)
	}
	m := B.next(t, wire.TypeBulk, "the answer to B's GET")
	bh, err := wire.DecodeBulk(rawFront(m))
	if err != nil {
		t.Fatal(err)
	}
	if rpc.Code(bh.RC) != rpc.CodeNotFound || m.Data.Len() != 0 {
		t.Fatalf("B's GET of A's output: code %v with %d bytes, want %v and none", rpc.Code(bh.RC), m.Data.Len(), rpc.CodeNotFound)
	}
}

// A peer that sends a bulk message whose header does not decode has its
// connection closed with the reason; the instance goes on serving
// others.
func TestHostileMalformedBulkClosesConn(t *testing.T) {
	n := newNet()
	srv := n.server(t, 0, 1, rpc.Options{}, echoProto())
	_, conn := connectRaw(t, n, srv)
	bad := rawBulk(wire.BulkHeader{Op: wire.BulkGetReq}, nil)
	bad.Front[0][1] = 0xEE // no such bulk operation
	if err := conn.Send(bad); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection that sent a malformed bulk header is still up")
	}
	if got := srv.MalformedMessages(); got != 1 {
		t.Fatalf("%d malformed messages counted, want 1", got)
	}
	good := newRawPeer(t, n, "")
	overflowReply(t, good, srv, make([]byte, 20<<10))
}

// A hostile client sends one request whose input "overflows" (a handle
// it never serves) with a deadline 100 years away. The target's pull of
// that input ends by the target's own timeout (200 ms here), not the
// peer's deadline, so the overflow budget it holds comes back and
// another client's overflowing request is served.
func TestHostileOverflowDeadlineHoldsBudget(t *testing.T) {
	n := newNet()
	const limit = 64 << 10
	srv := n.server(t, 0, 1, rpc.Options{Timeout: 200 * time.Millisecond, Bulk: rpc.BulkOptions{OverflowLimit: limit}}, echoProto())

	evil, conn := connectRaw(t, n, srv)
	h := wire.Header{
		Opcode: uint32(opOvfEcho), Flags: wire.FlagBulkIn | wire.FlagDeadline | wire.FlagHasData,
		Deadline: time.Now().Add(100 * 365 * 24 * time.Hour).UnixNano(),
	}
	if err := conn.Send(rpcMsg(wire.TypeRequest, 1, h, ovfDesc(0xdead, limit), nil)); err != nil {
		t.Fatal(err)
	}
	// The server pulls the (fake) input: it asks us for it. We never answer.
	g := evil.next(t, wire.TypeBulk, "the server's GET of the fake input")
	if bh, err := wire.DecodeBulk(rawFront(g)); err != nil || bh.Op != wire.BulkGetReq {
		t.Fatalf("expected a GET request, got %+v %v", bh, err)
	}

	// An honest client's overflowing request to the same context.
	cli := n.client(t, rpc.Options{}, []*rpc.Instance{srv})
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in := make(rpc.Bytes, 32<<10)
	var out rpc.Bytes
	err := c.Call(ctx, rpc.Endpoint{}, opOvfEcho, in, &out)
	if err != nil {
		t.Fatalf("honest overflowing request starved by the hostile peer's pull (server timeout 200 ms, waited 10 s): %v; server bulk stats %+v",
			err, srv.Context(0).BulkStats())
	}
}

// A (buggy) holder answers the first span of a GET twice and never
// answers the second. The duplicate is not counted as the missing half
// (the GET would succeed with half its buffer unwritten): the GET fails
// as malformed and the holder's connection is closed.
func TestHostileDuplicateDataCompletesGet(t *testing.T) {
	evil, cli, c := rawHolder(t)
	const size = 8192
	buf := make([]byte, size)
	local, err := cli.NewBulk([][]byte{buf}, rpc.BulkWO)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		errc <- c.TransferWait(ctx, rpc.BulkDesc{Op: rpc.BulkGet, Remote: rpc.BulkHandle{Key: 42, Len: size, Perm: rpc.BulkRO},
			Local: local, Len: size, Peer: &rpc.Endpoint{Rank: 1}})
	}()
	var first wire.BulkHeader
	m := evil.next(t, wire.TypeBulk, "the first GET request")
	first, err = wire.DecodeBulk(rawFront(m))
	if err != nil || first.Op != wire.BulkGetReq || first.Pos != 0 {
		t.Fatalf("first request %+v %v", first, err)
	}
	m2 := evil.next(t, wire.TypeBulk, "the second GET request")
	if second, err := wire.DecodeBulk(rawFront(m2)); err != nil || second.Pos == 0 {
		t.Fatalf("second request %+v %v", second, err)
	}
	// Answer the first span twice; never the second.
	d := wire.BulkHeader{Op: wire.BulkData, SrcTag: first.DstTag, DstTag: first.SrcTag, Xfer: first.Xfer,
		Key: first.Key, Off: first.Off, Pos: 0, Len: first.Len}
	for range 2 {
		if err := m.Conn.Send(rawBulk(d, bytes.Repeat([]byte{0xAA}, int(first.Len)))); err != nil {
			t.Fatal(err)
		}
	}
	err = recv(t, errc, "the GET's end")
	if err == nil {
		t.Fatalf("GET of %d bytes succeeded, but bytes [%d,%d) were never sent: buf[%d] = %#x",
			size, first.Len, size, size-1, buf[size-1])
	}
	if rpc.CodeOf(err) != rpc.CodeMalformed && rpc.CodeOf(err) != rpc.CodeUnreachable {
		t.Fatalf("GET: %v, want it malformed (or its connection failed)", err)
	}
	select {
	case <-m.Conn.(*msgr.Conn).Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's connection is still up")
	}
	if n := cli.MalformedMessages(); n != 1 {
		t.Fatalf("%d malformed messages counted, want 1", n)
	}
}

// A (buggy) holder acknowledges the first chunk of a PUT twice. The
// duplicate is not counted for the second chunk (the PUT would complete
// while that chunk, the caller's buffer, may still be queued): the PUT
// fails as malformed and the holder's connection is closed.
func TestHostileDuplicateAckCompletesPut(t *testing.T) {
	evil, cli, c := rawHolder(t)
	const size = 8192
	local, err := cli.NewBulk([][]byte{make([]byte, size)}, rpc.BulkRO)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		errc <- c.TransferWait(ctx, rpc.BulkDesc{Op: rpc.BulkPut, Remote: rpc.BulkHandle{Key: 42, Len: size, Perm: rpc.BulkWO},
			Local: local, Len: size, Peer: &rpc.Endpoint{Rank: 1}})
	}()
	m := evil.next(t, wire.TypeBulk, "the first PUT chunk")
	first, err := wire.DecodeBulk(rawFront(m))
	if err != nil || first.Op != wire.BulkPut || first.Pos != 0 || first.Len != 4096 {
		t.Fatalf("first chunk %+v %v", first, err)
	}
	ack := wire.BulkHeader{Op: wire.BulkAck, SrcTag: first.DstTag, DstTag: first.SrcTag, Xfer: first.Xfer,
		Key: first.Key, Off: first.Off, Pos: 0, Len: first.Len}
	for range 2 {
		if err := m.Conn.Send(rawBulk(ack, nil)); err != nil {
			t.Fatal(err)
		}
	}
	err = recv(t, errc, "the PUT's end")
	if c := rpc.CodeOf(err); c != rpc.CodeMalformed && c != rpc.CodeUnreachable {
		t.Fatalf("PUT with its first chunk acknowledged twice: %v, want it malformed (or its connection failed)", err)
	}
	select {
	case <-m.Conn.(*msgr.Conn).Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's connection is still up")
	}
}

// The self-test service, registered on every instance, pulls a peer's
// SendBulk into a buffer of its size: that buffer counts against the
// context's overflow budget, so peers that send tests and never serve
// their GETs pin at most the budget (or one test, however large); the
// others wait, unallocated, and end with their connection.
func TestHostileSelfTestWithinBudget(t *testing.T) {
	n := newNet()
	srv := n.server(t, 0, 1, rpc.Options{Bulk: rpc.BulkOptions{OverflowLimit: 1 << 20}})
	_, conn := connectRaw(t, n, srv)
	const k, each = 8, 8 << 20
	for i := range k {
		in := rpc.SelfTestInput{SendBulk: &rpc.BulkHandle{Key: uint64(1000 + i), Len: each, Perm: rpc.BulkRO}}
		body, err := in.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Send(rpcMsg(wire.TypeRequest, uint64(i+1), wire.Header{Opcode: uint32(rpc.OpSelfTest)}, body, nil)); err != nil {
			t.Fatal(err)
		}
	}
	sctx := srv.Context(0)
	waitFor(t, "the tests beyond the budget waiting", func() bool { return sctx.BulkStats().OverflowWaiting == k-1 })
	if st := sctx.BulkStats(); st.Active != 1 || st.OverflowHeld != each {
		t.Fatalf("server: %d pulls holding %d bytes, want 1 holding %d", st.Active, st.OverflowHeld, each)
	}
	conn.MarkDown()
	waitFor(t, "the budget given back", func() bool {
		st := sctx.BulkStats()
		return st.OverflowHeld == 0 && st.OverflowWaiting == 0 && st.Active == 0
	})
}

// A peer that announces rendezvous PUTs (RTS) and never serves their
// pulls gets a bounded number pulled at once on its connection; the
// others are refused with CodeBusy, and the pulls end with the
// connection.
func TestHostileRTSBounded(t *testing.T) {
	n := newNet()
	srv := n.server(t, 0, 1, rpc.Options{})
	target := register(t, srv, [][]byte{make([]byte, 4096)}, rpc.BulkWO)
	evil, conn := connectRaw(t, n, srv)
	const k, max = 300, 256
	for i := range k {
		rts := wire.BulkHeader{Op: wire.BulkRTS, Xfer: uint64(i + 1), Key: target.Handle().Key, Len: 4096, Key2: 77}
		if err := conn.Send(rawBulk(rts, nil)); err != nil {
			t.Fatal(err)
		}
	}
	for busy := 0; busy < k-max; {
		m := evil.next(t, wire.TypeBulk, "a refused RTS's final ack")
		h, err := wire.DecodeBulk(rawFront(m))
		switch {
		case err == nil && h.Op == wire.BulkGetReq:
			// a pull's request, left unanswered
		case err != nil || h.Op != wire.BulkAck || rpc.Code(h.RC) != rpc.CodeBusy:
			t.Fatalf("answer to an RTS: %+v %v, want a pull or a CodeBusy ack", h, err)
		default:
			busy++
		}
	}
	sctx := srv.Context(0)
	if a := sctx.BulkStats().Active; a != max {
		t.Fatalf("%d pulls for one connection, want %d", a, max)
	}
	conn.MarkDown()
	waitFor(t, "the pulls ended with their connection", func() bool { return sctx.BulkStats().Active == 0 })
}

// One hostile connection queues k overflowing requests (no deadline)
// whose inputs it never serves. Each admitted pull holds the budget for
// the target's own timeout (200 ms), and connections take turns, so an
// honest origin's overflowing request with a 2 s deadline is served after
// at most one of them (first in, first out, it waited k*200 ms).
func TestHostileOverflowQueueBounded(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		n := newNet()
		const limit = 64 << 10
		srv := n.server(t, 0, 1, rpc.Options{Timeout: 200 * time.Millisecond, Bulk: rpc.BulkOptions{OverflowLimit: limit}}, echoProto())
		_, conn := connectRaw(t, n, srv)
		const k = 20
		for i := range k {
			h := wire.Header{Opcode: uint32(opOvfEcho), Flags: wire.FlagBulkIn | wire.FlagHasData}
			if err := conn.Send(rpcMsg(wire.TypeRequest, uint64(i+1), h, ovfDesc(0xdead+uint64(i), limit), nil)); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the hostile inputs queued", func() bool { return srv.Context(0).BulkStats().OverflowWaiting == k-1 })
		cli := n.client(t, rpc.Options{}, []*rpc.Instance{srv})
		c := newCtx(t, cli, rpc.ContextOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		in := make(rpc.Bytes, 32<<10)
		var out rpc.Bytes
		start := time.Now()
		if err := c.Call(ctx, rpc.Endpoint{}, opOvfEcho, in, &out); err != nil {
			t.Fatalf("honest overflowing request (2 s deadline) starved behind %d never-served inputs of one connection (target timeout 200 ms): %v; server bulk stats %+v",
				k, err, srv.Context(0).BulkStats())
		}
		// Virtual time: "after at most one of them" exactly, with no slack
		// for a loaded machine (measured: 199.9 ms, one target timeout).
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Fatalf("honest request served after %v: more than one hostile pull's timeout (200 ms)", d)
		}
	})
}

// rawHolder starts a raw peer as rank 1 and a client instance (4 KiB
// chunks in an 8 KiB window, PUTs pushed up to 1 MiB) with a context
// that reaches it.
func rawHolder(t *testing.T) (*rawPeer, *rpc.Instance, *rpc.Context) {
	t.Helper()
	n := newNet()
	evil := newRawPeer(t, n, "holder")
	cli, err := rpc.New(rpc.Options{Transports: n.reg, Logger: quietLogger(),
		Bulk: rpc.BulkOptions{EagerLimit: 1024, ChunkSize: 4096, Window: 8192, SegmentLimit: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if err := cli.Group().Add(1, evil.uri); err != nil {
		t.Fatal(err)
	}
	return evil, cli, newCtx(t, cli, rpc.ContextOptions{})
}

// A peer that asks for overflowing outputs and never pulls nor releases
// them pins at most the target's IncomingLimit of them on its connection:
// beyond it the replies are errors (CodeBusy); releasing one makes room.
func TestHostileUnpulledOutputsBounded(t *testing.T) {
	n := newNet()
	const limit, size = 64 << 10, 20 << 10 // three outputs fit
	srv := n.server(t, 0, 1, rpc.Options{IncomingLimit: limit}, echoProto())
	p, conn := connectRaw(t, n, srv)
	ask := func(tid uint64) (wire.Header, []byte) {
		h := wire.Header{Opcode: uint32(opOvfEcho), Flags: wire.FlagHasData}
		if err := conn.Send(rpcMsg(wire.TypeRequest, tid, h, nil, make([]byte, size))); err != nil {
			t.Fatal(err)
		}
		m := p.next(t, wire.TypeReply, "a reply")
		rh, body, err := wire.Decode(rawFront(m))
		if err != nil {
			t.Fatal(err)
		}
		return rh, body
	}
	var keys []uint64
	for i := range 3 {
		rh, body := ask(uint64(i + 1))
		key, _, _, err := wire.DecodeOverflow(body)
		if err != nil || rh.RC != 0 || rh.Flags&wire.FlagBulkOut == 0 {
			t.Fatalf("reply %d: rc %v, flags %#x, %v", i, rpc.Code(rh.RC), rh.Flags, err)
		}
		keys = append(keys, key)
	}
	if rh, _ := ask(4); rpc.Code(rh.RC) != rpc.CodeBusy {
		t.Fatalf("a fourth unpulled output: rc %v, want CodeBusy", rpc.Code(rh.RC))
	}
	if h := srv.BulkHandles(); h != 3 {
		t.Fatalf("%d handles registered, want 3", h)
	}
	rel := wire.BulkHeader{Op: wire.BulkRelease, Key: keys[0]}
	if err := conn.Send(rawBulk(rel, nil)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the released output freed", func() bool { return srv.BulkHandles() == 2 })
	if rh, _ := ask(5); rh.RC != 0 || rh.Flags&wire.FlagBulkOut == 0 {
		t.Fatalf("after a release: rc %v, flags %#x, want an overflowing output", rpc.Code(rh.RC), rh.Flags)
	}
}
