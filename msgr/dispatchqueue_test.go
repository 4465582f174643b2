package msgr

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// dqTestItem is what the tests queue: who sent it and its sequence number.
type dqTestItem struct {
	owner uint64
	seq   int
}

// dqTestCtx returns a context that ends after 10 s (virtual time in a
// synctest bubble), so that a broken implementation fails the test
// instead of hanging it.
func dqTestCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dqTestWait checks cond once every goroutine of the bubble is blocked.
func dqTestWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	synctest.Wait()
	if !cond() {
		t.Fatalf("no %s once all goroutines blocked", what)
	}
}

// dqTestRecv returns what a call that must have returned, once every
// goroutine of the bubble is blocked, sent on ch.
func dqTestRecv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	synctest.Wait()
	select {
	case v := <-ch:
		return v
	default:
		t.Fatal("call did not return")
		panic("unreachable")
	}
}

func dqTestDrain[T any](q *DispatchQueue[T]) []T {
	var out []T
	for {
		v, ok := q.TryDequeue()
		if !ok {
			return out
		}
		out = append(out, v)
	}
}

func TestDispatchQueueStrictOrder(t *testing.T) {
	ctx := dqTestCtx(t)
	q := NewDispatchQueue[int](0)
	prios := []uint16{64, 255, 127, 65535, 196, 64, 300, 127}
	for i, p := range prios {
		if err := q.Enqueue(ctx, 1, p, 100, i); err != nil {
			t.Fatal(err)
		}
	}
	// Highest first; FIFO within a priority.
	want := []int{3, 6, 1, 4, 2, 7, 0, 5}
	if got := dqTestDrain(q); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Strict beats low priority regardless of cost or tokens.
	_ = q.Enqueue(ctx, 1, 63, 1, 100)
	_ = q.Enqueue(ctx, 1, 64, 1<<30, 200)
	if got := dqTestDrain(q); !slices.Equal(got, []int{200, 100}) {
		t.Fatalf("got %v", got)
	}
}

func TestDispatchQueueOwnerFIFO(t *testing.T) {
	ctx := dqTestCtx(t)
	q := NewDispatchQueue[dqTestItem](0)
	r := rand.New(rand.NewPCG(7, 7))
	next := map[uint64]int{}
	for range 2000 {
		o := uint64(r.IntN(5))
		_ = q.Enqueue(ctx, o, 127, r.IntN(1<<20), dqTestItem{o, next[o]})
		next[o]++
	}
	got := map[uint64]int{}
	for _, it := range dqTestDrain(q) {
		if it.seq != got[it.owner] {
			t.Fatalf("owner %d: got seq %d, want %d", it.owner, it.seq, got[it.owner])
		}
		got[it.owner]++
	}
	if !maps.Equal(got, next) {
		t.Fatalf("counts %v, want %v", got, next)
	}
}

