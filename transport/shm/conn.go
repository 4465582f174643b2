//go:build linux

package shm

import (
	"encoding/binary"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrymsg/ferry/internal/crc32c"
	"github.com/ferrymsg/ferry/internal/streamcopy"
	"github.com/ferrymsg/ferry/transport"
)

// Layout of the shared mapping: a header page, then ring 0 (written by
// the dialer, side 0) and ring 1 (written by the listener, side 1), each
// RingSize bytes. Every shared word sits on its own 64-byte cache line.
// Wire constants (shared between processes); append only.
const (
	hdrSize     = 4096
	offMagic    = 0   // helloMagic, written by the dialer before sending
	offRingSize = 8   // ring size in bytes
	offHead     = 64  // + 128*ring: bytes ever written to the ring
	offTail     = 128 // + 128*ring: bytes ever read from the ring
	offClosed   = 320 // + 64*side: nonzero once the side closed
	offWake     = 448 // + 64*side: nonzero while the side may sleep waiting for bytes
	offWakeRoom = 576 // + 64*side: nonzero while the side may sleep waiting for room (version 2)
)

// Memory ordering. Each ring has one producer and one consumer. Head is
// stored only by the producer, tail only by the consumer; both count
// bytes ever transferred (uint64, never wrapping in practice), so
// head-tail is the fill level and the data offset is the count modulo
// the power-of-two size. The producer copies bytes into the ring with
// plain stores and then publishes them with an atomic store of head; the
// consumer loads head atomically before copying the bytes out and
// releases the space with an atomic store of tail after copying. These
// stores have at least release and these loads at least acquire
// semantics (Go's atomics are sequentially consistent; under the race
// detector they are release/acquire), which order the plain accesses on
// either side of them, and that hardware ordering holds across processes
// mapping the same pages; so a side never reads bytes that were not
// fully written nor overwrites bytes not yet read.
//
// Sleeping uses the Dekker pattern (per direction: a reader sleeps on
// its wake flag for bytes, a writer on its flag for room), which needs a
// full barrier between
// each side's store and its following load (see publish): a side
// about to sleep stores its wake flag and then re-checks the ring; a side
// that made progress stores head, tail or its closed flag and then loads
// the peer's wake flag, writing the peer's eventfd if it was set. At
// least one of the two sees the other's store, so no wake-up is lost.
// The closed flag is stored after the side's last head store, so a
// reader that sees it and then finds the ring empty has read everything.
//
// The race detector does not track memory outside the Go heap, so these
// shared accesses are invisible to it; only the Go-side state below is
// checked.

// publish stores v in the shared word w with a full barrier, as the
// Dekker pattern above needs. It is a Swap, not a Store: a Swap is a full
// barrier in every build, while under the race detector an atomic Store
// to memory outside the Go heap is only a release store, which lets a
// later load pass it and loses wake-ups.
func publish(w *atomic.Uint64, v uint64) { w.Swap(v) }

// Conn is one end of an shm connection. It implements net.Conn. Read,
// Write, Close and the deadline setters are safe for concurrent use;
// concurrent Writes are serialised whole, and so are concurrent Reads.
type Conn struct {
	side   int
	mem    []byte // the whole mapping; nil after Close
	size   uint64 // ring size, a power of two
	mask   uint64
	out    []byte // ring this side writes
	in     []byte // ring this side reads
	spin   spinning
	rspin  time.Duration // the adaptive read spin; guarded by readMu
	local  net.Addr
	remote net.Addr

	outHead, outTail, inHead, inTail *atomic.Uint64
	myClosed, peerClosed             *atomic.Uint64
	myWake, peerWake                 *atomic.Uint64 // waiting for bytes to read
	myRoom, peerRoom                 *atomic.Uint64 // waiting for room to write

	sock *net.UnixConn // kept open to notice the peer's death
	pid  int           // the peer's process ID (SO_PEERCRED); 0 if not known
	own  *os.File      // this side's eventfd, read through the netpoller
	peer int           // the peer's eventfd, written (never waited on) to wake it

	// ownRaw writes kickBuf to own without waiting: kick is built once so
	// that a broadcast allocates nothing.
	ownRaw syscall.RawConn
	kick   func(fd uintptr) bool

	readMu  sync.Mutex // serialises Reads; held by Close before unmapping
	writeMu sync.Mutex // serialises Writes; likewise
	wakeBuf [8]byte    // eventfd increment, written under writeMu or readMu

	closed atomic.Bool  // Close was called
	broken atomic.Bool  // the peer went away without closing
	rdl    atomic.Int64 // read deadline, Unix nanoseconds; 0 is none
	wdl    atomic.Int64 // write deadline

	mu      sync.Mutex
	changed chan struct{} // closed on every broadcast; nil until awaited
	gen     atomic.Uint64 // counts broadcasts
	polling atomic.Bool   // a waiter sleeps in a read of the own eventfd
	kickBuf [8]byte       // eventfd increment that wakes the local poller

	done sync.WaitGroup // the monitor goroutine
}

