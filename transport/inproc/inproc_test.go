package inproc_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/inproc"
	"github.com/ferrymsg/ferry/transport/transporttest"
)

const timeout = 5 * time.Second

// newNet returns a network whose connections must all be closed or reset
// when t ends, with a goroutine leak check.
func newNet(t *testing.T) *inproc.Network {
	t.Helper()
	transporttest.CheckGoroutines(t)
	n := inproc.NewNetwork()
	t.Cleanup(func() {
		if k := n.NumConns(); k != 0 {
			t.Errorf("%d connections left open", k)
		}
	})
	return n
}

func addr(s string) transport.Addr { return transport.Addr{Scheme: "inproc", Host: s} }

func listen(t *testing.T, n *inproc.Network, name string) transport.Listener {
	t.Helper()
	ln, err := n.Listen(context.Background(), addr(name))
	if err != nil {
		t.Fatalf("Listen(%q): %v", name, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// connect dials ln from tr and accepts; both ends close when t ends.
func connect(t *testing.T, tr transport.Transport, ln transport.Listener) (client, server transport.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := tr.Dial(ctx, ln.Addr())
	if err != nil {
		t.Fatalf("Dial(%v): %v", ln.Addr(), err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept() // the dial queued it: Accept does not block
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return c, s
}

func await[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out")
		panic("unreachable")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && errors.Is(err, os.ErrDeadlineExceeded)
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, inproc.NewNetwork(), "inproc://")
}

func TestConformanceSmallBuffers(t *testing.T) {
	n := inproc.NewNetwork()
	n.SetBufferSize(1000)
	transporttest.Run(t, n, "inproc://small:0")
}

func TestConformanceDelayedNode(t *testing.T) {
	n := inproc.NewNetwork()
	n.SetDelay(100 * time.Microsecond)
	n.SetBufferSize(64 << 10)
	transporttest.Run(t, n.Node("client"), "inproc://server")
}

func TestListenNames(t *testing.T) {
	n := newNet(t)
	ctx := context.Background()
	a1 := listen(t, n, "").Addr()
	a2 := listen(t, n, "").Addr()
	if a1.Host == "" || a1 == a2 || a1.Scheme != "inproc" {
		t.Fatalf("generated names %v and %v: want two distinct inproc names", a1, a2)
	}
	o1 := listen(t, n, "osd:0").Addr()
	o2 := listen(t, n, "osd:0").Addr()
	if !strings.HasPrefix(o1.Host, "osd:") || o1.Host == "osd:0" || o1 == o2 {
		t.Fatalf("names for osd:0 are %v and %v", o1, o2)
	}
	mon := listen(t, n, "mon.a")
	if mon.Addr() != addr("mon.a") {
		t.Fatalf("Addr() = %v", mon.Addr())
	}
	if _, err := n.Listen(ctx, addr("mon.a")); !errors.Is(err, transport.ErrAddrInUse) {
		t.Fatalf("second Listen(mon.a) = %v, want ErrAddrInUse", err)
	}
	if _, err := n.Listen(ctx, transport.Addr{Scheme: "tcp", Host: "127.0.0.1:0"}); !errors.Is(err, transport.ErrUnknownScheme) {
		t.Fatalf("Listen(tcp address) = %v, want ErrUnknownScheme", err)
	}
	if err := mon.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mon.Close(); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
	listen(t, n, "mon.a") // the name is free again

	// Conn addresses name both sides.
	c, s := connect(t, n.Node("inproc://client.1"), listen(t, n, "osd.3"))
	if c.LocalAddr() != addr("client.1") || c.RemoteAddr() != addr("osd.3") ||
		s.LocalAddr() != addr("osd.3") || s.RemoteAddr() != addr("client.1") {
		t.Fatalf("addresses: client %v→%v, server %v→%v", c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr())
	}
	anon, _ := connect(t, n, listen(t, n, "osd.4"))
	if !strings.HasPrefix(anon.LocalAddr().String(), "inproc://client:") {
		t.Fatalf("anonymous dialer's address = %v", anon.LocalAddr())
	}
}

func TestDialErrors(t *testing.T) {
	n := newNet(t)
	ctx := context.Background()
	if _, err := n.Dial(ctx, addr("nobody")); !errors.Is(err, transport.ErrRefused) {
		t.Fatalf("Dial(nobody) = %v, want ErrRefused", err)
	}
	var op *net.OpError
	if _, err := n.Dial(ctx, addr("nobody")); !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("Dial error is not a *net.OpError: %v", err)
	}
	if _, err := n.Dial(ctx, transport.Addr{Scheme: "tcp", Host: "127.0.0.1:1"}); !errors.Is(err, transport.ErrUnknownScheme) {
		t.Fatalf("Dial(tcp address) = %v, want ErrUnknownScheme", err)
	}
	// Registry routing: inproc is added by the user, never by default.
	reg := transport.NewRegistry(n)
	ln := listen(t, n, "x")
	c, err := reg.Dial(ctx, "inproc://x")
	if err != nil {
		t.Fatalf("Registry Dial: %v", err)
	}
	c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, ok := transport.Default.Lookup("inproc"); ok {
		t.Fatalf("inproc registered itself in transport.Default")
	}
}

// TestBacklog checks that Dial waits, honouring ctx, while a listener's
// backlog is full, and that closing the listener resets what it never
// accepted.
func TestBacklog(t *testing.T) {
	n := newNet(t)
	ln := listen(t, n, "busy")
	ctx := context.Background()
	var queued []transport.Conn
	defer func() {
		for _, c := range queued {
			c.Close()
		}
	}()
	for {
		dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		c, err := n.Dial(dctx, ln.Addr())
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Dial to a full backlog = %v, want context.DeadlineExceeded", err)
			}
			break
		}
		queued = append(queued, c)
		if len(queued) > 10000 {
			t.Fatalf("the backlog never fills")
		}
	}
	if len(queued) == 0 {
		t.Fatalf("no dial was queued")
	}
	// Accept frees a slot.
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := n.Dial(ctx, ln.Addr())
	if err != nil {
		t.Fatalf("Dial after Accept: %v", err)
	}
	queued = append(queued, c)
	// Closing the listener resets the queued connections.
	ln.Close()
	if _, err := queued[len(queued)-1].Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read on a connection never accepted = %v, want ECONNRESET", err)
	}
	// The accepted one still works.
	if _, err := queued[0].Write([]byte("x")); err != nil {
		t.Fatalf("Write on the accepted connection: %v", err)
	}
}

