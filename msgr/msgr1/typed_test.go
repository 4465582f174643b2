package msgr1

import (
	"errors"
	"testing"

	"github.com/ferrymsg/ferry/internal/typedcheck"
)

// A session key that cannot sign (cephx's are 16-byte AES keys) refuses
// the session with ErrBadSessionKey, on either side, instead of opening
// it unsigned as before.
func TestBadSessionKey(t *testing.T) {
	t.Run("client", func(t *testing.T) {
		cc, sc, fc, _ := osdConfigs(false)
		fc.key = []byte("short")
		c, s := pair(cc, sc)
		run(t, c, s)
		if !errors.Is(c.err, ErrBadSessionKey) || c.e.Ready() || c.e.Signed() {
			t.Fatalf("client: %v (ready %v)", c.err, c.e.Ready())
		}
		checkTyped(t, c.err)
	})
	t.Run("server", func(t *testing.T) {
		cc, sc, _, fs := osdConfigs(true)
		fs.key = nil
		c, s := pair(cc, sc)
		run(t, c, s)
		if !errors.Is(s.err, ErrBadSessionKey) || s.e.Ready() {
			t.Fatalf("server: %v (ready %v)", s.err, s.e.Ready())
		}
		// The client is told BADAUTHORIZER.
		if !errors.Is(c.err, ErrBadAuthorizer) || c.e.Ready() {
			t.Fatalf("client: %v", c.err)
		}
		checkTyped(t, s.err)
	})
	if _, err := Signature([]byte("0123456789abcde"), SigBlock{}, true); !errors.Is(err, ErrBadSessionKey) {
		t.Fatalf("Signature with 15 bytes: %v", err)
	}
}

// Every error the package builds outside its sentinel block wraps a
// sentinel: no errors.New or fmt.Errorf without %w in its code.
func TestNoUntypedErrors(t *testing.T) {
	for _, p := range typedcheck.Untyped(t, ".") {
		t.Errorf("untyped error: %s", p)
	}
}
