package cephx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
)

func TestMonLogin(t *testing.T) {
	for _, mode := range []uint32{auth.ConModeCRC, auth.ConModeSecure} {
		cl := newCluster(t, nil)
		cr, sr, s := cl.login(t, cl.admin, mode)
		if cr.GlobalID != DefaultFirstGlobalID || sr.GlobalID != cr.GlobalID || cl.admin.GlobalID() != cr.GlobalID {
			t.Fatalf("global ids: client %d server %d", cr.GlobalID, sr.GlobalID)
		}
		if len(cr.SessionKey) != 16 || !bytes.Equal(cr.SessionKey, sr.SessionKey) {
			t.Fatalf("session keys differ: %x %x", cr.SessionKey, sr.SessionKey)
		}
		if !bytes.Equal(cr.ConnectionSecret, sr.ConnectionSecret) {
			t.Fatalf("connection secrets differ")
		}
		wantLen := 0
		if mode == auth.ConModeSecure {
			wantLen = 64
		}
		if len(cr.ConnectionSecret) != wantLen {
			t.Fatalf("mode %d: %d-byte connection secret", mode, len(cr.ConnectionSecret))
		}
		if cr.Name != name(t, "client.admin") || sr.Name != cr.Name || string(sr.Caps) != "allow *" {
			t.Fatalf("names/caps: %v %v %q", cr.Name, sr.Name, sr.Caps)
		}
		if !s.Authenticated() || s.GlobalID() != cr.GlobalID {
			t.Fatalf("session state")
		}
		now := cl.clk.now()
		for _, svc := range []msg.EntityType{msg.EntityAuth, msg.EntityMon, msg.EntityOSD, msg.EntityMgr} {
			tk, ok := cl.admin.Ticket(svc)
			if !ok || !tk.Valid(now) || tk.NeedsRenewal(now) {
				t.Fatalf("ticket for %s: %+v %v", svc, tk, ok)
			}
		}
		if tk, _ := cl.admin.Ticket(msg.EntityAuth); !tk.Expires.Equal(now.Add(DefaultMonTicketTTL)) {
			t.Fatalf("AUTH ticket expires %v", tk.Expires)
		}
		if tk, _ := cl.admin.Ticket(msg.EntityOSD); !tk.RenewAfter.Equal(now.Add(45 * time.Minute)) {
			t.Fatalf("OSD ticket renews after %v", tk.RenewAfter)
		}
		if _, ok := cl.admin.Ticket(msg.EntityMDS); ok {
			t.Fatal("MDS ticket not asked for")
		}
		if need := cl.admin.Need(now); need != 0 {
			t.Fatalf("need %#x after login", need)
		}
	}
}

