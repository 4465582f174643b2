package msgr2

import (
	"net/netip"

	"github.com/ferrymsg/ferry/msg"
)

// Role says which side of a connection an Engine plays.
type Role uint8

// Roles.
const (
	Client Role = iota + 1 // the side that connected
	Server                 // the side that accepted
)

func (r Role) String() string {
	switch r {
	case Client:
		return "client"
	case Server:
		return "server"
	}
	return "role?"
}

// Config is what an Engine needs to know before the handshake. The
// messenger fills it in per connection attempt.
type Config struct {
	Role Role

	// MyName is this entity (its type goes into HELLO; its number is the
	// gid of CLIENT_IDENT / SERVER_IDENT). A client whose number is
	// msg.NewID sends the global id the server assigned in AUTH_DONE.
	MyName msg.EntityName
	// MyAuthName is the name a client authenticates as (client.admin).
	MyAuthName msg.AuthName
	// MyAddrs are the addresses this entity advertises. A client that has
	// not bound sends one "any" address carrying Nonce, with the IP the
	// server reports in its HELLO.
	MyAddrs msg.AddrVec
	// Nonce distinguishes this messenger instance on its addresses.
	Nonce uint32

	// PeerAddr is the peer's address: for a client, the address it
	// dialled (CLIENT_IDENT's target); for a server, the socket's remote
	// address, reported back in HELLO.
	PeerAddr msg.EntityAddr

	// Supported and Required are Ceph feature masks.
	Supported, Required uint64

	// Lossy marks the session lossy (client: sets the LOSSY ident flag;
	// server: the policy for this peer is lossy).
	Lossy bool

	// NoDataCRC offers FeatureNoDataCRC in the banner: if the peer offers
	// it too, MESSAGE data segments go without CRCs both ways (DataCRC).
	// For peers that checksum their data end to end themselves.
	NoDataCRC bool

	// ClientCookie identifies a client's session (0 for lossy sessions).
	ClientCookie uint64
	// GlobalSeq is this attempt's global sequence number.
	GlobalSeq uint64

	// GlobalID is the global id a server hands the client in AUTH_DONE.
	GlobalID uint64

	// Session resumption (client): a lossless client reconnecting a
	// session it has established sets ServerCookie (from the server's
	// SERVER_IDENT), ConnectSeq and InSeq (the last sequence number it
	// received); the engine then sends SESSION_RECONNECT instead of
	// CLIENT_IDENT.
	ServerCookie uint64
	ConnectSeq   uint64
	InSeq        uint64
	// PeerName is the session's peer, which a resumption does not repeat.
	PeerName msg.EntityName

	// Limits bound frame sizes; zero fields take their defaults.
	Limits Limits
}

// Stamp is a keepalive timestamp (seconds and nanoseconds). The engine
// never reads the clock: stamps come from the caller and are echoed back.
type Stamp struct{ Sec, Nsec uint32 }

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// EvReady: the handshake finished; Engine.Peer describes the peer.
	EvReady EventKind = iota + 1
	// EvClientIdent (server): the client identified itself; the caller
	// decides (Accept, Wait or Reject) before feeding more input.
	EvClientIdent
	// EvWait (client): the server asked us to wait for its connection to
	// us; the caller closes this attempt and backs off.
	EvWait
	// EvMessage: a message arrived, in order (Msg). Messages whose seq is
	// not above the last one received are dropped and reported with
	// Dropped set instead.
	EvMessage
	// EvAck: the peer has received every message up to Seq (from an ACK
	// frame or a message's ack_seq).
	EvAck
	// EvKeepalive: the peer sent KEEPALIVE2; the caller must answer with
	// KEEPALIVE2_ACK carrying Stamp (see AppendKeepaliveAck).
	EvKeepalive
	// EvKeepaliveAck: the peer answered our keepalive sent at Stamp.
	EvKeepaliveAck
	// EvReconnect (server): the client asks to resume a session
	// (PendingReconnect); the caller looks up the session and answers
	// with AcceptReconnect, Reset, Retry, RetryGlobal or Wait.
	EvReconnect
	// EvReconnected (client): the server resumed the session; Seq is the
	// last sequence number it had received from us (requeued messages at
	// or below it are discarded).
	EvReconnected
	// EvSessionReset (client): the server has no such session (Full: it
	// lost all state, a remote reset; otherwise only the resumption is
	// refused). The caller calls ResetSession, which sends CLIENT_IDENT.
	EvSessionReset
	// EvRetry (client): the server knows a newer connect_seq (Seq); the
	// engine has already resent SESSION_RECONNECT with Seq+1.
	EvRetry
	// EvRetryGlobal (client): the server has seen global_seq Seq; the
	// caller picks a higher one and calls RetryGlobal.
	EvRetryGlobal
)

