package msgr1

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
)

func TestHandshakeMon(t *testing.T) {
	c, s := pair(clientConfig(), serverConfig())
	run(t, c, s)
	if c.err != nil || s.err != nil {
		t.Fatalf("errors: client %v server %v", c.err, s.err)
	}
	if !c.e.Ready() || !s.e.Ready() {
		t.Fatalf("not ready: client %v server %v", kinds(c.events), kinds(s.events))
	}
	if !slices.Equal(kinds(s.events), []EventKind{EvConnect, EvReady}) || !slices.Equal(kinds(c.events), []EventKind{EvReady}) {
		t.Fatalf("events: client %v server %v", kinds(c.events), kinds(s.events))
	}
	pc := s.e.PendingConnect()
	if pc.ProtocolVersion != ProtoMonClient || pc.HostType != uint32(msg.EntityClient) || pc.Flags != ConnectFlagLossy ||
		pc.AuthorizerLen != 0 || pc.AuthorizerProtocol != 0 || pc.GlobalSeq != 1 || pc.ConnectSeq != 0 || pc.Features != msg.FeaturesAll {
		t.Fatalf("connect %+v", pc)
	}
	cp, sp := c.e.Peer(), s.e.Peer()
	if cp.Addr.Nonce != 0 || cp.Addr.IP != netip.MustParseAddrPort("127.0.0.1:6789") || cp.MyAddr.IP != netip.MustParseAddrPort("127.0.0.1:50000") {
		t.Fatalf("client peer %+v", cp)
	}
	// The client announced the IP the server saw, port 0, its nonce.
	if sp.Addr.IP != netip.MustParseAddrPort("127.0.0.1:0") || sp.Addr.Nonce != 42 || sp.Name.Type != msg.EntityClient {
		t.Fatalf("server peer %+v", sp)
	}
	if !cp.Lossy || !sp.Lossy || cp.ConnectSeq != 1 || sp.ConnectSeq != 1 || cp.GlobalSeq != 7 || sp.GlobalSeq != 1 {
		t.Fatalf("session: client %+v server %+v", cp, sp)
	}
	if cp.Features != msg.FeaturesAll || sp.Features != msg.FeaturesAll || cp.Auth != nil || sp.Auth != nil || c.e.Signed() {
		t.Fatalf("features/auth: client %+v server %+v", cp, sp)
	}
	if c.e.ConnectSeq() != 1 {
		t.Fatalf("client connect_seq %d", c.e.ConnectSeq())
	}
}

// exchange sends m from a to b and returns b's events.
func exchange(t *testing.T, a, b *side, m *msg.Message) []Event {
	t.Helper()
	b.events = nil
	b.in = append(b.in, a.e.AppendMessage(nil, m)...)
	b.feed(t)
	if b.err != nil {
		t.Fatalf("receive: %v", b.err)
	}
	return b.events
}

