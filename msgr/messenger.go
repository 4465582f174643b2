// Package msgr is ferry's messenger: Ceph's Messenger in Go. A Messenger
// owns the connections of one entity, speaks msgr2.1 on each, orders
// outgoing messages by priority, assigns sequence numbers, throttles and
// dispatches what it receives, and keeps connections alive.
//
//	m, _ := msgr.New(msgr.Config{Name: msg.EntityName{Type: msg.EntityClient, Num: msg.NewID}})
//	m.SetDefaultPolicy(msgr.LossyClient())
//	m.AddDispatcherTail(msgr.DispatcherFunc(func(r *msg.Message) bool { ...; return true }))
//	m.Start()
//	c, _ := m.Connect("v2:127.0.0.1:3300/0")
//	c.Send((&ceph.Ping{}).Marshal())
//
// Connections authenticate as Config.Auth says (auth none in crc mode by
// default; cephx and secure mode through the auth.Client and auth.Server
// its hooks supply), and Conn.Auth reports who the peer proved to be.
//
// The protocol itself lives in msgr/msgr2 as a pure state machine; this
// package moves bytes and time around it. Each connection has one reader
// and one writer goroutine; the messenger has one dispatch goroutine and
// one timer goroutine.
package msgr

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymsg/ferry/metrics"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/transport"
)

// Messenger is one entity's endpoint: it listens (optionally), connects to
// peers and dispatches what they send. All methods are safe for concurrent
// use.
type Messenger struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the messenger starts

	mu            sync.Mutex
	started       bool
	stopped       bool
	defaultPolicy Policy
	policies      map[msg.EntityType]Policy
	listeners     []transport.Listener
	myAddrs       msg.AddrVec
	conns         map[*Conn]struct{}
	outgoing      map[string]*Conn // by dial address
	sessions      map[string]*Conn // by the peer's msgr2 address: the session rules' lookup
	stoppedCh     chan struct{}

	dispatchers atomic.Pointer[[]Dispatcher]
	placers     atomic.Pointer[[]DataPlacer] // the dispatchers that are DataPlacers, in order; nil if none

	nextConnID atomic.Uint64
	globalSeq  atomic.Uint64
	globalID   atomic.Uint64

	dq       *DispatchQueue[dispatchItem]
	dispatch *Throttle  // dispatch-bytes throttle
	hs       *hsGate    // bounds the incoming handshakes
	budget   sendBudget // what all connections may hold queued to send (budget.go)

	reg *metrics.Registry
	met *msgrMetrics
}