func TestDispatchQueueEnqueueFront(t *testing.T) {
	ctx := dqTestCtx(t)
	q := NewDispatchQueue[string](1)
	_ = q.Enqueue(ctx, 1, 255, 0, "m1")
	// The queue is full; EnqueueFront ignores the bound, and front items
	// keep their own order ahead of the owner's Enqueue items.
	q.EnqueueFront(1, 255, "connect")
	q.EnqueueFront(1, 255, "reset")
	if q.Len() != 3 {
		t.Fatalf("Len()=%d", q.Len())
	}
	got := dqTestDrain(q)
	if want := []string{"connect", "reset", "m1"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestDispatchQueueOwnerFairness(t *testing.T) {
	ctx := dqTestCtx(t)
	q := NewDispatchQueue[dqTestItem](0)
	for i := range 1000 {
		_ = q.Enqueue(ctx, 1, 127, 10, dqTestItem{1, i})
	}
	for i := range 10 {
		_ = q.Enqueue(ctx, 2, 127, 10, dqTestItem{2, i})
	}
	got := dqTestDrain(q)
	if len(got) != 1010 {
		t.Fatalf("got %d items", len(got))
	}
	last := -1
	for i, it := range got {
		if it.owner == 2 {
			last = i
		}
	}
	// Round robin: owner 2's ten items are among the first 20.
	if last >= 20 {
		t.Fatalf("owner 2's last item served at position %d, want < 20", last)
	}
	// Low priorities are round robin across owners too.
	for i := range 100 {
		_ = q.Enqueue(ctx, 1, 10, 10, dqTestItem{1, i})
	}
	_ = q.Enqueue(ctx, 2, 10, 10, dqTestItem{2, 0})
	got = dqTestDrain(q)
	if got[1].owner != 2 {
		t.Fatalf("low priority: owner 2 served at %v", got[:3])
	}
}

// dqTestLowShares fills two low priorities with n items of one cost each,
// dequeues m, and returns how many of each priority were served.
func dqTestLowShares(lo, hi uint16, cost, n, m int) (int, int) {
	ctx := context.Background() // unbounded queue: never waits
	q := NewDispatchQueue[uint16](0)
	for i := range n {
		_ = q.Enqueue(ctx, uint64(i%3), lo, cost, lo)
		_ = q.Enqueue(ctx, uint64(i%3), hi, cost, hi)
	}
	var a, b int
	for range m {
		p, _ := q.TryDequeue()
		if p == lo {
			a++
		} else {
			b++
		}
	}
	return a, b
}

func TestDispatchQueueLowPriorityShares(t *testing.T) {
	tests := []struct {
		lo, hi         uint16
		cost           int
		minRatio, maxR float64 // bounds on served(hi)/served(lo)
	}{
		{10, 20, 1000, 1.6, 2.4},      // min cost applies
		{10, 20, 4 << 20, 1.6, 2.4},   // large items
		{1, 63, 64 << 10, 40, 80},     // 63:1, and 1 is not starved
		{30, 31, 100 << 10, 0.9, 1.2}, // near equal
	}
	for _, tt := range tests {
		a, b := dqTestLowShares(tt.lo, tt.hi, tt.cost, 5000, 4000)
		if a == 0 {
			t.Errorf("prio %d starved by %d", tt.lo, tt.hi)
			continue
		}
		ratio := float64(b) / float64(a)
		t.Logf("prio %d:%d cost %d: served %d:%d (ratio %.2f)", tt.lo, tt.hi, tt.cost, a, b, ratio)
		if ratio < tt.minRatio || ratio > tt.maxR {
			t.Errorf("prio %d:%d cost %d: ratio %.2f outside [%.2f, %.2f]", tt.lo, tt.hi, tt.cost, ratio, tt.minRatio, tt.maxR)
		}
	}
	// Priority 0 gets one token per dequeue, yet is eventually served.
	a, _ := dqTestLowShares(0, 63, 64<<10, 70000, 66000)
	if a == 0 {
		t.Error("prio 0 starved")
	}
}

func TestDispatchQueueBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bg := dqTestCtx(t)
		q := NewDispatchQueue[int](2)
		for i := range 2 {
			if err := q.Enqueue(bg, 1, 127, 1, i); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan error, 1)
		go func() { done <- q.Enqueue(bg, 1, 127, 1, 2) }()
		dqTestWait(t, "producer to block", func() bool { return q.dqProducersWaiting() == 1 })

		// A cancelled producer behind it leaves nothing queued.
		ctx, cancel := context.WithCancel(bg)
		cdone := make(chan error, 1)
		go func() { cdone <- q.Enqueue(ctx, 1, 127, 1, 99) }()
		dqTestWait(t, "second producer to block", func() bool { return q.dqProducersWaiting() == 2 })
		cancel()
		if err := dqTestRecv(t, cdone); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Enqueue = %v", err)
		}
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Enqueue on a full queue returned %v", err)
		default:
		}
		if q.Len() != 2 {
			t.Fatalf("Len()=%d", q.Len())
		}

		v, err := q.Dequeue(bg)
		if err != nil || v != 0 {
			t.Fatalf("Dequeue = %v, %v", v, err)
		}
		if err := dqTestRecv(t, done); err != nil {
			t.Fatal(err)
		}
		if q.Len() != 2 || q.dqProducersWaiting() != 0 {
			t.Fatalf("Len()=%d producers=%d", q.Len(), q.dqProducersWaiting())
		}
		if got := dqTestDrain(q); !slices.Equal(got, []int{1, 2}) {
			t.Fatalf("got %v", got)
		}
	})
}

func TestDispatchQueueDequeueWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bg := dqTestCtx(t)
		q := NewDispatchQueue[int](0)
		type res struct {
			v   int
			err error
		}
		done := make(chan res, 1)
		go func() { v, err := q.Dequeue(bg); done <- res{v, err} }()
		dqTestWait(t, "consumer to block", func() bool { return q.dqConsumersWaiting() == 1 })
		_ = q.Enqueue(bg, 3, 10, 1, 42)
		if r := dqTestRecv(t, done); r.err != nil || r.v != 42 {
			t.Fatalf("got %+v", r)
		}
		if q.Len() != 0 {
			t.Fatalf("Len()=%d", q.Len())
		}

		ctx, cancel := context.WithCancel(bg)
		go func() { v, err := q.Dequeue(ctx); done <- res{v, err} }()
		dqTestWait(t, "consumer to block", func() bool { return q.dqConsumersWaiting() == 1 })
		cancel()
		if r := dqTestRecv(t, done); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("got %+v", r)
		}
		// The cancelled consumer took nothing.
		_ = q.Enqueue(bg, 3, 10, 1, 7)
		if v, ok := q.TryDequeue(); !ok || v != 7 {
			t.Fatalf("TryDequeue = %v, %v", v, ok)
		}
	})
}

// TestDispatchQueueWaitersInOrder: blocked Dequeue calls are handed
// items in the order they started waiting, and blocked Enqueue calls
// are admitted in the order they started waiting, whatever their
// priorities (the bound is on items, not on priorities).
func TestDispatchQueueWaitersInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bg := dqTestCtx(t)
		type res struct{ who, v int }
		q := NewDispatchQueue[int](1)
		got := make(chan res, 4)
		for i := range 4 {
			go func() {
				v, err := q.Dequeue(bg)
				if err != nil {
					t.Error(err)
				}
				got <- res{i, v}
			}()
			dqTestWait(t, "consumer to block", func() bool { return q.dqConsumersWaiting() == i+1 })
		}
		for v := range 4 {
			if err := q.Enqueue(bg, uint64(v), uint16(v*60), 1, 100+v); err != nil {
				t.Fatal(err)
			}
			if r := dqTestRecv(t, got); r.who != v || r.v != 100+v {
				t.Fatalf("item %d went to consumer %d as %d, want consumer %d", 100+v, r.who, r.v, v)
			}
		}

		// Full (one item): producers at rising priorities queue in order
		// and are admitted one per Dequeue, oldest first.
		if err := q.Enqueue(bg, 9, 0, 1, 0); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 4)
		for i := range 4 {
			go func() { errs <- q.Enqueue(bg, uint64(i), uint16(64+i*50), 1, i+1) }()
			dqTestWait(t, "producer to block", func() bool { return q.dqProducersWaiting() == i+1 })
		}
		for want := range 5 {
			v, err := q.Dequeue(bg)
			if err != nil || v != want {
				t.Fatalf("Dequeue %d = %d, %v: a later producer was admitted first", want, v, err)
			}
			if want < 4 {
				if err := dqTestRecv(t, errs); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

func TestDispatchQueueClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bg := dqTestCtx(t)
		q := NewDispatchQueue[int](3)
		for i := range 3 {
			_ = q.Enqueue(bg, 1, 127, 1, i)
		}
		blocked := make(chan error, 1)
		go func() { blocked <- q.Enqueue(bg, 1, 127, 1, 3) }()
		dqTestWait(t, "producer to block", func() bool { return q.dqProducersWaiting() == 1 })

		q.Close()
		q.Close() // idempotent
		if err := dqTestRecv(t, blocked); !errors.Is(err, ErrQueueClosed) {
			t.Fatalf("blocked Enqueue = %v, want ErrQueueClosed", err)
		}
		if err := q.Enqueue(bg, 1, 127, 1, 9); !errors.Is(err, ErrQueueClosed) {
			t.Fatalf("Enqueue after Close = %v", err)
		}
		q.EnqueueFront(1, 255, 9) // discarded
		for i := range 3 {
			v, err := q.Dequeue(bg)
			if err != nil || v != i {
				t.Fatalf("drain %d: %v, %v", i, v, err)
			}
		}
		if _, err := q.Dequeue(bg); !errors.Is(err, ErrQueueClosed) {
			t.Fatalf("Dequeue after drain = %v", err)
		}

		// Close wakes blocked consumers.
		q2 := NewDispatchQueue[int](0)
		errs := make(chan error, 2)
		for range 2 {
			go func() { _, err := q2.Dequeue(bg); errs <- err }()
		}
		dqTestWait(t, "consumers to block", func() bool { return q2.dqConsumersWaiting() == 2 })
		q2.Close()
		for range 2 {
			if err := dqTestRecv(t, errs); !errors.Is(err, ErrQueueClosed) {
				t.Fatalf("blocked Dequeue = %v", err)
			}
		}
	})
}

func TestDispatchQueueDropOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bg := dqTestCtx(t)
		q := NewDispatchQueue[dqTestItem](4)
		// Owner 1 at three priorities (strict and low), owner 2 in between.
		seq := 0
		add := func(o uint64, p uint16) {
			if err := q.Enqueue(bg, o, p, 10, dqTestItem{o, seq}); err != nil {
				t.Fatal(err)
			}
			seq++
		}
		add(1, 127)
		add(2, 127)
		add(1, 255)
		add(1, 5)
		// The queue is full: a producer for owner 3 waits and is admitted by
		// the drop.
		done := make(chan error, 1)
		go func() { done <- q.Enqueue(bg, 3, 127, 10, dqTestItem{3, 100}) }()
		dqTestWait(t, "producer to block", func() bool { return q.dqProducersWaiting() == 1 })

		var dropped []dqTestItem
		q.DropOwner(1, func(it dqTestItem) { dropped = append(dropped, it) })
		if want := []dqTestItem{{1, 2}, {1, 0}, {1, 3}}; !slices.Equal(dropped, want) {
			t.Fatalf("dropped %v, want %v", dropped, want)
		}
		if err := dqTestRecv(t, done); err != nil {
			t.Fatal(err)
		}
		q.DropOwner(42, func(dqTestItem) { t.Fatal("dropped an item of an unknown owner") })
		got := dqTestDrain(q)
		if want := []dqTestItem{{2, 1}, {3, 100}}; !slices.Equal(got, want) {
			t.Fatalf("left %v, want %v", got, want)
		}
		// The owner can queue again afterwards.
		add(1, 127)
		if v, ok := q.TryDequeue(); !ok || v.owner != 1 {
			t.Fatalf("got %v %v", v, ok)
		}
		q.DropOwner(1, nil)
	})
}

// dqRef is a naive reference implementation of the queue's scheduling:
// Ceph's PrioritizedQueue written with maps and slices, with owners served
// round robin in the order they became non-empty.
type dqRef struct {
	levels map[uint16]*dqRefLevel
}

type dqRefLevel struct {
	owners []*dqRefOwner // round-robin order
	tokens int64
}

type dqRefOwner struct {
	id          uint64
	front, back []dqEntry[int]
}

func (r *dqRef) enqueue(owner uint64, prio uint16, cost int64, front bool, v int) {
	if prio < 64 {
		cost = min(max(cost, 64<<10), 16<<20)
	}
	l := r.levels[prio]
	if l == nil {
		l = &dqRefLevel{}
		r.levels[prio] = l
	}
	var o *dqRefOwner
	for _, x := range l.owners {
		if x.id == owner {
			o = x
		}
	}
	if o == nil {
		o = &dqRefOwner{id: owner}
		l.owners = append(l.owners, o)
	}
	e := dqEntry[int]{v: v, cost: cost}
	if front {
		o.front = append(o.front, e)
	} else {
		o.back = append(o.back, e)
	}
}

func (r *dqRef) peek(l *dqRefLevel) dqEntry[int] {
	o := l.owners[0]
	if len(o.front) > 0 {
		return o.front[0]
	}
	return o.back[0]
}

func (r *dqRef) popAt(p uint16) dqEntry[int] {
	l := r.levels[p]
	o := l.owners[0]
	var e dqEntry[int]
	if len(o.front) > 0 {
		e, o.front = o.front[0], o.front[1:]
	} else {
		e, o.back = o.back[0], o.back[1:]
	}
	l.owners = l.owners[1:]
	if len(o.front)+len(o.back) > 0 {
		l.owners = append(l.owners, o)
	}
	if len(l.owners) == 0 {
		delete(r.levels, p)
	}
	return e
}

func (r *dqRef) distribute(cost int64) {
	var total int64
	for p := range r.levels {
		if p < 64 {
			total += int64(p)
		}
	}
	if total == 0 {
		return
	}
	for p, l := range r.levels {
		if p < 64 {
			l.tokens = min(l.tokens+int64(p)*cost/total+1, 16<<20)
		}
	}
}

