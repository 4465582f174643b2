package rpc_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
)

// The test protocol: base 1, version 1.
const (
	opEcho      = iota // pair in, pair{A+1, B+1} out (progress)
	opBytes            // Bytes in, the same Bytes out (inline)
	opHold             // held on the channel
	opOneWay           // one-way, handed to the channel
	opNoTimeout        // NoTimeout, held
	opFront            // QueueFront, held
	opPanic            // the handler panics
	opRemaining        // replies the remaining time in ms as pair.A
	opFail             // returns an error
)

func op(i uint16) rpc.Opcode { return rpc.MakeOpcode(1, 1, i) }

type holder struct {
	held   chan *rpc.Incoming
	oneway chan *rpc.Incoming
}

func newHolder() *holder {
	return &holder{held: make(chan *rpc.Incoming, 2048), oneway: make(chan *rpc.Incoming, 64)}
}

func testProto(h *holder) rpc.Protocol {
	if h == nil {
		h = newHolder()
	}
	return rpc.Protocol{Name: "test", Base: 1, Version: 1, RPCs: []rpc.RPC{
		opEcho: {Name: "echo", Handler: func(r *rpc.Incoming) error {
			var p pair
			if err := r.Decode(&p); err != nil {
				return err
			}
			return r.Reply(&pair{p.A + 1, p.B + 1})
		}},
		opBytes: {Name: "bytes", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
			var b rpc.Bytes
			if err := r.Decode(&b); err != nil {
				return err
			}
			return r.Reply(&b)
		}},
		opHold:      {Name: "hold", Handler: hold(h.held)},
		opOneWay:    {Name: "oneway", Flags: rpc.OneWay, Handler: func(r *rpc.Incoming) error { h.oneway <- r; return nil }},
		opNoTimeout: {Name: "notimeout", Flags: rpc.NoTimeout, Handler: hold(h.held)},
		opFront:     {Name: "front", Flags: rpc.QueueFront, Handler: hold(h.held)},
		opPanic:     {Name: "panic", Handler: func(r *rpc.Incoming) error { panic("handler bug") }},
		opRemaining: {Name: "remaining", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
			d, ok := r.Remaining()
			if !ok {
				return r.Reply(&pair{A: 1 << 31})
			}
			return r.Reply(&pair{A: uint32(d / time.Millisecond)})
		}},
		opFail: {Name: "fail", Handler: func(r *rpc.Incoming) error { return errors.New("disk on fire") }},
	}}
}

// setup starts server rank 0 (two contexts) and a client that knows it,
// both with the test protocol.
func setup(t *testing.T, so, co rpc.Options) (srv, cli *rpc.Instance, h *holder) {
	n := newNet()
	h = newHolder()
	srv = n.server(t, 0, 2, so, testProto(h))
	cli = n.client(t, co, []*rpc.Instance{srv}, testProto(nil))
	return srv, cli, h
}

