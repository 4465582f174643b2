package msgr1

import (
	"bytes"
	"encoding/binary"
	"net/netip"

	"github.com/ferrymsg/ferry/auth"
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

// Limits bound what a peer may make an Engine ask for. The zero value of
// each field means its default.
type Limits struct {
	// MaxAuthorizer bounds an authorizer (in a connect message) or an
	// authorizer reply or challenge (in a connect reply), in bytes;
	// default 4096 (Ceph's own client refuses longer replies; cephx
	// authorizers are a few hundred bytes). Before the handshake ends
	// an engine never asks for more than max(ServerBannerLen,
	// MaxAuthorizer) bytes at once, and holds one authorizer at most.
	MaxAuthorizer uint32
	// MaxSegment bounds a message's front, middle and data, each, in
	// bytes; default 256 MiB.
	MaxSegment uint32
	// MaxMessage bounds front + middle + data, in bytes; default 256 MiB.
	MaxMessage uint32
}

// Default limits (see Limits).
const (
	DefaultMaxAuthorizer = 4096
	DefaultMaxSegment    = 256 << 20
	DefaultMaxMessage    = 256 << 20
)

// MaxConnectAttempts bounds the connect messages of one handshake (a
// challenge and a few retries are normal); beyond it the engine closes.
const MaxConnectAttempts = 16

// WithDefaults returns l with zero fields replaced by their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxAuthorizer == 0 {
		l.MaxAuthorizer = DefaultMaxAuthorizer
	}
	if l.MaxSegment == 0 {
		l.MaxSegment = DefaultMaxSegment
	}
	if l.MaxMessage == 0 {
		l.MaxMessage = DefaultMaxMessage
	}
	return l
}

// Config is what an Engine needs to know before the handshake. The
// messenger fills it in per connection attempt.
type Config struct {
	Role Role

	// MyName is this entity: its type goes into the connect message's
	// host_type and chooses the protocol version; the whole name is the
	// src of the messages the engine encodes (see SetMyName).
	MyName msg.EntityName
	// MyAddr is this entity's address. A server sends it in its banner
	// (its listening address). A client sends it after the server's
	// banner; a zero MyAddr sends the IP the server reports for us, port
	// 0 and Nonce, as an unbound Ceph client does.
	MyAddr msg.EntityAddr
	// Nonce distinguishes this messenger instance on its address.
	Nonce uint32

	// PeerAddr is, for a client, the address it dialled: the server's
	// banner must name it (or a blank IP with the same port and nonce),
	// as Ceph checks; a zero PeerAddr checks nothing. For a server, it is
	// the socket's remote address, reported back in the banner and used
	// for a client that announces a blank IP.
	PeerAddr msg.EntityAddr
	// PeerType is the type of the entity a client connects to: it picks
	// the protocol version and whether an authorizer is sent (none to a
	// mon, unless we are a mon: clients authenticate to mons with MAuth
	// after the handshake).
	PeerType msg.EntityType

	// Supported and Required are Ceph feature masks (the policy's).
	Supported, Required uint64

	// Lossy sets the client's LOSSY connect flag (informational: the
	// server decides, and the reply's flag is what counts).
	Lossy bool

	// GlobalSeq is a client's global_seq for this attempt.
	GlobalSeq uint32
	// ConnectSeq is the session's connect_seq (0 for a new session),
	// and InSeq the last sequence number it received: a lossless client
	// reconnecting its session sets both; InSeq goes to the server in
	// the SEQ exchange.
	ConnectSeq uint32
	InSeq      uint64

	// Auth, for a client, produces the authorizer (nil: none is sent).
	Auth auth.Client
	// AuthServer, for a server, verifies authorizers (nil: every
	// connect is accepted, with or without one, as with auth none).
	AuthServer auth.Server
	// AllowNoAuthorizer lets a server with an AuthServer accept a
	// connect that carries no authorizer (a mon's clients authenticate
	// with MAuth after the handshake); the peer is then not
	// authenticated (Peer.Auth is nil). Without it such a connect gets
	// BADAUTHORIZER.
	AllowNoAuthorizer bool

	// Limits bound what the peer may announce; zero fields take defaults.
	Limits Limits
}