func TestMonReconnectReclaimsGlobalID(t *testing.T) {
	cl := newCluster(t, nil)
	first, _, _ := cl.login(t, cl.admin, auth.ConModeCRC)
	old, _ := cl.admin.Ticket(msg.EntityAuth)
	cl.clk.advance(time.Hour)
	// A second client logs in meanwhile and gets the next id.
	other, err := NewClient(ClientConfig{Name: name(t, "client.admin"), Key: keyFrom(1), Rand: seeded(77), Now: cl.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := cl.login(t, other, auth.ConModeCRC); r.GlobalID == first.GlobalID {
		t.Fatal("second client got the same global id")
	}
	again, sr, _ := cl.login(t, cl.admin, auth.ConModeSecure)
	if again.GlobalID != first.GlobalID || sr.GlobalID != first.GlobalID {
		t.Fatalf("reconnect got global id %d, had %d", again.GlobalID, first.GlobalID)
	}
	nt, _ := cl.admin.Ticket(msg.EntityAuth)
	if bytes.Equal(nt.Blob.Blob, old.Blob.Blob) || nt.SessionKey.Equal(old.SessionKey) {
		t.Fatal("AUTH ticket not renewed on reconnect")
	}
	if !bytes.Equal(again.SessionKey, sr.SessionKey) {
		t.Fatal("session keys differ")
	}
}

func TestExpiredAuthTicketLogsInAfresh(t *testing.T) {
	cl := newCluster(t, nil)
	first, _, _ := cl.login(t, cl.admin, auth.ConModeCRC)
	cl.clk.advance(DefaultMonTicketTTL + time.Second)
	again, _, _ := cl.login(t, cl.admin, auth.ConModeCRC)
	if again.GlobalID == first.GlobalID {
		t.Fatal("an expired ticket reclaimed its global id")
	}
}

// reclaimRequest starts a login for gid on s and returns the
// GET_AUTH_SESSION_KEY payload with old as old ticket and the given
// CephXAuthenticate version.
func reclaimRequest(t *testing.T, c *Client, s *MonSession, gid uint64, old *Ticket, version byte) []byte {
	t.Helper()
	h := &ClientHandler{c: c, peer: msg.EntityMon, state: hsRequested, globalID: gid, old: old}
	first := append([]byte{AuthModeMon}, msg.AppendAuthName(nil, c.Name())...)
	first = append(first, byte(gid), byte(gid>>8), byte(gid>>16), byte(gid>>24), byte(gid>>32), byte(gid>>40), byte(gid>>48), byte(gid>>56))
	r, err := s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, true, first)
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.ReplyMore(r.More)
	if err != nil {
		t.Fatal(err)
	}
	p[2] = version
	return p
}

func TestGlobalIDReclaimRules(t *testing.T) {
	cl := newCluster(t, nil)
	first, _, _ := cl.login(t, cl.admin, auth.ConModeCRC)
	gid := first.GlobalID
	tk, _ := cl.admin.Ticket(msg.EntityAuth)

	// Reclaim without a ticket: refused (EACCES), v3 or legacy.
	for _, v := range []byte{3, 2} {
		_, err := cl.ks.Handler().Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, nil)
		if !errors.Is(err, auth.ErrMalformed) {
			t.Fatalf("request without a login: %v", err)
		}
		s := cl.ks.Handler()
		_, err = s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, reclaimRequest(t, cl.admin, s, gid, nil, v))
		if !errors.Is(err, auth.ErrBadTicket) || Status(err) != StatusEACCES {
			t.Fatalf("v%d reclaim without ticket: %v (status %d)", v, err, Status(err))
		}
	}
	// A wrong global id with a valid ticket: refused, mismatch.
	s := cl.ks.Handler()
	_, err := s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, reclaimRequest(t, cl.admin, s, gid+1, &tk, 3))
	if !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("wrong global id: %v", err)
	}
	// A ticket with a fresh login (global id 0): EINVAL.
	s = cl.ks.Handler()
	_, err = s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, reclaimRequest(t, cl.admin, s, 0, &tk, 3))
	var se *StatusError
	if !errors.As(err, &se) || se.Status != StatusEINVAL || !errors.Is(err, auth.ErrDenied) || !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("superfluous ticket: %v", err)
	}
	// A tampered ticket.
	bad := tk
	bad.Blob.Blob = append([]byte(nil), tk.Blob.Blob...)
	bad.Blob.Blob[20] ^= 1
	s = cl.ks.Handler()
	_, err = s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, reclaimRequest(t, cl.admin, s, gid, &bad, 3))
	if !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("tampered ticket: %v", err)
	}
	// The same ticket, intact: accepted.
	s = cl.ks.Handler()
	if _, err = s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, reclaimRequest(t, cl.admin, s, gid, &tk, 3)); err != nil {
		t.Fatalf("valid reclaim: %v", err)
	}

	// With auth_allow_insecure_global_id_reclaim, a legacy client may
	// reclaim without a ticket, a v3 client still may not.
	ins := newCluster(t, func(c *KeyServerConfig) { c.AllowInsecureGlobalIDReclaim = true })
	s = ins.ks.Handler()
	if _, err := s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, reclaimRequest(t, ins.admin, s, 5000, nil, 2)); err != nil {
		t.Fatalf("insecure legacy reclaim: %v", err)
	}
	s = ins.ks.Handler()
	if _, err := s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, reclaimRequest(t, ins.admin, s, 5000, nil, 3)); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("insecure v3 reclaim: %v", err)
	}
}

func TestMonLoginWrongKey(t *testing.T) {
	cl := newCluster(t, nil)
	bad, _ := NewClient(ClientConfig{Name: name(t, "client.admin"), Key: keyFrom(9), Rand: seeded(5), Now: cl.clk.now})
	_, _, err := exchange(bad.Handler(), cl.ks.Handler(), msg.EntityClient, msg.EntityMon, auth.ConModeCRC)
	if !errors.Is(err, auth.ErrBadKey) || Status(err) != StatusEACCES {
		t.Fatalf("wrong key: %v", err)
	}
	if bad.GlobalID() != 0 {
		t.Fatal("a refused login set the global id")
	}
	unknown, _ := NewClient(ClientConfig{Name: name(t, "client.nobody"), Key: keyFrom(1), Rand: seeded(5), Now: cl.clk.now})
	if _, _, err := exchange(unknown.Handler(), cl.ks.Handler(), msg.EntityClient, msg.EntityMon, auth.ConModeCRC); !errors.Is(err, auth.ErrUnknownEntity) {
		t.Fatalf("unknown entity: %v", err)
	}
}

// A client whose key the server does not share cannot read the server's
// reply: drive the server with the right client and decode with the
// wrong key.
func TestMonReplyWithWrongKey(t *testing.T) {
	cl := newCluster(t, nil)
	s := cl.ks.Handler()
	h := cl.admin.Handler()
	p, _ := h.Request(msg.EntityMon)
	r, err := s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, true, p)
	if err != nil {
		t.Fatal(err)
	}
	p, _ = h.ReplyMore(r.More)
	r, err = s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, p)
	if err != nil {
		t.Fatal(err)
	}
	wrong, _ := NewClient(ClientConfig{Name: name(t, "client.admin"), Key: keyFrom(8), Rand: seeded(5), Now: cl.clk.now})
	wh := wrong.Handler()
	wh.peer, wh.state = msg.EntityMon, hsAnswered
	if _, err := wh.Done(r.Result.GlobalID, auth.ConModeCRC, r.Payload); !errors.Is(err, auth.ErrBadKey) {
		t.Fatalf("wrong key decoding the reply: %v", err)
	}
	// Every single-byte tampering of the reply up to the end of the
	// connection secret is refused (the extra tickets that follow have
	// opaque parts too, checked by their services).
	n := int(binary.LittleEndian.Uint32(r.Payload[82:]))
	end := 86 + n + 4 + int(binary.LittleEndian.Uint32(r.Payload[86+n:]))
	for i := 0; i < end; i++ {
		tam := append([]byte(nil), r.Payload...)
		tam[i] ^= 0x40
		th := cl.admin.Handler()
		th.peer, th.state = msg.EntityMon, hsAnswered
		if _, err := th.Done(r.Result.GlobalID, auth.ConModeCRC, tam); err == nil {
			// Flipping a bit of an opaque ticket blob is not detectable
			// by the client; the service refuses it later.
			if !tamperedOpaque(r.Payload, i) {
				t.Fatalf("tampered byte %d accepted", i)
			}
		}
	}
}

