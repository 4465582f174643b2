// Package faulttest applies network faults from outside a process, for
// tests of sessions that must survive them: TCP connections destroyed by
// the kernel (ss -K, which needs CONFIG_INET_DIAG_DESTROY), and a link
// that goes silent between two network namespaces the test creates.
//
// Tests that need a tool or root skip when it is missing, unless the
// environment variable FERRY_REQUIRE_TOOLS is "1", in which case they fail
// (CI sets it so that a missing install is not mistaken for a pass).
//
// Everything acts only on what the test names: sockets to one loopback
// port, and namespaces and veth devices this package created.
package faulttest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns a missing tool or
// privilege from a skip into a failure when set to "1".
const RequireEnv = "FERRY_REQUIRE_TOOLS"

// cmdTimeout bounds one ip or ss command.
const cmdTimeout = 20 * time.Second

// Errors of the package.
var (
	// ErrKillUnsupported: ss -K did not destroy a socket (the kernel
	// lacks CONFIG_INET_DIAG_DESTROY, or the caller is not privileged).
	ErrKillUnsupported = errors.New("faulttest: ss -K cannot destroy sockets here")
)

// unavailable skips t, or fails it when FERRY_REQUIRE_TOOLS=1.
func unavailable(t testing.TB, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s (%s=1: required)", msg, RequireEnv)
	}
	t.Skipf("%s; skipping (set %s=1 to fail instead)", msg, RequireEnv)
}

// Require skips t (or fails it, if FERRY_REQUIRE_TOOLS=1) unless every
// program named is on PATH.
func Require(t testing.TB, programs ...string) {
	t.Helper()
	var missing []string
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		unavailable(t, "%s not found on PATH (iproute2)", strings.Join(missing, ", "))
	}
}

// RequireRoot skips t (or fails it, if FERRY_REQUIRE_TOOLS=1) unless the
// test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "not root")
	}
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// KillTCP destroys, with ss -K, every established TCP socket whose remote
// end is dst: the client side of each connection to a server listening
// there. The kernel sends the peer a RST and fails the local socket's
// pending and later calls with ECONNABORTED. It returns the number of
// sockets destroyed. ns, if not empty, names the network namespace to
// act in (ip netns exec).
func KillTCP(ctx context.Context, ns string, dst netip.AddrPort) (int, error) {
	args := []string{"-K", "-t", "-n", "-H", "state", "established",
		"dst", dst.Addr().String(), "dport", "=", ":" + strconv.Itoa(int(dst.Port()))}
	name := "ss"
	if ns != "" {
		args = append([]string{"netns", "exec", ns, "ss"}, args...)
		name = "ip"
	}
	out, err := run(ctx, name, args...)
	if err != nil {
		return 0, err
	}
	// ss prints one line per socket it destroyed.
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			n++
		}
	}
	return n, nil
}

// CheckKill checks that KillTCP works here: it destroys the client side of
// a throwaway loopback connection and checks that both ends see the
// connection fail.
func CheckKill(ctx context.Context) error {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		return err
	}
	defer s.Close()
	n, err := KillTCP(ctx, "", l.Addr().(*net.TCPAddr).AddrPort())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrKillUnsupported, err)
	}
	if n != 1 {
		return fmt.Errorf("%w: it reported %d sockets for 1 connection", ErrKillUnsupported, n)
	}
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: the peer did not see the connection fail (%v)", ErrKillUnsupported, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: the destroyed socket still works (%v)", ErrKillUnsupported, err)
	}
	return nil
}

// RequireKill skips t (or fails it, if FERRY_REQUIRE_TOOLS=1) unless
// KillTCP works here.
func RequireKill(t testing.TB) {
	t.Helper()
	Require(t, "ss")
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	if err := CheckKill(ctx); err != nil {
		unavailable(t, "%v", err)
	}
}

