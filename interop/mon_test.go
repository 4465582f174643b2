package interop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/internal/cephtest"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// client starts a lossy ferry client messenger with cfg (its Logger
// replaced) whose replies arrive on the returned channel.
func client(t *testing.T, cfg msgr.Config) (*msgr.Messenger, chan *msg.Message) {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := msgr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.SetDefaultPolicy(msgr.LossyClient())
	ch := make(chan *msg.Message, 16)
	m.AddDispatcherTail(msgr.DispatcherFunc(func(r *msg.Message) bool {
		ch <- r
		return true
	}))
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Shutdown)
	return m, ch
}

func await(t *testing.T, ch chan *msg.Message, typ uint16) *msg.Message {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-ch:
			if r.Header.Type == typ {
				return r
			}
			t.Logf("ignoring message type %d from %v", r.Header.Type, r.Header.Src)
		case <-timeout:
			t.Fatalf("no reply of type %d from the mon", typ)
		}
	}
}

// TestMon talks to a real ceph-mon: MPing, MMonGetVersion and MMonCommand,
// from a default client and from one that offers to leave data CRCs out
// (msgr.Config.NoDataCRC, a ferry-only banner bit), which the mon ignores:
// that session keeps data CRCs, and the command's answer comes back in
// the data segment.
func TestMon(t *testing.T) {
	mon := cephtest.StartMon(t)
	for _, tc := range []struct {
		name string
		cfg  msgr.Config
	}{{"default", msgr.Config{}}, {"nodatacrc", msgr.Config{NoDataCRC: true}}} {
		t.Run(tc.name, func(t *testing.T) { testMon(t, mon, tc.cfg) })
	}
}

func testMon(t *testing.T, mon *cephtest.Mon, cfg msgr.Config) {
	m, ch := client(t, cfg)
	conn, err := m.ConnectType("v2:"+mon.V2Addr+"/0", msg.EntityMon)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := conn.Ready(ctx); err != nil {
		t.Fatalf("handshake with ceph-mon: %v (mon log: %s)", err, mon.LogPath())
	}
	if pn := conn.PeerName(); pn.Type != msg.EntityMon {
		t.Fatalf("peer %v", pn)
	}
	if !conn.DataCRC() {
		t.Fatal("data CRCs left out on a session with ceph-mon")
	}

	t.Run("ping", func(t *testing.T) {
		if err := conn.Send((&ceph.Ping{}).Marshal()); err != nil {
			t.Fatal(err)
		}
		r := await(t, ch, ceph.MsgPing)
		var p ceph.Ping
		if err := p.Unmarshal(r); err != nil {
			t.Fatal(err)
		}
		var status map[string]any
		if err := json.Unmarshal(p.Status, &status); err != nil {
			t.Fatalf("ping status is not JSON: %v\n%s", err, p.Status)
		}
		if _, ok := status["mon_status"]; !ok {
			t.Fatalf("no mon_status in %s", p.Status)
		}
	})

	t.Run("get-version", func(t *testing.T) {
		req := ceph.MonGetVersion{Handle: 77, What: "osdmap"}
		if err := conn.Send(req.Marshal()); err != nil {
			t.Fatal(err)
		}
		r := await(t, ch, ceph.MsgMonGetVersionReply)
		var rep ceph.MonGetVersionReply
		if err := rep.Unmarshal(r); err != nil {
			t.Fatal(err)
		}
		if rep.Handle != 77 || rep.Version < 1 || rep.OldestVersion > rep.Version {
			t.Fatalf("reply %+v", rep)
		}
	})

	t.Run("command", func(t *testing.T) {
		fsid, err := ceph.ParseFSID(mon.FSID)
		if err != nil {
			t.Fatal(err)
		}
		req := ceph.MonCommand{Tid: 5, FSID: fsid, Cmd: []string{`{"prefix":"mon stat","format":"json"}`}}
		if err := conn.Send(req.Marshal()); err != nil {
			t.Fatal(err)
		}
		r := await(t, ch, ceph.MsgMonCommandAck)
		var ack ceph.MonCommandAck
		if err := ack.Unmarshal(r); err != nil {
			t.Fatal(err)
		}
		if ack.R != 0 || ack.Tid != 5 {
			t.Fatalf("ack r=%d rs=%q tid=%d", ack.R, ack.RS, ack.Tid)
		}
		var stat map[string]any
		if err := json.Unmarshal(ack.Output, &stat); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, ack.Output)
		}
		// mon stat reports the quorum: this one mon, named a.
		if fmt.Sprint(stat["quorum"]) == "" || !strings.Contains(string(ack.Output), `"a"`) {
			t.Fatalf("mon stat output without the quorum of mon.a: %s", ack.Output)
		}
		t.Logf("mon stat: %s", ack.Output)
	})

	t.Run("wrong-fsid", func(t *testing.T) {
		req := ceph.MonCommand{Tid: 6, Cmd: []string{`{"prefix":"mon stat","format":"json"}`}}
		if err := conn.Send(req.Marshal()); err != nil {
			t.Fatal(err)
		}
		var ack ceph.MonCommandAck
		if err := ack.Unmarshal(await(t, ch, ceph.MsgMonCommandAck)); err != nil {
			t.Fatal(err)
		}
		if ack.R == 0 {
			t.Fatal("mon accepted a command with a wrong fsid")
		}
	})
}

// TestMonMissingFeatures: a ferry client advertising too few features is
// refused by the mon with a typed error.
func TestMonMissingFeatures(t *testing.T) {
	mon := cephtest.StartMon(t)
	m, err := msgr.New(msgr.Config{Supported: msg.FeatureMsgAddr2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	conn, _ := m.Connect("v2:" + mon.V2Addr + "/0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = conn.Ready(ctx)
	if err == nil {
		t.Fatal("mon accepted a client without its required features")
	}
	if !errors.Is(err, msgr2.ErrMissingFeatures) {
		t.Fatalf("error %v", err)
	}
}
