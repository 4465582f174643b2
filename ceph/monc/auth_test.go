package monc

import (
	"bytes"
	"context"
	"crypto/rand"
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

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var admin = msg.AuthName{Type: msg.EntityClient, ID: "admin"}

// startCephxMon is a fake mon whose MAuth requests are answered by a
// cephx.KeyServer (ferry's mon role), one MonSession per connection.
func startCephxMon(t *testing.T, key cephx.Key, clock *fakeClock) *fakeDaemon {
	t.Helper()
	ks, err := cephx.NewKeyServer(cephx.KeyServerConfig{
		Keyring: &cephx.Keyring{Entries: []cephx.KeyringEntry{{Name: admin, Key: key, Caps: map[string]string{"mon": "allow *", "osd": "allow *"}}}},
		Now:     clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	f := startFake(t, msg.EntityName{Type: msg.EntityMon})
	var mu sync.Mutex
	sessions := map[*msgr.Conn]*cephx.MonSession{}
	f.m.AddDispatcherHead(msgr.DispatcherFunc(func(r *msg.Message) bool {
		if r.Header.Type != ceph.MsgAuth {
			return false
		}
		var req ceph.Auth
		if err := req.Unmarshal(r); err != nil {
			return true
		}
		conn := r.Conn.(*msgr.Conn)
		mu.Lock()
		s := sessions[conn]
		if s == nil {
			s = ks.Handler()
			sessions[conn] = s
		}
		mu.Unlock()
		ans, _ := s.HandleMAuth(req.Protocol, req.Payload)
		conn.Send((&ceph.AuthReply{Protocol: ans.Protocol, Result: ans.Result, GlobalID: ans.GlobalID, ResultBL: ans.ResultBL}).Marshal())
		return true
	}))
	return f
}

func newKey(t *testing.T, clock *fakeClock) cephx.Key {
	t.Helper()
	k, err := cephx.GenerateKey(rand.Reader, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestMAuthLoginAndRenewal logs in to ferry's own mon role over MAuth,
// then drives ticket renewal with an injected clock: service tickets
// renewed a quarter of their validity before they expire, the AUTH
// ticket renewed with the old one (same global id), and an expired AUTH
// ticket refused with a typed error.
func TestMAuthLoginAndRenewal(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	key := newKey(t, clock)
	mon := startCephxMon(t, key, clock)
	cx, err := cephx.NewClient(cephx.ClientConfig{Name: admin, Key: key, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Mons: []msg.AddrVec{{mon.addr}}, Logger: quiet(), Cephx: cx, MAuthLogin: true, Now: clock.Now, NoAutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gid := c.GlobalID()
	if gid == 0 || c.FSID() != testFSID {
		t.Fatalf("after login: global id %d, fsid %v", gid, c.FSID())
	}
	osd1, ok := cx.Ticket(msg.EntityOSD)
	if !ok || !osd1.Valid(clock.Now()) {
		t.Fatalf("no valid OSD ticket after login: %+v", osd1)
	}
	auth1, _ := cx.Ticket(msg.EntityAuth)

	// Nothing is due yet: RenewTickets sends nothing and changes nothing.
	if err := c.RenewTickets(ctx); err != nil {
		t.Fatal(err)
	}
	if t2, _ := cx.Ticket(msg.EntityOSD); !bytes.Equal(t2.Blob.Blob, osd1.Blob.Blob) {
		t.Fatal("a ticket was renewed before it was due")
	}

	// Past the service tickets' renew-after point (3/4 of 1 h): renewed.
	clock.Advance(46 * time.Minute)
	if cx.Need(clock.Now())&uint32(msg.EntityOSD) == 0 {
		t.Fatal("OSD ticket not due 46 min into its hour")
	}
	if err := c.RenewTickets(ctx); err != nil {
		t.Fatal(err)
	}
	osd2, _ := cx.Ticket(msg.EntityOSD)
	if !osd2.Expires.After(osd1.Expires) || bytes.Equal(osd2.Blob.Blob, osd1.Blob.Blob) {
		t.Fatalf("OSD ticket not renewed: expires %v then %v", osd1.Expires, osd2.Expires)
	}
	if cx.Need(clock.Now()) != 0 {
		t.Fatalf("still due after renewal: %#x", cx.Need(clock.Now()))
	}

	// ServiceTickets fetches tickets whether due or not.
	clock.Advance(time.Second)
	if err := c.ServiceTickets(ctx, cephx.ServiceMask(msg.EntityMgr)); err != nil {
		t.Fatal(err)
	}
	if mgr, ok := cx.Ticket(msg.EntityMgr); !ok || !mgr.Expires.Equal(clock.Now().Add(time.Hour)) {
		t.Fatalf("MGR ticket %+v", mgr)
	}

	// Past the AUTH ticket's renew-after point: the AUTH ticket is
	// renewed with the old one as proof, and the global id kept.
	clock.Advance(auth1.RenewAfter.Sub(clock.Now()) + time.Minute)
	if err := c.RenewTickets(ctx); err != nil {
		t.Fatal(err)
	}
	auth2, _ := cx.Ticket(msg.EntityAuth)
	if !auth2.Expires.After(auth1.Expires) || c.GlobalID() != gid {
		t.Fatalf("AUTH ticket not renewed (expires %v then %v) or global id changed (%d, %d)", auth1.Expires, auth2.Expires, gid, c.GlobalID())
	}
	if cx.Need(clock.Now()) != 0 {
		t.Fatalf("still due after the AUTH renewal: %#x", cx.Need(clock.Now()))
	}
	// The mon session still works.
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	// Left to expire, the AUTH ticket cannot renew anything: a typed
	// error says there is no valid ticket (a new login is needed).
	clock.Advance(auth2.Expires.Sub(clock.Now()) + time.Second)
	if err := c.RenewTickets(ctx); !errors.Is(err, auth.ErrNoTicket) {
		t.Fatalf("renewal with an expired AUTH ticket: %v, want auth.ErrNoTicket", err)
	}
}

// TestMAuthWrongKey: a client with the wrong key is refused, and the
// error says so.
func TestMAuthWrongKey(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	mon := startCephxMon(t, newKey(t, clock), clock)
	cx, err := cephx.NewClient(cephx.ClientConfig{Name: admin, Key: newKey(t, clock), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = Dial(ctx, Config{Mons: []msg.AddrVec{{mon.addr}}, Logger: quiet(), Cephx: cx, MAuthLogin: true, Now: clock.Now, NoAutoRenew: true})
	var se *cephx.StatusError
	if !errors.Is(err, auth.ErrDenied) || !errors.As(err, &se) || se.Status != cephx.StatusEACCES {
		t.Fatalf("wrong key: %v, want a cephx.StatusError EACCES", err)
	}
	t.Logf("wrong key: %v", err)
}

// TestNoCephx: cephx operations on an auth-none client say why they
// cannot run.
func TestNoCephx(t *testing.T) {
	mon := startFake(t, msg.EntityName{Type: msg.EntityMon})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Mons: []msg.AddrVec{{mon.addr}}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.RenewTickets(ctx); !errors.Is(err, ErrNoCephx) {
		t.Fatalf("RenewTickets: %v", err)
	}
	if err := c.ServiceTickets(ctx, 4); !errors.Is(err, ErrNoCephx) {
		t.Fatalf("ServiceTickets: %v", err)
	}
	if c.GlobalID() != 0 || c.Cephx() != nil {
		t.Fatal("auth none client has cephx state")
	}
}

// TestAutoRenew: the background renewal notices, at its next tick, that
// the injected clock has made the service tickets due, and renews them
// over the mon session.
func TestAutoRenew(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	key := newKey(t, clock)
	mon := startCephxMon(t, key, clock)
	cx, err := cephx.NewClient(cephx.ClientConfig{Name: admin, Key: key, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Mons: []msg.AddrVec{{mon.addr}}, Logger: quiet(), Cephx: cx, MAuthLogin: true, Now: clock.Now, TickInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first, _ := cx.Ticket(msg.EntityOSD)
	clock.Advance(50 * time.Minute)
	for {
		if now, _ := cx.Ticket(msg.EntityOSD); now.Expires.After(first.Expires) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the OSD ticket was not renewed in the background")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if cx.Need(clock.Now()) != 0 {
		t.Fatalf("still due: %#x", cx.Need(clock.Now()))
	}
}
