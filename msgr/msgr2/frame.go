// Package msgr2 implements Ceph's msgr2 wire protocol (msgr2.0 and
// msgr2.1 in crc mode, msgr2.1 in secure mode): the banner, frames
// (preamble, segments, epilogue; AES-128-GCM sealed frames, SecureTx and
// SecureRx), the control frame payloads, ceph_msg_header2, and the
// I/O-free protocol engine that drives a connection's handshake
// (authentication through package auth's interfaces, AUTH_SIGNATURE) and
// session.
//
// The codec does no I/O and allocates nothing on its own: Append functions
// append to a caller's buffer, and Parse functions return values that alias
// their input. Every length read from the wire is checked against Limits
// as soon as the preamble is parsed, before the caller allocates room for
// the body.
package msgr2

import (
	"encoding/binary"
	"slices"

	"github.com/ferrymsg/ferry/msg"
)

// Banner and frame layout. Wire constants; append only.
const (
	// BannerPrefix starts every msgr2 banner.
	BannerPrefix = "ceph v2\n"
	// BannerPrefixLen is the prefix plus the le16 payload length.
	BannerPrefixLen = len(BannerPrefix) + 2
	// BannerPayloadLen is the length of the banner payload ferry sends:
	// le64 supported and le64 required msgr2 features.
	BannerPayloadLen = 16
	// MaxBannerPayload is the largest banner payload ferry accepts.
	MaxBannerPayload = 4096
	// PreambleLen is the length of a frame preamble.
	PreambleLen = 32
	// MaxSegments is the number of segments a frame may have.
	MaxSegments = 4
	// EpilogueRev0Len is the msgr2.0 crc-mode epilogue: late flags and
	// four CRCs.
	EpilogueRev0Len = 17
	// EpilogueRev1Len is the msgr2.1 crc-mode epilogue: late status and
	// the CRCs of segments 1 to 3.
	EpilogueRev1Len = 13
	// SegmentAlign is the alignment a sender declares for every segment
	// but a message's data.
	SegmentAlign = 8
	// DataAlign is the alignment a sender declares for a message's data
	// segment (segment 3).
	DataAlign = 4096
)

// msgr2 banner features (CEPH_MSGR2_FEATURE_*). Wire constants; append only.
const (
	FeatureRevision1   uint64 = 1 << 0 // msgr2.1 frame layout
	FeatureCompression uint64 = 1 << 1 // on-wire compression (Quincy and later)

	// FeatureNoDataCRC is ferry's own (bits 56–63 are reserved for
	// ferry; Ceph defines bits 0 and 1 and ignores unknown supported
	// bits): a peer that sets it in its banner's supported mask
	// (Config.NoDataCRC) will leave the CRC of MESSAGE data segments out
	// (zero) and not check it, if the other side sets it too. Ceph sets
	// no such bit, so sessions with Ceph daemons always carry every CRC.
	// Every other CRC (preambles, control frames, message headers,
	// fronts and middles) is always checked.
	FeatureNoDataCRC uint64 = 1 << 56
)

// Epilogue late status (msgr2.1). Only the low nibble is significant, as
// in Ceph. Wire constants; append only.
const (
	LateStatusComplete byte = 0x0e
	LateStatusAborted  byte = 0x01
)

const (
	lateStatusMask     = 0x0f // the bits of late_status that Ceph checks
	lateFlagAborted    = 0x01 // msgr2.0 late_flags bit
	segmentCRCLen      = 4
	segmentCRCSeed     = 0xFFFFFFFF // seed of segment CRCs; also crc32c(-1, "")
	msgr1BannerPrefix  = "ceph v027"
	preambleCRCOffset  = PreambleLen - 4
	preambleRsvdOffset = 2 + MaxSegments*6
)

