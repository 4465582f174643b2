// Package msg is ferry's message model: Ceph's Message with its header,
// footer and three payload segments, entity names and addresses, and
// priorities. It knows nothing of connections or wire protocols beyond the
// Ceph encodings of its own types.
package msg

import (
	"time"

	"github.com/ferrymsg/ferry/internal/crc32c"
)

// Priority orders messages on a connection's out queue and in the
// dispatch queue; higher is more urgent. Ceph's values (CEPH_MSG_PRIO_*).
type Priority uint16

// Message priorities.
const (
	PrioLow     Priority = 64
	PrioDefault Priority = 127
	PrioHigh    Priority = 196
	PrioHighest Priority = 255
)

// Footer flags (CEPH_MSG_FOOTER_*). Wire constants; append only.
const (
	FooterComplete uint8 = 1 << 0 // the message was sent whole
	FooterNoCRC    uint8 = 1 << 1 // the segment CRCs were not computed
	FooterSigned   uint8 = 1 << 2 // Sig holds a signature
)

// Header is what Ceph's ceph_msg_header carries, minus the lengths and CRC
// that the wire layer computes. msgr2 sends it as ceph_msg_header2 with the
// sender's entity taken from the handshake; msgr1 sends it as is.
type Header struct {
	Seq           uint64     // per-session sequence number, assigned on send (first is 1)
	Tid           uint64     // transaction id, chosen by the sender's upper layer
	Type          uint16     // message type (CEPH_MSG_* or a ferry type)
	Priority      Priority   // out-queue and dispatch priority
	Version       uint16     // encoding version of the front payload
	CompatVersion uint16     // oldest version that can decode it (0: unknown)
	DataOff       uint16     // sender's offset of the data within its page (alignment hint)
	Src           EntityName // sender, filled in on receive
	AckSeq        uint64     // msgr2: highest sequence number the sender has received
}

// Footer is what Ceph's ceph_msg_footer carries: msgr1 puts it on the
// wire after the message's segments. Over msgr2 the segments are
// protected by the frame's own CRCs (crc mode) or its GCM tag (secure
// mode), which the engine checks on receive; this struct is then left as
// the sender set it and is not filled in from the wire.
type Footer struct {
	FrontCRC  uint32
	MiddleCRC uint32
	DataCRC   uint32
	Sig       uint64
	Flags     uint8
}

// Connection is what a received message knows of the connection it came
// from. msgr.Conn implements it; this package does not depend on msgr.
type Connection interface {
	// PeerName is the peer's entity name.
	PeerName() EntityName
	// PeerAddrs are the peer's advertised addresses.
	PeerAddrs() AddrVec
	// Features is the feature mask negotiated with the peer.
	Features() uint64
	// Send queues m for the peer.
	Send(m *Message) error
}

// Message is one Ceph message (the seed's Message). Its payload is three
// segments, each a list of byte slices, so that large data is sent and
// received without being copied into one buffer.
//
// A Message belongs to one goroutine at a time: after Send, the sender must
// not modify it or its buffers until the connection is done with it (for a
// lossless session, until it is acknowledged).
type Message struct {
	Header Header
	Footer Footer

	Front  Buffers // "front": the encoded message body
	Middle Buffers // "middle": rarely used
	Data   Buffers // "data": bulk payload, alignment preserved where possible

	// RecvStamp is when the messenger started reading the message.
	RecvStamp time.Time
	// ThrottleStamp is when the message got its receive throttle budget.
	ThrottleStamp time.Time
	// RecvCompleteStamp is when the message was fully read.
	RecvCompleteStamp time.Time
	// DispatchStamp is when the messenger started dispatching it.
	DispatchStamp time.Time

	// Conn is the connection the message arrived on (nil for a message
	// being built for sending).
	Conn Connection

	// Release, when set by the receiver of the message, returns its
	// buffers to a pool. A dispatcher that is done with a message may call
	// Done; it must not touch the message afterwards.
	Release func(*Message)

	// segs backs Front, Middle and Data when each is a single buffer, so
	// that a received message costs one allocation, not four.
	segs [3][]byte

	// dataCRCAhead: Footer.DataCRC holds the data segment's CRC in the
	// form the messenger's frames carry, computed by the sender.
	dataCRCAhead bool

	// rxDataCRC is the data segment's CRC the receiving messenger
	// checked, if rxDataCRCSet.
	rxDataCRC    uint32
	rxDataCRCSet bool
}

