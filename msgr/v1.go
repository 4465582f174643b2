package msgr

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/msgr1"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

// The msgr1 (legacy protocol) connection path. A connection whose target
// is a "v1:IP:PORT/NONCE" address speaks msgr1, as does every socket
// accepted on a listener bound with a "v1:" address; both run the pure
// engine of package msgr/msgr1 and share the rest of the connection with
// msgr2: the out queue, the sent and replay lists, the throttles, the
// dispatch queue and the writer (whose encoder writes msgr1 frames for a
// socket with a msgr1 engine). Authentication goes through Config.Auth
// as for msgr2: ClientFor's auth.Client builds the connect message's
// authorizer (none to a mon, whose clients authenticate with MAuth
// afterwards), ServerFor's auth.Server verifies it; with cephx the
// session key signs every message. msgr1 has no secure mode.

// errPeerClosed ends a msgr1 socket whose peer sent CLOSE.
var errPeerClosed = errors.New("msgr: peer closed the connection (msgr1 CLOSE)")

// v1Listener marks a listener bound with a "v1:" address: the sockets
// it accepts speak msgr1.
type v1Listener struct{ transport.Listener }

// isV1Addr reports whether addr is a Ceph "v1:" address.
func isV1Addr(addr string) bool { return strings.HasPrefix(addr, "v1:") }

// PickAddr chooses, from the addresses a peer advertises, the one to
// connect to, as Ceph's AsyncMessenger does (_filter_addrs, then the
// first entry that names a protocol): a messenger bound to no msgr2
// address of its own (one that listens only on "v1:" addresses) ignores
// the peer's msgr2 addresses; otherwise the first msgr2 or msgr1 address
// in the vector wins. Maps list v2 first, so v2 is chosen when both ends
// can speak it. ok is false if no address fits.
func (m *Messenger) PickAddr(v msg.AddrVec) (a msg.EntityAddr, ok bool) {
	mine := m.Addrs()
	_, haveV2 := mine.Msgr2()
	noV2 := len(mine) > 0 && !haveV2
	for _, a := range v {
		switch a.Type {
		case msg.AddrMsgr2:
			if !noV2 {
				return a, true
			}
		case msg.AddrLegacy:
			return a, true
		}
	}
	return msg.EntityAddr{}, false
}

// ConnectAddrs is ConnectType to the address PickAddr chooses from v.
func (m *Messenger) ConnectAddrs(v msg.AddrVec, peer msg.EntityType) (*Conn, error) {
	a, ok := m.PickAddr(v)
	if !ok {
		return nil, &transport.AddrError{Input: v.String(), Reason: "no msgr2 or msgr1 address to connect to", Err: transport.ErrBadAddr}
	}
	return m.ConnectType(a.String(), peer)
}

func (m *Messenger) v1Limits() msgr1.Limits {
	l := m.cfg.Limits.WithDefaults()
	return msgr1.Limits{MaxSegment: l.MaxSegment, MaxMessage: l.MaxMessage}
}

// myLegacyAddr is the msgr1 address this messenger listens on, or an
// empty one carrying its nonce.
func (m *Messenger) myLegacyAddr() msg.EntityAddr {
	for _, a := range m.Addrs() {
		if a.Type == msg.AddrLegacy {
			return a
		}
	}
	return msg.EntityAddr{Type: msg.AddrLegacy, Nonce: m.cfg.Nonce}
}

// v1Target reports whether the connection dials a msgr1 address.
func (c *Conn) v1Target() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.targetAddr().Type == msg.AddrLegacy
}

func newRunV1(nc net.Conn, e *msgr1.Engine) *socketRun {
	r := newRun(nc, nil, nil)
	r.v1 = e
	return r
}

