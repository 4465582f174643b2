package msgr2

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

func seq(from, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(from + i)
	}
	return b
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The rev1 secure vectors of ceph-auth.md §3.4: connection secret 00..3f,
// client TX (key 00..0f, nonce 1c..27), each frame from a fresh nonce.
var secureVectors = []struct {
	name string
	tag  Tag
	seg0 []byte
	rest []msg.Buffers
	want string
}{
	{"control", TagHello, seq(0, 20), nil,
		"58e80a477793cc7cbb381480b30cc69431dabdf879b50b483d403cfd4b2e876846c734fed74af191583fa9bffc2406e3c7e9de5c2688a28ab01f761aeee6fdba01654a9d4a848c689172d4521fcf81085c6491d30867c79db1ec8a479cf09637"},
	{"partial inline", TagAuthRequest, seq(0, 105), nil,
		"5be877477793cc7cbb381480b30cc69431dabdf879b50b483d403cfdc0a9924446c734fed74af191583fa9bffc2406e3c7e9de5c329db49da8066c01f2fbe3a5214468be6ea1aa4fb95bfe7933e2af2746a6cae4177b6c9f05a9a42229ccde1db91b1d5ccc9e5aa4ff2679ed4df99d9ccac435992226dd679c664f4e1bce84c002c07548bc5e5347d44adb204b77ab6680f7c7c1a47d5a020d6b15d047b91e7a2b1943850bea08bf80ebb3c847163052"},
	{"message", TagMessage, seq(0, 41), []msg.Buffers{{[]byte("front")}, nil, {[]byte("da"), []byte("ta")}},
		"48ed37477793cc7cbe381480bb0cc69431dab5f87db50b483d503cfd4a38b1bf46c734fed74af191583fa9bffc2406e3c7e9de5c329db49da8066c01f2fbe3a5214468be6ea1aa4fb972d4521fcf81087bf4b0a706cba571fc5057ea1afb29edef5840018cab6c93c71f43d671c4a3a3eee403bb66639b20d42f05055783ca8f5c91271be80b05108c13817b172af5394a5f99e0a5ea7c18ae875ecadc118616"},
}

func TestSecureVectors(t *testing.T) {
	secret := seq(0, 64)
	for _, v := range secureVectors {
		t.Run(v.name, func(t *testing.T) {
			tx, _, err := NewSecure(secret, Client)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tx.AppendFrame([]byte("prefix"), v.tag, v.seg0, v.rest...)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(got, []byte("prefix")) {
				t.Fatal("prefix lost")
			}
			got = got[len("prefix"):]
			if want := unhex(t, v.want); !bytes.Equal(got, want) {
				t.Fatalf("sealed\n got %x\nwant %x", got, want)
			}
			// The server opens it with its crossed nonces.
			_, rx, err := NewSecure(secret, Server)
			if err != nil {
				t.Fatal(err)
			}
			segs := openFrame(t, rx, got)
			if !bytes.Equal(segs[0], v.seg0) {
				t.Fatalf("segment 0 %x", segs[0])
			}
			for i, r := range v.rest {
				if !bytes.Equal(segs[i+1], r.Bytes()) {
					t.Fatalf("segment %d %q want %q", i+1, segs[i+1], r.Bytes())
				}
			}
		})
	}
}

// openFrame opens one whole sealed frame.
func openFrame(t testing.TB, rx *SecureRx, wire []byte) [MaxSegments][]byte {
	t.Helper()
	segs, rest, err := openOne(rx, wire)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left", len(rest))
	}
	return segs
}

func openOne(rx *SecureRx, wire []byte) (segs [MaxSegments][]byte, rest []byte, err error) {
	if len(wire) < SecurePreambleLen {
		return segs, nil, errorf(ErrTruncated, 0, "short")
	}
	var inline [secureInline]byte
	pre, err := rx.OpenPreamble(append([]byte(nil), wire[:SecurePreambleLen]...), Limits{}, &inline)
	if err != nil {
		return segs, nil, err
	}
	n := pre.SecureBodyLen()
	if len(wire) < SecurePreambleLen+n {
		return segs, nil, errorf(ErrTruncated, 0, "short body")
	}
	segs, err = rx.OpenBody(&pre, inline[:], append([]byte(nil), wire[SecurePreambleLen:SecurePreambleLen+n]...))
	if err == nil && pre.NumSegments == 1 && int(pre.Segments[0].Len) <= secureInline {
		segs[0] = append([]byte(nil), segs[0]...)
	}
	return segs, wire[SecurePreambleLen+n:], err
}

