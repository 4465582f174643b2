package msgr2

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

func TestCRC32CVector(t *testing.T) {
	// src/test/common/test_crc32c.cc
	if got := msg.CRC32C(0, []byte("foo bar baz")); got != 4119623852 {
		t.Fatalf("crc32c(0, foo bar baz) = %d", got)
	}
	if got := msg.CRC32C(0xFFFFFFFF, nil); got != 0xFFFFFFFF {
		t.Fatalf("crc32c(-1, \"\") = %#x", got)
	}
}

func TestTagString(t *testing.T) {
	names := map[string]bool{}
	for tag := Tag(0); tag < 255; tag++ {
		s := tag.String()
		if tag.Known() != (tag >= 1 && tag <= 22) {
			t.Fatalf("%d: Known = %v", tag, tag.Known())
		}
		if !tag.Known() {
			if s != fmt.Sprintf("TAG(%d)", tag) {
				t.Fatalf("%d: %q", tag, s)
			}
			continue
		}
		if s == "" || names[s] {
			t.Fatalf("%d: name %q empty or repeated", tag, s)
		}
		names[s] = true
	}
	if TagHello.String() != "HELLO" || TagMessage.String() != "MESSAGE" || TagKeepalive2Ack.String() != "KEEPALIVE2_ACK" {
		t.Fatal("tag names")
	}
	if TagMessage != 17 || TagAck != 20 || TagCompressionDone != 22 {
		t.Fatal("tag values")
	}
}

func TestErrorFormat(t *testing.T) {
	err := errorf(ErrSegmentCRC, TagMessage, "segment %d: got %#x want %#x", 3, 1, 2)
	if got := err.Error(); got != "msgr2: segment crc mismatch: MESSAGE segment 3: got 0x1 want 0x2" {
		t.Fatalf("%q", got)
	}
	if got := errorf(ErrBadBanner, 0, "x").Error(); got != "msgr2: bad banner: x" {
		t.Fatalf("%q", got)
	}
	if got := errorf(ErrUnknownTag, 99, "").Error(); got != "msgr2: unknown frame tag: TAG(99)" {
		t.Fatalf("%q", got)
	}
	var wrapped error = fmt.Errorf("conn: %w", err)
	var e *Error
	if !errors.Is(wrapped, ErrSegmentCRC) || !errors.As(wrapped, &e) || e.Tag != TagMessage {
		t.Fatal("errors.Is/As through wrapping")
	}
	if errors.Is(err, ErrPreambleCRC) {
		t.Fatal("matches the wrong sentinel")
	}
}

func TestBanner(t *testing.T) {
	b := AppendBanner([]byte("x"), FeatureRevision1|FeatureCompression, FeatureRevision1)
	b = b[1:]
	const want = "636570682076320a" + "1000" + "0300000000000000" + "0100000000000000"
	if hex.EncodeToString(b) != "636570682076320a"+want[16:] {
		t.Fatalf("banner %x", b)
	}
	if len(b) != BannerPrefixLen+BannerPayloadLen || BannerPrefixLen != 10 {
		t.Fatalf("banner length %d", len(b))
	}
	n, err := ParseBannerPrefix(b[:BannerPrefixLen])
	if err != nil || n != BannerPayloadLen {
		t.Fatalf("ParseBannerPrefix: %d, %v", n, err)
	}
	sup, req, err := ParseBannerPayload(b[BannerPrefixLen:])
	if err != nil || sup != 3 || req != 1 {
		t.Fatalf("ParseBannerPayload: %#x %#x %v", sup, req, err)
	}
	// A longer payload is accepted; the extra bytes are ignored.
	long := append(binary.LittleEndian.AppendUint64(nil, 1), make([]byte, 100)...)
	if sup, _, err := ParseBannerPayload(long); err != nil || sup != 1 {
		t.Fatalf("long payload: %v", err)
	}
	for i := range BannerPayloadLen {
		_, _, err := ParseBannerPayload(b[BannerPrefixLen : BannerPrefixLen+i])
		checkErr(t, err, ErrTruncated)
	}
	for i := range BannerPrefixLen {
		_, err := ParseBannerPrefix(b[:i])
		checkErr(t, err, ErrTruncated)
	}
	_, err = ParseBannerPrefix([]byte("ceph v027\x00"))
	checkErr(t, err, ErrMsgr1Banner)
	_, err = ParseBannerPrefix([]byte("GET / HTTP"))
	checkErr(t, err, ErrBadBanner)
	for _, tc := range []struct {
		n    uint16
		want error
	}{{0, ErrBadBanner}, {15, ErrBadBanner}, {16, nil}, {4096, nil}, {4097, ErrTooLarge}, {65535, ErrTooLarge}} {
		p := binary.LittleEndian.AppendUint16([]byte(BannerPrefix), tc.n)
		n, err := ParseBannerPrefix(p)
		if tc.want == nil {
			if err != nil || n != int(tc.n) {
				t.Fatalf("len %d: %d, %v", tc.n, n, err)
			}
			continue
		}
		checkErr(t, err, tc.want)
	}
}