func (k EventKind) String() string {
	switch k {
	case EvReady:
		return "ready"
	case EvClientIdent:
		return "client-ident"
	case EvWait:
		return "wait"
	case EvMessage:
		return "message"
	case EvAck:
		return "ack"
	case EvKeepalive:
		return "keepalive"
	case EvKeepaliveAck:
		return "keepalive-ack"
	case EvReconnect:
		return "reconnect"
	case EvReconnected:
		return "reconnected"
	case EvSessionReset:
		return "session-reset"
	case EvRetry:
		return "retry"
	case EvRetryGlobal:
		return "retry-global"
	}
	return "event?"
}

// Event is one thing the engine reports from its input.
type Event struct {
	Kind    EventKind
	Msg     *msg.Message // EvMessage
	Seq     uint64       // EvAck; EvMessage: the message's seq
	Dropped bool         // EvMessage: a duplicate (seq <= in_seq), not delivered
	Full    bool         // EvSessionReset: the server lost the whole session
	Skipped uint64       // EvMessage: how many sequence numbers were skipped before it
	Stamp   Stamp        // EvKeepalive, EvKeepaliveAck
}

// Peer is what the handshake learned about the other side.
type Peer struct {
	Name      msg.EntityName // peer type and gid
	AuthName  msg.AuthName   // server: who the client authenticated as
	Addrs     msg.AddrVec    // the peer's advertised addresses
	Supported uint64         // peer's feature masks
	Required  uint64
	Features  uint64 // negotiated: ours & peer's supported
	Flags     uint64 // peer's ident flags (IdentFlagLossy)
	Cookie    uint64 // client: server cookie; server: client cookie
	GlobalSeq uint64 // peer's global_seq
	GlobalID  uint64 // client: the id AUTH_DONE assigned us
	MyAddr    msg.EntityAddr
	Rev1      bool // frames use the msgr2.1 layout
}

// Lossy reports whether the peer marked the session lossy.
func (p *Peer) Lossy() bool { return p.Flags&IdentFlagLossy != 0 }

type state uint8

const (
	stBannerPrefix state = iota
	stBannerPayload
	stHello
	stAuth          // client: AUTH_REQUEST sent; server: waiting for AUTH_REQUEST
	stAuthSignature // waiting for the peer's AUTH_SIGNATURE
	stIdent         // client: CLIENT_IDENT sent; server: waiting for it
	stDecide        // server: waiting for the caller's decision
	stReady
	stClosed
)

// Engine is the msgr2.1 protocol state machine of one connection in crc
// mode with auth method NONE: banner, HELLO, authentication, identity
// exchange, then MESSAGE, ACK and keepalive frames. It does no I/O and
// never reads the clock: the caller asks Need how many bytes to read, reads
// exactly that many, and passes them to Feed, which returns events; bytes
// the engine wants sent accumulate in Output.
//
// An Engine is driven by one goroutine (the connection's reader). Once
// ready, InSeq may be read from any goroutine; the writer encodes messages
// with the codec (MessageFrame) and Rev1.
type Engine struct {
	cfg   Config
	lim   Limits
	state state

	rev1 bool
	// noDataCRC: both banners offered FeatureNoDataCRC.
	noDataCRC bool
	peer      Peer
	inSeq     uint64
	out       []byte
	events    []Event
	pre       Preamble
	inFrame   bool // a preamble was read; the body comes next
	bannerN   int
	clientID  ClientIdent
	recon     SessionReconnect // server: the pending SESSION_RECONNECT
	decideOn  Tag              // server: what stDecide is deciding (CLIENT_IDENT or SESSION_RECONNECT)
	resumed   bool             // client: this attempt sent SESSION_RECONNECT
	err       error
}

// NewEngine returns an engine for one connection. Call Start to produce
// the banner.
func NewEngine(cfg Config) *Engine {
	return &Engine{cfg: cfg, lim: cfg.Limits.WithDefaults()}
}

