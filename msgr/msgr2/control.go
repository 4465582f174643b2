package msgr2

import (
	"errors"

	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Control frame payloads. Each type has Append, which appends the payload
// encoding (the single segment of its frame), Tag, and a ParseX function.
// Parse functions fail with an *Error carrying the frame's tag and
// ErrTruncated (the payload ends early) or ErrMalformed (it does not
// decode); bytes after a complete payload are ignored, as Ceph does.
// Byte slices in parsed values alias the input.
//
// Addresses are encoded as Ceph encodes frames: with the features
// MSG_ADDR2 and SERVER_NAUTILUS.

// Authentication methods, connection modes, ident flags and auth modes.
// Wire constants; append only.
const (
	AuthMethodNone  uint32 = 1 // CEPH_AUTH_NONE
	AuthMethodCephx uint32 = 2 // CEPH_AUTH_CEPHX

	ConModeCRC    uint32 = 1 // integrity by CRC
	ConModeSecure uint32 = 2 // AES-GCM (not implemented by ferry)

	IdentFlagLossy uint64 = 1 // CLIENT_IDENT / SERVER_IDENT flag: lossy session

	AuthModeAuthorizer uint8 = 1  // AUTH_MODE_AUTHORIZER: to a non-mon peer
	AuthModeMon        uint8 = 10 // AUTH_MODE_MON: to a mon
)

// frameFeatures are the features Ceph assumes when encoding frame payloads
// (msgr2_frame_assumed).
const frameFeatures = msg.FeatureMsgAddr2 | msg.FeatureServerNautilus

// decodeError turns the decoder's error, if any, into an *Error for tag.
func decodeError(tag Tag, d *denc.Decoder) error {
	err := d.Err()
	if err == nil {
		return nil
	}
	s := ErrMalformed
	if errors.Is(err, denc.ErrTruncated) || errors.Is(err, denc.ErrTooLarge) {
		// A value or a length that runs past the end of the payload.
		s = ErrTruncated
	}
	return errorf(s, tag, "%v", err)
}

// Hello is the HELLO payload: the sender's entity type and the address at
// which it sees its peer.
type Hello struct {
	EntityType msg.EntityType
	PeerAddr   msg.EntityAddr
}

// Tag returns TagHello.
func (Hello) Tag() Tag { return TagHello }

// Append appends u8 entity type and the entity_addr_t.
func (h Hello) Append(b []byte) []byte {
	b = append(b, byte(h.EntityType))
	return msg.AppendEntityAddr(b, h.PeerAddr, frameFeatures)
}

// ParseHello decodes a HELLO payload.
func ParseHello(p []byte) (Hello, error) {
	var d denc.Decoder
	d.Reset(p)
	h := Hello{EntityType: msg.EntityType(d.U8())}
	h.PeerAddr = msg.DecodeEntityAddr(&d)
	if err := decodeError(TagHello, &d); err != nil {
		return Hello{}, err
	}
	return h, nil
}

// AuthRequest is the AUTH_REQUEST payload: the auth method, the connection
// modes the client prefers (best first) and the method's payload (for
// auth none, an AuthNonePayload).
type AuthRequest struct {
	Method         uint32
	PreferredModes []uint32
	Payload        []byte
}

// Tag returns TagAuthRequest.
func (AuthRequest) Tag() Tag { return TagAuthRequest }

// Append appends le32 method, vector<u32> modes, bufferlist payload.
func (a AuthRequest) Append(b []byte) []byte {
	b = denc.AppendU32(b, a.Method)
	b = denc.AppendU32s(b, a.PreferredModes)
	return denc.AppendBytes(b, a.Payload)
}

// ParseAuthRequest decodes an AUTH_REQUEST payload.
func ParseAuthRequest(p []byte) (AuthRequest, error) {
	var d denc.Decoder
	d.Reset(p)
	a := AuthRequest{Method: d.U32()}
	a.PreferredModes = d.U32s()
	a.Payload = d.Bytes()
	if err := decodeError(TagAuthRequest, &d); err != nil {
		return AuthRequest{}, err
	}
	return a, nil
}

// AuthBadMethod is the AUTH_BAD_METHOD payload: the server refuses the
// method (Result is a negative errno) and lists what it allows.
type AuthBadMethod struct {
	Method         uint32
	Result         int32
	AllowedMethods []uint32
	AllowedModes   []uint32
}

// Tag returns TagAuthBadMethod.
func (AuthBadMethod) Tag() Tag { return TagAuthBadMethod }

// Append appends le32 method, s32 result and the two vector<u32>.
func (a AuthBadMethod) Append(b []byte) []byte {
	b = denc.AppendU32(b, a.Method)
	b = denc.AppendI32(b, a.Result)
	b = denc.AppendU32s(b, a.AllowedMethods)
	return denc.AppendU32s(b, a.AllowedModes)
}

// ParseAuthBadMethod decodes an AUTH_BAD_METHOD payload.
func ParseAuthBadMethod(p []byte) (AuthBadMethod, error) {
	var d denc.Decoder
	d.Reset(p)
	a := AuthBadMethod{Method: d.U32(), Result: d.I32()}
	a.AllowedMethods = d.U32s()
	a.AllowedModes = d.U32s()
	if err := decodeError(TagAuthBadMethod, &d); err != nil {
		return AuthBadMethod{}, err
	}
	return a, nil
}

// AuthReplyMore is the AUTH_REPLY_MORE payload: a server's challenge.
type AuthReplyMore struct {
	Payload []byte
}

// Tag returns TagAuthReplyMore.
func (AuthReplyMore) Tag() Tag { return TagAuthReplyMore }

// Append appends the payload as a bufferlist.
func (a AuthReplyMore) Append(b []byte) []byte { return denc.AppendBytes(b, a.Payload) }

// ParseAuthReplyMore decodes an AUTH_REPLY_MORE payload.
func ParseAuthReplyMore(p []byte) (AuthReplyMore, error) {
	var d denc.Decoder
	d.Reset(p)
	a := AuthReplyMore{Payload: d.Bytes()}
	if err := decodeError(TagAuthReplyMore, &d); err != nil {
		return AuthReplyMore{}, err
	}
	return a, nil
}

// AuthRequestMore is the AUTH_REQUEST_MORE payload: a client's answer to
// a challenge.
type AuthRequestMore struct {
	Payload []byte
}

// Tag returns TagAuthRequestMore.
func (AuthRequestMore) Tag() Tag { return TagAuthRequestMore }

// Append appends the payload as a bufferlist.
func (a AuthRequestMore) Append(b []byte) []byte { return denc.AppendBytes(b, a.Payload) }

// ParseAuthRequestMore decodes an AUTH_REQUEST_MORE payload.
func ParseAuthRequestMore(p []byte) (AuthRequestMore, error) {
	var d denc.Decoder
	d.Reset(p)
	a := AuthRequestMore{Payload: d.Bytes()}
	if err := decodeError(TagAuthRequestMore, &d); err != nil {
		return AuthRequestMore{}, err
	}
	return a, nil
}

// AuthDone is the AUTH_DONE payload: the client's global id, the
// connection mode chosen and the method's final payload.
type AuthDone struct {
	GlobalID uint64
	ConMode  uint32
	Payload  []byte
}

// Tag returns TagAuthDone.
func (AuthDone) Tag() Tag { return TagAuthDone }

// Append appends le64 global id, le32 connection mode, bufferlist payload.
func (a AuthDone) Append(b []byte) []byte {
	b = denc.AppendU64(b, a.GlobalID)
	b = denc.AppendU32(b, a.ConMode)
	return denc.AppendBytes(b, a.Payload)
}

// ParseAuthDone decodes an AUTH_DONE payload.
func ParseAuthDone(p []byte) (AuthDone, error) {
	var d denc.Decoder
	d.Reset(p)
	a := AuthDone{GlobalID: d.U64(), ConMode: d.U32()}
	a.Payload = d.Bytes()
	if err := decodeError(TagAuthDone, &d); err != nil {
		return AuthDone{}, err
	}
	return a, nil
}

// AuthSignature is the AUTH_SIGNATURE payload: HMAC-SHA256 with the
// session key of everything received before it, or all zeros when there is
// no session key (auth none).
type AuthSignature struct {
	Sig [32]byte
}

// Tag returns TagAuthSignature.
func (AuthSignature) Tag() Tag { return TagAuthSignature }

// Append appends the 32 raw bytes.
func (a AuthSignature) Append(b []byte) []byte { return append(b, a.Sig[:]...) }

// ParseAuthSignature decodes an AUTH_SIGNATURE payload.
func ParseAuthSignature(p []byte) (AuthSignature, error) {
	var a AuthSignature
	if len(p) < len(a.Sig) {
		return AuthSignature{}, errorf(ErrTruncated, TagAuthSignature, "%d of %d bytes", len(p), len(a.Sig))
	}
	copy(a.Sig[:], p)
	return a, nil
}

// ClientIdent is the CLIENT_IDENT payload.
type ClientIdent struct {
	Addrs        msg.AddrVec    // the client's addresses
	Target       msg.EntityAddr // the address it connected to
	GID          int64          // its global id (entity number)
	GlobalSeq    uint64
	Supported    uint64 // feature masks
	Required     uint64
	Flags        uint64 // IdentFlagLossy
	ClientCookie uint64
}

// Tag returns TagClientIdent.
func (ClientIdent) Tag() Tag { return TagClientIdent }

// Append appends addrvec, addr, s64 gid, then le64 global seq, supported,
// required, flags and cookie.
func (c ClientIdent) Append(b []byte) []byte {
	b = msg.AppendAddrVec(b, c.Addrs, frameFeatures)
	b = msg.AppendEntityAddr(b, c.Target, frameFeatures)
	b = denc.AppendI64(b, c.GID)
	b = denc.AppendU64(b, c.GlobalSeq)
	b = denc.AppendU64(b, c.Supported)
	b = denc.AppendU64(b, c.Required)
	b = denc.AppendU64(b, c.Flags)
	return denc.AppendU64(b, c.ClientCookie)
}

// ParseClientIdent decodes a CLIENT_IDENT payload.
func ParseClientIdent(p []byte) (ClientIdent, error) {
	var d denc.Decoder
	d.Reset(p)
	var c ClientIdent
	c.Addrs = msg.DecodeAddrVec(&d)
	c.Target = msg.DecodeEntityAddr(&d)
	c.GID = d.I64()
	c.GlobalSeq = d.U64()
	c.Supported = d.U64()
	c.Required = d.U64()
	c.Flags = d.U64()
	c.ClientCookie = d.U64()
	if err := decodeError(TagClientIdent, &d); err != nil {
		return ClientIdent{}, err
	}
	return c, nil
}

// ServerIdent is the SERVER_IDENT payload.
type ServerIdent struct {
	Addrs        msg.AddrVec // the server's addresses
	GID          int64       // its global id (entity number)
	GlobalSeq    uint64
	Supported    uint64 // feature masks
	Required     uint64
	Flags        uint64 // IdentFlagLossy
	ServerCookie uint64
}

// Tag returns TagServerIdent.
func (ServerIdent) Tag() Tag { return TagServerIdent }

// Append appends addrvec, s64 gid, then le64 global seq, supported,
// required, flags and cookie.
func (s ServerIdent) Append(b []byte) []byte {
	b = msg.AppendAddrVec(b, s.Addrs, frameFeatures)
	b = denc.AppendI64(b, s.GID)
	b = denc.AppendU64(b, s.GlobalSeq)
	b = denc.AppendU64(b, s.Supported)
	b = denc.AppendU64(b, s.Required)
	b = denc.AppendU64(b, s.Flags)
	return denc.AppendU64(b, s.ServerCookie)
}

// ParseServerIdent decodes a SERVER_IDENT payload.
func ParseServerIdent(p []byte) (ServerIdent, error) {
	var d denc.Decoder
	d.Reset(p)
	var s ServerIdent
	s.Addrs = msg.DecodeAddrVec(&d)
	s.GID = d.I64()
	s.GlobalSeq = d.U64()
	s.Supported = d.U64()
	s.Required = d.U64()
	s.Flags = d.U64()
	s.ServerCookie = d.U64()
	if err := decodeError(TagServerIdent, &d); err != nil {
		return ServerIdent{}, err
	}
	return s, nil
}

// IdentMissingFeatures is the IDENT_MISSING_FEATURES payload: the features
// the server requires and the client lacks.
type IdentMissingFeatures struct {
	Features uint64
}

// Tag returns TagIdentMissingFeatures.
func (IdentMissingFeatures) Tag() Tag { return TagIdentMissingFeatures }

// Append appends le64 features.
func (m IdentMissingFeatures) Append(b []byte) []byte { return denc.AppendU64(b, m.Features) }

// ParseIdentMissingFeatures decodes an IDENT_MISSING_FEATURES payload.
func ParseIdentMissingFeatures(p []byte) (IdentMissingFeatures, error) {
	v, err := parseU64(TagIdentMissingFeatures, p)
	return IdentMissingFeatures{Features: v}, err
}

// SessionReconnect is the SESSION_RECONNECT payload. MsgSeq is the
// client's in_seq.
type SessionReconnect struct {
	Addrs        msg.AddrVec
	ClientCookie uint64
	ServerCookie uint64
	GlobalSeq    uint64
	ConnectSeq   uint64
	MsgSeq       uint64
}

// Tag returns TagSessionReconnect.
func (SessionReconnect) Tag() Tag { return TagSessionReconnect }

// Append appends addrvec, then le64 client cookie, server cookie, global
// seq, connect seq and msg seq.
func (s SessionReconnect) Append(b []byte) []byte {
	b = msg.AppendAddrVec(b, s.Addrs, frameFeatures)
	b = denc.AppendU64(b, s.ClientCookie)
	b = denc.AppendU64(b, s.ServerCookie)
	b = denc.AppendU64(b, s.GlobalSeq)
	b = denc.AppendU64(b, s.ConnectSeq)
	return denc.AppendU64(b, s.MsgSeq)
}

// ParseSessionReconnect decodes a SESSION_RECONNECT payload.
func ParseSessionReconnect(p []byte) (SessionReconnect, error) {
	var d denc.Decoder
	d.Reset(p)
	var s SessionReconnect
	s.Addrs = msg.DecodeAddrVec(&d)
	s.ClientCookie = d.U64()
	s.ServerCookie = d.U64()
	s.GlobalSeq = d.U64()
	s.ConnectSeq = d.U64()
	s.MsgSeq = d.U64()
	if err := decodeError(TagSessionReconnect, &d); err != nil {
		return SessionReconnect{}, err
	}
	return s, nil
}

// SessionReset is the SESSION_RESET payload; Full asks the client to
// reset its whole session state.
type SessionReset struct {
	Full bool
}

// Tag returns TagSessionReset.
func (SessionReset) Tag() Tag { return TagSessionReset }

// Append appends u8 full.
func (s SessionReset) Append(b []byte) []byte { return denc.AppendBool(b, s.Full) }

// ParseSessionReset decodes a SESSION_RESET payload (any non-zero byte is
// true).
func ParseSessionReset(p []byte) (SessionReset, error) {
	if len(p) < 1 {
		return SessionReset{}, errorf(ErrTruncated, TagSessionReset, "empty payload")
	}
	return SessionReset{Full: p[0] != 0}, nil
}

// SessionRetry is the SESSION_RETRY payload: the server's connect_seq.
type SessionRetry struct {
	ConnectSeq uint64
}

// Tag returns TagSessionRetry.
func (SessionRetry) Tag() Tag { return TagSessionRetry }

// Append appends le64 connect seq.
func (s SessionRetry) Append(b []byte) []byte { return denc.AppendU64(b, s.ConnectSeq) }

// ParseSessionRetry decodes a SESSION_RETRY payload.
func ParseSessionRetry(p []byte) (SessionRetry, error) {
	v, err := parseU64(TagSessionRetry, p)
	return SessionRetry{ConnectSeq: v}, err
}

// SessionRetryGlobal is the SESSION_RETRY_GLOBAL payload: the server's
// global_seq, which the client must exceed.
type SessionRetryGlobal struct {
	GlobalSeq uint64
}

// Tag returns TagSessionRetryGlobal.
func (SessionRetryGlobal) Tag() Tag { return TagSessionRetryGlobal }

// Append appends le64 global seq.
func (s SessionRetryGlobal) Append(b []byte) []byte { return denc.AppendU64(b, s.GlobalSeq) }

// ParseSessionRetryGlobal decodes a SESSION_RETRY_GLOBAL payload.
func ParseSessionRetryGlobal(p []byte) (SessionRetryGlobal, error) {
	v, err := parseU64(TagSessionRetryGlobal, p)
	return SessionRetryGlobal{GlobalSeq: v}, err
}

// SessionReconnectOK is the SESSION_RECONNECT_OK payload: the server's
// in_seq.
type SessionReconnectOK struct {
	MsgSeq uint64
}

// Tag returns TagSessionReconnectOK.
func (SessionReconnectOK) Tag() Tag { return TagSessionReconnectOK }

// Append appends le64 msg seq.
func (s SessionReconnectOK) Append(b []byte) []byte { return denc.AppendU64(b, s.MsgSeq) }

// ParseSessionReconnectOK decodes a SESSION_RECONNECT_OK payload.
func ParseSessionReconnectOK(p []byte) (SessionReconnectOK, error) {
	v, err := parseU64(TagSessionReconnectOK, p)
	return SessionReconnectOK{MsgSeq: v}, err
}

// Wait is the WAIT payload, which is empty.
type Wait struct{}

// Tag returns TagWait.
func (Wait) Tag() Tag { return TagWait }

// Append appends nothing.
func (Wait) Append(b []byte) []byte { return b }

// ParseWait decodes a WAIT payload; it never fails.
func ParseWait(p []byte) (Wait, error) { return Wait{}, nil }

// Keepalive2 is the KEEPALIVE2 payload: the sender's timestamp (utime_t).
type Keepalive2 struct {
	Sec, Nsec uint32
}

// Tag returns TagKeepalive2.
func (Keepalive2) Tag() Tag { return TagKeepalive2 }

// Append appends le32 sec, le32 nsec.
func (k Keepalive2) Append(b []byte) []byte {
	b = denc.AppendU32(b, k.Sec)
	return denc.AppendU32(b, k.Nsec)
}

// ParseKeepalive2 decodes a KEEPALIVE2 payload.
func ParseKeepalive2(p []byte) (Keepalive2, error) {
	s, ns, err := parseStamp(TagKeepalive2, p)
	return Keepalive2{Sec: s, Nsec: ns}, err
}

// Keepalive2Ack is the KEEPALIVE2_ACK payload: the timestamp of the
// KEEPALIVE2 it answers, echoed.
type Keepalive2Ack struct {
	Sec, Nsec uint32
}

// Tag returns TagKeepalive2Ack.
func (Keepalive2Ack) Tag() Tag { return TagKeepalive2Ack }

// Append appends le32 sec, le32 nsec.
func (k Keepalive2Ack) Append(b []byte) []byte {
	b = denc.AppendU32(b, k.Sec)
	return denc.AppendU32(b, k.Nsec)
}

// ParseKeepalive2Ack decodes a KEEPALIVE2_ACK payload.
func ParseKeepalive2Ack(p []byte) (Keepalive2Ack, error) {
	s, ns, err := parseStamp(TagKeepalive2Ack, p)
	return Keepalive2Ack{Sec: s, Nsec: ns}, err
}

// Ack is the ACK payload: the highest message seq received.
type Ack struct {
	Seq uint64
}

// Tag returns TagAck.
func (Ack) Tag() Tag { return TagAck }

// Append appends le64 seq.
func (a Ack) Append(b []byte) []byte { return denc.AppendU64(b, a.Seq) }

// ParseAck decodes an ACK payload.
func ParseAck(p []byte) (Ack, error) {
	v, err := parseU64(TagAck, p)
	return Ack{Seq: v}, err
}

// AuthNonePayload is what a client puts in AUTH_REQUEST's payload for
// auth method NONE: the mode (AuthModeMon to a mon, AuthModeAuthorizer
// otherwise), the name it authenticates as and its global id (0 if none
// yet).
type AuthNonePayload struct {
	Mode     uint8
	Name     msg.AuthName
	GlobalID uint64
}

// Append appends u8 mode, the AuthName (le32 type, string id) and le64
// global id.
func (a AuthNonePayload) Append(b []byte) []byte {
	b = append(b, a.Mode)
	b = msg.AppendAuthName(b, a.Name)
	return denc.AppendU64(b, a.GlobalID)
}

// ParseAuthNonePayload decodes an auth-NONE AUTH_REQUEST payload. Errors
// carry TagAuthRequest.
func ParseAuthNonePayload(p []byte) (AuthNonePayload, error) {
	var d denc.Decoder
	d.Reset(p)
	a := AuthNonePayload{Mode: d.U8()}
	a.Name = msg.DecodeAuthName(&d)
	a.GlobalID = d.U64()
	if err := decodeError(TagAuthRequest, &d); err != nil {
		return AuthNonePayload{}, err
	}
	return a, nil
}

func parseU64(tag Tag, p []byte) (uint64, error) {
	var d denc.Decoder
	d.Reset(p)
	v := d.U64()
	if err := decodeError(tag, &d); err != nil {
		return 0, err
	}
	return v, nil
}

func parseStamp(tag Tag, p []byte) (sec, nsec uint32, err error) {
	var d denc.Decoder
	d.Reset(p)
	sec, nsec = d.U32(), d.U32()
	if err := decodeError(tag, &d); err != nil {
		return 0, 0, err
	}
	return sec, nsec, nil
}

// ParseControl decodes the payload of a control frame with the given tag
// and returns the value (Hello, AuthRequest, ...; never a pointer). It
// fails with ErrUnexpectedFrame for MESSAGE and for the compression tags
// (ferry does not negotiate compression) and ErrUnknownTag for a tag that
// is not Known.
func ParseControl(tag Tag, p []byte) (ControlFrame, error) {
	switch tag {
	case TagHello:
		return wrapParse(ParseHello(p))
	case TagAuthRequest:
		return wrapParse(ParseAuthRequest(p))
	case TagAuthBadMethod:
		return wrapParse(ParseAuthBadMethod(p))
	case TagAuthReplyMore:
		return wrapParse(ParseAuthReplyMore(p))
	case TagAuthRequestMore:
		return wrapParse(ParseAuthRequestMore(p))
	case TagAuthDone:
		return wrapParse(ParseAuthDone(p))
	case TagAuthSignature:
		return wrapParse(ParseAuthSignature(p))
	case TagClientIdent:
		return wrapParse(ParseClientIdent(p))
	case TagServerIdent:
		return wrapParse(ParseServerIdent(p))
	case TagIdentMissingFeatures:
		return wrapParse(ParseIdentMissingFeatures(p))
	case TagSessionReconnect:
		return wrapParse(ParseSessionReconnect(p))
	case TagSessionReset:
		return wrapParse(ParseSessionReset(p))
	case TagSessionRetry:
		return wrapParse(ParseSessionRetry(p))
	case TagSessionRetryGlobal:
		return wrapParse(ParseSessionRetryGlobal(p))
	case TagSessionReconnectOK:
		return wrapParse(ParseSessionReconnectOK(p))
	case TagWait:
		return wrapParse(ParseWait(p))
	case TagKeepalive2:
		return wrapParse(ParseKeepalive2(p))
	case TagKeepalive2Ack:
		return wrapParse(ParseKeepalive2Ack(p))
	case TagAck:
		return wrapParse(ParseAck(p))
	case TagMessage, TagCompressionRequest, TagCompressionDone:
		return nil, errorf(ErrUnexpectedFrame, tag, "not a control frame ferry handles")
	}
	return nil, errorf(ErrUnknownTag, tag, "")
}

// wrapParse returns v as a ControlFrame, or a nil interface on error.
func wrapParse[T ControlFrame](v T, err error) (ControlFrame, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}