// connectOnceV1 is connectOnce's msgr1 half: the handshake on nc, just
// dialled, then the socket until it fails.
func (c *Conn) connectOnceV1(nc net.Conn) error {
	m := c.m
	me := m.myLegacyAddr()
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		_ = nc.Close()
		return ErrClosed
	}
	if c.run != nil {
		c.mu.Unlock()
		_ = nc.Close()
		return ErrWait
	}
	c.hsConn = nc
	peerType := c.peerName.Type
	if peerType == 0 {
		// msgr1 names the peer's type in the protocol version: a peer
		// of unknown type is taken for a mon (ferry ping's).
		peerType = msg.EntityMon
	}
	target := c.targetAddr()
	cfg := msgr1.Config{
		Role:      msgr1.Client,
		MyName:    m.cfg.Name,
		Nonce:     m.cfg.Nonce,
		PeerAddr:  target,
		PeerType:  peerType,
		Supported: m.cfg.Supported,
		Required:  m.cfg.Required,
		Lossy:     c.policy.Lossy,
		GlobalSeq: uint32(m.globalSeq.Add(1)),
		Limits:    m.v1Limits(),
	}
	if me.IP.IsValid() {
		cfg.MyAddr = me
	}
	if !c.policy.Lossy && c.serverCookie != 0 {
		// Resuming the session: its connect_seq (bumped by the fault)
		// and what we have received, for the SEQ exchange.
		cfg.ConnectSeq = uint32(c.connectSeq)
		cfg.InSeq = c.inSeq.Load()
	}
	c.mu.Unlock()

	if peerType != msg.EntityMon || m.cfg.Name.Type == msg.EntityMon {
		// The authorizer (none to a mon: its clients use MAuth).
		ac, err := m.authClient(c)
		if err != nil {
			c.mu.Lock()
			c.hsConn = nil
			c.mu.Unlock()
			_ = nc.Close()
			return err
		}
		cfg.Auth = ac
	}
	e := msgr1.NewEngine(cfg)
	br := bufio.NewReaderSize(nc, readBufSize)
	_, err := handshakeV1(m, nc, br, e, c.clientEventV1)
	c.mu.Lock()
	c.hsConn = nil
	c.mu.Unlock()
	if err != nil {
		_ = nc.Close()
		return err
	}
	r := newRunV1(nc, e)
	c.mu.Lock()
	if old := c.run; old != nil && c.state != stateClosed {
		c.mu.Unlock()
		r.fail(ErrWait)
		r.finish()
		return ErrWait
	}
	c.run = r
	c.mu.Unlock()
	c.runSocketV1(r, br)
	return nil
}

// clientEventV1 handles the client side's msgr1 handshake events.
func (c *Conn) clientEventV1(e *msgr1.Engine, ev *msgr1.Event) (*Conn, error) {
	m := c.m
	switch ev.Kind {
	case msgr1.EvWait:
		return nil, ErrWait
	case msgr1.EvRetryGlobal:
		return nil, e.RetryGlobal(uint32(m.globalSeqAbove(ev.Seq)))
	case msgr1.EvRetry:
		c.mu.Lock()
		c.connectSeq = uint64(e.ConnectSeq())
		c.mu.Unlock()
	case msgr1.EvSessionReset:
		c.mu.Lock()
		c.resetSessionLocked()
		c.mu.Unlock()
		m.queueEvent(itemRemoteReset, c)
	case msgr1.EvReady:
		p := e.Peer()
		c.mu.Lock()
		if p.Lossy && !c.policy.Lossy {
			// The server runs this session lossy: so do we, as Ceph's
			// client does (it only sets policy.lossy): what is queued
			// still goes out.
			c.policy.Lossy = true
		}
		c.discardAckedLocked(ev.Seq)
		c.connectSeq = uint64(p.ConnectSeq)
		c.peerGlobalSeq = uint64(p.GlobalSeq)
		if !c.policy.Lossy {
			// msgr1 has no cookies: a non-zero one marks an established
			// session, whose reconnects bump connect_seq (socketFailed)
			// and resume it.
			c.serverCookie = 1
		}
		c.mu.Unlock()
	}
	return nil, nil
}

