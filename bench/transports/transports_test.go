//go:build linux

// Package transports compares ferry's transports (tcp, unix, shm) in one
// run, client and server in two processes on one host: a 64 B RPC round
// trip and a 1 MiB bulk GET, beside the raw byte-stream floor of each
// transport (the transport's Conn, no messenger).
//
//	BenchmarkRoundTrip64/impl=raw-tcp     64 B written, 64 B echoed on a raw TCP socket (the floor)
//	BenchmarkRoundTrip64/impl=raw-unix    the same on a Unix socket
//	BenchmarkRoundTrip64/impl=raw-shm     the same on an shm connection
//	BenchmarkRoundTrip64/impl=ferry-T     an RPC with a 64 B input echoed as its output, over T
//	BenchmarkGet1MiB/impl=raw-T           a 5-byte request, 1 MiB back
//	BenchmarkGet1MiB/impl=ferry-T         TransferWait GET of 1 MiB from the server's registered buffer
//	                                      (direct: process_vm_readv on unix and shm)
//
// The test binary re-executes itself with FERRY_TRANSPORTS_ROLE=server as
// the server process. Run:
//
//	go test -run '^$' -bench . -benchtime 2s -count 1 ./bench/transports
//
// On a small machine the figures over shm depend on where the kernel
// runs the two processes (spinning readers on one CPU take turns; on two
// they do not wait for each other). FERRY_BENCH_SERVER_CPUS=LIST runs the
// server under `taskset -c LIST`; run the client under taskset too to
// place both, e.g. apart:
//
//	go test -c -o /tmp/tr.test ./bench/transports
//	FERRY_BENCH_SERVER_CPUS=1 taskset -c 0 /tmp/tr.test -test.run '^$' -test.bench RoundTrip64
//
// FERRY_BENCH_SERVER_PROFILE=FILE writes the server process's CPU
// profile to FILE (the client's is -test.cpuprofile).
package transports

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/internal/crc32c"
	"github.com/ferrymsg/ferry/internal/streamcopy"
	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
	"github.com/ferrymsg/ferry/transport/shm"
)

const envRole = "FERRY_TRANSPORTS_ROLE"

// schemes are the transports compared.
var schemes = []string{"tcp", "unix", "shm"}

// getSize is the GET benchmark's size; the server's buffer holds it.
const getSize = 1 << 20

// registry holds the three transports, TCP with the congestion control
// FERRY_BENCH_CC names (empty: the system's) in both processes. For experiments,
// FERRY_SHM_SPIN and FERRY_SHM_MAXSPIN (a duration, "-1ns" for off) set
// the shm transport's Options.Spin and Options.MaxSpin in both
// processes.
func registry() *transport.Registry {
	spin, _ := strconv.Atoi(os.Getenv("FERRY_SHM_SPIN"))
	maxSpin, _ := time.ParseDuration(os.Getenv("FERRY_SHM_MAXSPIN"))
	return transport.NewRegistry(transport.NewTCP(transport.TCPOptions{Congestion: os.Getenv("FERRY_BENCH_CC")}), transport.NewUnix(),
		shm.NewWithOptions(shm.Options{Spin: spin, MaxSpin: maxSpin}))
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The ferry protocol: base 5, version 0.
var (
	opEcho = rpc.MakeOpcode(5, 0, 0) // raw bytes in, the same bytes out
	opInfo = rpc.MakeOpcode(5, 0, 1) // the handle of the server's GET source
	opRead = rpc.MakeOpcode(5, 0, 2) // getSize bytes of the GET source, as the output
)

func protocol(src *rpc.Bulk, data []byte) rpc.Protocol {
	return rpc.Protocol{Name: "transports", Base: 5, Version: 0, RPCs: []rpc.RPC{
		{Name: "echo", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
			var b rpc.Bytes
			if err := r.Decode(&b); err != nil {
				return err
			}
			return r.Reply(&b)
		}},
		{Name: "info", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
			if src == nil {
				return errors.New("no source buffer")
			}
			return r.Reply(src.Handle())
		}},
		{Name: "read", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
			out := rpc.Bytes(data) // the server's own memory, sent as it is
			return r.Reply(&out)
		}},
	}}
}

