package msgr2

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"slices"

	"github.com/ferrymsg/ferry/msg"
)

// Secure mode (msgr2.1, rev1 only): every frame is sealed with AES-128-GCM
// in up to three GCM operations, each with its own 16-byte tag and the
// next nonce of its direction:
//
//  1. always: the preamble (32 bytes) and the inline area (the first 48
//     bytes of segment 0 padded to 16, then zeros): 96 bytes on the wire;
//  2. if segment 0 padded is longer than 48 bytes: the rest of it;
//  3. if the frame has more than one segment: segments 1 to 3, each padded
//     to 16, then the 16-byte epilogue (late status, 15 zeros).
//
// The preamble carries the unpadded lengths. There is no AAD. The key is
// the connection secret's first 16 bytes, the nonces its next two 12-byte
// pieces (the client sends with the second and receives with the first;
// the server the other way round). A nonce is le32 fixed | le64 counter;
// every GCM operation takes the current nonce and then increments the
// counter. A sender whose counter comes back to its initial value refuses
// to go on (ErrNonceExhausted).

// Secure mode layout. Wire constants; append only.
const (
	// SecurePreambleLen is what a secure frame's first GCM operation
	// takes on the wire: preamble, inline area and tag.
	SecurePreambleLen = PreambleLen + secureInline + gcmTagLen
	// MinConnectionSecret is the shortest connection secret secure mode
	// can derive its key and nonces from.
	MinConnectionSecret = 40

	secureInline      = 48
	secureAlign       = 16
	gcmTagLen         = 16
	gcmNonceLen       = 12
	secureEpilogueLen = 16
	secureKeyLen      = 16
)

func padded(n int) int { return (n + secureAlign - 1) &^ (secureAlign - 1) }

// secureDir is one direction's cipher and nonce.
type secureDir struct {
	aead      cipher.AEAD
	nonce     [gcmNonceLen]byte
	initial   [gcmNonceLen]byte
	cur       [gcmNonceLen]byte // the nonce being used (take's result, kept here so as not to allocate)
	usedFirst bool              // the initial nonce has been used
}

func newSecureDir(key, nonce []byte) (*secureDir, error) {
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, &Error{Err: ErrBadAuthMethod, Detail: "secure mode key", Cause: err}
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, &Error{Err: ErrBadAuthMethod, Detail: "secure mode cipher", Cause: err}
	}
	d := &secureDir{aead: aead}
	copy(d.nonce[:], nonce)
	d.initial = d.nonce
	return d, nil
}

// take returns the nonce for the next GCM operation and advances the
// counter. For a sender it fails once the counter has wrapped back to the
// initial nonce.
func (d *secureDir) take(tx bool) ([]byte, error) {
	if d.nonce == d.initial {
		if d.usedFirst && tx {
			return nil, errorf(ErrNonceExhausted, 0, "out of nonces")
		}
		d.usedFirst = true
	}
	d.cur = d.nonce
	binary.LittleEndian.PutUint64(d.nonce[4:], binary.LittleEndian.Uint64(d.nonce[4:])+1)
	return d.cur[:], nil
}

// secureKeys derives one direction's key and nonces from secret: the
// receive nonce is secret[16:28] for the client, secret[28:40] for the
// server, and the send nonce the other.
func secureKeys(secret []byte, role Role) (key, rx, tx []byte, err error) {
	if len(secret) < MinConnectionSecret {
		return nil, nil, nil, errorf(ErrBadAuthMethod, 0, "connection secret of %d bytes; secure mode needs %d", len(secret), MinConnectionSecret)
	}
	key = secret[:secureKeyLen]
	a := secret[16:28]
	b := secret[28:40]
	if role == Server {
		return key, b, a, nil
	}
	return key, a, b, nil
}

// SecureTx seals the frames one side sends in secure mode. It is not safe
// for concurrent use: its nonce must follow the order of the wire.
type SecureTx struct {
	d       *secureDir
	scratch [secureInline]byte
}

// SecureRx opens the frames one side receives in secure mode. It is not
// safe for concurrent use.
type SecureRx struct {
	d *secureDir
	// inline is where an Engine keeps the first segment's inline bytes
	// between a frame's preamble and its body (OpenPreamble, OpenBody):
	// here rather than in the Engine, which crc-mode connections keep
	// without it.
	inline [secureInline]byte
}

