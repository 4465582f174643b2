package msgr

import "errors"

// Errors returned by the messenger. Protocol errors from a peer are
// *msgr2.Error values; use errors.Is with the msgr2 sentinels for those.
var (
	// ErrClosed: the connection or messenger is closed.
	ErrClosed = errors.New("msgr: connection closed")
	// ErrShutdown: the messenger has been shut down.
	ErrShutdown = errors.New("msgr: messenger shut down")
	// ErrNotStarted: the operation needs Start first.
	ErrNotStarted = errors.New("msgr: messenger not started")
	// ErrAlreadyStarted: Bind or Start called after Start.
	ErrAlreadyStarted = errors.New("msgr: messenger already started")
	// ErrOutQueueFull: Send found the connection's out queue at its bound.
	ErrOutQueueFull = errors.New("msgr: out queue full")
	// ErrKeepaliveTimeout: the peer sent nothing for longer than the
	// keepalive timeout.
	ErrKeepaliveTimeout = errors.New("msgr: keepalive timeout")
	// ErrHandshakeTimeout: the handshake did not finish in time.
	ErrHandshakeTimeout = errors.New("msgr: handshake timeout")
	// ErrMarkedDown: the connection was marked down locally.
	ErrMarkedDown = errors.New("msgr: connection marked down")
	// ErrReplaced: a newer connection from the same peer replaced this one.
	ErrReplaced = errors.New("msgr: connection replaced")
	// ErrWait: the peer asked us to wait for its own connection (a race).
	ErrWait = errors.New("msgr: peer asked to wait")
	// ErrTooLarge: a message exceeds the configured limits.
	ErrTooLarge = errors.New("msgr: message too large")
	// ErrPeerFault: a layer above the messenger closed the connection
	// because the peer broke that layer's protocol (Conn.Fault).
	ErrPeerFault = errors.New("msgr: peer broke the protocol")
	// ErrIdentityChanged: an incoming connection authenticated as one
	// entity claimed (by CLIENT_IDENT or SESSION_RECONNECT) the session
	// of another; the connection is refused and the session kept.
	ErrIdentityChanged = errors.New("msgr: session belongs to another authenticated entity")
	// ErrInvalidConfig: New was given a Config it cannot run with; the
	// error says which fields.
	ErrInvalidConfig = errors.New("msgr: invalid config")
)

// faultError is the reason of a connection closed by Conn.Fault: it
// matches ErrPeerFault and wraps the layer's own reason.
type faultError struct{ reason error }

func (e *faultError) Error() string        { return ErrPeerFault.Error() + ": " + e.reason.Error() }
func (e *faultError) Is(target error) bool { return target == ErrPeerFault }
func (e *faultError) Unwrap() error        { return e.reason }
