package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestBytesFlag: byte-count flags (--send-budget, --peer-budget) take
// the forms the README writes, "128MiB" among them, and negative
// values; a bad count is refused with a message saying what is wanted.
func TestBytesFlag(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "64K": 64 << 10, "64k": 64 << 10, "128MiB": 128 << 20, "128mib": 128 << 20,
		"1M": 1 << 20, "2G": 2 << 30, "1GiB": 1 << 30, "3KiB": 3 << 10, "-1": -1, "0": 0,
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		p := newBytesFlag(fs, "send-budget", 7, "")
		if err := fs.Parse([]string{"--send-budget", in}); err != nil || *p != want {
			t.Errorf("--send-budget %s = %d, %v; want %d", in, *p, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "12X", "1.5M", "9999999999999G", "K64"} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		newBytesFlag(fs, "send-budget", 0, "")
		if err := fs.Parse([]string{"--send-budget", in}); err == nil || !strings.Contains(err.Error(), "byte count") {
			t.Errorf("--send-budget %q: %v, want a byte-count error", in, err)
		}
	}
	// The --sizes lists read counts the same way.
	if n, err := parseInts("0,64K,1MiB", true); err != nil || len(n) != 3 || n[1] != 64<<10 || n[2] != 1<<20 {
		t.Errorf("parseInts sizes: %v, %v", n, err)
	}
}