func TestMessagesBothWays(t *testing.T) {
	for _, tc := range []struct {
		name      string
		challenge bool
		auth      bool
	}{{"mon", false, false}, {"osd", false, true}, {"osd-challenge", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			cc, sc := clientConfig(), serverConfig()
			if tc.auth {
				cc, sc, _, _ = osdConfigs(tc.challenge)
			}
			c, s := pair(cc, sc)
			run(t, c, s)
			if c.err != nil || s.err != nil || !c.e.Ready() || !s.e.Ready() {
				t.Fatalf("handshake: %v %v", c.err, s.err)
			}
			if c.e.Signed() != tc.auth || s.e.Signed() != tc.auth {
				t.Fatalf("signed: client %v server %v", c.e.Signed(), s.e.Signed())
			}
			for _, dir := range []struct{ from, to *side }{{c, s}, {s, c}} {
				m := testMessage(1, "front", "mid", "data!")
				m.Header.Priority = msg.PrioHigh
				evs := exchange(t, dir.from, dir.to, m)
				if len(evs) != 1 || evs[0].Kind != EvMessage || evs[0].Dropped {
					t.Fatalf("events %v", kinds(evs))
				}
				r := evs[0].Msg
				if r.Header.Seq != 1 || r.Header.Tid != 99 || r.Header.Type != 2 || r.Header.Priority != msg.PrioHigh ||
					string(r.Front.Bytes()) != "front" || string(r.Middle.Bytes()) != "mid" || string(r.Data.Bytes()) != "data!" {
					t.Fatalf("received %+v %q %q %q", r.Header, r.Front.Bytes(), r.Middle.Bytes(), r.Data.Bytes())
				}
				if r.Header.Src != dir.from.e.cfg.MyName {
					t.Fatalf("src %v, want %v", r.Header.Src, dir.from.e.cfg.MyName)
				}
				if want := msg.FooterComplete; tc.auth {
					if r.Footer.Flags != want|msg.FooterSigned || r.Footer.Sig == 0 {
						t.Fatalf("footer %+v", r.Footer)
					}
				} else if r.Footer.Flags != want || r.Footer.Sig != 0 {
					t.Fatalf("footer %+v", r.Footer)
				}
				// A duplicate is dropped; a gap is reported.
				evs = exchange(t, dir.from, dir.to, testMessage(1, "again", "", ""))
				if len(evs) != 1 || !evs[0].Dropped || evs[0].Msg != nil {
					t.Fatalf("duplicate: %+v", evs)
				}
				evs = exchange(t, dir.from, dir.to, testMessage(4, "", "", ""))
				if len(evs) != 1 || evs[0].Skipped != 2 || dir.to.e.InSeq() != 4 {
					t.Fatalf("gap: %+v in_seq %d", evs, dir.to.e.InSeq())
				}
			}
		})
	}
}

func TestSignatureChecked(t *testing.T) {
	cc, sc, _, _ := osdConfigs(true)
	c, s := pair(cc, sc)
	run(t, c, s)
	wire := c.e.AppendMessage(nil, testMessage(1, "front", "", ""))
	// Flip a bit of the signature (the 8 bytes before the footer's flags).
	wire[len(wire)-2] ^= 0x10
	s.in = append(s.in, wire...)
	s.feed(t)
	if !errors.Is(s.err, ErrBadSignature) {
		t.Fatalf("tampered signature: %v", s.err)
	}
	checkTyped(t, s.err)
	// The signature matches the §5.5 algorithm over the frame's fields.
	f := c.e.Frame(testMessage(7, "hello", "", ""))
	f.Append(nil)
	ft := f.Footer()
	want, _ := Signature(testKey, SigBlock{HeaderCRC: f.Header.CRC, FrontCRC: ft.FrontCRC, FrontLen: 5, Seq: 7}, true)
	if ft.Sig != want || ft.Flags != msg.FooterComplete|msg.FooterSigned {
		t.Fatalf("footer %+v, want sig %#x", ft, want)
	}
}

func TestAuthorizerFlow(t *testing.T) {
	cc, sc, fc, fs := osdConfigs(true)
	c, s := pair(cc, sc)
	run(t, c, s)
	if c.err != nil || s.err != nil {
		t.Fatal(c.err, s.err)
	}
	wantC := []string{"request osd", "more chal", "done reply"}
	wantS := []string{`handle 2 client true "authz"`, `handle 2 client false "authz+ans"`}
	if !slices.Equal(fc.calls, wantC) || !slices.Equal(fs.calls, wantS) {
		t.Fatalf("calls: client %q server %q", fc.calls, fs.calls)
	}
	if !slices.Equal(kinds(c.events), []EventKind{EvChallenge, EvReady}) {
		t.Fatalf("client events %v", kinds(c.events))
	}
	pc := s.e.PendingConnect()
	if pc.ProtocolVersion != ProtoOSDClient || pc.AuthorizerProtocol != auth.MethodCephx || pc.AuthorizerLen != uint32(len("authz+ans")) || pc.Flags != 0 {
		t.Fatalf("connect %+v", pc)
	}
	sa := s.e.Peer().Auth
	if sa == nil || sa.GlobalID != 4100 || sa.Name.String() != "client.admin" || !bytes.Equal(sa.SessionKey, testKey) {
		t.Fatalf("server's auth result %+v", sa)
	}
	if ca := c.e.Peer().Auth; ca == nil || !bytes.Equal(ca.SessionKey, testKey) {
		t.Fatalf("client's auth result %+v", ca)
	}
}

