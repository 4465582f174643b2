package sim

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestScheduleSeeded(t *testing.T) {
	f := Faults{Kill: 10, Pause: 5, Crashes: []Crash{{Rank: 3, At: time.Second}}}
	d, suspect := 10*time.Minute, 20*time.Second
	c1, p1, err := f.schedule(100, d, suspect, rand.New(rand.NewPCG(7, 1)))
	if err != nil {
		t.Fatal(err)
	}
	c2, p2, _ := f.schedule(100, d, suspect, rand.New(rand.NewPCG(7, 1)))
	if !slices.Equal(c1, c2) || !slices.Equal(p1, p2) {
		t.Fatal("same seed, different schedules")
	}
	c3, _, _ := f.schedule(100, d, suspect, rand.New(rand.NewPCG(8, 1)))
	if slices.Equal(c1, c3) {
		t.Fatal("different seeds, same schedule")
	}
	if len(c1) != 11 || len(p1) != 5 {
		t.Fatalf("%d crashes, %d pauses", len(c1), len(p1))
	}
	seen := map[int]bool{}
	for _, c := range c1 {
		if seen[c.Rank] {
			t.Fatalf("rank %d crashes twice", c.Rank)
		}
		seen[c.Rank] = true
		if c.At < 0 || c.At >= d/2 {
			t.Fatalf("crash at %v, outside the first half", c.At)
		}
	}
	for _, p := range p1 {
		if seen[p.Rank] {
			t.Fatalf("rank %d paused and crashed", p.Rank)
		}
		seen[p.Rank] = true
		if p.At < 0 || p.At >= d/2 {
			t.Fatalf("pause at %v, outside the first half", p.At)
		}
		if p.For < suspect/4 || p.For > suspect/2 {
			t.Fatalf("pause for %v, want between a quarter and a half of %v", p.For, suspect)
		}
	}
	if !slices.IsSortedFunc(c1, func(a, b Crash) int { return cmpDur(a.At, b.At) }) {
		t.Fatal("crashes not sorted by time")
	}
}

func TestScheduleBad(t *testing.T) {
	for _, f := range []Faults{
		{Kill: 6, Pause: 5},
		{Kill: -1},
		{PauseFor: -time.Second},
		{Crashes: []Crash{{Rank: 1}, {Rank: 1}}},
		{Crashes: []Crash{{Rank: 10}}},
		{Pauses: []Pause{{Rank: 0, For: -1}}},
		{Kill: 10, Crashes: []Crash{{Rank: 0}}},
	} {
		if _, _, err := f.schedule(10, time.Minute, time.Second, rand.New(rand.NewPCG(1, 1))); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: err %v, want ErrConfig", f, err)
		}
	}
}
