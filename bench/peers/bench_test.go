package peers

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/rpc"
)

// envRole set to "server" makes the test binary run Serve.
const envRole = "FERRY_PEERS_ROLE"

// envServerCPUs is a CPU list the server process runs on (under `taskset
// -c LIST`); run the client under taskset too to place both, e.g. apart:
//
//	FERRY_BENCH_SERVER_CPUS=1 taskset -c 0 ./peers.test -test.run '^$' -test.bench BulkGet
//
// Large transfers over loopback under cubic run about twice as fast with
// both processes on one vCPU of this VM as on two, for the raw floors as
// for ferry (BENCHMARKS.md, "Placement").
const envServerCPUs = "FERRY_BENCH_SERVER_CPUS"

func TestMain(m *testing.M) {
	if os.Getenv(envRole) == "server" {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		stopProfile := serverProfile(log)
		err := Serve(os.Stdin, os.Stdout, log)
		stopProfile()
		if err != nil {
			log.Error("serve", "err", err)
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

// Profiles of the server process, written when it exits (the client's
// are the test binary's own -cpuprofile and -trace): a CPU profile
// (FERRY_PEERS_SRV_CPUPROFILE=path) and an execution trace
// (FERRY_PEERS_SRV_TRACE=path).
const (
	envSrvProfile = "FERRY_PEERS_SRV_CPUPROFILE"
	envSrvTrace   = "FERRY_PEERS_SRV_TRACE"
)

// serverProfile starts the server's profiles that the environment asks
// for and returns the function that stops them.
func serverProfile(log *slog.Logger) func() {
	var stops []func()
	start := func(env string, begin func(io.Writer) error, end func()) {
		path := os.Getenv(env)
		if path == "" {
			return
		}
		f, err := os.Create(path)
		if err != nil {
			log.Error("server profile", "env", env, "err", err)
			return
		}
		if err := begin(f); err != nil {
			log.Error("server profile", "env", env, "err", err)
			f.Close()
			return
		}
		stops = append(stops, func() {
			end()
			f.Close()
		})
	}
	start(envSrvProfile, pprof.StartCPUProfile, pprof.StopCPUProfile)
	start(envSrvTrace, trace.Start, trace.Stop)
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// peer is the server process and this process's clients of it.
type peer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	ctlMu sync.Mutex

	ferryAddr, rawAddr, grpcAddr string
	ferryUnix                    string // the ferry server's Unix-socket address
	ferrySecure                  string // the cephx, secure-mode-only instance (secure_test.go)
	ferryBusy                    string // the instance whose sockets busy-poll (ferry-busy)
	osdKey                       cephx.Key

	fi  *rpc.Instance
	fc  *rpc.Context  // manual progress (ferry-send)
	fb  *rpc.Instance // busy-polling, to ferryBusy (ferry-busy)
	fbc *rpc.Context
	gcc *grpc.ClientConn
}

var (
	peerOnce sync.Once
	thePeer  *peer
	peerErr  error
)

func getPeer(tb testing.TB) *peer {
	tb.Helper()
	peerOnce.Do(func() {
		thePeer = &peer{}
		peerErr = thePeer.start()
	})
	if peerErr != nil {
		tb.Fatalf("starting the benchmark server: %v", peerErr)
	}
	return thePeer
}

func (p *peer) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// The OSD service key the secure instance verifies tickets with
	// (secure_server.go); the client's ticket is sealed with it.
	if p.osdKey, err = cephx.GenerateKey(crand.Reader, time.Now()); err != nil {
		return err
	}
	p.cmd = exec.Command(exe)
	if cpus := os.Getenv(envServerCPUs); cpus != "" {
		p.cmd = exec.Command("taskset", "-c", cpus, exe)
	}
	p.cmd.Env = append(os.Environ(), envRole+"=server", EnvOSDKey+"="+p.osdKey.String())
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
	p.out = bufio.NewReader(stdout)
	for range 5 {
		line, err := p.readLine(20 * time.Second)
		if err != nil {
			return fmt.Errorf("reading server addresses: %w", err)
		}
		switch k, v, _ := strings.Cut(line, " "); k {
		case "ferry":
			// The TCP address for every ferry contender but the
			// bulk benchmarks' ferry-unix (bulk_test.go).
			for _, a := range strings.Split(v, ",") {
				if strings.HasPrefix(a, "unix://") {
					p.ferryUnix = a
				} else {
					p.ferryAddr = a
				}
			}
		case "raw":
			p.rawAddr = v
		case "grpc":
			p.grpcAddr = v
		case "ferry-secure":
			p.ferrySecure = v
		case "ferry-busy":
			p.ferryBusy = v
		default:
			return fmt.Errorf("unexpected server line %q", line)
		}
	}
	p.fi, err = rpc.New(rpc.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Bulk: BulkOptionsFromEnv(), Transports: Transports()})
	if err != nil {
		return err
	}
	if err := p.fi.Register(Protocol(nil)); err != nil {
		return err
	}
	if err := p.fi.Group().Add(0, p.ferryAddr); err != nil {
		return err
	}
	if p.fc, err = p.fi.NewContext(rpc.ContextOptions{}); err != nil {
		return err
	}
	p.fb, err = rpc.New(rpc.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Transports: Transports(), BusyPoll: BusyPoll()})
	if err != nil {
		return err
	}
	if err := p.fb.Register(Protocol(nil)); err != nil {
		return err
	}
	if err := p.fb.Group().Add(0, p.ferryBusy); err != nil {
		return err
	}
	if p.fbc, err = p.fb.NewContext(rpc.ContextOptions{}); err != nil {
		return err
	}
	p.gcc, err = grpc.NewClient(p.grpcAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialTCP),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(RawCodec{})))
	return err
}