func TestBadAuthorizer(t *testing.T) {
	cc, sc, _, fs := osdConfigs(false)
	fs.refuse = true
	c, s := pair(cc, sc)
	run(t, c, s)
	if !errors.Is(s.err, ErrBadAuthorizer) || !errors.Is(s.err, auth.ErrBadTicket) {
		t.Fatalf("server: %v", s.err)
	}
	if !errors.Is(c.err, ErrBadAuthorizer) {
		t.Fatalf("client: %v", c.err)
	}
	checkTyped(t, c.err)
	checkTyped(t, s.err)

	// No authorizer where one is required.
	cc, sc, _, _ = osdConfigs(false)
	cc.Auth = nil
	c, s = pair(cc, sc)
	run(t, c, s)
	if !errors.Is(s.err, ErrBadAuthorizer) || !errors.Is(c.err, ErrBadAuthorizer) {
		t.Fatalf("no authorizer: client %v server %v", c.err, s.err)
	}
	// ... unless the server allows it (a mon: MAuth follows).
	sc.AllowNoAuthorizer = true
	c, s = pair(cc, sc)
	run(t, c, s)
	if c.err != nil || s.err != nil || !s.e.Ready() || s.e.Peer().Auth != nil || s.e.Signed() {
		t.Fatalf("allowed without authorizer: %v %v", c.err, s.err)
	}

	// The client's auth method cannot build an authorizer.
	cc, sc, fc, _ := osdConfigs(false)
	fc.failReq = true
	c, s = pair(cc, sc)
	run(t, c, s)
	if !errors.Is(c.err, ErrBadAuthorizer) || !errors.Is(c.err, auth.ErrNoTicket) {
		t.Fatalf("request failure: %v", c.err)
	}

	// A server authorizer reply the client's method rejects.
	cc, sc, _, fs = osdConfigs(false)
	c, s = pair(cc, sc)
	s.decide = func(e *Engine, ev Event) error {
		e.authRepl = []byte("forged")
		return acceptNew(e, ev)
	}
	run(t, c, s)
	if !errors.Is(c.err, ErrBadAuthorizer) || !errors.Is(c.err, auth.ErrBadKey) {
		t.Fatalf("forged reply: %v", c.err)
	}
}

func TestNoAuthorizerToMon(t *testing.T) {
	cc, sc := clientConfig(), serverConfig()
	fc := &fakeClient{key: testKey}
	cc.Auth = fc
	c, s := pair(cc, sc)
	run(t, c, s)
	if c.err != nil || s.err != nil || len(fc.calls) != 0 || s.e.PendingConnect().AuthorizerLen != 0 {
		t.Fatalf("client to mon: %v %v calls %q", c.err, s.err, fc.calls)
	}
	// A mon talking to a mon does send one.
	cc.MyName = msg.EntityName{Type: msg.EntityMon, Num: 1}
	fc.calls = nil
	sc.AuthServer = &fakeServer{key: testKey}
	c, s = pair(cc, sc)
	run(t, c, s)
	if c.err != nil || s.err != nil || !slices.Equal(fc.calls, []string{"request mon", "done reply"}) || s.e.PendingConnect().ProtocolVersion != ProtoMonCluster {
		t.Fatalf("mon to mon: %v %v calls %q connect %+v", c.err, s.err, fc.calls, s.e.PendingConnect())
	}
}