func TestCall(t *testing.T) {
	checkGoroutines(t)
	_, cli, _ := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx := context.Background()
	for tag := range uint16(2) {
		var out pair
		if err := c.Call(ctx, rpc.Endpoint{Rank: 0, Tag: tag}, op(opEcho), &pair{1, 41}, &out); err != nil {
			t.Fatal(err)
		}
		if out != (pair{2, 42}) {
			t.Fatalf("echo: %+v", out)
		}
	}
	for _, n := range []int{0, 100, 20 << 10, 1 << 20} {
		in := rpc.Bytes(bytes.Repeat([]byte{7}, n))
		var out rpc.Bytes
		if err := c.Call(ctx, rpc.Endpoint{}, op(opBytes), &in, &out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("%d bytes: echo differs (%d bytes back)", n, len(out))
		}
	}
	if err := c.Ping(ctx, rpc.Endpoint{}); err != nil {
		t.Fatal(err)
	}
	// 7 calls and the URI lookup of tag 1.
	if st := c.Stats(); st.Replied != 8 || st.URILookups != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSendAndProgress(t *testing.T) {
	checkGoroutines(t)
	_, cli, _ := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{})
	const n = 50
	var inProgress atomic.Bool
	var got []uint32
	for i := range n {
		out := new(pair)
		_, err := c.Send(rpc.Request{Endpoint: rpc.Endpoint{Tag: uint16(i % 2)}, Opcode: op(opEcho), In: &pair{uint32(i), 0}, Out: out, Arg: i},
			func(cp rpc.Completion) {
				if !inProgress.Load() {
					t.Error("callback ran outside Progress")
				}
				if cp.Err != nil {
					t.Error(cp.Err)
					return
				}
				if p := cp.Request.Out.(*pair); p.A != uint32(cp.Request.Arg.(int))+1 {
					t.Errorf("request %d got %+v", cp.Request.Arg, p)
				}
				got = append(got, cp.Request.Out.(*pair).A)
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	inProgress.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ProgressUntil(ctx, func() bool { return len(got) == n }); err != nil {
		t.Fatalf("%v after %d callbacks", err, len(got))
	}
	inProgress.Store(false)
	// Nothing is left: Progress with no wait returns 0.
	if k, err := c.Progress(0); k != 0 || err != nil {
		t.Fatalf("Progress(0) = %d, %v", k, err)
	}
	// Progress with a timeout and nothing to do returns after it.
	if k, err := c.Progress(time.Millisecond); k != 0 || err != nil {
		t.Fatalf("Progress(1ms) = %d, %v", k, err)
	}
}

func TestAutoProgress(t *testing.T) {
	checkGoroutines(t)
	_, cli, _ := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	done := make(chan error, 1)
	if _, err := c.Send(rpc.Request{Opcode: op(opEcho), In: &pair{}, Out: new(pair)}, func(cp rpc.Completion) { done <- cp.Err }); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "callback"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Progress(0); !errors.Is(err, rpc.ErrAutoProgress) {
		t.Fatalf("Progress on an auto context: %v", err)
	}
}

func TestPinnedProgress(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("CPU pinning is Linux only")
	}
	checkGoroutines(t)
	_, cli, _ := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true, CPUs: []int{0}})
	done := make(chan error, 1)
	if _, err := c.Send(rpc.Request{Opcode: rpc.OpPing}, func(cp rpc.Completion) { done <- cp.Err }); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "callback"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.NewContext(rpc.ContextOptions{Auto: true, CPUs: []int{-1}}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("bad CPU: %v", err)
	}
	if _, err := cli.NewContext(rpc.ContextOptions{CPUs: []int{0}}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("CPUs without Auto: %v", err)
	}
}

// A handler that never replies: the caller gets the timeout exactly
// once, and the reply that comes afterwards is counted as late.
func TestNeverRepliesTimesOutOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		checkGoroutines(t)
		clk := newFakeClock()
		_, cli, h := setup(t, rpc.Options{}, rpc.Options{Clock: clk, Timeout: 10 * time.Second})
		c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
		var calls atomic.Int32
		errs := make(chan error, 4)
		if _, err := c.Send(rpc.Request{Opcode: op(opHold)}, func(cp rpc.Completion) {
			calls.Add(1)
			errs <- cp.Err
		}); err != nil {
			t.Fatal(err)
		}
		held := recv(t, h.held, "the request at the handler")
		clk.Advance(9 * time.Second)
		synctest.Wait() // every goroutine blocked: a wrong completion would be out
		select {
		case err := <-errs:
			t.Fatalf("completed before its timeout: %v", err)
		default:
		}
		clk.Advance(2 * time.Second)
		err := recv(t, errs, "the timeout")
		if !errors.Is(err, rpc.ErrTimedOut) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want a timeout", err)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%v is not a net.Error timeout", err)
		}
		// The handler answers after all: the reply is late and ignored.
		if err := held.Reply(nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the late reply", func() bool { return c.Stats().LateReplies == 1 })
		clk.Advance(time.Hour)
		if got := calls.Load(); got != 1 {
			t.Fatalf("callback ran %d times", got)
		}
		if st := c.Stats(); st.TimedOut != 1 || st.Replied != 0 || st.InFlight != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// Call with a short timeout (in virtual time), and the deadline visible to the
// handler.
func TestCallTimeoutAndDeadline(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		checkGoroutines(t)
		_, cli, h := setup(t, rpc.Options{}, rpc.Options{})
		c := newCtx(t, cli, rpc.ContextOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := c.Call(ctx, rpc.Endpoint{}, op(opHold), nil, nil)
		if !errors.Is(err, rpc.ErrTimedOut) {
			t.Fatalf("got %v", err)
		}
		// Virtual time: the timeout is exact, not stretched by a loaded machine.
		if d := time.Since(start); d < 50*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("timed out after %v", d)
		}
		held := recv(t, h.held, "held request")
		if _, ok := held.Deadline(); !ok {
			t.Fatal("no deadline in the header")
		}
		held.Reply(nil)

		// The handler sees the remaining time (request timeout 30 s).
		c.SetTimeout(30 * time.Second)
		var out pair
		if err := c.Call(context.Background(), rpc.Endpoint{}, op(opRemaining), nil, &out); err != nil {
			t.Fatal(err)
		}
		if out.A < 25_000 || out.A > 30_000 {
			t.Fatalf("handler saw %d ms remaining, want about 30000", out.A)
		}
		// A context that is already over fails at once.
		if err := c.Call(ctx, rpc.Endpoint{}, op(opEcho), &pair{}, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("expired ctx: %v", err)
		}
	})
}

