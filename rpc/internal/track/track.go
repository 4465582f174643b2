// Package track is the RPC tracker of one context: request ids, per
// endpoint credits with a wait queue, and a timer heap. It is CaRT's
// crt_context_req_track / crt_context_req_untrack and
// crt_context_timeout_check as a pure state machine: it does no I/O, starts
// no goroutines, reads no clock and takes no locks. Its inputs are calls
// (Submit, Reply, Finish, Expire with the current time, FailIf, SetCredits)
// and its outputs are a Ready batch: the entries to transmit now and the
// entries that completed, with the reason. The caller holds its own lock
// around a Tracker, then performs the batch outside that lock.
//
// Every entry completes exactly once: the first of its reply, its
// deadline, an abort or a failure wins, and later events for the same id
// find nothing (Reply reports a late reply).
//
// Time is an int64 in nanoseconds on any monotonic scale the caller
// chooses; a deadline of 0 means none.
package track

// Reason says why an entry completed.
type Reason uint8

// Completion reasons.
const (
	OK       Reason = iota // the reply arrived (or a one-way request was sent)
	TimedOut               // the deadline passed first
	Canceled               // aborted by the caller
	Failed                 // transmission failed or the target is unreachable
	Excluded               // the target left the group
	Shutdown               // the context is being destroyed
)

var reasonNames = [...]string{"ok", "timed out", "canceled", "failed", "excluded", "shutdown"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason?"
}

// State is where an entry is.
type State uint8

// Entry states.
const (
	Free   State = iota // not tracked (never submitted, or completed)
	Queued              // waiting for a credit on its endpoint's wait queue
	Sent                // holds a credit: transmitted or being transmitted
)

// Entry is one tracked request. Embed it (or point to it) from the
// request object; V links back to that object. An Entry must not be
// submitted again before it completes.
type Entry[T any] struct {
	// V is the caller's request; the tracker never looks at it.
	V T

	id       uint64
	deadline int64
	ep       *endpoint[T]
	prev     *Entry[T] // wait queue links
	next     *Entry[T]
	hidx     int32 // index in the heap, -1 when not in it
	state    State
	front    bool
	bypass   bool
}

// ID returns the id Submit assigned (0 before).
func (e *Entry[T]) ID() uint64 { return e.id }

// Key returns the endpoint key it was submitted to.
func (e *Entry[T]) Key() uint64 {
	if e.ep == nil {
		return 0
	}
	return e.ep.key
}

// Deadline returns the deadline it was submitted with (0: none).
func (e *Entry[T]) Deadline() int64 { return e.deadline }

// State returns the entry's state.
func (e *Entry[T]) State() State { return e.state }

// Completion is one completed entry and why.
type Completion[T any] struct {
	E      *Entry[T]
	Reason Reason
	// WasSent is set if the entry was Sent (not Queued) when it
	// completed, that is, it may have been transmitted.
	WasSent bool
}

// SubmitFlags modify Submit.
type SubmitFlags uint8

// Submit flags.
const (
	// Front queues the entry at the head of its endpoint's wait queue
	// (CaRT's QUEUE_FRONT).
	Front SubmitFlags = 1 << iota
	// Bypass sends the entry at once without taking a credit (CaRT's URI
	// lookups bypass tracking this way).
	Bypass
)

// Ready is the output of the tracker's operations: entries to transmit
// now (in order) and entries that completed (in order). Operations append
// to it; the caller performs it and calls Reset before reusing it.
type Ready[T any] struct {
	Send []*Entry[T]
	Done []Completion[T]
}

// Reset empties r, keeping its capacity.
func (r *Ready[T]) Reset() {
	clear(r.Send)
	clear(r.Done)
	r.Send = r.Send[:0]
	r.Done = r.Done[:0]
}

// Empty reports whether r holds nothing.
func (r *Ready[T]) Empty() bool { return len(r.Send) == 0 && len(r.Done) == 0 }

