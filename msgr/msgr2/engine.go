package msgr2

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"net/netip"
	"slices"

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

	// GlobalID is the global id a server hands the client in AUTH_DONE
	// when its auth method assigns none (auth none).
	GlobalID uint64

	// AuthClient (client) authenticates this attempt; nil means auth
	// none as MyAuthName. AuthServer (server) authenticates the peer;
	// nil means auth none, assigning GlobalID. One value serves one
	// connection attempt.
	AuthClient auth.Client
	AuthServer auth.Server
	// ConModes returns the connection modes (auth.ConModeCRC,
	// auth.ConModeSecure) for a peer of the given type in order of
	// preference: a client offers them in AUTH_REQUEST; a server allows
	// them and picks the first of the client's list it allows, as Ceph
	// does. nil, or an empty list, means crc only. Auth none uses crc only, and secure mode
	// needs a msgr2.1 peer.
	ConModes func(peer msg.EntityType) []uint32

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
	// Auth is what authentication established: on a server, who the
	// peer is (name, global id, caps); on a client, who we are. Its keys
	// are the session's: do not log them.
	Auth auth.Result
	// ConMode is the negotiated connection mode (ConModeCRC or
	// ConModeSecure).
	ConMode uint32
}

// Lossy reports whether the peer marked the session lossy.
func (p *Peer) Lossy() bool { return p.Flags&IdentFlagLossy != 0 }

type state uint8

const (
	stBannerMagic  state = iota // the 8 bytes "ceph v2\n" (a msgr1 peer sends only 9 bytes and waits)
	stBannerPrefix              // the banner payload's le16 length
	stBannerPayload
	stHello
	stAuth          // client: AUTH_REQUEST sent; server: waiting for AUTH_REQUEST
	stAuthSignature // waiting for the peer's AUTH_SIGNATURE
	stIdent         // client: CLIENT_IDENT sent; server: waiting for it
	stDecide        // server: waiting for the caller's decision
	stReady
	stClosed
)

// Engine is the msgr2 protocol state machine of one connection: banner,
// HELLO, authentication through an auth.Client or auth.Server (auth none
// by default), AUTH_SIGNATURE, identity exchange, then MESSAGE, ACK and
// keepalive frames, in crc or (msgr2.1 only) secure mode. It does no I/O and
// never reads the clock: the caller asks Need how many bytes to read, reads
// exactly that many, and passes them to Feed, which returns events; bytes
// the engine wants sent accumulate in Output.
//
// An Engine is driven by one goroutine (the connection's reader). Once
// ready, InSeq may be read from any goroutine, and the connection's one
// writer (whoever owns the write side) encodes frames: in crc mode with
// the codec (MessageFrame) and Rev1, in secure mode with AppendMessage
// and AppendControl, which advance the send nonce and so must be called
// in the order the frames go on the wire. Receiving and sending use
// separate cipher state, so the reader and the writer may run at once.
//
// Before the peer is authenticated (its AUTH_SIGNATURE verified), what it
// sends is bounded by Limits.MaxPreAuth in all (banner and frames; the
// engine keeps a transcript of it for AUTH_SIGNATURE), and a MESSAGE,
// ACK or keepalive before the session is ready is refused from its
// preamble, before its body is read.
type Engine struct {
	lim   Limits
	state state
	role  Role

	// The flags, together: the engine fits a smaller size class.
	rev1      bool
	noDataCRC bool // both banners offered FeatureNoDataCRC
	inFrame   bool // a preamble was read; the body comes next
	decideOn  Tag  // server: what stDecide is deciding (CLIENT_IDENT or SESSION_RECONNECT)
	resumed   bool // client: this attempt sent SESSION_RECONNECT
	more      bool // server: an AUTH_REQUEST_MORE is expected
	recording bool // hs.rxRec and hs.txRec grow: the peer is not authenticated yet
	authed    bool // the peer's AUTH_SIGNATURE verified

	peer    Peer
	inSeq   uint64
	out     []byte
	events  []Event
	pre     Preamble
	bannerN int
	hs      *engineHS // what only the handshake needs; nil once ready
	err     error

	// The client's connect_seq and global_seq (Config.ConnectSeq and
	// GlobalSeq as the handshake moved them), kept past the handshake
	// for ConnectSeq and GlobalSeq; the rest of the Config is in hs.
	connectSeq, globalSeq uint64

	// Authentication.
	authC   auth.Client
	authS   auth.Server
	method  uint32 // the method in use (client: ours; server: the client's)
	rounds  int    // AUTH_REPLY_MORE rounds so far
	preAuth int    // bytes received before the peer was authenticated

	// Secure mode (set at the switch after AUTH_DONE).
	tx       *SecureTx
	rx       *SecureRx
	txErr    error  // a send that could not be sealed
	framesIn uint64 // frames whose preamble was accepted (FramesIn)
}

