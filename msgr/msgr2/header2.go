package msgr2

import (
	"encoding/binary"

	"github.com/ferrymsg/ferry/msg"
)

// Header2Len is the length of ceph_msg_header2 on the wire (packed).
const Header2Len = 41

// Header2 is ceph_msg_header2, segment 0 of a MESSAGE frame. The sender's
// entity name is not in it: it comes from the handshake. Fields are in
// wire order.
type Header2 struct {
	Seq               uint64
	Tid               uint64
	Type              uint16
	Priority          uint16
	Version           uint16
	DataPrePaddingLen uint32
	DataOff           uint16
	AckSeq            uint64
	Flags             uint8 // footer flags; senders use msg.FooterComplete|msg.FooterNoCRC
	CompatVersion     uint16
	Reserved          uint16
}

// Append appends the 41-byte encoding of h.
func (h *Header2) Append(b []byte) []byte {
	b, w := grow(b, Header2Len)
	h.put((*[Header2Len]byte)(w))
	return b
}

func (h *Header2) put(w *[Header2Len]byte) {
	le := binary.LittleEndian
	le.PutUint64(w[0:], h.Seq)
	le.PutUint64(w[8:], h.Tid)
	le.PutUint16(w[16:], h.Type)
	le.PutUint16(w[18:], h.Priority)
	le.PutUint16(w[20:], h.Version)
	le.PutUint32(w[22:], h.DataPrePaddingLen)
	le.PutUint16(w[26:], h.DataOff)
	le.PutUint64(w[28:], h.AckSeq)
	w[36] = h.Flags
	le.PutUint16(w[37:], h.CompatVersion)
	le.PutUint16(w[39:], h.Reserved)
}

// ParseHeader2 decodes a ceph_msg_header2. b must be exactly Header2Len
// bytes (segment 0 of a MESSAGE frame); anything else fails with
// ErrMalformed.
func ParseHeader2(b []byte) (Header2, error) {
	if len(b) != Header2Len {
		return Header2{}, errorf(ErrMalformed, TagMessage, "header segment of %d bytes, want %d", len(b), Header2Len)
	}
	le := binary.LittleEndian
	return Header2{
		Seq:               le.Uint64(b[0:]),
		Tid:               le.Uint64(b[8:]),
		Type:              le.Uint16(b[16:]),
		Priority:          le.Uint16(b[18:]),
		Version:           le.Uint16(b[20:]),
		DataPrePaddingLen: le.Uint32(b[22:]),
		DataOff:           le.Uint16(b[26:]),
		AckSeq:            le.Uint64(b[28:]),
		Flags:             b[36],
		CompatVersion:     le.Uint16(b[37:]),
		Reserved:          le.Uint16(b[39:]),
	}, nil
}

// MessageFrame encodes one MESSAGE frame in crc mode without copying Data:
// the caller appends the head, then writes Data's buffers itself (copying
// small ones into the same buffer or handing large ones to writev), then
// appends the tail (the epilogue; and nothing at all when the frame has
// only one segment). CRCs of all segments are computed by these calls.
//
// Call AppendHead, then AppendTail, without changing the fields in
// between. A MessageFrame may be reused for the next message. It is not
// safe for concurrent use.
type MessageFrame struct {
	Header Header2
	Front  msg.Buffers
	Middle msg.Buffers
	Data   msg.Buffers
	// DataCRC, when DataCRCSet, is Data's segment CRC computed ahead
	// (SegmentCRC), so that encoding does not compute it again.
	DataCRC    uint32
	DataCRCSet bool

	pre   Preamble
	crcs  [MaxSegments]uint32
	ready bool // pre and crcs[0..2] were computed by AppendHead
}

// preamble computes the frame's preamble from the segment lengths.
func (f *MessageFrame) preamble() Preamble {
	lens := [MaxSegments]int{Header2Len, f.Front.Len(), f.Middle.Len(), f.Data.Len()}
	p := Preamble{Tag: TagMessage, NumSegments: 1}
	for i := MaxSegments - 1; i > 0; i-- {
		if lens[i] > 0 {
			p.NumSegments = i + 1
			break
		}
	}
	for i := 0; i < p.NumSegments; i++ {
		p.Segments[i] = SegmentDesc{Len: uint32(lens[i]), Align: segmentAlign(TagMessage, i)}
	}
	return p
}

// WireLen returns the number of bytes the frame takes on the wire: head,
// data and tail.
func (f *MessageFrame) WireLen(rev1 bool) int {
	p := f.preamble()
	return PreambleLen + p.BodyLen(rev1)
}

// AppendHead appends the preamble, the header2 segment (followed by its
// CRC in msgr2.1), the front and the middle. The caller then writes the
// bytes of Data, and then AppendTail.
func (f *MessageFrame) AppendHead(b []byte, rev1 bool) []byte {
	f.pre = f.preamble()
	f.crcs = [MaxSegments]uint32{}
	b = f.pre.Append(b)
	hs := len(b)
	b = f.Header.Append(b)
	f.crcs[0] = msg.CRC32C(segmentCRCSeed, b[hs:])
	if rev1 {
		b = binary.LittleEndian.AppendUint32(b, f.crcs[0])
	}
	if f.pre.NumSegments > 1 {
		for _, p := range f.Front {
			b = append(b, p...)
		}
		f.crcs[1] = f.Front.CRC(segmentCRCSeed)
	}
	if f.pre.NumSegments > 2 {
		for _, p := range f.Middle {
			b = append(b, p...)
		}
		f.crcs[2] = f.Middle.CRC(segmentCRCSeed)
	}
	f.ready = true
	return b
}

// AppendTail appends the epilogue that follows the data. msgr2.1: nothing
// if the frame has only the header segment; otherwise late status
// complete (0x0e) and the CRCs of segments 1 to 3 (a declared but empty
// segment has CRC 0xFFFFFFFF, an undeclared one 0). msgr2.0: late flags 0
// and the CRCs of segments 0 to 3.
func (f *MessageFrame) AppendTail(b []byte, rev1 bool) []byte {
	if !f.ready {
		// AppendHead was not called: compute what it would have.
		f.pre = f.preamble()
		f.crcs = [MaxSegments]uint32{}
		// Encode the header past the end of b to take its CRC.
		h := f.Header.Append(b)
		f.crcs[0] = msg.CRC32C(segmentCRCSeed, h[len(b):])
		if f.pre.NumSegments > 1 {
			f.crcs[1] = f.Front.CRC(segmentCRCSeed)
		}
		if f.pre.NumSegments > 2 {
			f.crcs[2] = f.Middle.CRC(segmentCRCSeed)
		}
	}
	f.ready = false
	if f.pre.NumSegments > 3 {
		if f.DataCRCSet {
			f.crcs[3] = f.DataCRC
		} else {
			f.crcs[3] = f.Data.CRC(segmentCRCSeed)
		}
	}
	if rev1 && f.pre.NumSegments == 1 {
		return b
	}
	return appendEpilogue(b, rev1, &f.crcs)
}

// SegmentCRC returns the CRC a frame carries for a segment made of bufs.
func SegmentCRC(bufs msg.Buffers) uint32 { return bufs.CRC(segmentCRCSeed) }
