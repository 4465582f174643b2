package msgr

import (
	"context"
	"sync"
)

// waitQueue is a FIFO of goroutines blocked under their owner's mutex: the
// one waiter queue behind Throttle.Get and DispatchQueue's Enqueue and
// Dequeue. Each waiter carries a value v of type P (what it asks for, or
// what it is handed) and is woken, with an error or nil, by whoever holds
// the owner's mutex and decides it may proceed; the owner decides the order
// (normally the head first, which is what makes the owners FIFO-fair).
//
// The protocol, with mu the owner's mutex:
//
//	mu.Lock()
//	w := q.enqueue(v)       // at the tail
//	v, err := q.wait(ctx, &mu, w)
//	mu.Unlock()
//
// and, elsewhere under mu, w := q.front(); ...; q.wake(w, err).
//
// No wake-up is lost: wake marks the waiter done and signals its channel
// (capacity 1) under mu, and a waiter whose ctx ends looks at done under mu
// before giving up, so a wake that races a cancellation wins and the
// waiter's owner never takes back what it granted. A waiter whose ctx ends
// first leaves the queue and returns ctx.Err().
//
// Waiters are reused (up to waitFreeMax per queue), so waiting does not
// allocate in steady state.
//
// A waitQueue is not safe for concurrent use by itself: every method is
// called with the owner's mutex held (wait releases it while blocked). The
// zero value is an empty queue.
type waitQueue[P any] struct {
	head, tail *waiter[P]
	n          int
	free       *waiter[P] // reusable waiters, linked by next
	nfree      int
}

// waiter is one goroutine blocked in a waitQueue. done, err and v are
// written under the owner's mutex before ch is signalled.
type waiter[P any] struct {
	next, prev *waiter[P]
	ch         chan struct{} // capacity 1; empty while the waiter is free
	done       bool
	err        error
	v          P
}

// waitFreeMax bounds the number of waiters a queue keeps for reuse.
const waitFreeMax = 64

// enqueue adds a waiter carrying v at the tail and returns it; the caller
// then calls wait on it before releasing the mutex.
func (q *waitQueue[P]) enqueue(v P) *waiter[P] {
	w := q.free
	if w != nil {
		q.free = w.next
		q.nfree--
	} else {
		w = &waiter[P]{ch: make(chan struct{}, 1)}
	}
	w.v = v
	w.next, w.prev = nil, q.tail
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.n++
	return w
}

// front returns the waiter at the head, or nil if none waits.
func (q *waitQueue[P]) front() *waiter[P] { return q.head }

// next returns the waiter queued after w, or nil: owners that serve
// waiters in an order of their own walk the queue with front and next.
func (q *waitQueue[P]) next(w *waiter[P]) *waiter[P] { return w.next }

// len returns the number of waiters queued.
func (q *waitQueue[P]) len() int { return q.n }

// wake takes the queued waiter w out of the queue and lets it return err
// with its value w.v (which the caller may set first, to hand it
// something).
func (q *waitQueue[P]) wake(w *waiter[P], err error) {
	q.remove(w)
	w.done = true
	w.err = err
	w.ch <- struct{}{} // capacity 1 and empty: never blocks
}

// wakeAll wakes every queued waiter, in order, with err.
func (q *waitQueue[P]) wakeAll(err error) {
	for w := q.head; w != nil; w = q.head {
		q.wake(w, err)
	}
}

// wait blocks until w is woken or ctx ends. It is called with mu held and
// w just enqueued, releases mu while blocked and returns with mu held.
// If w was woken, also when ctx ended at the same moment, it returns w's
// value and the error given to wake. Otherwise it takes w out of the queue
// and returns the zero value and ctx.Err(); the waiter behind w (if w was
// at the head) may then be able to proceed, which is the caller's to
// check. Either way w is released and must not be used again.
func (q *waitQueue[P]) wait(ctx context.Context, mu *sync.Mutex, w *waiter[P]) (P, error) {
	done := ctx.Done()
	mu.Unlock()
	var v P
	var err error
	if done == nil {
		<-w.ch
		mu.Lock()
		v, err = w.v, w.err
	} else {
		select {
		case <-w.ch:
			mu.Lock()
			v, err = w.v, w.err
		case <-done:
			mu.Lock()
			if w.done {
				<-w.ch // the wake won the race; consume its signal
				v, err = w.v, w.err
			} else {
				q.remove(w)
				err = ctx.Err()
			}
		}
	}
	q.release(w)
	return v, err
}

// release keeps w for reuse. Its channel is empty by now.
func (q *waitQueue[P]) release(w *waiter[P]) {
	if q.nfree >= waitFreeMax {
		return
	}
	*w = waiter[P]{next: q.free, ch: w.ch}
	q.free = w
	q.nfree++
}

func (q *waitQueue[P]) remove(w *waiter[P]) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.next, w.prev = nil, nil
	q.n--
}
