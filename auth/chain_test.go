package auth_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
)

// stubClient is a Client of any method id that records its calls.
type stubClient struct {
	auth.NoneClient
	method uint32
}

func (s *stubClient) Method() uint32 { return s.method }

// ChainClient falls back as Ceph's MonConnection::handle_auth_bad_method
// does: to the first method after the refused one, in the client's order,
// that the server allows; never back, never to one the server does not
// allow.
func TestChainClientFallback(t *testing.T) {
	name := msg.AuthName{Type: msg.EntityClient, ID: "admin"}
	mk := func(ms ...uint32) *auth.ChainClient {
		var cs []auth.Client
		for _, m := range ms {
			cs = append(cs, &stubClient{NoneClient: auth.NoneClient{Name: name}, method: m})
		}
		ch, err := auth.NewChainClient(cs...)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	ch := mk(2, 1, 7, 2)
	if !slices.Equal(ch.Methods(), []uint32{2, 1, 7}) || ch.Method() != 2 {
		t.Fatalf("methods %v current %d", ch.Methods(), ch.Method())
	}
	if !ch.Fallback(2, []uint32{7, 2}) || ch.Method() != 7 {
		t.Fatalf("after refusing 2 with 7 and 2 allowed: %d", ch.Method())
	}
	if ch.Fallback(7, []uint32{2, 1}) || ch.Method() != 7 {
		t.Fatalf("fell back to an earlier method: %d", ch.Method())
	}
	ch = mk(2, 1)
	if ch.Fallback(2, []uint32{42}) || ch.Method() != 2 {
		t.Fatal("fell back to a method the server does not allow")
	}
	if !ch.Fallback(2, []uint32{1}) || ch.Method() != 1 || ch.Current().Method() != 1 {
		t.Fatal("no fallback to auth none")
	}
	p, err := ch.Request(msg.EntityMon)
	if err != nil || len(p) == 0 || p[0] != auth.ModeMon {
		t.Fatalf("request %x %v", p, err)
	}
	if _, err := auth.NewChainClient(); !errors.Is(err, auth.ErrMalformed) {
		t.Fatalf("empty chain: %v", err)
	}
	if _, err := auth.NewChainClient(auth.NewNoneClient(name), nil); !errors.Is(err, auth.ErrMalformed) {
		t.Fatalf("nil client: %v", err)
	}
}