func TestBadProtoVersionAndFeatures(t *testing.T) {
	// The client thinks it dials an OSD; the server is a mon.
	cc := clientConfig()
	cc.PeerType = msg.EntityOSD
	c, s := pair(cc, serverConfig())
	run(t, c, s)
	if !errors.Is(c.err, ErrBadProtoVersion) || s.err != nil || s.e.Ready() {
		t.Fatalf("bad proto: client %v server %v", c.err, s.err)
	}
	// The client lacks what the mon requires.
	cc = clientConfig()
	cc.Supported = msg.FeatureMsgAddr2
	c, s = pair(cc, serverConfig())
	run(t, c, s)
	if !errors.Is(c.err, ErrMissingFeatures) || s.e.Ready() {
		t.Fatalf("features: client %v server %v", c.err, s.err)
	}
	// The server lacks what the client requires.
	cc = clientConfig()
	cc.Required = 1 << 63
	c, s = pair(cc, serverConfig())
	run(t, c, s)
	if !errors.Is(c.err, ErrMissingFeatures) {
		t.Fatalf("client requirement: %v", c.err)
	}
}

func TestServerDecisions(t *testing.T) {
	t.Run("retry-session", func(t *testing.T) {
		cc := clientConfig()
		cc.ConnectSeq = 2
		c, s := pair(cc, serverConfig())
		n := 0
		s.decide = func(e *Engine, ev Event) error {
			n++
			if n == 1 {
				return e.RetrySession(6)
			}
			if e.PendingConnect().ConnectSeq != 6 {
				t.Errorf("retried with cs %d", e.PendingConnect().ConnectSeq)
			}
			return acceptNew(e, ev)
		}
		run(t, c, s)
		if c.err != nil || !c.e.Ready() || !hasKind(c.events, EvRetry) || c.e.ConnectSeq() != 7 {
			t.Fatalf("client %v %v cs %d", c.err, kinds(c.events), c.e.ConnectSeq())
		}
	})
	t.Run("retry-session-stale", func(t *testing.T) {
		cc := clientConfig()
		cc.ConnectSeq = 2
		c, s := pair(cc, serverConfig())
		s.decide = func(e *Engine, ev Event) error { return e.RetrySession(2) }
		run(t, c, s)
		if !errors.Is(c.err, ErrProtocol) {
			t.Fatalf("client %v", c.err)
		}
	})
	t.Run("retry-global", func(t *testing.T) {
		c, s := pair(clientConfig(), serverConfig())
		n := 0
		s.decide = func(e *Engine, ev Event) error {
			n++
			if n == 1 {
				return e.RetryGlobalSeq(30)
			}
			if e.PendingConnect().GlobalSeq != 31 {
				t.Errorf("retried with gs %d", e.PendingConnect().GlobalSeq)
			}
			return acceptNew(e, ev)
		}
		c.decide = func(e *Engine, ev Event) error {
			if ev.Seq != 30 {
				t.Errorf("retry global %d", ev.Seq)
			}
			return e.RetryGlobal(uint32(ev.Seq) + 1)
		}
		run(t, c, s)
		if c.err != nil || !c.e.Ready() || c.e.GlobalSeq() != 31 {
			t.Fatalf("client %v %v", c.err, kinds(c.events))
		}
	})
	t.Run("reset", func(t *testing.T) {
		cc := clientConfig()
		cc.ConnectSeq, cc.InSeq = 3, 10
		c, s := pair(cc, serverConfig())
		n := 0
		s.decide = func(e *Engine, ev Event) error {
			n++
			if n == 1 {
				return e.Reset()
			}
			if e.PendingConnect().ConnectSeq != 0 {
				t.Errorf("after reset cs %d", e.PendingConnect().ConnectSeq)
			}
			return e.Accept(Accept{GlobalSeq: 1, InSeq: 0})
		}
		run(t, c, s)
		if c.err != nil || !c.e.Ready() || !hasKind(c.events, EvSessionReset) || c.e.InSeq() != 0 || c.e.ConnectSeq() != 1 {
			t.Fatalf("client %v %v in_seq %d", c.err, kinds(c.events), c.e.InSeq())
		}
	})
	t.Run("wait", func(t *testing.T) {
		c, s := pair(clientConfig(), serverConfig())
		s.decide = func(e *Engine, ev Event) error { return e.Wait() }
		run(t, c, s)
		if c.err != nil || !hasKind(c.events, EvWait) || c.e.Ready() || s.e.Ready() {
			t.Fatalf("client %v %v", c.err, kinds(c.events))
		}
		if n, _ := c.e.Need(); n != 0 {
			t.Fatalf("client needs %d after WAIT", n)
		}
	})
	t.Run("decision-twice", func(t *testing.T) {
		c, s := pair(clientConfig(), serverConfig())
		run(t, c, s)
		if err := s.e.Accept(Accept{}); !errors.Is(err, ErrProtocol) {
			t.Fatalf("second Accept: %v", err)
		}
		if err := c.e.RetryGlobal(9); !errors.Is(err, ErrProtocol) {
			t.Fatalf("client RetryGlobal when ready: %v", err)
		}
	})
}

