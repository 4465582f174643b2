package msgr_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// TestConnContextEnds: the context a connection's own waits use ends
// when the connection is marked down, and at Shutdown for a connection
// still dialing a peer that is not there.
func TestConnContextEnds(t *testing.T) {
	type key struct{}
	m, err := msgr.New(msgr.Config{Transports: transport.Default, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	// Port 1 on loopback refuses: both connections keep redialing.
	a, err := m.Connect("tcp://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Connect("tcp://127.0.0.2:1")
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := a.WaitContext(), b.WaitContext()
	for _, ctx := range []context.Context{ca, cb} {
		if err := ctx.Err(); err != nil {
			t.Fatalf("open connection's context: %v", err)
		}
		if _, ok := ctx.Deadline(); ok {
			t.Fatal("a connection's context has a deadline")
		}
		if v := ctx.Value(key{}); v != nil {
			t.Fatalf("Value = %v", v)
		}
	}
	ended := func(name string, ctx context.Context) {
		t.Helper()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: context not done", name)
		}
		if err := ctx.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: Err = %v, want context.Canceled", name, err)
		}
	}
	a.MarkDown()
	ended("marked down", ca)
	if err := cb.Err(); err != nil {
		t.Fatalf("the other connection's context ended with it: %v", err)
	}
	m.Shutdown()
	ended("shut down", cb)
}
