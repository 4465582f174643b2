// Package transport turns addresses into connected byte streams.
//
// A Transport is one network plugin (Mercury's na_class_ops in spirit): it
// listens on and dials addresses of one scheme and hands out net.Conn-shaped
// connections, so the messenger runs unchanged over every transport.
// Transports know nothing of Ceph's message formats.
//
// This package holds the address syntax ([ParseAddr]), the [Registry] that
// maps schemes to transports, and the socket transports [TCP] ("tcp") and
// [Unix] ("unix"). [Default] holds TCP only; add others to it or build your
// own Registry:
//
//	reg := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}), inproc.NewNetwork())
//	c, err := reg.Dial(ctx, "v2:127.0.0.1:3300/0")
//
// The in-process network used by tests and simulations lives in
// package transport/inproc; the conformance suite that every transport
// passes lives in package transport/transporttest.
package transport

import (
	"context"
	"errors"
	"net"
	"strconv"
)

// Sentinel errors. Errors returned by this package and by the transports
// in its subpackages match them with errors.Is.
var (
	// ErrBadAddr reports an address that does not parse; it is wrapped in
	// an *AddrError that names the input.
	ErrBadAddr = errors.New("transport: bad address")
	// ErrUnknownScheme reports an address whose scheme (or Ceph type
	// prefix) no transport handles.
	ErrUnknownScheme = errors.New("transport: unknown scheme")
	// ErrDuplicate reports a second transport registered for a scheme.
	ErrDuplicate = errors.New("transport: scheme already registered")
	// ErrClosed reports an operation on a closed listener.
	ErrClosed = errors.New("transport: listener closed")
	// ErrRefused reports a dial to an address where nothing listens.
	ErrRefused = errors.New("transport: connection refused")
	// ErrUnreachable reports a dial that cannot reach its address, such as
	// across a partition of an in-process network.
	ErrUnreachable = errors.New("transport: address unreachable")
	// ErrAddrInUse reports a listen on an address that is already taken.
	ErrAddrInUse = errors.New("transport: address in use")
	// ErrBadConfig reports invalid transport options.
	ErrBadConfig = errors.New("transport: invalid configuration")
	// ErrUnsupported reports an optional capability that a connection
	// does not have, such as PeerPID on a TCP connection.
	ErrUnsupported = errors.New("transport: not supported by this connection")
)

// Conn is a connected, ordered, reliable byte stream. Every transport's
// connections behave like TCP's: Read returns io.EOF after the peer closed
// and its bytes were drained, deadlines produce net.Error timeouts that
// match os.ErrDeadlineExceeded, and a Write call is never interleaved with
// another Write on the same Conn.
type Conn = net.Conn

// PeerProcess is an optional capability of a Conn whose peer is a
// process on the same host: Unix-domain sockets and shm connections have
// it. Callers use the PeerPID function, which also covers the net
// package's *net.UnixConn.
type PeerProcess interface {
	// PeerPID returns the peer's process ID as the kernel reports it
	// (SO_PEERCRED, seen from this process's PID namespace), or an error
	// matching ErrUnsupported when it is not known.
	PeerPID() (int, error)
}

// PeerPID returns the process ID of c's peer when c connects two
// processes on the same host and the kernel vouches for the peer's
// identity: a Conn that implements PeerProcess, or a *net.UnixConn
// (SO_PEERCRED, Linux only). Otherwise, or when the peer lives in a PID
// namespace this process cannot see, the error matches ErrUnsupported.
// A peer in the same process gets this process's ID.
func PeerPID(c Conn) (int, error) {
	switch pc := c.(type) {
	case PeerProcess:
		return pc.PeerPID()
	case *net.UnixConn:
		return unixPeerPID(pc)
	}
	return 0, ErrUnsupported
}

// TryWriter is an optional capability of a Conn that is not a socket but
// can take bytes without waiting (shm): the messenger writes on such a
// connection from the sending goroutine, as it does on sockets with
// non-blocking writes, instead of handing every message to its writer
// goroutine.
type TryWriter interface {
	// TryWriteBuffers writes bufs in order, as much as the connection
	// takes without waiting for its peer (it may poll briefly while the
	// peer makes room), and returns the number of bytes written. An
	// error means the connection failed, as a Write's would.
	TryWriteBuffers(bufs [][]byte) (int, error)
}

// CRCReader is an optional capability of a Conn that copies what it
// reads out of memory it shares with its peer (shm): ReadCRC is Read,
// and it also folds the Castagnoli CRC-32 of the bytes it returns into
// crc as it copies them, in one pass over the data rather than a copy
// and a second pass to checksum it. The CRC is of the bytes placed in b
// (the copy's own loads), so a peer that changes the shared memory while
// it is read cannot make b differ from what was checksummed.
type CRCReader interface {
	// ReadCRC reads into b as Read does and returns the count and
	// crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), b[:n]).
	ReadCRC(b []byte, crc uint32) (n int, newCRC uint32, err error)
}

