package monc

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/ceph/cephconf"
	"github.com/ferrymsg/ferry/internal/cephtest"
)

// TestRealMon runs the client against a real ceph-mon (auth none): the
// fsid from the monmap it fetched, a ping, a map version and a command.
// The cephx interop tests (package interop) do the same with cephx.
func TestRealMon(t *testing.T) {
	mon := cephtest.StartMon(t)
	mons, err := cephconf.ParseMonHost(mon.MonHost())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Mons: mons, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.FSID().String(); got != mon.FSID {
		t.Fatalf("fsid from the monmap %s, want %s", got, mon.FSID)
	}
	if c.MonMapEpoch() < 1 {
		t.Fatalf("monmap epoch %d", c.MonMapEpoch())
	}
	st, err := c.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		MonStatus struct {
			Name string `json:"name"`
		} `json:"mon_status"`
	}
	if err := json.Unmarshal(st, &status); err != nil || status.MonStatus.Name != "a" {
		t.Fatalf("ping status %s (%v)", st, err)
	}
	v, err := c.GetVersion(ctx, "osdmap")
	if err != nil || v.Version < 1 {
		t.Fatalf("osdmap version %+v, %v", v, err)
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
		t.Fatalf("mon stat output %s (%v)", res.Output, err)
	}
	// The monmap the mon sent: mon.a at the addresses it listens on, and
	// the session is with it.
	mm := c.MonMap()
	if mm == nil || len(mm.Mons) != 1 || mm.Mons[0].Name != "a" || mm.FSID.String() != mon.FSID || mm.Epoch != c.MonMapEpoch() {
		t.Fatalf("monmap %+v", mm)
	}
	if got, want := mm.Mons[0].Addrs.String(), "[v2:"+mon.V2Addr+"/0,v1:"+mon.V1Addr+"/0]"; got != want {
		t.Fatalf("mon.a's addresses in the monmap %s, want %s", got, want)
	}
	if c.MonName() != "a" {
		t.Fatalf("session with %q", c.MonName())
	}
	// Commands to mon.a by name and by rank; mon.b is not in the monmap.
	for _, target := range []string{"a", "0"} {
		res, err := c.MonCommandTo(ctx, target, []string{`{"prefix":"mon stat","format":"json"}`}, nil)
		if err != nil || res.Err() != nil || !json.Valid(res.Output) {
			t.Fatalf("mon stat to %s: %+v, %v", target, res, err)
		}
	}
	_, err = c.MonCommandTo(ctx, "b", []string{`{"prefix":"mon stat"}`}, nil)
	var ne *NoSuchMonError
	if !errors.Is(err, ErrNoSuchMon) || !errors.As(err, &ne) || len(ne.Known) != 1 || ne.Known[0] != "a" {
		t.Fatalf("mon.b: %v", err)
	}
	// No OSD exists: osd find fails with the mon's ENOENT.
	if _, err := c.OSDAddrs(ctx, 0); err == nil {
		t.Fatal("osd find 0 in a cluster without OSDs succeeded")
	}
}

// TestRealOSD finds a real OSD through the mon and runs `version` on it
// with MCommand, as `ceph tell osd.0 version` does (auth none; the
// interop tests do it with cephx in both modes).
func TestRealOSD(t *testing.T) {
	cl := cephtest.StartCluster(t, cephtest.ClusterOptions{AuthNone: true, NoMgr: true})
	mons, err := cephconf.ParseMonHost(cl.MonHost())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Mons: mons, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addrs, err := c.OSDAddrs(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if addrs.String() != "["+cl.OSDAddrs[0]+","+cl.OSDAddrs[1]+"]" {
		t.Fatalf("osd find: %v, cluster says %v", addrs, cl.OSDAddrs)
	}
	res, err := c.OSDCommand(ctx, 0, []string{`{"prefix": "version"}`}, nil)
	if err != nil || res.Err() != nil {
		t.Fatalf("osd.0 version: %+v, %v", res, err)
	}
	var v struct {
		Version string `json:"version"`
		Release string `json:"release"`
	}
	if err := json.Unmarshal(res.Output, &v); err != nil || v.Release != "pacific" {
		t.Fatalf("osd.0 version output %s (%v)", res.Output, err)
	}
	// An unknown command: the OSD's EINVAL and its status string.
	res, err = c.OSDCommand(ctx, 0, []string{`{"prefix": "no such command"}`}, nil)
	if err != nil || res.R == 0 || res.RS == "" {
		t.Fatalf("bad command: %+v, %v", res, err)
	}
	t.Logf("bad command: %v", res.Err())
}
