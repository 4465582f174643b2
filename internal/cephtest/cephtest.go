// Package cephtest runs real Ceph programs for interoperability tests: a
// throwaway ceph-mon with auth none on free loopback ports (StartMon), a
// throwaway cephx cluster of mon, memstore OSD and mgr (StartCluster), and
// the ceph command-line client pointed at any address.
//
// Tests that need Ceph skip when the programs are not installed, unless the
// environment variable FERRY_REQUIRE_CEPH is "1", in which case they fail
// (CI sets it so that a missing install is not mistaken for a pass).
//
// Processes are stopped by their PID only, never by name.
package cephtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bounds on waiting for Ceph programs.
const (
	// QuorumTimeout bounds how long StartMon waits for the mon to form
	// quorum.
	QuorumTimeout = 60 * time.Second
	// CLITimeout bounds a ceph command run with a context that has no
	// deadline.
	CLITimeout = 60 * time.Second
	// connectTimeout is the ceph CLI's --connect-timeout, in seconds.
	connectTimeout = "10"
	// stopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	stopTimeout = 15 * time.Second
	// startAttempts is how many times StartMon tries fresh ports when the
	// mon cannot bind them.
	startAttempts = 4
	// logTail is how much of the mon's log a failing test reports.
	logTail = 16 << 10
)

// RequireEnv is the environment variable that turns a missing Ceph
// install from a skip into a failure when set to "1".
const RequireEnv = "FERRY_REQUIRE_CEPH"

// Require skips t (or fails it, if FERRY_REQUIRE_CEPH=1) unless every
// program named is on PATH.
func Require(t testing.TB, programs ...string) {
	t.Helper()
	var missing []string
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("cephtest: %s not on PATH (install ceph-mon, ceph-osd, ceph-mgr and ceph-common, e.g. scripts/install-deps.sh)",
		strings.Join(missing, ", "))
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(msg + "; " + RequireEnv + "=1 requires them")
	}
	t.Skip(msg)
}

// RequireCLI skips t (or fails it, see Require) unless the ceph
// command-line client is installed.
func RequireCLI(t testing.TB) { t.Helper(); Require(t, "ceph") }

// Mon is a running throwaway ceph-mon, named mon.a, alone in its cluster,
// with auth none. Its fields must not be modified. Its methods are safe
// for concurrent use.
type Mon struct {
	FSID     string // the cluster's fsid, canonical UUID form
	V2Addr   string // msgr2 address, "127.0.0.1:PORT"
	V1Addr   string // msgr1 address, "127.0.0.1:PORT"
	ConfPath string // ceph.conf for the mon and for the ceph CLI
	Dir      string // directory holding the conf, store, logs and sockets

	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited
	waitErr  error         // valid after done is closed
	stopOnce sync.Once
	stopErr  error
}

// MonHost returns the mon's address vector as ceph.conf's "mon host"
// wants it: "[v2:127.0.0.1:P2,v1:127.0.0.1:P1]".
func (m *Mon) MonHost() string { return "[v2:" + m.V2Addr + ",v1:" + m.V1Addr + "]" }

// PID returns the mon's process id.
func (m *Mon) PID() int { return m.cmd.Process.Pid }

// LogPath returns the path of the mon's log file.
func (m *Mon) LogPath() string { return filepath.Join(m.Dir, "mon.log") }

// Exited returns a channel that is closed when the mon process exits.
func (m *Mon) Exited() <-chan struct{} { return m.done }

// Ceph runs the ceph CLI against the mon with args (for example "mon",
// "stat") and returns its standard output. See CLI.
func (m *Mon) Ceph(ctx context.Context, args ...string) ([]byte, error) {
	return CLI(ctx, m.ConfPath, args...)
}

// Stop stops the mon: SIGTERM to its PID, then SIGKILL if it has not
// exited within 15 s. It waits for the process to exit and is idempotent.
// It returns an error only if the process could not be stopped.
func (m *Mon) Stop() error {
	m.stopOnce.Do(func() { m.stopErr = stopProcess(m.cmd.Process, m.done) })
	return m.stopErr
}

// StartMon starts a throwaway ceph-mon in a directory under t.TempDir(),
// on free loopback ports, and waits (at most QuorumTimeout) until it has
// formed quorum. It registers a cleanup that stops the mon by PID and, if
// the test failed, logs the end of the mon's log. It skips t if Ceph is
// not installed (see Require).
func StartMon(t testing.TB) *Mon {
	t.Helper()
	Require(t, "ceph-mon", "monmaptool", "ceph")
	base := t.TempDir()
	start := time.Now()
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		dir := filepath.Join(base, strconv.Itoa(attempt))
		m, retry, err := startMon(t, dir)
		if err == nil {
			t.Logf("cephtest: mon.a %s fsid %s up in %v (pid %d)",
				m.MonHost(), m.FSID, time.Since(start).Round(time.Millisecond), m.PID())
			return m
		}
		lastErr = err
		if !retry {
			break
		}
		t.Logf("cephtest: attempt %d: %v; retrying on other ports", attempt+1, err)
	}
	t.Fatalf("cephtest: cannot start ceph-mon: %v", lastErr)
	return nil
}

