// Package transporttest holds the conformance suite that every transport
// passes, and helpers for tests that need connected pairs.
package transporttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/transport"
)

// testTimeout bounds every blocking step of the suite.
const testTimeout = 10 * time.Second

// Listen parses listenAddr and listens on it with tr; the listener is
// closed when t ends.
func Listen(t testing.TB, tr transport.Transport, listenAddr string) transport.Listener {
	t.Helper()
	a, err := transport.ParseAddr(listenAddr)
	if err != nil {
		t.Fatalf("ParseAddr(%q): %v", listenAddr, err)
	}
	ln, err := tr.Listen(context.Background(), a)
	if err != nil {
		t.Fatalf("Listen(%v): %v", a, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Pair listens on listenAddr with tr, dials the listener and accepts,
// returning both ends of one connection. The listener is closed before
// Pair returns; the connections are closed when t ends.
func Pair(t testing.TB, tr transport.Transport, listenAddr string) (client, server transport.Conn) {
	t.Helper()
	ln := Listen(t, tr, listenAddr)
	defer ln.Close()
	return dialAccept(t, tr, ln)
}

// dialAccept dials ln and accepts the connection; both are closed when t
// ends.
func dialAccept(t testing.TB, tr transport.Transport, ln transport.Listener) (client, server transport.Conn) {
	t.Helper()
	type result struct {
		c   transport.Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		accepted <- result{c, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	client, err := tr.Dial(ctx, ln.Addr())
	if err != nil {
		ln.Close() // unblocks Accept
		<-accepted
		t.Fatalf("Dial(%v): %v", ln.Addr(), err)
	}
	t.Cleanup(func() { client.Close() })
	var r result
	select {
	case r = <-accepted:
	case <-time.After(testTimeout):
		ln.Close()
		<-accepted
		t.Fatalf("Accept did not return")
	}
	if r.err != nil {
		t.Fatalf("Accept: %v", r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return client, r.c
}

// Run runs the shared stream tests against tr, listening on listenAddr
// (which each subtest listens on afresh, so it must be reusable once the
// previous listener closed: port 0, an inproc name "" or a socket path).
// It checks that no goroutine leaks; do not run it in parallel with other
// tests.
func Run(t *testing.T, tr transport.Transport, listenAddr string) {
	CheckGoroutines(t)
	tests := []struct {
		name string
		f    func(*testing.T, transport.Transport, string)
	}{
		{"Addr", testAddr},
		{"Echo", testEcho},
		{"BothWays", testBothWays},
		{"CloseEOF", testCloseEOF},
		{"ReadDeadline", testReadDeadline},
		{"PastDeadline", testPastDeadline},
		{"FarDeadline", testFarDeadline},
		{"DeadlineUnblocksRead", testDeadlineUnblocksRead},
		{"WriteDeadline", testWriteDeadline},
		{"CloseUnblocksRead", testCloseUnblocksRead},
		{"WriteAfterPeerClose", testWriteAfterPeerClose},
		{"ConcurrentWrites", testConcurrentWrites},
		{"ManyConns", testManyConns},
		{"AcceptAfterClose", testAcceptAfterClose},
		{"DialRefused", testDialRefused},
		{"DialCanceled", testDialCanceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, tr, listenAddr) })
	}
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, (n+7)&^7)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n]
}

// await waits for one value from ch within testTimeout.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("%s did not finish within %v", what, testTimeout)
		panic("unreachable")
	}
}

func setDeadline(t *testing.T, cs ...transport.Conn) {
	t.Helper()
	for _, c := range cs {
		if err := c.SetDeadline(time.Now().Add(testTimeout)); err != nil {
			t.Fatalf("SetDeadline: %v", err)
		}
	}
}

func testAddr(t *testing.T, tr transport.Transport, addr string) {
	ln := Listen(t, tr, addr)
	if got := ln.Addr().Scheme; got != tr.Name() {
		t.Errorf("listener scheme = %q, want %q", got, tr.Name())
	}
	again, err := transport.ParseAddr(ln.Addr().String())
	if err != nil || again.Scheme != ln.Addr().Scheme || again.Host != ln.Addr().Host {
		t.Errorf("ParseAddr(%q) = %+v, %v; want the listener's address back", ln.Addr().String(), again, err)
	}
	c, s := dialAccept(t, tr, ln)
	for _, a := range []net.Addr{c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr()} {
		if a == nil || a.Network() == "" || a.String() == "" {
			t.Errorf("connection address %v is empty", a)
		}
	}
}

// testEcho sends 1 MiB to an echo server while reading the echo.
func testEcho(t *testing.T, tr transport.Transport, addr string) {
	c, s := Pair(t, tr, addr)
	setDeadline(t, c, s)
	echoed := make(chan error, 1)
	go func() {
		_, err := io.Copy(s, s)
		echoed <- err
	}()
	want := randomBytes(1<<20, 1)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		wrote <- err
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if err := await(t, wrote, "Write"); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echo differs from what was sent")
	}
	c.Close()
	if err := await(t, echoed, "echo server"); err != nil {
		t.Fatalf("echo server: %v", err)
	}
}

