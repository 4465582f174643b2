package msgr2

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand"
	"testing"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/internal/authtest"
)

// The AUTH_SIGNATURE sanity vector of ceph-auth.md §2.
func TestAuthSignatureVector(t *testing.T) {
	sig := sign(seq(0, 16), []byte("ceph v2\n"))
	if got := hex.EncodeToString(sig[:]); got != "591f3d32559a8a7ffced12bdcd6f6ae8f9061950b0dd113d95106460d27228aa" {
		t.Fatalf("HMAC %s", got)
	}
	if sign(nil, []byte("x")) != ([32]byte{}) {
		t.Fatal("no key: not zeros")
	}
}

var testKey = []byte("0123456789abcdef")

func fakeClient(seed int64) *authtest.Client {
	return &authtest.Client{Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}, Key: testKey, Rand: rand.New(rand.NewSource(seed))}
}

func fakeServer(seed int64) *authtest.Server {
	return &authtest.Server{Keys: map[string][]byte{"client.admin": testKey}, Caps: map[string]string{"client.admin": "allow *"},
		GlobalID: 4242, Rand: rand.New(rand.NewSource(seed))}
}

func modes(m ...uint32) func(msg.EntityType) []uint32 {
	return func(msg.EntityType) []uint32 { return m }
}

// authPair runs a handshake between a client and a server using the fake
// method with the given mode lists, up to the server's decision.
func authPair(t *testing.T, cm, sm []uint32, tweak func(cc, sc *Config)) (*side, *side) {
	t.Helper()
	cc, sc := clientConfig(), serverConfig()
	cc.AuthClient, sc.AuthServer = fakeClient(1), fakeServer(2)
	cc.ConModes, sc.ConModes = modes(cm...), modes(sm...)
	if tweak != nil {
		tweak(&cc, &sc)
	}
	c, s := pair(t, cc, sc)
	run(t, c, s)
	return c, s
}

// sendFrames encodes a message, a keepalive and an ack from e's side.
func sendFrames(t *testing.T, e *Engine, seqNo uint64, front, data []byte) []byte {
	t.Helper()
	h := Header2{Seq: seqNo, Tid: 9, Type: 2, Priority: 196, Flags: 3}
	var wire []byte
	if e.Secure() {
		var err error
		wire, err = e.AppendMessage(wire, &h, msg.Buffers{front}, nil, msg.Buffers{data})
		if err != nil {
			t.Fatal(err)
		}
	} else {
		mf := MessageFrame{Header: h, Front: msg.Buffers{front}, Data: msg.Buffers{data}}
		wire = mf.AppendHead(wire, true)
		wire = append(wire, data...)
		wire = mf.AppendTail(wire, true)
	}
	wire = e.AppendKeepalive(wire, Stamp{5, 6})
	wire = e.AppendAck(wire, 3)
	if e.TxErr() != nil {
		t.Fatal(e.TxErr())
	}
	return wire
}

func checkReceived(t *testing.T, s *side, front, data []byte) {
	t.Helper()
	s.feed(t)
	if s.err != nil {
		t.Fatal(s.err)
	}
	if got := kinds(s.events); len(got) != 3 || got[0] != EvMessage || got[1] != EvKeepalive || got[2] != EvAck {
		t.Fatalf("events %v", got)
	}
	m := s.events[0].Msg
	if !bytes.Equal(m.Front.Bytes(), front) || !bytes.Equal(m.Data.Bytes(), data) || m.Header.Tid != 9 {
		t.Fatalf("message %+v front %d data %d bytes", m.Header, m.Front.Len(), m.Data.Len())
	}
	if s.events[1].Stamp != (Stamp{5, 6}) || s.events[2].Seq != 3 {
		t.Fatalf("keepalive %v ack %v", s.events[1], s.events[2])
	}
	s.events = nil
}

