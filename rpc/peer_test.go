package rpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

var (
	opAcctHold = rpc.MakeOpcode(0x48, 1, 0) // the handler keeps the request
	opAcctBig  = rpc.MakeOpcode(0x48, 1, 1) // an overflowing output
)

// A peer that makes the target hold everything it can (requests its
// handler has not answered, an overflowing input being pulled and
// others waiting for the overflow budget, outputs it does not pull, a
// rendezvous PUT the target pulls, the transfers and bytes in flight for
// them) and then goes away: closing its connection releases all of it at
// once, in the target's account of that peer, and every counter is back
// to zero (the held requests' once their handler answers), without
// waiting for any timeout.
func TestPeerAccountReleasedWithConnection(t *testing.T) {
	so := rpc.Options{Listen: "tcp://127.0.0.1:0", Logger: quietLogger(), Timeout: time.Minute,
		Bulk: rpc.BulkOptions{OverflowLimit: 1 << 20}}
	srv, err := rpc.New(so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	held := make(chan *rpc.Incoming, 16)
	big := make(rpc.Bytes, 1<<20)
	err = srv.Register(rpc.Protocol{Name: "acct", Base: 0x48, Version: 1, RPCs: []rpc.RPC{
		{Name: "hold", Handler: hold(held)},
		{Name: "big", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error { return r.Reply(&big) }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	sctx := newCtx(t, srv, rpc.ContextOptions{Auto: true})
	cli, err := rpc.New(rpc.Options{Logger: quietLogger(), Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			cli.Close()
		}
	})
	if err := cli.Group().Add(0, srv.URI()); err != nil {
		t.Fatal(err)
	}
	cctx := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	ep := rpc.Endpoint{}
	// Neither side serves the other's pulls: what is pulled stays held.
	var drop atomic.Bool
	drop.Store(true)
	rpc.DropGetRequests(srv.Messenger(), &drop)
	rpc.DropGetRequests(cli.Messenger(), &drop)
	send := func(op rpc.Opcode, in rpc.Input) {
		t.Helper()
		if _, err := cctx.Send(rpc.Request{Endpoint: ep, Opcode: op, In: in}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := cctx.Ping(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	small := rpc.Bytes(make([]byte, 100))
	for range 3 {
		send(opAcctHold, &small)
	}
	input := rpc.Bytes(make([]byte, 1<<20))
	for range 3 { // one pulled (the budget is 1 MiB), two waiting
		send(opAcctHold, &input)
	}
	for range 2 {
		send(opAcctBig, nil)
	}
	dst := register(t, srv, [][]byte{make([]byte, 8<<20)}, rpc.BulkWO)
	src := register(t, cli, [][]byte{make([]byte, 8<<20)}, rpc.BulkRO)
	if _, err := cctx.Transfer(rpc.BulkDesc{Op: rpc.BulkPut, Remote: dst.Handle(), Local: src, Len: 8 << 20, Peer: &ep}, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"overflow_in": 1 << 20, "overflow_waiting": 2, "outputs": 2 << 20, "pulls": 1}
	var got map[string]int64
	waitFor(t, "the server holding what the peer asked for", func() bool {
		got, _ = rpc.PeerCharges(srv)
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return len(held) == 3 && got["unanswered"] > 0 && got["xfers"] == 2 && got["xfer_bytes"] > 0
	})
	t.Logf("held for the peer: %v", got)
	metric := func(name string) float64 {
		s := srv.Metrics().Snapshot()
		v, _ := s.Value("ferry_rpc_" + name)
		return v
	}
	for name, want := range map[string]float64{"peer_accounts": 1, "peer_unpulled_output_bytes": 2 << 20, "peer_rendezvous_pulls": 1, "peer_transfers": 2} {
		if got := metric(name); got != want {
			t.Errorf("metric %s = %v, want %v", name, got, want)
		}
	}
	handles := srv.BulkHandles()

	// The peer goes away.
	closed = true
	cli.Close()
	waitFor(t, "all but the held requests released", func() bool {
		got, _ = rpc.PeerCharges(srv)
		for k, v := range got {
			if k != "unanswered" && v != 0 {
				return false
			}
		}
		return got["unanswered"] == 300 // the three requests the handler holds
	})
	if st := sctx.BulkStats(); st.Active != 0 || st.OverflowHeld != 0 || st.OverflowWaiting != 0 || st.InFlight != 0 {
		t.Fatalf("server's bulk state after the peer left: %+v", st)
	}
	if n := srv.BulkHandles(); n != handles-2 {
		t.Fatalf("%d bulk handles registered, want %d (the two outputs freed)", n, handles-2)
	}
	for range 3 {
		r := recv(t, held, "a held request")
		_ = r.Reply(nil) // goes nowhere
	}
	waitFor(t, "every charge back to zero and no account left", func() bool {
		var n int
		got, n = rpc.PeerCharges(srv)
		for _, v := range got {
			if v != 0 {
				return false
			}
		}
		return n == 0
	})
	for _, name := range []string{"peer_accounts", "peer_unpulled_output_bytes", "peer_rendezvous_pulls", "peer_transfers"} {
		if got := metric(name); got != 0 {
			t.Errorf("metric %s = %v after the peer left, want 0", name, got)
		}
	}
	if st := sctx.Stats(); st.Held != 0 {
		t.Fatalf("server's context holds %d bytes of requests", st.Held)
	}
}
