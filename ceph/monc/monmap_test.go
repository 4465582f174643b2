package monc

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// twoMons starts fake mons a and b whose monmaps list both.
func twoMons(t *testing.T) (a, b *fakeDaemon) {
	t.Helper()
	a = startFake(t, msg.EntityName{Type: msg.EntityMon, Num: 0})
	b = startFake(t, msg.EntityName{Type: msg.EntityMon, Num: 1})
	mons := []ceph.MonInfo{{Name: "a", Addrs: msg.AddrVec{a.addr}}, {Name: "b", Addrs: msg.AddrVec{b.addr}}}
	a.mons, a.name = mons, "a"
	b.mons, b.name = mons, "b"
	return a, b
}

// A client configured with one mon learns the others from the monmap
// and hunts to them when its mon goes away.
func TestHuntAcrossMonMap(t *testing.T) {
	a, b := twoMons(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Mons: []msg.AddrVec{{a.addr}}, Logger: quiet(), HuntTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mm := c.MonMap()
	if mm == nil || !reflect.DeepEqual(mm.Names(), []string{"a", "b"}) || mm.FSID != testFSID || mm.Epoch != 4 {
		t.Fatalf("monmap %+v", mm)
	}
	if c.MonName() != "a" || c.Mon() != a.addr.String() {
		t.Fatalf("session with %s (%q)", c.Mon(), c.MonName())
	}
	if got := c.huntList(); len(got) != 2 {
		t.Fatalf("hunt list %v, want the monmap's two mons", got)
	}

	a.m.Shutdown()
	// The first request may still see the session with a end; then the
	// client hunts, and b (which only the monmap named) answers.
	var res *CommandResult
	for range 200 {
		if res, err = c.MonCommand(ctx, []string{`{"prefix":"mon stat"}`}, nil); err == nil {
			break
		}
		if !errors.Is(err, ErrSessionLost) && !errors.Is(err, msgr.ErrClosed) {
			t.Logf("while mon.a goes away: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // a retry's backoff
	}
	if err != nil || string(res.Output) != `{"ran":"mon stat","mon":"b"}` {
		t.Fatalf("after mon.a went away: %+v, %v", res, err)
	}
	if c.MonName() != "b" || c.Mon() != b.addr.String() {
		t.Fatalf("session with %s (%q), want mon.b", c.Mon(), c.MonName())
	}
}

// MonCommandTo reaches the mon named (or of the rank given), moving the
// session there; a mon the monmap does not list is a *NoSuchMonError.
func TestMonCommandTo(t *testing.T) {
	a, b := twoMons(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Mons: []msg.AddrVec{{a.addr}}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct{ target, want string }{{"a", "a"}, {"b", "b"}, {"0", "a"}, {"b", "b"}, {"1", "b"}, {"a", "a"}} {
		res, err := c.MonCommandTo(ctx, tc.target, []string{`{"prefix":"mon stat"}`}, nil)
		if err != nil || string(res.Output) != `{"ran":"mon stat","mon":"`+tc.want+`"}` {
			t.Fatalf("mon %s: %+v, %v", tc.target, res, err)
		}
		if c.MonName() != tc.want {
			t.Fatalf("mon %s: session with %q", tc.target, c.MonName())
		}
	}
	if c.Mon() != a.addr.String() {
		t.Fatalf("session with %s, want mon.a %s", c.Mon(), a.addr)
	}
	_, err = c.MonCommandTo(ctx, "zz", []string{`{"prefix":"mon stat"}`}, nil)
	var ne *NoSuchMonError
	if !errors.Is(err, ErrNoSuchMon) || !errors.As(err, &ne) || ne.Mon != "zz" || !reflect.DeepEqual(ne.Known, []string{"a", "b"}) || ne.Epoch != 4 {
		t.Fatalf("mon zz: %v", err)
	}
	if _, err := c.MonCommandTo(ctx, "2", []string{`{"prefix":"mon stat"}`}, nil); !errors.Is(err, ErrNoSuchMon) {
		t.Fatalf("rank 2 of 2: %v", err)
	}
	// The session still works after the refusals.
	if res, err := c.MonCommand(ctx, []string{`{"prefix":"mon stat"}`}, nil); err != nil || res.Err() != nil {
		t.Fatalf("after the refusals: %+v, %v", res, err)
	}

	// A mon the monmap lists but that is down: the error of the attempt,
	// and the session with the current mon is kept.
	b.m.Shutdown()
	if _, err := c.MonCommandTo(ctx, "b", []string{`{"prefix":"mon stat"}`}, nil); err == nil || errors.Is(err, ErrNoSuchMon) {
		t.Fatalf("mon.b down: %v", err)
	}
	if c.MonName() != "a" {
		t.Fatalf("session after mon.b failed: %q", c.MonName())
	}
}

// A monmap that does not decode fails the attempt with a typed error;
// an empty one leaves the configured mons to hunt across.
func TestBadMonMap(t *testing.T) {
	mon := startFake(t, msg.EntityName{Type: msg.EntityMon})
	mon.rawMonMap = ceph.EncodeMonMapHead(testFSID, 4, []byte{1, 2, 3})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Dial(ctx, Config{Mons: []msg.AddrVec{{mon.addr}}, Logger: quiet(), HuntRounds: 1})
	var he *HuntError
	if !errors.Is(err, ceph.ErrMalformed) || !errors.As(err, &he) {
		t.Fatalf("truncated monmap: %v", err)
	}

	mon.rawMonMap = nil
	mon.mons = []ceph.MonInfo{}
	c, err := Dial(ctx, Config{Mons: []msg.AddrVec{{mon.addr}}, Logger: quiet(), HuntRounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if mm := c.MonMap(); mm == nil || len(mm.Mons) != 0 || c.MonName() != "" {
		t.Fatalf("empty monmap: %+v, name %q", mm, c.MonName())
	}
	if got := c.huntList(); len(got) != 1 || got[0][0] != mon.addr {
		t.Fatalf("hunt list %v", got)
	}
}
