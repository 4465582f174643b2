//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLITransports: serve listens on each transport the library has,
// and ping and selftest reach it there (issue 17 item 5).
func TestCLITransports(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "serve.sock")
	name := fmt.Sprintf("ferry-cli-test-%d", os.Getpid())
	for _, listen := range []string{"unix://" + sock, "shm://" + name, "tcp://127.0.0.1:0"} {
		scheme, _, _ := strings.Cut(listen, "://")
		t.Run(scheme, func(t *testing.T) {
			srv := startServeAt(t, listen)
			if scheme != "tcp" && srv.addr != listen {
				t.Errorf("serve --listen %s printed %q", listen, srv.addr)
			}
			r := runFerry(t, time.Minute, "ping", "--count", "50", "--size", "4096", "--json", srv.addr)
			if r.code != 0 || !strings.Contains(r.stdout, `"errors":0`) {
				t.Errorf("ping %s: exit %d\nstdout: %s\nstderr: %s", srv.addr, r.code, r.stdout, r.stderr)
			}
			r = runFerry(t, time.Minute, "selftest", "--endpoints", srv.addr, "--sizes", "0 0,4096 4096", "--reps", "50", "--json")
			if r.code != 0 || strings.Count(r.stdout, `"failures":0`) != 2 {
				t.Errorf("selftest %s: exit %d\nstdout: %s\nstderr: %s", srv.addr, r.code, r.stdout, r.stderr)
			}
			if code := srv.stop(t); code != 0 {
				t.Errorf("serve exit %d; stderr:\n%s", code, srv.stderr.String())
			}
		})
	}
}
