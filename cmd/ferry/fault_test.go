package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/internal/faulttest"
	"github.com/ferrymsg/ferry/msg"
)

// Tests of lossless sessions across two processes while the network fails
// under them, from outside: the kernel destroys the TCP connection (ss -K),
// or the link between two network namespaces goes silent. They need root
// and iproute2; they skip without them unless FERRY_REQUIRE_TOOLS=1.
//
// FERRY_TEST_LOG=debug runs both processes with --verbose; their logs are
// printed when a test fails.

// verboseArgs returns --verbose when FERRY_TEST_LOG=debug.
func verboseArgs() []string {
	if os.Getenv("FERRY_TEST_LOG") == "debug" {
		return []string{"--verbose"}
	}
	return nil
}

var (
	fastBinOnce sync.Once
	fastBin     string
	fastBinErr  error
)

// fastBinary returns a ferry binary built without the race detector: the
// 100 000-message run takes a few seconds with it and several times that
// under -race, which the in-process tests of msgr already cover. Without
// -race it is ferryBin itself.
func fastBinary(t *testing.T) string {
	t.Helper()
	if !raceEnabled {
		return ferryBin
	}
	fastBinOnce.Do(func() {
		// Next to ferryBin, in the directory TestMain removes.
		fastBin = filepath.Join(filepath.Dir(ferryBin), "ferry-norace")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", fastBin, ".").CombinedOutput()
		if err != nil {
			fastBinErr = fmt.Errorf("building ferry without -race: %v\n%s", err, out)
		}
	})
	if fastBinErr != nil {
		t.Fatal(fastBinErr)
	}
	return fastBin
}

// proc is a ferry process whose output is collected.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	exited         chan struct{} // closed once the process has been waited for
}

