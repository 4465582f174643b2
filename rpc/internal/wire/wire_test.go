package wire

import (
	"bytes"
	"errors"
	"testing"
)

func sample() Header {
	return Header{
		Opcode: 0x01020003, Flags: FlagDeadline | FlagHasData, SrcRank: 7, DstRank: 0xFFFFFFFF,
		SrcTag: 3, DstTag: 258, Deadline: -5, RC: -12, GroupVersion: 9,
	}
}

func TestRoundTrip(t *testing.T) {
	h := sample()
	b := h.Append([]byte(nil))
	if len(b) != HeaderLen {
		t.Fatalf("len %d", len(b))
	}
	b = append(b, "body"...)
	got, body, err := Decode(b)
	if err != nil || got != h || string(body) != "body" {
		t.Fatalf("got %+v %q %v", got, body, err)
	}
}

func TestTruncated(t *testing.T) {
	h := sample()
	b := h.Append(nil)
	for i := range len(b) {
		if _, _, err := Decode(b[:i]); !errors.Is(err, ErrShort) {
			t.Fatalf("prefix %d: err %v", i, err)
		}
	}
}

func TestLongerHeaderSkipped(t *testing.T) {
	h := sample()
	b := h.Append(nil)
	b[2] = HeaderLen + 8 // a later version's 48-byte header
	b = append(b, 1, 2, 3, 4, 5, 6, 7, 8)
	b = append(b, "in"...)
	got, body, err := Decode(b)
	if err != nil || got != h || string(body) != "in" {
		t.Fatalf("got %+v %q %v", got, body, err)
	}
}

func TestBadVersionAndLength(t *testing.T) {
	h := sample()
	b := h.Append(nil)
	b[0] = 2
	if _, _, err := Decode(b); !errors.Is(err, ErrVersion) {
		t.Fatal(err)
	}
	b[0] = Version1
	b[2], b[3] = 39, 0
	if _, _, err := Decode(b); !errors.Is(err, ErrHeaderLen) {
		t.Fatal(err)
	}
	b[2], b[3] = 0xff, 0xff
	if _, _, err := Decode(b); !errors.Is(err, ErrHeaderLen) {
		t.Fatal(err)
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts re-encodes to
// a header that decodes to the same fields.
func FuzzDecode(f *testing.F) {
	h := sample()
	f.Add(h.Append(nil))
	f.Add(append(h.Append(nil), "input"...))
	f.Add([]byte{1, 0, 48, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, err := Decode(b)
		if err != nil {
			return
		}
		if len(body) > len(b)-HeaderLen {
			t.Fatalf("body of %d bytes from %d", len(body), len(b))
		}
		if !bytes.Equal(body, b[len(b)-len(body):]) {
			t.Fatal("body is not the suffix")
		}
		re := h.Append(nil)
		h2, rest, err := Decode(re)
		if err != nil || h2 != h || len(rest) != 0 {
			t.Fatalf("re-decode: %+v %v, want %+v", h2, err, h)
		}
	})
}

func FuzzDecodeBulk(f *testing.F) {
	h := BulkHeader{Op: BulkData, Flags: 1, SrcTag: 2, DstTag: 3, RC: -4, Xfer: 5, Key: 6, Off: 7, Pos: 8, Len: 9, Key2: 10, Off2: 11}
	f.Add(h.Append(nil))
	f.Add([]byte{1, 7})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeBulk(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes (the reserved
		// field is written as zero).
		want := append([]byte(nil), b[:BulkHeaderLen]...)
		clear(want[12:16])
		if got := h.Append(nil); string(got) != string(want) {
			t.Fatalf("re-encoding %x gave %x", want, got)
		}
	})
}
