package cephx

import (
	"bytes"
	"errors"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Decoders a fuzz input can be routed to (FuzzDecoders' selector).
const (
	fzRotating = iota
	fzTicketInfo
	fzAuthorize
	fzAuthorizeReply
	fzAuthorizer
	fzTicketReply
	fzKey
	fzOpen
	fzDecoders
)

// fuzzKey is the key FuzzDecoders decrypts with; seeds are encrypted
// with it.
var fuzzKey = keyFrom(0x5a)

// decoderSeeds returns a valid encoding for each decoder.
func decoderSeeds(t testing.TB) [][]byte {
	now := time.Unix(1_700_000_000, 5).UTC()
	rs := &RotatingSecrets{MaxVer: 3}
	for i := uint64(1); i <= 3; i++ {
		rs.Secrets = append(rs.Secrets, ExpiringKey{ID: i, Key: keyFrom(byte(i)), Expires: now.Add(time.Duration(i) * time.Hour)})
	}
	info := serviceTicketInfo{ticket: authTicket{name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}, globalID: 4100, auid: authUIDDefault,
		created: now, expires: now.Add(time.Hour), caps: encodeCaps("allow *"), flags: 1}, sessionKey: keyFrom(7)}
	sealed, _ := fuzzKey.Seal(appendServiceTicketInfo(nil, &info))
	authz, _ := buildAuthorizer(4100, uint32(msg.EntityOSD), TicketBlob{SecretID: 2, Blob: sealed}, keyFrom(7), authorize{nonce: 9})
	reply, err := appendTicketReply(nil, fuzzKey, []issuedTicket{
		{service: uint32(msg.EntityAuth), sessionKey: keyFrom(3), validity: time.Hour, blob: TicketBlob{SecretID: 1, Blob: sealed}},
		{service: uint32(msg.EntityOSD), sessionKey: keyFrom(4), validity: time.Minute, blob: TicketBlob{SecretID: 2, Blob: []byte("x")}},
	}, &fuzzKey)
	if err != nil {
		t.Fatal(err)
	}
	opened, _ := fuzzKey.Seal([]byte("payload"))
	return [][]byte{
		fzRotating:       appendRotating(nil, rs),
		fzTicketInfo:     appendServiceTicketInfo(nil, &info),
		fzAuthorize:      appendAuthorize(nil, authorize{nonce: 1, haveChallenge: true, challengePlus1: 2}),
		fzAuthorizeReply: appendAuthorizeReply(nil, authorizeReply{noncePlus1: 3, connSecret: bytes.Repeat([]byte{1}, 64)}),
		fzAuthorizer:     authz,
		fzTicketReply:    reply,
		fzKey:            []byte(fuzzKey.String()),
		fzOpen:           opened,
	}
}

// FuzzDecoders feeds arbitrary bytes to every cephx decoder. None may
// panic; what decodes re-encodes to the same value, and no decoded
// collection is larger than the input could hold.
func FuzzDecoders(f *testing.F) {
	for i, s := range decoderSeeds(f) {
		f.Add(uint8(i), s)
	}
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		switch sel % fzDecoders {
		case fzRotating:
			r, err := DecodeRotatingSecrets(data)
			if err != nil {
				if !errors.Is(err, auth.ErrMalformed) {
					t.Fatalf("error %v is not ErrMalformed", err)
				}
				return
			}
			if len(r.Secrets)*minExpiringKey > len(data) {
				t.Fatalf("%d secrets from %d bytes", len(r.Secrets), len(data))
			}
			again, err := DecodeRotatingSecrets(appendRotating(nil, r))
			if err != nil || !reflect.DeepEqual(again, r) {
				t.Fatalf("round trip: %+v -> %+v %v", r, again, err)
			}
		case fzTicketInfo:
			info, err := decodeServiceTicketInfo(data)
			if err != nil {
				return
			}
			if len(info.ticket.caps) > len(data) || len(info.sessionKey.Secret) > len(data) {
				t.Fatal("decoded more than the input")
			}
			again, err := decodeServiceTicketInfo(appendServiceTicketInfo(nil, &info))
			if err != nil || !reflect.DeepEqual(again, info) {
				t.Fatalf("round trip: %+v -> %+v %v", info, again, err)
			}
		case fzAuthorize:
			if a, err := decodeAuthorize(data); err == nil && len(data) >= 18 {
				if again, _ := decodeAuthorize(appendAuthorize(nil, a)); again != a {
					t.Fatalf("round trip %+v -> %+v", a, again)
				}
			}
		case fzAuthorizeReply:
			if r, err := decodeAuthorizeReply(data); err == nil {
				again, err := decodeAuthorizeReply(appendAuthorizeReply(nil, r))
				if err != nil || again.noncePlus1 != r.noncePlus1 || !bytes.Equal(again.connSecret, r.connSecret) {
					t.Fatalf("round trip %+v -> %+v", r, again)
				}
			}
		case fzAuthorizer:
			h, err := decodeAuthorizer(denc.NewDecoder(data))
			if err != nil {
				if !errors.Is(err, auth.ErrMalformed) {
					t.Fatalf("error %v is not ErrMalformed", err)
				}
				return
			}
			if len(h.blob.Blob)+len(h.enc) > len(data) {
				t.Fatal("decoded more than the input")
			}
		case fzTicketReply:
			ts, err := decodeTicketReply(denc.NewDecoder(data), fuzzKey, func(uint32) (Key, bool) { return fuzzKey, true })
			if err != nil {
				if !errors.Is(err, auth.ErrMalformed) && !errors.Is(err, auth.ErrBadKey) {
					t.Fatalf("error %v is neither ErrMalformed nor ErrBadKey", err)
				}
				return
			}
			if len(ts)*minTicketEntry > len(data) {
				t.Fatalf("%d tickets from %d bytes", len(ts), len(data))
			}
		case fzKey:
			k, err := ParseKey(string(data))
			if err != nil {
				if !errors.Is(err, ErrBadKeyEncoding) {
					t.Fatalf("error %v is not ErrBadKeyEncoding", err)
				}
				return
			}
			again, err := ParseKey(k.String())
			if err != nil || !again.Equal(k) || !again.Created.Equal(k.Created) {
				t.Fatalf("round trip %v -> %v %v", k, again, err)
			}
		case fzOpen:
			p, err := fuzzKey.Open(data)
			if err != nil {
				if !errors.Is(err, ErrDecrypt) && !errors.Is(err, ErrBadMagic) {
					t.Fatalf("error %v is neither ErrDecrypt nor ErrBadMagic", err)
				}
				return
			}
			ct, _ := fuzzKey.Seal(p)
			if !bytes.Equal(ct, data) {
				t.Fatalf("%x opens to %x, which seals to %x", data, p, ct)
			}
		}
	})
}

