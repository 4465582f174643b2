package rpc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
)

// resetCounter counts the remote resets the client's messenger reports.
type resetCounter struct{ n atomic.Int32 }

func (r *resetCounter) Dispatch(*msg.Message) bool   { return false }
func (r *resetCounter) HandleRemoteReset(*msgr.Conn) { r.n.Add(1) }

var remoteResets = &resetCounter{}

// losslessRPC: a server instance on a stateful_server messenger and a
// client instance on a lossless_client messenger that reaches it through
// a fault proxy. The handler counts how often each request (by its A)
// runs and echoes it.
func losslessRPC(t *testing.T, srvBind string) (srvM *msgr.Messenger, srv *rpc.Instance, px *faultProxy, cli *rpc.Instance, c *rpc.Context, runs *sync.Map) {
	t.Helper()
	runs = &sync.Map{}
	proto := rpc.Protocol{Name: "ll", Base: 0x51, Version: 0, RPCs: []rpc.RPC{{Name: "echo", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
		var p pair
		if err := r.Decode(&p); err != nil {
			return err
		}
		v, _ := runs.LoadOrStore(p.A, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
		return r.Reply(&p)
	}}}}
	var err error
	srvM, err = msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: 0}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	srvM.SetDefaultPolicy(msgr.StatefulServer())
	if err := srvM.Bind(srvBind); err != nil {
		t.Fatal(err)
	}
	_ = srvM.Start()
	t.Cleanup(srvM.Shutdown)
	if srv, err = rpc.New(rpc.Options{Messenger: srvM, Logger: quietLogger()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Register(proto); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
		t.Fatal(err)
	}
	px = newFaultProxy(t, strings.TrimPrefix(srvM.ListenAddrs()[0], "tcp://"), func(int) (int, int) { return -1, -1 })
	cm, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityClient, Num: msg.NewID}, Logger: quietLogger(),
		InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, KeepaliveInterval: time.Hour, KeepaliveTimeout: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cm.SetDefaultPolicy(msgr.LosslessClient())
	cm.AddDispatcherTail(remoteResets)
	_ = cm.Start()
	t.Cleanup(cm.Shutdown)
	if cli, err = rpc.New(rpc.Options{Messenger: cm, Logger: quietLogger(), Timeout: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if err := cli.Register(proto); err != nil {
		t.Fatal(err)
	}
	if err := cli.Group().Add(0, "tcp://"+px.addr()); err != nil {
		t.Fatal(err)
	}
	c = newCtx(t, cli, rpc.ContextOptions{Auto: true})
	return
}

// TestLosslessMessengerReplayRunsOnce: requests and replies in flight when the socket
// fails (the replies and acks lost) are replayed: each request runs once
// at the target and each call completes once, with its own reply.
func TestLosslessMessengerReplayRunsOnce(t *testing.T) {
	_, _, px, _, c, runs := losslessRPC(t, "tcp://127.0.0.1:0")
	op := rpc.MakeOpcode(0x51, 0, 0)
	var out pair
	if err := c.Call(context.Background(), rpc.Endpoint{}, op, &pair{A: 0, B: 0}, &out); err != nil {
		t.Fatal(err)
	}
	px.swallow.Store(true)
	px.swallow0.Store(true)
	const n = 24 // within the default credits
	var wg sync.WaitGroup
	errs := make([]error, n)
	outs := make([]pair, n)
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i-1] = c.Call(context.Background(), rpc.Endpoint{}, op, &pair{A: uint32(i), B: uint32(i) * 7}, &outs[i-1])
		}()
	}
	waitFor(t, "every request run", func() bool {
		k := 0
		runs.Range(func(any, any) bool { k++; return true })
		return k == n+1
	})
	time.Sleep(20 * time.Millisecond)
	px.swallow.Store(false)
	px.swallow0.Store(false)
	px.resetAll()
	wg.Wait()
	if px.n.Load() < 2 {
		t.Fatal("no reconnect happened")
	}
	for i := 1; i <= n; i++ {
		if errs[i-1] != nil {
			t.Errorf("call %d: %v", i, errs[i-1])
		} else if outs[i-1] != (pair{A: uint32(i), B: uint32(i) * 7}) {
			t.Errorf("call %d: reply %+v", i, outs[i-1])
		}
	}
	runs.Range(func(k, v any) bool {
		if r := v.(*atomic.Int32).Load(); r != 1 {
			t.Errorf("request %d ran %d times", k, r)
		}
		return true
	})
}

// TestLosslessMessengerServerRestart: with lossless messengers (Options.Messenger),
// the server restarts while a request is in flight. The client's session
// is reset by the peer (HandleRemoteReset): the request can never be
// answered and must fail promptly, not wait for its 30 s timeout.
func TestLosslessMessengerServerRestart(t *testing.T) {
	srvM, srv, px, _, c, runs := losslessRPC(t, "tcp://127.0.0.1:0")
	remoteResets.n.Store(0)
	op := rpc.MakeOpcode(0x51, 0, 0)
	var out pair
	if err := c.Call(context.Background(), rpc.Endpoint{}, op, &pair{A: 0}, &out); err != nil {
		t.Fatal(err)
	}
	px.swallow.Store(true)
	px.swallow0.Store(true) // the reply to the next call is lost with the server
	done := make(chan error, 1)
	go func() { done <- c.Call(context.Background(), rpc.Endpoint{}, op, &pair{A: 1}, &out) }()
	waitFor(t, "request run", func() bool { _, ok := runs.Load(uint32(1)); return ok })
	addr := srvM.ListenAddrs()[0]
	srv.Close()
	srvM.Shutdown()
	px.swallow.Store(false)
	px.swallow0.Store(false)
	px.resetAll()
	// The server comes back (new nonce) at the same address.
	losslessRPCServerAt(t, addr)
	select {
	case err := <-done:
		if !errors.Is(err, rpc.ErrUnreachable) {
			t.Fatalf("the call in flight when the peer reset the session: %v, want ErrUnreachable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the call in flight when the peer reset the session is still waiting after 10 s; the messenger reported %d remote resets, which the rpc layer does not handle", remoteResets.n.Load())
	}
}

func losslessRPCServerAt(t *testing.T, addr string) {
	m, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: 0}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	m.SetDefaultPolicy(msgr.StatefulServer())
	if err := m.Bind(addr); err != nil {
		t.Fatal(err)
	}
	_ = m.Start()
	t.Cleanup(m.Shutdown)
	s, err := rpc.New(rpc.Options{Messenger: m, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
		t.Fatal(err)
	}
}