// startMon makes and starts one mon in dir. retry reports whether the
// failure was a port collision worth retrying on fresh ports.
func startMon(t testing.TB, dir string) (_ *Mon, retry bool, _ error) {
	ports, err := pickPorts(2)
	if err != nil {
		return nil, false, err
	}
	fsid, err := newUUID()
	if err != nil {
		return nil, false, err
	}
	m := &Mon{
		FSID:     fsid,
		V2Addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		V1Addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		ConfPath: filepath.Join(dir, "ceph.conf"),
		Dir:      dir,
		done:     make(chan struct{}),
	}
	for _, d := range []string{dir, filepath.Join(dir, "data"), filepath.Join(dir, "run")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, false, err
		}
	}
	if err := os.WriteFile(m.ConfPath, []byte(m.conf()), 0o600); err != nil {
		return nil, false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	monmap := filepath.Join(dir, "monmap")
	if out, err := run(ctx, "monmaptool", "--create", "--fsid", fsid, "--addv", "a", m.MonHost(), monmap); err != nil {
		return nil, false, fmt.Errorf("monmaptool: %v: %s", err, out)
	}
	if out, err := run(ctx, "ceph-mon", "-c", m.ConfPath, "--mkfs", "-i", "a", "--monmap", monmap); err != nil {
		return nil, false, fmt.Errorf("ceph-mon --mkfs: %v: %s", err, out)
	}

	stdout, err := os.Create(filepath.Join(dir, "mon.stdout"))
	if err != nil {
		return nil, false, err
	}
	defer stdout.Close() // the child has its own copy
	m.cmd = exec.Command("ceph-mon", "-c", m.ConfPath, "-i", "a", "-f")
	m.cmd.Dir = dir
	m.cmd.Stdout = stdout
	m.cmd.Stderr = stdout
	m.cmd.SysProcAttr = deathSignal()
	if err := startWaited(m.cmd, &m.waitErr, m.done); err != nil {
		return nil, false, fmt.Errorf("start ceph-mon: %w", err)
	}
	t.Cleanup(func() {
		if err := m.Stop(); err != nil {
			t.Errorf("cephtest: %v", err)
		}
		if t.Failed() {
			t.Logf("cephtest: end of %s:\n%s", m.LogPath(), tail(m.LogPath(), logTail))
			t.Logf("cephtest: mon stdout/stderr:\n%s", tail(filepath.Join(dir, "mon.stdout"), logTail))
		}
	})

	if err := m.waitQuorum(); err != nil {
		m.Stop()
		// The cleanup above logs the mon's log if the test fails.
		retry := strings.Contains(tail(m.LogPath(), logTail), "Address already in use")
		return nil, retry, err
	}
	return m, false, nil
}

// conf returns the mon's ceph.conf. Everything the mon writes stays in
// m.Dir; the [client] section keeps the CLI from writing logs or
// creating an admin socket.
func (m *Mon) conf() string {
	asok := filepath.Join(m.Dir, "run", "mon.asok")
	if len(asok) > 100 { // sun_path holds 108 bytes; the mon runs without one
		asok = ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, `[global]
fsid = %s
mon host = %s
auth cluster required = none
auth service required = none
auth client required = none

[mon]
mon data = %s
run dir = %s
log file = %s
pid file = %s
admin socket = %s
crash dir = %s
mon cluster log file = %s
# Do not refuse to start on a nearly full disk.
mon data avail crit = 0
mon warn on insecure global id reclaim allowed = false
# Fail at once if a port is taken; StartMon retries on other ports.
ms bind retry count = 1

[client]
log file =
admin socket =
`, m.FSID, m.MonHost(),
		filepath.Join(m.Dir, "data"), filepath.Join(m.Dir, "run"),
		m.LogPath(), filepath.Join(m.Dir, "mon.pid"), asok,
		filepath.Join(m.Dir, "crash"), filepath.Join(m.Dir, "cluster.log"))
	return b.String()
}