// TestResumeSession: a lossless client reconnects; both sides learn what
// the other has received (the SEQ exchange), so each drops the requeued
// messages the other already has.
func TestResumeSession(t *testing.T) {
	cc, sc, _, _ := osdConfigs(false)
	cc.ConnectSeq, cc.InSeq = 4, 17
	c, s := pair(cc, sc)
	s.decide = func(e *Engine, ev Event) error {
		// The client bumped its connect_seq past the session's.
		ex := SessionState{Exists: true, PeerGlobal: 0, ConnectSeq: 3}
		a, _ := DecideConnect(ex, e.PendingConnect())
		if a != ConnectReplace {
			t.Errorf("decision %v", a)
		}
		return e.Accept(Accept{GlobalSeq: 3, InSeq: 9})
	}
	run(t, c, s)
	if c.err != nil || s.err != nil {
		t.Fatal(c.err, s.err)
	}
	cr, sr := c.events[len(c.events)-1], s.events[len(s.events)-1]
	if cr.Kind != EvReady || cr.Seq != 9 || sr.Kind != EvReady || sr.Seq != 17 {
		t.Fatalf("ready: client %+v server %+v", cr, sr)
	}
	if c.e.InSeq() != 17 || s.e.InSeq() != 9 || c.e.ConnectSeq() != 5 || c.e.Peer().Lossy {
		t.Fatalf("in_seq client %d server %d cs %d", c.e.InSeq(), s.e.InSeq(), c.e.ConnectSeq())
	}
	// Sequence numbers continue.
	evs := exchange(t, s, c, testMessage(17, "old", "", ""))
	if !evs[0].Dropped {
		t.Fatalf("replayed message delivered again: %+v", evs[0])
	}
	evs = exchange(t, s, c, testMessage(18, "new", "", ""))
	if evs[0].Dropped || evs[0].Skipped != 0 {
		t.Fatalf("next message: %+v", evs[0])
	}

	// A peer reset: READY, no SEQ exchange, in_seq from 0.
	c, s = pair(cc, sc)
	s.decide = func(e *Engine, ev Event) error { return e.Accept(Accept{GlobalSeq: 3, InSeq: 9, Reset: true}) }
	run(t, c, s)
	if c.err != nil || !c.e.Ready() || !s.e.Ready() || s.e.InSeq() != 0 || len(s.events) != 1 {
		t.Fatalf("reset accept: %v %v", c.err, kinds(s.events))
	}
	if c.events[len(c.events)-1].Seq != 0 {
		t.Fatalf("client ready %+v", c.events)
	}
}

