package msgr_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/internal/authtest"
	"github.com/ferrymsg/ferry/transport"
)

// twoEntityServer is a stateful (lossless) server that knows the keys of
// client.alice and client.mallory and records, for every message, the
// connection it came on and who that connection said was authenticated.
type seenMsg struct {
	conn *msgr.Conn
	who  string
	tid  uint64
}

func twoEntityServer(t *testing.T, listen string, seen chan<- seenMsg) *msgr.Messenger {
	t.Helper()
	keys := map[string][]byte{"client.alice": []byte("alice's key 0123"), "client.mallory": []byte("mallory's key 01")}
	caps := map[string]string{"client.alice": "allow rw", "client.mallory": "allow r"}
	cfg := msgr.Config{
		Name:       msg.EntityName{Type: msg.EntityOSD, Num: 3},
		Transports: transport.Default,
		Logger:     quietLogger(),
		Auth: msgr.AuthConfig{ServerFor: func(msg.EntityAddr) (auth.Server, error) {
			return &authtest.Server{Keys: keys, Caps: caps, GlobalID: 0}, nil
		}},
	}
	s, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatefulServer())
	s.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		c := m.Conn.(*msgr.Conn)
		seen <- seenMsg{conn: c, who: c.Auth().Name.String(), tid: m.Header.Tid}
		return true
	}))
	if err := s.Bind(listen); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func entityClient(t *testing.T, id string, key []byte, nonce uint32) *msgr.Messenger {
	t.Helper()
	name := msg.AuthName{Type: msg.EntityClient, ID: id}
	cfg := msgr.Config{
		Name:  msg.EntityName{Type: msg.EntityClient, Num: -1},
		Nonce: nonce,
		// Fast retries, so that the two clients' reconnects meet soon.
		InitialBackoff: time.Millisecond,
		MaxBackoff:     20 * time.Millisecond,
		Transports:     transport.Default,
		Logger:         quietLogger(),
		Auth: msgr.AuthConfig{Name: name, ClientFor: func(*msgr.Conn) (auth.Client, error) {
			return &authtest.Client{Name: name, Key: key}, nil
		}},
	}
	m, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.SetDefaultPolicy(msgr.LosslessClient())
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Shutdown)
	return m
}

// TestSessionNotTakenOverByAnotherEntity: a lossless session that
// client.alice authenticated is not handed to a connection authenticated
// as someone else. Mallory, with her own valid key, claims alice's
// address and nonce in CLIENT_IDENT (both are hers to choose, and sent in
// clear in crc mode); the server must not let her socket carry alice's
// session (kept for her while she is away): the *msgr.Conn alice's
// messages arrived on keeps saying alice, mallory's messages do not
// arrive on it, and alice, back, is served on it.
func TestSessionNotTakenOverByAnotherEntity(t *testing.T) {
	t.Run("msgr2", func(t *testing.T) { testSessionNotTakenOver(t, "tcp://127.0.0.1:0") })
	t.Run("msgr1", func(t *testing.T) { testSessionNotTakenOver(t, "v1:127.0.0.1:0") })
}

func testSessionNotTakenOver(t *testing.T, listen string) {
	seen := make(chan seenMsg, 16)
	s := twoEntityServer(t, listen, seen)
	addr := s.ListenAddrs()[0]
	if strings.HasPrefix(listen, "v1:") {
		addr = v1Addr(t, s)
	}
	const nonce = 0x5eed
	next := func(what string) seenMsg {
		t.Helper()
		select {
		case m := <-seen:
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
			return seenMsg{}
		}
	}

	alice := entityClient(t, "alice", []byte("alice's key 0123"), nonce)
	ac, err := alice.ConnectType(addr, msg.EntityOSD)
	if err != nil {
		t.Fatal(err)
	}
	m := msg.New(testType)
	m.Header.Tid = 1
	if err := ac.Send(m); err != nil {
		t.Fatal(err)
	}
	first := next("alice's message")
	if first.who != "client.alice" {
		t.Fatalf("alice's message arrived on a connection authenticated as %q", first.who)
	}
	aliceConn := first.conn
	// Alice goes away; the server keeps her lossless session for her.
	alice.Shutdown()

	mallory := entityClient(t, "mallory", []byte("mallory's key 01"), nonce)
	mc, err := mallory.ConnectType(addr, msg.EntityOSD)
	if err != nil {
		t.Fatal(err)
	}
	m = msg.New(testType)
	m.Header.Tid = 2
	_ = mc.Send(m)
	// Whatever the server does with mallory's connection (refuse it or
	// give her a session of her own), alice's connection must not become
	// hers.
	deadline := time.After(3 * time.Second)
	for done := false; !done; {
		select {
		case got := <-seen:
			if got.conn == aliceConn {
				t.Fatalf("mallory's message (tid %d) arrived on alice's session, which now says it is %q", got.tid, got.who)
			}
			if got.who != "client.mallory" {
				t.Fatalf("mallory's message arrived on a connection authenticated as %q", got.who)
			}
		case <-deadline:
			done = true
		}
	}
	if who := aliceConn.Auth().Name.String(); who != "client.alice" {
		t.Fatalf("alice's session now says it is authenticated as %q", who)
	}
	// Alice comes back (same address, nonce and name) while mallory keeps
	// trying, and is served on her session.
	alice = entityClient(t, "alice", []byte("alice's key 0123"), nonce)
	if ac, err = alice.ConnectType(addr, msg.EntityOSD); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ac.Ready(ctx); err != nil {
		t.Fatalf("alice's connection: %v", err)
	}
	m = msg.New(testType)
	m.Header.Tid = 3
	if err := ac.Send(m); err != nil {
		t.Fatal(err)
	}
	for {
		got := next("alice's second message")
		if got.tid == 3 {
			if got.who != "client.alice" || got.conn != aliceConn {
				t.Fatalf("alice's second message arrived as %q on %p (her session %p)", got.who, got.conn, aliceConn)
			}
			break
		}
		if got.conn == aliceConn {
			t.Fatalf("message tid %d from %q arrived on alice's session", got.tid, got.who)
		}
	}
}
