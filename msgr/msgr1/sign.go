package msgr1

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
)

// cephx's fixed AES-CBC IV (CEPH_AES_IV) and the magic of its encrypted
// envelopes (AUTH_ENC_MAGIC).
const (
	cephAESIV    = "cephsageyudagreg"
	authEncMagic = 0xff009cad8826aa55
)

var aesIV = [16]byte([]byte(cephAESIV))

// SigBlock is what a cephx message signature covers: the header's CRC,
// the footer's payload CRCs, the payload lengths and the sequence number.
type SigBlock struct {
	HeaderCRC uint32
	FrontCRC  uint32
	FrontLen  uint32
	MiddleCRC uint32
	MiddleLen uint32
	DataCRC   uint32
	DataLen   uint32
	Seq       uint64
}

// sigBlock returns the SigBlock of a message with header h and footer f.
func sigBlock(h *Header, f *Footer) SigBlock {
	return SigBlock{
		HeaderCRC: h.CRC, FrontCRC: f.FrontCRC, FrontLen: h.FrontLen,
		MiddleCRC: f.MiddleCRC, MiddleLen: h.MiddleLen,
		DataCRC: f.DataCRC, DataLen: h.DataLen, Seq: h.Seq,
	}
}

// Signature computes cephx's msgr1 message signature
// (CephxSessionHandler::_calc_signature) with the session key's secret
// (its first 16 bytes are the AES-128 key). With cephxV2 (CEPHX_V2
// negotiated): AES-CBC of the 32-byte block {header crc, front crc, front
// len, middle crc, middle len, data crc, data len, low 32 bits of seq}
// with PKCS#7 padding, and the XOR of the first four little-endian 64-bit
// words of the ciphertext. Otherwise (legacy): AES-CBC of {u8 1,
// AUTH_ENC_MAGIC, le32 16, header crc, front crc, middle crc, data crc}
// and its first 64-bit word.
func Signature(key []byte, s SigBlock, cephxV2 bool) (uint64, error) {
	sg, err := newSigner(key)
	if err != nil {
		return 0, err
	}
	return sg.sign(s, cephxV2), nil
}

// signer signs with one session key; its AES block is made once.
type signer struct{ blk cipher.Block }

func newSigner(key []byte) (*signer, error) {
	if len(key) < 16 {
		return nil, errorf(ErrBadSessionKey, 0, "signature key of %d bytes, want at least 16", len(key))
	}
	blk, err := aes.NewCipher(key[:16])
	if err != nil {
		return nil, wrapf(ErrBadSessionKey, err, 0, "signature key")
	}
	return &signer{blk: blk}, nil
}

// sign is Signature without allocating: the plaintext is at most 32
// bytes, so with its padding it is three blocks (v2) or two (legacy), CBC
// chained by hand.
func (sg *signer) sign(s SigBlock, cephxV2 bool) uint64 {
	le := binary.LittleEndian
	var buf [48]byte
	n := 0
	if cephxV2 {
		for i, v := range [8]uint32{s.HeaderCRC, s.FrontCRC, s.FrontLen, s.MiddleCRC, s.MiddleLen, s.DataCRC, s.DataLen, uint32(s.Seq)} {
			le.PutUint32(buf[4*i:], v)
		}
		n = 32
	} else {
		buf[0] = 1
		le.PutUint64(buf[1:], authEncMagic)
		le.PutUint32(buf[9:], 16)
		for i, v := range [4]uint32{s.HeaderCRC, s.FrontCRC, s.MiddleCRC, s.DataCRC} {
			le.PutUint32(buf[13+4*i:], v)
		}
		n = 29
	}
	// PKCS#7: always 1..16 bytes of padding.
	pad := 16 - n%16
	for i := n; i < n+pad; i++ {
		buf[i] = byte(pad)
	}
	n += pad
	prev := aesIV[:]
	for off := 0; off < n; off += 16 {
		b := buf[off : off+16]
		for i := range b {
			b[i] ^= prev[i]
		}
		sg.blk.Encrypt(b, b)
		prev = b
	}
	if !cephxV2 {
		return le.Uint64(buf[:])
	}
	return le.Uint64(buf[:]) ^ le.Uint64(buf[8:]) ^ le.Uint64(buf[16:]) ^ le.Uint64(buf[24:])
}
