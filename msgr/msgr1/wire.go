// Package msgr1 implements Ceph's legacy wire protocol, msgr1 (the
// SimpleMessenger/Pipe protocol, ProtocolV1 in Ceph's async messenger):
// the "ceph v027" banner with legacy addresses, ceph_msg_connect and
// ceph_msg_connect_reply, the one-byte tags, messages as ceph_msg_header,
// front, middle, data and ceph_msg_footer with their CRCs, cephx message
// signatures, and the I/O-free protocol engine that drives one
// connection's handshake and session in either role.
//
// The codec does no I/O: Append functions append to a caller's buffer and
// Parse functions return values that alias their input. Every length read
// from the wire is checked against Limits before the caller is asked for
// the bytes it announces.
package msgr1

import (
	"encoding/binary"
	"strconv"

	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Wire layout. Wire constants; append only.
const (
	// Banner starts every msgr1 connection, both ways.
	Banner = "ceph v027"
	// BannerLen is len(Banner).
	BannerLen = len(Banner)
	// LegacyAddrLen is the length of a legacy entity_addr_t (le32 type,
	// le32 nonce, sockaddr_storage).
	LegacyAddrLen = 136
	// ServerBannerLen is what a server sends first and a client reads:
	// the banner, the server's address, the client's address as seen.
	ServerBannerLen = BannerLen + 2*LegacyAddrLen
	// ClientBannerLen is what a client sends before its connect message
	// and a server reads: the banner and the client's own address.
	ClientBannerLen = BannerLen + LegacyAddrLen
	// ConnectLen is the length of ceph_msg_connect (packed).
	ConnectLen = 33
	// ConnectReplyLen is the length of ceph_msg_connect_reply (packed).
	ConnectReplyLen = 26
	// HeaderLen is the length of ceph_msg_header (packed).
	HeaderLen = 53
	// FooterLen is the length of ceph_msg_footer, with the signature,
	// used when MSG_AUTH is negotiated.
	FooterLen = 21
	// OldFooterLen is ceph_msg_footer_old's (no signature), used when
	// MSG_AUTH is not negotiated.
	OldFooterLen = 13
	// TimespecLen is the length of ceph_timespec (KEEPALIVE2 and its ack).
	TimespecLen = 8
	// SeqLen is the length of a le64 sequence number (ACK, SEQ exchange).
	SeqLen = 8

	// headerCRCLen is the part of the header its CRC covers.
	headerCRCLen = HeaderLen - 4
)

// ConnectFlagLossy is ceph_msg_connect's and connect_reply's LOSSY flag.
const ConnectFlagLossy uint8 = 1

// Feature bits msgr1 itself looks at (CEPH_FEATURE_*).
const (
	FeatureReconnectSeq   uint64 = 1 << 6  // the SEQ exchange after connect
	FeatureMsgAuth        uint64 = 1 << 23 // footers carry a signature
	FeatureMsgrKeepalive2 uint64 = 1 << 42 // KEEPALIVE2 with a timestamp
	FeatureCephxV2        uint64 = 1 << 61 // cephx v2 signatures, authorizer challenge
)

// Protocol versions (CEPH_*_PROTOCOL), sent in ceph_msg_connect.
const (
	ProtoOSDCluster uint32 = 10 // osd ↔ osd
	ProtoMonCluster uint32 = 13 // mon ↔ mon
	ProtoMonClient  uint32 = 15 // a client of a mon
	ProtoOSDClient  uint32 = 24 // a client of an osd
	ProtoMDSClient  uint32 = 32 // a client of an mds
	ProtoMDSCluster uint32 = 35 // mds ↔ mds
)

// ProtoVersion is Ceph's get_proto_version: the protocol version an
// entity of type my uses towards a peer of type peer, connecting (client)
// or accepting (server). Peers of the same type use their cluster
// protocol; otherwise the version is the server side's client protocol.
func ProtoVersion(my, peer msg.EntityType, connecting bool) uint32 {
	if my == peer {
		switch my {
		case msg.EntityOSD:
			return ProtoOSDCluster
		case msg.EntityMon:
			return ProtoMonCluster
		case msg.EntityMDS:
			return ProtoMDSCluster
		}
		return 0
	}
	t := my
	if connecting {
		t = peer
	}
	switch t {
	case msg.EntityOSD:
		return ProtoOSDClient
	case msg.EntityMDS:
		return ProtoMDSClient
	case msg.EntityMon:
		return ProtoMonClient
	}
	return 0
}

// Tag is a msgr1 tag (CEPH_MSGR_TAG_*): the byte that starts every
// connect reply and every item after the handshake.
type Tag uint8

// Tags. Wire constants; append only.
const (
	TagReady               Tag = 1  // connect reply: the session is open
	TagResetSession        Tag = 2  // connect reply: the server has no such session; reset it
	TagWait                Tag = 3  // connect reply: a connection race the server's side wins
	TagRetrySession        Tag = 4  // connect reply: retry with the reply's connect_seq
	TagRetryGlobal         Tag = 5  // connect reply: retry with a global_seq above the reply's
	TagClose               Tag = 6  // the peer is closing
	TagMsg                 Tag = 7  // a message follows
	TagAck                 Tag = 8  // le64 seq follows
	TagKeepalive           Tag = 9  // bare keepalive
	TagBadProtoVer         Tag = 10 // connect reply: protocol version mismatch
	TagBadAuthorizer       Tag = 11 // connect reply: authorizer refused
	TagFeatures            Tag = 12 // connect reply: required features missing
	TagSeq                 Tag = 13 // connect reply: open, then the le64 sequence exchange
	TagKeepalive2          Tag = 14 // ceph_timespec follows
	TagKeepalive2Ack       Tag = 15 // the echoed ceph_timespec follows
	TagChallengeAuthorizer Tag = 16 // connect reply: the authorizer bytes are a challenge
)

var tagNames = [...]string{
	TagReady:               "READY",
	TagResetSession:        "RESETSESSION",
	TagWait:                "WAIT",
	TagRetrySession:        "RETRY_SESSION",
	TagRetryGlobal:         "RETRY_GLOBAL",
	TagClose:               "CLOSE",
	TagMsg:                 "MSG",
	TagAck:                 "ACK",
	TagKeepalive:           "KEEPALIVE",
	TagBadProtoVer:         "BADPROTOVER",
	TagBadAuthorizer:       "BADAUTHORIZER",
	TagFeatures:            "FEATURES",
	TagSeq:                 "SEQ",
	TagKeepalive2:          "KEEPALIVE2",
	TagKeepalive2Ack:       "KEEPALIVE2_ACK",
	TagChallengeAuthorizer: "CHALLENGE_AUTHORIZER",
}

// String returns the tag's name as Ceph spells it.
func (t Tag) String() string {
	if int(t) < len(tagNames) && tagNames[t] != "" {
		return tagNames[t]
	}
	return "TAG(" + strconv.Itoa(int(t)) + ")"
}

// AppendServerBanner appends what a server sends on accept: the banner,
// its own legacy address and the client's address as the server sees it.
func AppendServerBanner(b []byte, me, peer msg.EntityAddr) []byte {
	b = append(b, Banner...)
	b = msg.AppendLegacyAddr(b, me)
	return msg.AppendLegacyAddr(b, peer)
}

// AppendClientBanner appends what a client sends before its first
// connect message: the banner and its own legacy address.
func AppendClientBanner(b []byte, me msg.EntityAddr) []byte {
	b = append(b, Banner...)
	return msg.AppendLegacyAddr(b, me)
}

func checkBanner(p []byte) error {
	if len(p) < BannerLen {
		return errorf(ErrTruncated, 0, "banner: %d of %d bytes", len(p), BannerLen)
	}
	if string(p[:BannerLen]) == Banner {
		return nil
	}
	if string(p[:7]) == "ceph v2" {
		return errorf(ErrMsgr2Banner, 0, "banner %q", p[:BannerLen])
	}
	return errorf(ErrBadBanner, 0, "banner %q", p[:BannerLen])
}

// ParseLegacyAddr decodes a 136-byte legacy address.
func ParseLegacyAddr(p []byte) (msg.EntityAddr, error) {
	if len(p) != LegacyAddrLen {
		return msg.EntityAddr{}, errorf(ErrTruncated, 0, "legacy address: %d of %d bytes", len(p), LegacyAddrLen)
	}
	d := denc.NewDecoder(p)
	a := msg.DecodeLegacyAddr(d)
	if err := d.Err(); err != nil {
		return msg.EntityAddr{}, wrapf(ErrMalformed, err, 0, "legacy address")
	}
	return a, nil
}

// ParseServerBanner parses the ServerBannerLen bytes a client reads: the
// server's address and the client's address as the server sees it.
func ParseServerBanner(p []byte) (server, me msg.EntityAddr, err error) {
	if len(p) != ServerBannerLen {
		return server, me, errorf(ErrTruncated, 0, "server banner: %d of %d bytes", len(p), ServerBannerLen)
	}
	if err := checkBanner(p); err != nil {
		return server, me, err
	}
	if server, err = ParseLegacyAddr(p[BannerLen : BannerLen+LegacyAddrLen]); err != nil {
		return server, me, err
	}
	me, err = ParseLegacyAddr(p[BannerLen+LegacyAddrLen:])
	return server, me, err
}

// ParseClientBanner parses the ClientBannerLen bytes a server reads: the
// client's own address.
func ParseClientBanner(p []byte) (msg.EntityAddr, error) {
	if len(p) != ClientBannerLen {
		return msg.EntityAddr{}, errorf(ErrTruncated, 0, "client banner: %d of %d bytes", len(p), ClientBannerLen)
	}
	if err := checkBanner(p); err != nil {
		return msg.EntityAddr{}, err
	}
	return ParseLegacyAddr(p[BannerLen:])
}

// Connect is ceph_msg_connect, which a client sends after the banners
// and again after every reply that asks it to retry. AuthorizerLen bytes
// of authorizer follow it on the wire.
type Connect struct {
	Features           uint64
	HostType           uint32 // the client's entity type
	GlobalSeq          uint32
	ConnectSeq         uint32
	ProtocolVersion    uint32
	AuthorizerProtocol uint32 // auth method of the authorizer (0: none)
	AuthorizerLen      uint32
	Flags              uint8 // ConnectFlagLossy
}

// Append appends the 33-byte packed structure.
func (c *Connect) Append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, c.Features)
	b = binary.LittleEndian.AppendUint32(b, c.HostType)
	b = binary.LittleEndian.AppendUint32(b, c.GlobalSeq)
	b = binary.LittleEndian.AppendUint32(b, c.ConnectSeq)
	b = binary.LittleEndian.AppendUint32(b, c.ProtocolVersion)
	b = binary.LittleEndian.AppendUint32(b, c.AuthorizerProtocol)
	b = binary.LittleEndian.AppendUint32(b, c.AuthorizerLen)
	return append(b, c.Flags)
}

