package msgr1

import "testing"

func TestDecideConnect(t *testing.T) {
	lo, hi := addr("v1:127.0.0.1:6800/1"), addr("v1:127.0.0.1:6801/1")
	ex := func(f func(*SessionState)) SessionState {
		s := SessionState{Exists: true, PeerGlobal: 5, ConnectSeq: 3, PeerAddr: hi, MyAddr: lo}
		f(&s)
		return s
	}
	for _, tc := range []struct {
		name  string
		ex    SessionState
		c     Connect
		want  ConnectAction
		value uint32
	}{
		{"new", SessionState{}, Connect{GlobalSeq: 1}, ConnectOpen, 0},
		{"new-but-resuming", SessionState{}, Connect{GlobalSeq: 1, ConnectSeq: 2}, ConnectReset, 0},
		{"closed", ex(func(s *SessionState) { s.Closed = true }), Connect{GlobalSeq: 9}, ConnectOpen, 0},
		{"replacing", ex(func(s *SessionState) { s.Replacing = true }), Connect{GlobalSeq: 9, ConnectSeq: 4}, ConnectRetryGlobal, 5},
		{"old-global", ex(func(*SessionState) {}), Connect{GlobalSeq: 4, ConnectSeq: 4}, ConnectRetryGlobal, 5},
		{"lossy", ex(func(s *SessionState) { s.Lossy = true }), Connect{GlobalSeq: 6, ConnectSeq: 0}, ConnectReplaceReset, 0},
		{"peer-reset", ex(func(*SessionState) {}), Connect{GlobalSeq: 6, ConnectSeq: 0}, ConnectReplaceReset, 0},
		{"old-attempt", ex(func(*SessionState) {}), Connect{GlobalSeq: 6, ConnectSeq: 2}, ConnectRetrySession, 4},
		{"equal-open", ex(func(s *SessionState) { s.Open = true }), Connect{GlobalSeq: 6, ConnectSeq: 3}, ConnectRetrySession, 4},
		{"equal-open-zero-resetcheck", ex(func(s *SessionState) { s.Open, s.ResetCheck, s.ConnectSeq = true, true, 0 }), Connect{GlobalSeq: 6}, ConnectReplace, 0},
		{"race-peer-lower", ex(func(s *SessionState) { s.PeerAddr, s.MyAddr = lo, hi }), Connect{GlobalSeq: 6, ConnectSeq: 3}, ConnectReplace, 0},
		{"race-peer-higher", ex(func(*SessionState) {}), Connect{GlobalSeq: 6, ConnectSeq: 3}, ConnectWait, 0},
		{"race-we-are-server", ex(func(s *SessionState) { s.Server = true }), Connect{GlobalSeq: 6, ConnectSeq: 3}, ConnectReplace, 0},
		{"reconnect", ex(func(*SessionState) {}), Connect{GlobalSeq: 6, ConnectSeq: 4}, ConnectReplace, 0},
		{"reconnect-we-reset", ex(func(s *SessionState) { s.ResetCheck, s.ConnectSeq = true, 0 }), Connect{GlobalSeq: 6, ConnectSeq: 4}, ConnectReset, 0},
	} {
		a, v := DecideConnect(tc.ex, &tc.c)
		if a != tc.want || v != tc.value {
			t.Errorf("%s: %v %d, want %v %d", tc.name, a, v, tc.want, tc.value)
		}
	}
}

func TestLegacyOrder(t *testing.T) {
	// Ceph compares the in-memory struct: the nonce's little-endian bytes
	// first, so nonce 256 sorts before nonce 1.
	if !legacyLess(addr("v1:127.0.0.1:6800/256"), addr("v1:127.0.0.1:6800/1")) {
		t.Error("nonce bytes")
	}
	if !legacyLess(addr("v1:127.0.0.1:6800/1"), addr("v1:127.0.0.1:6801/1")) || legacyLess(addr("v1:127.0.0.2:1/1"), addr("v1:127.0.0.1:1/1")) {
		t.Error("port/ip order")
	}
	if legacyLess(addr("v1:127.0.0.1:1/0"), addr("v1:127.0.0.1:1/0")) {
		t.Error("irreflexive")
	}
}

func TestLegacyOrderIPv6(t *testing.T) {
	a, b := addr("v1:[::1]:6800/0"), addr("v1:[::2]:6800/0")
	if !legacyLess(a, b) || legacyLess(b, a) {
		t.Error("ipv6 order")
	}
	// AF_INET (2) sorts before AF_INET6 (10).
	if !legacyLess(addr("v1:127.0.0.1:6800/0"), a) {
		t.Error("family order")
	}
}