// SetDataCRCAhead records the data segment's CRC, computed by the sender
// ahead of sending (msgr2.SegmentCRC of Data), so the connection's writer
// does not compute it: a sender that builds many large messages can take
// that work off the writer's path. Data must not change afterwards.
func (m *Message) SetDataCRCAhead(crc uint32) {
	m.Footer.DataCRC = crc
	m.dataCRCAhead = true
}

// DataCRCAhead returns the CRC SetDataCRCAhead recorded, if any.
func (m *Message) DataCRCAhead() (uint32, bool) { return m.Footer.DataCRC, m.dataCRCAhead }

// SetReceivedDataCRC records the CRC of Data (in SetDataCRCAhead's form)
// that the messenger computed and checked against the frame while it
// received the message. Messengers call it; applications read it with
// ReceivedDataCRC.
func (m *Message) SetReceivedDataCRC(crc uint32) {
	m.rxDataCRC, m.rxDataCRCSet = crc, true
}

// ReceivedDataCRC returns the CRC of Data that the messenger checked on
// receipt, if it recorded one: msgr2 in crc mode records it for data
// segments of 64 KiB and more. It describes Data as received; a
// dispatcher that sends the same Data buffers on unchanged may pass it
// to the new message's SetDataCRCAhead, saving the writer a pass over
// the data (an echo does).
func (m *Message) ReceivedDataCRC() (uint32, bool) { return m.rxDataCRC, m.rxDataCRCSet }

// SetSegments sets Front, Middle and Data to the given single buffers
// (an empty one gives an empty segment) without allocating.
func (m *Message) SetSegments(front, middle, data []byte) {
	m.segs = [3][]byte{front, middle, data}
	m.Front, m.Middle, m.Data = nil, nil, nil
	if len(front) > 0 {
		m.Front = m.segs[0:1:1]
	}
	if len(middle) > 0 {
		m.Middle = m.segs[1:2:2]
	}
	if len(data) > 0 {
		m.Data = m.segs[2:3:3]
	}
}

// Done releases the message's buffers if its producer pooled them. It is
// optional: a message that is never released is simply garbage collected.
func (m *Message) Done() {
	if r := m.Release; r != nil {
		m.Release = nil
		r(m)
	}
}

// New returns a message of the given type at default priority.
func New(typ uint16) *Message {
	return &Message{Header: Header{Type: typ, Priority: PrioDefault}}
}

// Len returns the total payload length of the three segments.
func (m *Message) Len() int { return m.Front.Len() + m.Middle.Len() + m.Data.Len() }

// Buffers is a segment held as a list of byte slices (a bufferlist).
type Buffers [][]byte

// Len returns the total length.
func (b Buffers) Len() int {
	n := 0
	for _, p := range b {
		n += len(p)
	}
	return n
}

// Bytes returns the contents as one slice, without copying if there is
// only one buffer.
func (b Buffers) Bytes() []byte {
	switch len(b) {
	case 0:
		return nil
	case 1:
		return b[0]
	}
	out := make([]byte, 0, b.Len())
	for _, p := range b {
		out = append(out, p...)
	}
	return out
}

// CopyTo copies the contents into dst, which must be at least Len bytes,
// and returns the number of bytes copied.
func (b Buffers) CopyTo(dst []byte) int {
	n := 0
	for _, p := range b {
		n += copy(dst[n:], p)
	}
	return n
}

// CRC32C is Ceph's ceph_crc32c(seed, p): the Castagnoli CRC update without
// the customary pre- and post-inversion. Large buffers are folded with
// 512-bit carry-less multiplies where the CPU has them (internal/crc32c).
func CRC32C(seed uint32, p []byte) uint32 {
	return ^crc32c.Update(^seed, p)
}

// CRC returns ceph_crc32c over the buffers in order.
func (b Buffers) CRC(seed uint32) uint32 {
	for _, p := range b {
		seed = CRC32C(seed, p)
	}
	return seed
}
