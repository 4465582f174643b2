package cephx

import (
	"errors"
	"fmt"

	"github.com/ferrymsg/ferry/auth"
)

// Errors of the crypto layer and of keyrings. Failures of an
// authentication wrap the sentinels of package auth as well (auth.ErrBadKey,
// auth.ErrBadTicket, auth.ErrExpired, auth.ErrNoTicket,
// auth.ErrUnknownEntity, auth.ErrMalformed, auth.ErrDenied), together with
// the cause: errors.Is works for both.
var (
	// ErrDecrypt: a ciphertext is not a whole number of AES blocks or its
	// padding is wrong (a wrong key or tampered data).
	ErrDecrypt = errors.New("cephx: decryption failed")
	// ErrBadMagic: a decrypted structure does not begin with version 1
	// and AUTH_ENC_MAGIC (a wrong key or tampered data).
	ErrBadMagic = errors.New("cephx: bad encryption envelope")
	// ErrNoKey: an operation needs an AES key and was given none.
	ErrNoKey = errors.New("cephx: no AES key")
	// ErrBadKeyEncoding: a base64 key or CryptoKey encoding is invalid.
	ErrBadKeyEncoding = errors.New("cephx: bad key encoding")
	// ErrBadKeyring: a keyring file does not parse.
	ErrBadKeyring = errors.New("cephx: bad keyring")
)

// Negative errnos (Linux numbering) that Ceph puts in cephx and MAuth
// results. Wire constants; append only.
const (
	StatusOK         int32 = 0
	StatusEPERM      int32 = -1
	StatusEIO        int32 = -5
	StatusEACCES     int32 = -13
	StatusEBUSY      int32 = -16
	StatusEINVAL     int32 = -22
	StatusEOPNOTSUPP int32 = -95
)

// Status returns the result code a Ceph server sends for err: 0 for nil,
// -EINVAL for a malformed request (and for a superfluous ticket),
// -EOPNOTSUPP for an unsupported method or mode, -EACCES for everything
// else (bad key, bad or expired ticket, unknown entity, denied).
func Status(err error) int32 {
	var se *StatusError
	switch {
	case err == nil:
		return StatusOK
	case errors.As(err, &se):
		return se.Status
	case errors.Is(err, auth.ErrMalformed):
		return StatusEINVAL
	default:
		return StatusEACCES
	}
}

// StatusError is a result code a server sent (a CephXResponseHeader
// status, an MAuthReply result) or that a server decided to send. It
// matches auth.ErrDenied, and Err when set.
type StatusError struct {
	Status int32  // negative errno
	Op     string // what was refused ("get_auth_session_key", ...)
	Err    error  // the cause on the server side, if known
}

// Error describes the refusal.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("cephx: %s refused with %d (%s)", e.Op, e.Status, errnoName(e.Status))
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is auth.ErrDenied.
func (e *StatusError) Is(target error) bool { return target == auth.ErrDenied }

// Unwrap returns the cause.
func (e *StatusError) Unwrap() error { return e.Err }

func errnoName(s int32) string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusEPERM:
		return "EPERM"
	case StatusEIO:
		return "EIO"
	case StatusEACCES:
		return "EACCES"
	case StatusEBUSY:
		return "EBUSY"
	case StatusEINVAL:
		return "EINVAL"
	case StatusEOPNOTSUPP:
		return "EOPNOTSUPP"
	}
	return "errno"
}

// fail returns an error that matches sentinel and, when cause is not nil,
// cause, with a message saying what failed.
func fail(sentinel error, what string, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: %s", sentinel, what)
	}
	return fmt.Errorf("%w: %s: %w", sentinel, what, cause)
}
