package msgr

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ErrHandshakeEvicted: an incoming connection still in its handshake was
// closed to make room for a new one, having been the longest idle at the
// bound (Config.MaxHandshakes).
var ErrHandshakeEvicted = errors.New("msgr: idle handshake evicted")

// hsGate bounds the incoming connections in their handshake (accepted,
// not yet attached to a session), and shares the slots fairly among the
// sources they come from (an IPv4 address, an IPv6 /64; every local
// socket is one source).
//
// Under the bound a connection takes a slot at once. At the bound it
// waits, holding only its socket: nothing is read or allocated for a
// connection before it has a slot. A slot that frees up, or that can be
// made free, goes to the waiter whose source holds the fewest slots,
// the newest of those first: the connections that have waited longest
// are the likeliest to be idle ones piled up by a flood, and the newest
// the likeliest to be a client still there. A slot is made free for
// that waiter by evicting
//   - the handshake that has received nothing for longest, if for at
//     least evictIdle, from any source; or else
//   - a handshake of a source that holds at least two slots more than
//     the waiter's, once it has run for evictGrace: the one of the
//     source holding most, the oldest first.
//
// So idle connections lock no honest client out for longer than about
// evictIdle, and a source that keeps every slot busy with handshakes
// that trickle bytes (never idle, never done) loses a slot to each
// waiter from another source, while clients of one source, a burst or
// a host's many connections, only ever queue behind each other. At most
// 4×max sockets wait; beyond that the oldest waiter of the source with
// the most waiters is dropped.
type hsGate struct {
	max       int
	evictIdle time.Duration
	clock     Clock

	mu       sync.Mutex
	active   map[*hsEntry]struct{}
	held     map[string]int // slots held (active or granted) by source
	reserved int            // slots granted to waiters not yet awake
	waiters  []*hsWaiter    // oldest first
}

// evictGrace is how long a handshake of a source holding more than its
// share of the slots may run before a waiter from another source may
// evict it: an honest handshake is done in a few round trips.
const evictGrace = 100 * time.Millisecond

// hsEntry is one handshake holding a slot.
type hsEntry struct {
	nc      net.Conn
	src     string
	start   int64        // unix ns when it took its slot
	last    atomic.Int64 // unix ns of the last byte received
	evicted atomic.Bool
}

// hsWaiter is a connection waiting for a slot; granted and dropped are
// guarded by hsGate.mu.
type hsWaiter struct {
	wake    chan struct{} // buffered: a state change
	src     string
	granted bool
	dropped bool
}

func newHSGate(max int, evictIdle time.Duration, clock Clock) *hsGate {
	return &hsGate{max: max, evictIdle: evictIdle, clock: clock,
		active: make(map[*hsEntry]struct{}), held: make(map[string]int)}
}