// New creates a messenger (Ceph's Messenger::create). It does nothing on
// the network until Bind or Start.
func New(cfg Config) (*Messenger, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if c.Nonce == 0 && !c.ZeroNonce {
		var b [4]byte
		_, _ = crand.Read(b[:])
		c.Nonce = binary.LittleEndian.Uint32(b[:]) | 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Messenger{
		cfg:           c,
		log:           c.Logger.With("entity", c.Name.String()),
		ctx:           ctx,
		cancel:        cancel,
		defaultPolicy: LossyClient(),
		policies:      make(map[msg.EntityType]Policy),
		conns:         make(map[*Conn]struct{}),
		outgoing:      make(map[string]*Conn),
		sessions:      make(map[string]*Conn),
		stoppedCh:     make(chan struct{}),
		dq:            NewDispatchQueue[dispatchItem](c.DispatchQueueLen),
		dispatch:      NewThrottle("dispatch-bytes", c.DispatchThrottleBytes),
		hs:            newHSGate(c.MaxHandshakes, c.HandshakeIdleEvict, c.Clock),
		budget:        sendBudget{limit: c.SendBudget},
	}
	m.reg = c.Metrics
	if m.reg == nil {
		m.reg = metrics.NewRegistry()
	}
	if !c.NoMetrics {
		m.met = newMsgrMetrics(m.reg, m)
	}
	m.globalID.Store(4096)
	empty := []Dispatcher{}
	m.dispatchers.Store(&empty)
	return m, nil
}

// Metrics returns the registry holding the messenger's metrics
// (Config.Metrics, or one of its own); see msgrMetrics for the names.
func (m *Messenger) Metrics() *metrics.Registry { return m.reg }

// Name returns this entity's name.
func (m *Messenger) Name() msg.EntityName { return m.cfg.Name }

// Nonce returns the messenger's nonce.
func (m *Messenger) Nonce() uint32 { return m.cfg.Nonce }

// SetDefaultPolicy sets the policy for peer types without their own.
func (m *Messenger) SetDefaultPolicy(p Policy) {
	m.mu.Lock()
	m.defaultPolicy = p
	m.mu.Unlock()
}

// SetPolicy sets the policy for one peer type.
func (m *Messenger) SetPolicy(t msg.EntityType, p Policy) {
	m.mu.Lock()
	m.policies[t] = p
	m.mu.Unlock()
}

// Policy returns the policy that applies to peers of type t.
func (m *Messenger) Policy(t msg.EntityType) Policy {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.policyLocked(t)
}

func (m *Messenger) policyLocked(t msg.EntityType) Policy {
	if p, ok := m.policies[t]; ok {
		return p
	}
	return m.defaultPolicy
}

// AddDispatcherHead puts d first in the dispatcher chain.
func (m *Messenger) AddDispatcherHead(d Dispatcher) { m.addDispatcher(d, true) }

// AddDispatcherTail puts d last in the dispatcher chain.
func (m *Messenger) AddDispatcherTail(d Dispatcher) { m.addDispatcher(d, false) }

func (m *Messenger) addDispatcher(d Dispatcher, head bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.dispatchers.Load()
	n := make([]Dispatcher, 0, len(old)+1)
	if head {
		n = append(n, d)
		n = append(n, old...)
	} else {
		n = append(n, old...)
		n = append(n, d)
	}
	m.dispatchers.Store(&n)
	var ps []DataPlacer
	for _, d := range n {
		if p, ok := d.(DataPlacer); ok {
			ps = append(ps, p)
		}
	}
	if ps != nil {
		m.placers.Store(&ps)
	}
}

// Bind listens on addr ("v2:127.0.0.1:3300/0", "tcp://127.0.0.1:0",
// "inproc://name", ...). It may be called more than once, before Start.
// Port 0 picks a free port; Addrs reports what was bound.
func (m *Messenger) Bind(addr string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return ErrShutdown
	}
	if m.started {
		return ErrAlreadyStarted
	}
	l, err := m.cfg.Transports.Listen(m.ctx, addr)
	if err != nil {
		return fmt.Errorf("msgr: bind %s: %w", addr, err)
	}
	ea := m.entityAddr(l.Addr())
	if isV1Addr(addr) {
		l, ea.Type = v1Listener{l}, msg.AddrLegacy // its sockets speak msgr1 (v1.go)
	}
	m.listeners = append(m.listeners, l)
	m.myAddrs = append(m.myAddrs, ea)
	return nil
}

// entityAddr turns a transport address into the msgr2 address this
// messenger advertises. Non-IP transports advertise an empty address.
func (m *Messenger) entityAddr(a transport.Addr) msg.EntityAddr {
	ea := msg.EntityAddr{Type: msg.AddrMsgr2, Nonce: m.cfg.Nonce}
	if ap, err := netip.ParseAddrPort(a.Host); err == nil {
		ea.IP = ap
	}
	return ea
}

// Addrs returns the addresses the messenger listens on.
func (m *Messenger) Addrs() msg.AddrVec {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append(msg.AddrVec(nil), m.myAddrs...)
}

// ListenAddrs returns the listeners' addresses as transport URIs
// ("tcp://127.0.0.1:41234"), which Connect accepts.
func (m *Messenger) ListenAddrs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, l := range m.listeners {
		out = append(out, l.Addr().String())
	}
	return out
}

