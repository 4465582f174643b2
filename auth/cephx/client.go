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

// DefaultWant is the set of services a client asks tickets for when its
// config names none: MON, OSD and MGR, as librados does.
var DefaultWant = ServiceMask(msg.EntityMon, msg.EntityOSD, msg.EntityMgr)

// rotatingRefreshMargin: a service refreshes its rotating secrets when
// the current one expires within this margin (MonClient uses
// min(30 s, ttl/4)).
const rotatingRefreshMargin = 30 * time.Second

// ClientConfig configures a Client.
type ClientConfig struct {
	// Name is the entity ("client.admin", "osd.0").
	Name msg.AuthName
	// Key is the entity's long-term secret (from its keyring).
	Key Key
	// Want is the mask of services (ServiceMask) to get tickets for
	// besides AUTH; zero means DefaultWant.
	Want uint32
	// Rand is the source of challenges and nonces; nil means crypto/rand.
	// It is read under a lock: it need not be safe for concurrent use.
	Rand io.Reader
	// Now is the clock tickets are timed by; nil means time.Now.
	Now func() time.Time
}

// Ticket is a ticket a client holds for one service: the session key,
// the opaque ticket to present, and its timing (CephXTicketHandler).
type Ticket struct {
	Service    msg.EntityType // the service (msg.EntityAuth for the AUTH ticket)
	SessionKey Key            // the session key shared with the service
	Blob       TicketBlob     // the sealed ticket presented to the service
	Expires    time.Time      // now + validity when received
	RenewAfter time.Time      // Expires - validity/4
}

// Valid reports whether the ticket can be used at now (have_key).
func (t Ticket) Valid(now time.Time) bool { return now.Before(t.Expires) }

// NeedsRenewal reports whether the ticket should be renewed at now
// (need_key): from RenewAfter on, a quarter of its validity before it
// expires.
func (t Ticket) NeedsRenewal(now time.Time) bool { return !now.Before(t.RenewAfter) }

// Client is an entity's cephx state on the client side: its name and
// key, the global id the mons gave it, its AUTH ticket and its service
// tickets (Ceph's CephxClientHandler and CephXTicketManager). One Client
// serves all of an entity's connections: Handler gives a per-connection
// auth.Client, and the MAuth methods renew tickets over the mon session.
//
// A Client is safe for concurrent use.
type Client struct {
	name msg.AuthName
	key  Key
	want uint32
	rand io.Reader
	now  func() time.Time

	mu              sync.Mutex
	globalID        uint64
	tickets         map[msg.EntityType]*Ticket
	serverChallenge uint64 // of the current mon session, for renewals
	rotating        *RotatingSecrets
	pendingAuth     *Ticket // the AUTH ticket a renewal request carried
	principalKey    Key     // the AUTH session key of the last service ticket request
}

// NewClient returns a Client for cfg. The key must be an AES key.
func NewClient(cfg ClientConfig) (*Client, error) {
	if _, err := cfg.Key.block(); err != nil {
		return nil, fmt.Errorf("cephx: client %s: %w", cfg.Name, err)
	}
	c := &Client{
		name:    cfg.Name,
		key:     cfg.Key,
		want:    cfg.Want,
		rand:    cfg.Rand,
		now:     cfg.Now,
		tickets: map[msg.EntityType]*Ticket{},
	}
	if c.want == 0 {
		c.want = DefaultWant
	}
	if c.rand == nil {
		c.rand = rand.Reader
	} else {
		c.rand = &lockedReader{r: c.rand}
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Name returns the entity's name.
func (c *Client) Name() msg.AuthName { return c.name }

// GlobalID returns the global id the mons assigned, 0 before the first
// login.
func (c *Client) GlobalID() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.globalID
}

// Ticket returns the ticket held for a service (msg.EntityAuth for the
// AUTH ticket), valid or not.
func (c *Client) Ticket(service msg.EntityType) (Ticket, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tickets[service]
	if !ok {
		return Ticket{}, false
	}
	return *t, true
}

// Need returns the mask of services (AUTH included) whose ticket is
// missing or due for renewal at now (validate_tickets' need).
func (c *Client) Need(now time.Time) uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.needLocked(now)
}

