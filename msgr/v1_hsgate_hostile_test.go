package msgr_test

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// TestV1HandshakeBoundEvictsIdle is TestHandshakeBoundEvictsIdle on a
// msgr1 listener (issue 14, item 5: the bound applies to msgr2 and
// msgr1): of 100 idle sockets no more than MaxHandshakes are in their
// handshake at once, the longest-idle are evicted (closed by the
// server) to make room, and an honest msgr1 client is served.
func TestV1HandshakeBoundEvictsIdle(t *testing.T) {
	cfg := msgr.Config{MaxHandshakes: 8, HandshakeIdleEvict: 100 * time.Millisecond, HandshakeTimeout: time.Minute}
	s := echoServer(t, transport.Default, "v1:127.0.0.1:0", cfg)
	v1 := v1Addr(t, s)
	hostport, _, _ := strings.Cut(strings.TrimPrefix(v1, "v1:"), "/")
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for i := 0; i < 100; i++ {
		c, err := net.Dial("tcp", hostport)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	waitFor(t, "the msgr1 handshake slots to fill", 3*time.Second, func() bool { return s.Handshakes() == 8 })
	var maxSeen atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if n := int64(s.Handshakes()); n > maxSeen.Load() {
				maxSeen.Store(n)
			}
		}
	}()
	c, col := newClient(t, transport.Default, msgr.Config{})
	conn, err := c.ConnectType(v1, msg.EntityOSD)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Send(msg.New(testType)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	recv(t, col.ch)
	close(stop)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the honest msgr1 client waited %v", took)
	}
	if maxSeen.Load() > 8 {
		t.Fatalf("%d msgr1 handshakes at once, bound 8", maxSeen.Load())
	}
	closed := 0
	for _, ic := range idle {
		_ = ic.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [512]byte
		for {
			if _, err := ic.Read(b[:]); err != nil {
				if !isTimeout(err) {
					closed++
				}
				break
			}
		}
	}
	if closed == 0 {
		t.Fatal("no idle msgr1 handshake was evicted")
	}
}
