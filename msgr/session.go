package msgr

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/msgr1"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

// errDropIncoming closes an incoming socket that lost to an existing
// connection.
var errDropIncoming = errors.New("msgr: incoming connection dropped in favour of an existing one")

// runOutgoing is the connector of an outgoing connection (the client side
// of a session): it dials, runs the handshake (resuming the session when
// it has one), runs the socket until it fails, and for a lossless policy
// reconnects with backoff, or waits in standby until there is something to
// send.
func (c *Conn) runOutgoing() {
	if !c.dialLoop(false) {
		c.m.wg.Done()
	}
}

// dialLoop is runOutgoing's loop; socketEnded says a socket it
// established has just ended. It reports parked=true, having done nothing
// more, when the socket's reader parked (park.go): the reader goroutine
// started anew calls dialLoop(true) when the socket ends, and owns the
// messenger's count of the goroutine (m.wg) until then.
func (c *Conn) dialLoop(socketEnded bool) (parked bool) {
	m := c.m
	var backoff time.Duration
	for {
		var err error
		if socketEnded {
			socketEnded = false
		} else {
			if !c.waitToConnect() {
				return false
			}
			if backoff > 0 {
				if !c.sleep(backoff) {
					return false
				}
			}
			if err = c.connectOnce(); err == errParked {
				return true
			}
		}
		if c.isClosed() {
			return false
		}
		if err == nil {
			// The socket ran and failed; reconnect at once the first time.
			backoff = 0
			c.reconnects.Add(1)
			c.m.met.reconnect()
			continue
		}
		if c.outgoing && permanentDialError(err) {
			// The address or the configuration is wrong: no retry
			// can succeed, so fail for good, whatever the policy,
			// rather than retry forever with an empty Err, and say so
			// as for a refusal (the RefusedHandler finds the error in
			// Err), so that what waits on the connection fails now.
			// (An accepted session's own redial, c.dialer, keeps
			// retrying: its peer may reconnect and resume it.)
			c.close(err, true)
			m.queueEvent(itemRefused, c)
			return false
		}
		if c.Policy().Lossy && (c.wasOpen() || errors.Is(err, transport.ErrRefused) || isProtocolRefusal(err)) {
			// A lossy connection fails for good once it has been open
			// (with a reset event), or when the peer refuses it. A fault
			// while connecting is retried, as Ceph does, so that what was
			// queued is not lost. Closed first, so that a RefusedHandler
			// finds the dial's error in Err (it found nil when the event
			// ran before close: a request's error then lost "refused").
			c.close(err, true)
			if errors.Is(err, transport.ErrRefused) {
				m.queueEvent(itemRefused, c)
			}
			return false
		}
		if errors.Is(err, transport.ErrRefused) {
			m.queueEvent(itemRefused, c)
		}
		switch {
		case errors.Is(err, ErrWait):
			backoff = m.cfg.MaxBackoff
		case backoff == 0:
			backoff = m.cfg.InitialBackoff
		default:
			backoff = min(2*backoff, m.cfg.MaxBackoff)
		}
		m.log.Debug("connect failed", "conn", c.id, "target", c.target.String(), "err", err, "retry_in", backoff)
	}
}

// permanentDialError reports whether a dial failed in a way no retry
// can mend: an address the transport rejects (a bad shm name), a scheme
// with no transport, or a configuration the system refuses (a TCP
// congestion control the kernel does not offer).
func permanentDialError(err error) bool {
	return errors.Is(err, transport.ErrBadAddr) || errors.Is(err, transport.ErrUnknownScheme) || errors.Is(err, transport.ErrBadConfig)
}

func (c *Conn) wasOpen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.everReady
}

// isProtocolRefusal reports errors that retrying would only repeat: the
// peer's protocol refusals (missing features, auth method) and bad input.
func isProtocolRefusal(err error) bool {
	var pe *msgr2.Error
	var ae *msgr2.AuthError
	var pe1 *msgr1.Error
	return errors.As(err, &pe) || errors.As(err, &ae) || errors.As(err, &pe1) || errors.Is(err, ErrIdentityChanged)
}

// checkIdentity refuses to let a socket whose peer authenticated as one
// entity carry an incoming session another entity authenticated: the
// session's queued messages, and whatever the server authorized by its
// Auth, are that entity's. Addresses, nonces and cookies are the
// client's to claim (and in clear in crc mode); the authenticated name
// is not.
func (c *Conn) checkIdentity(e *msgr2.Engine) error {
	return c.checkIdentityName(e.AuthResult().Name)
}