// Stamp is a keepalive timestamp (ceph_timespec). The engine never reads
// the clock: stamps come from the caller and are echoed back.
type Stamp struct{ Sec, Nsec uint32 }

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// EvReady: the handshake finished. Seq is the last sequence number
	// the peer has received from us (the SEQ exchange; 0 after READY):
	// requeued messages at or below it must not be sent again.
	EvReady EventKind = iota + 1
	// EvConnect (server): a connect message passed the version, feature
	// and authorizer checks (PendingConnect, Peer); the caller applies
	// the session rules (DecideConnect) and answers with Accept,
	// RetrySession, RetryGlobalSeq, Reset or Wait before feeding more.
	EvConnect
	// EvWait (client): the server's own connection to us wins a race;
	// the engine is closed; the caller backs off.
	EvWait
	// EvMessage: a message arrived (Msg, Seq). One whose seq is not
	// above the last one received is reported Dropped, without Msg.
	EvMessage
	// EvAck: the peer has received every message up to Seq.
	EvAck
	// EvKeepalive: the peer sent KEEPALIVE2 (answer it with
	// AppendKeepaliveAck of Stamp) or, Bare, a KEEPALIVE (no answer).
	EvKeepalive
	// EvKeepaliveAck: the peer answered our keepalive sent at Stamp.
	EvKeepaliveAck
	// EvSessionReset (client): the server has no such session
	// (RESETSESSION). The engine has reset connect_seq and in_seq to 0
	// and sent a new connect; the caller resets its session (its queued
	// and unacknowledged messages are dropped: a remote reset).
	EvSessionReset
	// EvRetry (client): the server knows a newer connect_seq; the engine
	// has sent a new connect with Seq as its connect_seq.
	EvRetry
	// EvRetryGlobal (client): the server has seen global_seq Seq from us;
	// the caller picks a higher one and calls RetryGlobal.
	EvRetryGlobal
	// EvChallenge (client): the server challenged the authorizer; the
	// engine has sent a new connect with the auth method's answer.
	EvChallenge
	// EvClose: the peer sent CLOSE; the engine is closed.
	EvClose
)

func (k EventKind) String() string {
	switch k {
	case EvReady:
		return "ready"
	case EvConnect:
		return "connect"
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
	case EvSessionReset:
		return "session-reset"
	case EvRetry:
		return "retry"
	case EvRetryGlobal:
		return "retry-global"
	case EvChallenge:
		return "challenge"
	case EvClose:
		return "close"
	}
	return "event?"
}

// Event is one thing the engine reports from its input.
type Event struct {
	Kind    EventKind
	Msg     *msg.Message // EvMessage
	Seq     uint64       // EvReady, EvAck, EvMessage, EvRetry, EvRetryGlobal
	Dropped bool         // EvMessage: a duplicate (seq <= in_seq), not delivered
	Skipped uint64       // EvMessage: how many sequence numbers were skipped before it
	Stamp   Stamp        // EvKeepalive, EvKeepaliveAck
	Bare    bool         // EvKeepalive: a KEEPALIVE without a stamp
}

// Peer is what the handshake learned about the other side.
type Peer struct {
	// Name is the peer's entity: its type (from a client's connect, or a
	// client's Config.PeerType); msgr1 carries the number only in
	// message headers, so Num is 0.
	Name msg.EntityName
	// Addr is the peer's legacy address: the server's from its banner,
	// or the client's announced one (a blank IP filled in from the
	// socket).
	Addr msg.EntityAddr
	// MyAddr (client) is our address as the server sees it.
	MyAddr msg.EntityAddr
	// Features is the negotiated feature mask; PeerFeatures is what the
	// peer announced.
	Features, PeerFeatures uint64
	// GlobalSeq is the peer's global_seq, ConnectSeq the session's
	// connect_seq once ready.
	GlobalSeq, ConnectSeq uint32
	// Lossy: the session is lossy (the server's decision).
	Lossy bool
	// Auth is the authentication's result: on a client, what its auth
	// method made of the server's authorizer reply; on a server, who the
	// authorizer proved the peer to be. Nil if there was none.
	Auth *auth.Result
}

type state uint8

const (
	stClientBanner state = iota + 1 // client: reading the server's banner
	stClientAddrs                   // client: reading the two addresses after it
	stServerBanner                  // server: reading the client's banner
	stConnect                       // server: reading a connect message
	stConnectAuth                   // server: reading its authorizer
	stReply                         // client: reading a connect reply
	stReplyAuth                     // client: reading its authorizer bytes
	stSeq                           // reading the le64 of the SEQ exchange
	stDecide                        // waiting for the caller's decision
	stReady                         // reading a tag
	stTagArg                        // reading a tag's 8-byte argument
	stMsgHeader                     // reading a message header
	stMsgBody                       // reading front, middle, data and footer
	stClosed
)

// Engine is the msgr1 protocol state machine of one connection: banner
// and address exchange, connect and connect reply (with the authorizer
// and its challenge), the SEQ exchange, then messages, acks and
// keepalives. It does no I/O and never reads the clock: the caller asks
// Need how many bytes to read, reads exactly that many and passes them to
// Feed, which returns events; bytes the engine wants sent accumulate in
// Output.
//
// An Engine is driven by one goroutine (the connection's reader). Once it
// is ready, the Append methods (which only read the negotiated state)
// may be called by the connection's writer concurrently with Feed.
type Engine struct {
	cfg   Config
	lim   Limits
	state state
	err   error

	out    []byte
	events []Event

	peer     Peer
	connect  Connect      // client: the last one sent; server: the pending one
	reply    ConnectReply // client: the reply being read
	authz    []byte       // client: the authorizer to send; server: the one accepted
	authRepl []byte       // server: the auth method's final payload, sent in replies
	authDone bool         // server: the authorizer was accepted
	authRes  auth.Result
	sentAuth bool // client: an authorizer went in the connect
	chall    bool // server: a challenge was sent
	attempts int
	tagArg   Tag // stTagArg: whose argument is being read
	hdr      Header
	inSeq    uint64
	signer   *signer // with a cephx session key: messages are signed
	pending  *signer // server: the signer of the authorizer verified, installed by Accept
}

