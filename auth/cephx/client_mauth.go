package cephx

import (
	"fmt"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// MAuth protocol numbers (MAuth.protocol): 0 for the msgr1 negotiation,
// else the auth method. Wire constants; append only.
const (
	MAuthProtocolNegotiate uint32 = 0
	MAuthProtocolCephx     uint32 = auth.MethodCephx
)

// MAuthLogin is one mon login carried in MAuth messages (msgr1, where the
// connect message has no authorizer for a mon): Hello's payload goes in
// an MAuth with protocol 0; the MAuthReply's result_bl (the server
// challenge) goes to HandleChallenge, whose payload goes in an MAuth with
// protocol 2; that MAuthReply goes to HandleDone. It is used by one
// connection at a time.
type MAuthLogin struct {
	h ClientHandler
}

// MAuthLogin starts a mon login over MAuth. It reclaims the global id
// with the AUTH ticket, or logs in afresh, as Handler does.
func (c *Client) MAuthLogin() *MAuthLogin {
	return &MAuthLogin{h: ClientHandler{c: c}}
}

// Hello returns the payload of the first MAuth (protocol 0): u8 1, the
// supported methods [cephx], our name and the global id.
func (l *MAuthLogin) Hello() []byte {
	h := &l.h
	c := h.c
	h.peer = msg.EntityMon
	h.state = hsRequested
	c.mu.Lock()
	h.old = c.reclaimLocked(c.now())
	if h.old != nil {
		h.globalID = c.globalID
	}
	c.mu.Unlock()
	b := make([]byte, 0, 1+8+4+4+len(c.name.ID)+8)
	b = append(b, 1)
	b = denc.AppendU32s(b, []uint32{auth.MethodCephx})
	b = msg.AppendAuthName(b, c.name)
	return denc.AppendU64(b, h.globalID)
}

// HandleChallenge handles the MAuthReply to Hello (its result and
// result_bl, a CephXServerChallenge) and returns the payload of the
// second MAuth (protocol 2): GET_AUTH_SESSION_KEY.
func (l *MAuthLogin) HandleChallenge(result int32, resultBL []byte) ([]byte, error) {
	if result != 0 {
		return nil, &StatusError{Status: result, Op: "auth negotiation"}
	}
	return l.h.ReplyMore(resultBL)
}

// HandleDone handles the MAuthReply to the GET_AUTH_SESSION_KEY request:
// its result, global id and result_bl. Over MAuth the reply carries no
// connection secret.
func (l *MAuthLogin) HandleDone(result int32, globalID uint64, resultBL []byte) (auth.Result, error) {
	if result != 0 {
		return auth.Result{}, &StatusError{Status: result, Op: opName(OpGetAuthSessionKey)}
	}
	return l.h.Done(globalID, auth.ConModeCRC, resultBL)
}

// RenewRequest returns the payload of an MAuth (protocol 2) that renews
// what is due at now over an established mon session, or nil if nothing
// is: the AUTH ticket first (GET_AUTH_SESSION_KEY with the current AUTH
// ticket as old ticket and the server challenge of the session's login,
// as MonClient does), else the service tickets due
// (GET_PRINCIPAL_SESSION_KEY). Its reply goes to HandleMAuthReply.
func (c *Client) RenewRequest(now time.Time) ([]byte, error) {
	c.mu.Lock()
	need := c.needLocked(now)
	at, haveAuth := c.tickets[msg.EntityAuth]
	sc := c.serverChallenge
	c.mu.Unlock()
	if need == 0 {
		return nil, nil
	}
	if !haveAuth || !at.Valid(now) {
		return nil, fail(auth.ErrNoTicket, "no valid AUTH ticket: log in to a mon again", nil)
	}
	if need&uint32(msg.EntityAuth) != 0 && sc != 0 {
		old := *at
		b, err := c.authenticateRequest(sc, &old, need&^uint32(msg.EntityAuth))
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.pendingAuth = &old
		c.mu.Unlock()
		return b, nil
	}
	if need&^uint32(msg.EntityAuth) == 0 {
		return nil, nil
	}
	return c.ServiceTicketRequest(need &^ uint32(msg.EntityAuth))
}

// ServiceTicketRequest returns the payload of an MAuth (protocol 2) that
// asks for tickets for the services in the mask
// (GET_PRINCIPAL_SESSION_KEY): an authorizer built from the AUTH ticket
// and a CephXServiceTicketRequest. Its reply goes to HandleMAuthReply.
func (c *Client) ServiceTicketRequest(services uint32) ([]byte, error) {
	now := c.now()
	c.mu.Lock()
	at, ok := c.tickets[msg.EntityAuth]
	var t Ticket
	if ok {
		t = *at
	}
	gid := c.globalID
	c.mu.Unlock()
	if !ok || !t.Valid(now) {
		return nil, fail(auth.ErrNoTicket, "no valid AUTH ticket to ask for service tickets with", nil)
	}
	nonce, err := c.random64()
	if err != nil {
		return nil, err
	}
	a, err := buildAuthorizer(gid, uint32(msg.EntityAuth), t.Blob, t.SessionKey, authorize{nonce: nonce})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.principalKey = t.SessionKey
	c.mu.Unlock()
	b := make([]byte, 0, 2+len(a)+5)
	b = denc.AppendU16(b, OpGetPrincipalSessionKey)
	b = append(b, a...)
	b = append(b, 1)
	return denc.AppendU32(b, services), nil
}

// RotatingKeyRequest returns the payload of an MAuth (protocol 2) by
// which a service entity asks for its type's rotating secrets
// (GET_ROTATING_KEY). Its reply goes to HandleMAuthReply, after which
// Rotating returns them.
func (c *Client) RotatingKeyRequest() []byte {
	return denc.AppendU16(nil, OpGetRotatingKey)
}

// HandleMAuthReply handles an MAuthReply to RenewRequest,
// ServiceTicketRequest or RotatingKeyRequest: its result, global id and
// result_bl. It stores what the reply carries (tickets or rotating
// secrets) and returns the request type answered.
func (c *Client) HandleMAuthReply(result int32, globalID uint64, resultBL []byte) (uint16, error) {
	d := denc.NewDecoder(resultBL)
	op := d.U16()
	if result != 0 {
		return op, &StatusError{Status: result, Op: opName(op)}
	}
	if err := d.Err(); err != nil {
		return 0, fail(auth.ErrMalformed, "MAuth reply", err)
	}
	switch op {
	case OpGetAuthSessionKey:
		c.mu.Lock()
		old := c.pendingAuth
		c.pendingAuth = nil
		if globalID == 0 {
			globalID = c.globalID
		}
		c.mu.Unlock()
		_, _, err := c.handleAuthReply(resultBL, globalID, old)
		return op, err
	case OpGetPrincipalSessionKey:
		d.Reset(resultBL)
		if err := decodeResponseHeader(d, op); err != nil {
			return op, err
		}
		// The reply is encrypted with the session key of the AUTH ticket
		// the request carried: normally the current one, or the one
		// before a renewal that crossed the request.
		c.mu.Lock()
		keys := []Key{c.principalKey}
		if at, ok := c.tickets[msg.EntityAuth]; ok && !at.SessionKey.Equal(c.principalKey) {
			keys = append(keys, at.SessionKey)
		}
		c.mu.Unlock()
		var ts []receivedTicket
		var err error
		for _, k := range keys {
			d.Reset(resultBL)
			decodeResponseHeader(d, op)
			if ts, err = decodeTicketReply(d, k, func(uint32) (Key, bool) { return Key{}, false }); err == nil {
				break
			}
		}
		if err != nil {
			return op, err
		}
		now := c.now()
		c.mu.Lock()
		c.storeLocked(ts, now)
		c.mu.Unlock()
		return op, nil
	case OpGetRotatingKey:
		d.Reset(resultBL)
		if err := decodeResponseHeader(d, op); err != nil {
			return op, err
		}
		p, err := DecodeEncrypted(d, c.key)
		if err != nil {
			if d.Err() != nil {
				return op, fail(auth.ErrMalformed, "rotating secrets", err)
			}
			return op, fail(auth.ErrBadKey, "rotating secrets do not decrypt with our key", err)
		}
		r, err := DecodeRotatingSecrets(p)
		if err != nil {
			return op, err
		}
		c.mu.Lock()
		c.rotating = r
		c.mu.Unlock()
		return op, nil
	}
	return op, fail(auth.ErrMalformed, fmt.Sprintf("MAuth reply to unknown request %#x", op), nil)
}