// engineHS is the engine's state that only the handshake uses, in a
// struct of its own that the engine drops once it is ready: an
// established connection's engine is then smaller by what it held. With
// the flags packed it went from 1192 to 872 bytes (the 1280-byte size
// class to the 896-byte one); with the Config here too, and the secure
// opener's inline bytes in SecureRx, to 576 (its size class): the heap
// in use per idle connection of BenchmarkIdleConnections went from 7.26
// to 6.55 KiB on the client and 5.51 to 5.11 on the server. The
// transcripts start in its rec array, one allocation for both.
type engineHS struct {
	cfg      Config           // as given to NewEngine, less what Engine keeps
	clientID ClientIdent      // server: the pending CLIENT_IDENT
	recon    SessionReconnect // server: the pending SESSION_RECONNECT
	offered  []uint32         // the modes the client offered
	tried    []uint32         // client: the methods the server refused so far
	rxRec    []byte           // every byte received so far (AUTH_SIGNATURE)
	txRec    []byte           // every byte sent so far
	wantSig  [32]byte         // the signature the peer must send
	rec      [2 * recCap]byte // where rxRec and txRec start
}

// recCap is the room each transcript has in engineHS.rec: a handshake
// with auth none records about 200 bytes each way, cephx more (the
// transcript then grows by append, as before).
const recCap = 256

// maxAuthRounds bounds the AUTH_REPLY_MORE / AUTH_REQUEST_MORE round
// trips of one authentication (cephx needs one).
const maxAuthRounds = 8

// NewEngine returns an engine for one connection. Call Start to produce
// the banner.
func NewEngine(cfg Config) *Engine {
	e := &Engine{lim: cfg.Limits.WithDefaults(), role: cfg.Role, connectSeq: cfg.ConnectSeq, globalSeq: cfg.GlobalSeq,
		authC: cfg.AuthClient, authS: cfg.AuthServer, recording: true, hs: &engineHS{cfg: cfg}}
	e.hs.rxRec, e.hs.txRec = e.hs.rec[:0:recCap], e.hs.rec[recCap:recCap:2*recCap]
	if e.authC == nil {
		e.authC = auth.NewNoneClient(cfg.MyAuthName)
	}
	if e.authS == nil {
		e.authS = &auth.NoneServer{GlobalID: cfg.GlobalID}
	}
	return e
}

// Start queues the banner. Both sides send it at once.
func (e *Engine) Start() {
	sup := FeatureRevision1
	if e.hs.cfg.NoDataCRC {
		sup |= FeatureNoDataCRC
	}
	start := len(e.out)
	e.out = AppendBanner(e.out, sup, 0)
	e.recordTx(start)
}

// recordTx adds what was appended to out from start to the transcript.
func (e *Engine) recordTx(start int) {
	if e.recording {
		e.hs.txRec = append(e.hs.txRec, e.out[start:]...)
	}
}

// AuthResult returns what authentication established (valid once the
// handshake is past AUTH_DONE): on a server, the peer's name, global id
// and caps; on a client, our own name and global id. Its keys are the
// session's.
func (e *Engine) AuthResult() auth.Result { return e.peer.Auth }

// ConMode returns the negotiated connection mode (ConModeCRC or
// ConModeSecure; 0 before AUTH_DONE).
func (e *Engine) ConMode() uint32 { return e.peer.ConMode }

// Secure reports whether frames are sealed (secure mode, from the
// AUTH_SIGNATURE exchange on).
func (e *Engine) Secure() bool { return e.tx != nil }

// Authenticated reports whether the peer's AUTH_SIGNATURE has verified.
func (e *Engine) Authenticated() bool { return e.authed }

// TxErr returns the error of a frame that could not be sealed by one of
// the Append methods that return no error (AppendKeepalive,
// AppendKeepaliveAck, AppendAck): ErrNonceExhausted. The connection must
// then be closed.
func (e *Engine) TxErr() error { return e.txErr }

// DataCRC reports whether MESSAGE data segments carry CRCs on this
// connection in crc mode: false once both banners offered
// FeatureNoDataCRC. (Secure mode carries no CRCs: GCM tags protect
// every byte.) A sender
// that encodes MessageFrames itself must then leave the data CRC zero
// (DataCRC 0, DataCRCSet), and a reader need not compute it; the engine
// does not check it.
func (e *Engine) DataCRC() bool { return !e.noDataCRC }

