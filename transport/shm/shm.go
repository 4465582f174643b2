//go:build linux

// Package shm is the "shm" transport: byte streams between processes on
// one host over shared memory.
//
// A listener is a Unix socket ("shm:///run/ferry/osd.1.sock", or
// "shm://osd.1" for a socket named after osd.1 under os.TempDir). To
// connect, the dialer creates an anonymous shared mapping (memfd_create)
// holding one single-producer/single-consumer byte ring per direction,
// and two eventfds, one to wake each side; it passes the three file
// descriptors to the listener with SCM_RIGHTS, and both sides map the
// memory. Nothing is left in /dev/shm or any filesystem: the mapping lives
// as long as one side keeps it mapped.
//
// Write copies into the outgoing ring and Read copies out of the incoming
// one. A side with nothing to do spins briefly (Options.Spin, and
// longer, up to Options.MaxSpin, when its recent waits were short) and
// then sleeps on its eventfd, read through the Go netpoller; the other
// side writes the eventfd only when the sleeper has said it is about to
// sleep, so a busy stream makes no system calls.
//
// The Unix socket stays open for the life of the connection and carries
// nothing after the handshake. When the peer process dies, even by
// SIGKILL, the kernel closes its end; the connection then fails every
// Read and Write with an error matching ErrPeerLost and
// syscall.ECONNRESET. A peer that closes normally sets a flag in the
// shared header first, so its bytes are drained and then Read returns
// io.EOF.
//
// A Conn knows its peer's process ID as the kernel reports it for the
// Unix socket (PeerPID, transport.PeerProcess), which lets package rpc
// move bulk transfers straight between the two processes' registered
// buffers with process_vm_readv and process_vm_writev.
package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrymsg/ferry/transport"
)

// Sentinel errors of package shm. Errors from this package also match the
// transport package's sentinels where one applies (transport.ErrRefused,
// transport.ErrClosed, transport.ErrAddrInUse, transport.ErrBadConfig).
var (
	// ErrPeerLost reports a connection whose peer went away without
	// closing it, such as a peer process that crashed or was killed.
	// Errors that match it also match syscall.ECONNRESET.
	ErrPeerLost = errors.New("shm: peer lost")
	// ErrHandshake reports a dialer whose connection setup message or
	// shared mapping is malformed. Accept drops such dialers and goes on.
	ErrHandshake = errors.New("shm: bad handshake")
)

const scheme = "shm"

// Ring sizes in bytes.
const (
	// DefaultRingSize is the size of each direction's ring when
	// Options.RingSize is zero: room for a 1 MiB message whole, so a
	// sender writes it inline without waiting for the reader to drain
	// the ring (pages are touched, and so resident, only once used).
	DefaultRingSize = 2 << 20
	// MinRingSize and MaxRingSize bound Options.RingSize and the size a
	// listener accepts from a dialer.
	MinRingSize = 4 << 10
	MaxRingSize = 256 << 20
)

// defaultSpin is the number of polls of the shared indices before a Read
// or Write sleeps: about 100 µs on the development machine, most of it
// in the sched_yield(2) of every 64th poll (1.5-1.8 µs each in that
// paravirtualized guest; 15 µs when system calls were cheaper). Waking a
// sleeping peer through its eventfd and the netpoller costs tens of
// microseconds there; a spin this long keeps a busy two-process round
// trip off that path (64 B: about 5 µs with it, 130 µs with 1/16 of it).
const defaultSpin = 4096

// defaultHandshakeTimeout bounds how long Accept waits for a dialer's
// setup message.
const defaultHandshakeTimeout = 5 * time.Second

// Handshake message, sent by the dialer with the three descriptors.
// Wire constants; append only.
const (
	helloMagic   = 0x314d48535952461b // "\x1bFRYSHM1" little-endian
	helloVersion = 2                  // 2: a second wake flag per side (offWakeRoom)
	helloLen     = 24                 // magic u64, version u32, pid u32, ring size u64
	helloFDs     = 3                  // memfd, dialer's eventfd, listener's eventfd
)