func (r *dqRef) dequeue() (int, bool) {
	prios := slices.Sorted(maps.Keys(r.levels))
	if len(prios) == 0 {
		return 0, false
	}
	if top := prios[len(prios)-1]; top >= 64 {
		return r.popAt(top).v, true
	}
	for _, p := range prios {
		l := r.levels[p]
		if c := r.peek(l).cost; c < l.tokens {
			l.tokens -= c
			e := r.popAt(p)
			r.distribute(c)
			return e.v, true
		}
	}
	e := r.popAt(prios[len(prios)-1])
	r.distribute(e.cost)
	return e.v, true
}

func (r *dqRef) drop(owner uint64) []int {
	var out []int
	prios := slices.Sorted(maps.Keys(r.levels))
	slices.Reverse(prios)
	for _, p := range prios {
		l := r.levels[p]
		for i, o := range l.owners {
			if o.id != owner {
				continue
			}
			for _, e := range append(o.front, o.back...) {
				out = append(out, e.v)
			}
			l.owners = slices.Delete(l.owners, i, i+1)
			break
		}
		if len(l.owners) == 0 {
			delete(r.levels, p)
		}
	}
	return out
}

func (r *dqRef) len() int {
	n := 0
	for _, l := range r.levels {
		for _, o := range l.owners {
			n += len(o.front) + len(o.back)
		}
	}
	return n
}

// TestDispatchQueueReference runs random operations against the queue and
// the naive reference and compares every result.
func TestDispatchQueueReference(t *testing.T) {
	for _, tc := range []struct {
		name  string
		prios []uint16
	}{
		{"strict", []uint16{64, 65, 100, 127, 196, 255, 256, 1000, 65535}},
		{"low", []uint16{0, 1, 2, 10, 33, 62, 63}},
		{"mixed", []uint16{0, 5, 63, 64, 127, 255}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := dqTestCtx(t)
			r := rand.New(rand.NewPCG(1, 2))
			for round := range 20 {
				q := NewDispatchQueue[int](0)
				ref := &dqRef{levels: map[uint16]*dqRefLevel{}}
				next := 0
				for step := range 3000 {
					owner := uint64(r.IntN(6))
					prio := tc.prios[r.IntN(len(tc.prios))]
					switch op := r.IntN(100); {
					case op < 50:
						cost := r.IntN(4 << 20)
						if err := q.Enqueue(ctx, owner, prio, cost, next); err != nil {
							t.Fatal(err)
						}
						ref.enqueue(owner, prio, int64(cost), false, next)
						next++
					case op < 55:
						q.EnqueueFront(owner, prio, next)
						ref.enqueue(owner, prio, 0, true, next)
						next++
					case op < 97:
						got, gok := q.TryDequeue()
						want, wok := ref.dequeue()
						if got != want || gok != wok {
							t.Fatalf("round %d step %d: TryDequeue = %d, %v; reference %d, %v", round, step, got, gok, want, wok)
						}
					default:
						var got []int
						q.DropOwner(owner, func(v int) { got = append(got, v) })
						if want := ref.drop(owner); !slices.Equal(got, want) {
							t.Fatalf("round %d step %d: DropOwner(%d) = %v; reference %v", round, step, owner, got, want)
						}
					}
					if q.Len() != ref.len() {
						t.Fatalf("round %d step %d: Len() = %d; reference %d", round, step, q.Len(), ref.len())
					}
				}
				for {
					got, gok := q.TryDequeue()
					want, wok := ref.dequeue()
					if got != want || gok != wok {
						t.Fatalf("round %d drain: TryDequeue = %d, %v; reference %d, %v", round, got, gok, want, wok)
					}
					if !gok {
						break
					}
				}
			}
		})
	}
}

