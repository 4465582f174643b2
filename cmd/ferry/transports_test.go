//go:build linux

package main

import (
	"encoding/json"
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

// TestServeRestartsAfterKill: a `ferry serve` on a unix or shm address
// that is killed (SIGKILL: its socket file stays) can be started again
// on the same address, which then answers; a second serve on an address
// a live one holds is still refused.
func TestServeRestartsAfterKill(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "restart.sock")
	name := fmt.Sprintf("ferry-restart-test-%d", os.Getpid())
	for _, listen := range []string{"unix://" + sock, "shm://" + name} {
		scheme, _, _ := strings.Cut(listen, "://")
		t.Run(scheme, func(t *testing.T) {
			first := startServeAt(t, listen)
			if err := first.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-first.exited
			again := startServeAt(t, listen)
			r := runFerry(t, time.Minute, "ping", "--count", "20", "--json", again.addr)
			if r.code != 0 || !strings.Contains(r.stdout, `"errors":0`) {
				t.Errorf("ping after the restart: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			r = runFerry(t, time.Minute, "serve", "--listen", listen)
			if r.code == 0 || !strings.Contains(r.stderr, "in use") {
				t.Errorf("a second serve on a live address: exit %d, stderr %q", r.code, r.stderr)
			}
			if code := again.stop(t); code != 0 {
				t.Errorf("serve exit %d; stderr:\n%s", code, again.stderr.String())
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

// TestPingWarmup: --warmup pings for the time given before the measured
// run and leaves those pings out: the report counts exactly --count
// pings and names the warm-up's own time and pings, which a serve on the
// other end answered too (its count is the sum). A negative --warmup is
// a usage error.
func TestPingWarmup(t *testing.T) {
	srv := startServeAt(t, fmt.Sprintf("shm://ferry-cli-warm-%d", os.Getpid()))
	r := runFerry(t, time.Minute, "ping", "--count", "7", "--size", "64", "--warmup", "200ms", "--json", srv.addr)
	var rep pingReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil {
		t.Fatalf("ping --warmup: exit %d, %v\nstdout: %s\nstderr: %s", r.code, err, r.stdout, r.stderr)
	}
	if rep.Count != 7 || rep.Requested != 7 || rep.Sent != 7 || rep.Errors != 0 {
		t.Errorf("measured run: count %d requested %d sent %d errors %d, want 7 7 7 0", rep.Count, rep.Requested, rep.Sent, rep.Errors)
	}
	if rep.WarmupS < 0.15 || rep.WarmupPings < 1 {
		t.Errorf("warm-up: %.3f s, %d pings; want about 0.2 s and at least 1 ping", rep.WarmupS, rep.WarmupPings)
	}
	if rep.ElapsedS >= rep.WarmupS {
		t.Errorf("elapsed %.3f s includes the warm-up (%.3f s)", rep.ElapsedS, rep.WarmupS)
	}
	if r := runFerry(t, time.Minute, "ping", "--warmup", "-1s", srv.addr); r.code != exitUsage {
		t.Errorf("ping --warmup -1s: exit %d, want %d (usage)", r.code, exitUsage)
	}
	if code := srv.stop(t); code != 0 {
		t.Errorf("serve exit %d; stderr:\n%s", code, srv.stderr.String())
	}
	if want := fmt.Sprintf("pings_answered=%d", 7+rep.WarmupPings); !strings.Contains(srv.stderr.String(), want) {
		t.Errorf("serve stderr lacks %q:\n%s", want, srv.stderr.String())
	}
}
