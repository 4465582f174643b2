package msgr_test

import (
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// TestThrottleStamp: a message that waited for throttle budget is
// stamped when it got the budget, after the wait, not when its frame
// began to arrive.
func TestThrottleStamp(t *testing.T) {
	reg := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}))
	srv, err := msgr.New(msgr.Config{Transports: reg, Logger: quietLogger(), Name: msg.EntityName{Type: msg.EntityOSD}})
	if err != nil {
		t.Fatal(err)
	}
	p := msgr.StatelessServer()
	p.ThrottleMessages = msgr.NewThrottle("test-messages", 1)
	srv.SetDefaultPolicy(p)
	const hold = 100 * time.Millisecond
	got := make(chan *msg.Message, 2)
	srv.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		if m.Header.Tid == 1 {
			time.Sleep(hold) // keeps the only message budget this long
		}
		got <- m
		return true
	}))
	if err := srv.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	cli, _ := newClient(t, reg, msgr.Config{})
	conn, err := cli.Connect(srv.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	for tid := range uint64(2) {
		m := msg.New(testType)
		m.Header.Tid = tid + 1
		m.Front = msg.Buffers{[]byte("x")}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	<-got
	second := recv(t, got)
	if second.Header.Tid != 2 {
		t.Fatalf("second message has tid %d", second.Header.Tid)
	}
	if w := second.ThrottleStamp.Sub(second.RecvStamp); w < hold/2 {
		t.Errorf("ThrottleStamp %v after RecvStamp, want about %v (the wait for budget)", w, hold)
	}
	if second.DispatchStamp.Before(second.ThrottleStamp) {
		t.Errorf("dispatched %v before it got its budget", second.ThrottleStamp.Sub(second.DispatchStamp))
	}
}