func word(mem []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[off]))
}

// newConn builds side's end over mem; ownFD and peerFD are the
// nonblocking eventfds that wake this side and the peer. It takes
// ownership of mem, sock and both descriptors.
func newConn(side int, mem []byte, ring uint64, sock *net.UnixConn, ownFD, peerFD int, spin spinning) *Conn {
	other := 1 - side
	c := &Conn{
		side:       side,
		mem:        mem,
		size:       ring,
		mask:       ring - 1,
		spin:       spin,
		sock:       sock,
		out:        mem[hdrSize+uint64(side)*ring : hdrSize+uint64(side+1)*ring],
		in:         mem[hdrSize+uint64(other)*ring : hdrSize+uint64(other+1)*ring],
		outHead:    word(mem, offHead+128*side),
		outTail:    word(mem, offTail+128*side),
		inHead:     word(mem, offHead+128*other),
		inTail:     word(mem, offTail+128*other),
		myClosed:   word(mem, offClosed+64*side),
		peerClosed: word(mem, offClosed+64*other),
		myWake:     word(mem, offWake+64*side),
		peerWake:   word(mem, offWake+64*other),
		myRoom:     word(mem, offWakeRoom+64*side),
		peerRoom:   word(mem, offWakeRoom+64*other),
		own:        os.NewFile(uintptr(ownFD), "shm-eventfd"),
		peer:       peerFD,
	}
	binary.NativeEndian.PutUint64(c.wakeBuf[:], 1) // eventfd counters are host-endian
	c.kickBuf = c.wakeBuf
	c.ownRaw, _ = c.own.SyscallConn() // an *os.File's never fails
	c.kick = func(fd uintptr) bool {
		signal(int(fd), c.kickBuf[:])
		return true // done, whatever the write did: never wait for room
	}
	if pid, err := transport.SocketPeerPID(sock); err == nil {
		c.pid = pid
	}
	return c
}

// PeerPID returns the peer's process ID as the kernel recorded it for
// the connection's Unix socket (SO_PEERCRED), not as the peer claims
// it; it implements transport.PeerProcess. The error matches
// transport.ErrUnsupported when the peer's process is not visible from
// this PID namespace, and net.ErrClosed or ErrPeerLost once the
// connection is closed or the peer went away.
func (c *Conn) PeerPID() (int, error) {
	switch {
	case c.closed.Load():
		return 0, c.opError("peerpid", net.ErrClosed)
	case c.broken.Load():
		return 0, c.opError("peerpid", errPeerLost)
	case c.pid == 0:
		return 0, transport.ErrUnsupported
	}
	return c.pid, nil
}

// start launches the goroutine that watches the socket for the peer's
// death.
func (c *Conn) start() {
	c.done.Add(1)
	go c.monitor()
}

