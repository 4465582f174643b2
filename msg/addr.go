package msg

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ferrymsg/ferry/denc"
)

// AddrType says which protocol an address speaks (entity_addr_t::TYPE_*).
// Wire constants; append only.
type AddrType uint32

// Address types.
const (
	AddrNone   AddrType = 0
	AddrLegacy AddrType = 1 // msgr1, printed "v1:"
	AddrMsgr2  AddrType = 2 // msgr2, printed "v2:"
	AddrAny    AddrType = 3 // either, printed "any:"
	AddrCIDR   AddrType = 4
)

func (t AddrType) prefix() string {
	switch t {
	case AddrLegacy:
		return "v1:"
	case AddrMsgr2:
		return "v2:"
	case AddrAny:
		return "any:"
	case AddrCIDR:
		return "cidr:"
	}
	return ""
}

// Socket address families as Ceph puts them on the wire (Linux values).
const (
	afInet  = 2
	afInet6 = 10
)

// EntityAddr is Ceph's entity_addr_t: a protocol type, a nonce that tells
// apart successive instances of a process on one address, and an IP
// address and port. The zero value is the empty address ("-").
type EntityAddr struct {
	Type  AddrType
	Nonce uint32
	IP    netip.AddrPort
}

// IsZero reports whether a has no IP address.
func (a EntityAddr) IsZero() bool { return !a.IP.Addr().IsValid() }

// String formats a as Ceph does: "v2:127.0.0.1:3300/0", "v1:[::1]:6789/7",
// or "-" for an empty address.
func (a EntityAddr) String() string {
	if a.IsZero() && a.Type == AddrNone {
		return "-"
	}
	ip := "0.0.0.0:0"
	if !a.IsZero() {
		ip = a.IP.String()
	}
	return a.Type.prefix() + ip + "/" + strconv.FormatUint(uint64(a.Nonce), 10)
}

// TCPAddr returns a's IP address and port as a *net.TCPAddr.
func (a EntityAddr) TCPAddr() *net.TCPAddr { return net.TCPAddrFromAddrPort(a.IP) }

// ParseEntityAddr parses Ceph's textual form: an optional "v1:", "v2:" or
// "any:" prefix (default v2), "IP:PORT" or "[IPv6]:PORT", and an optional
// "/NONCE". "-" is the empty address.
func ParseEntityAddr(s string) (EntityAddr, error) {
	if s == "-" {
		return EntityAddr{}, nil
	}
	a := EntityAddr{Type: AddrMsgr2}
	switch {
	case strings.HasPrefix(s, "v1:"):
		a.Type, s = AddrLegacy, s[3:]
	case strings.HasPrefix(s, "v2:"):
		a.Type, s = AddrMsgr2, s[3:]
	case strings.HasPrefix(s, "any:"):
		a.Type, s = AddrAny, s[4:]
	}
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		n, err := strconv.ParseUint(s[i+1:], 10, 32)
		if err != nil {
			return EntityAddr{}, fmt.Errorf("%w: nonce in %q", ErrBadAddr, s)
		}
		a.Nonce, s = uint32(n), s[:i]
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		// Allow a bare IP with no port.
		ip, err2 := netip.ParseAddr(strings.Trim(s, "[]"))
		if err2 != nil {
			return EntityAddr{}, fmt.Errorf("%w: %q: %v", ErrBadAddr, s, err)
		}
		ap = netip.AddrPortFrom(ip, 0)
	}
	a.IP = ap
	return a, nil
}

// AppendEntityAddr appends a in the form for the given peer features: with
// FeatureMsgAddr2, the versioned encoding (marker 1, ENCODE_START(1,1),
// type, nonce, sockaddr); without it, the legacy 136-byte form (le32 0,
// nonce, sockaddr_storage with a big-endian family) that msgr1 uses.
func AppendEntityAddr(b []byte, a EntityAddr, features uint64) []byte {
	if features&FeatureMsgAddr2 == 0 {
		return AppendLegacyAddr(b, a)
	}
	b = append(b, 1)
	b, start := denc.StartBlock(b, 1, 1)
	b = denc.AppendU32(b, uint32(a.Type))
	b = denc.AppendU32(b, a.Nonce)
	switch {
	case a.IsZero():
		b = denc.AppendU32(b, 0)
	case a.IP.Addr().Is4():
		b = denc.AppendU32(b, 16)
		b = appendSockaddr(b, a.IP, binary.LittleEndian)
	default:
		b = denc.AppendU32(b, 28)
		b = appendSockaddr(b, a.IP, binary.LittleEndian)
	}
	return denc.EndBlock(b, start)
}

