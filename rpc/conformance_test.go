//go:build linux

package rpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
	"github.com/ferrymsg/ferry/transport/shm"
)

// conformanceTransports are the transports the RPC and bulk conformance
// suite runs over, each with a function making listen addresses.
func conformanceTransports(t *testing.T) []struct {
	name string
	reg  *transport.Registry
	addr func(i int) string
} {
	dir := t.TempDir()
	net := inproc.NewNetwork()
	prefix := fmt.Sprintf("inproc://conf%d-", netSeq.Add(1))
	out := []struct {
		name string
		reg  *transport.Registry
		addr func(i int) string
	}{
		{"tcp", transport.NewRegistry(transport.NewTCP(transport.TCPOptions{})), func(int) string { return "tcp://127.0.0.1:0" }},
		{"unix", transport.NewRegistry(transport.NewUnix()), func(i int) string { return "unix://" + filepath.Join(dir, fmt.Sprintf("u%d.sock", i)) }},
		{"inproc", transport.NewRegistry(net), func(i int) string { return fmt.Sprintf("%s%d", prefix, i) }},
	}
	if runtime.GOOS == "linux" {
		out = append(out, struct {
			name string
			reg  *transport.Registry
			addr func(i int) string
		}{"shm", transport.NewRegistry(shm.New()), func(i int) string { return "shm://" + filepath.Join(dir, fmt.Sprintf("s%d.sock", i)) }})
	}
	return out
}

// swappedPairs starts two listening ranks, 0 and 1, that know each other,
// and returns the pair in both directions: rank 1 serving rank 0, and
// rank 0 serving rank 1.
func swappedPairs(t *testing.T, reg *transport.Registry, addr func(int) string, o rpc.Options) [2]*bulkPair {
	var ins [2]*rpc.Instance
	for i := range ins {
		io := o
		io.Listen, io.Rank, io.Transports, io.Logger = addr(i), uint32(i), reg, quietLogger()
		in, err := rpc.New(io)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close() })
		ins[i] = in
	}
	for i, in := range ins {
		other := ins[1-i]
		if err := in.Group().Add(other.Rank(), other.URI()); err != nil {
			t.Fatal(err)
		}
	}
	ctxs := [2]*rpc.Context{newCtx(t, ins[0], rpc.ContextOptions{Auto: true}), newCtx(t, ins[1], rpc.ContextOptions{Auto: true})}
	var ps [2]*bulkPair
	for i := range ps {
		s := 1 - i // pair i: rank i is the client of rank s
		ps[i] = &bulkPair{srv: ins[s], cli: ins[i], sctx: ctxs[s], cctx: ctxs[i], peer: &rpc.Endpoint{Rank: uint32(s)}}
		ps[i].serveBulkTest(t)
		if err := ins[s].Register(echoProto()); err != nil {
			t.Fatal(err)
		}
	}
	return ps
}

// TestConformance runs RPCs, overflowing inputs and outputs, bulk GETs and
// PUTs, and an abort over every transport, each with the roles swapped.
func TestConformance(t *testing.T) {
	for _, tr := range conformanceTransports(t) {
		t.Run(tr.name, func(t *testing.T) {
			ps := swappedPairs(t, tr.reg, tr.addr, rpc.Options{Bulk: rpc.BulkOptions{ChunkSize: 64 << 10, Window: 256 << 10}})
			for dir, p := range ps {
				t.Run(fmt.Sprintf("rank%d-to-rank%d", p.cli.Rank(), p.srv.Rank()), func(t *testing.T) {
					conformance(t, p, uint64(dir))
				})
			}
		})
	}
}

func conformance(t *testing.T, p *bulkPair, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 11))
	if err := p.cctx.Ping(ctx, *p.peer); err != nil {
		t.Fatal(err)
	}
	// Echo across the eager limit (the larger ones overflow both ways).
	for _, n := range []int{0, 100, rpc.DefaultEagerLimit + 1, 1<<20 + 7} {
		in := make(rpc.Bytes, n)
		for i := range in {
			in[i] = byte(rng.Uint32())
		}
		var out rpc.Bytes
		if err := p.cctx.Call(ctx, *p.peer, opOvfEcho, &in, &out); err != nil || !bytes.Equal(in, out) {
			t.Fatalf("echo of %d bytes: equal %v, %v", n, bytes.Equal(in, out), err)
		}
	}
	// GET and PUT, odd sizes and offsets, multi-segment on both sides.
	for _, n := range []int{1, 4095, 70001, 3<<20 + 1} {
		for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
			roff, loff := rng.IntN(777), rng.IntN(555)
			rh, rall := p.remote(t, rng.Uint64(), n+roff+9, 3, rpc.BulkRW)
			lsegs, lall := splitBuf(rng, n+loff+3, 4)
			lb := register(t, p.cli, lsegs, rpc.BulkRW)
			err := p.cctx.TransferWait(ctx, rpc.BulkDesc{Op: op, Remote: rh, RemoteOff: int64(roff), Local: lb, LocalOff: int64(loff), Len: int64(n), Peer: p.peer})
			if err != nil {
				t.Fatalf("%v %d: %v", op, n, err)
			}
			if op == rpc.BulkGet && !bytes.Equal(lall[loff:loff+n], rall[roff:roff+n]) {
				t.Fatalf("GET %d: data differs", n)
			}
			if op == rpc.BulkPut {
				want := rangeSums(rall, roff, n)
				want[1] = rangeSums(lall, loff, n)[1]
				if got := p.sums(t, rh.Key, roff, n); got != want {
					t.Fatalf("PUT %d: CRCs %x, want %x", n, got, want)
				}
			}
		}
	}
	// Abort of a long GET, then the pair still works.
	rh, _ := p.remote(t, 1, 16<<20, 1, rpc.BulkRO)
	lb := register(t, p.cli, [][]byte{make([]byte, 16<<20)}, rpc.BulkWO)
	x, err := p.cctx.Transfer(rpc.BulkDesc{Op: rpc.BulkGet, Remote: rh, Local: lb, Len: 16 << 20, Peer: p.peer}, nil)
	if err != nil {
		t.Fatal(err)
	}
	aborted := x.Abort()
	<-x.Done()
	if aborted && !errors.Is(x.Err(), rpc.ErrCanceled) {
		t.Fatalf("aborted GET: %v", x.Err())
	}
	if err := p.cctx.Ping(ctx, *p.peer); err != nil {
		t.Fatal(err)
	}
}