func (c *Conn) monitor() {
	defer c.done.Done()
	var b [64]byte
	for {
		if _, err := c.sock.Read(b[:]); err != nil {
			break
		}
		// The peer sends nothing after the handshake; ignore stray bytes.
	}
	if !c.closed.Load() && c.peerClosed.Load() == 0 {
		c.broken.Store(true)
	}
	c.broadcast()
}

// release frees everything of a Conn that was never started.
func (c *Conn) release() {
	c.sock.Close()
	c.own.Close()
	unix.Close(c.peer)
	unix.Munmap(c.mem)
	c.mem = nil
}

// signal adds one to the eventfd fd without waiting for room: a full
// counter gives EAGAIN, and a full counter is readable, so the wake-up
// the write was for is pending already. Other errors mean the peer is
// gone, which the monitor reports.
func signal(fd int, one []byte) {
	for {
		if _, err := unix.Write(fd, one); err != unix.EINTR {
			return
		}
	}
}

// signalPeer writes the peer's eventfd to wake it, unless the peer has
// made that descriptor blocking (it shares the open file, and so its
// flags): a write then could wait on the peer for ever, holding writeMu
// or readMu past every deadline, and Close with them. Such a peer is
// treated as lost. A peer that flips the flag between the check and the
// write can still stall this side's write for as long as it keeps its
// counter full; closing that gap needs a doorbell the peer shares no
// open file of (a socket written with MSG_DONTWAIT).
func (c *Conn) signalPeer() {
	fl, err := unix.FcntlInt(uintptr(c.peer), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_NONBLOCK == 0 {
		if !c.broken.Swap(true) {
			c.broadcast()
		}
		return
	}
	signal(c.peer, c.wakeBuf[:])
}

// broadcast wakes every local waiter: those waiting on the channel, and
// the poller, through its own eventfd.
func (c *Conn) broadcast() {
	c.gen.Add(1)
	c.mu.Lock()
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
	c.mu.Unlock()
	if c.polling.Load() {
		_ = c.ownRaw.Write(c.kick) // fails only once closed, when the poller has returned
	}
}

// notify wakes the peer if it said it may sleep waiting for what this
// side just published: flag is peerWake after bytes were written,
// peerRoom after they were read. Call after publishing, with readMu or
// writeMu held (so the mapping and the peer's eventfd are still open).
//
// The two flags are apart so that a reader draining a large write does
// not wake the writer's peer at every chunk while that peer only waits
// for its reply (which it did with one flag, twice per 64 KiB chunk of
// a 1 MiB message: an eventfd write here, a wake-up there).
func (c *Conn) notify(flag *atomic.Uint64) {
	if flag.Load() != 0 && flag.Swap(0) != 0 {
		c.signalPeer()
	}
}

// wait sleeps until a wake-up from the peer, a broadcast, or the
// deadline dl (Unix nanoseconds, 0 for none); ready() is checked after
// the wake flag (myWake for a Read, myRoom for a Write) is up, and the
// flag is down again when wait returns. g is the broadcast count the
// caller loaded before it read the deadline: wait returns at once if a
// broadcast came since.
//
// One waiter at a time, the poller, sleeps in a read of this side's
// eventfd, in the netpoller: the peer's write to it makes the poller's
// goroutine runnable directly, with no hand-off through another
// goroutine (each such hop can cost a thread wake-up, tens of
// microseconds on a small VM). A second waiter (a Write waiting for room
// while a Read waits for bytes) waits for the broadcast the poller makes
// when it returns, and then polls itself if it still has to wait.
func (c *Conn) wait(g uint64, dl int64, ready func() bool, flag *atomic.Uint64) {
	c.mu.Lock()
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	ch := c.changed
	c.mu.Unlock()
	publish(flag, 1)
	defer flag.Store(0) // awake: the peer need not write the eventfd
	if ready() || c.closed.Load() || c.broken.Load() {
		return
	}
	if c.polling.CompareAndSwap(false, true) {
		// A broadcast since g (a new deadline, Close, the peer's death)
		// either saw polling set and kicks the eventfd, or is seen here.
		if c.gen.Load() == g {
			c.poll(dl)
		}
		c.polling.Store(false)
		c.broadcast() // a waiter on the channel rechecks, and polls if it must
		return
	}
	if c.gen.Load() != g {
		return // ch may be newer than the broadcast
	}
	if dl == 0 {
		<-ch
		return
	}
	t := time.NewTimer(time.Until(time.Unix(0, dl)))
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
}

// poll sleeps in a read of this side's eventfd until the peer or a
// broadcast writes it, or the deadline dl passes. Only the poller reads
// the eventfd and sets its deadline.
func (c *Conn) poll(dl int64) {
	var d time.Time
	if dl != 0 {
		d = time.Unix(0, dl)
	}
	if c.own.SetReadDeadline(d) != nil {
		return // closed
	}
	var b [8]byte
	c.own.Read(b[:]) // a count, or the deadline's or Close's error: the caller rechecks
}

// spinUntil polls ready c.spin.polls times, and then on until the
// time since from (monoNanos) reaches d; it gives up early when a
// broadcast (a new deadline, Close, the peer's death) follows g.
//
// Every 64th poll yields the thread's CPU (sched_yield): on a small
// machine the thread that will make ready true (the peer's, copying a
// large write in) is often queued on this very CPU, where the kernel put
// it when it woke it; a spin that does not yield the thread then delays
// what it waits for by its whole length (1 MiB round trip over shm in one
// process, 2 vCPUs shared with other work, 3 rounds: 345-425 us without,
// 141-255 us with). Every spin.gosched-th poll also yields to the
// process's other goroutines (runtime.Gosched; see goschedPolls).
func (c *Conn) spinUntil(ready func() bool, from int64, d time.Duration, g uint64) bool {
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		if i%64 == 63 {
			if c.gen.Load() != g || i >= c.spin.polls && (d <= 0 || monoNanos()-from >= int64(d)) {
				return false
			}
			if i%c.spin.gosched == c.spin.gosched-1 {
				runtime.Gosched()
			}
			osYield()
		}
		if c.spin.polls == 0 {
			return false
		}
	}
}