// TestDispatchQueueHammer runs producers, consumers and DropOwner
// concurrently (for -race) and checks that every item is delivered or
// dropped exactly once, and that each owner's items come out in order.
func TestDispatchQueueHammer(t *testing.T) {
	const (
		producers = 4
		perOwner  = 1500
		consumers = 3
		dropOwner = 99
	)
	prioOf := func(o uint64) uint16 { return []uint16{127, 255, 10, 40, 64}[o%5] }
	// Everything waits under hctx so a broken queue fails the test
	// instead of hanging it.
	hctx, hcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer hcancel()
	q := NewDispatchQueue[dqTestItem](16)
	var delivered, dropped sync.Map // dqTestItem -> struct{}
	var dups atomic.Int64
	mark := func(m *sync.Map, it dqTestItem) {
		if _, loaded := m.LoadOrStore(it, struct{}{}); loaded {
			dups.Add(1)
		}
	}

	var cwg sync.WaitGroup
	var orderErrs atomic.Int64
	for range consumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			last := map[uint64]int{}
			for {
				it, err := q.Dequeue(hctx)
				if errors.Is(err, ErrQueueClosed) {
					return
				}
				if err != nil {
					orderErrs.Add(1)
					return
				}
				if l, ok := last[it.owner]; ok && it.seq <= l {
					orderErrs.Add(1)
				}
				last[it.owner] = it.seq
				mark(&delivered, it)
			}
		}()
	}

	var pwg sync.WaitGroup
	owners := []uint64{dropOwner}
	for p := range producers {
		owners = append(owners, uint64(2*p+1), uint64(2*p+2))
	}
	for _, o := range owners {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := range perOwner {
				if err := q.Enqueue(hctx, o, prioOf(o), 1000, dqTestItem{o, i}); err != nil {
					t.Error(err)
					return
				}
				if i%100 == 0 {
					q.EnqueueFront(o, 255, dqTestItem{o + 1000, i})
				}
			}
		}()
	}
	stopDrop := make(chan struct{})
	dropDone := make(chan struct{})
	go func() {
		defer close(dropDone)
		for {
			select {
			case <-stopDrop:
				return
			default:
			}
			q.DropOwner(dropOwner, func(it dqTestItem) { mark(&dropped, it) })
			runtime.Gosched()
		}
	}()
	pwg.Wait()
	close(stopDrop)
	<-dropDone
	q.Close()
	cwg.Wait()
	if hctx.Err() != nil {
		t.Fatal("hammer stuck")
	}

	if n := dups.Load(); n != 0 {
		t.Errorf("%d items seen twice", n)
	}
	if n := orderErrs.Load(); n != 0 {
		t.Errorf("%d out-of-order or failed dequeues", n)
	}
	count := func(m *sync.Map) int {
		n := 0
		m.Range(func(any, any) bool { n++; return true })
		return n
	}
	want := len(owners) * (perOwner + perOwner/100)
	if got := count(&delivered) + count(&dropped); got != want {
		t.Errorf("delivered %d + dropped %d = %d, want %d", count(&delivered), count(&dropped), got, want)
	}
	dropped.Range(func(k, _ any) bool {
		if it := k.(dqTestItem); it.owner != dropOwner && it.owner != dropOwner+1000 {
			t.Errorf("dropped %v of another owner", it)
		}
		return true
	})
	t.Logf("delivered %d, dropped %d", count(&delivered), count(&dropped))
}

func TestDispatchQueueAllocs(t *testing.T) {
	ctx := dqTestCtx(t)
	q := NewDispatchQueue[*int](0)
	v := new(int)
	round := func() {
		for o := range uint64(8) {
			for _, p := range []uint16{5, 40, 127, 255} {
				_ = q.Enqueue(ctx, o, p, 4096, v)
			}
		}
		for range 32 {
			if _, err := q.Dequeue(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 10 {
		round() // warm up: levels, owners and rings
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("steady-state Enqueue/Dequeue allocate %v per round of 32", n)
	}
}

func BenchmarkDispatchQueueEnqueueDequeue(b *testing.B) {
	ctx := context.Background()
	q := NewDispatchQueue[int](0)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		o := uint64(i & 7)
		_ = q.Enqueue(ctx, o, 127, 4096, i)
		_ = q.Enqueue(ctx, o, 10, 4096, i)
		_, _ = q.Dequeue(ctx)
		_, _ = q.Dequeue(ctx)
		i++
	}
}

func BenchmarkDispatchQueueHandoff(b *testing.B) {
	ctx := context.Background()
	q := NewDispatchQueue[int](64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := q.Dequeue(ctx); err != nil {
				return
			}
		}
	}()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = q.Enqueue(ctx, uint64(i&3), 127, 4096, i)
		i++
	}
	q.Close()
	<-done
}
