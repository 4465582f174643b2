package ceph

import (
	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Paxos prefix of a PaxosServiceMessage (PaxosServiceMessage::paxos_encode):
// le64 version, le16 deprecated_session_mon, le64
// deprecated_session_mon_tid. Senders other than mons put -1 and 0 in the
// deprecated fields.
const (
	paxosPrefixLen            = 8 + 2 + 8
	paxosSessionMon    uint16 = 0xffff // (__s16)-1
	paxosSessionMonTid uint64 = 0
)

func appendPaxos(b []byte, version uint64) []byte {
	b = denc.AppendU64(b, version)
	b = denc.AppendU16(b, paxosSessionMon)
	return denc.AppendU64(b, paxosSessionMonTid)
}

// decodePaxos reads the prefix and returns its version; the deprecated
// session fields are read and ignored, as Ceph ignores them.
func decodePaxos(d *denc.Decoder) uint64 {
	v := d.U64()
	d.U16()
	d.U64()
	return v
}

// MonCommand is MMonCommand (MSG_MON_COMMAND): a command for the mons, as
// `ceph <command>` sends it. Front: the Paxos prefix, the 16-byte fsid and
// a vector<string> holding the command as JSON (usually one element such
// as `{"prefix": "mon stat", "format": "json"}`). The data segment carries
// the command's input (`ceph -i FILE`).
//
// A mon answers EPERM unless FSID is its cluster's. The reply carries the
// same header tid.
type MonCommand struct {
	Tid          uint64   // header tid; the ack echoes it
	PaxosVersion uint64   // PaxosServiceMessage version; 0 from clients
	FSID         FSID     // the cluster's fsid
	Cmd          []string // the command, JSON
	Input        []byte   // data segment (the command's input), may be nil
}

// Marshal returns the message (header version 1, compat 0, priority
// msg.PrioDefault). Input, if any, becomes the data segment without being
// copied.
func (m *MonCommand) Marshal() *msg.Message {
	n := paxosPrefixLen + len(m.FSID) + 4
	for _, s := range m.Cmd {
		n += 4 + len(s)
	}
	b := make([]byte, 0, n)
	b = appendPaxos(b, m.PaxosVersion)
	b = AppendFSID(b, m.FSID)
	b = denc.AppendStrings(b, m.Cmd)
	out := newMessage(MsgMonCommand, monCommandVersion, requestPriority, b)
	out.Header.Tid = m.Tid
	if len(m.Input) > 0 {
		out.Data = msg.Buffers{m.Input}
	}
	return out
}

// Unmarshal decodes in, which must be an MMonCommand. Input aliases in's
// data segment when it is a single buffer.
func (m *MonCommand) Unmarshal(in *msg.Message) error {
	if err := check(in, MsgMonCommand); err != nil {
		return err
	}
	d := denc.NewDecoder(in.Front.Bytes())
	v := MonCommand{Tid: in.Header.Tid}
	v.PaxosVersion = decodePaxos(d)
	v.FSID = DecodeFSID(d)
	v.Cmd = d.Strings()
	if err := d.Err(); err != nil {
		return &DecodeError{Type: MsgMonCommand, Err: err}
	}
	v.Input = in.Data.Bytes()
	*m = v
	return nil
}

// MonCommandAck is MMonCommandAck (MSG_MON_COMMAND_ACK), a mon's answer to
// an MMonCommand. Front: the Paxos prefix, le32 r, string rs, and the
// command's vector<string>. The output (what `ceph` prints) is the data
// segment.
type MonCommandAck struct {
	Tid          uint64   // header tid, the command's
	PaxosVersion uint64   // the mon's Paxos version for the reply
	R            int32    // 0 or a negative errno (Linux numbering)
	RS           string   // status string, printed on stderr by `ceph`
	Cmd          []string // the command answered
	Output       []byte   // data segment, may be nil
}

// Marshal returns the message (header version 1, compat 0, priority
// msg.PrioHigh as a mon sends it). Output, if any, becomes the data
// segment without being copied.
func (m *MonCommandAck) Marshal() *msg.Message {
	n := paxosPrefixLen + 4 + 4 + len(m.RS) + 4
	for _, s := range m.Cmd {
		n += 4 + len(s)
	}
	b := make([]byte, 0, n)
	b = appendPaxos(b, m.PaxosVersion)
	b = denc.AppendI32(b, m.R)
	b = denc.AppendString(b, m.RS)
	b = denc.AppendStrings(b, m.Cmd)
	out := newMessage(MsgMonCommandAck, monCommandAckVersion, replyPriority, b)
	out.Header.Tid = m.Tid
	if len(m.Output) > 0 {
		out.Data = msg.Buffers{m.Output}
	}
	return out
}

// Unmarshal decodes in, which must be an MMonCommandAck. Output aliases
// in's data segment when it is a single buffer.
func (m *MonCommandAck) Unmarshal(in *msg.Message) error {
	if err := check(in, MsgMonCommandAck); err != nil {
		return err
	}
	d := denc.NewDecoder(in.Front.Bytes())
	v := MonCommandAck{Tid: in.Header.Tid}
	v.PaxosVersion = decodePaxos(d)
	v.R = d.I32()
	v.RS = d.String()
	v.Cmd = d.Strings()
	if err := d.Err(); err != nil {
		return &DecodeError{Type: MsgMonCommandAck, Err: err}
	}
	v.Output = in.Data.Bytes()
	*m = v
	return nil
}
