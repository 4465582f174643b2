package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/internal/faulttest"
	"github.com/ferrymsg/ferry/swim"
)

// groupMember is a `ferry serve --group FILE --rank N --swim` process.
type groupMember struct {
	rank   int
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
}

// writeGroupFile picks n free loopback ports and writes an attach file
// naming them as ranks 0..n-1.
func writeGroupFile(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("name ferrytest\n")
	for r := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%d tcp://%s\n", r, l.Addr())
		l.Close()
	}
	path := filepath.Join(t.TempDir(), "ferrytest.attach_info")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startMember starts rank of the group in file and waits for its
// "listening" line.
func startMember(t *testing.T, bin, file string, rank int) *groupMember {
	t.Helper()
	return startMemberCmd(t, rank, func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, bin, args...)
	}, file)
}

// startMemberCmd is startMember with the command made by mk (to run it
// in a network namespace).
func startMemberCmd(t *testing.T, rank int, mk func(ctx context.Context, args ...string) *exec.Cmd, file string, extra ...string) *groupMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cmd := mk(ctx, append([]string{"serve", "--group", file, "--rank", fmt.Sprint(rank), "--swim"}, extra...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &groupMember{rank: rank, cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("rank %d stderr (last 4 KiB):\n%s", rank, tail(p.stderr.String(), 4<<10))
		}
	})
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "listening ") {
			t.Fatalf("rank %d: first line %q; stderr:\n%s", rank, line, p.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("rank %d printed nothing within 20s; stderr:\n%s", rank, p.stderr.String())
	}
	return p
}

// memberLine matches a membership event line about rank in state.
func memberLine(rank int, state string) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`(?m)msg=member rank=%d state=%s\b`, rank, state))
}

// waitLog waits up to d for every member in ps to have logged re.
func waitLog(t *testing.T, ps []*groupMember, re *regexp.Regexp, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	for {
		var missing []int
		for _, p := range ps {
			if !re.MatchString(p.stderr.String()) {
				missing = append(missing, p.rank)
			}
		}
		if len(missing) == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, p := range ps {
				fmt.Fprintf(&logs, "--- rank %d:\n%s", p.rank, p.stderr.String())
			}
			t.Fatalf("ranks %v did not log %q within %v\n%s", missing, re, d, logs.String())
		}
		time.Sleep(100 * time.Millisecond) // polling the processes' logs, bounded by the deadline
	}
}

type groupStatJSON struct {
	Root     uint32   `json:"root"`
	Answered []uint32 `json:"answered"`
	Failed   []struct {
		Rank   uint32 `json:"rank"`
		Reason string `json:"reason"`
	} `json:"failed"`
	Status []struct {
		Rank        uint32 `json:"rank"`
		Incarnation uint64 `json:"incarnation"`
	} `json:"status"`
}

func groupStat(t *testing.T, bin, file string) (groupStatJSON, time.Duration) {
	t.Helper()
	return groupStatCmd(t, func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, bin, args...)
	}, file)
}

func groupStatCmd(t *testing.T, mk func(ctx context.Context, args ...string) *exec.Cmd, file string) (groupStatJSON, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	out, err := mk(ctx, "group", "stat", "--group", file, "--json", "--timeout", "5s").Output()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("ferry group stat did not finish in 30s")
	}
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 1) {
		t.Fatalf("ferry group stat: %v %s", err, out)
	}
	var res groupStatJSON
	if err := json.Unmarshal(out, &res); err != nil || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Fatalf("ferry group stat --json printed %q: %v", out, err)
	}
	return res, took
}

