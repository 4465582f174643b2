package rpc_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/ferrymsg/ferry/rpc"
)

// A bound handle names its origin: a third party that got it (here
// through its encoding) transfers with it directly, with no RPC from the
// origin and no group membership of the origin.
func TestBulkBindThirdParty(t *testing.T) {
	p := newBulkPair(t, rpc.Options{})
	p.serveBulkTest(t)
	h, _ := p.remote(t, 99, 3<<20+5, 3, rpc.BulkRW)
	if h.Bound() {
		t.Fatal("an unbound handle says it is bound")
	}
	// Bind a handle of the server's own, made on the server.
	src, err := p.srv.NewBulk([][]byte{bytes.Repeat([]byte("x"), 1000)}, rpc.BulkRO)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Free()
	if err := src.Bind(p.sctx); err != nil {
		t.Fatal(err)
	}
	bh := src.Handle()
	if !bh.Bound() || bh.URI != p.srv.URI() || bh.Rank != 0 || bh.Tag != p.sctx.Tag() {
		t.Fatalf("bound handle %+v", bh)
	}
	enc, err := bh.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got rpc.BulkHandle
	if err := got.UnmarshalBinary(enc); err != nil || got != bh {
		t.Fatalf("decoded %+v, %v", got, err)
	}

	// A third instance that knows nothing of the group.
	third, err := rpc.New(rpc.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	tc := newCtx(t, third, rpc.ContextOptions{Auto: true})
	dst := make([]byte, 1000)
	lb := register(t, third, [][]byte{dst}, rpc.BulkWO)
	if err := tc.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkGet, Remote: got, Local: lb, Len: 1000}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, bytes.Repeat([]byte("x"), 1000)) {
		t.Fatal("third-party GET: data differs")
	}
	// An unbound handle without Via or Peer cannot be reached.
	err = tc.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkGet, Remote: h, Local: lb, Len: 10})
	if !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("unbound handle without a peer: %v", err)
	}
	// A client-only instance has no address to bind.
	cb := register(t, p.cli, [][]byte{dst}, rpc.BulkRO)
	if err := cb.Bind(p.cctx); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("Bind on a client: %v", err)
	}
}
