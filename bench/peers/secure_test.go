package peers

// The bulk benchmarks' ferry-secure contender (issue 14): a client
// instance on a messenger that authenticates with cephx and accepts
// msgr2 secure mode only, to the server's secure instance
// (secure_server.go). Its OSD ticket comes from a key server in this
// process, sealed with the static service key the server was started
// with (peer.osdKey), as bench/msgrbench's secure contenders get theirs.

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
)

// secure is the ferry-secure client, set up on first use; setting up
// fails unless its connection runs cephx in secure mode.
func (c *bulkClient) secure(tb testing.TB) *altSide {
	return c.sc.get(tb, func() (*altSide, error) {
		if c.p.ferrySecure == "" {
			return nil, errors.New("the server has no secure instance")
		}
		return newSecureSide(c.p.ferrySecure, c.p.osdKey)
	})
}

// newSecureSide starts a client instance on a cephx, secure-mode-only
// messenger, reaches the secure instance at addr (rank 0) for its bulk
// handles and checks the connection's auth method and mode.
func newSecureSide(addr string, osdKey cephx.Key) (_ *altSide, err error) {
	cl, err := osdTicket(osdKey)
	if err != nil {
		return nil, fmt.Errorf("cephx login to the in-process key server: %w", err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := msgr.New(msgr.Config{
		Name:       msg.EntityName{Type: msg.EntityClient, Num: msg.NewID},
		Logger:     log,
		Transports: Transports(),
		Auth: msgr.AuthConfig{
			Name:      cl.Name(),
			Methods:   []uint32{auth.MethodCephx},
			Modes:     msgr.ModeConfig{Client: []uint32{auth.ConModeSecure}},
			ClientFor: func(*msgr.Conn) (auth.Client, error) { return cl.Handler(), nil },
		},
	})
	if err != nil {
		return nil, err
	}
	m.SetDefaultPolicy(msgr.LossyClient()) // as rpc's own messengers
	if err := m.Start(); err != nil {
		m.Shutdown()
		return nil, err
	}
	u := &altSide{buf: make([]byte, BulkMax), m: m, info: &BulkInfo{}}
	defer func() {
		if err != nil {
			if u.fi != nil {
				u.fi.Close()
			}
			m.Shutdown()
		}
	}()
	Pattern(u.buf, seedClient)
	if u.fi, err = rpc.New(rpc.Options{Messenger: m, Logger: log, Bulk: BulkOptionsFromEnv()}); err != nil {
		return nil, err
	}
	if err = u.fi.Group().Add(0, addr); err != nil {
		return nil, err
	}
	if u.fc, err = u.fi.NewContext(rpc.ContextOptions{}); err != nil {
		return nil, err
	}
	if u.local, err = u.fi.NewBulk([][]byte{u.buf}, rpc.BulkRW); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err = u.fc.Call(ctx, rpc.Endpoint{}, OpBulkInfo, nil, u.info); err != nil {
		return nil, fmt.Errorf("bulk info from the secure instance: %w", err)
	}
	return u, checkSecure(m)
}

// checkSecure fails unless m has a connection and every one runs cephx
// in secure mode.
func checkSecure(m *msgr.Messenger) error {
	conns := m.Conns()
	if len(conns) == 0 {
		return errors.New("ferry-secure: no connection")
	}
	for _, cn := range conns {
		if a := cn.Auth(); a.Method != auth.MethodCephx || a.Mode != auth.ConModeSecure {
			return fmt.Errorf("ferry-secure: a connection runs auth method %d mode %d, want cephx (%d) secure (%d)",
				a.Method, a.Mode, auth.MethodCephx, auth.ConModeSecure)
		}
	}
	return nil
}

// benchSecure is benchOp of an n-byte op through the secure client, its
// connections checked again afterwards (transfers may open their own:
// FERRY_BULK_SEPARATE).
func benchSecure(b *testing.B, n int, op rpc.BulkOp) {
	c := getBulk(b)
	u := c.secure(b)
	benchOp(b, n, c.altTransfer(u, op, n))
	if err := checkSecure(u.m); err != nil {
		b.Fatal(err)
	}
}

// osdTicket logs client.bench in to a key server in this process (as to
// a mon, without the network) and returns its cephx state, which holds
// an OSD ticket sealed with osdKey (bench/msgrbench's way).
func osdTicket(osdKey cephx.Key) (*cephx.Client, error) {
	name := msg.AuthName{Type: msg.EntityClient, ID: "bench"}
	key, err := cephx.GenerateKey(crand.Reader, time.Now())
	if err != nil {
		return nil, err
	}
	ring := &cephx.Keyring{}
	ring.Add(cephx.KeyringEntry{Name: name, Key: key, Caps: map[string]string{"mon": "allow *", "osd": "allow *"}})
	ks, err := cephx.NewKeyServer(cephx.KeyServerConfig{Keyring: ring, StaticServiceKeys: map[msg.EntityType]cephx.Key{msg.EntityOSD: osdKey}})
	if err != nil {
		return nil, err
	}
	cl, err := cephx.NewClient(cephx.ClientConfig{Name: name, Key: key})
	if err != nil {
		return nil, err
	}
	h, srv := cl.Handler(), ks.Handler()
	p, err := h.Request(msg.EntityMon)
	for first := true; err == nil; first = false {
		var r auth.Reply
		if r, err = srv.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, first, p); err != nil {
			break
		}
		if r.Done {
			_, err = h.Done(r.Result.GlobalID, auth.ConModeCRC, r.Payload)
			return cl, err
		}
		p, err = h.ReplyMore(r.More)
	}
	return nil, err
}

// checkSecureBulk is TestBulkHarness's check of ferry-secure at n bytes:
// a GET lands the server's bytes, a PUT lands the client's (summed by
// the secure instance, on the connection that put them).
func checkSecureBulk(t *testing.T, ctx context.Context, c *bulkClient, n int, want []byte) {
	t.Helper()
	u := c.secure(t)
	clear(u.buf[:n+1])
	if err := c.altTransfer(u, rpc.BulkGet, n)(); err != nil {
		t.Fatalf("ferry-secure GET of %d bytes: %v", n, err)
	}
	if !bytes.Equal(u.buf[:n], want[:n]) || u.buf[n] != 0 {
		t.Fatalf("ferry-secure GET of %d bytes: wrong bytes", n)
	}
	Pattern(u.buf, seedClient+uint64(n)+7)
	sum := CRC32C(u.buf[:n])
	if err := c.altTransfer(u, rpc.BulkPut, n)(); err != nil {
		t.Fatalf("ferry-secure PUT of %d bytes: %v", n, err)
	}
	var got U32
	if err := u.fc.Call(ctx, c.ep, OpBulkCheck, &BulkCheckIn{Which: BulkCheckDst, N: int64(n)}, &got); err != nil {
		t.Fatal(err)
	}
	if uint32(got) != sum {
		t.Fatalf("ferry-secure PUT of %d bytes: server sum %08x, want %08x", n, uint32(got), sum)
	}
	Pattern(u.buf, seedClient)
	if err := checkSecure(u.m); err != nil {
		t.Fatal(err)
	}
}

// TestSecureInstanceRefuses: the secure instance takes neither auth none
// nor cephx in crc mode, so ferry-secure cannot have measured either.
func TestSecureInstanceRefuses(t *testing.T) {
	p := getPeer(t)
	if p.ferrySecure == "" {
		t.Fatal("the server has no secure instance")
	}
	cl, err := osdTicket(p.osdKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  msgr.AuthConfig
	}{
		{"auth none", msgr.AuthConfig{}},
		{"cephx crc", msgr.AuthConfig{
			Name:      cl.Name(),
			Methods:   []uint32{auth.MethodCephx},
			Modes:     msgr.ModeConfig{Client: []uint32{auth.ConModeCRC}},
			ClientFor: func(*msgr.Conn) (auth.Client, error) { return cl.Handler(), nil },
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := msgr.New(msgr.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Transports: Transports(), Auth: tc.cfg})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Shutdown()
			m.SetDefaultPolicy(msgr.LossyClient())
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
			cn, err := m.Connect(p.ferrySecure)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = cn.Ready(ctx)
			if err == nil {
				t.Fatalf("connected with auth method %d mode %d", cn.Auth().Method, cn.Auth().Mode)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("not refused within 10 s: %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}