func (c *Client) needLocked(now time.Time) uint32 {
	var need uint32
	for bit := uint32(1); bit <= 0x80; bit <<= 1 {
		if (c.want|uint32(msg.EntityAuth))&bit == 0 {
			continue
		}
		t, ok := c.tickets[msg.EntityType(bit)]
		if !ok || t.NeedsRenewal(now) {
			need |= bit
		}
	}
	return need
}

// NextRenewal returns the earliest time a ticket becomes due for renewal
// (the zero time if no ticket is held), for a caller's timer.
func (c *Client) NextRenewal() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	for _, t := range c.tickets {
		if next.IsZero() || t.RenewAfter.Before(next) {
			next = t.RenewAfter
		}
	}
	return next
}

// Rotating returns the rotating service secrets the last
// GET_ROTATING_KEY reply carried (nil before one), for a service
// entity's Verifier.
func (c *Client) Rotating() *RotatingSecrets {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rotating == nil {
		return nil
	}
	return c.rotating.clone()
}

// NeedRotating reports whether a service entity should fetch its
// rotating secrets at now: it holds none, fewer than three, or the
// current one expires within 30 s.
func (c *Client) NeedRotating(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rotating == nil {
		return true
	}
	return c.rotating.needNew(now.Add(rotatingRefreshMargin))
}

// Reset forgets the global id and every ticket, so the next mon login is
// a fresh one.
func (c *Client) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.globalID = 0
	c.tickets = map[msg.EntityType]*Ticket{}
	c.serverChallenge = 0
	c.pendingAuth = nil
}

// lockedReader serializes reads of a given random source: connections
// share their Client, KeyServer or Verifier, and a source such as a
// seeded generator is not safe for concurrent use.
type lockedReader struct {
	mu sync.Mutex
	r  io.Reader
}

func (l *lockedReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Read(p)
}

