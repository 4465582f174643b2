package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ferrymsg/ferry/bench/plot"
	"github.com/ferrymsg/ferry/transport"
)

// ferry bench: the messenger's round trip against each transport's raw
// floor, in two processes per transport (this one as the client; `ferry
// serve` and `ferry bench-echo` as the servers), alternating the two
// contenders run by run, and a table and plots of the results.

// Bounds of `ferry bench`.
const (
	maxBenchFrame  = 64 << 20 // bench-echo refuses larger frames
	benchMinOps    = 20       // each timed run does at least this many round trips
	benchMaxOps    = 5_000_000
	benchWarmupOps = 50
)

// benchRun is one measured run: one contender on one transport at one
// message size and depth.
type benchRun struct {
	Transport string  `json:"transport"`
	Impl      string  `json:"impl"` // "raw" (the transport's floor) or "ferry"
	Size      int     `json:"size"`
	Inflight  int     `json:"inflight"`
	Ops       int     `json:"ops"`
	Errors    int     `json:"errors"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_s"`
	MBPerSec  float64 `json:"mb_per_s"` // payload bytes both ways, 10^6 B
	P50us     float64 `json:"rtt_us_p50"`
	P99us     float64 `json:"rtt_us_p99"`
	rtts      []time.Duration
}

func runBench(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "bench")
	transports := fs.String("transports", defaultBenchTransports, "comma-separated `LIST` of transports to compare: tcp, unix, shm")
	sizes := fs.String("sizes", "64,4096,65536,1M", "comma-separated message sizes in `BYTES` (K and M suffixes), echoed both ways")
	inflights := fs.String("inflight", "1,16", "comma-separated `DEPTHS`: round trips outstanding at once on the connection")
	duration := fs.Duration("duration", 2*time.Second, "time per run (each contender, transport, size and depth)")
	out := fs.String("out", "", "write results.md, results.json and SVG plots into `DIR`")
	asJSON := fs.Bool("json", false, "print the results as one JSON object on stdout instead of a table")
	congestion := addTCPCongestionFlag(fs)
	verbose := fs.Bool("verbose", false, "log debug messages")
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(e, fs, "unexpected arguments %q", pos)
	}
	tl := splitList(*transports)
	for _, t := range tl {
		if !slices.Contains([]string{"tcp", "unix", "shm"}, t) {
			return usageError(e, fs, "--transports: unknown transport %q (want tcp, unix or shm)", t)
		}
		if _, ok := cliTransports("").Lookup(t); !ok {
			return usageError(e, fs, "--transports: %s is not available on %s", t, runtime.GOOS)
		}
	}
	sl, err := parseInts(*sizes, true)
	if err != nil || len(sl) == 0 {
		return usageError(e, fs, "--sizes: %v", errOr(err, "no size"))
	}
	for _, s := range sl {
		if s < 0 || s > maxBenchFrame {
			return usageError(e, fs, "--sizes: %d is outside 0..%d", s, maxBenchFrame)
		}
	}
	dl, err := parseInts(*inflights, false)
	if err != nil || len(dl) == 0 {
		return usageError(e, fs, "--inflight: %v", errOr(err, "no depth"))
	}
	for _, d := range dl {
		if d < 1 || d > 1024 {
			return usageError(e, fs, "--inflight: %d is outside 1..1024", d)
		}
	}
	switch {
	case len(tl) == 0:
		return usageError(e, fs, "--transports lists no transport")
	case *duration <= 0:
		return usageError(e, fs, "--duration must be positive")
	}
	if err := checkTCPCongestion(*congestion); err != nil {
		return usageError(e, fs, "%v", err)
	}
	lvl := slog.LevelWarn
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))

	b := &bencher{e: e, log: log, cc: *congestion, duration: *duration}
	total := len(tl) * len(sl) * len(dl) * 2
	var runs []*benchRun
	for _, t := range tl {
		rs, err := b.transport(ctx, t, sl, dl, len(runs), total)
		runs = append(runs, rs...)
		if err != nil {
			fmt.Fprintf(e.stderr, "ferry bench: %s: %v\n", t, err)
			return exitError
		}
	}
	failed := 0
	for _, r := range runs {
		failed += r.Errors
	}
	if *asJSON {
		writeJSON(e, map[string]any{"duration_s": duration.Seconds(), "gomaxprocs": runtime.GOMAXPROCS(0), "tcp_congestion": ccName(*congestion), "runs": runs})
	} else {
		writeBenchTable(e.stdout, runs)
	}
	if *out != "" {
		if err := writeBenchOut(*out, runs, *congestion); err != nil {
			fmt.Fprintf(e.stderr, "ferry bench: --out: %v\n", err)
			return exitError
		}
		fmt.Fprintf(e.stderr, "ferry bench: wrote results and plots to %s\n", *out)
	}
	if failed > 0 {
		fmt.Fprintf(e.stderr, "ferry bench: %d round trips failed\n", failed)
		return exitError
	}
	return exitOK
}

