//go:build linux

package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/internal/faulttest"
)

// otherCongestion returns a congestion control the kernel has that is not
// the system default, so that a socket using it shows the flag took
// effect; it skips when the kernel offers no second one.
func otherCongestion(t *testing.T) string {
	t.Helper()
	def, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Skipf("no tcp_congestion_control: %v", err)
	}
	avail, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		t.Skipf("no tcp_available_congestion_control: %v", err)
	}
	for _, want := range []string{"cubic", "reno", "bbr"} {
		for _, a := range strings.Fields(string(avail)) {
			if a == want && a != strings.TrimSpace(string(def)) {
				return a
			}
		}
	}
	t.Skipf("the kernel offers only %q", strings.TrimSpace(string(avail)))
	return ""
}

// TestTCPCongestionFlag: serve's --tcp-congestion sets its sockets'
// congestion control (seen with ss on the accepted socket), and an
// algorithm the kernel lacks fails serve, ping and selftest with a reason.
func TestTCPCongestionFlag(t *testing.T) {
	faulttest.Require(t, "ss")
	cc := otherCongestion(t)
	srv := startServe(t, "--tcp-congestion", cc)
	port := srv.addr[strings.LastIndex(srv.addr, ":")+1 : strings.LastIndex(srv.addr, "/")]

	c, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	for ctx.Err() == nil {
		out, err = exec.CommandContext(ctx, "ss", "-tinH", "state", "established", "sport", "= :"+port).CombinedOutput()
		if err != nil {
			t.Fatalf("ss: %v\n%s", err, out)
		}
		if len(strings.TrimSpace(string(out))) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(string(out), " "+cc+" ") {
		t.Errorf("serve --tcp-congestion %s: the accepted socket shows\n%s", cc, out)
	}

	r := runFerry(t, 30*time.Second, "ping", "--count", "3", "--tcp-congestion", cc, srv.addr)
	if r.code != 0 {
		t.Errorf("ping --tcp-congestion %s: exit %d\n%s", cc, r.code, r.stderr)
	}
	r = runFerry(t, 30*time.Second, "ping", "--count", "1", "--tcp-congestion", "no-such-cc", srv.addr)
	if r.code == 0 || !strings.Contains(r.stderr, "no-such-cc") {
		t.Errorf("ping with an unknown algorithm: exit %d, stderr %q; want a failure naming it", r.code, r.stderr)
	}
	r = runFerry(t, 30*time.Second, "selftest", "--tcp-congestion", cc, "--reps", "20")
	if r.code != 0 {
		t.Errorf("selftest --tcp-congestion %s: exit %d\n%s", cc, r.code, r.stderr)
	}
	r = runFerry(t, 30*time.Second, "selftest", "--tcp-congestion", "no-such-cc", "--reps", "20")
	if r.code == 0 || !strings.Contains(r.stderr, "no-such-cc") {
		t.Errorf("selftest with an unknown algorithm: exit %d, stderr %q; want a failure naming it", r.code, r.stderr)
	}
}
