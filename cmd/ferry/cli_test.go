package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHelpOnce: every command's --help prints its help once, on stdout,
// and exits 0; the flag list spells flags as the usage line does (two
// dashes), and every flag the usage line names is in the list.
func TestHelpOnce(t *testing.T) {
	flagRef := regexp.MustCompile(`--[a-z][a-z0-9-]*`)
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "--help"}, {"help", c.name}} {
			r := runFerry(t, 30*time.Second, args...)
			if r.code != 0 {
				t.Errorf("ferry %q: exit %d, want 0", args, r.code)
			}
			if r.stderr != "" {
				t.Errorf("ferry %q: wrote to stderr:\n%s", args, r.stderr)
			}
			if n := strings.Count(r.stdout, "Usage: ferry "+c.name); n != 1 {
				t.Errorf("ferry %q: usage printed %d times on stdout:\n%s", args, n, r.stdout)
			}
			if strings.Contains(r.stdout, "\n  -"+"-") == false {
				t.Errorf("ferry %q: no --flag in the flag list:\n%s", args, r.stdout)
			}
			if regexp.MustCompile(`\n  -[a-z][a-z0-9]`).MatchString(r.stdout) {
				t.Errorf("ferry %q: the flag list spells a flag with one dash:\n%s", args, r.stdout)
			}
			for _, f := range flagRef.FindAllString(c.usage, -1) {
				if !strings.Contains(r.stdout, "\n  "+f+" ") && !strings.Contains(r.stdout, "\n  "+f+"\n") {
					t.Errorf("ferry %s: the usage line names %s, which the flag list lacks", c.name, f)
				}
			}
		}
	}
}

// TestVersion: --version and version print one line naming ferry and
// the Go version, and exit 0.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		r := runFerry(t, 30*time.Second, arg)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "ferry ") || !strings.Contains(r.stdout, " go1.") || strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("ferry %s: exit %d, stdout %q, stderr %q", arg, r.code, r.stdout, r.stderr)
		}
	}
}

// TestSelftestFailuresReported: a self-test whose RPCs all fail says so
// on stderr, exits 1, and reports no rate computed from failed RPCs.
func TestSelftestFailuresReported(t *testing.T) {
	r := runFerry(t, time.Minute, "selftest", "--endpoints", "tcp://127.0.0.1:1", "--sizes", "0 0", "--reps", "5", "--json")
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	if !strings.Contains(r.stderr, "5 of 5 RPCs failed") || !strings.Contains(r.stderr, "refused") {
		t.Errorf("stderr does not report the failures and their cause:\n%s", r.stderr)
	}
	if !strings.Contains(r.stdout, `"failures":5`) && !strings.Contains(r.stdout, `"failures": 5`) {
		t.Errorf("JSON does not count the failures:\n%s", r.stdout)
	}
	if regexp.MustCompile(`"(rpcs_per_s|mbytes_per_s)":\s*[1-9]`).MatchString(r.stdout) {
		t.Errorf("a rate computed from failed RPCs:\n%s", r.stdout)
	}
}
