package auth

import (
	"fmt"

	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Auth modes: the first byte of a client's first payload (Ceph's
// AUTH_MODE_*). Wire constants; append only.
const (
	ModeAuthorizer uint8 = 1  // AUTH_MODE_AUTHORIZER: to a service (OSD, MDS, MGR)
	ModeMon        uint8 = 10 // AUTH_MODE_MON: to a mon
)

// NoneClient is auth method NONE, client side: it names itself and
// proves nothing. Its payload is Ceph's AuthNoneClientHandler's: u8 auth
// mode (ModeMon to a mon, ModeAuthorizer otherwise), the entity name
// (le32 type, string id) and le64 global id. The zero value of GlobalID
// asks the server to assign one.
type NoneClient struct {
	Name     msg.AuthName
	GlobalID uint64
}

// NewNoneClient returns a NoneClient for name.
func NewNoneClient(name msg.AuthName) *NoneClient { return &NoneClient{Name: name} }

// Method returns MethodNone.
func (c *NoneClient) Method() uint32 { return MethodNone }

// Request returns the mode, name and global id.
func (c *NoneClient) Request(peerType msg.EntityType) ([]byte, error) {
	mode := ModeAuthorizer
	if peerType == msg.EntityMon {
		mode = ModeMon
	}
	return AppendNonePayload(nil, mode, c.Name, c.GlobalID), nil
}

// ReplyMore fails: auth none has no challenge.
func (c *NoneClient) ReplyMore(payload []byte) ([]byte, error) {
	return nil, fmt.Errorf("%w: auth none takes no further round trip", ErrMalformed)
}

// Done returns a result without keys.
func (c *NoneClient) Done(globalID uint64, conMode uint32, payload []byte) (Result, error) {
	return Result{Method: MethodNone, Name: c.Name, GlobalID: globalID}, nil
}

// NoneServer is auth method NONE, server side: it believes the name a
// client gives and assigns GlobalID. It allows only MethodNone.
type NoneServer struct {
	GlobalID uint64
}

// Methods returns [MethodNone].
func (s *NoneServer) Methods(peerType msg.EntityType) []uint32 { return []uint32{MethodNone} }

// Handle accepts a well-formed auth none payload at once.
func (s *NoneServer) Handle(method uint32, peerType msg.EntityType, conMode uint32, first bool, payload []byte) (Reply, error) {
	if method != MethodNone {
		return Reply{}, fmt.Errorf("%w: method %d", ErrDenied, method)
	}
	if !first {
		return Reply{}, fmt.Errorf("%w: auth none takes no further round trip", ErrMalformed)
	}
	_, name, _, err := ParseNonePayload(payload)
	if err != nil {
		return Reply{}, err
	}
	return Reply{Done: true, Result: Result{Method: MethodNone, Name: name, GlobalID: s.GlobalID}}, nil
}

// AppendNonePayload appends an auth none request payload.
func AppendNonePayload(b []byte, mode uint8, name msg.AuthName, globalID uint64) []byte {
	b = append(b, mode)
	b = msg.AppendAuthName(b, name)
	return denc.AppendU64(b, globalID)
}

// ParseNonePayload decodes an auth none request payload; it fails with
// ErrMalformed.
func ParseNonePayload(p []byte) (mode uint8, name msg.AuthName, globalID uint64, err error) {
	var d denc.Decoder
	d.Reset(p)
	mode = d.U8()
	name = msg.DecodeAuthName(&d)
	globalID = d.U64()
	if err := d.Err(); err != nil {
		return 0, msg.AuthName{}, 0, fmt.Errorf("%w: auth none payload: %v", ErrMalformed, err)
	}
	return mode, name, globalID, nil
}

var (
	_ Client = (*NoneClient)(nil)
	_ Server = (*NoneServer)(nil)
)
