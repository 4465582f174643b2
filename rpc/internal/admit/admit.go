// Package admit is the overflow admission queue of one context: a budget
// of bytes (the context's OverflowLimit) shared by the requests of many
// peers, admitted in arrival order within a peer and in turns across
// peers, with bounded waiting. It is a pure state machine: it does no
// I/O, starts no goroutines, reads no clock and takes no locks. Its
// inputs are calls (Offer, Done, Expire with the current time, DropPeer,
// Close) and its outputs are the values admitted, refused, evicted or
// expired, which the caller acts on outside its own lock.
//
// Rules:
//   - A request is admitted at once if nobody waits and its bytes fit:
//     the budget holds none, or what it holds plus the request's stays
//     within the limit (one request is always admitted when none is
//     held, however large, so that a limit below a request's size
//     cannot block it for ever).
//   - Otherwise it waits, unless its peer has MaxPerPeer waiting already
//     (refused), or MaxWaiting wait in all: then the peer with the most
//     waiting gives up its newest for it if that peer has more waiting
//     than this one's would (evicted), else it is refused.
//   - When budget is given back (Done), waiters are admitted while the
//     next fits; the next is the earliest waiter of the peer whose turn
//     is oldest (it was admitted, or began to wait, longest ago; the
//     peer admitted last loses ties). A waiter that does not fit stops
//     the others (nobody overtakes it, or a large request could wait for
//     ever behind a stream of small ones). So one peer's requests,
//     however many, delay another's by at most one admission per peer
//     waiting.
//   - A waiter gives up at its until time (Expire), and all of a peer's
//     waiters go with it (DropPeer); the rest may then be admitted.
//
// Time is an int64 on any monotonic scale the caller chooses; until 0
// means none.
package admit

import "slices"

// Refusal says why Offer did not take a request.
type Refusal uint8

// Refusals.
const (
	Taken   Refusal = iota // not refused: admitted or waiting
	Closed                 // the queue was closed
	PerPeer                // the peer has MaxPerPeer requests waiting
	Full                   // MaxWaiting requests wait and none could be evicted
)

var refusalNames = [...]string{"taken", "closed", "per peer", "full"}

func (r Refusal) String() string {
	if int(r) < len(refusalNames) {
		return refusalNames[r]
	}
	return "refusal?"
}

// Queue is the admission queue; P names peers (comparable: a connection),
// V is the caller's request. The zero value is not usable: use New.
type Queue[P comparable, V any] struct {
	limit                  int64
	maxWaiting, maxPerPeer int

	held   int64
	wait   []waiter[P, V]
	peers  map[P]*peerState // the peers that have requests waiting
	seq    uint64           // admissions so far
	last   P                // the peer admitted last
	isLast bool
	closed bool
}

type waiter[P comparable, V any] struct {
	peer  P
	v     V
	n     int64
	until int64
}

type peerState struct {
	waiting int
	turn    uint64 // seq when the peer last had a request admitted, or began to wait
}

// New returns a queue with a budget of limit bytes, at most maxWaiting
// requests waiting and maxPerPeer of one peer.
func New[P comparable, V any](limit int64, maxWaiting, maxPerPeer int) *Queue[P, V] {
	return &Queue[P, V]{limit: limit, maxWaiting: maxWaiting, maxPerPeer: maxPerPeer, peers: map[P]*peerState{}}
}

// Offer asks for n bytes for v from peer, waiting until until at most.
// It returns whether v was admitted at once (its bytes are held), the
// refusal if it was not taken at all, and a request of another peer
// evicted to make room for it (ok false: none).
func (q *Queue[P, V]) Offer(peer P, v V, n, until int64) (admitted bool, refused Refusal, evicted V, ok bool) {
	if q.closed {
		return false, Closed, evicted, false
	}
	if len(q.wait) == 0 && q.fits(n) {
		q.held += n
		q.seq++
		q.last, q.isLast = peer, true
		return true, Taken, evicted, false
	}
	ps := q.peers[peer]
	mine := 0
	if ps != nil {
		mine = ps.waiting
	}
	if mine >= q.maxPerPeer {
		return false, PerPeer, evicted, false
	}
	if len(q.wait) >= q.maxWaiting {
		i := q.newestOfLargest(mine + 1)
		if i < 0 {
			return false, Full, evicted, false
		}
		evicted, ok = q.remove(i).v, true
		ps = q.peers[peer] // (not the evicted one's: it has more waiting)
	}
	if ps == nil {
		// It joins the back of the turns (ahead of the peer admitted
		// last, which loses ties).
		ps = &peerState{turn: q.seq}
		q.peers[peer] = ps
	}
	ps.waiting++
	q.wait = append(q.wait, waiter[P, V]{peer: peer, v: v, n: n, until: until})
	return false, Taken, evicted, ok
}

