package msgr_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// TestLosslessPeerRestartKeepsQueue: osd.1 (a) and osd.2 (b); a opened
// the session. a goes away; b sends x meanwhile (its redial is refused,
// then backs off). a restarts (same address and nonce, a new session
// cookie) and connects to b before b retries. Under lossless_peer x
// reaches the new a (Ceph keeps the session's queue when the peer
// resets without resetcheck); under lossless_peer_reuse the session is
// reset, b hears a remote reset and x's buffers are released. x never
// just vanishes.
func TestLosslessPeerRestartKeepsQueue(t *testing.T) {
	for _, pc := range []struct {
		name string
		p    msgr.Policy
	}{{"lossless-peer", msgr.LosslessPeer()}, {"lossless-peer-reuse", msgr.LosslessPeerReuse()}} {
		t.Run(pc.name, func(t *testing.T) { testPeerRestartQueue(t, pc.p) })
	}
}

func testPeerRestartQueue(t *testing.T, p msgr.Policy) {
	mk := func(num int64, nonce uint32, bind string, backoff time.Duration, chk *seqChecker, ev *events) *msgr.Messenger {
		m, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: num}, Nonce: nonce, Logger: failureLogs(t),
			InitialBackoff: backoff, MaxBackoff: backoff})
		if err != nil {
			t.Fatal(err)
		}
		m.SetDefaultPolicy(p)
		if ev != nil {
			m.AddDispatcherHead(ev)
		}
		m.AddDispatcherTail(msgr.DispatcherFunc(func(mm *msg.Message) bool {
			chk.see(mm.Header.Src.String(), counterOf(t, mm))
			return true
		}))
		if err := m.Bind(bind); err != nil {
			t.Fatal(err)
		}
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Shutdown)
		return m
	}
	atA, atA2, atB := newSeqChecker(), newSeqChecker(), newSeqChecker()
	evB := &events{}
	b := mk(2, 22, "v2:127.0.0.1:0", 3*time.Second, atB, evB)
	a := mk(1, 11, "v2:127.0.0.1:0", time.Millisecond, atA, nil)
	aBind := "v2:" + a.Addrs()[0].IP.String()
	ab, err := a.Connect(b.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	_ = ab.Send(counterMsg(0, 8))
	waitFor(t, "b got a's message", 5*time.Second, func() bool { return atB.got.Load() == 1 })
	var ba *msgr.Conn
	for _, c := range b.Conns() {
		ba = c
	}
	a.Shutdown()
	waitFor(t, "b's session idle", 5*time.Second, func() bool { return ba.State() != "open" })
	x := counterMsg(0, 8)
	var released atomic.Int32
	x.Release = func(*msg.Message) { released.Add(1) }
	if err := ba.Send(x); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // b's redial is refused; it now waits 3 s
	a2 := mk(1, 11, aBind, time.Millisecond, atA2, nil)
	ab2, err := a2.Connect(b.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	_ = ab2.Send(counterMsg(1, 8)) // a2 opens its session with b
	waitFor(t, "b got a2's message", 5*time.Second, func() bool { return atB.got.Load() == 2 })
	deadline := time.Now().Add(6 * time.Second)
	for atA2.got.Load() == 0 && evB.remoteReset.Load() == 0 && evB.reset.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("b's message x was dropped without any event: a2 got %d, b heard %d remote resets and %d resets; b's conn state %s, queued %d",
				atA2.got.Load(), evB.remoteReset.Load(), evB.reset.Load(), ba.State(), ba.QueuedBytes())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.ResetCheck {
		// The reset dropped x unwritten, told b, and gave x's buffers
		// back.
		waitFor(t, "x released", 5*time.Second, func() bool { return released.Load() == 1 })
		if evB.remoteReset.Load() != 1 || atA2.got.Load() != 0 {
			t.Errorf("with ResetCheck: %d remote resets, a2 got %d messages; want 1 and 0", evB.remoteReset.Load(), atA2.got.Load())
		}
	} else {
		// The session went on with the new a: x reached it.
		waitFor(t, "x at a2", 5*time.Second, func() bool { return atA2.got.Load() == 1 })
	}
}