// Five `ferry serve --group --swim` processes on loopback: a rank stopped
// with SIGSTOP and resumed in time stays alive (refuting a suspicion of
// it); a rank killed with SIGKILL is reported dead by every other rank
// within the bound SWIM's defaults give; `ferry group stat` then answers
// for the four live ranks and lists the dead one as failed (excluded)
// within its timeout.
func TestGroupSWIMProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for SWIM's detection bound (up to 27 s)")
	}
	bin := fastBinary(t)
	const n = 5
	file := writeGroupFile(t, n)
	var ps []*groupMember
	for r := range n {
		ps = append(ps, startMember(t, bin, file, r))
	}
	// Every rank has every other as a member, then a few periods pass.
	for _, p := range ps {
		for _, o := range ps {
			if o != p {
				waitLog(t, []*groupMember{p}, memberLine(o.rank, "alive"), 10*time.Second)
			}
		}
	}
	res, _ := groupStat(t, bin, file)
	if !slices.Equal(res.Answered, []uint32{0, 1, 2, 3, 4}) || len(res.Failed) != 0 {
		t.Fatalf("before any fault: %+v", res)
	}
	incBefore := map[uint32]uint64{}
	for _, s := range res.Status {
		incBefore[s.Rank] = s.Incarnation
	}

	// SIGSTOP rank 3 for 4 s: a suspicion takes 2.7 s to raise and at
	// least 4 s to end in death, so rank 3 is back in time.
	stopped := ps[3]
	others := []*groupMember{ps[0], ps[1], ps[2], ps[4]}
	mark := map[int]int{} // where each log stood at the pause
	for _, p := range others {
		mark[p.rank] = len(p.stderr.String())
	}
	if err := stopped.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // the length of the pause under test
	if err := stopped.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// It must not be declared dead, for the suspicion's longest life.
	quiet := time.Now().Add(8 * time.Second)
	for time.Now().Before(quiet) {
		for _, p := range others {
			if memberLine(3, "dead").MatchString(p.stderr.String()) {
				t.Fatalf("rank %d declared the paused rank 3 dead:\n%s", p.rank, p.stderr.String())
			}
		}
		time.Sleep(200 * time.Millisecond) // polling the logs over the window under test
	}
	res, _ = groupStat(t, bin, file)
	if !slices.Contains(res.Answered, 3) {
		t.Fatalf("rank 3 after its pause: %+v", res)
	}
	// A refutation is an incarnation above the one rank 3 was suspected
	// at. A rank that had not yet heard from rank 3 knows it at the
	// incarnation the group file gave (0) and suspects it there; rank 3's
	// own incarnation is already above that, so it refutes without
	// raising it (the SWIM rule: only an accusation at or above its own
	// incarnation makes a member raise it).
	suspected, suspectedAt := false, uint64(0)
	suspectInc := regexp.MustCompile(`(?m)msg=member rank=3 state=suspect\b.*\bincarnation=(\d+)`)
	for _, p := range others {
		for _, m := range suspectInc.FindAllStringSubmatch(p.stderr.String()[mark[p.rank]:], -1) {
			suspected = true
			if inc, err := strconv.ParseUint(m[1], 10, 64); err == nil {
				suspectedAt = max(suspectedAt, inc)
			}
		}
	}
	for _, s := range res.Status {
		if s.Rank == 3 {
			t.Logf("rank 3 suspected: %v (at incarnation %d); incarnation %d -> %d", suspected, suspectedAt, incBefore[3], s.Incarnation)
			if suspected && s.Incarnation <= suspectedAt {
				var logs strings.Builder
				for _, p := range ps {
					fmt.Fprintf(&logs, "--- rank %d:\n%s", p.rank, p.stderr.String())
				}
				t.Errorf("rank 3 was suspected at incarnation %d but did not refute (incarnation %d, was %d)\n%s", suspectedAt, s.Incarnation, incBefore[3], logs.String())
			}
		}
	}

	// SIGKILL rank 4: every other rank reports it dead within the bound.
	bound := swim.DetectionTime(swim.Config{}, n).Worst
	if bound > 30*time.Second {
		t.Fatalf("the defaults' bound for %d ranks is %v, above 30 s", n, bound)
	}
	victim := ps[4]
	killed := time.Now()
	if err := syscall.Kill(victim.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	live := ps[:4]
	waitLog(t, live, memberLine(4, "dead"), bound+2*time.Second)
	t.Logf("rank 4 known dead to every live rank %v after SIGKILL (bound %v)", time.Since(killed).Round(100*time.Millisecond), bound)
	for _, p := range live {
		for _, o := range live {
			if memberLine(o.rank, "dead").MatchString(p.stderr.String()) {
				t.Errorf("rank %d: live rank %d declared dead (false positive):\n%s", p.rank, o.rank, p.stderr.String())
			}
		}
	}

	// ferry group stat: four answers, rank 4 failed, within its timeout.
	res, took := groupStat(t, bin, file)
	if !slices.Equal(res.Answered, []uint32{0, 1, 2, 3}) || len(res.Failed) != 1 || res.Failed[0].Rank != 4 || res.Failed[0].Reason != "excluded" {
		t.Fatalf("after the kill: %+v", res)
	}
	if took > 6*time.Second {
		t.Errorf("group stat took %v, more than its 5 s timeout", took)
	}
	t.Logf("group stat answered in %v: %v, failed %v", took.Round(time.Millisecond), res.Answered, res.Failed)
	// The text form names the failed rank too.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "group", "stat", "--group", file).Output()
	if !strings.Contains(string(out), "rank 4 failed: excluded") || !strings.Contains(string(out), "4 of 5 ranks answered") {
		t.Errorf("text output:\n%s", out)
	}
}

