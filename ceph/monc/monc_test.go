package monc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

var testFSID = ceph.FSID{0x21, 0xcc, 0xba, 0x25, 0xa6, 0xc7, 0x41, 0xd0, 0xa0, 0x4d, 0x8d, 0x83, 0xe4, 0xe7, 0x02, 0xe3}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fakeDaemon is a ferry messenger answering what a mon or an OSD
// answers, for fast tests of the client's logic.
type fakeDaemon struct {
	m       *msgr.Messenger
	addr    msg.EntityAddr
	osdAddr msg.AddrVec // what "osd find 0" answers
	// dropCommands makes the daemon close the connection instead of
	// answering a command.
	dropCommands bool
	// mons is the monmap a fake mon sends (default: itself as mon.a); a
	// non-empty name is added to its command outputs.
	mons []ceph.MonInfo
	name string
	// rawMonMap, if set, is sent as the encoded monmap instead.
	rawMonMap []byte
}

func startFake(t *testing.T, name msg.EntityName) *fakeDaemon {
	t.Helper()
	return startFakeWith(t, msgr.Config{Name: name})
}

// startFakeWith is startFake with the messenger config cfg (its auth
// settings, say).
func startFakeWith(t *testing.T, cfg msgr.Config) *fakeDaemon {
	t.Helper()
	return startFakeAt(t, cfg, "v2:127.0.0.1:0")
}

// startFakeAt is startFakeWith listening on addr.
func startFakeAt(t *testing.T, cfg msgr.Config, addr string) *fakeDaemon {
	t.Helper()
	cfg.ZeroNonce = cfg.Name.Type == msg.EntityMon
	cfg.Logger = quiet()
	m, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.SetDefaultPolicy(msgr.StatelessServer())
	if err := m.Bind(addr); err != nil {
		t.Fatal(err)
	}
	f := &fakeDaemon{m: m}
	for _, a := range m.Addrs() {
		if !a.IsZero() {
			f.addr = a
		}
	}
	m.AddDispatcherTail(msgr.DispatcherFunc(f.dispatch))
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Shutdown)
	return f
}

func (f *fakeDaemon) dispatch(r *msg.Message) bool {
	var out *msg.Message
	switch r.Header.Type {
	case ceph.MsgMonGetMap:
		mons := f.mons
		if mons == nil {
			mons = []ceph.MonInfo{{Name: "a", Addrs: msg.AddrVec{f.addr}}}
		}
		mm := ceph.EncodeMonMap(testFSID, 4, mons)
		if f.rawMonMap != nil {
			mm = f.rawMonMap
		}
		out = (&ceph.MonMap{Map: mm}).Marshal()
	case ceph.MsgPing:
		out = ceph.PingReply([]byte(`{"health":{"status":"HEALTH_OK"},"mon_status":{"name":"a"}}`))
	case ceph.MsgMonGetVersion:
		var q ceph.MonGetVersion
		q.Unmarshal(r)
		out = (&ceph.MonGetVersionReply{Handle: q.Handle, Version: 9, OldestVersion: 1}).Marshal()
	case ceph.MsgMonCommand:
		var q ceph.MonCommand
		q.Unmarshal(r)
		ack := ceph.MonCommandAck{Tid: q.Tid, Cmd: q.Cmd}
		var cmd struct {
			Prefix string `json:"prefix"`
			ID     int    `json:"id"`
		}
		json.Unmarshal([]byte(q.Cmd[0]), &cmd)
		switch {
		case q.FSID != testFSID:
			ack.R, ack.RS = -1, "wrong fsid"
		case cmd.Prefix == "osd find" && cmd.ID == 0 && f.osdAddr != nil:
			var vec []map[string]any
			for _, a := range f.osdAddr {
				vec = append(vec, map[string]any{"type": "v2", "addr": a.IP.String(), "nonce": a.Nonce})
			}
			ack.Output, _ = json.Marshal(map[string]any{"osd": 0, "addrs": map[string]any{"addrvec": vec}})
		case cmd.Prefix == "osd find":
			ack.R, ack.RS = -2, fmt.Sprintf("osd.%d does not exist", cmd.ID)
		case f.name != "":
			ack.Output = []byte(`{"ran":"` + cmd.Prefix + `","mon":"` + f.name + `"}`)
		default:
			ack.Output = []byte(`{"ran":"` + cmd.Prefix + `"}`)
		}
		out = ack.Marshal()
	case ceph.MsgCommand:
		var q ceph.Command
		q.Unmarshal(r)
		if f.dropCommands {
			r.Conn.(*msgr.Conn).MarkDown()
			return true
		}
		rep := ceph.CommandReply{Tid: q.Tid, Output: []byte(`{"version":"fake"}`)}
		if q.FSID != testFSID {
			rep = ceph.CommandReply{Tid: q.Tid, R: -1, RS: "wrong fsid"}
		}
		out = rep.Marshal()
	default:
		return false
	}
	out.Header.Tid = max(out.Header.Tid, r.Header.Tid)
	if r.Header.Type == ceph.MsgPing {
		out.Header.Tid = 0 // a mon's ping reply has no tid
	}
	r.Conn.Send(out)
	return true
}

