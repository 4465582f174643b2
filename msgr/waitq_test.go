package msgr

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// wqTestOwner is a minimal owner of a waitQueue: a mutex and the queue.
type wqTestOwner struct {
	mu sync.Mutex
	q  waitQueue[int]
}

// block enqueues v and waits; it is what Throttle.Get and the dispatch
// queue's Enqueue and Dequeue do.
func (o *wqTestOwner) block(ctx context.Context, v int) (int, error) {
	o.mu.Lock()
	w := o.q.enqueue(v)
	got, err := o.q.wait(ctx, &o.mu, w)
	o.mu.Unlock()
	return got, err
}

// snapshot returns the values queued, head first, checking the links both
// ways and the count.
func (o *wqTestOwner) snapshot(t *testing.T) []int {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var vs []int
	var prev *waiter[int]
	for w := o.q.head; w != nil; w = w.next {
		if w.prev != prev {
			t.Fatalf("waiter %d: prev link broken", w.v)
		}
		vs = append(vs, w.v)
		prev = w
	}
	if o.q.tail != prev {
		t.Fatal("tail is not the last waiter")
	}
	if len(vs) != o.q.len() {
		t.Fatalf("len()=%d, %d linked", o.q.len(), len(vs))
	}
	return vs
}

type wqTestResult struct {
	id, v int
	err   error
}

// TestWaitQueueOrder checks that waiters are queued in arrival order and
// that a waker serving the head wakes them in that order, handing each
// the value and error it chose.
func TestWaitQueueOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o wqTestOwner
		res := make(chan wqTestResult, 8)
		for i := range 8 {
			go func() {
				v, err := o.block(t.Context(), i)
				res <- wqTestResult{i, v, err}
			}()
			synctest.Wait() // i is queued before i+1 starts
		}
		if got := o.snapshot(t); len(got) != 8 || got[0] != 0 || got[7] != 7 {
			t.Fatalf("queued %v, want 0..7", got)
		}
		errOdd := errors.New("odd")
		for i := range 8 {
			o.mu.Lock()
			w := o.q.front()
			if w.v != i {
				t.Fatalf("front is %d, want %d", w.v, i)
			}
			w.v = 100 + i // hand it something
			var err error
			if i%2 == 1 {
				err = errOdd
			}
			o.q.wake(w, err)
			o.mu.Unlock()
			synctest.Wait()
			r := <-res
			if r.id != i || r.v != 100+i || (i%2 == 1) != errors.Is(r.err, errOdd) || (i%2 == 0 && r.err != nil) {
				t.Fatalf("wake %d: got %+v", i, r)
			}
		}
		if o.q.len() != 0 || o.q.front() != nil {
			t.Fatalf("queue not empty: len %d", o.q.len())
		}
	})
}

// TestWaitQueueCancel checks that a waiter whose context ends while queued
// (at the head, in the middle, at the tail) leaves the queue, returns
// ctx.Err() and the zero value, and leaves the others in order.
func TestWaitQueueCancel(t *testing.T) {
	for _, victim := range []int{0, 2, 4} {
		synctest.Test(t, func(t *testing.T) {
			var o wqTestOwner
			res := make(chan wqTestResult, 5)
			var cancelVictim context.CancelFunc
			for i := range 5 {
				ctx := t.Context()
				if i == victim {
					ctx, cancelVictim = context.WithCancel(ctx)
				}
				go func() {
					v, err := o.block(ctx, i+10)
					res <- wqTestResult{i, v, err}
				}()
				synctest.Wait()
			}
			cancelVictim()
			synctest.Wait()
			r := <-res
			if r.id != victim || !errors.Is(r.err, context.Canceled) || r.v != 0 {
				t.Fatalf("victim %d: got %+v", victim, r)
			}
			var want []int
			for i := range 5 {
				if i != victim {
					want = append(want, i+10)
				}
			}
			got := o.snapshot(t)
			if len(got) != len(want) {
				t.Fatalf("victim %d: queued %v, want %v", victim, got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("victim %d: queued %v, want %v", victim, got, want)
				}
			}
			o.mu.Lock()
			o.q.wakeAll(nil)
			o.mu.Unlock()
			for range want {
				if r := <-res; r.err != nil {
					t.Fatalf("woken waiter %d returned %v", r.id, r.err)
				}
			}
		})
	}
}

// TestWaitQueueDeadline checks that a waiter nobody wakes returns when its
// deadline passes, and not before.
func TestWaitQueueDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o wqTestOwner
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		_, err := o.block(ctx, 1)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("returned after %v, want 3s", d)
		}
		if o.q.len() != 0 {
			t.Fatal("timed-out waiter still queued")
		}
	})
}