// waitQuorum polls the mon with the CLI until quorum_status shows mon.a
// in quorum in a cluster with m's fsid (so that a different mon that took
// the port cannot be mistaken for this one), the process exits, or
// QuorumTimeout passes.
func (m *Mon) waitQuorum() error {
	ctx, cancel := context.WithTimeout(context.Background(), QuorumTimeout)
	defer cancel()
	// A CLI run in progress when the mon dies would otherwise wait for its
	// whole connect timeout.
	go func() {
		select {
		case <-m.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-m.done:
			return fmt.Errorf("ceph-mon exited before quorum: %v", m.waitErr)
		default:
		}
		out, err := m.Ceph(ctx, "quorum_status", "--format", "json")
		if err == nil {
			err = m.checkQuorum(out)
		}
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-m.done:
			return fmt.Errorf("ceph-mon exited before quorum: %v", m.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("ceph-mon: no quorum within %v: %v", QuorumTimeout, lastErr)
		case <-tick.C:
		}
	}
}

// checkQuorum checks quorum_status output for m's fsid and mon.a in
// quorum.
func (m *Mon) checkQuorum(out []byte) error {
	var st struct {
		QuorumNames []string `json:"quorum_names"`
		Monmap      struct {
			FSID string `json:"fsid"`
		} `json:"monmap"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return fmt.Errorf("quorum_status: %v: %q", err, out)
	}
	if st.Monmap.FSID != m.FSID {
		return fmt.Errorf("quorum_status: fsid %s, want %s (another mon on the port?)", st.Monmap.FSID, m.FSID)
	}
	if !slices.Contains(st.QuorumNames, "a") {
		return fmt.Errorf("quorum_status: mon.a not in quorum %v", st.QuorumNames)
	}
	return nil
}

// stopProcess sends SIGTERM to p, waits for done up to stopTimeout, then
// sends SIGKILL and waits again.
func stopProcess(p *os.Process, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	default:
	}
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGTERM to pid %d: %w", p.Pid, err)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
	}
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGKILL to pid %d: %w", p.Pid, err)
	}
	timer.Reset(stopTimeout)
	select {
	case <-done:
		return fmt.Errorf("pid %d ignored SIGTERM for %v and was killed", p.Pid, stopTimeout)
	case <-timer.C:
		return fmt.Errorf("pid %d did not exit after SIGKILL", p.Pid)
	}
}

// CLI runs the ceph command-line client with the configuration file conf
// and args, and returns its standard output. The error, if any, includes
// the client's standard error. If ctx has no deadline, the command is
// bounded by CLITimeout.
func CLI(ctx context.Context, conf string, args ...string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, CLITimeout)
		defer cancel()
	}
	full := append([]string{"-c", conf, "--connect-timeout", connectTimeout}, args...)
	cmd := exec.CommandContext(ctx, "ceph", full...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return stdout.Bytes(), fmt.Errorf("ceph %s: %w: %s",
			strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// WriteClientConf writes dir/ceph.conf for the ceph CLI: "mon host" is
// monHost (any form ceph.conf accepts, such as "127.0.0.1:3300",
// "v2:127.0.0.1:3300" or "[v2:127.0.0.1:3300,v1:127.0.0.1:6789]"), auth is
// none (no keyring is needed then), and the client writes no log and
// creates no admin socket. It returns the file's path and panics only if
// the file cannot be written.
func WriteClientConf(dir, monHost string) string {
	p := filepath.Join(dir, "ceph.conf")
	conf := fmt.Sprintf(`[global]
mon host = %s
auth cluster required = none
auth service required = none
auth client required = none

[client]
log file =
admin socket =
`, monHost)
	if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
		panic("cephtest: " + err.Error())
	}
	return p
}

// run runs a program and returns its combined output.
func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

// pickPorts chooses the mon's ports; tests replace it to force a
// collision.
var pickPorts = freePorts

// freePorts returns n distinct free loopback TCP ports. The ports are
// free when it returns; another process may take one before the caller
// binds it, which StartMon handles by retrying.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	// Keep every listener open until all are chosen, so the ports differ.
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cephtest: free port: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// newUUID returns a random (version 4) UUID in canonical form.
func newUUID() (string, error) {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return "", err
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// tail returns at most the last n bytes of the file at path.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(st.Size()-n, 0)
	}
	var b bytes.Buffer
	b.ReadFrom(f)
	return b.String()
}

// startWaited starts cmd (whose SysProcAttr asks for a death signal, so
// that the kernel kills the daemon if the test binary dies) from a
// goroutine locked to its OS thread, since the death signal follows the
// thread that started the child, and has that goroutine wait for the
// child: *waitErr is set and done closed when it exits. It returns
// Start's error.
func startWaited(cmd *exec.Cmd, waitErr *error, done chan struct{}) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		*waitErr = cmd.Wait()
		close(done)
	}()
	return <-started
}
