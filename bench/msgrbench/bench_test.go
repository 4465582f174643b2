package msgrbench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// Environment variables of the two-process harness.
const (
	// envRole set to "server" makes the test binary run Serve instead of
	// the tests.
	envRole = "FERRY_BENCH_ROLE"
	// envProf, in the server process, names a file prefix: the server
	// writes PREFIX.cpu (CPU profile of its whole life) and PREFIX.allocs
	// (allocation profile) when it exits.
	envProf = "FERRY_BENCH_PROF"
	// envServerCPUs is a CPU list the server process runs on (under
	// `taskset -c LIST`); run the client under taskset too to place both.
	// On this 2-vCPU VM a 1 MiB echo under cubic takes about twice as long
	// with the two processes on different vCPUs as on one, for raw TCP as
	// for ferry, and where the kernel leaves them is luck that lasts (see
	// BENCHMARKS.md, "Placement").
	envServerCPUs = "FERRY_BENCH_SERVER_CPUS"
)

func TestMain(m *testing.M) {
	if os.Getenv(envRole) == "server" {
		os.Exit(serverMain())
	}
	code := m.Run()
	stopPeer()
	os.Exit(code)
}

// serverMain is the child process: Serve on stdin/stdout, optionally
// profiled.
func serverMain() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	prefix := os.Getenv(envProf)
	if prefix != "" {
		runtime.MemProfileRate = 4096
		f, err := os.Create(prefix + ".cpu")
		if err != nil {
			log.Error("profile", "err", err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Error("profile", "err", err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
			if f, err := os.Create(prefix + ".allocs"); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	if err := Serve(os.Stdin, os.Stdout, log); err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	return 0
}

// peer is the server process and this process's ferry client.
type peer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	ctlMu sync.Mutex

	ferryAddr string
	busyAddr  string // the server's busy-polling messenger (ferry-await-busy)
	rawAddr   string

	cli      *msgr.Messenger
	conn     *msgr.Conn
	cliNC    *msgr.Messenger // ferry-fast-nocrc: both sides without data CRCs
	connNC   *msgr.Conn
	cliSec   *msgr.Messenger // ferry-fast-secure: cephx, secure mode
	connSec  *msgr.Conn
	cliBusy  *msgr.Messenger // ferry-await-busy: both sides busy-poll (msgr.Config.BusyPoll)
	connBusy *msgr.Conn
	disp     *replyDispatcher
	startErr error
}

var (
	peerOnce sync.Once
	thePeer  *peer
)

// getPeer starts the server process and the ferry client once per test
// binary run; stopPeer (from TestMain) tears them down.
func getPeer(tb testing.TB) *peer {
	tb.Helper()
	peerOnce.Do(func() {
		thePeer = &peer{}
		thePeer.startErr = thePeer.start()
	})
	if thePeer.startErr != nil {
		tb.Fatalf("starting the benchmark server: %v", thePeer.startErr)
	}
	return thePeer
}

func stopPeer() {
	if thePeer != nil {
		thePeer.stop()
	}
}

func (p *peer) start() error {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	osdKey, err := cephx.GenerateKey(crand.Reader, time.Now())
	if err != nil {
		return err
	}
	p.cmd = exec.Command(exe)
	if cpus := os.Getenv(envServerCPUs); cpus != "" {
		p.cmd = exec.Command("taskset", "-c", cpus, exe)
	}
	p.cmd.Env = append(os.Environ(), envRole+"=server", EnvOSDKey+"="+osdKey.String())
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
	for range 3 {
		line, err := p.readLine(10 * time.Second)
		if err != nil {
			return fmt.Errorf("reading server addresses: %w", err)
		}
		switch k, v, _ := strings.Cut(line, " "); k {
		case "ferry":
			p.ferryAddr = v
		case "ferry-busy":
			p.busyAddr = v
		case "raw":
			p.rawAddr = v
		default:
			return fmt.Errorf("unexpected server line %q", line)
		}
	}

	p.disp = &replyDispatcher{
		queued: make(chan *msg.Message, 256),
		fast:   make(chan *msg.Message, 256),
		sig:    make(chan struct{}, 1),
	}
	if p.cli, p.conn, err = p.dial(msgr.Config{}); err != nil {
		return err
	}
	// A second client that leaves data CRCs out (the server offers it).
	if p.cliNC, p.connNC, err = p.dial(msgr.Config{NoDataCRC: true}); err != nil {
		return err
	}
	if p.connNC.DataCRC() || !p.conn.DataCRC() {
		return errors.New("data CRCs not as configured on the benchmark connections")
	}
	// A third in secure mode: cephx with an OSD ticket from a key server
	// in this process that seals OSD tickets with the server's key.
	cl, err := osdTicket(osdKey)
	if err != nil {
		return err
	}
	if p.cliSec, p.connSec, err = p.dial(msgr.Config{Auth: msgr.AuthConfig{
		Name:      cl.Name(),
		Methods:   []uint32{auth.MethodCephx},
		Modes:     msgr.ModeConfig{Client: []uint32{auth.ConModeSecure}},
		ClientFor: func(*msgr.Conn) (auth.Client, error) { return cl.Handler(), nil },
	}}); err != nil {
		return err
	}
	if a := p.connSec.Auth(); a.Mode != auth.ConModeSecure || a.Method != auth.MethodCephx {
		return fmt.Errorf("secure connection runs method %d mode %d", a.Method, a.Mode)
	}
	// A fourth to the server's busy-polling messenger, polling too.
	if p.cliBusy, p.connBusy, err = p.dialAddr(msgr.Config{BusyPoll: BusyPoll()}, p.busyAddr); err != nil {
		return err
	}
	return nil
}

// osdTicket logs client.bench in to a key server in this process (as to
// a mon, without the network) and returns its cephx state, which holds
// an OSD ticket sealed with osdKey.
func osdTicket(osdKey cephx.Key) (*cephx.Client, error) {
	name := msg.AuthName{Type: msg.EntityClient, ID: "bench"}
	key, err := cephx.GenerateKey(crand.Reader, time.Now())
	if err != nil {
		return nil, err
	}
	ring := &cephx.Keyring{}
	ring.Add(cephx.KeyringEntry{Name: name, Key: key, Caps: map[string]string{"mon": "allow *", "osd": "allow *"}})
	ks, err := cephx.NewKeyServer(cephx.KeyServerConfig{Keyring: ring, StaticServiceKeys: map[msg.EntityType]cephx.Key{msg.EntityOSD: osdKey}})
	if err != nil {
		return nil, err
	}
	cl, err := cephx.NewClient(cephx.ClientConfig{Name: name, Key: key})
	if err != nil {
		return nil, err
	}
	h, srv := cl.Handler(), ks.Handler()
	p, err := h.Request(msg.EntityMon)
	for first := true; err == nil; first = false {
		var r auth.Reply
		if r, err = srv.Handle(auth.MethodCephx, msg.EntityClient, auth.ConModeCRC, first, p); err != nil {
			break
		}
		if r.Done {
			_, err = h.Done(r.Result.GlobalID, auth.ConModeCRC, r.Payload)
			return cl, err
		}
		p, err = h.ReplyMore(r.More)
	}
	return nil, err
}

// dial starts a lossy client messenger with cfg whose replies go to
// p.disp and returns its ready connection to the ferry server.
func (p *peer) dial(cfg msgr.Config) (*msgr.Messenger, *msgr.Conn, error) {
	return p.dialAddr(cfg, p.ferryAddr)
}

// dialAddr is dial to the server messenger at addr.
func (p *peer) dialAddr(cfg msgr.Config, addr string) (*msgr.Messenger, *msgr.Conn, error) {
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Transports = Transports()
	m, err := msgr.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	m.SetDefaultPolicy(msgr.LossyClient())
	m.AddDispatcherTail(p.disp)
	if err := m.Start(); err != nil {
		return nil, nil, err
	}
	conn, err := m.Connect(addr)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = conn.Ready(ctx)
		cancel()
	}
	if err != nil {
		m.Shutdown()
		return nil, nil, err
	}
	return m, conn, nil
}

// readLine reads one line of the server's stdout within d.
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
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-t.C:
		// The reader goroutine ends when stop kills the process.
		return "", errors.New("timed out waiting for the server")
	}
}