// tamperedOpaque reports whether offset i of a one-ticket reply lies in
// a part the client cannot check (Ceph ignores these struct versions,
// and the ticket blob is opaque to its holder): header 6, reply version
// at 6, count, service id, service_ticket_v at 15, encrypted service
// ticket 4+48, enc flag, blob length, then the ticket blob (version and
// secret id at 73..81, length at 82, opaque ticket from 86).
func tamperedOpaque(reply []byte, i int) bool {
	n := int(binary.LittleEndian.Uint32(reply[82:]))
	return i == 6 || i == 15 || (i >= 73 && i < 82) || (i >= 86 && i < 86+n)
}

func TestMonLoginNoMonCaps(t *testing.T) {
	cl := newCluster(t, nil)
	if err := cl.ks.AddEntity(KeyringEntry{Name: name(t, "client.nocaps"), Key: keyFrom(4)}); err != nil {
		t.Fatal(err)
	}
	c, _ := NewClient(ClientConfig{Name: name(t, "client.nocaps"), Key: keyFrom(4), Rand: seeded(5), Now: cl.clk.now})
	_, _, err := exchange(c.Handler(), cl.ks.Handler(), msg.EntityClient, msg.EntityMon, auth.ConModeCRC)
	if !errors.Is(err, auth.ErrDenied) || Status(err) != StatusEACCES {
		t.Fatalf("no mon caps: %v", err)
	}
}

func TestAuthorizer(t *testing.T) {
	for _, mode := range []uint32{auth.ConModeCRC, auth.ConModeSecure} {
		cl := newCluster(t, nil)
		v := cl.osdVerifier(t)
		cl.login(t, cl.admin, auth.ConModeCRC)
		vs := v.Handler()
		h := cl.admin.Handler()
		cr, sr, err := exchange(h, vs, msg.EntityClient, msg.EntityOSD, mode)
		if err != nil {
			t.Fatalf("mode %d: %v", mode, err)
		}
		tk, _ := cl.admin.Ticket(msg.EntityOSD)
		if !bytes.Equal(cr.SessionKey, tk.SessionKey.Secret) || !bytes.Equal(sr.SessionKey, cr.SessionKey) {
			t.Fatal("session key is not the OSD ticket's")
		}
		if sr.Name != name(t, "client.admin") || sr.GlobalID != cl.admin.GlobalID() || cr.GlobalID != sr.GlobalID {
			t.Fatalf("peer %v.%d", sr.Name, sr.GlobalID)
		}
		if string(sr.Caps) != "allow *" {
			t.Fatalf("caps %q", sr.Caps)
		}
		if !bytes.Equal(cr.ConnectionSecret, sr.ConnectionSecret) || (mode == auth.ConModeSecure) != (len(cr.ConnectionSecret) == 64) {
			t.Fatalf("mode %d: connection secret %d bytes", mode, len(cr.ConnectionSecret))
		}
	}
}

func TestAuthorizerChallengeRequired(t *testing.T) {
	cl := newCluster(t, nil)
	v := cl.osdVerifier(t)
	cl.login(t, cl.admin, auth.ConModeCRC)
	h := cl.admin.Handler()
	p, err := h.Request(msg.EntityOSD)
	if err != nil {
		t.Fatal(err)
	}
	vs := v.Handler()
	r, err := vs.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, true, p)
	if err != nil || r.Done || len(r.More) != 32 {
		t.Fatalf("first authorizer: %+v %v", r, err)
	}
	// Presenting the first authorizer again is refused.
	if _, err := vs.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, p); !errors.Is(err, auth.ErrBadKey) {
		t.Fatalf("replayed authorizer: %v", err)
	}
	// A wrong challenge answer is refused.
	vs = v.Handler()
	r, _ = vs.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, true, p)
	tk, _ := cl.admin.Ticket(msg.EntityOSD)
	forged, _ := buildAuthorizer(cl.admin.GlobalID(), uint32(msg.EntityOSD), tk.Blob, tk.SessionKey, authorize{nonce: 1, haveChallenge: true, challengePlus1: 12345})
	if _, err := vs.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, forged); !errors.Is(err, auth.ErrBadKey) {
		t.Fatalf("wrong challenge answer: %v", err)
	}
}