func TestCallCanceled(t *testing.T) {
	checkGoroutines(t)
	_, cli, h := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, rpc.Endpoint{}, op(opHold), nil, nil) }()
	held := recv(t, h.held, "held request")
	cancel()
	err := recv(t, errc, "Call to return")
	if !errors.Is(err, rpc.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	held.Reply(nil)
}

// TestCallEndedContextSendsNothing: Call and SendContext with a ctx that
// has already ended (canceled, or past its deadline) fail at once with
// ErrCanceled or ErrTimedOut and send nothing: the target never runs a
// request its origin was told did not happen.
func TestCallEndedContextSendsNothing(t *testing.T) {
	checkGoroutines(t)
	srv, cli, _ := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"a canceled", canceled, rpc.ErrCanceled}, {"an expired", expired, rpc.ErrTimedOut}} {
		if err := c.Call(tc.ctx, rpc.Endpoint{}, op(opEcho), &pair{}, nil); !errors.Is(err, tc.want) || !errors.Is(err, tc.ctx.Err()) {
			t.Errorf("Call with %s ctx: %v, want %v and %v", tc.name, err, tc.want, tc.ctx.Err())
		}
		if _, err := c.SendContext(tc.ctx, rpc.Request{Opcode: op(opEcho), In: &pair{}}, nil); !errors.Is(err, tc.want) || !errors.Is(err, tc.ctx.Err()) {
			t.Errorf("SendContext with %s ctx: %v, want %v and %v", tc.name, err, tc.want, tc.ctx.Err())
		}
	}
	if err := c.Call(context.Background(), rpc.Endpoint{}, op(opEcho), &pair{}, nil); err != nil {
		t.Fatal(err) // the one request that is sent
	}
	if st := c.Stats(); st.Transmitted != 1 {
		t.Errorf("%d requests transmitted, want only the last one", st.Transmitted)
	}
	if st := srv.Context(0).Stats(); st.Received != 1 {
		t.Errorf("the target received %d requests, want 1", st.Received)
	}
}

