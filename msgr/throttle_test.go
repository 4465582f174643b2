package msgr

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The tests that block run in synctest bubbles: synctest.Wait returns once
// every goroutine of the bubble is blocked, so "still waiting" and "has
// returned" are facts rather than guesses after a sleep.

// throttleTestCtx returns a context that ends after 10 s (virtual time in
// a bubble), so that a broken implementation fails the test instead of
// hanging it.
func throttleTestCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// throttleTestGet runs Get in a goroutine and returns a channel that
// receives its result, once the call is queued as a waiter. Run it in a
// bubble.
func throttleTestGet(t *testing.T, th *Throttle, ctx context.Context, c int64) <-chan error {
	t.Helper()
	before := th.Waiters()
	done := make(chan error, 1)
	go func() { done <- th.Get(ctx, c) }()
	synctest.Wait()
	if n := th.Waiters(); n != before+1 {
		t.Fatalf("Get(%d) did not wait: %d waiters, want %d", c, n, before+1)
	}
	return done
}

// throttleTestResult returns the result of a Get that must have returned
// by the time every goroutine of the bubble is blocked.
func throttleTestResult(t *testing.T, done <-chan error) error {
	t.Helper()
	synctest.Wait()
	select {
	case err := <-done:
		return err
	default:
		t.Fatal("Get did not return")
		return nil
	}
}

// throttleTestPending checks that a Get is still waiting once every
// goroutine of the bubble is blocked.
func throttleTestPending(t *testing.T, done <-chan error) {
	t.Helper()
	synctest.Wait()
	select {
	case err := <-done:
		t.Fatalf("Get returned %v, want it still waiting", err)
	default:
	}
}

// TestThrottleRule checks Ceph's waiting rule:
// max && ((c <= max && cur+c > max) || (c >= max && cur > max)).
func TestThrottleRule(t *testing.T) {
	tests := []struct {
		max, cur, c int64
		wait        bool
	}{
		{0, 0, 1, false},
		{0, 1 << 40, 1 << 40, false}, // unlimited
		{10, 0, 1, false},
		{10, 0, 10, false},
		{10, 9, 1, false},
		{10, 10, 1, true},
		{10, 9, 2, true},
		{10, 1, 10, true},  // c == max needs cur == 0
		{10, 0, 11, false}, // oversize passes when idle
		{10, 5, 11, false}, // ... and whenever cur <= max
		{10, 10, 11, false},
		{10, 11, 11, true}, // cur > max
		{10, 11, 1, true},
		{10, 20, 100, true},
		{1, 0, 1, false},
		{1, 1, 1, true},
	}
	for _, tt := range tests {
		th := NewThrottle("rule", 0)
		if err := th.Get(throttleTestCtx(t), tt.cur); err != nil {
			t.Fatal(err)
		}
		th.SetMax(tt.max)
		got := !th.TryGet(tt.c)
		if got != tt.wait {
			t.Errorf("max=%d cur=%d c=%d: wait=%v, want %v", tt.max, tt.cur, tt.c, got, tt.wait)
		}
		want := tt.cur
		if !tt.wait {
			want += tt.c
		}
		if th.Current() != want {
			t.Errorf("max=%d cur=%d c=%d: Current()=%d, want %d", tt.max, tt.cur, tt.c, th.Current(), want)
		}
		// Get agrees with TryGet: it returns at once iff it need not wait.
		th2 := NewThrottle("rule", 0)
		_ = th2.Get(throttleTestCtx(t), tt.cur)
		th2.SetMax(tt.max)
		ctx, cancel := context.WithCancel(throttleTestCtx(t))
		cancel()
		err := th2.Get(ctx, tt.c)
		if (err != nil) != tt.wait {
			t.Errorf("max=%d cur=%d c=%d: Get with done ctx = %v, want wait=%v", tt.max, tt.cur, tt.c, err, tt.wait)
		}
		if tt.wait && th2.Current() != tt.cur {
			t.Errorf("max=%d cur=%d c=%d: failed Get leaked budget: Current()=%d", tt.max, tt.cur, tt.c, th2.Current())
		}
	}
}