// Default limits (see Limits).
const (
	DefaultMaxControl = 64 << 10
	DefaultMaxSegment = 256 << 20
	DefaultMaxMessage = 256 << 20
	// DefaultMaxPreAuth bounds what a peer may send before it is
	// authenticated. Measured with ferry's cephx (TestEngineCephx): a
	// client receives 1119 bytes from a mon in secure mode (banner to
	// AUTH_SIGNATURE, the AUTH_DONE carrying AUTH, MON, OSD and MGR
	// tickets), a service 634 bytes from a client presenting an
	// authorizer; Ceph's own mon AUTH_DONE payload is 824 bytes. The
	// limit leaves room for long caps and more tickets.
	DefaultMaxPreAuth = 16 << 10
)

// AppendBanner appends the whole banner: the prefix, le16 payload length
// 16, and the supported and required msgr2 feature masks.
func AppendBanner(b []byte, supported, required uint64) []byte {
	b = append(b, BannerPrefix...)
	b = binary.LittleEndian.AppendUint16(b, BannerPayloadLen)
	b = binary.LittleEndian.AppendUint64(b, supported)
	return binary.LittleEndian.AppendUint64(b, required)
}

// ParseBannerPrefix parses the first BannerPrefixLen bytes of the peer's
// banner and returns the length of the payload that follows. It fails
// with ErrTruncated if p is shorter, ErrMsgr1Banner if the peer sent a
// msgr1 banner ("ceph v027"), ErrBadBanner for anything else that is not
// a msgr2 banner or a payload shorter than 16 bytes, and ErrTooLarge for a
// payload longer than MaxBannerPayload.
func ParseBannerPrefix(p []byte) (payloadLen int, err error) {
	if len(p) < BannerPrefixLen {
		return 0, errorf(ErrTruncated, 0, "banner prefix: %d of %d bytes", len(p), BannerPrefixLen)
	}
	if string(p[:len(msgr1BannerPrefix)]) == msgr1BannerPrefix {
		return 0, errorf(ErrMsgr1Banner, 0, "banner %q", p[:len(msgr1BannerPrefix)])
	}
	if string(p[:len(BannerPrefix)]) != BannerPrefix {
		return 0, errorf(ErrBadBanner, 0, "banner %q", p[:len(BannerPrefix)])
	}
	n := int(binary.LittleEndian.Uint16(p[len(BannerPrefix):]))
	if n < BannerPayloadLen {
		return 0, errorf(ErrBadBanner, 0, "banner payload of %d bytes, want at least %d", n, BannerPayloadLen)
	}
	if n > MaxBannerPayload {
		return 0, errorf(ErrTooLarge, 0, "banner payload of %d bytes exceeds %d", n, MaxBannerPayload)
	}
	return n, nil
}

// ParseBannerPayload returns the peer's supported and required msgr2
// features from the banner payload. It reads the first 16 bytes and
// ignores the rest (a newer peer may send more); a shorter payload fails
// with ErrTruncated.
func ParseBannerPayload(p []byte) (supported, required uint64, err error) {
	if len(p) < BannerPayloadLen {
		return 0, 0, errorf(ErrTruncated, 0, "banner payload: %d of %d bytes", len(p), BannerPayloadLen)
	}
	return binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:]), nil
}

// Limits bound what a peer may make us allocate. The zero value of each
// field means its default.
type Limits struct {
	MaxControl uint32 // largest control (non-MESSAGE) frame, sum of segments, in bytes; default 64 KiB
	MaxSegment uint32 // largest single MESSAGE segment, in bytes; default 256 MiB
	MaxMessage uint32 // largest MESSAGE frame (sum of segments), in bytes; default 256 MiB
	// MaxPreAuth bounds everything a peer sends before it is
	// authenticated (its AUTH_SIGNATURE verified): banner, HELLO and the
	// AUTH_* frames, as they come on the wire; default 16 KiB. It is
	// what an unauthenticated peer can make the engine hold (the
	// transcript that AUTH_SIGNATURE signs, and the frame being read).
	MaxPreAuth uint32
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.MaxControl == 0 {
		l.MaxControl = DefaultMaxControl
	}
	if l.MaxSegment == 0 {
		l.MaxSegment = DefaultMaxSegment
	}
	if l.MaxMessage == 0 {
		l.MaxMessage = DefaultMaxMessage
	}
	if l.MaxPreAuth == 0 {
		l.MaxPreAuth = DefaultMaxPreAuth
	}
	return l
}

