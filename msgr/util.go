package msgr

import (
	crand "crypto/rand"
	"encoding/binary"
	"net/netip"
)

var cryptoRand = crand.Reader

func leUint64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

func netipUnmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
