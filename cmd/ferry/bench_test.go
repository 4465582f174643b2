package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/bench/plot/plottest"
)

// TestBenchSmallest runs ferry bench in its smallest configuration and
// checks its table, its JSON and that every plot renders as an image.
func TestBenchSmallest(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	r := runFerry(t, 2*time.Minute, "bench", "--transports", "tcp", "--sizes", "64,4K", "--inflight", "1,4", "--duration", "50ms", "--out", out)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := strings.Count(r.stdout, "\n| tcp |"); n != 4 {
		t.Errorf("table has %d rows, want 4 (2 sizes × 2 depths):\n%s", n, r.stdout)
	}
	if !strings.Contains(r.stderr, "[8/8]") {
		t.Errorf("no progress lines on stderr:\n%s", r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var runs []benchRun
	if err := json.Unmarshal(b, &runs); err != nil || len(runs) != 8 {
		t.Fatalf("results.json: %d runs, %v", len(runs), err)
	}
	for _, run := range runs {
		if run.Ops < benchMinOps || run.Errors != 0 || run.OpsPerSec <= 0 || run.P50us <= 0 || run.P99us < run.P50us {
			t.Errorf("run %+v", run)
		}
	}
	if md, err := os.ReadFile(filepath.Join(out, "results.md")); err != nil || !strings.Contains(string(md), "latency-tcp.svg") {
		t.Errorf("results.md: %v\n%s", err, md)
	}
	plottest.RequireRenderer(t)
	for _, name := range []string{"throughput-size.svg", "throughput-depth.svg", "latency-tcp.svg"} {
		svg, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if img := plottest.Render(t, svg); img.Dx() < 100 || img.Dy() < 100 {
			t.Errorf("%s renders as %v", name, img)
		}
	}
}

// TestBenchJSON: --json prints one object with the runs.
func TestBenchJSON(t *testing.T) {
	r := runFerry(t, time.Minute, "bench", "--transports", "unix", "--sizes", "64", "--inflight", "1", "--duration", "30ms", "--json")
	var v struct {
		Runs []benchRun `json:"runs"`
		CC   string     `json:"tcp_congestion"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil || len(v.Runs) != 2 || v.Runs[0].Impl != "raw" || v.Runs[1].Impl != "ferry" {
		t.Errorf("exit %d, stdout %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