// Both roles with a cephx-like method: the mode is the first of the
// client's list that the server allows; the peers sign each other's
// transcripts; messages flow both ways in the chosen mode.
func TestAuthHandshakeModes(t *testing.T) {
	cases := []struct {
		name   string
		cm, sm []uint32
		want   uint32
	}{
		{"secure first", []uint32{ConModeSecure, ConModeCRC}, []uint32{ConModeCRC, ConModeSecure}, ConModeSecure},
		{"crc first", []uint32{ConModeCRC, ConModeSecure}, []uint32{ConModeSecure, ConModeCRC}, ConModeCRC},
		{"server secure only", []uint32{ConModeCRC, ConModeSecure}, []uint32{ConModeSecure}, ConModeSecure},
		{"crc only", []uint32{ConModeCRC}, nil, ConModeCRC},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s := authPair(t, tc.cm, tc.sm, nil)
			if c.err != nil || s.err != nil {
				t.Fatalf("errors: client %v server %v", c.err, s.err)
			}
			if got := kinds(s.events); len(got) != 1 || got[0] != EvClientIdent {
				t.Fatalf("server events %v", got)
			}
			if err := s.e.Accept(7, 0, true); err != nil {
				t.Fatal(err)
			}
			run(t, c, s)
			if !c.e.Ready() || !s.e.Ready() {
				t.Fatalf("not ready: %v %v", c.err, s.err)
			}
			c.events, s.events = nil, nil
			for _, e := range []*Engine{c.e, s.e} {
				if e.ConMode() != tc.want || e.Secure() != (tc.want == ConModeSecure) || !e.Authenticated() {
					t.Fatalf("mode %d secure %v authed %v, want %d", e.ConMode(), e.Secure(), e.Authenticated(), tc.want)
				}
			}
			sr := s.e.AuthResult()
			if sr.Name.String() != "client.admin" || sr.GlobalID != 4242 || string(sr.Caps) != "allow *" || !sr.AllowAll || sr.Method != auth.MethodCephx {
				t.Fatalf("server's auth result %+v", sr)
			}
			if s.e.Peer().AuthName.String() != "client.admin" {
				t.Fatalf("peer auth name %v", s.e.Peer().AuthName)
			}
			if cr := c.e.AuthResult(); cr.GlobalID != 4242 || c.e.Peer().GlobalID != 4242 || len(cr.SessionKey) != 16 {
				t.Fatalf("client's auth result %+v", cr)
			}
			if gid := s.e.Peer().Name.Num; gid != 4242 {
				t.Fatalf("client ident gid %d", gid)
			}
			if s.e.PendingIdent() != nil {
				t.Fatal("a ready engine still holds the client ident it accepted")
			}
			// Messages both ways; a large one takes every GCM operation.
			front, data := []byte("hello"), seq(3, 70000)
			s.in = append(s.in, sendFrames(t, c.e, 1, front, data)...)
			checkReceived(t, s, front, data)
			c.in = append(c.in, sendFrames(t, s.e, 1, data[:100], front)...)
			checkReceived(t, c, data[:100], front)
			// Nonces continue in order: a second batch opens too.
			s.in = append(s.in, sendFrames(t, c.e, 2, front, front)...)
			checkReceived(t, s, front, front)
		})
	}
}

