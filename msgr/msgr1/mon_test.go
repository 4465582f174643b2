package msgr1

import (
	"encoding/json"
	"testing"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/internal/cephtest"
	"github.com/ferrymsg/ferry/msg"
)

// TestRealMon drives a client engine over a socket to a real ceph-mon's
// v1 port (auth none): banner, connect, the SEQ exchange, then MPing (the
// one request a mon answers before MAuth) and its reply, and a keepalive
// the mon answers with our stamp.
func TestRealMon(t *testing.T) {
	mon := cephtest.StartMon(t)
	cfg := clientConfig()
	cfg.MyName = msg.EntityName{Type: msg.EntityClient, Num: msg.NewID}
	cfg.PeerAddr = addr("v1:" + mon.V1Addr + "/0")
	c := dialV1(t, mon.V1Addr, cfg, mon.LogPath())
	p := c.e.Peer()
	if !p.Lossy || p.ConnectSeq != 1 || p.Features&FeatureMsgAuth == 0 || p.Addr.IP.String() != mon.V1Addr {
		t.Fatalf("peer %+v", p)
	}
	t.Logf("mon says we are %v; features %#x", p.MyAddr, p.Features)

	c.send((&ceph.Ping{}).Marshal())
	if _, err := c.nc.Write(c.e.AppendKeepalive(nil, Stamp{Sec: 1234, Nsec: 5678})); err != nil {
		t.Fatal(err)
	}
	ack := false
	reply := c.await(ceph.MsgPing, func(ev Event) {
		if ev.Kind == EvKeepaliveAck {
			if ev.Stamp != (Stamp{1234, 5678}) {
				t.Fatalf("keepalive ack %+v", ev.Stamp)
			}
			ack = true
		}
	})
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
	for !ack {
		for _, ev := range c.step() {
			if ev.Kind == EvKeepaliveAck {
				ack = ev.Stamp == (Stamp{1234, 5678})
			}
		}
	}
	_, _ = c.nc.Write(c.e.AppendClose(nil))
}