// handshakeV1 is handshake for a msgr1 engine.
func handshakeV1(m *Messenger, nc net.Conn, br *bufio.Reader, e *msgr1.Engine, handle func(*msgr1.Engine, *msgr1.Event) (*Conn, error)) (*Conn, error) {
	if m.cfg.HandshakeTimeout > 0 {
		_ = nc.SetDeadline(time.Now().Add(m.cfg.HandshakeTimeout))
	}
	// Shutdown ends the handshake at once rather than at its timeout:
	// it cannot close a socket no Conn holds yet.
	stop := context.AfterFunc(m.ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	e.Start()
	if _, err := nc.Write(e.Output()); err != nil {
		return nil, err
	}
	var (
		scratch []byte
		chosen  *Conn
	)
	flush := func() error {
		if out := e.Output(); len(out) > 0 {
			_, err := nc.Write(out)
			return err
		}
		return nil
	}
	for !e.Ready() {
		n, _ := e.Need()
		if n == 0 {
			if err := e.Err(); err != nil {
				return nil, err
			}
			return nil, errors.New("msgr: msgr1 handshake stalled")
		}
		// Before the session is open the engine asks for at most a
		// banner or an authorizer (msgr1.Limits.MaxAuthorizer).
		if cap(scratch) < n {
			scratch = make([]byte, n)
		}
		buf := scratch[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, handshakeErr(err)
		}
		evs, err := e.Feed(buf)
		if err != nil {
			_ = flush() // a refusal, such as BADAUTHORIZER
			return nil, err
		}
		for i := range evs {
			to, err := handle(e, &evs[i])
			if to != nil {
				chosen = to
			}
			if err != nil {
				_ = flush()
				return nil, err
			}
		}
		if err := flush(); err != nil {
			return nil, err
		}
	}
	_ = nc.SetDeadline(time.Time{})
	return chosen, nil
}

// serveIncomingV1 runs the server side of a msgr1 handshake on an
// accepted socket, then the socket.
func (m *Messenger) serveIncomingV1(nc net.Conn) {
	defer m.wg.Done()
	peer := remoteEntityAddr(nc, 0)
	peer.Type = msg.AddrLegacy
	cfg := msgr1.Config{
		Role:      msgr1.Server,
		MyName:    m.cfg.Name,
		MyAddr:    m.myLegacyAddr(),
		Nonce:     m.cfg.Nonce,
		PeerAddr:  peer,
		Supported: m.cfg.Supported,
		Required:  m.cfg.Required,
		Limits:    m.v1Limits(),
		// A mon's clients send no authorizer (MAuth follows), and with
		// auth none nothing needs proving.
		AllowNoAuthorizer: m.cfg.Name.Type == msg.EntityMon || m.cfg.Auth.ServerFor == nil,
	}
	as, err := m.authServer(peer)
	if err != nil {
		m.log.Warn("no auth server for an incoming msgr1 connection", "remote", nc.RemoteAddr().String(), "err", err)
		_ = nc.Close()
		return
	}
	cfg.AuthServer = as
	// The handshake bound of msgr2 (Config.MaxHandshakes) applies to
	// msgr1 too: nothing is read or allocated before a slot.
	actx, cancel := context.WithTimeout(m.ctx, m.cfg.HandshakeTimeout)
	slot, err := m.hs.admit(actx, nc)
	cancel()
	if err != nil {
		m.log.Debug("incoming msgr1 connection timed out waiting for a handshake slot", "remote", nc.RemoteAddr().String())
		_ = nc.Close()
		return
	}
	e := msgr1.NewEngine(cfg)
	hr := &hsReader{r: nc, entry: slot, clock: m.cfg.Clock}
	br := bufio.NewReaderSize(hr, readBufSize)
	var (
		run      *socketRun
		attached *Conn
	)
	c, err := handshakeV1(m, nc, br, e, func(e *msgr1.Engine, ev *msgr1.Event) (*Conn, error) {
		switch ev.Kind {
		case msgr1.EvConnect:
			to, err := m.onConnectV1(e, nc, &run)
			if to != nil {
				attached = to
			}
			return to, err
		case msgr1.EvReady:
			// The client's in_seq from the SEQ exchange.
			if attached != nil {
				attached.mu.Lock()
				attached.discardAckedLocked(ev.Seq)
				attached.mu.Unlock()
			}
		}
		return nil, nil
	})
	hr.entry = nil
	m.hs.release(slot)
	if err != nil && slot.evicted.Load() {
		err = ErrHandshakeEvicted
	}
	if err == nil && c == nil {
		err = errors.New("msgr: msgr1 handshake ended without a session")
	}
	if err == nil && m.cfg.Auth.ServerFor != nil && e.Peer().Auth == nil {
		// A peer that did not authenticate in the handshake (a mon's
		// client, which would log in with MAuth) may send control-sized
		// messages only: pings and MAuth fit, and it cannot make us hold
		// more than Limits.MaxControl (64 KiB by default) per message.
		l := m.v1Limits()
		pre := m.cfg.Limits.WithDefaults().MaxControl
		l.MaxSegment, l.MaxMessage = min(l.MaxSegment, pre), min(l.MaxMessage, pre)
		e.SetLimits(l)
	}
	if err != nil {
		_ = nc.Close()
		if run != nil && attached != nil {
			attached.detach(run)
		}
		if m.ctx.Err() == nil && !errors.Is(err, errDropIncoming) && !errors.Is(err, ErrWait) {
			var pe *msgr1.Error
			if errors.As(err, &pe) || errors.Is(err, ErrIdentityChanged) {
				m.log.Warn("closing incoming msgr1 connection on protocol error", "remote", nc.RemoteAddr().String(), "err", err)
			} else {
				m.log.Debug("incoming msgr1 handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
			}
		}
		return
	}
	c.runSocketV1(run, br)
}

// sessionStateV1 is what the msgr1 session rules need of c.
func (c *Conn) sessionStateV1(myAddr msg.EntityAddr) msgr1.SessionState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := msgr1.SessionState{
		Exists:     true,
		Closed:     c.state == stateClosed,
		Replacing:  c.replacing,
		Lossy:      c.policy.Lossy,
		Server:     c.policy.Server,
		ResetCheck: c.policy.ResetCheck,
		Open:       c.state == stateOpen || c.state == stateStandby,
		PeerGlobal: uint32(c.peerGlobalSeq),
		ConnectSeq: uint32(c.connectSeq),
		MyAddr:     myAddr,
	}
	if a, ok := c.peerAddrs.Legacy(); ok {
		st.PeerAddr = a
	} else {
		st.PeerAddr = c.targetAddr()
	}
	return st
}

// onConnectV1 applies msgr1's session rules to a connect message and
// answers it.
func (m *Messenger) onConnectV1(e *msgr1.Engine, nc net.Conn, run **socketRun) (*Conn, error) {
	m.injectInternalDelay()
	cm := *e.PendingConnect()
	peer := e.Peer()
	key := m.sessionKey(msg.AddrVec{peer.Addr})
	me := m.myLegacyAddr()
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return nil, ErrShutdown
	}
	p := m.policyLocked(peer.Name.Type)
	if cm.Flags&msgr1.ConnectFlagLossy != 0 {
		// The client runs the session lossy: never resume or replay it.
		p.Lossy = true
	}
	register := (!p.Lossy || p.RegisterLossyClients) && !(p.Server && p.Lossy)
	ex := m.sessions[key]
	st := msgr1.SessionState{}
	if ex != nil && register {
		st = ex.sessionStateV1(me)
	}
	act, val := msgr1.DecideConnect(st, &cm)
	if ex != nil && register && (act == msgr1.ConnectOpen || act == msgr1.ConnectReplace || act == msgr1.ConnectReplaceReset) {
		var got msg.AuthName
		if peer.Auth != nil {
			got = peer.Auth.Name
		}
		if err := ex.checkIdentityName(got); err != nil {
			m.mu.Unlock()
			return nil, err
		}
	}
	var c, old *Conn
	peerReset := false
	switch act {
	case msgr1.ConnectRetrySession:
		m.mu.Unlock()
		return nil, e.RetrySession(val)
	case msgr1.ConnectRetryGlobal:
		m.mu.Unlock()
		return nil, e.RetryGlobalSeq(val)
	case msgr1.ConnectReset:
		m.mu.Unlock()
		return nil, e.Reset()
	case msgr1.ConnectWait:
		m.mu.Unlock()
		if err := e.Wait(); err != nil {
			return nil, err
		}
		return nil, ErrWait
	case msgr1.ConnectReplaceReset:
		if !st.Lossy {
			// The peer reset its session: this socket takes ours over,
			// starting its numbering again.
			c, peerReset = ex, true
			break
		}
		fallthrough
	case msgr1.ConnectOpen:
		old = ex
		c = m.newConn(false, p)
		if register && key != "" {
			m.sessions[key] = c
			c.regKey = key
		}
	case msgr1.ConnectReplace:
		c = ex
	}
	m.mu.Unlock()
	if old != nil && !st.Closed && st.Exists {
		old.close(ErrReplaced, true)
	}
	if *run = c.takeoverV1(nc, e); *run == nil {
		return nil, ErrClosed
	}
	m.log.Debug("msgr1 connect", "peer", key, "action", act.String(), "conn", c.id, "exists", st.Exists, "open", st.Open)
	c.mu.Lock()
	if peerReset {
		if p.ResetCheck {
			c.resetSessionLocked()
		}
		c.inSeq.Store(0)
	}
	c.policy = p
	c.peerGlobalSeq = uint64(cm.GlobalSeq)
	c.connectSeq = uint64(cm.ConnectSeq) + 1
	c.peerName.Type = peer.Name.Type
	c.peerAddrs = msg.AddrVec{peer.Addr}
	c.features = m.cfg.Supported & cm.Features
	inSeq := c.inSeq.Load()
	c.mu.Unlock()
	if peerReset && p.ResetCheck {
		m.queueEvent(itemRemoteReset, c)
	}
	return c, e.Accept(msgr1.Accept{GlobalSeq: uint32(m.globalSeq.Add(1)), Lossy: p.Lossy, InSeq: inSeq, Reset: peerReset})
}

