package ceph

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

func TestAuthMessages(t *testing.T) {
	a := &Auth{Protocol: 2, Payload: []byte{0, 2, 1, 2, 3}, MonmapEpoch: 7}
	m := a.Marshal()
	if m.Header.Type != MsgAuth || m.Header.Version != 1 || m.Header.Priority != msg.PrioDefault {
		t.Fatalf("header %+v", m.Header)
	}
	// Paxos prefix (version 0, session mon -1, tid 0), protocol,
	// payload, epoch.
	want := unhex(t, "0000000000000000 ffff 0000000000000000 02000000 05000000 0002010203 07000000")
	if got := m.Front.Bytes(); !bytes.Equal(got, want) {
		t.Fatalf("front %x\nwant  %x", got, want)
	}
	var back Auth
	if err := back.Unmarshal(split(m)); err != nil || !reflect.DeepEqual(&back, a) {
		t.Fatalf("round trip %+v %v", back, err)
	}
	// An old sender's MAuth without the epoch.
	m.Front = msg.Buffers{want[:len(want)-4]}
	if err := back.Unmarshal(m); err != nil || back.MonmapEpoch != 0 || back.Protocol != 2 {
		t.Fatalf("no epoch: %+v %v", back, err)
	}
	for n := 0; n < len(want)-4; n++ {
		m.Front = msg.Buffers{want[:n]}
		if err := back.Unmarshal(m); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix %d: %v", n, err)
		}
	}
	m.Front = msg.Buffers{want[:len(want)-2]}
	if err := back.Unmarshal(m); !errors.Is(err, ErrMalformed) {
		t.Fatalf("half an epoch: %v", err)
	}

	r := &AuthReply{Protocol: 2, Result: -13, GlobalID: 4100, ResultBL: []byte{1, 2}, ResultMsg: "no"}
	m = r.Marshal()
	if m.Header.Type != MsgAuthReply || m.Header.Version != 1 || m.Header.Priority != msg.PrioHigh {
		t.Fatalf("header %+v", m.Header)
	}
	want = unhex(t, "02000000 f3ffffff 0410000000000000 02000000 0102 02000000 6e6f")
	if got := m.Front.Bytes(); !bytes.Equal(got, want) {
		t.Fatalf("front %x\nwant  %x", got, want)
	}
	var rb AuthReply
	if err := rb.Unmarshal(split(m)); err != nil || !reflect.DeepEqual(&rb, r) {
		t.Fatalf("round trip %+v %v", rb, err)
	}
	for n := 0; n < len(want); n++ {
		m.Front = msg.Buffers{want[:n]}
		if err := rb.Unmarshal(m); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix %d: %v", n, err)
		}
	}
	if err := rb.Unmarshal(a.Marshal()); !errors.Is(err, ErrWrongType) {
		t.Fatalf("wrong type: %v", err)
	}
}

// FuzzAuthMessages decodes arbitrary fronts as MAuth and MAuthReply;
// whatever decodes re-encodes to the same value.
func FuzzAuthMessages(f *testing.F) {
	f.Add((&Auth{Protocol: 2, Payload: []byte{1}, MonmapEpoch: 1}).Marshal().Front.Bytes())
	f.Add((&AuthReply{Protocol: 2, ResultBL: []byte{1}, ResultMsg: "x"}).Marshal().Front.Bytes())
	f.Fuzz(func(t *testing.T, front []byte) {
		var a Auth
		if a.Unmarshal(&msg.Message{Header: msg.Header{Type: MsgAuth}, Front: msg.Buffers{front}}) == nil {
			var b Auth
			if err := b.Unmarshal(a.Marshal()); err != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("MAuth %+v -> %+v %v", a, b, err)
			}
		}
		var r AuthReply
		if r.Unmarshal(&msg.Message{Header: msg.Header{Type: MsgAuthReply}, Front: msg.Buffers{front}}) == nil {
			var b AuthReply
			if err := b.Unmarshal(r.Marshal()); err != nil || !reflect.DeepEqual(r, b) {
				t.Fatalf("MAuthReply %+v -> %+v %v", r, b, err)
			}
		}
	})
}
