package rpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Code is an RPC error code, carried in a reply's rc field so that the
// origin learns why the target failed a request. The codes follow DAOS's
// DER_* errors in spirit; their numbers are ferry's own.
type Code int32

// Error codes. Wire constants; append only.
const (
	CodeOK           Code = 0
	CodeTimedOut     Code = 1  // the request's deadline passed (DER_TIMEDOUT)
	CodeUnreachable  Code = 2  // the target could not be reached (DER_UNREACH)
	CodeUnregistered Code = 3  // the target has no such opcode (DER_UNREG)
	CodeCanceled     Code = 4  // the request was aborted (DER_CANCELED)
	CodeNoReply      Code = 5  // the target will not reply (DER_NOREPLY)
	CodeHandler      Code = 6  // the handler failed (DER_MISC); the text says why
	CodeMalformed    Code = 7  // the input or output could not be decoded (DER_PROTO)
	CodeBadTarget    Code = 8  // no such context (tag) at the target (DER_BAD_TARGET)
	CodeTooLarge     Code = 9  // the input or output exceeds the size limit (DER_OVERFLOW)
	CodeExcluded     Code = 10 // the target rank left the group (DER_EXCLUDED)
	CodeShutdown     Code = 11 // the context or instance is shutting down (DER_SHUTDOWN)
	CodeNotFound     Code = 12 // the URI or protocol asked for is not known (DER_NONEXIST)
	CodeBusy         Code = 13 // the target's queue is full; retry later (DER_BUSY)
	CodeNoPerm       Code = 14 // a bulk handle does not allow the access (DER_NO_PERM)
	CodeInvalid      Code = 15 // an argument is out of range, such as a bulk offset (DER_INVAL)
	CodeWrongRank    Code = 16 // the target is another rank than the request was for (DER_OOG's cousin)
	CodeGroupVersion Code = 17 // the origin's group version is not the target's (DER_GRPVER)
)

// Sentinel errors, one per code: errors.Is(err, rpc.ErrTimedOut) holds for
// every *Error with that code.
var (
	// ErrTimedOut: the request's deadline passed before its reply came.
	// Errors with this code are net.Errors whose Timeout is true, and
	// match context.DeadlineExceeded.
	ErrTimedOut = errors.New("rpc: timed out")
	// ErrUnreachable: the target could not be reached (no address, the
	// connection failed or was reset).
	ErrUnreachable = errors.New("rpc: target unreachable")
	// ErrUnregistered: the opcode is not registered at the target.
	ErrUnregistered = errors.New("rpc: unregistered opcode")
	// ErrCanceled: the request was aborted. Matches context.Canceled.
	ErrCanceled = errors.New("rpc: canceled")
	// ErrNoReply: the target will not reply (a one-way RPC has no output).
	ErrNoReply = errors.New("rpc: no reply")
	// ErrHandler: the target's handler returned an error or panicked.
	ErrHandler = errors.New("rpc: handler error")
	// ErrMalformed: an input, output or RPC header could not be decoded.
	ErrMalformed = errors.New("rpc: malformed payload")
	// ErrBadTarget: the target has no context with the tag.
	ErrBadTarget = errors.New("rpc: bad target")
	// ErrTooLarge: an input or output exceeds MaxPayload.
	ErrTooLarge = errors.New("rpc: payload too large")
	// ErrExcluded: the target rank is excluded from the group: it was
	// removed (Group.Remove, Modify, a new membership from the group's
	// authority) or this instance's membership knows it is dead (SWIM).
	// Requests to it fail at once, and it is not dialled, until it is a
	// live member again.
	ErrExcluded = errors.New("rpc: rank excluded from group")
	// ErrShutdown: the context or instance is closed.
	ErrShutdown = errors.New("rpc: shut down")
	// ErrNotFound: the URI, rank or protocol asked for is not known.
	ErrNotFound = errors.New("rpc: not found")
	// ErrBusy: the target context's queue of requests waiting for its
	// progress is full.
	ErrBusy = errors.New("rpc: target busy")
	// ErrNoPerm: a bulk handle's permissions do not allow the transfer
	// (a PUT to a read-only handle, a GET from a write-only one).
	ErrNoPerm = errors.New("rpc: permission denied")
	// ErrWrongRank: the request reached an instance of another rank than
	// its destination (the group's URI for the rank is stale, or the
	// target was started with another rank). The target refuses it
	// without running a handler; the error's text names the rank it is.
	ErrWrongRank = errors.New("rpc: wrong rank")
	// ErrGroupVersion: the target checks group versions for the RPC
	// (CheckGroupVersion, collectives) and the origin's differs from its
	// own; retry once the group has been updated.
	ErrGroupVersion = errors.New("rpc: group version mismatch")

	// ErrExists: a protocol with that base and version is already
	// registered, or a rank is already a member.
	ErrExists = errors.New("rpc: already exists")
	// ErrInvalid: an argument is out of range (a reserved protocol base,
	// a tag beyond the maximum, a stale group version...).
	ErrInvalid = errors.New("rpc: invalid argument")
	// ErrAlreadyReplied: Reply or Fail was called twice for a request.
	ErrAlreadyReplied = errors.New("rpc: already replied")
	// ErrAutoProgress: Progress was called on a context whose progress
	// runs on its own goroutine.
	ErrAutoProgress = errors.New("rpc: context progresses automatically")
)

