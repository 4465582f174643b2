package msgr2

import (
	"errors"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

func TestDecideReconnect(t *testing.T) {
	lo, hi := addr("v2:127.0.0.1:1000/1"), addr("v2:127.0.0.1:2000/1")
	base := SessionState{Exists: true, Open: true, ClientCookie: 7, ServerCookie: 9, PeerGlobal: 5, ConnectSeq: 3, PeerAddr: lo, MyAddr: hi}
	req := SessionReconnect{ClientCookie: 7, ServerCookie: 9, GlobalSeq: 6, ConnectSeq: 4}
	cases := []struct {
		name string
		mod  func(*SessionState, *SessionReconnect)
		want ReconnectAction
	}{
		{"no session", func(s *SessionState, _ *SessionReconnect) { s.Exists = false }, ReconnectResetFull},
		{"closed session", func(s *SessionState, _ *SessionReconnect) { s.Closed = true }, ReconnectResetFull},
		{"replacing", func(s *SessionState, _ *SessionReconnect) { s.Replacing = true }, ReconnectRetryGlobal},
		{"cookie mismatch, resetcheck", func(s *SessionState, r *SessionReconnect) { r.ClientCookie = 8; s.ResetCheck = true }, ReconnectResetFull},
		{"cookie mismatch", func(s *SessionState, r *SessionReconnect) { r.ClientCookie = 8 }, ReconnectReset},
		{"never established", func(s *SessionState, _ *SessionReconnect) { s.ServerCookie = 0 }, ReconnectReset},
		{"stale global seq", func(s *SessionState, r *SessionReconnect) { r.GlobalSeq = 4 }, ReconnectRetryGlobal},
		{"stale connect seq", func(s *SessionState, r *SessionReconnect) { r.ConnectSeq = 2 }, ReconnectRetry},
		{"race, peer higher, we are not server", func(s *SessionState, r *SessionReconnect) {
			r.ConnectSeq = 3
			s.PeerAddr, s.MyAddr, s.Connecting = hi, lo, true
		}, ReconnectWait},
		{"equal cs, peer higher, we are in standby", func(s *SessionState, r *SessionReconnect) { r.ConnectSeq = 3; s.PeerAddr, s.MyAddr = hi, lo }, ReconnectReuse},
		{"race, peer higher, we are server", func(s *SessionState, r *SessionReconnect) {
			r.ConnectSeq = 3
			s.PeerAddr, s.MyAddr, s.Server, s.Connecting = hi, lo, true, true
		}, ReconnectReuse},
		{"race, peer lower", func(s *SessionState, r *SessionReconnect) { r.ConnectSeq = 3 }, ReconnectReuse},
		{"normal reconnect", func(*SessionState, *SessionReconnect) {}, ReconnectReuse},
	}
	for _, tc := range cases {
		s, r := base, req
		tc.mod(&s, &r)
		if got := DecideReconnect(s, &r); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDecideIdent(t *testing.T) {
	lo, hi := addr("v2:127.0.0.1:1000/1"), addr("v2:127.0.0.1:2000/1")
	base := SessionState{Exists: true, ClientCookie: 7, ServerCookie: 9, PeerGlobal: 5, PeerAddr: lo, MyAddr: hi}
	ci := ClientIdent{ClientCookie: 7, GlobalSeq: 6}
	cases := []struct {
		name string
		mod  func(*SessionState, *ClientIdent)
		want IdentAction
	}{
		{"no session", func(s *SessionState, _ *ClientIdent) { s.Exists = false }, IdentNew},
		{"closed", func(s *SessionState, _ *ClientIdent) { s.Closed = true }, IdentNew},
		{"older attempt", func(s *SessionState, c *ClientIdent) { c.GlobalSeq = 4 }, IdentClose},
		{"lossy existing", func(s *SessionState, _ *ClientIdent) { s.Lossy = true }, IdentReplace},
		{"peer restarted", func(s *SessionState, c *ClientIdent) { c.ClientCookie = 8 }, IdentReset},
		{"same cookie", func(*SessionState, *ClientIdent) {}, IdentReuse},
		{"open, unestablished cookie", func(s *SessionState, c *ClientIdent) { s.ClientCookie, s.Open = 0, true; c.ClientCookie = 8 }, IdentReuse},
		{"race, peer lower", func(s *SessionState, c *ClientIdent) { s.ClientCookie = 0; c.ClientCookie = 8 }, IdentReuse},
		{"race, peer higher", func(s *SessionState, c *ClientIdent) {
			s.ClientCookie = 0
			c.ClientCookie = 8
			s.PeerAddr, s.MyAddr = hi, lo
		}, IdentWait},
		{"race, peer higher, we are server", func(s *SessionState, c *ClientIdent) {
			s.ClientCookie = 0
			c.ClientCookie = 8
			s.PeerAddr, s.MyAddr, s.Server = hi, lo, true
		}, IdentReuse},
		{"our outgoing session is open and the peer dials anew: it reset (Ceph's order)", func(s *SessionState, c *ClientIdent) {
			s.Outgoing, s.Open = true, true
			c.ClientCookie = 8
		}, IdentReset},
	}
	for _, tc := range cases {
		s, c := base, ci
		tc.mod(&s, &c)
		if got := DecideIdent(s, &c); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// resumeClient returns a client engine that has authenticated and sent
// SESSION_RECONNECT, with the server's side scripted by hand.
func resumeClient(t *testing.T) *side {
	cc := clientConfig()
	cc.Lossy = false
	cc.ClientCookie, cc.ServerCookie, cc.ConnectSeq, cc.InSeq, cc.GlobalSeq = 11, 22, 3, 40, 9
	c := &side{e: NewEngine(cc)}
	c.e.Start()
	c.in = AppendBanner(nil, FeatureRevision1, 0)
	c.in = AppendFrame(c.in, TagHello, true, (&Hello{EntityType: msg.EntityOSD, PeerAddr: addr("v2:127.0.0.1:5/0")}).Append(nil))
	c.in = AppendFrame(c.in, TagAuthDone, true, (&AuthDone{GlobalID: 1, ConMode: ConModeCRC}).Append(nil))
	c.in = AppendFrame(c.in, TagAuthSignature, true, (&AuthSignature{}).Append(nil))
	c.feed(t)
	if c.err != nil {
		t.Fatal(c.err)
	}
	frames := splitFrames(t, c.e.Output())
	last := frames[len(frames)-1]
	if last.tag != TagSessionReconnect {
		t.Fatalf("client sent %v last", last.tag)
	}
	r, err := ParseSessionReconnect(last.seg0)
	if err != nil {
		t.Fatal(err)
	}
	if r.ClientCookie != 11 || r.ServerCookie != 22 || r.ConnectSeq != 3 || r.MsgSeq != 40 || r.GlobalSeq != 9 {
		t.Fatalf("reconnect %+v", r)
	}
	return c
}

func lastFrame(t *testing.T, c *side) rawFrame {
	t.Helper()
	f := splitFrames(t, c.e.Output())
	if len(f) == 0 {
		t.Fatal("nothing sent")
	}
	return f[len(f)-1]
}

func TestClientReconnectOK(t *testing.T) {
	c := resumeClient(t)
	c.in = AppendFrame(nil, TagSessionReconnectOK, true, (&SessionReconnectOK{MsgSeq: 17}).Append(nil))
	c.feed(t)
	if c.err != nil || !c.e.Ready() || c.e.InSeq() != 40 {
		t.Fatalf("err %v ready %v in_seq %d", c.err, c.e.Ready(), c.e.InSeq())
	}
	ev := c.events[len(c.events)-1]
	if ev.Kind != EvReconnected || ev.Seq != 17 {
		t.Fatalf("event %+v", ev)
	}
}

func TestClientSessionReset(t *testing.T) {
	for _, full := range []bool{true, false} {
		c := resumeClient(t)
		c.in = AppendFrame(nil, TagSessionReset, true, (&SessionReset{Full: full}).Append(nil))
		c.feed(t)
		ev := c.events[len(c.events)-1]
		if c.err != nil || ev.Kind != EvSessionReset || ev.Full != full {
			t.Fatalf("err %v event %+v", c.err, ev)
		}
		if err := c.e.ResetSession(99); err != nil {
			t.Fatal(err)
		}
		f := lastFrame(t, c)
		ci, err := ParseClientIdent(f.seg0)
		if f.tag != TagClientIdent || err != nil || ci.ClientCookie != 99 {
			t.Fatalf("after reset the client sent %v %+v %v", f.tag, ci, err)
		}
		// SERVER_IDENT completes the new session with in_seq 0.
		c.in = AppendFrame(nil, TagServerIdent, true, (&ServerIdent{Addrs: msg.AddrVec{addr("v2:127.0.0.1:5/0")}, Supported: msg.FeaturesAll, ServerCookie: 5}).Append(nil))
		c.feed(t)
		if c.err != nil || !c.e.Ready() || c.e.InSeq() != 0 || c.e.Peer().Cookie != 5 {
			t.Fatalf("err %v ready %v in_seq %d", c.err, c.e.Ready(), c.e.InSeq())
		}
	}
}

func TestClientRetry(t *testing.T) {
	c := resumeClient(t)
	c.in = AppendFrame(nil, TagSessionRetry, true, (&SessionRetry{ConnectSeq: 8}).Append(nil))
	c.feed(t)
	f := lastFrame(t, c)
	r, _ := ParseSessionReconnect(f.seg0)
	if c.err != nil || f.tag != TagSessionReconnect || r.ConnectSeq != 9 {
		t.Fatalf("err %v sent %v cs %d", c.err, f.tag, r.ConnectSeq)
	}
	if ev := c.events[len(c.events)-1]; ev.Kind != EvRetry || ev.Seq != 8 {
		t.Fatalf("event %+v", ev)
	}
}

func TestClientRetryGlobal(t *testing.T) {
	c := resumeClient(t)
	c.in = AppendFrame(nil, TagSessionRetryGlobal, true, (&SessionRetryGlobal{GlobalSeq: 50}).Append(nil))
	c.feed(t)
	if ev := c.events[len(c.events)-1]; c.err != nil || ev.Kind != EvRetryGlobal || ev.Seq != 50 {
		t.Fatalf("err %v event %+v", c.err, ev)
	}
	if err := c.e.RetryGlobal(51); err != nil {
		t.Fatal(err)
	}
	f := lastFrame(t, c)
	r, _ := ParseSessionReconnect(f.seg0)
	if f.tag != TagSessionReconnect || r.GlobalSeq != 51 {
		t.Fatalf("sent %v gs %d", f.tag, r.GlobalSeq)
	}
}

func TestClientWaitOnReconnect(t *testing.T) {
	c := resumeClient(t)
	c.in = AppendFrame(nil, TagWait, true)
	c.feed(t)
	if ev := c.events[len(c.events)-1]; c.err != nil || ev.Kind != EvWait {
		t.Fatalf("err %v event %+v", c.err, ev)
	}
}

// A client that did not ask to resume must not accept resumption frames.
func TestClientUnexpectedReconnectOK(t *testing.T) {
	c, s := pair(t, clientConfig(), serverConfig())
	run(t, c, s)
	c.in = AppendFrame(nil, TagSessionReconnectOK, true, (&SessionReconnectOK{MsgSeq: 1}).Append(nil))
	c.feed(t)
	if !errors.Is(c.err, ErrUnexpectedFrame) {
		t.Fatalf("error %v", c.err)
	}
}

// The server side of a resumption, driven against a real client engine.
func TestServerReconnectActions(t *testing.T) {
	for _, act := range []ReconnectAction{ReconnectReuse, ReconnectResetFull, ReconnectReset, ReconnectRetry, ReconnectRetryGlobal, ReconnectWait} {
		cc := clientConfig()
		cc.Lossy = false
		cc.ClientCookie, cc.ServerCookie, cc.ConnectSeq, cc.InSeq, cc.GlobalSeq = 11, 22, 3, 40, 9
		c, s := pair(t, cc, serverConfig())
		run(t, c, s)
		if len(s.events) != 1 || s.events[0].Kind != EvReconnect {
			t.Fatalf("server events %v (err %v %v)", kinds(s.events), c.err, s.err)
		}
		r := s.e.PendingReconnect()
		if r.ClientCookie != 11 || r.MsgSeq != 40 {
			t.Fatalf("pending %+v", r)
		}
		var err error
		switch act {
		case ReconnectReuse:
			err = s.e.AcceptReconnect(33, msg.EntityName{Type: msg.EntityClient, Num: 4}, msg.FeaturesAll)
		case ReconnectResetFull, ReconnectReset:
			err = s.e.Reset(act == ReconnectResetFull)
		case ReconnectRetry:
			err = s.e.Retry(5)
		case ReconnectRetryGlobal:
			err = s.e.RetryGlobalSeq(100)
		case ReconnectWait:
			err = s.e.Wait()
		}
		if err != nil {
			t.Fatal(err)
		}
		c.events, s.events = nil, nil
		run(t, c, s)
		got := kinds(c.events)
		want := map[ReconnectAction]EventKind{ReconnectReuse: EvReconnected, ReconnectResetFull: EvSessionReset,
			ReconnectReset: EvSessionReset, ReconnectRetry: EvRetry, ReconnectRetryGlobal: EvRetryGlobal, ReconnectWait: EvWait}[act]
		if len(got) == 0 || got[0] != want {
			t.Fatalf("%v: client events %v err %v", act, got, c.err)
		}
		switch act {
		case ReconnectReuse:
			if !c.e.Ready() || !s.e.Ready() || c.events[0].Seq != 33 {
				t.Fatalf("not resumed")
			}
		case ReconnectRetry:
			// The client resent SESSION_RECONNECT with cs 6.
			if s.e.PendingReconnect().ConnectSeq != 6 {
				t.Fatalf("retry cs %d", s.e.PendingReconnect().ConnectSeq)
			}
		}
	}
}
