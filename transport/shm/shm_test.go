//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/transporttest"
)

// The test binary re-executes itself as the peer process of the
// multi-process tests; these variables tell it what to do.
const (
	envPeerMode = "FERRY_SHM_TEST_PEER" // "echo"
	envPeerAddr = "FERRY_SHM_TEST_ADDR"
	envPeerSize = "FERRY_SHM_TEST_SIZE" // if set, echo in messages of this many bytes
	envPeerSpin = "FERRY_SHM_TEST_SPIN" // if set, the peer's Options.Spin
)

// peerTransport is the peer process's shm transport.
func peerTransport() *Transport {
	spin, _ := strconv.Atoi(os.Getenv(envPeerSpin))
	return NewWithOptions(Options{Spin: spin})
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(envPeerMode); mode != "" {
		os.Exit(runPeer(mode, os.Getenv(envPeerAddr)))
	}
	os.Exit(m.Run())
}

// runPeer is the body of the peer process: it dials addr (shm or unix)
// and echoes everything until EOF.
func runPeer(mode, addr string) int {
	if mode != "echo" {
		fmt.Fprintf(os.Stderr, "unknown peer mode %q\n", mode)
		return 2
	}
	a, err := transport.ParseAddr(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := transport.NewRegistry(peerTransport(), transport.NewUnix()).DialAddr(ctx, a)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		return 1
	}
	// Bound the peer's life in case the test process dies.
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if n, _ := strconv.Atoi(os.Getenv(envPeerSize)); n > 0 {
		err = echo(c, n)
	} else {
		_, err = io.Copy(c, c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		return 1
	}
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 1
	}
	return 0
}

// sockAddr returns an shm address for a socket in a fresh directory.
func sockAddr(t testing.TB) string {
	return "shm://" + filepath.Join(t.TempDir(), "s.sock")
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, New(), sockAddr(t))
}

// TestConformanceSmallRing runs the suite with the smallest ring, so that
// every transfer wraps around many times, and with no spinning.
func TestConformanceSmallRing(t *testing.T) {
	transporttest.Run(t, NewWithOptions(Options{RingSize: MinRingSize, Spin: -1}), sockAddr(t))
}

func TestNamedAddr(t *testing.T) {
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), rand.Uint32())
	a := transport.Addr{Scheme: "shm", Host: name}
	path, err := SocketPath(a)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != filepath.Clean(os.TempDir()) || !strings.Contains(path, name) {
		t.Fatalf("SocketPath(%v) = %q, want a socket named after it in %s", a, path, os.TempDir())
	}
	c, s := transporttest.Pair(t, New(), a.String())
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket %s still exists after the listener closed: %v", path, err)
	}
	roundTrip(t, c, s, []byte("hello"))
	for _, bad := range []string{"shm://a/b", "shm://"} {
		ba, err := transport.ParseAddr(bad)
		if err != nil {
			continue
		}
		if _, err := New().Listen(context.Background(), ba); !errors.Is(err, transport.ErrBadAddr) {
			t.Errorf("Listen(%q) = %v, want transport.ErrBadAddr", bad, err)
		}
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{RingSize: 5000}, {RingSize: MinRingSize / 2}, {RingSize: 2 * MaxRingSize}, {HandshakeTimeout: -1}} {
		a := transport.Addr{Scheme: "shm", Host: filepath.Join(t.TempDir(), "s.sock")}
		if _, err := NewWithOptions(o).Listen(context.Background(), a); !errors.Is(err, transport.ErrBadConfig) {
			t.Errorf("Listen with %+v = %v, want transport.ErrBadConfig", o, err)
		}
		if _, err := NewWithOptions(o).Dial(context.Background(), a); !errors.Is(err, transport.ErrBadConfig) {
			t.Errorf("Dial with %+v = %v, want transport.ErrBadConfig", o, err)
		}
	}
}

func roundTrip(t *testing.T, c, s net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(b))
	if _, err := io.ReadFull(s, got); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("read %q, %v; want %q", got, err, b)
	}
}

// resources lists this process's open descriptors and its shm mappings.
// It first makes sure the runtime's netpoller, which keeps descriptors
// of its own once started, is running.
func resources(t *testing.T) (fds int, maps []string) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "poller.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(m), "\n") {
		if strings.Contains(l, "ferry-shm") {
			maps = append(maps, l)
		}
	}
	return len(ents), maps
}

