package msgr_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// TestPeersReconnectTogether: two lossless_peer messengers that dialled
// each other exchange messages while both sides' sockets keep failing, so
// both sides reconnect at once (reconnect races). Nothing is lost.
func TestPeersReconnectTogether(t *testing.T) {
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	type peer struct {
		m   *msgr.Messenger
		chk *seqChecker
	}
	mk := func(num int64) peer {
		p := peer{chk: newSeqChecker()}
		var err error
		p.m, err = msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: num}, Logger: logger,
			InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond, Inject: msgr.Inject{SocketFailures: 40}})
		if err != nil {
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
	a, b := mk(1), mk(2)
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
