package faulttest

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestCheckKill(t *testing.T) {
	Require(t, "ss")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := CheckKill(ctx); err != nil {
		unavailable(t, "%v", err)
	}
}

func TestPairLinkDownAndUp(t *testing.T) {
	p := NewPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	state := func(i int) string {
		t.Helper()
		out, err := run(ctx, "ip", "-n", p.NS[i], "-o", "link", "show", p.Dev[i])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The addresses exist only inside the namespaces: the host does not
	// see the devices.
	if out, err := run(ctx, "ip", "-o", "link", "show"); err != nil || strings.Contains(out, p.Dev[0]) || strings.Contains(out, p.Dev[1]) {
		t.Fatalf("veth visible outside its namespaces (%v):\n%s", err, out)
	}
	if s := state(0); !strings.Contains(s, "LOWER_UP") {
		t.Fatalf("side 0 not up: %s", s)
	}
	if err := p.SetLink(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	if s := state(0); strings.Contains(s, "LOWER_UP") {
		t.Fatalf("side 0 still has carrier with side 1 down: %s", s)
	}
	if err := p.SetLink(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	// Carrier comes back asynchronously: poll with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for s := state(0); !strings.Contains(s, "LOWER_UP"); s = state(0) {
		if time.Now().After(deadline) {
			t.Fatalf("side 0 has no carrier after side 1 came back up: %s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, err := p.Established(ctx, 0, 1); err != nil || n != 0 {
		t.Fatalf("Established: %d, %v", n, err)
	}
}