// Output returns the bytes to send and clears the buffer; the slice is
// valid until the next call to Feed or Accept.
func (e *Engine) Output() []byte {
	o := e.out
	e.out = e.out[:0]
	if e.state == stReady {
		// The handshake's last output: an established connection's
		// frames are appended to its writer's buffers, not to out.
		e.out = nil
	}
	return o
}

// Ready reports whether the handshake has finished.
func (e *Engine) Ready() bool { return e.state == stReady }

// Rev1 reports whether frames use the msgr2.1 layout (valid once the
// peer's banner has been read).
func (e *Engine) Rev1() bool { return e.rev1 }

// Peer returns what the handshake learned about the peer.
func (e *Engine) Peer() *Peer { return &e.peer }

// PendingIdent returns the CLIENT_IDENT that the server is deciding on
// (nil once the engine is ready).
func (e *Engine) PendingIdent() *ClientIdent {
	if e.hs == nil {
		return nil
	}
	return &e.hs.clientID
}

// PendingReconnect returns the SESSION_RECONNECT that the server is
// deciding on (nil once the engine is ready).
func (e *Engine) PendingReconnect() *SessionReconnect {
	if e.hs == nil {
		return nil
	}
	return &e.hs.recon
}

// Resumed reports whether the client asked to resume a session.
func (e *Engine) Resumed() bool { return e.resumed }

// ConnectSeq returns the client's current connect_seq.
func (e *Engine) ConnectSeq() uint64 { return e.connectSeq }

// GlobalSeq returns the client's current global_seq.
func (e *Engine) GlobalSeq() uint64 { return e.globalSeq }

// InSeq returns the sequence number of the last message delivered.
func (e *Engine) InSeq() uint64 { return e.inSeq }

// SetInSeq sets the receive sequence (session resumption).
func (e *Engine) SetInSeq(s uint64) { e.inSeq = s }

// FramesIn returns how many frames the peer has sent so far (counted
// when their preambles are accepted, from the banner on). It is read by
// the goroutine that feeds the engine.
func (e *Engine) FramesIn() uint64 { return e.framesIn }

// Err returns the error that closed the engine, if any.
func (e *Engine) Err() error { return e.err }

// InFrame reports whether the engine has read a frame's preamble and
// needs its body next.
func (e *Engine) InFrame() bool { return e.inFrame }

// Need returns how many bytes Feed needs next, and whether the engine may
// keep a reference to them (a message body, whose segments become the
// message's buffers): if retain is true the caller must pass a buffer it
// will not reuse.
func (e *Engine) Need() (n int, retain bool) {
	switch e.state {
	case stBannerMagic:
		return len(BannerPrefix), false
	case stBannerPrefix:
		return BannerPrefixLen - len(BannerPrefix), false
	case stBannerPayload:
		return e.bannerN, false
	case stClosed, stDecide:
		return 0, false
	}
	if !e.inFrame {
		if e.rx != nil {
			return SecurePreambleLen, false
		}
		return PreambleLen, false
	}
	if e.rx != nil {
		return e.pre.SecureBodyLen(), e.pre.Tag == TagMessage
	}
	return e.pre.BodyLen(e.rev1), e.pre.Tag == TagMessage
}

// NextFrameLen returns the length of the frame that b begins with,
// preamble included, when the engine is ready and between frames in crc
// mode: a reader can tell from it whether a whole frame is buffered
// before it feeds any of it. It reports false when it cannot tell (in a
// frame, not ready, secure mode, fewer than PreambleLen bytes, or a
// preamble Feed would refuse, which Feed then reports). It changes
// nothing.
func (e *Engine) NextFrameLen(b []byte) (int, bool) {
	if e.state != stReady || e.inFrame || e.rx != nil || len(b) < PreambleLen {
		return 0, false
	}
	pre, err := ParsePreamble(b, e.lim)
	if err != nil {
		return 0, false
	}
	return PreambleLen + pre.BodyLen(e.rev1), true
}

// fail closes the engine with err and returns it.
func (e *Engine) fail(err error) error {
	if e.err == nil {
		e.err = err
	}
	e.state = stClosed
	return e.err
}

