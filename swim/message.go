package swim

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind is a message's type on the wire. The values are wire constants:
// append new kinds at the end, never renumber.
type Kind uint8

// Message kinds.
const (
	// KindPing is a direct probe of the receiver (Target is the receiver).
	// The receiver answers with an Ack carrying the same Seq.
	KindPing Kind = 1
	// KindAck answers a Ping (Target is the member that answered) or,
	// sent by a helper, reports that Target answered the helper's ping on
	// behalf of the requester's PingReq with the requester's Seq.
	KindAck Kind = 2
	// KindPingReq asks the receiver to ping Target for the sender (an
	// indirect probe, SWIM's ping-req, CaRT's IREQ).
	KindPingReq Kind = 3
	// KindNack is a helper's report that Target did not answer within the
	// helper's ping timeout (Lifeguard's nack; DAOS has none).
	KindNack Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindPing:
		return "ping"
	case KindAck:
		return "ack"
	case KindPingReq:
		return "ping-req"
	case KindNack:
		return "nack"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Update is one piggybacked membership entry: a member's state as the
// sender knows it. Origin is the member that raised a suspicion (for a
// Suspect entry: the accuser, so that receivers can count independent
// confirmations) or declared a death (Dead); for Alive it is the member
// itself.
type Update struct {
	Member
	Origin ID
}

// Message is one SWIM message. Updates are piggybacked state entries, in
// DAOS's order: the state of Target first, then the sender's own, then the
// receiver's, then recent changes (see the package doc).
type Message struct {
	Kind    Kind
	Seq     uint32 // probe sequence number; an ack or nack echoes the request's
	Target  ID     // the member the message is about
	Updates []Update
}

// Wire layout (little-endian), version 1:
//
//	offset size field
//	0      1    version (1)
//	1      1    kind
//	2      2    number of updates n (at most MaxUpdates)
//	4      4    seq
//	8      4    target
//	12     17·n updates: id u32, origin u32, incarnation u64, state u8
//
// The message is exactly 12+17·n bytes. These are wire constants: append
// only.
const (
	wireVersion   = 1
	headerSize    = 12
	updateSize    = 17
	MaxUpdates    = 64                                 // most updates a message may carry
	MaxMessageLen = headerSize + MaxUpdates*updateSize // longest valid encoding
)

// Decoding errors. DecodeMessage returns a *DecodeError that matches one of
// these with errors.Is.
var (
	ErrShort    = errors.New("swim: message truncated")
	ErrVersion  = errors.New("swim: unknown message version")
	ErrKind     = errors.New("swim: unknown message kind")
	ErrTooMany  = errors.New("swim: too many updates")
	ErrState    = errors.New("swim: unknown member state")
	ErrTrailing = errors.New("swim: trailing bytes after message")
)

// DecodeError says what was wrong with an encoded message and where.
type DecodeError struct {
	Err    error // one of the Err* sentinels
	Offset int   // byte offset of the offending field
	Value  uint64
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("%v (offset %d, value %d)", e.Err, e.Offset, e.Value)
}

// Unwrap returns the sentinel.
func (e *DecodeError) Unwrap() error { return e.Err }

// Len is the encoded length of msg.
func (msg *Message) Len() int { return headerSize + updateSize*len(msg.Updates) }

// Append appends msg's encoding to b and returns the extended slice. A
// message with more than MaxUpdates updates is truncated to MaxUpdates (the
// machine never builds one).
func (msg *Message) Append(b []byte) []byte {
	ups := msg.Updates
	if len(ups) > MaxUpdates {
		ups = ups[:MaxUpdates]
	}
	b = append(b, wireVersion, byte(msg.Kind))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(ups)))
	b = binary.LittleEndian.AppendUint32(b, msg.Seq)
	b = binary.LittleEndian.AppendUint32(b, uint32(msg.Target))
	for i := range ups {
		u := &ups[i]
		b = binary.LittleEndian.AppendUint32(b, uint32(u.ID))
		b = binary.LittleEndian.AppendUint32(b, uint32(u.Origin))
		b = binary.LittleEndian.AppendUint64(b, u.Incarnation)
		b = append(b, byte(u.State))
	}
	return b
}

// DecodeMessage decodes b into into, reusing into.Updates' storage. The
// count is checked against MaxUpdates and the buffer length before anything
// is allocated. On error into is left in an unspecified state.
func DecodeMessage(b []byte, into *Message) error {
	if len(b) < headerSize {
		return &DecodeError{Err: ErrShort, Offset: len(b), Value: uint64(len(b))}
	}
	if b[0] != wireVersion {
		return &DecodeError{Err: ErrVersion, Offset: 0, Value: uint64(b[0])}
	}
	k := Kind(b[1])
	if k < KindPing || k > KindNack {
		return &DecodeError{Err: ErrKind, Offset: 1, Value: uint64(b[1])}
	}
	n := int(binary.LittleEndian.Uint16(b[2:]))
	if n > MaxUpdates {
		return &DecodeError{Err: ErrTooMany, Offset: 2, Value: uint64(n)}
	}
	want := headerSize + n*updateSize
	if len(b) < want {
		return &DecodeError{Err: ErrShort, Offset: len(b), Value: uint64(want)}
	}
	if len(b) > want {
		return &DecodeError{Err: ErrTrailing, Offset: want, Value: uint64(len(b) - want)}
	}
	into.Kind = k
	into.Seq = binary.LittleEndian.Uint32(b[4:])
	into.Target = ID(binary.LittleEndian.Uint32(b[8:]))
	into.Updates = into.Updates[:0]
	for i := range n {
		off := headerSize + i*updateSize
		p := b[off : off+updateSize]
		st := State(p[16])
		if st > Dead {
			return &DecodeError{Err: ErrState, Offset: off + 16, Value: uint64(st)}
		}
		into.Updates = append(into.Updates, Update{
			Member: Member{
				ID:          ID(binary.LittleEndian.Uint32(p[0:])),
				Incarnation: binary.LittleEndian.Uint64(p[8:]),
				State:       st,
			},
			Origin: ID(binary.LittleEndian.Uint32(p[4:])),
		})
	}
	return nil
}