func TestKeepaliveAckClose(t *testing.T) {
	c, s := pair(clientConfig(), serverConfig())
	run(t, c, s)
	var b []byte
	b = c.e.AppendKeepalive(b, Stamp{5, 6})
	b = c.e.AppendKeepaliveAck(b, Stamp{7, 8})
	b = c.e.AppendAck(b, 42)
	b = append(b, byte(TagKeepalive))
	b = c.e.AppendClose(b)
	s.events = nil
	s.in = b
	s.feed(t)
	want := []Event{
		{Kind: EvKeepalive, Stamp: Stamp{5, 6}},
		{Kind: EvKeepaliveAck, Stamp: Stamp{7, 8}},
		{Kind: EvAck, Seq: 42},
		{Kind: EvKeepalive, Bare: true},
		{Kind: EvClose},
	}
	if s.err != nil || !slices.Equal(s.events, want) {
		t.Fatalf("events %+v err %v", s.events, s.err)
	}
	if s.e.Ready() {
		t.Fatal("ready after CLOSE")
	}
	// Without MSGR_KEEPALIVE2 the keepalive is bare.
	c.e.peer.Features &^= FeatureMsgrKeepalive2
	if k := c.e.AppendKeepalive(nil, Stamp{1, 2}); !bytes.Equal(k, []byte{byte(TagKeepalive)}) {
		t.Fatalf("keepalive %x", k)
	}
}

func TestWrongPeer(t *testing.T) {
	cc := clientConfig()
	cc.PeerAddr = addr("v1:127.0.0.1:6789/5")
	c, s := pair(cc, serverConfig())
	run(t, c, s)
	if !errors.Is(c.err, ErrWrongPeer) {
		t.Fatalf("wrong nonce: %v", c.err)
	}
	// A server bound to a blank IP names its port and nonce only.
	sc := serverConfig()
	sc.MyAddr = addr("v1:0.0.0.0:6789/0")
	c, s = pair(clientConfig(), sc)
	run(t, c, s)
	if c.err != nil || !c.e.Ready() {
		t.Fatalf("blank server IP: %v", c.err)
	}
	// A v2 peer's banner.
	c = &side{e: NewEngine(clientConfig())}
	c.e.Start()
	// Only what a msgr2 server sends before it waits: its 26-byte banner.
	c.in = append([]byte("ceph v2\n\x10\x00"), make([]byte, 16)...)
	c.feed(t)
	if !errors.Is(c.err, ErrMsgr2Banner) {
		t.Fatalf("v2 banner: %v", c.err)
	}
	s = &side{e: NewEngine(serverConfig())}
	s.e.Start()
	s.in = append([]byte("xeph v027"), make([]byte, LegacyAddrLen)...)
	s.feed(t)
	if !errors.Is(s.err, ErrBadBanner) {
		t.Fatalf("bad banner: %v", s.err)
	}
}

func TestMessageErrors(t *testing.T) {
	ready := func(t *testing.T) (*side, *side) {
		c, s := pair(clientConfig(), serverConfig())
		run(t, c, s)
		if !s.e.Ready() {
			t.Fatal("not ready")
		}
		return c, s
	}
	wire := func(c *side) []byte { return c.e.AppendMessage(nil, testMessage(1, "front", "middle", "data")) }
	footer := func(w []byte) []byte { return w[len(w)-FooterLen:] }
	for _, tc := range []struct {
		name  string
		mod   func(w []byte) []byte
		want  error
		drops bool
	}{
		{"header-crc", func(w []byte) []byte { w[5] ^= 1; return w }, ErrHeaderCRC, false},
		{"front-crc", func(w []byte) []byte { w[1+HeaderLen] ^= 1; return w }, ErrDataCRC, false},
		{"middle-crc", func(w []byte) []byte { w[1+HeaderLen+5] ^= 1; return w }, ErrDataCRC, false},
		{"data-crc", func(w []byte) []byte { w[1+HeaderLen+11] ^= 1; return w }, ErrDataCRC, false},
		{"data-nocrc", func(w []byte) []byte { w[1+HeaderLen+11] ^= 1; footer(w)[20] |= msg.FooterNoCRC; return w }, nil, false},
		{"aborted", func(w []byte) []byte { footer(w)[20] &^= msg.FooterComplete; return w }, ErrAborted, false},
		{"unknown-tag", func(w []byte) []byte { return []byte{byte(TagSeq)} }, ErrUnknownTag, false},
		{"zero-tag", func(w []byte) []byte { return []byte{0} }, ErrUnknownTag, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := ready(t)
			s.in = tc.mod(wire(c))
			s.feed(t)
			if tc.want == nil {
				if s.err != nil || !hasKind(s.events, EvMessage) {
					t.Fatalf("err %v events %v", s.err, kinds(s.events))
				}
				return
			}
			if !errors.Is(s.err, tc.want) {
				t.Fatalf("err %v, want %v", s.err, tc.want)
			}
			checkTyped(t, s.err)
			// The engine stays closed.
			if _, err := s.e.Feed([]byte{1}); !errors.Is(err, tc.want) {
				t.Fatalf("after failure: %v", err)
			}
		})
	}
}