var codeErrs = [...]error{
	CodeOK:           nil,
	CodeTimedOut:     ErrTimedOut,
	CodeUnreachable:  ErrUnreachable,
	CodeUnregistered: ErrUnregistered,
	CodeCanceled:     ErrCanceled,
	CodeNoReply:      ErrNoReply,
	CodeHandler:      ErrHandler,
	CodeMalformed:    ErrMalformed,
	CodeBadTarget:    ErrBadTarget,
	CodeTooLarge:     ErrTooLarge,
	CodeExcluded:     ErrExcluded,
	CodeShutdown:     ErrShutdown,
	CodeNotFound:     ErrNotFound,
	CodeBusy:         ErrBusy,
	CodeNoPerm:       ErrNoPerm,
	CodeInvalid:      ErrInvalid,
	CodeWrongRank:    ErrWrongRank,
	CodeGroupVersion: ErrGroupVersion,
}

// Err returns the sentinel error of the code (nil for CodeOK and for codes
// this version does not know).
func (c Code) Err() error {
	if c >= 0 && int(c) < len(codeErrs) {
		return codeErrs[c]
	}
	return nil
}

// String returns the code's name.
func (c Code) String() string {
	if err := c.Err(); err != nil {
		return err.Error()[len("rpc: "):]
	}
	if c == CodeOK {
		return "ok"
	}
	return fmt.Sprintf("code %d", int32(c))
}

// Error is the error of a failed RPC. It says which code, which opcode and
// endpoint, whether the target reported it (Remote), and the target's
// message if any. It matches its code's sentinel with errors.Is.
//
// Its text is "rpc: CODE (opcode OP to RANK:TAG): DETAIL": the package
// prefix once, the opcode and endpoint of the request it is for (left
// out only when both are zero, as for errors of bulk transfers, which
// have no opcode), then the detail (Msg, then Err, each without a
// repeated "rpc: " prefix).
//
// One failure has one code: a target that is not (or no longer) a member
// or that this instance's membership knows dead: CodeExcluded; a target
// process that died, or whose address refuses connections, before the
// membership knows it: CodeUnreachable (its in-flight requests fail when
// the connection does, new ones when the dial is refused); a target that
// does not answer in time (stopped, overloaded, partitioned):
// CodeTimedOut.
type Error struct {
	Code     Code
	Opcode   Opcode
	Endpoint Endpoint
	// Remote is set when the target sent the code in its reply; otherwise
	// the origin decided (a timeout, an abort, an unreachable target).
	Remote bool
	// Msg is the detail: the target's error text, or the local cause.
	Msg string
	// Err is a local underlying cause, if any (a transport error...).
	Err error
}