// checkIdentityName is checkIdentity for a connection whose peer
// authenticated as got (the zero name: not authenticated).
func (c *Conn) checkIdentityName(got msg.AuthName) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outgoing || !c.everReady || c.auth.Name == (msg.AuthName{}) || got == c.auth.Name {
		return nil
	}
	return fmt.Errorf("%w: the session of %s claimed by a connection authenticated as %s", ErrIdentityChanged, c.auth.Name, got)
}

// waitToConnect returns false once the connection is closed. A lossless
// connection whose policy has standby waits while it has nothing to send.
func (c *Conn) waitToConnect() bool {
	for {
		c.mu.Lock()
		st := c.state
		// A socket the peer opened (a race it won) carries the session.
		busy := c.run != nil
		idle := !busy && c.outq.n == 0 && len(c.replay) == 0 && c.everReady && c.policy.Standby
		if st != stateClosed && idle {
			c.state = stateStandby
		} else if st == stateStandby && !busy {
			c.state = stateConnecting
		}
		c.mu.Unlock()
		if st == stateClosed {
			return false
		}
		if !idle && !busy {
			return true
		}
		select {
		case <-c.wake:
		case <-c.ctx.Done():
			return false
		}
	}
}

func (c *Conn) sleep(d time.Duration) bool {
	t := c.m.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-c.ctx.Done():
		return false
	}
}

// connectOnce makes one connection attempt. It returns nil if a socket
// was established and has since failed, or the error that prevented it.
func (c *Conn) connectOnce() error {
	m := c.m
	// The dial's context derives from no other: close() cancels it
	// through dialCancel, and Shutdown closes every connection. A child
	// of c.ctx or of the messenger's context would leave its parent a map
	// of children that outlives the dial (about 250 bytes per messenger,
	// 370 per connection for c.ctx's, with its Done channel).
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.HandshakeTimeout)
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		cancel()
		return ErrClosed
	}
	c.dialCancel = cancel
	c.mu.Unlock()
	nc, err := m.cfg.Transports.DialAddr(ctx, c.target)
	c.mu.Lock()
	c.dialCancel = nil
	c.mu.Unlock()
	cancel()
	if err != nil {
		return err
	}
	if c.v1Target() {
		return c.connectOnceV1(nc)
	}
	myAddrs := m.Addrs() // before c.mu: the lock order is m.mu, then c.mu
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		_ = nc.Close()
		return ErrClosed
	}
	if c.run != nil {
		// While we dialled, the peer's own connection took the session
		// over (a race it won): do not start a second one.
		c.mu.Unlock()
		_ = nc.Close()
		return ErrWait
	}
	// close() shuts this socket if the connection is closed mid-handshake,
	// so a stale attempt cannot reach the peer and disturb its sessions.
	c.hsConn = nc
	lossy := c.policy.Lossy
	if !lossy && c.clientCookie == 0 {
		c.clientCookie = randomCookie()
	}
	cfg := msgr2.Config{
		Role:         msgr2.Client,
		MyName:       m.cfg.Name,
		MyAuthName:   m.cfg.Auth.Name,
		MyAddrs:      myAddrs,
		Nonce:        m.cfg.Nonce,
		PeerAddr:     remoteEntityAddr(nc, c.target.Nonce),
		Supported:    m.cfg.Supported,
		Required:     m.cfg.Required,
		Lossy:        lossy,
		NoDataCRC:    m.cfg.NoDataCRC,
		ClientCookie: c.clientCookie,
		GlobalSeq:    m.globalSeq.Add(1),
		Limits:       m.cfg.Limits,
		ConModes:     m.conModes,
	}
	if !lossy && c.serverCookie != 0 {
		cfg.ServerCookie = c.serverCookie
		cfg.ConnectSeq = c.connectSeq
		cfg.InSeq = c.inSeq.Load()
		cfg.PeerName = c.peerName
	}
	c.mu.Unlock()

	if cfg.AuthClient, err = m.authClient(c); err != nil {
		c.mu.Lock()
		c.hsConn = nil
		c.mu.Unlock()
		_ = nc.Close()
		return err
	}
	e := msgr2.NewEngine(cfg)
	src := socketSource(nc)
	br := getReadBuf(src)
	_, err = handshake(m, nc, br, e, c.clientEvent)
	c.mu.Lock()
	c.hsConn = nil
	c.mu.Unlock()
	if err != nil {
		_ = nc.Close()
		return err
	}
	r := newRun(nc, e, src)
	c.mu.Lock()
	if old := c.run; old != nil && c.state != stateClosed {
		// An incoming socket from the same peer carries the session
		// already (a connection race it won): drop ours.
		c.mu.Unlock()
		r.fail(ErrWait)
		r.finish()
		return ErrWait
	}
	c.run = r
	c.mu.Unlock()
	r.dialed = true
	if c.runSocket(r, br) {
		return errParked
	}
	return nil
}