// TestWaitQueueWakeBeatsCancel checks that a wake that races the end of the
// context wins: the waiter returns what it was given, so its owner never
// has to take back a grant.
func TestWaitQueueWakeBeatsCancel(t *testing.T) {
	for i := range 200 {
		synctest.Test(t, func(t *testing.T) {
			var o wqTestOwner
			ctx, cancel := context.WithCancel(t.Context())
			res := make(chan wqTestResult, 1)
			go func() {
				v, err := o.block(ctx, 1)
				res <- wqTestResult{0, v, err}
			}()
			synctest.Wait()
			o.mu.Lock()
			w := o.q.front()
			w.v = 42
			o.q.wake(w, nil)
			cancel() // both cases of the waiter's select are ready now
			o.mu.Unlock()
			r := <-res
			if r.err != nil || r.v != 42 {
				t.Fatalf("run %d: got %+v, want the wake", i, r)
			}
			// The waiter was released with its channel drained.
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.q.nfree != 1 || len(o.q.free.ch) != 0 {
				t.Fatalf("run %d: free list %d, signal left %d", i, o.q.nfree, len(o.q.free.ch))
			}
		})
	}
}

// TestWaitQueueReuse checks that released waiters are reused, up to
// waitFreeMax, so that a wait allocates nothing in steady state, also with
// a cancellable context.
func TestWaitQueueReuse(t *testing.T) {
	var o wqTestOwner
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	round := func() {
		o.mu.Lock()
		w := o.q.enqueue(7)
		o.q.wake(w, nil) // already woken: wait returns at once
		if v, err := o.q.wait(ctx, &o.mu, w); v != 7 || err != nil {
			t.Fatalf("wait = %d, %v", v, err)
		}
		o.mu.Unlock()
	}
	round()
	if n := testing.AllocsPerRun(1000, round); n != 0 {
		t.Fatalf("a wait allocates %v in steady state", n)
	}

	// Many waiters released at once: the free list keeps waitFreeMax.
	o.mu.Lock()
	ws := make([]*waiter[int], 2*waitFreeMax)
	for i := range ws {
		ws[i] = o.q.enqueue(i)
	}
	o.q.wakeAll(nil)
	for i, w := range ws {
		if v, err := o.q.wait(ctx, &o.mu, w); v != i || err != nil {
			t.Fatalf("wait %d = %d, %v", i, v, err)
		}
	}
	if o.q.nfree != waitFreeMax {
		t.Fatalf("free list holds %d, want %d", o.q.nfree, waitFreeMax)
	}
	o.mu.Unlock()
}

// TestWaitQueueHammer runs a counting semaphore built on the queue, served
// strictly from the head, with waiters that give up at random, under real
// concurrency (run it with -race). No wake-up may be lost: every waiter
// returns, the units granted are exactly those returned, and grants follow
// arrival order.
func TestWaitQueueHammer(t *testing.T) {
	const (
		workers = 8
		rounds  = 2000
		units   = 3
	)
	var (
		mu      sync.Mutex
		q       waitQueue[int]
		free    = units
		ticket  int // arrival order of queued waiters
		granted int // tickets granted so far, in order
		inOrder = true
	)
	// serve grants units to the head while there are any. Callers hold mu.
	serve := func() {
		for w := q.front(); w != nil && free > 0; w = q.front() {
			free--
			if w.v < granted {
				inOrder = false
			}
			granted = w.v
			q.wake(w, nil)
		}
	}
	var ok, cancelled atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(rand.Uint64(), 0))
			for range rounds {
				ctx, cancel := context.WithCancel(context.Background())
				switch r.IntN(8) {
				case 0:
					cancel() // gives up as soon as it has to wait
				case 1, 2:
					go cancel() // races the grant
				}
				mu.Lock()
				if q.len() == 0 && free > 0 {
					free--
					mu.Unlock()
				} else {
					ticket++
					w := q.enqueue(ticket)
					_, err := q.wait(ctx, &mu, w)
					if err != nil {
						serve() // the one behind may be served now
						mu.Unlock()
						cancel()
						cancelled.Add(1)
						continue
					}
					mu.Unlock()
				}
				ok.Add(1)
				runtime.Gosched() // hold the unit a little, so others queue
				mu.Lock()
				free++
				serve()
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if free != units || q.len() != 0 {
		t.Fatalf("after the run: %d units free (want %d), %d waiting", free, units, q.len())
	}
	if !inOrder {
		t.Fatal("a waiter was granted before one that arrived earlier")
	}
	if ok.Load()+cancelled.Load() != workers*rounds {
		t.Fatalf("%d ok + %d cancelled != %d", ok.Load(), cancelled.Load(), workers*rounds)
	}
	t.Logf("%d granted, %d cancelled", ok.Load(), cancelled.Load())
}
