package auth

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

func TestNone(t *testing.T) {
	c := NewNoneClient(msg.AuthName{Type: msg.EntityClient, ID: "admin"})
	p, err := c.Request(msg.EntityMon)
	if err != nil {
		t.Fatal(err)
	}
	// u8 mode 10, le32 type 8, string "admin", le64 global id 0.
	want := []byte{10, 8, 0, 0, 0, 5, 0, 0, 0, 'a', 'd', 'm', 'i', 'n', 0, 0, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(p, want) {
		t.Fatalf("payload %x", p)
	}
	if p, _ := c.Request(msg.EntityOSD); p[0] != ModeAuthorizer {
		t.Fatalf("mode to an OSD %d", p[0])
	}
	s := &NoneServer{GlobalID: 9}
	rep, err := s.Handle(MethodNone, msg.EntityClient, ConModeCRC, true, want)
	if err != nil || !rep.Done || rep.Result.Name != c.Name || rep.Result.GlobalID != 9 || len(rep.Result.SessionKey) != 0 {
		t.Fatalf("reply %+v %v", rep, err)
	}
	res, err := c.Done(9, ConModeCRC, nil)
	if err != nil || res.GlobalID != 9 || res.Method != MethodNone {
		t.Fatalf("done %+v %v", res, err)
	}
	if _, err := s.Handle(MethodNone, msg.EntityClient, ConModeCRC, true, want[:5]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: %v", err)
	}
	if _, err := s.Handle(MethodCephx, msg.EntityClient, ConModeCRC, true, want); !errors.Is(err, ErrDenied) {
		t.Fatalf("cephx: %v", err)
	}
	if _, err := c.ReplyMore(nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("reply more: %v", err)
	}
}
