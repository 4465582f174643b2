// Package inproc is an in-process network for fast tests and simulations.
//
// A Network is a transport with scheme "inproc": listeners have names
// ("inproc://osd.1"), dials connect to a listener by name, and connections
// are byte streams that behave like TCP for the messenger: bounded
// per-direction buffers (a Write blocks while the peer's buffer is full,
// unlike net.Pipe), deadlines that fail with net.Error timeouts, io.EOF
// after the peer's Close once its bytes are drained, and every byte
// delivered once, in order, unless the connection is reset.
//
// Faults are injected on the Network: SetDelay delays delivery, Partition
// cuts two names apart (dials fail; connections between them stall and
// then reset) until Heal, and Reset resets every connection of a name.
// A partition applies to connections whose two ends carry the two names:
// a listener's name on the accepting side, and on the dialing side the
// name of the Node that dialed. Use Network.Node(name) as the transport of
// a simulated node so that its dials carry its name.
//
// The package starts no goroutines of its own; delays and timeouts use
// timers.
package inproc

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferrymsg/ferry/transport"
)

// DefaultBufferSize is the default number of bytes a connection buffers in
// each direction before Write blocks.
const DefaultBufferSize = 256 << 10

// backlog is how many dialed connections a listener queues before Dial
// waits for Accept.
const backlog = 128

// scheme is the transport's name and address scheme.
const scheme = "inproc"

// Network is an in-process network. The zero value is not usable; call
// NewNetwork. All methods are safe for concurrent use.
type Network struct {
	delay atomic.Int64 // nanoseconds added to every write

	mu          sync.Mutex
	listeners   map[string]*listener
	links       map[*link]struct{} // connections not yet closed at both ends or reset
	parts       map[pair]*partition
	seq         uint64 // for generated names
	bufSize     int
	partTimeout time.Duration
}

// pair is an unordered pair of names, a <= b.
type pair struct{ a, b string }

func pairOf(a, b string) pair {
	if b < a {
		a, b = b, a
	}
	return pair{a, b}
}

type partition struct {
	timer *time.Timer // resets the stalled connections; nil if none
}

// link is one connection: its two endpoints and the names of their sides.
type link struct {
	names   pair // the dialer's and the listener's names, ordered
	ends    [2]*endpoint
	stalled bool // guarded by Network.mu
	closed  int  // endpoints closed; guarded by Network.mu
}

// NewNetwork returns an empty network with DefaultBufferSize buffers, no
// delay and no partitions.
func NewNetwork() *Network {
	return &Network{
		listeners: make(map[string]*listener),
		links:     make(map[*link]struct{}),
		parts:     make(map[pair]*partition),
		bufSize:   DefaultBufferSize,
	}
}

// Name returns "inproc".
func (n *Network) Name() string { return scheme }

// SetBufferSize sets the bytes each direction of a new connection buffers
// before Write blocks; 0 or less restores DefaultBufferSize. Existing
// connections keep their size.
func (n *Network) SetBufferSize(bytes int) {
	if bytes <= 0 {
		bytes = DefaultBufferSize
	}
	n.mu.Lock()
	n.bufSize = bytes
	n.mu.Unlock()
}

// SetDelay makes every later Write's bytes readable d after the write
// (0 or less: at once). Order is kept: bytes never overtake earlier ones.
// Memory stays bounded by the buffer size, which also bounds how much is
// in flight.
func (n *Network) SetDelay(d time.Duration) { n.delay.Store(int64(max(d, 0))) }

func (n *Network) delayNow() time.Duration { return time.Duration(n.delay.Load()) }

// SetPartitionTimeout sets how long connections cut by a later Partition
// stall before the network resets them. Zero (the default) resets them at
// once; a positive d lets them stall for d, and a Heal within d resumes
// them with no byte lost; a negative d stalls them until Heal, never
// resetting them (the messenger's keepalive has to notice).
func (n *Network) SetPartitionTimeout(d time.Duration) {
	n.mu.Lock()
	n.partTimeout = d
	n.mu.Unlock()
}

// nameOf accepts a bare name or an "inproc://name" address.
func nameOf(s string) string { return strings.TrimPrefix(s, scheme+"://") }

