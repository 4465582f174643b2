package rpc_test

import (
	"bytes"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
)

// losslessBulkPair is a server and a client instance on messengers of
// the test's with lossless sessions (stateful-server, lossless-client)
// and injected socket failures on both sides: sessions survive the
// faults, reconnect and replay what was not acknowledged.
func losslessBulkPair(t *testing.T, failures int) (srv, cli *rpc.Instance, sctx, cctx *rpc.Context) {
	t.Helper()
	reg := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}))
	base := msgr.Config{Transports: reg, Logger: quietLogger(), InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Inject: msgr.Inject{SocketFailures: failures}}
	scfg := base
	scfg.Name = msg.EntityName{Type: msg.EntityOSD, Num: 0}
	sm, err := msgr.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	sm.SetDefaultPolicy(msgr.StatefulServer())
	if err := sm.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := sm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sm.Shutdown)
	cm, err := msgr.New(base)
	if err != nil {
		t.Fatal(err)
	}
	cm.SetDefaultPolicy(msgr.LosslessClient())
	if err := cm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cm.Shutdown)
	srv, err = rpc.New(rpc.Options{Messenger: sm, Rank: 0, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err = rpc.New(rpc.Options{Messenger: cm, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if err := cli.Group().Add(0, srv.URI()); err != nil {
		t.Fatal(err)
	}
	return srv, cli, newCtx(t, srv, rpc.ContextOptions{Auto: true}), newCtx(t, cli, rpc.ContextOptions{Auto: true})
}

// Bulk transfers on a lossless session whose sockets fail now and then:
// the session reconnects and replays, so every transfer should succeed
// with exact data, and each completion run once.
func TestBulkLosslessReconnect(t *testing.T) {
	srv, cli, _, cctx := losslessBulkPair(t, 8)
	peer := rpc.Endpoint{Rank: 0, Tag: 0}
	rng := rand.New(rand.NewPCG(1, 2))
	var fails, calls atomic.Int64
	for i := range 200 {
		n := []int{rpc.DefaultEagerLimit + 1, rpc.DefaultChunkSize + 7, 1<<20 + 3, 3<<20 + 1}[i%4]
		op := []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut}[(i/4)%2]
		rbuf := make([]byte, n)
		lbuf := make([]byte, n)
		for j := range rbuf {
			rbuf[j], lbuf[j] = byte(rng.Uint32()), byte(rng.Uint32())
		}
		want := bytes.Clone(rbuf)
		if op == rpc.BulkPut {
			want = bytes.Clone(lbuf)
		}
		r := register(t, srv, [][]byte{rbuf}, rpc.BulkRW)
		l := register(t, cli, [][]byte{lbuf}, rpc.BulkRW)
		done := make(chan error, 4)
		_, err := cctx.Transfer(rpc.BulkDesc{Op: op, Remote: r.Handle(), Local: l, Len: int64(n), Peer: &peer, Timeout: 20 * time.Second},
			func(c rpc.BulkCompletion) { calls.Add(1); done <- c.Err })
		if err != nil {
			t.Fatalf("transfer %d: %v", i, err)
		}
		err = recv(t, done, "completion")
		time.Sleep(5 * time.Millisecond)
		if len(done) != 0 {
			t.Fatalf("transfer %d: completion called twice", i)
		}
		if err != nil {
			fails.Add(1)
			t.Errorf("transfer %d (%v of %d bytes) on a lossless session: %v", i, op, n, err)
			continue
		}
		got := lbuf
		if op == rpc.BulkPut {
			got = rbuf
		}
		if !bytes.Equal(got, want) {
			t.Errorf("transfer %d (%v of %d bytes): data differs", i, op, n)
		}
	}
	// The session did survive: an RPC-free check that reconnects happened.
	var rc int64
	for _, c := range cli.Messenger().Conns() {
		rc += int64(c.Reconnects())
	}
	t.Logf("%d failures of 200; completions %d; reconnects %d", fails.Load(), calls.Load(), rc)
}