// FuzzKeyring parses arbitrary keyring text; what parses writes out to a
// text that parses to the same keyring.
func FuzzKeyring(f *testing.F) {
	f.Add([]byte(sampleKeyring))
	f.Add([]byte("[client.a]\nkey = " + fuzzKey.String() + "\ncaps mon = \"allow \\\"x\\\"\"\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		kr, err := ParseKeyring(text)
		if err != nil {
			if !errors.Is(err, ErrBadKeyring) {
				t.Fatalf("error %v is not ErrBadKeyring", err)
			}
			return
		}
		out := kr.Marshal()
		again, err := ParseKeyring(out)
		if err != nil {
			t.Fatalf("written keyring does not parse: %v\n%s", err, out)
		}
		if !bytes.Equal(again.Marshal(), out) || len(again.Entries) != len(kr.Entries) {
			t.Fatalf("round trip:\n%q\n%+v\n%+v", out, kr, again)
		}
		for _, e := range kr.Entries {
			if g, ok := again.Lookup(e.Name); !ok || !g.Key.Equal(e.Key) {
				if first, _ := kr.Lookup(e.Name); reflect.DeepEqual(first, e) {
					t.Fatalf("%s lost in the round trip", e.Name)
				}
			}
		}
	})
}

// fuzzFlows returns the payloads of a real exchange of each kind, as
// fuzz seeds: the mon's challenge and AUTH_DONE payload, the OSD's
// challenge and AUTH_DONE payload, the MAuth replies, and the client's
// requests.
type fuzzFlow struct {
	monChallenge, monDone []byte
	osdChallenge, osdDone []byte
	principalReply        []byte
	rotatingReply         []byte
	monFirst, monSecond   []byte
	authorizer            []byte
	principalReq          []byte
}

