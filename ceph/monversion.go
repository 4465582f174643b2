package ceph

import (
	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// MonGetVersion is MMonGetVersion (CEPH_MSG_MON_GET_VERSION): a client
// asks a mon for the latest version of a map. Front: le64 handle, string
// what.
type MonGetVersion struct {
	Handle uint64 // chosen by the client, echoed in the reply
	What   string // the map: "osdmap", "mdsmap", "monmap", "fsmap"...
}

// Marshal returns the message (header version 1, compat 0, priority
// msg.PrioDefault).
func (m *MonGetVersion) Marshal() *msg.Message {
	b := make([]byte, 0, 12+len(m.What))
	b = denc.AppendU64(b, m.Handle)
	b = denc.AppendString(b, m.What)
	return newMessage(MsgMonGetVersion, monGetVersionVersion, requestPriority, b)
}

// Unmarshal decodes in, which must be an MMonGetVersion.
func (m *MonGetVersion) Unmarshal(in *msg.Message) error {
	if err := check(in, MsgMonGetVersion); err != nil {
		return err
	}
	d := denc.NewDecoder(in.Front.Bytes())
	v := MonGetVersion{Handle: d.U64(), What: d.String()}
	if err := d.Err(); err != nil {
		return &DecodeError{Type: MsgMonGetVersion, Err: err}
	}
	*m = v
	return nil
}

// MonGetVersionReply is MMonGetVersionReply
// (CEPH_MSG_MON_GET_VERSION_REPLY). Front: le64 handle, le64 version and,
// from header version 2, le64 oldest_version.
type MonGetVersionReply struct {
	Handle        uint64 // the request's handle
	Version       uint64 // latest version of the map
	OldestVersion uint64 // oldest version the mon still has (0 before header version 2)
}

// Marshal returns the message (header version 2, compat 0, priority
// msg.PrioHigh as a mon sends it).
func (m *MonGetVersionReply) Marshal() *msg.Message {
	b := make([]byte, 0, 24)
	b = denc.AppendU64(b, m.Handle)
	b = denc.AppendU64(b, m.Version)
	b = denc.AppendU64(b, m.OldestVersion)
	return newMessage(MsgMonGetVersionReply, monGetVersionReplyVersion, replyPriority, b)
}

// Unmarshal decodes in, which must be an MMonGetVersionReply. As in Ceph,
// OldestVersion is read only when the header version is at least 2.
func (m *MonGetVersionReply) Unmarshal(in *msg.Message) error {
	if err := check(in, MsgMonGetVersionReply); err != nil {
		return err
	}
	d := denc.NewDecoder(in.Front.Bytes())
	v := MonGetVersionReply{Handle: d.U64(), Version: d.U64()}
	if in.Header.Version >= 2 {
		v.OldestVersion = d.U64()
	}
	if err := d.Err(); err != nil {
		return &DecodeError{Type: MsgMonGetVersionReply, Err: err}
	}
	*m = v
	return nil
}