// Partition cuts names a and b apart until Heal: dials between them fail
// with transport.ErrUnreachable, and established connections between them
// stop delivering bytes and, after the partition timeout (see
// SetPartitionTimeout), are reset. Names may be given bare or as
// "inproc://name". Partitioning a pair twice, or a name from itself, does
// nothing.
func (n *Network) Partition(a, b string) {
	a, b = nameOf(a), nameOf(b)
	if a == b {
		return
	}
	key := pairOf(a, b)
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.parts[key]; ok {
		return
	}
	p := &partition{}
	n.parts[key] = p
	switch d := n.partTimeout; {
	case d == 0:
		n.resetLocked(func(l *link) bool { return l.names == key })
	default:
		for l := range n.links {
			if l.names == key {
				l.setStalled(true)
			}
		}
		if d > 0 {
			p.timer = time.AfterFunc(d, func() { n.expire(key, p) })
		}
	}
}

// expire resets the connections of a partition that outlived its timeout.
func (n *Network) expire(key pair, p *partition) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.parts[key] != p {
		return // healed meanwhile
	}
	n.resetLocked(func(l *link) bool { return l.names == key })
}

// Heal removes every partition. Stalled connections resume and deliver
// everything written to them.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for key, p := range n.parts {
		if p.timer != nil {
			p.timer.Stop()
		}
		delete(n.parts, key)
	}
	for l := range n.links {
		if l.stalled {
			l.setStalled(false)
		}
	}
}

// Reset resets every connection with an end named name (bare or
// "inproc://name"): pending data is dropped and both ends' reads and
// writes fail with a connection-reset error (syscall.ECONNRESET). The
// listener, if any, stays open. Reset returns the number of connections
// reset.
func (n *Network) Reset(name string) int {
	name = nameOf(name)
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.resetLocked(func(l *link) bool { return l.names.a == name || l.names.b == name })
}

func (n *Network) resetLocked(match func(*link) bool) int {
	k := 0
	for l := range n.links {
		if match(l) {
			l.ends[0].out.reset(syscall.ECONNRESET)
			l.ends[1].out.reset(syscall.ECONNRESET)
			delete(n.links, l)
			k++
		}
	}
	return k
}

// NumConns returns the number of connections that are neither reset nor
// closed at both ends. Tests use it to check that everything was closed.
func (n *Network) NumConns() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.links)
}

func (l *link) setStalled(s bool) {
	l.stalled = s
	l.ends[0].out.setStalled(s)
	l.ends[1].out.setStalled(s)
}

// endClosed records that one end of l closed.
func (n *Network) endClosed(l *link) {
	n.mu.Lock()
	l.closed++
	if l.closed == 2 {
		delete(n.links, l)
	}
	n.mu.Unlock()
}

// uniqueLocked returns prefix followed by a number no listener uses.
func (n *Network) uniqueLocked(prefix string) string {
	for {
		n.seq++
		name := prefix + strconv.FormatUint(n.seq, 10)
		if _, ok := n.listeners[name]; !ok {
			return name
		}
	}
}

func checkScheme(a transport.Addr) error {
	if a.Scheme != scheme {
		return &transport.AddrError{Input: a.String(), Reason: "not an inproc address", Err: transport.ErrUnknownScheme}
	}
	return nil
}

// Listen listens on the name a.Host. An empty name gets a generated one
// ("auto:N"); a name ending in ":0" gets a number in place of the 0
// ("osd:0" → "osd:N"); the Listener's Addr reports it. Errors match
// transport.ErrUnknownScheme or transport.ErrAddrInUse, or are ctx's.
func (n *Network) Listen(ctx context.Context, a transport.Addr) (transport.Listener, error) {
	if err := checkScheme(a); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := a.Host
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case name == "":
		name = n.uniqueLocked("auto:")
	case strings.HasSuffix(name, ":0"):
		name = n.uniqueLocked(name[:len(name)-1])
	default:
		if _, ok := n.listeners[name]; ok {
			return nil, &net.OpError{Op: "listen", Net: scheme, Addr: a, Err: transport.ErrAddrInUse}
		}
	}
	l := &listener{net: n, name: name, addr: transport.Addr{Scheme: scheme, Host: name}}
	n.listeners[name] = l
	return l, nil
}

// Dial connects to the listener named a.Host. The dialing end's name is a
// generated "client:N", which no partition names; dial through a Node to
// give it a name. See Node.Dial for errors.
func (n *Network) Dial(ctx context.Context, a transport.Addr) (transport.Conn, error) {
	return n.dial(ctx, "", a)
}

