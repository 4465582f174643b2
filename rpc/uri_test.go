//go:build linux

package rpc_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/shm"
)

func TestSelectURI(t *testing.T) {
	dir := t.TempDir()
	// Real sockets: listen on them.
	all := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}), transport.NewUnix(), shm.New())
	for _, a := range []string{"unix://" + filepath.Join(dir, "u.sock"), "shm://" + filepath.Join(dir, "s.sock")} {
		l, err := all.Listen(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	u, s := "unix://"+filepath.Join(dir, "u.sock"), "shm://"+filepath.Join(dir, "s.sock")
	tcp := "tcp://127.0.0.1:7"
	elsewhere := "shm://" + filepath.Join(dir, "not-here.sock") // another host's socket
	// A socket file a dead process left: nothing listens on it.
	stalePath := filepath.Join(dir, "stale.sock")
	sl, err := net.ListenUnix("unix", &net.UnixAddr{Name: stalePath, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	sl.SetUnlinkOnClose(false)
	sl.Close()
	stale := "shm://" + stalePath
	tcpOnly := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}))
	for _, tc := range []struct {
		reg       *transport.Registry
		uri, want string
	}{
		{all, tcp, tcp},
		{all, tcp + "," + u + "," + s, s},
		{all, u + "," + tcp, u},
		{all, tcp + "," + elsewhere, tcp},
		{all, stale + "," + tcp, tcp},
		{all, "unix://" + stalePath + "," + tcp, tcp},
		{tcpOnly, s + "," + tcp, tcp},
		{all, "bogus:x," + tcp, tcp},
	} {
		if got := rpc.SelectURI(tc.reg, tc.uri); got != tc.want {
			t.Errorf("SelectURI(%q) = %q, want %q", tc.uri, got, tc.want)
		}
	}
}

// TestSelectURIShmName: shm's name form ("shm://osd.1", a socket named
// after it under os.TempDir) is chosen when its socket exists here, as
// the path form is; before, it was never found and TCP was picked.
func TestSelectURIShmName(t *testing.T) {
	all := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{}), transport.NewUnix(), shm.New())
	name := "shm://ferry-selecturi-" + filepath.Base(t.TempDir())
	l, err := all.Listen(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tcp := "tcp://127.0.0.1:7"
	if got := rpc.SelectURI(all, tcp+","+name); got != name {
		t.Errorf("SelectURI(%q) = %q, want the shm name form %q", tcp+","+name, got, name)
	}
	if got := rpc.SelectURI(all, tcp+",shm://no-such-name-here"); got != tcp {
		t.Errorf("an shm name whose socket is not here: %q, want %q", got, tcp)
	}
}
