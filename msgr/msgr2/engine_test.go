package msgr2

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

// side wraps an engine with the bytes not yet fed to it.
type side struct {
	e      *Engine
	in     []byte
	events []Event
	err    error
}

// feed gives s as much of its pending input as the engine asks for.
func (s *side) feed(t *testing.T) bool {
	t.Helper()
	progressed := false
	for s.err == nil {
		n, _ := s.e.Need()
		if s.e.state == stDecide || s.e.state == stClosed || len(s.in) < n {
			return progressed
		}
		p := append([]byte(nil), s.in[:n]...)
		s.in = s.in[n:]
		evs, err := s.e.Feed(p)
		s.events = append(s.events, evs...)
		s.err = err
		progressed = true
	}
	return progressed
}

// run pumps bytes between a and b until neither makes progress.
func run(t *testing.T, a, b *side) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		b.in = append(b.in, a.e.Output()...)
		a.in = append(a.in, b.e.Output()...)
		pa, pb := a.feed(t), b.feed(t)
		if !pa && !pb && len(a.e.out) == 0 && len(b.e.out) == 0 {
			return
		}
	}
	t.Fatal("handshake did not settle")
}

func addr(s string) msg.EntityAddr {
	a, err := msg.ParseEntityAddr(s)
	if err != nil {
		panic(err)
	}
	return a
}

func clientConfig() Config {
	return Config{
		Role:       Client,
		MyName:     msg.EntityName{Type: msg.EntityClient, Num: msg.NewID},
		MyAuthName: msg.AuthName{Type: msg.EntityClient, ID: "admin"},
		Nonce:      42,
		PeerAddr:   addr("v2:127.0.0.1:3300/0"),
		Supported:  msg.FeaturesAll,
		Lossy:      true,
		GlobalSeq:  1,
	}
}

func serverConfig() Config {
	return Config{
		Role:      Server,
		MyName:    msg.EntityName{Type: msg.EntityMon, Num: 0},
		MyAddrs:   msg.AddrVec{addr("v2:127.0.0.1:3300/0")},
		PeerAddr:  addr("v2:127.0.0.1:50000/0"),
		Supported: msg.FeaturesAll,
		Required:  msg.FeaturesMonRequired,
		GlobalID:  4100,
	}
}

func pair(t *testing.T, cc, sc Config) (*side, *side) {
	c := &side{e: NewEngine(cc)}
	s := &side{e: NewEngine(sc)}
	c.e.Start()
	s.e.Start()
	return c, s
}

func kinds(evs []Event) []EventKind {
	var k []EventKind
	for _, e := range evs {
		k = append(k, e.Kind)
	}
	return k
}

func TestHandshake(t *testing.T) {
	c, s := pair(t, clientConfig(), serverConfig())
	run(t, c, s)
	if c.err != nil || s.err != nil {
		t.Fatalf("errors: client %v server %v", c.err, s.err)
	}
	if len(s.events) != 1 || s.events[0].Kind != EvClientIdent {
		t.Fatalf("server events %v", kinds(s.events))
	}
	ci := s.e.PendingIdent()
	if ci.GID != 4100 || ci.Flags != IdentFlagLossy || ci.Target != addr("v2:127.0.0.1:3300/0") {
		t.Fatalf("client ident %+v", ci)
	}
	if a := ci.Addrs[0]; a.Type != msg.AddrAny || a.Nonce != 42 || a.IP.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("client addr %v", a)
	}
	if s.e.Peer().AuthName.String() != "client.admin" {
		t.Fatalf("auth name %v", s.e.Peer().AuthName)
	}
	if err := s.e.Accept(7, 0, true); err != nil {
		t.Fatal(err)
	}
	run(t, c, s)
	if !c.e.Ready() || !s.e.Ready() {
		t.Fatalf("ready: client %v server %v (errs %v %v)", c.e.Ready(), s.e.Ready(), c.err, s.err)
	}
	if got := kinds(c.events); len(got) != 1 || got[0] != EvReady {
		t.Fatalf("client events %v", got)
	}
	p := c.e.Peer()
	if p.Name != (msg.EntityName{Type: msg.EntityMon, Num: 0}) || p.GlobalSeq != 7 || !p.Lossy() || p.GlobalID != 4100 {
		t.Fatalf("client's view of the server: %+v", p)
	}
	if !c.e.Rev1() || !s.e.Rev1() {
		t.Fatal("rev1 not negotiated")
	}

	// Messages, acks and keepalives after the handshake.
	mf := MessageFrame{Header: Header2{Seq: 1, Tid: 9, Type: 2, Priority: 196, AckSeq: 0, Flags: 3},
		Front: msg.Buffers{[]byte("hello")}, Data: msg.Buffers{[]byte("da"), []byte("ta")}}
	var wire []byte
	wire = mf.AppendHead(wire, true)
	for _, p := range mf.Data {
		wire = append(wire, p...)
	}
	wire = mf.AppendTail(wire, true)
	wire = c.e.AppendKeepalive(wire, Stamp{5, 6})
	wire = c.e.AppendAck(wire, 3)
	s.events = nil
	s.in = append(s.in, wire...)
	s.feed(t)
	if s.err != nil {
		t.Fatal(s.err)
	}
	if got := kinds(s.events); len(got) != 3 || got[0] != EvMessage || got[1] != EvKeepalive || got[2] != EvAck {
		t.Fatalf("server events %v", got)
	}
	m := s.events[0].Msg
	if string(m.Front.Bytes()) != "hello" || string(m.Data.Bytes()) != "data" || m.Header.Tid != 9 || m.Header.Priority != 196 {
		t.Fatalf("message %+v", m.Header)
	}
	if m.Header.Src != (msg.EntityName{Type: msg.EntityClient, Num: 4100}) {
		t.Fatalf("src %v", m.Header.Src)
	}
	if s.events[1].Stamp != (Stamp{5, 6}) || s.events[2].Seq != 3 {
		t.Fatalf("keepalive %v ack %v", s.events[1], s.events[2])
	}
	// A duplicate seq is dropped, a gap is reported.
	s.events = nil
	s.in = append(s.in, wire[:mf.WireLen(true)]...)
	mf.Header.Seq = 5
	s.in = append(s.in, mf.AppendTail(append(mf.AppendHead(nil, true), "data"...), true)...)
	s.feed(t)
	if len(s.events) != 2 || !s.events[0].Dropped || s.events[1].Skipped != 3 || s.e.InSeq() != 5 {
		t.Fatalf("events %+v", s.events)
	}
}

