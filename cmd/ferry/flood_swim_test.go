package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Issue 18: membership traffic from well-behaved peers is not starved by
// other peers' floods. Three ranks run SWIM (period 1 s, ping timeout 0.9
// s); 32 processes flood rank 0 with 64 KiB MPings they never read the
// echoes of, for 10 s (rank 0 closes them as slow consumers after 8 s
// of no progress). Rank 0 goes on answering its members' probes in time:
// no rank suspects or declares dead another.
func TestFloodSWIM(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s flood")
	}
	if raceEnabled && os.Getenv("FERRY_FLOOD") == "" {
		// Its guarantee is a deadline (probes answered within 0.9 s),
		// and under -race (make test's unit pass) it runs beside the
		// other packages' race-built tests on the same CPUs: once, rank
		// 1 was suspected 2 s into the flood there, while it passes
		// alone. make flood runs it alone, without -race.
		t.Skip("a deadline under load: run alone (make flood), or set FERRY_FLOOD=1")
	}
	bin := fastBinary(t)
	const n = 3
	file := writeGroupFile(t, n)
	var ps []*groupMember
	for r := range n {
		ps = append(ps, startMemberCmd(t, r, func(ctx context.Context, args ...string) *exec.Cmd {
			return exec.CommandContext(ctx, bin, args...)
		}, file, "--send-budget", fmt.Sprint(floodBudget), "--slow-consumer-timeout", "8s"))
	}
	for _, p := range ps {
		for _, o := range ps {
			if o != p {
				waitLog(t, []*groupMember{p}, memberLine(o.rank, "alive"), 10*time.Second)
			}
		}
	}
	addr := groupURI(t, file, 0)
	mark := make([]int, n)
	for i, p := range ps {
		mark[i] = len(p.stderr.String())
	}
	fl := startFlooders(t, "ping", addr, 3000, 32)
	time.Sleep(10 * time.Second) // the flood under test
	closed := slowConsumerPeers(ps[0].stderr.String())
	fl.stop()
	time.Sleep(2 * time.Second) // a suspicion raised at the end would show by now
	bad := 0
	for i, p := range ps {
		during := p.stderr.String()[mark[i]:]
		for r := range n {
			for _, st := range []string{"suspect", "dead"} {
				if memberLine(r, st).MatchString(during) {
					bad++
					t.Errorf("rank %d logged rank %d %s during the flood", p.rank, r, st)
				}
			}
		}
	}
	t.Logf("32 flooders on rank 0 for 10 s: %d closed as slow consumers; %d suspicions or deaths among the 3 ranks", len(closed), bad)
	if len(closed) == 0 && !raceEnabled { // race-built flooders may be too slow to stall
		t.Errorf("no flooder closed as a slow consumer: was rank 0 flooded?\n%s", tail(ps[0].stderr.String(), 4<<10))
	}
}

// groupURI returns rank's URI in the attach file.
func groupURI(t *testing.T, file string, rank int) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == fmt.Sprint(rank) {
			return f[1]
		}
	}
	t.Fatalf("rank %d not in %s", rank, file)
	return ""
}