// srvStats is what the server reports.
type srvStats struct{ mallocs, echoes, syscr, syscw uint64 }

// stats asks the server for its counters.
func (p *peer) stats() (st srvStats, err error) {
	p.ctlMu.Lock()
	defer p.ctlMu.Unlock()
	if _, err := io.WriteString(p.stdin, "stats\n"); err != nil {
		return st, err
	}
	line, err := p.readLine(10 * time.Second)
	if err != nil {
		return st, err
	}
	if _, err := fmt.Sscanf(line, "stats %d %d %d %d", &st.mallocs, &st.echoes, &st.syscr, &st.syscw); err != nil {
		return st, fmt.Errorf("server said %q: %w", line, err)
	}
	return st, nil
}

func (p *peer) stop() {
	if p.cli != nil {
		p.cli.Shutdown()
	}
	if p.cliNC != nil {
		p.cliNC.Shutdown()
	}
	if p.cliSec != nil {
		p.cliSec.Shutdown()
	}
	if p.cliBusy != nil {
		p.cliBusy.Shutdown()
	}
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.stdin.Close() // the server exits on EOF
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintf(os.Stderr, "msgrbench: server process: %v\n", err)
		}
	case <-t.C:
		_ = p.cmd.Process.Kill() // by PID, through exec.Cmd
		<-done
	}
}