// Done gives back n bytes and appends to admitted the waiters that now
// fit, in the order admitted (their bytes are held).
func (q *Queue[P, V]) Done(n int64, admitted []V) []V {
	q.held -= n
	for len(q.wait) > 0 && !q.closed {
		i := q.next()
		if !q.fits(q.wait[i].n) {
			break // the others do not overtake it
		}
		q.seq++
		q.last, q.isLast = q.wait[i].peer, true
		if ps := q.peers[q.last]; ps != nil {
			ps.turn = q.seq
		}
		w := q.remove(i)
		q.held += w.n
		admitted = append(admitted, w.v)
	}
	return admitted
}

// Expire removes the waiters whose until is at or before now, appending
// them to expired, and then admits what fits (appended to admitted).
func (q *Queue[P, V]) Expire(now int64, expired, admitted []V) ([]V, []V) {
	n := len(expired)
	expired = q.removeIf(func(w *waiter[P, V]) bool { return w.until != 0 && w.until <= now }, expired)
	if len(expired) == n {
		return expired, admitted
	}
	return expired, q.Done(0, admitted)
}

// DropPeer removes every waiter of peer, appending them to dropped, and
// then admits what fits (appended to admitted). The peer loses its turn.
func (q *Queue[P, V]) DropPeer(peer P, dropped, admitted []V) ([]V, []V) {
	if q.isLast && q.last == peer {
		var zero P
		q.last, q.isLast = zero, false
	}
	if q.peers[peer] == nil {
		return dropped, admitted
	}
	dropped = q.removeIf(func(w *waiter[P, V]) bool { return w.peer == peer }, dropped)
	return dropped, q.Done(0, admitted)
}

// Close removes every waiter, appending them to dropped; from now on
// Offer refuses (Closed) and Done admits nothing.
func (q *Queue[P, V]) Close(dropped []V) []V {
	for _, w := range q.wait {
		dropped = append(dropped, w.v)
	}
	clear(q.wait)
	q.wait = q.wait[:0]
	clear(q.peers)
	var zero P
	q.last, q.isLast = zero, false
	q.closed = true
	return dropped
}

// Earliest returns the earliest until of a waiter (0: none waits with
// one).
func (q *Queue[P, V]) Earliest() int64 {
	var next int64
	for _, w := range q.wait {
		if w.until != 0 && (next == 0 || w.until < next) {
			next = w.until
		}
	}
	return next
}

// Held returns the bytes held; Waiting the requests waiting, and Peers
// the peers that have some waiting.
func (q *Queue[P, V]) Held() int64  { return q.held }
func (q *Queue[P, V]) Waiting() int { return len(q.wait) }
func (q *Queue[P, V]) Peers() int   { return len(q.peers) }

func (q *Queue[P, V]) fits(n int64) bool { return q.held == 0 || q.held+n <= q.limit }

// remove removes waiter i and returns it.
func (q *Queue[P, V]) remove(i int) waiter[P, V] {
	w := q.wait[i]
	q.wait = slices.Delete(q.wait, i, i+1)
	q.left(w.peer)
	return w
}

// removeIf removes the waiters drop selects, appending them to out.
func (q *Queue[P, V]) removeIf(drop func(*waiter[P, V]) bool, out []V) []V {
	kept := q.wait[:0]
	for i := range q.wait {
		w := &q.wait[i]
		if drop(w) {
			out = append(out, w.v)
			q.left(w.peer)
			continue
		}
		kept = append(kept, *w)
	}
	clear(q.wait[len(kept):])
	q.wait = kept
	return out
}

// left counts one of peer's waiters gone; a peer with none left loses
// its turn.
func (q *Queue[P, V]) left(peer P) {
	if ps := q.peers[peer]; ps != nil {
		if ps.waiting--; ps.waiting <= 0 {
			delete(q.peers, peer)
		}
	}
}

// newestOfLargest returns the index of the newest waiter of the peer with
// the most waiting, if it has more than than, or -1. Of peers with as
// many, the one with the newest waiter gives it up.
func (q *Queue[P, V]) newestOfLargest(than int) int {
	most := than
	for _, ps := range q.peers {
		most = max(most, ps.waiting)
	}
	if most == than {
		return -1
	}
	for i := len(q.wait) - 1; i >= 0; i-- {
		if q.peers[q.wait[i].peer].waiting == most {
			return i
		}
	}
	return -1
}

// next returns the index of the waiter to admit next (see the package
// rules). Called with wait not empty.
func (q *Queue[P, V]) next() int {
	best, bestTurn, bestLast := -1, uint64(0), false
	for i, w := range q.wait {
		ps := q.peers[w.peer]
		if ps == nil {
			continue
		}
		last := q.isLast && w.peer == q.last
		if best < 0 || ps.turn < bestTurn || (ps.turn == bestTurn && bestLast && !last) {
			best, bestTurn, bestLast = i, ps.turn, last
		}
	}
	return max(best, 0)
}
