package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"
)

// TCPOptions configures the TCP transport. The zero value gives the
// defaults.
type TCPOptions struct {
	// DisableNoDelay turns Nagle's algorithm on. By default TCP_NODELAY is
	// set: the messenger coalesces small frames itself and must not wait
	// for acks.
	DisableNoDelay bool
	// KeepAlive is the TCP keep-alive probe period. Zero means the net
	// package's default (enabled, 15 s); a negative value turns
	// keep-alives off.
	KeepAlive time.Duration
	// ReadBuffer and WriteBuffer are the socket buffer sizes in bytes
	// (SO_RCVBUF, SO_SNDBUF). Zero keeps the operating system's default,
	// which on Linux autotunes. They are set after the connection is
	// established, best effort.
	ReadBuffer, WriteBuffer int
	// Congestion is the TCP congestion control of every connection
	// (TCP_CONGESTION, Linux only), e.g. "cubic" or "bbr"; empty keeps
	// the system default (net.ipv4.tcp_congestion_control). Pacing
	// algorithms such as BBR cost bandwidth and CPU on loopback and
	// same-rack links (BENCHMARKS.md). Dial and Listen fail with
	// ErrBadConfig for an algorithm the kernel does not offer.
	Congestion string
	// LocalAddr is the source IP address of dialed connections (as
	// Ceph's ms_bind_before_connect binds to the public address); the
	// zero Addr lets the kernel choose.
	LocalAddr netip.Addr
}

func (o TCPOptions) validate() error {
	if o.ReadBuffer < 0 || o.WriteBuffer < 0 {
		return fmt.Errorf("%w: negative tcp socket buffer size", ErrBadConfig)
	}
	return nil
}

// TCP is the "tcp" transport. Its Conns are the *net.TCPConn values the
// net package returns, unwrapped, so net.Buffers writes use writev.
// TCP is safe for concurrent use.
type TCP struct {
	opts TCPOptions
}

// NewTCP returns a TCP transport with the given options.
func NewTCP(opts TCPOptions) *TCP { return &TCP{opts: opts} }

// Name returns "tcp".
func (*TCP) Name() string { return "tcp" }

// Listen listens on a.Host; port 0 picks a free port, which the
// Listener's Addr reports. Errors match ErrBadConfig, ErrUnknownScheme
// (a.Scheme is not "tcp"), ErrAddrInUse, or are the net package's.
func (t *TCP) Listen(ctx context.Context, a Addr) (Listener, error) {
	if err := t.opts.validate(); err != nil {
		return nil, err
	}
	if err := checkScheme(a, "tcp"); err != nil {
		return nil, err
	}
	lc := net.ListenConfig{KeepAlive: t.opts.KeepAlive, Control: t.control}
	l, err := lc.Listen(ctx, "tcp", a.Host)
	if err != nil {
		if errors.Is(err, ErrBadConfig) || errors.Is(err, ErrUnsupported) {
			return nil, err
		}
		return nil, mapListenErr(err)
	}
	bound := Addr{Scheme: "tcp", Host: l.Addr().String(), Nonce: a.Nonce}
	return &socketListener{l: l, addr: bound, setup: t.setup}, nil
}

// Dial connects to a.Host, honouring ctx while connecting. The Conn is a
// *net.TCPConn. Errors match ErrBadConfig, ErrUnknownScheme, ErrRefused
// (nothing listens), ctx's error, or are the net package's.
func (t *TCP) Dial(ctx context.Context, a Addr) (Conn, error) {
	if err := t.opts.validate(); err != nil {
		return nil, err
	}
	if err := checkScheme(a, "tcp"); err != nil {
		return nil, err
	}
	d := net.Dialer{KeepAlive: t.opts.KeepAlive, Control: t.control}
	if t.opts.LocalAddr.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(t.opts.LocalAddr, 0))
	}
	c, err := d.DialContext(ctx, "tcp", a.Host)
	if err != nil {
		if errors.Is(err, ErrBadConfig) || errors.Is(err, ErrUnsupported) {
			return nil, err
		}
		return nil, mapDialErr(err)
	}
	t.setup(c)
	return c, nil
}

// control sets the congestion control on a socket before it connects or
// listens (nil when none is chosen).
func (t *TCP) control(network, address string, rc syscall.RawConn) error {
	return CongestionControl(t.opts.Congestion)(network, address, rc)
}

// CongestionControl returns a function for net.Dialer.Control and
// net.ListenConfig.Control that sets a socket's TCP congestion control to
// name (TCPOptions.Congestion does this for the TCP transport), for
// sockets of one's own beside ferry's, such as a raw-TCP benchmark floor.
// An empty name changes nothing; an algorithm the kernel lacks fails with
// ErrBadConfig, and any name fails with ErrUnsupported outside Linux.
func CongestionControl(name string) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		if name == "" {
			return nil
		}
		return setCongestion(rc, name)
	}
}