// The on-wire sizes of ceph's test_frames_v2 for rev1 secure.
func TestSecureSizes(t *testing.T) {
	cases := []struct {
		lens [4]int
		want int
	}{
		{[4]int{0, 0, 0, 0}, 96},
		{[4]int{1, 0, 0, 0}, 96},
		{[4]int{0, 101, 0, 0}, 96 + 112 + 32},
		{[4]int{0, 0, 202, 303}, 96 + 208 + 304 + 32},
		{[4]int{48, 0, 0, 0}, 96},
		{[4]int{49, 0, 0, 0}, 96 + 32},
	}
	for _, tc := range cases {
		tx, rx, _ := NewSecure(seq(0, 64), Client)
		_ = rx
		var rest []msg.Buffers
		for _, l := range tc.lens[1:] {
			rest = append(rest, msg.Buffers{make([]byte, l)})
		}
		b, err := tx.AppendFrame(nil, TagHello, make([]byte, tc.lens[0]), rest...)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != tc.want {
			t.Errorf("lens %v: %d bytes on the wire, want %d", tc.lens, len(b), tc.want)
		}
	}
}

// Tampering with any byte, replaying or reordering frames, a wrong key and
// truncation all fail to open with ErrDecrypt (or ErrTruncated).
func TestSecureBadInput(t *testing.T) {
	secret := seq(0, 64)
	tx, _, _ := NewSecure(secret, Client)
	var wire []byte
	var frames [][]byte
	for i, v := range secureVectors {
		start := len(wire)
		var err error
		wire, err = tx.AppendFrame(wire, v.tag, v.seg0, v.rest...)
		if err != nil {
			t.Fatal(i, err)
		}
		frames = append(frames, wire[start:])
	}
	open := func(in []byte) error {
		_, rx, _ := NewSecure(secret, Server)
		for len(in) > 0 {
			var err error
			if _, in, err = openOne(rx, in); err != nil {
				return err
			}
		}
		return nil
	}
	if err := open(wire); err != nil {
		t.Fatalf("clean stream: %v", err)
	}
	for i := range wire {
		bad := append([]byte(nil), wire...)
		bad[i] ^= 0x40
		if err := open(bad); !errors.Is(err, ErrDecrypt) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	// Replay: the first frame twice.
	replay := append(append([]byte(nil), frames[0]...), frames[0]...)
	if err := open(replay); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("replay: %v", err)
	}
	// Reorder: the second frame first.
	reorder := append(append([]byte(nil), frames[1]...), frames[0]...)
	if err := open(reorder); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("reorder: %v", err)
	}
	// The client's own nonces (not crossed) do not open it.
	_, rx, _ := NewSecure(secret, Client)
	if _, _, err := openOne(rx, frames[0]); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("uncrossed nonces: %v", err)
	}
	// Another key.
	other := seq(1, 64)
	_, rx, _ = NewSecure(other, Server)
	if _, _, err := openOne(rx, frames[0]); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("other key: %v", err)
	}
	// Truncation, at every length.
	tx, _, _ = NewSecure(secret, Client)
	last := secureVectors[2]
	whole, _ := tx.AppendFrame(nil, last.tag, last.seg0, last.rest...)
	frames[2] = whole
	for n := 0; n < len(frames[2]); n++ {
		_, rx, _ := NewSecure(secret, Server)
		var inline [secureInline]byte
		if n < SecurePreambleLen {
			if _, err := rx.OpenPreamble(append([]byte(nil), frames[2][:n]...), Limits{}, &inline); !errors.Is(err, ErrTruncated) {
				t.Fatalf("preamble cut at %d: %v", n, err)
			}
			continue
		}
		pre, err := rx.OpenPreamble(append([]byte(nil), frames[2][:SecurePreambleLen]...), Limits{}, &inline)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rx.OpenBody(&pre, inline[:], append([]byte(nil), frames[2][SecurePreambleLen:n]...)); !errors.Is(err, ErrTruncated) {
			t.Fatalf("body cut at %d: %v", n, err)
		}
	}
	// A short secret.
	if _, _, err := NewSecure(seq(0, 39), Client); err == nil {
		t.Fatal("39-byte secret accepted")
	}
}