// sizeSeals are the memfd seals that fix the mapping's size.
const sizeSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Options configures a Transport. The zero value gives the defaults.
type Options struct {
	// RingSize is the size in bytes of each direction's ring on
	// connections this transport dials: a power of two from MinRingSize
	// to MaxRingSize. Zero means DefaultRingSize. A Write larger than
	// the ring blocks until the reader makes room. Listeners take the
	// dialer's size.
	RingSize int
	// Spin is how many times Read and Write poll the ring before they
	// sleep on the eventfd; a poll takes a few nanoseconds, and every
	// 64th yields the processor (a system call). Zero means the default
	// (4096, about 100 µs on the development machine); a negative value
	// sleeps at once, and turns MaxSpin off.
	Spin int
	// MaxSpin bounds the adaptive spin of Read: after a wait for bytes
	// that ended within MaxSpin, the next wait polls for up to twice as
	// long before it sleeps (decaying by 1/8 per wait), and a longer
	// wait halves that time again. A stream whose messages come at
	// short, regular intervals (a bulk transfer's requests between
	// copies) thus stays awake through them instead of paying a
	// wake-up for each, which costs 50–150 µs on a small VM; a stream
	// that falls idle spins at most this long per idle period. Zero
	// means the default (250 µs); a negative value polls only Spin
	// times.
	MaxSpin time.Duration
	// HandshakeTimeout bounds how long Accept waits for a new dialer's
	// setup message. Zero means 5 s.
	HandshakeTimeout time.Duration
}

func (o Options) validate() error {
	if o.RingSize != 0 && !validRingSize(uint64(o.RingSize)) {
		return fmt.Errorf("%w: shm ring size %d is not a power of two in [%d, %d]",
			transport.ErrBadConfig, o.RingSize, MinRingSize, MaxRingSize)
	}
	if o.HandshakeTimeout < 0 {
		return fmt.Errorf("%w: negative shm handshake timeout", transport.ErrBadConfig)
	}
	return nil
}

func validRingSize(n uint64) bool {
	return n >= MinRingSize && n <= MaxRingSize && n&(n-1) == 0
}

func (o Options) ringSize() int {
	if o.RingSize == 0 {
		return DefaultRingSize
	}
	return o.RingSize
}

// defaultMaxSpin is Options.MaxSpin's default.
const defaultMaxSpin = 250 * time.Microsecond

// spinning is how a connection spins: polls before sleeping, and the
// bound of the adaptive read spin (0: off).
type spinning struct {
	polls   int
	max     time.Duration
	gosched int // polls between Goscheds (goschedPolls)
}

// goschedPolls returns how many polls a spin makes between Goscheds:
// every 1024 (about 36 µs on the development machine) with one P, where
// nothing else in the process runs while a goroutine spins, and every
// 16384 (about 400 µs, longer than the adaptive read spin's default
// bound) with more, where a goroutine readied meanwhile runs on another
// P and the Gosched is only a backstop for when all are busy. Not often: each Gosched with
// a P idle wakes a thread to run the goroutine it queued, which finds
// nothing to do or takes the spinning goroutine itself to another
// thread, and sleeps again: two futex calls, and a thread that competes
// with the peer's for the CPUs. Yielding every 64th poll cost a fifth of
// both processes' CPU in a 1 MiB ping over shm; every 1024th still moved
// the server's reader between threads about once per 1 MiB ping (an
// execution trace of ferry serve: 936 Goscheds and 971 P hand-offs in
// 0.5 s).
func goschedPolls() int {
	if runtime.GOMAXPROCS(0) == 1 {
		return 1024
	}
	return 16384
}

func (o Options) spin() spinning {
	switch {
	case o.Spin < 0:
		return spinning{gosched: goschedPolls()}
	case o.Spin == 0:
		o.Spin = defaultSpin
	}
	switch {
	case o.MaxSpin < 0:
		o.MaxSpin = 0
	case o.MaxSpin == 0:
		o.MaxSpin = defaultMaxSpin
	}
	return spinning{polls: o.Spin, max: o.MaxSpin, gosched: goschedPolls()}
}

func (o Options) handshakeTimeout() time.Duration {
	if o.HandshakeTimeout == 0 {
		return defaultHandshakeTimeout
	}
	return o.HandshakeTimeout
}

// Transport is the "shm" transport. It is safe for concurrent use.
type Transport struct {
	opts Options
}

// New returns an shm transport with default options.
func New() *Transport { return &Transport{} }

// NewWithOptions returns an shm transport with the given options; they
// are validated by Listen and Dial.
func NewWithOptions(opts Options) *Transport { return &Transport{opts: opts} }

// Name returns "shm".
func (*Transport) Name() string { return scheme }

// SocketPath returns the Unix socket path of an shm address: Host itself
// if it is absolute ("shm:///run/x.sock"), else a socket named after Host
// under os.TempDir ("shm://osd.1"). A relative Host may not contain '/'.
func SocketPath(a transport.Addr) (string, error) {
	if a.Scheme != scheme {
		return "", &transport.AddrError{Input: a.String(), Reason: "not an shm address", Err: transport.ErrUnknownScheme}
	}
	switch {
	case a.Host == "":
		return "", &transport.AddrError{Input: a.String(), Reason: "missing name", Err: transport.ErrBadAddr}
	case strings.HasPrefix(a.Host, "/"):
		return a.Host, nil
	case strings.Contains(a.Host, "/"):
		return "", &transport.AddrError{Input: a.String(), Reason: "a relative name may not contain '/'", Err: transport.ErrBadAddr}
	}
	return filepath.Join(os.TempDir(), "ferry-shm-"+a.Host+".sock"), nil
}

