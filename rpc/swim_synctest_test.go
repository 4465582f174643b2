package rpc_test

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/swim"
)

// envVirtual names the test a child process runs in its synctest
// bubble. Pooled requests carry channels, and a channel made in one
// bubble must not be used outside it: each bubble runs in a process of
// its own, so no pooled object crosses bubbles.
const envVirtual = "FERRY_RPC_VIRTUAL_TEST"

// inBubble runs body in a synctest bubble in a child process (this test
// binary, running only t), and reports the child's outcome.
func inBubble(t *testing.T, body func(t *testing.T)) {
	if os.Getenv(envVirtual) == t.Name() {
		synctest.Test(t, body)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	// Under -race the child would sleep 1 s at exit (the race runtime's
	// atexit_sleep_ms) for goroutines still running; a bubble has none left.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), envVirtual+"="+t.Name(), "GORACE="+gorace)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in its bubble: %v\n%s", t.Name(), err, out)
	}
	t.Logf("%s", out)
}

// With SWIM's defaults (1 s period, 20 s suspicion), a crashed rank of
// five is known dead (or removed by the authority) at every live rank
// within swim.DetectionTime's bound, 26.7 s, and no live rank is
// declared dead. Virtual time (synctest) runs the real protocol's
// periods in milliseconds.
func TestSWIMDefaultsDetectWithinBound(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const n = 5
		net := newNet()
		var srv []*rpc.Instance
		for r := range n {
			srv = append(srv, net.server(t, uint32(r), 1, rpc.Options{}))
		}
		for _, s := range srv {
			for _, o := range srv {
				if o != s {
					if err := s.Group().Add(o.Rank(), o.URI()); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		logs := make([]*eventLog, n)
		for i, s := range srv {
			logs[i] = watch(t, s.Group())
			if _, err := s.StartSWIM(rpc.SWIMOptions{Rand: rand.New(rand.NewPCG(uint64(i), 7))}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Second) // virtual: ten periods with everyone alive
		srv[n-1].Close()
		crashed := time.Now()
		bound := swim.DetectionTime(swim.Config{}, n).Worst
		known := func(i int) bool {
			for _, e := range logs[i].all() {
				if e.Rank == n-1 && (e.Kind == rpc.EventDead || e.Kind == rpc.EventLeft) {
					return true
				}
			}
			return false
		}
		for {
			all := true
			for i := range n - 1 {
				all = all && known(i)
			}
			if all {
				break
			}
			if time.Since(crashed) > bound {
				t.Fatalf("rank %d not known dead by every live rank %v after the crash (bound %v)", n-1, time.Since(crashed), bound)
			}
			time.Sleep(100 * time.Millisecond) // virtual
		}
		t.Logf("known dead by every live rank %v after the crash (bound %v)", time.Since(crashed), bound)
		for i := range n - 1 {
			for _, e := range logs[i].all() {
				if e.Rank != n-1 && e.Kind == rpc.EventDead {
					t.Errorf("rank %d: false positive %v", i, e)
				}
			}
		}
		for _, s := range srv[:n-1] {
			s.Close()
		}
	})
}

// A rank that died, was removed by the authority and restarts (at a
// higher incarnation, the clock's) is re-added by the authority: every rank ends with the same membership
// and version, the restarted one included.
func TestSWIMRestartedRankRejoins(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const n = 4
		net := newNet()
		start := func(r int) *rpc.Instance {
			s := net.server(t, uint32(r), 1, rpc.Options{})
			return s
		}
		var srv []*rpc.Instance
		for r := range n {
			srv = append(srv, start(r))
		}
		join := func(s *rpc.Instance) {
			for _, o := range srv {
				if o != s && o.Rank() != s.Rank() {
					if err := s.Group().Add(o.Rank(), o.URI()); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		for _, s := range srv {
			join(s)
		}
		for i, s := range srv {
			if _, err := s.StartSWIM(rpc.SWIMOptions{Rand: rand.New(rand.NewPCG(uint64(i), 9))}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Second) // virtual
		srv[3].Close()
		removedEverywhere := func() bool {
			for _, s := range srv[:3] {
				if s.Group().Has(3) {
					return false
				}
			}
			return true
		}
		for i := 0; !removedEverywhere(); i++ {
			if i > 400 {
				t.Fatal("rank 3 not removed within 40 s")
			}
			time.Sleep(100 * time.Millisecond) // virtual
		}
		v := srv[0].Group().Version()
		// Rank 3 restarts at the same address.
		re := start(3)
		join(re)
		log := watch(t, re.Group())
		sw, err := re.StartSWIM(rpc.SWIMOptions{Rand: rand.New(rand.NewPCG(3, 10))})
		if err != nil {
			t.Fatal(err)
		}
		srv[3] = re
		rejoined := func() bool {
			want := srv[0].Group().Version()
			if want <= v {
				return false
			}
			for _, s := range srv {
				if !s.Group().Has(3) || s.Group().Version() != want || len(s.Group().Live()) != n {
					return false
				}
			}
			return true
		}
		for i := 0; !rejoined(); i++ {
			if i > 300 {
				for _, s := range srv {
					t.Logf("rank %d: version %d ranks %v live %v", s.Rank(), s.Group().Version(), s.Group().Ranks(), s.Group().Live())
				}
				t.Fatal("restarted rank 3 not back in the group within 30 s")
			}
			time.Sleep(100 * time.Millisecond) // virtual
		}
		// (It may first be told it was excluded, or hear of its re-adding
		// first; either way it ends a member.)
		t.Logf("restarted rank's events: %v", log.all())
		if at := re.Group().ExcludedAt(); at != 0 {
			t.Fatalf("re-added rank 3 still has ExcludedAt %d", at)
		}
		if st, _, _ := srv[0].Group().State(3); st != rpc.MemberAlive {
			t.Fatalf("rank 3 is %v at rank 0", st)
		}
		if inc := sw.Self().Incarnation; inc == 0 {
			t.Fatal("no incarnation")
		}
		for _, s := range srv {
			s.Close()
		}
	})
}
