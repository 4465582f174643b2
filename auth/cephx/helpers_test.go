package cephx

import (
	"bytes"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
)

// clock is an injected clock a test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_700_000_000, 0).UTC()} }
func seeded(seed uint64) *mrand.ChaCha8 {
	var s [32]byte
	s[0] = byte(seed)
	s[1] = byte(seed >> 8)
	return mrand.NewChaCha8(s)
}
func keyFrom(seed byte) Key { return Key{Type: CryptoAES, Secret: bytes.Repeat([]byte{seed}, 16)} }
func name(t testing.TB, s string) msg.AuthName {
	t.Helper()
	n, err := ParseEntityName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// cluster is a KeyServer with client.admin and osd.0, and clients for
// them, all on one clock.
type cluster struct {
	clk   *clock
	ks    *KeyServer
	admin *Client
	osd   *Client
	ring  *Keyring
}

func newCluster(t testing.TB, mod func(*KeyServerConfig)) *cluster {
	t.Helper()
	clk := newClock()
	ring := &Keyring{}
	ring.Add(KeyringEntry{Name: name(t, "client.admin"), Key: keyFrom(1), Caps: map[string]string{"mon": "allow *", "osd": "allow *", "mgr": "allow *"}})
	ring.Add(KeyringEntry{Name: name(t, "osd.0"), Key: keyFrom(2), Caps: map[string]string{"mon": "allow profile osd", "osd": "allow *"}})
	cfg := KeyServerConfig{Keyring: ring, Rand: seeded(1), Now: clk.now}
	if mod != nil {
		mod(&cfg)
	}
	ks, err := NewKeyServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(n string, k Key, seed uint64) *Client {
		c, err := NewClient(ClientConfig{Name: name(t, n), Key: k, Rand: seeded(seed), Now: clk.now})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return &cluster{clk: clk, ks: ks, ring: ring, admin: mk("client.admin", keyFrom(1), 2), osd: mk("osd.0", keyFrom(2), 3)}
}

// exchange runs a msgr2-style authentication between a client handler
// and a server handler, as an engine would: AUTH_REQUEST, any number of
// AUTH_REPLY_MORE / AUTH_REQUEST_MORE rounds (at most 4), AUTH_DONE.
func exchange(cl auth.Client, srv auth.Server, clientType, peer msg.EntityType, conMode uint32) (auth.Result, auth.Result, error) {
	p, err := cl.Request(peer)
	if err != nil {
		return auth.Result{}, auth.Result{}, err
	}
	for i := 0; i < 4; i++ {
		r, err := srv.Handle(cl.Method(), clientType, conMode, i == 0, p)
		if err != nil {
			return auth.Result{}, auth.Result{}, err
		}
		if r.Done {
			cr, err := cl.Done(r.Result.GlobalID, conMode, r.Payload)
			return cr, r.Result, err
		}
		if p, err = cl.ReplyMore(r.More); err != nil {
			return auth.Result{}, auth.Result{}, err
		}
	}
	return auth.Result{}, auth.Result{}, auth.ErrMalformed
}

// login authenticates c to the cluster's key server over msgr2 and
// returns both sides' results and the server's session.
func (cl *cluster) login(t testing.TB, c *Client, conMode uint32) (auth.Result, auth.Result, *MonSession) {
	t.Helper()
	s := cl.ks.Handler()
	cr, sr, err := exchange(c.Handler(), s, c.Name().Type, msg.EntityMon, conMode)
	if err != nil {
		t.Fatalf("login %s: %v", c.Name(), err)
	}
	return cr, sr, s
}

// mauth sends one MAuth payload to a session and hands the reply to c.
func mauth(t testing.TB, c *Client, s *MonSession, payload []byte) (uint16, error) {
	t.Helper()
	ans, err := s.HandleMAuth(MAuthProtocolCephx, payload)
	if err != nil {
		if ans.Result == 0 {
			t.Fatalf("refusal with result 0: %v", err)
		}
		return 0, err
	}
	return c.HandleMAuthReply(ans.Result, ans.GlobalID, ans.ResultBL)
}

// osdVerifier logs osd.0 in, fetches its rotating secrets over MAuth and
// returns a Verifier holding them.
func (cl *cluster) osdVerifier(t testing.TB) *Verifier {
	t.Helper()
	_, _, s := cl.login(t, cl.osd, auth.ConModeCRC)
	if op, err := mauth(t, cl.osd, s, cl.osd.RotatingKeyRequest()); err != nil || op != OpGetRotatingKey {
		t.Fatalf("rotating keys: %#x %v", op, err)
	}
	v, err := NewVerifier(VerifierConfig{Service: msg.EntityOSD, Rotating: cl.osd.Rotating(), Rand: seeded(9), Now: cl.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return v
}