// TestBufferBlocksWriter checks that exactly the buffer size is accepted
// while the reader does not read, and that reading lets the writer go on.
func TestBufferBlocksWriter(t *testing.T) {
	n := newNet(t)
	const limit = 1024
	n.SetBufferSize(limit)
	c, s := connect(t, n, listen(t, n, "b"))
	want := bytes.Repeat([]byte("0123456789abcdef"), 4*limit/16)

	if err := c.SetWriteDeadline(time.Now().Add(30 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	k, err := c.Write(want)
	if k != limit || !isTimeout(err) {
		t.Fatalf("Write to a full buffer = %d, %v; want %d and a timeout", k, err, limit)
	}
	c.SetWriteDeadline(time.Time{})

	// A blocked writer finishes once the reader reads.
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(want[k:])
		wrote <- err
	}()
	got := make([]byte, len(want))
	s.SetReadDeadline(time.Now().Add(timeout))
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	if err := await(t, wrote); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read bytes differ from written ones")
	}

	// A new write deadline applies to a Write already blocked.
	blocked := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 2*limit))
		blocked <- err
	}()
	c.SetWriteDeadline(time.Now())
	if err := await(t, blocked); !isTimeout(err) {
		t.Fatalf("blocked Write after SetWriteDeadline = %v, want a timeout", err)
	}
}