func (c *Client) random64() (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(c.rand, b[:]); err != nil {
		return 0, fmt.Errorf("cephx: random: %w", err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// authenticateRequest returns a GET_AUTH_SESSION_KEY request
// (CephXRequestHeader and CephXAuthenticate v3) answering
// serverChallenge, with old as the old ticket (nil for a fresh login).
func (c *Client) authenticateRequest(serverChallenge uint64, old *Ticket, want uint32) ([]byte, error) {
	cc, err := c.random64()
	if err != nil {
		return nil, err
	}
	proof, err := ChallengeProof(c.key, serverChallenge, cc)
	if err != nil {
		return nil, err
	}
	var blob TicketBlob
	if old != nil {
		blob = old.Blob
	}
	b := make([]byte, 0, 2+1+8+8+1+8+4+len(blob.Blob)+4)
	b = denc.AppendU16(b, OpGetAuthSessionKey)
	b = append(b, authenticateV)
	b = denc.AppendU64(b, cc)
	b = denc.AppendU64(b, proof)
	b = appendTicketBlob(b, blob)
	return denc.AppendU32(b, want|uint32(msg.EntityAuth)), nil
}

// storeLocked records the tickets of a reply at now.
func (c *Client) storeLocked(ts []receivedTicket, now time.Time) {
	for _, t := range ts {
		svc := msg.EntityType(t.service)
		exp := now.Add(t.validity)
		c.tickets[svc] = &Ticket{
			Service:    svc,
			SessionKey: t.sessionKey,
			Blob:       t.blob,
			Expires:    exp,
			RenewAfter: exp.Add(-t.validity / 4),
		}
	}
}

// decodeResponseHeader reads a CephXResponseHeader and fails with a
// *StatusError unless its status is 0.
func decodeResponseHeader(d *denc.Decoder, want uint16) error {
	op := d.U16()
	status := d.I32()
	if err := d.Err(); err != nil {
		return fail(auth.ErrMalformed, "cephx response header", err)
	}
	if op != want {
		return fail(auth.ErrMalformed, fmt.Sprintf("response to %#x, expected %#x", op, want), nil)
	}
	if status != 0 {
		return &StatusError{Status: status, Op: opName(op)}
	}
	return nil
}

func opName(op uint16) string {
	switch op {
	case OpGetAuthSessionKey:
		return "get_auth_session_key"
	case OpGetPrincipalSessionKey:
		return "get_principal_session_key"
	case OpGetRotatingKey:
		return "get_rotating_key"
	}
	return fmt.Sprintf("cephx op %#x", op)
}

// handleAuthReply handles the reply to GET_AUTH_SESSION_KEY: the AUTH
// ticket (encrypted with our key; its blob with old's session key when
// the mon sends it encrypted), then, if present, the connection secret
// and the extra service tickets. It updates the client and returns the
// new AUTH session key and the connection secret.
func (c *Client) handleAuthReply(payload []byte, globalID uint64, old *Ticket) (Key, []byte, error) {
	d := denc.NewDecoder(payload)
	if err := decodeResponseHeader(d, OpGetAuthSessionKey); err != nil {
		return Key{}, nil, err
	}
	ts, err := decodeTicketReply(d, c.key, func(uint32) (Key, bool) {
		if old == nil {
			return Key{}, false
		}
		return old.SessionKey, true
	})
	if err != nil {
		return Key{}, nil, err
	}
	var authT *receivedTicket
	for i := range ts {
		if ts[i].service == uint32(msg.EntityAuth) {
			authT = &ts[i]
		}
	}
	if authT == nil {
		return Key{}, nil, fail(auth.ErrMalformed, "reply without an AUTH ticket", nil)
	}
	var secret []byte
	var extra []receivedTicket
	if d.Len() > 0 {
		cbl := d.Bytes()
		if err := d.Err(); err != nil {
			return Key{}, nil, fail(auth.ErrMalformed, "connection secret", err)
		}
		if len(cbl) > 0 {
			p, err := DecodeEncrypted(denc.NewDecoder(cbl), authT.sessionKey)
			if err != nil {
				return Key{}, nil, fail(auth.ErrBadKey, "connection secret does not decrypt", err)
			}
			sd := denc.NewDecoder(p)
			s := sd.Bytes()
			if err := sd.Err(); err != nil {
				return Key{}, nil, fail(auth.ErrMalformed, "connection secret", err)
			}
			if len(s) > maxConnSecret {
				return Key{}, nil, fail(auth.ErrMalformed, "connection secret too long", nil)
			}
			secret = append([]byte(nil), s...)
		}
		if d.Len() > 0 {
			ebl := d.Bytes()
			if err := d.Err(); err != nil {
				return Key{}, nil, fail(auth.ErrMalformed, "extra tickets", err)
			}
			if len(ebl) > 0 {
				extra, err = decodeTicketReply(denc.NewDecoder(ebl), authT.sessionKey, func(uint32) (Key, bool) { return Key{}, false })
				if err != nil {
					return Key{}, nil, err
				}
			}
		}
	}
	if globalID == 0 {
		return Key{}, nil, fail(auth.ErrMalformed, "global id 0", nil)
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.globalID != globalID {
		// A new identity: tickets of another global id are useless.
		c.tickets = map[msg.EntityType]*Ticket{}
	}
	c.globalID = globalID
	c.storeLocked(ts, now)
	c.storeLocked(extra, now)
	return authT.sessionKey, secret, nil
}

// reclaimLocked returns the AUTH ticket to reclaim the global id with
// on a new mon connection, or nil for a fresh login: a client holding
// an unexpired AUTH ticket reconnects with its global id and that ticket
// (16.2.1+ rules); otherwise it logs in afresh with global id 0 and no
// ticket. It never reclaims without a ticket.
func (c *Client) reclaimLocked(now time.Time) *Ticket {
	t, ok := c.tickets[msg.EntityAuth]
	if !ok || c.globalID == 0 || !t.Valid(now) {
		return nil
	}
	cp := *t
	return &cp
}

// Handler returns the auth.Client for one connection attempt: mon-mode
// authentication for a mon, an authorizer for any other service.
//
// A mon login reclaims the global id when the client holds an unexpired
// AUTH ticket. If such a login is refused (a mon that no longer knows
// the ticket's secret, such as a restarted in-memory KeyServer, answers
// -EACCES), the caller should Reset the client and log in afresh;
// Reclaiming tells whether a handler's login was a reclaim.
func (c *Client) Handler() *ClientHandler { return &ClientHandler{c: c} }

// Reclaiming reports whether this handler's mon login presents the old
// AUTH ticket to reclaim the global id (valid after Request).
func (h *ClientHandler) Reclaiming() bool { return h.old != nil }

// ClientHandler is one connection attempt's cephx client (an
// auth.Client). It is used by one connection at a time.
type ClientHandler struct {
	c     *Client
	state int
	peer  msg.EntityType

	// mon mode
	globalID uint64
	old      *Ticket
	sc       uint64

	// authorizer mode
	ticket Ticket
	nonce  uint64
}

const (
	hsInit = iota
	hsRequested
	hsAnswered
	hsDone
)

var _ auth.Client = (*ClientHandler)(nil)

// Method returns auth.MethodCephx.
func (h *ClientHandler) Method() uint32 { return auth.MethodCephx }

// Request returns the first payload: for a mon, AUTH_MODE_MON, our name
// and the global id (the old one when reclaiming with our AUTH ticket,
// else 0); for another service, the authorizer built from our ticket for
// it (auth.ErrNoTicket if none is valid).
func (h *ClientHandler) Request(peerType msg.EntityType) ([]byte, error) {
	if h.state != hsInit {
		return nil, fmt.Errorf("cephx: Request called twice")
	}
	h.peer = peerType
	h.state = hsRequested
	c := h.c
	now := c.now()
	if peerType == msg.EntityMon {
		c.mu.Lock()
		h.old = c.reclaimLocked(now)
		if h.old != nil {
			h.globalID = c.globalID
		}
		c.mu.Unlock()
		b := make([]byte, 0, 1+4+4+len(c.name.ID)+8)
		b = append(b, AuthModeMon)
		b = msg.AppendAuthName(b, c.name)
		return denc.AppendU64(b, h.globalID), nil
	}
	c.mu.Lock()
	t, ok := c.tickets[peerType]
	gid := c.globalID
	if ok {
		h.ticket = *t
	}
	c.mu.Unlock()
	if !ok {
		return nil, fail(auth.ErrNoTicket, fmt.Sprintf("%s holds no ticket for %s", c.name, peerType), nil)
	}
	if !h.ticket.Valid(now) {
		return nil, fail(auth.ErrNoTicket, fmt.Sprintf("%s's ticket for %s expired at %s", c.name, peerType, h.ticket.Expires.Format(time.RFC3339)), auth.ErrExpired)
	}
	h.globalID = gid
	n, err := c.random64()
	if err != nil {
		return nil, err
	}
	h.nonce = n
	return buildAuthorizer(gid, uint32(peerType), h.ticket.Blob, h.ticket.SessionKey, authorize{nonce: n})
}

// ReplyMore answers the server's challenge: for a mon, the
// CephXServerChallenge is answered with GET_AUTH_SESSION_KEY (our proof
// of the key, the old ticket when reclaiming, the services wanted); for
// a service, the CephXAuthorizeChallenge is answered with the authorizer
// carrying challenge+1. Only one challenge is answered.
func (h *ClientHandler) ReplyMore(payload []byte) ([]byte, error) {
	if h.state != hsRequested {
		return nil, fail(auth.ErrMalformed, "unexpected challenge", nil)
	}
	h.state = hsAnswered
	c := h.c
	if h.peer == msg.EntityMon {
		sc, err := decodeServerChallenge(payload)
		if err != nil {
			return nil, err
		}
		h.sc = sc
		return c.authenticateRequest(sc, h.old, c.want)
	}
	p, err := h.ticket.SessionKey.Open(payload)
	if err != nil {
		return nil, fail(auth.ErrBadKey, "authorizer challenge does not decrypt with the session key", err)
	}
	d := denc.NewDecoder(p)
	d.U8()
	ch := d.U64()
	if err := d.Err(); err != nil {
		return nil, fail(auth.ErrMalformed, "authorizer challenge", err)
	}
	return buildAuthorizer(h.globalID, uint32(h.peer), h.ticket.Blob, h.ticket.SessionKey,
		authorize{nonce: h.nonce, haveChallenge: true, challengePlus1: ch + 1})
}

func decodeServerChallenge(p []byte) (uint64, error) {
	d := denc.NewDecoder(p)
	d.U8()
	sc := d.U64()
	if err := d.Err(); err != nil {
		return 0, fail(auth.ErrMalformed, "server challenge", err)
	}
	if sc == 0 {
		return 0, fail(auth.ErrMalformed, "server challenge 0", nil)
	}
	return sc, nil
}

// Done handles the server's final payload. For a mon it decrypts the
// AUTH ticket with our key (auth.ErrBadKey if it does not decrypt), the
// connection secret and the extra service tickets, and records the
// global id and tickets in the Client. For a service it checks the
// CephXAuthorizeReply (nonce+1) and, in secure mode, takes its
// connection secret.
func (h *ClientHandler) Done(globalID uint64, conMode uint32, payload []byte) (auth.Result, error) {
	if h.state != hsAnswered && !(h.state == hsRequested && h.peer != msg.EntityMon) {
		return auth.Result{}, fail(auth.ErrMalformed, "unexpected AUTH_DONE", nil)
	}
	h.state = hsDone
	c := h.c
	if h.peer == msg.EntityMon {
		sk, secret, err := c.handleAuthReply(payload, globalID, h.old)
		if err != nil {
			return auth.Result{}, err
		}
		if conMode == auth.ConModeSecure && len(secret) < MinConnectionSecret {
			return auth.Result{}, fail(auth.ErrMalformed, fmt.Sprintf("secure mode with a %d-byte connection secret", len(secret)), nil)
		}
		c.mu.Lock()
		c.serverChallenge = h.sc
		c.mu.Unlock()
		return auth.Result{
			Method:           auth.MethodCephx,
			Name:             c.name,
			GlobalID:         globalID,
			SessionKey:       append([]byte(nil), sk.Secret[:SecretLen]...),
			ConnectionSecret: secret,
		}, nil
	}
	r, err := verifyAuthorizeReply(h.ticket.SessionKey, h.nonce, payload)
	if err != nil {
		return auth.Result{}, err
	}
	if conMode == auth.ConModeSecure && len(r.connSecret) < MinConnectionSecret {
		return auth.Result{}, fail(auth.ErrMalformed, fmt.Sprintf("secure mode with a %d-byte connection secret", len(r.connSecret)), nil)
	}
	return auth.Result{
		Method:           auth.MethodCephx,
		Name:             c.name,
		GlobalID:         h.globalID,
		SessionKey:       append([]byte(nil), h.ticket.SessionKey.Secret[:SecretLen]...),
		ConnectionSecret: r.connSecret,
	}, nil
}

// verifyAuthorizeReply checks a service's CephXAuthorizeReply
// (CephXAuthorizer::verify_reply).
func verifyAuthorizeReply(sk Key, nonce uint64, payload []byte) (authorizeReply, error) {
	d := denc.NewDecoder(payload)
	p, err := DecodeEncrypted(d, sk)
	if err != nil {
		if d.Err() != nil {
			return authorizeReply{}, fail(auth.ErrMalformed, "authorizer reply", err)
		}
		return authorizeReply{}, fail(auth.ErrBadKey, "authorizer reply does not decrypt with the session key", err)
	}
	r, err := decodeAuthorizeReply(p)
	if err != nil {
		return authorizeReply{}, fail(auth.ErrMalformed, "authorizer reply", err)
	}
	if r.noncePlus1 != nonce+1 {
		return authorizeReply{}, fail(auth.ErrBadKey, fmt.Sprintf("authorizer reply nonce %#x, expected %#x", r.noncePlus1, nonce+1), nil)
	}
	return r, nil
}
