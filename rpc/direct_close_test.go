//go:build linux

package rpc_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
)

// clientOnOwnMessenger starts a client instance on a messenger of the
// caller's (Options.Messenger: closing the instance leaves it and its
// connections up), with inject, reaching srv as rank 0, and a context.
func clientOnOwnMessenger(t *testing.T, srv *rpc.Instance, inject msgr.Inject) (*rpc.Instance, *rpc.Context) {
	t.Helper()
	m, err := msgr.New(msgr.Config{Transports: directTransports(), Logger: quietLogger(), Inject: inject})
	if err != nil {
		t.Fatal(err)
	}
	m.SetDefaultPolicy(msgr.LossyClient())
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Shutdown)
	cli, err := rpc.New(rpc.Options{Messenger: m, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if err := cli.Group().Add(0, srv.URI()); err != nil {
		t.Fatal(err)
	}
	return cli, newCtx(t, cli, rpc.ContextOptions{Auto: true})
}

// TestDirectLeaseEndsWhenInitiatorCloses: a holder's direct write lease
// ends even when the initiator's instance closes before the addresses
// arrive and its messenger (the caller's) stays up, so the holder's Free
// returns. Messages to the client are held up to 2 s (uniformly), so the
// holder's answer almost always arrives after the client's Close.
func TestDirectLeaseEndsWhenInitiatorCloses(t *testing.T) {
	addr := directAddr(t, "shm")
	srv, err := rpc.New(rpc.Options{Listen: addr, Logger: quietLogger(), Transports: directTransports()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	newCtx(t, srv, rpc.ContextOptions{Auto: true})
	cli, cctx := clientOnOwnMessenger(t, srv,
		msgr.Inject{DelayTypes: []msg.EntityType{msg.EntityOSD}, DelayProbability: 1, DelayMax: 2 * time.Second})
	peer := &rpc.Endpoint{Rank: 0, Tag: 0}
	dst, err := srv.NewBulk([][]byte{make([]byte, 1<<20)}, rpc.BulkRW)
	if err != nil {
		t.Fatal(err)
	}
	src := register(t, cli, [][]byte{make([]byte, 1<<20)}, rpc.BulkRW)
	defer rpc.DirectAnySize()()
	// Connect first: the direct path needs the socket up.
	if err := cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkGet, Remote: dst.Handle(), Local: src, Len: 1, Peer: peer}); err != nil {
		t.Fatal(err)
	}
	waitLeases(t)
	if _, err := cctx.Transfer(rpc.BulkDesc{Op: rpc.BulkPut, Remote: dst.Handle(), Local: src, Len: 1 << 20, Peer: peer}, nil); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	waitFor(t, "the holder's lease", func() bool { return rpc.DirectLeases() > 0 })
	freed := make(chan struct{})
	go func() { dst.Free(); close(freed) }()
	select {
	case <-freed:
	case <-time.After(10 * time.Second):
		t.Fatalf("Free still waiting after 10 s; leases held: %d", rpc.DirectLeases())
	}
	waitLeases(t)
}

// TestDirectLeaseEndsWhenHolderCloses: the holder (a client on the
// caller's messenger, which stays up) closes its instance while a server
// handler's Via PUT writes into its buffer directly; the initiator's
// BulkDirectDone still ends the write lease, so Free of the buffer
// returns. (Found by a review in session 5; it failed before.)
func TestDirectLeaseEndsWhenHolderCloses(t *testing.T) {
	addr := directAddr(t, "shm")
	srv, err := rpc.New(rpc.Options{Listen: addr, Logger: quietLogger(), Transports: directTransports()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	sc := newCtx(t, srv, rpc.ContextOptions{Auto: true})
	src := register(t, srv, [][]byte{make([]byte, 1<<20)}, rpc.BulkRW)
	err = srv.Register(rpc.Protocol{Name: "direct-close", Base: 77, Version: 1, RPCs: []rpc.RPC{{Name: "read",
		Handler: func(r *rpc.Incoming) error {
			var h rpc.BulkHandle
			if err := r.Decode(&h); err != nil {
				return err
			}
			_, err := sc.Transfer(rpc.BulkDesc{Op: rpc.BulkPut, Remote: h, Local: src, Len: h.Len, Via: r},
				func(c rpc.BulkCompletion) {
					if c.Err != nil {
						r.Fail(c.Err)
						return
					}
					r.Reply(nil)
				})
			return err
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	cli, cctx := clientOnOwnMessenger(t, srv, msgr.Inject{})
	dst, err := cli.NewBulk([][]byte{make([]byte, 1<<20)}, rpc.BulkRW)
	if err != nil {
		t.Fatal(err)
	}
	defer rpc.DirectAnySize()()
	op := rpc.MakeOpcode(77, 1, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h1 := dst.Handle()
	h1.Len = 1
	if err := cctx.Call(ctx, rpc.Endpoint{Rank: 0, Tag: 0}, op, h1, nil); err != nil {
		t.Fatal(err)
	}
	waitLeases(t)
	calls := rpc.DirectCalls()
	entered, release := holdDirectCalls(t)
	go cctx.Call(ctx, rpc.Endpoint{Rank: 0, Tag: 0}, op, dst.Handle(), nil)
	recv(t, entered, "the direct write")
	if rpc.DirectCalls() == calls || rpc.DirectLeases() == 0 {
		t.Fatal("not on the direct path")
	}
	cli.Close()
	close(release)
	freed := make(chan struct{})
	go func() { dst.Free(); close(freed) }()
	select {
	case <-freed:
	case <-time.After(5 * time.Second):
		t.Fatalf("holder's Free still waiting 5 s after the write finished; leases held: %d", rpc.DirectLeases())
	}
}

// A transfer that ends (aborted, timed out) while it waits for a holder
// that never answers with its addresses leaves nothing behind: the wait
// does not pin the transfer and its buffers until the connection ends.
func TestDirectWaitEndsWithTransfer(t *testing.T) {
	p := newDirectPair(t, "unix", rpc.Options{})
	src := bytes.Repeat([]byte{0x5A}, 1<<20)
	r := register(t, p.srv, [][]byte{src}, rpc.BulkRO)
	dst := make([]byte, 1<<20)
	l := register(t, p.cli, [][]byte{dst}, rpc.BulkRW)
	// Connect first: a transfer on a connection still being set up
	// goes by messages.
	if err := p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l, Len: 1, Peer: p.peer}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rpc.DirectMute())
	d := rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l, Len: 1 << 20, Peer: p.peer}
	x, err := p.cctx.Transfer(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the transfer waiting for addresses", func() bool { return rpc.DirectWaiting() == 1 })
	x.Abort()
	<-x.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.cctx.TransferWait(ctx, d); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("transfer to a mute holder: %v, want the context's deadline", err)
	}
	waitFor(t, "no transfer waiting for addresses", func() bool { return rpc.DirectWaiting() == 0 })
}