// replyDispatcher hands replies to the waiting benchmark: TypeEchoFast on
// the reader goroutine (fast dispatch), TypeEcho from the dispatch
// goroutine. The channels are larger than any window, so FastDispatch
// never blocks.
type replyDispatcher struct {
	queued, fast chan *msg.Message
	sig          chan struct{} // capacity 1: a fast reply arrived (for Conn.Await)
}

func (d *replyDispatcher) Dispatch(m *msg.Message) bool {
	switch m.Header.Type {
	case TypeEcho:
		d.queued <- m
	case TypeEchoFast:
		d.fast <- m
	default:
		return false
	}
	return true
}

func (d *replyDispatcher) CanFastDispatch(m *msg.Message) bool {
	return m.Header.Type == TypeEchoFast
}

func (d *replyDispatcher) FastDispatch(m *msg.Message) {
	d.fast <- m
	select {
	case d.sig <- struct{}{}:
	default:
	}
}

// counters measures, around the timed loop, the server's allocations and
// both processes' read and write system calls per round trip.
type counters struct {
	p        *peer
	srv      srvStats
	cr, cw   uint64
	haveProc bool
}

func (p *peer) startCounters(b *testing.B) counters {
	st, err := p.stats()
	if err != nil {
		b.Fatal(err)
	}
	c := counters{p: p, srv: st}
	var perr error
	c.cr, c.cw, perr = ProcIO()
	c.haveProc = perr == nil
	return c
}

func (c counters) report(b *testing.B) {
	cr, cw, _ := ProcIO()
	st, err := c.p.stats()
	if err != nil {
		b.Fatal(err)
	}
	n := float64(st.echoes - c.srv.echoes)
	if n <= 0 {
		return
	}
	b.ReportMetric(float64(st.mallocs-c.srv.mallocs)/n, "srv-allocs/op")
	if c.haveProc {
		// The stats exchange itself is one read and one write each side.
		b.ReportMetric(float64(cw-c.cw-1)/n, "cli-writes/op")
		b.ReportMetric(float64(cr-c.cr)/n, "cli-reads/op")
		b.ReportMetric(float64(st.syscw-c.srv.syscw-1)/n, "srv-writes/op")
		b.ReportMetric(float64(st.syscr-c.srv.syscr-1)/n, "srv-reads/op")
	}
}

// ---- the benchmark bodies ----

type size struct {
	name string
	n    int
}

var (
	size64  = size{"64", 64}
	size2K  = size{"2KiB", 2 << 10}
	size1M  = size{"1MiB", 1 << 20}
	payload = func() []byte {
		p := make([]byte, 1<<20)
		for i := range p {
			p[i] = byte(i*131 + 7)
		}
		return p
	}()
)

