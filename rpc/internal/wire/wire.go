// Package wire is the RPC header that ferry puts at the start of the front
// segment of every RPC message, and the message types that carry it. It is
// a pure codec: no I/O, no allocation on decode.
//
// Layout (little-endian, 40 bytes, CaRT's crt_common_hdr in spirit):
//
//	off size field
//	  0    1 version       (1)
//	  1    1 reserved      (0)
//	  2    2 header length (>= 40; a later version may append fields)
//	  4    4 opcode        (base<<24 | version<<16 | index)
//	  8    4 flags
//	 12    4 source rank
//	 16    4 destination rank
//	 20    2 source tag    (the sender's context index)
//	 22    2 destination tag
//	 24    8 deadline      (Unix nanoseconds of the sender's clock; 0: none)
//	 32    4 rc            (replies: an rpc error code; 0: success)
//	 36    4 group version (the sender's primary group version)
//
// The encoded input or output follows the header in the front segment;
// raw buffers travel in the message's data segment. The RPC id is the
// message header's tid.
package wire

import (
	"encoding/binary"
	"errors"
)

// Message types of ferry RPC messages, in a block far above Ceph's
// CEPH_MSG_* and MSG_* numbers. Wire constants; append only.
const (
	TypeRequest uint16 = 0xFE00 // a request: header + input
	TypeReply   uint16 = 0xFE01 // a reply: header + output, or an error text when rc != 0
)

// Header versions. Wire constants; append only.
const (
	Version1 uint8 = 1
)

// Flags. Wire constants; append only.
const (
	FlagOneWay   uint32 = 1 << 0 // the sender expects no reply
	FlagDeadline uint32 = 1 << 1 // Deadline is set
	FlagHasData  uint32 = 1 << 2 // the input or output has a data-segment part
)

// HeaderLen is the length of a version 1 header.
const HeaderLen = 40

// MaxHeaderLen bounds the header length a decoder accepts.
const MaxHeaderLen = 4096

// Decode errors.
var (
	ErrShort     = errors.New("rpc/wire: front shorter than the RPC header")
	ErrVersion   = errors.New("rpc/wire: unknown RPC header version")
	ErrHeaderLen = errors.New("rpc/wire: bad RPC header length")
)

// Header is the decoded RPC header.
type Header struct {
	Opcode       uint32
	Flags        uint32
	SrcRank      uint32
	DstRank      uint32
	SrcTag       uint16
	DstTag       uint16
	Deadline     int64
	RC           int32
	GroupVersion uint32
}

// Append appends the version 1 encoding of h to b.
func (h *Header) Append(b []byte) []byte {
	var a [HeaderLen]byte
	h.Put(a[:])
	return append(b, a[:]...)
}

// Put writes the version 1 encoding of h into b, which must be at least
// HeaderLen long.
func (h *Header) Put(b []byte) {
	_ = b[HeaderLen-1]
	b[0] = Version1
	b[1] = 0
	binary.LittleEndian.PutUint16(b[2:], HeaderLen)
	binary.LittleEndian.PutUint32(b[4:], h.Opcode)
	binary.LittleEndian.PutUint32(b[8:], h.Flags)
	binary.LittleEndian.PutUint32(b[12:], h.SrcRank)
	binary.LittleEndian.PutUint32(b[16:], h.DstRank)
	binary.LittleEndian.PutUint16(b[20:], h.SrcTag)
	binary.LittleEndian.PutUint16(b[22:], h.DstTag)
	binary.LittleEndian.PutUint64(b[24:], uint64(h.Deadline))
	binary.LittleEndian.PutUint32(b[32:], uint32(h.RC))
	binary.LittleEndian.PutUint32(b[36:], h.GroupVersion)
}

// Decode parses the header at the start of front and returns it with the
// body that follows it. A header longer than HeaderLen (a later version's)
// is accepted as long as it fits: the extra fields are skipped.
func Decode(front []byte) (h Header, body []byte, err error) {
	if len(front) < 4 {
		return h, nil, ErrShort
	}
	if front[0] != Version1 {
		return h, nil, ErrVersion
	}
	n := int(binary.LittleEndian.Uint16(front[2:]))
	if n < HeaderLen || n > MaxHeaderLen {
		return h, nil, ErrHeaderLen
	}
	if len(front) < n {
		return h, nil, ErrShort
	}
	h.Opcode = binary.LittleEndian.Uint32(front[4:])
	h.Flags = binary.LittleEndian.Uint32(front[8:])
	h.SrcRank = binary.LittleEndian.Uint32(front[12:])
	h.DstRank = binary.LittleEndian.Uint32(front[16:])
	h.SrcTag = binary.LittleEndian.Uint16(front[20:])
	h.DstTag = binary.LittleEndian.Uint16(front[22:])
	h.Deadline = int64(binary.LittleEndian.Uint64(front[24:]))
	h.RC = int32(binary.LittleEndian.Uint32(front[32:]))
	h.GroupVersion = binary.LittleEndian.Uint32(front[36:])
	return h, front[n:], nil
}