func TestAuthorizerErrors(t *testing.T) {
	cl := newCluster(t, nil)
	v := cl.osdVerifier(t)
	fresh, _ := NewClient(ClientConfig{Name: name(t, "client.admin"), Key: keyFrom(1), Rand: seeded(5), Now: cl.clk.now})
	if _, err := fresh.Handler().Request(msg.EntityOSD); !errors.Is(err, auth.ErrNoTicket) {
		t.Fatalf("no ticket: %v", err)
	}
	cl.login(t, cl.admin, auth.ConModeCRC)
	if _, err := cl.admin.Handler().Request(msg.EntityMDS); !errors.Is(err, auth.ErrNoTicket) {
		t.Fatalf("no MDS ticket: %v", err)
	}
	tk, _ := cl.admin.Ticket(msg.EntityOSD)
	gid := cl.admin.GlobalID()
	try := func(p []byte) error {
		_, err := v.Handler().Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, true, p)
		return err
	}
	// Forged ticket: a flipped bit.
	forged := tk.Blob
	forged.Blob = append([]byte(nil), tk.Blob.Blob...)
	forged.Blob[len(forged.Blob)-20] ^= 1
	p, _ := buildAuthorizer(gid, uint32(msg.EntityOSD), forged, tk.SessionKey, authorize{nonce: 1})
	if err := try(p); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("forged ticket: %v", err)
	}
	// A ticket sealed with a key the service does not hold.
	fake := forged
	fake.Blob, _ = keyFrom(0x55).Seal([]byte("not a ticket"))
	p, _ = buildAuthorizer(gid, uint32(msg.EntityOSD), fake, tk.SessionKey, authorize{nonce: 1})
	if err := try(p); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("foreign ticket: %v", err)
	}
	// Wrong global id.
	p, _ = buildAuthorizer(gid+1, uint32(msg.EntityOSD), tk.Blob, tk.SessionKey, authorize{nonce: 1})
	if err := try(p); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("wrong global id: %v", err)
	}
	// Unknown secret id.
	unk := tk.Blob
	unk.SecretID = 99
	p, _ = buildAuthorizer(gid, uint32(msg.EntityOSD), unk, tk.SessionKey, authorize{nonce: 1})
	if err := try(p); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("unknown secret id: %v", err)
	}
	// Ticket for another service.
	mgr, _ := cl.admin.Ticket(msg.EntityMgr)
	p, _ = buildAuthorizer(gid, uint32(msg.EntityMgr), mgr.Blob, mgr.SessionKey, authorize{nonce: 1})
	if err := try(p); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("MGR ticket at an OSD: %v", err)
	}
	// Authorizer encrypted with the wrong session key.
	p, _ = buildAuthorizer(gid, uint32(msg.EntityOSD), tk.Blob, keyFrom(0x66), authorize{nonce: 1})
	if err := try(p); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("wrong session key: %v", err)
	}
	// Truncations are malformed.
	p, _ = buildAuthorizer(gid, uint32(msg.EntityOSD), tk.Blob, tk.SessionKey, authorize{nonce: 1})
	for n := 0; n < len(p); n++ {
		if err := try(p[:n]); !errors.Is(err, auth.ErrMalformed) {
			t.Fatalf("authorizer truncated to %d: %v", n, err)
		}
	}
	// Not cephx.
	if _, err := v.Handler().Handle(auth.MethodNone, msg.EntityClient, auth.ConModeCRC, true, p); Status(err) != StatusEOPNOTSUPP {
		t.Fatalf("auth none: %v", err)
	}
}

func TestAuthorizerExpiry(t *testing.T) {
	cl := newCluster(t, nil)
	cl.login(t, cl.admin, auth.ConModeCRC)
	// The verifier's clock is ahead of the client's: the ticket the
	// client still holds as valid has expired for the service.
	vclk := &clock{t: cl.clk.now().Add(DefaultServiceTicketTTL + time.Second)}
	ks := cl.ks
	r, err := ks.Rotating(msg.EntityOSD, cl.clk.now())
	if err != nil {
		t.Fatal(err)
	}
	v, _ := NewVerifier(VerifierConfig{Service: msg.EntityOSD, Rotating: r, Rand: seeded(3), Now: vclk.now})
	_, _, err = exchange(cl.admin.Handler(), v.Handler(), msg.EntityClient, msg.EntityOSD, auth.ConModeCRC)
	if !errors.Is(err, auth.ErrExpired) {
		t.Fatalf("expired ticket at the service: %v", err)
	}
	// The client itself refuses to present an expired ticket.
	cl.clk.advance(DefaultServiceTicketTTL)
	_, err = cl.admin.Handler().Request(msg.EntityOSD)
	if !errors.Is(err, auth.ErrNoTicket) || !errors.Is(err, auth.ErrExpired) {
		t.Fatalf("expired ticket at the client: %v", err)
	}
}

