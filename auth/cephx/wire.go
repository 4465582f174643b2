package cephx

import (
	"fmt"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Request types of the CephXRequestHeader (CEPHX_*). Wire constants;
// append only.
const (
	OpGetAuthSessionKey      uint16 = 0x0100 // CEPHX_GET_AUTH_SESSION_KEY
	OpGetPrincipalSessionKey uint16 = 0x0200 // CEPHX_GET_PRINCIPAL_SESSION_KEY
	OpGetRotatingKey         uint16 = 0x0400 // CEPHX_GET_ROTATING_KEY
)

// Auth modes: the first byte of a msgr2 AUTH_REQUEST payload (AUTH_MODE_*).
// Wire constants; append only.
const (
	AuthModeAuthorizer    uint8 = 1  // AUTH_MODE_AUTHORIZER (and the authorizer's version byte)
	AuthModeAuthorizerMax uint8 = 9  // AUTH_MODE_AUTHORIZER_MAX
	AuthModeMon           uint8 = 10 // AUTH_MODE_MON
	AuthModeMonMax        uint8 = 19 // AUTH_MODE_MON_MAX
)

// Struct versions this package writes. Wire constants; append only.
const (
	authenticateV      = 3 // CephXAuthenticate: v3 always fills old_ticket
	authorizeV         = 2 // CephXAuthorize with the challenge fields
	authTicketV        = 2 // AuthTicket with auid
	authUIDDefault     = ^uint64(0)
	connSecretLenMsgr2 = 64 // AuthConnectionMeta::get_connection_secret_length for SECURE
	// MinConnectionSecret is the shortest connection secret msgr2 secure
	// mode can use (key 16 and two 12-byte nonces).
	MinConnectionSecret = 40
	// maxConnSecret bounds a connection secret a peer may send.
	maxConnSecret = 4096
)

// ServiceMask returns the bit mask of service types that cephx's
// other_keys and CephXServiceTicketRequest carry (each type is one bit,
// e.g. MON|OSD|MGR = 0x15).
func ServiceMask(types ...msg.EntityType) uint32 {
	var m uint32
	for _, t := range types {
		m |= uint32(t)
	}
	return m
}

// TicketBlob is CephXTicketBlob: the id of the service secret a ticket is
// sealed with, and the sealed ticket, opaque to its holder.
type TicketBlob struct {
	SecretID uint64 // the rotating secret's id, or StaticSecretID
	Blob     []byte // the sealed CephXServiceTicketInfo ("enc_bl" form)
}

func appendTicketBlob(b []byte, t TicketBlob) []byte {
	b = append(b, 1)
	b = denc.AppendU64(b, t.SecretID)
	return denc.AppendBytes(b, t.Blob)
}

func decodeTicketBlob(d *denc.Decoder) TicketBlob {
	d.U8()
	id := d.U64()
	blob := d.Bytes()
	if d.Err() != nil {
		return TicketBlob{}
	}
	return TicketBlob{SecretID: id, Blob: append([]byte(nil), blob...)}
}

// authTicket is AuthTicket, the content of every ticket.
type authTicket struct {
	name     msg.AuthName
	globalID uint64
	auid     uint64
	created  time.Time
	expires  time.Time
	allowAll bool
	caps     []byte // AuthCapsInfo.caps: the encoded caps string
	flags    uint32
}

func appendAuthTicket(b []byte, t *authTicket) []byte {
	b = append(b, authTicketV)
	b = msg.AppendAuthName(b, t.name)
	b = denc.AppendU64(b, t.globalID)
	b = denc.AppendU64(b, t.auid)
	b = appendUTime(b, t.created)
	b = appendUTime(b, t.expires)
	b = append(b, 1) // AuthCapsInfo struct_v
	b = denc.AppendBool(b, t.allowAll)
	b = denc.AppendBytes(b, t.caps)
	return denc.AppendU32(b, t.flags)
}

func decodeAuthTicket(d *denc.Decoder) authTicket {
	var t authTicket
	v := d.U8()
	t.name = msg.DecodeAuthName(d)
	t.globalID = d.U64()
	t.auid = authUIDDefault
	if v >= 2 {
		t.auid = d.U64()
	}
	t.created = decodeUTime(d)
	t.expires = decodeUTime(d)
	d.U8() // AuthCapsInfo struct_v
	t.allowAll = d.Bool()
	t.caps = append([]byte(nil), d.Bytes()...)
	t.flags = d.U32()
	return t
}

// capsString returns the capability string of an encoded caps blob (an
// encoded std::string), or the blob itself if it is not one.
func capsString(caps []byte) []byte {
	d := denc.NewDecoder(caps)
	s := d.Bytes()
	if d.Err() != nil || d.Len() != 0 {
		return caps
	}
	return s
}

// encodeCaps returns the caps blob for a capability string.
func encodeCaps(s string) []byte {
	if s == "" {
		return nil
	}
	return denc.AppendString(nil, s)
}

// serviceTicketInfo is CephXServiceTicketInfo, what the opaque ticket
// seals: the ticket and its session key.
type serviceTicketInfo struct {
	ticket     authTicket
	sessionKey Key
}

func appendServiceTicketInfo(b []byte, t *serviceTicketInfo) []byte {
	b = append(b, 1)
	b = appendAuthTicket(b, &t.ticket)
	return AppendKey(b, t.sessionKey)
}

func decodeServiceTicketInfo(p []byte) (serviceTicketInfo, error) {
	d := denc.NewDecoder(p)
	var t serviceTicketInfo
	d.U8()
	t.ticket = decodeAuthTicket(d)
	t.sessionKey = decodeKey(d)
	if err := d.Err(); err != nil {
		return serviceTicketInfo{}, err
	}
	if t.sessionKey.IsZero() {
		return serviceTicketInfo{}, fmt.Errorf("ticket without a session key: %w", denc.ErrMalformed)
	}
	return t, nil
}

// openTicket decrypts a ticket blob with a service secret.
func openTicket(secret Key, blob []byte) (serviceTicketInfo, error) {
	p, err := secret.Open(blob)
	if err != nil {
		return serviceTicketInfo{}, fail(auth.ErrBadTicket, "ticket does not decrypt with the service secret", err)
	}
	info, err := decodeServiceTicketInfo(p)
	if err != nil {
		return serviceTicketInfo{}, fail(auth.ErrBadTicket, "ticket does not decode", err)
	}
	return info, nil
}

// issuedTicket is one entry of a service ticket reply as a server builds
// it (CephXSessionAuthInfo).
type issuedTicket struct {
	service    uint32
	sessionKey Key
	validity   time.Duration
	blob       TicketBlob
}

// appendTicketReply appends a service ticket reply
// (cephx_build_service_ticket_reply): each CephXServiceTicket encrypted
// with principal, each ticket blob in clear or, when encKey is set,
// encrypted with it.
func appendTicketReply(b []byte, principal Key, tickets []issuedTicket, encKey *Key) ([]byte, error) {
	b = append(b, 1)
	b = denc.AppendU32(b, uint32(len(tickets)))
	for _, t := range tickets {
		b = denc.AppendU32(b, t.service)
		b = append(b, 1) // service_ticket_v
		var st []byte
		st = append(st, 1)
		st = AppendKey(st, t.sessionKey)
		st = appendDuration(st, t.validity)
		var err error
		if b, err = AppendEncrypted(b, principal, st); err != nil {
			return nil, err
		}
		blob := denc.AppendBytes(nil, appendTicketBlob(nil, t.blob))
		if encKey == nil {
			b = append(b, 0)
			b = append(b, blob...)
			continue
		}
		b = append(b, 1)
		if b, err = AppendEncrypted(b, *encKey, blob); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// receivedTicket is one entry of a service ticket reply as a client
// decodes it.
type receivedTicket struct {
	service    uint32
	sessionKey Key
	validity   time.Duration
	blob       TicketBlob
}

// minTicketEntry is the least a reply entry can take: service id,
// version, an empty encrypted blob, the enc flag and an empty blob.
const minTicketEntry = 4 + 1 + 4 + 1 + 4

// decodeTicketReply reads a service ticket reply
// (CephXTicketManager::verify_service_ticket_reply). principal decrypts
// each CephXServiceTicket; oldKey returns the session key a ticket blob
// sent encrypted (ticket_enc 1) is encrypted with: the current session
// key of that service's ticket. Decryption failures match
// auth.ErrBadKey, decoding failures auth.ErrMalformed.
func decodeTicketReply(d *denc.Decoder, principal Key, oldKey func(service uint32) (Key, bool)) ([]receivedTicket, error) {
	d.U8()
	n := d.Count(minTicketEntry)
	if err := d.Err(); err != nil {
		return nil, fail(auth.ErrMalformed, "ticket reply", err)
	}
	out := make([]receivedTicket, 0, n)
	for range n {
		var t receivedTicket
		t.service = d.U32()
		d.U8()
		p, err := DecodeEncrypted(d, principal)
		if err != nil {
			if d.Err() != nil {
				return nil, fail(auth.ErrMalformed, "ticket reply", err)
			}
			return nil, fail(auth.ErrBadKey, fmt.Sprintf("service ticket for %s does not decrypt", msg.EntityType(t.service)), err)
		}
		sd := denc.NewDecoder(p)
		sd.U8()
		t.sessionKey = decodeKey(sd)
		t.validity = decodeDuration(sd)
		if err := sd.Err(); err != nil {
			return nil, fail(auth.ErrMalformed, "service ticket", err)
		}
		if t.sessionKey.IsZero() {
			return nil, fail(auth.ErrMalformed, "service ticket without a session key", nil)
		}
		enc := d.U8()
		var blobBL []byte
		if enc == 0 {
			blobBL = d.Bytes()
			if err := d.Err(); err != nil {
				return nil, fail(auth.ErrMalformed, "ticket reply", err)
			}
		} else {
			k, ok := oldKey(t.service)
			if !ok {
				return nil, fail(auth.ErrBadKey, "ticket encrypted with a session key we do not hold", nil)
			}
			p, err := DecodeEncrypted(d, k)
			if err != nil {
				if d.Err() != nil {
					return nil, fail(auth.ErrMalformed, "ticket reply", err)
				}
				return nil, fail(auth.ErrBadKey, "ticket encrypted with the old session key does not decrypt", err)
			}
			bd := denc.NewDecoder(p)
			blobBL = bd.Bytes()
			if err := bd.Err(); err != nil {
				return nil, fail(auth.ErrMalformed, "encrypted ticket", err)
			}
		}
		bd := denc.NewDecoder(blobBL)
		t.blob = decodeTicketBlob(bd)
		if err := bd.Err(); err != nil {
			return nil, fail(auth.ErrMalformed, "ticket blob", err)
		}
		if bd.Len() != 0 {
			// Ceph ignores trailing bytes here but never sends any.
			return nil, fail(auth.ErrMalformed, "bytes after the ticket blob", nil)
		}
		out = append(out, t)
	}
	return out, nil
}

// authorize is CephXAuthorize, the encrypted part of an authorizer.
type authorize struct {
	nonce          uint64
	haveChallenge  bool
	challengePlus1 uint64
}

func appendAuthorize(b []byte, a authorize) []byte {
	b = append(b, authorizeV)
	b = denc.AppendU64(b, a.nonce)
	b = denc.AppendBool(b, a.haveChallenge)
	return denc.AppendU64(b, a.challengePlus1)
}

func decodeAuthorize(p []byte) (authorize, error) {
	d := denc.NewDecoder(p)
	var a authorize
	v := d.U8()
	a.nonce = d.U64()
	if v >= 2 {
		a.haveChallenge = d.Bool()
		a.challengePlus1 = d.U64()
	}
	return a, d.Err()
}

// buildAuthorizer returns an authorizer for a service (CephXAuthorizer:
// u8 1, global id, service id, ticket blob, then CephXAuthorize
// encrypted with the ticket's session key).
func buildAuthorizer(globalID uint64, service uint32, blob TicketBlob, sessionKey Key, a authorize) ([]byte, error) {
	b := make([]byte, 0, 1+8+4+1+8+4+len(blob.Blob)+4+48)
	b = append(b, AuthModeAuthorizer)
	b = denc.AppendU64(b, globalID)
	b = denc.AppendU32(b, service)
	b = appendTicketBlob(b, blob)
	return AppendEncrypted(b, sessionKey, appendAuthorize(nil, a))
}

// authorizerHead is the clear part of a received authorizer.
type authorizerHead struct {
	globalID uint64
	service  uint32
	blob     TicketBlob
	enc      []byte // encrypted CephXAuthorize (ciphertext)
}

func decodeAuthorizer(d *denc.Decoder) (authorizerHead, error) {
	var h authorizerHead
	v := d.U8()
	h.globalID = d.U64()
	h.service = d.U32()
	h.blob = decodeTicketBlob(d)
	h.enc = d.Bytes()
	if err := d.Err(); err != nil {
		return authorizerHead{}, fail(auth.ErrMalformed, "authorizer", err)
	}
	if v != AuthModeAuthorizer {
		return authorizerHead{}, fail(auth.ErrMalformed, fmt.Sprintf("authorizer version %d", v), nil)
	}
	return h, nil
}

// authorizeReply is CephXAuthorizeReply.
type authorizeReply struct {
	noncePlus1 uint64
	connSecret []byte
}

func appendAuthorizeReply(b []byte, r authorizeReply) []byte {
	if len(r.connSecret) == 0 {
		b = append(b, 1)
		return denc.AppendU64(b, r.noncePlus1)
	}
	b = append(b, 2)
	b = denc.AppendU64(b, r.noncePlus1)
	return denc.AppendBytes(b, r.connSecret)
}

func decodeAuthorizeReply(p []byte) (authorizeReply, error) {
	d := denc.NewDecoder(p)
	var r authorizeReply
	v := d.U8()
	r.noncePlus1 = d.U64()
	if v >= 2 {
		s := d.Bytes()
		if len(s) > maxConnSecret {
			d.Fail("connection secret", denc.ErrTooLarge)
		}
		r.connSecret = append([]byte(nil), s...)
	}
	return r, d.Err()
}

// ExpiringKey is one rotating service secret (ExpiringCryptoKey with its
// secret id).
type ExpiringKey struct {
	ID      uint64    // the secret id tickets name
	Key     Key       // the secret
	Expires time.Time // when it stops being current
}

// RotatingSecrets is a service type's rotating secrets (Ceph's
// RotatingSecrets): normally three, previous, current and next, in
// ascending id order, with MaxVer the highest id ever issued.
type RotatingSecrets struct {
	Secrets []ExpiringKey // ascending by ID
	MaxVer  uint64        // the highest id issued
}

// rotateNum is KEY_ROTATE_NUM, how many secrets a service type keeps.
const rotateNum = 3

// Current returns the current secret: the second oldest, or the only one
// (RotatingSecrets::current).
func (r *RotatingSecrets) Current() (ExpiringKey, bool) {
	switch len(r.Secrets) {
	case 0:
		return ExpiringKey{}, false
	case 1:
		return r.Secrets[0], true
	}
	return r.Secrets[1], true
}

// Lookup returns the secret with the given id.
func (r *RotatingSecrets) Lookup(id uint64) (ExpiringKey, bool) {
	for _, s := range r.Secrets {
		if s.ID == id {
			return s, true
		}
	}
	return ExpiringKey{}, false
}

// needNew reports whether a secret must be added at now
// (RotatingSecrets::need_new_secrets).
func (r *RotatingSecrets) needNew(now time.Time) bool {
	c, ok := r.Current()
	return len(r.Secrets) < rotateNum || !ok || !c.Expires.After(now)
}

// clone returns a deep copy of r.
func (r *RotatingSecrets) clone() *RotatingSecrets {
	c := &RotatingSecrets{MaxVer: r.MaxVer, Secrets: append([]ExpiringKey(nil), r.Secrets...)}
	return c
}

// minExpiringKey is the least an encoded rotating secret can take.
const minExpiringKey = 8 + 1 + 2 + 8 + 2 + 8

func appendRotating(b []byte, r *RotatingSecrets) []byte {
	b = append(b, 1)
	b = denc.AppendU32(b, uint32(len(r.Secrets)))
	for _, s := range r.Secrets {
		b = denc.AppendU64(b, s.ID)
		b = append(b, 1)
		b = AppendKey(b, s.Key)
		b = appendUTime(b, s.Expires)
	}
	return denc.AppendU64(b, r.MaxVer)
}

// DecodeRotatingSecrets decodes an encoded RotatingSecrets (u8 1, a map
// of secret id to ExpiringCryptoKey, u64 max_ver).
func DecodeRotatingSecrets(p []byte) (*RotatingSecrets, error) {
	d := denc.NewDecoder(p)
	d.U8()
	n := d.Count(minExpiringKey)
	r := &RotatingSecrets{Secrets: make([]ExpiringKey, 0, n)}
	for i := 0; i < n && d.Err() == nil; i++ {
		var s ExpiringKey
		s.ID = d.U64()
		d.U8()
		s.Key = decodeKey(d)
		s.Expires = decodeUTime(d)
		if len(r.Secrets) > 0 && s.ID <= r.Secrets[len(r.Secrets)-1].ID {
			d.Fail("rotating secrets", denc.ErrMalformed)
		}
		r.Secrets = append(r.Secrets, s)
	}
	r.MaxVer = d.U64()
	if err := d.Err(); err != nil {
		return nil, fail(auth.ErrMalformed, "rotating secrets", err)
	}
	return r, nil
}
