package msgr_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// TestCorkHoldsUntilUncork: what is sent on a corked connection stays
// queued, from every goroutine, until the last Uncork writes it all; a
// goroutine waiting in Await meanwhile has it written first.
func TestCorkHoldsUntilUncork(t *testing.T) {
	conn, a := awaitPair(t)
	awaitReply(t, conn, a, 1) // open, and the inline path in use
	conn.Cork()
	conn.Cork() // corks nest
	var wg sync.WaitGroup
	for tid := uint64(2); tid <= 5; tid++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := msg.New(testType)
			m.Header.Tid = tid
			if err := conn.Send(m); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := conn.Queued(); n != 4 {
		t.Fatalf("%d messages queued while corked, want 4", n)
	}
	conn.Uncork()
	if n := conn.Queued(); n != 4 {
		t.Fatalf("%d messages queued after the inner Uncork, want 4", n)
	}
	conn.Uncork() // written now, or by the write side's owner
	got := map[uint64]bool{}
	for len(got) < 4 {
		select {
		case r := <-a.replies:
			got[r.Header.Tid] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("replies %v after Uncork", got)
		}
	}
	// Corked, a sender that then waits in Await for its reply gets it.
	conn.Cork()
	defer conn.Uncork()
	awaitReply(t, conn, a, 6)
}

// TestUncorkWithoutCork panics rather than leave the count negative.
func TestUncorkWithoutCork(t *testing.T) {
	conn, _ := awaitPair(t)
	defer func() {
		if recover() == nil {
			t.Fatal("Uncork without Cork did not panic")
		}
	}()
	conn.Uncork()
}

// TestAwaitDepthFastDispatch: several goroutines each with requests in
// flight on one connection, their replies fast-dispatched: the reader
// that delivers a burst leaves the woken callers' next requests for its
// own write (the write-ownership protocol's deferral) and every reply
// still arrives.
func TestAwaitDepthFastDispatch(t *testing.T) {
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{})
	const workers, each = 16, 200
	var chans [workers]chan struct{}
	for i := range chans {
		chans[i] = make(chan struct{}, 1)
	}
	c, _ := newAwaitClient(t, msgr.Config{})
	c.AddDispatcherHead(fastFunc(func(m *msg.Message) {
		chans[m.Header.Tid%workers] <- struct{}{}
		m.Conn.(*msgr.Conn).Nudge()
	}))
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range awaitWorkers(conn, chans[:], each) {
		t.Error(err)
	}
}

// fastFunc is a FastDispatcher taking every message of testType.
type fastFunc func(*msg.Message)

func (f fastFunc) CanFastDispatch(m *msg.Message) bool { return m.Header.Type == testType }
func (f fastFunc) FastDispatch(m *msg.Message)         { f(m) }
func (f fastFunc) Dispatch(m *msg.Message) bool        { f(m); return true }

// TestBurstWritesRepliesEarly: a reader that finds many frames buffered
// writes the replies its FastDispatcher queued before it has read them
// all (burstReads), so that the peer works on them meanwhile: at 16
// requests in flight this overlap is what keeps both processes busy
// (BENCHMARKS.md, "16 in flight, session 19"). The client sends 8
// requests, half a window of 16, in one write; the server's dispatcher,
// given the last of them, waits (up to a bound) for the client to have
// the reply to the first. A reader that wrote only when its buffer ran
// dry, or once per 8 frames (as before session 19), would make it wait
// out the bound. Every reply still arrives, in order.
func TestBurstWritesRepliesEarly(t *testing.T) {
	const n = 8
	first := make(chan struct{}) // closed once the client has reply 1
	var early atomic.Bool
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{})
	s.AddDispatcherHead(fastFunc(func(m *msg.Message) {
		if m.Header.Tid == n { // the last of the burst (tids 1..n)
			select {
			case <-first:
				early.Store(true)
			case <-time.After(3 * time.Second):
			}
		}
		r := msg.New(m.Header.Type)
		r.Header.Tid = m.Header.Tid
		_ = m.Conn.Send(r)
	}))
	c, col := newClient(t, transport.Default, msgr.Config{})
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	send := func(tid uint64) {
		m := msg.New(testType)
		m.Header.Tid = tid
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	// One round trip first, so that the connection is open and the
	// burst below goes out in one write.
	send(0)
	if m := recv(t, col.ch); m.Header.Tid != 0 {
		t.Fatalf("first reply has tid %d", m.Header.Tid)
	}
	conn.Cork()
	for i := uint64(1); i <= n; i++ {
		send(i)
	}
	conn.Uncork()
	for i := uint64(1); i <= n; i++ {
		if m := recv(t, col.ch); m.Header.Tid != i {
			t.Fatalf("reply %d has tid %d", i, m.Header.Tid)
		}
		if i == 1 {
			close(first)
		}
	}
	if !early.Load() {
		t.Fatalf("the reader had not written the first reply of a burst of %d frames when it dispatched the last", n)
	}
}
