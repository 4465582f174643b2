package rpc_test

import (
	"testing"

	"github.com/ferrymsg/ferry/msg"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// A segmented PUT's target answers its first chunk with a final ack (the
// ack of a whole rendezvous PUT). The flag is honoured for rendezvous
// PUTs only: otherwise the PUT would complete with most of its chunks
// never sent or still queued (the caller's buffer).
func TestHostileFinalAckOnSegmentedPut(t *testing.T) {
	n := newNet()
	p := newRawPeer(t, n, "rawput")
	cl := n.client(t, rpc.Options{}, nil)
	if err := cl.Group().Add(9, p.uri); err != nil {
		t.Fatal(err)
	}
	c := newCtx(t, cl, rpc.ContextOptions{Auto: true})
	const size = 4 << 20 // segmented (default limits)
	src := register(t, cl, [][]byte{make([]byte, size)}, rpc.BulkRO)
	done := make(chan error, 1)
	tr, err := c.Transfer(rpc.BulkDesc{Op: rpc.BulkPut, Remote: rpc.BulkHandle{Key: 7, Len: size, Perm: rpc.BulkWO}, Local: src, Len: size,
		Peer: &rpc.Endpoint{Rank: 9}}, func(bc rpc.BulkCompletion) { done <- bc.Err })
	if err != nil {
		t.Fatal(err)
	}
	if tr.Protocol() != rpc.Segmented {
		t.Fatalf("protocol %v", tr.Protocol())
	}
	m := p.next(t, wire.TypeBulk, "the first chunk")
	h, err := wire.DecodeBulk(rawFront(m))
	if err != nil || h.Op != wire.BulkPut {
		t.Fatalf("%+v %v", h, err)
	}
	ack := wire.BulkHeader{Op: wire.BulkAck, Flags: wire.BulkFlagFinal, SrcTag: h.DstTag, DstTag: h.SrcTag, Xfer: h.Xfer, Key: h.Key, Len: size}
	if err := m.Conn.(interface{ Send(*msg.Message) error }).Send(rawBulk(ack, nil)); err != nil {
		t.Fatal(err)
	}
	m.Done()
	if err := recv(t, done, "the PUT"); err == nil {
		t.Fatalf("a segmented PUT of %d bytes succeeded on a final ack after its first chunk", size)
	}
}
