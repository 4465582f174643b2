package msg

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/ferrymsg/ferry/denc"
)

func TestEntityAddrEncoding(t *testing.T) {
	a, err := ParseEntityAddr("v2:127.0.0.1:3300/7")
	if err != nil {
		t.Fatal(err)
	}
	b := AppendEntityAddr(nil, a, FeatureMsgAddr2)
	// marker 1, v1 compat1 len 28, type 2, nonce 7, elen 16,
	// sockaddr_in{le16 family 2, be16 port 3300, 127.0.0.1, 8 zero bytes}.
	want := "01" + "01" + "01" + "1c000000" + "02000000" + "07000000" + "10000000" +
		"0200" + "0ce4" + "7f000001" + "0000000000000000"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("encoding\n got %s\nwant %s", got, want)
	}
	if len(b) != 35 {
		t.Fatalf("%d bytes, want 35", len(b))
	}
	d := denc.NewDecoder(b)
	if got := DecodeEntityAddr(d); got != a || d.Err() != nil || d.Len() != 0 {
		t.Fatalf("decoded %v err %v", got, d.Err())
	}
}

func TestEntityAddrForms(t *testing.T) {
	for _, s := range []string{"v2:127.0.0.1:3300/0", "v1:10.1.2.3:6789/123", "any:[::1]:6800/9", "v2:[fe80::1]:1/4294967295", "-"} {
		a, err := ParseEntityAddr(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if a.String() != s {
			t.Fatalf("%s formats as %s", s, a.String())
		}
		for _, features := range []uint64{FeatureMsgAddr2, 0} {
			b := AppendEntityAddr(nil, a, features)
			d := denc.NewDecoder(b)
			got := DecodeEntityAddr(d)
			if d.Err() != nil || d.Len() != 0 {
				t.Fatalf("%s features %#x: err %v, %d left", s, features, d.Err(), d.Len())
			}
			if features == 0 {
				// The legacy form keeps only the nonce and the IP.
				if got.Nonce != a.Nonce || got.IP != a.IP || len(b) != 136 {
					t.Fatalf("%s legacy: %v (%d bytes)", s, got, len(b))
				}
				continue
			}
			if got != a {
				t.Fatalf("%s: decoded %v", s, got)
			}
		}
	}
	if _, err := ParseEntityAddr("v2:nonsense"); !errors.Is(err, ErrBadAddr) {
		t.Fatalf("error %v", err)
	}
}

func TestAddrVec(t *testing.T) {
	v, err := ParseAddrVec("[v2:127.0.0.1:3300/0,v1:127.0.0.1:6789/0]")
	if err != nil || len(v) != 2 {
		t.Fatalf("%v %v", v, err)
	}
	if v.String() != "[v2:127.0.0.1:3300/0,v1:127.0.0.1:6789/0]" {
		t.Fatal(v.String())
	}
	if a, ok := v.Msgr2(); !ok || a.IP.Port() != 3300 {
		t.Fatal("msgr2 address")
	}
	if a, ok := v.Legacy(); !ok || a.IP.Port() != 6789 {
		t.Fatal("legacy address")
	}
	b := AppendAddrVec(nil, v, FeatureMsgAddr2)
	d := denc.NewDecoder(b)
	got := DecodeAddrVec(d)
	if d.Err() != nil || got.String() != v.String() {
		t.Fatalf("%v %v", got, d.Err())
	}
	// A single new-style address and the legacy form decode as vectors too.
	for _, b := range [][]byte{AppendEntityAddr(nil, v[0], FeatureMsgAddr2), AppendAddrVec(nil, v, 0)} {
		d := denc.NewDecoder(b)
		if got := DecodeAddrVec(d); d.Err() != nil || len(got) != 1 {
			t.Fatalf("%v %v", got, d.Err())
		}
	}
	// Truncations fail cleanly.
	for n := range len(b) {
		d := denc.NewDecoder(b[:n])
		DecodeAddrVec(d)
		if d.Err() == nil {
			t.Fatalf("prefix %d decoded", n)
		}
	}
}

func TestEntityName(t *testing.T) {
	for s, want := range map[string]EntityName{
		"osd.3":    {EntityOSD, 3},
		"client.?": {EntityClient, NewID},
		"mon.a":    {EntityMon, NewID},
		"mgr.0":    {EntityMgr, 0},
	} {
		n, err := ParseEntityName(s)
		if err != nil || n != want {
			t.Fatalf("%s: %v %v", s, n, err)
		}
	}
	if _, err := ParseEntityName("nope.1"); err == nil {
		t.Fatal("bad type parsed")
	}
	b := AppendEntityName(nil, EntityName{EntityOSD, 12})
	d := denc.NewDecoder(b)
	if got := DecodeEntityName(d); got.String() != "osd.12" || len(b) != 9 {
		t.Fatalf("%v", got)
	}
	an := AuthName{EntityClient, "admin"}
	d = denc.NewDecoder(AppendAuthName(nil, an))
	if got := DecodeAuthName(d); got != an || an.String() != "client.admin" {
		t.Fatalf("%v", got)
	}
}

func TestBuffersAndCRC(t *testing.T) {
	// Ceph's test_crc32c.cc vector.
	if got := CRC32C(0, []byte("foo bar baz")); got != 4119623852 {
		t.Fatalf("crc %d", got)
	}
	b := Buffers{[]byte("foo "), []byte("bar"), nil, []byte(" baz")}
	if b.Len() != 11 || !bytes.Equal(b.Bytes(), []byte("foo bar baz")) || b.CRC(0) != 4119623852 {
		t.Fatal("buffers")
	}
	dst := make([]byte, 11)
	if b.CopyTo(dst) != 11 || string(dst) != "foo bar baz" {
		t.Fatal("copy")
	}
	m := New(2)
	m.SetSegments([]byte("f"), nil, []byte("data"))
	if m.Front.Len() != 1 || m.Middle != nil || m.Data.Len() != 4 || m.Len() != 5 || m.Header.Priority != PrioDefault {
		t.Fatal("segments")
	}
	released := 0
	m.Release = func(*Message) { released++ }
	m.Done()
	m.Done()
	if released != 1 {
		t.Fatalf("released %d times", released)
	}
}
