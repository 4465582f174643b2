package msgr_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr1"
	"github.com/ferrymsg/ferry/transport"
)

// v1Addr returns the msgr1 address m listens on.
func v1Addr(t *testing.T, m *msgr.Messenger) string {
	t.Helper()
	for _, a := range m.Addrs() {
		if a.Type == msg.AddrLegacy {
			return a.String()
		}
	}
	t.Fatalf("no v1 address in %v", m.Addrs())
	return ""
}

// TestV1Echo: a client connects to a "v1:" listener; messages with small
// and large data (handed to writev) go both ways over msgr1.
func TestV1Echo(t *testing.T) {
	srv := echoServer(t, transport.Default, "v1:127.0.0.1:0", msgr.Config{})
	defer srv.Shutdown()
	if a := v1Addr(t, srv); a == "" {
		t.Fatal("no address")
	}
	cli, col := newClient(t, transport.Default, msgr.Config{})
	defer cli.Shutdown()
	conn, err := cli.ConnectType(v1Addr(t, srv), msg.EntityOSD)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := conn.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if pa := conn.PeerAddrs(); len(pa) != 1 || pa[0].Type != msg.AddrLegacy || pa[0].String() != v1Addr(t, srv) {
		t.Fatalf("peer addrs %v", pa)
	}
	if conn.PeerType() != msg.EntityOSD {
		t.Fatalf("peer type %v", conn.PeerType())
	}
	for i, size := range []int{0, 10, 100 << 10, 1 << 20} {
		m := msg.New(testType)
		m.Header.Tid = uint64(i + 1)
		m.Front = msg.Buffers{[]byte("front")}
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(j * (i + 1))
		}
		if size > 0 {
			m.Data = msg.Buffers{data}
		}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
		r := recv(t, col.ch)
		if r.Header.Tid != uint64(i+1) || string(r.Front.Bytes()) != "front" || !bytes.Equal(r.Data.Bytes(), data) {
			t.Fatalf("echo %d: tid %d front %q data %d bytes", i, r.Header.Tid, r.Front.Bytes(), r.Data.Len())
		}
		if r.Header.Src.Type != msg.EntityOSD || r.Footer.Flags&msg.FooterComplete == 0 {
			t.Fatalf("echo header %+v footer %+v", r.Header, r.Footer)
		}
	}
}

// TestV1LosslessInjectedFailures: a lossless msgr1 session survives
// injected socket failures on both sides: every message arrives exactly
// once, in order, unchanged (connect_seq, the SEQ exchange and replay).
func TestV1LosslessInjectedFailures(t *testing.T) {
	inj := msgr.Config{InitialBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Inject: msgr.Inject{SocketFailures: 200}}
	conn, atSrv, atCli := losslessPairV1(t, inj, inj)
	const n = 3000
	for i := uint64(0); i < n; i++ {
		if err := conn.Send(counterMsg(i, rand.IntN(40000))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all messages and echoes", 60*time.Second, func() bool {
		return atSrv.got.Load() >= n && atCli.got.Load() >= n
	})
	for sender := range atSrv.next {
		atSrv.check(t, sender, n)
	}
	atCli.check(t, "server", n)
	if conn.Reconnects() == 0 {
		t.Fatal("no reconnects: injection did nothing")
	}
	t.Logf("%d reconnects", conn.Reconnects())
}

// TestV1WrongProtocol: a msgr1 client at a msgr2 listener (and the other
// way round) fails with a typed error instead of hanging.
func TestV1WrongProtocol(t *testing.T) {
	for _, tc := range []struct{ listen, prefix string }{{"v2:127.0.0.1:0", "v1:"}, {"v1:127.0.0.1:0", "v2:"}} {
		srv := echoServer(t, transport.Default, tc.listen, msgr.Config{})
		cli, _ := newClient(t, transport.Default, msgr.Config{})
		a := srv.Addrs()[0]
		ea := a
		if tc.prefix == "v1:" {
			ea.Type = msg.AddrLegacy
		} else {
			ea.Type = msg.AddrMsgr2
		}
		conn, err := cli.ConnectType(ea.String(), msg.EntityOSD)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = conn.Ready(ctx)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s client at %s listener: %v", tc.prefix, tc.listen, err)
		}
		cli.Shutdown()
		srv.Shutdown()
	}
}

