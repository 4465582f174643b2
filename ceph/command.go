package ceph

import (
	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Command is MCommand (MSG_COMMAND): a command sent to a daemon other
// than a mon, as `ceph tell osd.N …` sends it to the OSD. Front: the
// 16-byte fsid, then a vector<string> holding the command as JSON (e.g.
// `{"prefix": "version"}`). The data segment carries the command's input
// (`ceph tell … -i FILE`).
//
// The daemon answers with a CommandReply carrying the same header tid.
type Command struct {
	Tid   uint64   // header tid; the reply echoes it
	FSID  FSID     // the cluster's fsid
	Cmd   []string // the command, JSON
	Input []byte   // data segment (the command's input), may be nil
}

// Marshal returns the message (header version 1, compat 0, priority
// msg.PrioDefault). Input, if any, becomes the data segment without being
// copied.
func (m *Command) Marshal() *msg.Message {
	n := len(m.FSID) + 4
	for _, s := range m.Cmd {
		n += 4 + len(s)
	}
	b := make([]byte, 0, n)
	b = AppendFSID(b, m.FSID)
	b = denc.AppendStrings(b, m.Cmd)
	out := newMessage(MsgCommand, commandVersion, requestPriority, b)
	out.Header.Tid = m.Tid
	if len(m.Input) > 0 {
		out.Data = msg.Buffers{m.Input}
	}
	return out
}

// Unmarshal decodes in, which must be an MCommand. Input aliases in's
// data segment when it is a single buffer.
func (m *Command) Unmarshal(in *msg.Message) error {
	if err := check(in, MsgCommand); err != nil {
		return err
	}
	d := denc.NewDecoder(in.Front.Bytes())
	v := Command{Tid: in.Header.Tid}
	v.FSID = DecodeFSID(d)
	v.Cmd = d.Strings()
	if err := d.Err(); err != nil {
		return &DecodeError{Type: MsgCommand, Err: err}
	}
	v.Input = in.Data.Bytes()
	*m = v
	return nil
}

// CommandReply is MCommandReply (MSG_COMMAND_REPLY), a daemon's answer to
// an MCommand. Front: le32 r (errorcode32_t: 0 or a negative errno, Linux
// numbering), then string rs, the status string. The output (what
// `ceph tell` prints on stdout) is the data segment.
type CommandReply struct {
	Tid    uint64 // header tid, the command's
	R      int32  // 0 or a negative errno
	RS     string // status string, printed on stderr by `ceph tell`
	Output []byte // data segment, may be nil
}

// Marshal returns the message (header version 1, compat 0, priority
// msg.PrioDefault, as an OSD sends it). Output, if any, becomes the data
// segment without being copied.
func (m *CommandReply) Marshal() *msg.Message {
	b := make([]byte, 0, 8+len(m.RS))
	b = denc.AppendI32(b, m.R)
	b = denc.AppendString(b, m.RS)
	out := newMessage(MsgCommandReply, commandReplyVersion, requestPriority, b)
	out.Header.Tid = m.Tid
	if len(m.Output) > 0 {
		out.Data = msg.Buffers{m.Output}
	}
	return out
}

// Unmarshal decodes in, which must be an MCommandReply. Output aliases
// in's data segment when it is a single buffer.
func (m *CommandReply) Unmarshal(in *msg.Message) error {
	if err := check(in, MsgCommandReply); err != nil {
		return err
	}
	d := denc.NewDecoder(in.Front.Bytes())
	v := CommandReply{Tid: in.Header.Tid}
	v.R = d.I32()
	v.RS = d.String()
	if err := d.Err(); err != nil {
		return &DecodeError{Type: MsgCommandReply, Err: err}
	}
	v.Output = in.Data.Bytes()
	*m = v
	return nil
}