func TestAuthorizerReplyChecked(t *testing.T) {
	cl := newCluster(t, nil)
	v := cl.osdVerifier(t)
	cl.login(t, cl.admin, auth.ConModeCRC)
	h := cl.admin.Handler()
	p, _ := h.Request(msg.EntityOSD)
	vs := v.Handler()
	r, _ := vs.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, true, p)
	p, _ = h.ReplyMore(r.More)
	if _, err := vs.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, false, p); err != nil {
		t.Fatal(err)
	}
	tk, _ := cl.admin.Ticket(msg.EntityOSD)
	// A reply with the wrong nonce+1 (a server that did not read our
	// authorizer), one under another key, one without a secret in secure
	// mode.
	wrongNonce, _ := AppendEncrypted(nil, tk.SessionKey, appendAuthorizeReply(nil, authorizeReply{noncePlus1: h.nonce + 2, connSecret: make([]byte, 64)}))
	if _, err := h.Done(0, auth.ConModeSecure, wrongNonce); !errors.Is(err, auth.ErrBadKey) {
		t.Fatalf("wrong nonce: %v", err)
	}
	h.state = hsAnswered
	otherKey, _ := AppendEncrypted(nil, keyFrom(0x77), appendAuthorizeReply(nil, authorizeReply{noncePlus1: h.nonce + 1}))
	if _, err := h.Done(0, auth.ConModeCRC, otherKey); !errors.Is(err, auth.ErrBadKey) {
		t.Fatalf("other key: %v", err)
	}
	h.state = hsAnswered
	noSecret, _ := AppendEncrypted(nil, tk.SessionKey, appendAuthorizeReply(nil, authorizeReply{noncePlus1: h.nonce + 1}))
	if _, err := h.Done(0, auth.ConModeSecure, noSecret); !errors.Is(err, auth.ErrMalformed) {
		t.Fatalf("secure without secret: %v", err)
	}
	h.state = hsAnswered
	if _, err := h.Done(0, auth.ConModeCRC, noSecret); err != nil {
		t.Fatalf("crc reply: %v", err)
	}
}

func TestServiceTicketRenewal(t *testing.T) {
	cl := newCluster(t, nil)
	_, _, s := cl.login(t, cl.admin, auth.ConModeCRC)
	if p, err := cl.admin.RenewRequest(cl.clk.now()); p != nil || err != nil {
		t.Fatalf("renewal right after login: %x %v", p, err)
	}
	old, _ := cl.admin.Ticket(msg.EntityOSD)
	if got := cl.admin.NextRenewal(); !got.Equal(old.RenewAfter) {
		t.Fatalf("next renewal %v, want %v", got, old.RenewAfter)
	}
	cl.clk.advance(46 * time.Minute)
	if need := cl.admin.Need(cl.clk.now()); need != ServiceMask(msg.EntityMon, msg.EntityOSD, msg.EntityMgr) {
		t.Fatalf("need %#x", need)
	}
	p, err := cl.admin.RenewRequest(cl.clk.now())
	if err != nil || p == nil {
		t.Fatalf("renew: %v", err)
	}
	if op, err := mauth(t, cl.admin, s, p); err != nil || op != OpGetPrincipalSessionKey {
		t.Fatalf("principal: %#x %v", op, err)
	}
	nt, _ := cl.admin.Ticket(msg.EntityOSD)
	if !nt.Expires.Equal(cl.clk.now().Add(time.Hour)) || nt.SessionKey.Equal(old.SessionKey) {
		t.Fatalf("OSD ticket not renewed: %+v", nt)
	}
	if need := cl.admin.Need(cl.clk.now()); need != 0 {
		t.Fatalf("need %#x after renewal", need)
	}
	// The renewed ticket works at an OSD holding current secrets.
	v := cl.osdVerifier(t)
	if _, _, err := exchange(cl.admin.Handler(), v.Handler(), msg.EntityClient, msg.EntityOSD, auth.ConModeCRC); err != nil {
		t.Fatalf("renewed ticket: %v", err)
	}
	// Explicit request for an MDS ticket.
	p, _ = cl.admin.ServiceTicketRequest(ServiceMask(msg.EntityMDS))
	if _, err := mauth(t, cl.admin, s, p); err != nil {
		t.Fatal(err)
	}
	if _, ok := cl.admin.Ticket(msg.EntityMDS); !ok {
		t.Fatal("no MDS ticket")
	}
}

func TestAuthTicketRenewalOverMAuth(t *testing.T) {
	cl := newCluster(t, nil)
	first, _, s := cl.login(t, cl.admin, auth.ConModeCRC)
	old, _ := cl.admin.Ticket(msg.EntityAuth)
	cl.clk.advance(DefaultMonTicketTTL*3/4 + time.Minute)
	p, err := cl.admin.RenewRequest(cl.clk.now())
	if err != nil || p == nil {
		t.Fatalf("renew: %v", err)
	}
	if op, err := mauth(t, cl.admin, s, p); err != nil || op != OpGetAuthSessionKey {
		t.Fatalf("AUTH renewal: %#x %v", op, err)
	}
	nt, _ := cl.admin.Ticket(msg.EntityAuth)
	if nt.SessionKey.Equal(old.SessionKey) || !nt.Expires.After(old.Expires) || cl.admin.GlobalID() != first.GlobalID {
		t.Fatal("AUTH ticket not renewed")
	}
	// The services due were renewed with it (other_keys).
	if need := cl.admin.Need(cl.clk.now()); need != 0 {
		t.Fatalf("need %#x", need)
	}
	// A renewal presenting a stale ticket is refused: the session now
	// expects the new one... a forged one is refused outright.
	cl.admin.mu.Lock()
	cl.admin.tickets[msg.EntityAuth].RenewAfter = cl.clk.now()
	cl.admin.tickets[msg.EntityAuth].Blob.Blob[30] ^= 1
	cl.admin.mu.Unlock()
	p, _ = cl.admin.RenewRequest(cl.clk.now())
	if _, err := mauth(t, cl.admin, s, p); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("renewal with a forged ticket: %v", err)
	}
}