// Start starts accepting on the bound addresses, the dispatch goroutine
// and the keepalive timer.
func (m *Messenger) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return ErrShutdown
	}
	if m.started {
		return ErrAlreadyStarted
	}
	m.started = true
	for _, l := range m.listeners {
		m.wg.Add(1)
		go m.acceptLoop(l)
	}
	m.wg.Add(2)
	go m.dispatchLoop()
	go m.timerLoop()
	return nil
}

// Config returns the configuration the messenger runs with, defaults
// filled in.
func (m *Messenger) Config() Config { return m.cfg }

// Shutdown closes every connection and listener, stops the goroutines and
// waits for them. Queued messages are dropped; no reset events are
// delivered. It is idempotent.
func (m *Messenger) Shutdown() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		<-m.stoppedCh
		return
	}
	m.stopped = true
	ls := m.listeners
	conns := make([]*Conn, 0, len(m.conns))
	for c := range m.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()

	m.cancel()
	for _, l := range ls {
		_ = l.Close()
	}
	for _, c := range conns {
		c.close(ErrShutdown, false)
	}
	m.dq.Close()
	m.wg.Wait()
	close(m.stoppedCh)
}

// Wait blocks until Shutdown has finished (Ceph's Messenger::wait).
func (m *Messenger) Wait() { <-m.stoppedCh }

// Connect returns the connection to addr, creating it if there is none
// (Ceph's get_connection). It does not wait: the connection is set up in
// the background, and messages sent meanwhile are queued. Use Conn.Ready
// to wait for the handshake. An address that does not parse, or whose
// scheme has no transport in Config.Transports, fails here with an
// error matching transport.ErrBadAddr or transport.ErrUnknownScheme.
func (m *Messenger) Connect(addr string) (*Conn, error) { return m.connect(addr, 0) }

// connect is Connect; a new connection to a peer of a known type (peer
// not 0) gets that type and its policy before its goroutine starts, so
// the handshake (and Config.Auth.ClientFor) sees them.
func (m *Messenger) connect(addr string, peer msg.EntityType) (*Conn, error) {
	ta, err := transport.ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	key := ta.String()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil, ErrShutdown
	}
	if !m.started {
		return nil, ErrNotStarted
	}
	if c, ok := m.outgoing[key]; ok && !c.isClosed() {
		return c, nil
	}
	if ea, err := msg.ParseEntityAddr(addr); err == nil && !ea.IsZero() {
		// A session the peer opened to us serves as well (Ceph's
		// get_connection looks up incoming connections too).
		if c := m.sessions[ea.String()]; c != nil && !c.isClosed() && !c.Policy().Lossy {
			return c, nil
		}
	}
	if ta.Scheme == "tcp" && ta.Nonce == 0 {
		// An address without a nonce (a listen URI, "tcp://IP:PORT")
		// names whichever instance listens there: a lossless session
		// with it, the peer's own included, serves, rather than a second
		// connection that the peer would take for a restart of ours.
		if c := m.sessionAtLocked("v2:" + ta.Host + "/"); c != nil {
			return c, nil
		}
	}
	if _, err := m.cfg.Transports.LookupAddr(ta); err != nil {
		return nil, err // a new connection that no retry could set up
	}
	// The peer's type is unknown until HELLO; the default policy applies
	// until then (Ceph too picks the policy from the expected peer type).
	c := m.newConn(true, m.defaultPolicy)
	if peer != 0 {
		c.policy = m.policyLocked(peer)
		c.peerName.Type = peer
	}
	c.target = ta
	c.targetKey = key
	m.outgoing[key] = c
	if ea, err := msg.ParseEntityAddr(addr); err == nil && !ea.IsZero() && ta.Scheme == "tcp" && ea.Nonce == ta.Nonce {
		// Known in advance under the peer's address, so that a connection
		// race with the same peer finds this session.
		c.targetEA = &ea
		if k := ea.String(); m.sessions[k] == nil {
			m.sessions[k] = c
			c.regKey = k
		}
	}
	m.wg.Add(1)
	go c.runOutgoing()
	return c, nil
}