// osYield gives this thread's CPU to another runnable thread, if any
// (sched_yield(2); it does not block).
func osYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// adaptRead sets the adaptive read spin after a wait of w: up to twice
// a wait that ended within the bound, decaying by 1/8 per wait; halved
// after a longer one.
func (c *Conn) adaptRead(w time.Duration) {
	if c.spin.max <= 0 {
		return
	}
	if w > c.spin.max {
		c.rspin /= 2
		return
	}
	c.rspin = max(c.rspin-c.rspin/8, min(2*w, c.spin.max))
}

// copyChunk is how many bytes put and take copy before they publish
// them (and wake the peer if it sleeps): the peer starts copying a large
// write out of the ring while the rest is still being copied in, rather
// than after, and a sleeping peer's wake-up overlaps the copy.
const copyChunk = 64 << 10

// streamMin is the size from which put copies a chunk into the ring with
// non-temporal stores (internal/streamcopy). The ring lines a writer
// fills were last read by the peer's core, and an ordinary store into
// them waits for that core to give each line up: a 1 MiB message took
// 146-192 µs to copy in that way on the development machine, and 26-33
// µs streamed, while the reader's copy out of memory cost it no more than
// its copy out of the writer's cache had (ferry ping 1 MiB over shm,
// interleaved, cubic: 3734 → 4861 round trips/s, medians of 5). Smaller
// writes stay in the cache, where a waiting reader finds them soonest.
const streamMin = 32 << 10

func (c *Conn) readable() bool {
	return c.inHead.Load() != c.inTail.Load() || c.peerClosed.Load() != 0
}

func (c *Conn) writable() bool {
	return c.outHead.Load()-c.outTail.Load() < c.size || c.peerClosed.Load() != 0
}

// monoBase anchors monoNanos.
var monoBase = time.Now()

// monoNanos reads the monotonic clock alone, in nanoseconds: what the
// spin measures durations with. It costs half of time.Now, which also
// reads the wall clock (31 against 58 ns on the development machine,
// more in the read path, where it ran twice per Read that waited).
func monoNanos() int64 { return int64(time.Since(monoBase)) }

