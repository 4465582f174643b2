package msgr1

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
)

// cephx's fixed AES-CBC IV (CEPH_AES_IV) and the magic of its encrypted
// envelopes (AUTH_ENC_MAGIC).
const (
	cephAESIV    = "cephsageyudagreg"
	authEncMagic = 0xff009cad8826aa55
)

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
	if len(key) < 16 {
		return 0, fmt.Errorf("msgr1: signature key of %d bytes, want at least 16", len(key))
	}
	blk, err := aes.NewCipher(key[:16])
	if err != nil {
		return 0, err
	}
	le := binary.LittleEndian
	var in []byte
	if cephxV2 {
		in = make([]byte, 0, 48)
		for _, v := range []uint32{s.HeaderCRC, s.FrontCRC, s.FrontLen, s.MiddleCRC, s.MiddleLen, s.DataCRC, s.DataLen, uint32(s.Seq)} {
			in = le.AppendUint32(in, v)
		}
	} else {
		in = make([]byte, 0, 32)
		in = append(in, 1)
		in = le.AppendUint64(in, authEncMagic)
		in = le.AppendUint32(in, 16)
		for _, v := range []uint32{s.HeaderCRC, s.FrontCRC, s.MiddleCRC, s.DataCRC} {
			in = le.AppendUint32(in, v)
		}
	}
	// PKCS#7: always 1..16 bytes of padding.
	pad := 16 - len(in)%16
	for range pad {
		in = append(in, byte(pad))
	}
	out := make([]byte, len(in))
	cipher.NewCBCEncrypter(blk, []byte(cephAESIV)).CryptBlocks(out, in)
	if !cephxV2 {
		return le.Uint64(out), nil
	}
	return le.Uint64(out) ^ le.Uint64(out[8:]) ^ le.Uint64(out[16:]) ^ le.Uint64(out[24:]), nil
}
