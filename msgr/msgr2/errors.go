package msgr2

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Errors reported by the frame codec and the protocol engine. They are
// always wrapped in an *Error that names the frame and what was wrong;
// test for them with errors.Is.
var (
	// ErrBadBanner means the peer's banner is not a msgr2 banner.
	ErrBadBanner = errors.New("msgr2: bad banner")
	// ErrMsgr1Banner means the peer sent "ceph v027": it speaks msgr1.
	ErrMsgr1Banner = errors.New("msgr2: peer speaks msgr1")
	// ErrBadPreamble means a frame preamble is structurally invalid (bad
	// segment count, empty last segment, non-zero reserved bytes).
	ErrBadPreamble = errors.New("msgr2: bad frame preamble")
	// ErrPreambleCRC means a preamble's CRC does not match its contents.
	ErrPreambleCRC = errors.New("msgr2: preamble crc mismatch")
	// ErrSegmentCRC means a segment's CRC does not match its contents.
	ErrSegmentCRC = errors.New("msgr2: segment crc mismatch")
	// ErrTooLarge means a frame or banner declares more bytes than the
	// limits allow.
	ErrTooLarge = errors.New("msgr2: frame exceeds limit")
	// ErrTruncated means the input ended before the value did (or a frame
	// body is not the length its preamble declares).
	ErrTruncated = errors.New("msgr2: truncated input")
	// ErrUnknownTag means a preamble carries a tag this package does not
	// know.
	ErrUnknownTag = errors.New("msgr2: unknown frame tag")
	// ErrAborted means the sender aborted the frame after sending it (the
	// epilogue's late status or flags say so); the frame must be dropped.
	ErrAborted = errors.New("msgr2: frame aborted by sender")
	// ErrMalformed means a payload does not decode.
	ErrMalformed = errors.New("msgr2: malformed payload")
	// ErrUnexpectedFrame means a valid frame arrived where the protocol
	// does not allow it.
	ErrUnexpectedFrame = errors.New("msgr2: unexpected frame")
	// ErrMissingFeatures means one side lacks features the other requires.
	ErrMissingFeatures = errors.New("msgr2: missing required features")
	// ErrAuthRejected means the peer refused authentication.
	ErrAuthRejected = errors.New("msgr2: authentication rejected")
	// ErrBadAuthMethod means no authentication method or connection mode
	// is acceptable to both sides.
	ErrBadAuthMethod = errors.New("msgr2: no acceptable auth method")
	// ErrProtocol means the peer broke the protocol in a way not covered
	// above.
	ErrProtocol = errors.New("msgr2: protocol violation")
	// ErrBadSignature means the peer's AUTH_SIGNATURE does not match the
	// HMAC of what we sent it: the pre-auth exchange was tampered with,
	// or the peer holds another session key.
	ErrBadSignature = errors.New("msgr2: auth signature mismatch")
	// ErrDecrypt means a secure-mode frame did not decrypt: its GCM tag
	// does not verify (tampered, replayed, reordered or truncated bytes,
	// or another key).
	ErrDecrypt = errors.New("msgr2: secure frame does not decrypt")
	// ErrNonceExhausted means a secure-mode sender used up its nonces;
	// the connection must be closed (a new one gets new nonces).
	ErrNonceExhausted = errors.New("msgr2: out of nonces")
	// ErrPreAuthLimit means a peer sent more before authenticating than
	// Limits.MaxPreAuth allows.
	ErrPreAuthLimit = errors.New("msgr2: pre-auth limit exceeded")
)

// Error is the typed error for everything the codec and the engine reject.
// Err is one of the package's sentinel errors; Tag is the frame concerned
// (0 when there is none, as for the banner); Detail says what exactly was
// wrong.
type Error struct {
	Err    error
	Tag    Tag
	Detail string
	// Cause, if set, is the error of another layer behind this one (an
	// auth method's), which errors.Is and errors.As see too.
	Cause error
}