func TestPickAddr(t *testing.T) {
	v2, v1 := mustAddr(t, "v2:127.0.0.1:3300/0"), mustAddr(t, "v1:127.0.0.1:6789/0")
	anyA := mustAddr(t, "any:127.0.0.1:1/0")
	unbound, _ := newClient(t, transport.Default, msgr.Config{})
	defer unbound.Shutdown()
	for _, tc := range []struct {
		v    msg.AddrVec
		want msg.EntityAddr
		ok   bool
	}{
		{msg.AddrVec{v2, v1}, v2, true},
		{msg.AddrVec{v1, v2}, v1, true},
		{msg.AddrVec{anyA, v1}, v1, true},
		{msg.AddrVec{anyA}, msg.EntityAddr{}, false},
		{nil, msg.EntityAddr{}, false},
	} {
		if got, ok := unbound.PickAddr(tc.v); got != tc.want || ok != tc.ok {
			t.Errorf("unbound PickAddr(%v) = %v %v, want %v %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
	// A messenger bound to a v1 address only ignores the peer's v2 ones.
	s := echoServer(t, transport.Default, "v1:127.0.0.1:0", msgr.Config{})
	defer s.Shutdown()
	if got, ok := s.PickAddr(msg.AddrVec{v2, v1}); !ok || got != v1 {
		t.Errorf("v1-only PickAddr = %v %v", got, ok)
	}
	if _, ok := s.PickAddr(msg.AddrVec{v2}); ok {
		t.Error("v1-only messenger picked a v2 address")
	}
}

func mustAddr(t *testing.T, s string) msg.EntityAddr {
	t.Helper()
	a, err := msg.ParseEntityAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// losslessPairV1 is losslessPair over msgr1: the client connects to the
// server's v1 address as to an OSD.
func losslessPairV1(t *testing.T, scfg, ccfg msgr.Config) (conn *msgr.Conn, atSrv, atCli *seqChecker) {
	t.Helper()
	atSrv, atCli = newSeqChecker(), newSeqChecker()
	scfg.Name = msg.EntityName{Type: msg.EntityOSD, Num: 1}
	scfg.Logger = quietLogger()
	srv, err := msgr.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetDefaultPolicy(msgr.StatefulServer())
	srv.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		atSrv.see(m.Header.Src.String(), counterOf(t, m))
		r := msg.New(testType)
		r.Data = m.Data
		_ = m.Conn.Send(r)
		return true
	}))
	if err := srv.Bind("v1:127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	_ = srv.Start()
	t.Cleanup(srv.Shutdown)
	ccfg.Logger = quietLogger()
	cli, err := msgr.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	cli.SetDefaultPolicy(msgr.LosslessClient())
	cli.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		atCli.see("server", counterOf(t, m))
		return true
	}))
	_ = cli.Start()
	t.Cleanup(cli.Shutdown)
	conn, err = cli.ConnectType(v1Addr(t, srv), msg.EntityOSD)
	if err != nil {
		t.Fatal(err)
	}
	return conn, atSrv, atCli
}

// TestV1Auth: over msgr1 the connect message carries the authorizer of
// the client's auth method, the server's challenge comes back as
// CHALLENGE_AUTHORIZER, and the session key signs the messages; both
// ends see who authenticated. A wrong key is refused (BADAUTHORIZER),
// and the server keeps serving.
func TestV1Auth(t *testing.T) {
	var srvConn atomic.Pointer[msgr.Conn]
	s := echoServer(t, transport.Default, "v1:127.0.0.1:0", authConfig(adminKey))
	s.AddDispatcherHead(msgr.DispatcherFunc(func(m *msg.Message) bool {
		srvConn.Store(m.Conn.(*msgr.Conn))
		return false
	}))
	c, col := newClient(t, transport.Default, authConfig(adminKey))
	conn, err := c.ConnectType(v1Addr(t, s), msg.EntityOSD)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{0, 4096, 1 << 20} {
		m := msg.New(testType)
		m.Header.Tid = uint64(i + 1)
		data := bytes.Repeat([]byte{byte(i + 1)}, n)
		if n > 0 {
			m.Data = msg.Buffers{data}
		}
		if err := conn.Send(m); err != nil {
			t.Fatal(err)
		}
		r := recv(t, col.ch)
		if r.Header.Tid != uint64(i+1) || !bytes.Equal(r.Data.Bytes(), data) && n > 0 {
			t.Fatalf("echo %d", i)
		}
		if r.Footer.Flags&msg.FooterSigned == 0 || r.Footer.Sig == 0 {
			t.Fatalf("echo %d not signed: %+v", i, r.Footer)
		}
	}
	if ca := conn.Auth(); ca.Method != auth.MethodCephx || ca.Name.String() != "client.admin" {
		t.Fatalf("client's auth info %+v", ca)
	}
	if sa := srvConn.Load().Auth(); sa.Name.String() != "client.admin" || sa.GlobalID != 777 || string(sa.Caps) != "allow rw" {
		t.Fatalf("server's auth info %+v", sa)
	}

	// A wrong key.
	bad, _ := newClient(t, transport.Default, authConfig([]byte("fedcba9876543210")))
	bconn, err := bad.ConnectType(v1Addr(t, s), msg.EntityOSD)
	if err != nil {
		t.Fatal(err)
	}
	if err := readyErr(t, bconn); !errors.Is(err, msgr1.ErrBadAuthorizer) {
		t.Fatalf("wrong key: %v", err)
	}
	// The good client still gets answers.
	if err := conn.Send(msg.New(testType)); err != nil {
		t.Fatal(err)
	}
	recv(t, col.ch)
}

// TestV1UnauthenticatedLimit: a mon that requires authentication accepts
// msgr1 clients without an authorizer (they would log in with MAuth),
// but until then only control-sized messages: a larger one closes the
// connection from its header.
func TestV1UnauthenticatedLimit(t *testing.T) {
	scfg := authConfig(adminKey)
	scfg.Name = msg.EntityName{Type: msg.EntityMon}
	scfg.Logger = quietLogger()
	scfg.Limits.MaxControl = 4096
	srv, err := msgr.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetDefaultPolicy(msgr.StatelessServer())
	got := make(chan int, 4)
	srv.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		got <- m.Len()
		return true
	}))
	if err := srv.Bind("v1:127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	_ = srv.Start()
	defer srv.Shutdown()
	cli, _ := newClient(t, transport.Default, msgr.Config{})
	conn, err := cli.ConnectType(v1Addr(t, srv), msg.EntityMon)
	if err != nil {
		t.Fatal(err)
	}
	small := msg.New(testType)
	small.Front = msg.Buffers{make([]byte, 1000)}
	if err := conn.Send(small); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != 1000 {
			t.Fatalf("got %d bytes", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("small message not delivered")
	}
	big := msg.New(testType)
	big.Data = msg.Buffers{make([]byte, 5000)}
	if err := conn.Send(big); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.Done():
	case n := <-got:
		t.Fatalf("a %d-byte message from an unauthenticated peer was delivered", n)
	case <-time.After(10 * time.Second):
		t.Fatal("connection not closed")
	}
}