// ParseConnect decodes exactly ConnectLen bytes.
func ParseConnect(p []byte) (Connect, error) {
	if len(p) != ConnectLen {
		return Connect{}, errorf(ErrTruncated, 0, "connect: %d of %d bytes", len(p), ConnectLen)
	}
	le := binary.LittleEndian
	return Connect{
		Features:           le.Uint64(p),
		HostType:           le.Uint32(p[8:]),
		GlobalSeq:          le.Uint32(p[12:]),
		ConnectSeq:         le.Uint32(p[16:]),
		ProtocolVersion:    le.Uint32(p[20:]),
		AuthorizerProtocol: le.Uint32(p[24:]),
		AuthorizerLen:      le.Uint32(p[28:]),
		Flags:              p[32],
	}, nil
}

// ConnectReply is ceph_msg_connect_reply, the server's answer to a
// Connect. AuthorizerLen bytes of authorizer reply (or challenge) follow
// it; after a TagSeq reply, a le64 sequence number follows those.
type ConnectReply struct {
	Tag             Tag
	Features        uint64
	GlobalSeq       uint32
	ConnectSeq      uint32
	ProtocolVersion uint32
	AuthorizerLen   uint32
	Flags           uint8
}

// Append appends the 26-byte packed structure.
func (r *ConnectReply) Append(b []byte) []byte {
	b = append(b, byte(r.Tag))
	b = binary.LittleEndian.AppendUint64(b, r.Features)
	b = binary.LittleEndian.AppendUint32(b, r.GlobalSeq)
	b = binary.LittleEndian.AppendUint32(b, r.ConnectSeq)
	b = binary.LittleEndian.AppendUint32(b, r.ProtocolVersion)
	b = binary.LittleEndian.AppendUint32(b, r.AuthorizerLen)
	return append(b, r.Flags)
}