// SegmentDesc describes one segment in a preamble: its length in bytes and
// the alignment the sender asks the receiver to give its buffer.
type SegmentDesc struct {
	Len   uint32
	Align uint16
}

// Preamble is the fixed 32-byte head of every frame: a tag, the number of
// segments (1 to 4) and their descriptions. Descriptions past NumSegments
// are zero.
type Preamble struct {
	Tag         Tag
	NumSegments int
	Segments    [MaxSegments]SegmentDesc
}

// Append appends the 32-byte preamble: tag, segment count, the four
// segment descriptions (unused ones zero), two zero bytes, and the
// crc32c (seed 0) of the first 28 bytes.
func (p *Preamble) Append(b []byte) []byte {
	b, w := grow(b, PreambleLen)
	p.put((*[PreambleLen]byte)(w))
	return b
}

// grow extends b by n bytes and returns it with the new n bytes. The new
// bytes are written in place: encoding into a local array would move the
// array to the heap, because the CRC function's argument escapes.
func grow(b []byte, n int) (ext, tail []byte) {
	l := len(b)
	b = slices.Grow(b, n)[:l+n]
	return b, b[l:]
}

// controlReserve is the payload and epilogue room AppendControlFrame
// makes with the preamble's: a KEEPALIVE2 or its ack and its CRC, or an
// ACK, fit.
const controlReserve = 32

func (p *Preamble) put(w *[PreambleLen]byte) {
	*w = [PreambleLen]byte{}
	w[0] = byte(p.Tag)
	w[1] = byte(p.NumSegments)
	for i := 0; i < p.NumSegments && i < MaxSegments; i++ {
		off := 2 + 6*i
		binary.LittleEndian.PutUint32(w[off:], p.Segments[i].Len)
		binary.LittleEndian.PutUint16(w[off+4:], p.Segments[i].Align)
	}
	binary.LittleEndian.PutUint32(w[preambleCRCOffset:], msg.CRC32C(0, w[:preambleCRCOffset]))
}

