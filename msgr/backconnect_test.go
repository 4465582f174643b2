package msgr_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msgr"
)

// TestBackConnectByURL: osd.1 opens a lossless_peer session to osd.2;
// osd.2 then connects back to osd.1 by its listen URI (ListenAddrs, the
// form Connect documents) and sends: the message must arrive, over the
// session a opened (a URI without a nonce names whoever listens there).
func TestBackConnectByURL(t *testing.T) {
	for _, pc := range []struct {
		name string
		p    msgr.Policy
	}{{"lossless-peer", msgr.LosslessPeer()}, {"lossless-peer-reuse", msgr.LosslessPeerReuse()}} {
		t.Run(pc.name, func(t *testing.T) {
			atA, atB := newSeqChecker(), newSeqChecker()
			a := startOSD(t, 1, "tcp://127.0.0.1:0", pc.p, atA)
			b := startOSD(t, 2, "tcp://127.0.0.1:0", pc.p, atB)
			ab, err := a.Connect(b.ListenAddrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			_ = ab.Send(counterMsg(0, 8))
			waitFor(t, "b got a's message", 5*time.Second, func() bool { return atB.got.Load() == 1 })
			if !strings.HasPrefix(a.ListenAddrs()[0], "tcp://") {
				t.Fatal(a.ListenAddrs())
			}
			ba, err := b.Connect(a.ListenAddrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			_ = ba.Send(counterMsg(0, 8))
			deadline := time.Now().Add(5 * time.Second)
			for atA.got.Load() < 1 {
				if time.Now().After(deadline) {
					t.Fatalf("b's message never reached a (b's conn %d: state %s, reconnects %d, err %v)", ba.ID(), ba.State(), ba.Reconnects(), ba.Err())
				}
				time.Sleep(5 * time.Millisecond)
			}
			// The session a opened serves b's Connect: no second
			// connection, which a would take for a restart of b.
			if n := len(b.Conns()); n != 1 {
				t.Errorf("b holds %d connections to a, want the one session a opened", n)
			}
			if n := len(a.Conns()); n != 1 {
				t.Errorf("a holds %d connections to b, want 1", n)
			}
		})
	}
}
