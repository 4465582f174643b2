package rpc_test

import (
	"context"
	"sync"
	"testing"

	"github.com/ferrymsg/ferry/rpc"
)

// In-process benchmarks over loopback TCP (client and server share the
// process; the two-process comparisons with the raw-TCP floor and gRPC-Go
// are in bench/peers). allocs/op counts both sides.

var benchProto = rpc.Protocol{Name: "bench", Base: 2, Version: 0, RPCs: []rpc.RPC{
	{Name: "null", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error { return r.Reply(nil) }},
	{Name: "sink", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error { return r.Reply(nil) }},
}}

func benchSetup(b *testing.B) (*rpc.Context, rpc.Endpoint) {
	_, _, c := benchPair(b, rpc.Options{})
	ep := rpc.Endpoint{}
	for range 100 {
		if err := c.Call(context.Background(), ep, rpc.MakeOpcode(2, 0, 0), nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	return c, ep
}

// benchPair starts a server instance on loopback TCP serving benchProto
// and a client instance with a context for it as rank 0, both with the
// options of o (Listen and Logger set here); tb's cleanup closes them.
func benchPair(tb testing.TB, o rpc.Options) (srv, cli *rpc.Instance, c *rpc.Context) {
	tb.Helper()
	so := o
	so.Listen, so.Logger = "tcp://127.0.0.1:0", quietLogger()
	srv, err := rpc.New(so)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	if err := srv.Register(benchProto); err != nil {
		tb.Fatal(err)
	}
	if _, err := srv.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
		tb.Fatal(err)
	}
	o.Logger = quietLogger()
	if cli, err = rpc.New(o); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	if err := cli.Register(benchProto); err != nil {
		tb.Fatal(err)
	}
	if err := cli.Group().Add(0, srv.URI()); err != nil {
		tb.Fatal(err)
	}
	if c, err = cli.NewContext(rpc.ContextOptions{}); err != nil {
		tb.Fatal(err)
	}
	return srv, cli, c
}

func BenchmarkCallNull(b *testing.B) {
	c, ep := benchSetup(b)
	ctx := context.Background()
	op := rpc.MakeOpcode(2, 0, 0)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call(ctx, ep, op, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCall64x16(b *testing.B) {
	c, ep := benchSetup(b)
	ctx := context.Background()
	op := rpc.MakeOpcode(2, 0, 1)
	b.ReportAllocs()
	b.SetBytes(64)
	var wg sync.WaitGroup
	per := b.N / 16
	b.ResetTimer()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := rpc.Bytes(make([]byte, 64))
			for range per {
				if err := c.Call(ctx, ep, op, &in, nil); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkCall1MiB(b *testing.B) {
	c, ep := benchSetup(b)
	ctx := context.Background()
	op := rpc.MakeOpcode(2, 0, 1)
	in := rpc.Bytes(make([]byte, 1<<20))
	b.ReportAllocs()
	b.SetBytes(1 << 20)
	for b.Loop() {
		if err := c.Call(ctx, ep, op, &in, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSend64x16 keeps 16 requests in flight with Send, completing
// them through Progress in one goroutine.
func BenchmarkSend64x16(b *testing.B) {
	c, ep := benchSetup(b)
	op := rpc.MakeOpcode(2, 0, 1)
	in := rpc.Bytes(make([]byte, 64))
	sent, done := 0, 0
	var cb rpc.Callback
	send := func() {
		sent++
		if _, err := c.Send(rpc.Request{Endpoint: ep, Opcode: op, In: &in}, cb); err != nil {
			b.Fatal(err)
		}
	}
	cb = func(cp rpc.Completion) {
		done++
		if cp.Err != nil {
			b.Error(cp.Err)
		}
		if sent < b.N {
			send()
		}
	}
	b.ReportAllocs()
	b.SetBytes(64)
	for range min(16, b.N) {
		send()
	}
	if err := c.ProgressUntil(context.Background(), func() bool { return done == b.N }); err != nil {
		b.Fatal(err)
	}
}