// CRCWriter is CRCReader's counterpart for writing: WriteCRC writes b
// and folds the Castagnoli CRC-32 of what it wrote into crc in the same
// pass as its copy into the shared memory, so a sender that must
// checksum what it sends (msgr2's data CRC) reads the data once.
type CRCWriter interface {
	// WriteCRC writes b as Write does, or, with try, only as much as
	// the connection takes without waiting (as TryWriter), and returns
	// the count and crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli),
	// b[:n]).
	WriteCRC(b []byte, crc uint32, try bool) (n int, newCRC uint32, err error)
}

// LocalSocket is an optional capability of a Transport whose addresses
// name a Unix socket on this host (unix, shm): SocketPath returns the
// path a listener on a binds, so a caller choosing among a peer's
// addresses can tell whether the peer is on this host (its socket
// exists here).
type LocalSocket interface {
	SocketPath(a Addr) (string, error)
}

// Listener accepts connections for one transport address. Its methods are
// safe for concurrent use.
type Listener interface {
	// Accept waits for the next connection. After Close it returns an
	// error matching ErrClosed.
	Accept() (Conn, error)
	// Close stops listening and unblocks Accept. Connections already
	// accepted stay open.
	Close() error
	// Addr is the bound address, with the port or name that was assigned
	// when the listen address asked for one (port 0, inproc name "").
	Addr() Addr
}

// Transport is one network plugin. Implementations are safe for
// concurrent use.
type Transport interface {
	// Name is the scheme the transport serves, such as "tcp".
	Name() string
	// Listen starts listening on a, whose Scheme must be Name().
	Listen(ctx context.Context, a Addr) (Listener, error)
	// Dial connects to a, whose Scheme must be Name(). It honours ctx's
	// deadline and cancellation while connecting; the returned Conn is
	// independent of ctx.
	Dial(ctx context.Context, a Addr) (Conn, error)
}

// Addr is a parsed transport address. It implements net.Addr, so
// transports may use it for a Conn's LocalAddr and RemoteAddr.
type Addr struct {
	// Scheme names the transport: "tcp", "unix", "shm", "inproc" or the
	// name of another registered transport.
	Scheme string
	// Host is the scheme-specific part: "127.0.0.1:3300" or "[::1]:3300"
	// for tcp, a socket path for unix, a name for shm and inproc.
	Host string
	// Nonce is the "/N" suffix of Ceph's address form ("v2:IP:PORT/N"),
	// 0 otherwise. Only tcp addresses carry it.
	Nonce uint32
}

// String formats a as a URI: "tcp://127.0.0.1:3300", "unix:///run/x.sock",
// "inproc://a". A tcp address with a non-zero Nonce ends in "/N";
// ParseAddr reads every form String produces.
func (a Addr) String() string {
	s := a.Scheme + "://" + a.Host
	if a.Nonce != 0 && a.Scheme == "tcp" {
		s += "/" + strconv.FormatUint(uint64(a.Nonce), 10)
	}
	return s
}

// Network returns a.Scheme; with String it makes Addr a net.Addr.
func (a Addr) Network() string { return a.Scheme }

// IsZero reports whether a is the zero Addr.
func (a Addr) IsZero() bool { return a == Addr{} }

// AddrError describes an address that could not be parsed or used. It
// wraps ErrBadAddr or ErrUnknownScheme.
type AddrError struct {
	Input  string // the address as given
	Reason string // what is wrong with it
	Err    error  // ErrBadAddr or ErrUnknownScheme
}

// Error formats the error with its input.
func (e *AddrError) Error() string {
	msg := e.Err.Error() + " " + strconv.Quote(e.Input)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Unwrap returns the sentinel the error wraps.
func (e *AddrError) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel the error wraps.
func (e *AddrError) Is(target error) bool { return target == e.Err }

// wrapError attaches a sentinel from this package to an error from the
// operating system or the net package, keeping both visible to errors.Is
// and errors.As (so a *net.OpError and its net.Error methods stay
// reachable) and keeping the original message.
type wrapError struct {
	sentinel error
	err      error
}

func (e *wrapError) Error() string   { return e.err.Error() }
func (e *wrapError) Unwrap() []error { return []error{e.sentinel, e.err} }

// Timeout reports whether the wrapped error is a timeout.
func (e *wrapError) Timeout() bool {
	var ne net.Error
	return errors.As(e.err, &ne) && ne.Timeout()
}

// Temporary is deprecated in net.Error; it reports false.
func (e *wrapError) Temporary() bool { return false }

// wrap returns err marked as sentinel: errors.Is(result, sentinel) and
// errors.Is(result, anything err matches) both hold, and the message is
// err's. It returns nil for a nil err.
func wrap(sentinel, err error) error {
	if err == nil {
		return nil
	}
	return &wrapError{sentinel: sentinel, err: err}
}