// Stats are the tracker's counters (CaRT's CM_* context counters).
type Stats struct {
	Submitted   uint64 // requests submitted
	Queued      uint64 // requests that had to wait for a credit
	Sent        uint64 // requests that got a credit
	Replied     uint64 // completed by their reply
	TimedOut    uint64 // completed by their deadline
	Canceled    uint64 // completed by an abort
	Failed      uint64 // completed by a failure
	Excluded    uint64 // completed because their target left
	Shutdown    uint64 // completed by the context's destruction
	LateReplies uint64 // replies for ids no longer tracked (or not yet sent)
	InFlight    int    // holding a credit now
	Waiting     int    // on wait queues now
	MaxWaiting  int    // most ever waiting at once
}

// EndpointStats are one endpoint's credit counters (CaRT's
// crt_ep_inflight: epi_req_num, epi_reply_num, the wait queue).
type EndpointStats struct {
	InFlight    int    // requests holding a credit now
	Waiting     int    // requests on the wait queue now
	MaxInFlight int    // most ever in flight at once
	MaxWaiting  int    // longest the wait queue has been
	Sent        uint64 // requests that got a credit
	Completed   uint64 // requests that returned one
	Queued      uint64 // requests that had to wait
}

type endpoint[T any] struct {
	key        uint64
	head, tail *Entry[T]
	st         EndpointStats
	touched    bool // on Tracker.touched
}

type slot[T any] struct {
	e   *Entry[T]
	gen uint32
}

// Tracker tracks the requests of one context. The zero value is not
// usable; call New. Not safe for concurrent use.
type Tracker[T any] struct {
	credits int
	genBase uint32 // the generation a new slot starts from (SetGenBase)
	slots   []slot[T]
	free    []uint32 // free slot indexes, used LIFO
	eps     map[uint64]*endpoint[T]
	heap    []*Entry[T]
	touched []*endpoint[T] // endpoints to drain after a batch of completions
	stats   Stats
}

// New returns a tracker allowing credits requests in flight per endpoint
// (0: unlimited).
func New[T any](credits int) *Tracker[T] {
	return &Tracker[T]{credits: max(credits, 0), eps: make(map[uint64]*endpoint[T])}
}

// SetGenBase makes the generations of the tracker's slots, the high half
// of its ids, start after g rather than after 0. A tracker that takes
// over another's ids (a context reusing a closed context's tag) is given
// a different base, so that late replies to the old one's entries do not
// match the new one's. Call it before the first Submit.
func (t *Tracker[T]) SetGenBase(g uint32) { t.genBase = g }

// Credits returns the in-flight limit per endpoint (0: unlimited).
func (t *Tracker[T]) Credits() int { return t.credits }

// Len returns the number of entries tracked (queued or sent).
func (t *Tracker[T]) Len() int { return t.stats.InFlight + t.stats.Waiting }

// Stats returns the counters.
func (t *Tracker[T]) Stats() Stats { return t.stats }

// EndpointStats returns the counters of the endpoint key.
func (t *Tracker[T]) EndpointStats(key uint64) EndpointStats {
	if ep, ok := t.eps[key]; ok {
		return ep.st
	}
	return EndpointStats{}
}

// Lookup returns the tracked entry with id, or nil if no entry with that
// id is tracked (it completed, or never existed).
func (t *Tracker[T]) Lookup(id uint64) *Entry[T] {
	idx := uint32(id) - 1
	if uint64(idx) >= uint64(len(t.slots)) {
		return nil
	}
	s := &t.slots[idx]
	if s.e == nil || s.gen != uint32(id>>32) {
		return nil
	}
	return s.e
}