func errOr(err error, s string) error {
	if err != nil {
		return err
	}
	return errors.New(s)
}

// ccName is the congestion control the runs used, as reported.
func ccName(flag string) string {
	if flag != "" {
		return flag
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return "system default"
	}
	return strings.TrimSpace(string(b))
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseInts parses a comma-separated list of integers, with K and M
// (binary) suffixes when sizes is set.
func parseInts(s string, sizes bool) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		if sizes {
			n, err := parseBytes(f)
			if err != nil {
				return nil, err
			}
			out = append(out, int(n))
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseBytes reads a byte count: an integer with an optional binary
// suffix K, M or G, alone or as KiB, MiB, GiB, in either case ("64K",
// "128MiB", "1g" are 65536, 134217728 and 1073741824).
func parseBytes(f string) (int64, error) {
	num, mul := f, int64(1)
	lower := strings.ToLower(f)
	for _, u := range []struct {
		suffix string
		mul    int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}} {
		if strings.HasSuffix(lower, u.suffix) {
			num, mul = f[:len(f)-len(u.suffix)], u.mul
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mul || n < math.MinInt64/mul {
		return 0, fmt.Errorf("%q is not a byte count (such as 4096, 64K, 128MiB or 1G)", f)
	}
	return n * mul, nil
}

// bencher runs the comparison.
type bencher struct {
	e        *env
	log      *slog.Logger
	cc       string
	duration time.Duration
}

// listenAddr is where the servers of transport t listen.
func listenAddr(t, role string) string {
	switch t {
	case "unix":
		return "unix://" + filepath.Join(os.TempDir(), fmt.Sprintf("ferry-bench-%d-%s.sock", os.Getpid(), role))
	case "shm":
		return fmt.Sprintf("shm://ferry-bench-%d-%s", os.Getpid(), role)
	}
	return "tcp://127.0.0.1:0"
}

// transport measures every size and depth on transport t: it starts the
// two servers, then alternates the raw floor and ferry run by run.
func (b *bencher) transport(ctx context.Context, t string, sizes, depths []int, done, total int) ([]*benchRun, error) {
	extra := []string{}
	if b.cc != "" {
		extra = append(extra, "--tcp-congestion", b.cc)
	}
	echo, err := startChild(ctx, append([]string{"bench-echo", "--listen", listenAddr(t, "raw")}, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("starting the raw echo server: %w", err)
	}
	defer echo.stop()
	srv, err := startChild(ctx, append([]string{"serve", "--listen", listenAddr(t, "ferry")}, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("starting ferry serve: %w", err)
	}
	defer srv.stop()

	reg := cliTransports(b.cc)
	raw, err := reg.Dial(ctx, echo.addr)
	if err != nil {
		return nil, fmt.Errorf("dialling the raw echo server: %w", err)
	}
	defer raw.Close()
	mo := defaultMsgrOptions("lossy-client")
	mo.TCPCongestion = b.cc
	pc, err := dialPingWith(ctx, srv.addr, b.log, mo)
	if err != nil {
		return nil, fmt.Errorf("connecting to ferry serve: %w", err)
	}
	defer pc.Close()

	var runs []*benchRun
	for _, size := range sizes {
		for _, depth := range depths {
			for _, impl := range []string{"raw", "ferry"} {
				measure := func(n int) (*benchRun, error) {
					if impl == "raw" {
						return rawRoundTrips(raw, size, depth, n)
					}
					res := pc.run(ctx, pingOptions{Count: n, Size: size, Inflight: depth})
					r := &benchRun{Ops: res.OK, Errors: res.Errors(), rtts: res.RTTs, Seconds: res.Elapsed.Seconds()}
					if res.Err != nil {
						return r, res.Err
					}
					return r, res.firstError()
				}
				// A short run sets the count that fills the duration.
				w, err := measure(benchWarmupOps)
				if err != nil {
					return runs, fmt.Errorf("%s, %d B, %d in flight: %w", impl, size, depth, err)
				}
				n := benchMinOps
				if w.Seconds > 0 {
					n = int(float64(benchWarmupOps) * b.duration.Seconds() / w.Seconds)
				}
				n = min(max(n, benchMinOps), benchMaxOps)
				r, err := measure(n)
				if r != nil {
					r.Transport, r.Impl, r.Size, r.Inflight = t, impl, size, depth
					r.finish()
					runs = append(runs, r)
				}
				if err != nil {
					return runs, fmt.Errorf("%s, %d B, %d in flight: %w", impl, size, depth, err)
				}
				done++
				fmt.Fprintf(b.e.stderr, "[%d/%d] %-4s %8d B ×%-4d %-5s %10.0f round trips/s  p50 %8.1f µs  p99 %8.1f µs\n",
					done, total, t, size, depth, impl, r.OpsPerSec, r.P50us, r.P99us)
			}
		}
	}
	return runs, nil
}

// finish computes the rates and percentiles.
func (r *benchRun) finish() {
	if r.Seconds > 0 {
		r.OpsPerSec = float64(r.Ops) / r.Seconds
		r.MBPerSec = r.OpsPerSec * 2 * float64(r.Size) / 1e6
	}
	s := slices.Clone(r.rtts)
	slices.Sort(s)
	if len(s) > 0 {
		r.P50us = micros(percentile(s, 50))
		r.P99us = micros(percentile(s, 99))
	}
}

// rawRoundTrips is the floor: n frames of size bytes (a 4-byte length,
// then the payload) written on c and echoed back, depth of them
// outstanding at once. At depth 1 one goroutine writes, then reads, as
// the benchmarks' raw contenders do.
func rawRoundTrips(c transport.Conn, size, depth, n int) (*benchRun, error) {
	frame := make([]byte, 4+size)
	binary.LittleEndian.PutUint32(frame, uint32(size))
	for i := range size {
		frame[4+i] = byte(i)
	}
	in := make([]byte, 4+size)
	r := &benchRun{rtts: make([]time.Duration, 0, n)}
	readOne := func() error {
		if _, err := io.ReadFull(c, in); err != nil {
			return err
		}
		if binary.LittleEndian.Uint32(in) != uint32(size) {
			return fmt.Errorf("raw echo: a reply of %d bytes, want %d", binary.LittleEndian.Uint32(in), size)
		}
		return nil
	}
	start := time.Now()
	if depth == 1 {
		for range n {
			t0 := time.Now()
			if _, err := c.Write(frame); err != nil {
				return r, err
			}
			if err := readOne(); err != nil {
				return r, err
			}
			r.rtts = append(r.rtts, time.Since(t0))
			r.Ops++
		}
		r.Seconds = time.Since(start).Seconds()
		return r, nil
	}
	sent := make(chan time.Time, depth) // the window: a send waits for a free slot
	werr := make(chan error, 1)
	go func() {
		for range n {
			sent <- time.Now()
			if _, err := c.Write(frame); err != nil {
				werr <- err
				close(sent)
				return
			}
		}
		werr <- nil
		close(sent)
	}()
	for t0 := range sent {
		if err := readOne(); err != nil {
			// Unblock the writer by draining, then report.
			go func() {
				for range sent {
				}
			}()
			return r, err
		}
		r.rtts = append(r.rtts, time.Since(t0))
		r.Ops++
	}
	r.Seconds = time.Since(start).Seconds()
	return r, <-werr
}

// child is a server process started from this binary.
type child struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// startChild starts this executable with args and waits for its
// "listening ADDR" line.
func startChild(ctx context.Context, args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	var errb strings.Builder
	cmd.Stderr = &limitedWriter{w: &errb, n: 16 << 10}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(c.done)
	}()
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
		if !ok {
			c.stop()
			return nil, fmt.Errorf("%s printed %q, want \"listening ADDR\"; its stderr:\n%s", args[0], line, errb.String())
		}
		c.addr = addr
		return c, nil
	case <-ctx.Done():
		c.stop()
		return nil, ctx.Err()
	case <-time.After(20 * time.Second):
		c.stop()
		return nil, fmt.Errorf("%s printed no address within 20s", args[0])
	}
}

// limitedWriter keeps the first n bytes written to it and drops the
// rest (a child's log, shown when it fails to start).
type limitedWriter struct {
	mu sync.Mutex
	w  io.Writer
	n  int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := min(len(p), l.n); k > 0 {
		l.n -= k
		_, _ = l.w.Write(p[:k])
	}
	return len(p), nil
}

// stop ends the child by its PID: SIGTERM, then SIGKILL after 5 s.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// runBenchEcho is the hidden `ferry bench-echo`: the raw floor's server.
// It echoes length-prefixed frames on every connection until SIGTERM.
func runBenchEcho(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "bench-echo")
	listen := fs.String("listen", "tcp://127.0.0.1:0", "transport `ADDR` to listen on")
	congestion := addTCPCongestionFlag(fs)
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(e, fs, "unexpected arguments %q", pos)
	}
	l, err := cliTransports(*congestion).Listen(ctx, *listen)
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry bench-echo: %v\n", err)
		return exitError
	}
	fmt.Fprintf(e.stdout, "listening %s\n", l.Addr())
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[transport.Conn]struct{}{}
	go func() {
		<-ctx.Done()
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			break
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			echoFrames(c)
		}()
	}
	wg.Wait()
	return exitOK
}