// startProc starts cmd and kills it (by its PID) when t ends, if it is
// still running.
func startProc(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s stderr (last 8 KiB):\n%s", p.name, tail(p.stderr.String(), 8<<10))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// listenAddr waits for serve's first line, "listening ADDR", and returns
// ADDR.
func (p *proc) listenAddr(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := p.stdout.String()
		if line, _, ok := strings.Cut(out, "\n"); ok {
			addr, found := strings.CutPrefix(strings.TrimSpace(line), "listening ")
			if !found || addr == "" {
				t.Fatalf("first line of %s is %q, want \"listening ADDR\"", p.name, line)
			}
			return addr
		}
		if !p.running() || time.Now().After(deadline) {
			t.Fatalf("%s printed no address (exited: %v); stderr:\n%s", p.name, !p.running(), p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v", p.name, d)
		return -1
	}
}

// stop sends SIGTERM and returns the exit code.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	return p.wait(t, 15*time.Second)
}

// verifyReport is the part of `ferry ping --verify --json` these tests
// check.
type verifyReport struct {
	Requested  int     `json:"requested"`
	Count      int     `json:"count"`
	Errors     int     `json:"errors"`
	Sent       int     `json:"sent"`
	Lost       int     `json:"lost"`
	Duplicated *int    `json:"duplicated"`
	Reordered  *int    `json:"reordered"`
	Mismatches int     `json:"mismatches"`
	Unexpected int     `json:"unexpected"`
	Reconnects uint64  `json:"reconnects"`
	Resets     int     `json:"resets"`
	Verify     bool    `json:"verify"`
	Policy     string  `json:"policy"`
	ElapsedS   float64 `json:"elapsed_s"`
	MsgsPerS   float64 `json:"msgs_per_s"`
	Error      string  `json:"error"`
}

func parseVerifyReport(t *testing.T, p *proc) verifyReport {
	t.Helper()
	var r verifyReport
	if err := json.Unmarshal([]byte(p.stdout.String()), &r); err != nil {
		t.Fatalf("%s printed no JSON report: %v\nstdout: %s", p.name, err, p.stdout.String())
	}
	if r.Duplicated == nil || r.Reordered == nil || !r.Verify {
		t.Fatalf("%s: report without verify fields: %s", p.name, p.stdout.String())
	}
	return r
}

// checkExactlyOnce checks the lossless invariant on a verify report.
func checkExactlyOnce(t *testing.T, r verifyReport, count int) {
	t.Helper()
	if r.Requested != count || r.Sent != count || r.Count != count || r.Lost != 0 || *r.Duplicated != 0 ||
		*r.Reordered != 0 || r.Mismatches != 0 || r.Unexpected != 0 || r.Errors != 0 || r.Error != "" {
		t.Errorf("ping: requested %d sent %d count %d lost %d duplicated %d reordered %d mismatches %d unexpected %d errors %d (%q); want %d sent and echoed exactly once, in order",
			r.Requested, r.Sent, r.Count, r.Lost, *r.Duplicated, *r.Reordered, r.Mismatches, r.Unexpected, r.Errors, r.Error, count)
	}
}

var pingsAnsweredRE = regexp.MustCompile(`pings_answered=(\d+)`)

// pingsAnswered reads the count serve logs when it shuts down.
func pingsAnswered(t *testing.T, p *proc) int {
	t.Helper()
	m := pingsAnsweredRE.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("%s logged no pings_answered on shutdown", p.name)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// noSequenceGaps fails t if a process logged that a lossless session
// skipped a sequence number.
func noSequenceGaps(t *testing.T, ps ...*proc) {
	t.Helper()
	for _, p := range ps {
		if s := p.stderr.String(); strings.Contains(s, "sequence gap") {
			t.Errorf("%s logged a sequence gap", p.name)
		}
	}
}

func addrPort(t *testing.T, addr string) netip.AddrPort {
	t.Helper()
	ea, err := msg.ParseEntityAddr(addr)
	if err != nil || !ea.IP.IsValid() {
		t.Fatalf("serve address %q: %v", addr, err)
	}
	return ea.IP
}

// TestLosslessPingSurvivesKernelResets: `ferry serve --policy
// stateful-server` and `ferry ping --policy lossless-client --verify`
// exchange 100 000 pings while the test destroys their TCP connection
// with ss -K hundreds of times. Every ping is echoed exactly once and in
// order, and the server dispatches each exactly once.
func TestLosslessPingSurvivesKernelResets(t *testing.T) {
	faulttest.RequireRoot(t)
	faulttest.RequireKill(t)
	const (
		count     = 100000
		minResets = 100
	)
	bin := fastBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	srv := startProc(t, "serve", exec.CommandContext(ctx, bin, append([]string{"serve",
		"--listen", "tcp://127.0.0.1:0", "--policy", "stateful-server"}, verboseArgs()...)...))
	addr := srv.listenAddr(t)
	dst := addrPort(t, addr)

	// --interval paces the run to 15 s or more: one ss -K takes 25 to 80
	// milliseconds here, and an unpaced run can be over in 3 s.
	ping := startProc(t, "ping", exec.CommandContext(ctx, bin, append([]string{"ping",
		"--policy", "lossless-client", "--verify", "--count", strconv.Itoa(count), "--inflight", "32", "--json",
		"--interval", "150us", "--timeout", "80s", "--backoff-initial", "2ms", "--backoff-max", "50ms", addr}, verboseArgs()...)...))

	// Destroy the connection at random moments until ping is done. ss -K
	// acts only on established sockets to the server's port: the ping's.
	var resets, attempts atomic.Int64
	killErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ping.exited:
				killErr <- nil
				return
			case <-time.After(time.Duration(rand.IntN(5000)) * time.Microsecond):
			}
			n, err := faulttest.KillTCP(ctx, "", dst)
			if err != nil {
				if !ping.running() {
					killErr <- nil
				} else {
					killErr <- err
				}
				return
			}
			attempts.Add(1)
			resets.Add(int64(n))
		}
	}()

	code := ping.wait(t, 100*time.Second)
	if err := <-killErr; err != nil {
		t.Errorf("ss -K: %v", err)
	}
	r := parseVerifyReport(t, ping)
	if code != 0 {
		t.Errorf("ping exit %d, want 0", code)
	}
	checkExactlyOnce(t, r, count)
	if resets.Load() < minResets || r.Reconnects < minResets {
		t.Errorf("%d resets applied, %d reconnects: want at least %d of each (the test did not exercise recovery enough)", resets.Load(), r.Reconnects, minResets)
	}
	if c := srv.stop(t); c != 0 {
		t.Errorf("serve exit %d after SIGTERM", c)
	}
	answered := pingsAnswered(t, srv)
	if answered != count {
		t.Errorf("serve answered %d pings, want %d: each dispatched exactly once", answered, count)
	}
	noSequenceGaps(t, srv, ping)
	t.Logf("sent %d, dispatched by serve %d, echoed %d, lost %d, duplicated %d, reordered %d; %d resets applied by ss -K (%d runs), %d reconnects; %.1f s, %.0f msgs/s",
		r.Sent, answered, r.Count, r.Lost, *r.Duplicated, *r.Reordered, resets.Load(), attempts.Load(), r.Reconnects, r.ElapsedS, r.MsgsPerS)
}