func (p *peer) readLine(d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := p.out.ReadString('\n')
		ch <- res{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(d):
		return "", errors.New("timed out waiting for the server")
	}
}

func (p *peer) stats() (mallocs, rpcs uint64, err error) {
	mallocs, rpcs, _, err = p.statsCPU()
	return mallocs, rpcs, err
}

// statsCPU also returns the server's CPU time in microseconds.
func (p *peer) statsCPU() (mallocs, rpcs uint64, cpu int64, err error) {
	p.ctlMu.Lock()
	defer p.ctlMu.Unlock()
	if _, err := io.WriteString(p.stdin, "stats\n"); err != nil {
		return 0, 0, 0, err
	}
	line, err := p.readLine(10 * time.Second)
	if err != nil {
		return 0, 0, 0, err
	}
	_, err = fmt.Sscanf(line, "stats %d %d %d", &mallocs, &rpcs, &cpu)
	return mallocs, rpcs, cpu, err
}

func (p *peer) stop() {
	if p.gcc != nil {
		p.gcc.Close()
	}
	if p.fi != nil {
		p.fi.Close()
	}
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

var payload = func() []byte {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(i*131 + 7)
	}
	return b
}()

// ---- clients ----

// rawConn is a floor client on one connection.
type rawConn struct {
	c    net.Conn
	br   *bufio.Reader
	wbuf []byte
	hdr  [4]byte
	rhdr [4]byte
	rbuf []byte
}

func dialRaw(addr string) (*rawConn, error) {
	c, err := dialTCP(context.Background(), addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 64<<10), rbuf: make([]byte, 1<<20)}, nil
}

func (r *rawConn) send(size int, echo bool) error {
	v := uint32(size)
	if echo {
		v |= rawEchoBit
	}
	if size <= 16<<10 {
		r.wbuf = binary.LittleEndian.AppendUint32(r.wbuf[:0], v)
		r.wbuf = append(r.wbuf, payload[:size]...)
		_, err := r.c.Write(r.wbuf)
		return err
	}
	binary.LittleEndian.PutUint32(r.hdr[:], v)
	bufs := net.Buffers{r.hdr[:], payload[:size]}
	_, err := bufs.WriteTo(r.c)
	return err
}

func (r *rawConn) recv(want int) error {
	if _, err := io.ReadFull(r.br, r.rhdr[:]); err != nil {
		return err
	}
	if n := int(binary.LittleEndian.Uint32(r.rhdr[:])); n != want {
		return fmt.Errorf("raw reply of %d bytes, want %d", n, want)
	}
	_, err := io.ReadFull(r.br, r.rbuf[:want])
	return err
}

// ---- measurement ----

type meter struct {
	b      *testing.B
	p      *peer
	lat    []time.Duration
	m0, r0 uint64
	s0, c0 int64 // the server's and this process's CPU time (µs)
}

func startMeter(b *testing.B, p *peer, window int) *meter {
	m := &meter{b: b, p: p}
	if window == 1 {
		m.lat = make([]time.Duration, 0, b.N)
	}
	var err error
	if m.m0, m.r0, m.s0, err = p.statsCPU(); err != nil {
		b.Fatal(err)
	}
	m.c0 = CPUTime()
	b.ReportAllocs()
	b.ResetTimer()
	return m
}

func (m *meter) add(d time.Duration) {
	if m.lat != nil && len(m.lat) < cap(m.lat) {
		m.lat = append(m.lat, d)
	}
}

