package cephx

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/denc"
	"github.com/ferrymsg/ferry/msg"
)

// Vectors of ../shared/ref/ceph-auth.md §1.1, §1.2, §1.4, §2, §5.5, §7,
// each checked there against Ceph 16.2.15 daemons.

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testKey(t testing.TB) Key {
	return Key{Type: CryptoAES, Secret: unhex(t, "000102030405060708090a0b0c0d0e0f")}
}

// §1.1: the keyring key of ceph-authtool's add-key.t.
func TestVectorKeyringKey(t *testing.T) {
	const s = "AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ=="
	k, err := ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	if k.Type != CryptoAES {
		t.Errorf("type %d", k.Type)
	}
	if want := time.Unix(1294790410, 480731000).UTC(); !k.Created.Equal(want) {
		t.Errorf("created %v, want %v", k.Created, want)
	}
	if got := hex.EncodeToString(k.Secret); got != "d1281275bb3c22426bc6ba03789e92c1" {
		t.Errorf("secret %s", got)
	}
	if enc := AppendKey(nil, k); len(enc) != 28 {
		t.Errorf("encoding is %d bytes, want 28", len(enc))
	}
	if got := k.String(); got != s {
		t.Errorf("re-encoded as %s", got)
	}
}

// §1.2: src/test/crypto.cc.
func TestVectorAESCBC(t *testing.T) {
	k := testKey(t)
	plain := unhex(t, "00112233445566778899aabbccddeeff")
	ct, err := k.Encrypt(plain)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(ct); got != "b38f5bc9354cf8c61315666f37d7793a11907be9d83c3570587b979b03d2a501" {
		t.Fatalf("ciphertext %s", got)
	}
	back, err := k.Decrypt(ct)
	if err != nil || !bytes.Equal(back, plain) {
		t.Fatalf("decrypt: %x, %v", back, err)
	}
}

// §7 V2: the sealed (enc_bl form: envelope, then the bytes) "hello".
func TestVectorSealRaw(t *testing.T) {
	ct, err := testKey(t).Seal([]byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(ct); got != "00ab8c021189162ef68f7735a6ad9e3c" {
		t.Fatalf("got %s", got)
	}
}

// §1.4 / §7 V1: the mon login proof.
func TestVectorChallengeProof(t *testing.T) {
	k := testKey(t)
	var blob []byte
	blob = append(blob, unhex(t, "0807060504030201")...)
	blob = append(blob, unhex(t, "1817161514131211")...)
	enc, err := AppendEncrypted(nil, k, blob)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(enc); got != "200000007c19a641a749b86101b6faf3208ebe405b06e45ec29a0e047f59dd05f6e00385" {
		t.Fatalf("encode_encrypt %s", got)
	}
	p, err := ChallengeProof(k, 0x0102030405060708, 0x1112131415161718)
	if err != nil {
		t.Fatal(err)
	}
	if p != 0xe965f05925085d65 {
		t.Fatalf("proof %#x", p)
	}
}

// §2 / §7 V7: the AUTH_SIGNATURE HMAC.
func TestVectorAuthSignature(t *testing.T) {
	sig := AuthSignature(testKey(t).Secret, []byte("ceph "), []byte("v2\n"))
	if got := hex.EncodeToString(sig[:]); got != "591f3d32559a8a7ffced12bdcd6f6ae8f9061950b0dd113d95106460d27228aa" {
		t.Fatalf("got %s", got)
	}
	if z := AuthSignature(nil, []byte("x")); z != ([32]byte{}) {
		t.Fatalf("auth none signature %x", z)
	}
}

// §5.5 / §7 V6: the msgr1 CEPHX_V2 message signature.
func TestVectorMessageSignature(t *testing.T) {
	sig, err := MessageSignature(testKey(t), SigBlock{HeaderCRC: 0x11111111, FrontCRC: 0x22222222, FrontLen: 5, Seq: 7})
	if err != nil {
		t.Fatal(err)
	}
	if sig != 0xecf381838336918c {
		t.Fatalf("sig %#x", sig)
	}
}

// The legacy signature is the first word of the sealed bufferlist of the
// four CRCs (§5.5: u8 1, magic, le32 16, the CRCs).
func TestLegacyMessageSignature(t *testing.T) {
	k := testKey(t)
	sig, err := LegacyMessageSignature(k, 1, 2, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	for _, v := range []byte{1, 2, 3, 4} {
		body = append(body, v, 0, 0, 0)
	}
	enc, _ := k.Seal(denc.AppendBytes(nil, body))
	if want := binary.LittleEndian.Uint64(enc); sig != want {
		t.Fatalf("sig %#x, want %#x", sig, want)
	}
}

func TestEnvelope(t *testing.T) {
	k := testKey(t)
	ct, err := k.Seal([]byte("body"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := k.Open(ct)
	if err != nil || string(p) != "body" {
		t.Fatalf("open: %q %v", p, err)
	}
	other := Key{Type: CryptoAES, Secret: bytes.Repeat([]byte{7}, 16)}
	if _, err := other.Open(ct); !errors.Is(err, ErrDecrypt) && !errors.Is(err, ErrBadMagic) {
		t.Fatalf("wrong key: %v", err)
	}
	// A well-padded plaintext without the magic.
	raw, _ := k.Encrypt([]byte("0123456789"))
	if _, err := k.Open(raw); !errors.Is(err, ErrBadMagic) {
		t.Fatalf("no magic: %v", err)
	}
	if _, err := k.Open(ct[:len(ct)-1]); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("truncated: %v", err)
	}
	if _, err := (Key{}).Seal(nil); !errors.Is(err, ErrNoKey) {
		t.Fatalf("zero key: %v", err)
	}
}

func TestServiceMask(t *testing.T) {
	if m := ServiceMask(msg.EntityMon, msg.EntityOSD, msg.EntityMgr, msg.EntityAuth); m != 0x35 {
		t.Fatalf("%#x", m)
	}
}