func TestLimitsDefaults(t *testing.T) {
	l := Limits{}.WithDefaults()
	if l.MaxControl != 64<<10 || l.MaxSegment != 256<<20 || l.MaxMessage != 256<<20 {
		t.Fatalf("%+v", l)
	}
	l = Limits{MaxControl: 1, MaxSegment: 2, MaxMessage: 3}.WithDefaults()
	if l.MaxControl != 1 || l.MaxSegment != 2 || l.MaxMessage != 3 {
		t.Fatalf("%+v", l)
	}
}

// rawPreamble builds a preamble byte by byte, so tests can produce ones
// that Preamble.Append refuses to, and sets a valid CRC.
func rawPreamble(tag byte, n byte, lens []uint32, rsvd [2]byte) []byte {
	b := make([]byte, PreambleLen)
	b[0], b[1] = tag, n
	for i, l := range lens {
		binary.LittleEndian.PutUint32(b[2+6*i:], l)
		binary.LittleEndian.PutUint16(b[6+6*i:], 8)
	}
	b[26], b[27] = rsvd[0], rsvd[1]
	fixPreambleCRC(b)
	return b
}

func fixPreambleCRC(b []byte) {
	binary.LittleEndian.PutUint32(b[28:], msg.CRC32C(0, b[:28]))
}

func TestPreambleBytes(t *testing.T) {
	// The preamble of the KEEPALIVE2 frame: tag 18, one segment of 8 bytes
	// aligned to 8, crc32c(0) of the first 28 bytes.
	p := Preamble{Tag: TagKeepalive2, NumSegments: 1}
	p.Segments[0] = SegmentDesc{Len: 8, Align: 8}
	b := p.Append(nil)
	want := "12" + "01" + "08000000" + "0800" + "000000000000" + "000000000000" + "000000000000" + "0000"
	if hex.EncodeToString(b[:28]) != want {
		t.Fatalf("preamble %x", b)
	}
	if binary.LittleEndian.Uint32(b[28:]) != msg.CRC32C(0, b[:28]) {
		t.Fatal("preamble crc")
	}
	got, err := ParsePreamble(b, Limits{})
	if err != nil || got != p {
		t.Fatalf("ParsePreamble: %+v %v", got, err)
	}
	for i := range PreambleLen {
		_, err := ParsePreamble(b[:i], Limits{})
		checkErr(t, err, ErrTruncated)
	}
}

func TestPreambleChecks(t *testing.T) {
	var zero [2]byte
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"no segments", rawPreamble(18, 0, nil, zero), ErrBadPreamble},
		{"5 segments", rawPreamble(17, 5, []uint32{41, 1, 1, 1}, zero), ErrBadPreamble},
		{"last empty", rawPreamble(17, 3, []uint32{41, 1, 0}, zero), ErrBadPreamble},
		{"reserved", rawPreamble(18, 1, []uint32{8}, [2]byte{0, 1}), ErrBadPreamble},
		{"compressed", rawPreamble(18, 1, []uint32{8}, [2]byte{1, 0}), ErrBadPreamble},
		{"control 2 segments", rawPreamble(18, 2, []uint32{8, 8}, zero), ErrBadPreamble},
		{"tag 0", rawPreamble(0, 1, []uint32{8}, zero), ErrUnknownTag},
		{"tag 23", rawPreamble(23, 1, []uint32{8}, zero), ErrUnknownTag},
		{"tag 255", rawPreamble(255, 1, []uint32{8}, zero), ErrUnknownTag},
		{"short header", rawPreamble(17, 1, []uint32{40}, zero), ErrMalformed},
		{"long header", rawPreamble(17, 2, []uint32{42, 1}, zero), ErrMalformed},
		{"ok empty control", rawPreamble(16, 1, []uint32{0}, zero), nil},
		{"ok message", rawPreamble(17, 4, []uint32{41, 0, 0, 5}, zero), nil},
		{"ok compression tag", rawPreamble(21, 1, []uint32{8}, zero), nil},
	} {
		_, err := ParsePreamble(tc.b, Limits{})
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
	}
	// Unused descriptors are ignored (and dropped) as Ceph ignores them.
	b := rawPreamble(18, 1, []uint32{8, 99, 99, 99}, zero)
	p, err := ParsePreamble(b, Limits{})
	if err != nil || p.NumSegments != 1 || p.Segments[1] != (SegmentDesc{}) {
		t.Fatalf("unused descriptors: %+v %v", p, err)
	}
}

