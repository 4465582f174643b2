package msgr_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/internal/authtest"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
)

var adminKey = []byte("0123456789abcdef")

// authConfig returns a config that authenticates with the fake
// cephx-like method as client.admin with key, and, as a server, knows
// client.admin's key; modes is every mode list.
func authConfig(key []byte, modes ...uint32) msgr.Config {
	mc := msgr.ModeConfig{Client: modes, MonClient: modes, Service: modes, MonService: modes, Cluster: modes, MonCluster: modes}
	return msgr.Config{Auth: msgr.AuthConfig{
		Modes: mc,
		ClientFor: func(c *msgr.Conn) (auth.Client, error) {
			return &authtest.Client{Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}, Key: key}, nil
		},
		ServerFor: func(msg.EntityAddr) (auth.Server, error) {
			return &authtest.Server{Keys: map[string][]byte{"client.admin": adminKey}, Caps: map[string]string{"client.admin": "allow rw"}, GlobalID: 777}, nil
		},
	}}
}

// Two messengers authenticate with a cephx-like method and exchange
// messages small and large, in crc and in secure mode, over TCP; both
// ends see who authenticated and the mode.
func TestAuthEcho(t *testing.T) {
	for _, mode := range []uint32{auth.ConModeCRC, auth.ConModeSecure} {
		t.Run(fmt.Sprint("mode", mode), func(t *testing.T) {
			var srvConn atomic.Pointer[msgr.Conn]
			scfg := authConfig(adminKey, mode)
			s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", scfg)
			s.AddDispatcherHead(msgr.DispatcherFunc(func(m *msg.Message) bool {
				srvConn.Store(m.Conn.(*msgr.Conn))
				return false
			}))
			c, col := newClient(t, transport.Default, authConfig(adminKey, mode))
			conn, err := c.Connect(s.ListenAddrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range []int{0, 1, 4096, 64 << 10, 1 << 20, 3<<20 + 7} {
				m := msg.New(testType)
				m.Header.Tid = uint64(i + 1)
				m.Front = msg.Buffers{[]byte(fmt.Sprintf("front-%d", i))}
				data := make([]byte, n)
				for j := range data {
					data[j] = byte(j*7 + i)
				}
				if n > 2 {
					m.Data = msg.Buffers{data[:n/3], data[n/3 : 2*n/3], data[2*n/3:]}
				} else if n > 0 {
					m.Data = msg.Buffers{data}
				}
				if err := conn.Send(m); err != nil {
					t.Fatal(err)
				}
				r := recv(t, col.ch)
				if r.Header.Tid != uint64(i+1) || string(r.Front.Bytes()) != fmt.Sprintf("front-%d", i) || !bytes.Equal(r.Data.Bytes(), data) && n > 0 {
					t.Fatalf("size %d: reply tid %d front %q data %d bytes", n, r.Header.Tid, r.Front.Bytes(), r.Data.Len())
				}
			}
			ca := conn.Auth()
			if ca.Mode != mode || ca.Method != auth.MethodCephx || ca.GlobalID != 777 || ca.Name.String() != "client.admin" {
				t.Fatalf("client's auth info %+v", ca)
			}
			sa := srvConn.Load().Auth()
			if sa.Mode != mode || sa.Name.String() != "client.admin" || sa.GlobalID != 777 || string(sa.Caps) != "allow rw" || sa.AllowAll {
				t.Fatalf("server's auth info %+v", sa)
			}
			if got := srvConn.Load().PeerName(); got.Num != 777 {
				t.Fatalf("server sees peer %v", got)
			}
		})
	}
}

// The zero config still runs auth none in crc mode, and says so.
func TestAuthNoneDefault(t *testing.T) {
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", msgr.Config{})
	c, col := newClient(t, transport.Default, msgr.Config{})
	conn, _ := c.Connect(s.ListenAddrs()[0])
	if err := conn.Send(msg.New(testType)); err != nil {
		t.Fatal(err)
	}
	recv(t, col.ch)
	if a := conn.Auth(); a.Method != auth.MethodNone || a.Mode != auth.ConModeCRC || a.Name.String() != "client.admin" {
		t.Fatalf("auth info %+v", a)
	}
	// A cephx-only server refuses it, saying what it allows.
	s2 := echoServer(t, transport.Default, "tcp://127.0.0.1:0", authConfig(adminKey))
	conn2, _ := c.Connect(s2.ListenAddrs()[0])
	err := readyErr(t, conn2)
	var ae *msgr2.AuthError
	if !errors.As(err, &ae) || !errors.Is(err, msgr2.ErrBadAuthMethod) || ae.Result != -95 || len(ae.AllowedMethods) != 1 || ae.AllowedMethods[0] != auth.MethodCephx {
		t.Fatalf("auth none against cephx: %v", err)
	}
}

func readyErr(t *testing.T, c *msgr.Conn) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Ready(ctx)
	if err == nil {
		t.Fatal("connection came up")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("connection neither came up nor failed")
	}
	return err
}