// sessionAtLocked returns the one lossless session, not closed, whose
// peer address starts with prefix ("v2:IP:PORT/", any nonce), preferring
// an open one when the peer's earlier incarnation left another; nil if
// there is none. Called with m.mu held.
func (m *Messenger) sessionAtLocked(prefix string) *Conn {
	var found *Conn
	for k, c := range m.sessions {
		if !strings.HasPrefix(k, prefix) || c.isClosed() || c.Policy().Lossy {
			continue
		}
		if found == nil || c.State() == "open" {
			found = c
		}
	}
	return found
}

// registerOutgoingSession files an outgoing connection under the address
// the peer advertised in its SERVER_IDENT once the handshake is done.
func (m *Messenger) registerOutgoingSession(c *Conn) {
	k := m.sessionKey(c.PeerAddrs())
	if k == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.regKey != "" && c.regKey != k && m.sessions[c.regKey] == c {
		delete(m.sessions, c.regKey)
	}
	if ex := m.sessions[k]; ex == nil || ex == c || ex.isClosed() {
		m.sessions[k] = c
		c.regKey = k
	}
}

// globalSeqAbove returns a global sequence number above both seq and any
// handed out before (Ceph's get_global_seq(old)).
func (m *Messenger) globalSeqAbove(seq uint64) uint64 {
	for {
		cur := m.globalSeq.Load()
		next := max(cur, seq) + 1
		if m.globalSeq.CompareAndSwap(cur, next) {
			return next
		}
	}
}

// ConnectType is Connect with the expected peer type, which selects the
// policy (Ceph's get_connection with an entity_inst).
func (m *Messenger) ConnectType(addr string, peer msg.EntityType) (*Conn, error) {
	c, err := m.connect(addr, peer)
	if err != nil {
		return nil, err
	}
	p := m.Policy(peer) // before c.mu: the lock order is m.mu, then c.mu
	c.mu.Lock()
	if c.state == stateConnecting && c.peerName.Type == 0 && !c.everReady {
		c.policy = p
		c.peerName.Type = peer
	}
	c.mu.Unlock()
	return c, nil
}

// MarkDownAll closes every connection without reset events.
func (m *Messenger) MarkDownAll() {
	m.mu.Lock()
	conns := make([]*Conn, 0, len(m.conns))
	for c := range m.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()
	for _, c := range conns {
		c.MarkDown()
	}
}

// Conns returns the messenger's current connections.
func (m *Messenger) Conns() []*Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Conn, 0, len(m.conns))
	for c := range m.conns {
		out = append(out, c)
	}
	return out
}

func (m *Messenger) newConn(outgoing bool, p Policy) *Conn {
	c := &Conn{
		m:        m,
		id:       m.nextConnID.Add(1),
		outgoing: outgoing,
		policy:   p,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		state:    stateConnecting,
	}
	c.ctx = connCtx{c}
	c.outq.b = &m.budget
	c.lastRecv.Store(m.cfg.Clock.Now().UnixNano())
	m.conns[c] = struct{}{}
	return c
}

func (m *Messenger) removeConn(c *Conn) {
	m.mu.Lock()
	delete(m.conns, c)
	if c.targetKey != "" && m.outgoing[c.targetKey] == c {
		delete(m.outgoing, c.targetKey)
	}
	if c.regKey != "" && m.sessions[c.regKey] == c {
		delete(m.sessions, c.regKey)
	}
	m.mu.Unlock()
}

func (m *Messenger) acceptLoop(l transport.Listener) {
	defer m.wg.Done()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if m.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || !errors.Is(err, net.ErrClosed) {
				// Temporary failure (EMFILE, ...): back off and retry.
				delay = min(max(delay*2, 5*time.Millisecond), time.Second)
				m.log.Warn("accept failed", "err", err, "retry_in", delay)
				select {
				case <-time.After(delay):
					continue
				case <-m.ctx.Done():
					return
				}
			}
			return
		}
		delay = 0
		m.mu.Lock()
		if m.stopped {
			m.mu.Unlock()
			_ = nc.Close()
			return
		}
		m.wg.Add(1)
		m.mu.Unlock()
		if _, v1 := l.(v1Listener); v1 {
			go m.serveIncomingV1(nc)
			continue
		}
		go m.serveIncoming(nc)
	}
}

