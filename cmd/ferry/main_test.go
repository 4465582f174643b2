package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ferryBin is the binary built once by TestMain.
var ferryBin string

func TestMain(m *testing.M) {
	if kind := os.Getenv(floodKindEnv); kind != "" {
		os.Exit(floodChild(kind)) // a flooding child (flood_test.go)
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ferry-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ferryBin = filepath.Join(dir, "ferry")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"build", "-o", ferryBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.CommandContext(ctx, "go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building ferry: %v\n", err)
		return 1
	}
	return m.Run()
}

// result is what a finished ferry process produced.
type result struct {
	code           int
	stdout, stderr string
}

// runFerry runs the binary with args and a time limit.
func runFerry(t *testing.T, limit time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, ferryBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ferry %s: did not finish within %v\nstderr:\n%s", strings.Join(args, " "), limit, errb.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("ferry %s: %v", strings.Join(args, " "), err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

// serveProc is a running `ferry serve`.
type serveProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	exited chan struct{} // closed when the process has been waited for
}

// startServe starts `ferry serve` on a free loopback port and returns once
// it printed its address.
func startServe(t testing.TB, extra ...string) *serveProc {
	t.Helper()
	return startServeAt(t, "tcp://127.0.0.1:0", extra...)
}

// startServeAt is startServe listening on listen.
func startServeAt(t testing.TB, listen string, extra ...string) *serveProc {
	t.Helper()
	// Long enough for BenchmarkIdleConnections (10,000 connections set up
	// one after the other, then profiled) on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, ferryBin, append([]string{"serve", "--listen", listen}, extra...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
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
		_ = cmd.Process.Kill()
		<-p.exited
	})
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
		if !ok || addr == "" {
			t.Fatalf("first line of serve is %q, want \"listening ADDR\"; stderr:\n%s", line, p.stderr.String())
		}
		p.addr = addr
	case <-time.After(20 * time.Second):
		t.Fatalf("serve printed nothing within 20s; stderr:\n%s", p.stderr.String())
	}
	return p
}

// stop sends SIGTERM and returns the exit code, failing if the process
// does not exit in time.
func (p *serveProc) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not exit within 15s of SIGTERM; stderr:\n%s", p.stderr.String())
		return -1
	}
}

