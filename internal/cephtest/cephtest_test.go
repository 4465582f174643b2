package cephtest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartMon(t *testing.T) {
	m := StartMon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	out, err := m.Ceph(ctx, "mon", "stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{"v2:" + m.V2Addr + "/0", "v1:" + m.V1Addr + "/0", "quorum 0 a"} {
		if !strings.Contains(s, want) {
			t.Errorf("mon stat = %q, want it to contain %q", s, want)
		}
	}
	out, err = m.Ceph(ctx, "fsid")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != m.FSID {
		t.Errorf("ceph fsid = %q, want %q", got, m.FSID)
	}

	// A client conf written by WriteClientConf reaches the mon too, over
	// msgr2 only.
	conf := WriteClientConf(t.TempDir(), "v2:"+m.V2Addr)
	out, err = CLI(ctx, conf, "mon", "dump")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "fsid "+m.FSID) {
		t.Errorf("mon dump = %q, want fsid %s", out, m.FSID)
	}

	// Everything the mon writes stays in its directory.
	if _, err := os.Stat(filepath.Join(m.Dir, "cluster.log")); err != nil {
		t.Errorf("cluster log not in the mon's directory: %v", err)
	}

	// Stop ends the process and is idempotent.
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Exited():
	default:
		t.Fatal("mon still running after Stop")
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestCLIError(t *testing.T) {
	RequireCLI(t)
	// Nothing listens on a port just released: the CLI keeps trying until
	// the context ends; CLI must then kill it and report the error.
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	conf := WriteClientConf(t.TempDir(), "v2:127.0.0.1:"+strconv.Itoa(ports[0]))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err = CLI(ctx, conf, "mon", "stat")
	if err == nil {
		t.Fatal("ceph against a closed port succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 9*time.Second {
		t.Errorf("CLI returned after %v, want soon after the 2 s deadline", d)
	}
}

func TestStartMonRetriesTakenPort(t *testing.T) {
	Require(t, "ceph-mon", "monmaptool", "ceph")
	// The first attempt gets a port that is in use; StartMon must notice
	// the bind failure and succeed on fresh ports.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPorts = func(n int) ([]int, error) {
		calls++
		ports, err := freePorts(n)
		if calls == 1 && err == nil {
			ports[0] = taken
		}
		return ports, err
	}
	defer func() { pickPorts = freePorts }()

	m := StartMon(t)
	if calls < 2 {
		t.Fatalf("ports picked %d times, want a retry", calls)
	}
	if m.V2Addr == l.Addr().String() {
		t.Fatalf("mon claims the taken port %s", m.V2Addr)
	}
}