// Every benchmark op is one request/response round trip (one message each
// way). SetBytes is the payload size one way, so MB/s is the payload
// throughput in each direction. "msgs/s" counts completed round trips per
// second; p50-µs and p99-µs are per round trip (window 1 only).

func BenchmarkRoundTrip(b *testing.B) {
	for _, sz := range []size{size64, size2K, size1M} {
		b.Run("size="+sz.name, func(b *testing.B) {
			b.Run("impl=raw", func(b *testing.B) { benchRaw(b, sz.n, 1) })
			b.Run("impl=ferry", func(b *testing.B) { benchFerry(b, sz.n, 1, false) })
			b.Run("impl=ferry-fast", func(b *testing.B) { benchFerry(b, sz.n, 1, true) })
			b.Run("impl=ferry-await", func(b *testing.B) { benchFerryAwait(b, getPeer(b).conn, sz.n, 1, true, true) })
			b.Run("impl=ferry-fast-nocrc", func(b *testing.B) { benchFerryOn(b, getPeer(b).connNC, sz.n, 1, true) })
			b.Run("impl=ferry-fast-secure", func(b *testing.B) { benchFerryOn(b, getPeer(b).connSec, sz.n, 1, true) })
			b.Run("impl=ferry-await-secure", func(b *testing.B) { benchFerryAwait(b, getPeer(b).connSec, sz.n, 1, true, true) })
			b.Run("impl=ferry-await-busy", func(b *testing.B) { benchFerryAwait(b, getPeer(b).connBusy, sz.n, 1, true, true) })
		})
	}
}

// BenchmarkAESGCM is the cipher's own speed on this CPU: one AES-128-GCM
// seal of a 64-byte and of a 1 MiB buffer, in place, as secure mode does
// per segment group (crypto/aes with the CPU's AES and CLMUL
// instructions where present).
func BenchmarkAESGCM(b *testing.B) {
	blk, err := aes.NewCipher(make([]byte, 16))
	if err != nil {
		b.Fatal(err)
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		b.Fatal(err)
	}
	nonce := make([]byte, aead.NonceSize())
	for _, sz := range []size{size64, size1M} {
		b.Run("size="+sz.name, func(b *testing.B) {
			buf := make([]byte, sz.n, sz.n+aead.Overhead())
			copy(buf, payload)
			b.SetBytes(int64(sz.n))
			b.ReportAllocs()
			for b.Loop() {
				nonce[4]++
				out := aead.Seal(buf[:0], nonce, buf[:sz.n], nil)
				buf = out[:sz.n]
			}
		})
	}
}

func BenchmarkInflight16(b *testing.B) {
	b.Run("size="+size64.name, func(b *testing.B) {
		b.Run("impl=raw1", func(b *testing.B) { benchRaw(b, size64.n, 1) })
		b.Run("impl=raw16", func(b *testing.B) { benchRaw(b, size64.n, 16) })
		b.Run("impl=ferry", func(b *testing.B) { benchFerry(b, size64.n, 16, false) })
		b.Run("impl=ferry-fast", func(b *testing.B) { benchFerry(b, size64.n, 16, true) })
		b.Run("impl=ferry-await", func(b *testing.B) { benchFerryAwait(b, getPeer(b).conn, size64.n, 16, true, true) })
	})
}

// rawClient speaks the floor protocol on one connection: a request is a
// 4-byte little-endian length and the payload, written with one write
// (net.Buffers/writev above 16 KiB); the reply is read the same way
// through a buffered reader.
type rawClient struct {
	c    net.Conn
	br   *bufio.Reader
	size int
	wbuf []byte // small: hdr + payload
	hdr  [4]byte
	rhdr [4]byte
	iov  [2][]byte
	bufs net.Buffers
	rbuf []byte
}

func dialRaw(addr string, size int) (*rawClient, error) {
	d := net.Dialer{Control: ccControl}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &rawClient{c: c, br: bufio.NewReaderSize(c, 64<<10), size: size, rbuf: make([]byte, size)}
	binary.LittleEndian.PutUint32(r.hdr[:], uint32(size))
	if size <= rawCopyMax {
		r.wbuf = append(append([]byte(nil), r.hdr[:]...), payload[:size]...)
	}
	return r, nil
}

