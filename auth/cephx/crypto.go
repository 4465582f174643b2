package cephx

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/ferrymsg/ferry/denc"
)

// Crypto key types (CEPH_CRYPTO_*). Wire constants; append only.
const (
	CryptoNone uint16 = 0 // CEPH_CRYPTO_NONE: an empty key
	CryptoAES  uint16 = 1 // CEPH_CRYPTO_AES: AES-128-CBC
)

// Wire constants of cephx's symmetric crypto (auth/Crypto.cc,
// CephxProtocol.h). Append only.
const (
	// AESIV is CEPH_AES_IV, the fixed IV of every AES-CBC operation.
	AESIV = "cephsageyudagreg"
	// EncMagic is AUTH_ENC_MAGIC, which follows the version byte of every
	// encrypted structure.
	EncMagic uint64 = 0xff009cad8826aa55
	// encStructV is the version byte of the encryption envelope.
	encStructV = 1
	// envelopeLen is the envelope's length before the structure.
	envelopeLen = 1 + 8
	// SecretLen is the length of an AES secret (validate_secret's
	// minimum; AES-128 uses the first 16 bytes).
	SecretLen = 16
	// maxKeySecret bounds a decoded key's secret (its u16 length allows
	// 65535; no real key is longer than 32).
	maxKeySecret = 1024
)

// Key is Ceph's CryptoKey: a crypto type, the time the key was created
// and the secret. The zero Key is an empty CEPH_CRYPTO_NONE key, which
// encrypts nothing. A Key is a value; its methods are safe for
// concurrent use.
type Key struct {
	Type    uint16    // CryptoAES (or CryptoNone for the empty key)
	Created time.Time // creation time, kept for the encoding
	Secret  []byte    // the secret; 16 bytes for an AES key
}

// GenerateKey returns a new AES key with a random secret from r, created
// at now (KeyServer::generate_secret).
func GenerateKey(r io.Reader, now time.Time) (Key, error) {
	s := make([]byte, SecretLen)
	if _, err := io.ReadFull(r, s); err != nil {
		return Key{}, fmt.Errorf("cephx: generating key: %w", err)
	}
	return Key{Type: CryptoAES, Created: now, Secret: s}, nil
}

// ParseKey decodes a key as it appears in a keyring (`key = ...`): the
// standard base64, with padding, of the CryptoKey encoding.
func ParseKey(s string) (Key, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return Key{}, fmt.Errorf("%w: base64: %v", ErrBadKeyEncoding, err)
	}
	d := denc.NewDecoder(raw)
	k := decodeKey(d)
	if err := d.Err(); err != nil {
		return Key{}, fmt.Errorf("%w: %v", ErrBadKeyEncoding, err)
	}
	if d.Len() != 0 {
		return Key{}, fmt.Errorf("%w: %d bytes after the key", ErrBadKeyEncoding, d.Len())
	}
	if k.Type != CryptoAES {
		return Key{}, fmt.Errorf("%w: key type %d is not AES", ErrBadKeyEncoding, k.Type)
	}
	return k, nil
}

// String returns the key's keyring form (base64 of its encoding).
func (k Key) String() string {
	return base64.StdEncoding.EncodeToString(AppendKey(nil, k))
}

// IsZero reports whether k holds no secret.
func (k Key) IsZero() bool { return len(k.Secret) == 0 }

// Equal reports whether k and o have the same type and secret.
func (k Key) Equal(o Key) bool {
	return k.Type == o.Type && hmac.Equal(k.Secret, o.Secret)
}

// AppendKey appends the CryptoKey encoding: u16 type, utime_t created,
// u16 secret length, the secret.
func AppendKey(b []byte, k Key) []byte {
	b = denc.AppendU16(b, k.Type)
	b = appendUTime(b, k.Created)
	b = denc.AppendU16(b, uint16(len(k.Secret)))
	return append(b, k.Secret...)
}

// decodeKey reads a CryptoKey. As CryptoKey::decode does, an empty secret
// is accepted for any type, a non-empty one only for AES with at least 16
// bytes. The secret is copied.
func decodeKey(d *denc.Decoder) Key {
	var k Key
	k.Type = d.U16()
	k.Created = decodeUTime(d)
	n := int(d.U16())
	if d.Err() != nil {
		return Key{}
	}
	if n > maxKeySecret {
		d.Fail("crypto key", denc.ErrTooLarge)
		return Key{}
	}
	s := d.Raw(n)
	if d.Err() != nil {
		return Key{}
	}
	if n == 0 {
		return k
	}
	if k.Type != CryptoAES || n < SecretLen {
		d.Fail("crypto key", denc.ErrMalformed)
		return Key{}
	}
	k.Secret = append([]byte(nil), s...)
	return k
}

// block returns the AES cipher of k.
func (k Key) block() (cipher.Block, error) {
	if k.Type != CryptoAES || len(k.Secret) < SecretLen {
		return nil, ErrNoKey
	}
	return aes.NewCipher(k.Secret[:SecretLen])
}