// Ranks 0-2 in one network namespace and 3-4 in another, joined by a
// veth link that is taken down without resetting anything: each side
// declares the other dead within SWIM's bound, with no false positive
// inside a side, and each side's lowest live rank removes the other side
// (Authority's documented partition behaviour). Once the link is back,
// ferry group stat from side 0 answers for 0-2 and lists each of 3 and 4
// as excluded, or answered if side 0's authority re-added it.
func TestGroupPartitionNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for SWIM's detection bound")
	}
	pair := faulttest.NewPair(t)
	bin := fastBinary(t)
	side := []int{0, 0, 0, 1, 1}
	var b strings.Builder
	b.WriteString("name ferrynet\n")
	for r, sd := range side {
		fmt.Fprintf(&b, "%d tcp://%s:%d\n", r, pair.Addr[sd], 27100+r)
	}
	file := filepath.Join(t.TempDir(), "ferrynet.attach_info")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	in := func(sd int) func(ctx context.Context, args ...string) *exec.Cmd {
		return func(ctx context.Context, args ...string) *exec.Cmd { return pair.Command(ctx, sd, bin, args...) }
	}
	var ps []*groupMember
	for r, sd := range side {
		ps = append(ps, startMemberCmd(t, r, in(sd), file))
	}
	// All five alive, from everyone's view.
	res, _ := groupStatCmd(t, in(0), file)
	if !slices.Equal(res.Answered, []uint32{0, 1, 2, 3, 4}) {
		t.Fatalf("before the partition: %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pair.SetLink(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	// A partitioned rank's own probes fail without the helpers' nacks,
	// so its local health (Lifeguard) stretches its timeouts: the crash
	// bound does not hold for a partition. Allow half as much again.
	bound := swim.DetectionTime(swim.Config{}, len(side)).Worst * 3 / 2
	for r, sd := range side {
		for o, osd := range side {
			if sd != osd {
				waitLog(t, []*groupMember{ps[r]}, memberLine(o, "dead"), bound-time.Since(down))
			}
		}
	}
	t.Logf("each side knew the other dead %v after the link went down (bound %v)", time.Since(down).Round(100*time.Millisecond), bound)
	for r, sd := range side {
		for o, osd := range side {
			if sd == osd && memberLine(o, "dead").MatchString(ps[r].stderr.String()) {
				t.Errorf("rank %d declared rank %d of its own side dead", r, o)
			}
		}
	}
	if err := pair.SetLink(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a few periods with the link back
	// Side 1's ranks are excluded from side 0's group, or re-added if
	// side 0's authority heard them at a higher incarnation (they refuted
	// a suspicion of themselves): either way every rank is accounted for,
	// side 0 answers, and none is lost to a timeout.
	res, _ = groupStatCmd(t, in(0), file)
	if len(res.Answered)+len(res.Failed) != len(side) || !slices.Contains(res.Answered, 0) || !slices.Contains(res.Answered, 1) || !slices.Contains(res.Answered, 2) {
		t.Fatalf("after the partition: %+v", res)
	}
	for _, f := range res.Failed {
		if f.Reason != "excluded" || side[f.Rank] != 1 {
			t.Errorf("rank %d failed with %q, want excluded (side 1 only)", f.Rank, f.Reason)
		}
	}
	t.Logf("after the link came back: answered %v, failed %v", res.Answered, res.Failed)
}

// Bad command lines of serve's group flags and of ferry group are usage
// errors (exit 2) with a message; a group file that cannot be read is a
// runtime error for ferry group (exit 1).
func TestGroupUsage(t *testing.T) {
	file := writeGroupFile(t, 2)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--swim"}, 2, "--swim needs --group"},
		{[]string{"serve", "--group", file, "--rank", "7"}, 2, "lists no rank 7"},
		{[]string{"serve", "--group", filepath.Join(t.TempDir(), "none")}, 2, "--group"},
		{[]string{"group", "stat"}, 2, "--group FILE is required"},
		{[]string{"group", "--group", file}, 2, "want the subcommand stat"},
		{[]string{"group", "stat", "--group", file, "--timeout", "10ms"}, 2, "at least 1s"},
		{[]string{"group", "stat", "--group", filepath.Join(t.TempDir(), "none")}, 1, "no such file"},
		// Nobody serves the file's addresses (1s, the least allowed, is
		// allowed).
		{[]string{"group", "stat", "--group", file, "--timeout", "3s"}, 1, "no rank could root the status collective"},
		{[]string{"group", "stat", "--group", file, "--timeout", "1s"}, 1, "no rank could root the status collective"},
	} {
		r := runFerry(t, 30*time.Second, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("ferry %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.code, tc.want)
		}
	}
}
