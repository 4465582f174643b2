package msgr1

import (
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/internal/cephtest"
	"github.com/ferrymsg/ferry/msg"
)

// TestRealCephxCluster: over msgr1 against a real cephx cluster, a client
// engine logs in to the mon with MAuth (no authorizer in the connect, as
// §1.8 says), gets an OSD ticket, then opens a session to the real OSD's
// v1 port with the cephx authorizer (the OSD challenges it), sends a
// signed MCommand "version" and gets the OSD's reply; a message with a
// wrong signature makes the OSD drop the connection.
func TestRealCephxCluster(t *testing.T) {
	cl := cephtest.StartCluster(t, cephtest.ClusterOptions{NoMgr: true})
	key, err := cephx.ParseKey(cl.Key("client.admin"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := cephx.NewClient(cephx.ClientConfig{Name: msg.AuthName{Type: msg.EntityClient, ID: "admin"}, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	fsid, err := ceph.ParseFSID(cl.FSID)
	if err != nil {
		t.Fatal(err)
	}

	// The mon: handshake without an authorizer, then MAuth.
	cfg := clientConfig()
	cfg.MyName = msg.EntityName{Type: msg.EntityClient, Num: msg.NewID}
	cfg.PeerAddr = addr("v1:" + cl.MonV1 + "/0")
	cfg.Auth = admin.Handler() // not used towards a mon
	mon := dialV1(t, cl.MonV1, cfg, cl.LogPath("mon.a"))
	if mon.e.Peer().Auth != nil || mon.e.Signed() {
		t.Fatal("a mon session has an authorizer")
	}
	login := admin.MAuthLogin()
	mon.send((&ceph.Auth{Protocol: 0, Payload: login.Hello()}).Marshal())
	var rep ceph.AuthReply
	if err := rep.Unmarshal(mon.await(ceph.MsgAuthReply, nil)); err != nil {
		t.Fatal(err)
	}
	p, err := login.HandleChallenge(rep.Result, rep.ResultBL)
	if err != nil {
		t.Fatalf("challenge: %v", err)
	}
	mon.send((&ceph.Auth{Protocol: 2, Payload: p}).Marshal())
	if err := rep.Unmarshal(mon.await(ceph.MsgAuthReply, nil)); err != nil {
		t.Fatal(err)
	}
	res, err := login.HandleDone(rep.Result, rep.GlobalID, rep.ResultBL)
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	t.Logf("logged in over msgr1 as client.%d", res.GlobalID)
	// An authenticated mon session answers commands.
	mon.send((&ceph.MonCommand{Tid: 1, FSID: fsid, Cmd: []string{`{"prefix": "mon stat", "format": "json"}`}}).Marshal())
	var ack ceph.MonCommandAck
	if err := ack.Unmarshal(mon.await(ceph.MsgMonCommandAck, nil)); err != nil || ack.R != 0 || !strings.Contains(string(ack.Output), `"quorum"`) {
		t.Fatalf("mon stat: %+v %v", ack, err)
	}
	if _, ok := admin.Ticket(msg.EntityOSD); !ok {
		t.Fatal("no OSD ticket from the login")
	}

	// The OSD, with the authorizer.
	var osdAddr string
	for _, a := range cl.OSDAddrs {
		if strings.HasPrefix(a, "v1:") {
			osdAddr = a
		}
	}
	if osdAddr == "" {
		t.Fatalf("osd.0 has no v1 address: %v", cl.OSDAddrs)
	}
	target := addr(osdAddr)
	ocfg := clientConfig()
	ocfg.MyName = msg.EntityName{Type: msg.EntityClient, Num: int64(res.GlobalID)}
	ocfg.PeerType = msg.EntityOSD
	ocfg.PeerAddr = target
	ocfg.Auth = admin.Handler()
	osd := dialV1(t, target.IP.String(), ocfg, cl.LogPath("osd.0"))
	challenged := false
	for _, ev := range osd.pending {
		challenged = challenged || ev.Kind == EvChallenge
	}
	if !challenged || !osd.e.Signed() || osd.e.Peer().Auth == nil {
		t.Fatalf("OSD session: challenged %v signed %v", challenged, osd.e.Signed())
	}
	osd.send((&ceph.Command{Tid: 7, FSID: fsid, Cmd: []string{`{"prefix": "version"}`}}).Marshal())
	var cr ceph.CommandReply
	if err := cr.Unmarshal(osd.await(ceph.MsgCommandReply, nil)); err != nil {
		t.Fatal(err)
	}
	if cr.Tid != 7 || cr.R != 0 || !strings.Contains(string(cr.Output), `"version"`) {
		t.Fatalf("version: %+v %s", cr, cr.Output)
	}
	t.Logf("osd.0 says %s", strings.Join(strings.Fields(string(cr.Output)), " "))

	// A wrong signature: the OSD drops the connection.
	m := (&ceph.Command{Tid: 8, FSID: fsid, Cmd: []string{`{"prefix": "version"}`}}).Marshal()
	osd.seq++
	m.Header.Seq = osd.seq
	w := osd.e.AppendMessage(nil, m)
	w[len(w)-2] ^= 1
	if _, err := osd.nc.Write(w); err != nil {
		t.Fatal(err)
	}
	if !osd.closedByPeer(20 * time.Second) {
		t.Fatal("the OSD kept a connection whose message had a wrong signature")
	}
}
