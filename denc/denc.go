// Package denc implements Ceph's little-endian wire encoding: fixed-width
// integers, length-prefixed strings and byte lists, vectors, maps and the
// versioned blocks that Ceph's ENCODE_START / DECODE_START macros produce.
//
// Encoding is append-style: every Append function takes a destination slice
// and returns the extended slice, so callers reuse buffers and the hot path
// does not allocate. Decoding goes through a Decoder, which bounds-checks
// every read and keeps the first error (a sticky error), so a sequence of
// reads is checked once at the end. No length read from the wire is used to
// allocate before it has been compared with the bytes that remain.
package denc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Errors returned by Decoder. They are wrapped in a *DecodeError that says
// where decoding stopped; use errors.Is to test for them.
var (
	// ErrTruncated means the input ended before the value did.
	ErrTruncated = errors.New("denc: truncated input")
	// ErrTooLarge means a length or count exceeds the remaining input or a
	// configured limit.
	ErrTooLarge = errors.New("denc: length exceeds limit")
	// ErrVersion means a versioned block needs a newer decoder than this one.
	ErrVersion = errors.New("denc: incompatible encoding version")
	// ErrMalformed means a value is structurally invalid (a bad marker,
	// an impossible length).
	ErrMalformed = errors.New("denc: malformed input")
)

// DecodeError is the error a Decoder records. Off is the byte offset into
// the decoder's input at which the failing read started.
type DecodeError struct {
	Off  int
	What string // what was being decoded, e.g. "u32" or "string"
	Err  error  // one of the package's sentinel errors
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%v: %s at offset %d", e.Err, e.What, e.Off)
}

// Unwrap returns the sentinel error.
func (e *DecodeError) Unwrap() error { return e.Err }

// AppendU8 appends v.
func AppendU8(b []byte, v uint8) []byte { return append(b, v) }

// AppendU16 appends v little-endian.
func AppendU16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }

// AppendU32 appends v little-endian.
func AppendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

// AppendU64 appends v little-endian.
func AppendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

// AppendI32 appends v little-endian in two's complement.
func AppendI32(b []byte, v int32) []byte { return AppendU32(b, uint32(v)) }

// AppendI64 appends v little-endian in two's complement.
func AppendI64(b []byte, v int64) []byte { return AppendU64(b, uint64(v)) }

// AppendBool appends v as one byte (0 or 1).
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// AppendString appends s as a le32 length followed by its bytes (Ceph's
// std::string encoding).
func AppendString(b []byte, s string) []byte {
	b = AppendU32(b, uint32(len(s)))
	return append(b, s...)
}

// AppendBytes appends p as a le32 length followed by its bytes (Ceph's
// bufferlist encoding).
func AppendBytes(b []byte, p []byte) []byte {
	b = AppendU32(b, uint32(len(p)))
	return append(b, p...)
}

// AppendStrings appends a vector<string>.
func AppendStrings(b []byte, v []string) []byte {
	b = AppendU32(b, uint32(len(v)))
	for _, s := range v {
		b = AppendString(b, s)
	}
	return b
}

// AppendU32s appends a vector<uint32_t>.
func AppendU32s(b []byte, v []uint32) []byte {
	b = AppendU32(b, uint32(len(v)))
	for _, x := range v {
		b = AppendU32(b, x)
	}
	return b
}

// AppendSlice appends a vector: a le32 count, then each element encoded by f.
func AppendSlice[T any](b []byte, v []T, f func([]byte, T) []byte) []byte {
	b = AppendU32(b, uint32(len(v)))
	for _, x := range v {
		b = f(b, x)
	}
	return b
}

// AppendMap appends a map as a le32 count and key/value pairs in the order
// given by keys (Ceph's std::map is ordered; callers pass sorted keys).
func AppendMap[K comparable, V any](b []byte, m map[K]V, keys []K, fk func([]byte, K) []byte, fv func([]byte, V) []byte) []byte {
	b = AppendU32(b, uint32(len(keys)))
	for _, k := range keys {
		b = fk(b, k)
		b = fv(b, m[k])
	}
	return b
}

// StartBlock begins a versioned block (ENCODE_START(v, compat)): it appends
// the version, the compat version and a placeholder le32 length, and
// returns the offset that EndBlock needs.
func StartBlock(b []byte, v, compat uint8) ([]byte, int) {
	b = append(b, v, compat, 0, 0, 0, 0)
	return b, len(b)
}

// EndBlock closes the block begun at start (ENCODE_FINISH) by writing the
// length of everything appended since.
func EndBlock(b []byte, start int) []byte {
	binary.LittleEndian.PutUint32(b[start-4:start], uint32(len(b)-start))
	return b
}

// Decoder reads Ceph-encoded values from a byte slice. The zero value
// decodes nothing; use NewDecoder. A Decoder is not safe for concurrent use.
//
// Slices returned by Bytes, Raw and Block alias the input; copy them if the
// input buffer is reused.
type Decoder struct {
	b   []byte
	off int
	err error
}

// NewDecoder returns a Decoder over b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Reset makes d decode b from the start and clears any error.
func (d *Decoder) Reset(b []byte) { *d = Decoder{b: b} }

// Err returns the first error met, or nil.
func (d *Decoder) Err() error { return d.err }

// Len returns the number of bytes not yet consumed.
func (d *Decoder) Len() int { return len(d.b) - d.off }

