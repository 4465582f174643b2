package msgr2

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

func testAddr(t testing.TB, s string) msg.EntityAddr {
	t.Helper()
	a, err := msg.ParseEntityAddr(s)
	if err != nil {
		t.Fatalf("ParseEntityAddr(%q): %v", s, err)
	}
	return a
}

// sampleControls returns one value of every control frame type, with every
// field set to something other than its zero value.
func sampleControls(t testing.TB) []ControlFrame {
	v2 := testAddr(t, "v2:127.0.0.1:3300/7")
	v1 := testAddr(t, "v1:127.0.0.1:6789/7")
	v6 := testAddr(t, "v2:[::1]:40000/12345")
	addrs := msg.AddrVec{v2, v1}
	auth := AuthNonePayload{Mode: AuthModeMon, Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}}
	var sig AuthSignature
	for i := range sig.Sig {
		sig.Sig[i] = byte(i*7 + 1)
	}
	return []ControlFrame{
		Hello{EntityType: msg.EntityClient, PeerAddr: v2},
		Hello{EntityType: msg.EntityOSD, PeerAddr: v6},
		AuthRequest{Method: AuthMethodNone, PreferredModes: []uint32{ConModeCRC, ConModeSecure}, Payload: auth.Append(nil)},
		AuthBadMethod{Method: AuthMethodNone, Result: -95, AllowedMethods: []uint32{1}, AllowedModes: []uint32{2, 1}},
		AuthReplyMore{Payload: []byte("challenge")},
		AuthRequestMore{Payload: []byte("response")},
		AuthDone{GlobalID: 4100, ConMode: ConModeCRC, Payload: []byte{1, 2, 3}},
		sig,
		ClientIdent{Addrs: addrs, Target: v2, GID: -1, GlobalSeq: 4, Supported: msg.FeaturesAll,
			Required: msg.FeaturesMonRequired, Flags: IdentFlagLossy, ClientCookie: 0xdeadbeef},
		ServerIdent{Addrs: msg.AddrVec{v6}, GID: 4100, GlobalSeq: 9, Supported: msg.FeaturesAll,
			Required: 1 << 59, Flags: 0, ServerCookie: 0xfeedface},
		IdentMissingFeatures{Features: 0x0401020002040000},
		SessionReconnect{Addrs: addrs, ClientCookie: 1, ServerCookie: 2, GlobalSeq: 3, ConnectSeq: 4, MsgSeq: 5},
		SessionReset{Full: true},
		SessionRetry{ConnectSeq: 77},
		SessionRetryGlobal{GlobalSeq: 1 << 40},
		SessionReconnectOK{MsgSeq: 12},
		Wait{},
		Keepalive2{Sec: 1700000000, Nsec: 999999999},
		Keepalive2Ack{Sec: 1700000001, Nsec: 5},
		Ack{Seq: 1<<63 + 1},
	}
}

func TestControlCoversEveryTag(t *testing.T) {
	seen := map[Tag]bool{}
	for _, f := range sampleControls(t) {
		seen[f.Tag()] = true
	}
	for tag := TagHello; tag.Known(); tag++ {
		switch tag {
		case TagMessage, TagCompressionRequest, TagCompressionDone:
			continue
		}
		if !seen[tag] {
			t.Errorf("no sample for %v", tag)
		}
	}
}

func TestControlRoundTrip(t *testing.T) {
	for _, rev1 := range []bool{false, true} {
		for _, f := range sampleControls(t) {
			payload := f.Append(nil)
			wire := AppendFrame(nil, f.Tag(), rev1, payload)
			if w2 := AppendControlFrame([]byte("xx"), rev1, f); !bytes.Equal(w2[2:], wire) {
				t.Fatalf("%v rev1=%v: AppendControlFrame differs from AppendFrame:\n%x\n%x", f.Tag(), rev1, w2[2:], wire)
			}
			p, err := ParsePreamble(wire, Limits{})
			if err != nil {
				t.Fatalf("%v rev1=%v: ParsePreamble: %v", f.Tag(), rev1, err)
			}
			if p.Tag != f.Tag() || p.NumSegments != 1 || p.Segments[0].Len != uint32(len(payload)) || p.Segments[0].Align != SegmentAlign {
				t.Fatalf("%v: preamble %+v", f.Tag(), p)
			}
			if got, want := len(wire), PreambleLen+p.BodyLen(rev1); got != want {
				t.Fatalf("%v rev1=%v: frame is %d bytes, preamble says %d", f.Tag(), rev1, got, want)
			}
			segs, err := ParseBody(&p, wire[PreambleLen:], rev1)
			if err != nil {
				t.Fatalf("%v rev1=%v: ParseBody: %v", f.Tag(), rev1, err)
			}
			got, err := ParseControl(p.Tag, segs[0])
			if err != nil {
				t.Fatalf("%v rev1=%v: ParseControl: %v", f.Tag(), rev1, err)
			}
			if !reflect.DeepEqual(got, f) {
				t.Fatalf("%v rev1=%v: round trip:\n got %#v\nwant %#v", f.Tag(), rev1, got, f)
			}
			// Trailing bytes after a complete payload are ignored.
			got, err = ParseControl(p.Tag, append(payload[:len(payload):len(payload)], "trailing"...))
			if err != nil || !reflect.DeepEqual(got, f) {
				t.Fatalf("%v: with trailing bytes: %v, %#v", f.Tag(), err, got)
			}
		}
	}
}