// Start queues the banner. Both sides send it at once.
func (e *Engine) Start() {
	sup := FeatureRevision1
	if e.cfg.NoDataCRC {
		sup |= FeatureNoDataCRC
	}
	e.out = AppendBanner(e.out, sup, 0)
}

// DataCRC reports whether MESSAGE data segments carry CRCs on this
// connection: false once both banners offered FeatureNoDataCRC. A sender
// that encodes MessageFrames itself must then leave the data CRC zero
// (DataCRC 0, DataCRCSet), and a reader need not compute it; the engine
// does not check it.
func (e *Engine) DataCRC() bool { return !e.noDataCRC }

// Output returns the bytes to send and clears the buffer; the slice is
// valid until the next call to Feed or Accept.
func (e *Engine) Output() []byte {
	o := e.out
	e.out = e.out[:0]
	return o
}

// Ready reports whether the handshake has finished.
func (e *Engine) Ready() bool { return e.state == stReady }

// Rev1 reports whether frames use the msgr2.1 layout (valid once the
// peer's banner has been read).
func (e *Engine) Rev1() bool { return e.rev1 }

// Peer returns what the handshake learned about the peer.
func (e *Engine) Peer() *Peer { return &e.peer }

// PendingIdent returns the CLIENT_IDENT that the server is deciding on.
func (e *Engine) PendingIdent() *ClientIdent { return &e.clientID }

// PendingReconnect returns the SESSION_RECONNECT that the server is
// deciding on.
func (e *Engine) PendingReconnect() *SessionReconnect { return &e.recon }

// Resumed reports whether the client asked to resume a session.
func (e *Engine) Resumed() bool { return e.resumed }

// ConnectSeq returns the client's current connect_seq.
func (e *Engine) ConnectSeq() uint64 { return e.cfg.ConnectSeq }

// GlobalSeq returns the client's current global_seq.
func (e *Engine) GlobalSeq() uint64 { return e.cfg.GlobalSeq }

// InSeq returns the sequence number of the last message delivered.
func (e *Engine) InSeq() uint64 { return e.inSeq }

// SetInSeq sets the receive sequence (session resumption).
func (e *Engine) SetInSeq(s uint64) { e.inSeq = s }

// Err returns the error that closed the engine, if any.
func (e *Engine) Err() error { return e.err }

// Need returns how many bytes Feed needs next, and whether the engine may
// keep a reference to them (a message body, whose segments become the
// message's buffers): if retain is true the caller must pass a buffer it
// will not reuse.
func (e *Engine) Need() (n int, retain bool) {
	switch e.state {
	case stBannerPrefix:
		return BannerPrefixLen, false
	case stBannerPayload:
		return e.bannerN, false
	case stClosed, stDecide:
		return 0, false
	}
	if !e.inFrame {
		return PreambleLen, false
	}
	return e.pre.BodyLen(e.rev1), e.pre.Tag == TagMessage
}

// fail closes the engine with err and returns it.
func (e *Engine) fail(err error) error {
	if e.err == nil {
		e.err = err
	}
	e.state = stClosed
	return e.err
}