// Node returns the network as seen by the simulated node name: its Dials
// carry that name (for Partition and Reset) and report it as LocalAddr.
// Listen is the Network's.
func (n *Network) Node(name string) *Node { return &Node{net: n, name: nameOf(name)} }

// Node is a Network as seen by one named node; it is a transport.Transport
// with scheme "inproc". It is safe for concurrent use.
type Node struct {
	net  *Network
	name string
}

// Name returns "inproc".
func (*Node) Name() string { return scheme }

// Listen is Network.Listen.
func (v *Node) Listen(ctx context.Context, a transport.Addr) (transport.Listener, error) {
	return v.net.Listen(ctx, a)
}

// Dial connects to the listener named a.Host, from the node's name. The
// connection is established once queued for the listener's Accept; Dial
// waits, honouring ctx, only while the listener's backlog is full.
// Errors are *net.OpError values matching transport.ErrRefused (nothing
// listens, or the listener closed), transport.ErrUnreachable (a partition
// separates the names), transport.ErrUnknownScheme, or ctx's error.
func (v *Node) Dial(ctx context.Context, a transport.Addr) (transport.Conn, error) {
	return v.net.dial(ctx, v.name, a)
}

func (n *Network) dial(ctx context.Context, from string, a transport.Addr) (transport.Conn, error) {
	if err := checkScheme(a); err != nil {
		return nil, err
	}
	fail := func(err error) (transport.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: scheme, Addr: a, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	to := a.Host
	n.mu.Lock()
	ln := n.listeners[to]
	if ln == nil {
		n.mu.Unlock()
		return fail(transport.ErrRefused)
	}
	if _, cut := n.parts[pairOf(from, to)]; cut && from != "" {
		n.mu.Unlock()
		return fail(transport.ErrUnreachable)
	}
	if from == "" {
		n.seq++
		from = "client:" + strconv.FormatUint(n.seq, 10)
	}
	lk := n.newLinkLocked(from, ln.addr)
	n.mu.Unlock()

	dialer, acceptor := lk.ends[0], lk.ends[1]
	if err := ln.enqueue(ctx, acceptor); err != nil {
		n.mu.Lock()
		delete(n.links, lk)
		n.mu.Unlock()
		dialer.out.reset(syscall.ECONNRESET)
		acceptor.out.reset(syscall.ECONNRESET)
		return fail(err)
	}
	return dialer, nil
}

// newLinkLocked creates and registers a connection from the name from to
// the listener at to.
func (n *Network) newLinkLocked(from string, to transport.Addr) *link {
	ab, ba := newPipe(n, n.bufSize), newPipe(n, n.bufSize)
	fromAddr := transport.Addr{Scheme: scheme, Host: from}
	lk := &link{names: pairOf(from, to.Host)}
	lk.ends[0] = &endpoint{net: n, link: lk, in: ba, out: ab, local: fromAddr, remote: to}
	lk.ends[1] = &endpoint{net: n, link: lk, in: ab, out: ba, local: to, remote: fromAddr}
	n.links[lk] = struct{}{}
	return lk
}

// listener is a named listener on a Network.
type listener struct {
	net  *Network
	name string
	addr transport.Addr

	mu      sync.Mutex
	changed chan struct{} // closed on every change; nil until waited on
	queue   []*endpoint   // dialed, not yet accepted
	closed  bool
}

func (l *listener) broadcastLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

func (l *listener) waitChanLocked() chan struct{} {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// enqueue queues e for Accept, waiting while the backlog is full.
func (l *listener) enqueue(ctx context.Context, e *endpoint) error {
	l.mu.Lock()
	for {
		if l.closed {
			l.mu.Unlock()
			return transport.ErrRefused
		}
		if len(l.queue) < backlog {
			l.queue = append(l.queue, e)
			l.broadcastLocked()
			l.mu.Unlock()
			return nil
		}
		ch := l.waitChanLocked()
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		l.mu.Lock()
	}
}

// Accept waits for the next connection. After Close it returns a
// *net.OpError matching transport.ErrClosed.
func (l *listener) Accept() (transport.Conn, error) {
	l.mu.Lock()
	for {
		if l.closed {
			l.mu.Unlock()
			return nil, &net.OpError{Op: "accept", Net: scheme, Addr: l.addr, Err: transport.ErrClosed}
		}
		if len(l.queue) > 0 {
			e := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			l.broadcastLocked()
			l.mu.Unlock()
			return e, nil
		}
		ch := l.waitChanLocked()
		l.mu.Unlock()
		<-ch
		l.mu.Lock()
	}
}

// Close frees the name and unblocks Accept. Connections dialed but not yet
// accepted are reset; accepted ones stay open. A second Close returns an
// error matching transport.ErrClosed.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return &net.OpError{Op: "close", Net: scheme, Addr: l.addr, Err: transport.ErrClosed}
	}
	l.closed = true
	pending := l.queue
	l.queue = nil
	l.broadcastLocked()
	l.mu.Unlock()

	n := l.net
	n.mu.Lock()
	if n.listeners[l.name] == l {
		delete(n.listeners, l.name)
	}
	for _, e := range pending {
		delete(n.links, e.link)
		e.link.ends[0].out.reset(syscall.ECONNRESET)
		e.link.ends[1].out.reset(syscall.ECONNRESET)
	}
	n.mu.Unlock()
	return nil
}