// tap records what one side writes, frame by frame, so that a test can
// check or rewrite it.
func outputFrames(t *testing.T, b []byte) (banner []byte, frames [][]byte) {
	t.Helper()
	n := BannerPrefixLen + BannerPayloadLen
	banner, b = b[:n], b[n:]
	for len(b) > 0 {
		pre, err := ParsePreamble(b, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		l := PreambleLen + pre.BodyLen(true)
		frames = append(frames, b[:l])
		b = b[l:]
	}
	return banner, frames
}

// The signatures are HMAC-SHA256 with the session key of the other
// side's bytes from its first byte through AUTH_DONE, checked here from
// the raw bytes each side wrote (crc mode, so the frames are readable).
func TestAuthSignatureTranscripts(t *testing.T) {
	cc, sc := clientConfig(), serverConfig()
	cc.AuthClient, sc.AuthServer = fakeClient(1), fakeServer(2)
	cc.ConModes, sc.ConModes = modes(ConModeCRC), modes(ConModeCRC)
	c, s := pair(t, cc, sc)
	var c2s, s2c []byte
	for i := 0; i < 50; i++ {
		co, so := c.e.Output(), s.e.Output()
		c2s, s2c = append(c2s, co...), append(s2c, so...)
		s.in, c.in = append(s.in, co...), append(c.in, so...)
		if !c.feed(t) && !s.feed(t) && len(co) == 0 && len(so) == 0 {
			break
		}
	}
	if c.err != nil || s.err != nil || len(s.events) != 1 {
		t.Fatalf("errors %v %v events %v", c.err, s.err, kinds(s.events))
	}
	key := c.e.AuthResult().SessionKey
	if !bytes.Equal(key, s.e.AuthResult().SessionKey) {
		t.Fatal("session keys differ")
	}
	// Each side's AUTH_SIGNATURE signs what the other wrote before its own
	// AUTH_SIGNATURE.
	check := func(name string, signer, signed []byte) {
		_, sf := outputFrames(t, signer)
		ban, df := outputFrames(t, signed)
		var sig []byte
		for _, f := range sf {
			if Tag(f[0]) == TagAuthSignature {
				sig = f[PreambleLen : PreambleLen+32]
			}
		}
		transcript := append([]byte(nil), ban...)
		for _, f := range df {
			if Tag(f[0]) == TagAuthSignature {
				break
			}
			transcript = append(transcript, f...)
		}
		h := hmac.New(sha256.New, key)
		h.Write(transcript)
		if want := h.Sum(nil); !bytes.Equal(sig, want) {
			t.Fatalf("%s: signature %x, want HMAC of %d bytes %x", name, sig, len(transcript), want)
		}
	}
	check("server", s2c, c2s)
	check("client", c2s, s2c)
}

// A man in the middle that rewrites the client's preferred modes (a
// downgrade from secure to crc, CRCs fixed up) is caught by the
// signatures: the transcripts differ.
func TestAuthDowngradeDetected(t *testing.T) {
	cc, sc := clientConfig(), serverConfig()
	cc.AuthClient, sc.AuthServer = fakeClient(1), fakeServer(2)
	cc.ConModes, sc.ConModes = modes(ConModeSecure, ConModeCRC), modes(ConModeCRC, ConModeSecure)
	c, s := pair(t, cc, sc)
	rewritten := false
	for i := 0; i < 50; i++ {
		co, so := c.e.Output(), s.e.Output()
		if len(co) > 0 && !rewritten {
			var out []byte
			if bytes.HasPrefix(co, []byte(BannerPrefix)) {
				out, co = co[:BannerPrefixLen+BannerPayloadLen], co[BannerPrefixLen+BannerPayloadLen:]
			}
			for len(co) > 0 {
				pre, err := ParsePreamble(co, Limits{})
				if err != nil {
					t.Fatal(err)
				}
				l := PreambleLen + pre.BodyLen(true)
				f := co[:l]
				co = co[l:]
				if pre.Tag == TagAuthRequest {
					segs, _ := ParseBody(&pre, f[PreambleLen:], true)
					req, _ := ParseAuthRequest(segs[0])
					req.PreferredModes = []uint32{ConModeCRC}
					f = AppendFrame(nil, TagAuthRequest, true, req.Append(nil))
					rewritten = true
				}
				out = append(out, f...)
			}
			co = out
		}
		s.in, c.in = append(s.in, co...), append(c.in, so...)
		if !c.feed(t) && !s.feed(t) && len(co) == 0 && len(so) == 0 {
			break
		}
	}
	if !rewritten {
		t.Fatal("no AUTH_REQUEST seen")
	}
	// The client's signature of what it received matches (that direction
	// was not touched); the server's of what it received does not.
	if !errors.Is(c.err, ErrBadSignature) {
		t.Fatalf("client %v; want ErrBadSignature", c.err)
	}
	if s.e.Ready() || len(s.events) != 0 {
		t.Fatal("the session went on past a bad signature")
	}
}

// Different session keys (a peer that does not hold the key it claims)
// fail both signatures, in crc and in secure mode.
func TestAuthSignatureMismatch(t *testing.T) {
	for _, m := range []uint32{ConModeCRC, ConModeSecure} {
		c, s := authPair(t, []uint32{m}, []uint32{m}, func(cc, sc *Config) {
			cc.AuthClient.(*authtest.Client).WrongSession = true
		})
		if !errors.Is(c.err, ErrBadSignature) || !errors.Is(s.err, ErrBadSignature) {
			t.Fatalf("mode %d: client %v, server %v", m, c.err, s.err)
		}
	}
}

// Refusals: the server answers AUTH_BAD_METHOD with the errno and what it
// allows, and the client fails with an *AuthError that says so.
func TestAuthRefusals(t *testing.T) {
	t.Run("bad key", func(t *testing.T) {
		c, s := authPair(t, []uint32{ConModeCRC}, []uint32{ConModeCRC}, func(cc, sc *Config) {
			cc.AuthClient.(*authtest.Client).Key = []byte("another key 0123")
		})
		var ae *AuthError
		if !errors.As(c.err, &ae) || !ae.Remote || ae.Result != -13 || !errors.Is(c.err, ErrAuthRejected) || errors.Is(c.err, ErrBadAuthMethod) {
			t.Fatalf("client %v", c.err)
		}
		if !errors.As(s.err, &ae) || ae.Remote || !errors.Is(s.err, auth.ErrBadKey) {
			t.Fatalf("server %v", s.err)
		}
	})
	t.Run("unknown entity", func(t *testing.T) {
		c, s := authPair(t, []uint32{ConModeCRC}, []uint32{ConModeCRC}, func(cc, sc *Config) {
			cc.AuthClient.(*authtest.Client).Name.ID = "nobody"
		})
		if !errors.Is(c.err, ErrAuthRejected) || !errors.Is(s.err, auth.ErrUnknownEntity) {
			t.Fatalf("client %v server %v", c.err, s.err)
		}
	})
	t.Run("method", func(t *testing.T) {
		// auth none against a cephx-only server: -EOPNOTSUPP, the server
		// keeps waiting for another AUTH_REQUEST.
		c, s := authPair(t, nil, []uint32{ConModeSecure, ConModeCRC}, func(cc, sc *Config) {
			cc.AuthClient, cc.ConModes = nil, nil
		})
		var ae *AuthError
		if !errors.As(c.err, &ae) || ae.Result != -95 || !errors.Is(c.err, ErrBadAuthMethod) ||
			len(ae.AllowedMethods) != 1 || ae.AllowedMethods[0] != auth.MethodCephx || len(ae.AllowedModes) != 2 {
			t.Fatalf("client %v", c.err)
		}
		if s.err != nil || s.e.state != stAuth {
			t.Fatalf("server %v state %d", s.err, s.e.state)
		}
	})
	t.Run("mode", func(t *testing.T) {
		c, s := authPair(t, []uint32{ConModeSecure}, []uint32{ConModeCRC}, nil)
		var ae *AuthError
		if !errors.As(c.err, &ae) || ae.Result != -95 || len(ae.AllowedModes) != 1 || ae.AllowedModes[0] != ConModeCRC ||
			len(ae.OfferedModes) != 1 || ae.OfferedModes[0] != ConModeSecure {
			t.Fatalf("client %v", c.err)
		}
		if s.err != nil {
			t.Fatal(s.err)
		}
	})
	t.Run("no mode to offer", func(t *testing.T) {
		// Secure only with auth none: nothing can be offered.
		c, _ := authPair(t, nil, nil, func(cc, sc *Config) {
			cc.AuthClient, cc.ConModes = nil, modes(ConModeSecure)
		})
		if !errors.Is(c.err, ErrBadAuthMethod) {
			t.Fatalf("client %v", c.err)
		}
	})
}

// scriptedServer returns a server engine past HELLO, and the client-side
// bytes that got it there.
func scriptedServer(t *testing.T, sc Config) *side {
	t.Helper()
	s := &side{e: NewEngine(sc)}
	s.e.Start()
	s.e.Output()
	s.in = AppendBanner(nil, FeatureRevision1, 0)
	s.in = AppendFrame(s.in, TagHello, true, (&Hello{EntityType: msg.EntityClient, PeerAddr: addr("v2:127.0.0.1:3300/0")}).Append(nil))
	s.feed(t)
	if s.err != nil || s.e.state != stAuth {
		t.Fatalf("server %v state %d", s.err, s.e.state)
	}
	return s
}

// Before the session is ready a MESSAGE is refused from its preamble:
// the engine never asks for its body. Before authentication the peer
// may send at most MaxPreAuth bytes in all.
func TestPreAuthBounds(t *testing.T) {
	big := Preamble{Tag: TagMessage, NumSegments: 4, Segments: [4]SegmentDesc{{Len: Header2Len, Align: 8}, {}, {}, {Len: 200 << 20, Align: 4096}}}
	for _, role := range []Role{Server, Client} {
		var e *Engine
		if role == Server {
			e = scriptedServer(t, serverConfig()).e
		} else {
			c := &side{e: NewEngine(clientConfig())}
			c.e.Start()
			c.in = AppendBanner(nil, FeatureRevision1, 0)
			c.in = AppendFrame(c.in, TagHello, true, (&Hello{EntityType: msg.EntityMon}).Append(nil))
			c.feed(t)
			e = c.e
		}
		_, err := e.Feed(big.Append(nil))
		if !errors.Is(err, ErrUnexpectedFrame) {
			t.Fatalf("%v: MESSAGE preamble: %v", role, err)
		}
		if n, _ := e.Need(); n != 0 {
			t.Fatalf("%v: engine asks for %d more bytes", role, n)
		}
	}
	// A control frame that fits MaxControl but not what is left of the
	// pre-auth budget.
	s := scriptedServer(t, serverConfig())
	p := Preamble{Tag: TagAuthRequest, NumSegments: 1, Segments: [4]SegmentDesc{{Len: 60 << 10, Align: 8}}}
	if _, err := s.e.Feed(p.Append(nil)); !errors.Is(err, ErrPreAuthLimit) {
		t.Fatalf("60 KiB AUTH_REQUEST: %v", err)
	}
	// Many small refused AUTH_REQUESTs add up to the limit too.
	s = scriptedServer(t, serverConfig())
	req := AuthRequest{Method: 77, PreferredModes: []uint32{1}, Payload: make([]byte, 900)}
	for i := 0; i < 40 && s.err == nil; i++ {
		s.in = AppendFrame(s.in, TagAuthRequest, true, req.Append(nil))
		s.feed(t)
		s.e.Output()
	}
	if !errors.Is(s.err, ErrPreAuthLimit) {
		t.Fatalf("repeated requests: %v", s.err)
	}
	// A whole fake-cephx handshake in secure mode fits with room to spare.
	c, s2 := authPair(t, []uint32{ConModeSecure}, []uint32{ConModeSecure}, nil)
	if c.err != nil || s2.err != nil {
		t.Fatal(c.err, s2.err)
	}
	if c.e.preAuth > 2048 || s2.e.preAuth > 2048 {
		t.Fatalf("pre-auth bytes: client %d server %d", c.e.preAuth, s2.e.preAuth)
	}
}

// Scripted server branches: AUTH_REQUEST_MORE out of turn, too many
// rounds.
func TestAuthServerScripted(t *testing.T) {
	sc := serverConfig()
	sc.AuthServer = fakeServer(2)
	s := scriptedServer(t, sc)
	s.in = AppendFrame(nil, TagAuthRequestMore, true, (&AuthRequestMore{Payload: []byte("x")}).Append(nil))
	s.feed(t)
	if !errors.Is(s.err, ErrUnexpectedFrame) {
		t.Fatalf("REQUEST_MORE before REQUEST: %v", s.err)
	}
	// A malformed AUTH_REQUEST payload for the method: -EINVAL.
	s = scriptedServer(t, sc)
	s.in = AppendFrame(nil, TagAuthRequest, true, (&AuthRequest{Method: auth.MethodCephx, PreferredModes: []uint32{1}, Payload: []byte{1}}).Append(nil))
	s.feed(t)
	var ae *AuthError
	if !errors.As(s.err, &ae) || ae.Result != -22 || !errors.Is(s.err, auth.ErrMalformed) {
		t.Fatalf("malformed: %v", s.err)
	}
	frames := splitFrames(t, s.e.Output())
	if len(frames) != 2 || frames[1].tag != TagAuthBadMethod {
		t.Fatalf("sent %v", frames)
	}
	// A client that keeps getting challenges gives up.
	c := &side{e: NewEngine(func() Config { cc := clientConfig(); cc.AuthClient = fakeClient(1); cc.ConModes = modes(1); return cc }())}
	c.e.Start()
	c.in = AppendBanner(nil, FeatureRevision1, 0)
	c.in = AppendFrame(c.in, TagHello, true, (&Hello{EntityType: msg.EntityMon}).Append(nil))
	for i := 0; i <= maxAuthRounds; i++ {
		c.in = AppendFrame(c.in, TagAuthReplyMore, true, (&AuthReplyMore{Payload: seq(i, 8)}).Append(nil))
	}
	c.feed(t)
	if !errors.Is(c.err, ErrProtocol) {
		t.Fatalf("endless challenges: %v", c.err)
	}
	// A challenge the method cannot answer.
	c = &side{e: NewEngine(func() Config { cc := clientConfig(); cc.AuthClient = fakeClient(1); cc.ConModes = modes(1); return cc }())}
	c.e.Start()
	c.in = AppendBanner(nil, FeatureRevision1, 0)
	c.in = AppendFrame(c.in, TagHello, true, (&Hello{EntityType: msg.EntityMon}).Append(nil))
	c.in = AppendFrame(c.in, TagAuthReplyMore, true, (&AuthReplyMore{Payload: []byte("short")}).Append(nil))
	c.feed(t)
	if !errors.Is(c.err, ErrAuthRejected) || !errors.Is(c.err, auth.ErrMalformed) {
		t.Fatalf("bad challenge: %v", c.err)
	}
	// A rev0 peer is never offered secure mode.
	c = &side{e: NewEngine(func() Config {
		cc := clientConfig()
		cc.AuthClient = fakeClient(1)
		cc.ConModes = modes(ConModeSecure, ConModeCRC)
		return cc
	}())}
	c.e.Start()
	c.e.Output()
	c.in = AppendBanner(nil, 0, 0)
	c.in = AppendFrame(c.in, TagHello, false, (&Hello{EntityType: msg.EntityMon}).Append(nil))
	c.feed(t)
	out := c.e.Output()
	hp, _ := ParsePreamble(out, Limits{})
	rest := out[PreambleLen+hp.BodyLen(false):]
	ap, err := ParsePreamble(rest, Limits{})
	if err != nil || ap.Tag != TagAuthRequest {
		t.Fatalf("rev0 output %v %v", ap.Tag, err)
	}
	segs, err := ParseBody(&ap, rest[PreambleLen:PreambleLen+ap.BodyLen(false)], false)
	if err != nil {
		t.Fatal(err)
	}
	req2, _ := ParseAuthRequest(segs[0])
	if len(req2.PreferredModes) != 1 || req2.PreferredModes[0] != ConModeCRC {
		t.Fatalf("offered %v to a rev0 peer", req2.PreferredModes)
	}
}

// In secure mode a tampered, replayed or truncated frame after the
// handshake closes the engine with ErrDecrypt.
func TestSecureEngineBadInput(t *testing.T) {
	ready := func() (*side, *side) {
		c, s := authPair(t, []uint32{ConModeSecure}, []uint32{ConModeSecure}, nil)
		if err := s.e.Accept(7, 0, true); err != nil {
			t.Fatal(err)
		}
		run(t, c, s)
		if !c.e.Ready() || !s.e.Ready() {
			t.Fatal("not ready")
		}
		c.events, s.events = nil, nil
		return c, s
	}
	c, s := ready()
	wire := sendFrames(t, c.e, 1, []byte("front"), seq(0, 5000))
	for _, off := range []int{0, 40, 95, 96, 200, len(wire) - 1} {
		// A fresh pair: the fake's seeded randomness gives it the same
		// connection secret, so the clean wire would open.
		_, s = ready()
		bad := append([]byte(nil), wire...)
		bad[off] ^= 1
		s.in = bad
		s.feed(t)
		if !errors.Is(s.err, ErrDecrypt) {
			t.Fatalf("flip at %d: %v", off, s.err)
		}
		if _, err := s.e.Feed(nil); err == nil {
			t.Fatal("engine goes on after ErrDecrypt")
		}
	}
	// Replay: the same frames again on the same connection.
	c, s = ready()
	wire = sendFrames(t, c.e, 1, []byte("front"), []byte("data"))
	s.in = append(append([]byte(nil), wire...), wire...)
	s.feed(t)
	if !errors.Is(s.err, ErrDecrypt) || len(s.events) != 3 {
		t.Fatalf("replay: %v after %v", s.err, kinds(s.events))
	}
}

// A secure engine whose send nonces run out refuses to seal: the Append
// methods fail (or record TxErr) and nothing is appended.
func TestSecureEngineNonceExhaustion(t *testing.T) {
	c, s := authPair(t, []uint32{ConModeSecure}, []uint32{ConModeSecure}, nil)
	if err := s.e.Accept(7, 0, true); err != nil {
		t.Fatal(err)
	}
	run(t, c, s)
	if !c.e.Ready() {
		t.Fatal("not ready")
	}
	d := c.e.tx.d
	copy(d.nonce[:], d.initial[:])
	putLeU64(d.nonce[4:], leU64(d.initial[4:])-2) // two nonces left
	if b := c.e.AppendKeepalive([]byte("x"), Stamp{1, 2}); len(b) != 1+SecurePreambleLen || c.e.TxErr() != nil {
		t.Fatalf("one of the last nonces: %d bytes, %v", len(b), c.e.TxErr())
	}
	// A message needs two: the last one is used up, and the frame dropped.
	h := Header2{Seq: 1}
	b, err := c.e.AppendMessage([]byte("x"), &h, msg.Buffers{[]byte("f")}, nil, nil)
	if !errors.Is(err, ErrNonceExhausted) || string(b) != "x" {
		t.Fatalf("message needing two nonces: %v, %d bytes", err, len(b))
	}
	if b = c.e.AppendAck([]byte("x"), 1); string(b) != "x" || !errors.Is(c.e.TxErr(), ErrNonceExhausted) {
		t.Fatalf("past the last nonce: %d bytes, %v", len(b), c.e.TxErr())
	}
	if _, err := c.e.AppendControl(nil, Ack{Seq: 1}); !errors.Is(err, ErrNonceExhausted) {
		t.Fatalf("AppendControl: %v", err)
	}
	// crc mode has no AppendMessage.
	cc, sc := authPair(t, []uint32{ConModeCRC}, []uint32{ConModeCRC}, nil)
	_ = sc
	if _, err := cc.e.AppendMessage(nil, &h, nil, nil, nil); !errors.Is(err, ErrProtocol) {
		t.Fatalf("AppendMessage in crc mode: %v", err)
	}
}
