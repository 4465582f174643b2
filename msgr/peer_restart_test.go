package msgr_test

import (
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

func startOSD(t *testing.T, num int64, bind string, p msgr.Policy, chk *seqChecker) *msgr.Messenger {
	t.Helper()
	m, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: num}, Logger: failureLogs(t),
		InitialBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.SetDefaultPolicy(p)
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

// TestPeerRestartNewNonceThenDialsBack: osd.1 (a) and osd.2 (b) run
// lossless_peer. a talks to b; b restarts on the same address with a
// new nonce and, as a peer does, connects to a first. a then sends to b
// again through Connect(b's address): the message must reach the new b.
func TestPeerRestartNewNonceThenDialsBack(t *testing.T) {
	for _, pc := range []struct {
		name string
		p    msgr.Policy
	}{{"lossless-peer", msgr.LosslessPeer()}, {"lossless-peer-reuse", msgr.LosslessPeerReuse()}} {
		t.Run(pc.name, func(t *testing.T) {
			atA, atB, atB2 := newSeqChecker(), newSeqChecker(), newSeqChecker()
			a := startOSD(t, 1, "v2:127.0.0.1:0", pc.p, atA)
			b := startOSD(t, 2, "v2:127.0.0.1:0", pc.p, atB)
			bAddr := b.Addrs()[0]
			bURL := "v2:" + bAddr.IP.String() + "/0"
			ab, err := a.Connect(bURL)
			if err != nil {
				t.Fatal(err)
			}
			for i := uint64(0); i < 10; i++ {
				_ = ab.Send(counterMsg(i, 8))
			}
			waitFor(t, "b got 10", 5*time.Second, func() bool { return atB.got.Load() == 10 })
			b.Shutdown()
			// b comes back on the same port, new nonce, and talks to a first.
			b2 := startOSD(t, 2, "v2:"+bAddr.IP.String(), pc.p, atB2)
			ba, err := b2.Connect(a.Addrs()[0].String())
			if err != nil {
				t.Fatal(err)
			}
			_ = ba.Send(counterMsg(0, 8))
			waitFor(t, "a got b2's message", 5*time.Second, func() bool { return atA.got.Load() == 1 })
			// Now a sends to b again, by address, once every 100 ms (the
			// first may be dropped with a remote reset under ResetCheck).
			deadline := time.Now().Add(10 * time.Second)
			sent := 0
			var ab2 *msgr.Conn
			for atB2.got.Load() < 1 {
				if time.Now().After(deadline) {
					t.Fatalf("none of a's %d messages reached the restarted b in 10 s (a's conn %d: state %s, reconnects %d, same conn as before: %v, err %v)",
						sent, ab2.ID(), ab2.State(), ab2.Reconnects(), ab2 == ab, ab2.Err())
				}
				if ab2, err = a.Connect(bURL); err != nil {
					t.Fatal(err)
				}
				_ = ab2.Send(counterMsg(uint64(sent), 8))
				sent++
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