// NewEngine returns an engine for one connection. Call Start to produce
// the first bytes.
func NewEngine(cfg Config) *Engine {
	e := &Engine{cfg: cfg, lim: cfg.Limits.WithDefaults(), inSeq: cfg.InSeq}
	if cfg.Role == Client {
		e.peer.Name.Type = cfg.PeerType
	}
	return e
}

// Start queues the first bytes: a client's banner, or a server's banner
// with both addresses.
func (e *Engine) Start() {
	if e.cfg.Role == Server {
		e.out = AppendServerBanner(e.out, e.cfg.MyAddr, e.cfg.PeerAddr)
		e.state = stServerBanner
		return
	}
	e.out = append(e.out, Banner...)
	e.state = stClientBanner
}

// Output returns the bytes to send and clears the buffer; the slice is
// valid until the next call to Feed or to a decision method.
func (e *Engine) Output() []byte {
	o := e.out
	e.out = e.out[:0]
	return o
}

// Ready reports whether the handshake has finished.
func (e *Engine) Ready() bool {
	switch e.state {
	case stReady, stTagArg, stMsgHeader, stMsgBody:
		return true
	}
	return false
}

// Err returns the error that closed the engine, if any.
func (e *Engine) Err() error { return e.err }

// Peer returns what the handshake learned about the peer.
func (e *Engine) Peer() *Peer { return &e.peer }

// PendingConnect returns the connect message a server is deciding on
// (EvConnect), or a client's last one.
func (e *Engine) PendingConnect() *Connect { return &e.connect }

// Features returns the negotiated feature mask (valid once ready).
func (e *Engine) Features() uint64 { return e.peer.Features }

// ConnectSeq returns a client's current connect_seq (after EvRetry, and
// once ready the session's).
func (e *Engine) ConnectSeq() uint32 {
	if e.Ready() {
		return e.peer.ConnectSeq
	}
	return e.cfg.ConnectSeq
}

// GlobalSeq returns a client's current global_seq.
func (e *Engine) GlobalSeq() uint32 { return e.cfg.GlobalSeq }

// InSeq returns the sequence number of the last message received.
func (e *Engine) InSeq() uint64 { return e.inSeq }

// SetInSeq sets the receive sequence.
func (e *Engine) SetInSeq(s uint64) { e.inSeq = s }

// SetMyName changes the src of the messages the engine encodes (a client
// learns its global id after authenticating to a mon).
func (e *Engine) SetMyName(n msg.EntityName) { e.cfg.MyName = n }

// SetLimits replaces the engine's limits (zero fields take their
// defaults) for what it reads next. A server whose peers authenticate
// after the handshake (a mon's clients, with MAuth) keeps MaxMessage
// small until they have, so that an unauthenticated peer can make it
// hold no more than an MAuth's worth; the caller calls it between Feeds.
func (e *Engine) SetLimits(l Limits) { e.lim = l.WithDefaults() }

// Signed reports whether messages are signed (a cephx session key was
// established with the authorizer) and, once MSG_AUTH is negotiated,
// their signatures checked.
func (e *Engine) Signed() bool { return e.signer != nil }

// PendingHeader returns the header of the message whose body Need asks
// for next (ok is false in any other state), so that a caller can take
// throttle budget for its PayloadLen before reading it.
func (e *Engine) PendingHeader() (h *Header, ok bool) {
	return &e.hdr, e.state == stMsgBody
}

// Need returns how many bytes Feed needs next, and whether the engine may
// keep a reference to them (a message body, whose segments become the
// message's buffers): if retain is true the caller must pass a buffer it
// will not reuse. Zero means the engine waits for a decision or is
// closed.
func (e *Engine) Need() (n int, retain bool) {
	switch e.state {
	case stClientBanner:
		// The banner alone first, so that a msgr2 server, which sends
		// less and then waits, is told apart at once.
		return BannerLen, false
	case stClientAddrs:
		return 2 * LegacyAddrLen, false
	case stServerBanner:
		return ClientBannerLen, false
	case stConnect:
		return ConnectLen, false
	case stConnectAuth:
		return int(e.connect.AuthorizerLen), false
	case stReply:
		return ConnectReplyLen, false
	case stReplyAuth:
		return int(e.reply.AuthorizerLen), false
	case stSeq, stTagArg:
		return SeqLen, false
	case stReady:
		return 1, false
	case stMsgHeader:
		return HeaderLen, false
	case stMsgBody:
		return int(e.hdr.PayloadLen()) + FooterSize(e.peer.Features), true
	}
	return 0, false
}

// fail closes the engine with err and returns it.
func (e *Engine) fail(err error) error {
	if e.err == nil {
		e.err = err
	}
	e.state = stClosed
	return e.err
}