// TestSilentLinkDetectedByKeepalive: serve and ping run in two network
// namespaces joined by a veth pair. The test takes the link down under
// them: nothing is reset, packets just go nowhere, and only the keepalive
// timeouts of both sides notice. Ping must neither hang nor give up; once
// the link is back, the lossless session resumes and every ping is echoed
// exactly once.
func TestSilentLinkDetectedByKeepalive(t *testing.T) {
	pair := faulttest.NewPair(t)
	faulttest.Require(t, "ss")
	const (
		count     = 3000
		kaTimeout = time.Second
	)
	ka := []string{"--keepalive-interval", "200ms", "--keepalive-timeout", kaTimeout.String()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Both processes log at debug level: their keepalive timeouts are
	// read from the logs.
	srv := startProc(t, "serve", pair.Command(ctx, 0, ferryBin, append([]string{"serve", "--verbose",
		"--listen", "tcp://" + pair.Addr[0].String() + ":0", "--policy", "stateful-server"}, ka...)...))
	addr := srv.listenAddr(t)
	port := addrPort(t, addr).Port()

	// 3000 pings at least 1 ms apart: the run outlasts the outage.
	ping := startProc(t, "ping", pair.Command(ctx, 1, ferryBin, append([]string{"ping", "--verbose",
		"--policy", "lossless-client", "--verify", "--count", strconv.Itoa(count), "--inflight", "8",
		"--interval", "1ms", "--json", "--timeout", "90s", "--backoff-initial", "50ms", "--backoff-max", "300ms", addr}, ka...)...))

	waitUntil := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %v waiting for %s", d, what)
			}
			if !ping.running() {
				t.Fatalf("ping exited while waiting for %s; stdout: %s", what, ping.stdout.String())
			}
			time.Sleep(10 * time.Millisecond) // polling with a deadline
		}
	}
	waitUntil("the session to be established", 30*time.Second, func() bool {
		n, err := pair.Established(ctx, 0, port)
		return err == nil && n > 0
	})
	// Let some pings through (about 100 bytes each reach the server),
	// then silence the link.
	waitUntil("pings to flow", 30*time.Second, func() bool {
		n, err := pair.BytesReceived(ctx, 0, port)
		return err == nil && n > 20000
	})
	if err := pair.SetLink(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	const timeoutMsg = "keepalive timeout"
	waitUntil("both keepalive timeouts", 30*time.Second, func() bool {
		return strings.Contains(srv.stderr.String(), timeoutMsg) && strings.Contains(ping.stderr.String(), timeoutMsg)
	})
	detected := time.Since(down)
	if detected < kaTimeout/2 {
		t.Errorf("keepalive timeouts %v after the link went down; the timeout is %v: something else failed the sockets", detected, kaTimeout)
	}
	// Ping tries to reconnect, and fails while the link is down.
	waitUntil("a failed reconnect attempt", 30*time.Second, func() bool {
		return strings.Contains(ping.stderr.String(), "connect failed")
	})
	// Nothing was reset: the sockets were failed by the timeouts.
	for _, p := range []*proc{srv, ping} {
		if s := p.stderr.String(); strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe") {
			t.Errorf("%s saw a reset on a silent link:\n%s", p.name, tail(s, 4<<10))
		}
	}
	if err := pair.SetLink(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	outage := time.Since(down)
	code := ping.wait(t, 100*time.Second)
	r := parseVerifyReport(t, ping)
	if code != 0 {
		t.Errorf("ping exit %d, want 0", code)
	}
	checkExactlyOnce(t, r, count)
	if r.Reconnects < 1 {
		t.Errorf("ping reports %d reconnects; the outage should have forced one", r.Reconnects)
	}
	if c := srv.stop(t); c != 0 {
		t.Errorf("serve exit %d after SIGTERM", c)
	}
	if n := pingsAnswered(t, srv); n != count {
		t.Errorf("serve answered %d pings, want %d", n, count)
	}
	noSequenceGaps(t, srv, ping)
	t.Logf("link down for %v; keepalive timeouts on both sides %v after it went down; ping: %d sent, %d echoed, %d lost, %d duplicated, %d reordered, %d reconnects, %.1f s",
		outage.Round(time.Millisecond), detected.Round(time.Millisecond), r.Sent, r.Count, r.Lost, *r.Duplicated, *r.Reordered, r.Reconnects, r.ElapsedS)
}

