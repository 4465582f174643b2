//go:build linux

package rpc_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/shm"
)

// A rank that listens on shm and TCP is reached over shm by a peer on the
// same host that has the shm transport, and over TCP by one that does
// not.
func TestMultiAddressRank(t *testing.T) {
	dir := t.TempDir()
	reg := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}), shm.New())
	srv, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0,shm://" + filepath.Join(dir, "r0.sock"), Transports: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	newCtx(t, srv, rpc.ContextOptions{Auto: true})
	if n := len(strings.Split(srv.URI(), ",")); n != 2 {
		t.Fatalf("URI %q: want two addresses", srv.URI())
	}
	for _, tc := range []struct {
		reg    *transport.Registry
		scheme string
	}{{reg, "shm"}, {transport.NewRegistry(transport.NewTCP(transport.TCPOptions{})), "tcp"}} {
		cli, err := rpc.New(rpc.Options{Transports: tc.reg, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		if err := cli.Group().Add(0, srv.URI()); err != nil {
			t.Fatal(err)
		}
		c := newCtx(t, cli, rpc.ContextOptions{})
		if err := c.Ping(context.Background(), rpc.Endpoint{}); err != nil {
			t.Fatal(err)
		}
		// A shm connection knows its peer process; a TCP one does not.
		conns := cli.Messenger().Conns()
		if len(conns) != 1 {
			t.Fatalf("%d connections", len(conns))
		}
		if _, local := conns[0].PeerProcess(); local != (tc.scheme == "shm") {
			t.Fatalf("client with %v: connection knows its peer process: %v, want a %s connection", tc.reg.Schemes(), local, tc.scheme)
		}
	}
}