// Addr returns the listener's address, "inproc://name".
func (l *listener) Addr() transport.Addr { return l.addr }

// endpoint is one end of a connection; it implements net.Conn.
type endpoint struct {
	net           *Network
	link          *link
	in, out       *pipe // in is read, out is written
	local, remote transport.Addr
	closed        atomic.Bool
}

func (e *endpoint) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: scheme, Source: e.local, Addr: e.remote, Err: err}
}

// Read reads bytes the peer wrote, waiting for some to arrive. It returns
// io.EOF after the peer closed and its bytes were read, an error matching
// os.ErrDeadlineExceeded (a net.Error timeout) at the read deadline,
// net.ErrClosed after Close, and syscall.ECONNRESET after a reset.
func (e *endpoint) Read(b []byte) (int, error) { return e.in.read(e, b) }

// Write writes all of b, waiting while the peer's buffer is full. It
// fails with an error matching os.ErrDeadlineExceeded at the write
// deadline, net.ErrClosed after Close or CloseWrite, syscall.EPIPE once
// the peer closed, and syscall.ECONNRESET after a reset; n counts the
// bytes written before.
func (e *endpoint) Write(b []byte) (int, error) { return e.out.write(e, b) }

// Close closes both directions: the peer reads the bytes already written,
// then io.EOF, and its writes fail. Pending Reads and Writes return. A
// second Close returns an error matching net.ErrClosed.
func (e *endpoint) Close() error {
	if e.closed.Swap(true) {
		return e.opError("close", net.ErrClosed)
	}
	e.in.closeRead()
	e.out.closeWrite()
	e.net.endClosed(e.link)
	return nil
}

// CloseWrite shuts down the writing direction only: the peer reads
// io.EOF after the bytes already written, and this end can still read.
func (e *endpoint) CloseWrite() error {
	if e.closed.Load() {
		return e.opError("close", net.ErrClosed)
	}
	e.out.closeWrite()
	return nil
}

// LocalAddr returns this end's address: the listener's for an accepted
// connection, the dialing node's (or a generated "client:N") otherwise.
func (e *endpoint) LocalAddr() net.Addr { return e.local }

// RemoteAddr returns the peer's address.
func (e *endpoint) RemoteAddr() net.Addr { return e.remote }

// SetDeadline sets both the read and the write deadline.
func (e *endpoint) SetDeadline(t time.Time) error {
	if e.closed.Load() {
		return e.opError("set", net.ErrClosed)
	}
	e.in.setReadDeadline(t)
	e.out.setWriteDeadline(t)
	return nil
}

// SetReadDeadline sets the time at which pending and future Reads fail
// with a timeout; the zero time means none.
func (e *endpoint) SetReadDeadline(t time.Time) error {
	if e.closed.Load() {
		return e.opError("set", net.ErrClosed)
	}
	e.in.setReadDeadline(t)
	return nil
}

// SetWriteDeadline sets the time at which pending and future Writes fail
// with a timeout; the zero time means none.
func (e *endpoint) SetWriteDeadline(t time.Time) error {
	if e.closed.Load() {
		return e.opError("set", net.ErrClosed)
	}
	e.out.setWriteDeadline(t)
	return nil
}