// clientEvent handles the client side's handshake events.
func (c *Conn) clientEvent(e *msgr2.Engine, ev *msgr2.Event) (*Conn, error) {
	m := c.m
	switch ev.Kind {
	case msgr2.EvWait:
		return nil, ErrWait
	case msgr2.EvRetryGlobal:
		return nil, e.RetryGlobal(m.globalSeqAbove(ev.Seq))
	case msgr2.EvRetry:
		c.mu.Lock()
		c.connectSeq = e.ConnectSeq()
		c.mu.Unlock()
	case msgr2.EvSessionReset:
		c.mu.Lock()
		if ev.Full {
			c.resetSessionLocked()
			c.clientCookie = randomCookie()
		} else {
			c.serverCookie, c.connectSeq = 0, 0
			c.inSeq.Store(0)
		}
		cookie := c.clientCookie
		c.mu.Unlock()
		if ev.Full {
			m.queueEvent(itemRemoteReset, c)
		}
		return nil, e.ResetSession(cookie)
	case msgr2.EvReconnected:
		c.mu.Lock()
		c.discardAckedLocked(ev.Seq)
		c.mu.Unlock()
	case msgr2.EvReady:
		p := e.Peer()
		c.mu.Lock()
		if p.Lossy() && !c.policy.Lossy {
			// The server runs this session lossy: so do we, as Ceph's
			// client does (it only sets policy.lossy). What is queued
			// still goes out; the next fault ends the session.
			c.policy.Lossy = true
		}
		c.serverCookie = p.Cookie
		c.peerGlobalSeq = p.GlobalSeq
		c.connectSeq = e.ConnectSeq()
		c.mu.Unlock()
	}
	return nil, nil
}

// handshake runs the engine until it is ready, writing what it produces
// and handing its events to handle, which may name the connection that
// the socket will carry (the server side's choice of session). Shared by
// both roles.
func handshake(m *Messenger, nc net.Conn, br *bufio.Reader, e *msgr2.Engine, handle func(*msgr2.Engine, *msgr2.Event) (*Conn, error)) (*Conn, error) {
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
	for !e.Ready() {
		n, _ := e.Need()
		if n == 0 {
			return nil, errors.New("msgr: handshake stalled")
		}
		if cap(scratch) < n {
			scratch = make([]byte, n)
		}
		buf := scratch[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, handshakeErr(err)
		}
		evs, err := e.Feed(buf)
		if err != nil {
			// Send what the engine queued (a refusal) before closing.
			if out := e.Output(); len(out) > 0 {
				_, _ = nc.Write(out)
			}
			return nil, err
		}
		for i := range evs {
			to, err := handle(e, &evs[i])
			if to != nil {
				chosen = to
			}
			if err != nil {
				if out := e.Output(); len(out) > 0 {
					_, _ = nc.Write(out)
				}
				return nil, err
			}
		}
		if out := e.Output(); len(out) > 0 {
			if _, err := nc.Write(out); err != nil {
				return nil, err
			}
		}
	}
	_ = nc.SetDeadline(time.Time{})
	return chosen, nil
}

func handshakeErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrHandshakeTimeout
	}
	return err
}

