package msgr1

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/msg"
)

// cephxSetup is a key server holding client.admin, whose client has
// logged in and holds an OSD ticket sealed with a static OSD service key,
// and an OSD verifier holding verifyKey.
func cephxSetup(t *testing.T, verifyKey cephx.Key) (*cephx.Client, *cephx.Verifier) {
	t.Helper()
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	adminKey := cephx.Key{Type: cephx.CryptoAES, Secret: bytes.Repeat([]byte{1}, 16)}
	osdKey := cephx.Key{Type: cephx.CryptoAES, Secret: bytes.Repeat([]byte{2}, 16)}
	name := msg.AuthName{Type: msg.EntityClient, ID: "admin"}
	ring := &cephx.Keyring{}
	ring.Add(cephx.KeyringEntry{Name: name, Key: adminKey, Caps: map[string]string{"mon": "allow *", "osd": "allow *"}})
	ks, err := cephx.NewKeyServer(cephx.KeyServerConfig{Keyring: ring, Now: now,
		StaticServiceKeys: map[msg.EntityType]cephx.Key{msg.EntityOSD: osdKey}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cephx.NewClient(cephx.ClientConfig{Name: name, Key: adminKey, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	// The mon login, as msgr2's AUTH_REQUEST rounds carry it.
	h, s := c.Handler(), ks.Handler()
	p, err := h.Request(msg.EntityMon)
	for i := 0; err == nil; i++ {
		var r auth.Reply
		if r, err = s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, i == 0, p); err != nil {
			break
		}
		if r.Done {
			_, err = h.Done(r.Result.GlobalID, auth.ConModeCRC, r.Payload)
			break
		}
		p, err = h.ReplyMore(r.More)
	}
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	if _, ok := c.Ticket(msg.EntityOSD); !ok {
		t.Fatal("no OSD ticket")
	}
	v, err := cephx.NewVerifier(cephx.VerifierConfig{Service: msg.EntityOSD, StaticKey: verifyKey, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return c, v
}

// TestCephxAuthorizer runs the msgr1 handshake with auth/cephx on both
// sides: the authorizer, the OSD's challenge (CHALLENGE_AUTHORIZER), the
// authorizer reply in SEQ, then signed messages both ways whose
// signatures are cephx's MessageSignature.
func TestCephxAuthorizer(t *testing.T) {
	osdKey := cephx.Key{Type: cephx.CryptoAES, Secret: bytes.Repeat([]byte{2}, 16)}
	cl, v := cephxSetup(t, osdKey)
	cc, sc, _, _ := osdConfigs(true)
	cc.Auth, sc.AuthServer = cl.Handler(), v.Handler()
	c, s := pair(cc, sc)
	run(t, c, s)
	if c.err != nil || s.err != nil || !c.e.Ready() || !s.e.Ready() {
		t.Fatalf("handshake: client %v server %v", c.err, s.err)
	}
	if !hasKind(c.events, EvChallenge) {
		t.Fatalf("no challenge: %v", kinds(c.events))
	}
	ca, sa := c.e.Peer().Auth, s.e.Peer().Auth
	if ca == nil || sa == nil || len(ca.SessionKey) != 16 || !bytes.Equal(ca.SessionKey, sa.SessionKey) {
		t.Fatalf("session keys: %+v %+v", ca, sa)
	}
	if sa.Name.String() != "client.admin" || sa.GlobalID != cl.GlobalID() || !c.e.Signed() || !s.e.Signed() {
		t.Fatalf("server's view %+v", sa)
	}
	tk, _ := cl.Ticket(msg.EntityOSD)
	for _, dir := range []struct{ from, to *side }{{c, s}, {s, c}} {
		m := testMessage(1, "front", "", "data")
		f := dir.from.e.Frame(m)
		f.Append(nil)
		ft := f.Footer()
		want, err := cephx.MessageSignature(tk.SessionKey, cephx.SigBlock{HeaderCRC: f.Header.CRC, FrontCRC: ft.FrontCRC, FrontLen: 5,
			MiddleCRC: ft.MiddleCRC, DataCRC: ft.DataCRC, DataLen: 4, Seq: 1})
		if err != nil || ft.Sig != want {
			t.Fatalf("signature %#x, cephx computes %#x (%v)", ft.Sig, want, err)
		}
		evs := exchange(t, dir.from, dir.to, m)
		if len(evs) != 1 || evs[0].Msg == nil || string(evs[0].Msg.Data.Bytes()) != "data" {
			t.Fatalf("events %+v", evs)
		}
	}
	// Both implementations agree on the legacy signature too.
	want, _ := cephx.LegacyMessageSignature(tk.SessionKey, 1, 2, 3, 4)
	if got, _ := Signature(tk.SessionKey.Secret, SigBlock{HeaderCRC: 1, FrontCRC: 2, MiddleCRC: 3, DataCRC: 4}, false); got != want {
		t.Fatalf("legacy signature %#x, cephx %#x", got, want)
	}
}

// TestCephxForgedTicket: an OSD that cannot open the ticket (another
// service key: a forged or foreign ticket) answers BADAUTHORIZER, and
// both sides say why.
func TestCephxForgedTicket(t *testing.T) {
	cl, v := cephxSetup(t, cephx.Key{Type: cephx.CryptoAES, Secret: bytes.Repeat([]byte{3}, 16)})
	cc, sc, _, _ := osdConfigs(true)
	cc.Auth, sc.AuthServer = cl.Handler(), v.Handler()
	c, s := pair(cc, sc)
	run(t, c, s)
	if !errors.Is(s.err, ErrBadAuthorizer) || !errors.Is(s.err, auth.ErrBadTicket) {
		t.Fatalf("server: %v", s.err)
	}
	if !errors.Is(c.err, ErrBadAuthorizer) || c.e.Ready() {
		t.Fatalf("client: %v", c.err)
	}
}
