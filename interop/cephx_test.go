package interop_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph/cephconf"
	"github.com/ferrymsg/ferry/ceph/monc"
	"github.com/ferrymsg/ferry/internal/cephtest"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// modeOf names a connection mode.
func modeOf(m uint32) string {
	switch m {
	case auth.ConModeSecure:
		return "secure"
	case auth.ConModeCRC:
		return "crc"
	}
	return "none"
}

// cephxClient returns ferry's cephx state for entity with the cluster's
// key for it (from its keyring file, as the ceph tools read it).
func cephxClient(t *testing.T, cl *cephtest.Cluster, entity string) *cephx.Client {
	t.Helper()
	name, err := cephx.ParseEntityName(entity)
	if err != nil {
		t.Fatal(err)
	}
	kr, err := cephx.LoadKeyring(cl.KeyringPath(entity))
	if err != nil {
		t.Fatal(err)
	}
	e, ok := kr.Lookup(name)
	if !ok {
		t.Fatalf("%s not in its keyring", entity)
	}
	cx, err := cephx.NewClient(cephx.ClientConfig{Name: name, Key: e.Key})
	if err != nil {
		t.Fatal(err)
	}
	return cx
}

// dialCluster opens a ferry mon client with cephx state cx and the
// connection modes given (nil for Ceph's defaults).
func dialCluster(t *testing.T, ctx context.Context, cl *cephtest.Cluster, cx *cephx.Client, modes []uint32) (*monc.Client, error) {
	t.Helper()
	mons, err := cephconf.ParseMonHost(cl.MonHost())
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := monc.Config{Mons: mons, Cephx: cx, Logger: quiet, HuntTimeout: 20 * time.Second,
		Msgr: msgr.Config{Logger: quiet}}
	cfg.Msgr.Auth.Modes.MonClient = modes
	cfg.Msgr.Auth.Modes.Client = modes
	return monc.Dial(ctx, cfg)
}

// TestCephx runs ferry against a real cephx cluster (a mon and a memstore
// OSD, cephx required everywhere; no mgr, which no subtest talks to),
// once with every ms_*_mode at secure and once at crc, the two at once;
// each cluster is shared by its subtests.
func TestCephx(t *testing.T) {
	bin := buildFerry(t)
	for _, mode := range []string{"secure", "crc"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cl := cephtest.StartCluster(t, cephtest.ClusterOptions{Mode: mode, Clients: []string{"client.ferry"}, NoMgr: true})
			want := auth.ConModeCRC
			if mode == "secure" {
				want = auth.ConModeSecure
			}
			t.Run("mon", func(t *testing.T) { testCephxMon(t, cl, want) })
			t.Run("osd", func(t *testing.T) { testCephxOSD(t, cl, want) })
			t.Run("mon-v1", func(t *testing.T) { testCephxMonV1(t, bin, cl) })
			t.Run("wrong-key", func(t *testing.T) { testCephxWrongKey(t, cl) })
			t.Run("refused-mode", func(t *testing.T) { testCephxRefusedMode(t, cl, want) })
			t.Run("forged-ticket", func(t *testing.T) { testCephxForgedTicket(t, cl) })
			t.Run("ferry-tell", func(t *testing.T) { testCephxTell(t, bin, cl) })
			t.Run("ferry-ping", func(t *testing.T) { testCephxPing(t, bin, cl) })
		})
	}
}

