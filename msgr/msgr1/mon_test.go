package msgr1

import (
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/internal/cephtest"
	"github.com/ferrymsg/ferry/msg"
)

// TestRealMon drives a client engine over a socket to a real ceph-mon's
// v1 port (auth none): banner, connect, the SEQ exchange, then MPing (the
// one request a mon answers before MAuth) and its reply, and a keepalive
// the mon answers with our stamp. The engine stays pure; this test does
// the I/O.
func TestRealMon(t *testing.T) {
	mon := cephtest.StartMon(t)
	nc, err := net.DialTimeout("tcp", mon.V1Addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	cfg := clientConfig()
	cfg.MyName = msg.EntityName{Type: msg.EntityClient, Num: msg.NewID}
	cfg.PeerAddr = addr("v1:" + mon.V1Addr + "/0")
	cfg.Lossy = true
	e := NewEngine(cfg)
	e.Start()
	flush := func() {
		if out := e.Output(); len(out) > 0 {
			if _, err := nc.Write(out); err != nil {
				t.Fatal(err)
			}
		}
	}
	step := func() []Event {
		n, _ := e.Need()
		if n == 0 {
			t.Fatalf("engine stalled: %v", e.Err())
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(nc, p); err != nil {
			t.Fatalf("read (%d bytes): %v (mon log %s)", n, err, mon.LogPath())
		}
		evs, err := e.Feed(p)
		if err != nil {
			t.Fatalf("feed: %v", err)
		}
		flush()
		return evs
	}
	flush()
	for !e.Ready() {
		step()
	}
	p := e.Peer()
	if !p.Lossy || p.ConnectSeq != 1 || p.Features&FeatureMsgAuth == 0 || p.Addr.IP.String() != mon.V1Addr {
		t.Fatalf("peer %+v", p)
	}
	t.Logf("mon says we are %v; features %#x", p.MyAddr, p.Features)

	ping := (&ceph.Ping{}).Marshal()
	ping.Header.Seq = 1
	b := e.AppendMessage(nil, ping)
	b = e.AppendKeepalive(b, Stamp{Sec: 1234, Nsec: 5678})
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	var reply *msg.Message
	var ack bool
	for reply == nil || !ack {
		for _, ev := range step() {
			switch ev.Kind {
			case EvMessage:
				if ev.Msg != nil && ev.Msg.Header.Type == ceph.MsgPing {
					reply = ev.Msg
				}
			case EvKeepalive:
				if !ev.Bare {
					_, _ = nc.Write(e.AppendKeepaliveAck(nil, ev.Stamp))
				}
			case EvKeepaliveAck:
				if ev.Stamp != (Stamp{1234, 5678}) {
					t.Fatalf("keepalive ack %+v", ev.Stamp)
				}
				ack = true
			}
		}
	}
	var pr ceph.Ping
	if err := pr.Unmarshal(reply); err != nil {
		t.Fatal(err)
	}
	var status map[string]any
	if err := json.Unmarshal(pr.Status, &status); err != nil || status["mon_status"] == nil {
		t.Fatalf("ping status %v: %s", err, pr.Status)
	}
	if reply.Header.Src.Type != msg.EntityMon || reply.Header.Seq != 1 || reply.Footer.Flags&msg.FooterComplete == 0 {
		t.Fatalf("reply header %+v footer %+v", reply.Header, reply.Footer)
	}
	_, _ = nc.Write(e.AppendClose(nil))
}