// TestCloseReleases checks that closing both ends closes every descriptor
// and unmaps the rings, and that nothing appears in /dev/shm.
func TestCloseReleases(t *testing.T) {
	transporttest.CheckGoroutines(t)
	devShm, _ := os.ReadDir("/dev/shm")
	fds0, maps0 := resources(t)
	if len(maps0) != 0 {
		t.Fatalf("shm mappings before the test: %q", maps0)
	}
	ln := transporttest.Listen(t, New(), sockAddr(t))
	const conns = 3
	var all []net.Conn
	for range conns {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := New().Dial(ctx, ln.Addr())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		s.SetDeadline(time.Now().Add(10 * time.Second))
		roundTrip(t, c, s, []byte("ping"))
		roundTrip(t, s, c, []byte("pong"))
		all = append(all, c, s)
	}
	if fds, maps := resources(t); fds <= fds0 || len(maps) != 2*conns {
		t.Fatalf("with %d connections open: %d descriptors (%d before), %d mappings; want more descriptors and %d mappings",
			conns, fds, fds0, len(maps), 2*conns)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if fds, maps := resources(t); fds != fds0 || len(maps) != 0 {
		t.Fatalf("after Close: %d descriptors (want %d), mappings %q", fds, fds0, maps)
	}
	if after, _ := os.ReadDir("/dev/shm"); len(after) > len(devShm) {
		for _, e := range after {
			if strings.Contains(e.Name(), "ferry") {
				t.Fatalf("/dev/shm/%s left behind", e.Name())
			}
		}
	}
}

// TestFullRing fills a small ring while the peer does not read: the
// writer blocks with the ring full, then a slow reader taking small
// pieces lets it finish, and every byte arrives in order.
func TestFullRing(t *testing.T) {
	transporttest.CheckGoroutines(t)
	const ring = 16 << 10
	c, s := transporttest.Pair(t, NewWithOptions(Options{RingSize: ring}), sockAddr(t))
	c.SetDeadline(time.Now().Add(10 * time.Second))
	s.SetDeadline(time.Now().Add(10 * time.Second))
	want := make([]byte, 20*ring+123)
	for i := range want {
		want[i] = byte(i * 131 >> 3)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		wrote <- err
	}()
	cc := c.(*Conn)
	deadline := time.Now().Add(10 * time.Second)
	for cc.outHead.Load()-cc.outTail.Load() != ring {
		if time.Now().After(deadline) {
			t.Fatalf("ring never filled")
		}
		time.Sleep(time.Millisecond) // poll interval
	}
	select {
	case err := <-wrote:
		t.Fatalf("Write returned (%v) with the ring full and nobody reading", err)
	default:
	}
	got := make([]byte, 0, len(want))
	buf := make([]byte, 1000)
	for len(got) < len(want) {
		n, err := s.Read(buf)
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("Write: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Write did not return after everything was read")
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read bytes differ from those written")
	}
}

// TestPeerLostInProcess: a peer whose socket goes away without the closed
// flag (as when its process dies) fails blocked Reads and Writes with
// ErrPeerLost.
func TestPeerLostInProcess(t *testing.T) {
	transporttest.CheckGoroutines(t)
	c, s := transporttest.Pair(t, NewWithOptions(Options{RingSize: MinRingSize}), sockAddr(t))
	c.SetDeadline(time.Now().Add(10 * time.Second))
	errs := make(chan error, 2)
	go func() {
		_, err := c.Read(make([]byte, 10))
		errs <- err
	}()
	go func() {
		_, err := c.Write(make([]byte, 4*MinRingSize))
		errs <- err
	}()
	s.(*Conn).sock.Close() // what the kernel does when the peer dies
	for range 2 {
		select {
		case err := <-errs:
			checkPeerLost(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("Read or Write did not fail after the peer was lost")
		}
	}
}

func checkPeerLost(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrPeerLost) || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("error %v does not match ErrPeerLost and ECONNRESET", err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("error %v is a timeout", err)
	}
}

// peerProc is a peer process running the test binary.
type peerProc struct {
	cmd    *exec.Cmd
	exited chan error // receives cmd.Wait's result, then is closed
}

// startPeer runs the test binary as an echo peer that dials addr and
// echoes a stream, or messages of size bytes if size > 0. The process is
// killed when t ends if it is still running.
func startPeer(t testing.TB, addr string, size int) *peerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envPeerMode+"=echo", envPeerAddr+"="+addr, envPeerSize+"="+strconv.Itoa(size))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &peerProc{cmd: cmd, exited: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return p
}

