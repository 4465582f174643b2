package msgr2

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
)

func chain(t *testing.T, cs ...auth.Client) *auth.ChainClient {
	t.Helper()
	ch, err := auth.NewChainClient(cs...)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// methodsServer allows only the methods it lists (one it cannot run
// included), delegating to auth none.
type methodsServer struct{ methods []uint32 }

func (s methodsServer) Methods(msg.EntityType) []uint32 { return s.methods }
func (s methodsServer) Handle(method uint32, pt msg.EntityType, mode uint32, first bool, p []byte) (auth.Reply, error) {
	ns := auth.NoneServer{GlobalID: 1}
	return ns.Handle(method, pt, mode, first, p)
}

// authRequests returns the methods of the AUTH_REQUESTs in a client's
// output, read up to its AUTH_SIGNATURE (in crc mode) or the first frame
// secure mode sealed (whose preamble does not parse in the clear).
func authRequests(t *testing.T, out []byte) []uint32 {
	t.Helper()
	b := out[BannerPrefixLen+BannerPayloadLen:]
	var ms []uint32
	for len(b) > 0 {
		pre, err := ParsePreamble(b, Limits{})
		if err != nil || pre.Tag == TagAuthSignature {
			break
		}
		if pre.Tag == TagAuthRequest {
			req, err := ParseAuthRequest(b[PreambleLen : PreambleLen+int(pre.Segments[0].Len)])
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, req.Method)
		}
		b = b[PreambleLen+pre.BodyLen(true):]
	}
	return ms
}

// A client offering several methods answers AUTH_BAD_METHOD with the next
// one the server allows, on the same socket, as Ceph's client does; both
// transcripts (the refused request and the refusal included) still sign.
func TestAuthFallback(t *testing.T) {
	admin := msg.AuthName{Type: msg.EntityClient, ID: "admin"}
	cases := []struct {
		name     string
		client   func() auth.Client
		server   func() auth.Server
		cm, sm   []uint32
		requests []uint32 // the AUTH_REQUESTs the client sends
		method   uint32   // the method that authenticates
		mode     uint32
	}{
		{"cephx then none, server none only",
			func() auth.Client { return chain(t, fakeClient(1), auth.NewNoneClient(admin)) },
			func() auth.Server { return &auth.NoneServer{GlobalID: 9} },
			[]uint32{ConModeSecure, ConModeCRC}, nil,
			[]uint32{auth.MethodCephx, auth.MethodNone}, auth.MethodNone, ConModeCRC},
		{"none then cephx, server cephx only",
			func() auth.Client { return chain(t, auth.NewNoneClient(admin), fakeClient(1)) },
			func() auth.Server { return fakeServer(2) },
			[]uint32{ConModeSecure, ConModeCRC}, []uint32{ConModeSecure, ConModeCRC},
			[]uint32{auth.MethodNone, auth.MethodCephx}, auth.MethodCephx, ConModeSecure},
		{"first allowed, no retry",
			func() auth.Client { return chain(t, fakeClient(1), auth.NewNoneClient(admin)) },
			func() auth.Server { return fakeServer(2) },
			[]uint32{ConModeCRC}, []uint32{ConModeCRC},
			[]uint32{auth.MethodCephx}, auth.MethodCephx, ConModeCRC},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc, sc := clientConfig(), serverConfig()
			cc.AuthClient, sc.AuthServer = tc.client(), tc.server()
			cc.ConModes, sc.ConModes = modes(tc.cm...), modes(tc.sm...)
			c, s := pair(t, cc, sc)
			var clientOut []byte
			for i := 0; i < 100; i++ {
				co := c.e.Output()
				clientOut = append(clientOut, co...)
				s.in = append(s.in, co...)
				c.in = append(c.in, s.e.Output()...)
				pc, ps := c.feed(t), s.feed(t)
				if !pc && !ps && len(c.e.out) == 0 && len(s.e.out) == 0 {
					break
				}
			}
			if c.err != nil || s.err != nil {
				t.Fatalf("client %v, server %v", c.err, s.err)
			}
			if got := kinds(s.events); len(got) != 1 || got[0] != EvClientIdent {
				t.Fatalf("server events %v", got)
			}
			if got := authRequests(t, clientOut); !slices.Equal(got, tc.requests) {
				t.Fatalf("client sent AUTH_REQUESTs for methods %v, want %v", got, tc.requests)
			}
			if err := s.e.Accept(7, 0, true); err != nil {
				t.Fatal(err)
			}
			run(t, c, s)
			if !c.e.Ready() || !s.e.Ready() {
				t.Fatalf("not ready: %v %v", c.err, s.err)
			}
			for _, e := range []*Engine{c.e, s.e} {
				if r := e.AuthResult(); r.Method != tc.method || e.ConMode() != tc.mode || !e.Authenticated() {
					t.Fatalf("%s: method %d mode %d authed %v, want method %d mode %d",
						e.role, r.Method, e.ConMode(), e.Authenticated(), tc.method, tc.mode)
				}
			}
			// Messages flow in the mode chosen.
			c.events, s.events = nil, nil
			s.in = append(s.in, sendFrames(t, c.e, 1, []byte("front"), []byte("data"))...)
			checkReceived(t, s, []byte("front"), []byte("data"))
		})
	}
}