// Feed consumes exactly the number of bytes Need asked for and returns the
// events they produced (valid until the next call). Any error is fatal to
// the connection: the caller closes it and logs the reason.
func (e *Engine) Feed(p []byte) ([]Event, error) {
	e.events = e.events[:0]
	if e.state == stClosed {
		if e.err != nil {
			return nil, e.err
		}
		return nil, errorf(ErrProtocol, 0, "engine closed")
	}
	if n, _ := e.Need(); len(p) != n {
		return nil, e.fail(errorf(ErrProtocol, 0, "fed %d bytes, need %d", len(p), n))
	}
	switch e.state {
	case stBannerPrefix:
		n, err := ParseBannerPrefix(p)
		if err != nil {
			return nil, e.fail(err)
		}
		e.bannerN = n
		e.state = stBannerPayload
		return nil, nil
	case stBannerPayload:
		sup, req, err := ParseBannerPayload(p)
		if err != nil {
			return nil, e.fail(err)
		}
		if missing := req &^ (FeatureRevision1); missing != 0 {
			return nil, e.fail(errorf(ErrMissingFeatures, 0, "peer banner requires msgr2 features %#x", missing))
		}
		e.rev1 = sup&FeatureRevision1 != 0
		e.peer.Rev1 = e.rev1
		e.noDataCRC = e.cfg.NoDataCRC && sup&FeatureNoDataCRC != 0
		e.state = stHello
		e.sendHello()
		return nil, nil
	}
	if !e.inFrame {
		pre, err := ParsePreamble(p, e.lim)
		if err != nil {
			return nil, e.fail(err)
		}
		if pre.Tag != TagMessage && uint32(pre.PayloadLen()) > e.lim.MaxControl {
			return nil, e.fail(errorf(ErrTooLarge, pre.Tag, "control frame of %d bytes", pre.PayloadLen()))
		}
		e.pre = pre
		e.inFrame = true
		if e.pre.BodyLen(e.rev1) == 0 {
			// An empty frame (WAIT, for example) has no body to read.
			e.inFrame = false
			var segs [MaxSegments][]byte
			if err := e.handleFrame(e.pre.Tag, segs); err != nil {
				return nil, e.fail(err)
			}
		}
		return e.events, nil
	}
	e.inFrame = false
	segs, err := parseBody(&e.pre, p, e.rev1, e.noDataCRC)
	if err != nil {
		return nil, e.fail(err)
	}
	if err := e.handleFrame(e.pre.Tag, segs); err != nil {
		return nil, e.fail(err)
	}
	return e.events, nil
}

func (e *Engine) sendHello() {
	h := Hello{EntityType: e.cfg.MyName.Type, PeerAddr: e.cfg.PeerAddr}
	e.sendControl(TagHello, h.Append(nil))
}

func (e *Engine) sendControl(tag Tag, payload []byte) {
	e.out = AppendFrame(e.out, tag, e.rev1, payload)
}

func unexpected(tag Tag, st state) error {
	return errorf(ErrUnexpectedFrame, tag, "%s in state %d", tag, st)
}

func (e *Engine) handleFrame(tag Tag, segs [MaxSegments][]byte) error {
	// Frames valid in any state after the banner.
	if e.state == stReady {
		return e.handleReady(tag, segs)
	}
	if tag == TagMessage || tag == TagAck || tag == TagKeepalive2 || tag == TagKeepalive2Ack {
		return unexpected(tag, e.state)
	}
	switch e.state {
	case stHello:
		if tag != TagHello {
			return unexpected(tag, e.state)
		}
		h, err := ParseHello(segs[0])
		if err != nil {
			return err
		}
		e.peer.Name.Type = h.EntityType
		e.peer.MyAddr = h.PeerAddr
		if e.cfg.Role == Client {
			e.sendAuthRequest()
		}
		e.state = stAuth
		return nil
	case stAuth:
		if e.cfg.Role == Client {
			return e.clientAuth(tag, segs[0])
		}
		return e.serverAuth(tag, segs[0])
	case stAuthSignature:
		if tag != TagAuthSignature {
			return unexpected(tag, e.state)
		}
		sig, err := ParseAuthSignature(segs[0])
		if err != nil {
			return err
		}
		// With auth NONE there is no session key and the signature is
		// all zeros.
		if sig.Sig != ([32]byte{}) {
			return errorf(ErrAuthRejected, tag, "non-zero auth signature without a session key")
		}
		e.state = stIdent
		if e.cfg.Role == Client {
			if e.cfg.ServerCookie != 0 {
				e.sendReconnect()
			} else {
				e.sendClientIdent()
			}
		}
		return nil
	case stIdent:
		if e.cfg.Role == Client {
			return e.clientIdentReply(tag, segs[0])
		}
		return e.serverIdent(tag, segs[0])
	}
	return unexpected(tag, e.state)
}

func (e *Engine) sendAuthRequest() {
	mode := AuthModeAuthorizer
	if e.peer.Name.Type == msg.EntityMon {
		mode = AuthModeMon
	}
	pl := AuthNonePayload{Mode: mode, Name: e.cfg.MyAuthName, GlobalID: 0}
	req := AuthRequest{Method: AuthMethodNone, PreferredModes: []uint32{ConModeCRC}, Payload: pl.Append(nil)}
	e.sendControl(TagAuthRequest, req.Append(nil))
}