// Encrypt returns the AES-128-CBC encryption of plain under k with the
// IV AESIV and PKCS#7 padding (always 1 to 16 bytes), as Ceph's
// CryptoAESKeyHandler::encrypt does: 16*(len/16+1) bytes.
func (k Key) Encrypt(plain []byte) ([]byte, error) {
	return k.appendEncrypt(nil, plain)
}

func (k Key) appendEncrypt(dst, plain []byte) ([]byte, error) {
	blk, err := k.block()
	if err != nil {
		return nil, err
	}
	pad := aes.BlockSize - len(plain)%aes.BlockSize
	n := len(plain) + pad
	start := len(dst)
	dst = append(dst, plain...)
	for range pad {
		dst = append(dst, byte(pad))
	}
	out := dst[start : start+n]
	cipher.NewCBCEncrypter(blk, []byte(AESIV)).CryptBlocks(out, out)
	return dst, nil
}

// Decrypt reverses Encrypt. Ceph strips min(last byte, 16) bytes without
// looking at the others; Decrypt also requires every padding byte to
// equal the padding length (Ceph never writes anything else), so most
// wrong keys fail here with ErrDecrypt rather than later.
func (k Key) Decrypt(ct []byte) ([]byte, error) {
	blk, err := k.block()
	if err != nil {
		return nil, err
	}
	if len(ct) == 0 || len(ct)%aes.BlockSize != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a whole number of blocks", ErrDecrypt, len(ct))
	}
	out := make([]byte, len(ct))
	cipher.NewCBCDecrypter(blk, []byte(AESIV)).CryptBlocks(out, ct)
	pad := int(out[len(out)-1])
	if pad < 1 || pad > aes.BlockSize {
		return nil, fmt.Errorf("%w: bad padding", ErrDecrypt)
	}
	for _, c := range out[len(out)-pad:] {
		if int(c) != pad {
			return nil, fmt.Errorf("%w: bad padding", ErrDecrypt)
		}
	}
	return out[:len(out)-pad], nil
}

// Seal returns the "enc_bl" form of body under k: the ciphertext of the
// envelope (u8 1, u64 EncMagic) followed by body, with no length prefix
// (encode_encrypt_enc_bl). It is used for the opaque ticket of a
// CephXTicketBlob and for the authorizer challenge.
func (k Key) Seal(body []byte) ([]byte, error) {
	plain := make([]byte, 0, envelopeLen+len(body))
	plain = append(plain, encStructV)
	plain = denc.AppendU64(plain, EncMagic)
	plain = append(plain, body...)
	return k.Encrypt(plain)
}

// Open reverses Seal: it decrypts ct and checks the envelope's version
// byte and magic (decode_decrypt_enc_bl), returning the structure's
// bytes. A wrong key or tampered ciphertext gives ErrDecrypt or
// ErrBadMagic.
func (k Key) Open(ct []byte) ([]byte, error) {
	plain, err := k.Decrypt(ct)
	if err != nil {
		return nil, err
	}
	if len(plain) < envelopeLen {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the envelope", ErrBadMagic, len(plain))
	}
	if plain[0] != encStructV {
		return nil, fmt.Errorf("%w: envelope version %d", ErrBadMagic, plain[0])
	}
	if m := binary.LittleEndian.Uint64(plain[1:]); m != EncMagic {
		return nil, fmt.Errorf("%w: %#x", ErrBadMagic, m)
	}
	return plain[envelopeLen:], nil
}

// AppendEncrypted appends the "encode_encrypt" form of body under k: a
// u32 ciphertext length, then Seal(body). This is the form of every
// encrypted cephx structure except the two that Seal names.
func AppendEncrypted(b []byte, k Key, body []byte) ([]byte, error) {
	ct, err := k.Seal(body)
	if err != nil {
		return nil, err
	}
	return denc.AppendBytes(b, ct), nil
}

// DecodeEncrypted reads the "encode_encrypt" form from d (a u32 length
// and the ciphertext) and opens it with k, returning the structure's
// bytes. Decoding errors are recorded in d; decryption errors are
// returned.
func DecodeEncrypted(d *denc.Decoder, k Key) ([]byte, error) {
	ct := d.Bytes()
	if err := d.Err(); err != nil {
		return nil, err
	}
	return k.Open(ct)
}

// xorWords returns the XOR of the little-endian u64 words of p that are
// complete (a trailing partial word is ignored).
func xorWords(p []byte) uint64 {
	var x uint64
	for len(p) >= 8 {
		x ^= binary.LittleEndian.Uint64(p)
		p = p[8:]
	}
	return x
}