// takeoverV1 is takeover for a msgr1 socket.
func (c *Conn) takeoverV1(nc net.Conn, e *msgr1.Engine) *socketRun {
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		return nil
	}
	c.replacing = true
	old := c.run
	r := newRunV1(nc, e)
	c.run = r
	if c.hsConn != nil {
		_ = c.hsConn.Close()
	}
	c.state = stateConnecting
	c.mu.Unlock()
	if old != nil {
		old.fail(ErrReplaced)
		<-old.doneCh()
	}
	c.m.injectInternalDelay()
	c.mu.Lock()
	c.replacing = false
	c.requeueLocked()
	c.mu.Unlock()
	return r
}

// runSocketV1 is runSocket for a msgr1 socket.
func (c *Conn) runSocketV1(r *socketRun, br *bufio.Reader) {
	m := c.m
	c.mu.Lock()
	if c.run != r || c.state == stateClosed {
		c.mu.Unlock()
		r.fail(ErrReplaced)
		r.finish()
		return
	}
	p := r.v1.Peer()
	if p.Name.Type != 0 {
		c.peerName.Type = p.Name.Type
	}
	if !p.Addr.IsZero() || len(c.peerAddrs) == 0 {
		c.peerAddrs = msg.AddrVec{p.Addr}
	}
	c.features = p.Features
	c.auth = AuthInfo{Mode: auth.ConModeCRC}
	if p.Auth != nil {
		c.auth = authInfo(*p.Auth, auth.ConModeCRC)
	}
	c.state = stateOpen
	c.everReady = true
	c.lastKASent = m.cfg.Clock.Now().UnixNano()
	c.markReadyLocked()
	c.mu.Unlock()
	c.lastRecv.Store(m.cfg.Clock.Now().UnixNano())
	m.log.Debug("msgr1 socket up", "conn", c.id, "outgoing", c.outgoing, "in_seq", c.inSeq.Load(),
		"remote", r.nc.RemoteAddr().String(), "connect_seq", p.ConnectSeq, "lossy", p.Lossy)
	if c.outgoing {
		m.registerOutgoingSession(c)
		m.queueEvent(itemConnect, c)
	} else {
		m.queueEvent(itemAccept, c)
	}
	c.poke() // starts the writer if something is queued (write.go)
	err := c.readLoopV1(r, br)
	err = r.reason(err)
	r.stopWriters()
	r.finish()
	c.socketFailed(r, err)
}