func (e *Error) Error() string {
	s := "rpc: " + e.Code.String()
	if e.Opcode != 0 || e.Endpoint != (Endpoint{}) {
		s += fmt.Sprintf(" (opcode %v to %v)", e.Opcode, e.Endpoint)
	}
	if d := e.detail(); d != "" {
		s += ": " + d
	}
	return s
}

// detail is the error's text after its code, opcode and endpoint: Msg,
// then Err, without the "rpc: " prefixes or a repeat of the code's
// own text.
func (e *Error) detail() string {
	var parts []string
	if m := trimPrefixes(e.Msg, e.Code); m != "" {
		parts = append(parts, m)
	}
	if e.Err != nil {
		var s string
		if inner, ok := e.Err.(*Error); ok {
			s = inner.Code.String()
			if inner.Opcode != e.Opcode || inner.Endpoint != e.Endpoint {
				if inner.Opcode != 0 || inner.Endpoint != (Endpoint{}) {
					s += fmt.Sprintf(" (opcode %v to %v)", inner.Opcode, inner.Endpoint)
				}
			}
			if d := inner.detail(); d != "" {
				s += ": " + d
			}
		} else {
			s = trimPrefixes(e.Err.Error(), CodeOK)
		}
		if s != "" && (len(parts) == 0 || !strings.HasSuffix(parts[0], s)) {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}

// trimPrefixes removes leading "rpc: " prefixes from s, and the text of
// code's sentinel after them ("rpc: timed out: x" is "x" for a
// timeout).
func trimPrefixes(s string, code Code) string {
	for {
		t := strings.TrimPrefix(s, "rpc: ")
		if code != CodeOK {
			if name := code.String(); strings.HasPrefix(t, name) {
				rest := t[len(name):]
				switch {
				case rest == "":
					t = ""
				case strings.HasPrefix(rest, ": "):
					t = rest[2:]
				case strings.HasPrefix(rest, " (opcode "):
					// Our own format: drop the repeated code, keep the rest.
					if i := strings.Index(rest, "): "); i >= 0 {
						t = rest[i+3:]
					} else if strings.HasSuffix(rest, ")") {
						t = ""
					}
				}
			}
		}
		if t == s {
			return s
		}
		s = t
	}
}

// errText is the text a target sends with an error reply: err's detail
// without the package prefix and without the code's own name (the
// origin's *Error names the code, opcode and endpoint itself).
func errText(err error, code Code) string {
	if err == nil {
		return "nil error"
	}
	if e, ok := err.(*Error); ok {
		return e.detail()
	}
	return trimPrefixes(err.Error(), code)
}

// Is reports whether target is the code's sentinel; a timeout also
// matches context.DeadlineExceeded and an abort context.Canceled.
func (e *Error) Is(target error) bool {
	if target == nil {
		return false
	}
	if s := e.Code.Err(); s != nil && target == s {
		return true
	}
	switch e.Code {
	case CodeTimedOut:
		return target == context.DeadlineExceeded
	case CodeCanceled:
		return target == context.Canceled
	}
	return false
}

// Unwrap returns the underlying local cause.
func (e *Error) Unwrap() error { return e.Err }

// Timeout reports whether the error is a timeout (net.Error).
func (e *Error) Timeout() bool { return e.Code == CodeTimedOut }

// Temporary reports whether retrying may help (net.Error): timeouts,
// unreachable and busy targets.
func (e *Error) Temporary() bool {
	return e.Code == CodeTimedOut || e.Code == CodeUnreachable || e.Code == CodeBusy
}

// CodeOf returns the code of err: its *Error's code, the code whose
// sentinel it wraps, CodeOK for nil, and CodeHandler otherwise.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	for c := Code(1); int(c) < len(codeErrs); c++ {
		if errors.Is(err, codeErrs[c]) {
			return c
		}
	}
	return CodeHandler
}

// maxErrText bounds the error text a reply carries.
const maxErrText = 1024