// A client that advertises too few features gets IDENT_MISSING_FEATURES
// from the server and fails with ErrMissingFeatures.
func TestHandshakeMissingFeatures(t *testing.T) {
	cc := clientConfig()
	cc.Supported = msg.FeatureMsgAddr2
	c, s := pair(t, cc, serverConfig())
	run(t, c, s)
	if !errors.Is(c.err, ErrMissingFeatures) {
		t.Fatalf("client error %v", c.err)
	}
	var pe *Error
	if !errors.As(c.err, &pe) || pe.Tag != TagIdentMissingFeatures {
		t.Fatalf("error %#v", c.err)
	}
	if len(s.events) != 0 {
		t.Fatalf("server decided on a client lacking features: %v", kinds(s.events))
	}
}

// A client offering only secure mode with auth NONE gets AUTH_BAD_METHOD
// with the modes the server allows.
func TestHandshakeSecureOnly(t *testing.T) {
	s := &side{e: NewEngine(serverConfig())}
	s.e.Start()
	s.e.Output()
	// Script the client side by hand.
	var in []byte
	in = AppendBanner(in, FeatureRevision1, 0)
	in = AppendFrame(in, TagHello, true, (&Hello{EntityType: msg.EntityClient, PeerAddr: addr("v2:127.0.0.1:3300/0")}).Append(nil))
	pl := AuthNonePayload{Mode: AuthModeMon, Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}}
	req := AuthRequest{Method: AuthMethodNone, PreferredModes: []uint32{ConModeSecure}, Payload: pl.Append(nil)}
	in = AppendFrame(in, TagAuthRequest, true, req.Append(nil))
	s.in = in
	s.feed(t)
	if s.err != nil {
		t.Fatal(s.err)
	}
	out := s.e.Output()
	frames := splitFrames(t, out)
	if len(frames) != 2 || frames[0].tag != TagHello || frames[1].tag != TagAuthBadMethod {
		t.Fatalf("server sent %v", frames)
	}
	bm, err := ParseAuthBadMethod(frames[1].seg0)
	if err != nil {
		t.Fatal(err)
	}
	if bm.Result != -95 || len(bm.AllowedModes) != 1 || bm.AllowedModes[0] != ConModeCRC {
		t.Fatalf("bad method %+v", bm)
	}

	// And a client that receives AUTH_BAD_METHOD fails with a typed error.
	c := &side{e: NewEngine(clientConfig())}
	c.e.Start()
	c.in = AppendBanner(nil, FeatureRevision1, 0)
	c.in = AppendFrame(c.in, TagHello, true, (&Hello{EntityType: msg.EntityMon, PeerAddr: addr("v2:127.0.0.1:1/0")}).Append(nil))
	c.in = AppendFrame(c.in, TagAuthBadMethod, true, (&AuthBadMethod{Method: 1, Result: -95, AllowedMethods: []uint32{2}, AllowedModes: []uint32{2}}).Append(nil))
	c.feed(t)
	if !errors.Is(c.err, ErrBadAuthMethod) {
		t.Fatalf("client error %v", c.err)
	}
	// The server's choice of secure mode is refused too.
	c = &side{e: NewEngine(clientConfig())}
	c.e.Start()
	c.in = AppendBanner(nil, FeatureRevision1, 0)
	c.in = AppendFrame(c.in, TagHello, true, (&Hello{EntityType: msg.EntityMon}).Append(nil))
	c.in = AppendFrame(c.in, TagAuthDone, true, (&AuthDone{GlobalID: 1, ConMode: ConModeSecure}).Append(nil))
	c.feed(t)
	if !errors.Is(c.err, ErrBadAuthMethod) {
		t.Fatalf("client error %v", c.err)
	}
}