// Submit starts tracking e towards endpoint key with the given deadline
// (0: none) and returns its id, never 0. If the endpoint has a credit
// free (or flags has Bypass), e is Sent and appended to out.Send;
// otherwise it waits on the endpoint's queue, at its head if flags has
// Front. A queued entry's deadline runs while it waits.
func (t *Tracker[T]) Submit(e *Entry[T], key uint64, deadline int64, flags SubmitFlags, out *Ready[T]) uint64 {
	var idx uint32
	if n := len(t.free); n > 0 {
		idx = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		t.slots = append(t.slots, slot[T]{gen: t.genBase})
		idx = uint32(len(t.slots) - 1)
	}
	s := &t.slots[idx]
	s.gen++
	if s.gen == 0 {
		s.gen = 1
	}
	s.e = e
	e.id = uint64(s.gen)<<32 | uint64(idx+1)
	e.deadline = deadline
	e.front = flags&Front != 0
	e.bypass = flags&Bypass != 0
	e.prev, e.next = nil, nil
	e.hidx = -1
	ep := t.eps[key]
	if ep == nil {
		ep = &endpoint[T]{key: key}
		t.eps[key] = ep
	}
	e.ep = ep
	t.stats.Submitted++
	if deadline != 0 {
		t.heapPush(e)
	}
	if e.bypass {
		e.state = Sent
		t.stats.InFlight++
		t.stats.Sent++
		out.Send = append(out.Send, e)
	} else if t.credits == 0 || ep.st.InFlight < t.credits {
		t.send(e, out)
	} else {
		t.enqueue(e)
	}
	return e.id
}

func (t *Tracker[T]) send(e *Entry[T], out *Ready[T]) {
	ep := e.ep
	e.state = Sent
	ep.st.InFlight++
	ep.st.Sent++
	ep.st.MaxInFlight = max(ep.st.MaxInFlight, ep.st.InFlight)
	t.stats.InFlight++
	t.stats.Sent++
	out.Send = append(out.Send, e)
}

func (t *Tracker[T]) enqueue(e *Entry[T]) {
	ep := e.ep
	e.state = Queued
	if e.front {
		e.next = ep.head
		if ep.head != nil {
			ep.head.prev = e
		} else {
			ep.tail = e
		}
		ep.head = e
	} else {
		e.prev = ep.tail
		if ep.tail != nil {
			ep.tail.next = e
		} else {
			ep.head = e
		}
		ep.tail = e
	}
	ep.st.Waiting++
	ep.st.Queued++
	ep.st.MaxWaiting = max(ep.st.MaxWaiting, ep.st.Waiting)
	t.stats.Waiting++
	t.stats.Queued++
	t.stats.MaxWaiting = max(t.stats.MaxWaiting, t.stats.Waiting)
}

func (t *Tracker[T]) unlink(e *Entry[T]) {
	ep := e.ep
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		ep.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		ep.tail = e.prev
	}
	e.prev, e.next = nil, nil
	ep.st.Waiting--
	t.stats.Waiting--
}

// drain moves entries from ep's wait queue to Sent while credits allow.
func (t *Tracker[T]) drain(ep *endpoint[T], out *Ready[T]) {
	for ep.head != nil && (t.credits == 0 || ep.st.InFlight < t.credits) {
		e := ep.head
		t.unlink(e)
		t.send(e, out)
	}
}

// complete ends e's tracking with reason r and, if drain is set, sends
// what its credit now allows.
func (t *Tracker[T]) complete(e *Entry[T], r Reason, drain bool, out *Ready[T]) {
	if e.hidx >= 0 {
		t.heapRemove(e)
	}
	ep := e.ep
	wasSent := e.state == Sent
	switch {
	case e.state == Queued:
		t.unlink(e)
	case e.bypass:
		t.stats.InFlight--
	default:
		ep.st.InFlight--
		ep.st.Completed++
		t.stats.InFlight--
	}
	idx := uint32(e.id) - 1
	t.slots[idx].e = nil
	t.free = append(t.free, idx)
	e.state = Free
	switch r {
	case OK:
		t.stats.Replied++
	case TimedOut:
		t.stats.TimedOut++
	case Canceled:
		t.stats.Canceled++
	case Failed:
		t.stats.Failed++
	case Excluded:
		t.stats.Excluded++
	case Shutdown:
		t.stats.Shutdown++
	}
	out.Done = append(out.Done, Completion[T]{E: e, Reason: r, WasSent: wasSent})
	if e.bypass {
		return
	}
	if drain {
		t.drain(ep, out)
	} else if !ep.touched {
		ep.touched = true
		t.touched = append(t.touched, ep)
	}
}

// drainTouched drains the endpoints that complete(drain=false) touched.
func (t *Tracker[T]) drainTouched(out *Ready[T]) {
	for i, ep := range t.touched {
		ep.touched = false
		t.drain(ep, out)
		t.touched[i] = nil
	}
	t.touched = t.touched[:0]
}

