// Package window is the flow control of one context's bulk transfers:
// each transfer keeps at most Window bytes in flight (asked for or sent,
// and not yet landed), the transfers on one connection at most Conn in
// all, and the context's transfers at most Context in all. A transfer
// that a shared window stops waits (it is parked), and the bytes given
// back go to the parked transfers first, a chunk each in turn. It is a
// pure state machine: no I/O, no goroutines, no clock, no locks. Its
// inputs are Issue, Pump, Release and End; its outputs are grants (a
// span of a transfer to ask for or send now), which the caller turns
// into messages.
//
// A window that holds nothing always admits one chunk, however large,
// so that a limit below a chunk's size cannot stop a transfer for ever.
package window

// Limits are the three windows, in bytes.
type Limits struct {
	Window, Conn, Context int64
}

// Flow is one transfer's part: it moves Len bytes in chunks of Chunk on
// connection Conn; Owner is the caller's transfer, handed back in grants.
type Flow[C comparable, T any] struct {
	Conn  C
	Owner T
	Len   int64
	Chunk int64
	// Next is the next byte to grant; the caller may move it to Len
	// (nothing to grant: the peer pulls it all).
	Next     int64
	inflight int64
	parked   bool
	pumped   bool // granted a chunk by the Pump in progress
	ended    bool
}

// InFlight returns the bytes granted and not yet released.
func (f *Flow[C, T]) InFlight() int64 { return f.inflight }

// Grant is a span of a flow's bytes to ask for or send now.
type Grant[C comparable, T any] struct {
	F        *Flow[C, T]
	Pos, Len int64
}

// Windows is one context's windows. The zero value is not usable: use
// New.
type Windows[C comparable, T any] struct {
	lim      Limits
	inflight int64
	perConn  map[C]int64
	parked   []*Flow[C, T]
}

// New returns windows with the limits lim.
func New[C comparable, T any](lim Limits) *Windows[C, T] {
	return &Windows[C, T]{lim: lim, perConn: map[C]int64{}}
}

// InFlight returns the context's bytes in flight; ConnInFlight one
// connection's; Parked the flows waiting for a shared window.
func (w *Windows[C, T]) InFlight() int64               { return w.inflight }
func (w *Windows[C, T]) ConnInFlight(c C) int64        { return w.perConn[c] }
func (w *Windows[C, T]) Parked() int                   { return len(w.parked) }
func (w *Windows[C, T]) fits(cur, n, limit int64) bool { return cur == 0 || cur+n <= limit }

// Issue grants f as many chunks as its own window and the shared ones
// allow, appending them to out; f is parked if a shared window is what
// stops it.
func (w *Windows[C, T]) Issue(f *Flow[C, T], out []Grant[C, T]) []Grant[C, T] {
	for !f.ended && f.Next < f.Len {
		n := min(f.Chunk, f.Len-f.Next)
		if !w.fits(f.inflight, n, w.lim.Window) {
			break // its own window: a release grants more
		}
		if !w.fits(w.inflight, n, w.lim.Context) || !w.fits(w.perConn[f.Conn], n, w.lim.Conn) {
			if !f.parked {
				f.parked = true
				w.parked = append(w.parked, f)
			}
			break
		}
		out = w.grant(f, n, out)
	}
	return out
}

// grant grants f its next n bytes.
func (w *Windows[C, T]) grant(f *Flow[C, T], n int64, out []Grant[C, T]) []Grant[C, T] {
	out = append(out, Grant[C, T]{F: f, Pos: f.Next, Len: n})
	f.Next += n
	f.inflight += n
	w.inflight += n
	w.perConn[f.Conn] += n
	return out
}

// Pump gives the shared windows to the parked flows, a chunk each in
// turn, until none can take more, appending the grants to out. A parked
// flow that got a chunk leaves the queue (its next Issue parks it again
// if it must wait).
func (w *Windows[C, T]) Pump(out []Grant[C, T]) []Grant[C, T] {
	if len(w.parked) == 0 {
		return out
	}
	for progress := true; progress; {
		progress = false
		for _, f := range w.parked {
			if f.ended || f.Next >= f.Len {
				continue
			}
			n := min(f.Chunk, f.Len-f.Next)
			if !w.fits(f.inflight, n, w.lim.Window) || !w.fits(w.inflight, n, w.lim.Context) || !w.fits(w.perConn[f.Conn], n, w.lim.Conn) {
				continue
			}
			out = w.grant(f, n, out)
			f.pumped = true
			progress = true
		}
	}
	keep := w.parked[:0]
	for _, f := range w.parked {
		if !f.ended && f.Next < f.Len && !f.pumped {
			keep = append(keep, f)
		} else {
			f.parked = false
		}
		f.pumped = false
	}
	clear(w.parked[len(keep):])
	w.parked = keep
	return out
}

// Release gives back n bytes of f's (at most what it has in flight) and
// returns how many it gave back.
func (w *Windows[C, T]) Release(f *Flow[C, T], n int64) int64 {
	n = min(n, f.inflight)
	if n <= 0 {
		return 0
	}
	f.inflight -= n
	w.inflight -= n
	if v := w.perConn[f.Conn] - n; v > 0 {
		w.perConn[f.Conn] = v
	} else {
		delete(w.perConn, f.Conn)
	}
	return n
}

// End ends f: it gives back all it has in flight (returned) and is
// granted nothing more. It reports whether flows are parked (a Pump may
// grant them what f gave back, or its place in the queue).
func (w *Windows[C, T]) End(f *Flow[C, T]) (released int64, pumpDue bool) {
	released = w.Release(f, f.inflight)
	f.ended = true
	return released, len(w.parked) > 0
}