// SocketPath is SocketPath as a method: the shm transport is a
// transport.LocalSocket.
func (*Transport) SocketPath(a transport.Addr) (string, error) { return SocketPath(a) }

// Listen listens on the Unix socket of a (see SocketPath), replacing a
// stale socket file there (see transport.ListenUnix). Closing the
// Listener removes the socket file. Errors match transport.ErrBadConfig,
// transport.ErrBadAddr, transport.ErrUnknownScheme,
// transport.ErrAddrInUse, or are the net package's.
func (t *Transport) Listen(ctx context.Context, a transport.Addr) (transport.Listener, error) {
	if err := t.opts.validate(); err != nil {
		return nil, err
	}
	path, err := SocketPath(a)
	if err != nil {
		return nil, err
	}
	l, err := transport.ListenUnix(ctx, path)
	if err != nil {
		return nil, err
	}
	return &listener{
		l:    l.(*net.UnixListener),
		addr: transport.Addr{Scheme: scheme, Host: a.Host},
		opts: t.opts,
	}, nil
}

// Dial connects to the listener at a, sets up the shared rings and
// returns the connection, a *Conn. It does not wait for the listener to
// Accept; bytes written meanwhile wait in the ring. Errors match
// transport.ErrBadConfig, transport.ErrBadAddr,
// transport.ErrUnknownScheme, transport.ErrRefused (nothing listens),
// ctx's error, or are from the operating system.
func (t *Transport) Dial(ctx context.Context, a transport.Addr) (transport.Conn, error) {
	if err := t.opts.validate(); err != nil {
		return nil, err
	}
	path, err := SocketPath(a)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, wrap(transport.ErrRefused, err)
		}
		return nil, err
	}
	sock := nc.(*net.UnixConn)
	c, err := t.dialSetup(ctx, sock)
	if err != nil {
		sock.Close()
		return nil, err
	}
	c.local = transport.Addr{Scheme: scheme, Host: "pid-" + strconv.Itoa(os.Getpid())}
	c.remote = transport.Addr{Scheme: scheme, Host: a.Host}
	c.start()
	return c, nil
}