// deadAddr returns a loopback msgr2 address nothing listens on.
func deadAddr(t *testing.T) msg.AddrVec {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	v, err := msg.ParseAddrVec("v2:" + a + "/0")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestHuntAndRequests(t *testing.T) {
	mon := startFake(t, msg.EntityName{Type: msg.EntityMon})
	osd := startFake(t, msg.EntityName{Type: msg.EntityOSD, Num: 0})
	mon.osdAddr = msg.AddrVec{osd.addr}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Two dead mons and the live one: the hunt, whatever its order,
	// ends with the live one.
	for seed := uint64(0); seed < 3; seed++ {
		c, err := Dial(ctx, Config{
			Mons:        []msg.AddrVec{deadAddr(t), {mon.addr}, deadAddr(t)},
			Logger:      quiet(),
			Msgr:        msgr.Config{Logger: quiet()},
			HuntTimeout: 5 * time.Second,
			Rand:        rand.New(rand.NewPCG(seed, 1)),
		})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if c.Mon() != mon.addr.String() || c.FSID() != testFSID || c.MonMapEpoch() != 4 {
			t.Fatalf("session with %q fsid %v epoch %d", c.Mon(), c.FSID(), c.MonMapEpoch())
		}
		c.Close()
	}

	c, err := Dial(ctx, Config{Mons: []msg.AddrVec{{mon.addr}}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Ping(ctx)
	if err != nil || !strings.Contains(string(st), "HEALTH_OK") {
		t.Fatalf("ping: %q, %v", st, err)
	}
	v, err := c.GetVersion(ctx, "osdmap")
	if err != nil || v.Version != 9 || v.OldestVersion != 1 {
		t.Fatalf("get version: %+v, %v", v, err)
	}
	res, err := c.MonCommand(ctx, []string{`{"prefix":"mon stat"}`}, nil)
	if err != nil || res.Err() != nil || string(res.Output) != `{"ran":"mon stat"}` {
		t.Fatalf("mon command: %+v, %v", res, err)
	}
	addrs, err := c.OSDAddrs(ctx, 0)
	if err != nil || len(addrs) != 1 || addrs[0] != osd.addr {
		t.Fatalf("osd find: %v, %v (want %v)", addrs, err, osd.addr)
	}
	res, err = c.OSDCommand(ctx, 0, []string{`{"prefix":"version"}`}, nil)
	if err != nil || res.R != 0 || string(res.Output) != `{"version":"fake"}` {
		t.Fatalf("osd command: %+v, %v", res, err)
	}
	// The OSD session is kept.
	conn, err := c.OSDConn(ctx, 0)
	if err != nil || conn.PeerName().Type != msg.EntityOSD {
		t.Fatalf("osd conn: %v, %v", conn, err)
	}
	if again, _ := c.OSDConn(ctx, 0); again != conn {
		t.Fatal("a second OSD session was opened")
	}

	// A failed command is a result, whose Err says why.
	_, err = c.OSDAddrs(ctx, 7)
	var ce *CommandError
	if !errors.As(err, &ce) || ce.R != -2 || !strings.Contains(err.Error(), "ENOENT") || !strings.Contains(err.Error(), "osd.7 does not exist") {
		t.Fatalf("osd find 7: %v", err)
	}

	// Many requests at once are matched to their replies.
	errs := make(chan error, 16)
	for i := range 16 {
		go func() {
			res, err := c.MonCommand(ctx, []string{fmt.Sprintf(`{"prefix":"p%d"}`, i)}, nil)
			if err == nil && string(res.Output) != fmt.Sprintf(`{"ran":"p%d"}`, i) {
				err = fmt.Errorf("request %d got %s", i, res.Output)
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestHuntFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noProto := msg.AddrVec{{Type: msg.AddrAny}} // no msgr2 or msgr1 entry
	dead := deadAddr(t)
	_, err := Dial(ctx, Config{Mons: []msg.AddrVec{dead}, Logger: quiet(), HuntTimeout: 3 * time.Second, HuntRounds: 3})
	var he *HuntError
	if !errors.As(err, &he) || len(he.Attempts) != 3 {
		t.Fatalf("err = %v, want a HuntError with three attempts (three rounds)", err)
	}
	// The three same failures are said once, with their count.
	if text := err.Error(); strings.Count(text, "refused") != 1 || !strings.Contains(text, "(3 attempts)") {
		t.Errorf("HuntError of three same failures: %q, want it once with (3 attempts)", text)
	}
	// A mon with no usable address (no msgr2 or msgr1 entry) ends the
	// hunt at once: another round would not change it.
	_, err = Dial(ctx, Config{Mons: []msg.AddrVec{noProto}, Logger: quiet(), HuntTimeout: 3 * time.Second})
	if !errors.As(err, &he) || len(he.Attempts) != 1 || !errors.Is(err, ErrNoAddr) {
		t.Fatalf("err = %v, want a HuntError with one ErrNoAddr attempt", err)
	}
	// Without HuntRounds the hunt goes on until the context ends.
	sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer scancel()
	_, err = Dial(sctx, Config{Mons: []msg.AddrVec{dead}, Logger: quiet()})
	if !errors.As(err, &he) || len(he.Attempts) < 2 || sctx.Err() == nil {
		t.Fatalf("err = %v (context %v), want several rounds until the context ended", err, sctx.Err())
	}
	if _, err := New(Config{}); !errors.Is(err, ErrNoMons) {
		t.Fatalf("no mons: %v", err)
	}
}

func TestSessionLost(t *testing.T) {
	mon := startFake(t, msg.EntityName{Type: msg.EntityMon})
	osd := startFake(t, msg.EntityName{Type: msg.EntityOSD, Num: 0})
	osd.dropCommands = true
	mon.osdAddr = msg.AddrVec{osd.addr}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Mons: []msg.AddrVec{{mon.addr}}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.OSDCommand(ctx, 0, []string{`{"prefix":"version"}`}, nil)
	if !errors.Is(err, ErrSessionLost) {
		t.Fatalf("command on a dropped session: %v", err)
	}

	// The mon session lost: the next request hunts again.
	c.MonConn().MarkDown()
	c.dropMon(c.MonConn())
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("ping after the session was lost: %v", err)
	}
	c.Close()
	if _, err := c.Ping(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("ping after Close: %v", err)
	}
}

// TestHuntUntilUp: a mon that starts listening only after the hunt has
// begun is found by a later round.
func TestHuntUntilUp(t *testing.T) {
	dead := deadAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		c   *Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := Dial(ctx, Config{Mons: []msg.AddrVec{dead}, Logger: quiet()})
		done <- result{c, err}
	}()
	time.Sleep(300 * time.Millisecond) // a few rounds fail first
	startFakeAt(t, msgr.Config{Name: msg.EntityName{Type: msg.EntityMon}}, dead.String())
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if r.c.FSID() != testFSID {
		t.Fatalf("fsid %v", r.c.FSID())
	}
}