func TestOldFooter(t *testing.T) {
	cc, sc := clientConfig(), serverConfig()
	cc.Supported &^= FeatureMsgAuth
	c, s := pair(cc, sc)
	run(t, c, s)
	if c.err != nil || s.err != nil {
		t.Fatal(c.err, s.err)
	}
	w := c.e.AppendMessage(nil, testMessage(1, "ab", "", "cd"))
	if len(w) != 1+HeaderLen+4+OldFooterLen {
		t.Fatalf("wire length %d", len(w))
	}
	evs := exchange(t, c, s, testMessage(1, "ab", "", "cd"))
	if len(evs) != 1 || string(evs[0].Msg.Data.Bytes()) != "cd" {
		t.Fatalf("events %+v", evs)
	}
}

func TestLimits(t *testing.T) {
	lim := Limits{MaxAuthorizer: 8, MaxSegment: 10, MaxMessage: 15}
	sc := serverConfig()
	sc.Limits = lim
	// An authorizer longer than the limit is refused from its length.
	s := &side{e: NewEngine(sc)}
	s.e.Start()
	c := Connect{Features: msg.FeaturesAll, HostType: uint32(msg.EntityClient), ProtocolVersion: ProtoMonClient, AuthorizerLen: 9}
	s.in = append(AppendClientBanner(nil, addr("v1:127.0.0.1:1/1")), c.Append(nil)...)
	s.feed(t)
	if !errors.Is(s.err, ErrTooLarge) {
		t.Fatalf("long authorizer: %v", s.err)
	}
	// Segments and messages over the limits are refused from the header.
	for _, tc := range []struct{ front, mid, data string }{
		{"01234567890", "", ""}, {"", "01234567890", ""}, {"", "", "01234567890"}, {"0123456789", "012345", ""},
	} {
		cc := clientConfig()
		c, s := pair(cc, sc)
		run(t, c, s)
		s.in = c.e.AppendMessage(nil, testMessage(1, tc.front, tc.mid, tc.data))
		s.feed(t)
		if !errors.Is(s.err, ErrTooLarge) {
			t.Fatalf("%+v: %v", tc, s.err)
		}
		if n, _ := s.e.Need(); n != 0 {
			t.Fatalf("still needs %d", n)
		}
	}
	// The client refuses a long authorizer reply.
	cc := clientConfig()
	cc.Limits = lim
	cl := &side{e: NewEngine(cc)}
	cl.e.Start()
	r := ConnectReply{Tag: TagReady, AuthorizerLen: 9}
	cl.in = append(AppendServerBanner(nil, cc.PeerAddr, addr("v1:127.0.0.1:2/0")), r.Append(nil)...)
	cl.feed(t)
	if !errors.Is(cl.err, ErrTooLarge) {
		t.Fatalf("long reply authorizer: %v", cl.err)
	}
}

