package sim

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/swim"
)

// run runs cfg and fails the test on an error or a codec failure.
func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.DecodeErrors != 0 {
		t.Fatalf("%d messages did not decode", res.DecodeErrors)
	}
	if res.Sent == 0 || res.Delivered == 0 {
		t.Fatalf("sent %d, delivered %d: nothing happened", res.Sent, res.Delivered)
	}
	return res
}

func small(seed uint64) Config {
	return Config{
		Ranks:    64,
		Seed:     seed,
		Duration: 40 * time.Second,
		Network:  Network{Loss: 0.01},
		Faults:   Faults{Kill: 2, Pause: 2},
	}
}

// TestSameSeedSameTrace: one seed gives one trace byte for byte; another
// seed gives another.
func TestSameSeedSameTrace(t *testing.T) {
	var t1, t2 bytes.Buffer
	c := small(11)
	c.Trace = &t1
	a := run(t, c)
	c.Trace = &t2
	b := run(t, c)
	if a.TraceHash != b.TraceHash || !bytes.Equal(t1.Bytes(), t2.Bytes()) {
		t.Fatalf("same seed: hashes %s and %s, traces equal %v", a.TraceHash, b.TraceHash, bytes.Equal(t1.Bytes(), t2.Bytes()))
	}
	if a.Sent != b.Sent || a.Events != b.Events || a.TraceRecords != b.TraceRecords {
		t.Fatalf("same seed: %d/%d sent, %d/%d events", a.Sent, b.Sent, a.Events, b.Events)
	}
	if t1.Len() == 0 {
		t.Fatal("empty trace")
	}
	d := run(t, small(12))
	if d.TraceHash == a.TraceHash {
		t.Fatal("different seeds, same trace hash")
	}
}

// TestCodecsAgree: a message copied as a struct and one encoded and
// decoded by swim's codec reach the machine the same, so the traces match.
func TestCodecsAgree(t *testing.T) {
	c := small(5)
	a := run(t, c)
	c.Codec = CodecStruct
	b := run(t, c)
	if a.TraceHash != b.TraceHash {
		t.Fatalf("bytes codec %s, struct codec %s", a.TraceHash, b.TraceHash)
	}
}

// TestCrashesDetectedNoFalsePositives: at 1% loss every crash is known to
// every live rank, and no live rank is declared dead.
func TestCrashesDetectedNoFalsePositives(t *testing.T) {
	res := run(t, Config{
		Ranks:    128,
		Seed:     3,
		Duration: 90 * time.Second,
		Network:  Network{Loss: 0.01},
		Faults:   Faults{Kill: 4},
	})
	if len(res.Crashes) != 4 {
		t.Fatalf("%d crashes, want 4", len(res.Crashes))
	}
	if res.DetectedByAll != 4 {
		for _, c := range res.Crashes {
			t.Logf("%+v", c)
		}
		t.Fatalf("%d of 4 crashes known to all", res.DetectedByAll)
	}
	if res.FalsePositives != 0 {
		t.Fatalf("%d false positives (%d declarations)", res.FalsePositives, res.FalseDeclarations)
	}
	det := swim.DetectionTime(swim.Config{}, 128)
	// The expected time to the first death, then a few periods for the
	// news to reach everyone by gossip (each update is piggybacked
	// 4·ceil(log10(129)) = 12 times); never beyond the worst case.
	bound := min(det.Expected+10*res.Period, det.Worst)
	for _, c := range res.Crashes {
		t.Logf("rank %d: first detected after %v, known to all after %v (expected first death %v)", c.Rank, c.FirstDetected-c.At, c.KnownByAll-c.At, det.Expected)
		if c.FirstDetected < c.At || c.KnownByAll < c.FirstDetected || c.Known != c.Live || c.Live != 124 {
			t.Errorf("crash %+v", c)
		}
		if d := c.KnownByAll - c.At; d > bound {
			t.Errorf("rank %d known to all %v after its crash, bound %v", c.Rank, d, bound)
		}
	}
	if m := res.MsgsPerRankPeriod(); m < 1 || m > 10 {
		t.Errorf("%.2f messages per rank per period", m)
	}
}

// TestPausedResumedInTime: ranks paused for less than the suspicion
// timeout are suspected (the pause bites) but refute in time.
func TestPausedResumedInTime(t *testing.T) {
	res := run(t, Config{
		Ranks:    128,
		Seed:     4,
		Duration: 60 * time.Second,
		Network:  Network{Loss: 0.01},
		Faults:   Faults{Pause: 4, PauseFor: 7 * time.Second},
	})
	if len(res.Pauses) != 4 {
		t.Fatalf("%d pauses", len(res.Pauses))
	}
	for _, p := range res.Pauses {
		if p.Suspected == 0 {
			t.Errorf("rank %d paused for %v and nobody suspected it", p.Rank, p.For)
		}
		if p.DeclaredDead != 0 {
			t.Errorf("rank %d paused for %v declared dead by %d", p.Rank, p.For, p.DeclaredDead)
		}
	}
	if res.FalsePositives != 0 {
		t.Fatalf("%d false positives", res.FalsePositives)
	}
}

// TestPausedTooLong: a pause far beyond the suspicion timeout is taken
// for a crash, which is what makes the previous test mean something.
func TestPausedTooLong(t *testing.T) {
	res := run(t, Config{
		Ranks:    64,
		Seed:     4,
		Duration: 60 * time.Second,
		Faults:   Faults{Pauses: []Pause{{Rank: 9, At: time.Second, For: 45 * time.Second}}},
	})
	if len(res.Pauses) != 1 || res.Pauses[0].DeclaredDead == 0 || res.FalsePositives != 1 {
		t.Fatalf("pauses %+v, false positives %d", res.Pauses, res.FalsePositives)
	}
}

// TestPartitionCuts: a long partition makes each side declare the other
// dead (not within the unconfirmed suspicion timeout: probes whose helpers
// are cut off raise the probers' local health multipliers, so the sides
// slow down first); the messages between them are dropped.
func TestPartitionCuts(t *testing.T) {
	side := make([]int, 16)
	for i := range side {
		side[i] = i
	}
	res := run(t, Config{
		Ranks:    32,
		Seed:     6,
		Duration: 110 * time.Second,
		Network:  Network{Partitions: []Partition{{Start: time.Second, End: 100 * time.Second, Side: side}}},
	})
	if res.FalsePositives != 32 {
		t.Fatalf("%d ranks declared dead across a 99 s partition, want all 32", res.FalsePositives)
	}
	if res.Dropped == 0 {
		t.Fatal("no message dropped")
	}
}

func TestRunBadConfig(t *testing.T) {
	for _, c := range []Config{
		{Ranks: 0, Duration: time.Second},
		{Ranks: 4},
		{Ranks: 4, Duration: time.Second, Network: Network{Loss: 2}},
		{Ranks: 4, Duration: time.Second, Faults: Faults{Kill: 5}},
		{Ranks: 4, Duration: time.Second, Codec: 9},
	} {
		if _, err := Run(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, small(1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}