func TestThrottleNil(t *testing.T) {
	var th *Throttle
	if err := th.Get(throttleTestCtx(t), 1<<50); err != nil {
		t.Fatal(err)
	}
	if !th.TryGet(1 << 50) {
		t.Fatal("nil TryGet failed")
	}
	th.Put(5)
	th.SetMax(3)
	if th.Current() != 0 || th.Max() != 0 || th.Waiters() != 0 || th.Name() != "" {
		t.Fatal("nil accessors not zero")
	}
}

func TestThrottleAccessors(t *testing.T) {
	th := NewThrottle("bytes", 100)
	if th.Name() != "bytes" || th.Max() != 100 || th.Current() != 0 {
		t.Fatalf("got %q %d %d", th.Name(), th.Max(), th.Current())
	}
	if NewThrottle("neg", -5).Max() != 0 {
		t.Fatal("negative max not treated as 0")
	}
	// Zero and negative counts are no-ops.
	if err := th.Get(throttleTestCtx(t), 0); err != nil || !th.TryGet(-1) {
		t.Fatal("zero/negative get failed")
	}
	th.Put(-3)
	if th.Current() != 0 {
		t.Fatalf("Current()=%d", th.Current())
	}
}

func TestThrottleFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := throttleTestCtx(t)
		th := NewThrottle("fifo", 10)
		if err := th.Get(ctx, 10); err != nil {
			t.Fatal(err)
		}
		a := throttleTestGet(t, th, ctx, 5) // head: needs 5
		b := throttleTestGet(t, th, ctx, 1)
		c := throttleTestGet(t, th, ctx, 1)

		// One unit frees: b and c would fit, but a is ahead of them.
		th.Put(1)
		if th.Current() != 9 || th.Waiters() != 3 {
			t.Fatalf("after Put(1): cur=%d waiters=%d, want 9, 3", th.Current(), th.Waiters())
		}
		throttleTestPending(t, a)
		throttleTestPending(t, b)
		if th.TryGet(1) {
			t.Fatal("TryGet overtook waiters")
		}

		// Four more: a fits (cur 5+5=10); b and c stay behind.
		th.Put(4)
		if err := throttleTestResult(t, a); err != nil {
			t.Fatal(err)
		}
		if th.Current() != 10 || th.Waiters() != 2 {
			t.Fatalf("after Put(4): cur=%d waiters=%d, want 10, 2", th.Current(), th.Waiters())
		}
		throttleTestPending(t, b)

		// One: b only.
		th.Put(1)
		if err := throttleTestResult(t, b); err != nil {
			t.Fatal(err)
		}
		throttleTestPending(t, c)
		if th.Current() != 10 || th.Waiters() != 1 {
			t.Fatalf("after Put(1): cur=%d waiters=%d, want 10, 1", th.Current(), th.Waiters())
		}
		th.Put(1)
		if err := throttleTestResult(t, c); err != nil {
			t.Fatal(err)
		}
		th.Put(10)
		if th.Current() != 0 || th.Waiters() != 0 {
			t.Fatalf("end: cur=%d waiters=%d", th.Current(), th.Waiters())
		}
	})
}

func TestThrottleCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bg := throttleTestCtx(t)
		th := NewThrottle("cancel", 10)
		if err := th.Get(bg, 9); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		a := throttleTestGet(t, th, ctx, 8) // head, does not fit
		b := throttleTestGet(t, th, bg, 1)  // fits, but behind a
		throttleTestPending(t, b)

		cancel()
		if err := throttleTestResult(t, a); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Get = %v, want context.Canceled", err)
		}
		// Removing the head lets b through.
		if err := throttleTestResult(t, b); err != nil {
			t.Fatal(err)
		}
		if th.Current() != 10 || th.Waiters() != 0 {
			t.Fatalf("cur=%d waiters=%d, want 10, 0", th.Current(), th.Waiters())
		}

		// A cancelled waiter in the middle leaves no trace either.
		ctx2, cancel2 := context.WithTimeout(bg, time.Hour)
		x := throttleTestGet(t, th, bg, 3)
		y := throttleTestGet(t, th, ctx2, 3)
		z := throttleTestGet(t, th, bg, 3)
		cancel2()
		if err := throttleTestResult(t, y); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		if th.Waiters() != 2 {
			t.Fatalf("waiters=%d, want 2", th.Waiters())
		}
		th.Put(10)
		for _, ch := range []<-chan error{x, z} {
			if err := throttleTestResult(t, ch); err != nil {
				t.Fatal(err)
			}
		}
		if th.Current() != 6 {
			t.Fatalf("cur=%d, want 6 (cancelled request took budget?)", th.Current())
		}
	})
}

