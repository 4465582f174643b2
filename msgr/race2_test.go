package msgr_test

import (
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// TestPeersReconnectTogether: two lossless_peer messengers that dialled
// each other exchange messages while both sides' sockets keep failing, so
// both sides reconnect at once (reconnect races). Nothing is lost.
func TestPeersReconnectTogether(t *testing.T) {
	cfg := msgr.Config{Logger: failureLogs(t), InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Inject: msgr.Inject{SocketFailures: 40}}
	a, b := newPeer(t, 1, cfg), newPeer(t, 2, cfg)
	const n = 3000
	done := make(chan error, 2)
	send := func(from, to peer) {
		conn, err := from.m.Connect(to.m.Addrs()[0].String())
		if err != nil {
			done <- err
			return
		}
		for i := uint64(0); i < n; i++ {
			if err := conn.Send(counterMsg(i, int(i%1000))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}
	go send(a, b)
	go send(b, a)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both directions", 30*time.Second, func() bool { return a.chk.got.Load() >= n && b.chk.got.Load() >= n })
	a.chk.check(t, "osd.2", n)
	b.chk.check(t, "osd.1", n)
}

// TestAcceptorReconnects: on a lossless_peer session the side that
// accepted the connection reconnects by itself when it has something to
// send and its peer sits idle in standby (as Ceph's does).
func TestAcceptorReconnects(t *testing.T) {
	mk := func(num int64, inject int) *msgr.Messenger {
		m, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: num}, Logger: quietLogger(),
			InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, Inject: msgr.Inject{SocketFailures: inject}})
		if err != nil {
			t.Fatal(err)
		}
		m.SetDefaultPolicy(msgr.LosslessPeer())
		if err := m.Bind("v2:127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := mk(1, 0), mk(2, 2) // b's sockets keep failing
	chk := newSeqChecker()
	a.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		chk.see(m.Header.Src.String(), counterOf(t, m))
		return true
	}))
	accepted := make(chan *msgr.Conn, 1)
	b.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		select {
		case accepted <- m.Conn.(*msgr.Conn):
		default:
		}
		return true
	}))
	for _, m := range []*msgr.Messenger{a, b} {
		_ = m.Start()
		defer m.Shutdown()
	}
	// a opens the session and sends one message, then stays idle.
	ca, err := a.Connect(b.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Send(counterMsg(0, 0)); err != nil {
		t.Fatal(err)
	}
	var cb *msgr.Conn
	select {
	case cb = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("no message at b")
	}
	// b sends many messages on the session it accepted while its sockets
	// fail; a has nothing to send.
	const n = 3000
	for i := uint64(0); i < n; i++ {
		if err := cb.Send(counterMsg(i, int(i%2000))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all of b's messages at a", 30*time.Second, func() bool { return chk.got.Load() >= n })
	chk.check(t, "osd.2", n)
	if cb.Reconnects() == 0 {
		t.Fatal("b never reconnected: injection did nothing")
	}
}
