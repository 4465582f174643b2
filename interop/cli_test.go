package interop_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/internal/cephtest"
)

// buildFerry builds cmd/ferry into a temporary directory.
func buildFerry(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ferry")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/ferry").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startServe runs `ferry serve` and returns the address from its first
// line. The process is stopped with SIGTERM (by PID) when the test ends
// and must exit cleanly.
func startServe(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "v2:127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ferry serve exited with %v after SIGTERM", err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("ferry serve did not stop on SIGTERM")
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
		}
		done <- cmd.Wait()
	}()
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(line, "listening ")
		if !ok {
			t.Fatalf("first line of ferry serve: %q", line)
		}
		return addr
	case <-time.After(30 * time.Second):
		t.Fatal("ferry serve printed nothing")
	}
	return ""
}

// TestCephCLIPingsFerry points the stock ceph command-line client at
// `ferry serve` and runs `ceph ping mon.a`, also with `serve
// --no-data-crc` (the ceph client does not offer the ferry-only bit, so
// that session keeps its data CRCs and works as before).
func TestCephCLIPingsFerry(t *testing.T) {
	cephtest.RequireCLI(t)
	bin := buildFerry(t)
	for _, args := range [][]string{nil, {"--no-data-crc"}} {
		t.Run(strings.Join(append([]string{"serve"}, args...), " "), func(t *testing.T) { cephCLIPing(t, bin, args) })
	}
}

func cephCLIPing(t *testing.T, bin string, args []string) {
	addr := startServe(t, bin, args...)
	conf := cephtest.WriteClientConf(t.TempDir(), strings.TrimSuffix(addr, "/0"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := cephtest.CLI(ctx, conf, "ping", "mon.a")
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		Health    struct{ Status string } `json:"health"`
		MonStatus struct {
			Name  string `json:"name"`
			Ferry bool   `json:"ferry"`
		} `json:"mon_status"`
	}
	if err := json.Unmarshal(out, &status); err != nil {
		t.Fatalf("ceph ping printed non-JSON: %v\n%s", err, out)
	}
	if !status.MonStatus.Ferry || status.MonStatus.Name != "a" || status.Health.Status == "" {
		t.Fatalf("ceph ping mon.a printed %s", out)
	}
}

// TestFerryPingMon runs the `ferry ping` tool against a real ceph-mon
// (which does not echo data, so --size 0).
func TestFerryPingMon(t *testing.T) {
	mon := cephtest.StartMon(t)
	bin := buildFerry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "ping", "--count", "20", "--inflight", "4", "--size", "0", "--json", "v2:"+mon.V2Addr+"/0").Output()
	if err != nil {
		t.Fatalf("ferry ping: %v\n%s", err, out)
	}
	var res struct {
		Count, Errors int
		Status        map[string]any
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Count != 20 || res.Errors != 0 || res.Status["mon_status"] == nil {
		t.Fatalf("ferry ping against ceph-mon: %s", out)
	}
}
