package rpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// A transfer's spans may leave in another order than they were issued:
// a context's shared window is held by an honest GET t (to H, on conn2)
// and an overflowing input's pull A (from P1, on conn1). A's data lands on
// conn1's reader, whose pump issues t's next span k into its own send
// list; then that reader runs A's completion (the request's Inline
// handler) before sending. Meanwhile conn2's reader lands t's span k-1
// and issues and sends span k+1, which H answers first. The origin must
// not take H for a hostile peer (a check that expected spans in issue
// order faulted H's connection and failed the GET).
func TestBulkSpansOutOfOrder(t *testing.T) {
	const s = 1 << 10
	co := rpc.Options{Listen: "tcp://127.0.0.1:0", Rank: 5, Logger: quietLogger(),
		Bulk: rpc.BulkOptions{EagerLimit: 512, ChunkSize: s, Window: 2 * s, ConnLimit: 2 * s, ContextLimit: 2 * s}}
	c, err := rpc.New(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cctx := newCtx(t, c, rpc.ContextOptions{Auto: true})

	// H: an honest holder of a large buffer.
	h, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Rank: 0, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	newCtx(t, h, rpc.ContextOptions{Auto: true})
	const big = 8 << 20
	hb := register(t, h, [][]byte{make([]byte, big)}, rpc.BulkRO)
	if err := c.Group().Add(0, h.URI()); err != nil {
		t.Fatal(err)
	}

	// The target's Inline handler for A's request.
	var getDone atomic.Bool
	entered := make(chan struct{}, 1)
	err = c.Register(rpc.Protocol{Name: "rv", Base: 0x49, Version: 1, RPCs: []rpc.RPC{{Flags: rpc.Inline,
		Handler: func(r *rpc.Incoming) error {
			entered <- struct{}{}
			deadline := time.Now().Add(3 * time.Second)
			for !getDone.Load() && c.MalformedMessages() == 0 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond) // a handler doing some work
			}
			return r.Reply(nil)
		}}}})
	if err != nil {
		t.Fatal(err)
	}

	// P1: an honest origin whose input overflows (one span).
	p1, err := rpc.New(rpc.Options{Logger: quietLogger(), Bulk: rpc.BulkOptions{EagerLimit: 512}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p1.Close() })
	if err := p1.Group().Add(5, c.URI()); err != nil {
		t.Fatal(err)
	}
	p1ctx := newCtx(t, p1, rpc.ContextOptions{Auto: true})

	// t: the long honest GET.
	dst := register(t, c, [][]byte{make([]byte, big)}, rpc.BulkWO)
	getErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err := cctx.TransferWait(ctx, rpc.BulkDesc{Op: rpc.BulkGet, Remote: hb.Handle(), Local: dst, Len: big, Peer: &rpc.Endpoint{Rank: 0}})
		getDone.Store(true)
		getErr <- err
	}()
	waitFor(t, "the GET to move", func() bool { return cctx.BulkStats().Bytes > 0 })

	in := make(rpc.Bytes, s-64) // overflows P1's eager limit; one span at the target
	callErr := make(chan error, 1)
	go func() {
		callErr <- p1ctx.Call(context.Background(), rpc.Endpoint{Rank: 5}, rpc.MakeOpcode(0x49, 1, 0), &in, nil)
	}()
	recv(t, entered, "the Inline handler")
	if err := recv(t, getErr, "the GET"); err != nil {
		t.Fatalf("honest GET failed: %v (malformed messages counted by its origin: %d)", err, c.MalformedMessages())
	}
	if err := recv(t, callErr, "the call"); err != nil {
		t.Fatal(err)
	}
}
