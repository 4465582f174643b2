package swim

import (
	"errors"
	"testing"
	"time"
)

// TestDetectionTime checks the arithmetic with the defaults, and the
// promise it supports: a crashed member of a group of up to 8 is known dead
// to all within 30 s.
func TestDetectionTime(t *testing.T) {
	for n := 2; n <= 8; n++ {
		if w := DetectionTime(Config{}, n).Worst; w > 30*time.Second {
			t.Fatalf("n=%d: worst %v > 30 s", n, w)
		}
	}
	d := DetectionTime(Config{}, 16)
	if d.Probe != 2700*time.Millisecond || d.Worst != 37700*time.Millisecond || d.Spread != 6*time.Second || d.Likely != 44500*time.Millisecond {
		t.Fatalf("n=16: %+v", d)
	}
	if d.Bound() != d.Worst {
		t.Fatalf("bound %v", d.Bound())
	}
	d = DetectionTime(Config{}, 1024)
	if d.Suspicion < 12*time.Second || d.Suspicion > 12100*time.Millisecond || d.Bound() != 52500*time.Millisecond {
		t.Fatalf("n=1024: %+v", d)
	}
	// Other settings enter the formulas.
	d = DetectionTime(Config{Period: 2 * time.Second, PingTimeout: time.Second, SuspicionTimeout: 10 * time.Second}, 4)
	if d.Probe != 3*time.Second || d.Worst != 3*2*time.Second+3*time.Second+10*time.Second {
		t.Fatalf("custom: %+v", d)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Config{
		{Period: -1},
		{PingTimeout: time.Second, IndirectTimeout: time.Second},
		{SuspicionTimeout: time.Second, SuspicionMinTimeout: 2 * time.Second},
		{Confirmations: MaxConfirmations + 1},
		{IndirectPings: 17},
		{MaxPiggyback: MaxUpdates - 2},
		{AwarenessMax: 65},
		{QueueLimit: -1},
	}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted an invalid config")
		}
	}()
	New(0, Config{Period: -1}, nil)
}