// Feed consumes exactly the number of bytes Need asked for and returns
// the events they produced (valid until the next call). Any error is
// fatal to the connection: the caller sends what Output holds (a reply
// that tells the peer why, such as BADAUTHORIZER), then closes it and
// logs the reason.
func (e *Engine) Feed(p []byte) ([]Event, error) {
	e.events = e.events[:0]
	if e.state == stClosed || e.state == stDecide || e.state == 0 {
		if e.err != nil {
			return nil, e.err
		}
		return nil, errorf(ErrProtocol, 0, "Feed while %s", e.stateName())
	}
	if n, _ := e.Need(); len(p) != n {
		return nil, e.fail(errorf(ErrProtocol, 0, "fed %d bytes, need %d", len(p), n))
	}
	var err error
	switch e.state {
	case stClientBanner:
		if err = checkBanner(p); err == nil {
			e.state = stClientAddrs
		}
	case stClientAddrs:
		err = e.clientBanner(p)
	case stServerBanner:
		err = e.serverBanner(p)
	case stConnect:
		err = e.connectMsg(p)
	case stConnectAuth:
		err = e.handleConnect(p)
	case stReply:
		err = e.replyMsg(p)
	case stReplyAuth:
		err = e.handleReply(p)
	case stSeq:
		err = e.seqExchange(p)
	case stReady:
		err = e.tag(Tag(p[0]))
	case stTagArg:
		err = e.tagArgument(p)
	case stMsgHeader:
		err = e.msgHeader(p)
	case stMsgBody:
		err = e.msgBody(p)
	}
	if err != nil {
		return nil, e.fail(err)
	}
	return e.events, nil
}

func (e *Engine) stateName() string {
	return [...]string{"?", "client-banner", "client-addresses", "server-banner", "connect", "connect-authorizer",
		"reply", "reply-authorizer", "seq", "decide", "ready", "tag-argument",
		"message-header", "message-body", "closed"}[min(int(e.state), int(stClosed))]
}

func (e *Engine) emit(ev Event) { e.events = append(e.events, ev) }

func blankIP(a msg.EntityAddr) bool { return a.IsZero() || a.IP.Addr().IsUnspecified() }

// ---- client ----

func (e *Engine) clientBanner(p []byte) error {
	srv, err := ParseLegacyAddr(p[:LegacyAddrLen])
	if err != nil {
		return err
	}
	me, err := ParseLegacyAddr(p[LegacyAddrLen:])
	if err != nil {
		return err
	}
	if want := e.cfg.PeerAddr; !want.IsZero() {
		same := srv.IP == want.IP && srv.Nonce == want.Nonce
		// "presumably this is the same node": a server bound to a blank
		// IP names its port and nonce only.
		blank := blankIP(srv) && srv.IP.Port() == want.IP.Port() && srv.Nonce == want.Nonce
		if !same && !blank {
			return errorf(ErrWrongPeer, 0, "server claims to be %v, dialled %v", srv, want)
		}
	}
	e.peer.Addr = srv
	e.peer.MyAddr = me
	e.out = msg.AppendLegacyAddr(e.out, e.myAddr())
	return e.sendConnect()
}

func (e *Engine) myAddr() msg.EntityAddr {
	if !e.cfg.MyAddr.IsZero() {
		return e.cfg.MyAddr
	}
	a := msg.EntityAddr{Type: msg.AddrLegacy, Nonce: e.cfg.Nonce}
	if ip := e.peer.MyAddr.IP.Addr(); ip.IsValid() {
		a.IP = netip.AddrPortFrom(ip, 0)
	}
	return a
}

// wantsAuthorizer: Ceph sends none to a mon, unless it is a mon itself.
func (e *Engine) wantsAuthorizer() bool {
	return e.cfg.Auth != nil && (e.cfg.PeerType != msg.EntityMon || e.cfg.MyName.Type == msg.EntityMon)
}

func (e *Engine) sendConnect() error {
	e.attempts++
	if e.attempts > MaxConnectAttempts {
		return errorf(ErrProtocol, 0, "more than %d connect attempts", MaxConnectAttempts)
	}
	if e.authz == nil && e.wantsAuthorizer() {
		a, err := e.cfg.Auth.Request(e.cfg.PeerType)
		if err != nil {
			return wrapf(ErrBadAuthorizer, err, 0, "building the authorizer for %v", e.cfg.PeerType)
		}
		if len(a) > int(e.lim.MaxAuthorizer) {
			return errorf(ErrTooLarge, 0, "our authorizer of %d bytes exceeds %d", len(a), e.lim.MaxAuthorizer)
		}
		e.authz = a
	}
	c := Connect{
		Features:        e.cfg.Supported,
		HostType:        uint32(e.cfg.MyName.Type),
		GlobalSeq:       e.cfg.GlobalSeq,
		ConnectSeq:      e.cfg.ConnectSeq,
		ProtocolVersion: ProtoVersion(e.cfg.MyName.Type, e.cfg.PeerType, true),
	}
	if len(e.authz) > 0 {
		c.AuthorizerProtocol = e.cfg.Auth.Method()
		c.AuthorizerLen = uint32(len(e.authz))
		e.sentAuth = true
	}
	if e.cfg.Lossy {
		c.Flags |= ConnectFlagLossy
	}
	e.connect = c
	e.out = c.Append(e.out)
	e.out = append(e.out, e.authz...)
	e.state = stReply
	return nil
}

