package msgr_test

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// TestHandshakeGateTrickleStarvesHonest: an attacker that keeps every
// handshake slot busy with connections that trickle a valid banner one
// byte at a time (never idle long enough to be evicted), and opens new
// ones faster than the slots free up, does not lock out an honest
// client from another address. (When waiters were served newest first
// whatever their source, every freed slot went to the attacker's newest
// connection and the honest client never got a handshake.)
func TestHandshakeGateTrickleStarvesHonest(t *testing.T) {
	const (
		slots = 4
		hsTO  = 2 * time.Second
	)
	cfg := msgr.Config{MaxHandshakes: slots, HandshakeTimeout: hsTO, HandshakeIdleEvict: time.Second}
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", cfg)
	host := strings.TrimPrefix(s.ListenAddrs()[0], "tcp://")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	banner := []byte("ceph v2\n\x10\x00" + strings.Repeat("\x00", 16))
	trickle := func() {
		defer wg.Done()
		nc, err := net.Dial("tcp", host)
		if err != nil {
			return
		}
		defer nc.Close()
		for i := 0; ; i++ {
			if _, err := nc.Write(banner[i%len(banner) : i%len(banner)+1]); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}
	// Fill the slots, then keep opening about 40 connections a second
	// (the slots free at slots/HandshakeTimeout = 2 a second).
	for range slots {
		wg.Add(1)
		go trickle()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			wg.Add(1)
			go trickle()
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
	waitFor(t, "the handshake slots to fill", 5*time.Second, func() bool { return s.Handshakes() == slots })

	// The honest client comes from another address (127.0.0.2 is
	// loopback too): the gate shares slots among sources.
	other := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{LocalAddr: netip.MustParseAddr("127.0.0.2")}))
	c, col := newClient(t, other, msgr.Config{HandshakeTimeout: hsTO})
	start := time.Now()
	deadline := start.Add(4 * hsTO)
	for attempt := 1; time.Now().Before(deadline); attempt++ {
		conn, err := c.Connect(s.ListenAddrs()[0])
		if err != nil {
			t.Fatal(err)
		}
		m := msg.New(testType)
		_ = conn.Send(m)
		select {
		case <-col.ch:
			t.Logf("honest client served after %v (attempt %d)", time.Since(start), attempt)
			return
		case <-time.After(hsTO + 500*time.Millisecond):
		}
		conn.MarkDown()
	}
	t.Fatalf("an honest client was locked out for %v by %d trickling handshakes and ~40 new connections a second",
		time.Since(start), slots)
}
