package msgr2

import (
	"errors"
	"testing"

	"github.com/ferrymsg/ferry/internal/typedcheck"
)

// sentinels are the package's exported errors.
var sentinels = []error{ErrBadBanner, ErrMsgr1Banner, ErrBadPreamble, ErrPreambleCRC, ErrSegmentCRC, ErrTooLarge,
	ErrTruncated, ErrUnknownTag, ErrAborted, ErrMalformed, ErrUnexpectedFrame, ErrMissingFeatures, ErrAuthRejected,
	ErrBadAuthMethod, ErrProtocol, ErrBadSignature, ErrDecrypt, ErrNonceExhausted, ErrPreAuthLimit}

// typed reports whether err matches one of the package's sentinels.
func typed(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// Secure mode set up from an unusable key or secret fails with
// ErrBadAuthMethod, like every other refusal of a mode.
func TestSecureSetupErrorsTyped(t *testing.T) {
	if _, err := newSecureDir(make([]byte, 5), make([]byte, gcmNonceLen)); !errors.Is(err, ErrBadAuthMethod) {
		t.Fatalf("5-byte key: %v", err)
	}
	if _, _, err := NewSecure(make([]byte, MinConnectionSecret-1), Client); !errors.Is(err, ErrBadAuthMethod) {
		t.Fatalf("short secret: %v", err)
	}
	if _, _, err := NewSecure(make([]byte, MinConnectionSecret), Server); err != nil {
		t.Fatal(err)
	}
}

// Every error a handshake ends with matches a sentinel: the refusals of
// the auth tests, and what the engine builds anywhere (no errors.New or
// fmt.Errorf without %w in its code).
func TestErrorsTyped(t *testing.T) {
	for _, p := range typedcheck.Untyped(t, ".") {
		t.Errorf("untyped error: %s", p)
	}
	c, s := authPair(t, []uint32{ConModeCRC}, []uint32{ConModeCRC}, func(cc, sc *Config) { cc.AuthClient = nil })
	if !typed(c.err) || !typed(&AuthError{Result: -13}) || typed(errors.New("other")) {
		t.Fatalf("client %v server %v", c.err, s.err)
	}
}