// ParseConnectReply decodes exactly ConnectReplyLen bytes.
func ParseConnectReply(p []byte) (ConnectReply, error) {
	if len(p) != ConnectReplyLen {
		return ConnectReply{}, errorf(ErrTruncated, 0, "connect reply: %d of %d bytes", len(p), ConnectReplyLen)
	}
	le := binary.LittleEndian
	return ConnectReply{
		Tag:             Tag(p[0]),
		Features:        le.Uint64(p[1:]),
		GlobalSeq:       le.Uint32(p[9:]),
		ConnectSeq:      le.Uint32(p[13:]),
		ProtocolVersion: le.Uint32(p[17:]),
		AuthorizerLen:   le.Uint32(p[21:]),
		Flags:           p[25],
	}, nil
}

// Header is ceph_msg_header as msgr1 sends it (the seed's struct): the
// message's msg.Header fields plus the segment lengths, the sender and
// the header's own CRC.
type Header struct {
	Seq           uint64
	Tid           uint64
	Type          uint16
	Priority      uint16
	Version       uint16
	FrontLen      uint32
	MiddleLen     uint32
	DataLen       uint32
	DataOff       uint16
	Src           msg.EntityName // u8 type, le64 num
	CompatVersion uint16
	Reserved      uint16
	CRC           uint32 // crc32c(0, the 49 bytes before it)
}