// testBothWays writes 1 MiB in each direction at once.
func testBothWays(t *testing.T, tr transport.Transport, addr string) {
	c, s := Pair(t, tr, addr)
	setDeadline(t, c, s)
	type got struct {
		b   []byte
		err error
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	reads := make([]chan got, 2)
	data := [][]byte{randomBytes(1<<20, 2), randomBytes(1<<20, 3)}
	ends := []transport.Conn{c, s}
	for i := range ends {
		reads[i] = make(chan got, 1)
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := ends[i].Write(data[i])
			errs <- err
		}()
		go func() {
			defer wg.Done()
			b := make([]byte, len(data[1-i]))
			_, err := io.ReadFull(ends[i], b)
			reads[i] <- got{b, err}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	await(t, done, "transfers")
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	for i := range reads {
		r := <-reads[i]
		if r.err != nil {
			t.Fatalf("Read: %v", r.err)
		}
		if !bytes.Equal(r.b, data[1-i]) {
			t.Fatalf("end %d read different bytes than its peer wrote", i)
		}
	}
}

// testCloseEOF checks that the peer drains what was written before Close,
// then reads io.EOF.
func testCloseEOF(t *testing.T, tr transport.Transport, addr string) {
	c, s := Pair(t, tr, addr)
	setDeadline(t, c, s)
	want := randomBytes(100<<10, 4)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		if err == nil {
			err = c.Close()
		}
		wrote <- err
	}()
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if err := await(t, wrote, "Write and Close"); err != nil {
		t.Fatalf("Write and Close: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes before EOF, want the %d written", len(got), len(want))
	}
	if n, err := s.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read after EOF = %d, %v; want 0, io.EOF", n, err)
	}
}

func checkTimeout(t *testing.T, what string, err error) {
	t.Helper()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%s: error %v is not a net.Error timeout", what, err)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: error %v does not match os.ErrDeadlineExceeded", what, err)
	}
}

func testReadDeadline(t *testing.T, tr transport.Transport, addr string) {
	c, s := Pair(t, tr, addr)
	const d = 20 * time.Millisecond
	start := time.Now()
	if err := c.SetReadDeadline(start.Add(d)); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(make([]byte, 10))
	if n != 0 {
		t.Fatalf("Read returned %d bytes that nobody wrote", n)
	}
	checkTimeout(t, "Read", err)
	if el := time.Since(start); el < d {
		t.Fatalf("Read timed out after %v, before the %v deadline", el, d)
	}
	// Clearing the deadline makes the connection usable again.
	setDeadline(t, c, s)
	if _, err := s.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "after" {
		t.Fatalf("Read after the deadline was moved = %q, %v", got, err)
	}
}

func testPastDeadline(t *testing.T, tr transport.Transport, addr string) {
	c, s := Pair(t, tr, addr)
	setDeadline(t, s)
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	// A second ago, and centuries ago (before what UnixNano can say).
	for _, dl := range []time.Time{time.Now().Add(-time.Second), time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if err := c.SetDeadline(dl); err != nil {
			t.Fatal(err)
		}
		_, err := c.Read(make([]byte, 1))
		checkTimeout(t, "Read", err)
		_, err = c.Write([]byte("y"))
		checkTimeout(t, "Write", err)
	}
}

// testFarDeadline: a deadline centuries ahead (past what UnixNano can
// say) is no deadline yet, as on TCP: reads and writes go through.
func testFarDeadline(t *testing.T, tr transport.Transport, addr string) {
	c, s := Pair(t, tr, addr)
	setDeadline(t, s)
	if err := c.SetDeadline(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("Write with a deadline in the year 3000: %v", err)
	}
	if _, err := s.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatalf("Read with a deadline in the year 3000: %v", err)
	}
}

func testDeadlineUnblocksRead(t *testing.T, tr transport.Transport, addr string) {
	c, _ := Pair(t, tr, addr)
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	if err := c.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	checkTimeout(t, "Read", await(t, read, "Read"))
}

// testWriteDeadline fills the connection while the peer does not read
// until a Write times out.
func testWriteDeadline(t *testing.T, tr transport.Transport, addr string) {
	c, _ := Pair(t, tr, addr)
	if err := c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	const limit = 256 << 20
	total := 0
	for total < limit {
		n, err := c.Write(chunk)
		total += n
		if err != nil {
			checkTimeout(t, "Write", err)
			if n == len(chunk) {
				t.Fatalf("Write wrote all %d bytes and failed", n)
			}
			return
		}
	}
	t.Fatalf("wrote %d bytes to a peer that does not read without blocking", total)
}