// setup applies the options to a new connection, best effort: an error
// here means the socket is already broken, which its next I/O reports.
func (t *TCP) setup(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	if t.opts.DisableNoDelay {
		_ = tc.SetNoDelay(false)
	}
	if t.opts.ReadBuffer > 0 {
		_ = tc.SetReadBuffer(t.opts.ReadBuffer)
	}
	if t.opts.WriteBuffer > 0 {
		_ = tc.SetWriteBuffer(t.opts.WriteBuffer)
	}
	if t.opts.Congestion != "" {
		// Accepted sockets: the listener's choice is set again, as
		// Linux does not always pass it on.
		if rc, err := tc.SyscallConn(); err == nil {
			_ = setCongestion(rc, t.opts.Congestion)
		}
	}
}

// Unix is the "unix" transport: stream sockets on a filesystem path (or a
// Linux abstract name starting with '@'). Its Conns are *net.UnixConn
// values. Closing a Listener removes its socket file. Unix is safe for
// concurrent use.
type Unix struct{}

// NewUnix returns the Unix-domain socket transport.
func NewUnix() *Unix { return &Unix{} }

// SocketPath returns the socket path of a unix address (its Host): the
// Unix transport is a transport.LocalSocket.
func (*Unix) SocketPath(a Addr) (string, error) {
	if a.Host == "" {
		return "", &AddrError{Input: a.String(), Reason: "missing path", Err: ErrBadAddr}
	}
	return a.Host, nil
}

// Name returns "unix".
func (*Unix) Name() string { return "unix" }

// Listen listens on the socket path a.Host, replacing a stale socket
// file there (see ListenUnix). Errors match ErrUnknownScheme,
// ErrAddrInUse, or are the net package's.
func (*Unix) Listen(ctx context.Context, a Addr) (Listener, error) {
	if err := checkScheme(a, "unix"); err != nil {
		return nil, err
	}
	l, err := ListenUnix(ctx, a.Host)
	if err != nil {
		return nil, err
	}
	return &socketListener{l: l, addr: Addr{Scheme: "unix", Host: a.Host}}, nil
}

// Dial connects to the socket path a.Host. Errors match ErrUnknownScheme,
// ErrRefused (no socket, or nothing listens), ctx's error, or are the net
// package's.
func (*Unix) Dial(ctx context.Context, a Addr) (Conn, error) {
	if err := checkScheme(a, "unix"); err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", a.Host)
	if err != nil {
		return nil, mapDialErr(err)
	}
	return c, nil
}

func checkScheme(a Addr, want string) error {
	if a.Scheme != want {
		return &AddrError{Input: a.String(), Reason: "not a " + want + " address", Err: ErrUnknownScheme}
	}
	return nil
}

// ListenUnix listens on the Unix-domain socket at path. A socket file
// that a process which died left there (one on which nothing accepts:
// a connect is refused) is removed and the listen tried again, so that
// a server restarted after a crash binds its old path; a path another
// listener holds, or that is not a socket, fails with ErrAddrInUse (as
// does an abstract name, "@..."). ListenUnix holds an exclusive
// flock(2) on the directory while it binds, judges and replaces, so
// ferry listeners racing for one path, in this process or others, get
// one winner and ErrAddrInUse for the rest. A process that binds the
// path without that lock (not ferry) between the refused probe and the
// removal still loses its socket file to this one (Ceph's admin socket
// has the same rule), so give each server its own path.
func ListenUnix(ctx context.Context, path string) (net.Listener, error) {
	if !strings.HasPrefix(path, "@") {
		defer lockDir(path)()
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", path)
	if err == nil {
		return l, nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, err
	}
	if strings.HasPrefix(path, "@") {
		return nil, wrap(ErrAddrInUse, err) // an abstract name: no file to judge
	}
	fi, serr := os.Lstat(path)
	if serr != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil, wrap(ErrAddrInUse, fmt.Errorf("%s exists and is not a socket: %w", path, err))
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	c, derr := d.DialContext(dctx, "unix", path)
	cancel()
	if derr == nil {
		_ = c.Close()
		return nil, wrap(ErrAddrInUse, err)
	}
	if !errors.Is(derr, syscall.ECONNREFUSED) {
		return nil, wrap(ErrAddrInUse, err) // busy, or not ours to judge
	}
	if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return nil, wrap(ErrAddrInUse, fmt.Errorf("%w (stale, and not removable: %v)", err, rerr))
	}
	l, err = lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, mapListenErr(err)
	}
	return l, nil
}

func mapListenErr(err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return wrap(ErrAddrInUse, err)
	}
	return err
}

func mapDialErr(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return wrap(ErrRefused, err)
	}
	return err
}

// socketListener adapts a net.Listener. Accept returns the net package's
// connection unwrapped.
type socketListener struct {
	l     net.Listener
	addr  Addr
	setup func(net.Conn) // may be nil
}

// Accept waits for a connection. After Close the error matches ErrClosed
// and net.ErrClosed.
func (l *socketListener) Accept() (Conn, error) {
	c, err := l.l.Accept()
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return nil, wrap(ErrClosed, err)
		}
		return nil, err
	}
	if l.setup != nil {
		l.setup(c)
	}
	return c, nil
}

// Close stops listening.
func (l *socketListener) Close() error {
	err := l.l.Close()
	if errors.Is(err, net.ErrClosed) {
		return wrap(ErrClosed, err)
	}
	return err
}

// Addr returns the bound address.
func (l *socketListener) Addr() Addr { return l.addr }
