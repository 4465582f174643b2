package monc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// recordingServer is an auth.Server that keeps the errors it refused
// clients with, and files completed mon logins by global id.
type recordingServer struct {
	auth.Server
	mu     *sync.Mutex
	errs   *[]error
	logins map[uint64]*cephx.MonSession
}

func (r recordingServer) Handle(method uint32, peer msg.EntityType, mode uint32, first bool, p []byte) (auth.Reply, error) {
	rep, err := r.Server.Handle(method, peer, mode, first, p)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		*r.errs = append(*r.errs, err)
	}
	if ms, ok := r.Server.(*cephx.MonSession); ok && err == nil && rep.Done {
		r.logins[rep.Result.GlobalID] = ms
	}
	return rep, err
}

// TestTicketExpiry: against ferry's own server roles (a cephx.KeyServer
// behind a mon, a cephx.Verifier behind an OSD, both with an injected
// clock), over real msgr2 handshakes on loopback: a service ticket works
// until it expires; an expired one is refused by the OSD (auth.ErrExpired
// on the server, EACCES to the client), a client whose own clock says
// the ticket expired does not present it (auth.ErrNoTicket), and after
// RenewTickets over the mon session the OSD accepts the client again.
func TestTicketExpiry(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	serverClock, clientClock := &fakeClock{t: start}, &fakeClock{t: start}
	key := newKey(t, clientClock)
	ks, err := cephx.NewKeyServer(cephx.KeyServerConfig{
		Keyring: &cephx.Keyring{Entries: []cephx.KeyringEntry{{Name: admin, Key: key, Caps: map[string]string{"mon": "allow *", "osd": "allow *"}}}},
		Now:     serverClock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := cephx.NewVerifier(cephx.VerifierConfig{Service: msg.EntityOSD, KeyServer: ks, Now: serverClock.Now})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var osdErrs, monErrs []error
	logins := map[uint64]*cephx.MonSession{}

	monCfg := msgr.Config{Name: msg.EntityName{Type: msg.EntityMon}}
	monCfg.Auth.Methods = []uint32{auth.MethodCephx}
	monCfg.Auth.ServerFor = func(msg.EntityAddr) (auth.Server, error) {
		return recordingServer{ks.Handler(), &mu, &monErrs, logins}, nil
	}
	mon := startFakeWith(t, monCfg)
	mon.m.AddDispatcherHead(msgr.DispatcherFunc(func(r *msg.Message) bool {
		if r.Header.Type != ceph.MsgAuth {
			return false
		}
		var req ceph.Auth
		req.Unmarshal(r)
		conn := r.Conn.(*msgr.Conn)
		mu.Lock()
		s := logins[conn.Auth().GlobalID]
		mu.Unlock()
		ans, _ := s.HandleMAuth(req.Protocol, req.Payload)
		conn.Send((&ceph.AuthReply{Protocol: ans.Protocol, Result: ans.Result, GlobalID: ans.GlobalID, ResultBL: ans.ResultBL}).Marshal())
		return true
	}))
	osdCfg := msgr.Config{Name: msg.EntityName{Type: msg.EntityOSD, Num: 0}}
	osdCfg.Auth.Methods = []uint32{auth.MethodCephx}
	osdCfg.Auth.ServerFor = func(msg.EntityAddr) (auth.Server, error) {
		return recordingServer{v.Handler(), &mu, &osdErrs, logins}, nil
	}
	osd := startFakeWith(t, osdCfg)
	mon.osdAddr = msg.AddrVec{osd.addr}

	cx, err := cephx.NewClient(cephx.ClientConfig{Name: admin, Key: key, Now: clientClock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Mons: []msg.AddrVec{{mon.addr}}, Logger: quiet(), Cephx: cx, Now: clientClock.Now, NoAutoRenew: true})
	if err != nil {
		t.Fatalf("login: %v (server: %v)", err, monErrs)
	}
	defer c.Close()
	if ai := c.MonConn().Auth(); ai.Method != auth.MethodCephx || ai.GlobalID != c.GlobalID() {
		t.Fatalf("mon session %+v", ai)
	}
	version := func() error {
		res, err := c.OSDCommand(ctx, 0, []string{`{"prefix":"version"}`}, nil)
		if err == nil {
			err = res.Err()
		}
		return err
	}
	if err := version(); err != nil {
		t.Fatalf("with a fresh ticket: %v (OSD: %v)", err, osdErrs)
	}
	dropOSD := func() {
		conn, err := c.OSDConn(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		conn.MarkDown()
	}

	// The OSD's clock passes the ticket's expiry, the client's does not:
	// the client presents it, the OSD refuses it as expired.
	osdTicket, _ := cx.Ticket(msg.EntityOSD)
	dropOSD()
	serverClock.Advance(osdTicket.Expires.Sub(start) + time.Second)
	err = version()
	if err == nil {
		t.Fatal("the OSD accepted an expired ticket")
	}
	mu.Lock()
	last := osdErrs[len(osdErrs)-1]
	mu.Unlock()
	if !errors.Is(last, auth.ErrExpired) {
		t.Fatalf("OSD refused with %v, want auth.ErrExpired", last)
	}
	t.Logf("client: %v; OSD: %v", err, last)

	// The client's clock passes it too: it no longer presents the ticket.
	clientClock.Advance(osdTicket.Expires.Sub(start) + time.Second)
	if err := version(); !errors.Is(err, auth.ErrNoTicket) {
		t.Fatalf("with an expired ticket by the client's clock: %v, want auth.ErrNoTicket", err)
	}

	// Renewed over the mon session (the AUTH ticket is still valid):
	// the OSD takes the new ticket.
	if err := c.RenewTickets(ctx); err != nil {
		t.Fatal(err)
	}
	if renewed, _ := cx.Ticket(msg.EntityOSD); !renewed.Expires.After(osdTicket.Expires) {
		t.Fatalf("OSD ticket not renewed: %v", renewed.Expires)
	}
	if err := version(); err != nil {
		t.Fatalf("after renewal: %v (OSD: %v)", err, osdErrs[len(osdErrs)-1])
	}
}