func TestCloseSemantics(t *testing.T) {
	n := newNet(t)
	c, s := connect(t, n, listen(t, n, "b"))
	if _, err := c.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "last words" {
		t.Fatalf("ReadAll after peer Close = %q, %v", got, err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write to a closed peer = %v, want EPIPE", err)
	}
	if err := c.SetDeadline(time.Now()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("SetDeadline after Close = %v, want net.ErrClosed", err)
	}

	// CloseWrite: the peer sees EOF and can still answer.
	c2, s2 := connect(t, n, listen(t, n, "c"))
	if _, err := c2.Write([]byte("question")); err != nil {
		t.Fatal(err)
	}
	if err := c2.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(s2); err != nil || string(got) != "question" {
		t.Fatalf("ReadAll after CloseWrite = %q, %v", got, err)
	}
	if _, err := s2.Write([]byte("answer")); err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if got, err := io.ReadAll(c2); err != nil || string(got) != "answer" {
		t.Fatalf("ReadAll of the answer = %q, %v", got, err)
	}
}

func TestReset(t *testing.T) {
	n := newNet(t)
	ln := listen(t, n, "b")
	c, s := connect(t, n.Node("a"), ln)
	other, _ := connect(t, n.Node("c"), listen(t, n, "d"))
	if _, err := c.Write([]byte("dropped")); err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	if k := n.Reset("inproc://b"); k != 1 {
		t.Fatalf("Reset reset %d connections, want 1", k)
	}
	if err := await(t, read); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("pending Read after Reset = %v, want ECONNRESET", err)
	}
	for i, conn := range []transport.Conn{c, s} {
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("end %d: Read after Reset = %v, want ECONNRESET", i, err)
		}
		if _, err := conn.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("end %d: Write after Reset = %v, want ECONNRESET", i, err)
		}
	}
	// Other connections and the listener are untouched.
	if _, err := other.Write([]byte("x")); err != nil {
		t.Fatalf("unrelated connection: %v", err)
	}
	c3, s3 := connect(t, n.Node("a"), ln)
	if _, err := c3.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(s3, got); err != nil || string(got) != "again" {
		t.Fatalf("after Reset a new connection reads %q, %v", got, err)
	}
}

// TestPartitionResets covers the default partition timeout (reset at
// once), dial failures and Heal.
func TestPartitionResets(t *testing.T) {
	n := newNet(t)
	ctx := context.Background()
	lb := listen(t, n, "b")
	la := listen(t, n, "a")
	ab, _ := connect(t, n.Node("a"), lb)
	_, ba := connect(t, n.Node("b"), la)
	cb, sc := connect(t, n.Node("c"), lb)

	n.Partition("a", "inproc://b")
	for i, conn := range []transport.Conn{ab, ba} {
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("conn %d across the partition: Read = %v, want ECONNRESET", i, err)
		}
	}
	if _, err := n.Node("a").Dial(ctx, lb.Addr()); !errors.Is(err, transport.ErrUnreachable) {
		t.Fatalf("Dial a→b across the partition = %v, want ErrUnreachable", err)
	}
	if _, err := n.Node("b").Dial(ctx, la.Addr()); !errors.Is(err, transport.ErrUnreachable) {
		t.Fatalf("Dial b→a across the partition = %v, want ErrUnreachable", err)
	}
	// c still reaches b.
	if _, err := cb.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2)
	sc.SetReadDeadline(time.Now().Add(timeout))
	if _, err := io.ReadFull(sc, got); err != nil || string(got) != "hi" {
		t.Fatalf("c→b during the a|b partition: %q, %v", got, err)
	}

	n.Heal()
	connect(t, n.Node("a"), lb)
}