// Trim lets go of the event array the engine reuses from one Feed to
// the next, for a connection about to sit idle: ten thousand idle
// connections need not keep one each (96 bytes). The next Feed
// allocates it again. Call it between Feed calls, from the goroutine
// that calls Feed.
func (e *Engine) Trim() { e.events = nil }

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
	if e.recording {
		e.hs.rxRec = append(e.hs.rxRec, p...)
	}
	if !e.authed {
		e.preAuth += len(p)
	}
	switch e.state {
	case stBannerMagic:
		// Checked before the length is read: a msgr1 peer sends its
		// 9-byte banner and waits for ours, and must be told at once.
		if string(p) == msgr1BannerPrefix[:len(BannerPrefix)] {
			return nil, e.fail(errorf(ErrMsgr1Banner, 0, "banner %q: a msgr1 peer", msgr1BannerPrefix))
		}
		if string(p) != BannerPrefix {
			return nil, e.fail(errorf(ErrBadBanner, 0, "banner %q", p))
		}
		e.state = stBannerPrefix
		return nil, nil
	case stBannerPrefix:
		var pre [BannerPrefixLen]byte
		copy(pre[copy(pre[:], BannerPrefix):], p)
		n, err := ParseBannerPrefix(pre[:])
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
		e.noDataCRC = e.hs.cfg.NoDataCRC && sup&FeatureNoDataCRC != 0
		e.state = stHello
		e.sendHello()
		return nil, nil
	}
	if !e.inFrame {
		var pre Preamble
		var err error
		if e.rx != nil {
			pre, err = e.rx.OpenPreamble(p, e.lim, &e.rx.inline)
		} else {
			pre, err = ParsePreamble(p, e.lim)
		}
		if err != nil {
			return nil, e.fail(err)
		}
		if pre.Tag != TagMessage && uint32(pre.PayloadLen()) > e.lim.MaxControl {
			return nil, e.fail(errorf(ErrTooLarge, pre.Tag, "control frame of %d bytes", pre.PayloadLen()))
		}
		if err := e.checkPreamble(&pre); err != nil {
			return nil, e.fail(err)
		}
		e.pre = pre
		e.inFrame = true
		e.framesIn++
		if n, _ := e.Need(); n == 0 {
			// A frame without a body to read (WAIT, or in secure mode a
			// control frame that fits the inline area).
			return e.feedBody(nil)
		}
		return e.events, nil
	}
	return e.feedBody(p)
}

// checkPreamble refuses, from its preamble alone, a frame the engine's
// state does not allow yet: a MESSAGE, ACK or keepalive before the
// session is ready, or anything that would take the peer past
// Limits.MaxPreAuth before it is authenticated.
func (e *Engine) checkPreamble(p *Preamble) error {
	if e.state != stReady {
		switch p.Tag {
		case TagMessage, TagAck, TagKeepalive2, TagKeepalive2Ack:
			return unexpected(p.Tag, e.state)
		}
	}
	if !e.authed && e.state != stReady {
		body := p.BodyLen(e.rev1)
		if e.rx != nil {
			body = p.SecureBodyLen()
		}
		if uint64(e.preAuth)+uint64(body) > uint64(e.lim.MaxPreAuth) {
			return errorf(ErrPreAuthLimit, p.Tag, "%d bytes received and a body of %d before authentication; the limit is %d",
				e.preAuth, body, e.lim.MaxPreAuth)
		}
	}
	return nil
}

// feedBody parses the body of the frame whose preamble was read and
// handles it.
func (e *Engine) feedBody(p []byte) ([]Event, error) {
	e.inFrame = false
	var segs [MaxSegments][]byte
	var err error
	if e.rx != nil {
		segs, err = e.rx.OpenBody(&e.pre, e.rx.inline[:], p)
	} else if len(p) > 0 {
		segs, err = parseBody(&e.pre, p, e.rev1, e.noDataCRC)
	}
	if err != nil {
		return nil, e.fail(err)
	}
	if err := e.handleFrame(e.pre.Tag, segs); err != nil {
		return nil, e.fail(err)
	}
	if e.txErr != nil {
		return nil, e.fail(e.txErr)
	}
	return e.events, nil
}

func (e *Engine) sendHello() {
	h := Hello{EntityType: e.hs.cfg.MyName.Type, PeerAddr: e.hs.cfg.PeerAddr}
	e.sendControl(TagHello, h.Append(nil))
}

