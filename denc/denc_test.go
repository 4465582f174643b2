package denc

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var b []byte
	b = AppendU8(b, 0xab)
	b = AppendU16(b, 0xbeef)
	b = AppendU32(b, 0xdeadbeef)
	b = AppendU64(b, 0x0123456789abcdef)
	b = AppendI32(b, -5)
	b = AppendI64(b, -1<<40)
	b = AppendBool(b, true)
	b = AppendString(b, "osdmap")
	b = AppendBytes(b, []byte{1, 2, 3})
	b = AppendStrings(b, []string{"a", "", "ccc"})
	b = AppendU32s(b, []uint32{1, 2})
	b = AppendSlice(b, []uint16{7, 8, 9}, AppendU16)
	m := map[string]uint32{"x": 1, "y": 2}
	b = AppendMap(b, m, []string{"x", "y"}, AppendString, AppendU32)
	b, start := StartBlock(b, 3, 2)
	b = AppendU32(b, 42)
	b = EndBlock(b, start)
	b = AppendU8(b, 0x77) // after the block

	d := NewDecoder(b)
	if d.U8() != 0xab || d.U16() != 0xbeef || d.U32() != 0xdeadbeef || d.U64() != 0x0123456789abcdef ||
		d.I32() != -5 || d.I64() != -1<<40 || !d.Bool() || d.String() != "osdmap" || !bytes.Equal(d.Bytes(), []byte{1, 2, 3}) {
		t.Fatal("scalar round trip failed")
	}
	if got := d.Strings(); !slices.Equal(got, []string{"a", "", "ccc"}) {
		t.Fatalf("strings %q", got)
	}
	if got := d.U32s(); !slices.Equal(got, []uint32{1, 2}) {
		t.Fatalf("u32s %v", got)
	}
	if got := Slice(d, 2, (*Decoder).U16); !slices.Equal(got, []uint16{7, 8, 9}) {
		t.Fatalf("slice %v", got)
	}
	if got := Map(d, 8, (*Decoder).String, (*Decoder).U32); len(got) != 2 || got["x"] != 1 || got["y"] != 2 {
		t.Fatalf("map %v", got)
	}
	v, body := d.Block(2)
	if v != 3 || body.U32() != 42 || body.Len() != 0 {
		t.Fatalf("block v=%d", v)
	}
	if d.U8() != 0x77 || d.Err() != nil || d.Len() != 0 {
		t.Fatalf("trailer: err %v len %d", d.Err(), d.Len())
	}
}

// A newer encoder may append fields to a block; an older decoder skips them.
func TestBlockSkipsNewerFields(t *testing.T) {
	b, start := StartBlock(nil, 2, 1)
	b = AppendU32(b, 1)
	b = AppendU64(b, 99) // a field this decoder does not know
	b = EndBlock(b, start)
	b = AppendU8(b, 5)
	d := NewDecoder(b)
	_, body := d.Block(1)
	if body.U32() != 1 || d.U8() != 5 || d.Err() != nil {
		t.Fatal("newer fields not skipped")
	}
}

func TestBlockCompatTooNew(t *testing.T) {
	b, start := StartBlock(nil, 5, 4)
	b = EndBlock(b, start)
	d := NewDecoder(b)
	d.Block(3)
	if !errors.Is(d.Err(), ErrVersion) {
		t.Fatalf("error %v", d.Err())
	}
}

// Every truncated prefix fails with ErrTruncated or ErrTooLarge, never a
// panic, and the error says where.
func TestTruncated(t *testing.T) {
	var b []byte
	b = AppendU64(b, 1)
	b = AppendString(b, "hello")
	b = AppendStrings(b, []string{"x", "y"})
	b, start := StartBlock(b, 1, 1)
	b = AppendU32(b, 7)
	b = EndBlock(b, start)
	for n := 0; n < len(b); n++ {
		d := NewDecoder(b[:n])
		d.U64()
		_ = d.String()
		d.Strings()
		_, body := d.Block(1)
		body.U32()
		d.Absorb(&body)
		err := d.Err()
		if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("prefix %d: error %v", n, err)
		}
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("prefix %d: %T is not *DecodeError", n, err)
		}
	}
}

// A hostile count or length is refused before anything is allocated.
func TestHostileLengths(t *testing.T) {
	b := AppendU32(nil, 1<<31) // a vector of 2^31 strings in 4 bytes
	d := NewDecoder(b)
	if v := d.Strings(); v != nil || !errors.Is(d.Err(), ErrTooLarge) {
		t.Fatalf("strings %v err %v", v, d.Err())
	}
	d = NewDecoder(AppendU32(nil, 1000))
	if p := d.Bytes(); p != nil || !errors.Is(d.Err(), ErrTooLarge) {
		t.Fatalf("bytes err %v", d.Err())
	}
	allocs := testing.AllocsPerRun(100, func() {
		d := NewDecoder(b)
		Slice(d, 1, (*Decoder).U8)
	})
	// The decoder and its error; a slice for the count would be a third.
	if allocs > 2 {
		t.Fatalf("%v allocations for a refused count", allocs)
	}
}

func FuzzDecoder(f *testing.F) {
	f.Add(AppendStrings(AppendString(nil, "x"), []string{"a"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(b)
		_ = d.String()
		d.Strings()
		_, body := d.Block(255)
		body.U32s()
		d.Absorb(&body)
		Map(d, 5, (*Decoder).U8, (*Decoder).U32)
		if d.Err() == nil && d.Offset()+d.Len() != len(b) {
			t.Fatal("offset accounting")
		}
	})
}
