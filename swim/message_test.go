package swim

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func sampleMessage() *Message {
	return &Message{Kind: KindPingReq, Seq: 0xdeadbeef, Target: 7, Updates: []Update{
		{Member: Member{ID: 7, Incarnation: 3, State: Suspect}, Origin: 1},
		{Member: Member{ID: 1, Incarnation: 1 << 60, State: Alive}, Origin: 1},
		{Member: Member{ID: 9, Incarnation: 0, State: Dead}, Origin: 4},
	}}
}

func TestMessageRoundTrip(t *testing.T) {
	msg := sampleMessage()
	b := msg.Append(nil)
	if len(b) != msg.Len() || len(b) != 12+3*17 {
		t.Fatalf("len %d, Len %d", len(b), msg.Len())
	}
	var got Message
	if err := DecodeMessage(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, msg) {
		t.Fatalf("got %+v, want %+v", got, *msg)
	}
	// Layout: explicit bytes of the header and the first update.
	want := []byte{1, 3, 3, 0, 0xef, 0xbe, 0xad, 0xde, 7, 0, 0, 0,
		7, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1}
	if !bytes.Equal(b[:len(want)], want) {
		t.Fatalf("layout % x", b[:len(want)])
	}
}

func TestMessageTruncated(t *testing.T) {
	b := sampleMessage().Append(nil)
	for i := range len(b) {
		var m Message
		err := DecodeMessage(b[:i], &m)
		if !errors.Is(err, ErrShort) {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
	var m Message
	if err := DecodeMessage(append(b, 0), &m); !errors.Is(err, ErrTrailing) {
		t.Fatalf("trailing: %v", err)
	}
}

func TestMessageBadFields(t *testing.T) {
	good := sampleMessage().Append(nil)
	cases := []struct {
		name string
		edit func(b []byte) []byte
		want error
	}{
		{"version", func(b []byte) []byte { b[0] = 2; return b }, ErrVersion},
		{"kind0", func(b []byte) []byte { b[1] = 0; return b }, ErrKind},
		{"kind5", func(b []byte) []byte { b[1] = 5; return b }, ErrKind},
		{"count", func(b []byte) []byte { b[2], b[3] = 65, 0; return b }, ErrTooMany},
		{"hugecount", func(b []byte) []byte { b[2], b[3] = 0xff, 0xff; return b }, ErrTooMany},
		{"state", func(b []byte) []byte { b[12+16] = 3; return b }, ErrState},
	}
	for _, c := range cases {
		b := c.edit(bytes.Clone(good))
		var m Message
		err := DecodeMessage(b, &m)
		var de *DecodeError
		if !errors.Is(err, c.want) || !errors.As(err, &de) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzDecodeMessage: decoding never panics, and what decodes re-encodes to
// the same bytes and decodes to the same message.
func FuzzDecodeMessage(f *testing.F) {
	f.Add(sampleMessage().Append(nil))
	f.Add((&Message{Kind: KindPing, Seq: 1, Target: 2}).Append(nil))
	f.Add([]byte{1, 2, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if err := DecodeMessage(b, &m); err != nil {
			return
		}
		if len(m.Updates) > MaxUpdates {
			t.Fatalf("%d updates", len(m.Updates))
		}
		out := m.Append(nil)
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs:\n% x\n% x", b, out)
		}
		var m2 Message
		if err := DecodeMessage(out, &m2); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("%+v != %+v", m, m2)
		}
	})
}
