package msgr

import (
	"bufio"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Parking: what an idle connection keeps.
//
// A connection whose reader goroutine has received nothing but control
// frames for parkAfter (keepalives and their acks, which an idle
// connection exchanges every few seconds each way) parks its reader as
// soon as the socket has nothing more to read: the goroutine gives its
// read buffer back (readBufs) and exits, unwinding the stack the
// handshake and the message path grew, and the socket is watched for
// readability by the process's poller (one epoll set and one goroutine
// on Linux, park_linux.go). A reader that has received a message and
// then went silent is asked to park by the messenger's timer
// (readRole.parkIdle) once it has been idle for parkAfter. A parked
// connection costs no goroutine, no stack and no read buffer: what is
// left is its state on the heap.
//
// A reader goroutine is started anew (resumeReader), holding the reader
// role as before, when the socket becomes readable (or reports an error
// or its end), when a goroutine in Await wants the role (kickLocked),
// and when the socket is failed (socketRun.fail: keepalive timeout, slow
// consumer, close, shutdown), so that the socket's end runs its usual
// path: the goroutine reads the error, stops the writer and runs
// socketFailed, and for an outgoing connection goes on with its
// connector loop (dialLoop), whose goroutine exited with the reader's.
// The timer's keepalives, timeouts and slow-consumer checks do not need
// the reader and go on as before. Where the poller is not available
// (other systems, or it failed), a parked reader waits on a goroutine of
// its own started afresh (waitParked), whose stack stays small.

// errParked is returned up the reader goroutine's stack when it parks:
// the goroutine exits, and the one started when the socket is readable
// carries on (resumeReader).
var errParked = errors.New("msgr: reader parked")

// parkAfter is how long a connection must have received nothing (or
// nothing but keepalives) before its reader parks.
var parkAfter atomic.Int64 // ns; a second unless a test changes it

func init() { parkAfter.Store(int64(time.Second)) }

// readBufs and bigReadBufs hold the read buffers of parked connections,
// so that ten thousand idle connections do not each keep one, of which
// the pages they touched are resident. A socket's reader starts with a
// small buffer (readBufSmall: a handshake, a message now and then, the
// keepalives) and takes a large one (readBufSize) once frames keep
// arriving faster than it reads them, or keep being larger than the small
// buffer (frameReader.growReadBuf). A large
// buffer freed by the collector and allocated again is zeroed whole, all
// its pages then resident: 64 KiB for every connection that had just
// received something when ten thousand were set up.
var (
	readBufs    = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSmall) }}
	bigReadBufs = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
)

// readBufSmall is the size of the read buffer a socket's reader starts
// with: room for the small frames of a handshake and an idle session. A
// connection holds it from its first frame until it parks, a second
// after its last message, so while connections are being set up about a
// second's worth of them hold one each, and those given back stay in the
// pool until the collector runs twice. At 4 KiB that was about a KiB of
// the client's resident memory per connection in BenchmarkIdleConnections
// (10,000 connections set up in 8 s: client median 11.71 -> 10.67 KiB,
// server 11.1 -> 10.4, 5 and 6 runs).
const readBufSmall = 1 << 10

// growAfter is how many frames in a row a reader must find already
// buffered after the one it read, or find larger than its small buffer,
// before it takes a large buffer.
const growAfter = 4

// getReadBuf returns a small read buffer in front of src, one a parked
// connection gave back if there is one: a new connection then reuses
// pages already resident rather than touching fresh ones.
func getReadBuf(src io.Reader) *bufio.Reader {
	br := readBufs.Get().(*bufio.Reader)
	br.Reset(src)
	return br
}

// putReadBuf gives a read buffer back to its pool.
func putReadBuf(br *bufio.Reader) {
	br.Reset(nil)
	if br.Size() >= readBufSize {
		bigReadBufs.Put(br)
	} else {
		readBufs.Put(br)
	}
}

// growReadBuf replaces fr's small read buffer by a large one, which takes
// over what the small one holds. Only the role's holder calls it, at a
// frame boundary.
func (fr *frameReader) growReadBuf() {
	small := fr.br
	big := bigReadBufs.Get().(*bufio.Reader)
	if n := small.Buffered(); n == 0 {
		big.Reset(fr.r.src)
	} else {
		held, _ := small.Peek(n)
		big.Reset(&carryReader{held: held, r: fr.r.src})
		// One read of the carryReader moves all of it (n is less than the
		// large buffer's size), so nothing stays behind it that a read
		// straight from the socket (lowat.readCRC) would skip.
		_, _ = big.Peek(n)
	}
	putReadBuf(small)
	fr.br, fr.ahead = big, 0
	readBufGrows.Add(1)
}

// readBufGrows counts the readers that took a large buffer (tests).
var readBufGrows atomic.Int64

// carryReader returns held, then reads from r: the source of a read
// buffer that took over another's buffered bytes.
type carryReader struct {
	held []byte
	r    io.Reader
}