func (e *Engine) clientAuth(tag Tag, p []byte) error {
	switch tag {
	case TagAuthBadMethod:
		bm, err := ParseAuthBadMethod(p)
		if err != nil {
			return err
		}
		return errorf(ErrBadAuthMethod, tag, "server refused auth method %d (result %d); it allows methods %v modes %v; ferry offers NONE with CRC",
			bm.Method, bm.Result, bm.AllowedMethods, bm.AllowedModes)
	case TagAuthDone:
		d, err := ParseAuthDone(p)
		if err != nil {
			return err
		}
		if d.ConMode != ConModeCRC {
			return errorf(ErrBadAuthMethod, tag, "server chose connection mode %d; ferry supports only crc mode", d.ConMode)
		}
		e.peer.GlobalID = d.GlobalID
		e.sendControl(TagAuthSignature, (&AuthSignature{}).Append(nil))
		e.state = stAuthSignature
		return nil
	case TagAuthReplyMore:
		return errorf(ErrBadAuthMethod, tag, "auth NONE takes no further round trips")
	}
	return unexpected(tag, e.state)
}

func (e *Engine) serverAuth(tag Tag, p []byte) error {
	if tag != TagAuthRequest {
		return unexpected(tag, e.state)
	}
	req, err := ParseAuthRequest(p)
	if err != nil {
		return err
	}
	crc := false
	for _, m := range req.PreferredModes {
		if m == ConModeCRC {
			crc = true
		}
	}
	if req.Method != AuthMethodNone || !crc {
		// EOPNOTSUPP, as Ceph answers; the client may try again.
		bm := AuthBadMethod{Method: req.Method, Result: -95,
			AllowedMethods: []uint32{AuthMethodNone}, AllowedModes: []uint32{ConModeCRC}}
		e.sendControl(TagAuthBadMethod, bm.Append(nil))
		return nil
	}
	pl, err := ParseAuthNonePayload(req.Payload)
	if err != nil {
		return err
	}
	e.peer.AuthName = pl.Name
	done := AuthDone{GlobalID: e.cfg.GlobalID, ConMode: ConModeCRC}
	e.sendControl(TagAuthDone, done.Append(nil))
	e.sendControl(TagAuthSignature, (&AuthSignature{}).Append(nil))
	e.state = stAuthSignature
	return nil
}

func (e *Engine) myAddrs() msg.AddrVec {
	if len(e.cfg.MyAddrs) > 0 {
		return e.cfg.MyAddrs
	}
	// As Ceph clients do: the IP the server sees, port 0 (we do not
	// listen), our nonce.
	a := e.peer.MyAddr
	a.Type = msg.AddrAny
	a.Nonce = e.cfg.Nonce
	if a.IP.IsValid() {
		a.IP = netip.AddrPortFrom(a.IP.Addr(), 0)
	}
	return msg.AddrVec{a}
}

func (e *Engine) sendClientIdent() {
	gid := e.cfg.MyName.Num
	if gid < 0 && e.peer.GlobalID != 0 {
		gid = int64(e.peer.GlobalID)
	}
	var flags uint64
	if e.cfg.Lossy {
		flags |= IdentFlagLossy
	}
	ci := ClientIdent{
		Addrs:        e.myAddrs(),
		Target:       e.cfg.PeerAddr,
		GID:          gid,
		GlobalSeq:    e.cfg.GlobalSeq,
		Supported:    e.cfg.Supported,
		Required:     e.cfg.Required,
		Flags:        flags,
		ClientCookie: e.cfg.ClientCookie,
	}
	e.sendControl(TagClientIdent, ci.Append(nil))
}

