package wire

import (
	"encoding/binary"
	"errors"
)

// TypeBulk is the message type of bulk-transfer messages: a BulkHeader in
// the front segment and, for BulkData and BulkPut, the bytes in the data
// segment. Wire constant; append only.
const TypeBulk uint16 = 0xFE02

// Bulk operations. Wire constants; append only.
const (
	BulkGetReq  uint8 = 1 // pull Len bytes at Off of handle Key; answered by one BulkData
	BulkData    uint8 = 2 // the bytes of a BulkGetReq, for transfer Xfer at Pos (RC != 0: refused)
	BulkPut     uint8 = 3 // push: write the data at Off of handle Key; answered by one BulkAck
	BulkAck     uint8 = 4 // a BulkPut chunk (or, with BulkFlagFinal, a whole rendezvous PUT) landed
	BulkRTS     uint8 = 5 // rendezvous PUT: pull Len bytes from handle Key2 at Off2 into Key at Off
	BulkRelease uint8 = 6 // the origin is done with an overflow handle Key: free it
	BulkCancel  uint8 = 7 // the initiator aborted rendezvous PUT Xfer: stop pulling it

	// The direct path, between processes on one host: the initiator asks
	// for the addresses of a range and reads or writes them itself
	// (process_vm_readv, process_vm_writev).
	BulkDirectReq  uint8 = 8  // the addresses of Len bytes at Off of handle Key (BulkFlagDirectWrite: to write them); answered by one BulkDirectInfo
	BulkDirectInfo uint8 = 9  // the answer: data holds (address u64, length u64) pairs covering the range, in order (RC != 0 or BulkFlagNoDirect: refused); the holder keeps the range until BulkDirectDone
	BulkDirectDone uint8 = 10 // the initiator is done with the addresses BulkDirectInfo gave for Xfer
)

// Bulk header flags. Wire constants; append only.
const (
	BulkFlagFinal       uint16 = 1 << 0 // BulkAck: the whole rendezvous transfer is done
	BulkFlagDirectWrite uint16 = 1 << 1 // BulkDirectReq: the initiator will write the range (PUT)
	BulkFlagNoDirect    uint16 = 1 << 2 // BulkDirectInfo: the holder serves no direct access on this connection; use messages
)

// DirectPairLen is the encoded length of one (address, length) pair of a
// BulkDirectInfo.
const DirectPairLen = 16

// BulkHeaderLen is the length of a version 1 bulk header.
const BulkHeaderLen = 72

// ErrBulkHeader reports a bulk header that does not decode.
var ErrBulkHeader = errors.New("rpc/wire: bad bulk header")

// BulkHeader is the front segment of a TypeBulk message.
//
// Layout (little-endian, 72 bytes):
//
//	off size field
//	  0    1 version  (1)
//	  1    1 op
//	  2    2 flags
//	  4    2 source tag       (the sender's context)
//	  6    2 destination tag  (the context the answer is for)
//	  8    4 rc               (an rpc error code; 0: success)
//	 12    4 reserved (0)
//	 16    8 xfer             (the initiator's transfer id)
//	 24    8 key              (the handle the operation reads or writes)
//	 32    8 off              (offset in that handle)
//	 40    8 pos              (offset of this chunk within the transfer)
//	 48    8 len              (bytes)
//	 56    8 key2             (BulkRTS: the initiator's source handle)
//	 64    8 off2             (BulkRTS: offset in key2)
type BulkHeader struct {
	Op     uint8
	Flags  uint16
	SrcTag uint16
	DstTag uint16
	RC     int32
	Xfer   uint64
	Key    uint64
	Off    uint64
	Pos    uint64
	Len    uint64
	Key2   uint64
	Off2   uint64
}

// Put writes the encoding of h into b, which must be at least
// BulkHeaderLen long.
func (h *BulkHeader) Put(b []byte) {
	_ = b[BulkHeaderLen-1]
	b[0] = Version1
	b[1] = h.Op
	binary.LittleEndian.PutUint16(b[2:], h.Flags)
	binary.LittleEndian.PutUint16(b[4:], h.SrcTag)
	binary.LittleEndian.PutUint16(b[6:], h.DstTag)
	binary.LittleEndian.PutUint32(b[8:], uint32(h.RC))
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], h.Xfer)
	binary.LittleEndian.PutUint64(b[24:], h.Key)
	binary.LittleEndian.PutUint64(b[32:], h.Off)
	binary.LittleEndian.PutUint64(b[40:], h.Pos)
	binary.LittleEndian.PutUint64(b[48:], h.Len)
	binary.LittleEndian.PutUint64(b[56:], h.Key2)
	binary.LittleEndian.PutUint64(b[64:], h.Off2)
}

// Append appends the encoding of h to b.
func (h *BulkHeader) Append(b []byte) []byte {
	var a [BulkHeaderLen]byte
	h.Put(a[:])
	return append(b, a[:]...)
}

// DecodeBulk parses a bulk header. Extra bytes after it (a later
// version's fields) are ignored.
func DecodeBulk(front []byte) (h BulkHeader, err error) {
	if len(front) < BulkHeaderLen || front[0] != Version1 {
		return h, ErrBulkHeader
	}
	h.Op = front[1]
	if h.Op < BulkGetReq || h.Op > BulkDirectDone {
		return h, ErrBulkHeader
	}
	h.Flags = binary.LittleEndian.Uint16(front[2:])
	h.SrcTag = binary.LittleEndian.Uint16(front[4:])
	h.DstTag = binary.LittleEndian.Uint16(front[6:])
	h.RC = int32(binary.LittleEndian.Uint32(front[8:]))
	h.Xfer = binary.LittleEndian.Uint64(front[16:])
	h.Key = binary.LittleEndian.Uint64(front[24:])
	h.Off = binary.LittleEndian.Uint64(front[32:])
	h.Pos = binary.LittleEndian.Uint64(front[40:])
	h.Len = binary.LittleEndian.Uint64(front[48:])
	h.Key2 = binary.LittleEndian.Uint64(front[56:])
	h.Off2 = binary.LittleEndian.Uint64(front[64:])
	return h, nil
}

// Overflow descriptors: an RPC input or output larger than the eager
// limit travels as a read-only bulk handle that the receiver pulls. The
// RPC header then carries FlagBulkIn (request) or FlagBulkOut (reply) and
// is followed, before the encoded body, by the handle's key and length.
const (
	FlagBulkIn  uint32 = 1 << 3 // the request's data segment is in the bulk handle that follows the header
	FlagBulkOut uint32 = 1 << 4 // the reply's data segment is in the bulk handle that follows the header
)

// OverflowLen is the length of an overflow descriptor.
const OverflowLen = 16

// PutOverflow writes an overflow descriptor (key, length) into b.
func PutOverflow(b []byte, key uint64, n uint64) {
	_ = b[OverflowLen-1]
	binary.LittleEndian.PutUint64(b, key)
	binary.LittleEndian.PutUint64(b[8:], n)
}

// DecodeOverflow parses the overflow descriptor at the start of body and
// returns the rest.
func DecodeOverflow(body []byte) (key, n uint64, rest []byte, err error) {
	if len(body) < OverflowLen {
		return 0, 0, nil, ErrShort
	}
	return binary.LittleEndian.Uint64(body), binary.LittleEndian.Uint64(body[8:]), body[OverflowLen:], nil
}