// ParsePreamble parses the first PreambleLen bytes of b (the rest is
// ignored) and checks everything that can be checked before the body is
// read, so that the caller allocates nothing for a frame it would reject:
//
//   - ErrTruncated: b is shorter than PreambleLen;
//   - ErrPreambleCRC: the CRC does not match (checked first, as Ceph does);
//   - ErrBadPreamble: segment count not in 1..4, a last segment that is
//     empty in a multi-segment frame, non-zero reserved bytes (the first is
//     the compression flag of later Ceph releases, which ferry never
//     negotiates), or a control frame with more than one segment;
//   - ErrUnknownTag: a tag that is not Known;
//   - ErrMalformed: a MESSAGE whose segment 0 is not Header2Len bytes;
//   - ErrTooLarge: a control frame longer than lim.MaxControl, a MESSAGE
//     segment longer than lim.MaxSegment or a MESSAGE longer than
//     lim.MaxMessage (zero limits take their defaults).
func ParsePreamble(b []byte, lim Limits) (Preamble, error) {
	if len(b) < PreambleLen {
		return Preamble{}, errorf(ErrTruncated, 0, "preamble: %d of %d bytes", len(b), PreambleLen)
	}
	b = b[:PreambleLen]
	got := msg.CRC32C(0, b[:preambleCRCOffset])
	if want := binary.LittleEndian.Uint32(b[preambleCRCOffset:]); got != want {
		return Preamble{}, errorf(ErrPreambleCRC, 0, "got %#08x want %#08x", got, want)
	}
	tag, n := Tag(b[0]), int(b[1])
	if n < 1 || n > MaxSegments {
		return Preamble{}, errorf(ErrBadPreamble, tag, "%d segments", n)
	}
	p := Preamble{Tag: tag, NumSegments: n}
	var total uint64
	for i := 0; i < n; i++ {
		off := 2 + 6*i
		p.Segments[i] = SegmentDesc{
			Len:   binary.LittleEndian.Uint32(b[off:]),
			Align: binary.LittleEndian.Uint16(b[off+4:]),
		}
		total += uint64(p.Segments[i].Len)
	}
	if n > 1 && p.Segments[n-1].Len == 0 {
		return Preamble{}, errorf(ErrBadPreamble, tag, "last of %d segments is empty", n)
	}
	if b[preambleRsvdOffset] != 0 || b[preambleRsvdOffset+1] != 0 {
		return Preamble{}, errorf(ErrBadPreamble, tag, "reserved bytes %#02x %#02x (compression is not negotiated)",
			b[preambleRsvdOffset], b[preambleRsvdOffset+1])
	}
	if !tag.Known() {
		return Preamble{}, errorf(ErrUnknownTag, tag, "")
	}
	lim = lim.WithDefaults()
	if tag != TagMessage {
		if n != 1 {
			return Preamble{}, errorf(ErrBadPreamble, tag, "control frame with %d segments", n)
		}
		if total > uint64(lim.MaxControl) {
			return Preamble{}, errorf(ErrTooLarge, tag, "%d bytes exceeds limit %d", total, lim.MaxControl)
		}
		return p, nil
	}
	if p.Segments[0].Len != Header2Len {
		return Preamble{}, errorf(ErrMalformed, tag, "header segment of %d bytes, want %d", p.Segments[0].Len, Header2Len)
	}
	for i := 0; i < n; i++ {
		if p.Segments[i].Len > lim.MaxSegment {
			return Preamble{}, errorf(ErrTooLarge, tag, "segment %d: %d bytes exceeds limit %d", i, p.Segments[i].Len, lim.MaxSegment)
		}
	}
	if total > uint64(lim.MaxMessage) {
		return Preamble{}, errorf(ErrTooLarge, tag, "%d bytes exceeds limit %d", total, lim.MaxMessage)
	}
	return p, nil
}

// PayloadLen returns the sum of the segment lengths.
func (p *Preamble) PayloadLen() int {
	n := 0
	for i := 0; i < p.NumSegments && i < MaxSegments; i++ {
		n += int(p.Segments[i].Len)
	}
	return n
}

// BodyLen returns the number of bytes that follow the preamble in crc
// mode. msgr2.1: segment 0, its le32 CRC if it is not empty, then, only if
// there is more than one segment, segments 1 to n-1 and a 13-byte
// epilogue. msgr2.0: all segments and a 17-byte epilogue.
func (p *Preamble) BodyLen(rev1 bool) int {
	if !rev1 {
		return p.PayloadLen() + EpilogueRev0Len
	}
	n := int(p.Segments[0].Len)
	if n > 0 {
		n += segmentCRCLen
	}
	if p.NumSegments > 1 {
		for i := 1; i < p.NumSegments && i < MaxSegments; i++ {
			n += int(p.Segments[i].Len)
		}
		n += EpilogueRev1Len
	}
	return n
}

// ParseBody splits a crc-mode frame body (the BodyLen(rev1) bytes after the
// preamble p) into its segments and verifies all their CRCs (the data's
// too: FeatureNoDataCRC is the engine's business) and the
// epilogue's late status. The returned segments alias body; segments past
// p.NumSegments are nil, declared but empty ones are empty and non-nil.
//
// It fails with ErrTruncated if len(body) != p.BodyLen(rev1),
// ErrSegmentCRC on a CRC mismatch, ErrAborted if the sender marked the
// frame aborted (the caller drops the frame and goes on), and ErrProtocol
// for a msgr2.1 late status that is neither complete nor aborted.
//
// To decode a MESSAGE, pass segs[0] to ParseHeader2: segment 0 must be
// exactly Header2Len bytes (ParsePreamble already checks this; ParseHeader2
// fails with ErrMalformed otherwise). Segments 1, 2 and 3 are the front,
// middle and data.
func ParseBody(p *Preamble, body []byte, rev1 bool) (segs [MaxSegments][]byte, err error) {
	return parseBody(p, body, rev1, false)
}

