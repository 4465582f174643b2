package msgr_test

import (
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// waitParked waits until conn's reader is parked.
func waitParked(t *testing.T, what string, conn *msgr.Conn) {
	t.Helper()
	waitFor(t, what+" parked", 10*time.Second, conn.ReaderParked)
}

// readerGoroutines counts the goroutines reading a connection: a parked
// connection has none.
func readerGoroutines() int {
	buf := make([]byte, 1<<22)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		for _, f := range []string{"readLoop", "readFrames", "resumeReader", "waitParked"} {
			if strings.Contains(g, "msgr.(*Conn)."+f+"(") {
				n++
				break
			}
		}
	}
	return n
}

// TestParkedConnectionsKeepNoGoroutine: once both sides of an idle
// connection have parked, no goroutine reads it; it still carries
// messages both ways (the socket's readability starts a reader), parks
// again, and shuts down without leaving goroutines behind.
func TestParkedConnectionsKeepNoGoroutine(t *testing.T) {
	defer msgr.SetParkAfter(50 * time.Millisecond)()
	testParked(t, runtime.GOOS == "linux")
}

// TestParkedWithoutPoller: the same, parked readers waiting on
// goroutines of their own (as off Linux), and the keepalive timeout and
// lossless reconnect of connections so parked.
func TestParkedWithoutPoller(t *testing.T) {
	defer msgr.SetParkAfter(50 * time.Millisecond)()
	defer msgr.ParkWithoutPoller()()
	testParked(t, false)
	t.Run("keepalive timeout", TestParkedKeepaliveTimeout)
	t.Run("lossless reconnects", TestParkedLosslessReconnects)
}

// testParked is TestParkedConnectionsKeepNoGoroutine; noReader: check
// that no goroutine reads a parked connection.
func testParked(t *testing.T, noReader bool) {
	before := runtime.NumGoroutine()
	func() {
		s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{KeepaliveInterval: 200 * time.Millisecond})
		c, a := newAwaitClient(t, msgr.Config{KeepaliveInterval: 200 * time.Millisecond})
		defer c.Shutdown()
		defer s.Shutdown()
		conn, err := c.Connect(s.ListenAddrs()[0])
		if err != nil {
			t.Fatal(err)
		}
		awaitReply(t, conn, a, 1)
		var sconn *msgr.Conn
		waitFor(t, "the server's connection", 10*time.Second, func() bool {
			cs := s.Conns()
			if len(cs) == 1 {
				sconn = cs[0]
			}
			return sconn != nil
		})
		for round := range 3 {
			waitParked(t, "client", conn)
			waitParked(t, "server", sconn)
			if noReader {
				// Keepalives every 200 ms wake each side now and then:
				// look a few times.
				none := false
				for range 50 {
					if conn.ReaderParked() && sconn.ReaderParked() && readerGoroutines() == 0 {
						none = true
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				if !none {
					t.Fatalf("round %d: both sides parked, yet a goroutine reads", round)
				}
			}
			// The reader started by the socket's readability takes it.
			m := msg.New(testType)
			m.Header.Tid = uint64(10 + round)
			if err := conn.Send(m); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-a.replies:
				if r.Header.Tid != uint64(10+round) {
					t.Fatalf("tid %d", r.Header.Tid)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: no reply from a parked connection", round)
			}
		}
		if !conn.IsConnected() || conn.Reconnects() != 0 {
			t.Fatalf("connected %v, reconnects %d", conn.IsConnected(), conn.Reconnects())
		}
		waitParked(t, "client, before shutdown", conn)
	}()
	// Shutdown closes parked connections too, and the poller's goroutine
	// ends once nothing is parked.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestParkedKeepaliveTimeout: a parked connection whose peer falls
// silent is still faulted by the keepalive timeout, which starts its
// reader to end the socket.
func TestParkedKeepaliveTimeout(t *testing.T) {
	defer msgr.SetParkAfter(50 * time.Millisecond)()
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{KeepaliveInterval: -1})
	c, a := newAwaitClient(t, msgr.Config{KeepaliveInterval: -1, KeepaliveTimeout: 600 * time.Millisecond})
	conn, err := c.Connect(s.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	awaitReply(t, conn, a, 1)
	waitParked(t, "client", conn)
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the parked connection was not faulted by its keepalive timeout")
	}
	if err := conn.Err(); !errors.Is(err, msgr.ErrKeepaliveTimeout) {
		t.Fatalf("Err = %v, want ErrKeepaliveTimeout", err)
	}
}

// cutProxy relays TCP connections to a target until cut closes them.
type cutProxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l}
	t.Cleanup(func() { _ = l.Close(); p.cut() })
	go func() {
		for {
			a, err := l.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				_ = a.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, a, b)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(a, b); _ = a.Close() }()
			go func() { _, _ = io.Copy(b, a); _ = b.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) addr() string { return "tcp://" + p.l.Addr().String() }

// cut closes every relayed connection.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	n := len(p.conns)
	p.conns = nil
	return n
}

// TestParkedLosslessReconnects: a lossless session whose socket breaks
// while both readers are parked reconnects (the connector loop goes on
// from the reader started by the socket's end) and delivers every
// message once, in order.
func TestParkedLosslessReconnects(t *testing.T) {
	defer msgr.SetParkAfter(50 * time.Millisecond)()
	fast := msgr.Config{InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	var p *cutProxy
	_, _, conn, atSrv, atCli := losslessPairVia(t, transport.Default, "tcp://127.0.0.1:0", fast, fast, func(addr string) string {
		p = newCutProxy(t, strings.TrimPrefix(addr, "tcp://"))
		return p.addr()
	})
	sent := uint64(0)
	for round := range 3 {
		for range 5 {
			if err := conn.Send(counterMsg(sent, 100)); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		waitFor(t, "the echoes", 10*time.Second, func() bool { return atCli.got.Load() >= int64(sent) })
		waitParked(t, "client", conn)
		if p.cut() == 0 {
			t.Fatalf("round %d: nothing to cut", round)
		}
		waitFor(t, "a reconnect", 10*time.Second, func() bool { return conn.Reconnects() > uint64(round) })
	}
	for range 5 {
		if err := conn.Send(counterMsg(sent, 100)); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	waitFor(t, "all echoes", 10*time.Second, func() bool { return atCli.got.Load() >= int64(sent) })
	for sender := range atSrv.next {
		atSrv.check(t, sender, sent)
	}
	atCli.check(t, "server", sent)
}
