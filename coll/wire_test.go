package coll

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func sampleHeader() Header {
	return Header{ID: 0x0102030405060708, Opcode: 0xF5000001, Root: 7, GroupVersion: 42, Topology: KNomial(4), Subset: true, Filter: []Rank{1, 5, 9}}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := sampleHeader()
	b := h.Append([]byte("x"))[1:]
	if len(b) != h.Len() {
		t.Fatalf("len %d, want %d", len(b), h.Len())
	}
	b = append(b, "payload"...)
	got, rest, err := DecodeHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(rest) != "payload" || got.ID != h.ID || got.Opcode != h.Opcode || got.Root != h.Root ||
		got.GroupVersion != h.GroupVersion || got.Topology != h.Topology || !got.Subset || !slices.Equal(got.Filter, h.Filter) {
		t.Fatalf("got %+v rest %q", got, rest)
	}
	// An unsorted filter with duplicates is written canonically.
	h.Filter = []Rank{9, 1, 9, 5}
	got, _, err = DecodeHeader(h.Append(nil))
	if err != nil || !slices.Equal(got.Filter, []Rank{1, 5, 9}) {
		t.Fatalf("canonical filter: %v %v", got.Filter, err)
	}
	tr, err := got.Tree([]Rank{0, 1, 2, 5, 7, 9})
	if err != nil || !slices.Equal(tr.Ranks(), []Rank{1, 5, 7, 9}) || tr.Root() != 7 {
		t.Fatalf("tree %v %v", tr, err)
	}
}

// TestHeaderDecodeErrors: every truncated prefix and every bad field is a
// typed error.
func TestHeaderDecodeErrors(t *testing.T) {
	h := sampleHeader()
	b := h.Append(nil)
	for i := range len(b) {
		_, _, err := DecodeHeader(b[:i])
		var de *DecodeError
		if !errors.Is(err, ErrTruncated) || !errors.As(err, &de) {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
	mod := func(f func(b []byte)) []byte {
		c := slices.Clone(b)
		f(c)
		return c
	}
	cases := []struct {
		b    []byte
		want error
	}{
		{mod(func(b []byte) { b[0] = 2 }), ErrWireVersion},
		{mod(func(b []byte) { b[1] = 0x80 }), ErrBadField},
		{mod(func(b []byte) { b[3] = 1 }), ErrBadField},
		{mod(func(b []byte) { b[26] = 9 }), ErrBadField},                        // topology type 9
		{mod(func(b []byte) { b[24] = 1 }), ErrBadField},                        // ratio 1
		{mod(func(b []byte) { b[31] = 0x10 }), ErrTooMany},                      // count > MaxRanks
		{mod(func(b []byte) { b[28] = 200 }), ErrTruncated},                     // count beyond the input
		{mod(func(b []byte) { copy(b[36:], []byte{1, 0, 0, 0}) }), ErrBadField}, // 1, 1: not ascending
	}
	for i, c := range cases {
		if _, _, err := DecodeHeader(c.b); !errors.Is(err, c.want) {
			t.Errorf("case %d: %v, want %v", i, err, c.want)
		}
	}
}

func sampleReport() Report[[]byte] {
	return Report[[]byte]{Value: []byte("agg"), HasValue: true, Failed: []Failure{
		{Rank: 9, Reason: ReasonUnreachable, Via: 3, Detail: "connection reset"},
		{Rank: 3, Reason: ReasonUnreachable, Via: 3, Detail: "connection reset"},
		{Rank: 4, Reason: ReasonVersion, Via: 4},
	}}
}

func TestReportRoundTrip(t *testing.T) {
	r := sampleReport()
	r.Failed = append(r.Failed, Failure{Rank: 4, Reason: ReasonHandler, Via: 4}, Failure{Rank: 11, Reason: ReasonHandler, Via: 11, Detail: strings.Repeat("x", 1000)})
	got, err := DecodeReport(AppendReport(nil, r))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Value) != "agg" || !got.HasValue || len(got.Failed) != 4 {
		t.Fatalf("got %+v", got)
	}
	if got.Failed[0].Rank != 3 || got.Failed[1] != (Failure{Rank: 4, Reason: ReasonVersion, Via: 4}) || len(got.Failed[3].Detail) != MaxDetail {
		t.Fatalf("failures %v", got.Failed)
	}
	empty, err := DecodeReport(AppendReport(nil, Report[[]byte]{}))
	if err != nil || empty.HasValue || empty.Failed != nil {
		t.Fatalf("empty: %+v %v", empty, err)
	}
}

func TestReportDecodeErrors(t *testing.T) {
	b := AppendReport(nil, sampleReport())
	for i := range len(b) - len("agg") {
		if _, err := DecodeReport(b[:i]); !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrTooMany) {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
	mod := func(f func(b []byte)) []byte {
		c := slices.Clone(b)
		f(c)
		return c
	}
	cases := []struct {
		b    []byte
		want error
	}{
		{mod(func(b []byte) { b[0] = 0 }), ErrWireVersion},
		{mod(func(b []byte) { b[1] = 2 }), ErrBadField},
		{mod(func(b []byte) { b[2] = 1 }), ErrBadField},
		{mod(func(b []byte) { b[7] = 0xFF }), ErrTooMany},
		{mod(func(b []byte) { b[4] = 200 }), ErrTooMany},   // 200 failures cannot fit
		{mod(func(b []byte) { b[8+8] = 0 }), ErrBadField},  // reason 0
		{mod(func(b []byte) { b[8+10] = 2 }), ErrBadField}, // detail of 512+ bytes
		{mod(func(b []byte) { b[8] = 200 }), ErrBadField},  // first rank 200 > second
		{AppendReport(nil, Report[[]byte]{})[:8:8], nil},
		{append(AppendReport(nil, Report[[]byte]{}), 1), ErrBadField}, // trailing bytes without value
	}
	for i, c := range cases {
		if _, err := DecodeReport(c.b); !errors.Is(err, c.want) && !(c.want == nil && err == nil) {
			t.Errorf("case %d: %v, want %v", i, err, c.want)
		}
	}
}

// FuzzHeader: decoding never panics, and what decodes re-encodes to the
// same bytes.
func FuzzHeader(f *testing.F) {
	h := sampleHeader()
	f.Add(h.Append(nil))
	f.Add((&Header{Topology: Flat()}).Append(nil))
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, rest, err := DecodeHeader(b)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		enc := h.Append(nil)
		if !bytes.Equal(append(enc, rest...), b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", enc, b)
		}
		if _, err := h.Tree(h.Filter); err != nil && !errors.Is(err, ErrEmptyScope) {
			t.Fatalf("tree of a decoded header: %v", err)
		}
	})
}

// FuzzReport: decoding never panics, and what decodes re-encodes to the
// same bytes.
func FuzzReport(f *testing.F) {
	f.Add(AppendReport(nil, sampleReport()))
	f.Add(AppendReport(nil, Report[[]byte]{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeReport(b)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if enc := AppendReport(nil, r); !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", enc, b)
		}
	})
}