// NewSecure returns the sealer and opener for a connection whose role is
// role (Client: the side that connected) from its connection secret (at
// least MinConnectionSecret bytes).
func NewSecure(secret []byte, role Role) (*SecureTx, *SecureRx, error) {
	key, rxn, txn, err := secureKeys(secret, role)
	if err != nil {
		return nil, nil, err
	}
	td, err := newSecureDir(key, txn)
	if err != nil {
		return nil, nil, err
	}
	rd, err := newSecureDir(key, rxn)
	if err != nil {
		return nil, nil, err
	}
	return &SecureTx{d: td}, &SecureRx{d: rd}, nil
}

// seal seals b[start:] in place with the next nonce, appending the tag.
func (t *SecureTx) seal(b []byte, start int) ([]byte, error) {
	nonce, err := t.d.take(true)
	if err != nil {
		return b[:start], err
	}
	b = slices.Grow(b, gcmTagLen)
	out := t.d.aead.Seal(b[start:start], nonce, b[start:], nil)
	return b[:start+len(out)], nil
}

// zeros appends n zero bytes.
func zeros(b []byte, n int) []byte {
	b, w := grow(b, n)
	clear(w)
	return b
}

// AppendFrame appends a sealed frame with segment 0 seg0 and segments 1
// to 3 rest (each made of buffers; trailing empty segments are dropped).
// Segments declare the same alignments as in crc mode. It fails with
// ErrNonceExhausted, leaving b as it was.
func (t *SecureTx) AppendFrame(b []byte, tag Tag, seg0 []byte, rest ...msg.Buffers) ([]byte, error) {
	if len(rest) > MaxSegments-1 {
		panic("msgr2: SecureTx.AppendFrame with more than 4 segments")
	}
	orig := len(b)
	n := 1
	for i := len(rest) - 1; i >= 0; i-- {
		if rest[i].Len() > 0 {
			n = i + 2
			break
		}
	}
	p := Preamble{Tag: tag, NumSegments: n}
	p.Segments[0] = SegmentDesc{Len: uint32(len(seg0)), Align: segmentAlign(tag, 0)}
	total := padded(len(seg0))
	for i := 1; i < n; i++ {
		l := rest[i-1].Len()
		p.Segments[i] = SegmentDesc{Len: uint32(l), Align: segmentAlign(tag, i)}
		total += padded(l)
	}
	b = slices.Grow(b, SecurePreambleLen+total+2*gcmTagLen+secureEpilogueLen+gcmTagLen)
	// Operation 1: preamble and inline area.
	start := len(b)
	b = p.Append(b)
	in := min(len(seg0), secureInline)
	b = append(b, seg0[:in]...)
	b = zeros(b, secureInline-in)
	b, err := t.seal(b, start)
	if err != nil {
		return b[:orig], err
	}
	// Operation 2: the rest of segment 0.
	if pad0 := padded(len(seg0)); pad0 > secureInline {
		start = len(b)
		b = append(b, seg0[secureInline:]...)
		b = zeros(b, pad0-len(seg0))
		if b, err = t.seal(b, start); err != nil {
			return b[:orig], err
		}
	}
	if n == 1 {
		return b, nil
	}
	// Operation 3: segments 1 to n-1 and the epilogue.
	start = len(b)
	for i := 1; i < n; i++ {
		seg := rest[i-1]
		for _, q := range seg {
			b = append(b, q...)
		}
		b = zeros(b, padded(seg.Len())-seg.Len())
	}
	b = append(b, LateStatusComplete)
	b = zeros(b, secureEpilogueLen-1)
	if b, err = t.seal(b, start); err != nil {
		return b[:orig], err
	}
	return b, nil
}

// AppendControl appends the sealed frame carrying control payload f.
func (t *SecureTx) AppendControl(b []byte, f ControlFrame) ([]byte, error) {
	return t.AppendFrame(b, f.Tag(), f.Append(t.scratch[:0]))
}

// AppendMessage appends the sealed MESSAGE frame of header h and the
// message's segments. This copies the data once (into b, which is then
// encrypted in place).
func (t *SecureTx) AppendMessage(b []byte, h *Header2, front, middle, data msg.Buffers) ([]byte, error) {
	hb := h.Append(t.scratch[:0])
	return t.AppendFrame(b, TagMessage, hb, front, middle, data)
}

