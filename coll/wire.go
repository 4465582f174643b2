package coll

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Wire layouts, little-endian. Wire constants; append only.
//
// Header (the collective header, after the RPC header of every forwarded
// request; CaRT's crt_corpc_hdr):
//
//	off size field
//	  0    1 version        (1)
//	  1    1 flags          (HeaderSubset: Filter is the subset)
//	  2    2 reserved       (0)
//	  4    8 id             (the collective's id, chosen by the root)
//	 12    4 opcode         (the collective RPC's opcode)
//	 16    4 root           (the root's rank)
//	 20    4 group version  (the root's, when it started)
//	 24    4 topology       (type<<16 | ratio)
//	 28    4 n              (number of filter ranks, <= MaxRanks)
//	 32   4n filter ranks   (strictly ascending)
//
// Report (what a rank answers its parent, after the RPC header):
//
//	off size field
//	  0    1 version        (1)
//	  1    1 flags          (ReportHasValue)
//	  2    2 reserved       (0)
//	  4    4 n              (number of failures, <= MaxRanks)
//	  8  ... n failures, ascending by rank, each:
//	         4 rank, 4 via, 1 reason, 2 detail length (<= MaxDetail), detail
//	 ...     the value: the rest of the payload
const (
	WireVersion = 1

	HeaderLen    = 32 // fixed part of a Header
	ReportLen    = 8  // fixed part of a Report
	failureFixed = 11 // fixed part of one failure

	// HeaderSubset: the filter ranks are the subset the collective
	// covers (CRT_RPC_FLAG_FILTER_INVERT); otherwise they are excluded.
	HeaderSubset uint8 = 1 << 0
	// ReportHasValue: the report carries a value.
	ReportHasValue uint8 = 1 << 0
)

// MaxRanks bounds the ranks a header's filter or a report's failures may
// list (decoders refuse more before allocating).
const MaxRanks = 1 << 20

// Decode errors: every *DecodeError matches one of these.
var (
	// ErrTruncated: the input ends before the structure does.
	ErrTruncated = errors.New("coll: truncated")
	// ErrWireVersion: an unknown encoding version.
	ErrWireVersion = errors.New("coll: unknown wire version")
	// ErrBadField: a field holds a value that is not allowed (unknown
	// flags, non-zero reserved bytes, an unknown reason, a detail too
	// long, ranks out of order).
	ErrBadField = errors.New("coll: bad field")
	// ErrTooMany: a count beyond MaxRanks or beyond what the input can
	// hold.
	ErrTooMany = errors.New("coll: too many ranks")
)

// DecodeError is a decoding failure: what was being decoded, the byte
// offset, and the sentinel it matches (Err).
type DecodeError struct {
	What string // "header" or "report"
	Off  int
	Msg  string
	Err  error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%v: %s at offset %d: %s", e.Err, e.What, e.Off, e.Msg)
}

// Unwrap returns the sentinel.
func (e *DecodeError) Unwrap() error { return e.Err }

// Header is the collective header a forwarded request carries.
type Header struct {
	// ID identifies the collective (chosen by the root, unique among its
	// collectives).
	ID uint64
	// Opcode is the collective RPC.
	Opcode uint32
	// Root is the root's rank.
	Root Rank
	// GroupVersion is the root's group version when it started; a rank
	// whose version differs refuses the collective (ReasonVersion).
	GroupVersion uint32
	// Topology is the tree's shape.
	Topology Topology
	// Subset says that Filter is the subset of the group the collective
	// covers; otherwise Filter lists the ranks it excludes.
	Subset bool
	// Filter is ascending and unique.
	Filter []Rank
}

// Scope returns the ranks the collective covers given the group's
// members (see the package function Scope).
func (h *Header) Scope(members []Rank) []Rank {
	return Scope(members, h.Filter, h.Subset, h.Root)
}

