package main

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// TestServeCephx: a server with --auth cephx authenticates clients whose
// key its keyring holds, refuses others, and answers the MAuth requests
// of an authenticated session (service tickets) with the same session.
func TestServeCephx(t *testing.T) {
	key, err := cephx.GenerateKey(rand.Reader, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	admin := msg.AuthName{Type: msg.EntityClient, ID: "admin"}
	kr := &cephx.Keyring{Entries: []cephx.KeyringEntry{{Name: admin, Key: key, Caps: map[string]string{"mon": "allow *"}}}}
	path := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(path, kr.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	method, keyring, mode := "cephx", path, "secure"
	sa, err := (&serverAuthFlags{method: &method, keyring: &keyring, mode: &mode}).resolve()
	if err != nil {
		t.Fatal(err)
	}
	mo := defaultMsgrOptions("stateless-server")
	mo.ServerAuth = sa
	srv, err := startServer(serverConfig{Listen: "v2:127.0.0.1:0", Name: defaultIdentity(), ID: "a", FSID: randomFSID(), Logger: quietLog, Msgr: mo})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dial := func(k cephx.Key, modes []uint32) (*msgr.Conn, *cephx.Client, chan *msg.Message, error) {
		cx, err := cephx.NewClient(cephx.ClientConfig{Name: admin, Key: k})
		if err != nil {
			t.Fatal(err)
		}
		ca := &clientAuth{Name: admin, Cephx: true, Key: k, MonModes: modes, cx: cx}
		cfg := msgr.Config{Logger: quietLog}
		ca.configureMsgr(&cfg)
		m, err := msgr.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m.SetDefaultPolicy(msgr.LossyClient())
		replies := make(chan *msg.Message, 4)
		m.AddDispatcherTail(msgr.DispatcherFunc(func(r *msg.Message) bool { replies <- r; return true }))
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Shutdown)
		conn, err := m.ConnectType(srv.Addr(), msg.EntityMon)
		if err != nil {
			t.Fatal(err)
		}
		return conn, cx, replies, conn.Ready(ctx)
	}

	conn, cx, replies, err := dial(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ai := conn.Auth(); ai.Method != auth.MethodCephx || ai.Mode != auth.ConModeSecure || ai.GlobalID == 0 {
		t.Fatalf("session %+v, want cephx in secure mode", ai)
	}
	// Service tickets over the session (MAuth GET_PRINCIPAL_SESSION_KEY).
	p, err := cx.ServiceTicketRequest(cephx.ServiceMask(msg.EntityOSD))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := cx.Ticket(msg.EntityOSD)
	if err := conn.Send((&ceph.Auth{Protocol: auth.MethodCephx, Payload: p}).Marshal()); err != nil {
		t.Fatal(err)
	}
	var rep ceph.AuthReply
	select {
	case r := <-replies:
		if err := rep.Unmarshal(r); err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("no MAuth reply")
	}
	if _, err := cx.HandleMAuthReply(rep.Result, rep.GlobalID, rep.ResultBL); err != nil {
		t.Fatalf("MAuth reply: %v (result %d)", err, rep.Result)
	}
	if after, ok := cx.Ticket(msg.EntityOSD); !ok || string(after.Blob.Blob) == string(before.Blob.Blob) {
		t.Fatal("no fresh OSD ticket from the MAuth reply")
	}

	// The session is forgotten when the connection ends.
	if n := sa.sessionCount(); n != 1 {
		t.Fatalf("%d sessions held for one client", n)
	}
	conn.MarkDown()
	for sa.sessionCount() != 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("%d sessions held after the client left", sa.sessionCount())
		case <-time.After(10 * time.Millisecond):
		}
	}

	// A wrong key, and a mode the server does not accept, are refused.
	other, _ := cephx.GenerateKey(rand.Reader, time.Now())
	if _, _, _, err := dial(other, nil); !errors.Is(err, msgr2.ErrAuthRejected) {
		t.Fatalf("wrong key: %v", err)
	}
	if _, _, _, err := dial(key, []uint32{auth.ConModeCRC}); !errors.Is(err, msgr2.ErrBadAuthMethod) {
		t.Fatalf("crc against a secure-only server: %v", err)
	}
}

func TestServerAuthFlags(t *testing.T) {
	for _, tc := range []struct{ method, keyring, mode string }{
		{"cephx", "", ""},
		{"none", "/some/keyring", ""},
		{"none", "", "secure"},
		{"kerberos", "", ""},
		{"cephx", "/no/such/keyring", ""},
		{"cephx", "/no/such/keyring", "fast"},
	} {
		if _, err := (&serverAuthFlags{method: &tc.method, keyring: &tc.keyring, mode: &tc.mode}).resolve(); err == nil {
			t.Errorf("%+v accepted", tc)
		}
	}
	none, empty := "none", ""
	if sa, err := (&serverAuthFlags{method: &none, keyring: &empty, mode: &empty}).resolve(); sa != nil || err != nil {
		t.Errorf("auth none: %v, %v", sa, err)
	}
}