// TestPreAuthBound: before the handshake ends neither role asks for more
// than a banner or the authorizer limit at once, whatever it is fed.
func TestPreAuthBound(t *testing.T) {
	for _, role := range []Role{Client, Server} {
		cfg := clientConfig()
		if role == Server {
			cfg = serverConfig()
		}
		e := NewEngine(cfg)
		e.Start()
		bound := max(ServerBannerLen, DefaultMaxAuthorizer)
		for i := 0; i < 200 && !e.Ready(); i++ {
			n, retain := e.Need()
			if n == 0 {
				break
			}
			if n > bound || retain {
				t.Fatalf("%v asks for %d bytes (retain %v) before ready", role, n, retain)
			}
			p := bytes.Repeat([]byte{0xff}, n)
			if _, err := e.Feed(p); err != nil {
				break
			}
		}
	}
}

func TestFeedMisuse(t *testing.T) {
	e := NewEngine(clientConfig())
	if _, err := e.Feed(nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Feed before Start: %v", err)
	}
	e.Start()
	if _, err := e.Feed(make([]byte, 3)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("short Feed: %v", err)
	}
	checkTyped(t, e.Err())
}

func TestAccessors(t *testing.T) {
	c, s := pair(clientConfig(), serverConfig())
	run(t, c, s)
	if s.e.Features() != msg.FeaturesAll {
		t.Fatalf("features %#x", s.e.Features())
	}
	c.e.SetMyName(msg.EntityName{Type: msg.EntityClient, Num: 77})
	m := testMessage(1, "abc", "", "defg")
	f := c.e.Frame(m)
	w := c.e.AppendMessage(nil, m)
	if f.WireLen() != len(w) {
		t.Fatalf("WireLen %d, encoded %d", f.WireLen(), len(w))
	}
	s.in = w
	// Stop before the body: the pending header tells its size.
	for {
		if h, ok := s.e.PendingHeader(); ok {
			if h.PayloadLen() != 7 || h.Src.Num != 77 || h.FrontLen != 3 || h.DataLen != 4 {
				t.Fatalf("pending header %+v", h)
			}
			break
		}
		n, _ := s.e.Need()
		if _, err := s.e.Feed(s.in[:n]); err != nil {
			t.Fatal(err)
		}
		s.in = s.in[n:]
	}
	s.feed(t)
	if s.err != nil || s.events[len(s.events)-1].Msg.Header.Src.Num != 77 {
		t.Fatalf("%v %+v", s.err, s.events)
	}
	s.e.SetInSeq(40)
	if s.e.InSeq() != 40 {
		t.Fatal("SetInSeq")
	}
	err := errorf(ErrDataCRC, TagMsg, "seq %d", 3)
	if err.Error() != "msgr1: payload crc mismatch: MSG seq 3" {
		t.Fatalf("error text %q", err.Error())
	}
	if wrapf(ErrBadAuthorizer, auth.ErrExpired, 0, "x").Error() != "msgr1: bad authorizer: x: auth: ticket expired" {
		t.Fatal(wrapf(ErrBadAuthorizer, auth.ErrExpired, 0, "x").Error())
	}
	for _, k := range []EventKind{EvReady, EvConnect, EvWait, EvMessage, EvAck, EvKeepalive, EvKeepaliveAck, EvSessionReset, EvRetry, EvRetryGlobal, EvChallenge, EvClose} {
		if k.String() == "event?" {
			t.Errorf("event %d has no name", k)
		}
	}
	if Client.String() != "client" || Server.String() != "server" || ConnectWait.String() != "wait" {
		t.Error("names")
	}
}

// TestSetLimits: a server that lowers MaxMessage until its peer has
// authenticated refuses a larger message from its header.
func TestSetLimits(t *testing.T) {
	c, s := pair(clientConfig(), serverConfig())
	run(t, c, s)
	s.e.SetLimits(Limits{MaxMessage: 64})
	evs := exchange(t, c, s, testMessage(1, string(make([]byte, 64)), "", ""))
	if len(evs) != 1 || evs[0].Msg.Front.Len() != 64 {
		t.Fatalf("64 bytes: %+v", evs)
	}
	s.in = c.e.AppendMessage(nil, testMessage(2, string(make([]byte, 65)), "", ""))
	s.feed(t)
	if !errors.Is(s.err, ErrTooLarge) {
		t.Fatalf("65 bytes: %v", s.err)
	}
}