// testCephxMon: ferry authenticates to the mon and runs MPing,
// MMonGetVersion and MMonCommand mon stat in the cluster's mode.
func testCephxMon(t *testing.T, cl *cephtest.Cluster, want uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := dialCluster(t, ctx, cl, cephxClient(t, cl, "client.ferry"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ai := c.MonConn().Auth()
	if ai.Method != auth.MethodCephx || ai.Mode != want || ai.GlobalID == 0 || ai.GlobalID != c.GlobalID() {
		t.Fatalf("mon session auth %+v, want cephx in %s mode (global id %d)", ai, modeOf(want), c.GlobalID())
	}
	if got := c.FSID().String(); got != cl.FSID {
		t.Fatalf("fsid %s, want %s", got, cl.FSID)
	}
	st, err := c.Ping(ctx)
	if err != nil || !strings.Contains(string(st), `"mon_status"`) {
		t.Fatalf("ping: %s, %v", st, err)
	}
	v, err := c.GetVersion(ctx, "osdmap")
	if err != nil || v.Version < 1 {
		t.Fatalf("get_version osdmap: %+v, %v", v, err)
	}
	res, err := c.MonCommand(ctx, []string{`{"prefix":"mon stat","format":"json"}`}, nil)
	if err != nil || res.Err() != nil {
		t.Fatalf("mon stat: %+v, %v", res, err)
	}
	var stat struct {
		Quorum []struct {
			Name string `json:"name"`
		} `json:"quorum"`
	}
	if err := json.Unmarshal(res.Output, &stat); err != nil || len(stat.Quorum) != 1 || stat.Quorum[0].Name != "a" {
		t.Fatalf("mon stat: %s (%v)", res.Output, err)
	}
	// The service tickets came with the login; asking again over the
	// session (MAuth) gets fresh ones.
	before, ok := c.Cephx().Ticket(msg.EntityOSD)
	if !ok {
		t.Fatal("no OSD ticket after the login")
	}
	if err := c.ServiceTickets(ctx, cephx.ServiceMask(msg.EntityOSD, msg.EntityMgr)); err != nil {
		t.Fatal(err)
	}
	after, _ := c.Cephx().Ticket(msg.EntityOSD)
	if string(after.Blob.Blob) == string(before.Blob.Blob) || !after.Valid(time.Now()) {
		t.Fatal("no fresh OSD ticket from the mon")
	}
	if _, ok := c.Cephx().Ticket(msg.EntityMgr); !ok {
		t.Fatal("no MGR ticket")
	}
}

// testCephxOSD: with the OSD ticket, ferry opens an authenticated session
// to the real ceph-osd in the cluster's mode and runs MCommand version.
func testCephxOSD(t *testing.T, cl *cephtest.Cluster, want uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := dialCluster(t, ctx, cl, cephxClient(t, cl, "client.admin"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.OSDCommand(ctx, 0, []string{`{"prefix": "version"}`}, nil)
	if err != nil || res.Err() != nil {
		t.Fatalf("osd.0 version: %+v, %v", res, err)
	}
	var v struct {
		Version, Release string
	}
	if err := json.Unmarshal(res.Output, &v); err != nil || v.Release != "pacific" || !strings.HasPrefix(v.Version, "16.") {
		t.Fatalf("osd.0 version: %s (%v)", res.Output, err)
	}
	conn, err := c.OSDConn(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ai := conn.Auth(); ai.Method != auth.MethodCephx || ai.Mode != want {
		t.Fatalf("OSD session auth %+v, want cephx in %s mode", ai, modeOf(want))
	}
	if got := conn.PeerAddrs().String(); got != "["+strings.Join(cl.OSDAddrs, ",")+"]" {
		t.Fatalf("OSD session with %s, cluster says %v", got, cl.OSDAddrs)
	}
}

// testCephxWrongKey: a wrong key is refused, and the error says so.
func testCephxWrongKey(t *testing.T, cl *cephtest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key, err := cephx.GenerateKey(rand.Reader, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cx, err := cephx.NewClient(cephx.ClientConfig{Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	_, err = dialCluster(t, ctx, cl, cx, nil)
	if !errors.Is(err, msgr2.ErrAuthRejected) {
		t.Fatalf("wrong key: %v, want msgr2.ErrAuthRejected", err)
	}
	var ae *msgr2.AuthError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "EACCES") {
		t.Fatalf("wrong key: %v, want an AuthError with EACCES", err)
	}
	t.Logf("wrong key: %v", err)
}

// testCephxRefusedMode: a client offering only the mode the cluster does
// not allow is refused, and the error says so.
func testCephxRefusedMode(t *testing.T, cl *cephtest.Cluster, allowed uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	other := auth.ConModeSecure
	if allowed == auth.ConModeSecure {
		other = auth.ConModeCRC
	}
	_, err := dialCluster(t, ctx, cl, cephxClient(t, cl, "client.admin"), []uint32{other})
	var ae *msgr2.AuthError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "EOPNOTSUPP") {
		t.Fatalf("mode %s only: %v, want an AuthError with EOPNOTSUPP", modeOf(other), err)
	}
	t.Logf("mode %s only: %v", modeOf(other), err)
}

// forgingClient presents a service ticket with one byte of its opaque
// part flipped.
type forgingClient struct {
	auth.Client
}

func (f forgingClient) Request(peer msg.EntityType) ([]byte, error) {
	p, err := f.Client.Request(peer)
	if err != nil || peer == msg.EntityMon {
		return p, err
	}
	// u8 1 | u64 global_id | u32 service | u8 1 | u64 secret_id | u32 len | ticket...
	const ticketStart = 1 + 8 + 4 + 1 + 8 + 4
	if len(p) > ticketStart+8 {
		p = append([]byte(nil), p...)
		p[ticketStart+8] ^= 0x40
	}
	return p, nil
}

// testCephxForgedTicket: an OSD refuses a forged ticket, and the error
// says the authorizer was rejected.
func testCephxForgedTicket(t *testing.T, cl *cephtest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cx := cephxClient(t, cl, "client.admin")
	mons, err := cephconf.ParseMonHost(cl.MonHost())
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := monc.Config{Mons: mons, Cephx: cx, Logger: quiet, Msgr: msgr.Config{Logger: quiet}}
	cfg.Msgr.Auth.ClientFor = func(*msgr.Conn) (auth.Client, error) { return forgingClient{cx.Handler()}, nil }
	c, err := monc.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.OSDCommand(ctx, 0, []string{`{"prefix": "version"}`}, nil)
	if err == nil {
		t.Fatal("the OSD accepted a forged ticket")
	}
	if !errors.Is(err, msgr2.ErrAuthRejected) {
		t.Fatalf("forged ticket: %v, want msgr2.ErrAuthRejected", err)
	}
	t.Logf("forged ticket: %v", err)
}

// testCephxMonV1: over msgr1 (mon host = v1:...) ferry logs in to the
// mon with MAuth (msgr1's connect carries no authorizer for a mon), runs
// MPing, MMonGetVersion and mon stat, and reaches the OSD with the ticket it got; ferry tell does
// the same from the command line.
func testCephxMonV1(t *testing.T, bin string, cl *cephtest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	v1, err := msg.ParseAddrVec("v1:" + cl.MonV1 + "/0")
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := monc.Dial(ctx, monc.Config{Mons: []msg.AddrVec{v1}, Cephx: cephxClient(t, cl, "client.admin"), Logger: quiet, Msgr: msgr.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !strings.HasPrefix(c.Mon(), "v1:") || c.GlobalID() == 0 || c.FSID().String() != cl.FSID {
		t.Fatalf("session with %s, global id %d, fsid %v", c.Mon(), c.GlobalID(), c.FSID())
	}
	if st, err := c.Ping(ctx); err != nil || !strings.Contains(string(st), `"mon_status"`) {
		t.Fatalf("ping over v1: %s, %v", st, err)
	}
	if v, err := c.GetVersion(ctx, "osdmap"); err != nil || v.Version < 1 {
		t.Fatalf("get_version over v1: %+v, %v", v, err)
	}
	res, err := c.MonCommand(ctx, []string{`{"prefix":"mon stat","format":"json"}`}, nil)
	if err != nil || res.Err() != nil || !strings.Contains(string(res.Output), `"quorum"`) {
		t.Fatalf("mon stat over v1: %+v, %v", res, err)
	}
	if res, err = c.OSDCommand(ctx, 0, []string{`{"prefix": "version"}`}, nil); err != nil || res.Err() != nil {
		t.Fatalf("osd.0 version after a v1 login: %+v, %v", res, err)
	}
	out, errOut, code := runFerry(t, bin, "tell", "--mon", "v1:"+cl.MonV1, "--keyring", cl.KeyringPath("client.admin"), "mon.a", "mon", "stat")
	if code != 0 || !strings.Contains(out, "quorum") {
		t.Fatalf("ferry tell --mon v1:...: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