func (e *Engine) replyMsg(p []byte) error {
	r, err := ParseConnectReply(p)
	if err != nil {
		return err
	}
	if r.AuthorizerLen > e.lim.MaxAuthorizer {
		return errorf(ErrTooLarge, r.Tag, "authorizer reply of %d bytes exceeds %d", r.AuthorizerLen, e.lim.MaxAuthorizer)
	}
	e.reply = r
	if r.AuthorizerLen > 0 {
		e.state = stReplyAuth
		return nil
	}
	return e.handleReply(nil)
}

func (e *Engine) handleReply(authz []byte) error {
	r := &e.reply
	switch r.Tag {
	case TagChallengeAuthorizer:
		if !e.sentAuth {
			return errorf(ErrBadAuthorizer, r.Tag, "challenge to a connect without an authorizer")
		}
		more, err := e.cfg.Auth.ReplyMore(authz)
		if err != nil {
			return wrapf(ErrBadAuthorizer, err, r.Tag, "answering the challenge")
		}
		if len(more) == 0 || len(more) > int(e.lim.MaxAuthorizer) {
			return errorf(ErrBadAuthorizer, r.Tag, "challenge answer of %d bytes", len(more))
		}
		e.authz = more
		e.emit(Event{Kind: EvChallenge})
		return e.sendConnect()
	case TagFeatures:
		return errorf(ErrMissingFeatures, r.Tag, "server requires features %#x that we lack", r.Features&^e.cfg.Supported)
	case TagBadProtoVer:
		return errorf(ErrBadProtoVersion, r.Tag, "we speak %d, server %d", e.connect.ProtocolVersion, r.ProtocolVersion)
	case TagBadAuthorizer:
		return errorf(ErrBadAuthorizer, r.Tag, "server refused our authorizer")
	case TagResetSession:
		e.cfg.ConnectSeq = 0
		e.inSeq = 0
		e.emit(Event{Kind: EvSessionReset})
		return e.sendConnect()
	case TagRetryGlobal:
		e.state = stDecide
		e.emit(Event{Kind: EvRetryGlobal, Seq: uint64(r.GlobalSeq)})
		return nil
	case TagRetrySession:
		if r.ConnectSeq <= e.cfg.ConnectSeq {
			return errorf(ErrProtocol, r.Tag, "connect_seq %d not above ours %d", r.ConnectSeq, e.cfg.ConnectSeq)
		}
		e.cfg.ConnectSeq = r.ConnectSeq
		e.emit(Event{Kind: EvRetry, Seq: uint64(r.ConnectSeq)})
		return e.sendConnect()
	case TagWait:
		e.state = stClosed
		e.emit(Event{Kind: EvWait})
		return nil
	case TagReady, TagSeq:
		return e.clientOpen(authz)
	}
	return errorf(ErrUnknownTag, r.Tag, "in a connect reply")
}

func (e *Engine) clientOpen(authz []byte) error {
	r := &e.reply
	if missing := e.cfg.Required &^ r.Features; missing != 0 {
		return errorf(ErrMissingFeatures, r.Tag, "server lacks required features %#x", missing)
	}
	if r.ConnectSeq != e.cfg.ConnectSeq+1 {
		return errorf(ErrProtocol, r.Tag, "server's connect_seq %d, want %d", r.ConnectSeq, e.cfg.ConnectSeq+1)
	}
	if e.sentAuth {
		res, err := e.cfg.Auth.Done(0, 0, authz)
		if err != nil {
			return wrapf(ErrBadAuthorizer, err, r.Tag, "server's authorizer reply")
		}
		sg, err := signerFor(res)
		if err != nil {
			return err
		}
		e.authRes = res
		e.peer.Auth = &e.authRes
		e.signer = sg
	}
	e.peer.PeerFeatures = r.Features
	e.peer.Features = r.Features & e.cfg.Supported
	e.peer.GlobalSeq = r.GlobalSeq
	e.peer.ConnectSeq = r.ConnectSeq
	e.peer.Lossy = r.Flags&ConnectFlagLossy != 0
	if r.Tag == TagSeq {
		e.state = stSeq
		return nil
	}
	e.state = stReady
	e.emit(Event{Kind: EvReady})
	return nil
}

// signerFor returns the signer of res's session key, nil for a method
// that does not sign (auth none). A cephx session key that cannot sign
// fails (ErrBadSessionKey) rather than leaving the session unsigned.
func signerFor(res auth.Result) (*signer, error) {
	if res.Method != auth.MethodCephx {
		return nil, nil
	}
	return newSigner(res.SessionKey)
}

// RetryGlobal (client) answers EvRetryGlobal with a global_seq above the
// server's and sends a new connect.
func (e *Engine) RetryGlobal(globalSeq uint32) error {
	if e.state != stDecide || e.cfg.Role != Client {
		return errorf(ErrProtocol, 0, "RetryGlobal while %s", e.stateName())
	}
	e.cfg.GlobalSeq = globalSeq
	if err := e.sendConnect(); err != nil {
		return e.fail(err)
	}
	return nil
}

func (e *Engine) seqExchange(p []byte) error {
	s := binary.LittleEndian.Uint64(p)
	if e.cfg.Role == Client {
		// The server's in_seq; ours goes back.
		e.out = binary.LittleEndian.AppendUint64(e.out, e.inSeq)
	}
	e.state = stReady
	e.emit(Event{Kind: EvReady, Seq: s})
	return nil
}

