package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestServeAndPingV1: `ferry serve --listen v1:…` serves msgr1, and
// `ferry ping v1:…` talks msgr1 to it, with data echoed both ways.
func TestServeAndPingV1(t *testing.T) {
	srv := startServeAt(t, "v1:127.0.0.1:0")
	if !strings.HasPrefix(srv.addr, "v1:127.0.0.1:") || !strings.HasSuffix(srv.addr, "/0") {
		t.Fatalf("serve address %q, want v1:127.0.0.1:PORT/0", srv.addr)
	}
	r := runFerry(t, time.Minute, "ping", "--count", "200", "--size", "65536", "--inflight", "8", "--json", srv.addr)
	if r.code != 0 {
		t.Fatalf("ping exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	var rep struct {
		Count, Errors int
		Bytes         int64
		Peer          string
		Status        struct {
			MonStatus struct {
				Ferry       bool `json:"ferry"`
				MonMap      any  `json:"monmap"`
				PublicAddrs any  `json:"public_addrs"`
			} `json:"mon_status"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("ping output: %v\n%s", err, r.stdout)
	}
	if rep.Count != 200 || rep.Errors != 0 || rep.Bytes != 2*200*65536 || rep.Peer != "mon.0" || !rep.Status.MonStatus.Ferry {
		t.Fatalf("ping over v1: %s", r.stdout)
	}
	if !strings.Contains(r.stdout, `"v1"`) {
		t.Errorf("the mon status does not name the v1 address: %s", r.stdout)
	}
	if code := srv.stop(t); code != 0 {
		t.Errorf("serve exit code after SIGTERM = %d; stderr:\n%s", code, srv.stderr.String())
	}
}
