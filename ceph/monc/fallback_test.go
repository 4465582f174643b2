package monc

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph/cephconf"
	"github.com/ferrymsg/ferry/internal/cephtest"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// v2Mons is the mon host's msgr2 entries only (so the hunt speaks msgr2,
// where AUTH_BAD_METHOD exists).
func v2Mons(t *testing.T, monHost string) []msg.AddrVec {
	t.Helper()
	mons, err := cephconf.ParseMonHost(monHost)
	if err != nil {
		t.Fatal(err)
	}
	var out []msg.AddrVec
	for _, v := range mons {
		for _, a := range v {
			if a.Type == msg.AddrMsgr2 {
				out = append(out, msg.AddrVec{a})
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no v2 address in %s", monHost)
	}
	return out
}

// dialMethods dials mons as client.admin with cx and the auth methods
// given, in order of preference.
func dialMethods(ctx context.Context, mons []msg.AddrVec, cx *cephx.Client, methods ...uint32) (*Client, error) {
	return Dial(ctx, Config{Mons: mons, Logger: quiet(), Cephx: cx, NoAutoRenew: true, HuntRounds: 1,
		Msgr: msgr.Config{Auth: msgr.AuthConfig{Methods: methods}}})
}

// A real ceph-mon that allows only auth none (auth_*_required = none)
// refuses cephx with AUTH_BAD_METHOD; a client offering cephx then none
// retries with none on the same socket and gets its session, while a
// client offering cephx alone fails with ErrBadAuthMethod.
func TestRealMonAuthFallbackToNone(t *testing.T) {
	mon := cephtest.StartMon(t)
	mons := v2Mons(t, mon.MonHost())
	key, err := cephx.GenerateKey(rand.Reader, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cx, err := cephx.NewClient(cephx.ClientConfig{Name: admin, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	_, err = dialMethods(ctx, mons, cx, auth.MethodCephx)
	var ae *msgr2.AuthError
	if !errors.Is(err, msgr2.ErrBadAuthMethod) || !errors.As(err, &ae) || len(ae.AllowedMethods) != 1 || ae.AllowedMethods[0] != auth.MethodNone {
		t.Fatalf("cephx only against an auth none mon: %v", err)
	}

	c, err := dialMethods(ctx, mons, cx, auth.MethodCephx, auth.MethodNone)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if a := c.MonConn().Auth(); a.Method != auth.MethodNone || a.Mode != auth.ConModeCRC {
		t.Fatalf("session auth %+v, want auth none in crc mode", a)
	}
	if got := c.FSID().String(); got != mon.FSID {
		t.Fatalf("fsid %s, want %s", got, mon.FSID)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// A real cephx mon refuses auth none; a client preferring none then cephx
// retries with cephx (secure mode, Ceph's default towards mons) and runs
// a command; one offering none alone fails with ErrBadAuthMethod.
func TestRealMonAuthFallbackToCephx(t *testing.T) {
	cl := cephtest.StartCluster(t, cephtest.ClusterOptions{NoOSD: true, NoMgr: true})
	mons := v2Mons(t, cl.MonHost())
	key, err := cephx.ParseKey(cl.Key("client.admin"))
	if err != nil {
		t.Fatal(err)
	}
	newCx := func() *cephx.Client {
		cx, err := cephx.NewClient(cephx.ClientConfig{Name: admin, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return cx
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	_, err = dialMethods(ctx, mons, newCx(), auth.MethodNone)
	if !errors.Is(err, msgr2.ErrBadAuthMethod) {
		t.Fatalf("auth none only against a cephx mon: %v", err)
	}

	c, err := dialMethods(ctx, mons, newCx(), auth.MethodNone, auth.MethodCephx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if a := c.MonConn().Auth(); a.Method != auth.MethodCephx || a.Mode != auth.ConModeSecure || a.GlobalID == 0 {
		t.Fatalf("session auth %+v, want cephx in secure mode with a global id", a)
	}
	res, err := c.MonCommand(ctx, []string{`{"prefix":"mon stat","format":"json"}`}, nil)
	if err != nil || res.Err() != nil {
		t.Fatalf("mon stat: %+v, %v", res, err)
	}
}
