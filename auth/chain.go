package auth

import (
	"fmt"
	"slices"

	"github.com/ferrymsg/ferry/msg"
)

// Fallback is implemented by a Client that can change method when the
// server refuses the one it tried: msgr2's AUTH_BAD_METHOD lists the
// methods the server allows, and the engine asks the client for the next
// one it supports, as Ceph's MonConnection::handle_auth_bad_method does.
// After a successful Fallback, Method, Request, ReplyMore and Done are
// those of the new method; the engine sends a fresh AUTH_REQUEST.
type Fallback interface {
	// Fallback moves to the first method after refused, in the client's
	// order of preference, that allowed contains, and reports whether
	// there was one. It never moves back to a method already tried.
	Fallback(refused uint32, allowed []uint32) bool
}

// ChainClient offers several methods in order of preference: it
// authenticates with the first, and after a refusal moves to the next
// one the server allows (Fallback). One ChainClient serves one connection
// attempt, as every Client does. Its methods are not safe for concurrent
// use.
type ChainClient struct {
	clients []Client
	cur     int
}

// NewChainClient returns a ChainClient trying clients in the order
// given. A client whose method is already in the chain is dropped (it
// could never be tried: a refused method is not retried). It returns an
// error when clients is empty or holds a nil Client.
func NewChainClient(clients ...Client) (*ChainClient, error) {
	if len(clients) == 0 {
		return nil, fmt.Errorf("%w: a chain of no auth methods", ErrMalformed)
	}
	c := &ChainClient{}
	var seen []uint32
	for i, cl := range clients {
		if cl == nil {
			return nil, fmt.Errorf("%w: auth method %d of the chain is nil", ErrMalformed, i)
		}
		if m := cl.Method(); !slices.Contains(seen, m) {
			seen = append(seen, m)
			c.clients = append(c.clients, cl)
		}
	}
	return c, nil
}

// Methods returns the chain's methods in order of preference.
func (c *ChainClient) Methods() []uint32 {
	ms := make([]uint32, len(c.clients))
	for i, cl := range c.clients {
		ms[i] = cl.Method()
	}
	return ms
}

// Current returns the client of the method in use.
func (c *ChainClient) Current() Client { return c.clients[c.cur] }

// Method returns the method in use.
func (c *ChainClient) Method() uint32 { return c.clients[c.cur].Method() }

// Request is the current method's Request.
func (c *ChainClient) Request(peerType msg.EntityType) ([]byte, error) {
	return c.clients[c.cur].Request(peerType)
}

// ReplyMore is the current method's ReplyMore.
func (c *ChainClient) ReplyMore(payload []byte) ([]byte, error) {
	return c.clients[c.cur].ReplyMore(payload)
}

// Done is the current method's Done.
func (c *ChainClient) Done(globalID uint64, conMode uint32, payload []byte) (Result, error) {
	return c.clients[c.cur].Done(globalID, conMode, payload)
}

// Fallback moves to the next method after refused that allowed contains
// (see Fallback). refused is normally the method in use; if the chain
// does not hold it, the search starts after the method in use.
func (c *ChainClient) Fallback(refused uint32, allowed []uint32) bool {
	from := c.cur
	for i, cl := range c.clients {
		if cl.Method() == refused && i >= c.cur {
			from = i
			break
		}
	}
	for i := from + 1; i < len(c.clients); i++ {
		if slices.Contains(allowed, c.clients[i].Method()) {
			c.cur = i
			return true
		}
	}
	return false
}
