package rpc_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var netSeq atomic.Uint64

// testNet is an in-process network and a unique prefix for its names.
type testNet struct {
	reg    *transport.Registry
	prefix string
}

func newNet() *testNet {
	return &testNet{
		reg:    transport.NewRegistry(inproc.NewNetwork()),
		prefix: fmt.Sprintf("inproc://t%d-", netSeq.Add(1)),
	}
}

// server starts a listening instance of rank with ntags contexts (Auto
// progress) and registers protos on it.
func (n *testNet) server(t testing.TB, rank uint32, ntags int, o rpc.Options, protos ...rpc.Protocol) *rpc.Instance {
	t.Helper()
	o.Listen = fmt.Sprintf("%srank%d", n.prefix, rank)
	o.Rank = rank
	o.Transports = n.reg
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	in, err := rpc.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	for _, p := range protos {
		if err := in.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	for range ntags {
		if _, err := in.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
			t.Fatal(err)
		}
	}
	return in
}

// client starts a client-only instance that knows the servers (by rank)
// and registers protos on it.
func (n *testNet) client(t testing.TB, o rpc.Options, servers []*rpc.Instance, protos ...rpc.Protocol) *rpc.Instance {
	t.Helper()
	o.Transports = n.reg
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	in, err := rpc.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	for _, p := range protos {
		if err := in.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range servers {
		if err := in.Group().Add(s.Rank(), s.URI()); err != nil {
			t.Fatal(err)
		}
	}
	return in
}

func newCtx(t testing.TB, in *rpc.Instance, o rpc.ContextOptions) *rpc.Context {
	t.Helper()
	c, err := in.NewContext(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkGoroutines fails t if, after its other cleanups (registered
// later, so run earlier), the number of goroutines does not come back to
// what it was when checkGoroutines was called.
func checkGoroutines(t *testing.T) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= base {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				// In a synctest bubble the deadline is virtual and passes
				// at once while a goroutine outside the bubble is still
				// exiting: count what the dump shows, which a leaked
				// goroutine stays in.
				if shown := bytes.Count(buf, []byte("\ngoroutine ")) + 1; shown <= base {
					return
				}
				t.Errorf("%d goroutines left, %d before:\n%s", n, base, buf)
				return
			}
			runtime.Gosched()
			time.Sleep(time.Millisecond) // polling for goroutine exit, bounded by the deadline
		}
	})
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond) // polling, bounded by the deadline
	}
}

// recv receives from ch within 10 s.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// pair is a test Input/Output: two little-endian uint32s.
type pair struct{ A, B uint32 }

func (p *pair) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint32(b, p.A)
	return binary.LittleEndian.AppendUint32(b, p.B), nil
}

func (p *pair) UnmarshalBinary(b []byte) error {
	if len(b) != 8 {
		return fmt.Errorf("pair: %d bytes, want 8", len(b))
	}
	p.A = binary.LittleEndian.Uint32(b)
	p.B = binary.LittleEndian.Uint32(b[4:])
	return nil
}

// rawIn is an Input whose encoding is the bytes as they are.
type rawIn []byte

func (r rawIn) AppendBinary(b []byte) ([]byte, error) { return append(b, r...), nil }

// panicky is an Output whose decoder panics.
type panicky struct{}

func (panicky) UnmarshalBinary([]byte) error { panic("decoder bug") }

// failingIn is an Input whose encoder fails.
type failingIn struct{}

func (failingIn) AppendBinary(b []byte) ([]byte, error) { return b, errors.New("cannot encode") }

// fakeClock is a Clock that moves only when told.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_700_000_000, 0), timers: map[*fakeTimer]struct{}{}}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) rpc.Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.when.After(c.now) {
			delete(c.timers, t)
			select {
			case t.ch <- c.now:
			default:
			}
		}
	}
}

type fakeTimer struct {
	c    *fakeClock
	ch   chan time.Time
	when time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, active := t.c.timers[t]
	delete(t.c.timers, t)
	select {
	case <-t.ch:
	default:
	}
	return active
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.Stop()
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.when = t.c.now.Add(d)
	if d <= 0 {
		t.ch <- t.c.now
		return
	}
	t.c.timers[t] = struct{}{}
}

// hold is a handler that keeps every request it gets on a channel,
// unanswered.
func hold(ch chan *rpc.Incoming) rpc.Handler {
	return func(r *rpc.Incoming) error {
		ch <- r
		return nil
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