// When no method common to both sides remains, the client fails with an
// *AuthError naming every method it tried and what the server allows,
// matching ErrBadAuthMethod for a method refused as not allowed and
// ErrAuthRejected for a refused key.
func TestAuthFallbackExhausted(t *testing.T) {
	admin := msg.AuthName{Type: msg.EntityClient, ID: "admin"}
	wrongKey := func() auth.Client {
		c := fakeClient(1)
		c.Key = []byte("another key 0123")
		return c
	}
	cases := []struct {
		name    string
		client  func() auth.Client
		server  auth.Server
		tried   []uint32
		allowed []uint32
		want    error
		notWant error
	}{
		{"no method in common",
			func() auth.Client { return chain(t, fakeClient(1), auth.NewNoneClient(admin)) },
			methodsServer{[]uint32{42}}, []uint32{auth.MethodCephx}, []uint32{42}, ErrBadAuthMethod, ErrAuthRejected},
		{"fallback then wrong key",
			func() auth.Client { return chain(t, auth.NewNoneClient(admin), wrongKey()) },
			fakeServer(2), []uint32{auth.MethodNone, auth.MethodCephx}, []uint32{auth.MethodCephx}, ErrAuthRejected, ErrBadAuthMethod},
		{"wrong key, none not allowed",
			func() auth.Client { return chain(t, wrongKey(), auth.NewNoneClient(admin)) },
			fakeServer(2), []uint32{auth.MethodCephx}, []uint32{auth.MethodCephx}, ErrAuthRejected, ErrBadAuthMethod},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc, sc := clientConfig(), serverConfig()
			cc.AuthClient, sc.AuthServer = tc.client(), tc.server
			cc.ConModes, sc.ConModes = modes(ConModeCRC), modes(ConModeCRC)
			c, s := pair(t, cc, sc)
			run(t, c, s)
			var ae *AuthError
			if !errors.As(c.err, &ae) || !ae.Remote || !errors.Is(c.err, tc.want) || errors.Is(c.err, tc.notWant) {
				t.Fatalf("client error %v", c.err)
			}
			if !slices.Equal(ae.Tried, tc.tried) || !slices.Equal(ae.AllowedMethods, tc.allowed) {
				t.Fatalf("tried %v allowed %v, want %v and %v", ae.Tried, ae.AllowedMethods, tc.tried, tc.allowed)
			}
			if len(tc.tried) > 1 && !strings.Contains(c.err.Error(), "none left in common") {
				t.Fatalf("error does not say no method is left: %v", c.err)
			}
			if c.e.Ready() || s.e.Ready() {
				t.Fatal("a refused client got a session")
			}
		})
	}
}

// A client without Fallback fails at the first AUTH_BAD_METHOD, as before.
func TestAuthNoFallbackSingleMethod(t *testing.T) {
	cc, sc := clientConfig(), serverConfig()
	cc.AuthClient = fakeClient(1)
	cc.ConModes = modes(ConModeCRC)
	c, s := pair(t, cc, sc)
	run(t, c, s)
	var ae *AuthError
	if !errors.As(c.err, &ae) || !errors.Is(c.err, ErrBadAuthMethod) || !slices.Equal(ae.Tried, []uint32{auth.MethodCephx}) {
		t.Fatalf("client error %v", c.err)
	}
	if s.err != nil || s.e.state != stAuth {
		t.Fatalf("server %v state %d", s.err, s.e.state)
	}
}

// A fallback to a method with no mode left to offer (auth none with a
// client that allows only secure mode) fails with ErrBadAuthMethod.
func TestAuthFallbackNoMode(t *testing.T) {
	admin := msg.AuthName{Type: msg.EntityClient, ID: "admin"}
	cc, sc := clientConfig(), serverConfig()
	cc.AuthClient = chain(t, fakeClient(1), auth.NewNoneClient(admin))
	cc.ConModes = modes(ConModeSecure)
	c, s := pair(t, cc, sc)
	run(t, c, s)
	if !errors.Is(c.err, ErrBadAuthMethod) || !strings.Contains(c.err.Error(), "no connection mode") {
		t.Fatalf("client error %v", c.err)
	}
}