// expired reports whether the deadline dl has passed.
func expired(dl int64) bool { return dl != 0 && time.Now().UnixNano() >= dl }

// Read reads bytes the peer wrote. It returns io.EOF once the peer closed
// and its bytes were read, a timeout matching os.ErrDeadlineExceeded when
// the read deadline passes, and an error matching ErrPeerLost and
// syscall.ECONNRESET when the peer went away without closing.
func (c *Conn) Read(b []byte) (int, error) {
	n, _, err := c.read(b, 0, false)
	return n, err
}

// ReadCRC is Read that also returns crc32.Update(crc, Castagnoli, b[:n]),
// computed from the copy's own loads (transport.CRCReader).
func (c *Conn) ReadCRC(b []byte, crc uint32) (int, uint32, error) {
	return c.read(b, crc, true)
}

func (c *Conn) read(b []byte, crc uint32, withCRC bool) (int, uint32, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	spun := false
	var since int64 // when the ring was first found empty (monoNanos)
	for {
		switch {
		case c.closed.Load():
			return 0, crc, c.opError("read", net.ErrClosed)
		case c.broken.Load():
			return 0, crc, c.opError("read", errPeerLost)
		}
		g := c.gen.Load() // before the deadline: a new one is then seen, or broadcasts after g
		dl := c.rdl.Load()
		if expired(dl) {
			return 0, crc, c.opError("read", os.ErrDeadlineExceeded)
		}
		if len(b) == 0 {
			return 0, crc, nil
		}
		peerClosed := c.peerClosed.Load() != 0 // before head: see the closing side's last bytes
		var n int
		var err error
		n, crc, err = c.take(b, crc, withCRC)
		if err != nil {
			c.broken.Store(true)
			return 0, crc, c.opError("read", err)
		}
		if n > 0 {
			if since != 0 {
				c.adaptRead(time.Duration(monoNanos() - since))
			}
			return n, crc, nil
		}
		if peerClosed {
			return 0, crc, io.EOF
		}
		if since == 0 {
			since = monoNanos()
		}
		if !spun {
			spun = true
			if c.spinUntil(c.readable, since, c.rspin, g) || c.gen.Load() != g {
				continue
			}
		}
		c.wait(g, dl, c.readable, c.myWake)
	}
}

// take copies readable bytes into b and releases their space, a
// copyChunk at a time, waking the peer if it waits for room. With
// withCRC it folds the bytes' CRC into crc as it copies them
// (crc32c.CopyUpdate).
func (c *Conn) take(b []byte, crc uint32, withCRC bool) (int, uint32, error) {
	tail := c.inTail.Load()
	avail := c.inHead.Load() - tail
	if avail == 0 {
		return 0, crc, nil
	}
	if avail > c.size {
		return 0, crc, errCorrupt
	}
	n := min(uint64(len(b)), avail)
	for done := uint64(0); done < n; {
		k := min(n-done, copyChunk)
		off := (tail + done) & c.mask
		dst := b[done : done+k]
		if withCRC {
			m, x := crc32c.CopyUpdate(crc, dst, c.in[off:])
			_, crc = crc32c.CopyUpdate(x, dst[m:], c.in)
		} else {
			m := copy(dst, c.in[off:])
			copy(dst[m:], c.in)
		}
		done += k
		publish(c.inTail, tail+done)
		c.notify(c.peerRoom)
	}
	return int(n), crc, nil
}

// Write writes b, blocking while the ring is full. It returns a timeout
// matching os.ErrDeadlineExceeded when the write deadline passes (with
// the count of bytes written), an error matching syscall.EPIPE once the
// peer closed, and one matching ErrPeerLost and syscall.ECONNRESET when
// the peer went away without closing.
func (c *Conn) Write(b []byte) (int, error) {
	n, _, err := c.write(b, 0, false)
	return n, err
}

