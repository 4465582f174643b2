package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSimJSON runs `ferry sim --json` and checks the object's fields, and
// that a second run with the same seed gives the same trace hash.
func TestSimJSON(t *testing.T) {
	args := []string{"sim", "--ranks", "64", "--seed", "9", "--duration", "40s", "--loss", "0.01", "--kill", "2", "--pause", "1",
		"--coll-every", "10s", "--coll-timeout", "5s", "--json"}
	var hashes []string
	for range 2 {
		r := runFerry(t, time.Minute, args...)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if n := strings.Count(strings.TrimSpace(r.stdout), "\n"); n != 0 {
			t.Fatalf("want one line of JSON, got %d lines:\n%s", n+1, r.stdout)
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &obj); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
		for _, f := range []string{"ranks", "killed", "paused", "detected_by_all", "false_positives", "detect_periods_max",
			"msgs_per_rank_period", "sim_seconds", "sim_per_wall", "peak_rss_mb", "trace_hash"} {
			if _, ok := obj[f]; !ok {
				t.Errorf("field %q missing", f)
			}
		}
		num := func(f string) float64 { v, _ := obj[f].(float64); return v }
		if num("ranks") != 64 || num("killed") != 2 || num("paused") != 1 || num("sim_seconds") != 40 {
			t.Errorf("ranks %v killed %v paused %v sim_seconds %v", obj["ranks"], obj["killed"], obj["paused"], obj["sim_seconds"])
		}
		if num("detected_by_all") != 2 || num("false_positives") != 0 {
			t.Errorf("detected_by_all %v, false_positives %v", obj["detected_by_all"], obj["false_positives"])
		}
		if num("detect_periods_max") <= 0 || num("msgs_per_rank_period") <= 0 || num("sim_per_wall") <= 0 || num("peak_rss_mb") <= 0 {
			t.Errorf("detect_periods_max %v msgs_per_rank_period %v sim_per_wall %v peak_rss_mb %v",
				obj["detect_periods_max"], obj["msgs_per_rank_period"], obj["sim_per_wall"], obj["peak_rss_mb"])
		}
		if num("collectives_run") != 3 || num("collectives_aggregate_ok") != 3 || num("coll_reach_min") < 0.9 {
			t.Errorf("collectives_run %v, collectives_aggregate_ok %v, coll_reach_min %v",
				obj["collectives_run"], obj["collectives_aggregate_ok"], obj["coll_reach_min"])
		}
		h, _ := obj["trace_hash"].(string)
		if len(h) != 64 {
			t.Errorf("trace_hash %q", h)
		}
		hashes = append(hashes, h)
	}
	if hashes[0] != hashes[1] {
		t.Errorf("same seed, trace hashes %s and %s", hashes[0], hashes[1])
	}
}

// TestSimText checks the human output names what it must.
func TestSimText(t *testing.T) {
	r := runFerry(t, time.Minute, "sim", "--ranks", "32", "--duration", "30s", "--kill", "1", "--pause", "1")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"crashed at", "first detected", "known to all", "false positives:", "messages per rank per period:",
		"simulated seconds per wall second", "peak RSS:", "trace hash:", "paused at", "collectives (knomial:4): 2 run, 2 finished"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestSimUsage(t *testing.T) {
	for _, args := range [][]string{
		{"sim", "--loss", "1.5"},
		{"sim", "--ranks", "0"},
		{"sim", "--ranks", "4", "--kill", "3", "--pause", "2"},
		{"sim", "--codec", "xml"},
		{"sim", "extra"},
		{"sim", "--coll-topo", "kary"},
		{"sim", "--coll-topo", "ring:3"},
		{"sim", "--delay-min", "0", "--delay-max", "0"}, // 0 would mean the defaults
	} {
		if r := runFerry(t, 10*time.Second, args...); r.code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, r.code, exitUsage)
		}
	}
}