func (e *Engine) sendControl(tag Tag, payload []byte) {
	start := len(e.out)
	if e.tx != nil {
		out, err := e.tx.AppendFrame(e.out, tag, payload)
		e.out = out
		if err != nil && e.txErr == nil {
			e.txErr = err
		}
	} else {
		e.out = AppendFrame(e.out, tag, e.rev1, payload)
	}
	e.recordTx(start)
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
		e.state = stAuth
		if e.role == Client {
			return e.sendAuthRequest()
		}
		return nil
	case stAuth:
		if e.role == Client {
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
		// HMAC-SHA256 with the session key of everything we sent up to
		// AUTH_DONE; all zeros without a session key (auth none).
		if !hmac.Equal(sig.Sig[:], e.hs.wantSig[:]) {
			return errorf(ErrBadSignature, tag, "the peer's signature of our transcript does not match")
		}
		e.authed = true
		e.state = stIdent
		if e.role == Client {
			if e.hs.cfg.ServerCookie != 0 {
				e.sendReconnect()
			} else {
				e.sendClientIdent()
			}
		}
		return nil
	case stIdent:
		if e.role == Client {
			return e.clientIdentReply(tag, segs[0])
		}
		return e.serverIdent(tag, segs[0])
	}
	return unexpected(tag, e.state)
}

// modesFor returns the connection modes for the peer, filtered to what
// method and the frame layout allow: crc only for auth none, and no
// secure mode with a msgr2.0 peer.
func (e *Engine) modesFor(method uint32) []uint32 {
	var modes []uint32
	if e.hs.cfg.ConModes != nil {
		modes = e.hs.cfg.ConModes(e.peer.Name.Type)
	}
	if len(modes) == 0 {
		modes = []uint32{ConModeCRC}
	}
	out := make([]uint32, 0, len(modes))
	for _, m := range modes {
		switch {
		case m != ConModeCRC && m != ConModeSecure:
		case m == ConModeSecure && (method == AuthMethodNone || !e.rev1):
		case slices.Contains(out, m):
		default:
			out = append(out, m)
		}
	}
	return out
}

// sign returns HMAC-SHA256(key, transcript), or zeros without a key.
func sign(key, transcript []byte) (sig [32]byte) {
	if len(key) == 0 {
		return sig
	}
	h := hmac.New(sha256.New, key)
	h.Write(transcript)
	h.Sum(sig[:0])
	return sig
}

// authDone finishes authentication with res in mode: the signatures of
// both transcripts, the switch to secure mode if chosen, and our
// AUTH_SIGNATURE. The client calls it after handling AUTH_DONE, the
// server after queueing it (so each transcript ends with AUTH_DONE).
func (e *Engine) authDone(res auth.Result, mode uint32) error {
	e.peer.Auth = res
	e.peer.ConMode = mode
	mine := sign(res.SessionKey, e.hs.rxRec)
	e.hs.wantSig = sign(res.SessionKey, e.hs.txRec)
	e.recording = false
	e.hs.rxRec, e.hs.txRec = nil, nil
	if mode == ConModeSecure {
		tx, rx, err := NewSecure(res.ConnectionSecret, e.role)
		if err != nil {
			return err
		}
		e.tx, e.rx = tx, rx
	}
	e.sendControl(TagAuthSignature, (&AuthSignature{Sig: mine}).Append(nil))
	e.state = stAuthSignature
	return nil
}

func (e *Engine) sendAuthRequest() error {
	e.method = e.authC.Method()
	e.hs.offered = e.modesFor(e.method)
	if len(e.hs.offered) == 0 {
		return errorf(ErrBadAuthMethod, TagAuthRequest, "no connection mode left to offer a %s peer with auth method %d (secure mode needs cephx and msgr2.1)",
			e.peer.Name.Type, e.method)
	}
	pl, err := e.authC.Request(e.peer.Name.Type)
	if err != nil {
		return &Error{Err: ErrAuthRejected, Tag: TagAuthRequest, Detail: "auth method could not build its request", Cause: err}
	}
	req := AuthRequest{Method: e.method, PreferredModes: e.hs.offered, Payload: pl}
	e.sendControl(TagAuthRequest, req.Append(nil))
	return nil
}

