package rpc_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// A transfer's timeout runs on the instance's Clock (Options.Clock), as
// requests' do: a holder that never answers fails the transfer with
// ErrTimedOut once the clock passes its timeout, not before, and the
// wall clock passing it does nothing.
func TestBulkTimeoutOnClock(t *testing.T) {
	srv, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	var drop atomic.Bool
	drop.Store(true)
	rpc.DropGetRequests(srv.Messenger(), &drop)
	newCtx(t, srv, rpc.ContextOptions{Auto: true})
	clk := newFakeClock()
	cli, err := rpc.New(rpc.Options{Logger: quietLogger(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if err := cli.Group().Add(0, srv.URI()); err != nil {
		t.Fatal(err)
	}
	cctx := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	r := register(t, srv, [][]byte{make([]byte, 64<<10)}, rpc.BulkRO)
	for _, n := range []int64{1 << 10, 64 << 10} { // eager and rendezvous
		l := register(t, cli, [][]byte{make([]byte, n)}, rpc.BulkWO)
		done := make(chan error, 1)
		x, err := cctx.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l, Len: n,
			Peer: &rpc.Endpoint{}, Timeout: 10 * time.Second}, func(c rpc.BulkCompletion) { done <- c.Err })
		if err != nil {
			t.Fatal(err)
		}
		// Well past the timeout in wall time, 9 s of it on the clock.
		time.Sleep(50 * time.Millisecond)
		clk.Advance(9 * time.Second)
		select {
		case err := <-done:
			t.Fatalf("%d bytes: completed before its timeout on the clock: %v", n, err)
		case <-time.After(100 * time.Millisecond):
		}
		clk.Advance(2 * time.Second)
		select {
		case err := <-done:
			if !errors.Is(err, rpc.ErrTimedOut) {
				t.Fatalf("%d bytes: got %v, want ErrTimedOut", n, err)
			}
		case <-time.After(5 * time.Second): // (well before 10 s of wall time)
			t.Fatalf("%d bytes: not timed out 5 s after the clock passed its timeout", n)
		}
		if x.Err() == nil {
			t.Fatalf("%d bytes: Err nil after completion", n)
		}
		if st := cctx.BulkStats(); st.Active != 0 || st.InFlight != 0 {
			t.Fatalf("%d bytes: stats after the timeout: %+v", n, st)
		}
	}
}

// TestBulkHugeTimeoutClamped: a transfer's Timeout beyond MaxTimeout is
// clamped to it, as a request's is, rather than overflowing the
// deadline into the past (math.MaxInt64 timed the transfer out at once).
func TestBulkHugeTimeoutClamped(t *testing.T) {
	srv, cli, _ := setup(t, rpc.Options{}, rpc.Options{})
	cctx := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	r := register(t, srv, [][]byte{make([]byte, 256<<10)}, rpc.BulkRO)
	l := register(t, cli, [][]byte{make([]byte, 256<<10)}, rpc.BulkWO)
	for _, to := range []time.Duration{math.MaxInt64, 2 * rpc.MaxTimeout} {
		if err := cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l,
			Len: 256 << 10, Peer: &rpc.Endpoint{}, Timeout: to}); err != nil {
			t.Errorf("GET with Timeout %v: %v", to, err)
		}
	}
}