type itemKind uint8

const (
	itemMessage itemKind = iota
	itemConnect
	itemAccept
	itemReset
	itemRemoteReset
	itemRefused
)

type dispatchItem struct {
	kind  itemKind
	c     *Conn
	m     *msg.Message
	pol   *Policy // whose throttles the budget came from
	bytes int64   // throttle budget to return after dispatch
}

func (m *Messenger) queueEvent(kind itemKind, c *Conn) {
	m.dq.EnqueueFront(c.id, uint16(msg.PrioHighest), dispatchItem{kind: kind, c: c})
}

func (m *Messenger) dispatchLoop() {
	defer m.wg.Done()
	for {
		it, err := m.dq.Dequeue(m.ctx)
		if err != nil {
			// Return the budget of whatever is left so nothing stays held.
			for {
				it, ok := m.dq.TryDequeue()
				if !ok {
					return
				}
				m.release(it)
			}
		}
		m.deliver(it)
	}
}

func (m *Messenger) deliver(it dispatchItem) {
	ds := *m.dispatchers.Load()
	switch it.kind {
	case itemMessage:
		if it.c != nil && it.c.faulted.Load() {
			it.m.Done() // its peer broke the protocol (Conn.Fault)
			m.release(it)
			return
		}
		it.m.DispatchStamp = m.cfg.Clock.Now()
		handled := false
		for _, d := range ds {
			if d.Dispatch(it.m) {
				handled = true
				break
			}
		}
		if !handled {
			m.log.Debug("message not handled by any dispatcher", "type", it.m.Header.Type, "from", it.m.Header.Src.String())
		}
		m.release(it)
	case itemConnect:
		notify(ds, func(h ConnectHandler) { h.HandleConnect(it.c) })
	case itemAccept:
		notify(ds, func(h AcceptHandler) { h.HandleAccept(it.c) })
	case itemReset:
		notify(ds, func(h ResetHandler) { h.HandleReset(it.c) })
	case itemRemoteReset:
		notify(ds, func(h RemoteResetHandler) { h.HandleRemoteReset(it.c) })
	case itemRefused:
		notify(ds, func(h RefusedHandler) { h.HandleRefused(it.c) })
	}
}

// notify calls f on every dispatcher that implements the event interface H.
func notify[H any](ds []Dispatcher, f func(H)) {
	for _, d := range ds {
		if h, ok := d.(H); ok {
			f(h)
		}
	}
}

// release returns a dispatched message's throttle budget.
func (m *Messenger) release(it dispatchItem) {
	if it.kind != itemMessage {
		return
	}
	var h *connHolds
	if it.c != nil {
		h = &it.c.holds
	}
	h.put(m, it.pol, it.bytes)
}

// timerLoop sends keepalives and faults silent connections.
func (m *Messenger) timerLoop() {
	defer m.wg.Done()
	iv, to := m.cfg.KeepaliveInterval, m.cfg.KeepaliveTimeout
	tick := time.Second
	if iv > 0 {
		tick = min(tick, iv/2)
	}
	if to > 0 {
		tick = min(tick, to/4)
	}
	tick = max(tick, time.Millisecond)
	t := m.cfg.Clock.NewTimer(tick)
	defer t.Stop()
	var conns []*Conn // reused from tick to tick
	for {
		select {
		case <-m.ctx.Done():
			return
		case now := <-t.C():
			m.mu.Lock()
			for c := range m.conns {
				conns = append(conns, c)
			}
			m.mu.Unlock()
			for _, c := range conns {
				c.tick(now, iv, to)
			}
			clear(conns) // holds no closed connection until the next tick
			conns = conns[:0]
			t.Reset(tick)
		}
	}
}
