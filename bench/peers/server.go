// Package peers compares ferry's RPC layer (package rpc) with the raw-TCP
// floor and with gRPC-Go unary calls, client and server in two processes
// on loopback. It is a separate module so that gRPC stays out of ferry's
// own dependencies.
//
// The benchmarks are in bench_test.go: the test binary re-executes itself
// with FERRY_PEERS_ROLE=server to run Serve, which hosts the three servers
// side by side; see BENCHMARKS.md at the repository root for the command
// and the results.
package peers

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
)

// The ferry protocol served: base 3, version 0.
var (
	OpSink = rpc.MakeOpcode(3, 0, 0) // any input, empty output
	OpEcho = rpc.MakeOpcode(3, 0, 1) // raw bytes in, the same bytes out
)

// Protocol is the benchmark protocol; both handlers run inline on the
// connection's reader goroutine (rpc.Inline).
func Protocol(n *atomic.Uint64) rpc.Protocol {
	return rpc.Protocol{Name: "peers", Base: 3, Version: 0, RPCs: []rpc.RPC{
		{Name: "sink", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
			n.Add(1)
			return r.Reply(nil)
		}},
		{Name: "echo", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
			n.Add(1)
			var b rpc.Bytes
			if err := r.Decode(&b); err != nil {
				return err
			}
			return r.Reply(&b)
		}},
	}}
}

// gRPC method names: a hand-written service (no protoc) whose messages
// are raw bytes (RawCodec).
const (
	GRPCSink = "/ferry.peers.Bench/Sink"
	GRPCEcho = "/ferry.peers.Bench/Echo"
)

// RawCodec is a gRPC codec for *[]byte messages: the bytes are the wire
// format (as gRPC's benchmarks' byteBufCodec).
type RawCodec struct{}

// Marshal returns the bytes.
func (RawCodec) Marshal(v any) ([]byte, error) {
	p, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("peers: RawCodec cannot marshal %T", v)
	}
	return *p, nil
}

// Unmarshal copies data (gRPC may reuse it).
func (RawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("peers: RawCodec cannot unmarshal into %T", v)
	}
	*p = append((*p)[:0], data...)
	return nil
}

// Name is the codec's content-subtype.
func (RawCodec) Name() string { return "ferry-raw" }

type benchService interface{}

func grpcHandler(echo bool, n *atomic.Uint64) grpc.MethodHandler {
	return func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		var in []byte
		if err := dec(&in); err != nil {
			return nil, err
		}
		n.Add(1)
		if echo {
			return &in, nil
		}
		var empty []byte
		return &empty, nil
	}
}

func grpcServiceDesc(n *atomic.Uint64) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "ferry.peers.Bench",
		HandlerType: (*benchService)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Sink", Handler: grpcHandler(false, n)},
			{MethodName: "Echo", Handler: grpcHandler(true, n)},
		},
	}
}

// MaxRawPayload bounds a raw request or reply.
const MaxRawPayload = 64 << 20

// rawEchoBit in a raw request's length asks for the payload back; without
// it the reply is empty.
const rawEchoBit = 1 << 31

