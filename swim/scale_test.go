package swim

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestClusterScale is a measurement, run by hand (it takes seconds per
// thousand members):
//
//	SWIM_SCALE_N=1024 go test -run ClusterScale -v ./swim
//
// n members, 1% loss, 10 crashes after 30 s, 10 simulated minutes: every
// crash must be known dead to all within the Likely bound and no live
// member declared dead; it logs the speed and the message rate.
func TestClusterScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SWIM_SCALE_N"))
	dur := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("SWIM_SCALE_DUR")); err == nil {
		dur = d
	}
	if n < 1000 {
		t.Skip("SWIM_SCALE_N (at least 1000) not set")
	}
	c := newCluster(t, n, Config{}, 1)
	c.loss = 0.01
	w := time.Now()
	c.run(30 * time.Second)
	t.Logf("setup+30s %v", time.Since(w))
	w = time.Now()
	victims := []int{3, 100, 200, 300, 400, 500, 600, 700, 800, 900}
	for _, v := range victims {
		c.crashed[v%n] = true
	}
	crashAt := c.now
	c.run(crashAt + dur)
	el := time.Since(w)
	var worst time.Duration
	for _, v := range victims {
		at, ok := c.allSeeDead(v % n)
		if bound := DetectionTime(Config{}, n).Likely; !ok || at-crashAt > bound {
			t.Errorf("victim %d known dead to all: %v after %v (bound %v)", v, ok, at-crashAt, bound)
		}
		worst = max(worst, at-crashAt)
	}
	fp := 0
	for _, e := range c.events {
		if e.State == Dead {
			isV := false
			for _, v := range victims {
				isV = isV || int(e.ID) == v
			}
			if !isV {
				fp++
			}
		}
	}
	var st Stats
	for _, m := range c.ms {
		s := m.Stats()
		st.Suspicions += s.Suspicions
		st.Confirms += s.Confirms
		st.Refutations += s.Refutations
		st.QueueDropped += s.QueueDropped
	}
	if fp != 0 {
		t.Errorf("%d false dead events", fp)
	}
	t.Logf("n=%d: %v simulated in %v (%.1f s/s); %.2f msgs/rank/s; worst dead-at-all %v; false dead events %d; stats %+v", n, dur, el, dur.Seconds()/el.Seconds(), float64(c.sent)/float64(n)/(dur.Seconds()+30), worst, fp, st)
}
