package rpc_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
)

// Replies racing timeouts: with timeouts about as long as the handler
// takes, every request still completes exactly once, and the replies that
// lose the race are counted as late.
func TestReplyRacesTimeout(t *testing.T) {
	checkGoroutines(t)
	_, cli, h := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{Auto: true})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case r := <-h.held:
				time.Sleep(time.Duration(len(h.held)%3) * 100 * time.Microsecond) // the handler's work, not a wait for state
				r.Reply(nil)
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	const n = 300
	counts := make([]atomic.Int32, n)
	var done, timedOut atomic.Int32
	all := make(chan struct{})
	for i := range n {
		_, err := c.Send(rpc.Request{Opcode: op(opHold), Timeout: time.Duration(100+i%7*100) * time.Microsecond, Arg: i},
			func(cp rpc.Completion) {
				if counts[cp.Request.Arg.(int)].Add(1) != 1 {
					t.Errorf("request %d completed twice", cp.Request.Arg)
				}
				if cp.Err != nil {
					if !errors.Is(cp.Err, rpc.ErrTimedOut) {
						t.Errorf("request %d: %v", cp.Request.Arg, cp.Err)
					}
					timedOut.Add(1)
				}
				if done.Add(1) == n {
					close(all)
				}
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	recv(t, all, "all completions")
	st := c.Stats()
	if int(st.Replied+st.TimedOut) != n || int(st.TimedOut) != int(timedOut.Load()) {
		t.Fatalf("stats %+v, %d timed out", st, timedOut.Load())
	}
	// Every request the server answered after its timeout shows up as a
	// late reply (eventually: the server may still be answering).
	waitFor(t, "late replies", func() bool {
		s := c.Stats()
		return s.LateReplies <= s.TimedOut && s.InFlight == 0
	})
}

// An Instance joins an existing messenger: RPCs and the messenger's other
// messages share one address.
func TestJoinMessenger(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	m, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityMon, Num: 0}, Transports: n.reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	others := make(chan uint16, 1)
	m.AddDispatcherTail(msgr.DispatcherFunc(func(mm *msg.Message) bool {
		others <- mm.Header.Type
		return true
	}))
	if err := m.Bind(n.prefix + "mon"); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	srv, err := rpc.New(rpc.Options{Messenger: m, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.Rank() != 0 || srv.URI() != m.ListenAddrs()[0] {
		t.Fatalf("rank %d uri %q", srv.Rank(), srv.URI())
	}
	newCtx(t, srv, rpc.ContextOptions{Auto: true})
	cli := n.client(t, rpc.Options{}, []*rpc.Instance{srv})
	c := newCtx(t, cli, rpc.ContextOptions{})
	if err := c.Ping(context.Background(), rpc.Endpoint{}); err != nil {
		t.Fatal(err)
	}
	// A non-RPC message to the same messenger goes to its own dispatcher.
	cm, err := msgr.New(msgr.Config{Transports: n.reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := cm.Start(); err != nil {
		t.Fatal(err)
	}
	defer cm.Shutdown()
	conn, err := cm.Connect(srv.URI())
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Send(msg.New(0x7001)); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, others, "the other message"); got != 0x7001 {
		t.Fatalf("type %#x", got)
	}
	if _, err := rpc.New(rpc.Options{Messenger: m, Listen: "tcp://127.0.0.1:0"}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("Listen with Messenger: %v", err)
	}
	srv.Close()
	// After Close the instance no longer answers; the messenger lives on.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Ping(ctx, rpc.Endpoint{}); !errors.Is(err, rpc.ErrTimedOut) {
		t.Fatalf("ping after close: %v", err)
	}
}

func TestIncomingAccessors(t *testing.T) {
	checkGoroutines(t)
	_, cli, h := setup(t, rpc.Options{}, rpc.Options{})
	c := newCtx(t, cli, rpc.ContextOptions{})
	errc := make(chan error, 1)
	go func() { errc <- c.Call(context.Background(), rpc.Endpoint{Tag: 1}, op(opHold), &pair{7, 8}, nil) }()
	r := recv(t, h.held, "request")
	if r.Source() != (rpc.Endpoint{Rank: rpc.RankNone, Tag: c.Tag()}) || r.Opcode() != op(opHold) || r.OneWay() || r.Target().Tag() != 1 {
		t.Fatalf("source %v opcode %v", r.Source(), r.Opcode())
	}
	if r.GroupVersion() != cli.Group().Version() {
		t.Fatalf("group version %d", r.GroupVersion())
	}
	ctx, cancel := r.Context(context.Background())
	dl, ok := ctx.Deadline()
	cancel()
	if d, _ := r.Deadline(); !ok || !dl.Equal(d) {
		t.Fatalf("context deadline %v", dl)
	}
	var p pair
	if err := r.Decode(&p); err != nil || p != (pair{7, 8}) {
		t.Fatalf("decode %v %+v", err, p)
	}
	if err := r.Fail(errors.New("nope")); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, errc, "call"); !errors.Is(err, rpc.ErrHandler) || !contains(err.Error(), "nope") {
		t.Fatalf("got %v", err)
	}
}

func TestDoubleReply(t *testing.T) {
	checkGoroutines(t)
	n := newNet()
	second := make(chan error, 1)
	p := rpc.Protocol{Name: "d", Base: 4, Version: 0, RPCs: []rpc.RPC{{Handler: func(r *rpc.Incoming) error {
		if err := r.Reply(&pair{1, 1}); err != nil {
			return err
		}
		second <- r.Reply(&pair{2, 2})
		return nil
	}}}}
	srv := n.server(t, 0, 1, rpc.Options{}, p)
	cli := n.client(t, rpc.Options{}, []*rpc.Instance{srv})
	c := newCtx(t, cli, rpc.ContextOptions{})
	var out pair
	if err := c.Call(context.Background(), rpc.Endpoint{}, rpc.MakeOpcode(4, 0, 0), nil, &out); err != nil || out.A != 1 {
		t.Fatalf("%v %+v", err, out)
	}
	if err := recv(t, second, "second reply"); !errors.Is(err, rpc.ErrAlreadyReplied) {
		t.Fatalf("second reply: %v", err)
	}
}

func TestProgressUnblockedByClose(t *testing.T) {
	checkGoroutines(t)
	in, err := rpc.New(rpc.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	c := newCtx(t, in, rpc.ContextOptions{})
	errc := make(chan error, 2)
	go func() {
		_, err := c.Progress(-1)
		errc <- err
	}()
	go func() { errc <- c.ProgressUntil(context.Background(), func() bool { return false }) }()
	c.Close()
	for range 2 {
		if err := recv(t, errc, "progress"); !errors.Is(err, rpc.ErrShutdown) {
			t.Fatalf("got %v", err)
		}
	}
}

// Spin: Call and progress busy-poll before blocking; results are the same.
func TestSpin(t *testing.T) {
	checkGoroutines(t)
	_, cli, _ := setup(t, rpc.Options{}, rpc.Options{})
	for _, o := range []rpc.ContextOptions{{Spin: 20 * time.Microsecond}, {Spin: 20 * time.Microsecond, Auto: true}} {
		c := newCtx(t, cli, o)
		var out pair
		if err := c.Call(context.Background(), rpc.Endpoint{}, op(opEcho), &pair{1, 1}, &out); err != nil || out.A != 2 {
			t.Fatalf("%+v: %v %+v", o, err, out)
		}
		done := make(chan error, 1)
		if _, err := c.Send(rpc.Request{Opcode: rpc.OpPing}, func(cp rpc.Completion) { done <- cp.Err }); err != nil {
			t.Fatal(err)
		}
		if !o.Auto {
			if err := c.ProgressUntil(context.Background(), func() bool { return len(done) == 1 }); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Progress(time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		if err := recv(t, done, "ping"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOptionsWithMessenger: the options that configure the instance's own
// messenger are refused with an existing one.
func TestOptionsWithMessenger(t *testing.T) {
	m, err := msgr.New(msgr.Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	for _, o := range []rpc.Options{
		{Messenger: m, Listen: "tcp://127.0.0.1:0"},
		{Messenger: m, NoDataCRC: true},
		{Messenger: m, BusyPoll: time.Microsecond},
	} {
		in, err := rpc.New(o)
		if !errors.Is(err, rpc.ErrInvalid) {
			if in != nil {
				in.Close()
			}
			t.Fatalf("%+v: %v, want ErrInvalid", o, err)
		}
	}
}
