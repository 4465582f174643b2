package ceph

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

// FuzzUnmarshal decodes arbitrary fronts as every type; whatever decodes
// must re-encode to a message that decodes to the same value.
func FuzzUnmarshal(f *testing.F) {
	for _, v := range samples(f) {
		m := v.Marshal()
		f.Add(m.Header.Version, m.Front.Bytes(), m.Data.Bytes())
	}
	f.Add(uint16(1), []byte{0xff, 0xff, 0xff, 0xff}, []byte(nil))
	f.Fuzz(func(t *testing.T, version uint16, front, data []byte) {
		for _, v := range samples(t) {
			typ := v.Marshal().Header.Type
			in := &msg.Message{
				Header: msg.Header{Type: typ, Version: version},
				Front:  msg.Buffers{front},
				Data:   msg.Buffers{data},
			}
			got := fresh(v)
			if err := got.Unmarshal(in); err != nil {
				continue
			}
			again := fresh(v)
			if err := again.Unmarshal(got.Marshal()); err != nil {
				t.Fatalf("%T: re-encoded value does not decode: %v", v, err)
			}
			if p, ok := got.(*Ping); ok {
				if !bytes.Equal(p.Status, again.(*Ping).Status) {
					t.Fatalf("ping status %q -> %q", p.Status, again.(*Ping).Status)
				}
				continue
			}
			if r, ok := got.(*MonGetVersionReply); ok && version < 2 && r.OldestVersion != 0 {
				t.Fatalf("oldest version decoded at header version %d", version)
			}
			if !reflect.DeepEqual(normalize(got), normalize(again)) {
				t.Fatalf("%T: %+v re-decodes as %+v", v, got, again)
			}
		}
	})
}

// normalize maps empty byte slices to nil: Marshal omits an empty data
// segment, so nil and empty are the same value on the wire.
func normalize(c codec) codec {
	switch v := c.(type) {
	case *MonCommand:
		w := *v
		if len(w.Input) == 0 {
			w.Input = nil
		}
		return &w
	case *MonCommandAck:
		w := *v
		if len(w.Output) == 0 {
			w.Output = nil
		}
		return &w
	case *Command:
		w := *v
		if len(w.Input) == 0 {
			w.Input = nil
		}
		return &w
	case *CommandReply:
		w := *v
		if len(w.Output) == 0 {
			w.Output = nil
		}
		return &w
	}
	return c
}