// TestPartitionStalls checks that a partition with a long or infinite
// timeout stalls connections, and that Heal resumes them with no byte lost
// or duplicated and EOF kept behind the data.
func TestPartitionStalls(t *testing.T) {
	for _, d := range []time.Duration{-1, time.Hour} {
		t.Run(d.String(), func(t *testing.T) {
			n := newNet(t)
			n.SetPartitionTimeout(d)
			c, s := connect(t, n.Node("a"), listen(t, n, "b"))
			if _, err := c.Write([]byte("before ")); err != nil {
				t.Fatal(err)
			}
			n.Partition("a", "b")
			if _, err := c.Write([]byte("during")); err != nil {
				t.Fatal(err)
			}
			c.Close()
			s.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
			if k, err := s.Read(make([]byte, 64)); k != 0 || !isTimeout(err) {
				t.Fatalf("Read across a stalled partition = %d, %v; want a timeout", k, err)
			}
			s.SetReadDeadline(time.Now().Add(timeout))
			read := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(s)
				read <- b
			}()
			n.Heal()
			if got := await(t, read); string(got) != "before during" {
				t.Fatalf("after Heal read %q, want %q", got, "before during")
			}
		})
	}
}

// TestPartitionTimeout checks that stalled connections reset once the
// partition outlives its timeout.
func TestPartitionTimeout(t *testing.T) {
	n := newNet(t)
	n.SetPartitionTimeout(20 * time.Millisecond)
	c, s := connect(t, n.Node("a"), listen(t, n, "b"))
	start := time.Now()
	n.Partition("a", "b")
	read := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 1))
		read <- err
	}()
	if err := await(t, read); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read after the partition timeout = %v, want ECONNRESET", err)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Fatalf("reset after %v, before the 20ms timeout", el)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Write after the partition timeout = %v, want ECONNRESET", err)
	}
	n.Heal()
}

func TestDelay(t *testing.T) {
	n := newNet(t)
	const d = 30 * time.Millisecond
	c, s := connect(t, n, listen(t, n, "b"))
	n.SetDelay(d)
	start := time.Now()
	if _, err := c.Write([]byte("slow ")); err != nil {
		t.Fatal(err)
	}
	n.SetDelay(0)
	// Undelayed bytes written later must not overtake.
	if _, err := c.Write([]byte("fast")); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(timeout))
	got := make([]byte, 9)
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < d {
		t.Fatalf("delayed bytes arrived after %v, before the %v delay", el, d)
	}
	if string(got) != "slow fast" {
		t.Fatalf("read %q, want %q", got, "slow fast")
	}
	// A read deadline shorter than the delay times out.
	n.SetDelay(time.Hour)
	if _, err := c.Write([]byte("never")); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := s.Read(got); !isTimeout(err) {
		t.Fatalf("Read of bytes delayed past the deadline = %v, want a timeout", err)
	}
}

// TestStreamIntegrity pushes random-sized writes through a small buffer
// while reading in random sizes, and checks every byte arrives once, in
// order.
func TestStreamIntegrity(t *testing.T) {
	n := newNet(t)
	n.SetBufferSize(777)
	c, s := connect(t, n, listen(t, n, "b"))
	c.SetDeadline(time.Now().Add(timeout))
	s.SetDeadline(time.Now().Add(timeout))
	const total = 1 << 20
	want := make([]byte, total)
	for i := range want {
		want[i] = byte(i * 7 >> 3)
	}
	wrote := make(chan error, 1)
	go func() {
		sizes := []int{1, 13, 700, 777, 778, 4096, 3}
		for off, i := 0, 0; off < total; i++ {
			k := min(sizes[i%len(sizes)], total-off)
			if _, err := c.Write(want[off : off+k]); err != nil {
				wrote <- err
				return
			}
			off += k
		}
		wrote <- c.Close()
	}()
	var got []byte
	buf := make([]byte, 5000)
	for i := 0; ; i++ {
		k, err := s.Read(buf[:1+i*37%len(buf)])
		got = append(got, buf[:k]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := await(t, wrote); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("received %d bytes that differ from the %d sent", len(got), len(want))
	}
}
