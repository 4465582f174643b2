package ceph

import (
	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// MonGetMap is MMonGetMap (CEPH_MSG_MON_GET_MAP): a client asks the mon
// it is connected to for the current monmap. Its front is empty; the mon
// answers with a MonMap.
type MonGetMap struct{}

// Marshal returns the message (header version 1, compat 0, priority
// msg.PrioDefault).
func (m *MonGetMap) Marshal() *msg.Message {
	return newMessage(MsgMonGetMap, monGetMapVersion, requestPriority, nil)
}

// Unmarshal checks that in is an MMonGetMap.
func (m *MonGetMap) Unmarshal(in *msg.Message) error { return check(in, MsgMonGetMap) }

// MonMap is MMonMap (CEPH_MSG_MON_MAP): the monmap, encoded as a byte
// list in the front. Map holds the encoded monmap as the mon sent it;
// FSID and Epoch are decoded from its start (MonMap::encode: a versioned
// block whose first fields are the fsid and the epoch, struct version 3
// and up).
type MonMap struct {
	Map   []byte // the encoded monmap
	FSID  FSID   // the cluster's fsid
	Epoch uint32 // the monmap's epoch
}

// Marshal returns the message (header version 1, compat 0, priority
// msg.PrioHigh as a mon sends it) with Map as the monmap; FSID and Epoch
// are not encoded separately (they are Map's first fields).
func (m *MonMap) Marshal() *msg.Message {
	b := denc.AppendBytes(make([]byte, 0, 4+len(m.Map)), m.Map)
	return newMessage(MsgMonMap, monMapVersion, replyPriority, b)
}

// Unmarshal decodes in, which must be an MMonMap whose monmap is in the
// versioned form (struct version 3 or newer, as every Ceph since 0.80
// sends to a peer with the features ferry offers). Map aliases in's front
// when it is a single buffer.
func (m *MonMap) Unmarshal(in *msg.Message) error {
	if err := check(in, MsgMonMap); err != nil {
		return err
	}
	d := denc.NewDecoder(in.Front.Bytes())
	v := MonMap{Map: d.Bytes()}
	if err := d.Err(); err != nil {
		return &DecodeError{Type: MsgMonMap, Err: err}
	}
	md := denc.NewDecoder(v.Map)
	sv, body := md.Block(monMapMaxCompat)
	if md.Err() == nil && sv < 3 {
		md.Fail("monmap struct version", denc.ErrVersion)
	}
	v.FSID = DecodeFSID(&body)
	v.Epoch = body.U32()
	md.Absorb(&body)
	if err := md.Err(); err != nil {
		return &DecodeError{Type: MsgMonMap, Err: err}
	}
	*m = v
	return nil
}

// EncodeMonMapHead returns the start of an encoded monmap that MonMap
// decodes: a versioned block (struct version 9, compat 6, as Pacific
// writes it) holding the fsid, the epoch and rest (the remaining fields,
// which this package does not interpret). For tests and ferry's own
// servers.
func EncodeMonMapHead(fsid FSID, epoch uint32, rest []byte) []byte {
	b, start := denc.StartBlock(nil, 9, 6)
	b = AppendFSID(b, fsid)
	b = denc.AppendU32(b, epoch)
	b = append(b, rest...)
	return denc.EndBlock(b, start)
}