func recordFlows(t testing.TB) fuzzFlow {
	var f fuzzFlow
	cl := newCluster(t, nil)
	v := cl.osdVerifier(t)
	s := cl.ks.Handler()
	h := cl.admin.Handler()
	f.monFirst, _ = h.Request(msg.EntityMon)
	r, _ := s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, true, f.monFirst)
	f.monChallenge = r.More
	f.monSecond, _ = h.ReplyMore(r.More)
	r, err := s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, false, f.monSecond)
	if err != nil {
		t.Fatal(err)
	}
	f.monDone = r.Payload
	if _, err := h.Done(r.Result.GlobalID, auth.ConModeSecure, r.Payload); err != nil {
		t.Fatal(err)
	}
	oh := cl.admin.Handler()
	f.authorizer, _ = oh.Request(msg.EntityOSD)
	vs := v.Handler()
	r, _ = vs.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, true, f.authorizer)
	f.osdChallenge = r.More
	p, _ := oh.ReplyMore(r.More)
	r, _ = vs.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, false, p)
	f.osdDone = r.Payload
	f.principalReq, _ = cl.admin.ServiceTicketRequest(ServiceMask(msg.EntityOSD))
	ans, _ := s.HandleMAuth(MAuthProtocolCephx, f.principalReq)
	f.principalReply = ans.ResultBL
	_, _, os := cl.login(t, cl.osd, auth.ConModeCRC)
	ans, _ = os.HandleMAuth(MAuthProtocolCephx, cl.osd.RotatingKeyRequest())
	f.rotatingReply = ans.ResultBL
	return f
}

// FuzzClient feeds arbitrary server payloads to a client at each step of
// its flows: the mon challenge, the mon's AUTH_DONE, the service's
// challenge and AUTH_DONE, and MAuth replies. None may panic, and a
// failure leaves the client's state as it was.
func FuzzClient(f *testing.F) {
	fl := recordFlows(f)
	for i, p := range [][]byte{fl.monChallenge, fl.monDone, fl.osdChallenge, fl.osdDone, fl.principalReply, fl.rotatingReply} {
		f.Add(uint8(i), p)
	}
	f.Fuzz(func(t *testing.T, step uint8, data []byte) {
		cl := newCluster(t, nil)
		cl.login(t, cl.admin, auth.ConModeCRC)
		gid := cl.admin.GlobalID()
		before, _ := cl.admin.Ticket(msg.EntityOSD)
		var err error
		switch step % 6 {
		case 0:
			h := cl.admin.Handler()
			h.Request(msg.EntityMon)
			_, err = h.ReplyMore(data)
		case 1:
			h := cl.admin.Handler()
			h.Request(msg.EntityMon)
			h.ReplyMore(fl.monChallenge)
			_, err = h.Done(gid, auth.ConModeSecure, data)
		case 2:
			h := cl.admin.Handler()
			h.Request(msg.EntityOSD)
			_, err = h.ReplyMore(data)
		case 3:
			h := cl.admin.Handler()
			h.Request(msg.EntityOSD)
			_, err = h.Done(gid, auth.ConModeSecure, data)
		case 4, 5:
			_, err = cl.admin.HandleMAuthReply(0, gid, data)
		}
		if err == nil {
			return
		}
		if after, _ := cl.admin.Ticket(msg.EntityOSD); !reflect.DeepEqual(before, after) || cl.admin.GlobalID() != gid {
			t.Fatalf("failed step %d changed the client's state: %v", step%6, err)
		}
	})
}

