package ceph

import (
	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Message types and header versions of MAuth and MAuthReply
// (CEPH_MSG_AUTH, CEPH_MSG_AUTH_REPLY in src/include/ceph_fs.h). Wire
// constants; append only.
const (
	MsgAuth      uint16 = 17 // CEPH_MSG_AUTH: MAuth
	MsgAuthReply uint16 = 18 // CEPH_MSG_AUTH_REPLY: MAuthReply

	authVersion      = 1 // MAuth: PaxosServiceMessage{CEPH_MSG_AUTH, 0}
	authReplyVersion = 1 // MAuthReply: Message(CEPH_MSG_AUTH_REPLY)
)

// Auth is MAuth (CEPH_MSG_AUTH): an authentication request to a mon,
// the way msgr1 clients log in and every client renews its tickets and
// asks for service tickets over an established mon session. Front: the
// Paxos prefix, le32 protocol, the auth payload as a bufferlist, le32
// monmap epoch (absent from old senders; decoded as 0).
//
// Protocol 0 is the msgr1 negotiation, whose payload lists the methods
// the client supports; otherwise it is the method (2 = cephx) and the
// payload is that method's request (package auth/cephx builds them).
type Auth struct {
	PaxosVersion uint64 // PaxosServiceMessage version; 0 from clients
	Protocol     uint32 // 0 (negotiation) or the auth method
	Payload      []byte // the method's request
	MonmapEpoch  uint32 // the client's monmap epoch
}

// Marshal returns the message (header version 1, compat 0, priority
// msg.PrioDefault).
func (m *Auth) Marshal() *msg.Message {
	b := make([]byte, 0, paxosPrefixLen+4+4+len(m.Payload)+4)
	b = appendPaxos(b, m.PaxosVersion)
	b = denc.AppendU32(b, m.Protocol)
	b = denc.AppendBytes(b, m.Payload)
	b = denc.AppendU32(b, m.MonmapEpoch)
	return newMessage(MsgAuth, authVersion, requestPriority, b)
}

// Unmarshal decodes in, which must be an MAuth. Payload aliases in's
// front when the front is a single buffer.
func (m *Auth) Unmarshal(in *msg.Message) error {
	if err := check(in, MsgAuth); err != nil {
		return err
	}
	d := denc.NewDecoder(in.Front.Bytes())
	var v Auth
	v.PaxosVersion = decodePaxos(d)
	v.Protocol = d.U32()
	v.Payload = d.Bytes()
	if d.Err() == nil && d.Len() > 0 {
		v.MonmapEpoch = d.U32()
	}
	if err := d.Err(); err != nil {
		return &DecodeError{Type: MsgAuth, Err: err}
	}
	if v.Payload == nil {
		v.Payload = []byte{}
	}
	*m = v
	return nil
}

// AuthReply is MAuthReply (CEPH_MSG_AUTH_REPLY), a mon's answer to an
// MAuth. Front: le32 protocol, le32 result (0 or a negative errno), le64
// global id, the result bufferlist (the method's reply), the result
// message string.
type AuthReply struct {
	Protocol  uint32 // the method answered with
	Result    int32  // 0 or a negative errno (Linux numbering)
	GlobalID  uint64 // the client's global id; 0 if meaningless
	ResultBL  []byte // the method's reply
	ResultMsg string // a human-readable status, usually empty
}

// Marshal returns the message (header version 1, compat 0, priority
// msg.PrioHigh as a mon sends it).
func (m *AuthReply) Marshal() *msg.Message {
	b := make([]byte, 0, 4+4+8+4+len(m.ResultBL)+4+len(m.ResultMsg))
	b = denc.AppendU32(b, m.Protocol)
	b = denc.AppendI32(b, m.Result)
	b = denc.AppendU64(b, m.GlobalID)
	b = denc.AppendBytes(b, m.ResultBL)
	b = denc.AppendString(b, m.ResultMsg)
	return newMessage(MsgAuthReply, authReplyVersion, replyPriority, b)
}

// Unmarshal decodes in, which must be an MAuthReply. ResultBL aliases
// in's front when the front is a single buffer.
func (m *AuthReply) Unmarshal(in *msg.Message) error {
	if err := check(in, MsgAuthReply); err != nil {
		return err
	}
	d := denc.NewDecoder(in.Front.Bytes())
	var v AuthReply
	v.Protocol = d.U32()
	v.Result = d.I32()
	v.GlobalID = d.U64()
	v.ResultBL = d.Bytes()
	v.ResultMsg = d.String()
	if err := d.Err(); err != nil {
		return &DecodeError{Type: MsgAuthReply, Err: err}
	}
	if v.ResultBL == nil {
		v.ResultBL = []byte{}
	}
	*m = v
	return nil
}
