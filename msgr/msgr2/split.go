package msgr2

import (
	"encoding/binary"

	"github.com/ferrymsg/ferry/msg"
)

// BodySplit says how the crc-mode body of a four-segment MESSAGE frame
// divides around its data segment (segment 3), so that a reader can read
// the data straight into buffers of its choosing:
//
//	msgr2.1: head = header2 | le32 crc(header2) | front | middle
//	         data = segment 3
//	         tail = late_status | crc(front) | crc(middle) | crc(data)
//	msgr2.0: head = header2 | front | middle
//	         data = segment 3
//	         tail = late_flags | crc(header2) | crc(front) | crc(middle) | crc(data)
//
// Head + Data + Tail is the preamble's BodyLen.
type BodySplit struct {
	Head int // bytes before the data segment
	Data int // the data segment's length
	Tail int // bytes after the data segment: the epilogue
}

// SplitBody returns how the body that follows p divides around the data
// segment. ok is false unless p is a MESSAGE preamble with four segments
// (only those carry data; ParsePreamble guarantees the last one is not
// empty).
func (p *Preamble) SplitBody(rev1 bool) (s BodySplit, ok bool) {
	if p.Tag != TagMessage || p.NumSegments != MaxSegments {
		return BodySplit{}, false
	}
	s.Head = int(p.Segments[0].Len) + int(p.Segments[1].Len) + int(p.Segments[2].Len)
	s.Data = int(p.Segments[3].Len)
	if rev1 {
		if p.Segments[0].Len > 0 {
			s.Head += segmentCRCLen
		}
		s.Tail = EpilogueRev1Len
	} else {
		s.Tail = EpilogueRev0Len
	}
	return s, true
}

// ParseBodySplit is ParseBody for a body read in three parts (see
// BodySplit): head, the data segment as a list of buffers, and tail. It
// verifies the same CRCs in the same order, the data's computed across
// the buffers, and fails with the same errors (ErrTruncated if a part is
// not the length the split says). The returned segments 0 to 2 alias head;
// segment 3 is left nil: the data is the caller's buffers.
//
// In msgr2.1 segment 0's CRC is inline in head and is checked by
// ParseHead too; the CRCs of the front, middle and data are in tail.
func ParseBodySplit(p *Preamble, head []byte, data [][]byte, tail []byte, rev1 bool) (segs [MaxSegments][]byte, err error) {
	return parseBodySplit(p, head, data, tail, rev1, nil, false)
}

// parseBodySplit is ParseBodySplit; with dataCRC set, that is the data's
// CRC (computed by the caller as it read) instead of computing it here;
// with noDataCRC, the data's CRC is not checked at all.
func parseBodySplit(p *Preamble, head []byte, data [][]byte, tail []byte, rev1 bool, dataCRC *uint32, noDataCRC bool) (segs [MaxSegments][]byte, err error) {
	sp, ok := p.SplitBody(rev1)
	if !ok {
		return segs, errorf(ErrBadPreamble, p.Tag, "split body of a %d-segment %s frame", p.NumSegments, p.Tag)
	}
	if len(head) != sp.Head || len(tail) != sp.Tail {
		return segs, errorf(ErrTruncated, p.Tag, "split body: head %d tail %d bytes, want %d and %d", len(head), len(tail), sp.Head, sp.Tail)
	}
	if n := msg.Buffers(data).Len(); n != sp.Data {
		return segs, errorf(ErrTruncated, p.Tag, "split body: data of %d bytes, want %d", n, sp.Data)
	}
	out, err := splitHead(p, head, rev1)
	if err != nil {
		return segs, err
	}
	if err := checkEpilogue(p.Tag, tail, rev1, MaxSegments, skipSegment(p.Tag, noDataCRC), func(i int) uint32 {
		return segmentCRC(out[i], data, i, dataCRC)
	}); err != nil {
		return segs, err
	}
	return out, nil
}