// Reply completes the Sent entry id with OK and returns it, or returns
// nil (counting a late reply) if no Sent entry has that id: it already
// completed (timed out, aborted...), or it is still queued, which a
// genuine reply cannot be.
func (t *Tracker[T]) Reply(id uint64, out *Ready[T]) *Entry[T] {
	e := t.Lookup(id)
	if e == nil || e.state != Sent {
		t.stats.LateReplies++
		return nil
	}
	t.complete(e, OK, true, out)
	return e
}

// Finish completes the entry id, queued or sent, with reason r. It
// returns false if id is not tracked.
func (t *Tracker[T]) Finish(id uint64, r Reason, out *Ready[T]) bool {
	e := t.Lookup(id)
	if e == nil {
		return false
	}
	t.complete(e, r, true, out)
	return true
}

// Expire completes, with TimedOut, every entry whose deadline is at or
// before now, earliest deadline first (ties in id order), and then sends
// what the freed credits allow. It returns how many expired.
func (t *Tracker[T]) Expire(now int64, out *Ready[T]) int {
	n := 0
	for len(t.heap) > 0 && t.heap[0].deadline <= now {
		t.complete(t.heap[0], TimedOut, false, out)
		n++
	}
	t.drainTouched(out)
	return n
}

// NextDeadline returns the earliest deadline of a tracked entry.
func (t *Tracker[T]) NextDeadline() (int64, bool) {
	if len(t.heap) == 0 {
		return 0, false
	}
	return t.heap[0].deadline, true
}

// FailIf completes with reason r every tracked entry for which pred
// returns true, in slot order, then sends what the freed credits allow,
// and returns how many it completed.
func (t *Tracker[T]) FailIf(pred func(*Entry[T]) bool, r Reason, out *Ready[T]) int {
	n := 0
	for i := range t.slots {
		e := t.slots[i].e
		if e != nil && pred(e) {
			t.complete(e, r, false, out)
			n++
		}
	}
	t.drainTouched(out)
	return n
}

// FailKey completes with reason r every entry tracked towards key and
// returns how many.
func (t *Tracker[T]) FailKey(key uint64, r Reason, out *Ready[T]) int {
	ep := t.eps[key]
	if ep == nil || ep.st.InFlight+ep.st.Waiting == 0 {
		return 0
	}
	return t.FailIf(func(e *Entry[T]) bool { return e.ep == ep }, r, out)
}

// SetCredits changes the in-flight limit per endpoint (0: unlimited).
// Raising it sends waiting entries; lowering it lets the entries in
// flight finish.
func (t *Tracker[T]) SetCredits(n int, out *Ready[T]) {
	t.credits = max(n, 0)
	for _, ep := range t.eps {
		t.drain(ep, out)
	}
}

// ---- timer heap (min-heap on deadline, then id) ----

func (t *Tracker[T]) less(a, b *Entry[T]) bool {
	if a.deadline != b.deadline {
		return a.deadline < b.deadline
	}
	return a.id < b.id
}

func (t *Tracker[T]) heapPush(e *Entry[T]) {
	e.hidx = int32(len(t.heap))
	t.heap = append(t.heap, e)
	t.up(int(e.hidx))
}

func (t *Tracker[T]) heapRemove(e *Entry[T]) {
	i := int(e.hidx)
	last := len(t.heap) - 1
	if i != last {
		t.swap(i, last)
	}
	t.heap[last] = nil
	t.heap = t.heap[:last]
	e.hidx = -1
	if i != last {
		if !t.down(i) {
			t.up(i)
		}
	}
}

func (t *Tracker[T]) swap(i, j int) {
	h := t.heap
	h[i], h[j] = h[j], h[i]
	h[i].hidx = int32(i)
	h[j].hidx = int32(j)
}

func (t *Tracker[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(t.heap[i], t.heap[p]) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *Tracker[T]) down(i int) bool {
	start := i
	n := len(t.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && t.less(t.heap[r], t.heap[l]) {
			j = r
		}
		if !t.less(t.heap[j], t.heap[i]) {
			break
		}
		t.swap(i, j)
		i = j
	}
	return i > start
}
