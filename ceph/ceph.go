// Package ceph holds Ceph message types that ferry speaks for
// interoperability with Ceph daemons and tools: MPing, MMonGetVersion,
// MMonGetVersionReply, MMonCommand, MMonCommandAck, MMonGetMap, MMonMap,
// MCommand and MCommandReply. Each type encodes to
// and decodes from the segments of a *msg.Message exactly as Ceph 16.2
// (Pacific) does, including the header's type, version, compat version and
// the priority Ceph's messengers give it.
//
// Decoding follows Ceph's decode_payload: fields a newer encoder appended
// after the ones this package knows are ignored, and the header's compat
// version is not checked (Ceph does not check it for these messages).
// Decoding never panics; every failure is a *TypeError or a *DecodeError.
//
// Values decoded by Unmarshal may alias the message's buffers (byte
// slices such as Ping.Status and MonCommandAck.Output); copy them if the
// message is released.
package ceph

import (
	"errors"
	"fmt"

	"github.com/ferrymsg/ferry/msg"
)

// Message types (CEPH_MSG_* in src/include/ceph_fs.h, MSG_* in
// src/msg/Message.h). Wire constants; append only.
const (
	MsgPing               uint16 = 2  // CEPH_MSG_PING: MPing
	MsgMonMap             uint16 = 4  // CEPH_MSG_MON_MAP: MMonMap
	MsgMonGetMap          uint16 = 5  // CEPH_MSG_MON_GET_MAP: MMonGetMap
	MsgMonGetVersion      uint16 = 19 // CEPH_MSG_MON_GET_VERSION: MMonGetVersion
	MsgMonGetVersionReply uint16 = 20 // CEPH_MSG_MON_GET_VERSION_REPLY: MMonGetVersionReply
	MsgMonCommand         uint16 = 50 // MSG_MON_COMMAND: MMonCommand
	MsgMonCommandAck      uint16 = 51 // MSG_MON_COMMAND_ACK: MMonCommandAck
	MsgCommand            uint16 = 97 // MSG_COMMAND: MCommand
	MsgCommandReply       uint16 = 98 // MSG_COMMAND_REPLY: MCommandReply
)

// Header versions the messages' constructors set (HEAD_VERSION and
// COMPAT_VERSION; Message's defaults are 1 and 0). Wire constants; append
// only.
const (
	pingVersion               = 1 // MPing: Message(CEPH_MSG_PING)
	monGetVersionVersion      = 1 // MMonGetVersion: Message(CEPH_MSG_MON_GET_VERSION)
	monGetVersionReplyVersion = 2 // MMonGetVersionReply: HEAD_VERSION 2
	monCommandVersion         = 1 // MMonCommand: PaxosServiceMessage{MSG_MON_COMMAND, 0}
	monCommandAckVersion      = 1 // MMonCommandAck: PaxosServiceMessage{MSG_MON_COMMAND_ACK, v}
	commandVersion            = 1 // MCommand: Message{MSG_COMMAND}
	monMapVersion             = 1 // MMonMap: Message{CEPH_MSG_MON_MAP}
	monGetMapVersion          = 1 // MMonGetMap: Message{CEPH_MSG_MON_GET_MAP}
	// monMapMaxCompat is the newest monmap compat version decoded (Pacific
	// writes ENCODE_START(9, 6)).
	monMapMaxCompat     = 9
	commandReplyVersion = 1 // MCommandReply: Message{MSG_COMMAND_REPLY}
	compatVersion       = 0 // all of the above leave compat_version at 0
)

// Priorities the messages get on the wire. Ceph's constructors leave the
// priority at 0 and the sending connection replaces 0 with its messenger's
// default: CEPH_MSG_PRIO_DEFAULT for clients, CEPH_MSG_PRIO_HIGH for a mon
// (ceph_mon.cc calls set_default_send_priority(CEPH_MSG_PRIO_HIGH)). So
// requests carry msg.PrioDefault and a mon's replies msg.PrioHigh.
const (
	requestPriority = msg.PrioDefault
	replyPriority   = msg.PrioHigh
)

// Errors. Decoding errors are *TypeError or *DecodeError values, which
// match these sentinels with errors.Is.
var (
	// ErrWrongType means a message of another type was given to Unmarshal.
	ErrWrongType = errors.New("ceph: wrong message type")
	// ErrMalformed means a message's payload could not be decoded. The
	// *DecodeError that matches it also unwraps to the denc error
	// (denc.ErrTruncated, denc.ErrTooLarge...).
	ErrMalformed = errors.New("ceph: malformed message")
	// ErrNilMessage means Unmarshal was given a nil message.
	ErrNilMessage = errors.New("ceph: nil message")
	// ErrInvalidFSID means a string is not a UUID.
	ErrInvalidFSID = errors.New("ceph: invalid fsid")
)

// TypeError reports a message of the wrong type.
type TypeError struct {
	Want, Got uint16
}

// Error describes the mismatch.
func (e *TypeError) Error() string {
	return fmt.Sprintf("ceph: wrong message type %d (want %d, %s)", e.Got, e.Want, typeName(e.Want))
}

// Is reports whether target is ErrWrongType.
func (e *TypeError) Is(target error) bool { return target == ErrWrongType }

// DecodeError reports a payload that could not be decoded.
type DecodeError struct {
	Type uint16 // the message type being decoded
	Err  error  // the cause, usually a *denc.DecodeError
}

// Error describes the failure.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("ceph: malformed %s message: %v", typeName(e.Type), e.Err)
}

// Is reports whether target is ErrMalformed.
func (e *DecodeError) Is(target error) bool { return target == ErrMalformed }

// Unwrap returns the cause.
func (e *DecodeError) Unwrap() error { return e.Err }

// typeName returns Ceph's get_type_name for the types of this package.
func typeName(t uint16) string {
	switch t {
	case MsgPing:
		return "ping"
	case MsgMonGetVersion:
		return "mon_get_version"
	case MsgMonGetVersionReply:
		return "mon_get_version_reply"
	case MsgMonCommand, MsgMonCommandAck:
		return "mon_command"
	case MsgCommand:
		return "command"
	case MsgMonMap:
		return "mon_map"
	case MsgMonGetMap:
		return "mon_get_map"
	case MsgCommandReply:
		return "command_reply"
	case MsgAuth:
		return "auth"
	case MsgAuthReply:
		return "auth_reply"
	}
	return fmt.Sprintf("type%d", t)
}

// check returns an error unless in is a message of type want.
func check(in *msg.Message, want uint16) error {
	if in == nil {
		return ErrNilMessage
	}
	if in.Header.Type != want {
		return &TypeError{Want: want, Got: in.Header.Type}
	}
	return nil
}

// newMessage returns a message with the header fields Ceph sets.
func newMessage(typ uint16, version uint16, prio msg.Priority, front []byte) *msg.Message {
	m := &msg.Message{Header: msg.Header{
		Type:          typ,
		Priority:      prio,
		Version:       version,
		CompatVersion: compatVersion,
	}}
	if len(front) > 0 {
		m.Front = msg.Buffers{front}
	}
	return m
}