// dialSetup creates the mapping and the eventfds, sends them over sock
// and returns the dialer's end, not yet started.
func (t *Transport) dialSetup(ctx context.Context, sock *net.UnixConn) (*Conn, error) {
	ring := t.opts.ringSize()
	total := hdrSize + 2*ring
	memfd, err := unix.MemfdCreate("ferry-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	defer unix.Close(memfd)
	if err := unix.Ftruncate(memfd, int64(total)); err != nil {
		return nil, os.NewSyscallError("ftruncate", err)
	}
	// Neither side may resize the mapping under the other (a shrink would
	// turn the other's accesses into SIGBUS).
	if _, err := unix.FcntlInt(uintptr(memfd), unix.F_ADD_SEALS, sizeSeals); err != nil {
		return nil, os.NewSyscallError("fcntl F_ADD_SEALS", err)
	}
	var efd [2]int
	for i := range efd {
		efd[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			if i == 1 {
				unix.Close(efd[0])
			}
			return nil, os.NewSyscallError("eventfd", err)
		}
	}
	mem, err := unix.Mmap(memfd, 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(efd[0])
		unix.Close(efd[1])
		return nil, os.NewSyscallError("mmap", err)
	}
	binary.LittleEndian.PutUint64(mem[offMagic:], helloMagic)
	binary.LittleEndian.PutUint64(mem[offRingSize:], uint64(ring))
	c := newConn(0, mem, uint64(ring), sock, efd[0], efd[1], t.opts.spin())

	hello := make([]byte, helloLen)
	binary.LittleEndian.PutUint64(hello[0:], helloMagic)
	binary.LittleEndian.PutUint32(hello[8:], helloVersion)
	binary.LittleEndian.PutUint32(hello[12:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint64(hello[16:], uint64(ring))
	if dl, ok := ctx.Deadline(); ok {
		sock.SetWriteDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { sock.SetWriteDeadline(time.Unix(1, 0)) })
	_, _, err = sock.WriteMsgUnix(hello, unix.UnixRights(memfd, efd[0], efd[1]), nil)
	if !stop() || ctx.Err() != nil {
		err = ctx.Err()
	}
	if err == nil {
		err = sock.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// listener accepts shm connections on a Unix socket.
type listener struct {
	l    *net.UnixListener
	addr transport.Addr
	opts Options
}

// Accept waits for a dialer and completes its setup. A dialer whose setup
// fails is dropped and Accept waits for the next one; one that sends
// nothing delays Accept by up to Options.HandshakeTimeout. After Close
// the error matches transport.ErrClosed and net.ErrClosed.
func (l *listener) Accept() (transport.Conn, error) {
	for {
		sock, err := l.l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, wrap(transport.ErrClosed, err)
			}
			return nil, err
		}
		c, pid, err := l.handshake(sock)
		if err != nil {
			sock.Close()
			continue
		}
		c.local = l.addr
		c.remote = transport.Addr{Scheme: scheme, Host: "pid-" + strconv.FormatUint(uint64(pid), 10)}
		c.start()
		return c, nil
	}
}

// handshake reads the dialer's setup message and maps its rings.
func (l *listener) handshake(sock *net.UnixConn) (*Conn, uint32, error) {
	if err := sock.SetReadDeadline(time.Now().Add(l.opts.handshakeTimeout())); err != nil {
		return nil, 0, err
	}
	buf := make([]byte, helloLen+1)
	oob := make([]byte, unix.CmsgSpace(4*helloFDs))
	n, oobn, flags, _, err := sock.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, 0, err
	}
	var fds []int
	if cmsgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range cmsgs {
			got, rerr := unix.ParseUnixRights(&m)
			if rerr == nil {
				fds = append(fds, got...)
			}
		}
	}
	keep := false
	defer func() {
		if !keep {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}()
	if flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 || n != helloLen || len(fds) != helloFDs {
		return nil, 0, fmt.Errorf("%w: %d bytes and %d descriptors", ErrHandshake, n, len(fds))
	}
	if binary.LittleEndian.Uint64(buf[0:]) != helloMagic || binary.LittleEndian.Uint32(buf[8:]) != helloVersion {
		return nil, 0, fmt.Errorf("%w: unknown magic or version", ErrHandshake)
	}
	pid := binary.LittleEndian.Uint32(buf[12:])
	ring := binary.LittleEndian.Uint64(buf[16:])
	if !validRingSize(ring) {
		return nil, 0, fmt.Errorf("%w: ring size %d", ErrHandshake, ring)
	}
	total := hdrSize + 2*int(ring)
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil || st.Size != int64(total) || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, 0, fmt.Errorf("%w: mapping is not a %d-byte memfd", ErrHandshake, total)
	}
	if seals, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GET_SEALS, 0); err != nil || seals&sizeSeals != sizeSeals {
		return nil, 0, fmt.Errorf("%w: mapping is not sealed against resizing", ErrHandshake)
	}
	for _, fd := range fds[1:] {
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFREG || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return nil, 0, fmt.Errorf("%w: descriptor %d is not an eventfd", ErrHandshake, fd)
		}
		if !isEventfd(fd) {
			return nil, 0, fmt.Errorf("%w: descriptor %d is not an eventfd", ErrHandshake, fd)
		}
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil || fl&unix.O_NONBLOCK == 0 {
			return nil, 0, fmt.Errorf("%w: eventfd is blocking", ErrHandshake)
		}
	}
	mem, err := unix.Mmap(fds[0], 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, os.NewSyscallError("mmap", err)
	}
	if binary.LittleEndian.Uint64(mem[offMagic:]) != helloMagic || binary.LittleEndian.Uint64(mem[offRingSize:]) != ring {
		unix.Munmap(mem)
		return nil, 0, fmt.Errorf("%w: shared header does not match", ErrHandshake)
	}
	if err := sock.SetReadDeadline(time.Time{}); err != nil {
		unix.Munmap(mem)
		return nil, 0, err
	}
	unix.Close(fds[0])
	c := newConn(1, mem, ring, sock, fds[2], fds[1], l.opts.spin())
	keep = true
	return c, pid, nil
}

// Close stops listening and removes the socket file. Connections already
// accepted stay open.
func (l *listener) Close() error {
	err := l.l.Close()
	if errors.Is(err, net.ErrClosed) {
		return wrap(transport.ErrClosed, err)
	}
	return err
}

// Addr returns the address listened on.
func (l *listener) Addr() transport.Addr { return l.addr }

// wrapError marks an error from the operating system or the net package
// with a sentinel, keeping both visible to errors.Is and errors.As.
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

func wrap(sentinel, err error) error { return &wrapError{sentinel: sentinel, err: err} }

// isEventfd reports whether fd is an eventfd, as /proc names it. Where
// /proc cannot say (not mounted) it answers true and leaves the judging
// to the checks beside it: no write ever waits on the peer's descriptor
// (signal), so a pipe in an eventfd's place slows only its sender.
func isEventfd(fd int) bool {
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err != nil || target == "anon_inode:[eventfd]"
}
