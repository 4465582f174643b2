package msgr_test

import (
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// gatedDispatcher dispatches one message each time its gate is opened
// and reports which connection each came from, in dispatch order.
type gatedDispatcher struct {
	gate chan struct{}
	seen chan dispatched
}

type dispatched struct {
	conn uint64
	tid  uint64
}

func (g *gatedDispatcher) Dispatch(m *msg.Message) bool {
	<-g.gate
	g.seen <- dispatched{conn: m.Conn.(*msgr.Conn).ID(), tid: m.Header.Tid}
	m.Done()
	return true
}

// TestFloodHonestAdmitted: sixteen connections flood a server whose
// dispatcher is slow with 64 KiB messages; the receive throttle (the
// messenger's dispatch bytes, or the policy's bytes) is shared so that
// they cannot hold all of it, and a message from an honest connection
// that arrives during the flood is admitted at once: it is dispatched
// within one turn of the dispatch queue's round robin (at most one
// message of each flooder before it), where a throttle that serves its
// waiters in arrival order only would make it wait for the flooders'
// readers blocked ahead of it first.
func TestFloodHonestAdmitted(t *testing.T) {
	const limit = 8 << 20
	for _, tc := range []struct {
		name string
		cfg  msgr.Config
		pol  func() msgr.Policy
	}{
		{"dispatch-bytes", msgr.Config{DispatchThrottleBytes: limit}, msgr.StatelessServer},
		{"policy-bytes", msgr.Config{}, func() msgr.Policy {
			p := msgr.StatelessServer()
			p.ThrottleBytes = msgr.NewThrottle("client-bytes", limit)
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { testFloodHonestAdmitted(t, tc.cfg, tc.pol()) })
	}
}

func testFloodHonestAdmitted(t *testing.T, cfg msgr.Config, pol msgr.Policy) {
	const flooders, perFlooder = 16, 100
	cfg.Name = msg.EntityName{Type: msg.EntityOSD, Num: 0}
	cfg.Transports = transport.Default
	cfg.Logger = quietLogger()
	s, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(pol)
	g := &gatedDispatcher{gate: make(chan struct{}), seen: make(chan dispatched, flooders*perFlooder+1)}
	s.AddDispatcherTail(g)
	if err := s.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	// Let the dispatcher run freely at the end so that Shutdown is not
	// held up behind it.
	released := make(chan struct{})
	t.Cleanup(func() { close(released); s.Shutdown() })
	go func() {
		<-released
		for {
			select {
			case g.gate <- struct{}{}:
			case <-time.After(5 * time.Second):
				return
			}
		}
	}()
	addr := s.ListenAddrs()[0]

	data := make([]byte, 64<<10)
	send := func(c *msgr.Conn, tid uint64) {
		m := msg.New(testType)
		m.Header.Tid = tid
		m.Data = msg.Buffers{data}
		if err := c.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	for range flooders {
		cm, _ := newClient(t, transport.Default, msgr.Config{})
		c, err := cm.Connect(addr)
		if err != nil {
			t.Fatal(err)
		}
		for i := range perFlooder {
			send(c, uint64(i))
		}
	}
	// The flood is on once every flooder's reader has waited for budget.
	waits := func() float64 { sn := s.Metrics().Snapshot(); return sn.Total("ferry_msgr_throttle_waits") }
	for deadline := time.Now().Add(10 * time.Second); waits() < flooders; {
		if time.Now().After(deadline) {
			t.Fatalf("the flood did not fill the throttle: %v throttle waits", waits())
		}
		time.Sleep(5 * time.Millisecond)
	}

	hm, _ := newClient(t, transport.Default, msgr.Config{})
	hc, err := hm.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	const honestTid = 1 << 40
	send(hc, honestTid)
	// Give the honest message time to reach the server's reader (and,
	// with a fair throttle, the dispatch queue) before anything is
	// dispatched.
	time.Sleep(200 * time.Millisecond)

	var order []uint64
	for n := 1; ; n++ {
		g.gate <- struct{}{}
		var d dispatched
		select {
		case d = <-g.seen:
		case <-time.After(10 * time.Second):
			t.Fatalf("dispatch %d did not happen", n)
		}
		order = append(order, d.conn)
		if d.tid == honestTid {
			t.Logf("order %v", order)
			t.Logf("the honest message was dispatch %d of the flood (%d flooders)", n, flooders)
			if n > flooders+2 {
				t.Fatalf("the honest message was dispatch %d: more than one round of %d flooders before it", n, flooders)
			}
			return
		}
		if n > flooders*perFlooder {
			t.Fatal("the honest message was never dispatched")
		}
	}
}