// Tree returns the collective's tree given the group's members.
func (h *Header) Tree(members []Rank) (*Tree, error) {
	if err := h.Topology.Validate(); err != nil {
		return nil, err
	}
	return newSortedTree(h.Topology, h.Scope(members), h.Root)
}

// Len returns the length of h's encoding.
func (h *Header) Len() int { return HeaderLen + 4*len(h.Filter) }

// Append appends h's encoding to b. The filter is written sorted and
// de-duplicated.
func (h *Header) Append(b []byte) []byte {
	f := h.Filter
	if !slices.IsSorted(f) || len(slices.Compact(slices.Clone(f))) != len(f) {
		f = slices.Clone(f)
		slices.Sort(f)
		f = slices.Compact(f)
	}
	var flags uint8
	if h.Subset {
		flags |= HeaderSubset
	}
	b = append(b, WireVersion, flags, 0, 0)
	b = binary.LittleEndian.AppendUint64(b, h.ID)
	b = binary.LittleEndian.AppendUint32(b, h.Opcode)
	b = binary.LittleEndian.AppendUint32(b, h.Root)
	b = binary.LittleEndian.AppendUint32(b, h.GroupVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.Topology))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
	for _, r := range f {
		b = binary.LittleEndian.AppendUint32(b, r)
	}
	return b
}

// DecodeHeader decodes a header from the start of b and returns it with
// the rest of b (the collective's input).
func DecodeHeader(b []byte) (Header, []byte, error) {
	bad := func(off int, err error, format string, a ...any) (Header, []byte, error) {
		return Header{}, nil, &DecodeError{What: "header", Off: off, Msg: fmt.Sprintf(format, a...), Err: err}
	}
	if len(b) < HeaderLen {
		return bad(len(b), ErrTruncated, "%d bytes, want at least %d", len(b), HeaderLen)
	}
	if b[0] != WireVersion {
		return bad(0, ErrWireVersion, "version %d", b[0])
	}
	if b[1]&^HeaderSubset != 0 {
		return bad(1, ErrBadField, "unknown flags %#x", b[1])
	}
	if b[2] != 0 || b[3] != 0 {
		return bad(2, ErrBadField, "reserved bytes set")
	}
	h := Header{
		Subset:       b[1]&HeaderSubset != 0,
		ID:           binary.LittleEndian.Uint64(b[4:]),
		Opcode:       binary.LittleEndian.Uint32(b[12:]),
		Root:         binary.LittleEndian.Uint32(b[16:]),
		GroupVersion: binary.LittleEndian.Uint32(b[20:]),
		Topology:     Topology(binary.LittleEndian.Uint32(b[24:])),
	}
	if err := h.Topology.Validate(); err != nil {
		return bad(24, ErrBadField, "%v", err)
	}
	n := binary.LittleEndian.Uint32(b[28:])
	if n > MaxRanks {
		return bad(28, ErrTooMany, "%d filter ranks (at most %d)", n, MaxRanks)
	}
	if uint64(len(b)-HeaderLen) < 4*uint64(n) {
		return bad(len(b), ErrTruncated, "%d filter ranks in %d bytes", n, len(b)-HeaderLen)
	}
	if n > 0 {
		h.Filter = make([]Rank, n)
		for i := range h.Filter {
			off := HeaderLen + 4*i
			h.Filter[i] = binary.LittleEndian.Uint32(b[off:])
			if i > 0 && h.Filter[i] <= h.Filter[i-1] {
				return bad(off, ErrBadField, "filter ranks not strictly ascending")
			}
		}
	}
	return h, b[HeaderLen+4*int(n):], nil
}