// parseBody is ParseBody; with noDataCRC, a MESSAGE's data segment CRC is
// not checked (FeatureNoDataCRC).
func parseBody(p *Preamble, body []byte, rev1, noDataCRC bool) (segs [MaxSegments][]byte, err error) {
	n := p.NumSegments
	if n < 1 || n > MaxSegments {
		return segs, errorf(ErrBadPreamble, p.Tag, "%d segments", n)
	}
	if want := p.BodyLen(rev1); len(body) != want {
		return segs, errorf(ErrTruncated, p.Tag, "body of %d bytes, want %d", len(body), want)
	}
	off := 0
	take := func(n int) []byte {
		s := body[off : off+n : off+n]
		off += n
		return s
	}
	var out [MaxSegments][]byte
	if rev1 {
		out[0] = take(int(p.Segments[0].Len))
		if len(out[0]) > 0 {
			want := binary.LittleEndian.Uint32(take(segmentCRCLen))
			if got := msg.CRC32C(segmentCRCSeed, out[0]); got != want {
				return segs, errorf(ErrSegmentCRC, p.Tag, "segment 0: got %#08x want %#08x", got, want)
			}
		}
		if n == 1 {
			return out, nil
		}
		for i := 1; i < n; i++ {
			out[i] = take(int(p.Segments[i].Len))
		}
		if err := checkEpilogue(p.Tag, take(EpilogueRev1Len), true, n, skipSegment(p.Tag, noDataCRC), func(i int) uint32 {
			return msg.CRC32C(segmentCRCSeed, out[i])
		}); err != nil {
			return segs, err
		}
		return out, nil
	}
	for i := 0; i < n; i++ {
		out[i] = take(int(p.Segments[i].Len))
	}
	if err := checkEpilogue(p.Tag, take(EpilogueRev0Len), false, n, skipSegment(p.Tag, noDataCRC), func(i int) uint32 {
		return msg.CRC32C(segmentCRCSeed, out[i])
	}); err != nil {
		return segs, err
	}
	return out, nil
}

// checkEpilogue verifies the CRCs that the epilogue ep of a frame with n
// segments carries — of segments 1 to n-1 in msgr2.1 (segment 0's is
// inline), of all n in msgr2.0 — against crc(i), then its late status
// (msgr2.1) or late flags (msgr2.0). Segment skip's CRC (if skip >= 0) is
// neither computed nor checked.
func checkEpilogue(tag Tag, ep []byte, rev1 bool, n, skip int, crc func(i int) uint32) error {
	first := 0
	if rev1 {
		first = 1
	}
	for i := first; i < n; i++ {
		if i == skip {
			continue
		}
		want := binary.LittleEndian.Uint32(ep[1+4*(i-first):])
		if got := crc(i); got != want {
			return errorf(ErrSegmentCRC, tag, "segment %d: got %#08x want %#08x", i, got, want)
		}
	}
	if rev1 {
		switch ep[0] & lateStatusMask {
		case LateStatusComplete:
			return nil
		case LateStatusAborted:
			return errorf(ErrAborted, tag, "late status %#02x", ep[0])
		}
		return errorf(ErrProtocol, tag, "bad late status %#02x", ep[0])
	}
	if ep[0]&lateFlagAborted != 0 {
		return errorf(ErrAborted, tag, "late flags %#02x", ep[0])
	}
	return nil
}

// skipSegment is the segment whose CRC is not checked: a MESSAGE's data
// (segment 3) on a session without data CRCs, else none (-1).
func skipSegment(tag Tag, noDataCRC bool) int {
	if noDataCRC && tag == TagMessage {
		return 3
	}
	return -1
}

