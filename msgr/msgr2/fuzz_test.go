package msgr2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

// fuzzLimits keep what a fuzzed preamble may declare small.
var fuzzLimits = Limits{MaxControl: 4096, MaxSegment: 1 << 16, MaxMessage: 1 << 17}

func checkTyped(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Err == nil {
		t.Fatalf("untyped error %T: %v", err, err)
	}
}

func FuzzPreamble(f *testing.F) {
	for _, tag := range []Tag{TagHello, TagMessage, TagWait} {
		f.Add(false, AppendFrame(nil, tag, true, []byte("payload")))
	}
	f.Add(true, rawPreamble(17, 4, []uint32{41, 0, 1, 1}, [2]byte{}))
	f.Add(true, make([]byte, PreambleLen))
	f.Fuzz(func(t *testing.T, fix bool, data []byte) {
		if fix && len(data) >= PreambleLen {
			// Let the fuzzer past the CRC.
			data = bytes.Clone(data)
			fixPreambleCRC(data)
		}
		p, err := ParsePreamble(data, fuzzLimits)
		if err != nil {
			checkTyped(t, err)
			return
		}
		if p.NumSegments < 1 || p.NumSegments > MaxSegments || !p.Tag.Known() {
			t.Fatalf("accepted %+v", p)
		}
		if p.PayloadLen() > 1<<17 || p.BodyLen(true) < 0 || p.BodyLen(false) < p.PayloadLen() {
			t.Fatalf("lengths of %+v", p)
		}
		q, err := ParsePreamble(p.Append(nil), fuzzLimits)
		if err != nil || q != p {
			t.Fatalf("re-parse: %+v %v, want %+v", q, err, p)
		}
	})
}

// fixFrameCRCs rewrites the preamble CRC and, if the preamble parses and
// the body is long enough, every segment CRC, so that the fuzzer explores
// what lies behind them.
func fixFrameCRCs(data []byte, rev1 bool) []byte {
	if len(data) < PreambleLen {
		return data
	}
	data = bytes.Clone(data)
	fixPreambleCRC(data)
	p, err := ParsePreamble(data, fuzzLimits)
	if err != nil || len(data) < PreambleLen+p.BodyLen(rev1) {
		return data
	}
	body := data[PreambleLen:]
	off := 0
	var crcs [MaxSegments]uint32
	var offs [MaxSegments]int
	for i := 0; i < p.NumSegments; i++ {
		l := int(p.Segments[i].Len)
		offs[i] = off
		crcs[i] = msg.CRC32C(0xFFFFFFFF, body[off:off+l])
		off += l
		if rev1 && i == 0 && l > 0 {
			binary.LittleEndian.PutUint32(body[off:], crcs[0])
			off += 4
		}
	}
	if rev1 {
		if p.NumSegments > 1 {
			for i := 1; i < p.NumSegments; i++ {
				binary.LittleEndian.PutUint32(body[off+1+4*(i-1):], crcs[i])
			}
		}
		return data
	}
	for i := 0; i < p.NumSegments; i++ {
		binary.LittleEndian.PutUint32(body[off+1+4*i:], crcs[i])
	}
	return data
}