// pattern fills p with bytes that depend on their offset.
func pattern(p []byte) {
	for i := range p {
		p[i] = byte(i*7 + i>>11)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(envRole) == "server" {
		stop := func() {}
		if f := os.Getenv("FERRY_BENCH_SERVER_PROFILE"); f != "" {
			var err error
			if stop, err = startProfile(f); err != nil {
				fmt.Fprintln(os.Stderr, "server:", err)
				os.Exit(1)
			}
		}
		err := serve(os.Stdin, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if thePeer != nil {
		thePeer.stop()
	}
	os.Exit(code)
}

// startProfile starts a CPU profile into the file f and returns what
// stops it.
func startProfile(f string) (stop func(), err error) {
	w, err := os.Create(f)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(w); err != nil {
		w.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); w.Close() }, nil
}

// serve runs the server process: per transport a ferry instance and a
// raw listener, in a fresh directory for the socket files. It prints
// "ferry-T ADDR" and "raw-T ADDR" lines, then "ready", and serves until
// stdin closes.
func serve(stdin io.Reader, stdout io.Writer) error {
	dir, err := os.MkdirTemp("", "ferry-tb")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	reg := registry()
	src := make([]byte, getSize)
	pattern(src)
	var lns []transport.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for _, s := range schemes {
		addr := "tcp://127.0.0.1:0"
		if s != "tcp" {
			addr = s + "://" + filepath.Join(dir, "ferry-"+s)
		}
		in, err := rpc.New(rpc.Options{Listen: addr, Logger: quiet(), Transports: reg})
		if err != nil {
			return err
		}
		defer in.Close()
		b, err := in.NewBulk([][]byte{src}, rpc.BulkRO)
		if err != nil {
			return err
		}
		if err := in.Register(protocol(b, src)); err != nil {
			return err
		}
		if _, err := in.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ferry-%s %s\n", s, in.URI())

		raw := "tcp://127.0.0.1:0"
		if s != "tcp" {
			raw = s + "://" + filepath.Join(dir, "raw-"+s)
		}
		l, err := reg.Listen(context.Background(), raw)
		if err != nil {
			return err
		}
		lns = append(lns, l)
		go acceptRaw(l, src)
		fmt.Fprintf(stdout, "raw-%s %s\n", s, l.Addr())
	}
	fmt.Fprintln(stdout, "ready")
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}

// Raw protocol: a 5-byte request, op and u32 length. 'e': that many
// bytes follow and are echoed; 'g': that many bytes of the source are
// sent back.
func acceptRaw(l transport.Listener, src []byte) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go serveRaw(c, src)
	}
}

func serveRaw(c transport.Conn, src []byte) {
	defer c.Close()
	var h [5]byte
	buf := make([]byte, 64<<10)
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(h[1:]))
		switch h[0] {
		case 'e':
			if n > getSize {
				return
			}
			if n > len(buf) {
				buf = make([]byte, getSize)
			}
			if _, err := io.ReadFull(c, buf[:n]); err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		case 'g':
			if n > len(src) {
				return
			}
			if _, err := c.Write(src[:n]); err != nil {
				return
			}
		default:
			return
		}
	}
}

// peer is the server process and this process's clients of it.
type peer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addrs map[string]string // "ferry-tcp", "raw-shm"... → address

	mu      sync.Mutex
	clients map[string]*ferryClient
	raws    map[string]transport.Conn
}

// ferryClient is a client instance of one transport's server.
type ferryClient struct {
	in    *rpc.Instance
	ctx   *rpc.Context
	ep    rpc.Endpoint
	src   rpc.BulkHandle
	dst   []byte
	local *rpc.Bulk
}

var (
	peerOnce sync.Once
	thePeer  *peer
	peerErr  error
)

func getPeer(tb testing.TB) *peer {
	tb.Helper()
	peerOnce.Do(func() {
		thePeer = &peer{addrs: map[string]string{}, clients: map[string]*ferryClient{}, raws: map[string]transport.Conn{}}
		peerErr = thePeer.start()
	})
	if peerErr != nil {
		tb.Fatalf("starting the server process: %v", peerErr)
	}
	return thePeer
}

func (p *peer) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	p.cmd = exec.Command(exe, "-test.run=^$")
	if cpus := os.Getenv("FERRY_BENCH_SERVER_CPUS"); cpus != "" {
		p.cmd = exec.Command("taskset", "-c", cpus, exe, "-test.run=^$")
	}
	p.cmd.Env = append(os.Environ(), envRole+"=server")
	p.cmd.Stderr = os.Stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	lines := make(chan error, 1)
	go func() {
		br := bufio.NewReader(stdout)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				lines <- err
				return
			}
			line = strings.TrimSpace(line)
			if line == "ready" {
				lines <- nil
				_, _ = io.Copy(io.Discard, br)
				return
			}
			k, v, _ := strings.Cut(line, " ")
			p.addrs[k] = v
		}
	}()
	select {
	case err := <-lines:
		return err
	case <-time.After(20 * time.Second):
		return errors.New("the server did not start")
	}
}