// Pair is two network namespaces joined by a veth pair, each end with an
// address in a private /30 that exists only inside them. Index 0 and 1
// name the two sides.
type Pair struct {
	NS   [2]string     // namespace names
	Dev  [2]string     // veth end in each namespace
	Addr [2]netip.Addr // address of each end
}

// NewPair creates a namespace pair for t and removes it (by the names it
// created) when t ends. It skips t (or fails it, if FERRY_REQUIRE_TOOLS=1)
// when not root or when ip netns does not work here.
func NewPair(t testing.TB) *Pair {
	t.Helper()
	RequireRoot(t)
	Require(t, "ip")
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	id := hex.EncodeToString(rnd[:3])
	p := &Pair{
		NS:  [2]string{"ferrytest-" + id + "-a", "ferrytest-" + id + "-b"},
		Dev: [2]string{"fta" + id, "ftb" + id},
		// 10.199.X.0/30: only inside these namespaces.
		Addr: [2]netip.Addr{netip.AddrFrom4([4]byte{10, 199, rnd[3], 1}), netip.AddrFrom4([4]byte{10, 199, rnd[3], 2})},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created := 0
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range created {
			// Deleting a namespace destroys the veth end inside it.
			if _, err := run(ctx, "ip", "netns", "del", p.NS[i]); err != nil {
				t.Errorf("removing namespace %s: %v", p.NS[i], err)
			}
		}
	})
	for i := range 2 {
		if _, err := run(ctx, "ip", "netns", "add", p.NS[i]); err != nil {
			unavailable(t, "ip netns add: %v", err)
			return nil
		}
		created++
	}
	steps := [][]string{
		{"link", "add", p.Dev[0], "netns", p.NS[0], "type", "veth", "peer", "name", p.Dev[1], "netns", p.NS[1]},
	}
	for i := range 2 {
		steps = append(steps,
			[]string{"-n", p.NS[i], "addr", "add", p.Addr[i].String() + "/30", "dev", p.Dev[i]},
			[]string{"-n", p.NS[i], "link", "set", p.Dev[i], "up"},
			[]string{"-n", p.NS[i], "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if _, err := run(ctx, "ip", s...); err != nil {
			unavailable(t, "setting up the namespace pair: %v", err)
			return nil
		}
	}
	return p
}

// Command returns a command that runs name with args inside namespace i.
func (p *Pair) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", p.NS[i], name}, args...)...)
}

// SetLink takes the veth end in namespace i down or up. Taking it down
// silences the link without resetting anything: TCP sockets on both sides
// stay established, their packets go nowhere, and only a timeout notices.
func (p *Pair) SetLink(ctx context.Context, i int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	_, err := run(ctx, "ip", "-n", p.NS[i], "link", "set", p.Dev[i], state)
	return err
}

var bytesReceivedRE = regexp.MustCompile(`bytes_received:(\d+)`)

// BytesReceived returns the bytes received on the established TCP
// sockets in namespace i whose local port is port (ss -i's
// bytes_received).
func (p *Pair) BytesReceived(ctx context.Context, i int, port uint16) (int64, error) {
	out, err := run(ctx, "ip", "netns", "exec", p.NS[i], "ss", "-t", "-i", "-n", "-H", "state", "established",
		"sport", "=", ":"+strconv.Itoa(int(port)))
	if err != nil {
		return 0, err
	}
	var total int64
	for _, m := range bytesReceivedRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		total += n
	}
	return total, nil
}

// Established returns the number of established TCP sockets in namespace
// i whose local or remote port is port.
func (p *Pair) Established(ctx context.Context, i int, port uint16) (int, error) {
	out, err := run(ctx, "ip", "netns", "exec", p.NS[i], "ss", "-t", "-n", "-H", "state", "established",
		"(", "sport", "=", ":"+strconv.Itoa(int(port)), "or", "dport", "=", ":"+strconv.Itoa(int(port)), ")")
	if err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			n++
		}
	}
	return n, nil
}
