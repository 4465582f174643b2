package transport_test

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/transporttest"
)

func sockopt(t *testing.T, c net.Conn, level, opt int) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// TestTCPOptions checks the options on both the dialed and the accepted
// socket.
func TestTCPOptions(t *testing.T) {
	transporttest.CheckGoroutines(t)
	for _, tc := range []struct {
		name      string
		opts      transport.TCPOptions
		nodelay   bool
		keepalive bool
		rcvbuf    int
	}{
		{"default", transport.TCPOptions{}, true, true, 0},
		{"tuned", transport.TCPOptions{DisableNoDelay: true, KeepAlive: -1, ReadBuffer: 96 << 10, WriteBuffer: 96 << 10}, false, false, 96 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := transporttest.Pair(t, transport.NewTCP(tc.opts), "tcp://127.0.0.1:0")
			for _, conn := range []net.Conn{c, s} {
				if got := sockopt(t, conn, syscall.IPPROTO_TCP, syscall.TCP_NODELAY) != 0; got != tc.nodelay {
					t.Errorf("TCP_NODELAY = %v, want %v", got, tc.nodelay)
				}
				if got := sockopt(t, conn, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) != 0; got != tc.keepalive {
					t.Errorf("SO_KEEPALIVE = %v, want %v", got, tc.keepalive)
				}
				if tc.rcvbuf > 0 {
					// Linux reports twice the size set (bookkeeping overhead).
					if got := sockopt(t, conn, syscall.SOL_SOCKET, syscall.SO_RCVBUF); got != 2*tc.rcvbuf {
						t.Errorf("SO_RCVBUF = %d, want %d", got, 2*tc.rcvbuf)
					}
					if got := sockopt(t, conn, syscall.SOL_SOCKET, syscall.SO_SNDBUF); got != 2*tc.rcvbuf {
						t.Errorf("SO_SNDBUF = %d, want %d", got, 2*tc.rcvbuf)
					}
				}
			}
		})
	}
}

// TestTCPCongestion: TCPOptions.Congestion is in force on the dialed and
// the accepted socket; the default keeps the system's; an algorithm the
// kernel lacks fails Listen and Dial with ErrBadConfig.
func TestTCPCongestion(t *testing.T) {
	transporttest.CheckGoroutines(t)
	def, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Skip("no /proc/sys/net/ipv4/tcp_congestion_control")
	}
	avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	for _, cc := range []string{"", "reno", "cubic"} {
		if cc != "" && !slices.Contains(strings.Fields(string(avail)), cc) {
			continue // not built into this kernel
		}
		want := cc
		if cc == "" {
			want = strings.TrimSpace(string(def))
		}
		c, s := transporttest.Pair(t, transport.NewTCP(transport.TCPOptions{Congestion: cc}), "tcp://127.0.0.1:0")
		for _, conn := range []net.Conn{c, s} {
			if got, err := transport.Congestion(conn); err != nil || got != want {
				t.Errorf("Congestion %q: socket has %q (%v), want %q", cc, got, err, want)
			}
		}
	}
	// CongestionControl on a socket of one's own.
	if slices.Contains(strings.Fields(string(avail)), "reno") {
		ln := transporttest.Listen(t, transport.NewTCP(transport.TCPOptions{}), "tcp://127.0.0.1:0")
		d := net.Dialer{Control: transport.CongestionControl("reno")}
		c, err := d.Dial("tcp", ln.Addr().Host)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := transport.Congestion(c); err != nil || got != "reno" {
			t.Errorf("CongestionControl(reno): socket has %q (%v)", got, err)
		}
		c.Close()
		ln.Close()
	}
	bad := transport.NewTCP(transport.TCPOptions{Congestion: "no-such-algorithm"})
	if _, err := bad.Listen(context.Background(), transport.Addr{Scheme: "tcp", Host: "127.0.0.1:0"}); !errors.Is(err, transport.ErrBadConfig) {
		t.Errorf("Listen with an unknown algorithm: %v, want ErrBadConfig", err)
	}
	ln := transporttest.Listen(t, transport.NewTCP(transport.TCPOptions{}), "tcp://127.0.0.1:0")
	defer ln.Close()
	if c, err := bad.Dial(context.Background(), ln.Addr()); !errors.Is(err, transport.ErrBadConfig) {
		if c != nil {
			c.Close()
		}
		t.Errorf("Dial with an unknown algorithm: %v, want ErrBadConfig", err)
	}
}