// AppendReport appends the encoding of r to b: its failures (sorted by
// rank, details cut to MaxDetail), then its value if it has one.
func AppendReport(b []byte, r Report[[]byte]) []byte {
	var flags uint8
	if r.HasValue {
		flags |= ReportHasValue
	}
	fs := r.Failed
	if !slices.IsSortedFunc(fs, cmpFailure) {
		fs = slices.Clone(fs)
		slices.SortStableFunc(fs, cmpFailure)
	}
	fs = compactFailures(fs)
	b = append(b, WireVersion, flags, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(fs)))
	for _, f := range fs {
		d := cut(f.Detail)
		b = binary.LittleEndian.AppendUint32(b, f.Rank)
		b = binary.LittleEndian.AppendUint32(b, f.Via)
		b = append(b, byte(f.Reason))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(d)))
		b = append(b, d...)
	}
	if r.HasValue {
		b = append(b, r.Value...)
	}
	return b
}

// compactFailures drops failures of a rank listed before (fs sorted),
// copying fs first if it has any.
func compactFailures(fs []Failure) []Failure {
	for i := 1; i < len(fs); i++ {
		if fs[i].Rank == fs[i-1].Rank {
			return slices.CompactFunc(slices.Clone(fs), func(a, b Failure) bool { return a.Rank == b.Rank })
		}
	}
	return fs
}

func cmpFailure(a, b Failure) int {
	switch {
	case a.Rank < b.Rank:
		return -1
	case a.Rank > b.Rank:
		return 1
	}
	return 0
}

// DecodeReport decodes a report. Its Value aliases b.
func DecodeReport(b []byte) (Report[[]byte], error) {
	bad := func(off int, err error, format string, a ...any) (Report[[]byte], error) {
		return Report[[]byte]{}, &DecodeError{What: "report", Off: off, Msg: fmt.Sprintf(format, a...), Err: err}
	}
	if len(b) < ReportLen {
		return bad(len(b), ErrTruncated, "%d bytes, want at least %d", len(b), ReportLen)
	}
	if b[0] != WireVersion {
		return bad(0, ErrWireVersion, "version %d", b[0])
	}
	if b[1]&^ReportHasValue != 0 {
		return bad(1, ErrBadField, "unknown flags %#x", b[1])
	}
	if b[2] != 0 || b[3] != 0 {
		return bad(2, ErrBadField, "reserved bytes set")
	}
	var r Report[[]byte]
	r.HasValue = b[1]&ReportHasValue != 0
	n := binary.LittleEndian.Uint32(b[4:])
	if n > MaxRanks {
		return bad(4, ErrTooMany, "%d failures (at most %d)", n, MaxRanks)
	}
	if uint64(len(b)-ReportLen) < failureFixed*uint64(n) {
		return bad(len(b), ErrTooMany, "%d failures cannot fit in %d bytes", n, len(b)-ReportLen)
	}
	off := ReportLen
	if n > 0 {
		r.Failed = make([]Failure, 0, n)
	}
	for i := uint32(0); i < n; i++ {
		if len(b)-off < failureFixed {
			return bad(off, ErrTruncated, "failure %d", i)
		}
		f := Failure{
			Rank:   binary.LittleEndian.Uint32(b[off:]),
			Via:    binary.LittleEndian.Uint32(b[off+4:]),
			Reason: Reason(b[off+8]),
		}
		dl := int(binary.LittleEndian.Uint16(b[off+9:]))
		if !f.Reason.valid() {
			return bad(off+8, ErrBadField, "unknown reason %d", b[off+8])
		}
		if dl > MaxDetail {
			return bad(off+9, ErrBadField, "detail of %d bytes (at most %d)", dl, MaxDetail)
		}
		if i > 0 && f.Rank <= r.Failed[i-1].Rank {
			return bad(off, ErrBadField, "failures not strictly ascending by rank")
		}
		off += failureFixed
		if len(b)-off < dl {
			return bad(off, ErrTruncated, "detail of failure %d", i)
		}
		f.Detail = string(b[off : off+dl])
		off += dl
		r.Failed = append(r.Failed, f)
	}
	if r.HasValue {
		r.Value = b[off:]
	} else if off != len(b) {
		return bad(off, ErrBadField, "%d bytes after a report without value", len(b)-off)
	}
	return r, nil
}