func (e *Engine) clientIdentReply(tag Tag, p []byte) error {
	switch tag {
	case TagServerIdent:
		si, err := ParseServerIdent(p)
		if err != nil {
			return err
		}
		if missing := e.cfg.Required &^ si.Supported; missing != 0 {
			return errorf(ErrMissingFeatures, tag, "server lacks required features %#x", missing)
		}
		if missing := si.Required &^ e.cfg.Supported; missing != 0 {
			return errorf(ErrMissingFeatures, tag, "server requires features %#x that ferry lacks", missing)
		}
		e.peer.Name.Num = si.GID
		e.peer.Addrs = si.Addrs
		e.peer.Supported, e.peer.Required = si.Supported, si.Required
		e.peer.Features = e.cfg.Supported & si.Supported
		e.peer.Flags = si.Flags
		e.peer.Cookie = si.ServerCookie
		e.peer.GlobalSeq = si.GlobalSeq
		e.state = stReady
		e.events = append(e.events, Event{Kind: EvReady})
		return nil
	case TagIdentMissingFeatures:
		mf, err := ParseIdentMissingFeatures(p)
		if err != nil {
			return err
		}
		return errorf(ErrMissingFeatures, tag, "server requires features %#x that ferry did not advertise", mf.Features)
	case TagWait:
		e.state = stClosed
		e.events = append(e.events, Event{Kind: EvWait})
		return nil
	case TagSessionReconnectOK:
		if !e.resumed {
			return unexpected(tag, e.state)
		}
		ok, err := ParseSessionReconnectOK(p)
		if err != nil {
			return err
		}
		e.inSeq = e.cfg.InSeq
		e.peer.Cookie = e.cfg.ServerCookie
		if e.cfg.PeerName.Type == e.peer.Name.Type {
			e.peer.Name = e.cfg.PeerName
		}
		e.state = stReady
		e.events = append(e.events, Event{Kind: EvReconnected, Seq: ok.MsgSeq})
		return nil
	case TagSessionReset:
		if !e.resumed {
			return unexpected(tag, e.state)
		}
		r, err := ParseSessionReset(p)
		if err != nil {
			return err
		}
		e.state = stDecide
		e.events = append(e.events, Event{Kind: EvSessionReset, Full: r.Full})
		return nil
	case TagSessionRetry:
		if !e.resumed {
			return unexpected(tag, e.state)
		}
		r, err := ParseSessionRetry(p)
		if err != nil {
			return err
		}
		e.cfg.ConnectSeq = r.ConnectSeq + 1
		e.sendReconnect()
		e.events = append(e.events, Event{Kind: EvRetry, Seq: r.ConnectSeq})
		return nil
	case TagSessionRetryGlobal:
		if !e.resumed {
			return unexpected(tag, e.state)
		}
		r, err := ParseSessionRetryGlobal(p)
		if err != nil {
			return err
		}
		e.state = stDecide
		e.events = append(e.events, Event{Kind: EvRetryGlobal, Seq: r.GlobalSeq})
		return nil
	}
	return unexpected(tag, e.state)
}

func (e *Engine) sendReconnect() {
	e.resumed = true
	r := SessionReconnect{
		Addrs:        e.myAddrs(),
		ClientCookie: e.cfg.ClientCookie,
		ServerCookie: e.cfg.ServerCookie,
		GlobalSeq:    e.cfg.GlobalSeq,
		ConnectSeq:   e.cfg.ConnectSeq,
		MsgSeq:       e.cfg.InSeq,
	}
	e.sendControl(TagSessionReconnect, r.Append(nil))
}

// ResetSession (client) answers EvSessionReset: it forgets the server's
// cookie, connect_seq and received sequence, takes clientCookie (a new one
// after a full reset) and starts a new session with CLIENT_IDENT.
func (e *Engine) ResetSession(clientCookie uint64) error {
	if e.state != stDecide || e.cfg.Role != Client {
		return errorf(ErrProtocol, 0, "ResetSession in state %d", e.state)
	}
	e.cfg.ServerCookie, e.cfg.ConnectSeq, e.cfg.InSeq = 0, 0, 0
	e.cfg.ClientCookie = clientCookie
	e.resumed = false
	e.state = stIdent
	e.sendClientIdent()
	return nil
}

// RetryGlobal (client) answers EvRetryGlobal with a global_seq above the
// server's and resends SESSION_RECONNECT.
func (e *Engine) RetryGlobal(globalSeq uint64) error {
	if e.state != stDecide || e.cfg.Role != Client {
		return errorf(ErrProtocol, 0, "RetryGlobal in state %d", e.state)
	}
	e.cfg.GlobalSeq = globalSeq
	e.state = stIdent
	e.sendReconnect()
	return nil
}