func TestRotation(t *testing.T) {
	cl := newCluster(t, nil)
	r0, _ := cl.ks.Rotating(msg.EntityOSD, cl.clk.now())
	if len(r0.Secrets) != 3 || r0.MaxVer != 3 {
		t.Fatalf("initial secrets %+v", r0)
	}
	for i, s := range r0.Secrets {
		if s.ID != uint64(i+1) || !s.Expires.Equal(cl.clk.now().Add(time.Duration(i+1)*time.Hour)) {
			t.Fatalf("secret %d: %+v", i, s)
		}
	}
	if c, _ := r0.Current(); c.ID != 2 {
		t.Fatalf("current %d", c.ID)
	}
	v := cl.osdVerifier(t)
	cl.login(t, cl.admin, auth.ConModeCRC)
	if tk, _ := cl.admin.Ticket(msg.EntityOSD); tk.Blob.SecretID != 2 {
		t.Fatalf("ticket sealed with secret %d", tk.Blob.SecretID)
	}
	// Two hours on, secret 2 has expired: the server rotates to 3 and 4,
	// dropping 1.
	cl.clk.advance(2*time.Hour + time.Second)
	if err := cl.ks.Rotate(cl.clk.now()); err != nil {
		t.Fatal(err)
	}
	r1, _ := cl.ks.Rotating(msg.EntityOSD, cl.clk.now())
	if len(r1.Secrets) != 3 || r1.Secrets[0].ID != 2 || r1.MaxVer != 4 {
		t.Fatalf("rotated secrets %+v", r1)
	}
	if c, _ := r1.Current(); c.ID != 3 {
		t.Fatalf("current %d", c.ID)
	}
	// A fresh ticket is sealed with secret 3, which the OSD holds (it
	// was "next" when it fetched its secrets). The request was built
	// with the AUTH ticket of before a reconnect: its reply is
	// encrypted with that ticket's session key, and still read.
	p, _ := cl.admin.ServiceTicketRequest(ServiceMask(msg.EntityOSD))
	_, _, s := cl.login(t, cl.admin, auth.ConModeCRC)
	if _, err := mauth(t, cl.admin, s, p); err != nil {
		t.Fatalf("request crossing a reconnect: %v", err)
	}
	if tk, _ := cl.admin.Ticket(msg.EntityOSD); tk.Blob.SecretID != 3 {
		t.Fatalf("ticket sealed with secret %d", tk.Blob.SecretID)
	}
	if _, _, err := exchange(cl.admin.Handler(), v.Handler(), msg.EntityClient, msg.EntityOSD, auth.ConModeCRC); err != nil {
		t.Fatalf("secret 3 at an OSD with secrets 1-3: %v", err)
	}
	// Another hour: tickets use secret 4, unknown to the OSD until it
	// refreshes.
	cl.clk.advance(time.Hour)
	if !cl.osd.NeedRotating(cl.clk.now()) {
		t.Fatal("osd does not want new rotating secrets")
	}
	p, _ = cl.admin.ServiceTicketRequest(ServiceMask(msg.EntityOSD))
	if _, err := mauth(t, cl.admin, s, p); err != nil {
		t.Fatal(err)
	}
	if _, _, err := exchange(cl.admin.Handler(), v.Handler(), msg.EntityClient, msg.EntityOSD, auth.ConModeCRC); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("secret 4 at an OSD with secrets 1-3: %v", err)
	}
	v2 := cl.osdVerifier(t)
	if cl.osd.NeedRotating(cl.clk.now()) {
		t.Fatal("osd wants rotating secrets right after fetching them")
	}
	if _, _, err := exchange(cl.admin.Handler(), v2.Handler(), msg.EntityClient, msg.EntityOSD, auth.ConModeCRC); err != nil {
		t.Fatalf("after refresh: %v", err)
	}
}

func TestRotatingKeysOnlyForServices(t *testing.T) {
	cl := newCluster(t, nil)
	_, _, s := cl.login(t, cl.admin, auth.ConModeCRC)
	if _, err := mauth(t, cl.admin, s, cl.admin.RotatingKeyRequest()); !errors.Is(err, auth.ErrDenied) {
		t.Fatalf("client asking for rotating keys: %v", err)
	}
	s2 := cl.ks.Handler()
	if _, err := mauth(t, cl.osd, s2, cl.osd.RotatingKeyRequest()); !errors.Is(err, auth.ErrDenied) {
		t.Fatalf("rotating keys before login: %v", err)
	}
}

