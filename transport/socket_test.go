package transport_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/transporttest"
)

func TestTCPConformance(t *testing.T) {
	transporttest.Run(t, transport.NewTCP(transport.TCPOptions{}), "tcp://127.0.0.1:0")
}

func TestTCPOptionsConformance(t *testing.T) {
	opts := transport.TCPOptions{DisableNoDelay: true, KeepAlive: -1, ReadBuffer: 64 << 10, WriteBuffer: 64 << 10}
	transporttest.Run(t, transport.NewTCP(opts), "tcp://127.0.0.1:0")
}

func TestUnixConformance(t *testing.T) {
	transporttest.Run(t, transport.NewUnix(), "unix://"+filepath.Join(t.TempDir(), "s"))
}

// TestTCPConnType checks that both ends are the net package's *net.TCPConn,
// so that net.Buffers writes use writev.
func TestTCPConnType(t *testing.T) {
	transporttest.CheckGoroutines(t)
	c, s := transporttest.Pair(t, transport.NewTCP(transport.TCPOptions{}), "tcp://127.0.0.1:0")
	for _, conn := range []net.Conn{c, s} {
		if _, ok := conn.(*net.TCPConn); !ok {
			t.Errorf("conn is %T, want *net.TCPConn", conn)
		}
	}
}

func TestTCPListenAddr(t *testing.T) {
	transporttest.CheckGoroutines(t)
	tr := transport.NewTCP(transport.TCPOptions{})
	ln := transporttest.Listen(t, tr, "v2:127.0.0.1:0/77")
	a := ln.Addr()
	host, port, err := net.SplitHostPort(a.Host)
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("listener address %+v: want 127.0.0.1 and the bound port", a)
	}
	if a.Scheme != "tcp" || a.Nonce != 77 {
		t.Fatalf("listener address %+v: want scheme tcp and the nonce kept", a)
	}
	// A second listener on the same port is refused.
	if l2, err := tr.Listen(context.Background(), a); !errors.Is(err, transport.ErrAddrInUse) {
		if l2 != nil {
			l2.Close()
		}
		t.Fatalf("second Listen(%v) = %v, want ErrAddrInUse", a, err)
	}
	// The address can be dialed through a registry in Ceph's form.
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := transport.Default.Dial(ctx, "v2:"+a.Host+"/77")
	if err != nil {
		t.Fatalf("Default.Dial: %v", err)
	}
	c.Close()
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("Accept: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Accept did not return")
	}
}

func TestTCPRefused(t *testing.T) {
	tr := transport.NewTCP(transport.TCPOptions{})
	ln := transporttest.Listen(t, tr, "tcp://127.0.0.1:0")
	a := ln.Addr()
	ln.Close()
	_, err := transport.Default.Dial(context.Background(), a.String())
	if !errors.Is(err, transport.ErrRefused) {
		t.Fatalf("Dial = %v, want ErrRefused", err)
	}
	// The net package's error stays reachable.
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("Dial error %v does not wrap a *net.OpError", err)
	}
}

func TestSocketErrors(t *testing.T) {
	ctx := context.Background()
	tcp := transport.NewTCP(transport.TCPOptions{})
	inproc := transport.Addr{Scheme: "inproc", Host: "x"}
	if _, err := tcp.Dial(ctx, inproc); !errors.Is(err, transport.ErrUnknownScheme) {
		t.Errorf("tcp Dial(inproc address) = %v, want ErrUnknownScheme", err)
	}
	if _, err := tcp.Listen(ctx, inproc); !errors.Is(err, transport.ErrUnknownScheme) {
		t.Errorf("tcp Listen(inproc address) = %v, want ErrUnknownScheme", err)
	}
	if _, err := transport.NewUnix().Dial(ctx, inproc); !errors.Is(err, transport.ErrUnknownScheme) {
		t.Errorf("unix Dial(inproc address) = %v, want ErrUnknownScheme", err)
	}
	bad := transport.NewTCP(transport.TCPOptions{ReadBuffer: -1})
	if _, err := bad.Listen(ctx, transport.Addr{Scheme: "tcp", Host: "127.0.0.1:0"}); !errors.Is(err, transport.ErrBadConfig) {
		t.Errorf("Listen with a negative buffer = %v, want ErrBadConfig", err)
	}
	if _, err := bad.Dial(ctx, transport.Addr{Scheme: "tcp", Host: "127.0.0.1:1"}); !errors.Is(err, transport.ErrBadConfig) {
		t.Errorf("Dial with a negative buffer = %v, want ErrBadConfig", err)
	}
	sock := filepath.Join(t.TempDir(), "none")
	if _, err := transport.NewUnix().Dial(ctx, transport.Addr{Scheme: "unix", Host: sock}); !errors.Is(err, transport.ErrRefused) {
		t.Errorf("unix Dial to a missing socket = %v, want ErrRefused", err)
	}
}