// segmentCRC is the CRC of segment i: seg, or the data buffers for i = 3
// (*dataCRC if the caller computed it).
func segmentCRC(seg []byte, data [][]byte, i int, dataCRC *uint32) uint32 {
	if i == 3 {
		if dataCRC != nil {
			return *dataCRC
		}
		return msg.Buffers(data).CRC(segmentCRCSeed)
	}
	return msg.CRC32C(segmentCRCSeed, seg)
}

// splitHead cuts head (of the length SplitBody says) into segments 0 to 2
// and, in msgr2.1, verifies segment 0's inline CRC.
func splitHead(p *Preamble, head []byte, rev1 bool) (out [MaxSegments][]byte, err error) {
	off := 0
	take := func(n int) []byte {
		s := head[off : off+n : off+n]
		off += n
		return s
	}
	out[0] = take(int(p.Segments[0].Len))
	if rev1 && len(out[0]) > 0 {
		want := binary.LittleEndian.Uint32(take(segmentCRCLen))
		if got := msg.CRC32C(segmentCRCSeed, out[0]); got != want {
			return [MaxSegments][]byte{}, errorf(ErrSegmentCRC, p.Tag, "segment 0: got %#08x want %#08x", got, want)
		}
	}
	out[1] = take(int(p.Segments[1].Len))
	out[2] = take(int(p.Segments[2].Len))
	return out, nil
}

// MessagePeek is what the head of a MESSAGE body tells before its data is
// read (Engine.PeekMessage).
type MessagePeek struct {
	// Header is the header the delivered message will carry (Src from the
	// handshake).
	Header msg.Header
	// Flags are the footer flags from ceph_msg_header2.
	Flags uint8
	// Front and Middle alias the head passed to PeekMessage. Their CRCs
	// are in the epilogue and have not been checked yet.
	Front, Middle []byte
	// Dup is set for a message whose seq is not above InSeq: the engine
	// will drop it, so its data must not be written anywhere that
	// matters.
	Dup bool
}

// Split reports how the body the engine waits for divides around its data
// segment. ok is true only when the engine is ready and Need asks for the
// body of a MESSAGE frame with a data segment, in crc mode; the caller may
// then read the body in parts and pass them to FeedSplit instead of Feed.
// (In secure mode the body is sealed as one GCM message and must be read
// whole.)
func (e *Engine) Split() (s BodySplit, ok bool) {
	if e.state != stReady || !e.inFrame || e.rx != nil {
		return BodySplit{}, false
	}
	return e.pre.SplitBody(e.rev1)
}

// PeekMessage parses the head of the MESSAGE body the engine waits for
// (exactly Split().Head bytes): in msgr2.1 it verifies segment 0's inline
// CRC, then it decodes ceph_msg_header2 and reports the message's header,
// front and middle, and whether it is a duplicate that the engine will
// drop. It consumes nothing: the caller goes on with Feed (whole body) or
// FeedSplit (head, data, tail). Any error is fatal, as from Feed.
func (e *Engine) PeekMessage(head []byte) (MessagePeek, error) {
	sp, ok := e.Split()
	if !ok {
		return MessagePeek{}, e.fail(errorf(ErrProtocol, 0, "PeekMessage without a MESSAGE body to read"))
	}
	if len(head) != sp.Head {
		return MessagePeek{}, e.fail(errorf(ErrProtocol, TagMessage, "peeked %d bytes, head is %d", len(head), sp.Head))
	}
	segs, err := splitHead(&e.pre, head, e.rev1)
	if err != nil {
		return MessagePeek{}, e.fail(err)
	}
	h, err := ParseHeader2(segs[0])
	if err != nil {
		return MessagePeek{}, e.fail(err)
	}
	return MessagePeek{
		Header: e.msgHeader(&h),
		Flags:  h.Flags,
		Front:  segs[1],
		Middle: segs[2],
		Dup:    h.Seq <= e.inSeq,
	}, nil
}