// ---- server ----

func (e *Engine) serverBanner(p []byte) error {
	a, err := ParseClientBanner(p)
	if err != nil {
		return err
	}
	if blankIP(a) && e.cfg.PeerAddr.IP.Addr().IsValid() {
		// The peer does not know its IP: the socket tells.
		a.IP = netip.AddrPortFrom(e.cfg.PeerAddr.IP.Addr(), a.IP.Port())
	}
	e.peer.Addr = a
	e.state = stConnect
	return nil
}

func (e *Engine) connectMsg(p []byte) error {
	c, err := ParseConnect(p)
	if err != nil {
		return err
	}
	if c.AuthorizerLen > e.lim.MaxAuthorizer {
		return errorf(ErrTooLarge, 0, "authorizer of %d bytes exceeds %d", c.AuthorizerLen, e.lim.MaxAuthorizer)
	}
	if c.HostType > 0xff {
		return errorf(ErrMalformed, 0, "connect host_type %#x", c.HostType)
	}
	e.connect = c
	if c.AuthorizerLen > 0 {
		e.state = stConnectAuth
		return nil
	}
	return e.handleConnect(nil)
}

// sendReply queues a connect reply carrying the auth method's payload, if
// any. Features, protocol version and the authorizer length are filled
// in as Ceph's send_connect_message_reply does.
func (e *Engine) sendReply(r ConnectReply, authz []byte) {
	c := &e.connect
	if r.Features == 0 {
		r.Features = (c.Features & e.cfg.Supported) | e.cfg.Required
	}
	r.ProtocolVersion = ProtoVersion(e.cfg.MyName.Type, msg.EntityType(c.HostType), false)
	r.AuthorizerLen = uint32(len(authz))
	e.out = r.Append(e.out)
	e.out = append(e.out, authz...)
}

func (e *Engine) handleConnect(authz []byte) error {
	e.attempts++
	if e.attempts > MaxConnectAttempts {
		return errorf(ErrProtocol, 0, "more than %d connect attempts", MaxConnectAttempts)
	}
	c := &e.connect
	peerType := msg.EntityType(c.HostType)
	e.peer.Name.Type = peerType
	e.peer.PeerFeatures = c.Features
	e.peer.GlobalSeq = c.GlobalSeq
	if my := ProtoVersion(e.cfg.MyName.Type, peerType, false); c.ProtocolVersion != my {
		e.sendReply(ConnectReply{Tag: TagBadProtoVer}, nil)
		e.state = stConnect
		return nil
	}
	if missing := e.cfg.Required &^ c.Features; missing != 0 {
		e.sendReply(ConnectReply{Tag: TagFeatures}, nil)
		e.state = stConnect
		return nil
	}
	challenged, err := e.verifyAuthorizer(authz)
	if err != nil {
		e.sendReply(ConnectReply{Tag: TagBadAuthorizer}, nil)
		return err
	}
	if challenged {
		e.state = stConnect
		return nil
	}
	e.state = stDecide
	e.emit(Event{Kind: EvConnect})
	return nil
}

// verifyAuthorizer checks the connect's authorizer; challenged reports
// that it sent a challenge instead of accepting it.
func (e *Engine) verifyAuthorizer(authz []byte) (challenged bool, err error) {
	c := &e.connect
	switch {
	case e.authDone:
		// A retry after the authorizer was accepted must repeat it.
		if !bytes.Equal(authz, e.authz) || c.AuthorizerProtocol != e.authRes.Method {
			return false, errorf(ErrBadAuthorizer, 0, "authorizer changed after it was accepted")
		}
		return false, nil
	case e.cfg.AuthServer == nil:
		return false, nil
	case len(authz) == 0:
		if e.cfg.AllowNoAuthorizer {
			return false, nil
		}
		return false, errorf(ErrBadAuthorizer, 0, "connect without an authorizer from %v", msg.EntityType(c.HostType))
	}
	r, err := e.cfg.AuthServer.Handle(c.AuthorizerProtocol, msg.EntityType(c.HostType), auth.ConModeCRC, !e.chall, authz)
	if err != nil {
		return false, wrapf(ErrBadAuthorizer, err, 0, "authorizer of %v (method %d)", msg.EntityType(c.HostType), c.AuthorizerProtocol)
	}
	if !r.Done {
		if len(r.More) == 0 || len(r.More) > int(e.lim.MaxAuthorizer) || e.chall {
			return false, errorf(ErrBadAuthorizer, 0, "auth method asked for another round (challenge of %d bytes)", len(r.More))
		}
		e.chall = true
		e.sendReply(ConnectReply{Tag: TagChallengeAuthorizer}, r.More)
		return true, nil
	}
	if r.Result.Method == 0 {
		r.Result.Method = c.AuthorizerProtocol
	}
	sg, err := signerFor(r.Result)
	if err != nil {
		return false, err
	}
	e.authDone = true
	e.pending = sg
	e.authRes = r.Result
	e.authRepl = r.Payload
	e.authz = bytes.Clone(authz)
	e.peer.Auth = &e.authRes
	return false, nil
}