// WriteCRC writes b as Write does, or, with try, as TryWriteBuffers does,
// and returns the count written and crc32.Update(crc, Castagnoli,
// b[:n]), folded into the copy into the ring (transport.CRCWriter).
func (c *Conn) WriteCRC(b []byte, crc uint32, try bool) (int, uint32, error) {
	if try {
		return c.tryWrite(b, crc)
	}
	return c.write(b, crc, true)
}

func (c *Conn) write(b []byte, crc uint32, withCRC bool) (int, uint32, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	n := 0
	spun := false
	for {
		if err := c.writeErr(); err != nil {
			return n, crc, err
		}
		g := c.gen.Load()
		dl := c.wdl.Load()
		if expired(dl) {
			return n, crc, c.opError("write", os.ErrDeadlineExceeded)
		}
		if n == len(b) {
			return n, crc, nil
		}
		var k int
		var err error
		k, crc, err = c.put(b[n:], crc, withCRC)
		if err != nil {
			c.broken.Store(true)
			return n, crc, c.opError("write", err)
		}
		if k > 0 {
			n += k
			if n == len(b) {
				// Done, even if the peer read it all and closed since.
				return n, crc, nil
			}
			spun = false
			continue
		}
		if !spun {
			spun = true
			if c.spinUntil(c.writable, 0, 0, g) || c.gen.Load() != g {
				continue
			}
		}
		c.wait(g, dl, c.writable, c.myRoom)
	}
}

// TryWriteBuffers writes bufs in order as far as the ring takes them:
// when it is full it polls as a Write would before sleeping
// (Options.Spin) and returns, with the count written, if the reader has
// made no room by then. It never sleeps, so a messenger writes from its
// sending goroutine with it (it implements transport.TryWriter). Its
// errors are Write's; a passed write deadline is not one (nothing is
// waited for).
func (c *Conn) TryWriteBuffers(bufs [][]byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	n := 0
	for _, b := range bufs {
		k, _, full, err := c.tryPut(b, 0, false)
		n += k
		if err != nil || full {
			return n, err
		}
	}
	return n, nil
}

// tryWrite is TryWriteBuffers of the one buffer b, folding its CRC into
// crc as it copies.
func (c *Conn) tryWrite(b []byte, crc uint32) (int, uint32, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	n, crc, _, err := c.tryPut(b, crc, true)
	return n, crc, err
}

// tryPut writes b as far as the ring takes it, polling as a Write would
// when it is full (full reports that the reader made no room by then).
// The caller holds writeMu.
func (c *Conn) tryPut(b []byte, crc uint32, withCRC bool) (n int, _ uint32, full bool, err error) {
	for len(b) > 0 {
		if err := c.writeErr(); err != nil {
			return n, crc, false, err
		}
		k, x, err := c.put(b, crc, withCRC)
		if err != nil {
			c.broken.Store(true)
			return n, crc, false, c.opError("write", err)
		}
		n, crc, b = n+k, x, b[k:]
		if k == 0 && !c.spinUntil(c.writable, 0, 0, c.gen.Load()) {
			return n, crc, true, nil
		}
	}
	return n, crc, false, nil
}

// writeErr returns why nothing more can be written, if so.
func (c *Conn) writeErr() error {
	switch {
	case c.closed.Load():
		return c.opError("write", net.ErrClosed)
	case c.broken.Load():
		return c.opError("write", errPeerLost)
	case c.peerClosed.Load() != 0:
		return c.opError("write", syscall.EPIPE)
	}
	return nil
}