// serveIncoming runs the server side of the handshake on an accepted
// socket; the messenger's session rules pick the connection the socket
// will carry, and this goroutine then becomes that socket's reader.
func (m *Messenger) serveIncoming(nc net.Conn) {
	parked := false // the socket's reader owns the count in m.wg (park.go)
	defer func() {
		if !parked {
			m.wg.Done()
		}
	}()
	cfg := msgr2.Config{
		Role:      msgr2.Server,
		MyName:    m.cfg.Name,
		MyAddrs:   m.Addrs(),
		Nonce:     m.cfg.Nonce,
		PeerAddr:  remoteEntityAddr(nc, 0),
		Supported: m.cfg.Supported,
		Required:  m.cfg.Required,
		Limits:    m.cfg.Limits,
		NoDataCRC: m.cfg.NoDataCRC,
		ConModes:  m.conModes,
	}
	as, err := m.authServer(cfg.PeerAddr)
	if err != nil {
		m.log.Warn("no auth server for an incoming connection", "remote", nc.RemoteAddr().String(), "err", err)
		_ = nc.Close()
		return
	}
	cfg.AuthServer = as
	actx, cancel := context.WithTimeout(m.ctx, m.cfg.HandshakeTimeout)
	slot, err := m.hs.admit(actx, nc)
	cancel()
	if err != nil {
		m.log.Debug("incoming connection timed out waiting for a handshake slot", "remote", nc.RemoteAddr().String())
		_ = nc.Close()
		return
	}
	e := msgr2.NewEngine(cfg)
	hr := &hsReader{r: socketSource(nc), entry: slot, clock: m.cfg.Clock}
	br := getReadBuf(hr)
	var (
		run      *socketRun // set once a session took this socket over
		attached *Conn      // that session
	)
	c, err := handshake(m, nc, br, e, func(e *msgr2.Engine, ev *msgr2.Event) (*Conn, error) {
		var (
			to  *Conn
			err error
		)
		switch ev.Kind {
		case msgr2.EvClientIdent:
			to, err = m.onClientIdent(e, nc, &run)
		case msgr2.EvReconnect:
			to, err = m.onReconnect(e, nc, &run)
		}
		if to != nil {
			attached = to
		}
		return to, err
	})
	hr.entry = nil
	m.hs.release(slot)
	if err != nil && slot.evicted.Load() {
		err = ErrHandshakeEvicted
	}
	if err != nil {
		_ = nc.Close()
		if run != nil && attached != nil {
			attached.detach(run)
		}
		if m.ctx.Err() == nil && !errors.Is(err, errDropIncoming) && !errors.Is(err, ErrWait) {
			if isProtocolRefusal(err) {
				m.log.Warn("closing incoming connection on protocol error", "remote", nc.RemoteAddr().String(), "err", err)
			} else {
				m.log.Debug("incoming handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
			}
		}
		return
	}
	run.src = hr.r // the source br reads, which the run's reads go on through
	parked = c.runSocket(run, br)
}

// detach undoes a takeover whose handshake then failed: the session goes
// back to waiting for its peer.
func (c *Conn) detach(r *socketRun) {
	c.mu.Lock()
	if c.run == r {
		c.run = nil
		if c.state != stateClosed && !c.policy.Lossy {
			c.state = stateStandby
		}
	}
	c.mu.Unlock()
	r.fail(ErrClosed)
	r.finish()
}

func (m *Messenger) sessionKey(addrs msg.AddrVec) string {
	if a, ok := addrs.Msgr2(); ok {
		return a.String()
	}
	if len(addrs) > 0 {
		return addrs[0].String()
	}
	return ""
}

func (m *Messenger) myAddr() msg.EntityAddr {
	if a, ok := m.Addrs().Msgr2(); ok {
		return a
	}
	return msg.EntityAddr{Type: msg.AddrAny, Nonce: m.cfg.Nonce}
}

// onClientIdent applies the session rules to a CLIENT_IDENT and answers it.
func (m *Messenger) onClientIdent(e *msgr2.Engine, nc net.Conn, run **socketRun) (*Conn, error) {
	m.injectInternalDelay()
	ci := e.PendingIdent()
	peer := e.Peer()
	key := m.sessionKey(ci.Addrs)
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return nil, ErrShutdown
	}
	p := m.policyLocked(peer.Name.Type)
	if ci.Flags&msgr2.IdentFlagLossy != 0 {
		// The client runs the session lossy: never resume or replay it.
		p.Lossy = true
	}
	register := !p.Lossy || p.RegisterLossyClients
	ex := m.sessions[key]
	st := msgr2.SessionState{}
	if ex != nil && register {
		st = ex.sessionState(m.myAddrLocked())
	}
	act := msgr2.DecideIdent(st, ci)
	if ex != nil && register && (act == msgr2.IdentReplace || act == msgr2.IdentReset || act == msgr2.IdentReuse) {
		if err := ex.checkIdentity(e); err != nil {
			m.mu.Unlock()
			return nil, err
		}
	}
	var c, old *Conn
	remoteReset := false
	switch act {
	case msgr2.IdentClose:
		m.mu.Unlock()
		return nil, errDropIncoming
	case msgr2.IdentWait:
		m.mu.Unlock()
		if err := e.Wait(); err != nil {
			return nil, err
		}
		return nil, ErrWait
	case msgr2.IdentNew, msgr2.IdentReplace:
		old = ex
		c = m.newConn(false, p)
		if register && key != "" {
			m.sessions[key] = c
			c.regKey = key
		}
	case msgr2.IdentReset, msgr2.IdentReuse:
		c = ex
		remoteReset = act == msgr2.IdentReset && p.ResetCheck
	}
	m.mu.Unlock()
	if act == msgr2.IdentReplace && old != nil {
		old.close(ErrReplaced, true)
	}
	if *run = c.takeover(nc, e); *run == nil {
		return nil, ErrClosed
	}
	m.log.Debug("client ident", "peer", key, "action", act.String(), "conn", c.id, "exists", st.Exists, "open", st.Open, "outgoing", st.Outgoing)
	c.mu.Lock()
	if act == msgr2.IdentReset && p.ResetCheck {
		c.resetSessionLocked()
	} else if act == msgr2.IdentReset || act == msgr2.IdentReuse {
		// The client starts its numbering of received messages over.
		// Without ResetCheck a peer that restarted keeps the session
		// and what is queued for it, as Ceph's lossless_peer does.
		c.inSeq.Store(0)
	}
	c.policy = p
	c.clientCookie = ci.ClientCookie
	c.peerGlobalSeq = ci.GlobalSeq
	c.connectSeq = 0
	if !p.Lossy {
		c.serverCookie = randomCookie()
	}
	cookie := c.serverCookie
	c.peerName, c.peerAddrs, c.features = peer.Name, peer.Addrs, peer.Features
	c.mu.Unlock()
	if remoteReset {
		m.queueEvent(itemRemoteReset, c)
	}
	return c, e.Accept(m.globalSeq.Add(1), cookie, p.Lossy)
}

