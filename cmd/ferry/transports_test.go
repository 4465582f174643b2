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

// TestPingSizeSuffixAndProfiles: ping takes --size with a K or M suffix
// (1M is 1 MiB of data each way) and writes the CPU profile and the
// execution trace it is asked for, here over shm.
func TestPingSizeSuffixAndProfiles(t *testing.T) {
	dir := t.TempDir()
	srv := startServeAt(t, fmt.Sprintf("shm://ferry-cli-prof-%d", os.Getpid()))
	cpu, trace := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "run.trace")
	r := runFerry(t, time.Minute, "ping", "--count", "5", "--size", "1M", "--cpuprofile", cpu, "--trace", trace, "--json", srv.addr)
	if r.code != 0 || !strings.Contains(r.stdout, `"size":1048576`) || !strings.Contains(r.stdout, `"errors":0`) {
		t.Errorf("ping --size 1M: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, f := range []string{cpu, trace} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v (want a non-empty file)", f, err)
		}
	}
	if r := runFerry(t, time.Minute, "ping", "--size", "1X", srv.addr); r.code != exitUsage {
		t.Errorf("ping --size 1X: exit %d, want %d (usage)", r.code, exitUsage)
	}
	if code := srv.stop(t); code != 0 {
		t.Errorf("serve exit %d; stderr:\n%s", code, srv.stderr.String())
	}
}