func (e *Engine) deciding(op string) error {
	if e.state != stDecide || e.cfg.Role != Server {
		return errorf(ErrProtocol, 0, "%s while %s", op, e.stateName())
	}
	return nil
}

// Accept is how a server opens the session it decided on.
type Accept struct {
	// GlobalSeq is the server's global_seq, sent in the reply.
	GlobalSeq uint32
	// Lossy is the server's policy for this peer (the reply's flag).
	Lossy bool
	// InSeq is the session's last received sequence number (0 for a new
	// session), sent in the SEQ exchange.
	InSeq uint64
	// Reset: the peer reset its session (it sent connect_seq 0 for a
	// session we hold) or the session is new: the reply is READY, with no
	// SEQ exchange, and in_seq starts at 0.
	Reset bool
}

// Accept (server) answers the pending connect with SEQ (when the client
// has RECONNECT_SEQ and a.Reset is false: the sequence exchange follows,
// and Feed reports EvReady with the client's in_seq) or READY (the engine
// is ready at once). The reply's connect_seq is the client's plus one.
func (e *Engine) Accept(a Accept) error {
	if err := e.deciding("Accept"); err != nil {
		return err
	}
	c := &e.connect
	tag := TagSeq
	if c.Features&FeatureReconnectSeq == 0 || a.Reset {
		tag = TagReady
		a.InSeq = 0
	}
	r := ConnectReply{Tag: tag, Features: e.cfg.Supported, GlobalSeq: a.GlobalSeq, ConnectSeq: c.ConnectSeq + 1}
	if a.Lossy {
		r.Flags |= ConnectFlagLossy
	}
	e.sendReply(r, e.authRepl)
	e.peer.Features = e.cfg.Supported & c.Features
	e.peer.ConnectSeq = c.ConnectSeq + 1
	e.peer.Lossy = a.Lossy
	e.inSeq = a.InSeq
	if e.authDone {
		e.signer = e.pending
	}
	if tag == TagSeq {
		e.out = binary.LittleEndian.AppendUint64(e.out, a.InSeq)
		e.state = stSeq
		return nil
	}
	e.state = stReady
	return nil
}

// RetrySession (server) tells the client to retry with connectSeq (the
// existing session's connect_seq plus one).
func (e *Engine) RetrySession(connectSeq uint32) error {
	if err := e.deciding("RetrySession"); err != nil {
		return err
	}
	e.sendReply(ConnectReply{Tag: TagRetrySession, ConnectSeq: connectSeq}, e.authRepl)
	e.state = stConnect
	return nil
}

// RetryGlobalSeq (server) tells the client its global_seq is not above
// globalSeq, the one seen on the existing session.
func (e *Engine) RetryGlobalSeq(globalSeq uint32) error {
	if err := e.deciding("RetryGlobalSeq"); err != nil {
		return err
	}
	e.sendReply(ConnectReply{Tag: TagRetryGlobal, GlobalSeq: globalSeq}, e.authRepl)
	e.state = stConnect
	return nil
}

// Reset (server) answers RESETSESSION: we hold no session the client's
// connect_seq refers to; it resets its own and connects again.
func (e *Engine) Reset() error {
	if err := e.deciding("Reset"); err != nil {
		return err
	}
	e.sendReply(ConnectReply{Tag: TagResetSession}, e.authRepl)
	e.state = stConnect
	return nil
}

// Wait (server) answers WAIT: a connection race our own connection to the
// peer wins. The engine is closed; the caller sends the output and closes.
func (e *Engine) Wait() error {
	if err := e.deciding("Wait"); err != nil {
		return err
	}
	e.sendReply(ConnectReply{Tag: TagWait}, e.authRepl)
	e.state = stClosed
	return nil
}

// ---- after the handshake ----

func (e *Engine) tag(t Tag) error {
	switch t {
	case TagMsg:
		e.state = stMsgHeader
	case TagAck, TagKeepalive2, TagKeepalive2Ack:
		e.tagArg = t
		e.state = stTagArg
	case TagKeepalive:
		e.emit(Event{Kind: EvKeepalive, Bare: true})
	case TagClose:
		e.state = stClosed
		e.emit(Event{Kind: EvClose})
	default:
		return errorf(ErrUnknownTag, t, "on an open session")
	}
	return nil
}

func (e *Engine) tagArgument(p []byte) error {
	e.state = stReady
	le := binary.LittleEndian
	switch e.tagArg {
	case TagAck:
		e.emit(Event{Kind: EvAck, Seq: le.Uint64(p)})
	case TagKeepalive2:
		e.emit(Event{Kind: EvKeepalive, Stamp: Stamp{le.Uint32(p), le.Uint32(p[4:])}})
	case TagKeepalive2Ack:
		e.emit(Event{Kind: EvKeepaliveAck, Stamp: Stamp{le.Uint32(p), le.Uint32(p[4:])}})
	}
	return nil
}

