package cephx

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Service is the service type verified for (msg.EntityOSD, ...):
	// tickets for another service are refused.
	Service msg.EntityType
	// StaticKey, if set, opens tickets whose secret id is StaticSecretID
	// (a ferry-only cluster whose KeyServer has the same key in
	// StaticServiceKeys, or Ceph's legacy own-key path).
	StaticKey Key
	// Rotating is the initial set of rotating secrets (nil for none yet;
	// SetRotating installs fresh ones, e.g. from Client.Rotating).
	Rotating *RotatingSecrets
	// KeyServer, if set, is the key server of the same process (a
	// ferry-only cluster whose server is both mon and service): the
	// verifier opens tickets with its secrets for Service (rotating, or
	// static) directly, and Rotating and SetRotating are not needed.
	KeyServer *KeyServer
	// Rand is the source of challenges and connection secrets; nil means
	// crypto/rand. It is read under a lock: it need not be safe for
	// concurrent use.
	Rand io.Reader
	// Now is the clock ticket expiry is checked against; nil means
	// time.Now.
	Now func() time.Time
}

// Verifier is a service's side of cephx: it verifies the authorizers
// clients present (cephx_verify_authorizer) with the service type's
// rotating secrets or a static key. Handler gives each connection its
// VerifierSession.
//
// A Verifier is safe for concurrent use.
type Verifier struct {
	service msg.EntityType
	static  Key
	ks      *KeyServer
	rand    io.Reader
	now     func() time.Time

	mu       sync.Mutex
	rotating *RotatingSecrets
}

// NewVerifier returns a Verifier for cfg.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	v := &Verifier{service: cfg.Service, static: cfg.StaticKey, ks: cfg.KeyServer, rand: cfg.Rand, now: cfg.Now}
	if !v.static.IsZero() {
		if _, err := v.static.block(); err != nil {
			return nil, fmt.Errorf("cephx: verifier static key: %w", err)
		}
	}
	if cfg.Rotating != nil {
		v.rotating = cfg.Rotating.clone()
	}
	if v.rand == nil {
		v.rand = rand.Reader
	} else {
		v.rand = &lockedReader{r: v.rand}
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v, nil
}

// SetRotating installs a new set of rotating secrets.
func (v *Verifier) SetRotating(r *RotatingSecrets) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if r == nil {
		v.rotating = nil
		return
	}
	v.rotating = r.clone()
}