// appendSockaddr appends a struct sockaddr_in (16 bytes) or sockaddr_in6
// (28 bytes) with the family in the given byte order and the port in
// network order.
func appendSockaddr(b []byte, ap netip.AddrPort, fam binary.AppendByteOrder) []byte {
	ip := ap.Addr()
	if ip.Is4() {
		b = fam.AppendUint16(b, afInet)
		b = binary.BigEndian.AppendUint16(b, ap.Port())
		v4 := ip.As4()
		b = append(b, v4[:]...)
		return append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	}
	b = fam.AppendUint16(b, afInet6)
	b = binary.BigEndian.AppendUint16(b, ap.Port())
	b = append(b, 0, 0, 0, 0) // flowinfo
	v6 := ip.As16()
	b = append(b, v6[:]...)
	return append(b, 0, 0, 0, 0) // scope id
}

// legacySockaddrLen is sizeof(struct sockaddr_storage).
const legacySockaddrLen = 128

// AppendLegacyAddr appends the legacy (msgr1) encoding of a: le32 0,
// le32 nonce and a 128-byte sockaddr_storage whose family is big-endian.
func AppendLegacyAddr(b []byte, a EntityAddr) []byte {
	b = denc.AppendU32(b, 0)
	b = denc.AppendU32(b, a.Nonce)
	start := len(b)
	if !a.IsZero() {
		b = appendSockaddr(b, a.IP, binary.BigEndian)
	}
	for len(b)-start < legacySockaddrLen {
		b = append(b, 0)
	}
	return b
}

func parseSockaddr(p []byte, fam binary.ByteOrder) (netip.AddrPort, bool) {
	if len(p) < 2 {
		return netip.AddrPort{}, len(p) == 0
	}
	switch fam.Uint16(p) {
	case 0:
		return netip.AddrPort{}, true
	case afInet:
		if len(p) < 8 {
			return netip.AddrPort{}, false
		}
		port := binary.BigEndian.Uint16(p[2:])
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[4:8])), port), true
	case afInet6:
		if len(p) < 24 {
			return netip.AddrPort{}, false
		}
		port := binary.BigEndian.Uint16(p[2:])
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(p[8:24])), port), true
	}
	return netip.AddrPort{}, false
}

// DecodeEntityAddr reads an entity_addr_t in either form (the marker byte
// tells which).
func DecodeEntityAddr(d *denc.Decoder) EntityAddr {
	marker := d.U8()
	if d.Err() != nil {
		return EntityAddr{}
	}
	switch marker {
	case 0:
		return decodeLegacyAfterMarker(d)
	case 1:
	default:
		d.Fail("entity_addr marker", denc.ErrMalformed)
		return EntityAddr{}
	}
	return decodeAddrAfterMarker(d)
}

// decodeAddrAfterMarker reads the versioned body of a new-style address
// whose marker byte (1) has been consumed.
func decodeAddrAfterMarker(d *denc.Decoder) EntityAddr {
	_, body := d.Block(1)
	var a EntityAddr
	a.Type = AddrType(body.U32())
	a.Nonce = body.U32()
	elen := body.U32()
	if body.Err() == nil && elen > 0 {
		sa := body.Raw(int(min(elen, 1<<16)))
		ip, ok := parseSockaddr(sa, binary.LittleEndian)
		if !ok && body.Err() == nil {
			body.Fail("sockaddr", denc.ErrMalformed)
		}
		a.IP = ip
	}
	d.Absorb(&body)
	return a
}