func (e *Engine) serverIdent(tag Tag, p []byte) error {
	if tag == TagSessionReconnect {
		r, err := ParseSessionReconnect(p)
		if err != nil {
			return err
		}
		if len(r.Addrs) == 0 {
			return errorf(ErrMalformed, tag, "session reconnect without addresses")
		}
		e.recon = r
		e.peer.Addrs = r.Addrs
		e.peer.Cookie = r.ClientCookie
		e.peer.GlobalSeq = r.GlobalSeq
		e.decideOn = tag
		e.state = stDecide
		e.events = append(e.events, Event{Kind: EvReconnect})
		return nil
	}
	if tag != TagClientIdent {
		return unexpected(tag, e.state)
	}
	ci, err := ParseClientIdent(p)
	if err != nil {
		return err
	}
	if len(ci.Addrs) == 0 {
		return errorf(ErrMalformed, tag, "client ident without addresses")
	}
	if missing := e.cfg.Required &^ ci.Supported; missing != 0 {
		// Tell the client what it lacks; it will give up.
		e.sendControl(TagIdentMissingFeatures, (&IdentMissingFeatures{Features: missing}).Append(nil))
		return nil
	}
	if missing := ci.Required &^ e.cfg.Supported; missing != 0 {
		return errorf(ErrMissingFeatures, tag, "client requires features %#x that ferry lacks", missing)
	}
	e.clientID = ci
	e.peer.Name.Num = ci.GID
	e.peer.Addrs = ci.Addrs
	e.peer.Supported, e.peer.Required = ci.Supported, ci.Required
	e.peer.Features = e.cfg.Supported & ci.Supported
	e.peer.Flags = ci.Flags
	e.peer.Cookie = ci.ClientCookie
	e.peer.GlobalSeq = ci.GlobalSeq
	e.decideOn = TagClientIdent
	e.state = stDecide
	e.events = append(e.events, Event{Kind: EvClientIdent})
	return nil
}

func (e *Engine) deciding(tag Tag, op string) error {
	if e.state != stDecide || e.cfg.Role != Server || e.decideOn != tag {
		return errorf(ErrProtocol, 0, "%s in state %d", op, e.state)
	}
	return nil
}

// AcceptReconnect (server) resumes the session: it answers
// SESSION_RECONNECT_OK with inSeq, the last sequence number the session
// received, and makes the engine ready. features and name are the
// session's, which a reconnect does not repeat.
func (e *Engine) AcceptReconnect(inSeq uint64, name msg.EntityName, features uint64) error {
	if err := e.deciding(TagSessionReconnect, "AcceptReconnect"); err != nil {
		return err
	}
	e.inSeq = inSeq
	e.peer.Name = name
	e.peer.Features = features
	e.sendControl(TagSessionReconnectOK, (&SessionReconnectOK{MsgSeq: inSeq}).Append(nil))
	e.state = stReady
	return nil
}

// Reset (server) refuses a SESSION_RECONNECT with SESSION_RESET; the
// client then starts a new session with CLIENT_IDENT.
func (e *Engine) Reset(full bool) error {
	if err := e.deciding(TagSessionReconnect, "Reset"); err != nil {
		return err
	}
	e.sendControl(TagSessionReset, (&SessionReset{Full: full}).Append(nil))
	e.state = stIdent
	return nil
}

// Retry (server) tells the client its connect_seq is stale.
func (e *Engine) Retry(connectSeq uint64) error {
	if err := e.deciding(TagSessionReconnect, "Retry"); err != nil {
		return err
	}
	e.sendControl(TagSessionRetry, (&SessionRetry{ConnectSeq: connectSeq}).Append(nil))
	e.state = stIdent
	return nil
}

// RetryGlobalSeq (server) tells the client its global_seq is stale.
func (e *Engine) RetryGlobalSeq(globalSeq uint64) error {
	if err := e.deciding(TagSessionReconnect, "RetryGlobalSeq"); err != nil {
		return err
	}
	e.sendControl(TagSessionRetryGlobal, (&SessionRetryGlobal{GlobalSeq: globalSeq}).Append(nil))
	e.state = stIdent
	return nil
}

// Accept (server) answers the pending CLIENT_IDENT with SERVER_IDENT and
// makes the engine ready. serverCookie is 0 for a lossy session.
func (e *Engine) Accept(globalSeq, serverCookie uint64, lossy bool) error {
	if err := e.deciding(TagClientIdent, "Accept"); err != nil {
		return err
	}
	e.cfg.Lossy = lossy
	e.peer.Cookie = e.clientID.ClientCookie
	var flags uint64
	if e.cfg.Lossy {
		flags |= IdentFlagLossy
	}
	si := ServerIdent{
		Addrs:        e.cfg.MyAddrs,
		GID:          e.cfg.MyName.Num,
		GlobalSeq:    globalSeq,
		Supported:    e.cfg.Supported,
		Required:     e.cfg.Required,
		Flags:        flags,
		ServerCookie: serverCookie,
	}
	e.sendControl(TagServerIdent, si.Append(nil))
	e.state = stReady
	return nil
}