func (e *Engine) msgHeader(p []byte) error {
	h, err := ParseHeader(p)
	if err != nil {
		return err
	}
	for _, s := range [...]struct {
		name string
		n    uint32
	}{{"front", h.FrontLen}, {"middle", h.MiddleLen}, {"data", h.DataLen}} {
		if s.n > e.lim.MaxSegment {
			return errorf(ErrTooLarge, TagMsg, "%s of %d bytes exceeds %d", s.name, s.n, e.lim.MaxSegment)
		}
	}
	if n := h.PayloadLen(); n > uint64(e.lim.MaxMessage) {
		return errorf(ErrTooLarge, TagMsg, "message of %d bytes exceeds %d", n, e.lim.MaxMessage)
	}
	e.hdr = h
	e.state = stMsgBody
	return nil
}

func (e *Engine) msgBody(p []byte) error {
	h := &e.hdr
	e.state = stReady
	fo, mo, do := 0, int(h.FrontLen), int(h.FrontLen+h.MiddleLen)
	end := int(h.PayloadLen())
	front, middle, data := p[fo:mo:mo], p[mo:do:do], p[do:end:end]
	f, err := ParseFooter(p[end:], e.peer.Features)
	if err != nil {
		return err
	}
	if f.Flags&msg.FooterComplete == 0 {
		return errorf(ErrAborted, TagMsg, "seq %d: footer flags %#x", h.Seq, f.Flags)
	}
	if got := msg.CRC32C(0, front); got != f.FrontCRC {
		return errorf(ErrDataCRC, TagMsg, "seq %d front crc %#x, computed %#x", h.Seq, f.FrontCRC, got)
	}
	if got := msg.CRC32C(0, middle); got != f.MiddleCRC {
		return errorf(ErrDataCRC, TagMsg, "seq %d middle crc %#x, computed %#x", h.Seq, f.MiddleCRC, got)
	}
	if f.Flags&msg.FooterNoCRC == 0 {
		if got := msg.CRC32C(0, data); got != f.DataCRC {
			return errorf(ErrDataCRC, TagMsg, "seq %d data crc %#x, computed %#x", h.Seq, f.DataCRC, got)
		}
	}
	if e.signer != nil && e.peer.Features&FeatureMsgAuth != 0 {
		if sig := e.signer.sign(sigBlock(h, &f), e.peer.Features&FeatureCephxV2 != 0); sig != f.Sig {
			return errorf(ErrBadSignature, TagMsg, "seq %d: signature %#x, computed %#x", h.Seq, f.Sig, sig)
		}
	}
	if h.Seq <= e.inSeq {
		e.emit(Event{Kind: EvMessage, Seq: h.Seq, Dropped: true})
		return nil
	}
	skipped := h.Seq - e.inSeq - 1
	e.inSeq = h.Seq
	m := &msg.Message{
		Header: msg.Header{
			Seq: h.Seq, Tid: h.Tid, Type: h.Type, Priority: msg.Priority(h.Priority),
			Version: h.Version, CompatVersion: h.CompatVersion, DataOff: h.DataOff, Src: h.Src,
		},
		Footer: f,
	}
	m.SetSegments(front, middle, data)
	e.emit(Event{Kind: EvMessage, Msg: m, Seq: h.Seq, Skipped: skipped})
	return nil
}

// AppendAck appends an ACK of every message up to seq.
func (e *Engine) AppendAck(b []byte, seq uint64) []byte {
	b = append(b, byte(TagAck))
	return binary.LittleEndian.AppendUint64(b, seq)
}

// AppendKeepalive appends KEEPALIVE2 carrying s, or a bare KEEPALIVE if
// the peer lacks MSGR_KEEPALIVE2.
func (e *Engine) AppendKeepalive(b []byte, s Stamp) []byte {
	if e.peer.Features&FeatureMsgrKeepalive2 == 0 {
		return append(b, byte(TagKeepalive))
	}
	return appendStamp(append(b, byte(TagKeepalive2)), s)
}

// AppendKeepaliveAck appends KEEPALIVE2_ACK echoing s.
func (e *Engine) AppendKeepaliveAck(b []byte, s Stamp) []byte {
	return appendStamp(append(b, byte(TagKeepalive2Ack)), s)
}

// AppendClose appends CLOSE.
func (e *Engine) AppendClose(b []byte) []byte { return append(b, byte(TagClose)) }

func appendStamp(b []byte, s Stamp) []byte {
	b = binary.LittleEndian.AppendUint32(b, s.Sec)
	return binary.LittleEndian.AppendUint32(b, s.Nsec)
}

// Frame returns the MessageFrame that encodes m on this connection: its
// header with this engine's name as src, the negotiated features and,
// with a cephx session, the session's signer.
func (e *Engine) Frame(m *msg.Message) MessageFrame {
	return MessageFrame{
		Header: Header{
			Seq: m.Header.Seq, Tid: m.Header.Tid, Type: m.Header.Type,
			Priority: uint16(m.Header.Priority), Version: m.Header.Version,
			DataOff: m.Header.DataOff, Src: e.cfg.MyName, CompatVersion: m.Header.CompatVersion,
		},
		Front: m.Front, Middle: m.Middle, Data: m.Data,
		Features: e.peer.Features,
		signer:   e.signer,
	}
}

// AppendMessage appends m (with the sequence number in m.Header.Seq) as
// TAG_MSG, header, payload and footer.
func (e *Engine) AppendMessage(b []byte, m *msg.Message) []byte {
	f := e.Frame(m)
	return f.Append(b)
}
