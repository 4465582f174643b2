package ceph

import (
	"fmt"
	"slices"
	"strings"

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

// MonInfo is one mon of a monmap (Ceph's mon_info_t).
type MonInfo struct {
	Name     string      // the mon's name ("a" for mon.a)
	Addrs    msg.AddrVec // its public addresses
	Priority uint16      // lower is preferred when hunting (struct version 2 and up)
	Weight   uint16      // among equal priorities, the share of hunts (struct version 4 and up)
}

// MonMapInfo is a decoded monmap: the cluster's fsid, the epoch, and the
// mons in rank order (a mon's rank is its entity number: mon.a of rank 0
// is mon0 on the wire).
type MonMapInfo struct {
	FSID  FSID
	Epoch uint32
	Mons  []MonInfo
}

// ByName returns the mon called name and its rank.
func (mm *MonMapInfo) ByName(name string) (MonInfo, int, bool) {
	for i, m := range mm.Mons {
		if m.Name == name {
			return m, i, true
		}
	}
	return MonInfo{}, -1, false
}

// Names returns the mons' names in rank order.
func (mm *MonMapInfo) Names() []string {
	ns := make([]string, len(mm.Mons))
	for i, m := range mm.Mons {
		ns[i] = m.Name
	}
	return ns
}

// Limits of DecodeMonMap, checked before anything is allocated.
const (
	// maxMons bounds the mons of a monmap (Ceph clusters run 3 to 7).
	maxMons = 256
	// minMonInfoLen is the smallest encoded map entry: a name (le32
	// length) and a mon_info_t block header.
	minMonInfoLen = 4 + 6
)

// DecodeMonMap decodes an encoded monmap (MonMap.Map) as MonMap::decode
// does for the versioned forms, struct versions 3 to 9 (Firefly to
// Pacific): fsid, epoch, the mons with their address vectors and
// priorities, and the ranks (derived, as Ceph's calc_legacy_ranks does,
// for struct versions before 6). A monmap that does not decode, lists
// more than 256 mons, or whose ranks do not name each of its mons once gives a
// *DecodeError (ErrMalformed).
func DecodeMonMap(b []byte) (*MonMapInfo, error) {
	fail := func(err error) (*MonMapInfo, error) {
		return nil, &DecodeError{Type: MsgMonMap, Err: err}
	}
	md := denc.NewDecoder(b)
	sv, body := md.Block(monMapMaxCompat)
	if md.Err() == nil && sv < 3 {
		md.Fail("monmap struct version", denc.ErrVersion)
	}
	if err := md.Err(); err != nil {
		return fail(err)
	}
	d := &body
	mm := &MonMapInfo{FSID: DecodeFSID(d), Epoch: d.U32()}
	var legacy map[string]msg.EntityAddr
	if sv < 6 {
		n := d.Count(4 + minAddrLen)
		if n > maxMons {
			d.Fail("monmap mon_addr count", denc.ErrTooLarge)
		}
		legacy = make(map[string]msg.EntityAddr, n)
		for i := 0; i < n && d.Err() == nil; i++ {
			name := d.String()
			legacy[name] = msg.DecodeEntityAddr(d)
		}
	}
	d.Skip(8 + 8) // last_changed, created (utime_t)
	if sv >= 4 {
		for range 2 { // persistent_features, optional_features (mon_feature_t)
			_, f := d.Block(1)
			d.Absorb(&f)
		}
	}
	byName := map[string]MonInfo{}
	if sv >= 5 {
		n := d.Count(minMonInfoLen)
		if n > maxMons {
			d.Fail("monmap mon_info count", denc.ErrTooLarge)
		}
		for i := 0; i < n && d.Err() == nil; i++ {
			key := d.String()
			iv, id := d.Block(5)
			mi := MonInfo{Name: id.String(), Addrs: msg.DecodeAddrVec(&id)}
			if iv >= 2 {
				mi.Priority = id.U16()
			}
			if iv >= 4 {
				mi.Weight = id.U16()
			}
			d.Absorb(&id)
			if d.Err() == nil && mi.Name != key {
				d.Fail("monmap mon_info name", denc.ErrMalformed)
			}
			byName[key] = mi
		}
	} else {
		for name, a := range legacy {
			byName[name] = MonInfo{Name: name, Addrs: msg.AddrVec{a}}
		}
	}
	var ranks []string
	if sv >= 6 {
		ranks = d.Strings()
	} else {
		ranks = legacyRanks(byName)
	}
	md.Absorb(d)
	if err := md.Err(); err != nil {
		return fail(err)
	}
	if len(ranks) != len(byName) {
		return fail(fmt.Errorf("%d ranks for %d mons: %w", len(ranks), len(byName), denc.ErrMalformed))
	}
	mm.Mons = make([]MonInfo, 0, len(ranks))
	for _, name := range ranks {
		mi, ok := byName[name]
		if !ok {
			return fail(fmt.Errorf("rank of unknown or repeated mon %q: %w", name, denc.ErrMalformed))
		}
		delete(byName, name)
		mm.Mons = append(mm.Mons, mi)
	}
	return mm, nil
}

// minAddrLen is the smallest encoded entity_addr_t (marker, block header,
// type, nonce, sockaddr length).
const minAddrLen = 1 + 6 + 12

// legacyRanks orders mons as Ceph's calc_legacy_ranks does for monmaps
// without ranks: by the first address (legacy or front), then by name.
func legacyRanks(mons map[string]MonInfo) []string {
	names := make([]string, 0, len(mons))
	for n := range mons {
		names = append(names, n)
	}
	first := func(m MonInfo) msg.EntityAddr {
		if a, ok := m.Addrs.Legacy(); ok {
			return a
		}
		if len(m.Addrs) > 0 {
			return m.Addrs[0]
		}
		return msg.EntityAddr{}
	}
	slices.SortFunc(names, func(x, y string) int {
		ax, ay := first(mons[x]), first(mons[y])
		if c := ax.IP.Compare(ay.IP); c != 0 {
			return c
		}
		return strings.Compare(x, y)
	})
	return names
}

// EncodeMonMap encodes a monmap as Pacific does for a peer with every
// feature (ENCODE_START(9, 6): mon_info_t version 5, the ranks in the
// order of mons, min_mon_release 16, no removed ranks, the classic
// election strategy, stretch mode off). For ferry's own servers and
// tests; DecodeMonMap reads it back.
func EncodeMonMap(fsid FSID, epoch uint32, mons []MonInfo) []byte {
	b, start := denc.StartBlock(nil, 9, 6)
	b = AppendFSID(b, fsid)
	b = denc.AppendU32(b, epoch)
	b = append(b, make([]byte, 16)...) // last_changed, created
	for range 2 {
		var fs int
		b, fs = denc.StartBlock(b, 1, 1)
		b = denc.AppendU64(b, 0)
		b = denc.EndBlock(b, fs)
	}
	sorted := slices.Clone(mons)
	slices.SortFunc(sorted, func(x, y MonInfo) int { return strings.Compare(x.Name, y.Name) })
	b = denc.AppendU32(b, uint32(len(sorted)))
	for _, m := range sorted {
		b = denc.AppendString(b, m.Name)
		var is int
		b, is = denc.StartBlock(b, 5, 1)
		b = denc.AppendString(b, m.Name)
		b = msg.AppendAddrVec(b, m.Addrs, msg.FeaturesAll)
		b = denc.AppendU16(b, m.Priority)
		b = denc.AppendU16(b, m.Weight)
		b = denc.AppendU32(b, 0) // crush_loc
		b = denc.EndBlock(b, is)
	}
	names := make([]string, len(mons))
	for i, m := range mons {
		names[i] = m.Name
	}
	b = denc.AppendStrings(b, names)
	b = append(b, 16)            // min_mon_release: pacific
	b = denc.AppendU32(b, 0)     // removed_ranks
	b = append(b, 1)             // strategy: classic
	b = denc.AppendU32(b, 0)     // disallowed_leaders
	b = append(b, 0)             // stretch_mode_enabled
	b = denc.AppendString(b, "") // tiebreaker_mon
	b = denc.AppendU32(b, 0)     // stretch_marked_down_mons
	return denc.EndBlock(b, start)
}
