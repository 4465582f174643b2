package inproc

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// pipe is one direction of a connection: a bounded byte queue from one
// endpoint's Write to the other's Read. Every field is guarded by mu.
// Waiters take the changed channel under mu, release mu and block on it;
// every state change closes it (broadcast).
type pipe struct {
	mu      sync.Mutex
	changed chan struct{} // nil until someone waits
	net     *Network      // for the per-write delay
	limit   int           // bytes buffered before Write blocks

	chunks []chunk // queued data, oldest first, from chunks[head]
	head   int
	size   int    // bytes in chunks
	spare  []byte // an emptied buffer kept for the next chunk

	wclosed bool  // the writing end closed: EOF after the data
	rclosed bool  // the reading end closed: writes fail, data discarded
	err     error // set once on reset; every operation then fails
	stalled bool  // partitioned: nothing is delivered
	writing bool  // a Write owns the pipe; others wait for it

	rdl, wdl time.Time // read and write deadlines; zero is none
}

// chunk is bytes b[off:] that the reader may take from time at on (the
// zero time: at once).
type chunk struct {
	b   []byte
	off int
	at  time.Time
}

// maxSpare is the largest emptied buffer a pipe keeps for reuse, so that
// idle connections do not pin large buffers.
const maxSpare = 64 << 10

func newPipe(n *Network, limit int) *pipe { return &pipe{net: n, limit: limit} }

// broadcast wakes every waiter. Call with mu held.
func (p *pipe) broadcast() {
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

// waitLocked releases mu until the state changes or until wake (if not
// zero), then takes mu again.
func (p *pipe) waitLocked(wake time.Time) {
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	ch := p.changed
	p.mu.Unlock()
	if wake.IsZero() {
		<-ch
	} else if d := time.Until(wake); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
	p.mu.Lock()
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// read implements Conn.Read for the endpoint that reads from p.
func (p *pipe) read(e *endpoint, b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		switch {
		case p.rclosed:
			return 0, e.opError("read", net.ErrClosed)
		case p.err != nil:
			return 0, e.opError("read", p.err)
		case len(b) == 0:
			return 0, nil
		}
		// As with the net package, an expired deadline fails the call even
		// if it could proceed.
		var now, wake time.Time
		if !p.rdl.IsZero() {
			now = time.Now()
			if !now.Before(p.rdl) {
				return 0, e.opError("read", os.ErrDeadlineExceeded)
			}
			wake = p.rdl
		}
		if !p.stalled && p.head < len(p.chunks) {
			at := p.chunks[p.head].at
			if !at.IsZero() && now.IsZero() {
				now = time.Now()
			}
			if at.IsZero() || !at.After(now) {
				return p.takeLocked(b, now), nil
			}
			wake = earliest(wake, at)
		}
		if !p.stalled && p.size == 0 && p.wclosed {
			return 0, io.EOF
		}
		p.waitLocked(wake)
	}
}

// takeLocked copies deliverable bytes into b. The first chunk is
// deliverable; now is the current time if any chunk carries a delivery
// time, or zero.
func (p *pipe) takeLocked(b []byte, now time.Time) int {
	n := 0
	for n < len(b) && p.head < len(p.chunks) {
		c := &p.chunks[p.head]
		if !c.at.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			if c.at.After(now) {
				break
			}
		}
		k := copy(b[n:], c.b[c.off:])
		n += k
		c.off += k
		if c.off == len(c.b) {
			if p.head == len(p.chunks)-1 && cap(c.b) <= maxSpare {
				p.spare = c.b[:0]
			}
			*c = chunk{}
			p.head++
		}
	}
	p.size -= n
	if p.head == len(p.chunks) {
		p.chunks, p.head = p.chunks[:0], 0
	}
	p.broadcast() // space for writers
	return n
}

// write implements Conn.Write for the endpoint that writes to p. One Write
// owns the pipe from its first byte to its last, so concurrent Writes are
// never interleaved.
func (p *pipe) write(e *endpoint, b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	owner := false
	defer func() {
		if owner {
			p.writing = false
			p.broadcast()
		}
	}()
	n := 0
	for {
		switch {
		case p.wclosed:
			return n, e.opError("write", net.ErrClosed)
		case p.err != nil:
			return n, e.opError("write", p.err)
		case p.rclosed:
			return n, e.opError("write", syscall.EPIPE)
		}
		var wake time.Time
		if !p.wdl.IsZero() {
			if !time.Now().Before(p.wdl) {
				return n, e.opError("write", os.ErrDeadlineExceeded)
			}
			wake = p.wdl
		}
		if n == len(b) {
			return n, nil
		}
		if !owner && !p.writing {
			owner, p.writing = true, true
		}
		if owner && p.size < p.limit {
			k := min(len(b)-n, p.limit-p.size)
			p.appendLocked(b[n : n+k])
			n += k
			if n == len(b) {
				return n, nil
			}
			continue
		}
		p.waitLocked(wake)
	}
}

// appendLocked queues a copy of b, deliverable after the network's delay.
func (p *pipe) appendLocked(b []byte) {
	var at time.Time
	if d := p.net.delayNow(); d > 0 {
		at = time.Now().Add(d)
	}
	p.size += len(b)
	p.broadcast() // data for the reader
	if i := len(p.chunks) - 1; i >= p.head && p.chunks[i].at.Equal(at) {
		c := &p.chunks[i]
		if cap(c.b)-len(c.b) < len(b) && c.off > 0 {
			// Reclaim the prefix the reader consumed before growing, so a
			// buffer that is read and written at once stays bounded.
			c.b = c.b[:copy(c.b, c.b[c.off:])]
			c.off = 0
		}
		c.b = append(c.b, b...)
		return
	}
	buf := p.spare
	p.spare = nil
	if cap(buf) < len(b) {
		size := len(b)
		if at.IsZero() {
			// Later writes may be appended to this chunk.
			size = max(size, min(4096, p.limit))
		}
		buf = make([]byte, 0, size)
	}
	if p.head > 0 && len(p.chunks) == cap(p.chunks) {
		// Slide the live chunks down rather than grow the array.
		k := copy(p.chunks, p.chunks[p.head:])
		clear(p.chunks[k:])
		p.chunks, p.head = p.chunks[:k], 0
	}
	p.chunks = append(p.chunks, chunk{b: append(buf, b...), at: at})
}

// closeRead is the reading end's Close: pending and future data is
// discarded and the writer's next Write fails.
func (p *pipe) closeRead() {
	p.mu.Lock()
	p.rclosed = true
	p.discardLocked()
	p.broadcast()
	p.mu.Unlock()
}

// closeWrite is the writing end's Close or CloseWrite: the reader gets
// io.EOF once it has drained the data.
func (p *pipe) closeWrite() {
	p.mu.Lock()
	p.wclosed = true
	p.broadcast()
	p.mu.Unlock()
}

// reset fails every pending and future operation with err.
func (p *pipe) reset(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.discardLocked()
	p.broadcast()
	p.mu.Unlock()
}

func (p *pipe) discardLocked() {
	p.chunks, p.head, p.size, p.spare = nil, 0, 0, nil
}

func (p *pipe) setStalled(s bool) {
	p.mu.Lock()
	p.stalled = s
	p.broadcast()
	p.mu.Unlock()
}

func (p *pipe) setReadDeadline(t time.Time) {
	p.mu.Lock()
	p.rdl = t
	p.broadcast()
	p.mu.Unlock()
}

func (p *pipe) setWriteDeadline(t time.Time) {
	p.mu.Lock()
	p.wdl = t
	p.broadcast()
	p.mu.Unlock()
}
