package msg

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ferrymsg/ferry/denc"
)

// EntityType is the kind of daemon or client an entity is
// (CEPH_ENTITY_TYPE_*). The values are Ceph's wire constants; append only.
type EntityType uint8

// Entity types, as Ceph numbers them.
const (
	EntityMon    EntityType = 0x01
	EntityMDS    EntityType = 0x02
	EntityOSD    EntityType = 0x04
	EntityClient EntityType = 0x08
	EntityMgr    EntityType = 0x10
	EntityAuth   EntityType = 0x20
	EntityAny    EntityType = 0xFF
)

var entityTypeNames = [...]struct {
	t EntityType
	s string
}{
	{EntityMon, "mon"}, {EntityMDS, "mds"}, {EntityOSD, "osd"},
	{EntityClient, "client"}, {EntityMgr, "mgr"}, {EntityAuth, "auth"},
	{EntityAny, "any"},
}

// String returns Ceph's name for t ("osd", "client", ...), or "type<N>"
// for an unknown value.
func (t EntityType) String() string {
	for _, e := range entityTypeNames {
		if e.t == t {
			return e.s
		}
	}
	return "type" + strconv.Itoa(int(t))
}

// ParseEntityType parses the name that String returns.
func ParseEntityType(s string) (EntityType, error) {
	for _, e := range entityTypeNames {
		if e.s == s {
			return e.t, nil
		}
	}
	return 0, fmt.Errorf("msg: unknown entity type %q", s)
}

// NewID is the entity number that asks for one to be assigned
// (Ceph's entity_name_t::NEW, -1).
const NewID int64 = -1

// EntityName names an entity: a type and a number, such as osd.3 or
// client.4100 (ceph_entity_name / entity_name_t).
type EntityName struct {
	Type EntityType
	Num  int64
}

// String returns the name as Ceph prints it: "osd.3", or "client.?" for a
// name whose number is not yet assigned.
func (n EntityName) String() string {
	if n.Num < 0 {
		return n.Type.String() + ".?"
	}
	return n.Type.String() + "." + strconv.FormatInt(n.Num, 10)
}

// ParseEntityName parses "TYPE.NUM" (for example "mon.0"); "TYPE" alone or
// "TYPE.?" gives NewID. A mon's alphabetic id ("mon.a") also gives NewID:
// Ceph numbers mons by rank, not by name.
func ParseEntityName(s string) (EntityName, error) {
	ts, ns, _ := strings.Cut(s, ".")
	t, err := ParseEntityType(ts)
	if err != nil {
		return EntityName{}, err
	}
	if ns == "" || ns == "?" {
		return EntityName{Type: t, Num: NewID}, nil
	}
	num, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		if t == EntityMon {
			return EntityName{Type: t, Num: NewID}, nil
		}
		return EntityName{}, fmt.Errorf("msg: bad entity number in %q", s)
	}
	return EntityName{Type: t, Num: num}, nil
}

// AppendEntityName appends the 9-byte ceph_entity_name (u8 type, le64 num).
func AppendEntityName(b []byte, n EntityName) []byte {
	b = append(b, byte(n.Type))
	return denc.AppendI64(b, n.Num)
}

// DecodeEntityName reads a ceph_entity_name.
func DecodeEntityName(d *denc.Decoder) EntityName {
	t := EntityType(d.U8())
	return EntityName{Type: t, Num: d.I64()}
}

// AuthName is Ceph's EntityName as used by authentication: a type and a
// string id ("client.admin"), encoded as le32 type and a string.
type AuthName struct {
	Type EntityType
	ID   string
}

// String returns "type.id".
func (n AuthName) String() string { return n.Type.String() + "." + n.ID }

// AppendAuthName appends the encoding of n.
func AppendAuthName(b []byte, n AuthName) []byte {
	b = denc.AppendU32(b, uint32(n.Type))
	return denc.AppendString(b, n.ID)
}

// DecodeAuthName reads an AuthName.
func DecodeAuthName(d *denc.Decoder) AuthName {
	t := d.U32()
	id := d.String()
	if t > 0xFF {
		d.Fail("auth name", denc.ErrMalformed)
	}
	return AuthName{Type: EntityType(t), ID: id}
}

// ErrBadAddr reports an address string or encoding that cannot be parsed.
var ErrBadAddr = errors.New("msg: bad address")
