package msgr1

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "\n", "", "\t", "").Replace(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// legacyHex is a legacy entity_addr_t for 127.0.0.1:port, written out
// from the layout in ceph-msgr.md §2 / ceph-auth.md §5.1: le32 type 0,
// le32 nonce, sockaddr_storage with a big-endian family.
func legacyHex(nonce uint32, port uint16) string {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint32(b, nonce)
	b = append(b, 0x00, 0x02) // AF_INET, big-endian
	b = binary.BigEndian.AppendUint16(b, port)
	b = append(b, 127, 0, 0, 1)
	b = append(b, make([]byte, 120)...)
	return hex.EncodeToString(b)
}

func TestLegacyAddrLayout(t *testing.T) {
	a, err := ParseLegacyAddr(unhex(t, legacyHex(7, 6789)))
	if err != nil || a.Nonce != 7 || a.IP.String() != "127.0.0.1:6789" || a.Type != msg.AddrLegacy {
		t.Fatalf("%+v %v", a, err)
	}
	if got := hex.EncodeToString(msg.AppendLegacyAddr(nil, a)); got != legacyHex(7, 6789) {
		t.Fatalf("encoding %s", got)
	}
}

// The connect message ferry sends to a mon, byte for byte (ceph-auth.md
// §5.2: le64 features, le32 host_type, global_seq, connect_seq,
// protocol_version, authorizer_protocol, authorizer_len, u8 flags).
const connectToMonHex = "fffffdffbdcf013f 08000000 01000000 00000000 0f000000 00000000 00000000 01"

// The reply the 16.2.15 mon sent (ceph-msgr.md §2: tag 13, features
// 0x3f01cfbdfffdffff, connect_seq 1, protocol 15, flags 1), global_seq 7.
const seqReplyHex = "0d fffffdffbdcf013f 07000000 01000000 0f000000 00000000 01"

func TestConnectLayouts(t *testing.T) {
	c, err := ParseConnect(unhex(t, connectToMonHex))
	want := Connect{Features: msg.FeaturesAll, HostType: 8, GlobalSeq: 1, ProtocolVersion: 15, Flags: 1}
	if err != nil || c != want {
		t.Fatalf("connect %+v %v", c, err)
	}
	if !bytes.Equal(c.Append(nil), unhex(t, connectToMonHex)) {
		t.Fatalf("connect encoding %x", c.Append(nil))
	}
	r, err := ParseConnectReply(unhex(t, seqReplyHex))
	wantR := ConnectReply{Tag: TagSeq, Features: msg.FeaturesAll, GlobalSeq: 7, ConnectSeq: 1, ProtocolVersion: 15, Flags: 1}
	if err != nil || r != wantR {
		t.Fatalf("reply %+v %v", r, err)
	}
	if !bytes.Equal(r.Append(nil), unhex(t, seqReplyHex)) {
		t.Fatalf("reply encoding %x", r.Append(nil))
	}
}

// monScript is what a mon sends a client: its banner with both
// addresses, a SEQ reply, and its in_seq (0).
func monScript(t testing.TB) []byte {
	s := "6365706820763032 37" + legacyHex(0, 6789) + legacyHex(0, 50000) + seqReplyHex + "0000000000000000"
	return unhex(t, s)
}

// TestClientScript drives a client from the mon's bytes and checks every
// byte the client sends.
func TestClientScript(t *testing.T) {
	e := NewEngine(clientConfig())
	e.Start()
	if got := string(e.Output()); got != "ceph v027" {
		t.Fatalf("banner %q", got)
	}
	script := monScript(t)
	var out []byte
	var evs []Event
	for len(script) > 0 {
		n, _ := e.Need()
		ev, err := e.Feed(script[:n])
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev...)
		script = script[n:]
		out = append(out, e.Output()...)
	}
	want := unhex(t, "00000000 2a000000 0002 0000 7f000001"+strings.Repeat("00", 120)+connectToMonHex+"0000000000000000")
	if !bytes.Equal(out, want) {
		t.Fatalf("client sent\n%x\nwant\n%x", out, want)
	}
	if !e.Ready() || len(evs) != 1 || evs[0].Kind != EvReady || evs[0].Seq != 0 {
		t.Fatalf("events %+v", evs)
	}
	// Then a message from the mon, built by hand: tag, header (crc of
	// its first 49 bytes), front "pong", footer.
	var h []byte
	h = binary.LittleEndian.AppendUint64(h, 1)   // seq
	h = binary.LittleEndian.AppendUint64(h, 0)   // tid
	h = binary.LittleEndian.AppendUint16(h, 2)   // type MPing
	h = binary.LittleEndian.AppendUint16(h, 196) // priority
	h = binary.LittleEndian.AppendUint16(h, 1)   // version
	h = binary.LittleEndian.AppendUint32(h, 4)   // front_len
	h = binary.LittleEndian.AppendUint32(h, 0)
	h = binary.LittleEndian.AppendUint32(h, 0)
	h = binary.LittleEndian.AppendUint16(h, 0)
	h = append(h, byte(msg.EntityMon))
	h = binary.LittleEndian.AppendUint64(h, 0) // mon.0
	h = binary.LittleEndian.AppendUint16(h, 1) // compat
	h = binary.LittleEndian.AppendUint16(h, 0)
	h = binary.LittleEndian.AppendUint32(h, msg.CRC32C(0, h))
	wire := append([]byte{byte(TagMsg)}, h...)
	wire = append(wire, "pong"...)
	wire = binary.LittleEndian.AppendUint32(wire, msg.CRC32C(0, []byte("pong")))
	wire = append(wire, make([]byte, 8)...) // middle, data crcs
	wire = append(wire, make([]byte, 8)...) // sig
	wire = append(wire, msg.FooterComplete)
	for len(wire) > 0 {
		n, retain := e.Need()
		p := wire[:n]
		if retain {
			p = bytes.Clone(p)
		}
		ev, err := e.Feed(p)
		if err != nil {
			t.Fatal(err)
		}
		wire = wire[n:]
		for _, x := range ev {
			if x.Kind != EvMessage || x.Msg.Header.Src.Type != msg.EntityMon || string(x.Msg.Front.Bytes()) != "pong" ||
				x.Msg.Header.Priority != 196 || x.Msg.Header.CompatVersion != 1 {
				t.Fatalf("message %+v", x)
			}
		}
	}
	// Our own encoding of the same message is the same bytes.
	m := msg.New(2)
	m.Header.Seq, m.Header.Priority, m.Header.Version, m.Header.CompatVersion = 1, 196, 1, 1
	m.SetSegments([]byte("pong"), nil, nil)
	f := MessageFrame{Header: Header{Seq: 1, Type: 2, Priority: 196, Version: 1, CompatVersion: 1, Src: msg.EntityName{Type: msg.EntityMon}},
		Front: m.Front, Features: msg.FeaturesAll}
	enc := f.Append(nil)
	if len(enc) != 1+HeaderLen+4+FooterLen || enc[0] != byte(TagMsg) || !bytes.Equal(enc[1:1+HeaderLen], h) {
		t.Fatalf("encoding %x\nheader %x", enc, h)
	}
}

