package msgr_test

import (
	"testing"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
)

// startPeer starts osd.num bound at addr with a fixed nonce, policy p
// and dispatcher d.
func startPeer(t *testing.T, reg *transport.Registry, addr string, num int64, nonce uint32, p msgr.Policy, d msgr.Dispatcher) *msgr.Messenger {
	t.Helper()
	m, err := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: num}, Nonce: nonce, Transports: reg, Logger: quietLogger(),
		InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.SetDefaultPolicy(p)
	m.AddDispatcherTail(d)
	if err := m.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPeerRestartResetCheck: between two OSD-like peers, one restarting
// (same address and nonce, a new session) is reported to the other as a
// remote reset under lossless_peer_reuse, whose ResetCheck is set, and
// not under lossless_peer, whose session goes on with the new
// incarnation; under both, traffic goes on.
func TestPeerRestartResetCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		p    msgr.Policy
		want int64
	}{
		{"lossless-peer-reuse", msgr.LosslessPeerReuse(), 1},
		{"lossless-peer", msgr.LosslessPeer(), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := transport.NewRegistry(inproc.NewNetwork())
			ev := &events{}
			echo := msgr.DispatcherFunc(func(m *msg.Message) bool {
				r := msg.New(testType)
				r.Header.Tid = m.Header.Tid
				_ = m.Conn.Send(r)
				return true
			})
			b := startPeer(t, reg, "inproc://peer-b", 2, 22, c.p, msgr.DispatcherFunc(func(m *msg.Message) bool { return echo(m) }))
			defer b.Shutdown()
			b.AddDispatcherHead(ev)
			for gen := range 2 {
				col := newCollector()
				a := startPeer(t, reg, "inproc://peer-a", 1, 11, c.p, col)
				conn, err := a.Connect("inproc://peer-b")
				if err != nil {
					t.Fatal(err)
				}
				m := msg.New(testType)
				m.Header.Tid = uint64(gen + 1)
				if err := conn.Send(m); err != nil {
					t.Fatal(err)
				}
				r := recv(t, col.ch)
				if gen == 1 && r.Header.Tid == 1 && !c.p.ResetCheck {
					// Without ResetCheck the session goes on with the new
					// incarnation: b's echo to the old one, if its ack was
					// lost with it, is delivered here first (as in Ceph).
					r = recv(t, col.ch)
				}
				if r.Header.Tid != uint64(gen+1) {
					t.Fatalf("generation %d: echo of tid %d", gen, r.Header.Tid)
				}
				a.Shutdown() // the peer "restarts": its session is gone
			}
			// A reset is queued at the front of b's dispatch queue when
			// it accepts the new session, so it was dispatched before the
			// message whose echo came back.
			if got := ev.remoteReset.Load(); got != c.want {
				t.Errorf("%s: %d remote resets reported, want %d", c.name, got, c.want)
			}
		})
	}
}

// TestRegisteredServerReplaces: stateless_registered_server keeps one
// connection per client address, so a client's newer connection
// replaces its older one; stateless_server keeps both.
func TestRegisteredServerReplaces(t *testing.T) {
	for _, c := range []struct {
		name string
		p    msgr.Policy
		want int
	}{
		{"stateless-registered-server", msgr.StatelessRegisteredServer(), 1},
		{"stateless-server", msgr.StatelessServer(), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := transport.NewRegistry(inproc.NewNetwork())
			srv := startPeer(t, reg, "inproc://server", 0, 5, c.p, msgr.DispatcherFunc(func(m *msg.Message) bool {
				r := msg.New(testType)
				r.Header.Tid = m.Header.Tid
				_ = m.Conn.Send(r)
				return true
			}))
			defer srv.Shutdown()
			for i := range 2 {
				// Two client messengers with one nonce: the same client
				// address to the server, as a client that restarted.
				cli, ccol := newClient(t, reg, msgr.Config{Nonce: 77})
				conn, err := cli.Connect("inproc://server")
				if err != nil {
					t.Fatal(err)
				}
				m := msg.New(testType)
				m.Header.Tid = uint64(i + 1)
				if err := conn.Send(m); err != nil {
					t.Fatal(err)
				}
				recv(t, ccol.ch)
			}
			if got := len(srv.Conns()); got != c.want {
				t.Errorf("%s holds %d connections from one client address, want %d", c.name, got, c.want)
			}
		})
	}
}
