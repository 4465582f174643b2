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

// Defaults of a KeyServer (Ceph 16.2.15's auth_mon_ticket_ttl and
// auth_service_ticket_ttl).
const (
	DefaultMonTicketTTL     = 72 * time.Hour
	DefaultServiceTicketTTL = time.Hour
	// DefaultFirstGlobalID is the first global id a KeyServer assigns.
	DefaultFirstGlobalID uint64 = 4100
)

// StaticSecretID is the secret id of a ticket sealed with a service's
// static key instead of a rotating secret (Ceph's legacy path, where
// secret_id (uint64)-1 means the service's own key).
const StaticSecretID = ^uint64(0)

// ticketServices are the service types tickets are issued for (those
// with rotating secrets), in Ceph's bit order.
var ticketServices = []msg.EntityType{msg.EntityMon, msg.EntityMDS, msg.EntityOSD, msg.EntityMgr}

// KeyServerConfig configures a KeyServer.
type KeyServerConfig struct {
	// Keyring holds the entities the server authenticates, with their
	// keys and caps (a mon's key database). A client needs mon caps to
	// log in.
	Keyring *Keyring
	// MonTicketTTL is the validity of AUTH tickets and of AUTH rotating
	// secrets; zero means DefaultMonTicketTTL.
	MonTicketTTL time.Duration
	// ServiceTicketTTL is the validity of service tickets and of service
	// rotating secrets; zero means DefaultServiceTicketTTL.
	ServiceTicketTTL time.Duration
	// StaticServiceKeys, for a ferry-only cluster, seals the tickets of
	// these service types with a fixed key (secret id StaticSecretID)
	// instead of a rotating secret; the service verifies them with a
	// Verifier whose StaticKey is the same key.
	StaticServiceKeys map[msg.EntityType]Key
	// AllowInsecureGlobalIDReclaim is Ceph's
	// auth_allow_insecure_global_id_reclaim: legacy (CephXAuthenticate
	// v1/v2) clients may reclaim a global id without a valid ticket. The
	// default, false, is the secure setting.
	AllowInsecureGlobalIDReclaim bool
	// FirstGlobalID is the first global id assigned; zero means
	// DefaultFirstGlobalID.
	FirstGlobalID uint64
	// Rand is the source of keys and challenges; nil means crypto/rand.
	// It is read under a lock: it need not be safe for concurrent use.
	Rand io.Reader
	// Now is the clock of tickets and rotation; nil means time.Now.
	Now func() time.Time
}

// KeyServer is a mon's side of cephx (Ceph's KeyServer with
// CephxServiceHandler): it holds entities' keys and caps, keeps three
// rotating secrets per service type (and for AUTH), rotated as the clock
// passes their expiry, assigns global ids, and issues AUTH and service
// tickets. Handler gives each connection its MonSession.
//
// A KeyServer is safe for concurrent use.
type KeyServer struct {
	monTTL, svcTTL time.Duration
	static         map[msg.EntityType]Key
	allowInsecure  bool
	rand           io.Reader
	now            func() time.Time

	mu       sync.Mutex
	entities map[msg.AuthName]KeyringEntry
	rotating map[msg.EntityType]*RotatingSecrets
	nextGID  uint64
}

// NewKeyServer returns a KeyServer for cfg.
func NewKeyServer(cfg KeyServerConfig) (*KeyServer, error) {
	ks := &KeyServer{
		monTTL:        cfg.MonTicketTTL,
		svcTTL:        cfg.ServiceTicketTTL,
		static:        map[msg.EntityType]Key{},
		allowInsecure: cfg.AllowInsecureGlobalIDReclaim,
		rand:          cfg.Rand,
		now:           cfg.Now,
		entities:      map[msg.AuthName]KeyringEntry{},
		rotating:      map[msg.EntityType]*RotatingSecrets{},
		nextGID:       cfg.FirstGlobalID,
	}
	if ks.monTTL <= 0 {
		ks.monTTL = DefaultMonTicketTTL
	}
	if ks.svcTTL <= 0 {
		ks.svcTTL = DefaultServiceTicketTTL
	}
	if ks.nextGID == 0 {
		ks.nextGID = DefaultFirstGlobalID
	}
	if ks.rand == nil {
		ks.rand = rand.Reader
	} else {
		ks.rand = &lockedReader{r: ks.rand}
	}
	if ks.now == nil {
		ks.now = time.Now
	}
	for t, k := range cfg.StaticServiceKeys {
		if _, err := k.block(); err != nil {
			return nil, fmt.Errorf("cephx: static key for %s: %w", t, err)
		}
		ks.static[t] = k
	}
	if cfg.Keyring != nil {
		for _, e := range cfg.Keyring.Entries {
			if err := ks.AddEntity(e); err != nil {
				return nil, err
			}
		}
	}
	return ks, nil
}

