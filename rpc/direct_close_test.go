//go:build linux

package rpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
)

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
	m, err := msgr.New(msgr.Config{Transports: directTransports(), Logger: quietLogger(),
		Inject: msgr.Inject{DelayTypes: []msg.EntityType{msg.EntityOSD}, DelayProbability: 1, DelayMax: 2 * time.Second}})
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
	if err := cli.Group().Add(0, srv.URI()); err != nil {
		t.Fatal(err)
	}
	cctx := newCtx(t, cli, rpc.ContextOptions{Auto: true})
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
