package msgr2

import (
	"bytes"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/msg"
)

// cephxWorld is a mon-like key server, an OSD-like verifier with a static
// key, and client.admin's cephx state, on a fixed clock.
type cephxWorld struct {
	ks     *cephx.KeyServer
	osd    *cephx.Verifier
	client *cephx.Client
}

func newCephxWorld(t testing.TB) *cephxWorld {
	t.Helper()
	ring, err := cephx.ParseKeyring([]byte("[client.admin]\n\tkey = AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==\n\tcaps mon = \"allow *\"\n\tcaps osd = \"allow rw\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	entry, _ := ring.Lookup(msg.AuthName{Type: msg.EntityClient, ID: "admin"})
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rnd := mrand.NewChaCha8([32]byte{7})
	osdKey, _ := cephx.GenerateKey(rnd, now)
	ks, err := cephx.NewKeyServer(cephx.KeyServerConfig{Keyring: ring, StaticServiceKeys: map[msg.EntityType]cephx.Key{msg.EntityOSD: osdKey}, Rand: rnd, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	osd, err := cephx.NewVerifier(cephx.VerifierConfig{Service: msg.EntityOSD, StaticKey: osdKey, Rand: rnd, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := cephx.NewClient(cephx.ClientConfig{Name: entry.Name, Key: entry.Key, Rand: rnd, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	return &cephxWorld{ks: ks, osd: osd, client: cl}
}

// The engine with the real cephx: a mon login, then an authorizer with
// its challenge round presented to an OSD, in crc and in secure mode;
// messages flow both ways. It logs how many bytes each side received
// before authenticating (what Limits.MaxPreAuth must allow).
func TestEngineCephx(t *testing.T) {
	for _, mode := range []uint32{ConModeCRC, ConModeSecure} {
		w := newCephxWorld(t)
		for _, svc := range []msg.EntityType{msg.EntityMon, msg.EntityOSD} {
			cc, sc := clientConfig(), serverConfig()
			sc.MyName = msg.EntityName{Type: svc}
			cc.AuthClient = w.client.Handler()
			if svc == msg.EntityMon {
				sc.AuthServer = w.ks.Handler()
			} else {
				sc.AuthServer = w.osd.Handler()
			}
			cc.ConModes, sc.ConModes = modes(mode), modes(ConModeSecure, ConModeCRC)
			c, s := pair(t, cc, sc)
			run(t, c, s)
			if c.err != nil || s.err != nil || len(s.events) != 1 {
				t.Fatalf("%v mode %d: client %v server %v events %v", svc, mode, c.err, s.err, kinds(s.events))
			}
			if err := s.e.Accept(1, 0, true); err != nil {
				t.Fatal(err)
			}
			run(t, c, s)
			if !c.e.Ready() || !s.e.Ready() || c.e.ConMode() != mode || s.e.ConMode() != mode {
				t.Fatalf("%v mode %d: ready %v %v modes %d %d", svc, mode, c.e.Ready(), s.e.Ready(), c.e.ConMode(), s.e.ConMode())
			}
			c.events, s.events = nil, nil
			res := s.e.AuthResult()
			if res.Name.String() != "client.admin" || res.GlobalID != w.client.GlobalID() || res.GlobalID == 0 {
				t.Fatalf("%v: server's result %+v", svc, res)
			}
			if svc == msg.EntityOSD && !bytes.Contains(res.Caps, []byte("allow rw")) {
				t.Fatalf("osd caps %q", res.Caps)
			}
			front, data := []byte("front"), seq(1, 100000)
			s.in = append(s.in, sendFrames(t, c.e, 1, front, data)...)
			checkReceived(t, s, front, data)
			c.in = append(c.in, sendFrames(t, s.e, 1, data[:10], front)...)
			checkReceived(t, c, data[:10], front)
			t.Logf("%v mode %d: pre-auth bytes received: client %d, server %d", svc, mode, c.e.preAuth, s.e.preAuth)
			if c.e.preAuth > DefaultMaxPreAuth/4 || s.e.preAuth > DefaultMaxPreAuth/4 {
				t.Fatalf("pre-auth exchange of %d / %d bytes is close to the limit", c.e.preAuth, s.e.preAuth)
			}
		}
	}
}