// onReconnect applies the session rules to a SESSION_RECONNECT.
func (m *Messenger) onReconnect(e *msgr2.Engine, nc net.Conn, run **socketRun) (*Conn, error) {
	m.injectInternalDelay()
	r := e.PendingReconnect()
	key := m.sessionKey(r.Addrs)
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return nil, ErrShutdown
	}
	ex := m.sessions[key]
	st := msgr2.SessionState{}
	if ex != nil {
		st = ex.sessionState(m.myAddrLocked())
	}
	m.mu.Unlock()
	act := msgr2.DecideReconnect(st, r)
	if act != msgr2.ReconnectReuse {
		m.log.Debug("session reconnect refused", "peer", key, "action", act.String(), "exists", st.Exists, "closed", st.Closed,
			"cookie", r.ClientCookie, "session_cookie", st.ClientCookie, "gseq", r.GlobalSeq, "peer_gseq", st.PeerGlobal,
			"cseq", r.ConnectSeq, "session_cseq", st.ConnectSeq)
	}
	switch act {
	case msgr2.ReconnectResetFull, msgr2.ReconnectReset:
		return nil, e.Reset(act == msgr2.ReconnectResetFull)
	case msgr2.ReconnectRetryGlobal:
		return nil, e.RetryGlobalSeq(st.PeerGlobal)
	case msgr2.ReconnectRetry:
		return nil, e.Retry(st.ConnectSeq)
	case msgr2.ReconnectWait:
		if err := e.Wait(); err != nil {
			return nil, err
		}
		return nil, ErrWait
	}
	// Resume: the session takes over this socket.
	if err := ex.checkIdentity(e); err != nil {
		return nil, err
	}
	if *run = ex.takeover(nc, e); *run == nil {
		return nil, e.Reset(true)
	}
	ex.mu.Lock()
	ex.connectSeq = r.ConnectSeq
	ex.peerGlobalSeq = r.GlobalSeq
	ex.discardAckedLocked(r.MsgSeq)
	name, features := ex.peerName, ex.features
	ex.mu.Unlock()
	ex.reconnects.Add(1)
	ex.m.met.reconnect()
	return ex, e.AcceptReconnect(ex.inSeq.Load(), name, features)
}