// Error formats e as "<sentinel>: <TAG> <detail>", for example
// "msgr2: segment crc mismatch: MESSAGE segment 3: got 0x1 want 0x2".
func (e *Error) Error() string {
	var sb strings.Builder
	if e.Err != nil {
		sb.WriteString(e.Err.Error())
	} else {
		sb.WriteString("msgr2: error")
	}
	sep := ": "
	if e.Tag != 0 {
		sb.WriteString(sep)
		sb.WriteString(e.Tag.String())
		sep = " "
	}
	if e.Detail != "" {
		sb.WriteString(sep)
		sb.WriteString(e.Detail)
	}
	if e.Cause != nil {
		sb.WriteString(": ")
		sb.WriteString(e.Cause.Error())
	}
	return sb.String()
}

// Unwrap returns the sentinel error and the cause, if any.
func (e *Error) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// errorf returns an *Error wrapping sentinel for a frame with the given tag
// (0 for none) and a formatted detail.
func errorf(sentinel error, tag Tag, format string, args ...any) *Error {
	return &Error{Err: sentinel, Tag: tag, Detail: fmt.Sprintf(format, args...)}
}

// Ceph errno values carried in AUTH_BAD_METHOD's result (negated).
const (
	errnoEACCES     = 13
	errnoEINVAL     = 22
	errnoEOPNOTSUPP = 95
)

// AuthError is how an authentication refusal is reported: the peer's
// AUTH_BAD_METHOD (client side; Remote true), or our own refusal of the
// peer (server side; Remote false). It matches ErrBadAuthMethod when the
// method or every mode was refused (result -EOPNOTSUPP) and
// ErrAuthRejected otherwise (-EACCES: a bad key or ticket, -EINVAL:
// malformed). Cause, when set, is the auth method's own error (server
// side, or a client that could not process a reply), and errors.Is sees
// through to it (auth.ErrBadKey, auth.ErrBadTicket, ...).
type AuthError struct {
	Remote         bool
	Method         uint32   // the method the client tried
	Result         int32    // negative errno
	AllowedMethods []uint32 // what the server allows
	AllowedModes   []uint32
	OfferedModes   []uint32 // the modes the client offered
	// Tried (client side) lists the methods the server refused on this
	// socket, in the order tried: a client that offers several methods
	// (auth.Fallback) retries with the next one the server allows, and
	// fails only when no method common to both sides remains.
	Tried []uint32
	Cause error
}

func (e *AuthError) sentinel() error {
	if e.Result == -errnoEOPNOTSUPP {
		return ErrBadAuthMethod
	}
	return ErrAuthRejected
}

// Error says who refused what and why.
func (e *AuthError) Error() string {
	var sb strings.Builder
	sb.WriteString(e.sentinel().Error())
	if e.Remote {
		fmt.Fprintf(&sb, ": server refused auth method %d with modes %v: result %d (%s); it allows methods %v modes %v",
			e.Method, e.OfferedModes, e.Result, errnoName(e.Result), e.AllowedMethods, e.AllowedModes)
		if len(e.Tried) > 1 {
			fmt.Fprintf(&sb, "; tried methods %v, none left in common", e.Tried)
		}
	} else {
		fmt.Fprintf(&sb, ": refused client's auth method %d with modes %v: result %d (%s); allowed methods %v modes %v",
			e.Method, e.OfferedModes, e.Result, errnoName(e.Result), e.AllowedMethods, e.AllowedModes)
	}
	if e.Cause != nil {
		sb.WriteString(": ")
		sb.WriteString(e.Cause.Error())
	}
	return sb.String()
}

// Is matches the sentinel (see AuthError).
func (e *AuthError) Is(target error) bool { return target == e.sentinel() }

// Unwrap returns the cause, if any.
func (e *AuthError) Unwrap() error { return e.Cause }

func errnoName(r int32) string {
	switch -r {
	case errnoEACCES:
		return "EACCES: bad key, ticket or authorizer"
	case errnoEINVAL:
		return "EINVAL: malformed or superfluous"
	case errnoEOPNOTSUPP:
		return "EOPNOTSUPP: method or mode not allowed"
	case 0:
		return "ok"
	}
	return "errno " + strconv.Itoa(int(-r))
}
