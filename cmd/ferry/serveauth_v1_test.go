package main

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/msg"
)

// TestServeCephxV1MAuthLogin: over msgr1 a mon's clients log in with
// MAuth after READY (protocol 0 negotiation, then GET_AUTH_SESSION_KEY).
// `ferry serve --auth cephx --listen v1:` answers that login for a key
// its keyring holds, so `ferry ping --keyring K v1:…` gets through, and
// refuses a wrong key with a reason.
func TestServeCephxV1MAuthLogin(t *testing.T) {
	writeKeyring := func(name string) string {
		key, err := cephx.GenerateKey(rand.Reader, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		kr := &cephx.Keyring{Entries: []cephx.KeyringEntry{{Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}, Key: key,
			Caps: map[string]string{"mon": "allow *"}}}}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, kr.Marshal(), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good, bad := writeKeyring("keyring"), writeKeyring("other")
	srv := startServeAt(t, "v1:127.0.0.1:0", "--auth", "cephx", "--keyring", good)
	r := runFerry(t, 20*time.Second, "ping", "--keyring", good, "--count", "3", "--timeout", "10s", srv.addr)
	if r.code != 0 {
		t.Fatalf("ping v1 with the right key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Once logged in, the connection takes messages of any size (before
	// the login, at most Limits.MaxControl, 64 KiB).
	r = runFerry(t, 20*time.Second, "ping", "--keyring", good, "--count", "3", "--size", "300000", "--timeout", "10s", srv.addr)
	if r.code != 0 {
		t.Fatalf("ping v1 of 300000 bytes after the login: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runFerry(t, 20*time.Second, "ping", "--keyring", bad, "--count", "1", "--timeout", "10s", srv.addr)
	if r.code == 0 || !strings.Contains(r.stderr, "mon login") {
		t.Fatalf("ping v1 with a wrong key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("wrong key: %s", strings.TrimSpace(r.stderr))
}