func TestStaticServiceKey(t *testing.T) {
	svcKey := keyFrom(0x42)
	cl := newCluster(t, func(c *KeyServerConfig) {
		c.StaticServiceKeys = map[msg.EntityType]Key{msg.EntityOSD: svcKey}
	})
	cl.login(t, cl.admin, auth.ConModeCRC)
	tk, _ := cl.admin.Ticket(msg.EntityOSD)
	if tk.Blob.SecretID != StaticSecretID {
		t.Fatalf("secret id %d", tk.Blob.SecretID)
	}
	v, _ := NewVerifier(VerifierConfig{Service: msg.EntityOSD, StaticKey: svcKey, Rand: seeded(4), Now: cl.clk.now})
	_, sr, err := exchange(cl.admin.Handler(), v.Handler(), msg.EntityClient, msg.EntityOSD, auth.ConModeSecure)
	if err != nil || sr.Name != name(t, "client.admin") {
		t.Fatalf("static key: %v", err)
	}
	wrong, _ := NewVerifier(VerifierConfig{Service: msg.EntityOSD, StaticKey: keyFrom(0x43), Now: cl.clk.now})
	if _, _, err := exchange(cl.admin.Handler(), wrong.Handler(), msg.EntityClient, msg.EntityOSD, auth.ConModeCRC); !errors.Is(err, auth.ErrBadTicket) {
		t.Fatalf("wrong static key: %v", err)
	}
}

func TestMAuthLogin(t *testing.T) {
	cl := newCluster(t, nil)
	s := cl.ks.Handler()
	l := cl.admin.MAuthLogin()
	ans, err := s.HandleMAuth(MAuthProtocolNegotiate, l.Hello())
	if err != nil || ans.Protocol != auth.MethodCephx || ans.GlobalID != DefaultFirstGlobalID {
		t.Fatalf("negotiation: %+v %v", ans, err)
	}
	p, err := l.HandleChallenge(ans.Result, ans.ResultBL)
	if err != nil {
		t.Fatal(err)
	}
	ans, err = s.HandleMAuth(MAuthProtocolCephx, p)
	if err != nil || ans.Login == nil {
		t.Fatalf("login: %+v %v", ans, err)
	}
	res, err := l.HandleDone(ans.Result, ans.GlobalID, ans.ResultBL)
	if err != nil {
		t.Fatal(err)
	}
	if res.GlobalID != DefaultFirstGlobalID || !bytes.Equal(res.SessionKey, ans.Login.SessionKey) || res.ConnectionSecret != nil {
		t.Fatalf("result %+v", res)
	}
	if _, ok := cl.admin.Ticket(msg.EntityOSD); !ok {
		t.Fatal("no OSD ticket over MAuth")
	}
	// A second MAuth login reclaims the id.
	s = cl.ks.Handler()
	l = cl.admin.MAuthLogin()
	ans, _ = s.HandleMAuth(MAuthProtocolNegotiate, l.Hello())
	p, _ = l.HandleChallenge(ans.Result, ans.ResultBL)
	ans, _ = s.HandleMAuth(MAuthProtocolCephx, p)
	if res, err := l.HandleDone(ans.Result, ans.GlobalID, ans.ResultBL); err != nil || res.GlobalID != DefaultFirstGlobalID {
		t.Fatalf("reclaim over MAuth: %+v %v", res, err)
	}
	// Refusals carry a result code.
	bad, _ := NewClient(ClientConfig{Name: name(t, "client.admin"), Key: keyFrom(3), Rand: seeded(5), Now: cl.clk.now})
	s = cl.ks.Handler()
	l = bad.MAuthLogin()
	ans, _ = s.HandleMAuth(MAuthProtocolNegotiate, l.Hello())
	p, _ = l.HandleChallenge(ans.Result, ans.ResultBL)
	ans, err = s.HandleMAuth(MAuthProtocolCephx, p)
	if !errors.Is(err, auth.ErrBadKey) || ans.Result != StatusEACCES {
		t.Fatalf("wrong key over MAuth: %+v %v", ans, err)
	}
	if _, err := l.HandleDone(ans.Result, ans.GlobalID, ans.ResultBL); !errors.Is(err, auth.ErrDenied) {
		t.Fatalf("client side of the refusal: %v", err)
	}
	if ans, err := cl.ks.Handler().HandleMAuth(7, nil); Status(err) != StatusEOPNOTSUPP || ans.Result != StatusEOPNOTSUPP {
		t.Fatalf("unknown protocol: %v", err)
	}
}