// Wait (server) answers the pending CLIENT_IDENT with WAIT: a connection
// race that the other direction wins. The caller closes the connection
// after sending the output.
func (e *Engine) Wait() error {
	if e.state != stDecide || e.cfg.Role != Server {
		return errorf(ErrProtocol, 0, "Wait in state %d", e.state)
	}
	e.sendControl(TagWait, nil)
	e.state = stClosed
	return nil
}

func (e *Engine) handleReady(tag Tag, segs [MaxSegments][]byte) error {
	switch tag {
	case TagMessage:
		return e.handleMessage(segs)
	case TagAck:
		a, err := ParseAck(segs[0])
		if err != nil {
			return err
		}
		e.events = append(e.events, Event{Kind: EvAck, Seq: a.Seq})
		return nil
	case TagKeepalive2:
		k, err := ParseKeepalive2(segs[0])
		if err != nil {
			return err
		}
		e.events = append(e.events, Event{Kind: EvKeepalive, Stamp: Stamp{k.Sec, k.Nsec}})
		return nil
	case TagKeepalive2Ack:
		k, err := ParseKeepalive2Ack(segs[0])
		if err != nil {
			return err
		}
		e.events = append(e.events, Event{Kind: EvKeepaliveAck, Stamp: Stamp{k.Sec, k.Nsec}})
		return nil
	}
	return unexpected(tag, e.state)
}

func (e *Engine) handleMessage(segs [MaxSegments][]byte) error {
	return e.handleMessageData(segs, nil)
}

// msgHeader is the msg.Header of a received message with header2 h.
func (e *Engine) msgHeader(h *Header2) msg.Header {
	return msg.Header{
		Seq: h.Seq, Tid: h.Tid, Type: h.Type, Priority: msg.Priority(h.Priority),
		Version: h.Version, CompatVersion: h.CompatVersion, DataOff: h.DataOff,
		Src: e.peer.Name, AckSeq: h.AckSeq,
	}
}

// handleMessageData handles a MESSAGE whose segments are segs, except
// that a non-nil data (FeedSplit) is its data segment instead of segs[3].
func (e *Engine) handleMessageData(segs [MaxSegments][]byte, data [][]byte) error {
	if len(segs[0]) != Header2Len {
		return errorf(ErrMalformed, TagMessage, "header segment of %d bytes", len(segs[0]))
	}
	h, err := ParseHeader2(segs[0])
	if err != nil {
		return err
	}
	if h.AckSeq != 0 {
		e.events = append(e.events, Event{Kind: EvAck, Seq: h.AckSeq})
	}
	if h.Seq <= e.inSeq {
		e.events = append(e.events, Event{Kind: EvMessage, Seq: h.Seq, Dropped: true})
		return nil
	}
	skipped := h.Seq - e.inSeq - 1
	e.inSeq = h.Seq
	m := &msg.Message{
		Header: e.msgHeader(&h),
		Footer: msg.Footer{Flags: h.Flags},
	}
	if data == nil {
		m.SetSegments(segs[1], segs[2], segs[3])
	} else {
		m.SetSegments(segs[1], segs[2], nil)
		m.Data = data
	}
	e.events = append(e.events, Event{Kind: EvMessage, Msg: m, Seq: h.Seq, Skipped: skipped})
	return nil
}

// AppendKeepalive appends a KEEPALIVE2 frame carrying s.
func (e *Engine) AppendKeepalive(b []byte, s Stamp) []byte {
	return AppendFrame(b, TagKeepalive2, e.rev1, (&Keepalive2{Sec: s.Sec, Nsec: s.Nsec}).Append(nil))
}

// AppendKeepaliveAck appends a KEEPALIVE2_ACK frame echoing s.
func (e *Engine) AppendKeepaliveAck(b []byte, s Stamp) []byte {
	return AppendFrame(b, TagKeepalive2Ack, e.rev1, (&Keepalive2Ack{Sec: s.Sec, Nsec: s.Nsec}).Append(nil))
}

// AppendAck appends an ACK frame for seq.
func (e *Engine) AppendAck(b []byte, seq uint64) []byte {
	return AppendFrame(b, TagAck, e.rev1, (&Ack{Seq: seq}).Append(nil))
}
