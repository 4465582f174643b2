package msgr_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// TestConnectionRace: two lossless peers connect to each other at the
// same moment and both send at once. Exactly one session survives
// (decided as Ceph decides, by address), and every message arrives once,
// in order, in both directions.
func TestConnectionRace(t *testing.T) {
	for round := 0; round < 5; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			cfg := msgr.Config{Logger: failureLogs(t), InitialBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond}
			a, b := newPeer(t, 1, cfg), newPeer(t, 2, cfg)
			const n = 2000
			start := make(chan struct{})
			done := make(chan error, 2)
			send := func(from, to peer) {
				<-start
				conn, err := from.m.Connect(to.m.Addrs()[0].String())
				if err != nil {
					done <- err
					return
				}
				for i := uint64(0); i < n; i++ {
					if err := conn.Send(counterMsg(i, int(i%500))); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}
			go send(a, b)
			go send(b, a)
			close(start)
			for range 2 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			end := time.Now().Add(20 * time.Second)
			for a.chk.got.Load() < n || b.chk.got.Load() < n {
				if time.Now().After(end) {
					for _, p := range []peer{a, b} {
						for _, c := range p.m.Conns() {
							t.Logf("%s: conn %d to %s state %s reconnects %d", p.m.Name(), c.ID(), c.PeerName(), c.State(), c.Reconnects())
						}
					}
					t.Fatalf("received %d and %d of %d", a.chk.got.Load(), b.chk.got.Load(), n)
				}
				time.Sleep(5 * time.Millisecond)
			}
			a.chk.check(t, "osd.2", n)
			b.chk.check(t, "osd.1", n)
			// One session per side survives (open, or in standby once idle:
			// lossless_peer has standby).
			live := func(p peer) int {
				k := 0
				for _, c := range p.m.Conns() {
					if c.Err() == nil {
						k++
					}
				}
				return k
			}
			waitFor(t, "a single session per side", 10*time.Second, func() bool { return live(a) == 1 && live(b) == 1 })
		})
	}
}

// peer is a bound lossless_peer messenger that checks the counters of
// what it receives.
type peer struct {
	m   *msgr.Messenger
	chk *seqChecker
}

// newPeer starts osd.num with cfg (Name, policy and dispatcher are set
// here) on a free loopback port.
func newPeer(t *testing.T, num int64, cfg msgr.Config) peer {
	t.Helper()
	p := peer{chk: newSeqChecker()}
	cfg.Name = msg.EntityName{Type: msg.EntityOSD, Num: num}
	var err error
	if p.m, err = msgr.New(cfg); err != nil {
		t.Fatal(err)
	}
	p.m.SetDefaultPolicy(msgr.LosslessPeer())
	p.m.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		p.chk.see(m.Header.Src.String(), counterOf(t, m))
		return true
	}))
	if err := p.m.Bind("v2:127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	_ = p.m.Start()
	t.Cleanup(p.m.Shutdown)
	return p
}

// failureLogs returns a debug logger whose output is printed only if the
// test fails.
func failureLogs(t *testing.T) *slog.Logger {
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