func TestControlEmptyPayloads(t *testing.T) {
	d, err := ParseAuthDone(AuthDone{GlobalID: 1, ConMode: ConModeCRC}.Append(nil))
	if err != nil || d.GlobalID != 1 || d.ConMode != ConModeCRC || len(d.Payload) != 0 {
		t.Fatalf("AuthDone with empty payload: %+v, %v", d, err)
	}
	r, err := ParseAuthRequest(AuthRequest{Method: AuthMethodCephx}.Append(nil))
	if err != nil || r.Method != AuthMethodCephx || len(r.PreferredModes) != 0 || len(r.Payload) != 0 {
		t.Fatalf("AuthRequest with no modes: %+v, %v", r, err)
	}
	h, err := ParseHello(Hello{EntityType: msg.EntityMon}.Append(nil))
	if err != nil || h.EntityType != msg.EntityMon || !h.PeerAddr.IsZero() {
		t.Fatalf("Hello with empty address: %+v, %v", h, err)
	}
	if r, err := ParseSessionReset([]byte{7}); err != nil || !r.Full {
		t.Fatalf("SessionReset(7): %+v, %v", r, err)
	}
	if r, err := ParseSessionReset([]byte{0}); err != nil || r.Full {
		t.Fatalf("SessionReset(0): %+v, %v", r, err)
	}
}

// TestControlTruncated checks that every strict prefix of every payload
// fails with ErrTruncated in an *Error carrying the frame's tag.
func TestControlTruncated(t *testing.T) {
	for _, f := range sampleControls(t) {
		payload := f.Append(nil)
		for n := 0; n < len(payload); n++ {
			v, err := ParseControl(f.Tag(), payload[:n])
			if err == nil {
				t.Fatalf("%v: prefix of %d/%d bytes parsed: %#v", f.Tag(), n, len(payload), v)
			}
			checkErr(t, err, ErrTruncated)
			var e *Error
			if errors.As(err, &e); e.Tag != f.Tag() {
				t.Fatalf("%v: error tag %v", f.Tag(), e.Tag)
			}
			if v != nil {
				t.Fatalf("%v: value %#v with error", f.Tag(), v)
			}
		}
	}
}

func TestControlMalformed(t *testing.T) {
	// HELLO with an address marker that is neither 0 nor 1.
	_, err := ParseHello([]byte{8, 9, 0, 0, 0})
	checkErr(t, err, ErrMalformed)
	// AuthName type above 255.
	p := AuthNonePayload{Mode: 1, Name: msg.AuthName{Type: msg.EntityClient, ID: "x"}}.Append(nil)
	p[1], p[2] = 0, 1
	_, err = ParseAuthNonePayload(p)
	checkErr(t, err, ErrMalformed)
	// Address vector with a bad marker.
	bad := make([]byte, 64)
	bad[0] = 5
	_, err = ParseServerIdent(bad)
	checkErr(t, err, ErrMalformed)
}

func TestParseControlTags(t *testing.T) {
	for _, tag := range []Tag{TagMessage, TagCompressionRequest, TagCompressionDone} {
		_, err := ParseControl(tag, nil)
		checkErr(t, err, ErrUnexpectedFrame)
	}
	for _, tag := range []Tag{0, 23, 255} {
		_, err := ParseControl(tag, nil)
		checkErr(t, err, ErrUnknownTag)
	}
}

// TestAuthRequestBytes reproduces the AUTH_REQUEST payload a client sent
// to ceph-mon 16.2.15 (ceph-msgr.md §1.7).
func TestAuthRequestBytes(t *testing.T) {
	const want = "01000000" + "01000000" + "01000000" + "16000000" +
		"0a" + "08000000" + "05000000" + "61646d696e" + "0000000000000000"
	none := AuthNonePayload{Mode: AuthModeMon, Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}, GlobalID: 0}
	req := AuthRequest{Method: AuthMethodNone, PreferredModes: []uint32{ConModeCRC}, Payload: none.Append(nil)}
	got := hex.EncodeToString(req.Append(nil))
	if got != want {
		t.Fatalf("AUTH_REQUEST payload\n got %s\nwant %s", got, want)
	}
	back, err := ParseAuthRequest(req.Append(nil))
	if err != nil {
		t.Fatal(err)
	}
	n, err := ParseAuthNonePayload(back.Payload)
	if err != nil || n != none {
		t.Fatalf("auth none payload: %+v, %v", n, err)
	}
	for i := range len(none.Append(nil)) {
		_, err := ParseAuthNonePayload(none.Append(nil)[:i])
		checkErr(t, err, ErrTruncated)
	}
}

// TestHelloBytes checks HELLO against the entity_addr_t layout of
// ceph-msgr.md §1.6 (35 bytes for IPv4).
func TestHelloBytes(t *testing.T) {
	h := Hello{EntityType: msg.EntityClient, PeerAddr: msg.EntityAddr{
		Type: msg.AddrMsgr2, IP: netip.MustParseAddrPort("127.0.0.1:3300")}}
	const want = "08" + "01" + "0101" + "1c000000" + "02000000" + "00000000" + "10000000" +
		"0200" + "0ce4" + "7f000001" + "0000000000000000"
	if got := hex.EncodeToString(h.Append(nil)); got != want {
		t.Fatalf("HELLO\n got %s\nwant %s", got, want)
	}
}

func checkErr(t *testing.T, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %v, want %v", err, sentinel)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T %v is not an *Error", err, err)
	}
	if !strings.HasPrefix(err.Error(), "msgr2: ") {
		t.Fatalf("error %q lacks the package prefix", err)
	}
}
