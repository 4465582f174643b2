package msgr_test

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// Hundreds of idle connections do not lock an honest client out: at the
// bound the longest-idle handshake is evicted, and no more than
// MaxHandshakes are ever in their handshake.
func TestHandshakeBoundEvictsIdle(t *testing.T) {
	cfg := msgr.Config{MaxHandshakes: 8, HandshakeIdleEvict: 100 * time.Millisecond, HandshakeTimeout: time.Minute}
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", cfg)
	addr := strings.TrimPrefix(s.ListenAddrs()[0], "tcp://")
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for i := 0; i < 200; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	waitFor(t, "the handshake slots to fill", 10*time.Second, func() bool { return s.Handshakes() == 8 })
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
	conn := mustConnect(t, c, s.ListenAddrs()[0])
	if err := conn.Send(msg.New(testType)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	recv(t, col.ch)
	close(stop)
	took := time.Since(start)
	t.Logf("honest client served in %v past 200 idle connections", took)
	if took > 5*time.Second {
		t.Fatalf("the honest client waited %v", took)
	}
	if maxSeen.Load() > 8 {
		t.Fatalf("%d handshakes at once, bound 8", maxSeen.Load())
	}
	// Some idle sockets were closed by the server to make room.
	closed := 0
	for _, ic := range idle {
		_ = ic.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [256]byte
		for {
			// Past the server's banner, if it got as far as sending it.
			_, err := ic.Read(b[:])
			if err != nil {
				if !isTimeout(err) {
					closed++
				}
				break
			}
		}
	}
	if closed == 0 {
		t.Fatal("no idle handshake was evicted")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A burst of honest clients far above the bound queues and all get
// through.
func TestHandshakeBoundQueuesBurst(t *testing.T) {
	cfg := msgr.Config{MaxHandshakes: 2, HandshakeIdleEvict: 10 * time.Second}
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", cfg)
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		c, col := newClient(t, transport.Default, msgr.Config{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := c.Connect(s.ListenAddrs()[0])
			if err == nil {
				err = conn.Send(msg.New(testType))
			}
			if err != nil {
				errs <- err
				return
			}
			select {
			case <-col.ch:
			case <-time.After(20 * time.Second):
				errs <- conn.Err()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a client did not get through: %v", err)
	}
}
