package msgr1

import "testing"

// TestSignatureVector reproduces the msgr1 signature vector of
// ceph-auth.md §5.5 / §7 (V6).
func TestSignatureVector(t *testing.T) {
	key := []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	s := SigBlock{HeaderCRC: 0x11111111, FrontCRC: 0x22222222, FrontLen: 5, Seq: 7}
	sig, err := Signature(key, s, true)
	if err != nil {
		t.Fatal(err)
	}
	if sig != 0xecf381838336918c {
		t.Fatalf("signature %#x, want 0xecf381838336918c", sig)
	}
	// Every field is covered.
	for i, m := range []func(*SigBlock){
		func(s *SigBlock) { s.HeaderCRC++ }, func(s *SigBlock) { s.FrontCRC++ },
		func(s *SigBlock) { s.FrontLen++ }, func(s *SigBlock) { s.MiddleCRC++ },
		func(s *SigBlock) { s.MiddleLen++ }, func(s *SigBlock) { s.DataCRC++ },
		func(s *SigBlock) { s.DataLen++ }, func(s *SigBlock) { s.Seq++ },
	} {
		s2 := s
		m(&s2)
		if g, _ := Signature(key, s2, true); g == sig {
			t.Errorf("field %d not covered", i)
		}
	}
	legacy, err := Signature(key, s, false)
	if err != nil || legacy == sig || legacy == 0 {
		t.Fatalf("legacy signature %#x %v", legacy, err)
	}
	if _, err := Signature(key[:15], s, true); err == nil {
		t.Fatal("short key accepted")
	}
}
