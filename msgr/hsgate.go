package msgr

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrHandshakeEvicted: an incoming connection still in its handshake was
// closed to make room for a new one, having been the longest idle at the
// bound (Config.MaxHandshakes).
var ErrHandshakeEvicted = errors.New("msgr: idle handshake evicted")

// hsGate bounds the incoming connections in their handshake (accepted,
// not yet attached to a session). At the bound a newcomer evicts the
// handshake that has been idle (received nothing) the longest, if it has
// been idle at least evictIdle, and takes its slot; otherwise it waits
// for a slot. Waiters are served newest first: the connections that have
// waited longest are the likeliest to be idle ones piled up by a flood,
// and the newest the likeliest to be a client still there; a burst of
// honest clients drains all the same, each within its handshake timeout.
// The newest waiter also evicts idle handshakes as they become
// evictable. At most 4×max sockets wait; beyond that the one waiting
// longest is dropped. Waiting holds only the socket: nothing is read or
// allocated for a connection before it has a slot. So idle connections
// lock no honest client out for longer than about evictIdle.
type hsGate struct {
	max       int
	evictIdle time.Duration
	clock     Clock

	mu       sync.Mutex
	active   map[*hsEntry]struct{}
	reserved int         // slots granted to waiters not yet awake
	waiters  []*hsWaiter // oldest first; served from the end
}

// hsEntry is one handshake holding a slot.
type hsEntry struct {
	nc      net.Conn
	last    atomic.Int64 // unix ns of the last byte received
	evicted atomic.Bool
}

// hsWaiter is a connection waiting for a slot; granted and dropped are
// guarded by hsGate.mu.
type hsWaiter struct {
	wake    chan struct{} // buffered: a state change or a turn at the top
	granted bool
	dropped bool
}

func newHSGate(max int, evictIdle time.Duration, clock Clock) *hsGate {
	return &hsGate{max: max, evictIdle: evictIdle, clock: clock, active: make(map[*hsEntry]struct{})}
}

func (w *hsWaiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// admit waits for a slot for nc until ctx ends and returns its entry.
func (g *hsGate) admit(ctx context.Context, nc net.Conn) (*hsEntry, error) {
	e := &hsEntry{nc: nc}
	e.last.Store(g.clock.Now().UnixNano())
	g.mu.Lock()
	if len(g.active)+g.reserved < g.max && len(g.waiters) == 0 {
		g.active[e] = struct{}{}
		g.mu.Unlock()
		return e, nil
	}
	wait := g.evictLocked(g.clock.Now())
	if wait == 0 {
		g.active[e] = struct{}{}
		g.mu.Unlock()
		return e, nil
	}
	if len(g.waiters) >= 4*g.max {
		old := g.waiters[0]
		g.waiters = g.waiters[1:]
		old.dropped = true
		old.signal()
	}
	w := &hsWaiter{wake: make(chan struct{}, 1)}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	for {
		if wait <= 0 {
			wait = g.evictIdle
		}
		t := g.clock.NewTimer(wait)
		select {
		case <-w.wake:
		case <-t.C():
		case <-ctx.Done():
		}
		t.Stop()
		g.mu.Lock()
		switch {
		case w.granted:
			g.reserved--
			g.active[e] = struct{}{}
			g.mu.Unlock()
			return e, nil
		case w.dropped:
			g.mu.Unlock()
			return nil, ErrHandshakeEvicted
		case ctx.Err() != nil:
			g.removeWaiterLocked(w)
			g.mu.Unlock()
			return nil, ErrHandshakeTimeout
		case g.waiters[len(g.waiters)-1] == w:
			// The newest waiter: take a free slot, or evict an idle
			// handshake if there is one by now.
			if len(g.active)+g.reserved < g.max {
				wait = 0
			} else {
				wait = g.evictLocked(g.clock.Now())
			}
			if wait == 0 {
				g.removeWaiterLocked(w)
				g.active[e] = struct{}{}
				g.mu.Unlock()
				return e, nil
			}
		default:
			wait = g.evictIdle
		}
		g.mu.Unlock()
	}
}

// removeWaiterLocked takes w out of the queue and lets the new newest
// waiter look for a slot.
func (g *hsGate) removeWaiterLocked(w *hsWaiter) {
	for i, x := range g.waiters {
		if x == w {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			break
		}
	}
	if n := len(g.waiters); n > 0 {
		g.waiters[n-1].signal()
	}
}

// evictLocked closes the longest-idle handshake if it has been idle at
// least evictIdle and returns 0; otherwise it returns how long until the
// longest-idle one becomes evictable (or -1 if none is active).
func (g *hsGate) evictLocked(now time.Time) time.Duration {
	var oldest *hsEntry
	for e := range g.active {
		if oldest == nil || e.last.Load() < oldest.last.Load() {
			oldest = e
		}
	}
	if oldest == nil {
		return -1
	}
	idle := time.Duration(now.UnixNano() - oldest.last.Load())
	if idle < g.evictIdle {
		return g.evictIdle - idle
	}
	delete(g.active, oldest)
	oldest.evicted.Store(true)
	_ = oldest.nc.Close()
	return 0
}

// release gives e's slot up (the handshake ended either way): to the
// newest waiter if any.
func (g *hsGate) release(e *hsEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.active[e]; !ok {
		return // evicted: its slot went to the evictor
	}
	delete(g.active, e)
	if n := len(g.waiters); n > 0 {
		w := g.waiters[n-1]
		g.waiters = g.waiters[:n-1]
		w.granted = true
		g.reserved++
		w.signal()
	}
}

// handshaking returns how many handshakes hold a slot.
func (g *hsGate) handshaking() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.active)
}

// hsReader is the reader of an incoming socket: during the handshake it
// records when bytes last arrived (for eviction); afterwards (entry nil)
// it only forwards. It is used by the socket's reader goroutine alone.
type hsReader struct {
	r     io.Reader
	entry *hsEntry
	clock Clock
}

func (h *hsReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 && h.entry != nil {
		h.entry.last.Store(h.clock.Now().UnixNano())
	}
	return n, err
}

// Handshakes returns how many incoming connections are in their
// handshake now (at most Config.MaxHandshakes).
func (m *Messenger) Handshakes() int { return m.hs.handshaking() }