func (e *Engine) clientAuth(tag Tag, p []byte) error {
	switch tag {
	case TagAuthBadMethod:
		bm, err := ParseAuthBadMethod(p)
		if err != nil {
			return err
		}
		e.hs.tried = append(e.hs.tried, e.method)
		// As Ceph's client does (ProtocolV2::handle_auth_bad_method and
		// MonConnection::handle_auth_bad_method): retry on this socket
		// with the next method we support that the server allows; fail
		// only when none remains. Fallback only moves forward, so a
		// server answering AUTH_BAD_METHOD forever is bounded by our
		// list.
		if fb, ok := e.authC.(auth.Fallback); ok && fb.Fallback(e.method, bm.AllowedMethods) {
			e.rounds = 0
			return e.sendAuthRequest()
		}
		return &AuthError{Remote: true, Method: bm.Method, Result: bm.Result,
			AllowedMethods: bm.AllowedMethods, AllowedModes: bm.AllowedModes, OfferedModes: e.hs.offered,
			Tried: slices.Clone(e.hs.tried)}
	case TagAuthReplyMore:
		rm, err := ParseAuthReplyMore(p)
		if err != nil {
			return err
		}
		if e.rounds++; e.rounds > maxAuthRounds {
			return errorf(ErrProtocol, tag, "more than %d auth rounds", maxAuthRounds)
		}
		ans, err := e.authC.ReplyMore(slices.Clone(rm.Payload))
		if err != nil {
			return &Error{Err: ErrAuthRejected, Tag: tag, Detail: "auth method refused the server's challenge", Cause: err}
		}
		e.sendControl(TagAuthRequestMore, (&AuthRequestMore{Payload: ans}).Append(nil))
		return nil
	case TagAuthDone:
		d, err := ParseAuthDone(p)
		if err != nil {
			return err
		}
		if !slices.Contains(e.hs.offered, d.ConMode) {
			return errorf(ErrBadAuthMethod, tag, "server chose connection mode %d; we offered %v", d.ConMode, e.hs.offered)
		}
		res, err := e.authC.Done(d.GlobalID, d.ConMode, slices.Clone(d.Payload))
		if err != nil {
			return &Error{Err: ErrAuthRejected, Tag: tag, Detail: "auth method refused the server's final reply", Cause: err}
		}
		e.peer.GlobalID = d.GlobalID
		return e.authDone(res, d.ConMode)
	}
	return unexpected(tag, e.state)
}

// authErrno is the result a server reports in AUTH_BAD_METHOD for an
// auth method's error, as Ceph does: -EINVAL for a malformed payload,
// else -EACCES.
func authErrno(err error) int32 {
	if errors.Is(err, auth.ErrMalformed) {
		return -errnoEINVAL
	}
	return -errnoEACCES
}

func (e *Engine) serverAuth(tag Tag, p []byte) error {
	switch {
	case tag == TagAuthRequest && !e.more:
		req, err := ParseAuthRequest(p)
		if err != nil {
			return err
		}
		e.method, e.hs.offered = req.Method, slices.Clone(req.PreferredModes)
		methods := e.authS.Methods(e.peer.Name.Type)
		modes := e.modesFor(req.Method)
		mode := uint32(0)
		for _, m := range req.PreferredModes {
			if slices.Contains(modes, m) {
				mode = m
				break
			}
		}
		if !slices.Contains(methods, req.Method) || mode == 0 {
			// EOPNOTSUPP, as Ceph answers; the client may try again.
			bm := AuthBadMethod{Method: req.Method, Result: -errnoEOPNOTSUPP, AllowedMethods: methods, AllowedModes: e.modesFor(firstOr(methods, req.Method))}
			e.sendControl(TagAuthBadMethod, bm.Append(nil))
			return nil
		}
		e.peer.ConMode = mode
		return e.serverHandle(true, req.Payload)
	case tag == TagAuthRequestMore && e.more:
		rm, err := ParseAuthRequestMore(p)
		if err != nil {
			return err
		}
		return e.serverHandle(false, rm.Payload)
	}
	return unexpected(tag, e.state)
}

func firstOr(l []uint32, d uint32) uint32 {
	if len(l) > 0 {
		return l[0]
	}
	return d
}

// serverHandle passes a client payload to the auth server and answers.
func (e *Engine) serverHandle(first bool, payload []byte) error {
	pt := e.peer.Name.Type
	rep, err := e.authS.Handle(e.method, pt, e.peer.ConMode, first, slices.Clone(payload))
	if err != nil {
		ae := &AuthError{Method: e.method, Result: authErrno(err), AllowedMethods: e.authS.Methods(pt),
			AllowedModes: e.modesFor(e.method), OfferedModes: e.hs.offered, Cause: err}
		bm := AuthBadMethod{Method: e.method, Result: ae.Result, AllowedMethods: ae.AllowedMethods, AllowedModes: ae.AllowedModes}
		e.sendControl(TagAuthBadMethod, bm.Append(nil))
		return ae
	}
	if !rep.Done {
		if e.rounds++; e.rounds > maxAuthRounds {
			return errorf(ErrProtocol, TagAuthRequestMore, "more than %d auth rounds", maxAuthRounds)
		}
		e.more = true
		e.sendControl(TagAuthReplyMore, (&AuthReplyMore{Payload: rep.More}).Append(nil))
		return nil
	}
	e.more = false
	res := rep.Result
	if res.GlobalID == 0 {
		res.GlobalID = e.hs.cfg.GlobalID
	}
	if res.Method == 0 {
		res.Method = e.method
	}
	e.peer.AuthName = res.Name
	done := AuthDone{GlobalID: res.GlobalID, ConMode: e.peer.ConMode, Payload: rep.Payload}
	e.sendControl(TagAuthDone, done.Append(nil))
	return e.authDone(res, e.peer.ConMode)
}