// TestLossyPingVerifyUnderKernelResets: with a lossy policy, resets lose
// the pings in flight, and ping --verify says so instead of hanging: it
// reconnects after each reset and accounts for every ping sent as echoed
// once or lost.
func TestLossyPingVerifyUnderKernelResets(t *testing.T) {
	faulttest.RequireRoot(t)
	faulttest.RequireKill(t)
	const count = 20000
	bin := fastBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := startProc(t, "serve", exec.CommandContext(ctx, bin, append([]string{"serve",
		"--listen", "tcp://127.0.0.1:0"}, verboseArgs()...)...))
	addr := srv.listenAddr(t)
	dst := addrPort(t, addr)
	ping := startProc(t, "ping", exec.CommandContext(ctx, bin, append([]string{"ping",
		"--policy", "lossy-client", "--verify", "--count", strconv.Itoa(count), "--inflight", "32", "--json",
		"--interval", "100us", "--timeout", "40s", "--backoff-initial", "2ms", "--backoff-max", "50ms", addr}, verboseArgs()...)...))
	var resets atomic.Int64
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		// Resets start once the first session is up and pinging: a lossy
		// ping whose very first connection fails exits with an error,
		// which is not what this test is about.
		select {
		case <-ping.exited:
			return
		case <-time.After(300 * time.Millisecond):
		}
		for ping.running() {
			select {
			case <-ping.exited:
				return
			case <-time.After(time.Duration(5+rand.IntN(20)) * time.Millisecond):
			}
			n, _ := faulttest.KillTCP(ctx, "", dst)
			resets.Add(int64(n))
		}
	}()
	code := ping.wait(t, 50*time.Second)
	<-stopped
	r := parseVerifyReport(t, ping)
	if r.Sent != count || r.Count+r.Lost+r.Mismatches != count || *r.Duplicated != 0 || r.Unexpected != 0 {
		t.Errorf("sent %d count %d lost %d mismatches %d duplicated %d unexpected %d: every ping sent is echoed once or lost",
			r.Sent, r.Count, r.Lost, r.Mismatches, *r.Duplicated, r.Unexpected)
	}
	if r.Resets < 5 || r.Reconnects != uint64(r.Resets) || int64(r.Resets) > resets.Load() {
		t.Errorf("ping saw %d resets and made %d reconnects; %d applied: want at least 5, one reconnect each", r.Resets, r.Reconnects, resets.Load())
	}
	if (code == 0) != (r.Lost == 0 && *r.Reordered == 0) {
		t.Errorf("exit %d with %d lost, %d reordered", code, r.Lost, *r.Reordered)
	}
	t.Logf("lossy: sent %d, echoed %d, lost %d, duplicated %d, reordered %d; %d resets applied, %d seen, %d reconnects",
		r.Sent, r.Count, r.Lost, *r.Duplicated, *r.Reordered, resets.Load(), r.Resets, r.Reconnects)
}

func TestMsgrFlagsUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"ping", "--policy", "lossless", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--inject-socket-failures", "-1", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--inject-delay-probability", "1.5", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--inject-delay-type", "client bogus", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--inject-delay-max", "-1s", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--keepalive-timeout", "1s", "127.0.0.1:1"}, 2}, // shorter than the default interval
		{[]string{"ping", "--backoff-initial", "-1ms", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--interval", "-1ms", "127.0.0.1:1"}, 2},
		{[]string{"serve", "--policy", "stateful"}, 2},
		{[]string{"serve", "--inject-internal-delays", "-1s"}, 2},
	} {
		r := runFerry(t, 30*time.Second, tc.args...)
		if r.code != tc.code {
			t.Errorf("ferry %q: exit %d, want %d\nstderr: %s", tc.args, r.code, tc.code, r.stderr)
		}
	}
	r := runFerry(t, 30*time.Second, "help", "ping")
	for _, f := range []string{"--policy", "-verify", "-inject-socket-failures", "-inject-delay-type", "-keepalive-timeout", "-backoff-max", "lossless-peer-reuse"} {
		if !strings.Contains(r.stdout, strings.TrimPrefix(f, "-")) {
			t.Errorf("ferry help ping does not mention %s", f)
		}
	}
}

// TestPingPolicyAndInjectionFlags runs serve and ping with every
// injection knob set, on lossless policies: the session absorbs the
// injected socket failures and delays, and nothing is lost.
func TestPingPolicyAndInjectionFlags(t *testing.T) {
	srv := startServe(t, "--policy", "stateful-server", "--inject-socket-failures", "300",
		"--inject-delay-type", "client", "--inject-delay-probability", "0.05", "--inject-delay-max", "2ms",
		"--inject-internal-delays", "1ms")
	r := runFerry(t, time.Minute, "ping", "--policy", "lossless-client", "--verify", "--count", "3000", "--size", "2000",
		"--inflight", "16", "--json", "--backoff-initial", "1ms", "--backoff-max", "20ms",
		"--inject-socket-failures", "300", "--inject-delay-type", "mon", "--inject-delay-probability", "0.05",
		"--inject-delay-max", "2ms", "--keepalive-interval", "1s", "--keepalive-timeout", "10s", srv.addr)
	if r.code != 0 {
		t.Fatalf("ping exit %d\nstdout: %s\nstderr: %s\nserve stderr: %s", r.code, r.stdout, r.stderr, srv.stderr.String())
	}
	var rep verifyReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Duplicated == nil {
		t.Fatalf("no verify report: %v\n%s", err, r.stdout)
	}
	checkExactlyOnce(t, rep, 3000)
	if rep.Reconnects == 0 || rep.Policy != "lossless-client" {
		t.Errorf("reconnects %d policy %q: injected failures should have forced reconnects", rep.Reconnects, rep.Policy)
	}
	t.Logf("injected failures: %d reconnects", rep.Reconnects)
}
