//go:build linux

package shm

import (
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/transporttest"
)

// BenchmarkShmRoundTrip measures a request of the given size echoed back,
// over shm and, for comparison, over a Unix socket in the same run: by a
// goroutine in the same process, and by a separate process ("-2proc",
// the test binary re-executed as an echo peer).
func BenchmarkShmRoundTrip(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"64B", 64}, {"1MiB", 1 << 20}} {
		for _, tr := range []struct {
			name string
			t    transport.Transport
			host string
		}{{"shm", New(), "shm://"}, {"unix", transport.NewUnix(), "unix://"}} {
			b.Run(size.name+"/"+tr.name, func(b *testing.B) {
				c, s := transporttest.Pair(b, tr.t, tr.host+filepath.Join(b.TempDir(), "s.sock"))
				echoed := make(chan error, 1)
				go func() { echoed <- echo(s, size.n) }()
				benchRoundTrip(b, c, size.n)
				c.Close()
				if err := <-echoed; err != nil {
					b.Fatal(err)
				}
			})
			b.Run(size.name+"/"+tr.name+"-2proc", func(b *testing.B) {
				addr := tr.host + filepath.Join(b.TempDir(), "s.sock")
				ln := transporttest.Listen(b, tr.t, addr)
				peer := startPeer(b, addr, size.n)
				c := acceptPeer(b, ln)
				benchRoundTrip(b, c, size.n)
				c.Close()
				if err := peer.wait(b); err != nil {
					b.Fatalf("peer process: %v", err)
				}
			})
		}
	}
}

// echo echoes n-byte requests on s until the peer closes.
func echo(s transport.Conn, n int) error {
	s.SetDeadline(time.Now().Add(time.Minute))
	buf := make([]byte, n)
	for {
		if _, err := io.ReadFull(s, buf); err != nil {
			return nil // the client closed
		}
		if _, err := s.Write(buf); err != nil {
			return err
		}
	}
}

// benchRoundTrip sends b.N n-byte requests on c, each after the previous
// one's echo was read.
func benchRoundTrip(b *testing.B, c transport.Conn, n int) {
	c.SetDeadline(time.Now().Add(time.Minute))
	req := make([]byte, n)
	resp := make([]byte, n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
}

// BenchmarkShmWake measures a 64 B round trip to a separate echo process
// that has been idle for gap first (the client busy-waits through the
// gap, so only the peer sleeps): past the spin, the peer's wake-up
// through its eventfd is on the path. rt-µs is the round trip alone.
func BenchmarkShmWake(b *testing.B) {
	for _, gap := range []time.Duration{0, 50 * time.Microsecond, 500 * time.Microsecond} {
		for _, tr := range []struct {
			name string
			t    transport.Transport
			host string
		}{{"shm", peerTransport(), "shm://"}, {"unix", transport.NewUnix(), "unix://"}} {
			b.Run(fmt.Sprintf("gap=%v/%s", gap, tr.name), func(b *testing.B) {
				addr := tr.host + filepath.Join(b.TempDir(), "s.sock")
				ln := transporttest.Listen(b, tr.t, addr)
				peer := startPeer(b, addr, 64)
				c := acceptPeer(b, ln)
				c.SetDeadline(time.Now().Add(time.Minute))
				req, resp := make([]byte, 64), make([]byte, 64)
				var rt time.Duration
				for b.Loop() {
					for end := time.Now().Add(gap); time.Now().Before(end); {
					}
					st := time.Now()
					if _, err := c.Write(req); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(c, resp); err != nil {
						b.Fatal(err)
					}
					rt += time.Since(st)
				}
				b.ReportMetric(float64(rt.Microseconds())/float64(b.N), "rt-µs")
				c.Close()
				if err := peer.wait(b); err != nil {
					b.Fatalf("peer process: %v", err)
				}
			})
		}
	}
}