// TestPreambleLimits checks that oversized frames are rejected from the
// preamble alone.
func TestPreambleLimits(t *testing.T) {
	var zero [2]byte
	for _, tc := range []struct {
		name string
		lim  Limits
		b    []byte
		ok   bool
	}{
		{"control at default", Limits{}, rawPreamble(2, 1, []uint32{64 << 10}, zero), true},
		{"control over default", Limits{}, rawPreamble(2, 1, []uint32{64<<10 + 1}, zero), false},
		{"control 4 GiB", Limits{}, rawPreamble(2, 1, []uint32{0xFFFFFFFF}, zero), false},
		{"control at custom", Limits{MaxControl: 100}, rawPreamble(2, 1, []uint32{100}, zero), true},
		{"control over custom", Limits{MaxControl: 100}, rawPreamble(2, 1, []uint32{101}, zero), false},
		{"data 1 GiB", Limits{}, rawPreamble(17, 4, []uint32{41, 0, 0, 1 << 30}, zero), false},
		{"front 4 GiB", Limits{}, rawPreamble(17, 2, []uint32{41, 0xFFFFFFFF}, zero), false},
		{"data at segment limit", Limits{MaxSegment: 1000, MaxMessage: 5000}, rawPreamble(17, 4, []uint32{41, 0, 0, 1000}, zero), true},
		{"data over segment limit", Limits{MaxSegment: 1000, MaxMessage: 5000}, rawPreamble(17, 4, []uint32{41, 0, 0, 1001}, zero), false},
		{"sum at message limit", Limits{MaxSegment: 1000, MaxMessage: 2041}, rawPreamble(17, 4, []uint32{41, 1000, 0, 1000}, zero), true},
		{"sum over message limit", Limits{MaxSegment: 1000, MaxMessage: 2040}, rawPreamble(17, 4, []uint32{41, 1000, 0, 1000}, zero), false},
		{"sum of 4 GiB segments", Limits{MaxSegment: 0xFFFFFFFF, MaxMessage: 0xFFFFFFFF},
			rawPreamble(17, 4, []uint32{41, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, zero), false},
	} {
		_, err := ParsePreamble(tc.b, tc.lim)
		if tc.ok {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: error %v, want ErrTooLarge", tc.name, err)
		}
	}
}

// byteClass says what a bit flip at one offset of a frame must cause.
type byteClass int

const (
	inPreamble   byteClass = iota // ErrPreambleCRC
	inSegment                     // ErrSegmentCRC (segment bytes or a used CRC)
	inLateStatus                  // depends on the bit
	unchecked                     // CRC slot of an unused segment: ignored
)

// frameLayout classifies every byte of a crc-mode frame from its
// preamble, following ceph-msgr.md §1.2 (independently of ParseBody).
func frameLayout(p Preamble, rev1 bool) []byteClass {
	var c []byteClass
	add := func(k byteClass, n int) {
		for range n {
			c = append(c, k)
		}
	}
	add(inPreamble, PreambleLen)
	n := p.NumSegments
	if rev1 {
		add(inSegment, int(p.Segments[0].Len))
		if p.Segments[0].Len > 0 {
			add(inSegment, 4)
		}
		if n == 1 {
			return c
		}
		for i := 1; i < n; i++ {
			add(inSegment, int(p.Segments[i].Len))
		}
		add(inLateStatus, 1)
		for i := 1; i < 4; i++ {
			if i < n {
				add(inSegment, 4)
			} else {
				add(unchecked, 4)
			}
		}
		return c
	}
	for i := range n {
		add(inSegment, int(p.Segments[i].Len))
	}
	add(inLateStatus, 1)
	for i := range 4 {
		if i < n {
			add(inSegment, 4)
		} else {
			add(unchecked, 4)
		}
	}
	return c
}

func parseFrame(wire []byte, rev1 bool) (Preamble, [MaxSegments][]byte, error) {
	p, err := ParsePreamble(wire, Limits{})
	if err != nil {
		return p, [MaxSegments][]byte{}, err
	}
	segs, err := ParseBody(&p, wire[PreambleLen:], rev1)
	return p, segs, err
}

// checkFrameCorruption flips every bit of a valid frame and checks the
// error each flip causes, then checks every truncation.
func checkFrameCorruption(t *testing.T, wire []byte, rev1 bool) {
	t.Helper()
	p, _, err := parseFrame(wire, rev1)
	if err != nil {
		t.Fatalf("valid frame: %v", err)
	}
	layout := frameLayout(p, rev1)
	if len(layout) != len(wire) {
		t.Fatalf("frame of %d bytes, layout says %d", len(wire), len(layout))
	}
	w := bytes.Clone(wire)
	for i := range w {
		for bit := range 8 {
			w[i] ^= 1 << bit
			_, _, err := parseFrame(w, rev1)
			var want error
			switch layout[i] {
			case inPreamble:
				want = ErrPreambleCRC
			case inSegment:
				want = ErrSegmentCRC
			case inLateStatus:
				switch {
				case rev1 && bit < 4:
					want = ErrProtocol // low nibble neither 0xe nor 0x1
				case !rev1 && bit == 0:
					want = ErrAborted
				}
			}
			if want == nil {
				if err != nil {
					t.Fatalf("byte %d bit %d (class %d): %v", i, bit, layout[i], err)
				}
			} else {
				if !errors.Is(err, want) {
					t.Fatalf("byte %d bit %d (class %d): error %v, want %v", i, bit, layout[i], err, want)
				}
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("byte %d: %T", i, err)
				}
			}
			w[i] ^= 1 << bit
		}
	}
	for n := range len(wire) {
		_, _, err := parseFrame(wire[:n], rev1)
		checkErr(t, err, ErrTruncated)
	}
	// A body longer than the preamble says is rejected as well.
	_, err = ParseBody(&p, append(bytes.Clone(wire[PreambleLen:]), 0), rev1)
	checkErr(t, err, ErrTruncated)
}