// echoFrames writes back every length-prefixed frame read from c, until
// c fails or a frame exceeds maxBenchFrame.
func echoFrames(c transport.Conn) {
	br := bufio.NewReaderSize(c, 64<<10)
	buf := make([]byte, 4+64<<10)
	for {
		if _, err := io.ReadFull(br, buf[:4]); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(buf))
		if n > maxBenchFrame {
			return
		}
		if 4+n > len(buf) {
			buf = append(buf[:4], make([]byte, n)...)
		}
		if _, err := io.ReadFull(br, buf[4:4+n]); err != nil {
			return
		}
		if _, err := c.Write(buf[:4+n]); err != nil {
			return
		}
	}
}

// writeBenchTable prints one row per transport, size and depth: the floor
// and ferry side by side.
func writeBenchTable(w io.Writer, runs []*benchRun) {
	fmt.Fprintf(w, "| transport | size | in flight | raw round trips/s | raw p50 µs | raw p99 µs | ferry round trips/s | ferry p50 µs | ferry p99 µs | ferry/raw rate | ferry MB/s |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range pairs(runs) {
		raw, fe := p[0], p[1]
		ratio := 0.0
		if raw.OpsPerSec > 0 {
			ratio = fe.OpsPerSec / raw.OpsPerSec
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %.1f | %.1f | %.0f | %.1f | %.1f | %.2f | %.1f |\n",
			raw.Transport, sizeText(raw.Size), raw.Inflight, raw.OpsPerSec, raw.P50us, raw.P99us,
			fe.OpsPerSec, fe.P50us, fe.P99us, ratio, fe.MBPerSec)
	}
}