// wait waits for the peer to exit and returns its exit error.
func (p *peerProc) wait(t testing.TB) error {
	t.Helper()
	select {
	case err := <-p.exited:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("the peer process did not exit")
		return nil
	}
}

// acceptPeer accepts the peer process's connection.
func acceptPeer(t testing.TB, ln transport.Listener) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c
	case <-time.After(20 * time.Second):
		ln.Close()
		t.Fatalf("the peer process did not connect")
		return nil
	}
}

// TestProcessEcho echoes 64 MiB through a separate process in writes and
// reads of random sizes.
func TestProcessEcho(t *testing.T) {
	transporttest.CheckGoroutines(t)
	addr := sockAddr(t)
	ln := transporttest.Listen(t, New(), addr)
	peer := startPeer(t, addr, 0)
	c := acceptPeer(t, ln)
	c.SetDeadline(time.Now().Add(60 * time.Second))
	const total = 64 << 20
	want := make([]byte, total)
	rand.NewChaCha8([32]byte{1, 2, 3}).Read(want)
	wrote := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(3, 4))
		for off := 0; off < total; {
			n := min(1+r.IntN(300<<10), total-off)
			if _, err := c.Write(want[off : off+n]); err != nil {
				wrote <- err
				return
			}
			off += n
		}
		wrote <- nil
	}()
	got := make([]byte, total)
	r := rand.New(rand.NewPCG(5, 6))
	for off := 0; off < total; {
		n, err := c.Read(got[off:min(off+1+r.IntN(200<<10), total)])
		if err != nil {
			t.Fatalf("Read after %d bytes: %v", off, err)
		}
		off += n
	}
	if err := <-wrote; err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echo differs from what was sent, first at byte %d", firstDiff(got, want))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := peer.wait(t); err != nil {
		t.Fatalf("peer process: %v", err)
	}
}

