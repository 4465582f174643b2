package interop_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/ceph/monc"
	"github.com/ferrymsg/ferry/internal/cephtest"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// TestMonV1 talks to a real ceph-mon over msgr1 with the messenger: a
// "v1:" address selects msgr1, and the mon answers MPing.
func TestMonV1(t *testing.T) {
	mon := cephtest.StartMon(t)
	m, ch := client(t, msgr.Config{})
	conn, err := m.ConnectType("v1:"+mon.V1Addr+"/0", msg.EntityMon)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Ready(ctx); err != nil {
		t.Fatalf("msgr1 handshake with ceph-mon: %v (mon log: %s)", err, mon.LogPath())
	}
	if pa := conn.PeerAddrs(); len(pa) != 1 || pa[0].Type != msg.AddrLegacy || pa[0].IP.String() != mon.V1Addr {
		t.Fatalf("peer addrs %v", pa)
	}
	if err := conn.Send((&ceph.Ping{}).Marshal()); err != nil {
		t.Fatal(err)
	}
	var p ceph.Ping
	if err := p.Unmarshal(await(t, ch, ceph.MsgPing)); err != nil {
		t.Fatal(err)
	}
	var status map[string]any
	if err := json.Unmarshal(p.Status, &status); err != nil || status["mon_status"] == nil {
		t.Fatalf("ping status %v: %s", err, p.Status)
	}
	// The address vector the mon map gives ([v2,v1]) is chosen from as
	// Ceph does: v2 first.
	av, err := msg.ParseAddrVec(mon.MonHost())
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := m.PickAddr(av); !ok || a.Type != msg.AddrMsgr2 {
		t.Fatalf("PickAddr(%v) = %v %v", av, a, ok)
	}
}

// TestFerryPingMonV1 runs `ferry ping v1:ADDR` against a real ceph-mon.
func TestFerryPingMonV1(t *testing.T) {
	mon := cephtest.StartMon(t)
	bin := buildFerry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "ping", "--count", "20", "--inflight", "4", "--size", "0", "--json", "v1:"+mon.V1Addr+"/0").Output()
	if err != nil {
		t.Fatalf("ferry ping v1: %v\n%s", err, out)
	}
	var res struct {
		Count, Errors int
		Status        map[string]any
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Count != 20 || res.Errors != 0 || res.Status["mon_status"] == nil {
		t.Fatalf("ferry ping v1 against ceph-mon: %s", out)
	}
}

// TestCephCLIPingsFerryV1: the stock ceph CLI with "mon host = v1:…"
// runs `ceph ping mon.a` against `ferry serve --listen v1:…`.
func TestCephCLIPingsFerryV1(t *testing.T) {
	cephtest.RequireCLI(t)
	bin := buildFerry(t)
	addr := startServe(t, bin, "--listen", "v1:127.0.0.1:0")
	if !strings.HasPrefix(addr, "v1:") {
		t.Fatalf("ferry serve --listen v1: listens on %s", addr)
	}
	conf := cephtest.WriteClientConf(t.TempDir(), strings.TrimSuffix(addr, "/0"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := cephtest.CLI(ctx, conf, "ping", "mon.a")
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		MonStatus struct {
			Name  string `json:"name"`
			Ferry bool   `json:"ferry"`
		} `json:"mon_status"`
	}
	if err := json.Unmarshal(out, &status); err != nil || !status.MonStatus.Ferry || status.MonStatus.Name != "a" {
		t.Fatalf("ceph ping mon.a over v1 printed %s (%v)", out, err)
	}
	// And ferry's own client over v1.
	pout, err := exec.CommandContext(ctx, bin, "ping", "--count", "50", "--inflight", "8", "--size", "4096", "--json", addr).Output()
	if err != nil {
		t.Fatalf("ferry ping %s: %v\n%s", addr, err, pout)
	}
	var res struct{ Count, Errors int }
	if err := json.Unmarshal(pout, &res); err != nil || res.Count != 50 || res.Errors != 0 {
		t.Fatalf("ferry ping over v1: %s (%v)", pout, err)
	}
}

// TestCephxClusterV1: against a real cephx cluster, the messenger opens
// osd.0's v1 port with the cephx authorizer (the mon client logged in
// over msgr2 and holds the OSD ticket); the OSD challenges it, and
// MCommand "version" runs on the signed msgr1 session.
func TestCephxClusterV1(t *testing.T) {
	cl := cephtest.StartCluster(t, cephtest.ClusterOptions{NoMgr: true})
	key, err := cephx.ParseKey(cl.Key("client.admin"))
	if err != nil {
		t.Fatal(err)
	}
	cx, err := cephx.NewClient(cephx.ClientConfig{Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	mons, err := msg.ParseAddrVec(cl.MonHost())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := monc.Dial(ctx, monc.Config{
		Mons:   []msg.AddrVec{mons},
		Cephx:  cx,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Msgr: msgr.Config{Auth: msgr.AuthConfig{
			Methods:   []uint32{auth.MethodCephx},
			ClientFor: func(*msgr.Conn) (auth.Client, error) { return cx.Handler(), nil },
		}},
	})
	if err != nil {
		t.Fatalf("mon login: %v", err)
	}
	defer c.Close()
	var osdV1 string
	for _, a := range cl.OSDAddrs {
		if strings.HasPrefix(a, "v1:") {
			osdV1 = a
		}
	}
	conn, err := c.Messenger().ConnectType(osdV1, msg.EntityOSD)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Ready(ctx); err != nil {
		t.Fatalf("osd.0 over v1 with cephx: %v (log %s)", err, cl.LogPath("osd.0"))
	}
	if a := conn.Auth(); a.Method != auth.MethodCephx {
		t.Fatalf("auth info %+v", a)
	}
	if pa := conn.PeerAddrs(); len(pa) != 1 || pa[0].String() != osdV1 {
		t.Fatalf("peer %v, dialled %s", pa, osdV1)
	}
	res, err := c.Command(ctx, conn, []string{`{"prefix": "version"}`}, nil)
	if err != nil || res.R != 0 || !strings.Contains(string(res.Output), `"version"`) {
		t.Fatalf("osd.0 version over v1: %+v %v", res, err)
	}
	t.Logf("osd.0 over msgr1 with cephx: %s", strings.Join(strings.Fields(string(res.Output)), " "))
}

// TestCephCLIPingsFerryCephxV1: `ceph ping mon.a` with a cephx keyring
// and "mon host = v1:…" against `ferry serve --auth cephx --listen v1:…`.
// Over msgr1 the CLI's ping does not authenticate (a mon accepts a
// connect without an authorizer; MAuth would follow), so it is answered.
func TestCephCLIPingsFerryCephxV1(t *testing.T) {
	cephtest.RequireCLI(t)
	bin := buildFerry(t)
	keyring := writeKeyring(t)
	addr := startServe(t, bin, "--auth", "cephx", "--keyring", keyring, "--listen", "v1:127.0.0.1:0")
	if !strings.HasPrefix(addr, "v1:") {
		t.Fatalf("listening on %s", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := cephtest.CLI(ctx, writeCephxConf(t, strings.TrimSuffix(addr, "/0"), keyring, "crc"), "ping", "mon.a")
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		MonStatus struct {
			Ferry bool `json:"ferry"`
		} `json:"mon_status"`
	}
	if err := json.Unmarshal(out, &status); err != nil || !status.MonStatus.Ferry {
		t.Fatalf("ceph ping mon.a over v1: %s (%v)", out, err)
	}
}