// 1000 requests to one rank with 4 credits: never more than 4 in flight,
// all complete.
func TestCredits(t *testing.T) {
	checkGoroutines(t)
	srv, cli, h := setup(t, rpc.Options{}, rpc.Options{Credits: 4})
	_ = srv
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	const total, credits = 1000, 4
	var maxSeen atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the server's responder: answers in batches of 4
		defer wg.Done()
		var pending []*rpc.Incoming
		answered := 0
		for answered < total {
			select {
			case r := <-h.held:
				pending = append(pending, r)
			case <-stop:
				return
			}
			if n := int32(len(pending)); n > maxSeen.Load() {
				maxSeen.Store(n)
			}
			if len(pending) == credits || answered+len(pending) == total {
				for _, r := range pending {
					r.Reply(nil)
				}
				answered += len(pending)
				pending = pending[:0]
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	var ok atomic.Int32
	done := make(chan struct{})
	for range total {
		if _, err := c.Send(rpc.Request{Opcode: op(opHold)}, func(cp rpc.Completion) {
			if cp.Err != nil {
				t.Error(cp.Err)
			}
			if ok.Add(1) == total {
				close(done)
			}
		}); err != nil {
			t.Fatal(err)
		}
		if st := c.EndpointStats(0); st.InFlight > credits {
			t.Fatalf("%d in flight", st.InFlight)
		}
	}
	recv(t, done, "all completions")
	st := c.EndpointStats(0)
	if st.MaxInFlight != credits || st.InFlight != 0 || st.Waiting != 0 || st.Sent != total || st.Completed != total {
		t.Fatalf("endpoint stats %+v", st)
	}
	if st.Queued == 0 || st.MaxWaiting == 0 {
		t.Fatalf("nothing waited: %+v", st)
	}
	if m := maxSeen.Load(); m > credits {
		t.Fatalf("server saw %d requests at once", m)
	}
}

// QueueFront requests jump the wait queue.
func TestQueueFront(t *testing.T) {
	checkGoroutines(t)
	_, cli, h := setup(t, rpc.Options{}, rpc.Options{Credits: 1})
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	done := make(chan int, 3)
	send := func(o uint16, i uint32) {
		if _, err := c.Send(rpc.Request{Opcode: op(o), In: &pair{A: i}}, func(cp rpc.Completion) { done <- int(i) }); err != nil {
			t.Fatal(err)
		}
	}
	send(opHold, 1) // in flight
	first := recv(t, h.held, "first")
	send(opHold, 2)  // queued
	send(opFront, 3) // queued at the head
	first.Reply(nil)
	var order []uint32
	for range 2 {
		r := recv(t, h.held, "queued request")
		var p pair
		if err := r.Decode(&p); err != nil {
			t.Fatal(err)
		}
		order = append(order, p.A)
		r.Reply(nil)
	}
	if order[0] != 3 || order[1] != 2 {
		t.Fatalf("served in order %v, want [3 2]", order)
	}
	for range 3 {
		recv(t, done, "completion")
	}
}

// Abort a queued and a sent request.
func TestAbort(t *testing.T) {
	checkGoroutines(t)
	srv, cli, h := setup(t, rpc.Options{}, rpc.Options{Credits: 1})
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	errs := make(chan error, 2)
	cb := func(cp rpc.Completion) { errs <- cp.Err }
	sent, err := c.Send(rpc.Request{Opcode: op(opHold)}, cb)
	if err != nil {
		t.Fatal(err)
	}
	queued, err := c.Send(rpc.Request{Opcode: op(opHold)}, cb)
	if err != nil {
		t.Fatal(err)
	}
	held := recv(t, h.held, "sent request")
	if st := c.EndpointStats(0); st.InFlight != 1 || st.Waiting != 1 {
		t.Fatalf("stats %+v", st)
	}
	if !queued.Abort() {
		t.Fatal("abort of the queued request failed")
	}
	if err := recv(t, errs, "queued completion"); !errors.Is(err, rpc.ErrCanceled) {
		t.Fatalf("queued: %v", err)
	}
	if !sent.Abort() {
		t.Fatal("abort of the sent request failed")
	}
	if err := recv(t, errs, "sent completion"); !errors.Is(err, rpc.ErrCanceled) {
		t.Fatalf("sent: %v", err)
	}
	if sent.Abort() || queued.Abort() {
		t.Fatal("second abort succeeded")
	}
	held.Reply(nil)
	waitFor(t, "the late reply", func() bool { return c.Stats().LateReplies == 1 })
	// The queued request was never transmitted.
	if n := srv.Context(0).Stats().Received; n != 1 {
		t.Fatalf("server received %d requests", n)
	}
	if st := c.Stats(); st.Canceled != 2 || st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// An unknown opcode, a bad tag, a malformed payload, a failing and a
// panicking handler: typed errors at the caller, and the server keeps
// serving.
func TestTargetErrors(t *testing.T) {
	checkGoroutines(t)
	srv, cli, _ := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx := context.Background()
	ok := func() {
		t.Helper()
		var out pair
		if err := c.Call(ctx, rpc.Endpoint{}, op(opEcho), &pair{1, 2}, &out); err != nil || out != (pair{2, 3}) {
			t.Fatalf("server harmed: %v %+v", err, out)
		}
	}
	cases := []struct {
		name string
		ep   rpc.Endpoint
		op   rpc.Opcode
		in   rpc.Input
		out  rpc.Output
		want error
		text string
	}{
		{"unknown opcode", rpc.Endpoint{}, rpc.MakeOpcode(9, 9, 9), nil, nil, rpc.ErrUnregistered, "not registered"},
		{"unknown index", rpc.Endpoint{}, op(200), nil, nil, rpc.ErrUnregistered, ""},
		{"bad tag", rpc.Endpoint{Tag: 7}, op(opEcho), &pair{}, nil, rpc.ErrBadTarget, "tag 7"},
		{"short payload", rpc.Endpoint{}, op(opEcho), rawIn{1, 2, 3}, nil, rpc.ErrMalformed, "3 bytes"},
		{"long payload", rpc.Endpoint{}, op(opEcho), rawIn(make([]byte, 100)), nil, rpc.ErrMalformed, ""},
		{"handler error", rpc.Endpoint{}, op(opFail), nil, nil, rpc.ErrHandler, "disk on fire"},
		{"handler panic", rpc.Endpoint{}, op(opPanic), nil, nil, rpc.ErrHandler, "panicked"},
	}
	for _, tc := range cases {
		err := c.Call(ctx, tc.ep, tc.op, tc.in, tc.out)
		var e *rpc.Error
		if !errors.Is(err, tc.want) || !errors.As(err, &e) || !e.Remote || !contains(err.Error(), tc.text) {
			t.Errorf("%s: got %v, want remote %v with %q", tc.name, err, tc.want, tc.text)
		}
		ok()
	}
	// Local failures: an output that does not decode, an input that does
	// not encode, an output whose decoder panics.
	if err := c.Call(ctx, rpc.Endpoint{}, op(opBytes), rawIn("abc"), new(pair)); !errors.Is(err, rpc.ErrMalformed) {
		t.Errorf("bad output: %v", err)
	}
	if err := c.Call(ctx, rpc.Endpoint{}, op(opEcho), failingIn{}, nil); !errors.Is(err, rpc.ErrMalformed) {
		t.Errorf("bad input: %v", err)
	}
	if err := c.Call(ctx, rpc.Endpoint{}, op(opEcho), &pair{}, panicky{}); !errors.Is(err, rpc.ErrMalformed) {
		t.Errorf("panicking decoder: %v", err)
	}
	big := rpc.Bytes(make([]byte, rpc.MaxPayload+1))
	if err := c.Call(ctx, rpc.Endpoint{}, op(opBytes), &big, nil); !errors.Is(err, rpc.ErrTooLarge) {
		t.Errorf("too large: %v", err)
	}
	// Rank never in the group.
	if err := c.Call(ctx, rpc.Endpoint{Rank: 5}, op(opEcho), &pair{}, nil); !errors.Is(err, rpc.ErrNotFound) {
		t.Errorf("unknown rank: %v", err)
	}
	// A context that goes away after its URI was learned: the target
	// answers ErrShutdown (a tag it never had is ErrBadTarget, above).
	if err := c.Call(ctx, rpc.Endpoint{Tag: 1}, op(opEcho), &pair{}, nil); err != nil {
		t.Fatal(err)
	}
	srv.Context(1).Close()
	var e *rpc.Error
	if err := c.Call(ctx, rpc.Endpoint{Tag: 1}, op(opEcho), &pair{}, nil); !errors.Is(err, rpc.ErrShutdown) || !errors.As(err, &e) || !e.Remote || !contains(err.Error(), "closed") {
		t.Errorf("closed context: %v, want a remote ErrShutdown", err)
	}
	ok()
}

// TestClosedContextLookup: an origin that has not learned the URI of a
// closed context's tag asks the rank for it and is answered ErrShutdown,
// as a request to that context is; a tag the rank never had stays
// ErrBadTarget.
func TestClosedContextLookup(t *testing.T) {
	n := newNet()
	srv := n.server(t, 0, 2, rpc.Options{}, testProto(newHolder()))
	srv.Context(1).Close()
	cli := n.client(t, rpc.Options{}, []*rpc.Instance{srv}, testProto(nil))
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Call(ctx, rpc.Endpoint{Tag: 1}, op(opEcho), &pair{}, nil); !errors.Is(err, rpc.ErrShutdown) {
		t.Errorf("closed tag, URI not known yet: %v, want ErrShutdown", err)
	}
	if err := c.Call(ctx, rpc.Endpoint{Tag: 9}, op(opEcho), &pair{}, nil); !errors.Is(err, rpc.ErrBadTarget) {
		t.Errorf("tag never had: %v, want ErrBadTarget", err)
	}
}

// A message of the request type whose RPC header is garbage is dropped;
// the server keeps serving.
func TestMalformedHeader(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	srv := n.server(t, 0, 1, rpc.Options{}, testProto(newHolder()))
	m, err := msgr.New(msgr.Config{Transports: n.reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	// Each bad message closes the connection that sent it.
	for i, front := range [][]byte{nil, {1}, {1, 0, 40, 0, 5}, {9, 9, 9, 9, 9}, bytes.Repeat([]byte{0xff}, 64)} {
		conn, err := m.Connect(srv.URI())
		if err != nil {
			t.Fatal(err)
		}
		bad := msg.New(0xFE00)
		bad.Header.Tid = 1
		bad.SetSegments(front, nil, []byte("data"))
		if err := conn.Send(bad); err != nil {
			t.Fatal(err)
		}
		select {
		case <-conn.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("bad message %d: its connection is still up", i)
		}
		if got := srv.MalformedMessages(); got != uint64(i+1) {
			t.Fatalf("bad message %d: %d counted", i, got)
		}
	}
	cli := n.client(t, rpc.Options{}, []*rpc.Instance{srv}, testProto(nil))
	c := newCtx(t, cli, rpc.ContextOptions{})
	if err := c.Ping(context.Background(), rpc.Endpoint{}); err != nil {
		t.Fatal(err)
	}
}

func TestOneWay(t *testing.T) {
	checkGoroutines(t)
	_, cli, h := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{})
	if err := c.Call(context.Background(), rpc.Endpoint{}, op(opOneWay), &pair{A: 5}, nil); err != nil {
		t.Fatal(err)
	}
	r := recv(t, h.oneway, "one-way request")
	if !r.OneWay() || r.Opcode() != op(opOneWay) {
		t.Fatalf("one-way: %v %v", r.OneWay(), r.Opcode())
	}
	if got := c.Stats(); got.Replied != 1 || got.InFlight != 0 {
		t.Fatalf("stats %+v", got)
	}
}

func TestNoTimeout(t *testing.T) {
	checkGoroutines(t)
	clk := newFakeClock()
	_, cli, h := setup(t, rpc.Options{}, rpc.Options{Clock: clk, Timeout: time.Second})
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	errs := make(chan error, 1)
	if _, err := c.Send(rpc.Request{Opcode: op(opNoTimeout)}, func(cp rpc.Completion) { errs <- cp.Err }); err != nil {
		t.Fatal(err)
	}
	held := recv(t, h.held, "request")
	if _, ok := held.Deadline(); ok {
		t.Fatal("a NoTimeout request carries a deadline")
	}
	clk.Advance(2 * rpc.MaxTimeout)
	// A timed request sent after it times out, proving the timer ran.
	if _, err := c.Send(rpc.Request{Opcode: op(opHold)}, func(cp rpc.Completion) { errs <- cp.Err }); err != nil {
		t.Fatal(err)
	}
	recv(t, h.held, "timed request")
	clk.Advance(2 * time.Second)
	if err := recv(t, errs, "timed request's timeout"); !errors.Is(err, rpc.ErrTimedOut) {
		t.Fatalf("timed request: %v", err)
	}
	held.Reply(nil)
	if err := recv(t, errs, "NoTimeout reply"); err != nil {
		t.Fatalf("NoTimeout request: %v", err)
	}
}

// A rank removed from the group while requests to it are queued: they
// all complete with ErrExcluded.
func TestRankRemovedWhileQueued(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	h := newHolder()
	s0 := n.server(t, 0, 1, rpc.Options{}, testProto(h))
	s1 := n.server(t, 1, 1, rpc.Options{}, testProto(h))
	cli := n.client(t, rpc.Options{Credits: 1}, []*rpc.Instance{s0, s1}, testProto(nil))
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	errs := make(chan error, 8)
	for range 3 {
		if _, err := c.Send(rpc.Request{Endpoint: rpc.Endpoint{Rank: 1}, Opcode: op(opHold)}, func(cp rpc.Completion) { errs <- cp.Err }); err != nil {
			t.Fatal(err)
		}
	}
	held := recv(t, h.held, "request at rank 1")
	if st := c.EndpointStats(1); st.InFlight != 1 || st.Waiting != 2 {
		t.Fatalf("stats %+v", st)
	}
	v := cli.Group().Version()
	if err := cli.Group().Remove(1); err != nil {
		t.Fatal(err)
	}
	if cli.Group().Version() != v+1 || cli.Group().Has(1) {
		t.Fatal("rank 1 still in the group")
	}
	for range 3 {
		if err := recv(t, errs, "excluded completion"); !errors.Is(err, rpc.ErrExcluded) {
			t.Fatalf("got %v", err)
		}
	}
	held.Reply(nil)
	if err := c.Call(context.Background(), rpc.Endpoint{Rank: 1}, op(opEcho), &pair{}, nil); !errors.Is(err, rpc.ErrExcluded) {
		t.Fatalf("call to removed rank: %v", err)
	}
	if err := c.Call(context.Background(), rpc.Endpoint{Rank: 0}, op(opEcho), &pair{}, new(pair)); err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	// Three queued or in flight when rank 1 left, and the call after.
	if st := c.Stats(); st.Excluded != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// Requests whose connection fails complete with ErrUnreachable at once.
func TestConnectionFailure(t *testing.T) {
	checkGoroutines(t)
	srv, cli, h := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	errs := make(chan error, 1)
	if _, err := c.Send(rpc.Request{Opcode: op(opHold)}, func(cp rpc.Completion) { errs <- cp.Err }); err != nil {
		t.Fatal(err)
	}
	recv(t, h.held, "request")
	srv.Close()
	if err := recv(t, errs, "failure"); !errors.Is(err, rpc.ErrUnreachable) {
		t.Fatalf("got %v", err)
	}
	// Sending to the dead address fails too (refused), without a timeout.
	if err := c.Call(context.Background(), rpc.Endpoint{}, op(opEcho), &pair{}, nil); !errors.Is(err, rpc.ErrUnreachable) {
		t.Fatalf("after close: %v", err)
	}
}

// The URI of a tag other than 0 is looked up from the rank's tag 0, once.
func TestURILookup(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	s0 := n.server(t, 0, 3, rpc.Options{}, testProto(nil))
	s1 := n.server(t, 1, 3, rpc.Options{}, testProto(nil))
	cli := n.client(t, rpc.Options{}, []*rpc.Instance{s0, s1}, testProto(nil))
	c := newCtx(t, cli, rpc.ContextOptions{})
	if _, err := cli.Group().URI(1, 2); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("URI known before lookup: %v", err)
	}
	var wg sync.WaitGroup
	for range 8 { // concurrent requests share one lookup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out pair
			if err := c.Call(context.Background(), rpc.Endpoint{Rank: 1, Tag: 2}, op(opEcho), &pair{1, 1}, &out); err != nil || out.A != 2 {
				t.Errorf("call: %v %+v", err, out)
			}
		}()
	}
	wg.Wait()
	if u, err := cli.Group().URI(1, 2); err != nil || u != s1.URI() {
		t.Fatalf("learned %q, %v", u, err)
	}
	if got := c.Stats().URILookups; got != 1 {
		t.Fatalf("%d lookups", got)
	}
	// A tag that does not exist: the lookup fails, the request with it.
	err := c.Call(context.Background(), rpc.Endpoint{Rank: 1, Tag: 9}, op(opEcho), &pair{}, nil)
	if !errors.Is(err, rpc.ErrBadTarget) {
		t.Fatalf("missing tag: %v", err)
	}
	// Servers find each other's tags the same way.
	sc := newCtx(t, s0, rpc.ContextOptions{})
	if err := s0.Group().Add(1, s1.URI()); err != nil {
		t.Fatal(err)
	}
	if err := sc.Call(context.Background(), rpc.Endpoint{Rank: 1, Tag: 1}, op(opEcho), &pair{}, new(pair)); err != nil {
		t.Fatal(err)
	}
}

func TestProtoQuery(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	var ps []rpc.Protocol
	for _, v := range []uint8{1, 3} {
		ps = append(ps, rpc.Protocol{Name: "p", Base: 5, Version: v, RPCs: []rpc.RPC{{Handler: func(r *rpc.Incoming) error { return r.Reply(nil) }}}})
	}
	srv := n.server(t, 0, 1, rpc.Options{}, ps...)
	cli := n.client(t, rpc.Options{}, []*rpc.Instance{srv})
	c := newCtx(t, cli, rpc.ContextOptions{})
	v, err := c.ProtoQuery(context.Background(), rpc.Endpoint{}, 5, []uint8{1, 2, 3, 4})
	if err != nil || v != 3 {
		t.Fatalf("got %d, %v", v, err)
	}
	if _, err := c.ProtoQuery(context.Background(), rpc.Endpoint{}, 5, []uint8{2}); !errors.Is(err, rpc.ErrUnregistered) {
		t.Fatalf("missing version: %v", err)
	}
	if got := srv.Versions(5); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("versions %v", got)
	}
}

func TestRegister(t *testing.T) {
	in, err := rpc.New(rpc.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p := rpc.Protocol{Name: "p", Base: 3, Version: 0, RPCs: []rpc.RPC{{}}}
	if err := in.Register(p); err != nil {
		t.Fatal(err)
	}
	if err := in.Register(p); !errors.Is(err, rpc.ErrExists) {
		t.Fatalf("twice: %v", err)
	}
	p.Base = rpc.BaseSelfTest
	if err := in.Register(p); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("reserved base: %v", err)
	}
	p.Base, p.RPCs = 4, nil
	if err := in.Register(p); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("empty: %v", err)
	}
	o := rpc.MakeOpcode(0xF2, 3, 0x1234)
	if o.Base() != 0xF2 || o.Version() != 3 || o.Index() != 0x1234 || uint32(o) != 0xF2031234 {
		t.Fatalf("opcode %v", o)
	}
}

func TestCloseCompletesEverything(t *testing.T) {
	checkGoroutines(t)
	_, cli, h := setup(t, rpc.Options{}, rpc.Options{Credits: 1})
	manual := newCtx(t, cli, rpc.ContextOptions{})
	auto := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	var calls atomic.Int32
	cb := func(cp rpc.Completion) {
		if !errors.Is(cp.Err, rpc.ErrShutdown) {
			t.Errorf("got %v", cp.Err)
		}
		calls.Add(1)
	}
	for _, c := range []*rpc.Context{manual, auto} {
		for range 3 {
			if _, err := c.Send(rpc.Request{Opcode: op(opHold)}, cb); err != nil {
				t.Fatal(err)
			}
		}
	}
	recv(t, h.held, "request")
	recv(t, h.held, "request")
	callErr := make(chan error, 1)
	go func() { callErr <- manual.Call(context.Background(), rpc.Endpoint{}, op(opHold), nil, nil) }()
	waitFor(t, "the call to queue", func() bool { return manual.EndpointStats(0).Waiting == 3 })
	cli.Close()
	if got := calls.Load(); got != 6 {
		t.Fatalf("%d callbacks ran by Close", got)
	}
	if err := recv(t, callErr, "Call"); !errors.Is(err, rpc.ErrShutdown) {
		t.Fatalf("Call: %v", err)
	}
	if _, err := manual.Send(rpc.Request{Opcode: op(opEcho)}, cb); !errors.Is(err, rpc.ErrShutdown) {
		t.Fatalf("Send after close: %v", err)
	}
	if _, err := manual.Progress(0); !errors.Is(err, rpc.ErrShutdown) {
		t.Fatalf("Progress after close: %v", err)
	}
	if _, err := cli.NewContext(rpc.ContextOptions{}); !errors.Is(err, rpc.ErrShutdown) {
		t.Fatalf("NewContext after close: %v", err)
	}
	for range 2 { // let the server's held requests go
		select {
		case r := <-h.held:
			r.Reply(nil)
		default:
		}
	}
}

func TestContextTags(t *testing.T) {
	in, err := rpc.New(rpc.Options{MaxContexts: 2, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	c0 := newCtx(t, in, rpc.ContextOptions{})
	c1 := newCtx(t, in, rpc.ContextOptions{Timeout: time.Second})
	if c0.Tag() != 0 || c1.Tag() != 1 || in.Context(1) != c1 || c1.Timeout() != time.Second || c0.Timeout() != rpc.DefaultTimeout {
		t.Fatal("tags or timeouts")
	}
	if _, err := in.NewContext(rpc.ContextOptions{}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("third context: %v", err)
	}
	c0.Close()
	c2 := newCtx(t, in, rpc.ContextOptions{})
	if c2.Tag() != 0 {
		t.Fatalf("reused tag %d", c2.Tag())
	}
	if in.Rank() != rpc.RankNone || in.URI() != "" {
		t.Fatal("client has a rank")
	}
	if _, err := rpc.New(rpc.Options{MaxContexts: rpc.MaxContexts + 1}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("bad options: %v", err)
	}
}