func testCloseUnblocksRead(t *testing.T, tr transport.Transport, addr string) {
	c, _ := Pair(t, tr, addr)
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := await(t, read, "Read"); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read on a closed connection = %v, want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write on a closed connection = %v, want net.ErrClosed", err)
	}
	if err := c.Close(); err == nil {
		t.Fatalf("second Close returned nil")
	}
}

// testWriteAfterPeerClose checks that writes to a closed peer fail soon
// (TCP may accept the first one before the reset arrives).
func testWriteAfterPeerClose(t *testing.T, tr transport.Transport, addr string) {
	c, s := Pair(t, tr, addr)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	setDeadline(t, c)
	deadline := time.Now().Add(testTimeout)
	for time.Now().Before(deadline) {
		_, err := c.Write([]byte("ping"))
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("Write to a closed peer timed out: %v", err)
		}
		return
	}
	t.Fatalf("writes to a closed peer kept succeeding")
}

// testConcurrentWrites checks that concurrent Writes are not interleaved:
// each arrives whole, and each writer's arrive in its order.
func testConcurrentWrites(t *testing.T, tr transport.Transport, addr string) {
	c, s := Pair(t, tr, addr)
	setDeadline(t, c, s)
	const writers, perWriter, size = 4, 8, 64 << 10
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			b := make([]byte, size)
			for i := range perWriter {
				// The block's byte says who wrote it and when.
				for j := range b {
					b[j] = byte(w*perWriter + i)
				}
				if _, err := c.Write(b); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	got := make([]byte, writers*perWriter*size)
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatalf("ReadFull: %v", err)
	}
	for range writers {
		if err := await(t, errs, "writers"); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	next := make([]int, writers)
	for k := 0; k < len(got); k += size {
		block := got[k : k+size]
		v := block[0]
		if bytes.Count(block, []byte{v}) != size {
			t.Fatalf("block at %d mixes two writes", k)
		}
		w, i := int(v)/perWriter, int(v)%perWriter
		if w >= writers || i != next[w] {
			t.Fatalf("block at %d is write %d of writer %d, want write %d", k, i, w, next[min(w, writers-1)])
		}
		next[w]++
	}
}

// testManyConns runs several echo connections on one listener at once.
func testManyConns(t *testing.T, tr transport.Transport, addr string) {
	ln := Listen(t, tr, addr)
	const conns = 8
	var servers sync.WaitGroup
	accepted := make(chan error, 1)
	go func() {
		defer close(accepted)
		for range conns {
			s, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			servers.Add(1)
			go func() {
				defer servers.Done()
				defer s.Close()
				s.SetDeadline(time.Now().Add(testTimeout))
				io.Copy(s, s)
			}()
		}
	}()
	results := make(chan error, conns)
	for i := range conns {
		go func() {
			results <- func() error {
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				c, err := tr.Dial(ctx, ln.Addr())
				if err != nil {
					return err
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(testTimeout))
				want := randomBytes(64<<10, uint64(10+i))
				go c.Write(want)
				got := make([]byte, len(want))
				if _, err := io.ReadFull(c, got); err != nil {
					return err
				}
				if !bytes.Equal(got, want) {
					return fmt.Errorf("conn %d: echo differs", i)
				}
				return nil
			}()
		}()
	}
	var failed error
	for range conns {
		if err := await(t, results, "clients"); err != nil && failed == nil {
			failed = err
		}
	}
	if failed != nil {
		ln.Close()
	}
	if err := await(t, accepted, "acceptor"); err != nil && failed == nil {
		failed = err
	}
	done := make(chan struct{})
	go func() { servers.Wait(); close(done) }()
	await(t, done, "echo servers")
	if failed != nil {
		t.Fatal(failed)
	}
}

func testAcceptAfterClose(t *testing.T, tr transport.Transport, addr string) {
	ln := Listen(t, tr, addr)
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if c != nil {
			c.Close()
		}
		accepted <- err
	}()
	if err := ln.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := await(t, accepted, "Accept"); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Accept after Close = %v, want transport.ErrClosed", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("second Accept after Close = %v, want transport.ErrClosed", err)
	}
}

func testDialRefused(t *testing.T, tr transport.Transport, addr string) {
	ln := Listen(t, tr, addr)
	a := ln.Addr()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := tr.Dial(ctx, a)
	if err == nil {
		c.Close()
		t.Fatalf("Dial(%v) after the listener closed succeeded", a)
	}
	if !errors.Is(err, transport.ErrRefused) {
		t.Fatalf("Dial(%v) = %v, want transport.ErrRefused", a, err)
	}
}

func testDialCanceled(t *testing.T, tr transport.Transport, addr string) {
	ln := Listen(t, tr, addr)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c, err := tr.Dial(ctx, ln.Addr()); !errors.Is(err, context.Canceled) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial with a canceled context = %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if c, err := tr.Dial(ctx, ln.Addr()); !errors.Is(err, context.DeadlineExceeded) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial past its deadline = %v, want context.DeadlineExceeded", err)
	}
}