// Append appends the 53-byte packed header, computing its CRC (h.CRC is
// ignored), and returns the CRC too.
func (h *Header) Append(b []byte) ([]byte, uint32) {
	le := binary.LittleEndian
	s := len(b)
	b = le.AppendUint64(b, h.Seq)
	b = le.AppendUint64(b, h.Tid)
	b = le.AppendUint16(b, h.Type)
	b = le.AppendUint16(b, h.Priority)
	b = le.AppendUint16(b, h.Version)
	b = le.AppendUint32(b, h.FrontLen)
	b = le.AppendUint32(b, h.MiddleLen)
	b = le.AppendUint32(b, h.DataLen)
	b = le.AppendUint16(b, h.DataOff)
	b = append(b, byte(h.Src.Type))
	b = le.AppendUint64(b, uint64(h.Src.Num))
	b = le.AppendUint16(b, h.CompatVersion)
	b = le.AppendUint16(b, h.Reserved)
	crc := msg.CRC32C(0, b[s:])
	return le.AppendUint32(b, crc), crc
}

// ParseHeader decodes exactly HeaderLen bytes and checks the CRC
// (ErrHeaderCRC).
func ParseHeader(p []byte) (Header, error) {
	if len(p) != HeaderLen {
		return Header{}, errorf(ErrTruncated, TagMsg, "header: %d of %d bytes", len(p), HeaderLen)
	}
	le := binary.LittleEndian
	h := Header{
		Seq:           le.Uint64(p),
		Tid:           le.Uint64(p[8:]),
		Type:          le.Uint16(p[16:]),
		Priority:      le.Uint16(p[18:]),
		Version:       le.Uint16(p[20:]),
		FrontLen:      le.Uint32(p[22:]),
		MiddleLen:     le.Uint32(p[26:]),
		DataLen:       le.Uint32(p[30:]),
		DataOff:       le.Uint16(p[34:]),
		Src:           msg.EntityName{Type: msg.EntityType(p[36]), Num: int64(le.Uint64(p[37:]))},
		CompatVersion: le.Uint16(p[45:]),
		Reserved:      le.Uint16(p[47:]),
		CRC:           le.Uint32(p[49:]),
	}
	if got := msg.CRC32C(0, p[:headerCRCLen]); got != h.CRC {
		return h, errorf(ErrHeaderCRC, TagMsg, "header crc %#x, computed %#x", h.CRC, got)
	}
	return h, nil
}

// PayloadLen is front + middle + data, as a 64-bit sum (no overflow).
func (h *Header) PayloadLen() uint64 {
	return uint64(h.FrontLen) + uint64(h.MiddleLen) + uint64(h.DataLen)
}

// Footer is ceph_msg_footer (msg.Footer on the wire): the payload CRCs
// (seed 0), the signature and the flags (msg.FooterComplete,
// msg.FooterNoCRC, msg.FooterSigned).
type Footer = msg.Footer

// FooterSize is the footer's length on a connection whose negotiated
// features are features: FooterLen with MSG_AUTH, OldFooterLen without.
func FooterSize(features uint64) int {
	if features&FeatureMsgAuth != 0 {
		return FooterLen
	}
	return OldFooterLen
}

// AppendFooter appends f in the form for the negotiated features: with
// MSG_AUTH the 21-byte footer, otherwise the 13-byte old footer (no
// signature).
func AppendFooter(b []byte, f *Footer, features uint64) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, f.FrontCRC)
	b = le.AppendUint32(b, f.MiddleCRC)
	b = le.AppendUint32(b, f.DataCRC)
	if features&FeatureMsgAuth != 0 {
		b = le.AppendUint64(b, f.Sig)
	}
	return append(b, f.Flags)
}

// ParseFooter decodes a footer of FooterSize(features) bytes.
func ParseFooter(p []byte, features uint64) (Footer, error) {
	n := FooterSize(features)
	if len(p) != n {
		return Footer{}, errorf(ErrTruncated, TagMsg, "footer: %d of %d bytes", len(p), n)
	}
	le := binary.LittleEndian
	f := Footer{FrontCRC: le.Uint32(p), MiddleCRC: le.Uint32(p[4:]), DataCRC: le.Uint32(p[8:])}
	if n == FooterLen {
		f.Sig = le.Uint64(p[12:])
	}
	f.Flags = p[n-1]
	return f, nil
}