func (r *rawClient) send() error {
	if r.wbuf != nil {
		_, err := r.c.Write(r.wbuf)
		return err
	}
	r.iov = [2][]byte{r.hdr[:], payload[:r.size]}
	r.bufs = r.iov[:]
	_, err := r.bufs.WriteTo(r.c)
	return err
}

func (r *rawClient) recv() error {
	if _, err := io.ReadFull(r.br, r.rhdr[:]); err != nil {
		return err
	}
	if n := binary.LittleEndian.Uint32(r.rhdr[:]); int(n) != r.size {
		return fmt.Errorf("reply of %d bytes, want %d", n, r.size)
	}
	_, err := io.ReadFull(r.br, r.rbuf)
	return err
}

// latencies collects per-round-trip durations without allocating in the
// timed loop.
type latencies struct{ d []time.Duration }

func newLatencies(window, n int) *latencies {
	if window != 1 {
		return nil
	}
	return &latencies{d: make([]time.Duration, 0, n)}
}

func (l *latencies) add(d time.Duration) {
	if l != nil && len(l.d) < cap(l.d) {
		l.d = append(l.d, d)
	}
}

func (l *latencies) report(b *testing.B) {
	if l == nil || len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	q := func(f float64) float64 { return float64(l.d[int(f*float64(len(l.d)-1))]) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

func reportRate(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "msgs/s")
	}
}

// benchRaw runs b.N round trips on one raw connection with up to window
// requests outstanding (each request its own write).
func benchRaw(b *testing.B, size, window int) {
	p := getPeer(b)
	r, err := dialRaw(p.rawAddr, size)
	if err != nil {
		b.Fatal(err)
	}
	defer r.c.Close()
	for range 10 { // warm up: connection, buffers
		if err := r.send(); err != nil {
			b.Fatal(err)
		}
		if err := r.recv(); err != nil {
			b.Fatal(err)
		}
	}
	lat := newLatencies(window, b.N)
	cnt := p.startCounters(b)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sent, done := 0, 0
	var t0 time.Time
	for ; sent < window && sent < b.N; sent++ {
		t0 = time.Now()
		if err := r.send(); err != nil {
			b.Fatal(err)
		}
	}
	for done < b.N {
		if err := r.recv(); err != nil {
			b.Fatal(err)
		}
		done++
		if lat != nil {
			lat.add(time.Since(t0))
		}
		if sent < b.N {
			t0 = time.Now()
			if err := r.send(); err != nil {
				b.Fatal(err)
			}
			sent++
		}
	}
	b.StopTimer()
	reportRate(b)
	lat.report(b)
	cnt.report(b)
}

// benchFerry runs b.N round trips on the shared ferry connection with up to
// window requests outstanding. Requests come from a ring of window
// messages, each reused once its reply is in (the lossy session has written
// it by then), so the benchmark's own code allocates nothing per message:
// what allocs/op shows is the messenger's (and the received replies').
func benchFerry(b *testing.B, size, window int, fast bool) {
	benchFerryOn(b, getPeer(b).conn, size, window, fast)
}

// benchFerryOn is benchFerry on conn.
func benchFerryOn(b *testing.B, conn *msgr.Conn, size, window int, fast bool) {
	benchFerryAwait(b, conn, size, window, fast, false)
}