type rawFrame struct {
	tag  Tag
	seg0 []byte
}

func splitFrames(t *testing.T, b []byte) []rawFrame {
	t.Helper()
	var out []rawFrame
	if bytes.HasPrefix(b, []byte(BannerPrefix)) {
		b = b[BannerPrefixLen+BannerPayloadLen:]
	}
	for len(b) > 0 {
		pre, err := ParsePreamble(b[:PreambleLen], Limits{})
		if err != nil {
			t.Fatal(err)
		}
		n := pre.BodyLen(true)
		segs, err := ParseBody(&pre, b[PreambleLen:PreambleLen+n], true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rawFrame{pre.Tag, segs[0]})
		b = b[PreambleLen+n:]
	}
	return out
}

func TestHandshakeWait(t *testing.T) {
	c, s := pair(t, clientConfig(), serverConfig())
	run(t, c, s)
	if err := s.e.Wait(); err != nil {
		t.Fatal(err)
	}
	run(t, c, s)
	if got := kinds(c.events); len(got) != 1 || got[0] != EvWait {
		t.Fatalf("client events %v err %v", got, c.err)
	}
}

func TestHandshakeRev0Peer(t *testing.T) {
	// A peer whose banner lacks REVISION_1 speaks msgr2.0 frames.
	s := &side{e: NewEngine(serverConfig())}
	s.e.Start()
	s.e.Output()
	in := AppendBanner(nil, 0, 0)
	in = AppendFrame(in, TagHello, false, (&Hello{EntityType: msg.EntityClient, PeerAddr: addr("v2:127.0.0.1:3300/0")}).Append(nil))
	s.in = in
	s.feed(t)
	if s.err != nil || s.e.Rev1() || s.e.state != stAuth {
		t.Fatalf("err %v rev1 %v state %d", s.err, s.e.Rev1(), s.e.state)
	}
	// Its reply HELLO is in rev0 layout: parseable with rev1=false.
	out := s.e.Output()
	pre, err := ParsePreamble(out[:PreambleLen], Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseBody(&pre, out[PreambleLen:PreambleLen+pre.BodyLen(false)], false); err != nil {
		t.Fatal(err)
	}
}

// Bad input at every stage fails with a typed error, never a panic.
func TestEngineBadInput(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"garbage banner", []byte("GET / HTTP/1.1\r\n\r\nxxxxxxxxxxxxx"), ErrBadBanner},
		{"msgr1 banner", []byte("ceph v027xxxxxxxxxxxxxxxxxxxxxxxxxxx"), ErrMsgr1Banner},
		{"required feature", AppendBanner(nil, 0xff, 0x80), ErrMissingFeatures},
		{"message before hello", AppendFrame(AppendBanner(nil, 1, 0), TagMessage, true, make([]byte, Header2Len)), ErrUnexpectedFrame},
		{"unknown tag", func() []byte {
			b := AppendBanner(nil, 1, 0)
			p := Preamble{Tag: 99, NumSegments: 1, Segments: [4]SegmentDesc{{Len: 1, Align: 8}}}
			b = p.Append(b)
			return append(b, 0, 0, 0, 0, 0)
		}(), ErrUnknownTag},
		{"bad preamble crc", func() []byte {
			b := AppendBanner(nil, 1, 0)
			b = AppendFrame(b, TagHello, true, (&Hello{EntityType: 8}).Append(nil))
			b[BannerPrefixLen+BannerPayloadLen+29] ^= 1
			return b
		}(), ErrPreambleCRC},
		{"bad segment crc", func() []byte {
			b := AppendBanner(nil, 1, 0)
			b = AppendFrame(b, TagHello, true, (&Hello{EntityType: 8}).Append(nil))
			b[len(b)-1] ^= 1
			return b
		}(), ErrSegmentCRC},
		{"oversized control frame", func() []byte {
			b := AppendBanner(nil, 1, 0)
			p := Preamble{Tag: TagHello, NumSegments: 1, Segments: [4]SegmentDesc{{Len: 1 << 30, Align: 8}}}
			return p.Append(b)
		}(), ErrTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &side{e: NewEngine(serverConfig())}
			s.e.Start()
			s.in = tc.in
			s.feed(t)
			if !errors.Is(s.err, tc.want) {
				t.Fatalf("error %v, want %v", s.err, tc.want)
			}
			var pe *Error
			if !errors.As(s.err, &pe) {
				t.Fatalf("error %T is not *Error", s.err)
			}
			if _, err := s.e.Feed(nil); err == nil {
				t.Fatal("engine accepts input after failing")
			}
		})
	}
}