func TestControlFrameCorruption(t *testing.T) {
	for _, rev1 := range []bool{false, true} {
		for _, f := range sampleControls(t) {
			t.Run(fmt.Sprintf("%v/rev1=%v", f.Tag(), rev1), func(t *testing.T) {
				checkFrameCorruption(t, AppendControlFrame(nil, rev1, f), rev1)
			})
		}
	}
}

func TestLateStatus(t *testing.T) {
	hdr := (&Header2{Seq: 1}).Append(nil)
	for _, tc := range []struct {
		rev1 bool
		late byte
		want error
	}{
		{true, 0x0e, nil}, {true, 0x1e, nil}, {true, 0xfe, nil},
		{true, 0x01, ErrAborted}, {true, 0xf1, ErrAborted},
		{true, 0x00, ErrProtocol}, {true, 0x0f, ErrProtocol},
		{false, 0x00, nil}, {false, 0x02, nil}, {false, 0x01, ErrAborted}, {false, 0xff, ErrAborted},
	} {
		wire := AppendFrame(nil, TagMessage, tc.rev1, hdr, []byte("front"))
		epi := EpilogueRev0Len
		if tc.rev1 {
			epi = EpilogueRev1Len
		}
		wire[len(wire)-epi] = tc.late
		_, segs, err := parseFrame(wire, tc.rev1)
		if tc.want == nil {
			if err != nil || string(segs[1]) != "front" {
				t.Errorf("rev1=%v late %#x: %v", tc.rev1, tc.late, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("rev1=%v late %#x: error %v, want %v", tc.rev1, tc.late, err, tc.want)
		}
	}
}

func TestAppendFrameSegments(t *testing.T) {
	for _, rev1 := range []bool{false, true} {
		// No segments at all: one empty segment.
		wire := AppendFrame(nil, TagWait, rev1)
		p, segs, err := parseFrame(wire, rev1)
		if err != nil || p.NumSegments != 1 || segs[0] == nil || len(segs[0]) != 0 || segs[1] != nil {
			t.Fatalf("rev1=%v empty frame: %+v %q %v", rev1, p, segs, err)
		}
		if rev1 && len(wire) != PreambleLen {
			t.Fatalf("rev1 empty frame is %d bytes", len(wire))
		}
		if !rev1 && len(wire) != PreambleLen+EpilogueRev0Len {
			t.Fatalf("rev0 empty frame is %d bytes", len(wire))
		}
		// Trailing empty segments are dropped; inner ones kept.
		hdr := (&Header2{Seq: 2}).Append(nil)
		wire = AppendFrame(nil, TagMessage, rev1, hdr, nil, []byte("m"), nil)
		p, segs, err = parseFrame(wire, rev1)
		if err != nil || p.NumSegments != 3 || len(segs[1]) != 0 || segs[1] == nil || string(segs[2]) != "m" || segs[3] != nil {
			t.Fatalf("rev1=%v: %+v %q %v", rev1, p, segs, err)
		}
		checkFrameCorruption(t, wire, rev1)
		// Segment 0 empty in a multi-segment rev1 frame: no CRC after it.
		wire = AppendFrame(nil, TagHello, rev1, nil)
		if p, _, err := parseFrame(wire, rev1); err != nil || p.Segments[0].Len != 0 {
			t.Fatalf("empty control: %v", err)
		}
		// Data alignment.
		wire = AppendFrame(nil, TagMessage, rev1, hdr, nil, nil, []byte("d"))
		p, _, err = parseFrame(wire, rev1)
		if err != nil || p.Segments[3].Align != DataAlign || p.Segments[0].Align != SegmentAlign || p.Segments[1].Align != SegmentAlign {
			t.Fatalf("aligns: %+v %v", p, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("5 segments did not panic")
		}
	}()
	AppendFrame(nil, TagMessage, true, nil, nil, nil, nil, nil)
}

func TestHeader2(t *testing.T) {
	h := Header2{Seq: 1, Tid: 2, Type: 3, Priority: 196, Version: 5, DataPrePaddingLen: 6,
		DataOff: 7, AckSeq: 8, Flags: 3, CompatVersion: 9, Reserved: 10}
	const want = "0100000000000000" + "0200000000000000" + "0300" + "c400" + "0500" +
		"06000000" + "0700" + "0800000000000000" + "03" + "0900" + "0a00"
	b := h.Append(nil)
	if got := hex.EncodeToString(b); got != want || len(b) != Header2Len {
		t.Fatalf("header2\n got %s\nwant %s", got, want)
	}
	got, err := ParseHeader2(b)
	if err != nil || got != h {
		t.Fatalf("ParseHeader2: %+v %v", got, err)
	}
	for _, n := range []int{0, 40, 42} {
		_, err := ParseHeader2(make([]byte, n))
		checkErr(t, err, ErrMalformed)
	}
}

func TestMessageFrame(t *testing.T) {
	front := msg.Buffers{[]byte("front-")}
	middle := msg.Buffers{[]byte("mid"), []byte("dle")}
	data := msg.Buffers{bytes.Repeat([]byte{0xab}, 5000), nil, []byte("tail"), bytes.Repeat([]byte{1}, 3)}
	hdr := Header2{Seq: 5, Tid: 6, Type: 2, Priority: 196, Version: 1, AckSeq: 4, Flags: 3}
	var f MessageFrame // reused for every case
	for mask := range 8 {
		for _, rev1 := range []bool{false, true} {
			var fr, mi, da msg.Buffers
			if mask&1 != 0 {
				fr = front
			}
			if mask&2 != 0 {
				mi = middle
			}
			if mask&4 != 0 {
				da = data
			}
			name := fmt.Sprintf("front=%v middle=%v data=%v rev1=%v", fr != nil, mi != nil, da != nil, rev1)
			hdr.Seq++
			f = MessageFrame{Header: hdr, Front: fr, Middle: mi, Data: da}
			wire := f.AppendHead([]byte("prefix"), rev1)[6:]
			for _, d := range f.Data {
				wire = append(wire, d...)
			}
			wire = f.AppendTail(wire, rev1)
			if len(wire) != f.WireLen(rev1) {
				t.Fatalf("%s: %d bytes, WireLen %d", name, len(wire), f.WireLen(rev1))
			}
			want := AppendFrame(nil, TagMessage, rev1, hdr.Append(nil), fr.Bytes(), mi.Bytes(), da.Bytes())
			if !bytes.Equal(wire, want) {
				t.Fatalf("%s: MessageFrame and AppendFrame differ:\n%x\n%x", name, wire, want)
			}
			// The tail alone (without AppendHead) is the same.
			g := MessageFrame{Header: hdr, Front: fr, Middle: mi, Data: da}
			head := g.AppendHead(nil, rev1)
			if tail := (&MessageFrame{Header: hdr, Front: fr, Middle: mi, Data: da}).AppendTail(nil, rev1); !bytes.Equal(tail, wire[len(head)+da.Len():]) {
				t.Fatalf("%s: tail without head: %x", name, tail)
			}
			p, segs, err := parseFrame(wire, rev1)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			wantSegs := 1 + map[int]int{0: 0, 1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 3, 7: 3}[mask]
			if p.NumSegments != wantSegs {
				t.Fatalf("%s: %d segments, want %d", name, p.NumSegments, wantSegs)
			}
			h, err := ParseHeader2(segs[0])
			if err != nil || h != hdr {
				t.Fatalf("%s: header %+v %v", name, h, err)
			}
			for i, want := range []msg.Buffers{fr, mi, da} {
				if !bytes.Equal(segs[i+1], want.Bytes()) {
					t.Fatalf("%s: segment %d differs", name, i+1)
				}
			}
			if mask == 4 || mask == 1 || mask == 7 {
				checkFrameCorruption(t, wire, rev1)
			}
		}
	}
}

// TestMessageFrameEpilogue checks the epilogue CRC slots: a declared but
// empty segment has CRC 0xFFFFFFFF, an undeclared one 0.
func TestMessageFrameEpilogue(t *testing.T) {
	data := msg.Buffers{[]byte("da"), []byte("ta")}
	crcData := msg.CRC32C(0xFFFFFFFF, []byte("data"))
	crcFront := msg.CRC32C(0xFFFFFFFF, []byte("f"))
	for _, tc := range []struct {
		name        string
		front, data msg.Buffers
		want        [3]uint32 // slots of segments 1..3
	}{
		{"empty front, data", nil, data, [3]uint32{0xFFFFFFFF, 0xFFFFFFFF, crcData}},
		{"front only", msg.Buffers{[]byte("f")}, nil, [3]uint32{crcFront, 0, 0}},
	} {
		for _, rev1 := range []bool{false, true} {
			f := MessageFrame{Header: Header2{Seq: 1}, Front: tc.front, Data: tc.data}
			wire := f.AppendHead(nil, rev1)
			for _, d := range f.Data {
				wire = append(wire, d...)
			}
			wire = f.AppendTail(wire, rev1)
			if rev1 {
				ep := wire[len(wire)-EpilogueRev1Len:]
				if ep[0] != LateStatusComplete {
					t.Fatalf("%s: late status %#x", tc.name, ep[0])
				}
				for i, w := range tc.want {
					if got := binary.LittleEndian.Uint32(ep[1+4*i:]); got != w {
						t.Fatalf("%s rev1: slot %d = %#x, want %#x", tc.name, i+1, got, w)
					}
				}
			} else {
				ep := wire[len(wire)-EpilogueRev0Len:]
				hdrCRC := msg.CRC32C(0xFFFFFFFF, (&f.Header).Append(nil))
				if ep[0] != 0 || binary.LittleEndian.Uint32(ep[1:]) != hdrCRC {
					t.Fatalf("%s rev0: flags %#x / header crc", tc.name, ep[0])
				}
				for i, w := range tc.want {
					if got := binary.LittleEndian.Uint32(ep[5+4*i:]); got != w {
						t.Fatalf("%s rev0: slot %d = %#x, want %#x", tc.name, i+1, got, w)
					}
				}
			}
			if _, _, err := parseFrame(wire, rev1); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
	}
	// A header-only message in rev1 has no tail at all.
	f := MessageFrame{Header: Header2{Seq: 1}}
	head := f.AppendHead(nil, true)
	if tail := f.AppendTail(nil, true); len(tail) != 0 || len(head) != PreambleLen+Header2Len+4 {
		t.Fatalf("header-only: head %d tail %d", len(head), len(tail))
	}
}

func TestMessageFrameAllocs(t *testing.T) {
	f := MessageFrame{Header: Header2{Seq: 1}, Front: msg.Buffers{[]byte("front")}, Data: msg.Buffers{make([]byte, 4096)}}
	buf := make([]byte, 0, 256)
	ack := Ack{Seq: 12345}.Append(nil)
	allocs := testing.AllocsPerRun(100, func() {
		b := f.AppendHead(buf[:0], true)
		b = f.AppendTail(b, true)
		_ = AppendFrame(b, TagAck, true, ack)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per frame", allocs)
	}
}