func (p *peer) stop() {
	p.mu.Lock()
	for _, c := range p.clients {
		c.local.Free()
		c.in.Close()
	}
	for _, c := range p.raws {
		c.Close()
	}
	p.mu.Unlock()
	p.stdin.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// ferry returns the client of scheme's ferry server, connected.
func (p *peer) ferry(tb testing.TB, scheme string) *ferryClient {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.clients[scheme]; c != nil {
		return c
	}
	in, err := rpc.New(rpc.Options{Logger: quiet(), Transports: registry()})
	if err != nil {
		tb.Fatal(err)
	}
	c := &ferryClient{in: in, dst: make([]byte, getSize)}
	fail := func(err error) {
		in.Close()
		tb.Fatal(err)
	}
	if err := in.Group().Add(0, p.addrs["ferry-"+scheme]); err != nil {
		fail(err)
	}
	if c.ctx, err = in.NewContext(rpc.ContextOptions{}); err != nil {
		fail(err)
	}
	if err := c.ctx.Call(context.Background(), c.ep, opInfo, nil, &c.src); err != nil {
		fail(err)
	}
	if c.local, err = in.NewBulk([][]byte{c.dst}, rpc.BulkWO); err != nil {
		fail(err)
	}
	p.clients[scheme] = c
	return c
}

// raw returns a raw connection to scheme's raw server.
func (p *peer) raw(tb testing.TB, scheme string) transport.Conn {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.raws[scheme]; c != nil {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := registry().Dial(ctx, p.addrs["raw-"+scheme])
	if err != nil {
		tb.Fatal(err)
	}
	p.raws[scheme] = c
	return c
}

// rawRoundTrip sends req ('e') and reads its echo into resp.
func rawRoundTrip(c transport.Conn, req, resp []byte) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	_, err := io.ReadFull(c, resp)
	return err
}

func echoRequest(n int) []byte {
	req := make([]byte, 5+n)
	req[0] = 'e'
	binary.LittleEndian.PutUint32(req[1:], uint32(n))
	for i := range n {
		req[5+i] = byte(i)
	}
	return req
}

// rawGet asks for n bytes ('g') and reads them into dst.
func rawGet(c transport.Conn, dst []byte) error {
	var h [5]byte
	h[0] = 'g'
	binary.LittleEndian.PutUint32(h[1:], uint32(len(dst)))
	if _, err := c.Write(h[:]); err != nil {
		return err
	}
	_, err := io.ReadFull(c, dst)
	return err
}

func (c *ferryClient) echo(in, out *rpc.Bytes) error {
	return c.ctx.Call(context.Background(), c.ep, opEcho, in, out)
}

func (c *ferryClient) get() error {
	return c.ctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkGet, Remote: c.src, Local: c.local, Len: getSize, Peer: &c.ep})
}

func BenchmarkRoundTrip64(b *testing.B) { benchEcho(b, 64) }

// BenchmarkEcho1MiB is the 1 MiB round trip of `ferry ping --size 1M`
// (issue 17's shm against tcp) on each transport: raw, one Write and
// one ReadFull each way, the floor; ferry, an RPC echo through Call.
func BenchmarkEcho1MiB(b *testing.B) { benchEcho(b, getSize) }