func (c *carryReader) Read(p []byte) (int, error) {
	if len(c.held) > 0 {
		n := copy(p, c.held)
		c.held = c.held[n:]
		if len(c.held) == 0 {
			c.held = nil
		}
		return n, nil
	}
	return c.r.Read(p)
}

// canPark reports whether r's reader may park: an msgr2 socket.
func canPark(r *socketRun) bool { return r.raw != nil && r.e != nil }

// quiet reports whether the frames read since the last message have been
// control frames only, for parkAfter at least: the connection is idle
// but for keepalives.
func (fr *frameReader) quiet() bool {
	return fr.read && fr.lastFrame-fr.lastMsg >= parkAfter.Load()
}

// parkLocked parks the reader goroutine, which holds the role with
// nothing buffered: it gives the read buffer back (and lets go of the
// frame reader's scratch and the engine's events), has the poller (or a
// goroutine of its own) watch the socket, trims the write state, and
// returns errParked, on which the goroutine unwinds and exits. A reader
// started anew may run as soon as rr.mu is released: nothing of the
// reader's is touched after that. rr.mu is held; it is released.
func (rr *readRole) parkLocked(r *socketRun, fr *frameReader) (bool, error) {
	br := fr.br
	fr.br, fr.read = nil, false
	// The control-frame scratch and the engine's event array: a resumed
	// reader allocates them again (BenchmarkIdleConnections).
	fr.scratch = nil
	r.e.Trim()
	rr.waiting, rr.parked = true, true
	rr.watched = poller.watch(r)
	if !rr.watched {
		go fr.c.waitParked(r)
	}
	rr.mu.Unlock()
	putReadBuf(br)
	fr.c.trimWriteState()
	return false, errParked
}

// trimWriteState drops what the write side keeps from batch to batch
// (the write buffer, grown to the largest batch of small messages, and
// the batch's slices) if nobody is writing: the connection is idle, and
// its next batch allocates them again. It is the reader's last act when
// it parks, safe whoever reads the socket by then, because the write
// state is its owner's (write.go) and this takes it only while free.
func (c *Conn) trimWriteState() {
	c.mu.Lock()
	if c.owner == ownNone {
		w := &c.ws
		w.wbuf, w.iov, w.batch, w.fix, w.iovecs = nil, nil, nil, nil, nil
	}
	c.mu.Unlock()
}

// resumeLocked starts a reader goroutine for r, whose reader is parked in
// the poller. rr.mu is held.
func (rr *readRole) resumeLocked(r *socketRun) {
	rr.waiting, rr.parked = false, false
	rr.watched = false
	poller.forget(rr.token)
	go rr.fr.c.resumeReader(r, nil)
}

// wakeParked starts the reader of a failed socket if it is parked in the
// poller, which does not report a socket closed under it.
func (rr *readRole) wakeParked(r *socketRun) {
	rr.mu.Lock()
	if rr.parked && rr.watched {
		rr.resumeLocked(r)
	}
	rr.mu.Unlock()
}

// unpark is the poller's: r's socket is readable (or failed). token is
// the key it was watched under; a stale one (the reader was started
// anew meanwhile, and may have parked again under another) is ignored.
func (rr *readRole) unpark(r *socketRun, token int32) {
	rr.mu.Lock()
	if rr.parked && rr.watched && rr.token == token {
		rr.waiting, rr.parked, rr.watched = false, false, false
		go rr.fr.c.resumeReader(r, nil)
	}
	rr.mu.Unlock()
}

// waitParked is a parked reader's wait where the poller does not watch
// it: a goroutine started for the wait alone, whose stack stays small,
// waits until the socket is readable without reading, then reads on.
func (c *Conn) waitParked(r *socketRun) {
	rr := &r.role
	err := r.raw.Read(readableFD)
	rr.mu.Lock()
	rr.waiting, rr.parked = false, false
	kicked := rr.kicked
	rr.kicked = false
	rr.mu.Unlock()
	if kicked {
		_ = r.nc.SetReadDeadline(time.Time{})
		if isTimeout(err) {
			err = nil // interrupted to yield the role: read on
		}
	}
	c.resumeReader(r, err)
}

// resumeReader is the reader goroutine of a parked connection, started
// anew: it takes a read buffer and reads on, then runs the end of the
// socket as runSocket would have, and the rest of the connector loop of
// an outgoing connection. werr is the error the wait for the socket
// ended with.
func (c *Conn) resumeReader(r *socketRun, werr error) {
	rr := &r.role
	fr := rr.fr
	fr.br = getReadBuf(r.src)
	err := werr
	if err == nil {
		err = c.readFrames(r, fr)
		if err == errParked {
			return
		}
	} else {
		rr.exit()
	}
	c.endSocket(r, err)
	if r.dialed && c.dialLoop(true) {
		return
	}
	c.m.wg.Done()
}
