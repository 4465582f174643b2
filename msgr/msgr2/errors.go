package msgr2

import (
	"errors"
	"fmt"
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
)

// Error is the typed error for everything the codec and the engine reject.
// Err is one of the package's sentinel errors; Tag is the frame concerned
// (0 when there is none, as for the banner); Detail says what exactly was
// wrong.
type Error struct {
	Err    error
	Tag    Tag
	Detail string
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
	return sb.String()
}

// Unwrap returns the sentinel error.
func (e *Error) Unwrap() error { return e.Err }

// errorf returns an *Error wrapping sentinel for a frame with the given tag
// (0 for none) and a formatted detail.
func errorf(sentinel error, tag Tag, format string, args ...any) *Error {
	return &Error{Err: sentinel, Tag: tag, Detail: fmt.Sprintf(format, args...)}
}
