package cephx

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
)

// Wire layouts against what ../shared/ref/ceph-auth.md §1.4 and §1.6
// saw live from 16.2.15 daemons: byte for byte where no randomness is
// involved, lengths where it is.
func TestWireLayouts(t *testing.T) {
	cl := newCluster(t, nil)
	h := cl.admin.Handler()
	first, _ := h.Request(msg.EntityMon)
	// AUTH_MODE_MON, EntityName{CLIENT, "admin"}, global id 0.
	if got := hex.EncodeToString(first); got != "0a"+"08000000"+"05000000"+hex.EncodeToString([]byte("admin"))+"0000000000000000" {
		t.Fatalf("mon request %s", got)
	}
	s := cl.ks.Handler()
	r, _ := s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, true, first)
	if len(r.More) != 9 || r.More[0] != 1 {
		t.Fatalf("server challenge %x", r.More)
	}
	sc := binary.LittleEndian.Uint64(r.More[1:])
	req, _ := h.ReplyMore(r.More)
	// u16 0x0100, CephXAuthenticate v3 {client challenge, proof, empty
	// old ticket, other_keys MON|OSD|MGR|AUTH}.
	if len(req) != 2+1+8+8+13+4 || !bytes.Equal(req[:3], []byte{0, 1, 3}) {
		t.Fatalf("authenticate %x", req)
	}
	cc := binary.LittleEndian.Uint64(req[3:])
	proof, _ := ChallengeProof(keyFrom(1), sc, cc)
	if binary.LittleEndian.Uint64(req[11:]) != proof {
		t.Fatal("proof")
	}
	if !bytes.Equal(req[19:], []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x35, 0, 0, 0}) {
		t.Fatalf("old ticket and other_keys %x", req[19:])
	}
	// AUTH_DONE in secure mode: 824 bytes live for client.admin with
	// MON, OSD and MGR tickets and "allow *" caps (760 in crc mode).
	r, err := s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, false, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Payload) != 824 {
		t.Fatalf("secure AUTH_DONE payload %d bytes, 824 live", len(r.Payload))
	}
	if _, _, s2 := cl.login(t, cl.admin, auth.ConModeCRC); s2 == nil {
		t.Fatal()
	}
	s = cl.ks.Handler()
	h = &ClientHandler{c: cl.admin}
	cl.admin.Reset()
	first, _ = h.Request(msg.EntityMon)
	r, _ = s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, true, first)
	req, _ = h.ReplyMore(r.More)
	r, _ = s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, false, req)
	if len(r.Payload) != 760 {
		t.Fatalf("crc AUTH_DONE payload %d bytes, 760 live", len(r.Payload))
	}
	if _, err := h.Done(r.Result.GlobalID, auth.ConModeCRC, r.Payload); err != nil {
		t.Fatal(err)
	}
	// Opaque tickets: 96 bytes for AUTH and MON, 112 for OSD and MGR
	// live (the OSD and MGR caps are inside; MON tickets carry none).
	for svc, n := range map[msg.EntityType]int{msg.EntityAuth: 96, msg.EntityMon: 96, msg.EntityOSD: 112, msg.EntityMgr: 112} {
		if tk, _ := cl.admin.Ticket(svc); len(tk.Blob.Blob) != n {
			t.Errorf("%s ticket %d bytes, want %d", svc, len(tk.Blob.Blob), n)
		}
	}

	// Authorizer: u8 1, global id, service, ticket blob, encrypted
	// CephXAuthorize (4+32).
	v := cl.osdVerifier(t)
	tk, _ := cl.admin.Ticket(msg.EntityOSD)
	for _, mode := range []uint32{auth.ConModeCRC, auth.ConModeSecure} {
		ah := cl.admin.Handler()
		a, _ := ah.Request(msg.EntityOSD)
		if len(a) != 1+8+4+13+len(tk.Blob.Blob)+36 || a[0] != 1 || binary.LittleEndian.Uint32(a[9:]) != uint32(msg.EntityOSD) {
			t.Fatalf("authorizer %x", a)
		}
		vs := v.Handler()
		r, _ = vs.Handle(auth.MethodCephx, msg.EntityClient, mode, true, a)
		if len(r.More) != 32 { // enc_bl: no length prefix
			t.Fatalf("challenge %d bytes, 32 live", len(r.More))
		}
		a, _ = ah.ReplyMore(r.More)
		r, _ = vs.Handle(auth.MethodCephx, msg.EntityClient, mode, false, a)
		// Live: 36 bytes in crc mode (reply v1), 100 in secure (v2 with
		// a 64-byte secret).
		if want := map[uint32]int{auth.ConModeCRC: 36, auth.ConModeSecure: 100}[mode]; len(r.Payload) != want {
			t.Fatalf("mode %d: AUTH_DONE payload %d bytes, %d live", mode, len(r.Payload), want)
		}
	}
}