// TestThrottleLargeNotStarved: a request for the whole budget, queued
// while small callers keep taking and returning units, is served as soon
// as the units held before it come back; the small callers, arriving
// after it, wait behind it even while there is room for them (Ceph's
// Throttle: no starvation of large requests).
func TestThrottleLargeNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := throttleTestCtx(t)
		th := NewThrottle("large", 10)
		for range 3 {
			if err := th.Get(ctx, 3); err != nil { // held: 9
				t.Fatal(err)
			}
		}
		big := throttleTestGet(t, th, ctx, 10)
		const smalls, rounds = 5, 100
		done := make(chan error, smalls)
		for range smalls {
			go func() {
				for range rounds {
					if err := th.Get(ctx, 1); err != nil {
						done <- err
						return
					}
					th.Put(1)
				}
				done <- nil
			}()
		}
		synctest.Wait()
		if th.Waiters() != 1+smalls || th.Current() != 9 {
			t.Fatalf("waiters %d, current %d: want the small callers queued behind the large one, with 1 unit free", th.Waiters(), th.Current())
		}
		th.Put(3)
		th.Put(3)
		throttleTestPending(t, big)
		th.Put(3) // nothing held: the large request goes first
		if err := throttleTestResult(t, big); err != nil {
			t.Fatal(err)
		}
		if th.Current() != 10 || th.Waiters() != smalls {
			t.Fatalf("after the large grant: current %d, waiters %d", th.Current(), th.Waiters())
		}
		th.Put(10)
		for range smalls {
			if err := throttleTestResult(t, done); err != nil {
				t.Fatal(err)
			}
		}
		if th.Current() != 0 || th.Waiters() != 0 {
			t.Fatalf("end: current %d, waiters %d", th.Current(), th.Waiters())
		}
	})
}

func TestThrottleOversize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := throttleTestCtx(t)
		th := NewThrottle("oversize", 10)
		if err := th.Get(ctx, 25); err != nil { // cur 0: passes
			t.Fatal(err)
		}
		small := throttleTestGet(t, th, ctx, 1) // cur 25 > max: waits
		big := throttleTestGet(t, th, ctx, 30)  // cur > max: waits
		th.Put(20)                              // cur 5: small fits (6), then big (c >= max, cur 6 <= max)
		for _, ch := range []<-chan error{small, big} {
			if err := throttleTestResult(t, ch); err != nil {
				t.Fatal(err)
			}
		}
		if th.Current() != 36 {
			t.Fatalf("cur=%d, want 36", th.Current())
		}
		th.Put(36)
		if th.Current() != 0 {
			t.Fatalf("cur=%d", th.Current())
		}
	})
}

func TestThrottleSetMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := throttleTestCtx(t)
		th := NewThrottle("setmax", 4)
		if err := th.Get(ctx, 4); err != nil {
			t.Fatal(err)
		}
		a := throttleTestGet(t, th, ctx, 2)
		b := throttleTestGet(t, th, ctx, 2)
		th.SetMax(3) // shrinking admits nobody
		throttleTestPending(t, a)
		th.SetMax(6) // room for a only
		if err := throttleTestResult(t, a); err != nil {
			t.Fatal(err)
		}
		throttleTestPending(t, b)
		if th.Current() != 6 || th.Waiters() != 1 {
			t.Fatalf("cur=%d waiters=%d, want 6, 1", th.Current(), th.Waiters())
		}
		th.SetMax(0) // unlimited admits everyone
		if err := throttleTestResult(t, b); err != nil {
			t.Fatal(err)
		}
		if th.Current() != 8 || th.Max() != 0 {
			t.Fatalf("cur=%d max=%d", th.Current(), th.Max())
		}
	})
}

