package transport_test

import (
	"errors"
	"testing"

	"github.com/ferrymsg/ferry/transport"
)

func TestParseAddr(t *testing.T) {
	tcp := func(host string, nonce uint32) transport.Addr {
		return transport.Addr{Scheme: "tcp", Host: host, Nonce: nonce}
	}
	good := []struct {
		in   string
		want transport.Addr
		str  string // String() of the result
	}{
		{"tcp://127.0.0.1:3300", tcp("127.0.0.1:3300", 0), "tcp://127.0.0.1:3300"},
		{"TCP://127.0.0.1:3300", tcp("127.0.0.1:3300", 0), "tcp://127.0.0.1:3300"},
		{"tcp://127.0.0.1:3300/42", tcp("127.0.0.1:3300", 42), "tcp://127.0.0.1:3300/42"},
		{"tcp://[::1]:3300", tcp("[::1]:3300", 0), "tcp://[::1]:3300"},
		{"tcp://localhost:0", tcp("localhost:0", 0), "tcp://localhost:0"},
		{"tcp://:3300", tcp(":3300", 0), "tcp://:3300"},
		{"v2:127.0.0.1:3300/0", tcp("127.0.0.1:3300", 0), "tcp://127.0.0.1:3300"},
		{"v2:10.0.0.1:3300/12345", tcp("10.0.0.1:3300", 12345), "tcp://10.0.0.1:3300/12345"},
		{"v1:127.0.0.1:6789/4294967295", tcp("127.0.0.1:6789", 4294967295), "tcp://127.0.0.1:6789/4294967295"},
		{"any:0.0.0.0:0/7", tcp("0.0.0.0:0", 7), "tcp://0.0.0.0:0/7"},
		{"v2:[::1]:3300/5", tcp("[::1]:3300", 5), "tcp://[::1]:3300/5"},
		{"v2:[fe80::1%eth0]:3300", tcp("[fe80::1%eth0]:3300", 0), "tcp://[fe80::1%eth0]:3300"},
		{"v2:127.0.0.1:3300", tcp("127.0.0.1:3300", 0), "tcp://127.0.0.1:3300"},
		{"127.0.0.1:6789", tcp("127.0.0.1:6789", 0), "tcp://127.0.0.1:6789"},
		{"127.0.0.1:6789/3", tcp("127.0.0.1:6789", 3), "tcp://127.0.0.1:6789/3"},
		{"[::1]:6789", tcp("[::1]:6789", 0), "tcp://[::1]:6789"},
		{"[2001:db8::1]:80/9", tcp("[2001:db8::1]:80", 9), "tcp://[2001:db8::1]:80/9"},
		{"mon-a.example.com:3300", tcp("mon-a.example.com:3300", 0), "tcp://mon-a.example.com:3300"},
		{"localhost:0", tcp("localhost:0", 0), "tcp://localhost:0"},
		{":3300", tcp(":3300", 0), "tcp://:3300"},
		{"127.0.0.1:065535", tcp("127.0.0.1:65535", 0), "tcp://127.0.0.1:65535"},
		{"unix:///run/ceph/mon.sock", transport.Addr{Scheme: "unix", Host: "/run/ceph/mon.sock"}, "unix:///run/ceph/mon.sock"},
		{"unix://@abstract", transport.Addr{Scheme: "unix", Host: "@abstract"}, "unix://@abstract"},
		{"shm://node0", transport.Addr{Scheme: "shm", Host: "node0"}, "shm://node0"},
		{"inproc://osd.1", transport.Addr{Scheme: "inproc", Host: "osd.1"}, "inproc://osd.1"},
		{"inproc://node:0", transport.Addr{Scheme: "inproc", Host: "node:0"}, "inproc://node:0"},
		{"inproc://", transport.Addr{Scheme: "inproc"}, "inproc://"},
		{"ofi+tcp://10.0.0.1:1234", transport.Addr{Scheme: "ofi+tcp", Host: "10.0.0.1:1234"}, "ofi+tcp://10.0.0.1:1234"},
	}
	for _, tc := range good {
		got, err := transport.ParseAddr(tc.in)
		if err != nil {
			t.Errorf("ParseAddr(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseAddr(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if s := got.String(); s != tc.str {
			t.Errorf("ParseAddr(%q).String() = %q, want %q", tc.in, s, tc.str)
		}
		if got.Network() != got.Scheme {
			t.Errorf("Network() = %q, want %q", got.Network(), got.Scheme)
		}
		// String's output parses back to the same address.
		again, err := transport.ParseAddr(got.String())
		if err != nil || again != got {
			t.Errorf("ParseAddr(%q) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}

	bad := []struct {
		in   string
		want error
	}{
		{"", transport.ErrBadAddr},
		{"localhost", transport.ErrBadAddr},
		{"127.0.0.1", transport.ErrBadAddr},
		{"127.0.0.1:", transport.ErrBadAddr},
		{"127.0.0.1:65536", transport.ErrBadAddr},
		{"127.0.0.1:-1", transport.ErrBadAddr},
		{"127.0.0.1:http", transport.ErrBadAddr},
		{"127.0.0.1:80/x", transport.ErrBadAddr},
		{"127.0.0.1:80/4294967296", transport.ErrBadAddr},
		{"127.0.0.1:80/-1", transport.ErrBadAddr},
		{"::1", transport.ErrBadAddr},
		{"fe80::1:80", transport.ErrBadAddr},
		{"[::1]", transport.ErrBadAddr},
		{"[1.2.3.4]:80", transport.ErrBadAddr},
		{"[::1:80", transport.ErrBadAddr},
		{"v2:localhost:3300/0", transport.ErrBadAddr},
		{"v2:127.0.0.1/0", transport.ErrBadAddr},
		{"v2:127.0.0.1:3300/", transport.ErrBadAddr},
		{"v2:3300", transport.ErrBadAddr},
		{"v1:", transport.ErrBadAddr},
		{"-", transport.ErrBadAddr},
		{"tcp://", transport.ErrBadAddr},
		{"tcp://127.0.0.1", transport.ErrBadAddr},
		{"tcp://host name:80", transport.ErrBadAddr},
		{"tcp://a/b:80", transport.ErrBadAddr},
		{"tcp://a@b:80", transport.ErrBadAddr},
		{"unix://", transport.ErrBadAddr},
		{"shm://", transport.ErrBadAddr},
		{"1tcp://x", transport.ErrBadAddr},
		{"://x", transport.ErrBadAddr},
		{"inproc://a\x00b", transport.ErrBadAddr},
		{"v3:127.0.0.1:3300/0", transport.ErrUnknownScheme},
		{"cidr:10.0.0.0:24", transport.ErrUnknownScheme},
	}
	for _, tc := range bad {
		got, err := transport.ParseAddr(tc.in)
		if !errors.Is(err, tc.want) {
			t.Errorf("ParseAddr(%q) = %+v, %v; want error %v", tc.in, got, err, tc.want)
			continue
		}
		var ae *transport.AddrError
		if !errors.As(err, &ae) || ae.Input != tc.in {
			t.Errorf("ParseAddr(%q) error %v is not an *AddrError naming the input", tc.in, err)
		}
	}
}

func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{"tcp://127.0.0.1:3300/1", "v2:[::1]:3300/5", "[::1]:1", "inproc://a:0", "unix:///x", "v1:1.2.3.4:5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := transport.ParseAddr(s)
		if err != nil {
			return
		}
		again, err := transport.ParseAddr(a.String())
		if err != nil || again != a {
			t.Fatalf("ParseAddr(%q) = %+v, but its String %q parses to %+v, %v", s, a, a.String(), again, err)
		}
	})
}