// serverScript is what a client sends a server: its banner and address,
// the connect message, and its in_seq after the SEQ reply.
func serverScript(t testing.TB) []byte {
	return unhex(t, "6365706820763032 37"+legacyHex(42, 0)+connectToMonHex+"0500000000000000")
}

func TestServerScript(t *testing.T) {
	e := NewEngine(serverConfig())
	e.Start()
	if got, want := e.Output(), unhex(t, "6365706820763032 37"+legacyHex(0, 6789)+legacyHex(0, 50000)); !bytes.Equal(got, want) {
		t.Fatalf("server banner\n%x\nwant\n%x", got, want)
	}
	script := serverScript(t)
	var out []byte
	for len(script) > 0 {
		n, _ := e.Need()
		if n == 0 {
			t.Fatal("stalled")
		}
		evs, err := e.Feed(script[:n])
		if err != nil {
			t.Fatal(err)
		}
		script = script[n:]
		for _, ev := range evs {
			switch ev.Kind {
			case EvConnect:
				if err := e.Accept(Accept{GlobalSeq: 7, Lossy: true}); err != nil {
					t.Fatal(err)
				}
			case EvReady:
				if ev.Seq != 5 {
					t.Fatalf("client in_seq %d", ev.Seq)
				}
			}
		}
		out = append(out, e.Output()...)
	}
	// Features as the mon answered: its supported mask.
	if want := unhex(t, seqReplyHex+"0000000000000000"); !bytes.Equal(out, want) {
		t.Fatalf("server sent\n%x\nwant\n%x", out, want)
	}
	if !e.Ready() || e.Peer().Addr.String() != "v1:127.0.0.1:0/42" {
		t.Fatalf("peer %v", e.Peer().Addr)
	}
}