// put copies as much of p as fits into the ring and publishes it, a
// copyChunk at a time, waking the peer if it waits for bytes. With
// withCRC it folds the bytes' CRC into crc as it copies them. Chunks of
// streamMin bytes or more are stored past the cache (streamcopy).
func (c *Conn) put(p []byte, crc uint32, withCRC bool) (int, uint32, error) {
	head := c.outHead.Load()
	used := head - c.outTail.Load()
	if used > c.size {
		return 0, crc, errCorrupt
	}
	n := min(uint64(len(p)), c.size-used)
	if n == 0 {
		return 0, crc, nil
	}
	for done := uint64(0); done < n; {
		k := min(n-done, copyChunk)
		off := (head + done) & c.mask
		src := p[done : done+k]
		switch {
		case withCRC && k >= streamMin:
			m, x := crc32c.CopyUpdateStream(crc, c.out[off:], src)
			_, crc = crc32c.CopyUpdateStream(x, c.out, src[m:])
		case withCRC:
			m, x := crc32c.CopyUpdate(crc, c.out[off:], src)
			_, crc = crc32c.CopyUpdate(x, c.out, src[m:])
		case k >= streamMin:
			m := streamcopy.Copy(c.out[off:], src)
			streamcopy.Copy(c.out, src[m:])
		default:
			m := copy(c.out[off:], src)
			copy(c.out, src[m:])
		}
		done += k
		publish(c.outHead, head+done)
		c.notify(c.peerWake)
	}
	return int(n), crc, nil
}

// Close closes the connection: the peer reads what was written and then
// io.EOF, and its writes fail. Close waits for Reads and Writes in
// progress to return, then unmaps the rings and closes every descriptor.
// A second Close returns an error matching net.ErrClosed.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return c.opError("close", net.ErrClosed)
	}
	c.broadcast() // Reads and Writes return
	c.readMu.Lock()
	c.writeMu.Lock()
	publish(c.myClosed, 1)
	c.signalPeer()
	c.sock.Close() // after the flag: the peer's monitor sees a clean close
	c.own.Close()
	c.done.Wait()
	unix.Close(c.peer)
	err := unix.Munmap(c.mem)
	c.mem = nil
	c.writeMu.Unlock()
	c.readMu.Unlock()
	if err != nil {
		return c.opError("close", os.NewSyscallError("munmap", err))
	}
	return nil
}

// LocalAddr returns this side's address: the listener's for accepted
// connections, "shm://pid-N" for dialed ones.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the peer's address: the dialed address, or
// "shm://pid-N" with the dialer's process ID on accepted connections.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	c.rdl.Store(deadlineNanos(t))
	c.wdl.Store(deadlineNanos(t))
	c.broadcast()
	return nil
}

// SetReadDeadline sets the deadline for Reads, pending ones included; the
// zero time means none.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	c.rdl.Store(deadlineNanos(t))
	c.broadcast()
	return nil
}

// SetWriteDeadline sets the deadline for Writes, pending ones included;
// the zero time means none.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	c.wdl.Store(deadlineNanos(t))
	c.broadcast()
	return nil
}

// deadlineNanos is t in Unix nanoseconds: 0 for none, 1 for one long
// past (before 1970, or before 1678, which UnixNano would wrap into the
// future), and math.MaxInt64 for one after 2262, which it would wrap
// into the past.
func deadlineNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if t.After(maxDeadline) {
		return math.MaxInt64
	}
	if t.Before(minDeadline) {
		return 1 // long past (before 1678 UnixNano would wrap)
	}
	if n := t.UnixNano(); n > 0 {
		return n
	}
	return 1 // long past
}

// maxDeadline and minDeadline are the latest and earliest times UnixNano
// represents.
var maxDeadline, minDeadline = time.Unix(0, math.MaxInt64), time.Unix(0, math.MinInt64)

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: scheme, Source: c.local, Addr: c.remote, Err: err}
}

// connError is a connection failure: it matches its sentinel and errno.
type connError struct {
	sentinel error
	errno    syscall.Errno
	msg      string
}

func (e *connError) Error() string   { return e.msg }
func (e *connError) Unwrap() []error { return []error{e.sentinel, e.errno} }

var (
	errPeerLost = &connError{ErrPeerLost, syscall.ECONNRESET, "shm: peer lost: connection reset"}
	errCorrupt  = &connError{ErrPeerLost, syscall.ECONNRESET, "shm: peer corrupted the ring indices: connection reset"}
)
