// Package auth is the small interface through which ferry's protocol
// engines (msgr/msgr2, msgr/msgr1) ask an authentication method for the
// payloads they carry, and learn the keys a finished authentication
// yields. It knows nothing of sockets, frames or clocks: a method such as
// cephx (package auth/cephx) implements Client and Server; an engine feeds
// them the payloads it receives and sends the payloads they return.
//
// One Client or one Server value serves one connection attempt: the
// messenger asks a factory for a fresh one each time it dials or accepts.
package auth

import (
	"errors"

	"github.com/ferrymsg/ferry/msg"
)

// Authentication methods (Ceph's CEPH_AUTH_*).
const (
	MethodNone  uint32 = 1 // CEPH_AUTH_NONE
	MethodCephx uint32 = 2 // CEPH_AUTH_CEPHX
)

// Connection modes (Ceph's CEPH_CON_MODE_*), negotiated in msgr2's
// AUTH_REQUEST / AUTH_DONE.
const (
	ConModeCRC    uint32 = 1 // CEPH_CON_MODE_CRC
	ConModeSecure uint32 = 2 // CEPH_CON_MODE_SECURE
)

// Errors an authentication may fail with. Implementations wrap them (with
// %w) with what exactly went wrong, so errors.Is works through engines.
var (
	// ErrBadKey: the peer's proof or our decryption with the key we hold
	// failed (a wrong key, or a tampered payload).
	ErrBadKey = errors.New("auth: bad key or proof")
	// ErrBadTicket: a ticket or authorizer did not decrypt or verify
	// (forged, for another service, unknown secret id, global id mismatch).
	ErrBadTicket = errors.New("auth: bad ticket")
	// ErrExpired: a ticket or rotating key has expired.
	ErrExpired = errors.New("auth: ticket expired")
	// ErrNoTicket: the client holds no (valid) ticket for the service it
	// must present an authorizer to.
	ErrNoTicket = errors.New("auth: no ticket for service")
	// ErrUnknownEntity: the server holds no key for the entity.
	ErrUnknownEntity = errors.New("auth: unknown entity")
	// ErrMalformed: a payload did not decode.
	ErrMalformed = errors.New("auth: malformed payload")
	// ErrDenied: the server refused (its result code says why).
	ErrDenied = errors.New("auth: denied")
)

// Result is what a finished authentication gives the connection.
type Result struct {
	// Method is the method that authenticated (MethodNone, MethodCephx).
	Method uint32
	// Name is the authenticated entity (the peer, on a server; ourselves,
	// on a client).
	Name msg.AuthName
	// GlobalID is the entity's global id (AUTH_DONE's global_id).
	GlobalID uint64
	// SessionKey is the raw secret of the session key (16 bytes for
	// cephx's AES key), the key of msgr2's AUTH_SIGNATURE HMAC and of
	// msgr1's message signatures. Empty for auth none.
	SessionKey []byte
	// ConnectionSecret is the secret msgr2 secure mode derives its key
	// and nonces from (at least 40 bytes); empty in crc mode.
	ConnectionSecret []byte
	// Caps is the peer's capabilities for this service as the ticket
	// carries them (cephx: the encoded caps string, e.g. "allow *"), and
	// AllowAll its allow_all flag. Server side only.
	Caps     []byte
	AllowAll bool
}

// Client is the client side of one connection attempt's authentication.
//
// msgr2: Request's payload goes in AUTH_REQUEST, each AUTH_REPLY_MORE is
// answered by ReplyMore's payload in AUTH_REQUEST_MORE, and AUTH_DONE is
// passed to Done. msgr1: Request's payload is the connect message's
// authorizer, a CHALLENGE_AUTHORIZER's payload goes to ReplyMore (whose
// answer is the next connect's authorizer), and READY's authorizer reply
// goes to Done.
type Client interface {
	// Method returns the method this client uses (MethodNone, MethodCephx).
	Method() uint32
	// Request returns the first payload for a peer of the given type:
	// mon-mode authentication for a mon, an authorizer for any other
	// service.
	Request(peerType msg.EntityType) ([]byte, error)
	// ReplyMore handles the server's challenge and returns the answer.
	ReplyMore(payload []byte) ([]byte, error)
	// Done handles the server's final payload (AUTH_DONE's, with the
	// global id and connection mode it carries) and returns the result.
	Done(globalID uint64, conMode uint32, payload []byte) (Result, error)
}

// Reply is a Server's answer to one client payload: either More (a
// challenge, sent as AUTH_REPLY_MORE), or Done with the payload of
// AUTH_DONE and the result.
type Reply struct {
	More    []byte
	Done    bool
	Payload []byte
	Result  Result
}

// Server is the server side of one connection attempt's authentication.
type Server interface {
	// Methods returns the methods this server allows for a peer of the
	// given type, in order of preference (sent back in AUTH_BAD_METHOD).
	Methods(peerType msg.EntityType) []uint32
	// Handle processes a client payload: the first one (AUTH_REQUEST,
	// first true) or a further one (AUTH_REQUEST_MORE). conMode is the
	// connection mode the engine has chosen; a Done reply for secure mode
	// carries a ConnectionSecret. An error refuses the client; the engine
	// answers AUTH_BAD_METHOD (msgr2) or BADAUTHORIZER (msgr1) and closes.
	Handle(method uint32, peerType msg.EntityType, conMode uint32, first bool, payload []byte) (Reply, error)
}