// Offset returns the number of bytes consumed.
func (d *Decoder) Offset() int { return d.off }

// Rest returns the unconsumed input and consumes it.
func (d *Decoder) Rest() []byte {
	r := d.b[d.off:]
	d.off = len(d.b)
	return r
}

// Fail records err (wrapped with the current offset) unless an error is
// already recorded. Callers use it to report semantic errors found while
// decoding.
func (d *Decoder) Fail(what string, err error) {
	if d.err == nil {
		d.err = &DecodeError{Off: d.off, What: what, Err: err}
	}
}

func (d *Decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b)-d.off {
		d.Fail(what, ErrTruncated)
		return nil
	}
	p := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return p
}

// U8 reads one byte.
func (d *Decoder) U8() uint8 {
	p := d.take(1, "u8")
	if p == nil {
		return 0
	}
	return p[0]
}

// Bool reads one byte as a boolean (non-zero is true).
func (d *Decoder) Bool() bool { return d.U8() != 0 }

// U16 reads a le16.
func (d *Decoder) U16() uint16 {
	p := d.take(2, "u16")
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint16(p)
}

// U32 reads a le32.
func (d *Decoder) U32() uint32 {
	p := d.take(4, "u32")
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}

// U64 reads a le64.
func (d *Decoder) U64() uint64 {
	p := d.take(8, "u64")
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}

// I32 reads a signed le32.
func (d *Decoder) I32() int32 { return int32(d.U32()) }

// I64 reads a signed le64.
func (d *Decoder) I64() int64 { return int64(d.U64()) }

// Raw reads exactly n bytes without a length prefix. The result aliases
// the input.
func (d *Decoder) Raw(n int) []byte { return d.take(n, "raw") }

// Skip discards n bytes.
func (d *Decoder) Skip(n int) { d.take(n, "skip") }

// Bytes reads a le32 length and that many bytes (a bufferlist). The result
// aliases the input. The length is checked against the remaining input
// before anything is taken.
func (d *Decoder) Bytes() []byte {
	n := d.U32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(d.Len()) {
		d.Fail("bytes", ErrTooLarge)
		return nil
	}
	return d.take(int(n), "bytes")
}

// String reads a le32 length and that many bytes as a string.
func (d *Decoder) String() string {
	p := d.Bytes()
	if p == nil {
		return ""
	}
	return string(p)
}

// Count reads a le32 element count and checks that count elements of at
// least minSize bytes each could fit in the remaining input, so a hostile
// count cannot make the caller allocate. minSize must be at least 1.
func (d *Decoder) Count(minSize int) int {
	n := d.U32()
	if d.err != nil {
		return 0
	}
	if minSize < 1 {
		minSize = 1
	}
	if uint64(n)*uint64(minSize) > uint64(d.Len()) || n > math.MaxInt32 {
		d.Fail("count", ErrTooLarge)
		return 0
	}
	return int(n)
}

// Strings reads a vector<string>.
func (d *Decoder) Strings() []string {
	n := d.Count(4)
	if n == 0 {
		return nil
	}
	v := make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		v = append(v, d.String())
	}
	return v
}

// U32s reads a vector<uint32_t>.
func (d *Decoder) U32s() []uint32 {
	n := d.Count(4)
	if n == 0 {
		return nil
	}
	v := make([]uint32, n)
	for i := range v {
		v[i] = d.U32()
	}
	return v
}

// Slice reads a vector whose elements are at least minSize bytes long,
// each decoded by f.
func Slice[T any](d *Decoder, minSize int, f func(*Decoder) T) []T {
	n := d.Count(minSize)
	if n == 0 {
		return nil
	}
	v := make([]T, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		v = append(v, f(d))
	}
	return v
}

// Map reads a map whose key/value pairs are at least minSize bytes long.
func Map[K comparable, V any](d *Decoder, minSize int, fk func(*Decoder) K, fv func(*Decoder) V) map[K]V {
	n := d.Count(minSize)
	m := make(map[K]V, n)
	for i := 0; i < n && d.err == nil; i++ {
		k := fk(d)
		m[k] = fv(d)
	}
	return m
}

// Block reads a versioned block header (DECODE_START(maxCompat)): the
// struct version, the compat version and the length. It fails with
// ErrVersion if compat is newer than maxCompat, and with ErrTooLarge if
// the length exceeds the remaining input. It returns the struct version
// and a Decoder over exactly the block's bytes; the parent decoder skips
// past the block, so fields that a newer encoder appended are ignored.
func (d *Decoder) Block(maxCompat uint8) (v uint8, body Decoder) {
	v = d.U8()
	compat := d.U8()
	n := d.U32()
	if d.err != nil {
		return 0, Decoder{err: d.err}
	}
	if compat > maxCompat {
		d.Fail("block", ErrVersion)
		return 0, Decoder{err: d.err}
	}
	if uint64(n) > uint64(d.Len()) {
		d.Fail("block", ErrTooLarge)
		return 0, Decoder{err: d.err}
	}
	p := d.take(int(n), "block")
	return v, Decoder{b: p}
}

// Absorb copies a nested decoder's error (for example from Block's body)
// into d, so a single Err check at the end covers both.
func (d *Decoder) Absorb(sub *Decoder) {
	if d.err == nil && sub.err != nil {
		d.err = sub.err
	}
}