// A wrong key and a mode the server refuses each fail the connection
// with a typed error that says why; the server keeps serving others.
func TestAuthRefusedMessenger(t *testing.T) {
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", authConfig(adminKey, auth.ConModeCRC))
	bad, _ := newClient(t, transport.Default, authConfig([]byte("not the right key")))
	err := readyErr(t, mustConnect(t, bad, s.ListenAddrs()[0]))
	var ae *msgr2.AuthError
	if !errors.As(err, &ae) || ae.Result != -13 || !errors.Is(err, msgr2.ErrAuthRejected) || !strings.Contains(err.Error(), "EACCES") {
		t.Fatalf("wrong key: %v", err)
	}
	sec, _ := newClient(t, transport.Default, authConfig(adminKey, auth.ConModeSecure))
	err = readyErr(t, mustConnect(t, sec, s.ListenAddrs()[0]))
	if !errors.As(err, &ae) || ae.Result != -95 || !errors.Is(err, msgr2.ErrBadAuthMethod) || len(ae.AllowedModes) != 1 {
		t.Fatalf("refused mode: %v", err)
	}
	good, col := newClient(t, transport.Default, authConfig(adminKey, auth.ConModeCRC))
	if err := mustConnect(t, good, s.ListenAddrs()[0]).Send(msg.New(testType)); err != nil {
		t.Fatal(err)
	}
	recv(t, col.ch)
}

func mustConnect(t *testing.T, m *msgr.Messenger, addr string) *msgr.Conn {
	t.Helper()
	c, err := m.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A lossless session in secure mode survives resets: each socket starts
// its nonces over, and every message arrives once, in order.
func TestSecureLosslessResets(t *testing.T) {
	netw := inproc.NewNetwork()
	reg := transport.NewRegistry(netw)
	cfg := authConfig(adminKey, auth.ConModeSecure)
	cfg.InitialBackoff, cfg.MaxBackoff = time.Millisecond, 20*time.Millisecond
	_, _, conn, atSrv, atCli := losslessPair(t, reg, "inproc://osd1", cfg, cfg)
	const n = 2000
	stop := make(chan struct{})
	defer close(stop)
	var resets atomic.Int64
	go func() {
		last := int64(-1)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(200+rand.IntN(1000)) * time.Microsecond):
			}
			if got := atSrv.got.Load(); got > last+int64(rand.IntN(100)) {
				if netw.Reset("osd1") > 0 {
					resets.Add(1)
					last = got
				}
			}
		}
	}()
	for i := uint64(0); i < n; i++ {
		if i%100 == 0 {
			waitFor(t, "a reset", 30*time.Second, func() bool { return resets.Load() >= int64(i/200) })
		}
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
	if resets.Load() < 5 || conn.Reconnects() == 0 {
		t.Fatalf("only %d resets, %d reconnects", resets.Load(), conn.Reconnects())
	}
	if a := conn.Auth(); a.Mode != auth.ConModeSecure {
		t.Fatalf("mode %d", a.Mode)
	}
}

