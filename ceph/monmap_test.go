package ceph

import (
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

func mustAddrs(t testing.TB, s string) msg.AddrVec {
	t.Helper()
	v, err := msg.ParseAddrVec(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The monmap monmaptool 16.2.15 wrote (testdata/monmap-pacific-3mons.bin:
// `monmaptool --create --fsid 21ccba25-… --addv a
// '[v2:127.0.0.1:3300,v1:127.0.0.1:6789]' --addv b
// '[v2:127.0.0.2:3300,v1:127.0.0.2:6789]' --add c 127.0.0.3:6789`, the
// encoding a mon sends a Pacific client) decodes to its three mons in
// rank order.
func TestDecodeMonMapPacific(t *testing.T) {
	b, err := os.ReadFile("testdata/monmap-pacific-3mons.bin")
	if err != nil {
		t.Fatal(err)
	}
	mm, err := DecodeMonMap(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &MonMapInfo{FSID: mustFSID(t, testFSID), Epoch: 0, Mons: []MonInfo{
		{Name: "a", Addrs: mustAddrs(t, "[v2:127.0.0.1:3300/0,v1:127.0.0.1:6789/0]")},
		{Name: "b", Addrs: mustAddrs(t, "[v2:127.0.0.2:3300/0,v1:127.0.0.2:6789/0]")},
		{Name: "c", Addrs: mustAddrs(t, "v1:127.0.0.3:6789/0")},
	}}
	if !reflect.DeepEqual(mm, want) {
		t.Fatalf("got %+v\nwant %+v", mm, want)
	}
	if m, r, ok := mm.ByName("b"); !ok || r != 1 || m.Name != "b" {
		t.Fatalf("ByName(b) = %+v %d %v", m, r, ok)
	}
	if _, _, ok := mm.ByName("z"); ok {
		t.Fatal("ByName found a mon that is not there")
	}
	if got := mm.Names(); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("names %v", got)
	}
	// As MMonMap's front, through MonMap.
	var m MonMap
	if err := m.Unmarshal((&MonMap{Map: b}).Marshal()); err != nil || m.FSID != want.FSID {
		t.Fatalf("MonMap %+v, %v", m, err)
	}
	// Every truncation fails with a typed error.
	for i := range len(b) {
		if _, err := DecodeMonMap(b[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix of %d bytes: %v", i, err)
		}
	}
}

// EncodeMonMap writes what monmaptool writes (byte for byte, but for the
// timestamps and min_mon_release, which it leaves at 0 and "unknown"), and
// decodes back, the ranks in the order given.
func TestEncodeMonMap(t *testing.T) {
	b, err := os.ReadFile("testdata/monmap-pacific-3mons.bin")
	if err != nil {
		t.Fatal(err)
	}
	mm, err := DecodeMonMap(b)
	if err != nil {
		t.Fatal(err)
	}
	enc := EncodeMonMap(mm.FSID, mm.Epoch, mm.Mons)
	if len(enc) != len(b) {
		t.Fatalf("encoded %d bytes, monmaptool %d", len(enc), len(b))
	}
	// The 16 bytes of timestamps after the header, fsid and epoch; the
	// min_mon_release byte after the ranks.
	cmp := func(a []byte) []byte {
		c := append([]byte(nil), a...)
		clear(c[6+16+4 : 6+16+4+16])
		c[len(c)-19] = 0
		return c
	}
	if !reflect.DeepEqual(cmp(enc), cmp(b)) {
		t.Fatalf("encoding differs from monmaptool's:\n%x\n%x", enc, b)
	}
	mons := []MonInfo{
		{Name: "z", Addrs: mustAddrs(t, "v2:10.0.0.9:3300/0"), Priority: 3, Weight: 7},
		{Name: "m", Addrs: mustAddrs(t, "[v2:[::1]:3300/0,v1:[::1]:6789/0]")},
	}
	got, err := DecodeMonMap(EncodeMonMap(mm.FSID, 12, mons))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, &MonMapInfo{FSID: mm.FSID, Epoch: 12, Mons: mons}) {
		t.Fatalf("round trip %+v", got)
	}
}

// Struct version 3 (Firefly's): a legacy mon_addr map and no ranks, which
// are derived by address; bad forms are refused.
func TestDecodeMonMapOld(t *testing.T) {
	fsid := mustFSID(t, testFSID)
	v3 := func(names ...string) []byte {
		b, s := denc.StartBlock(nil, 3, 3)
		b = AppendFSID(b, fsid)
		b = denc.AppendU32(b, 5)
		b = denc.AppendU32(b, uint32(len(names)))
		for i, n := range names {
			b = denc.AppendString(b, n)
			a := mustAddrs(t, "v1:127.0.0."+string(rune('9'-i))+":6789/0")[0]
			b = msg.AppendEntityAddr(b, a, msg.FeaturesAll)
		}
		b = append(b, make([]byte, 16)...)
		return denc.EndBlock(b, s)
	}
	mm, err := DecodeMonMap(v3("a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	// b is at 127.0.0.8, a at 127.0.0.9: b has rank 0.
	if mm.Epoch != 5 || len(mm.Mons) != 2 || mm.Mons[0].Name != "b" || mm.Mons[1].Name != "a" ||
		mm.Mons[0].Addrs.String() != "v1:127.0.0.8:6789/0" {
		t.Fatalf("v3 monmap %+v", mm)
	}
	bad := EncodeMonMap(fsid, 1, []MonInfo{{Name: "a", Addrs: mustAddrs(t, "v2:127.0.0.1:3300/0")}})
	bad[0] = 2
	if _, err := DecodeMonMap(bad); !errors.Is(err, denc.ErrVersion) || !errors.Is(err, ErrMalformed) {
		t.Fatalf("struct v2: %v", err)
	}
	// A rank naming a mon the map does not hold.
	bad = EncodeMonMap(fsid, 1, []MonInfo{{Name: "a", Addrs: mustAddrs(t, "v2:127.0.0.1:3300/0")}})
	i := len(bad) - 19 - 1 // the last byte of the rank's name
	bad[i] = 'q'
	if _, err := DecodeMonMap(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unknown rank: %v", err)
	}
	// A hostile mon count is refused before allocating.
	bad = EncodeMonMap(fsid, 1, nil)
	bad[6+16+4+16+2*14] = 0xff
	bad[6+16+4+16+2*14+3] = 0x7f
	if _, err := DecodeMonMap(bad); !errors.Is(err, denc.ErrTooLarge) {
		t.Fatalf("huge mon count: %v", err)
	}
}

// FuzzDecodeMonMap: arbitrary bytes never panic; what decodes re-encodes
// to a monmap that decodes to the same mons.
func FuzzDecodeMonMap(f *testing.F) {
	if b, err := os.ReadFile("testdata/monmap-pacific-3mons.bin"); err == nil {
		f.Add(b)
	}
	f.Add(EncodeMonMap(FSID{1}, 2, []MonInfo{{Name: "a", Addrs: msg.AddrVec{}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		mm, err := DecodeMonMap(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := DecodeMonMap(EncodeMonMap(mm.FSID, mm.Epoch, mm.Mons))
		if err != nil {
			t.Fatalf("re-encoded monmap does not decode: %v", err)
		}
		if len(again.Mons) != len(mm.Mons) || again.FSID != mm.FSID || again.Epoch != mm.Epoch {
			t.Fatalf("%+v -> %+v", mm, again)
		}
		for i := range mm.Mons {
			if again.Mons[i].Name != mm.Mons[i].Name || again.Mons[i].Addrs.String() != mm.Mons[i].Addrs.String() {
				t.Fatalf("mon %d: %+v -> %+v", i, mm.Mons[i], again.Mons[i])
			}
		}
	})
}
