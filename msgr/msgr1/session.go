package msgr1

import (
	"bytes"
	"encoding/binary"

	"github.com/ferrymsg/ferry/msg"
)

// Session rules of msgr1: how a server answers a connect message while
// it holds a connection to the same peer (Ceph's
// ProtocolV1::handle_connect_message_2). They are a pure function of the
// existing session's state and the request, so every branch is tested
// from a table.

// SessionState is what a server knows of an existing connection to the
// peer that is now connecting.
type SessionState struct {
	Exists     bool // there is a connection to this peer
	Closed     bool // it has been closed for good
	Replacing  bool // it is in the middle of taking over another socket
	Lossy      bool // its policy is lossy
	Server     bool // its policy has server set (we never connect to the peer)
	ResetCheck bool // our policy towards this peer detects resets
	Open       bool // it is open or in standby (an established session)
	PeerGlobal uint32
	ConnectSeq uint32
	PeerAddr   msg.EntityAddr // the peer's legacy address
	MyAddr     msg.EntityAddr // ours
}

// ConnectAction is how a server answers a connect message.
type ConnectAction uint8

// Connect actions.
const (
	ConnectOpen         ConnectAction = iota + 1 // a new session: Accept with InSeq 0 (SEQ with 0, as a mon answers)
	ConnectReplace                               // this socket takes the existing session over: Accept with its in_seq
	ConnectReplaceReset                          // the peer reset its session: drop ours (a remote reset if ResetCheck), Accept{Reset: true}
	ConnectRetrySession                          // RetrySession(value)
	ConnectRetryGlobal                           // RetryGlobalSeq(value)
	ConnectReset                                 // Reset: RESETSESSION
	ConnectWait                                  // Wait: our own connection wins the race
)

func (a ConnectAction) String() string {
	return [...]string{"?", "open", "replace", "replace-reset", "retry-session", "retry-global", "reset", "wait"}[min(int(a), 7)]
}

// DecideConnect is Ceph's accept decision for connect c given the
// existing session ex. value is the connect_seq for ConnectRetrySession
// and the global_seq for ConnectRetryGlobal.
func DecideConnect(ex SessionState, c *Connect) (a ConnectAction, value uint32) {
	if !ex.Exists || ex.Closed {
		if c.ConnectSeq > 0 {
			// We reset, and the peer thinks it resumes a session.
			return ConnectReset, 0
		}
		return ConnectOpen, 0
	}
	switch {
	case ex.Replacing:
		return ConnectRetryGlobal, ex.PeerGlobal
	case c.GlobalSeq < ex.PeerGlobal:
		return ConnectRetryGlobal, ex.PeerGlobal
	case ex.Lossy:
		return ConnectReplaceReset, 0
	case c.ConnectSeq == 0 && ex.ConnectSeq > 0:
		return ConnectReplaceReset, 0
	case c.ConnectSeq < ex.ConnectSeq:
		// An old attempt, or it never got our READY.
		return ConnectRetrySession, ex.ConnectSeq + 1
	case c.ConnectSeq == ex.ConnectSeq:
		if ex.Open {
			if ex.ResetCheck && ex.ConnectSeq == 0 {
				return ConnectReplace, 0
			}
			return ConnectRetrySession, ex.ConnectSeq + 1
		}
		// A connection race: the lower address, or the server side of
		// the policy, gives way to the peer's connection.
		if legacyLess(ex.PeerAddr, ex.MyAddr) || ex.Server {
			return ConnectReplace, 0
		}
		return ConnectWait, 0
	}
	// c.ConnectSeq > ex.ConnectSeq: a reconnect.
	if ex.ResetCheck && ex.ConnectSeq == 0 {
		return ConnectReset, 0
	}
	return ConnectReplace, 0
}

// legacyLess orders addresses as Ceph's entity_addr_t operator< does: a
// memcmp of the in-memory struct, that is of the little-endian type and
// nonce, the host-order (little-endian) family, the network-order port,
// then the IP.
func legacyLess(a, b msg.EntityAddr) bool {
	return bytes.Compare(addrKey(a), addrKey(b)) < 0
}

func addrKey(a msg.EntityAddr) []byte {
	k := make([]byte, 0, 32)
	k = binary.LittleEndian.AppendUint32(k, uint32(msg.AddrLegacy))
	k = binary.LittleEndian.AppendUint32(k, a.Nonce)
	ip := a.IP.Addr()
	switch {
	case !ip.IsValid():
		return binary.LittleEndian.AppendUint16(k, 0)
	case ip.Is4():
		k = binary.LittleEndian.AppendUint16(k, 2)
		k = binary.BigEndian.AppendUint16(k, a.IP.Port())
		v4 := ip.As4()
		return append(k, v4[:]...)
	}
	k = binary.LittleEndian.AppendUint16(k, 10)
	k = binary.BigEndian.AppendUint16(k, a.IP.Port())
	k = append(k, 0, 0, 0, 0) // flowinfo
	v6 := ip.As16()
	return append(k, v6[:]...)
}
