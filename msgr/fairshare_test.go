package msgr

import (
	"context"
	"testing"
	"testing/synctest"
)

// floodHolds has each of n holders take c units at a time from th, round
// robin, until none of them can take more at once, and returns their
// holds.
func floodHolds(th *Throttle, n int, c int64) []*throttleHold {
	hs := make([]*throttleHold, n)
	for i := range hs {
		hs[i] = new(throttleHold)
	}
	for took := true; took; {
		took = false
		for _, h := range hs {
			if th.tryGet(h, c) {
				took = true
			}
		}
	}
	return hs
}

// TestThrottleFairShareLeavesRoom: four holders that take all they can
// stop at their share once more than half the throttle is held, so the
// other half stays free and a holder that arrives later is admitted at
// once. Without holders (Get called directly) the same flood takes
// everything and the late request must wait.
func TestThrottleFairShareLeavesRoom(t *testing.T) {
	const max, c = 1000, 10
	th := NewThrottle("fair", max)
	hs := floodHolds(th, 4, c)
	// Pressure starts past 500; from there each holder may hold at
	// most 750/4 (and the one take that crossed the line), and takes by
	// holders that hold something stop at 750.
	if cur := th.Current(); cur > max*3/4 {
		t.Fatalf("four flooding holders hold %d of %d: more than three quarters", cur, max)
	}
	for i, h := range hs {
		if h.held > max*3/4/4+c {
			t.Fatalf("holder %d holds %d, over its share %d", i, h.held, max*3/4/4)
		}
	}
	honest := new(throttleHold)
	if !th.tryGet(honest, c) {
		t.Fatalf("a new holder is refused at %d of %d", th.Current(), max)
	}
	// Now five hold something: every flooder is over its share of
	// 150 and may take no more...
	for i, h := range hs {
		if th.tryGet(h, c) {
			t.Fatalf("flooder %d took more while over its share", i)
		}
	}
	// ...and once the honest holder is done and the flooders give some
	// back, they take again.
	th.put(honest, c)
	for _, h := range hs {
		th.put(h, h.held)
	}
	if th.Current() != 0 || th.holders != 0 {
		t.Fatalf("after every put: current %d, holders %d", th.Current(), th.holders)
	}

	plain := NewThrottle("plain", max)
	for plain.TryGet(c) {
	}
	if plain.Current() != max {
		t.Fatalf("a flood without holders stopped at %d of %d", plain.Current(), max)
	}
	if plain.TryGet(c) {
		t.Fatal("a full throttle admitted more")
	}
}

// TestThrottleFairShareAlone: a holder alone stops at three quarters of
// the throttle, so that a holder coming later finds room; one take as
// large as the throttle still goes through.
func TestThrottleFairShareAlone(t *testing.T) {
	th := NewThrottle("alone", 100)
	hs := floodHolds(th, 1, 10)
	if h := hs[0].held; h != 70 {
		t.Fatalf("a lone holder got %d of 100, want 70 (three quarters, in takes of 10)", h)
	}
	if !th.tryGet(new(throttleHold), 30) {
		t.Fatalf("a second holder is refused at %d of 100", th.Current())
	}
	th.put(hs[0], hs[0].held)
	th.put(nil, 30)
	big := new(throttleHold)
	if !th.tryGet(big, 100) || th.tryGet(big, 1) {
		t.Fatalf("a take of the whole throttle: held %d, current %d", big.held, th.Current())
	}
}

// TestThrottleFairShareOrder: waiters within their share are served
// before waiters over it, whatever the order they came in; over-share
// waiters are served once the pressure is gone, in arrival order.
func TestThrottleFairShareOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := throttleTestCtx(t)
		th := NewThrottle("order", 100)
		f1, f2, honest := new(throttleHold), new(throttleHold), new(throttleHold)
		if !th.tryGet(f1, 30) || !th.tryGet(f2, 30) {
			t.Fatal("the first takes were refused")
		}
		// 60 of 100 held: pressure; each flooder's share is 75/2.
		get := func(h *throttleHold, c int64) <-chan error {
			done := make(chan error, 1)
			go func() { done <- th.get(ctx, h, c) }()
			synctest.Wait()
			return done
		}
		w1 := get(f1, 10)
		w2 := get(f2, 10)
		throttleTestPending(t, w1)
		throttleTestPending(t, w2)
		if th.Waiters() != 2 {
			t.Fatalf("%d waiters, want the two flooders", th.Waiters())
		}
		// The honest holder asks for more than is free: it waits, and
		// the release that makes room goes to it, not to the
		// flooders that came first.
		wh := get(honest, 45)
		throttleTestPending(t, wh)
		th.put(f1, 5)
		if err := throttleTestResult(t, wh); err != nil {
			t.Fatal(err)
		}
		throttleTestPending(t, w1)
		throttleTestPending(t, w2)
		// The honest holder is done: 55 held, and the flooders are
		// served in arrival order as far as their shares (75/2) go:
		// f1, holding 25, takes its 10; f2, holding 30, waits.
		th.put(honest, 45)
		if err := throttleTestResult(t, w1); err != nil {
			t.Fatal(err)
		}
		throttleTestPending(t, w2)
		// f1 gives back everything: f2 is alone, under pressure no
		// more, and served.
		th.put(f1, 35)
		if err := throttleTestResult(t, w2); err != nil {
			t.Fatal(err)
		}
		if f1.held != 0 || f2.held != 40 || th.Current() != 40 || th.holders != 1 {
			t.Fatalf("end: f1 %d, f2 %d, current %d, holders %d", f1.held, f2.held, th.Current(), th.holders)
		}
	})
}

// TestThrottleFairShareCancel: a waiter that gives up leaves its holder's
// account as it was and lets the others in.
func TestThrottleFairShareCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := NewThrottle("cancel", 10)
		a, b := new(throttleHold), new(throttleHold)
		if !th.tryGet(a, 10) {
			t.Fatal("refused")
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- th.get(ctx, b, 5) }()
		synctest.Wait()
		if th.holders != 2 {
			t.Fatalf("holders %d while b waits, want 2", th.holders)
		}
		cancel()
		if err := throttleTestResult(t, done); err == nil {
			t.Fatal("a cancelled Get took budget")
		}
		if b.held != 0 || b.waits != 0 || th.holders != 1 {
			t.Fatalf("after the cancel: b %+v, holders %d", *b, th.holders)
		}
		th.put(a, 10)
		if th.holders != 0 || th.Current() != 0 {
			t.Fatalf("end: holders %d, current %d", th.holders, th.Current())
		}
	})
}