// Serve runs the server role: a ferry rpc instance (rank 0, one context
// with Auto progress), a raw TCP server and a gRPC server on 127.0.0.1
// (ephemeral ports); the ferry instance also listens on a Unix socket. It
// writes their addresses to out:
//
//	ferry tcp://127.0.0.1:PORT,unix:///tmp/ferry-peers-N/ferry.sock
//	raw 127.0.0.1:PORT
//	grpc 127.0.0.1:PORT
//	ferry-secure tcp://127.0.0.1:PORT
//
// (the last only when EnvOSDKey is set: a second ferry instance, rank 0
// too, that accepts cephx in secure mode only; secure_server.go)
// then answers commands from in, one per line: "stats" gets
// "stats MALLOCS RPCS CPU-µs" (runtime.MemStats.Mallocs and the RPCs served by
// all three). It returns when in reaches EOF.
func Serve(in io.Reader, out io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var served atomic.Uint64

	// Same-host contenders (the bulk benchmarks' *-unix) reach the same
	// instance and the gRPC bulk server through Unix sockets here.
	dir, err := os.MkdirTemp("", "ferry-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fi, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0,unix://" + filepath.Join(dir, "ferry.sock"), Logger: log, Bulk: BulkOptionsFromEnv(), Transports: Transports(),
		// Offered, in force only with clients that set it too
		// (ferry-nocrc); the other ferry contenders keep data CRCs.
		NoDataCRC: true})
	if err != nil {
		return err
	}
	defer fi.Close()
	if err := fi.Register(Protocol(&served)); err != nil {
		return err
	}
	if _, err := fi.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
		return err
	}
	// A second instance whose sockets busy-poll (ferry-busy).
	fb, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Logger: log, Transports: Transports(), BusyPoll: BusyPoll()})
	if err != nil {
		return err
	}
	defer fb.Close()
	if err := fb.Register(Protocol(&served)); err != nil {
		return err
	}
	if _, err := fb.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
		return err
	}
	bs, err := startBulk(fi, &served, dir) // bulk_server.go
	if err != nil {
		return err
	}
	defer bs.close()
	sec, err := startSecure(bs, log) // secure_server.go
	if err != nil {
		return err
	}
	if sec != nil {
		defer sec.close()
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	rl, err := listenTCP()
	if err != nil {
		return err
	}
	raw := &rawServer{ln: rl, n: &served, conns: map[net.Conn]struct{}{}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		raw.serve(&wg)
	}()
	defer raw.close()

	gl, err := listenTCP()
	if err != nil {
		return err
	}
	gs := grpc.NewServer(grpc.ForceServerCodec(RawCodec{}))
	gs.RegisterService(grpcServiceDesc(&served), nil)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = gs.Serve(gl)
	}()
	defer gs.Stop()

	if _, err := fmt.Fprintf(out, "ferry %s\nraw %s\ngrpc %s\nferry-busy %s\n", fi.URI(), rl.Addr(), gl.Addr(), fb.URI()); err != nil {
		return err
	}
	if sec != nil {
		if _, err := fmt.Fprintf(out, "ferry-secure %s\n", sec.fi.URI()); err != nil {
			return err
		}
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch cmd := strings.TrimSpace(sc.Text()); cmd {
		case "stats":
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if _, err := fmt.Fprintf(out, "stats %d %d %d\n", ms.Mallocs, served.Load(), CPUTime()); err != nil {
				return err
			}
		case "":
		default:
			if _, err := fmt.Fprintf(out, "error unknown command %q\n", cmd); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

// rawServer is the floor: requests are a 4-byte little-endian length
// (bit 31: echo) and the payload; replies a 4-byte length and the payload
// (empty unless echo). One goroutine per connection, buffered reads, one
// write per reply (writev for a large payload).
type rawServer struct {
	ln net.Listener
	n  *atomic.Uint64

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (s *rawServer) serve(wg *sync.WaitGroup) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer wg.Done()
			_ = RawServe(c, s.n)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

func (s *rawServer) close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
}

// RawServe serves the raw floor protocol on c until it fails or closes.
func RawServe(c net.Conn, n *atomic.Uint64) error {
	br := bufio.NewReaderSize(c, 64<<10)
	var (
		hdr  [4]byte
		buf  []byte
		bufs net.Buffers
	)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		v := binary.LittleEndian.Uint32(hdr[:])
		echo, sz := v&rawEchoBit != 0, int(v&^rawEchoBit)
		if sz > MaxRawPayload {
			return fmt.Errorf("peers: raw payload of %d bytes", sz)
		}
		if cap(buf) < 4+sz {
			buf = make([]byte, 4+sz)
		}
		buf = buf[:4+sz]
		if _, err := io.ReadFull(br, buf[4:]); err != nil {
			return err
		}
		n.Add(1)
		if !echo {
			sz = 0
		}
		binary.LittleEndian.PutUint32(buf, uint32(sz))
		var err error
		if sz <= 16<<10 {
			_, err = c.Write(buf[:4+sz])
		} else {
			bufs = net.Buffers{buf[:4], buf[4 : 4+sz]}
			_, err = bufs.WriteTo(c)
		}
		if err != nil {
			return err
		}
	}
}

// Transports are the transports of the benchmarks' ferry instances: TCP
// (with the congestion control FERRY_BENCH_CC names, if any) and Unix
// sockets.
func Transports() *transport.Registry {
	return transport.NewRegistry(transport.NewTCP(transport.TCPOptions{Congestion: BenchCC()}), transport.NewUnix())
}

// BenchCC is the TCP congestion control that FERRY_BENCH_CC names for
// every TCP socket of every contender (raw, ferry, gRPC; both processes),
// e.g. "cubic" to compare without BBR's pacing where it is the system
// default; empty keeps the system's.
func BenchCC() string { return os.Getenv("FERRY_BENCH_CC") }

// ccControl sets BenchCC on a raw or gRPC socket (net.Dialer /
// net.ListenConfig Control).
func ccControl(network, address string, rc syscall.RawConn) error {
	return transport.CongestionControl(BenchCC())(network, address, rc)
}

// listenTCP listens on 127.0.0.1 with BenchCC.
func listenTCP() (net.Listener, error) {
	lc := net.ListenConfig{Control: ccControl}
	return lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
}

// dialTCP connects to addr with BenchCC.
func dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Control: ccControl}
	return d.DialContext(ctx, "tcp", addr)
}

// CPUTime is the CPU time (user and system) this process has used, in
// microseconds.
func CPUTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano()/1e3 + ru.Stime.Nano()/1e3
}

// BulkOptionsFromEnv reads bulk sizes for experiments from the
// environment (both processes inherit it): FERRY_BULK_CHUNK,
// FERRY_BULK_WINDOW, FERRY_BULK_EAGER, FERRY_BULK_SEGMENT, in bytes, and
// FERRY_BULK_SEPARATE=1 (BulkOptions.SeparateConn).
// Unset means the library's default.
// BusyPoll is the busy poll (rpc.Options.BusyPoll) of the ferry-busy
// contenders' two instances: FERRY_BENCH_BUSY_POLL, default 50 µs.
func BusyPoll() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("FERRY_BENCH_BUSY_POLL")); err == nil {
		return d
	}
	return 50 * time.Microsecond
}

func BulkOptionsFromEnv() rpc.BulkOptions {
	get := func(k string) int {
		n, _ := strconv.Atoi(os.Getenv(k))
		return n
	}
	return rpc.BulkOptions{
		ChunkSize: get("FERRY_BULK_CHUNK"), Window: get("FERRY_BULK_WINDOW"),
		EagerLimit: get("FERRY_BULK_EAGER"), SegmentLimit: get("FERRY_BULK_SEGMENT"),
		SeparateConn: get("FERRY_BULK_SEPARATE") != 0,
	}
}
