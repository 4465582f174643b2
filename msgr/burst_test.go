package msgr_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

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
	first := make(chan struct{})
	var early atomic.Bool
	var dispatched atomic.Int32
	s, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: 0}, Transports: transport.Default, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	s.AddDispatcherHead(fastFunc(func(m *msg.Message) {
		if m.Header.Tid == uint64(n) { // the last of the burst (tids 1..n)
			select {
			case <-first:
				early.Store(true)
			case <-time.After(3 * time.Second):
			}
		}
		dispatched.Add(1)
		r := msg.New(m.Header.Type)
		r.Header.Tid = m.Header.Tid
		r.Front = m.Front
		_ = m.Conn.Send(r)
	}))
	if err := s.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)

	c, _ := newClient(t, transport.Default, msgr.Config{})
	got := make(chan *msg.Message, 2*n)
	c.AddDispatcherHead(msgr.DispatcherFunc(func(m *msg.Message) bool {
		if m.Header.Tid == 1 {
			close(first)
		}
		got <- m
		return true
	}))
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	send := func(tid uint64) {
		m := msg.New(testType)
		m.Header.Tid = tid
		m.Front = msg.Buffers{[]byte("burst")}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	// One round trip first, so that the connection is open and the
	// burst below goes out in one write.
	send(0)
	if m := recv(t, got); m.Header.Tid != 0 {
		t.Fatalf("first reply has tid %d", m.Header.Tid)
	}
	conn.Cork()
	for i := 1; i <= n; i++ {
		send(uint64(i))
	}
	conn.Uncork()
	for i := 1; i <= n; i++ {
		if m := recv(t, got); m.Header.Tid != uint64(i) {
			t.Fatalf("reply %d has tid %d", i, m.Header.Tid)
		}
	}
	if !early.Load() {
		t.Fatalf("the reader had not written the first reply of a burst of %d frames when it dispatched the last", n)
	}
	if d := dispatched.Load(); d != int32(n+1) {
		t.Fatalf("server dispatched %d messages, want %d", d, n+1)
	}
}
