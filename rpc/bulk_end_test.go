package rpc_test

// How transfers end when something else ends first: a transfer holding
// the shared window fails, the context closes while a chunk is being
// read into the buffer, the target of a rendezvous PUT is freed, a
// rendezvous PUT times out. (Found by a review in session 5; each test
// failed before its fix.)

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// TestBulkParkedResumeAfterAbort: a transfer parked behind the context's
// window moves as soon as the transfer holding the window is aborted, and
// parked transfers get their turn while the window's holder runs.
func TestBulkParkedResumeAfterAbort(t *testing.T) {
	const w = 16 << 10
	p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{ChunkSize: w, Window: w, ContextLimit: w, ConnLimit: w}})
	r := register(t, p.srv, [][]byte{make([]byte, 256<<20)}, rpc.BulkRW)
	l := register(t, p.cli, [][]byte{make([]byte, 256<<20)}, rpc.BulkRW)
	l2 := register(t, p.cli, [][]byte{make([]byte, 1<<20)}, rpc.BulkRW)
	a, err := p.cctx.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l, Len: 256 << 20, Peer: p.peer, Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first transfer moving", func() bool { return p.cctx.BulkStats().Bytes > 1<<20 })
	b, err := p.cctx.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l2, Len: 1 << 20, Peer: p.peer, Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Round robin: the second transfer moves while the first still runs.
	select {
	case <-b.Done():
	case <-a.Done():
		t.Fatalf("the first transfer ended first: %v", a.Err())
	case <-time.After(20 * time.Second):
		t.Fatalf("the parked transfer got no turn: %+v", p.cctx.BulkStats())
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	// A transfer parked while a is aborted resumes at once.
	c, err := p.cctx.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l2, Len: 1 << 20, Peer: p.peer, Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Abort()
	select {
	case <-c.Done():
		if c.Err() != nil {
			t.Fatal(c.Err())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the parked transfer did not resume after the abort: %+v", p.cctx.BulkStats())
	}
	if st := p.cctx.BulkStats(); st.Active != 0 || st.InFlight != 0 || st.Parked != 0 {
		t.Fatalf("stats at the end: %+v", st)
	}
}

// TestBulkCloseDuringPlacedChunk: closing the context, or the whole
// instance, while a GET chunk is being read into the buffer still
// completes the transfer (ErrShutdown).
func TestBulkCloseDuringPlacedChunk(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(p *bulkPair)
	}{
		{"context", func(p *bulkPair) { p.cctx.Close() }},
		{"instance", func(p *bulkPair) { p.cli.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 3 {
				p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{ChunkSize: 4 << 20, Window: 8 << 20}})
				r := register(t, p.srv, [][]byte{make([]byte, 256<<20)}, rpc.BulkRW)
				l := register(t, p.cli, [][]byte{make([]byte, 256<<20)}, rpc.BulkRW)
				x, err := p.cctx.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l, Len: 256 << 20, Peer: p.peer, Timeout: time.Minute}, nil)
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, "moving", func() bool { return p.cctx.BulkStats().Bytes > 8<<20 })
				tc.close(p)
				select {
				case <-x.Done():
					if !errors.Is(x.Err(), rpc.ErrShutdown) {
						t.Fatalf("attempt %d: %v", i, x.Err())
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("attempt %d: the transfer never completed after the close", i)
				}
			}
		})
	}
}

// TestBulkFreeStopsRendezvousPut: freeing the target of a rendezvous PUT
// stops the holder's pull: nothing lands after Free returns beyond the
// chunk in progress, and the initiator is told.
func TestBulkFreeStopsRendezvousPut(t *testing.T) {
	p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{ChunkSize: 16 << 10, Window: 32 << 10, SegmentLimit: 1 << 20}})
	src := register(t, p.cli, [][]byte{bytes.Repeat([]byte{1}, 64<<20)}, rpc.BulkRO)
	dst, err := p.srv.NewBulk([][]byte{make([]byte, 64<<20)}, rpc.BulkWO)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkPut, Remote: dst.Handle(), Local: src, Len: 64 << 20, Peer: p.peer})
	}()
	waitFor(t, "the pull moving", func() bool { return p.sctx.BulkStats().Bytes > 256<<10 })
	dst.Free()
	after := p.sctx.BulkStats().Bytes
	if err := recv(t, done, "the PUT's completion"); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("PUT into a target freed midway: %v", err)
	}
	if landed := p.sctx.BulkStats().Bytes - after; landed > 0 {
		t.Fatalf("%d bytes landed in the target after Free returned", landed)
	}
}

// TestBulkPutTimeoutStopsPull: a rendezvous PUT that times out tells the
// holder, which stops pulling.
func TestBulkPutTimeoutStopsPull(t *testing.T) {
	// 4 KiB chunks, 8 KiB asked ahead: the 64 MiB pull takes 16384 round
	// trips, far longer than the PUT's 100 ms.
	p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{ChunkSize: 4 << 10, Window: 8 << 10, SegmentLimit: 1 << 20}})
	src := register(t, p.cli, [][]byte{bytes.Repeat([]byte{1}, 64<<20)}, rpc.BulkRO)
	dst := register(t, p.srv, [][]byte{make([]byte, 64<<20)}, rpc.BulkWO)
	err := p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkPut, Remote: dst.Handle(), Local: src, Len: 64 << 20, Peer: p.peer, Timeout: 100 * time.Millisecond})
	if !errors.Is(err, rpc.ErrTimedOut) {
		t.Fatalf("PUT past its timeout: %v", err)
	}
	at := p.sctx.BulkStats().Bytes
	waitFor(t, "the holder's pull to stop", func() bool { return p.sctx.BulkStats().Active == 0 })
	// The pull stops within the chunks already asked for (its window).
	if later := p.sctx.BulkStats().Bytes; later > at+64<<10 {
		t.Fatalf("the holder pulled %d bytes after the PUT timed out", later-at)
	}
}

// TestBulkCancelStaysInContext: transfer ids are per context, so a
// failed rendezvous PUT of one context must not cancel another context's
// PUT that has the same id on the same connection.
func TestBulkCancelStaysInContext(t *testing.T) {
	p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{ChunkSize: 4 << 10, Window: 8 << 10, SegmentLimit: 1 << 20}})
	c2 := newCtx(t, p.cli, rpc.ContextOptions{Auto: true})
	src := register(t, p.cli, [][]byte{bytes.Repeat([]byte{1}, 16<<20)}, rpc.BulkRO)
	dst := register(t, p.srv, [][]byte{make([]byte, 16<<20)}, rpc.BulkWO)
	done := make(chan error, 1)
	go func() {
		done <- c2.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkPut, Remote: dst.Handle(), Local: src, Len: 16 << 20, Peer: p.peer})
	}()
	waitFor(t, "the second context's pull moving", func() bool { return p.sctx.BulkStats().Bytes > 64<<10 })
	// The first context's first transfer has id 1 too; it is refused.
	bad := rpc.BulkHandle{Key: 12345, Len: 16 << 20, Perm: rpc.BulkWO}
	if err := p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkPut, Remote: bad, Local: src, Len: 16 << 20, Peer: p.peer}); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("PUT into an unknown handle: %v", err)
	}
	if err := recv(t, done, "the other context's PUT"); err != nil {
		t.Fatalf("a PUT failed because another context's PUT did: %v", err)
	}
}