// leaveStaleSocket leaves a socket file at path on which nothing
// listens, as a process killed while listening does.
func leaveStaleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("no stale socket file: %v", err)
	}
}

// TestUnixListenReplacesStaleSocket: a unix listener binds a path where
// a dead process left its socket file, and refuses a path a live
// listener holds or one that is not a socket (leaving the file alone).
func TestUnixListenReplacesStaleSocket(t *testing.T) {
	transporttest.CheckGoroutines(t)
	dir := t.TempDir()
	tr := transport.NewUnix()
	stale := filepath.Join(dir, "stale.sock")
	leaveStaleSocket(t, stale)
	ln := transporttest.Listen(t, tr, "unix://"+stale)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := tr.Dial(ctx, ln.Addr())
	if err != nil {
		t.Fatalf("dial the listener that replaced a stale socket: %v", err)
	}
	c.Close()

	if l2, err := tr.Listen(ctx, ln.Addr()); !errors.Is(err, transport.ErrAddrInUse) {
		if l2 != nil {
			l2.Close()
		}
		t.Fatalf("Listen on a live listener's path: %v, want ErrAddrInUse", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l3, err := transport.ListenUnix(ctx, file); !errors.Is(err, transport.ErrAddrInUse) {
		if l3 != nil {
			l3.Close()
		}
		t.Fatalf("ListenUnix on a regular file: %v, want ErrAddrInUse", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Fatalf("the regular file was touched: %q, %v", b, err)
	}
}

// TestUnixListenStaleRace: listeners racing for one stale path get one
// winner; the others fail with ErrAddrInUse instead of removing the
// winner's fresh socket file and listening on a path no one can reach
// them at.
func TestUnixListenStaleRace(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	const rounds, racers = 50, 4
	for r := range rounds {
		path := filepath.Join(dir, fmt.Sprintf("s%d.sock", r))
		leaveStaleSocket(t, path)
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			won  []net.Listener
			errs []error
		)
		start := make(chan struct{})
		for range racers {
			wg.Go(func() {
				<-start
				l, err := transport.ListenUnix(ctx, path)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				won = append(won, l)
			})
		}
		close(start)
		wg.Wait()
		for _, l := range won {
			l.Close()
		}
		if len(won) != 1 {
			t.Fatalf("round %d: %d of %d racers listen on one path (errors %v), want 1", r, len(won), racers, errs)
		}
		for _, err := range errs {
			if !errors.Is(err, transport.ErrAddrInUse) {
				t.Fatalf("round %d: a loser got %v, want ErrAddrInUse", r, err)
			}
		}
	}
}

// TestTCPLocalAddr: TCPOptions.LocalAddr is the source address of dialed
// connections, as the listener sees it.
func TestTCPLocalAddr(t *testing.T) {
	tr := transport.NewTCP(transport.TCPOptions{LocalAddr: netip.MustParseAddr("127.0.0.2")})
	ln := transporttest.Listen(t, transport.NewTCP(transport.TCPOptions{}), "tcp://127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan net.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		got <- c.RemoteAddr()
		c.Close()
	}()
	c, err := tr.Dial(ctx, ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ra, _ := (<-got).(*net.TCPAddr)
	if ra == nil || !ra.IP.Equal(net.ParseIP("127.0.0.2")) {
		t.Fatalf("the listener saw the dialer at %v, want 127.0.0.2", ra)
	}
}
