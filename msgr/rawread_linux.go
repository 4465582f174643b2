//go:build linux

package msgr

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// rawSyscalls: the reads and writes of sockets, which are non-blocking
// and so never sleep in the kernel, are made as raw system calls, which
// do not tell the scheduler they may block (entersyscall). When the
// process has been idle long enough for the runtime's monitor thread
// (sysmon) to sleep, such a notice wakes it with a futex, and it sleeps
// again with another: a 64 B round trip through Conn.Await paid that
// pair about once per message on each side (perf record of the futex
// calls: 88% of them). Race-detector builds keep package syscall, whose
// annotations order a write before the peer's read.
const rawSyscalls = !raceEnabled

// rawMaxRuns is the most sockets a process may run for its socket
// calls to be raw. A raw call keeps its P for its whole length, where one
// through package syscall lets the scheduler give the P to another
// goroutine if the call is slow: with many busy sockets that hand-off is
// what lets a quiet connection's goroutine in between the busy ones. In
// the flood of 32 RPC clients (TestFloodRPC) the honest client's p50
// went 6-11 -> 10-26 ms with every socket call raw. A process with a few
// sockets, where the latency of each message is what matters, has
// nobody to let in.
const rawMaxRuns = 16

// A socket call is made through package syscall all the same when
// rawEvery has passed since the last one that was. sysmon sleeps while
// every P is idle, and besides the system calls that announce
// themselves only timers wake it; it is what polls the network while
// every P is busy and preempts goroutines that run too long. With every
// socket call raw, a process that went idle and then busy could run for
// seconds (until its next timer) with nobody polling the network: a
// flood of 32 RPC clients left an honest client's RPC unanswered for 5 s
// (TestFloodRPC, before rawMaxRuns too). A call through package syscall
// every 10 ms bounds that by sysmon's own network poll interval (10 ms).
// Futex calls per 64 B round trip through Conn.Await, both processes:
// 0.83 with no raw calls, 0.06 with every call raw, 0.32 with a plain
// call each millisecond, 0.13 with one each 10 ms.
const rawEvery = int64(10 * time.Millisecond)

// lastSyscall is when a socket call last went through package syscall
// (monoNanos).
var lastSyscall atomic.Int64

// raw reports whether this socket call may be a raw system call.
func raw() bool {
	if !rawSyscalls || openRuns.Load() > rawMaxRuns {
		return false
	}
	now := monoNanos()
	if last := lastSyscall.Load(); now-last < rawEvery {
		return true
	}
	lastSyscall.Store(now)
	return false
}

// rawReader reads a socket with read(2) issued as a raw system call from
// RawConn.Read's callback, instead of through net.Conn.Read.
//
// net.Conn.Read makes its read(2) through syscall.Read, which tells the
// scheduler a system call may block (entersyscall); when the process has
// been idle long enough for sysmon to sleep, that wakes sysmon with a
// futex, which later sleeps again. A reader that waits for one reply at
// a time makes its process idle between messages, so nearly every read
// paid the wake-up. The read of a non-blocking socket does not block:
// EAGAIN sends RawConn.Read to the netpoller, which waits as
// net.Conn.Read would, with the same deadlines.
type rawReader struct {
	raw syscall.RawConn
	p   []byte
	n   int
	err error
	fn  func(fd uintptr) bool // r.read, bound once: no allocation per Read
}

func newRawReader(raw syscall.RawConn) *rawReader {
	r := &rawReader{raw: raw}
	r.fn = r.read
	return r
}

// socketSource returns what the reader of nc reads from: a rawReader on
// a socket, nc itself otherwise (and in race-detector builds, whose
// annotations of syscall.Read order a peer's write before the read).
func socketSource(nc net.Conn) io.Reader {
	if !rawSyscalls {
		return nc
	}
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			return newRawReader(raw)
		}
	}
	return nc
}

func (r *rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.err = p, 0, nil
	if err := r.raw.Read(r.fn); err != nil {
		r.p = nil
		return 0, err
	}
	n, err := r.n, r.err
	r.p, r.err = nil, nil
	return n, err
}

func (r *rawReader) read(fd uintptr) bool {
	n, errno := sockCall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(r.p))), uintptr(len(r.p)))
	switch errno {
	case 0:
		if n == 0 {
			r.err = io.EOF
		}
		r.n = n
	case syscall.EAGAIN:
		return false // wait in the netpoller
	default:
		r.err = errno
	}
	return true
}