// FuzzEngine feeds arbitrary bytes to both roles after a valid banner
// and HELLO; the engine must fail cleanly or make progress, never panic.
func FuzzEngine(f *testing.F) {
	c, s := pair(&testing.T{}, clientConfig(), serverConfig())
	f.Add(c.e.Output(), true)
	f.Add(s.e.Output(), false)
	hello := AppendFrame(AppendBanner(nil, 1, 0), TagHello, true, (&Hello{EntityType: msg.EntityClient}).Append(nil))
	f.Add(hello, false)
	f.Add(AppendFrame(hello, TagAuthRequest, true, (&AuthRequest{Method: 1, PreferredModes: []uint32{1}, Payload: (&AuthNonePayload{Mode: 10}).Append(nil)}).Append(nil)), false)
	f.Add(AppendFrame(hello, TagAuthDone, true, (&AuthDone{GlobalID: 1, ConMode: 1}).Append(nil)), true)
	// A refusal: the client's *AuthError (with the fake method, a
	// fallback is impossible: it offers one method).
	f.Add(AppendFrame(hello, TagAuthBadMethod, true, (&AuthBadMethod{Method: 1, Result: -95, AllowedMethods: []uint32{2}, AllowedModes: []uint32{1}}).Append(nil)), true)
	// With the fake method (last byte's bit 2): a request, a challenge.
	f.Add(append(AppendFrame(hello, TagAuthRequest, true, (&AuthRequest{Method: 2, PreferredModes: []uint32{2, 1},
		Payload: append(append([]byte{10}, msg.AppendAuthName(nil, msg.AuthName{Type: msg.EntityClient, ID: "admin"})...), 8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8)}).Append(nil)), 2), false)
	f.Add(append(AppendFrame(hello, TagAuthReplyMore, true, (&AuthReplyMore{Payload: seq(0, 8)}).Append(nil)), 2), true)
	// A banner that offers FeatureNoDataCRC, then a MESSAGE-shaped start.
	f.Add(AppendFrame(AppendBanner(nil, FeatureRevision1|FeatureNoDataCRC, 0), TagHello, true, (&Hello{EntityType: msg.EntityClient}).Append(nil)), false)
	f.Fuzz(func(t *testing.T, in []byte, client bool) {
		cfg := serverConfig()
		if client {
			cfg = clientConfig()
		}
		// The last input byte's low bit offers FeatureNoDataCRC too; its
		// second bit authenticates with the fake cephx-like method,
		// offering and allowing both modes.
		cfg.NoDataCRC = len(in) > 0 && in[len(in)-1]&1 == 1
		if len(in) > 0 && in[len(in)-1]&2 == 2 {
			cfg.AuthClient, cfg.AuthServer = fakeClient(1), fakeServer(2)
			cfg.ConModes = modes(ConModeSecure, ConModeCRC)
		}
		e := NewEngine(cfg)
		e.Start()
		for steps := 0; steps < 10000; steps++ {
			n, _ := e.Need()
			if e.state == stDecide {
				var err error
				switch {
				case client:
					err = e.ResetSession(1)
					if err != nil {
						err = e.RetryGlobal(100)
					}
				case e.decideOn == TagSessionReconnect:
					err = e.Reset(true)
				default:
					err = e.Accept(1, 0, true)
				}
				if err != nil {
					t.Fatal(err)
				}
				continue
			}
			if e.state == stClosed || len(in) < n {
				return
			}
			_, err := e.Feed(in[:n])
			in = in[n:]
			if err != nil {
				// An *Error, or the *AuthError of a refusal: each matches
				// a sentinel.
				if !typed(err) {
					t.Fatalf("untyped error %T: %v", err, err)
				}
				return
			}
			e.Output()
		}
	})
}