// The sender refuses to use its initial nonce twice.
func TestSecureNonceExhaustion(t *testing.T) {
	tx, _, _ := NewSecure(seq(0, 64), Client)
	// One frame uses the initial nonce; then jump the counter to the
	// last value before it wraps back to the initial one.
	if _, err := tx.AppendFrame(nil, TagAck, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	d := tx.d
	copy(d.nonce[:], d.initial[:])
	ctr := leU64(d.initial[4:]) - 1
	putLeU64(d.nonce[4:], ctr)
	b, err := tx.AppendFrame([]byte("x"), TagAck, make([]byte, 8))
	if err != nil || len(b) != 1+SecurePreambleLen {
		t.Fatalf("last nonce: %v (%d bytes)", err, len(b))
	}
	b, err = tx.AppendFrame([]byte("x"), TagAck, make([]byte, 8))
	if !errors.Is(err, ErrNonceExhausted) || string(b) != "x" {
		t.Fatalf("wrapped nonce: %v (%q)", err, b)
	}
	// A frame with two GCM operations that runs out midway leaves the
	// buffer as it was.
	copy(d.nonce[:], d.initial[:])
	putLeU64(d.nonce[4:], leU64(d.initial[4:])-1)
	d.usedFirst = true
	b, err = tx.AppendFrame([]byte("x"), TagMessage, make([]byte, 41), msg.Buffers{[]byte("f")}, nil, msg.Buffers{[]byte("d")})
	if !errors.Is(err, ErrNonceExhausted) || string(b) != "x" {
		t.Fatalf("wrapped mid-frame: %v (%d bytes)", err, len(b))
	}
}

// FuzzSecureFrame opens arbitrary bytes as secure frames: typed errors,
// no panics; and what opens re-seals to the same plaintext.
func FuzzSecureFrame(f *testing.F) {
	tx, _, _ := NewSecure(seq(0, 64), Server)
	for _, v := range secureVectors {
		b, _ := tx.AppendFrame(nil, v.tag, v.seg0, v.rest...)
		f.Add(b, false)
	}
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, in []byte, lim bool) {
		_, rx, _ := NewSecure(seq(0, 64), Client)
		l := Limits{}
		if lim {
			l = Limits{MaxControl: 64, MaxSegment: 64, MaxMessage: 128}
		}
		for steps := 0; len(in) > 0 && steps < 100; steps++ {
			if len(in) < SecurePreambleLen {
				return
			}
			var inline [secureInline]byte
			pre, err := rx.OpenPreamble(append([]byte(nil), in[:SecurePreambleLen]...), l, &inline)
			in = in[SecurePreambleLen:]
			if err != nil {
				checkTyped(t, err)
				return
			}
			n := pre.SecureBodyLen()
			if n > len(in) {
				return
			}
			if _, err := rx.OpenBody(&pre, inline[:], append([]byte(nil), in[:n]...)); err != nil {
				checkTyped(t, err)
				return
			}
			in = in[n:]
		}
	})
}

func leU64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
func putLeU64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

// Sealing and opening a message allocates nothing.
func TestSecureAllocs(t *testing.T) {
	tx, _, _ := NewSecure(seq(0, 64), Client)
	_, rx, _ := NewSecure(seq(0, 64), Server)
	h := Header2{Seq: 1}
	front, data := msg.Buffers{[]byte("front")}, msg.Buffers{seq(0, 4096)}
	buf := make([]byte, 0, 8192)
	body := make([]byte, 8192)
	var inline [secureInline]byte
	allocs := testing.AllocsPerRun(100, func() {
		b, err := tx.AppendMessage(buf[:0], &h, front, nil, data)
		if err != nil {
			t.Fatal(err)
		}
		pre, err := rx.OpenPreamble(b[:SecurePreambleLen], Limits{}, &inline)
		if err != nil {
			t.Fatal(err)
		}
		n := copy(body, b[SecurePreambleLen:])
		if _, err := rx.OpenBody(&pre, inline[:], body[:n]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per message", allocs)
	}
}
