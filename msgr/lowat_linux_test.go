package msgr

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLowatPays checks which sockets the reader raises the receive low
// water mark on: TCP under a congestion control that paces (BBR) and
// sockets that are not TCP, not TCP under cubic.
func TestLowatPays(t *testing.T) {
	avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	pays := func(t *testing.T, c syscall.Conn, cc string) bool {
		t.Helper()
		rc, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var ok bool
		var serr error
		if err := rc.Control(func(fd uintptr) {
			if cc != "" {
				serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
			}
			ok = lowatPays(fd)
		}); err != nil {
			t.Fatal(err)
		}
		if serr != nil {
			t.Fatalf("setting %s: %v", cc, serr)
		}
		return ok
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, cc := range []string{"cubic", "bbr"} {
		t.Run(cc, func(t *testing.T) {
			if !strings.Contains(" "+strings.TrimSpace(string(avail))+" ", " "+cc+" ") {
				t.Skipf("%s is not available here (%q)", cc, avail)
			}
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got, want := pays(t, c.(*net.TCPConn), cc), cc == "bbr"; got != want {
				t.Errorf("lowatPays under %s = %v, want %v", cc, got, want)
			}
		})
	}
	t.Run("unix", func(t *testing.T) {
		a, b, err := socketPair()
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		defer b.Close()
		if !pays(t, a, "") {
			t.Error("lowatPays on a unix socket = false, want true")
		}
	})
}

// socketPair returns the two ends of a connected unix stream socket pair.
func socketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, err
	}
	conn := func(fd int) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	a, err := conn(fds[0])
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	b, err := conn(fds[1])
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}