// secret returns the key a ticket with secret id id is sealed with.
func (v *Verifier) secret(id uint64) (Key, error) {
	if id == StaticSecretID && !v.static.IsZero() {
		return v.static, nil
	}
	if v.ks != nil {
		v.ks.mu.Lock()
		defer v.ks.mu.Unlock()
		return v.ks.ticketSecretLocked(v.service, id, v.ks.now())
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.rotating == nil {
		return Key{}, fail(auth.ErrBadTicket, fmt.Sprintf("no rotating secrets for %s yet (ticket secret id %d)", v.service, id), nil)
	}
	s, ok := v.rotating.Lookup(id)
	if !ok {
		return Key{}, fail(auth.ErrBadTicket, fmt.Sprintf("ticket sealed with unknown %s secret id %d", v.service, id), nil)
	}
	return s.Key, nil
}

// Handler returns the server side of one connection attempt.
func (v *Verifier) Handler() *VerifierSession { return &VerifierSession{v: v} }

// VerifierSession verifies one connection's authorizer (an auth.Server
// in authorizer mode): the first authorizer is answered with a
// challenge, the second must carry challenge+1. It is used by one
// connection at a time.
type VerifierSession struct {
	v         *Verifier
	challenge uint64
	done      bool
}

var _ auth.Server = (*VerifierSession)(nil)

// Methods returns [auth.MethodCephx].
func (s *VerifierSession) Methods(msg.EntityType) []uint32 { return []uint32{auth.MethodCephx} }

// Handle verifies an authorizer: the ticket must be for this service,
// sealed with a secret held, of the global id presented and unexpired;
// the authorizer must decrypt with the ticket's session key. Without a
// challenge yet, the answer is a challenge (AUTH_REPLY_MORE); with the
// right challenge+1 it is AUTH_DONE's payload, the encrypted
// CephXAuthorizeReply (nonce+1, and a 64-byte connection secret in
// secure mode), with the peer's name, global id and caps.
func (s *VerifierSession) Handle(method uint32, peerType msg.EntityType, conMode uint32, first bool, payload []byte) (auth.Reply, error) {
	v := s.v
	if method != auth.MethodCephx {
		return auth.Reply{}, &StatusError{Status: StatusEOPNOTSUPP, Op: "auth request", Err: fmt.Errorf("%w: method %d", auth.ErrDenied, method)}
	}
	if s.done {
		return auth.Reply{}, fail(auth.ErrMalformed, "authorizer after AUTH_DONE", nil)
	}
	d := denc.NewDecoder(payload)
	h, err := decodeAuthorizer(d)
	if err != nil {
		return auth.Reply{}, err
	}
	if h.service != uint32(v.service) {
		return auth.Reply{}, fail(auth.ErrBadTicket, fmt.Sprintf("ticket for %s presented to %s", msg.EntityType(h.service), v.service), nil)
	}
	secret, err := v.secret(h.blob.SecretID)
	if err != nil {
		return auth.Reply{}, err
	}
	info, err := openTicket(secret, h.blob.Blob)
	if err != nil {
		return auth.Reply{}, err
	}
	if info.ticket.globalID != h.globalID {
		return auth.Reply{}, fail(auth.ErrBadTicket, fmt.Sprintf("ticket of global id %d presented for global id %d", info.ticket.globalID, h.globalID), nil)
	}
	now := v.now()
	if !now.Before(info.ticket.expires) {
		return auth.Reply{}, fail(auth.ErrExpired, fmt.Sprintf("%s ticket of %s expired at %s", v.service, info.ticket.name, info.ticket.expires.Format(time.RFC3339)), nil)
	}
	sk := info.sessionKey
	p, err := sk.Open(h.enc)
	if err != nil {
		return auth.Reply{}, fail(auth.ErrBadTicket, "authorizer does not decrypt with the ticket's session key", err)
	}
	a, err := decodeAuthorize(p)
	if err != nil {
		return auth.Reply{}, fail(auth.ErrMalformed, "CephXAuthorize", err)
	}
	if s.challenge == 0 || !a.haveChallenge {
		if s.challenge != 0 {
			return auth.Reply{}, fail(auth.ErrBadKey, "second authorizer without the challenge's answer", nil)
		}
		for s.challenge == 0 {
			var b [8]byte
			if _, err := io.ReadFull(v.rand, b[:]); err != nil {
				return auth.Reply{}, fmt.Errorf("cephx: random: %w", err)
			}
			s.challenge = binary.LittleEndian.Uint64(b[:])
		}
		ch := denc.AppendU64(append(make([]byte, 0, 9), 1), s.challenge)
		more, err := sk.Seal(ch)
		if err != nil {
			return auth.Reply{}, err
		}
		return auth.Reply{More: more}, nil
	}
	if a.challengePlus1 != s.challenge+1 {
		return auth.Reply{}, fail(auth.ErrBadKey, fmt.Sprintf("challenge answered with %#x, expected %#x", a.challengePlus1, s.challenge+1), nil)
	}
	var secretBytes []byte
	if conMode == auth.ConModeSecure {
		secretBytes = make([]byte, connSecretLenMsgr2)
		if _, err := io.ReadFull(v.rand, secretBytes); err != nil {
			return auth.Reply{}, fmt.Errorf("cephx: random: %w", err)
		}
	}
	out, err := AppendEncrypted(nil, sk, appendAuthorizeReply(nil, authorizeReply{noncePlus1: a.nonce + 1, connSecret: secretBytes}))
	if err != nil {
		return auth.Reply{}, err
	}
	s.done = true
	return auth.Reply{Done: true, Payload: out, Result: auth.Result{
		Method:           auth.MethodCephx,
		Name:             info.ticket.name,
		GlobalID:         info.ticket.globalID,
		SessionKey:       append([]byte(nil), sk.Secret[:SecretLen]...),
		ConnectionSecret: secretBytes,
		Caps:             capsString(info.ticket.caps),
		AllowAll:         info.ticket.allowAll,
	}}, nil
}
