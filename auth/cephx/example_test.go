package cephx_test

import (
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/msg"
)

// run drives one authentication between a client handler and a server
// handler, as a protocol engine does with AUTH_REQUEST, AUTH_REPLY_MORE,
// AUTH_REQUEST_MORE and AUTH_DONE frames.
func run(cl auth.Client, srv auth.Server, peer msg.EntityType, mode uint32) (auth.Result, auth.Result, error) {
	p, err := cl.Request(peer)
	for first := true; err == nil; first = false {
		var r auth.Reply
		if r, err = srv.Handle(cl.Method(), msg.EntityClient, mode, first, p); err != nil {
			break
		}
		if r.Done {
			cr, err := cl.Done(r.Result.GlobalID, mode, r.Payload)
			return cr, r.Result, err
		}
		p, err = cl.ReplyMore(r.More)
	}
	return auth.Result{}, auth.Result{}, err
}

// A client logs in to a mon-like key server, gets an OSD ticket with its
// login, and presents it to an OSD-like verifier; later, with the clock
// moved on, it renews its tickets over the mon session.
func Example() {
	ring, _ := cephx.ParseKeyring([]byte(`
[client.admin]
	key = AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==
	caps mon = "allow *"
	caps osd = "allow rw"
`))
	entry, _ := ring.Lookup(msg.AuthName{Type: msg.EntityClient, ID: "admin"})

	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rnd := mrand.NewChaCha8([32]byte{1}) // deterministic for the example

	osdKey, _ := cephx.GenerateKey(rnd, now)
	ks, _ := cephx.NewKeyServer(cephx.KeyServerConfig{
		Keyring:           ring,
		StaticServiceKeys: map[msg.EntityType]cephx.Key{msg.EntityOSD: osdKey},
		Rand:              rnd, Now: clock,
	})
	client, _ := cephx.NewClient(cephx.ClientConfig{Name: entry.Name, Key: entry.Key, Rand: rnd, Now: clock})

	mon := ks.Handler()
	cr, _, err := run(client.Handler(), mon, msg.EntityMon, auth.ConModeSecure)
	fmt.Println("mon login:", err, "global id", cr.GlobalID, "secret", len(cr.ConnectionSecret), "bytes")

	osd, _ := cephx.NewVerifier(cephx.VerifierConfig{Service: msg.EntityOSD, StaticKey: osdKey, Rand: rnd, Now: clock})
	_, peer, err := run(client.Handler(), osd.Handler(), msg.EntityOSD, auth.ConModeCRC)
	fmt.Printf("osd session: %v, peer %s.%d caps %q\n", err, peer.Name, peer.GlobalID, peer.Caps)

	now = now.Add(50 * time.Minute) // past the OSD ticket's renew-after
	fmt.Printf("due: %#x\n", client.Need(now))
	req, _ := client.RenewRequest(now)
	ans, _ := mon.HandleMAuth(cephx.MAuthProtocolCephx, req) // an MAuth on the mon session
	_, err = client.HandleMAuthReply(ans.Result, ans.GlobalID, ans.ResultBL)
	t, _ := client.Ticket(msg.EntityOSD)
	fmt.Println("renewed:", err, "OSD ticket expires", t.Expires.Format(time.TimeOnly))

	bad, _ := cephx.NewClient(cephx.ClientConfig{Name: entry.Name, Key: osdKey, Rand: rnd, Now: clock})
	_, _, err = run(bad.Handler(), ks.Handler(), msg.EntityMon, auth.ConModeCRC)
	fmt.Println("wrong key:", err)
	// Output:
	// mon login: <nil> global id 4100 secret 64 bytes
	// osd session: <nil>, peer client.admin.4100 caps "allow rw"
	// due: 0x15
	// renewed: <nil> OSD ticket expires 13:50:00
	// wrong key: auth: bad key or proof: client.admin's proof does not match its key
}