// TestTruncatedScripts feeds every prefix of a role's script: the engine
// consumes what whole pieces it can and never fails on them, and a short
// piece fails cleanly with a typed error.
func TestTruncatedScripts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		script []byte
	}{{"client", clientConfig(), monScript(t)}, {"server", serverConfig(), serverScript(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			for l := 0; l < len(tc.script); l++ {
				e := NewEngine(tc.cfg)
				e.Start()
				rest := tc.script[:l]
				for {
					n, _ := e.Need()
					if n == 0 && e.state == stDecide {
						if err := e.Accept(Accept{GlobalSeq: 7}); err != nil {
							t.Fatal(err)
						}
						continue
					}
					if n == 0 || n > len(rest) {
						break
					}
					if _, err := e.Feed(rest[:n]); err != nil {
						t.Fatalf("prefix %d: %v", l, err)
					}
					rest = rest[n:]
				}
				if e.Ready() {
					t.Fatalf("ready after %d of %d bytes", l, len(tc.script))
				}
				if len(rest) > 0 {
					_, err := e.Feed(rest)
					if !errors.Is(err, ErrProtocol) {
						t.Fatalf("prefix %d: short feed: %v", l, err)
					}
					checkTyped(t, err)
				}
			}
		})
	}
}

func TestParseTruncated(t *testing.T) {
	f := MessageFrame{Header: Header{Seq: 3}, Front: msg.Buffers{[]byte("x")}, Features: msg.FeaturesAll}
	w := f.Append(nil)
	hdr := w[1 : 1+HeaderLen]
	foot := w[len(w)-FooterLen:]
	parsers := []struct {
		name string
		full []byte
		fn   func([]byte) error
	}{
		{"legacy-addr", unhex(t, legacyHex(1, 2)), func(p []byte) error { _, err := ParseLegacyAddr(p); return err }},
		{"server-banner", monScript(t)[:ServerBannerLen], func(p []byte) error { _, _, err := ParseServerBanner(p); return err }},
		{"client-banner", serverScript(t)[:ClientBannerLen], func(p []byte) error { _, err := ParseClientBanner(p); return err }},
		{"connect", unhex(t, connectToMonHex), func(p []byte) error { _, err := ParseConnect(p); return err }},
		{"connect-reply", unhex(t, seqReplyHex), func(p []byte) error { _, err := ParseConnectReply(p); return err }},
		{"header", hdr, func(p []byte) error { _, err := ParseHeader(p); return err }},
		{"footer", foot, func(p []byte) error { _, err := ParseFooter(p, msg.FeaturesAll); return err }},
		{"old-footer", foot[:OldFooterLen], func(p []byte) error { _, err := ParseFooter(p, 0); return err }},
	}
	for _, p := range parsers {
		if err := p.fn(p.full); err != nil {
			t.Fatalf("%s: full input: %v", p.name, err)
		}
		for l := range len(p.full) {
			err := p.fn(p.full[:l])
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s: prefix %d: %v", p.name, l, err)
			}
			checkTyped(t, err)
		}
		if err := p.fn(append(bytes.Clone(p.full), 0)); !errors.Is(err, ErrTruncated) {
			t.Fatalf("%s: one byte long: %v", p.name, err)
		}
	}
}

func TestProtoVersion(t *testing.T) {
	for _, tc := range []struct {
		my, peer   msg.EntityType
		connecting bool
		want       uint32
	}{
		{msg.EntityClient, msg.EntityMon, true, 15},
		{msg.EntityMon, msg.EntityClient, false, 15},
		{msg.EntityClient, msg.EntityOSD, true, 24},
		{msg.EntityOSD, msg.EntityClient, false, 24},
		{msg.EntityClient, msg.EntityMDS, true, 32},
		{msg.EntityClient, msg.EntityMgr, true, 0},
		{msg.EntityMgr, msg.EntityClient, false, 0},
		{msg.EntityOSD, msg.EntityOSD, true, 10},
		{msg.EntityMon, msg.EntityMon, false, 13},
		{msg.EntityMDS, msg.EntityMDS, true, 35},
		{msg.EntityClient, msg.EntityClient, true, 0},
	} {
		if got := ProtoVersion(tc.my, tc.peer, tc.connecting); got != tc.want {
			t.Errorf("ProtoVersion(%v, %v, %v) = %d, want %d", tc.my, tc.peer, tc.connecting, got, tc.want)
		}
	}
}

func TestTagNames(t *testing.T) {
	for tag := TagReady; tag <= TagChallengeAuthorizer; tag++ {
		if strings.HasPrefix(tag.String(), "TAG(") {
			t.Errorf("tag %d has no name", tag)
		}
	}
	if Tag(17).String() != "TAG(17)" {
		t.Error(Tag(17).String())
	}
}