func FuzzFrame(f *testing.F) {
	for _, rev1 := range []bool{false, true} {
		for _, c := range sampleControls(f) {
			f.Add(rev1, false, AppendControlFrame(nil, rev1, c))
		}
		m := MessageFrame{Header: Header2{Seq: 3, Flags: 3}, Middle: msg.Buffers{[]byte("mid")}, Data: msg.Buffers{[]byte("data")}}
		w := m.AppendHead(nil, rev1)
		w = append(w, "data"...)
		f.Add(rev1, false, m.AppendTail(w, rev1))
		f.Add(rev1, true, AppendFrame(nil, TagMessage, rev1, make([]byte, Header2Len), []byte("f")))
	}
	f.Fuzz(func(t *testing.T, rev1, fix bool, data []byte) {
		if fix {
			data = fixFrameCRCs(data, rev1)
		}
		p, err := ParsePreamble(data, fuzzLimits)
		if err != nil {
			checkTyped(t, err)
			return
		}
		body := data[PreambleLen:]
		if n := p.BodyLen(rev1); len(body) > n {
			body = body[:n]
		}
		segs, err := ParseBody(&p, body, rev1)
		if err != nil {
			checkTyped(t, err)
			return
		}
		for i := range MaxSegments {
			if (i < p.NumSegments) != (segs[i] != nil) || (i < p.NumSegments && len(segs[i]) != int(p.Segments[i].Len)) {
				t.Fatalf("segment %d of %+v: %d bytes", i, p, len(segs[i]))
			}
		}
		wire := AppendFrame(nil, p.Tag, rev1, segs[:p.NumSegments]...)
		q, segs2, err := func() (Preamble, [MaxSegments][]byte, error) {
			q, err := ParsePreamble(wire, fuzzLimits)
			if err != nil {
				return q, [MaxSegments][]byte{}, err
			}
			s, err := ParseBody(&q, wire[PreambleLen:], rev1)
			return q, s, err
		}()
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if q.Tag != p.Tag || q.NumSegments != p.NumSegments || len(wire) != PreambleLen+q.BodyLen(rev1) {
			t.Fatalf("re-parse: %+v, want %+v", q, p)
		}
		for i := range MaxSegments {
			if !bytes.Equal(segs[i], segs2[i]) || (segs[i] == nil) != (segs2[i] == nil) {
				t.Fatalf("segment %d: %x, want %x", i, segs2[i], segs[i])
			}
		}
		if p.Tag == TagMessage {
			if _, err := ParseHeader2(segs[0]); err != nil {
				t.Fatalf("ParseHeader2 after ParsePreamble: %v", err)
			}
		} else if v, err := ParseControl(p.Tag, segs[0]); err == nil {
			checkControlStable(t, p.Tag, v)
		} else {
			checkTyped(t, err)
		}
	})
}

func checkControlStable(t *testing.T, tag Tag, v ControlFrame) {
	t.Helper()
	if v.Tag() != tag {
		t.Fatalf("%v parsed as %v", tag, v.Tag())
	}
	enc := v.Append(nil)
	v2, err := ParseControl(tag, enc)
	if err != nil {
		t.Fatalf("%v: re-parse of %#v: %v", tag, v, err)
	}
	if !reflect.DeepEqual(v, v2) {
		t.Fatalf("%v: unstable:\n%#v\n%#v", tag, v, v2)
	}
	if enc2 := v2.Append(nil); !bytes.Equal(enc, enc2) {
		t.Fatalf("%v: re-encoding differs:\n%x\n%x", tag, enc, enc2)
	}
}

func FuzzControl(f *testing.F) {
	for _, c := range sampleControls(f) {
		f.Add(c.Append(nil))
	}
	f.Add(AuthNonePayload{Mode: AuthModeMon, Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}}.Append(nil))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		for tag := Tag(0); tag <= TagCompressionDone+1; tag++ {
			v, err := ParseControl(tag, data)
			if err != nil {
				checkTyped(t, err)
				if v != nil {
					t.Fatalf("%v: value with error", tag)
				}
				continue
			}
			checkControlStable(t, tag, v)
		}
		if a, err := ParseAuthNonePayload(data); err == nil {
			b, err := ParseAuthNonePayload(a.Append(nil))
			if err != nil || a != b {
				t.Fatalf("auth none: %+v %+v %v", a, b, err)
			}
		} else {
			checkTyped(t, err)
		}
		if h, err := ParseHeader2(data); err == nil {
			g, err := ParseHeader2(h.Append(nil))
			if err != nil || g != h {
				t.Fatalf("header2: %+v %+v %v", h, g, err)
			}
		} else {
			checkTyped(t, err)
		}
	})
}
