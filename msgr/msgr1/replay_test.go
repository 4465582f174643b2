package msgr1

import (
	"fmt"
	"slices"
	"testing"
)

// TestLosslessReplay walks a lossless session through a fault: the
// client keeps what is unacknowledged, reconnects with a higher
// connect_seq, the server's session rules take the session over, the SEQ
// exchange says what the server has, and the client replays the rest;
// every message is delivered once, in order.
func TestLosslessReplay(t *testing.T) {
	cc, sc, _, _ := osdConfigs(false)
	var sent []uint64 // the client's unacknowledged messages
	var got []string  // what the server delivered
	deliver := func(s *side) {
		for _, ev := range s.events {
			if ev.Kind == EvMessage && !ev.Dropped {
				got = append(got, string(ev.Msg.Front.Bytes()))
			}
		}
		s.events = nil
	}
	// The first connection: a new session.
	c, s := pair(cc, sc)
	run(t, c, s)
	if !c.e.Ready() || !s.e.Ready() || c.e.Peer().Lossy {
		t.Fatal("first handshake")
	}
	s.events = nil
	var wire []byte
	for i := uint64(1); i <= 5; i++ {
		b := c.e.AppendMessage(nil, testMessage(i, fmt.Sprint("m", i), "", ""))
		sent = append(sent, i)
		if i <= 3 {
			wire = append(wire, b...) // 4 and 5 are lost with the socket
		}
	}
	s.in = wire
	s.feed(t)
	deliver(s)
	// The server acked 2 before the fault.
	c.in = s.e.AppendAck(nil, 2)
	c.feed(t)
	for _, ev := range c.events {
		if ev.Kind == EvAck {
			sent = slices.DeleteFunc(sent, func(q uint64) bool { return q <= ev.Seq })
		}
	}
	serverIn := s.e.InSeq()
	serverCS := s.e.Peer().ConnectSeq

	// The reconnect: connect_seq bumped past the session's, as Ceph's
	// fault() does.
	cc2 := cc
	cc2.ConnectSeq = c.e.ConnectSeq() + 1
	cc2.InSeq = c.e.InSeq()
	cc2.GlobalSeq = 2
	c2, s2 := pair(cc2, sc)
	var acked uint64
	s2.decide = func(e *Engine, ev Event) error {
		ex := SessionState{Exists: true, Open: true, PeerGlobal: 1, ConnectSeq: serverCS}
		a, _ := DecideConnect(ex, e.PendingConnect())
		if a != ConnectReplace {
			t.Fatalf("decision %v", a)
		}
		return e.Accept(Accept{GlobalSeq: 9, InSeq: serverIn})
	}
	run(t, c2, s2)
	if c2.err != nil || s2.err != nil || !c2.e.Ready() || !s2.e.Ready() {
		t.Fatal(c2.err, s2.err)
	}
	for _, ev := range c2.events {
		if ev.Kind == EvReady {
			acked = ev.Seq
		}
	}
	if acked != 3 || s2.e.InSeq() != 3 {
		t.Fatalf("server had %d, engine in_seq %d", acked, s2.e.InSeq())
	}
	// Replay: one message at or below acked slips through (as a resend
	// racing the SEQ exchange would) and is dropped by the server.
	s2.events = nil
	wire = nil
	for _, q := range sent {
		wire = c2.e.AppendMessage(wire, testMessage(q, fmt.Sprint("m", q), "", ""))
	}
	s2.in = wire
	s2.feed(t)
	dropped := 0
	for _, ev := range s2.events {
		if ev.Dropped {
			dropped++
		}
	}
	deliver(s2)
	if want := []string{"m1", "m2", "m3", "m4", "m5"}; !slices.Equal(got, want) || dropped != 1 {
		t.Fatalf("delivered %q (dropped %d), want %q", got, dropped, want)
	}
}

// TestLossySession: a lossy session is not resumed: the client's next
// connection starts over (connect_seq 0), the server replaces the old
// one with a fresh session (READY, no SEQ exchange) and sequence numbers
// start again at 1.
func TestLossySession(t *testing.T) {
	cc, sc := clientConfig(), serverConfig()
	c, s := pair(cc, sc)
	run(t, c, s)
	if !c.e.Peer().Lossy || !s.e.Peer().Lossy {
		t.Fatal("not lossy")
	}
	exchange(t, c, s, testMessage(1, "a", "", ""))
	exchange(t, c, s, testMessage(2, "b", "", ""))
	c2, s2 := pair(cc, sc)
	s2.decide = func(e *Engine, ev Event) error {
		a, _ := DecideConnect(SessionState{Exists: true, Lossy: true, Open: true, PeerGlobal: 1, ConnectSeq: 1}, e.PendingConnect())
		if a != ConnectReplaceReset {
			t.Fatalf("decision %v", a)
		}
		return e.Accept(Accept{GlobalSeq: 8, Lossy: true, Reset: true})
	}
	run(t, c2, s2)
	if !c2.e.Ready() || !s2.e.Ready() || s2.e.InSeq() != 0 || len(s2.events) != 1 {
		t.Fatalf("second session: %v %v", c2.err, kinds(s2.events))
	}
	evs := exchange(t, c2, s2, testMessage(1, "c", "", ""))
	if len(evs) != 1 || evs[0].Dropped || string(evs[0].Msg.Front.Bytes()) != "c" {
		t.Fatalf("first message of the new session: %+v", evs)
	}
}