func (e *Engine) myAddrs() msg.AddrVec {
	if len(e.hs.cfg.MyAddrs) > 0 {
		return e.hs.cfg.MyAddrs
	}
	// As Ceph clients do: the IP the server sees, port 0 (we do not
	// listen), our nonce.
	a := e.peer.MyAddr
	a.Type = msg.AddrAny
	a.Nonce = e.hs.cfg.Nonce
	if a.IP.IsValid() {
		a.IP = netip.AddrPortFrom(a.IP.Addr(), 0)
	}
	return msg.AddrVec{a}
}

func (e *Engine) sendClientIdent() {
	gid := e.hs.cfg.MyName.Num
	if gid < 0 && e.peer.GlobalID != 0 {
		gid = int64(e.peer.GlobalID)
	}
	var flags uint64
	if e.hs.cfg.Lossy {
		flags |= IdentFlagLossy
	}
	ci := ClientIdent{
		Addrs:        e.myAddrs(),
		Target:       e.hs.cfg.PeerAddr,
		GID:          gid,
		GlobalSeq:    e.globalSeq,
		Supported:    e.hs.cfg.Supported,
		Required:     e.hs.cfg.Required,
		Flags:        flags,
		ClientCookie: e.hs.cfg.ClientCookie,
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
		if missing := e.hs.cfg.Required &^ si.Supported; missing != 0 {
			return errorf(ErrMissingFeatures, tag, "server lacks required features %#x", missing)
		}
		if missing := si.Required &^ e.hs.cfg.Supported; missing != 0 {
			return errorf(ErrMissingFeatures, tag, "server requires features %#x that ferry lacks", missing)
		}
		e.peer.Name.Num = si.GID
		e.peer.Addrs = si.Addrs
		e.peer.Supported, e.peer.Required = si.Supported, si.Required
		e.peer.Features = e.hs.cfg.Supported & si.Supported
		e.peer.Flags = si.Flags
		e.peer.Cookie = si.ServerCookie
		e.peer.GlobalSeq = si.GlobalSeq
		e.state = stReady
		e.hs = nil
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
		e.inSeq = e.hs.cfg.InSeq
		e.peer.Cookie = e.hs.cfg.ServerCookie
		if e.hs.cfg.PeerName.Type == e.peer.Name.Type {
			e.peer.Name = e.hs.cfg.PeerName
		}
		e.state = stReady
		e.hs = nil
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
		e.connectSeq = r.ConnectSeq + 1
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
		ClientCookie: e.hs.cfg.ClientCookie,
		ServerCookie: e.hs.cfg.ServerCookie,
		GlobalSeq:    e.globalSeq,
		ConnectSeq:   e.connectSeq,
		MsgSeq:       e.hs.cfg.InSeq,
	}
	e.sendControl(TagSessionReconnect, r.Append(nil))
}

// ResetSession (client) answers EvSessionReset: it forgets the server's
// cookie, connect_seq and received sequence, takes clientCookie (a new one
// after a full reset) and starts a new session with CLIENT_IDENT.
func (e *Engine) ResetSession(clientCookie uint64) error {
	if e.state != stDecide || e.role != Client {
		return errorf(ErrProtocol, 0, "ResetSession in state %d", e.state)
	}
	e.hs.cfg.ServerCookie, e.connectSeq, e.hs.cfg.InSeq = 0, 0, 0
	e.hs.cfg.ClientCookie = clientCookie
	e.resumed = false
	e.state = stIdent
	e.sendClientIdent()
	return nil
}

