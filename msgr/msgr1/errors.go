package msgr1

import (
	"errors"
	"fmt"
	"strings"
)

// Errors reported by the codec and the protocol engine. They are always
// wrapped in an *Error that names the tag and what was wrong; test for
// them with errors.Is.
var (
	// ErrBadBanner means the peer's banner is not "ceph v027".
	ErrBadBanner = errors.New("msgr1: bad banner")
	// ErrMsgr2Banner means the peer sent "ceph v2\n": it speaks msgr2.
	ErrMsgr2Banner = errors.New("msgr1: peer speaks msgr2")
	// ErrWrongPeer means the server's banner names another address than
	// the one dialled.
	ErrWrongPeer = errors.New("msgr1: peer is not the one dialled")
	// ErrTruncated means the input ended before the value did.
	ErrTruncated = errors.New("msgr1: truncated input")
	// ErrMalformed means a structure does not decode.
	ErrMalformed = errors.New("msgr1: malformed input")
	// ErrTooLarge means the peer declared more bytes than the limits
	// allow (an authorizer, a message segment or a whole message).
	ErrTooLarge = errors.New("msgr1: exceeds limit")
	// ErrUnknownTag means a tag byte this package does not know, or one
	// that is not valid where it arrived.
	ErrUnknownTag = errors.New("msgr1: unexpected tag")
	// ErrHeaderCRC means a message header's CRC does not match.
	ErrHeaderCRC = errors.New("msgr1: header crc mismatch")
	// ErrDataCRC means a front, middle or data CRC does not match.
	ErrDataCRC = errors.New("msgr1: payload crc mismatch")
	// ErrAborted means a message's footer lacks the COMPLETE flag.
	ErrAborted = errors.New("msgr1: message aborted by sender")
	// ErrBadSignature means a message's signature does not match.
	ErrBadSignature = errors.New("msgr1: bad message signature")
	// ErrMissingFeatures means one side lacks features the other
	// requires (a FEATURES reply, or a reply without our required bits).
	ErrMissingFeatures = errors.New("msgr1: missing required features")
	// ErrBadProtoVersion means the two sides' protocol versions differ
	// (a BADPROTOVER reply).
	ErrBadProtoVersion = errors.New("msgr1: protocol version mismatch")
	// ErrBadAuthorizer means the authorizer was refused (a BADAUTHORIZER
	// reply, or the server's auth method refused it), or an authorizer
	// or its reply could not be produced or verified.
	ErrBadAuthorizer = errors.New("msgr1: bad authorizer")
	// ErrProtocol means the peer broke the protocol in a way not covered
	// above, or the engine was driven wrongly.
	ErrProtocol = errors.New("msgr1: protocol violation")
	// ErrBadSessionKey means authentication gave a session key that
	// cannot sign messages (cephx's are 16-byte AES keys): the session is
	// refused rather than run unsigned.
	ErrBadSessionKey = errors.New("msgr1: unusable session key")
)

// Error is the typed error for everything the codec and the engine
// reject. Err is one of the package's sentinel errors; Tag is the tag
// concerned (0 when there is none, as for the banner); Detail says what
// exactly was wrong; Cause, if set, is the underlying error (an auth
// method's), also reachable with errors.Is.
type Error struct {
	Err    error
	Tag    Tag
	Detail string
	Cause  error
}

// Error formats e as "<sentinel>: <TAG> <detail>: <cause>".
func (e *Error) Error() string {
	var sb strings.Builder
	if e.Err != nil {
		sb.WriteString(e.Err.Error())
	} else {
		sb.WriteString("msgr1: error")
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

// Unwrap returns the sentinel error and the cause.
func (e *Error) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

func errorf(sentinel error, tag Tag, format string, args ...any) *Error {
	return &Error{Err: sentinel, Tag: tag, Detail: fmt.Sprintf(format, args...)}
}

func wrapf(sentinel, cause error, tag Tag, format string, args ...any) *Error {
	return &Error{Err: sentinel, Tag: tag, Detail: fmt.Sprintf(format, args...), Cause: cause}
}