// BodyLen returns how many bytes follow the first SecurePreambleLen bytes
// of a secure frame with preamble p: the rest of segment 0 with its tag,
// if segment 0 does not fit the inline area, and, if the frame has more
// than one segment, segments 1 to 3 padded, the epilogue and its tag.
func (p *Preamble) SecureBodyLen() int {
	n := 0
	if pad0 := padded(int(p.Segments[0].Len)); pad0 > secureInline {
		n += pad0 - secureInline + gcmTagLen
	}
	if p.NumSegments > 1 {
		for i := 1; i < p.NumSegments && i < MaxSegments; i++ {
			n += padded(int(p.Segments[i].Len))
		}
		n += secureEpilogueLen + gcmTagLen
	}
	return n
}

// OpenPreamble opens the first SecurePreambleLen bytes of a secure frame
// in place (b is overwritten with the plaintext) and parses the preamble
// as ParsePreamble does, with the same limits. inline receives the
// inline area (the first bytes of segment 0). A tag that does not verify
// (tampered, replayed, reordered or truncated input, or a wrong key)
// fails with ErrDecrypt.
func (r *SecureRx) OpenPreamble(b []byte, lim Limits, inline *[secureInline]byte) (Preamble, error) {
	if len(b) != SecurePreambleLen {
		return Preamble{}, errorf(ErrTruncated, 0, "secure preamble: %d of %d bytes", len(b), SecurePreambleLen)
	}
	nonce, _ := r.d.take(false)
	if _, err := r.d.aead.Open(b[:0], nonce, b, nil); err != nil {
		return Preamble{}, errorf(ErrDecrypt, 0, "preamble: %v", err)
	}
	p, err := ParsePreamble(b[:PreambleLen], lim)
	if err != nil {
		return Preamble{}, err
	}
	copy(inline[:], b[PreambleLen:PreambleLen+secureInline])
	return p, nil
}

// OpenBody opens the body of a secure frame (p.SecureBodyLen() bytes) in
// place and returns its segments. Segment 0 is inline[:len] if it fits
// the inline area, else a new buffer; segments 1 to 3 alias body.
// Segments past p.NumSegments are nil. It fails with ErrTruncated if body
// has the wrong length, ErrDecrypt if a tag does not verify, ErrAborted
// or ErrProtocol for an epilogue that is not complete.
func (r *SecureRx) OpenBody(p *Preamble, inline []byte, body []byte) (segs [MaxSegments][]byte, err error) {
	if want := p.SecureBodyLen(); len(body) != want {
		return segs, errorf(ErrTruncated, p.Tag, "secure body of %d bytes, want %d", len(body), want)
	}
	l0 := int(p.Segments[0].Len)
	off := 0
	if pad0 := padded(l0); pad0 > secureInline {
		k := pad0 - secureInline + gcmTagLen
		nonce, _ := r.d.take(false)
		rem, err := r.d.aead.Open(body[:0], nonce, body[:k], nil)
		if err != nil {
			return segs, errorf(ErrDecrypt, p.Tag, "segment 0: %v", err)
		}
		s0 := make([]byte, l0)
		copy(s0, inline[:secureInline])
		copy(s0[secureInline:], rem[:l0-secureInline])
		segs[0] = s0
		off = k
	} else {
		segs[0] = inline[:l0:l0]
	}
	if p.NumSegments == 1 {
		return segs, nil
	}
	nonce, _ := r.d.take(false)
	tail, err := r.d.aead.Open(body[off:off], nonce, body[off:], nil)
	if err != nil {
		return [MaxSegments][]byte{}, errorf(ErrDecrypt, p.Tag, "segments: %v", err)
	}
	pos := 0
	for i := 1; i < p.NumSegments; i++ {
		l := int(p.Segments[i].Len)
		segs[i] = tail[pos : pos+l : pos+l]
		pos += padded(l)
	}
	switch tail[pos] & lateStatusMask {
	case LateStatusComplete:
		return segs, nil
	case LateStatusAborted:
		return [MaxSegments][]byte{}, errorf(ErrAborted, p.Tag, "late status %#02x", tail[pos])
	}
	return [MaxSegments][]byte{}, errorf(ErrProtocol, p.Tag, "bad late status %#02x", tail[pos])
}