// decodeLegacyAfterMarker reads the rest of a legacy address whose first
// byte (0, the low byte of the le32 zero type) has been consumed.
func decodeLegacyAfterMarker(d *denc.Decoder) EntityAddr {
	d.Skip(3)
	var a EntityAddr
	a.Type = AddrLegacy
	a.Nonce = d.U32()
	ss := d.Raw(legacySockaddrLen)
	if d.Err() != nil {
		return EntityAddr{}
	}
	ip, ok := parseSockaddr(ss, binary.BigEndian)
	if !ok {
		d.Fail("legacy sockaddr", denc.ErrMalformed)
	}
	a.IP = ip
	return a
}

// DecodeLegacyAddr reads the 136-byte legacy form.
func DecodeLegacyAddr(d *denc.Decoder) EntityAddr {
	if d.U8() != 0 && d.Err() == nil {
		d.Fail("legacy addr", denc.ErrMalformed)
	}
	return decodeLegacyAfterMarker(d)
}

// AddrVec is Ceph's entity_addrvec_t: the addresses one entity listens
// on, typically a v2 and a v1 address.
type AddrVec []EntityAddr

// String formats v as Ceph does: "[v2:1.2.3.4:3300/0,v1:1.2.3.4:6789/0]",
// or the single address without brackets.
func (v AddrVec) String() string {
	if len(v) == 1 {
		return v[0].String()
	}
	s := make([]string, len(v))
	for i, a := range v {
		s[i] = a.String()
	}
	return "[" + strings.Join(s, ",") + "]"
}

// Msgr2 returns the first msgr2 (or "any") address of v.
func (v AddrVec) Msgr2() (EntityAddr, bool) {
	for _, a := range v {
		if a.Type == AddrMsgr2 || a.Type == AddrAny {
			return a, true
		}
	}
	return EntityAddr{}, false
}

// Legacy returns the first msgr1 (or "any") address of v.
func (v AddrVec) Legacy() (EntityAddr, bool) {
	for _, a := range v {
		if a.Type == AddrLegacy || a.Type == AddrAny {
			return a, true
		}
	}
	return EntityAddr{}, false
}

// ParseAddrVec parses "[ADDR,ADDR]" or a single address.
func ParseAddrVec(s string) (AddrVec, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") && strings.ContainsAny(s, ",:") && !strings.HasPrefix(s, "[::") {
		inner := s[1 : len(s)-1]
		var v AddrVec
		for _, p := range strings.Split(inner, ",") {
			a, err := ParseEntityAddr(strings.TrimSpace(p))
			if err != nil {
				return nil, err
			}
			v = append(v, a)
		}
		return v, nil
	}
	a, err := ParseEntityAddr(s)
	if err != nil {
		return nil, err
	}
	return AddrVec{a}, nil
}

// AppendAddrVec appends v. With FeatureMsgAddr2 it is marker 2 and a
// vector of addresses; without, the legacy form of the first legacy
// address.
func AppendAddrVec(b []byte, v AddrVec, features uint64) []byte {
	if features&FeatureMsgAddr2 == 0 {
		a, _ := v.Legacy()
		return AppendLegacyAddr(b, a)
	}
	b = append(b, 2)
	b = denc.AppendU32(b, uint32(len(v)))
	for _, a := range v {
		b = AppendEntityAddr(b, a, features)
	}
	return b
}

// minAddrLen is the smallest encoded entity_addr_t (marker, block header,
// type, nonce, elen).
const minAddrLen = 1 + 6 + 12

// DecodeAddrVec reads an entity_addrvec_t in any of its three forms
// (legacy single, new single, vector).
func DecodeAddrVec(d *denc.Decoder) AddrVec {
	marker := d.U8()
	if d.Err() != nil {
		return nil
	}
	switch marker {
	case 0:
		a := decodeLegacyAfterMarker(d)
		return AddrVec{a}
	case 1:
		return AddrVec{decodeAddrAfterMarker(d)}
	case 2:
		n := d.Count(minAddrLen)
		v := make(AddrVec, 0, n)
		for i := 0; i < n && d.Err() == nil; i++ {
			v = append(v, DecodeEntityAddr(d))
		}
		return v
	}
	d.Fail("entity_addrvec marker", denc.ErrMalformed)
	return nil
}
