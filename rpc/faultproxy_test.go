package rpc_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultProxy relays TCP between clients and target; the plan function is
// asked, for the n-th accepted connection, after how many bytes in each
// direction (client->server, server->client) to reset it (<0: never).
type faultProxy struct {
	l      net.Listener
	target string
	plan   func(n int) (c2s, s2c int)
	n      atomic.Int32
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	// swallow: bytes from the server are read and dropped while set.
	swallow atomic.Bool
	// swallow0: as swallow, for the first relayed connection only.
	swallow0 atomic.Bool
}

func newFaultProxy(t *testing.T, target string, plan func(n int) (int, int)) *faultProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{l: l, target: target, plan: plan}
	p.wg.Add(1)
	go p.loop()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) addr() string { return p.l.Addr().String() }

func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

// resetAll resets every live relayed connection now.
func (p *faultProxy) resetAll() {
	p.mu.Lock()
	cs := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range cs {
		rstConn(c)
	}
}

func (p *faultProxy) close() {
	p.mu.Lock()
	p.closed = true
	cs := p.conns
	p.conns = nil
	p.mu.Unlock()
	_ = p.l.Close()
	for _, c := range cs {
		_ = c.Close()
	}
	p.wg.Wait()
}

func rstConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *faultProxy) loop() {
	defer p.wg.Done()
	for {
		a, err := p.l.Accept()
		if err != nil {
			return
		}
		n := int(p.n.Add(1)) - 1
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = a.Close()
			continue
		}
		if !p.track(a) || !p.track(b) {
			_ = a.Close()
			_ = b.Close()
			continue
		}
		c2s, s2c := p.plan(n)
		var once sync.Once
		kill := func() { once.Do(func() { rstConn(a); rstConn(b) }) }
		p.wg.Add(2)
		go func() { defer p.wg.Done(); relay(b, a, c2s, kill, nil) }()
		sw := &p.swallow
		if n == 0 {
			sw = &p.swallow0
		}
		go func() { defer p.wg.Done(); relay(a, b, s2c, kill, sw) }()
	}
}

// relay copies from src to dst; after limit bytes (if >= 0) it kills
// both sockets.
func relay(dst, src net.Conn, limit int, kill func(), swallow *atomic.Bool) {
	defer kill()
	buf := make([]byte, 32<<10)
	total := 0
	for {
		want := len(buf)
		if limit >= 0 && limit-total < want {
			want = limit - total
		}
		if want == 0 {
			return
		}
		n, err := src.Read(buf[:want])
		if n > 0 && (limit == -2 || (swallow != nil && swallow.Load())) {
			continue // swallowed
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			total += n
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

var _ = time.Second