func TestServeAndPingJSON(t *testing.T) {
	srv := startServe(t)
	if !strings.HasPrefix(srv.addr, "v2:127.0.0.1:") || !strings.HasSuffix(srv.addr, "/0") {
		t.Errorf("serve address %q, want v2:127.0.0.1:PORT/0 (a mon's nonce is 0)", srv.addr)
	}

	r := runFerry(t, time.Minute, "ping", "--count", "200", "--size", "65536", "--inflight", "8", "--json", srv.addr)
	if r.code != 0 {
		t.Fatalf("ping exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var rep struct {
		Count    *int     `json:"count"`
		Errors   *int     `json:"errors"`
		Size     int      `json:"size"`
		Inflight int      `json:"inflight"`
		Peer     string   `json:"peer"`
		Min      float64  `json:"rtt_us_min"`
		Avg      float64  `json:"rtt_us_avg"`
		P50      float64  `json:"rtt_us_p50"`
		P99      float64  `json:"rtt_us_p99"`
		Max      float64  `json:"rtt_us_max"`
		Msgs     *float64 `json:"msgs_per_s"`
		MB       *float64 `json:"mbytes_per_s"`
		Bytes    int64    `json:"bytes"`
		Status   struct {
			Health    struct{ Status string } `json:"health"`
			MonStatus struct {
				Name  string `json:"name"`
				Ferry bool   `json:"ferry"`
			} `json:"mon_status"`
		} `json:"status"`
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("ping output is not JSON: %v\n%s", err, r.stdout)
	}
	if dec.More() {
		t.Errorf("ping printed more than one JSON object:\n%s", r.stdout)
	}
	if rep.Count == nil || *rep.Count != 200 {
		t.Errorf("count = %v, want 200", rep.Count)
	}
	if rep.Errors == nil || *rep.Errors != 0 {
		t.Errorf("errors = %v, want 0", rep.Errors)
	}
	if rep.Size != 65536 || rep.Inflight != 8 {
		t.Errorf("size, inflight = %d, %d, want 65536, 8", rep.Size, rep.Inflight)
	}
	if !(rep.Min > 0 && rep.Min <= rep.P50 && rep.P50 <= rep.P99 && rep.P99 <= rep.Max && rep.Avg >= rep.Min && rep.Avg <= rep.Max) {
		t.Errorf("rtt min/avg/p50/p99/max = %v/%v/%v/%v/%v: not ordered or not positive", rep.Min, rep.Avg, rep.P50, rep.P99, rep.Max)
	}
	if rep.Msgs == nil || *rep.Msgs <= 0 || rep.MB == nil || *rep.MB <= 0 {
		t.Errorf("msgs_per_s %v, mbytes_per_s %v: want positive", rep.Msgs, rep.MB)
	}
	if want := int64(2 * 200 * 65536); rep.Bytes != want {
		t.Errorf("bytes = %d, want %d (data both ways)", rep.Bytes, want)
	}
	if rep.Peer != "mon.0" {
		t.Errorf("peer = %q, want mon.0", rep.Peer)
	}
	if rep.Status.Health.Status != "HEALTH_OK" || rep.Status.MonStatus.Name != "a" || !rep.Status.MonStatus.Ferry {
		t.Errorf("status = %+v, want HEALTH_OK from mon a with ferry: true", rep.Status)
	}

	// Text output, with the address before the flags.
	r = runFerry(t, time.Minute, "ping", srv.addr, "--count", "3")
	if r.code != 0 || !strings.Contains(r.stdout, "3/3 replies, 0 errors") || !strings.Contains(r.stdout, "HEALTH_OK") {
		t.Errorf("text ping: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	if code := srv.stop(t); code != 0 {
		t.Errorf("serve exit code after SIGTERM = %d, want 0; stderr:\n%s", code, srv.stderr.String())
	}
}

func TestServeCustomName(t *testing.T) {
	srv := startServe(t, "--name", "osd.3")
	if strings.HasSuffix(srv.addr, "/0") {
		t.Errorf("osd address %q has nonce 0; only mons use 0", srv.addr)
	}
	r := runFerry(t, time.Minute, "ping", "--count", "2", "--size", "100", "--json", srv.addr)
	if r.code != 0 || !strings.Contains(r.stdout, `"peer":"osd.3"`) {
		t.Errorf("ping osd.3: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if code := srv.stop(t); code != 0 {
		t.Errorf("serve exit code = %d, want 0", code)
	}
}

func TestPingClosedPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "v2:" + l.Addr().String() + "/0"
	l.Close()

	r := runFerry(t, time.Minute, "ping", "--count", "1", "--timeout", "20s", addr)
	if r.code != 1 {
		t.Errorf("ping to a closed port: exit %d, want 1\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = runFerry(t, time.Minute, "ping", "--json", "--timeout", "20s", addr)
	var rep struct {
		Count  int    `json:"count"`
		Errors int    `json:"errors"`
		Error  string `json:"error"`
	}
	if r.code != 1 {
		t.Errorf("ping --json to a closed port: exit %d, want 1", r.code)
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("ping --json to a closed port printed no JSON: %v\n%s", err, r.stdout)
	}
	if rep.Count != 0 || rep.Errors != 10 || rep.Error == "" {
		t.Errorf("report %+v, want count 0, errors 10 and an error", rep)
	}
}

func TestSelftest(t *testing.T) {
	r := runFerry(t, 2*time.Minute, "selftest", "--reps", "50", "--sizes", "0 0,4096 0,0 70000,b1048576 b70000")
	if r.code != 0 {
		t.Fatalf("selftest exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"Results for message size (0-0 B) (max_inflight_rpcs = 16)",
		"Results for message size (4096-0 B)",
		"Results for message size (0-70000 B)",
		"Results for message size (b1048576-b70000 B)",
		"Summary", "MB/s",
		"RPC Bandwidth (MB/sec)", "RPC Throughput (RPCs/sec)", "RPC Latencies (us)",
		"Median", "90th", "99th", "Std Dev", "Endpoint results", "0:0 - ", "1:0 - ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, "RPC Failures: 0"); n != 4 {
		t.Errorf("%d size pairs without failures, want 4:\n%s", n, r.stdout)
	}
}

// checkSelftestJSON parses selftest --json output: one object per size
// pair with the documented fields.
func checkSelftestJSON(t *testing.T, out string, pairs [][2]int, reps int) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(pairs) {
		t.Fatalf("%d JSON lines, want %d:\n%s", len(lines), len(pairs), out)
	}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		for _, k := range []string{"send_size", "reply_size", "reps", "inflight", "rpcs_per_s", "mbytes_per_s", "lat_us_min", "lat_us_p50", "lat_us_p99", "lat_us_max", "failures"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line %q lacks %q", l, k)
			}
		}
		if m["send_size"] != float64(pairs[i][0]) || m["reply_size"] != float64(pairs[i][1]) || m["reps"] != float64(reps) || m["failures"] != float64(0) {
			t.Errorf("line %q: want sizes %v, %d reps, no failures", l, pairs[i], reps)
		}
		if m["rpcs_per_s"].(float64) <= 0 || m["lat_us_min"].(float64) <= 0 || m["lat_us_max"].(float64) < m["lat_us_p50"].(float64) {
			t.Errorf("line %q: implausible figures", l)
		}
	}
}

func TestSelftestJSON(t *testing.T) {
	r := runFerry(t, 2*time.Minute, "selftest", "--json", "--reps", "40", "--inflight", "4", "--sizes", "0 0,1024 2048")
	if r.code != 0 {
		t.Fatalf("selftest exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	checkSelftestJSON(t, r.stdout, [][2]int{{0, 0}, {1024, 2048}}, 40)
}

// `ferry selftest --endpoints` against two `ferry serve` processes, which
// serve the self-test protocol as ranks 0 and 1 beside their Ceph pings.
func TestSelftestEndpoints(t *testing.T) {
	a := startServe(t)
	b := startServe(t, "--rank", "1")
	r := runFerry(t, 2*time.Minute, "selftest", "--json", "--reps", "30", "--sizes", "0 0,100 100000,b200000 b3000", "--endpoints", a.addr+",1@"+b.addr)
	if r.code != 0 {
		t.Fatalf("selftest exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	checkSelftestJSON(t, r.stdout, [][2]int{{0, 0}, {100, 100000}, {200000, 3000}}, 30)
	for _, p := range []*serveProc{a, b} {
		if code := p.stop(t); code != 0 {
			t.Errorf("serve exit %d", code)
		}
	}
	// A dead endpoint: failures, exit 1.
	r = runFerry(t, time.Minute, "selftest", "--reps", "3", "--sizes", "0 0", "--rpc-timeout", "2s", "--endpoints", a.addr)
	if r.code != 1 || !strings.Contains(r.stdout, "RPC Failures: 3") {
		t.Errorf("dead endpoint: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}

// `ferry selftest --no-data-crc` against a `ferry serve --no-data-crc`:
// the sessions go without data CRCs (the server logs it), the bulk and
// overflow sizes arrive intact (the self-test checks them).
func TestSelftestNoDataCRC(t *testing.T) {
	a := startServe(t, "--no-data-crc", "--verbose")
	r := runFerry(t, 2*time.Minute, "selftest", "--json", "--no-data-crc", "--reps", "20", "--sizes", "0 0,100 100000,b1048576 b3000", "--endpoints", a.addr)
	if r.code != 0 {
		t.Fatalf("selftest exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	checkSelftestJSON(t, r.stdout, [][2]int{{0, 0}, {100, 100000}, {1048576, 3000}}, 20)
	if code := a.stop(t); code != 0 {
		t.Errorf("serve exit %d", code)
	}
	if log := a.stderr.String(); !strings.Contains(log, "data_crc=false") || strings.Contains(log, "data_crc=true") {
		t.Errorf("serve did not log sessions without data CRCs only:\n%s", log)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, 2},
		{[]string{"frobnicate"}, 2},
		{[]string{"help"}, 0},
		{[]string{"help", "ping"}, 0},
		{[]string{"help", "nope"}, 2},
		{[]string{"ping", "-h"}, 0},
		{[]string{"ping"}, 2},
		{[]string{"ping", "a:1", "b:2"}, 2},
		{[]string{"ping", "--bogus", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--count", "0", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--count", "ten", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--size", "-1", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--inflight", "0", "127.0.0.1:1"}, 2},
		{[]string{"ping", "--timeout", "0s", "127.0.0.1:1"}, 2},
		{[]string{"serve", "extra"}, 2},
		{[]string{"serve", "--name", "bogus.1"}, 2},
		{[]string{"serve", "--name", "osd.x"}, 2},
		{[]string{"serve", "--fsid", "not-a-uuid"}, 2},
		{[]string{"selftest", "--reps", "-1"}, 2},
		{[]string{"selftest", "--inflight", "0"}, 2},
		{[]string{"selftest", "--sizes", "bx 0"}, 2},
		{[]string{"selftest", "--sizes", "1"}, 2},
		{[]string{"selftest", "--ranks", "0"}, 2},
		{[]string{"selftest", "--nope"}, 2},
	} {
		r := runFerry(t, 30*time.Second, tc.args...)
		if r.code != tc.code {
			t.Errorf("ferry %q: exit %d, want %d\nstdout: %s\nstderr: %s", tc.args, r.code, tc.code, r.stdout, r.stderr)
		}
		if tc.code == 0 && !strings.Contains(r.stdout, "Usage") {
			t.Errorf("ferry %q: no usage on stdout: %q", tc.args, r.stdout)
		}
	}
	r := runFerry(t, 30*time.Second, "help")
	for _, c := range []string{"serve", "ping", "selftest"} {
		if !strings.Contains(r.stdout, c) {
			t.Errorf("help does not list %s:\n%s", c, r.stdout)
		}
	}
}

// TestServeBadListenIsUsageError: an address serve cannot parse is a
// usage error (exit 2, the flag named), found before anything starts.
func TestServeBadListenIsUsageError(t *testing.T) {
	for _, addr := range []string{"garbage", "nosuch://x:1", "tcp://127.0.0.1"} {
		r := runFerry(t, 30*time.Second, "serve", "--listen", addr)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "--listen") {
			t.Errorf("serve --listen %s: exit %d, stdout %q, stderr %q; want %d and the flag named", addr, r.code, r.stdout, r.stderr, exitUsage)
		}
	}
}

// TestFlagErrorsSpellFlagsAsHelp: a bad flag's error names it as the
// help does (--count, -c), once, on stderr, with exit 2.
func TestFlagErrorsSpellFlagsAsHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ping", "--bogus"}, "not defined: --bogus\n"},
		{[]string{"ping", "--count", "x", "v2:127.0.0.1:1/0"}, "for flag --count: "},
		{[]string{"ping", "-c"}, "needs an argument: -c\n"},
	} {
		r := runFerry(t, 30*time.Second, tc.args...)
		if r.code != exitUsage || r.stdout != "" || strings.Count(r.stderr, tc.want) != 1 || !strings.Contains(r.stderr, "ferry help ping") {
			t.Errorf("ferry %v: exit %d, stdout %q, stderr %q; want %d and %q once", tc.args, r.code, r.stdout, r.stderr, exitUsage, tc.want)
		}
	}
}