// FeedSplit consumes the body of the MESSAGE frame that Split describes,
// read in three parts: head, data (buffers whose lengths sum to
// Split().Data) and tail. It verifies every CRC, the data's across the
// buffers (unless the session goes without data CRCs, see DataCRC), and
// returns the events Feed would return for the whole body,
// except that the message's Data is data itself (the buffers, not a
// copy); its Front and Middle alias head. A duplicate is dropped as by
// Feed. Any error is fatal to the connection.
func (e *Engine) FeedSplit(head []byte, data [][]byte, tail []byte) ([]Event, error) {
	return e.feedSplit(head, data, nil, tail, nil)
}

// SegmentCRCInit and UpdateSegmentCRC let a reader compute a data
// segment's CRC piece by piece as the pieces arrive, while they are still
// in the CPU's cache: start from SegmentCRCInit and fold in each piece in
// order; the result is SegmentCRC of the whole segment.
const SegmentCRCInit uint32 = segmentCRCSeed

// UpdateSegmentCRC folds p into a segment CRC begun with SegmentCRCInit.
func UpdateSegmentCRC(crc uint32, p []byte) uint32 { return msg.CRC32C(crc, p) }

// FeedSplitCRC is FeedSplit for a reader that computed the data
// segment's CRC as it read (dataCRC, see UpdateSegmentCRC): the engine
// compares dataCRC with the epilogue instead of reading the data again
// (and ignores it on a session without data CRCs, see DataCRC). Every
// other check, and every result, is FeedSplit's.
func (e *Engine) FeedSplitCRC(head []byte, data [][]byte, tail []byte, dataCRC uint32) ([]Event, error) {
	return e.feedSplit(head, data, nil, tail, &dataCRC)
}

// FeedBodyCRC is Feed for the body of the MESSAGE frame that Split
// describes, read whole into body, by a reader that computed the CRC of
// its data segment (body[Head:Head+Data]) as it read (dataCRC, see
// UpdateSegmentCRC). Every other check, and every result, is Feed's.
func (e *Engine) FeedBodyCRC(body []byte, dataCRC uint32) ([]Event, error) {
	sp, ok := e.Split()
	if !ok || len(body) != sp.Head+sp.Data+sp.Tail {
		// Closed, not a split body, or the wrong length: fails as
		// FeedSplit does (ErrTruncated for the length).
		return e.feedSplit(body, nil, nil, nil, nil)
	}
	d := sp.Head + sp.Data
	return e.feedSplit(body[:sp.Head:sp.Head], nil, body[sp.Head:d:d], body[d:], &dataCRC) // capped, as Feed's segments are
}

// feedSplit is FeedSplit with the data either as buffers (data) or one
// slice of the body (one), and its CRC optionally given.
func (e *Engine) feedSplit(head []byte, data [][]byte, one []byte, tail []byte, dataCRC *uint32) ([]Event, error) {
	e.events = e.events[:0]
	if e.state == stClosed {
		if e.err != nil {
			return nil, e.err
		}
		return nil, errorf(ErrProtocol, 0, "engine closed")
	}
	if _, ok := e.Split(); !ok {
		return nil, e.fail(errorf(ErrProtocol, 0, "FeedSplit without a MESSAGE body to read"))
	}
	e.inFrame = false
	pd := data // what the CRC and length checks read
	var d [1][]byte
	if one != nil {
		d[0] = one
		pd = d[:]
	}
	segs, err := parseBodySplit(&e.pre, head, pd, tail, e.rev1, dataCRC, e.noDataCRC)
	if err != nil {
		return nil, e.fail(err)
	}
	if one != nil {
		segs[3] = one // the message's data is the body's slice, as from Feed
	}
	if err := e.handleMessageData(segs, data); err != nil {
		return nil, e.fail(err)
	}
	return e.events, nil
}