// readLoopV1 is readLoop for a msgr1 socket: the same throttling (budget
// for a message body is taken from its header, before the body is
// allocated), delivery and acks.
func (c *Conn) readLoopV1(r *socketRun, br *bufio.Reader) error {
	m := c.m
	e := r.v1
	pol := c.Policy()
	lossy := pol.Lossy
	inj := m.cfg.Inject.SocketFailures
	var scratch []byte
	w := &c.ws
	ackDue := false
	for {
		if inj > 0 && injectHit(inj) {
			return ErrInjectedFailure
		}
		if c.liftLimits.Load() && c.liftLimits.CompareAndSwap(true, false) {
			e.SetLimits(m.v1Limits()) // the peer authenticated (Conn.Authenticated)
		}
		n, retain := e.Need()
		if n == 0 {
			if err := e.Err(); err != nil {
				return err
			}
			return errPeerClosed
		}
		if br.Buffered() < n {
			c.flushLeft(r)
		}
		if m.budget.pressure() {
			// As frameReader.step: a peer that does not read its replies
			// is not read from while its connection holds more than its
			// share of the send budget (budget.go).
			if err := c.pauseIfOverShare(r); err != nil {
				return err
			}
		}
		var buf []byte
		var held int64
		var recvStamp, throttleStamp time.Time
		var release func(*msg.Message)
		if retain {
			recvStamp = m.cfg.Clock.Now()
			waited, err := c.takeBudget(&pol, int64(n), r)
			if err != nil {
				return err
			}
			throttleStamp = recvStamp
			if waited {
				throttleStamp = m.cfg.Clock.Now()
			}
			held = int64(n)
			buf, release = getBody(n)
		} else {
			if cap(scratch) < n {
				scratch = make([]byte, n)
			}
			buf = scratch[:n]
		}
		if _, err := io.ReadFull(br, buf); err != nil {
			c.putBudget(&pol, held)
			return err
		}
		evs, err := e.Feed(buf)
		if err != nil {
			c.putBudget(&pol, held)
			return err
		}
		now := c.m.cfg.Clock.Now()
		c.lastRecv.Store(now.UnixNano())
		for i := range evs {
			ev := &evs[i]
			switch ev.Kind {
			case msgr1.EvMessage:
				if ev.Dropped {
					m.log.Debug("dropping duplicate message", "conn", c.id, "seq", ev.Seq, "in_seq", e.InSeq())
					if release != nil {
						release(&msg.Message{})
						release = nil
					}
					continue
				}
				if ev.Skipped > 0 && !lossy {
					m.log.Warn("sequence gap", "conn", c.id, "seq", ev.Seq, "skipped", ev.Skipped)
				}
				mm := ev.Msg
				mm.RecvStamp = recvStamp
				mm.RecvCompleteStamp = now
				mm.ThrottleStamp = throttleStamp
				mm.Conn = c
				mm.Release, release = release, nil
				m.injectDelay(c, mm)
				_, err := c.deliver(&pol, mm, held)
				held = 0
				c.inSeq.Store(ev.Seq)
				if err != nil {
					return err
				}
				ackDue = !lossy
			case msgr1.EvAck:
				if !lossy {
					c.mu.Lock()
					c.discardAckedLocked(ev.Seq)
					c.mu.Unlock()
				}
			case msgr1.EvKeepalive:
				c.lastKeepalive.Store(now.UnixNano())
				if !ev.Bare {
					c.mu.Lock()
					c.sendKAAck = true
					c.kaAckStamp = msgr2.Stamp(ev.Stamp)
					c.mu.Unlock()
					c.poke()
				}
			case msgr1.EvKeepaliveAck:
				c.lastKeepaliveAck.Store(int64(ev.Stamp.Sec)*1e9 + int64(ev.Stamp.Nsec))
				c.m.met.keepaliveAcked(unixTime(c.lastKeepaliveAck.Load()), c.m.cfg.Clock.Now())
			case msgr1.EvClose:
				c.putBudget(&pol, held)
				return errPeerClosed
			}
		}
		c.putBudget(&pol, held)
		if ackDue && br.Buffered() == 0 {
			ackDue = false
			c.mu.Lock()
			c.ackPending = true
			c.mu.Unlock()
			w.pending.Store(true)
		}
	}
}