// AddEntity adds or replaces an entity (its name, key and caps).
func (ks *KeyServer) AddEntity(e KeyringEntry) error {
	if _, err := e.Key.block(); err != nil {
		return fmt.Errorf("cephx: entity %s: %w", e.Name, err)
	}
	caps := make(map[string]string, len(e.Caps))
	for s, c := range e.Caps {
		caps[s] = c
	}
	e.Caps = caps
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.entities[e.Name] = e
	return nil
}

// RemoveEntity removes an entity; its existing tickets stay valid until
// they expire, as in Ceph.
func (ks *KeyServer) RemoveEntity(name msg.AuthName) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	delete(ks.entities, name)
}

// Rotate brings every service type's rotating secrets up to date at now
// (KeyServer::_rotate_secret): while fewer than three are held or the
// current one has expired, a new one is added, expiring one TTL after
// the newest (or after now + TTL, whichever is later), and the oldest is
// dropped. The server also rotates lazily whenever it uses a secret.
func (ks *KeyServer) Rotate(now time.Time) error {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, t := range append([]msg.EntityType{msg.EntityAuth}, ticketServices...) {
		if _, err := ks.rotatingLocked(t, now); err != nil {
			return err
		}
	}
	return nil
}

// Rotating returns a copy of a service type's rotating secrets as of now
// (rotating them first if due).
func (ks *KeyServer) Rotating(service msg.EntityType, now time.Time) (*RotatingSecrets, error) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	r, err := ks.rotatingLocked(service, now)
	if err != nil {
		return nil, err
	}
	return r.clone(), nil
}

func (ks *KeyServer) rotatingLocked(service msg.EntityType, now time.Time) (*RotatingSecrets, error) {
	r := ks.rotating[service]
	if r == nil {
		r = &RotatingSecrets{}
		ks.rotating[service] = r
	}
	ttl := ks.svcTTL
	if service == msg.EntityAuth {
		ttl = ks.monTTL
	}
	for r.needNew(now) {
		k, err := GenerateKey(ks.rand, now)
		if err != nil {
			return nil, err
		}
		exp := now
		if n := len(r.Secrets); n > 0 {
			exp = now.Add(ttl)
			if last := r.Secrets[n-1].Expires; last.After(exp) {
				exp = last
			}
		}
		r.MaxVer++
		r.Secrets = append(r.Secrets, ExpiringKey{ID: r.MaxVer, Key: k, Expires: exp.Add(ttl)})
		if len(r.Secrets) > rotateNum {
			r.Secrets = append(r.Secrets[:0:0], r.Secrets[len(r.Secrets)-rotateNum:]...)
		}
	}
	return r, nil
}

// serviceSecretLocked returns the secret to seal a service's tickets
// with: its static key, or its current rotating secret.
func (ks *KeyServer) serviceSecretLocked(service msg.EntityType, now time.Time) (Key, uint64, error) {
	if k, ok := ks.static[service]; ok {
		return k, StaticSecretID, nil
	}
	r, err := ks.rotatingLocked(service, now)
	if err != nil {
		return Key{}, 0, err
	}
	c, _ := r.Current()
	return c.Key, c.ID, nil
}

