//go:build linux

package msgr

import (
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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

	// Busy polling (Config.BusyPoll), set by setBusyPoll before the
	// session's reader starts; then only the reader role's holder uses
	// these. busy is the configured poll in nanoseconds (0: off), cur
	// the adaptive one, waitFrom when the last read that found the
	// socket empty began to wait (0: none pending), met where hits and
	// sleeps are counted.
	busy, cur, waitFrom int64
	yieldIv             int64 // polling time between yields of the CPU (poll)
	met                 *msgrMetrics
}

func newRawReader(raw syscall.RawConn) *rawReader {
	r := &rawReader{raw: raw}
	r.fn = r.read
	return r
}

// socketSource returns what the reader of nc reads from: a rawReader on
// a socket, nc itself otherwise.
func socketSource(nc net.Conn) io.Reader {
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
	if r.waitFrom != 0 {
		// Woken by the netpoller after a read that found nothing: a
		// wait that ended within a few polls' length turns polling back
		// on. Not within one: a wait that slept includes the wake-up
		// polling saves, which on a small VM is longer than the poll
		// (a 64 B round trip's wait: 60-90 µs asleep, 15 µs polling).
		if monoNanos()-r.waitFrom <= busyPollRestore*r.busy {
			r.cur = r.busy
		}
		r.waitFrom = 0
	}
	n, errno := r.sysRead(fd)
	if errno == syscall.EAGAIN && r.busy > 0 {
		n, errno = r.poll(fd)
	}
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

// sysRead is one read(2) into r.p: a raw system call (sockCall), or in
// race-detector builds syscall.Read, whose annotations order a peer's
// write before the read.
func (r *rawReader) sysRead(fd uintptr) (int, syscall.Errno) {
	if rawSyscalls {
		return sockCall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(r.p))), uintptr(len(r.p)))
	}
	for {
		n, err := syscall.Read(int(fd), r.p)
		switch e, _ := err.(syscall.Errno); {
		case err == nil:
			return n, 0
		case e != syscall.EINTR:
			return 0, e
		}
	}
}

// pollGosched is how long a poll runs between yields to the process's
// other goroutines (runtime.Gosched): its reads keep their P, and a
// dispatcher goroutine that is to answer what the peer waits for may be
// queued behind it.
const pollGosched = int64(16 * time.Microsecond)

// A poll yields the CPU (sched_yield(2)) now and then: the peer's
// thread may be queued on the poller's own CPU, where the kernel woke
// it, and a poll that does not yield delays what it waits for until the
// kernel preempts it. A yield costs, though (0.6 µs when nothing else
// runs, on this project's 2-vCPU VM, and more when the kernel then
// moves threads about), so the interval between yields adapts: it starts
// at minPollYield, doubles up to maxPollYield after each yield that
// returned within busyPollRan (nothing ran in between), and drops back
// to minPollYield after one that did not. 64 B msgr round trip, p50,
// against the raw floor, cubic: with a yield every 4 polls 27.7-31.2
// µs unpinned against the floor's 22.9-24.5 and 22.2 on one vCPU; every
// 64 polls 15.4 unpinned but 82.7 on one vCPU; adaptive 15.3-16.1
// unpinned, 23.4-29.4 on one vCPU (the floor 22.3-29.1), 14.2-14.6 with
// the processes on different vCPUs.
const (
	minPollYield = int64(2 * time.Microsecond)
	maxPollYield = int64(32 * time.Microsecond)
	busyPollRan  = int64(3 * time.Microsecond)
)

// minBusyPoll: an adaptive poll halved below this stops polling until
// a wait ends within busyPollRestore times Config.BusyPoll again.
const minBusyPoll = int64(time.Microsecond)

// busyPollRestore: a wait that slept and ended within this many times
// Config.BusyPoll restores the full poll.
const busyPollRestore = 4

// poll reads the socket, found empty, again and again until bytes come
// or the adaptive poll (r.cur) has passed (Config.BusyPoll). It returns
// the last read's result: EAGAIN if the reader is to sleep.
func (r *rawReader) poll(fd uintptr) (int, syscall.Errno) {
	start := monoNanos()
	if r.cur <= 0 || openRuns.Load() > rawMaxRuns {
		r.waitFrom = start
		return 0, syscall.EAGAIN
	}
	r.yieldIv = max(r.yieldIv, minPollYield)
	end, yield, gosched := start+r.cur, start+r.yieldIv, start+pollGosched
	for {
		n, errno := r.sysRead(fd)
		if errno != syscall.EAGAIN {
			r.cur = r.busy
			r.met.busyPollHit()
			return n, errno
		}
		now := monoNanos()
		if now >= yield {
			osYield()
			after := monoNanos()
			if after-now > busyPollRan {
				r.yieldIv = minPollYield // another thread ran here: perhaps the peer
			} else {
				r.yieldIv = min(2*r.yieldIv, maxPollYield)
			}
			now = after
			yield = now + r.yieldIv
		}
		if now >= gosched {
			// A raw system call keeps the P: let the goroutines
			// queued behind this one run (a dispatcher that will
			// answer what the peer waits for, perhaps).
			runtime.Gosched()
			now = monoNanos()
			gosched = now + pollGosched
		}
		if now >= end {
			if r.cur /= 2; r.cur < minBusyPoll {
				r.cur = 0
			}
			r.waitFrom = start
			r.met.busyPollSleep()
			return 0, syscall.EAGAIN
		}
	}
}

// osYield gives this thread's CPU to another runnable thread, if any
// (sched_yield(2); it does not block).
func osYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// setBusyPoll makes reads of src that find the socket empty poll it for
// up to d (Config.BusyPoll), counting into met; src is a socket run's
// source (socketSource), not yet read by the session's reader.
func setBusyPoll(src io.Reader, d time.Duration, met *msgrMetrics) {
	if r, ok := src.(*rawReader); ok && d > 0 {
		r.busy, r.cur, r.met = int64(d), int64(d), met
	}
}
