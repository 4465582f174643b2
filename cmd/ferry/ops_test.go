package main

import (
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/internal/cephtest"
)

// TestAdminSocket: ferry serve --admin-socket answers ferry admin's
// perf dump (with the metrics' names and exact counts after a ping),
// status, connections and help, and the stock ceph CLI's perf dump.
func TestAdminSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "serve.asok")
	srv := startServe(t, "--admin-socket", sock)
	if r := runFerry(t, 30*time.Second, "ping", "--count", "9", "--size", "10", srv.addr); r.code != 0 {
		t.Fatalf("ping: %d %s", r.code, r.stderr)
	}
	r := runFerry(t, 30*time.Second, "admin", sock, "perf", "dump")
	var pd struct {
		Msgr struct {
			Received int `json:"messages_received"`
			Sent     int `json:"messages_sent"`
			Bytes    int `json:"received_bytes"`
		} `json:"msgr"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &pd) != nil || pd.Msgr.Received != 9 || pd.Msgr.Sent != 9 || pd.Msgr.Bytes != 90 {
		t.Errorf("admin perf dump: exit %d %+v\n%s\n%s", r.code, pd, r.stdout, r.stderr)
	}
	r = runFerry(t, 30*time.Second, "admin", sock, "status")
	var st map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil || st["addr"] != srv.addr || st["pings_answered"] != float64(9) {
		t.Errorf("admin status: exit %d %v\n%s", r.code, st, r.stderr)
	}
	r = runFerry(t, 30*time.Second, "admin", sock, "connections")
	var conns []map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &conns) != nil {
		t.Errorf("admin connections: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = runFerry(t, 30*time.Second, "admin", sock, "help")
	for _, c := range []string{"perf dump", "status", "connections", "help"} {
		if !strings.Contains(r.stdout, `"`+c+`"`) {
			t.Errorf("admin help lacks %q:\n%s", c, r.stdout)
		}
	}
	if r := runFerry(t, 30*time.Second, "admin", sock, "no", "such"); r.code == 0 || !strings.Contains(r.stderr, "unknown command") {
		t.Errorf("unknown command: exit %d %s", r.code, r.stderr)
	}

	cephtest.Require(t, "ceph")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ceph", "--admin-daemon", sock, "perf", "dump").CombinedOutput()
	if err != nil || json.Unmarshal(out, &pd) != nil || pd.Msgr.Received != 9 {
		t.Errorf("ceph --admin-daemon perf dump: %v %+v\n%s", err, pd, out)
	}
}

// TestServeOpsInUse: serve whose --admin-socket path or --metrics port
// is taken fails before it prints its listening line (which promises a
// server to scripts), with the reason on stderr.
func TestServeOpsInUse(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "busy.asok")
	first := startServe(t, "--admin-socket", sock, "--metrics", "127.0.0.1:0")
	r := runFerry(t, 30*time.Second, "admin", sock, "status")
	if r.code != 0 {
		t.Fatalf("admin status: %d %s", r.code, r.stderr)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, args := range [][]string{
		{"--admin-socket", sock},
		{"--metrics", l.Addr().String()},
	} {
		r := runFerry(t, 30*time.Second, append([]string{"serve", "--listen", "tcp://127.0.0.1:0"}, args...)...)
		if r.code == 0 || r.stdout != "" || !strings.Contains(r.stderr, "in use") {
			t.Errorf("serve %v while taken: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	if code := first.stop(t); code != 0 {
		t.Errorf("first serve exit %d; stderr:\n%s", code, first.stderr.String())
	}
}