func (m *meter) done() {
	b := m.b
	b.StopTimer()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "rpcs/s")
	}
	if len(m.lat) > 0 {
		slices.Sort(m.lat)
		q := func(f float64) float64 { return float64(m.lat[int(f*float64(len(m.lat)-1))]) / 1e3 }
		b.ReportMetric(q(0.5), "p50-µs")
		b.ReportMetric(q(0.99), "p99-µs")
	}
	c1 := CPUTime()
	m1, r1, s1, err := m.p.statsCPU()
	if err != nil {
		b.Fatal(err)
	}
	if n := r1 - m.r0; n > 0 {
		b.ReportMetric(float64(m1-m.m0)/float64(n), "srv-allocs/op")
	}
	// Both processes' CPU time per RPC: on this shared 2-core machine
	// a steadier measure than the rate of what the code costs.
	b.ReportMetric(float64(c1-m.c0)/float64(b.N), "cli-cpu-µs/op")
	b.ReportMetric(float64(s1-m.s0)/float64(b.N), "srv-cpu-µs/op")
}

// ---- bodies ----

// benchRaw runs b.N round trips with up to window outstanding on one
// connection (pipelined).
func benchRaw(b *testing.B, size int, echo bool, window int) {
	p := getPeer(b)
	r, err := dialRaw(p.rawAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer r.c.Close()
	want := 0
	if echo {
		want = size
	}
	for range 10 {
		if err := r.send(size, echo); err != nil {
			b.Fatal(err)
		}
		if err := r.recv(want); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	m := startMeter(b, p, window)
	sent, done := 0, 0
	var t0 time.Time
	for ; sent < window && sent < b.N; sent++ {
		t0 = time.Now()
		if err := r.send(size, echo); err != nil {
			b.Fatal(err)
		}
	}
	for done < b.N {
		if err := r.recv(want); err != nil {
			b.Fatal(err)
		}
		done++
		m.add(time.Since(t0))
		if sent < b.N {
			t0 = time.Now()
			if err := r.send(size, echo); err != nil {
				b.Fatal(err)
			}
			sent++
		}
	}
	m.done()
}

// benchParallel runs b.N calls from window goroutines.
func benchParallel(b *testing.B, window int, call func(out *[]byte) error) {
	p := getPeer(b)
	var out []byte
	for range 10 {
		if err := call(&out); err != nil {
			b.Fatal(err)
		}
	}
	m := startMeter(b, p, window)
	if window == 1 {
		for range b.N {
			t0 := time.Now()
			if err := call(&out); err != nil {
				b.Fatal(err)
			}
			m.add(time.Since(t0))
		}
		m.done()
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for range window {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out []byte
			for {
				mu.Lock()
				if next == b.N {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				if err := call(&out); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	m.done()
}

func ferryCall(p *peer, op rpc.Opcode, size int, wantReply int) func(out *[]byte) error {
	return ferryCallOn(p, p.fc, op, size, wantReply)
}

func ferryCallOn(p *peer, c *rpc.Context, op rpc.Opcode, size int, wantReply int) func(out *[]byte) error {
	in := rpc.Bytes(payload[:size])
	ctx := context.Background()
	return func(out *[]byte) error {
		// out is the calling goroutine's: using it as the output keeps the
		// benchmark itself from allocating.
		o := (*rpc.Bytes)(out)
		*o = nil
		var po rpc.Output
		if wantReply > 0 {
			po = o
		}
		if err := c.Call(ctx, rpc.Endpoint{}, op, &in, po); err != nil {
			return err
		}
		if len(*o) != wantReply {
			return fmt.Errorf("ferry reply of %d bytes, want %d", len(*o), wantReply)
		}
		return nil
	}
}

func grpcCall(p *peer, method string, size int, wantReply int) func(out *[]byte) error {
	in := payload[:size]
	ctx := context.Background()
	return func(out *[]byte) error {
		if err := p.gcc.Invoke(ctx, method, &in, out); err != nil {
			return err
		}
		if len(*out) != wantReply {
			return fmt.Errorf("gRPC reply of %d bytes, want %d", len(*out), wantReply)
		}
		return nil
	}
}

// benchFerrySend keeps window requests in flight with Send and runs their
// callbacks with the context's progress (CaRT's way; one goroutine).
func benchFerrySend(b *testing.B, c *rpc.Context, op rpc.Opcode, size, window int) {
	p := getPeer(b)
	in := rpc.Bytes(payload[:size])
	sent, done := 0, 0
	var failed error
	var cb rpc.Callback
	outs := make([]rpc.Bytes, window)
	send := func(i int) {
		sent++
		if _, err := c.Send(rpc.Request{Opcode: op, In: &in, Out: &outs[i], Arg: i}, cb); err != nil {
			failed = err
		}
	}
	total := 0
	cb = func(cp rpc.Completion) {
		done++
		if cp.Err != nil && failed == nil {
			failed = cp.Err
		}
		i := cp.Request.Arg.(int)
		outs[i] = nil
		if sent < total {
			send(i)
		}
	}
	run := func(n int) {
		total, sent, done = n, 0, 0
		for i := range min(window, n) {
			send(i)
		}
		if err := c.ProgressUntil(context.Background(), func() bool { return done == total || failed != nil }); err != nil {
			b.Fatal(err)
		}
		if failed != nil {
			b.Fatal(failed)
		}
	}
	run(100)
	b.SetBytes(int64(size))
	m := startMeter(b, p, window)
	run(b.N)
	m.done()
}

// Null RPC, one in flight.
func BenchmarkNull(b *testing.B) {
	b.Run("impl=raw", func(b *testing.B) { benchRaw(b, 0, false, 1) })
	b.Run("impl=ferry", func(b *testing.B) { benchParallel(b, 1, ferryCall(getPeer(b), OpSink, 0, 0)) })
	b.Run("impl=ferry-busy", func(b *testing.B) { p := getPeer(b); benchParallel(b, 1, ferryCallOn(p, p.fbc, OpSink, 0, 0)) })
	b.Run("impl=grpc", func(b *testing.B) { benchParallel(b, 1, grpcCall(getPeer(b), GRPCSink, 0, 0)) })
}

// 64 B each way, 16 in flight.
func BenchmarkEcho64Inflight16(b *testing.B) {
	b.Run("impl=raw", func(b *testing.B) { benchRaw(b, 64, true, 16) })
	b.Run("impl=ferry", func(b *testing.B) { benchParallel(b, 16, ferryCall(getPeer(b), OpEcho, 64, 64)) })
	b.Run("impl=ferry-send", func(b *testing.B) { benchFerrySend(b, getPeer(b).fc, OpEcho, 64, 16) })
	b.Run("impl=ferry-busy", func(b *testing.B) { p := getPeer(b); benchParallel(b, 16, ferryCallOn(p, p.fbc, OpEcho, 64, 64)) })
	b.Run("impl=grpc", func(b *testing.B) { benchParallel(b, 16, grpcCall(getPeer(b), GRPCEcho, 64, 64)) })
}

// 1 MiB input, empty output, one in flight.
func BenchmarkInput1MiB(b *testing.B) {
	b.Run("impl=raw", func(b *testing.B) { benchRaw(b, 1<<20, false, 1) })
	b.Run("impl=ferry", func(b *testing.B) {
		b.SetBytes(1 << 20)
		benchParallel(b, 1, ferryCall(getPeer(b), OpSink, 1<<20, 0))
	})
	b.Run("impl=grpc", func(b *testing.B) {
		b.SetBytes(1 << 20)
		benchParallel(b, 1, grpcCall(getPeer(b), GRPCSink, 1<<20, 0))
	})
}

// TestHarness exercises the servers once each.
func TestHarness(t *testing.T) {
	p := getPeer(t)
	_, r0, err := p.stats()
	if err != nil {
		t.Fatal(err)
	}
	r, err := dialRaw(p.rawAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.c.Close()
	r.c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := r.send(64, true); err != nil {
		t.Fatal(err)
	}
	if err := r.recv(64); err != nil || !bytes.Equal(r.rbuf[:64], payload[:64]) {
		t.Fatalf("raw echo: %v", err)
	}
	var out []byte
	if err := ferryCall(p, OpEcho, 1<<20, 1<<20)(&out); err != nil {
		t.Fatal(err)
	}
	if err := grpcCall(p, GRPCEcho, 64, 64)(&out); err != nil || !bytes.Equal(out, payload[:64]) {
		t.Fatalf("grpc echo: %v", err)
	}
	if err := ferryCall(p, OpSink, 0, 0)(&out); err != nil {
		t.Fatal(err)
	}
	if err := ferryCallOn(p, p.fbc, OpEcho, 64, 64)(&out); err != nil || !bytes.Equal(out, payload[:64]) {
		t.Fatalf("ferry-busy echo: %v", err)
	}
	_, r1, err := p.stats()
	if err != nil {
		t.Fatal(err)
	}
	if r1-r0 != 5 {
		t.Fatalf("server served %d RPCs, want 5", r1-r0)
	}
}