// RetryGlobal (client) answers EvRetryGlobal with a global_seq above the
// server's and resends SESSION_RECONNECT.
func (e *Engine) RetryGlobal(globalSeq uint64) error {
	if e.state != stDecide || e.role != Client {
		return errorf(ErrProtocol, 0, "RetryGlobal in state %d", e.state)
	}
	e.globalSeq = globalSeq
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
		e.hs.recon = r
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
	if missing := e.hs.cfg.Required &^ ci.Supported; missing != 0 {
		// Tell the client what it lacks; it will give up.
		e.sendControl(TagIdentMissingFeatures, (&IdentMissingFeatures{Features: missing}).Append(nil))
		return nil
	}
	if missing := ci.Required &^ e.hs.cfg.Supported; missing != 0 {
		return errorf(ErrMissingFeatures, tag, "client requires features %#x that ferry lacks", missing)
	}
	e.hs.clientID = ci
	e.peer.Name.Num = ci.GID
	e.peer.Addrs = ci.Addrs
	e.peer.Supported, e.peer.Required = ci.Supported, ci.Required
	e.peer.Features = e.hs.cfg.Supported & ci.Supported
	e.peer.Flags = ci.Flags
	e.peer.Cookie = ci.ClientCookie
	e.peer.GlobalSeq = ci.GlobalSeq
	e.decideOn = TagClientIdent
	e.state = stDecide
	e.events = append(e.events, Event{Kind: EvClientIdent})
	return nil
}

func (e *Engine) deciding(tag Tag, op string) error {
	if e.state != stDecide || e.role != Server || e.decideOn != tag {
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
	e.hs = nil
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
	e.hs.cfg.Lossy = lossy
	e.peer.Cookie = e.hs.clientID.ClientCookie
	var flags uint64
	if e.hs.cfg.Lossy {
		flags |= IdentFlagLossy
	}
	si := ServerIdent{
		Addrs:        e.hs.cfg.MyAddrs,
		GID:          e.hs.cfg.MyName.Num,
		GlobalSeq:    globalSeq,
		Supported:    e.hs.cfg.Supported,
		Required:     e.hs.cfg.Required,
		Flags:        flags,
		ServerCookie: serverCookie,
	}
	e.sendControl(TagServerIdent, si.Append(nil))
	e.state = stReady
	e.hs = nil
	return nil
}

// Wait (server) answers the pending CLIENT_IDENT with WAIT: a connection
// race that the other direction wins. The caller closes the connection
// after sending the output.
func (e *Engine) Wait() error {
	if e.state != stDecide || e.role != Server {
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

// AppendControl appends the frame carrying f in the connection's mode
// (sealed in secure mode, where it fails with ErrNonceExhausted and
// leaves b as it was). Frames must be appended in wire order.
func (e *Engine) AppendControl(b []byte, f ControlFrame) ([]byte, error) {
	if e.tx != nil {
		return e.tx.AppendControl(b, f)
	}
	return AppendControlFrame(b, e.rev1, f), nil
}

// AppendMessage appends a sealed MESSAGE frame (secure mode only: in crc
// mode use MessageFrame, which does not copy the data). It copies the
// data once, into b, and encrypts it there. It fails with
// ErrNonceExhausted (b as it was), or ErrProtocol in crc mode.
func (e *Engine) AppendMessage(b []byte, h *Header2, front, middle, data msg.Buffers) ([]byte, error) {
	if e.tx == nil {
		return b, errorf(ErrProtocol, TagMessage, "AppendMessage in crc mode")
	}
	return e.tx.AppendMessage(b, h, front, middle, data)
}

// appendCtl is AppendControl for the methods without an error result: a
// failure is kept for TxErr.
func (e *Engine) appendCtl(b []byte, f ControlFrame) []byte {
	out, err := e.AppendControl(b, f)
	if err != nil && e.txErr == nil {
		e.txErr = err
	}
	return out
}

// AppendKeepalive appends a KEEPALIVE2 frame carrying s (sealed in secure
// mode; see TxErr).
func (e *Engine) AppendKeepalive(b []byte, s Stamp) []byte {
	return e.appendCtl(b, Keepalive2{Sec: s.Sec, Nsec: s.Nsec})
}

// AppendKeepaliveAck appends a KEEPALIVE2_ACK frame echoing s (sealed in
// secure mode; see TxErr).
func (e *Engine) AppendKeepaliveAck(b []byte, s Stamp) []byte {
	return e.appendCtl(b, Keepalive2Ack{Sec: s.Sec, Nsec: s.Nsec})
}

// AppendAck appends an ACK frame for seq (sealed in secure mode; see
// TxErr).
func (e *Engine) AppendAck(b []byte, seq uint64) []byte {
	return e.appendCtl(b, Ack{Seq: seq})
}