// recordingHandler keeps the log records' messages and errors.
type recordingHandler struct {
	mu   sync.Mutex
	logs []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.Key + "=" + a.Value.String(); return true })
	h.mu.Lock()
	h.logs = append(h.logs, s)
	h.mu.Unlock()
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }
func (h *recordingHandler) find(sub string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.logs {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// flipProxy forwards TCP connections to target, flipping one bit of the
// client's stream at byte offset at (once per connection, if set).
func flipProxy(t *testing.T, target string, at func() int64) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			a, err := l.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				a.Close()
				continue
			}
			off := at()
			go func() { io.Copy(a, b); a.Close() }()
			go func() {
				defer b.Close()
				buf := make([]byte, 32<<10)
				var pos int64
				for {
					n, err := a.Read(buf)
					if n > 0 {
						if off >= pos && off < pos+int64(n) {
							buf[off-pos] ^= 0x10
						}
						pos += int64(n)
						if _, werr := b.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// A ciphertext bit flipped on the wire after the handshake closes that
// connection with ErrDecrypt; the server goes on serving other peers.
func TestSecureTamperedStream(t *testing.T) {
	h := &recordingHandler{}
	scfg := authConfig(adminKey, auth.ConModeSecure)
	scfg.Logger = slog.New(h)
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", scfg)
	target := strings.TrimPrefix(s.ListenAddrs()[0], "tcp://")
	var first atomic.Bool
	proxy := flipProxy(t, target, func() int64 {
		if first.CompareAndSwap(false, true) {
			return 5000 // inside the first message's data, past the handshake
		}
		return -1
	})
	c, col := newClient(t, transport.Default, authConfig(adminKey, auth.ConModeSecure))
	conn := mustConnect(t, c, "tcp://"+proxy)
	m := msg.New(testType)
	m.Data = msg.Buffers{make([]byte, 20000)}
	if err := conn.Send(m); err != nil {
		t.Fatal(err)
	}
	select {
	case <-col.ch:
		t.Fatal("a tampered message was delivered")
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the tampered connection stayed up")
	}
	waitFor(t, "the server's log of the decryption failure", 5*time.Second, func() bool { return h.find("does not decrypt") })
	// Another client through the same proxy (no more flips) is served.
	c2, col2 := newClient(t, transport.Default, authConfig(adminKey, auth.ConModeSecure))
	if err := mustConnect(t, c2, "tcp://"+proxy).Send(msg.New(testType)); err != nil {
		t.Fatal(err)
	}
	recv(t, col2.ch)
}

// Two ferry messengers with the real cephx: a client logs in to a
// mon-like messenger (its key server), then presents the OSD ticket it got
// to an OSD-like messenger (a verifier with the static service key), in
// crc and secure mode.
func TestCephxMessengers(t *testing.T) {
	ring, err := cephx.ParseKeyring([]byte("[client.admin]\n\tkey = AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==\n\tcaps mon = \"allow *\"\n\tcaps osd = \"allow rw\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	entry, _ := ring.Lookup(msg.AuthName{Type: msg.EntityClient, ID: "admin"})
	osdKey, _ := cephx.GenerateKey(crand.Reader, time.Now())
	ks, err := cephx.NewKeyServer(cephx.KeyServerConfig{Keyring: ring, StaticServiceKeys: map[msg.EntityType]cephx.Key{msg.EntityOSD: osdKey}})
	if err != nil {
		t.Fatal(err)
	}
	ver, err := cephx.NewVerifier(cephx.VerifierConfig{Service: msg.EntityOSD, StaticKey: osdKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []uint32{auth.ConModeCRC, auth.ConModeSecure} {
		t.Run(fmt.Sprint("mode", mode), func(t *testing.T) {
			modes := msgr.ModeConfig{Client: []uint32{mode}, MonClient: []uint32{mode}}
			mon := echoServerNamed(t, msg.EntityName{Type: msg.EntityMon}, msgr.Config{Auth: msgr.AuthConfig{
				ServerFor: func(msg.EntityAddr) (auth.Server, error) { return ks.Handler(), nil },
			}})
			osd := echoServerNamed(t, msg.EntityName{Type: msg.EntityOSD, Num: 3}, msgr.Config{Auth: msgr.AuthConfig{
				ServerFor: func(msg.EntityAddr) (auth.Server, error) { return ver.Handler(), nil },
			}})
			cl, err := cephx.NewClient(cephx.ClientConfig{Name: entry.Name, Key: entry.Key})
			if err != nil {
				t.Fatal(err)
			}
			c, col := newClient(t, transport.Default, msgr.Config{Auth: msgr.AuthConfig{
				Name:      entry.Name,
				Methods:   []uint32{auth.MethodCephx},
				Modes:     modes,
				ClientFor: func(*msgr.Conn) (auth.Client, error) { return cl.Handler(), nil },
			}})
			for _, srv := range []*msgr.Messenger{mon, osd} {
				conn := mustConnect(t, c, srv.ListenAddrs()[0])
				m := msg.New(testType)
				m.Data = msg.Buffers{bytes.Repeat([]byte("x"), 1<<20)}
				if err := conn.Send(m); err != nil {
					t.Fatal(err)
				}
				r := recv(t, col.ch)
				if r.Data.Len() != 1<<20 {
					t.Fatalf("echo of %d bytes", r.Data.Len())
				}
				a := conn.Auth()
				if a.Mode != mode || a.Method != auth.MethodCephx || a.GlobalID != cl.GlobalID() || a.GlobalID == 0 {
					t.Fatalf("%v: auth %+v (global id %d)", srv.Name(), a, cl.GlobalID())
				}
			}
		})
	}
}

func echoServerNamed(t *testing.T, name msg.EntityName, cfg msgr.Config) *msgr.Messenger {
	t.Helper()
	cfg.Transports = transport.Default
	cfg.Logger = quietLogger()
	cfg.Name = name
	s, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.SetDefaultPolicy(msgr.StatelessServer())
	s.AddDispatcherTail(msgr.DispatcherFunc(func(m *msg.Message) bool {
		r := msg.New(m.Header.Type)
		r.Data = m.Data
		_ = m.Conn.Send(r)
		return true
	}))
	if err := s.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// TestConnectTypeBeforeHandshake: the type given to ConnectType is the
// connection's (and its policy's) before the handshake starts, so
// Auth.ClientFor sees it (it was set after the connection's goroutine
// started, and ClientFor sometimes saw type 0: a mon client that logs in
// with MAuth then offered cephx to its mon).
func TestConnectTypeBeforeHandshake(t *testing.T) {
	s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", authConfig(adminKey))
	ccfg := authConfig(adminKey)
	seen := make(chan msg.EntityType, 64)
	inner := ccfg.Auth.ClientFor
	ccfg.Auth.ClientFor = func(c *msgr.Conn) (auth.Client, error) {
		seen <- c.PeerType()
		return inner(c)
	}
	c, _ := newClient(t, transport.Default, ccfg)
	c.SetPolicy(msg.EntityOSD, msgr.LossyClient())
	for i := 0; i < 32; i++ {
		conn, err := c.ConnectType(s.ListenAddrs()[0], msg.EntityOSD)
		if err != nil {
			t.Fatal(err)
		}
		if got := <-seen; got != msg.EntityOSD {
			t.Fatalf("attempt %d: ClientFor saw peer type %v, want osd", i, got)
		}
		if !conn.Policy().Lossy {
			t.Fatalf("attempt %d: policy %+v, want the osd policy", i, conn.Policy())
		}
		conn.MarkDown()
	}
}
