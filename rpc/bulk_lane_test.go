package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
)

// clientConns returns the server's connections from client entities.
func clientConns(in *rpc.Instance) []*msgr.Conn {
	var cs []*msgr.Conn
	for _, c := range in.Messenger().Conns() {
		if c.PeerType() == msg.EntityClient {
			cs = append(cs, c)
		}
	}
	return cs
}

// laneConn returns the server's connection from the client's transfers:
// the one from an entity other than the client's messenger.
func laneConn(p *bulkPair) *msgr.Conn {
	for _, c := range clientConns(p.srv) {
		if c.PeerName() != p.cli.Messenger().Name() {
			return c
		}
	}
	return nil
}

// TestBulkSeparateConn: with BulkOptions.SeparateConn every protocol
// moves the right bytes on a connection of the transfers' own, the RPCs
// keep theirs, and the setting changes nothing on the wire otherwise.
func TestBulkSeparateConn(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(fmt.Sprintf("separate=%v", separate), func(t *testing.T) {
			checkGoroutines(t) // Close stops the transfers' messenger too
			p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{SeparateConn: separate}})
			p.serveBulkTest(t)
			eager, chunk, seg := rpc.DefaultEagerLimit, rpc.DefaultChunkSize, rpc.DefaultSegmentLimit
			rng := rand.New(rand.NewPCG(11, 12))
			for _, n := range []int{1, eager + 1, chunk + 7, seg + 1} {
				for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
					checkTransfer(t, p, rng, op, n, 0)
				}
			}
			want := 1
			if separate {
				want = 2
			}
			if got := len(clientConns(p.srv)); got != want {
				t.Fatalf("the server has %d client connections, want %d", got, want)
			}
			if separate && laneConn(p) == nil {
				t.Fatal("no connection from the transfers' own messenger")
			}
		})
	}
}

// TestBulkSeparateConnFails: when the transfers' connection fails in the
// middle of a transfer, the transfer fails with ErrUnreachable, RPCs on
// the other connection go on, and the next transfer connects again.
func TestBulkSeparateConnFails(t *testing.T) {
	for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
		t.Run(op.String(), func(t *testing.T) {
			p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{ChunkSize: 16 << 10, Window: 16 << 10, SeparateConn: true}})
			r := register(t, p.srv, [][]byte{make([]byte, 256<<20)}, rpc.BulkRW)
			l := register(t, p.cli, [][]byte{make([]byte, 256<<20)}, rpc.BulkRW)
			done := make(chan error, 1)
			go func() {
				done <- p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: op, Remote: r.Handle(), Local: l, Len: 256 << 20, Peer: p.peer})
			}()
			waitFor(t, "progress", p.moved)
			lane := laneConn(p)
			if lane == nil {
				t.Fatal("no connection from the transfers' own messenger")
			}
			lane.MarkDown()
			if err := recv(t, done, "completion"); !errors.Is(err, rpc.ErrUnreachable) {
				t.Fatalf("transfer whose connection failed: %v", err)
			}
			if st := p.cctx.BulkStats(); st.Active != 0 || st.InFlight != 0 {
				t.Fatalf("stats after the failure: %+v", st)
			}
			ctx := context.Background()
			if err := p.cctx.Ping(ctx, *p.peer); err != nil {
				t.Fatalf("RPC after the transfers' connection failed: %v", err)
			}
			if err := p.cctx.TransferWait(ctx, rpc.BulkDesc{Op: op, Remote: r.Handle(), Local: l, Len: 1 << 20, Peer: p.peer}); err != nil {
				t.Fatalf("transfer after the failure: %v", err)
			}
			if c := laneConn(p); c == nil || c == lane {
				t.Fatalf("the next transfer did not connect again (%v)", c)
			}
		})
	}
}

// TestBulkSeparateConnLooksUp: a transfer to a peer context whose URI is
// not known yet fails with ErrUnreachable and starts a lookup, so that a
// retry goes through, as without SeparateConn.
func TestBulkSeparateConnLooksUp(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(fmt.Sprintf("separate=%v", separate), func(t *testing.T) {
			p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{SeparateConn: separate}})
			newCtx(t, p.srv, rpc.ContextOptions{Auto: true}) // tag 1
			r := register(t, p.srv, [][]byte{make([]byte, 1<<20)}, rpc.BulkRW)
			l := register(t, p.cli, [][]byte{make([]byte, 1<<20)}, rpc.BulkRW)
			d := rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l, Len: 1 << 20, Peer: &rpc.Endpoint{Rank: 0, Tag: 1}}
			var err error
			waitFor(t, "a transfer to tag 1", func() bool {
				err = p.cctx.TransferWait(context.Background(), d)
				return err == nil
			})
		})
	}
}