// encodeV1 is encode for a msgr1 socket: keepalives, an ACK when one is
// due (msgr1 headers carry no ack), then the messages, each as TAG_MSG,
// header, payload and footer; data buffers of copyMax bytes or more are
// handed to writev as they are.
func (w *writeState) encodeV1(c *Conn, e *msgr1.Engine, ka, kaAck bool, stamp msgr2.Stamp, ack bool) {
	w.wbuf = w.wbuf[:0]
	w.iov = w.iov[:0]
	w.fix = w.fix[:0]
	w.pos, w.skip, w.fi = 0, 0, 0
	mark := 0
	addPiece := func() {
		w.iov = append(w.iov, w.wbuf[mark:])
		mark = len(w.wbuf)
	}
	if kaAck {
		w.wbuf = e.AppendKeepaliveAck(w.wbuf, msgr1.Stamp(stamp))
	}
	if ka {
		now := c.m.cfg.Clock.Now()
		w.wbuf = e.AppendKeepalive(w.wbuf, msgr1.Stamp{Sec: uint32(now.Unix()), Nsec: uint32(now.Nanosecond())})
	}
	if ack {
		w.wbuf = e.AppendAck(w.wbuf, c.inSeq.Load())
	}
	for _, mm := range w.batch {
		f := e.Frame(mm)
		w.wbuf = f.AppendHead(w.wbuf)
		for _, p := range mm.Data {
			if len(p) < copyMax {
				w.wbuf = append(w.wbuf, p...)
				continue
			}
			if len(w.wbuf) > mark {
				addPiece()
			}
			w.iov = append(w.iov, p)
		}
		w.wbuf = f.AppendTail(w.wbuf)
	}
	if len(w.wbuf) > mark || len(w.iov) == 0 {
		addPiece()
	}
}
