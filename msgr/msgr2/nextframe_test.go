package msgr2

import (
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

// NextFrameLen measures exactly the frame a wire begins with, before
// and between frames, and declines in a frame or on a bad preamble.
func TestNextFrameLen(t *testing.T) {
	c, s := pair(t, clientConfig(), serverConfig())
	if _, ok := s.e.NextFrameLen(make([]byte, PreambleLen)); ok {
		t.Fatal("NextFrameLen answered before the session is ready")
	}
	run(t, c, s)
	if err := s.e.Accept(7, 0, true); err != nil {
		t.Fatal(err)
	}
	run(t, c, s)
	if !s.e.Ready() {
		t.Fatal("not ready")
	}
	mf := MessageFrame{Header: Header2{Seq: 1, Tid: 9, Type: 2},
		Front: msg.Buffers{[]byte("hello")}, Data: msg.Buffers{[]byte("data")}}
	frame := mf.AppendTail(append(mf.AppendHead(nil, true), "data"...), true)
	ka := c.e.AppendKeepalive(nil, Stamp{5, 6})
	wire := append(append([]byte(nil), frame...), ka...)
	for _, cut := range []int{0, 1, PreambleLen - 1} {
		if _, ok := s.e.NextFrameLen(wire[:cut]); ok {
			t.Fatalf("answered on %d bytes", cut)
		}
	}
	if n, ok := s.e.NextFrameLen(wire); !ok || n != len(frame) {
		t.Fatalf("message frame: %d %v, want %d", n, ok, len(frame))
	}
	bad := append([]byte(nil), wire...)
	bad[3] ^= 1 // the preamble's CRC no longer matches
	if _, ok := s.e.NextFrameLen(bad); ok {
		t.Fatal("answered on a corrupt preamble")
	}
	// In a frame (its preamble fed) it cannot tell; after it, the next.
	if _, err := s.e.Feed(append([]byte(nil), wire[:PreambleLen]...)); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.e.NextFrameLen(wire[PreambleLen:]); ok {
		t.Fatal("answered in a frame")
	}
	if _, err := s.e.Feed(append([]byte(nil), frame[PreambleLen:]...)); err != nil {
		t.Fatal(err)
	}
	if n, ok := s.e.NextFrameLen(ka); !ok || n != len(ka) {
		t.Fatalf("keepalive frame: %d %v, want %d", n, ok, len(ka))
	}
}

// FuzzNextFrameLen: on any bytes after the handshake NextFrameLen does
// not panic, and what it measures is what Feed then reads: the preamble
// it accepts, and a body of the rest of the length.
func FuzzNextFrameLen(f *testing.F) {
	c, _ := pair(nil, clientConfig(), serverConfig())
	mf := MessageFrame{Header: Header2{Seq: 1, Type: 2}, Front: msg.Buffers{[]byte("x")}}
	f.Add(mf.AppendTail(mf.AppendHead(nil, true), true))
	f.Add(c.e.AppendKeepalive(nil, Stamp{1, 2}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, s := pair(t, clientConfig(), serverConfig())
		run(t, c, s)
		if err := s.e.Accept(7, 0, true); err != nil {
			t.Fatal(err)
		}
		run(t, c, s)
		n, ok := s.e.NextFrameLen(b)
		if !ok {
			return
		}
		if n < PreambleLen {
			t.Fatalf("frame of %d bytes", n)
		}
		if _, err := s.e.Feed(append([]byte(nil), b[:PreambleLen]...)); err != nil {
			t.Fatalf("NextFrameLen took a preamble Feed refuses: %v", err)
		}
		if need, _ := s.e.Need(); n > PreambleLen && need != n-PreambleLen {
			t.Fatalf("NextFrameLen %d, Feed needs a body of %d", n, need)
		}
	})
}