// benchFerryAwait is benchFerryOn; with await the benchmark goroutine
// waits for its replies in Conn.Await, reading the socket itself.
func benchFerryAwait(b *testing.B, conn *msgr.Conn, size, window int, fast, await bool) {
	p := getPeer(b)
	typ, replies := TypeEcho, p.disp.queued
	if fast {
		typ, replies = TypeEchoFast, p.disp.fast
	}
	ring := make([]*msg.Message, window)
	for i := range ring {
		m := msg.New(typ)
		m.SetSegments(nil, nil, payload[:size])
		ring[i] = m
	}
	var tid uint64
	send := func() {
		m := ring[tid%uint64(window)]
		m.Header.Tid = tid
		tid++
		if err := conn.Send(m); err != nil {
			b.Fatal(err)
		}
	}
	var want uint64
	ctx := context.Background()
	recv := func() {
		if await {
			for len(replies) == 0 {
				if _, err := conn.Await(ctx, p.disp.sig); err != nil {
					b.Fatal(err)
				}
				if conn.State() == "closed" {
					b.Fatalf("connection closed: %v", conn.Err())
				}
			}
		}
		select {
		case r := <-replies:
			if r.Header.Tid != want || r.Data.Len() != size {
				b.Fatalf("reply tid %d with %d bytes, want tid %d with %d", r.Header.Tid, r.Data.Len(), want, size)
			}
			want++
			r.Done() // lets a pooling messenger recycle the reply
		case <-conn.Done():
			b.Fatalf("connection closed: %v", conn.Err())
		}
	}
	for range 10 { // warm up
		send()
		recv()
	}
	lat := newLatencies(window, b.N)
	cnt := p.startCounters(b)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sent, done := 0, 0
	var t0 time.Time
	for ; sent < window && sent < b.N; sent++ {
		t0 = time.Now()
		send()
	}
	for done < b.N {
		recv()
		done++
		if lat != nil {
			lat.add(time.Since(t0))
		}
		if sent < b.N {
			t0 = time.Now()
			send()
			sent++
		}
	}
	b.StopTimer()
	reportRate(b)
	lat.report(b)
	cnt.report(b)
}

// TestHarness runs the server process and does one raw and one ferry round
// trip of each kind, checking the bytes, so the benchmark harness itself
// is exercised by go test.
func TestHarness(t *testing.T) {
	p := getPeer(t)
	s0, err := p.stats()
	if err != nil {
		t.Fatal(err)
	}

	for _, n := range []int{64, 1 << 20} {
		r, err := dialRaw(p.rawAddr, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := r.send(); err != nil {
			t.Fatal(err)
		}
		if err := r.recv(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.rbuf, payload[:n]) {
			t.Fatalf("raw echo of %d bytes differs", n)
		}
		_ = r.c.Close()
	}

	for _, fast := range []bool{false, true} {
		typ, replies := TypeEcho, p.disp.queued
		if fast {
			typ, replies = TypeEchoFast, p.disp.fast
		}
		for i, n := range []int{64, 1 << 20} {
			m := msg.New(typ)
			m.Header.Tid = uint64(1000 + i)
			front := []byte("front")
			m.SetSegments(front, nil, payload[:n])
			if err := p.conn.Send(m); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-replies:
				if r.Header.Tid != m.Header.Tid || r.Header.Type != typ {
					t.Fatalf("fast=%v: reply tid %d type %#x, want %d %#x", fast, r.Header.Tid, r.Header.Type, m.Header.Tid, typ)
				}
				if !bytes.Equal(r.Front.Bytes(), front) || !bytes.Equal(r.Data.Bytes(), payload[:n]) {
					t.Fatalf("fast=%v: echo of %d bytes differs", fast, n)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("fast=%v: no reply", fast)
			}
		}
	}

	// The secure-mode connection (cephx, AES-GCM).
	for i, n := range []int{64, 1 << 20} {
		m := msg.New(TypeEchoFast)
		m.Header.Tid = uint64(2000 + i)
		m.SetSegments([]byte("front"), nil, payload[:n])
		if err := p.connSec.Send(m); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-p.disp.fast:
			if r.Header.Tid != m.Header.Tid || !bytes.Equal(r.Data.Bytes(), payload[:n]) {
				t.Fatalf("secure: echo tid %d of %d bytes differs", r.Header.Tid, n)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("secure: no reply")
		}
	}

	s1, err := p.stats()
	if err != nil {
		t.Fatal(err)
	}
	if got := s1.echoes - s0.echoes; got != 8 {
		t.Fatalf("server echoed %d requests, want 8", got)
	}
	if s1.mallocs <= s0.mallocs {
		t.Fatalf("server mallocs did not grow: %d -> %d", s0.mallocs, s1.mallocs)
	}
}
