package msgr_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

// A ferry server offering one auth method and a client preferring
// another that lists the server's second (AuthConfig.Methods): the client
// retries with the server's method after AUTH_BAD_METHOD on the same
// socket and messages flow; listing only its preferred method, it fails
// with ErrBadAuthMethod, as before.
func TestAuthMethodFallbackMessengers(t *testing.T) {
	withMethods := func(cfg msgr.Config, ms ...uint32) msgr.Config {
		cfg.Auth.Methods = ms
		return cfg
	}
	cases := []struct {
		name    string
		server  msgr.Config
		client  msgr.Config
		method  uint32
		mode    uint32
		refused msgr.Config // the same client without the fallback
	}{
		{"server none, client cephx then none", msgr.Config{},
			withMethods(authConfig(adminKey), auth.MethodCephx, auth.MethodNone), auth.MethodNone, auth.ConModeCRC,
			withMethods(authConfig(adminKey), auth.MethodCephx)},
		{"server cephx, client none then cephx", authConfig(adminKey, auth.ConModeSecure),
			withMethods(authConfig(adminKey, auth.ConModeSecure, auth.ConModeCRC), auth.MethodNone, auth.MethodCephx), auth.MethodCephx, auth.ConModeSecure,
			withMethods(authConfig(adminKey), auth.MethodNone)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := echoServer(t, transport.Default, "tcp://127.0.0.1:0", tc.server)
			c, col := newClient(t, transport.Default, tc.client)
			conn := mustConnect(t, c, s.ListenAddrs()[0])
			m := msg.New(testType)
			m.Front = msg.Buffers{[]byte("after the fallback")}
			if err := conn.Send(m); err != nil {
				t.Fatal(err)
			}
			if r := recv(t, col.ch); string(r.Front.Bytes()) != "after the fallback" {
				t.Fatalf("echo %q", r.Front.Bytes())
			}
			if a := conn.Auth(); a.Method != tc.method || a.Mode != tc.mode || a.Name.String() != "client.admin" {
				t.Fatalf("auth %+v, want method %d mode %d", a, tc.method, tc.mode)
			}

			bad, _ := newClient(t, transport.Default, tc.refused)
			err := readyErr(t, mustConnect(t, bad, s.ListenAddrs()[0]))
			var ae *msgr2.AuthError
			if !errors.Is(err, msgr2.ErrBadAuthMethod) || !errors.As(err, &ae) || !slices.Equal(ae.AllowedMethods, []uint32{tc.method}) {
				t.Fatalf("without the fallback: %v", err)
			}
		})
	}
}