// ticketSecretLocked returns the secret a presented ticket of a service
// is sealed with, by its secret id.
func (ks *KeyServer) ticketSecretLocked(service msg.EntityType, id uint64, now time.Time) (Key, error) {
	if k, ok := ks.static[service]; ok && id == StaticSecretID {
		return k, nil
	}
	r, err := ks.rotatingLocked(service, now)
	if err != nil {
		return Key{}, err
	}
	s, ok := r.Lookup(id)
	if !ok {
		return Key{}, fail(auth.ErrBadTicket, fmt.Sprintf("%s ticket sealed with unknown secret id %d", service, id), nil)
	}
	return s.Key, nil
}

// issueLocked builds a ticket for service from parent (name, global id,
// caps), valid for ttl from now.
func (ks *KeyServer) issueLocked(service msg.EntityType, parent authTicket, ttl time.Duration, now time.Time) (issuedTicket, error) {
	secret, sid, err := ks.serviceSecretLocked(service, now)
	if err != nil {
		return issuedTicket{}, err
	}
	sk, err := GenerateKey(ks.rand, now)
	if err != nil {
		return issuedTicket{}, err
	}
	t := parent
	t.created = now
	t.expires = now.Add(ttl)
	t.auid = authUIDDefault
	// Like Ceph's _build_session_auth_info, MON tickets carry no caps
	// (a mon reads them from its own database).
	if e, ok := ks.entities[parent.name]; ok && service != msg.EntityMon {
		t.caps = encodeCaps(e.Caps[serviceName(service)])
	}
	info := serviceTicketInfo{ticket: t, sessionKey: sk}
	sealed, err := secret.Seal(appendServiceTicketInfo(nil, &info))
	if err != nil {
		return issuedTicket{}, err
	}
	return issuedTicket{
		service:    uint32(service),
		sessionKey: sk,
		validity:   ttl,
		blob:       TicketBlob{SecretID: sid, Blob: sealed},
	}, nil
}

// serviceName is the caps key of a service type ("mon", "osd", ...).
func serviceName(t msg.EntityType) string { return t.String() }