// FuzzServer feeds arbitrary client payloads to a mon session (first
// and second login steps, MAuth requests) and to a service's verifier.
// None may panic; every refusal is a typed error with a non-zero status.
func FuzzServer(f *testing.F) {
	fl := recordFlows(f)
	for i, p := range [][]byte{fl.monFirst, fl.monSecond, fl.principalReq, fl.authorizer, fl.authorizer} {
		f.Add(uint8(i), p)
	}
	f.Fuzz(func(t *testing.T, step uint8, data []byte) {
		cl := newCluster(t, nil)
		var err error
		switch step % 5 {
		case 0:
			_, err = cl.ks.Handler().Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, true, data)
		case 1:
			s := cl.ks.Handler()
			h := cl.admin.Handler()
			p, _ := h.Request(msg.EntityMon)
			if _, err := s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, true, p); err != nil {
				t.Fatal(err)
			}
			_, err = s.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, false, data)
		case 2:
			_, _, s := cl.login(t, cl.admin, auth.ConModeCRC)
			var ans MAuthAnswer
			ans, err = s.HandleMAuth(MAuthProtocolCephx, data)
			if err != nil && ans.Result == 0 {
				t.Fatalf("refusal %v with result 0", err)
			}
			_, err = cl.ks.Handler().HandleMAuth(MAuthProtocolNegotiate, data)
		case 3, 4:
			v := cl.osdVerifier(t)
			vs := v.Handler()
			_, err = vs.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, true, data)
			if err == nil {
				_, err = vs.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeSecure, false, data)
			}
		}
		if err != nil && Status(err) == 0 {
			t.Fatalf("error %v has status 0", err)
		}
	})
}

// Hostile counts and lengths fail before anything is allocated for them.
func TestDecodersBoundAllocations(t *testing.T) {
	huge := []byte{1, 0xff, 0xff, 0xff, 0xff}
	if _, err := DecodeRotatingSecrets(huge); !errors.Is(err, auth.ErrMalformed) {
		t.Fatalf("rotating: %v", err)
	}
	if _, err := decodeTicketReply(denc.NewDecoder(huge), fuzzKey, nil); !errors.Is(err, auth.ErrMalformed) {
		t.Fatalf("ticket reply: %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 100
	for range runs {
		DecodeRotatingSecrets(huge)
		decodeTicketReply(denc.NewDecoder(huge), fuzzKey, nil)
		decodeAuthorizer(denc.NewDecoder([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f}))
	}
	runtime.ReadMemStats(&after)
	// Only the errors' text is allocated, not the 2^32 elements claimed.
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 8<<10 {
		t.Fatalf("%d bytes allocated per hostile decode", per)
	}
	// A key's u16 length beyond the input, and beyond the secret bound.
	k := AppendKey(nil, keyFrom(1))
	k[10], k[11] = 0xff, 0xff
	d := denc.NewDecoder(k)
	if decodeKey(d); d.Err() == nil {
		t.Fatal("oversized key accepted")
	}
}

func TestDecoderSeedsDecode(t *testing.T) {
	seeds := decoderSeeds(t)
	if _, err := DecodeRotatingSecrets(seeds[fzRotating]); err != nil {
		t.Fatal(err)
	}
	if _, err := decodeServiceTicketInfo(seeds[fzTicketInfo]); err != nil {
		t.Fatal(err)
	}
	ts, err := decodeTicketReply(denc.NewDecoder(seeds[fzTicketReply]), fuzzKey, func(uint32) (Key, bool) { return fuzzKey, true })
	if err != nil || len(ts) != 2 || ts[1].validity != time.Minute || !ts[0].sessionKey.Equal(keyFrom(3)) {
		t.Fatalf("%+v %v", ts, err)
	}
	if _, err := decodeAuthorizer(denc.NewDecoder(seeds[fzAuthorizer])); err != nil {
		t.Fatal(err)
	}
}