func TestThrottleOverPut(t *testing.T) {
	th := NewThrottle("overput", 10)
	if !th.TryGet(3) {
		t.Fatal("TryGet failed")
	}
	th.Put(5) // logs a warning, clamps
	if th.Current() != 0 {
		t.Fatalf("cur=%d, want 0", th.Current())
	}
	if !th.TryGet(10) {
		t.Fatal("budget lost after over-put")
	}
}

// TestThrottleHammer checks, under -race, that the bound holds and all
// budget comes back, with some callers cancelling.
func TestThrottleHammer(t *testing.T) {
	for _, oversize := range []bool{false, true} {
		const max = 100
		const maxOversize = 150
		th := NewThrottle("hammer", max)
		bound := int64(max)
		if oversize {
			bound += maxOversize
		}
		// Everything waits under hctx so a broken throttle fails the
		// test instead of hanging it.
		hctx, hcancel := context.WithTimeout(context.Background(), 30*time.Second)
		var wg sync.WaitGroup
		var violations, ok, cancelled atomic.Int64
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for range 400 {
					c := 1 + r.Int64N(max)
					if oversize && r.IntN(10) == 0 {
						c = max + 1 + r.Int64N(maxOversize-max)
					}
					var err error
					switch r.IntN(4) {
					case 0:
						if !th.TryGet(c) {
							continue
						}
					case 1:
						ctx, cancel := context.WithCancel(hctx)
						if r.IntN(2) == 0 {
							cancel() // may still succeed if it need not wait
						} else {
							go cancel()
						}
						err = th.Get(ctx, c)
						cancel()
					default:
						err = th.Get(hctx, c)
					}
					if err != nil {
						cancelled.Add(1)
						continue
					}
					ok.Add(1)
					if cur := th.Current(); cur > bound || cur < c {
						violations.Add(1)
					}
					th.Put(c)
				}
			}()
		}
		wg.Wait()
		if hctx.Err() != nil {
			t.Fatalf("oversize=%v: hammer stuck", oversize)
		}
		hcancel()
		if v := violations.Load(); v != 0 {
			t.Errorf("oversize=%v: %d observations outside [c, %d]", oversize, v, bound)
		}
		if th.Current() != 0 || th.Waiters() != 0 {
			t.Errorf("oversize=%v: end cur=%d waiters=%d", oversize, th.Current(), th.Waiters())
		}
		if ok.Load() == 0 {
			t.Errorf("oversize=%v: nothing succeeded", oversize)
		}
		t.Logf("oversize=%v: %d ok, %d cancelled", oversize, ok.Load(), cancelled.Load())
	}
}

func TestThrottleAllocs(t *testing.T) {
	th := NewThrottle("allocs", 1000)
	ctx := throttleTestCtx(t)
	n := testing.AllocsPerRun(1000, func() {
		if err := th.Get(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if !th.TryGet(5) {
			t.Fatal("TryGet failed")
		}
		th.Put(15)
	})
	if n != 0 {
		t.Fatalf("uncontended Get/TryGet/Put allocate %v per run", n)
	}
}

func BenchmarkThrottleGetPut(b *testing.B) {
	th := NewThrottle("bench", 1<<30)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := th.Get(ctx, 4096); err != nil {
			b.Fatal(err)
		}
		th.Put(4096)
	}
}

func BenchmarkThrottleContended(b *testing.B) {
	th := NewThrottle("bench", 8)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := th.Get(ctx, 1); err != nil {
				b.Fatal(err)
			}
			th.Put(1)
		}
	})
}
