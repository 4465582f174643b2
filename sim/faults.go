package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Crash stops a rank for good at a time: it neither ticks nor receives
// again, and messages to it are dropped.
type Crash struct {
	Rank int
	At   time.Duration
}

// Pause stops a rank as SIGSTOP would, at At for For: the rank neither
// ticks nor receives while paused; messages to it wait in its inbound
// buffer (Network.PauseBuffer) and reach it when it resumes, in the order
// they arrived, before its next tick.
type Pause struct {
	Rank int
	At   time.Duration
	For  time.Duration
}

// Faults is the fault schedule. Kill and Pause ranks are chosen, and their
// times drawn, from the run's seed; Crashes and Pauses are added as given.
type Faults struct {
	// Kill is how many ranks crash, at seeded times in the first half of
	// the run.
	Kill int
	// Pause is how many other ranks are paused, at seeded times in the
	// first half of the run.
	Pause int
	// PauseFor is how long each seeded pause lasts. Zero means a seeded
	// duration from a quarter to a half of the shortest SWIM suspicion
	// timeout (one confirmed as often as counts), so that the rank
	// resumes before any suspicion of it can end.
	PauseFor time.Duration
	// Crashes and Pauses are explicit faults, in addition to the seeded
	// ones.
	Crashes []Crash
	Pauses  []Pause
}

// schedule draws the seeded faults and merges them with the explicit
// ones. A rank crashes at most once; seeded pauses go to ranks that do not
// crash. The result is sorted by time, then rank.
func (f *Faults) schedule(ranks int, d, suspect time.Duration, rnd *rand.Rand) ([]Crash, []Pause, error) {
	if f.Kill < 0 || f.Pause < 0 || f.Kill+f.Pause > ranks {
		return nil, nil, fmt.Errorf("%w: %d kills and %d pauses among %d ranks", ErrConfig, f.Kill, f.Pause, ranks)
	}
	if f.PauseFor < 0 {
		return nil, nil, fmt.Errorf("%w: pause duration %v", ErrConfig, f.PauseFor)
	}
	crashed := make(map[int]bool)
	var crashes []Crash
	for _, c := range f.Crashes {
		if c.Rank < 0 || c.Rank >= ranks || c.At < 0 {
			return nil, nil, fmt.Errorf("%w: crash of rank %d at %v", ErrConfig, c.Rank, c.At)
		}
		if crashed[c.Rank] {
			return nil, nil, fmt.Errorf("%w: rank %d crashes twice", ErrConfig, c.Rank)
		}
		crashed[c.Rank] = true
		crashes = append(crashes, c)
	}
	pauses := slices.Clone(f.Pauses)
	for _, p := range pauses {
		if p.Rank < 0 || p.Rank >= ranks || p.At < 0 || p.For < 0 {
			return nil, nil, fmt.Errorf("%w: pause of rank %d at %v for %v", ErrConfig, p.Rank, p.At, p.For)
		}
	}
	// Choose the seeded ranks with a partial Fisher-Yates shuffle of the
	// ranks not already crashing, so the draw costs O(kill+pause) beyond
	// the slice.
	pool := make([]int, 0, ranks)
	for r := range ranks {
		if !crashed[r] {
			pool = append(pool, r)
		}
	}
	if f.Kill+f.Pause > len(pool) {
		return nil, nil, fmt.Errorf("%w: not enough ranks left for %d kills and %d pauses", ErrConfig, f.Kill, f.Pause)
	}
	for i := range f.Kill + f.Pause {
		j := i + rnd.IntN(len(pool)-i)
		pool[i], pool[j] = pool[j], pool[i]
	}
	half := int64(d / 2)
	at := func() time.Duration {
		if half <= 0 {
			return 0
		}
		return time.Duration(rnd.Int64N(half))
	}
	for _, r := range pool[:f.Kill] {
		crashes = append(crashes, Crash{Rank: r, At: at()})
	}
	for _, r := range pool[f.Kill : f.Kill+f.Pause] {
		p := Pause{Rank: r, At: at(), For: f.PauseFor}
		if p.For == 0 {
			q := int64(suspect / 4)
			p.For = time.Duration(q + rnd.Int64N(q+1))
		}
		pauses = append(pauses, p)
	}
	slices.SortFunc(crashes, func(a, b Crash) int {
		if a.At != b.At {
			return cmpDur(a.At, b.At)
		}
		return a.Rank - b.Rank
	})
	slices.SortFunc(pauses, func(a, b Pause) int {
		if a.At != b.At {
			return cmpDur(a.At, b.At)
		}
		return a.Rank - b.Rank
	})
	return crashes, pauses, nil
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