// segmentAlign returns the alignment a sender declares for segment i of a
// frame with the given tag.
func segmentAlign(tag Tag, i int) uint16 {
	if tag == TagMessage && i == 3 {
		return DataAlign
	}
	return SegmentAlign
}

// AppendFrame appends a whole crc-mode frame with the given segments (at
// most MaxSegments; it panics on more, a programming error). Trailing
// empty segments are dropped, but at least one segment is kept. Segments
// declare alignment 8, except a MESSAGE's segment 3 (data), which declares
// DataAlign.
func AppendFrame(b []byte, tag Tag, rev1 bool, segs ...[]byte) []byte {
	if len(segs) > MaxSegments {
		panic("msgr2: AppendFrame with more than 4 segments")
	}
	n := 1
	for i := len(segs) - 1; i > 0; i-- {
		if len(segs[i]) > 0 {
			n = i + 1
			break
		}
	}
	seg := func(i int) []byte {
		if i < len(segs) {
			return segs[i]
		}
		return nil
	}
	p := Preamble{Tag: tag, NumSegments: n}
	var crcs [MaxSegments]uint32
	for i := 0; i < n; i++ {
		p.Segments[i] = SegmentDesc{Len: uint32(len(seg(i))), Align: segmentAlign(tag, i)}
		crcs[i] = msg.CRC32C(segmentCRCSeed, seg(i))
	}
	b = p.Append(b)
	if rev1 {
		if s := seg(0); len(s) > 0 {
			b = append(b, s...)
			b = binary.LittleEndian.AppendUint32(b, crcs[0])
		}
		if n == 1 {
			return b
		}
		for i := 1; i < n; i++ {
			b = append(b, segs[i]...)
		}
		return appendEpilogue(b, true, &crcs)
	}
	for i := 0; i < n; i++ {
		b = append(b, seg(i)...)
	}
	return appendEpilogue(b, false, &crcs)
}

// appendEpilogue appends the crc-mode epilogue of a complete frame:
// msgr2.1, late status complete and the CRCs of segments 1 to 3; msgr2.0,
// late flags 0 and the CRCs of segments 0 to 3. crcs holds 0 for unused
// segments.
func appendEpilogue(b []byte, rev1 bool, crcs *[MaxSegments]uint32) []byte {
	first := 0
	if rev1 {
		b = append(b, LateStatusComplete)
		first = 1
	} else {
		b = append(b, 0)
	}
	for i := first; i < MaxSegments; i++ {
		b = binary.LittleEndian.AppendUint32(b, crcs[i])
	}
	return b
}

// ControlFrame is implemented by every control frame payload type (Hello,
// AuthRequest, ...): its tag and its payload encoding.
type ControlFrame interface {
	Tag() Tag
	Append(b []byte) []byte
}

// AppendControlFrame appends a whole single-segment crc-mode frame carrying
// f, encoding the payload in place (no intermediate buffer).
func AppendControlFrame(b []byte, rev1 bool, f ControlFrame) []byte {
	start := len(b)
	// Room for the preamble, a small payload and its CRC at once: an
	// idle connection's writer has given its buffer back (msgr's
	// trimWriteState), and each keepalive would otherwise grow a new one
	// three times.
	b = slices.Grow(b, PreambleLen+controlReserve)
	b, _ = grow(b, PreambleLen)
	b = f.Append(b)
	payload := b[start+PreambleLen:]
	p := Preamble{Tag: f.Tag(), NumSegments: 1}
	p.Segments[0] = SegmentDesc{Len: uint32(len(payload)), Align: SegmentAlign}
	p.put((*[PreambleLen]byte)(b[start : start+PreambleLen]))
	var crcs [MaxSegments]uint32
	crcs[0] = msg.CRC32C(segmentCRCSeed, payload)
	if !rev1 {
		return appendEpilogue(b, false, &crcs)
	}
	if len(payload) > 0 {
		b = binary.LittleEndian.AppendUint32(b, crcs[0])
	}
	return b
}