func TestCombinedServer(t *testing.T) {
	cl := newCluster(t, nil)
	v, err := NewVerifier(VerifierConfig{Service: msg.EntityOSD, KeyServer: cl.ks, Rand: seeded(6), Now: cl.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewCombinedServer(cl.ks, v)
	if _, _, err := exchange(cl.admin.Handler(), srv, msg.EntityClient, msg.EntityMon, auth.ConModeCRC); err != nil {
		t.Fatalf("mon mode: %v", err)
	}
	if srv.MonSession() == nil || !srv.MonSession().Authenticated() {
		t.Fatal("no mon session")
	}
	// The verifier follows the key server's rotation without being told.
	cl.clk.advance(2*time.Hour + time.Second)
	p, _ := cl.admin.ServiceTicketRequest(ServiceMask(msg.EntityOSD))
	if _, err := mauth(t, cl.admin, srv.MonSession(), p); err != nil {
		t.Fatal(err)
	}
	if tk, _ := cl.admin.Ticket(msg.EntityOSD); tk.Blob.SecretID != 3 {
		t.Fatalf("secret id %d", tk.Blob.SecretID)
	}
	_, sr, err := exchange(cl.admin.Handler(), NewCombinedServer(cl.ks, v), msg.EntityClient, msg.EntityOSD, auth.ConModeSecure)
	if err != nil || sr.Name != name(t, "client.admin") {
		t.Fatalf("authorizer mode: %v", err)
	}
	if _, _, err := exchange(cl.admin.Handler(), NewCombinedServer(cl.ks, nil), msg.EntityClient, msg.EntityOSD, auth.ConModeCRC); Status(err) != StatusEOPNOTSUPP {
		t.Fatalf("authorizer without a verifier: %v", err)
	}
	if _, err := NewCombinedServer(cl.ks, v).Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, true, nil); !errors.Is(err, auth.ErrMalformed) {
		t.Fatalf("empty request: %v", err)
	}
}

// A key server that lost its secrets (restarted) refuses a reclaim; the
// client resets and logs in afresh.
func TestReclaimAfterServerRestart(t *testing.T) {
	cl := newCluster(t, nil)
	cl.login(t, cl.admin, auth.ConModeCRC)
	restarted, err := NewKeyServer(KeyServerConfig{Keyring: cl.ring, Rand: seeded(99), Now: cl.clk.now, FirstGlobalID: 9000})
	if err != nil {
		t.Fatal(err)
	}
	h := cl.admin.Handler()
	_, _, err = exchange(h, restarted.Handler(), msg.EntityClient, msg.EntityMon, auth.ConModeCRC)
	if !errors.Is(err, auth.ErrBadTicket) || !h.Reclaiming() || Status(err) != StatusEACCES {
		t.Fatalf("reclaim at a restarted server: %v (reclaiming %v)", err, h.Reclaiming())
	}
	cl.admin.Reset()
	h = cl.admin.Handler()
	r, _, err := exchange(h, restarted.Handler(), msg.EntityClient, msg.EntityMon, auth.ConModeCRC)
	if err != nil || h.Reclaiming() || r.GlobalID != 9000 {
		t.Fatalf("fresh login: %v %+v", err, r)
	}
}

// A global id reclaimed at a server that did not assign it (a second
// server sharing the secrets) is never assigned to another client there.
func TestReclaimedGlobalIDNotReassigned(t *testing.T) {
	cl := newCluster(t, nil)
	first, _, _ := cl.login(t, cl.admin, auth.ConModeCRC)
	if first.GlobalID != DefaultFirstGlobalID {
		t.Fatalf("gid %d", first.GlobalID)
	}
	// Move the client's AUTH ticket to a higher id by hand, as if another
	// server had assigned it: sealed with this server's AUTH secret.
	cl.ks.mu.Lock()
	parent := authTicket{name: cl.admin.Name(), globalID: 4200}
	at, err := cl.ks.issueLocked(msg.EntityAuth, parent, time.Hour, cl.clk.now())
	cl.ks.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	cl.admin.mu.Lock()
	cl.admin.globalID = 4200
	cl.admin.tickets[msg.EntityAuth] = &Ticket{Service: msg.EntityAuth, SessionKey: at.sessionKey, Blob: at.blob, Expires: cl.clk.now().Add(time.Hour), RenewAfter: cl.clk.now().Add(time.Hour)}
	cl.admin.mu.Unlock()
	if r, _, _ := cl.login(t, cl.admin, auth.ConModeCRC); r.GlobalID != 4200 {
		t.Fatalf("reclaim gave %d", r.GlobalID)
	}
	other, _ := NewClient(ClientConfig{Name: cl.admin.Name(), Key: keyFrom(1), Rand: seeded(31), Now: cl.clk.now})
	if r, _, _ := cl.login(t, other, auth.ConModeCRC); r.GlobalID != 4201 {
		t.Fatalf("fresh login after the reclaim got %d, want 4201", r.GlobalID)
	}
}

// Many clients log in and renew at once on one key server, and one
// session takes MAuth requests from several goroutines (go test -race).
func TestConcurrentSessions(t *testing.T) {
	cl := newCluster(t, nil)
	_, _, s := cl.login(t, cl.admin, auth.ConModeCRC)
	v := cl.osdVerifier(t)
	done := make(chan error, 24)
	for i := range 8 {
		go func() {
			var err error
			for j := 0; j < 20 && err == nil; j++ {
				_, _, err = exchange(cl.admin.Handler(), v.Handler(), msg.EntityClient, msg.EntityOSD, auth.ConModeSecure)
			}
			done <- err
		}()
		go func() {
			c, err := NewClient(ClientConfig{Name: name(t, "client.admin"), Key: keyFrom(1), Rand: seeded(uint64(100 + i)), Now: cl.clk.now})
			if err == nil {
				_, _, err = exchange(c.Handler(), cl.ks.Handler(), msg.EntityClient, msg.EntityMon, auth.ConModeSecure)
			}
			done <- err
		}()
		go func() {
			p, err := cl.admin.ServiceTicketRequest(ServiceMask(msg.EntityOSD))
			if err == nil {
				var ans MAuthAnswer
				if ans, err = s.HandleMAuth(MAuthProtocolCephx, p); err == nil {
					_, err = cl.admin.HandleMAuthReply(ans.Result, ans.GlobalID, ans.ResultBL)
				}
			}
			done <- err
		}()
	}
	for range 24 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
