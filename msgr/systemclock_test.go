package msgr

import (
	"strings"
	"testing"
	"time"
)

// TestSystemClockNow checks that SystemClock.Now, which derives the wall
// time from one time.Now per sysResync, agrees with time.Now taken on
// either side of it: monotonically within, and on the wall clock within
// a millisecond (the two clocks only part on a wall-clock step).
func TestSystemClockNow(t *testing.T) {
	var c SystemClock
	deadline := time.Now().Add(3 * sysResync) // across resyncs
	for n := 0; time.Now().Before(deadline) || n < 1000; n++ {
		a := time.Now()
		got := c.Now()
		b := time.Now()
		if got.Before(a) || got.After(b) {
			t.Fatalf("Now %v outside [%v, %v] (monotonic)", got, a, b)
		}
		if w := got.UnixNano(); w < a.UnixNano()-int64(time.Millisecond) || w > b.UnixNano()+int64(time.Millisecond) {
			t.Fatalf("Now's wall time %d outside [%d, %d] ± 1 ms", w, a.UnixNano(), b.UnixNano())
		}
		if !strings.Contains(got.String(), " m=") {
			t.Fatal("Now has no monotonic reading")
		}
	}
}

func BenchmarkSystemClockNow(b *testing.B) {
	var c SystemClock
	b.Run("impl=time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
	b.Run("impl=SystemClock", func(b *testing.B) {
		for b.Loop() {
			_ = c.Now()
		}
	})
}