// benchEcho runs an echo of n bytes on every transport, raw and through
// ferry's Call; from 64 KiB on it reports bytes per second too.
func benchEcho(b *testing.B, n int) {
	p := getPeer(b)
	setBytes := func(b *testing.B) {
		if n >= 64<<10 {
			b.SetBytes(int64(n))
		}
		b.ReportAllocs()
	}
	for _, s := range schemes {
		b.Run("impl=raw-"+s, func(b *testing.B) {
			c := p.raw(b, s)
			req, resp := echoRequest(n), make([]byte, n)
			setBytes(b)
			for b.Loop() {
				if err := rawRoundTrip(c, req, resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, s := range schemes {
		b.Run("impl=ferry-"+s, func(b *testing.B) {
			c := p.ferry(b, s)
			in, out := rpc.Bytes(make([]byte, n)), rpc.Bytes(nil)
			setBytes(b)
			for b.Loop() {
				if err := c.echo(&in, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRead1MiB is an RPC whose 1 MiB output comes from the
// server's memory (a storage read), received into rpc.Bytes (a fresh
// buffer per call) and into one reused rpc.CopyBytes (a copy per call);
// raw is Get1MiB's raw floor.
func BenchmarkRead1MiB(b *testing.B) {
	p := getPeer(b)
	benchRawGet(b, p)
	for _, s := range schemes {
		for _, out := range []struct {
			name string
			v    rpc.Output
		}{{"bytes", new(rpc.Bytes)}, {"copybytes", new(rpc.CopyBytes)}} {
			b.Run("impl=ferry-"+s+"-"+out.name, func(b *testing.B) {
				c := p.ferry(b, s)
				b.SetBytes(getSize)
				b.ReportAllocs()
				for b.Loop() {
					if err := c.ctx.Call(context.Background(), c.ep, opRead, nil, out.v); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchRawGet runs the raw GET of getSize bytes, the floor of Get1MiB
// and Read1MiB, on every transport.
func benchRawGet(b *testing.B, p *peer) {
	for _, s := range schemes {
		b.Run("impl=raw-"+s, func(b *testing.B) {
			c := p.raw(b, s)
			dst := make([]byte, getSize)
			b.SetBytes(getSize)
			b.ReportAllocs()
			for b.Loop() {
				if err := rawGet(c, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMemory is what bounds the shm ring's 1 MiB round trip on
// this machine: one thread streaming 1 MiB writes past the cache over a
// 256 MiB region (the ring writer's non-temporal stores), and reading it
// back through the CRC (the reader's copy out of memory), the same
// internal routines the shm transport uses. Run it beside ferry ping to
// see how the guest's memory bandwidth moves (scripts/shm-probes.sh membw).
func BenchmarkMemory(b *testing.B) {
	const region = 256 << 20
	mem := make([]byte, region)
	for i := range mem {
		mem[i] = byte(i)
	}
	src := make([]byte, getSize)
	b.Run("op=stream-write", func(b *testing.B) {
		b.SetBytes(getSize)
		off := 0
		for b.Loop() {
			streamcopy.Copy(mem[off:off+getSize], src)
			off = (off + getSize) % region
		}
	})
	b.Run("op=crc-read", func(b *testing.B) {
		b.SetBytes(getSize)
		off := 0
		var crc uint32
		for b.Loop() {
			crc = crc32c.Update(crc, mem[off:off+getSize])
			off = (off + getSize) % region
		}
		sink = crc
	})
}

// sink keeps BenchmarkMemory's CRC alive.
var sink uint32

func BenchmarkGet1MiB(b *testing.B) {
	p := getPeer(b)
	benchRawGet(b, p)
	for _, s := range schemes {
		b.Run("impl=ferry-"+s, func(b *testing.B) {
			c := p.ferry(b, s)
			b.SetBytes(getSize)
			b.ReportAllocs()
			before := c.ctx.BulkStats().Direct
			for b.Loop() {
				if err := c.get(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.ctx.BulkStats().Direct-before)/float64(b.N), "direct/op")
		})
	}
}

// TestSmoke runs every benchmarked path once and checks the bytes.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	p := getPeer(t)
	want := make([]byte, getSize)
	pattern(want)
	for _, s := range schemes {
		t.Run(s, func(t *testing.T) {
			c := p.raw(t, s)
			req, resp := echoRequest(64), make([]byte, 64)
			if err := rawRoundTrip(c, req, resp); err != nil || !bytes.Equal(resp, req[5:]) {
				t.Fatalf("raw echo: %v", err)
			}
			dst := make([]byte, getSize)
			if err := rawGet(c, dst); err != nil || !bytes.Equal(dst, want) {
				t.Fatalf("raw get: %v", err)
			}
			f := p.ferry(t, s)
			in, out := rpc.Bytes(req[5:]), rpc.Bytes(nil)
			if err := f.echo(&in, &out); err != nil || !bytes.Equal(out, req[5:]) {
				t.Fatalf("ferry echo: %v", err)
			}
			clear(f.dst)
			before := f.ctx.BulkStats().Direct
			if err := f.get(); err != nil || !bytes.Equal(f.dst, want) {
				t.Fatalf("ferry get: %v", err)
			}
			direct := f.ctx.BulkStats().Direct - before
			switch {
			case s == "tcp" && direct != 0:
				t.Fatalf("ferry get over tcp: %d direct transfers", direct)
			case s != "tcp" && direct == 0 && !yamaRestricts():
				t.Fatalf("ferry get over %s: not by the direct path", s)
			}
		})
	}
}

// yamaRestricts reports whether Yama's ptrace_scope may refuse
// process_vm_readv between the two processes.
func yamaRestricts() bool {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	return err == nil && strings.TrimSpace(string(b)) != "0"
}