func (m *Messenger) myAddrLocked() msg.EntityAddr {
	if a, ok := m.myAddrs.Msgr2(); ok {
		return a
	}
	return msg.EntityAddr{Type: msg.AddrAny, Nonce: m.cfg.Nonce}
}

// takeover makes nc this connection's socket, stopping the one it had and
// requeuing what that one had not got acknowledged. It returns the new
// run, or nil if the connection is closed.
func (c *Conn) takeover(nc net.Conn, e *msgr2.Engine) *socketRun {
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		return nil
	}
	c.replacing = true
	old := c.run
	r := newRun(nc, e, nil)
	c.run = r
	if c.hsConn != nil {
		// Our own connection attempt lost the race to the peer's: stop it,
		// so it cannot reach the peer once this session is open.
		_ = c.hsConn.Close()
	}
	// Nothing may be written to the new socket before its handshake is
	// done: runSocket opens the connection again.
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

// readBufSize is the size of the large buffered reader in front of a
// busy socket (park.go: a reader starts with readBufSmall): small frames
// are parsed from it without a system call each.
const readBufSize = 64 << 10

// runSocket runs an established socket: the writer on its own goroutine,
// the reader on this one, until the socket fails. r must be c.run. It
// reports parked=true, having done nothing more, when the reader parked
// (park.go): the goroutine must then exit, and the reader goroutine
// started anew ends the socket.
func (c *Conn) runSocket(r *socketRun, br *bufio.Reader) (parked bool) {
	m := c.m
	c.mu.Lock()
	if c.run != r || c.state == stateClosed {
		// Superseded or closed while the handshake finished.
		c.mu.Unlock()
		r.fail(ErrReplaced)
		r.finish()
		return false
	}
	p := r.e.Peer()
	if len(p.Addrs) > 0 {
		c.peerName, c.peerAddrs, c.features = p.Name, p.Addrs, p.Features
	} else if p.Name.Type != 0 {
		c.peerName.Type = p.Name.Type
	}
	c.auth = authInfo(r.e.AuthResult(), r.e.ConMode())
	c.state = stateOpen
	c.everReady = true
	c.lastKASent = m.cfg.Clock.Now().UnixNano()
	c.markReadyLocked()
	c.mu.Unlock()
	c.lastRecv.Store(m.cfg.Clock.Now().UnixNano())
	c.lastWrite.Store(c.lastRecv.Load())
	m.log.Debug("socket up", "conn", c.id, "outgoing", c.outgoing, "resumed", r.e.Resumed(), "in_seq", c.inSeq.Load(), "engine_in_seq", r.e.InSeq(),
		"remote", r.nc.RemoteAddr().String(), "data_crc", r.e.DataCRC())
	if c.outgoing {
		m.registerOutgoingSession(c)
		m.queueEvent(itemConnect, c)
	} else {
		m.queueEvent(itemAccept, c)
	}

	c.poke() // starts the writer if something is queued (write.go)
	setBusyPoll(r.src, m.cfg.BusyPoll, m.met)
	err := c.readLoop(r, br)
	if err == errParked {
		return true
	}
	c.endSocket(r, err)
	return false
}

// endSocket is the end of socket r, whose reader stopped with err: the
// writer is stopped and the session told (socketFailed).
func (c *Conn) endSocket(r *socketRun, err error) {
	err = r.reason(err)
	r.stopWriters()
	r.finish()
	c.socketFailed(r, err)
}

func remoteEntityAddr(nc net.Conn, nonce uint32) msg.EntityAddr {
	a := msg.EntityAddr{Type: msg.AddrMsgr2, Nonce: nonce}
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		a.IP = ta.AddrPort()
		if a.IP.Addr().Is4In6() {
			a.IP = netipUnmap(a.IP)
		}
	}
	return a
}

func randomCookie() uint64 {
	var b [8]byte
	for {
		if _, err := io.ReadFull(cryptoRand, b[:]); err == nil {
			if v := leUint64(b[:]); v != 0 {
				return v
			}
		}
	}
}