func (ks *KeyServer) random64() (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(ks.rand, b[:]); err != nil {
		return 0, fmt.Errorf("cephx: random: %w", err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// verifyTicketLocked opens a presented ticket of service with the
// secret its id names and checks its global id and expiry.
func (ks *KeyServer) verifyTicketLocked(service msg.EntityType, globalID uint64, blob TicketBlob, now time.Time) (serviceTicketInfo, error) {
	secret, err := ks.ticketSecretLocked(service, blob.SecretID, now)
	if err != nil {
		return serviceTicketInfo{}, err
	}
	info, err := openTicket(secret, blob.Blob)
	if err != nil {
		return serviceTicketInfo{}, err
	}
	if info.ticket.globalID != globalID {
		return serviceTicketInfo{}, fail(auth.ErrBadTicket, fmt.Sprintf("ticket of global id %d presented for global id %d", info.ticket.globalID, globalID), nil)
	}
	if !now.Before(info.ticket.expires) {
		return serviceTicketInfo{}, fail(auth.ErrExpired, fmt.Sprintf("%s ticket of %s expired at %s", service, info.ticket.name, info.ticket.expires.Format(time.RFC3339)), nil)
	}
	return info, nil
}

// Handler returns the server side of one mon connection: an auth.Server
// for mon-mode logins that then answers the session's MAuth requests.
func (ks *KeyServer) Handler() *MonSession { return &MonSession{ks: ks} }

// global id states of a session (global_id_status_t).
const (
	gidNone = iota
	gidNewPending
	gidReclaimPending
	gidDone
)

// MonSession is the server side of one client's mon session: the login
// (as an auth.Server over msgr2, or through HandleMAuth over msgr1) and
// the MAuth requests that follow it (AUTH ticket renewal, service
// tickets, rotating secrets). It is safe for concurrent use (a
// connection's dispatcher may handle its MAuth messages on any
// goroutine), though a connection's requests are meant to come in order.
type MonSession struct {
	ks *KeyServer

	mu        sync.Mutex // held by the exported methods; before ks.mu
	name      msg.AuthName
	globalID  uint64
	gidStatus int
	challenge uint64
	authed    bool
	caps      string
}

var _ auth.Server = (*MonSession)(nil)

// Methods returns [auth.MethodCephx].
func (s *MonSession) Methods(msg.EntityType) []uint32 { return []uint32{auth.MethodCephx} }

// Name returns the session's entity (empty before the login's first
// request).
func (s *MonSession) Name() msg.AuthName {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name
}

// GlobalID returns the session's global id.
func (s *MonSession) GlobalID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.globalID
}

// Authenticated reports whether the session's login has completed.
func (s *MonSession) Authenticated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authed
}

// Handle processes a msgr2 mon-mode login: the first payload (mode, name,
// global id) is answered with a server challenge, the second
// (GET_AUTH_SESSION_KEY) with AUTH_DONE's payload: the AUTH ticket, the
// connection secret (64 bytes in secure mode) and the requested service
// tickets.
func (s *MonSession) Handle(method uint32, peerType msg.EntityType, conMode uint32, first bool, payload []byte) (auth.Reply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if method != auth.MethodCephx {
		return auth.Reply{}, &StatusError{Status: StatusEOPNOTSUPP, Op: "auth request", Err: fmt.Errorf("%w: method %d", auth.ErrDenied, method)}
	}
	if first {
		d := denc.NewDecoder(payload)
		mode := d.U8()
		if d.Err() == nil && (mode < AuthModeMon || mode > AuthModeMonMax) {
			return auth.Reply{}, fail(auth.ErrMalformed, fmt.Sprintf("auth mode %d is not a mon mode", mode), nil)
		}
		name := msg.DecodeAuthName(d)
		gid := d.U64()
		if err := d.Err(); err != nil {
			return auth.Reply{}, fail(auth.ErrMalformed, "mon auth request", err)
		}
		ch, err := s.start(name, gid)
		if err != nil {
			return auth.Reply{}, err
		}
		return auth.Reply{More: ch}, nil
	}
	d := denc.NewDecoder(payload)
	op := d.U16()
	if err := d.Err(); err != nil {
		return auth.Reply{}, fail(auth.ErrMalformed, "cephx request header", err)
	}
	if op != OpGetAuthSessionKey {
		return auth.Reply{}, fail(auth.ErrMalformed, fmt.Sprintf("%s during login", opName(op)), nil)
	}
	secretLen := 0
	if conMode == auth.ConModeSecure {
		secretLen = connSecretLenMsgr2
	}
	bl, res, err := s.authenticate(d, true, secretLen)
	if err != nil {
		return auth.Reply{}, err
	}
	return auth.Reply{Done: true, Payload: bl, Result: res}, nil
}

// start begins a login (Monitor::handle_auth_request's first step and
// CephxServiceHandler::do_start_session): the entity must be known, a
// global id 0 gets a new one, and the server challenge is returned.
func (s *MonSession) start(name msg.AuthName, gid uint64) ([]byte, error) {
	if s.gidStatus != gidNone {
		return nil, fail(auth.ErrMalformed, "login started twice", nil)
	}
	ks := s.ks
	ks.mu.Lock()
	_, ok := ks.entities[name]
	if ok {
		if gid == 0 {
			gid = ks.nextGID
			ks.nextGID++
			s.gidStatus = gidNewPending
		} else {
			s.gidStatus = gidReclaimPending
		}
	}
	ks.mu.Unlock()
	if !ok {
		return nil, fail(auth.ErrUnknownEntity, name.String(), nil)
	}
	var ch uint64
	for ch == 0 {
		var err error
		if ch, err = ks.random64(); err != nil {
			return nil, err
		}
	}
	s.name, s.globalID, s.challenge = name, gid, ch
	b := append(make([]byte, 0, 9), 1)
	return denc.AppendU64(b, ch), nil
}

// authenticate handles GET_AUTH_SESSION_KEY (the header already read):
// it checks the proof and the old ticket, and returns the result_bl
// with the new AUTH ticket. msgr2 says whether a connection secret blob
// is sent (empty over MAuth); secretLen is its length.
func (s *MonSession) authenticate(d *denc.Decoder, msgr2 bool, secretLen int) ([]byte, auth.Result, error) {
	if s.challenge == 0 {
		return nil, auth.Result{}, fail(auth.ErrMalformed, "GET_AUTH_SESSION_KEY before the server challenge", nil)
	}
	v := d.U8()
	cc := d.U64()
	proof := d.U64()
	old := decodeTicketBlob(d)
	var otherKeys uint32
	if v >= 2 {
		otherKeys = d.U32()
	}
	if err := d.Err(); err != nil {
		return nil, auth.Result{}, fail(auth.ErrMalformed, "CephXAuthenticate", err)
	}
	legacy := v < 3
	ks := s.ks
	now := ks.now()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	e, ok := ks.entities[s.name]
	if !ok {
		return nil, auth.Result{}, fail(auth.ErrUnknownEntity, s.name.String(), nil)
	}
	want, err := ChallengeProof(e.Key, s.challenge, cc)
	if err != nil {
		return nil, auth.Result{}, err
	}
	if want != proof {
		return nil, auth.Result{}, fail(auth.ErrBadKey, fmt.Sprintf("%s's proof does not match its key", s.name), nil)
	}
	encKey, err := s.verifyOldTicketLocked(old, legacy, now)
	if err != nil {
		return nil, auth.Result{}, err
	}
	if s.globalID >= ks.nextGID {
		// A reclaimed id this server did not assign (it was restarted,
		// or another server sharing its secrets did): never assign it
		// again.
		ks.nextGID = s.globalID + 1
	}
	monCaps := e.Caps[serviceName(msg.EntityMon)]
	if monCaps == "" {
		return nil, auth.Result{}, &StatusError{Status: StatusEACCES, Op: opName(OpGetAuthSessionKey), Err: fmt.Errorf("%w: %s has no mon caps", auth.ErrDenied, s.name)}
	}
	parent := authTicket{name: s.name, globalID: s.globalID}
	at, err := ks.issueLocked(msg.EntityAuth, parent, ks.monTTL, now)
	if err != nil {
		return nil, auth.Result{}, err
	}
	bl := denc.AppendU16(nil, OpGetAuthSessionKey)
	bl = denc.AppendI32(bl, 0)
	if bl, err = appendTicketReply(bl, e.Key, []issuedTicket{at}, encKey); err != nil {
		return nil, auth.Result{}, err
	}
	var secret []byte
	if otherKeys != 0 {
		var cbl []byte
		if msgr2 {
			secret = make([]byte, secretLen)
			if _, err := io.ReadFull(ks.rand, secret); err != nil {
				return nil, auth.Result{}, fmt.Errorf("cephx: random: %w", err)
			}
			if cbl, err = AppendEncrypted(nil, at.sessionKey, denc.AppendBytes(nil, secret)); err != nil {
				return nil, auth.Result{}, err
			}
		}
		bl = denc.AppendBytes(bl, cbl)
		var extra []issuedTicket
		for _, svc := range ticketServices {
			if otherKeys&uint32(svc) == 0 {
				continue
			}
			t, err := ks.issueLocked(svc, parent, ks.svcTTL, now)
			if err != nil {
				return nil, auth.Result{}, err
			}
			extra = append(extra, t)
		}
		var ebl []byte
		if len(extra) > 0 {
			if ebl, err = appendTicketReply(nil, at.sessionKey, extra, nil); err != nil {
				return nil, auth.Result{}, err
			}
		}
		bl = denc.AppendBytes(bl, ebl)
	}
	s.gidStatus = gidReclaimPending // later renewals must present this ticket
	s.authed = true
	s.caps = monCaps
	if !msgr2 || secretLen == 0 {
		secret = nil
	}
	return bl, auth.Result{
		Method:           auth.MethodCephx,
		Name:             s.name,
		GlobalID:         s.globalID,
		SessionKey:       append([]byte(nil), at.sessionKey.Secret[:SecretLen]...),
		ConnectionSecret: secret,
		Caps:             []byte(monCaps),
	}, nil
}

// verifyOldTicketLocked applies the 16.2.1+ rules to the old ticket
// (CephxServiceHandler::verify_old_ticket) and returns the key the new
// ticket blob is to be encrypted with (the old session key), or nil.
func (s *MonSession) verifyOldTicketLocked(old TicketBlob, legacy bool, now time.Time) (*Key, error) {
	ks := s.ks
	if s.gidStatus == gidNewPending {
		if len(old.Blob) > 0 {
			return nil, &StatusError{Status: StatusEINVAL, Op: opName(OpGetAuthSessionKey),
				Err: fmt.Errorf("%w: superfluous ticket presented with a new global id", auth.ErrBadTicket)}
		}
		return nil, nil
	}
	insecureOK := ks.allowInsecure && legacy
	if len(old.Blob) == 0 {
		if insecureOK {
			return nil, nil
		}
		return nil, fail(auth.ErrBadTicket, fmt.Sprintf("%s reclaims global id %d without presenting its ticket", s.name, s.globalID), nil)
	}
	info, err := ks.verifyTicketLocked(msg.EntityAuth, s.globalID, old, now)
	if err != nil {
		if insecureOK {
			return nil, nil
		}
		return nil, fmt.Errorf("cephx: %s reclaiming global id %d: %w", s.name, s.globalID, err)
	}
	if info.ticket.name != s.name {
		return nil, fail(auth.ErrBadTicket, fmt.Sprintf("%s presents the ticket of %s", s.name, info.ticket.name), nil)
	}
	k := info.sessionKey
	return &k, nil
}

// MAuthAnswer is what a MonSession answers an MAuth with: the fields of
// the MAuthReply to send.
type MAuthAnswer struct {
	Protocol uint32 // the method answering (2 = cephx)
	Result   int32  // 0 or a negative errno
	GlobalID uint64 // the session's global id
	ResultBL []byte // the cephx reply
	// Login is set when the request completed a login or renewed the
	// AUTH ticket: the session's new keys and caps.
	Login *auth.Result
}

// HandleMAuth answers an MAuth (its protocol and auth_payload) on this
// session: protocol 0 starts a login (msgr1), protocol 2 carries
// GET_AUTH_SESSION_KEY (the login's second step, or a renewal with the
// current AUTH ticket), GET_PRINCIPAL_SESSION_KEY (service tickets, for
// an authenticated session) or GET_ROTATING_KEY (a service entity's
// rotating secrets). A refusal is an answer with a negative Result, and
// the error says why.
func (s *MonSession) HandleMAuth(protocol uint32, payload []byte) (MAuthAnswer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ans, err := s.handleMAuth(protocol, payload)
	if err != nil {
		return MAuthAnswer{Protocol: protocol, Result: Status(err), GlobalID: s.globalID}, err
	}
	ans.GlobalID = s.globalID
	return ans, nil
}

func (s *MonSession) handleMAuth(protocol uint32, payload []byte) (MAuthAnswer, error) {
	d := denc.NewDecoder(payload)
	switch protocol {
	case MAuthProtocolNegotiate:
		d.U8()
		methods := d.U32s()
		name := msg.DecodeAuthName(d)
		gid := d.U64()
		if err := d.Err(); err != nil {
			return MAuthAnswer{}, fail(auth.ErrMalformed, "MAuth negotiation", err)
		}
		found := false
		for _, m := range methods {
			found = found || m == auth.MethodCephx
		}
		if !found {
			return MAuthAnswer{}, &StatusError{Status: StatusEOPNOTSUPP, Op: "auth negotiation", Err: fmt.Errorf("%w: client offers no cephx", auth.ErrDenied)}
		}
		ch, err := s.start(name, gid)
		if err != nil {
			return MAuthAnswer{}, err
		}
		return MAuthAnswer{Protocol: auth.MethodCephx, ResultBL: ch}, nil
	case MAuthProtocolCephx:
	default:
		return MAuthAnswer{}, &StatusError{Status: StatusEOPNOTSUPP, Op: "MAuth", Err: fmt.Errorf("%w: protocol %d", auth.ErrDenied, protocol)}
	}
	op := d.U16()
	if err := d.Err(); err != nil {
		return MAuthAnswer{}, fail(auth.ErrMalformed, "cephx request header", err)
	}
	switch op {
	case OpGetAuthSessionKey:
		bl, res, err := s.authenticate(d, false, 0)
		if err != nil {
			return MAuthAnswer{}, err
		}
		return MAuthAnswer{Protocol: auth.MethodCephx, ResultBL: bl, Login: &res}, nil
	case OpGetPrincipalSessionKey:
		bl, err := s.principal(d)
		if err != nil {
			return MAuthAnswer{}, err
		}
		return MAuthAnswer{Protocol: auth.MethodCephx, ResultBL: bl}, nil
	case OpGetRotatingKey:
		bl, err := s.rotatingKeys()
		if err != nil {
			return MAuthAnswer{}, err
		}
		return MAuthAnswer{Protocol: auth.MethodCephx, ResultBL: bl}, nil
	}
	return MAuthAnswer{}, &StatusError{Status: StatusEINVAL, Op: opName(op), Err: fmt.Errorf("%w: unknown request", auth.ErrMalformed)}
}

// principal answers GET_PRINCIPAL_SESSION_KEY: it verifies the
// authorizer built from the AUTH ticket (no challenge on this path) and
// issues the tickets asked for, encrypted with the AUTH session key.
func (s *MonSession) principal(d *denc.Decoder) ([]byte, error) {
	if !s.authed {
		return nil, fail(auth.ErrDenied, "service tickets asked for before the login", nil)
	}
	h, err := decodeAuthorizer(d)
	if err != nil {
		return nil, err
	}
	d.U8()
	keys := d.U32()
	if err := d.Err(); err != nil {
		return nil, fail(auth.ErrMalformed, "CephXServiceTicketRequest", err)
	}
	if h.service != uint32(msg.EntityAuth) {
		return nil, fail(auth.ErrBadTicket, fmt.Sprintf("service ticket request with a %s ticket", msg.EntityType(h.service)), nil)
	}
	ks := s.ks
	now := ks.now()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	info, err := ks.verifyTicketLocked(msg.EntityAuth, h.globalID, h.blob, now)
	if err != nil {
		return nil, err
	}
	if info.ticket.name != s.name || h.globalID != s.globalID {
		return nil, fail(auth.ErrBadTicket, fmt.Sprintf("session of %s.%d presents the ticket of %s.%d", s.name, s.globalID, info.ticket.name, h.globalID), nil)
	}
	p, err := info.sessionKey.Open(h.enc)
	if err != nil {
		return nil, fail(auth.ErrBadTicket, "authorizer does not decrypt with the ticket's session key", err)
	}
	if _, err := decodeAuthorize(p); err != nil {
		return nil, fail(auth.ErrMalformed, "CephXAuthorize", err)
	}
	parent := authTicket{name: info.ticket.name, globalID: info.ticket.globalID}
	var ts []issuedTicket
	for _, svc := range ticketServices {
		if keys&uint32(svc) == 0 {
			continue
		}
		t, err := ks.issueLocked(svc, parent, ks.svcTTL, now)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	bl := denc.AppendU16(nil, OpGetPrincipalSessionKey)
	bl = denc.AppendI32(bl, 0)
	return appendTicketReply(bl, info.sessionKey, ts, nil)
}

// rotatingKeys answers GET_ROTATING_KEY: the rotating secrets of the
// session entity's own type, encrypted with its key.
func (s *MonSession) rotatingKeys() ([]byte, error) {
	if !s.authed {
		return nil, fail(auth.ErrDenied, "rotating keys asked for before the login", nil)
	}
	svc := s.name.Type
	isSvc := false
	for _, t := range ticketServices {
		isSvc = isSvc || t == svc
	}
	if !isSvc {
		return nil, &StatusError{Status: StatusEPERM, Op: opName(OpGetRotatingKey), Err: fmt.Errorf("%w: %s is not a service", auth.ErrDenied, s.name)}
	}
	ks := s.ks
	now := ks.now()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	e, ok := ks.entities[s.name]
	if !ok {
		return nil, fail(auth.ErrUnknownEntity, s.name.String(), nil)
	}
	r, err := ks.rotatingLocked(svc, now)
	if err != nil {
		return nil, err
	}
	bl := denc.AppendU16(nil, OpGetRotatingKey)
	bl = denc.AppendI32(bl, 0)
	return AppendEncrypted(bl, e.Key, appendRotating(nil, r))
}
