package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/internal/cephtest"
)

// `ferry tell mon.X` against a real ceph-mon (auth none): mon.a by name
// and by rank answers `mon stat`; a name the monmap does not list fails
// with an error naming the mons it does list, and prints nothing on
// stdout.
func TestTellMonByName(t *testing.T) {
	mon := cephtest.StartMon(t)
	for _, target := range []string{"mon.a", "mon.0"} {
		r := runFerry(t, time.Minute, "tell", "--auth", "none", "--mon", mon.MonHost(), "--format", "json", target, "mon", "stat")
		var stat struct {
			Quorum []struct {
				Name string `json:"name"`
			} `json:"quorum"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &stat) != nil || len(stat.Quorum) != 1 || stat.Quorum[0].Name != "a" {
			t.Fatalf("ferry tell %s mon stat: exit %d, stdout %q, stderr %q", target, r.code, r.stdout, r.stderr)
		}
	}
	r := runFerry(t, time.Minute, "tell", "--auth", "none", "--mon", mon.MonHost(), "mon.b", "mon", "stat")
	if r.code == 0 || r.stdout != "" || !strings.Contains(r.stderr, `no mon "b"`) || !strings.Contains(r.stderr, "its mons: a") {
		t.Fatalf("ferry tell mon.b: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
