package ceph

import (
	"encoding/json"
	"fmt"

	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Ping is MPing (CEPH_MSG_PING). Ceph's MPing encodes nothing: a client's
// ping has an empty front. A mon answers a ping (Monitor::handle_ping) with
// an MPing whose front is one encoded string (le32 length, then the bytes)
// holding pretty-printed JSON {"health": ..., "mon_status": ...}; that is
// what `ceph ping mon.X` prints. Status is that JSON, or nil for an empty
// front.
//
// The data segment is left to the caller: ferry's serve echoes the
// request's data segment, and a Ceph mon ignores it.
type Ping struct {
	Status []byte
}

// Marshal returns the message: an empty front when Status is nil (a
// client's ping), the encoded Status string otherwise. The priority is a
// client's default, msg.PrioDefault; PingReply gives a mon's.
func (m *Ping) Marshal() *msg.Message {
	var front []byte
	if m.Status != nil {
		front = denc.AppendBytes(make([]byte, 0, 4+len(m.Status)), m.Status)
	}
	return newMessage(MsgPing, pingVersion, requestPriority, front)
}

// Unmarshal decodes in, which must be an MPing. Status aliases in's front
// when the front is a single buffer.
func (m *Ping) Unmarshal(in *msg.Message) error {
	if err := check(in, MsgPing); err != nil {
		return err
	}
	st, err := DecodePingStatus(in.Front.Bytes())
	if err != nil {
		return err
	}
	m.Status = st
	return nil
}

// PingReply returns the MPing a mon sends in answer to a ping: the front is
// statusJSON as an encoded string and the priority is a mon's,
// msg.PrioHigh.
func PingReply(statusJSON []byte) *msg.Message {
	if statusJSON == nil {
		statusJSON = []byte{}
	}
	m := (&Ping{Status: statusJSON}).Marshal()
	m.Header.Priority = replyPriority
	return m
}

// DecodePingStatus decodes an MPing front: nil for an empty front (a
// client's ping), otherwise the string a mon's reply carries. The result
// aliases front.
func DecodePingStatus(front []byte) ([]byte, error) {
	if len(front) == 0 {
		return nil, nil
	}
	d := denc.NewDecoder(front)
	st := d.Bytes()
	if err := d.Err(); err != nil {
		return nil, &DecodeError{Type: MsgPing, Err: err}
	}
	if st == nil {
		st = []byte{}
	}
	return st, nil
}

// PingStatus is the part of a mon's ping status that ferry reads and
// writes. The JSON a Ceph mon sends has many more fields; ParsePingStatus
// ignores them.
type PingStatus struct {
	Health    PingHealth    `json:"health"`
	MonStatus PingMonStatus `json:"mon_status"`
}

// PingHealth is the "health" object (for example {"status": "HEALTH_OK"}).
type PingHealth struct {
	Status string `json:"status"`
}

// PingMonStatus is the part of the "mon_status" object that ferry uses.
type PingMonStatus struct {
	Name   string        `json:"name"`
	Rank   int           `json:"rank"`
	State  string        `json:"state"` // "leader", "peon", "probing"...
	Quorum []int         `json:"quorum"`
	Monmap PingMonmapRef `json:"monmap"`
}

// PingMonmapRef is the part of "mon_status.monmap" that ferry uses.
type PingMonmapRef struct {
	Epoch int    `json:"epoch"`
	FSID  string `json:"fsid"`
}

// ParsePingStatus parses the JSON of a mon's ping reply.
func ParsePingStatus(statusJSON []byte) (*PingStatus, error) {
	var s PingStatus
	if err := json.Unmarshal(statusJSON, &s); err != nil {
		return nil, fmt.Errorf("ceph: ping status: %w", err)
	}
	return &s, nil
}
