package ceph

import (
	"encoding/hex"
	"fmt"

	"github.com/ferrymsg/ferry/denc"
)

// FSID is a cluster's id, a UUID. On the wire it is Ceph's uuid_d: the 16
// bytes in order, with no length prefix.
type FSID [16]byte

// ParseFSID parses a UUID in its canonical form
// ("21ccba25-a6c7-41d0-a04d-8d83e4e702e3", either case), optionally in
// braces, or as 32 hex digits without dashes. It returns an error matching
// ErrInvalidFSID otherwise.
func ParseFSID(s string) (FSID, error) {
	var f FSID
	in := s
	if len(s) >= 2 && s[0] == '{' && s[len(s)-1] == '}' {
		s = s[1 : len(s)-1]
	}
	var hexDigits []byte
	switch len(s) {
	case 36:
		if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
			return f, fmt.Errorf("%w: %q", ErrInvalidFSID, in)
		}
		hexDigits = make([]byte, 0, 32)
		hexDigits = append(hexDigits, s[0:8]...)
		hexDigits = append(hexDigits, s[9:13]...)
		hexDigits = append(hexDigits, s[14:18]...)
		hexDigits = append(hexDigits, s[19:23]...)
		hexDigits = append(hexDigits, s[24:36]...)
	case 32:
		hexDigits = []byte(s)
	default:
		return f, fmt.Errorf("%w: %q", ErrInvalidFSID, in)
	}
	if _, err := hex.Decode(f[:], hexDigits); err != nil {
		return FSID{}, fmt.Errorf("%w: %q", ErrInvalidFSID, in)
	}
	return f, nil
}

// String returns the canonical lower-case form, as Ceph prints a uuid_d.
func (f FSID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], f[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], f[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], f[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], f[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], f[10:16])
	return string(b[:])
}

// IsZero reports whether f is the nil UUID.
func (f FSID) IsZero() bool { return f == FSID{} }

// AppendFSID appends f as uuid_d encodes it: 16 raw bytes.
func AppendFSID(b []byte, f FSID) []byte { return append(b, f[:]...) }

// DecodeFSID reads a uuid_d.
func DecodeFSID(d *denc.Decoder) FSID {
	var f FSID
	copy(f[:], d.Raw(len(f)))
	return f
}
