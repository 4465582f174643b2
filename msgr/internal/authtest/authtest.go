// Package authtest is a small shared-key auth method for the messenger's
// tests: a cephx-like exchange (request, server challenge, client proof,
// server proof) that yields a session key and, in secure mode, a 64-byte
// connection secret, both derived with HMAC-SHA256 from the entity's key
// and the two sides' random nonces. It is not cephx and not secure
// against anything but the tests' own mistakes.
package authtest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"slices"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Method is the method id the fake uses unless told otherwise (cephx's,
// so that secure mode is offered as it would be with cephx).
const Method = auth.MethodCephx

func mac(key []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

func derive(key, cn, sc []byte, secure bool) (session, secret []byte) {
	session = mac(key, []byte("session"), cn, sc)[:16]
	if secure {
		secret = append(mac(key, []byte("secret1"), cn, sc), mac(key, []byte("secret2"), cn, sc)...)
	}
	return session, secret
}

func random(r io.Reader, n int) []byte {
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		panic(err)
	}
	return b
}

// Client is the client side of one attempt.
type Client struct {
	Name msg.AuthName
	Key  []byte
	Rand io.Reader // nil: crypto/rand
	// WrongSession derives another session key than the server's (to test
	// AUTH_SIGNATURE mismatches).
	WrongSession bool

	cn, sc []byte
}

// Method returns Method.
func (c *Client) Method() uint32 { return Method }

// Request sends the name and a client nonce.
func (c *Client) Request(peerType msg.EntityType) ([]byte, error) {
	c.cn = random(c.Rand, 8)
	b := append([]byte{auth.ModeMon}, msg.AppendAuthName(nil, c.Name)...)
	return denc.AppendBytes(b, c.cn), nil
}

// ReplyMore proves the key for the server's challenge.
func (c *Client) ReplyMore(payload []byte) ([]byte, error) {
	if len(payload) != 8 {
		return nil, fmt.Errorf("%w: challenge of %d bytes", auth.ErrMalformed, len(payload))
	}
	c.sc = slices.Clone(payload)
	return mac(c.Key, []byte("proof"), c.cn, c.sc), nil
}

// Done checks the server's proof and derives the keys.
func (c *Client) Done(globalID uint64, conMode uint32, payload []byte) (auth.Result, error) {
	if !hmac.Equal(payload, mac(c.Key, []byte("server"), c.cn, c.sc)) {
		return auth.Result{}, fmt.Errorf("%w: server proof", auth.ErrBadKey)
	}
	sk, secret := derive(c.Key, c.cn, c.sc, conMode == auth.ConModeSecure)
	if c.WrongSession {
		sk = mac(sk, []byte("wrong"))[:16]
	}
	return auth.Result{Method: Method, Name: c.Name, GlobalID: globalID, SessionKey: sk, ConnectionSecret: secret}, nil
}

// Server is the server side of one attempt; Keys maps entity names
// (client.admin) to keys, Caps to their caps.
type Server struct {
	Keys     map[string][]byte
	Caps     map[string]string
	GlobalID uint64
	Rand     io.Reader
	// AlsoNone allows auth none too (after the fake's method).
	AlsoNone bool

	name   msg.AuthName
	cn, sc []byte
}

// Methods returns Method (and auth none with AlsoNone).
func (s *Server) Methods(peerType msg.EntityType) []uint32 {
	if s.AlsoNone {
		return []uint32{Method, auth.MethodNone}
	}
	return []uint32{Method}
}

// Handle challenges the first request and checks the proof in the second.
func (s *Server) Handle(method uint32, peerType msg.EntityType, conMode uint32, first bool, payload []byte) (auth.Reply, error) {
	if method == auth.MethodNone && s.AlsoNone {
		ns := auth.NoneServer{GlobalID: s.GlobalID}
		return ns.Handle(method, peerType, conMode, first, payload)
	}
	if first {
		var d denc.Decoder
		d.Reset(payload)
		d.U8()
		s.name = msg.DecodeAuthName(&d)
		s.cn = slices.Clone(d.Bytes())
		if d.Err() != nil || len(s.cn) != 8 {
			return auth.Reply{}, fmt.Errorf("%w: request", auth.ErrMalformed)
		}
		if _, ok := s.Keys[s.name.String()]; !ok {
			return auth.Reply{}, fmt.Errorf("%w: %s", auth.ErrUnknownEntity, s.name)
		}
		s.sc = random(s.Rand, 8)
		return auth.Reply{More: s.sc}, nil
	}
	key := s.Keys[s.name.String()]
	if s.sc == nil || !hmac.Equal(payload, mac(key, []byte("proof"), s.cn, s.sc)) {
		return auth.Reply{}, fmt.Errorf("%w: proof for %s", auth.ErrBadKey, s.name)
	}
	sk, secret := derive(key, s.cn, s.sc, conMode == auth.ConModeSecure)
	caps := s.Caps[s.name.String()]
	return auth.Reply{Done: true, Payload: mac(key, []byte("server"), s.cn, s.sc), Result: auth.Result{
		Method: Method, Name: s.name, GlobalID: s.GlobalID, SessionKey: sk, ConnectionSecret: secret,
		Caps: []byte(caps), AllowAll: caps == "allow *",
	}}, nil
}

var (
	_ auth.Client = (*Client)(nil)
	_ auth.Server = (*Server)(nil)
)