// ChallengeProof returns the client's proof of its key in a mon login
// (cephx_calc_client_server_challenge): the XOR of the complete u64
// words of encode_encrypt(secret, {server_challenge, client_challenge}),
// whose u32 length prefix is part of the first word.
func ChallengeProof(secret Key, serverChallenge, clientChallenge uint64) (uint64, error) {
	var blob [16]byte
	binary.LittleEndian.PutUint64(blob[0:], serverChallenge)
	binary.LittleEndian.PutUint64(blob[8:], clientChallenge)
	enc, err := AppendEncrypted(nil, secret, blob[:])
	if err != nil {
		return 0, err
	}
	return xorWords(enc), nil
}

// AuthSignature returns msgr2's AUTH_SIGNATURE payload: HMAC-SHA256,
// keyed with the raw session key secret, of the transcript (the
// concatenation of the parts given). With no session key (auth none) it
// is 32 zero bytes, as Ceph sends.
func AuthSignature(sessionKey []byte, transcript ...[]byte) [32]byte {
	var sig [32]byte
	if len(sessionKey) == 0 {
		return sig
	}
	h := hmac.New(sha256.New, sessionKey)
	for _, p := range transcript {
		h.Write(p)
	}
	h.Sum(sig[:0])
	return sig
}

// SigBlock is what a msgr1 message signature covers (CephxSessionHandler
// with CEPHX_V2): the header and footer CRCs, the segment lengths and the
// low 32 bits of the header's sequence number.
type SigBlock struct {
	HeaderCRC, FrontCRC, FrontLen uint32 // header crc, front crc and length
	MiddleCRC, MiddleLen          uint32 // middle crc and length
	DataCRC, DataLen              uint32 // data crc and length
	Seq                           uint64 // the header's seq (its low 32 bits are signed)
}

// MessageSignature returns the msgr1 signature of a message with the
// CEPHX_V2 feature negotiated: the 32-byte block of le32 fields (header
// crc, front crc, front length, middle crc, middle length, data crc,
// data length, low 32 bits of seq) is AES-CBC encrypted with PKCS#7
// padding under the session key, and the signature is the XOR of the
// first four u64 words of the 48-byte result.
func MessageSignature(sessionKey Key, s SigBlock) (uint64, error) {
	var blk [32]byte
	for i, v := range [8]uint32{s.HeaderCRC, s.FrontCRC, s.FrontLen, s.MiddleCRC, s.MiddleLen, s.DataCRC, s.DataLen, uint32(s.Seq)} {
		binary.LittleEndian.PutUint32(blk[4*i:], v)
	}
	ct, err := sessionKey.Encrypt(blk[:])
	if err != nil {
		return 0, err
	}
	return xorWords(ct[:32]), nil
}

// LegacyMessageSignature returns the msgr1 signature used without
// CEPHX_V2: the first u64 of the encryption of the 29-byte block u8 1,
// le64 EncMagic, le32 16, and the le32 header, front, middle and data
// CRCs. (Read from Ceph's source, not verified against a daemon: every
// Pacific daemon requires CEPHX_V2.)
func LegacyMessageSignature(sessionKey Key, headerCRC, frontCRC, middleCRC, dataCRC uint32) (uint64, error) {
	b := make([]byte, 0, 29)
	b = append(b, encStructV)
	b = denc.AppendU64(b, EncMagic)
	b = denc.AppendU32(b, 16)
	b = denc.AppendU32(b, headerCRC)
	b = denc.AppendU32(b, frontCRC)
	b = denc.AppendU32(b, middleCRC)
	b = denc.AppendU32(b, dataCRC)
	ct, err := sessionKey.Encrypt(b)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(ct), nil
}

// appendUTime appends a utime_t: u32 seconds, u32 nanoseconds. The zero
// time encodes as 0.0.
func appendUTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return denc.AppendU64(b, 0)
	}
	b = denc.AppendU32(b, uint32(t.Unix()))
	return denc.AppendU32(b, uint32(t.Nanosecond()))
}

// decodeUTime reads a utime_t; 0.0 decodes as the zero time. Ceph writes
// nanoseconds below 1e9; larger ones are taken modulo 1e9, as
// decodeDuration does, rather than carried into the seconds, where they
// could overflow the u32 that appendUTime writes back.
func decodeUTime(d *denc.Decoder) time.Time {
	s, ns := d.U32(), d.U32()
	if s == 0 && ns == 0 {
		return time.Time{}
	}
	return time.Unix(int64(s), int64(ns%1e9)).UTC()
}

// appendDuration appends a duration as a utime_t (a ticket's validity).
func appendDuration(b []byte, v time.Duration) []byte {
	if v < 0 {
		v = 0
	}
	b = denc.AppendU32(b, uint32(v/time.Second))
	return denc.AppendU32(b, uint32(v%time.Second))
}

// decodeDuration reads a utime_t used as a duration.
func decodeDuration(d *denc.Decoder) time.Duration {
	s, ns := d.U32(), d.U32()
	return time.Duration(s)*time.Second + time.Duration(ns%1e9)
}
