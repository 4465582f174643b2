package msgr2

import "github.com/ferrymsg/ferry/msg"

// Session rules of msgr2: how a server answers a client that identifies
// itself or asks to resume a session while the server holds a connection
// to the same peer. They are pure functions of the existing session's
// state and the request, so every branch is tested from a table.

// SessionState is what a server knows of an existing connection to the
// peer that is now connecting.
type SessionState struct {
	Exists       bool   // there is a connection to this peer
	Closed       bool   // it has been closed for good
	Replacing    bool   // it is in the middle of taking over another socket
	Lossy        bool   // its policy is lossy
	Server       bool   // our policy towards this peer has server set (we never connect to it)
	ResetCheck   bool   // our policy towards this peer detects resets
	Open         bool   // it is ready or in standby (an established session)
	Outgoing     bool   // we opened it: we are the client of that session
	Connecting   bool   // we are reconnecting it ourselves right now
	ClientCookie uint64 // the peer's cookie for the session
	ServerCookie uint64 // our cookie for it (0: never established)
	PeerGlobal   uint64 // the peer's global_seq seen on it
	ConnectSeq   uint64 // the session's connect_seq
	PeerAddr     msg.EntityAddr
	MyAddr       msg.EntityAddr
}

// ReconnectAction is how a server answers SESSION_RECONNECT.
type ReconnectAction uint8

// Reconnect actions.
const (
	ReconnectResetFull   ReconnectAction = iota + 1 // SESSION_RESET(full): no such session
	ReconnectReset                                  // SESSION_RESET(not full): start over, keep nothing
	ReconnectRetryGlobal                            // SESSION_RETRY_GLOBAL(existing peer global_seq)
	ReconnectRetry                                  // SESSION_RETRY(existing connect_seq)
	ReconnectWait                                   // WAIT: our own connection wins the race
	ReconnectReuse                                  // resume: the session takes over this socket
)

func (a ReconnectAction) String() string {
	return [...]string{"?", "reset-full", "reset", "retry-global", "retry", "wait", "reuse"}[min(int(a), 6)]
}

// DecideReconnect is Ceph's ProtocolV2::handle_reconnect decision for a
// SESSION_RECONNECT r given the existing session ex.
func DecideReconnect(ex SessionState, r *SessionReconnect) ReconnectAction {
	switch {
	case !ex.Exists || ex.Closed:
		return ReconnectResetFull
	case ex.Replacing:
		return ReconnectRetryGlobal
	case ex.ClientCookie != r.ClientCookie:
		// The client restarted its session: ours is stale.
		if ex.ResetCheck {
			return ReconnectResetFull
		}
		return ReconnectReset
	case ex.ServerCookie == 0:
		// We never completed a session with it.
		return ReconnectReset
	case ex.PeerGlobal > r.GlobalSeq:
		return ReconnectRetryGlobal
	case ex.ConnectSeq > r.ConnectSeq:
		return ReconnectRetry
	case ex.ConnectSeq == r.ConnectSeq && ex.Connecting:
		// Both sides reconnected at once: the higher address wins unless
		// we are the server side of the policy.
		if addrGreater(ex.PeerAddr, ex.MyAddr) && !ex.Server {
			return ReconnectWait
		}
	}
	return ReconnectReuse
}

// IdentAction is how a server answers CLIENT_IDENT when a connection to
// the same peer exists.
type IdentAction uint8

// Ident actions.
const (
	IdentNew     IdentAction = iota + 1 // no existing session: a fresh one
	IdentClose                          // the existing connection is newer: drop this one
	IdentReplace                        // close the existing connection; this one starts a fresh session
	IdentReset                          // the peer restarted: its old session is gone (remote reset if ResetCheck); fresh session on this socket
	IdentReuse                          // the existing session continues on this socket
	IdentWait                           // connection race that our own connection wins: WAIT
)

func (a IdentAction) String() string {
	return [...]string{"?", "new", "close", "replace", "reset", "reuse", "wait"}[min(int(a), 6)]
}

// DecideIdent is Ceph's ProtocolV2::handle_existing_connection decision
// for a CLIENT_IDENT ci given the existing session ex.
func DecideIdent(ex SessionState, ci *ClientIdent) IdentAction {
	switch {
	case !ex.Exists || ex.Closed:
		return IdentNew
	case ex.PeerGlobal > ci.GlobalSeq:
		return IdentClose
	case ex.Lossy:
		return IdentReplace
	case ex.ClientCookie != 0 && ex.ClientCookie != ci.ClientCookie && ex.ServerCookie != 0:
		return IdentReset
	case ex.ClientCookie == ci.ClientCookie:
		return IdentReuse
	case ex.Open:
		return IdentReuse
	}
	// Both sides are connecting to each other: the lower address, or the
	// server side of the policy, gives way to the peer's connection.
	if addrLess(ex.PeerAddr, ex.MyAddr) || ex.Server {
		return IdentReuse
	}
	return IdentWait
}

func addrGreater(a, b msg.EntityAddr) bool { return addrLess(b, a) }

// addrLess orders addresses by IP, port, then nonce (Ceph compares the
// encoded sockaddr and nonce).
func addrLess(a, b msg.EntityAddr) bool {
	if c := a.IP.Addr().Compare(b.IP.Addr()); c != 0 {
		return c < 0
	}
	if a.IP.Port() != b.IP.Port() {
		return a.IP.Port() < b.IP.Port()
	}
	return a.Nonce < b.Nonce
}