// pairs returns the (raw, ferry) runs of each transport, size and depth.
func pairs(runs []*benchRun) [][2]*benchRun {
	var out [][2]*benchRun
	for i, r := range runs {
		if r.Impl != "raw" {
			continue
		}
		for _, f := range runs[i+1:] {
			if f.Impl == "ferry" && f.Transport == r.Transport && f.Size == r.Size && f.Inflight == r.Inflight {
				out = append(out, [2]*benchRun{r, f})
				break
			}
		}
	}
	return out
}

func sizeText(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// writeBenchOut writes results.md, results.json and the plots into dir.
func writeBenchOut(dir string, runs []*benchRun, cc string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# ferry bench\n\nTwo processes per contender on one host, GOMAXPROCS %d, TCP congestion control %s.\n\n", runtime.GOMAXPROCS(0), ccName(cc))
	writeBenchTable(&md, runs)
	md.WriteString("\n![throughput against message size](throughput-size.svg)\n\n![throughput against depth](throughput-depth.svg)\n")
	for _, t := range transportsOf(runs) {
		fmt.Fprintf(&md, "\n![latency distribution, %s](latency-%s.svg)\n", t, t)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(runs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	for name, c := range benchCharts(runs) {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = c.WriteSVG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil && !errors.Is(err, plot.ErrNoData) {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func transportsOf(runs []*benchRun) []string {
	var ts []string
	for _, r := range runs {
		if !slices.Contains(ts, r.Transport) {
			ts = append(ts, r.Transport)
		}
	}
	return ts
}

// benchCharts builds the plots: MB/s against size at the smallest depth,
// round trips/s against depth at the smallest size, and each transport's
// latency distribution at the smallest size and depth.
func benchCharts(runs []*benchRun) map[string]*plot.Chart {
	if len(runs) == 0 {
		return nil
	}
	minSize, minDepth := runs[0].Size, runs[0].Inflight
	for _, r := range runs {
		minSize, minDepth = min(minSize, r.Size), min(minDepth, r.Inflight)
	}
	bySize := &plot.Chart{Title: fmt.Sprintf("Throughput against message size (%d in flight)", minDepth),
		XLabel: "message size (bytes, echoed)", YLabel: "MB/s (both ways)", LogX: true, LogY: true}
	byDepth := &plot.Chart{Title: fmt.Sprintf("Round trips against depth (%s)", sizeText(minSize)),
		XLabel: "round trips in flight", YLabel: "round trips/s", LogX: true}
	charts := map[string]*plot.Chart{"throughput-size.svg": bySize, "throughput-depth.svg": byDepth}
	for ti, t := range transportsOf(runs) {
		col := plot.Palette[ti%len(plot.Palette)]
		lat := &plot.Chart{Title: fmt.Sprintf("Round-trip latency, %s, %s, %d in flight", t, sizeText(minSize), minDepth),
			XLabel: "round trip (µs)", YLabel: "fraction of round trips", LogX: true}
		for _, impl := range []string{"raw", "ferry"} {
			name := impl + " " + t
			var ss, ds plot.Series
			ss.Name, ds.Name = name, name
			ss.Dashed, ds.Dashed = impl == "raw", impl == "raw"
			ss.Color, ds.Color = col, col
			for _, r := range runs {
				if r.Transport != t || r.Impl != impl {
					continue
				}
				if r.Inflight == minDepth {
					ss.X, ss.Y = append(ss.X, float64(r.Size)), append(ss.Y, r.MBPerSec)
				}
				if r.Size == minSize {
					ds.X, ds.Y = append(ds.X, float64(r.Inflight)), append(ds.Y, r.OpsPerSec)
				}
				if r.Size == minSize && r.Inflight == minDepth {
					us := make([]float64, len(r.rtts))
					for i, d := range r.rtts {
						us[i] = micros(d)
					}
					s := plot.CDF(name, us)
					s.Dashed, s.Color = ss.Dashed, col
					lat.Series = append(lat.Series, s)
				}
			}
			bySize.Series = append(bySize.Series, ss)
			byDepth.Series = append(byDepth.Series, ds)
		}
		charts["latency-"+t+".svg"] = lat
	}
	return charts
}
