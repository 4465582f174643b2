package msgr_test

import (
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// TestLosslessClientToLossyServerKeepsQueued: a lossless_client sends
// right after Connect (before the handshake) to a server that runs the
// session lossy (stateless_server). The client switches to lossy, as
// Ceph's does, but what was queued must still go out (Ceph only sets
// policy.lossy), or at least a reset must say it was dropped.
func TestLosslessClientToLossyServerKeepsQueued(t *testing.T) {
	srv := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{})
	ev := &events{}
	cli, col := newClient(t, transport.Default, msgr.Config{})
	cli.SetDefaultPolicy(msgr.LosslessClient())
	cli.AddDispatcherHead(ev)
	conn, err := cli.Connect(srv.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := uint64(0); i < n; i++ {
		if err := conn.Send(counterMsg(i, 8)); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	timeout := time.After(3 * time.Second)
	for got < n {
		select {
		case <-col.ch:
			got++
		case <-timeout:
			t.Fatalf("%d of %d messages sent before the handshake were echoed (conn %s, lossy now: %v; resets heard: %d reset, %d remote)",
				got, n, conn.State(), conn.Policy().Lossy, ev.reset.Load(), ev.remoteReset.Load())
		}
	}
}
