//go:build linux

package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBusyPollFlag: with --busy-poll on serve and ping, the server's
// reads find the pings by polling its socket (msgr.busy_poll_hits in
// the admin socket's perf dump), without it they do not; a --busy-poll
// past 10ms is a usage error on serve, ping and selftest.
func TestBusyPollFlag(t *testing.T) {
	for _, busy := range []string{"", "5ms"} {
		sock := filepath.Join(t.TempDir(), "serve.asok")
		args := []string{"--admin-socket", sock}
		ping := []string{"ping", "--count", "200"}
		if busy != "" {
			args = append(args, "--busy-poll", busy)
			ping = append(ping, "--busy-poll", busy)
		}
		srv := startServe(t, args...)
		if r := runFerry(t, 30*time.Second, append(ping, srv.addr)...); r.code != 0 {
			t.Fatalf("ping --busy-poll %q: exit %d %s", busy, r.code, r.stderr)
		}
		r := runFerry(t, 30*time.Second, "admin", sock, "perf", "dump")
		var pd struct {
			Msgr struct {
				Hits *float64 `json:"busy_poll_hits"`
			} `json:"msgr"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &pd) != nil || pd.Msgr.Hits == nil {
			t.Fatalf("admin perf dump: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		switch hits := *pd.Msgr.Hits; {
		case busy == "" && hits != 0:
			t.Errorf("serve without --busy-poll: %v busy_poll_hits", hits)
		case busy != "" && hits < 100:
			t.Errorf("serve --busy-poll %s: %v busy_poll_hits in 200 pings, want most", busy, hits)
		}
	}
	for _, cmd := range [][]string{{"serve", "--listen", "tcp://127.0.0.1:0"}, {"ping", "tcp://127.0.0.1:1"}, {"selftest"}} {
		r := runFerry(t, 30*time.Second, append(cmd, "--busy-poll", "11ms")...)
		if r.code != 2 || !strings.Contains(r.stderr, "--busy-poll") {
			t.Errorf("%s --busy-poll 11ms: exit %d, stderr %q; want a usage error naming the flag", cmd[0], r.code, r.stderr)
		}
	}
}
