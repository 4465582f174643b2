package cephx_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/internal/cephtest"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/msgr1"
)

// v1Conn is a msgr1 client connection driven by hand: the engine stays
// pure, the test does the socket I/O.
type v1Conn struct {
	t   *testing.T
	nc  net.Conn
	e   *msgr1.Engine
	seq uint64
	log string
}

func dialV1(t *testing.T, addr string, peer msg.EntityType, a auth.Client, logPath string) *v1Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(strings.Split(addr, "/")[0], "v1:"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
	pa, err := msg.ParseEntityAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &v1Conn{t: t, nc: nc, log: logPath, e: msgr1.NewEngine(msgr1.Config{
		Role:      msgr1.Client,
		MyName:    msg.EntityName{Type: msg.EntityClient, Num: msg.NewID},
		Nonce:     7,
		PeerAddr:  pa,
		PeerType:  peer,
		Supported: msg.FeaturesAll,
		Lossy:     true,
		GlobalSeq: 1,
		Auth:      a,
	})}
	c.e.Start()
	c.flush()
	for !c.e.Ready() {
		c.step()
	}
	return c
}

func (c *v1Conn) flush() {
	if out := c.e.Output(); len(out) > 0 {
		if _, err := c.nc.Write(out); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *v1Conn) step() []msgr1.Event {
	n, _ := c.e.Need()
	if n == 0 {
		c.t.Fatalf("engine stalled: %v (log %s)", c.e.Err(), c.log)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c.nc, p); err != nil {
		c.t.Fatalf("read: %v (log %s)", err, c.log)
	}
	evs, err := c.e.Feed(p)
	if err != nil {
		c.t.Fatalf("feed: %v (log %s)", err, c.log)
	}
	c.flush()
	return evs
}

// mauth sends an MAuth and returns the MAuthReply.
func (c *v1Conn) mauth(protocol uint32, payload []byte) ceph.AuthReply {
	c.t.Helper()
	m := (&ceph.Auth{Protocol: protocol, Payload: payload}).Marshal()
	c.seq++
	m.Header.Seq = c.seq
	if _, err := c.nc.Write(c.e.AppendMessage(nil, m)); err != nil {
		c.t.Fatal(err)
	}
	for {
		for _, ev := range c.step() {
			if ev.Kind == msgr1.EvMessage && ev.Msg != nil && ev.Msg.Header.Type == ceph.MsgAuthReply {
				var r ceph.AuthReply
				if err := r.Unmarshal(ev.Msg); err != nil {
					c.t.Fatal(err)
				}
				return r
			}
		}
	}
}

// login runs cl's mon login over MAuth.
func (c *v1Conn) login(cl *cephx.Client) (auth.Result, error) {
	l := cl.MAuthLogin()
	r := c.mauth(cephx.MAuthProtocolNegotiate, l.Hello())
	p, err := l.HandleChallenge(r.Result, r.ResultBL)
	if err != nil {
		return auth.Result{}, err
	}
	r = c.mauth(cephx.MAuthProtocolCephx, p)
	return l.HandleDone(r.Result, r.GlobalID, r.ResultBL)
}

func mustKey(t *testing.T, s string) cephx.Key {
	t.Helper()
	k, err := cephx.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestRealCluster checks this package against real 16.2 daemons, over
// msgr1 (whose engine has no auth of its own for mons): client.admin
// logs in to the mon with MAuth and gets its service tickets, asks for
// more (GET_PRINCIPAL_SESSION_KEY), renews its AUTH ticket (the mon
// sends it encrypted with the old session key); a wrong key is refused;
// osd.0 fetches its rotating secrets, with which a Verifier opens the
// mon's OSD ticket for client.admin and checks its authorizer; finally
// client.admin presents that ticket to the real OSD, which challenges it.
func TestRealCluster(t *testing.T) {
	cl := cephtest.StartCluster(t, cephtest.ClusterOptions{NoMgr: true})
	monAddr := "v1:" + cl.MonV1 + "/0"
	monLog := cl.LogPath("mon.a")

	var shift atomic.Int64 // the client's clock runs ahead by this much
	clock := func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	adminName := msg.AuthName{Type: msg.EntityClient, ID: "admin"}
	admin, err := cephx.NewClient(cephx.ClientConfig{Name: adminName, Key: mustKey(t, cl.Key("client.admin")), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	mc := dialV1(t, monAddr, msg.EntityMon, nil, monLog)
	res, err := mc.login(admin)
	if err != nil {
		t.Fatalf("login: %v (mon log %s)", err, monLog)
	}
	if res.GlobalID == 0 || len(res.SessionKey) != 16 {
		t.Fatalf("login result %+v", res)
	}
	for _, svc := range []msg.EntityType{msg.EntityAuth, msg.EntityMon, msg.EntityOSD, msg.EntityMgr} {
		tk, ok := admin.Ticket(svc)
		if !ok || !tk.Valid(clock()) {
			t.Fatalf("no %s ticket after login", svc)
		}
		t.Logf("%s ticket: secret id %d, %d-byte ticket, expires in %v", svc, tk.Blob.SecretID, len(tk.Blob.Blob), time.Until(tk.Expires).Round(time.Second))
	}

	// Service tickets over the session.
	before, _ := admin.Ticket(msg.EntityOSD)
	p, err := admin.ServiceTicketRequest(cephx.ServiceMask(msg.EntityOSD, msg.EntityMon))
	if err != nil {
		t.Fatal(err)
	}
	r := mc.mauth(cephx.MAuthProtocolCephx, p)
	if op, err := admin.HandleMAuthReply(r.Result, r.GlobalID, r.ResultBL); err != nil || op != cephx.OpGetPrincipalSessionKey {
		t.Fatalf("principal: %#x %v", op, err)
	}
	if after, _ := admin.Ticket(msg.EntityOSD); after.SessionKey.Equal(before.SessionKey) {
		t.Fatal("OSD ticket not replaced")
	}

	// AUTH ticket renewal: 55 hours on (the client's clock), everything
	// is due; the mon checks the old ticket and encrypts the new one.
	oldAuth, _ := admin.Ticket(msg.EntityAuth)
	shift.Store(int64(55 * time.Hour))
	if need := admin.Need(clock()); need&uint32(msg.EntityAuth) == 0 {
		t.Fatalf("need %#x", need)
	}
	p, err = admin.RenewRequest(clock())
	if err != nil || p == nil {
		t.Fatalf("renew request: %v", err)
	}
	r = mc.mauth(cephx.MAuthProtocolCephx, p)
	if op, err := admin.HandleMAuthReply(r.Result, r.GlobalID, r.ResultBL); err != nil || op != cephx.OpGetAuthSessionKey {
		t.Fatalf("AUTH renewal: %#x %v (mon log %s)", op, err, monLog)
	}
	if nt, _ := admin.Ticket(msg.EntityAuth); nt.SessionKey.Equal(oldAuth.SessionKey) || admin.GlobalID() != res.GlobalID {
		t.Fatal("AUTH ticket not renewed")
	}
	if need := admin.Need(clock()); need != 0 {
		t.Fatalf("need %#x after renewal", need)
	}
	shift.Store(0)

	// A wrong key is refused by the mon.
	wrongKey, err := cephtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := cephx.NewClient(cephx.ClientConfig{Name: adminName, Key: mustKey(t, wrongKey)})
	if _, err := dialV1(t, monAddr, msg.EntityMon, nil, monLog).login(bad); !errors.Is(err, auth.ErrDenied) {
		t.Fatalf("wrong key: %v", err)
	}

	// osd.0's rotating secrets open client.admin's OSD ticket.
	osd, _ := cephx.NewClient(cephx.ClientConfig{Name: msg.AuthName{Type: msg.EntityOSD, ID: "0"}, Key: mustKey(t, cl.Key("osd.0"))})
	oc := dialV1(t, monAddr, msg.EntityMon, nil, monLog)
	if _, err := oc.login(osd); err != nil {
		t.Fatalf("osd.0 login: %v", err)
	}
	r = oc.mauth(cephx.MAuthProtocolCephx, osd.RotatingKeyRequest())
	if _, err := osd.HandleMAuthReply(r.Result, r.GlobalID, r.ResultBL); err != nil {
		t.Fatalf("rotating keys: %v", err)
	}
	rs := osd.Rotating()
	if rs == nil || len(rs.Secrets) != 3 {
		t.Fatalf("rotating secrets %+v", rs)
	}
	v, _ := cephx.NewVerifier(cephx.VerifierConfig{Service: msg.EntityOSD, Rotating: rs})
	cr, sr, err := run(admin.Handler(), v.Handler(), msg.EntityOSD, auth.ConModeSecure)
	if err != nil {
		t.Fatalf("verifying the mon's ticket: %v", err)
	}
	if sr.Name != adminName || sr.GlobalID != res.GlobalID || string(sr.Caps) != "allow *" || len(cr.ConnectionSecret) != 64 {
		t.Fatalf("verified %v.%d caps %q", sr.Name, sr.GlobalID, sr.Caps)
	}

	// The real OSD accepts client.admin's authorizer after its challenge.
	var osdV1 string
	for _, a := range cl.OSDAddrs {
		if strings.HasPrefix(a, "v1:") {
			osdV1 = a
		}
	}
	if osdV1 == "" {
		t.Fatalf("no v1 address in %v", cl.OSDAddrs)
	}
	h := admin.Handler()
	c := dialV1(t, osdV1, msg.EntityOSD, h, cl.LogPath("osd.0"))
	pa := c.e.Peer().Auth
	if pa == nil || len(pa.SessionKey) != 16 {
		t.Fatalf("OSD session without auth: %+v", pa)
	}
	tk, _ := admin.Ticket(msg.EntityOSD)
	if string(pa.SessionKey) != string(tk.SessionKey.Secret) {
		t.Fatal("OSD session key is not the ticket's")
	}
}

// serveMonV1 accepts one msgr1 connection on ln as a mon would and
// answers its MAuth messages with a MonSession of ks, until the client
// sends a message of another type after a completed login (it returns
// that type) or a login is refused (it returns the refusal).
func serveMonV1(t *testing.T, ln net.Listener, ks *cephx.KeyServer) (uint16, error) {
	t.Helper()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
	me, _ := msg.ParseEntityAddr("v1:" + ln.Addr().String() + "/0")
	peer, _ := msg.ParseEntityAddr("v1:" + nc.RemoteAddr().String() + "/0")
	e := msgr1.NewEngine(msgr1.Config{
		Role: msgr1.Server, MyName: msg.EntityName{Type: msg.EntityMon, Num: 0},
		MyAddr: me, PeerAddr: peer, Supported: msg.FeaturesAll,
	})
	c := &v1Conn{t: t, nc: nc, e: e, log: "(ceph CLI)"}
	e.Start()
	c.flush()
	sess := ks.Handler()
	for {
		n, _ := e.Need()
		if n == 0 {
			t.Fatalf("engine stalled: %v", e.Err())
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(nc, p); err != nil {
			t.Fatalf("read: %v", err)
		}
		evs, err := e.Feed(p)
		if err != nil {
			t.Fatalf("feed: %v", err)
		}
		for _, ev := range evs {
			switch {
			case ev.Kind == msgr1.EvConnect:
				if err := e.Accept(msgr1.Accept{GlobalSeq: 1, Reset: true, Lossy: e.PendingConnect().Flags&msgr1.ConnectFlagLossy != 0}); err != nil {
					t.Fatal(err)
				}
			case ev.Kind == msgr1.EvMessage && ev.Msg != nil && ev.Msg.Header.Type == ceph.MsgAuth:
				var m ceph.Auth
				if err := m.Unmarshal(ev.Msg); err != nil {
					t.Fatal(err)
				}
				ans, herr := sess.HandleMAuth(m.Protocol, m.Payload)
				r := (&ceph.AuthReply{Protocol: ans.Protocol, Result: ans.Result, GlobalID: ans.GlobalID, ResultBL: ans.ResultBL}).Marshal()
				c.seq++
				r.Header.Seq = c.seq
				if _, err := nc.Write(e.AppendMessage(nil, r)); err != nil {
					t.Fatal(err)
				}
				if herr != nil {
					return 0, herr
				}
			case ev.Kind == msgr1.EvMessage && ev.Msg != nil && sess.Authenticated():
				return ev.Msg.Header.Type, nil
			}
		}
		c.flush()
	}
}

// TestRealCLIAgainstKeyServer has the stock ceph CLI log in over msgr1 to
// a KeyServer: with the right key it goes on to its next request (it
// decrypted our tickets); with a wrong key it is refused.
func TestRealCLIAgainstKeyServer(t *testing.T) {
	cephtest.RequireCLI(t)
	keyStr, err := cephtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	key := mustKey(t, keyStr)
	adminName := msg.AuthName{Type: msg.EntityClient, ID: "admin"}
	ring := &cephx.Keyring{}
	ring.Add(cephx.KeyringEntry{Name: adminName, Key: key, Caps: map[string]string{"mon": "allow *"}})
	ks, err := cephx.NewKeyServer(cephx.KeyServerConfig{Keyring: ring})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		key  cephx.Key
	}{{"right key", key}, {"wrong key", func() cephx.Key { s, _ := cephtest.NewKey(); return mustKey(t, s) }()}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			kr := &cephx.Keyring{Entries: []cephx.KeyringEntry{{Name: adminName, Key: tc.key}}}
			if err := os.WriteFile(filepath.Join(dir, "keyring"), kr.Marshal(), 0o600); err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			conf := filepath.Join(dir, "ceph.conf")
			if err := os.WriteFile(conf, []byte("[global]\nmon host = v1:"+ln.Addr().String()+"\nauth client required = cephx\n[client]\nlog file =\nadmin socket =\nkeyring = "+filepath.Join(dir, "keyring")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "ceph", "-c", conf, "-n", "client.admin", "--connect-timeout", "20", "mon", "stat")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cancel() // kills the CLI by its PID
				_ = cmd.Wait()
				t.Logf("ceph CLI stderr: %s", bytes.TrimSpace(stderr.Bytes()))
			}()
			typ, err := serveMonV1(t, ln, ks)
			if tc.key.Equal(key) {
				if err != nil {
					t.Fatalf("login refused: %v", err)
				}
				t.Logf("after its login the CLI sent message type %d", typ)
				return
			}
			if !errors.Is(err, auth.ErrBadKey) {
				t.Fatalf("wrong key: %v", err)
			}
		})
	}
}

// Keyrings round-trip with ceph-authtool both ways: we read what it
// writes, and it lists what we write exactly as it would have written it.
func TestKeyringWithCephAuthtool(t *testing.T) {
	cephtest.Require(t, "ceph-authtool")
	dir := t.TempDir()
	theirs := filepath.Join(dir, "theirs")
	out, err := exec.Command("ceph-authtool", "--create-keyring", theirs, "--gen-key", "-n", "client.x",
		"--cap", "mon", "allow *", "--cap", "osd", `allow rw pool="a b"`).CombinedOutput()
	if err != nil {
		t.Fatalf("ceph-authtool: %v: %s", err, out)
	}
	kr, err := cephx.LoadKeyring(theirs)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := kr.Lookup(msg.AuthName{Type: msg.EntityClient, ID: "x"})
	if !ok || e.Caps["mon"] != "allow *" || e.Caps["osd"] != `allow rw pool="a b"` || len(e.Key.Secret) != 16 {
		t.Fatalf("read %+v", kr)
	}
	raw, _ := os.ReadFile(theirs)
	if got := string(kr.Marshal()); got != string(raw) {
		t.Fatalf("we write\n%s\nceph-authtool wrote\n%s", got, raw)
	}
	ours := filepath.Join(dir, "ours")
	kr.Add(cephx.KeyringEntry{Name: msg.AuthName{Type: msg.EntityOSD, ID: "3"}, Key: e.Key, Caps: map[string]string{"osd": "allow *"}})
	if err := os.WriteFile(ours, kr.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	listed, err := exec.Command("ceph-authtool", "-l", ours).Output()
	if err != nil {
		t.Fatalf("ceph-authtool -l: %v", err)
	}
	if string(listed) != string(kr.Marshal()) {
		t.Fatalf("ceph-authtool lists\n%s\nwe wrote\n%s", listed, kr.Marshal())
	}
}