func (w *hsWaiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// sourceOf names the source a connection comes from, for the gate's
// fair share: an IPv4 address, an IPv6 /64 (what one host or site is
// given), "local" for the rest.
func sourceOf(nc net.Conn) string {
	ta, ok := nc.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return "local"
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return "local"
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// admit waits for a slot for nc until ctx ends and returns its entry.
func (g *hsGate) admit(ctx context.Context, nc net.Conn) (*hsEntry, error) {
	now := g.clock.Now().UnixNano()
	e := &hsEntry{nc: nc, src: sourceOf(nc), start: now}
	e.last.Store(now)
	g.mu.Lock()
	if len(g.active)+g.reserved < g.max && len(g.waiters) == 0 {
		g.held[e.src]++
		g.addLocked(e, now)
		g.mu.Unlock()
		return e, nil
	}
	w := &hsWaiter{wake: make(chan struct{}, 1), src: e.src}
	g.waiters = append(g.waiters, w)
	if len(g.waiters) > 4*g.max {
		g.dropLocked()
	}
	for {
		wait := g.fillLocked(g.clock.Now().UnixNano(), w)
		switch {
		case w.granted:
			g.reserved--
			g.addLocked(e, g.clock.Now().UnixNano())
			g.mu.Unlock()
			return e, nil
		case w.dropped:
			g.mu.Unlock()
			return nil, ErrHandshakeEvicted
		case ctx.Err() != nil:
			g.removeWaiterLocked(w)
			g.mu.Unlock()
			return nil, ErrHandshakeTimeout
		}
		g.mu.Unlock()
		t := g.clock.NewTimer(wait)
		select {
		case <-w.wake:
		case <-t.C():
		case <-ctx.Done():
		}
		t.Stop()
		g.mu.Lock()
	}
}

// addLocked gives e the slot counted for it in held.
func (g *hsGate) addLocked(e *hsEntry, now int64) {
	e.start = now
	g.active[e] = struct{}{}
}

// fillLocked hands out the slots that are free or can be made free to
// the best waiters, and returns how long the waiter self should sleep
// before it looks again: until the next handshake becomes evictable for
// it, if it is the best waiter, else evictIdle.
func (g *hsGate) fillLocked(now int64, self *hsWaiter) time.Duration {
	for len(g.waiters) > 0 {
		w, i := g.bestWaiterLocked()
		if len(g.active)+g.reserved >= g.max {
			if wait := g.evictForLocked(now, w); wait > 0 {
				if w == self {
					return wait
				}
				return g.evictIdle
			}
		}
		g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
		w.granted = true
		g.reserved++
		g.held[w.src]++
		w.signal()
	}
	return g.evictIdle
}

// bestWaiterLocked returns the waiter whose source holds the fewest
// slots, the newest of those, and its index.
func (g *hsGate) bestWaiterLocked() (*hsWaiter, int) {
	bi := len(g.waiters) - 1
	best := g.held[g.waiters[bi].src]
	for i := bi - 1; i >= 0 && best > 0; i-- {
		if h := g.held[g.waiters[i].src]; h < best {
			bi, best = i, h
		}
	}
	return g.waiters[bi], bi
}

// evictForLocked makes a slot free for w by evicting a handshake (see
// hsGate) and returns 0, or returns how long until one becomes
// evictable for w.
func (g *hsGate) evictForLocked(now int64, w *hsWaiter) time.Duration {
	mine := g.held[w.src]
	var idlest, heavy *hsEntry
	wait := g.evictIdle
	for e := range g.active {
		if idlest == nil || e.last.Load() < idlest.last.Load() {
			idlest = e
		}
		if h := g.held[e.src]; h >= mine+2 {
			age := time.Duration(now - e.start)
			if age < evictGrace {
				wait = min(wait, evictGrace-age)
				continue
			}
			if heavy == nil || h > g.held[heavy.src] || h == g.held[heavy.src] && e.start < heavy.start {
				heavy = e
			}
		}
	}
	victim := heavy
	if idlest != nil {
		if idle := time.Duration(now - idlest.last.Load()); idle >= g.evictIdle {
			victim = idlest
		} else {
			wait = min(wait, g.evictIdle-idle)
		}
	}
	if victim == nil {
		return max(wait, time.Millisecond)
	}
	g.removeLocked(victim)
	victim.evicted.Store(true)
	_ = victim.nc.Close()
	return 0
}

// removeLocked takes e's slot away from it.
func (g *hsGate) removeLocked(e *hsEntry) {
	delete(g.active, e)
	if g.held[e.src]--; g.held[e.src] <= 0 {
		delete(g.held, e.src)
	}
}

// dropLocked drops the oldest waiter of the source with the most
// waiters (the queue is full).
func (g *hsGate) dropLocked() {
	n := map[string]int{}
	top := ""
	for _, w := range g.waiters {
		if n[w.src]++; n[w.src] > n[top] {
			top = w.src
		}
	}
	for i, w := range g.waiters {
		if w.src == top {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			w.dropped = true
			w.signal()
			return
		}
	}
}

// removeWaiterLocked takes w out of the queue.
func (g *hsGate) removeWaiterLocked(w *hsWaiter) {
	for i, x := range g.waiters {
		if x == w {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			break
		}
	}
}

// release gives e's slot up (the handshake ended either way), to the
// best waiter if any.
func (g *hsGate) release(e *hsEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.active[e]; !ok {
		return // evicted: its slot went to the evictor's waiter
	}
	g.removeLocked(e)
	g.fillLocked(g.clock.Now().UnixNano(), nil)
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