// TestProcessKill kills the peer process with SIGKILL in the middle of a
// stream: the local Read and Write fail with ErrPeerLost within a bound,
// and Close releases everything.
func TestProcessKill(t *testing.T) {
	transporttest.CheckGoroutines(t)
	fds0, _ := resources(t)
	addr := sockAddr(t)
	ln := transporttest.Listen(t, New(), addr)
	peer := startPeer(t, addr, 0)
	c := acceptPeer(t, ln)
	ln.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	wrote := make(chan error, 1)
	go func() {
		b := make([]byte, 64<<10)
		for {
			if _, err := c.Write(b); err != nil {
				wrote <- err
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	total := 0
	for total < 4<<20 {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("Read before the kill: %v", err)
		}
		total += n
	}
	if err := peer.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	read := make(chan error, 1)
	go func() {
		for {
			if _, err := c.Read(buf); err != nil {
				read <- err
				return
			}
		}
	}()
	const bound = 5 * time.Second
	for _, ch := range []chan error{read, wrote} {
		select {
		case err := <-ch:
			checkPeerLost(t, err)
		case <-time.After(bound):
			t.Fatalf("Read or Write still running %v after the peer was killed", bound)
		}
	}
	t.Logf("Read and Write failed %v after SIGKILL", time.Since(killed))
	peer.wait(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if fds, maps := resources(t); fds != fds0 || len(maps) != 0 {
		t.Fatalf("after Close: %d descriptors (want %d), mappings %q", fds, fds0, maps)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestDuplexWaiters runs both directions at once through the smallest
// ring without spinning, so that on each side a Write waits for room
// while a Read waits for bytes (one of them polls the eventfd, the other
// waits for its broadcast), while another goroutine keeps moving the
// deadlines (which kicks the poller), or not (then only the waiters'
// own broadcasts wake each other). Every byte arrives in order.
func TestDuplexWaiters(t *testing.T) {
	for _, kick := range []bool{false, true} {
		t.Run(fmt.Sprintf("deadlines=%v", kick), func(t *testing.T) { duplexWaiters(t, kick) })
	}
}

func duplexWaiters(t *testing.T, kick bool) {
	transporttest.CheckGoroutines(t)
	c, s := transporttest.Pair(t, NewWithOptions(Options{RingSize: MinRingSize, Spin: -1}), sockAddr(t))
	const total = 8 << 20
	want := make([]byte, total)
	rand.NewChaCha8([32]byte{9}).Read(want)
	stop := make(chan struct{})
	kicked := make(chan struct{})
	go func() {
		defer close(kicked)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if !kick {
				return
			}
			dl := time.Now().Add(time.Duration(20+i%5) * time.Second)
			c.SetReadDeadline(dl)
			s.SetWriteDeadline(dl)
			runtime.Gosched()
		}
	}()
	errs := make(chan error, 4)
	for _, ends := range [][2]net.Conn{{c, s}, {s, c}} {
		w, r := ends[0], ends[1]
		go func() {
			rng := rand.New(rand.NewPCG(1, 2))
			for off := 0; off < total; {
				n := min(1+rng.IntN(3*MinRingSize), total-off)
				if _, err := w.Write(want[off : off+n]); err != nil {
					errs <- fmt.Errorf("write: %w", err)
					return
				}
				off += n
			}
			errs <- nil
		}()
		go func() {
			got := make([]byte, total)
			rng := rand.New(rand.NewPCG(3, 4))
			for off := 0; off < total; {
				n, err := r.Read(got[off:min(off+1+rng.IntN(2*MinRingSize), total)])
				if err != nil {
					errs <- fmt.Errorf("read after %d bytes: %w", off, err)
					return
				}
				off += n
			}
			if !bytes.Equal(got, want) {
				errs <- fmt.Errorf("bytes differ, first at %d", firstDiff(got, want))
				return
			}
			errs <- nil
		}()
	}
	for range 4 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the duplex transfer hangs")
		}
	}
	close(stop)
	<-kicked
}

// TestAdaptiveSpin checks the adaptive read spin's rule: it follows short
// waits up to twice their length, decays slowly, is bounded by MaxSpin,
// halves after a long wait, and stays off when MaxSpin or Spin is
// negative.
func TestAdaptiveSpin(t *testing.T) {
	const us = time.Microsecond
	c := &Conn{spin: Options{}.spin()}
	if c.spin.max != defaultMaxSpin || c.spin.polls != defaultSpin {
		t.Fatalf("default spinning %+v", c.spin)
	}
	c.adaptRead(20 * us)
	if c.rspin != 40*us {
		t.Fatalf("after a 20 µs wait: %v, want 40µs", c.rspin)
	}
	c.adaptRead(130 * us)
	if c.rspin != 250*us {
		t.Fatalf("after a 130 µs wait: %v, want the 250µs bound", c.rspin)
	}
	c.adaptRead(20 * us) // decays by 1/8, not down to 40 µs
	if want := 250*us - 250*us/8; c.rspin != want {
		t.Fatalf("after a short wait: %v, want %v", c.rspin, want)
	}
	for range 3 {
		c.adaptRead(time.Second)
	}
	if want := (250*us - 250*us/8) / 8; c.rspin != want {
		t.Fatalf("after three long waits: %v, want %v", c.rspin, want)
	}
	for _, o := range []Options{{MaxSpin: -1}, {Spin: -1}} {
		c := &Conn{spin: o.spin()}
		c.adaptRead(20 * us)
		if c.rspin != 0 {
			t.Fatalf("options %+v: adaptive spin %v, want off", o, c.rspin)
		}
	}
}

// TestDeadlineStopsSpin checks that a deadline set while a Read or a
// Write spins (here for ever: a huge Options.Spin) ends it at once,
// rather than when the spin runs out.
func TestDeadlineStopsSpin(t *testing.T) {
	transporttest.CheckGoroutines(t)
	c, s := transporttest.Pair(t, NewWithOptions(Options{RingSize: MinRingSize, Spin: 1 << 50}), sockAddr(t))
	_ = s
	for _, op := range []struct {
		name string
		set  func(time.Time) error
		run  func() error
	}{
		{"read", c.SetReadDeadline, func() error { _, err := c.Read(make([]byte, 16)); return err }},
		{"write", c.SetWriteDeadline, func() error { _, err := c.Write(make([]byte, 4*MinRingSize)); return err }},
	} {
		done := make(chan error, 1)
		go func() { done <- op.run() }()
		time.Sleep(20 * time.Millisecond) // let it spin
		start := time.Now()
		op.set(time.Now())
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("%s: got %v, want a deadline error", op.name, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("%s returned %v after its deadline", op.name, d)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s spins on past its deadline", op.name)
		}
	}
}

// TestTryWriteBuffers: TryWriteBuffers writes its buffers in order as far
// as the ring takes them and returns without waiting when it is full (no
// one reads here); what it took is read back whole; after Close it fails
// as Write does.
func TestTryWriteBuffers(t *testing.T) {
	transporttest.CheckGoroutines(t)
	c, s := transporttest.Pair(t, NewWithOptions(Options{RingSize: MinRingSize, Spin: 64}), sockAddr(t))
	tw, ok := c.(transport.TryWriter)
	if !ok {
		t.Fatal("an shm Conn is not a transport.TryWriter")
	}
	bufs := [][]byte{bytes.Repeat([]byte{1}, 100), bytes.Repeat([]byte{2}, MinRingSize), bytes.Repeat([]byte{3}, 100)}
	done := make(chan struct{})
	var n int
	var err error
	go func() {
		defer close(done)
		n, err = tw.TryWriteBuffers(bufs)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("TryWriteBuffers waits for a reader")
	}
	if err != nil || n != MinRingSize {
		t.Fatalf("TryWriteBuffers into an empty %d-byte ring: %d, %v", MinRingSize, n, err)
	}
	got := make([]byte, n)
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	if want := bytes.Join(bufs, nil)[:n]; !bytes.Equal(got, want) {
		t.Fatalf("read back bytes that differ at %d", firstDiff(got, want))
	}
	if n, err := tw.TryWriteBuffers([][]byte{{4, 5}, {6}}); n != 3 || err != nil {
		t.Fatalf("TryWriteBuffers with room: %d, %v", n, err)
	}
	c.Close()
	if _, err := tw.TryWriteBuffers([][]byte{{7}}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("TryWriteBuffers after Close: %v, want net.ErrClosed", err)
	}
}

// TestReadCRC checks transport.CRCReader: the bytes ReadCRC returns, and
// their CRC folded into the running one, across the ring's wrap and in
// pieces smaller and larger than a copy chunk, with a running CRC
// carried from one call to the next.
func TestReadCRC(t *testing.T) {
	transporttest.CheckGoroutines(t)
	c, s := transporttest.Pair(t, NewWithOptions(Options{RingSize: MinRingSize, Spin: 64}), sockAddr(t))
	cr, ok := s.(transport.CRCReader)
	if !ok {
		t.Fatal("an shm Conn is not a transport.CRCReader")
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	data := make([]byte, 5*MinRingSize+12345)
	for i := range data {
		data[i] = byte(i*131 + i>>9)
	}
	go func() {
		_, _ = c.Write(data)
	}()
	got := make([]byte, 0, len(data))
	var crc uint32
	for i := 0; len(got) < len(data); i++ {
		want := []int{1, 700, 64 << 10, 3 * MinRingSize, 100}[i%5]
		buf := make([]byte, min(want, len(data)-len(got)))
		n, next, err := cr.ReadCRC(buf, crc)
		if err != nil {
			t.Fatal(err)
		}
		if next != crc32.Update(crc, tab, buf[:n]) {
			t.Fatalf("read %d: CRC %#08x, want that of the bytes read", i, next)
		}
		crc = next
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read back bytes that differ at %d", firstDiff(got, data))
	}
	if crc != crc32.Checksum(data, tab) {
		t.Fatalf("running CRC %#08x, want %#08x", crc, crc32.Checksum(data, tab))
	}
}

// TestWriteCRC checks transport.CRCWriter: the CRC WriteCRC returns is
// that of the bytes it wrote, blocking across the ring's wrap while the
// peer reads, and, with try, of the part a full ring took.
func TestWriteCRC(t *testing.T) {
	transporttest.CheckGoroutines(t)
	c, s := transporttest.Pair(t, NewWithOptions(Options{RingSize: MinRingSize, Spin: 64}), sockAddr(t))
	cw, ok := c.(transport.CRCWriter)
	if !ok {
		t.Fatal("an shm Conn is not a transport.CRCWriter")
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	data := make([]byte, 3*MinRingSize+777)
	for i := range data {
		data[i] = byte(i*29 + i>>11)
	}
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(data))
		_, _ = io.ReadFull(s, b)
		got <- b
	}()
	n, crc, err := cw.WriteCRC(data, 7, false)
	if err != nil || n != len(data) {
		t.Fatalf("WriteCRC: %d, %v", n, err)
	}
	if want := crc32.Update(7, tab, data); crc != want {
		t.Fatalf("WriteCRC: CRC %#08x, want %#08x", crc, want)
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("read back bytes that differ at %d", firstDiff(b, data))
	}
	// Nobody reads now: try takes what the empty ring holds.
	n, crc, err = cw.WriteCRC(data, 0, true)
	if err != nil || n != MinRingSize {
		t.Fatalf("WriteCRC with try into an empty %d-byte ring: %d, %v", MinRingSize, n, err)
	}
	if want := crc32.Checksum(data[:n], tab); crc != want {
		t.Fatalf("WriteCRC with try: CRC %#08x, want that of the %d bytes written", crc, n)
	}
}
