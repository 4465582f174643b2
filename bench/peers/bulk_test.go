package peers

// Bulk-transfer benchmarks (issue 5): SIZE bytes each way between this
// process and the server process (bulk_server.go), per contender:
//
//	BenchmarkBulkPut/size=S/impl=raw          raw TCP: SIZE bytes out, 1-byte ack back (floor)
//	BenchmarkBulkPut/size=S/impl=raw-chunked  raw TCP in ferry's chunks: header + chunk each, window bytes unacked (protocol floor)
//	BenchmarkBulkPut/size=S/impl=ferry        TransferWait PUT into the server's write-only buffer
//	BenchmarkBulkPut/size=S/impl=ferry-rpc    RPC carrying the client's handle; the handler GETs it, then replies
//	BenchmarkBulkPut/size=S/impl=grpc-unary   unary call, SIZE bytes in, empty reply
//	BenchmarkBulkPut/size=S/impl=grpc-stream  client stream of 1 MiB messages, u64 ack at the end
//	BenchmarkBulkGet/size=S/impl=raw          raw TCP: 5-byte request, SIZE bytes back (floor)
//	BenchmarkBulkGet/size=S/impl=raw-chunked  raw TCP in ferry's chunks: a request each, window bytes asked ahead (protocol floor)
//	BenchmarkBulkGet/size=S/impl=ferry        TransferWait GET from the server's read-only buffer
//	BenchmarkBulkGet/size=S/impl=grpc-unary   unary call, u32 request, SIZE bytes back
//	BenchmarkBulkGet/size=S/impl=grpc-stream  server stream of 1 MiB messages
//	BenchmarkBulk*/size=S/impl=ferry-nocrc    ferry over TCP without data CRCs (rpc.Options.NoDataCRC on both sides)
//	BenchmarkBulk*/size=S/impl=ferry-secure   ferry over TCP with cephx in msgr2 secure mode (AES-128-GCM) to the
//	                                          server's second instance (secure_server.go; impl=ferry is crc mode)
//	BenchmarkBulk*/size=S/impl=ferry-unix     same-host peers: ferry over the server's Unix socket, where
//	                                          transfers take the direct path (process_vm_readv/writev)
//	BenchmarkBulk*/size=S/impl=grpc-unary-unix gRPC unary over a Unix socket
//	BenchmarkHOL/bg=none|get16MiB|put16MiB    64 B ferry RPCs on the connection that carries back-to-back 16 MiB transfers
//	BenchmarkHOL/bg=get256MiB|put256MiB       the same behind single 256 MiB transfers (one after another)
//	BenchmarkHOL/bg=get16MiB-otherconn|...    the 16 MiB transfers from a second client instance, on a connection of their own
//
// Every contender lands received bytes in one reused 16 MiB buffer per
// side and sends from one; ns/op, MB/s and allocs/op are the client's,
// srv-allocs/op the server process's.
//
//	cd bench/peers && go test -run '^$' -bench 'Bulk|HOL' -benchtime 2s -count 1 .

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
)

var bulkSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"4MiB", 4 << 20}, {"16MiB", 16 << 20}}

// bulkClient is this process's side of the bulk benchmarks: a registered
// 16 MiB buffer (filled with Pattern(seedClient)) on the peer's ferry
// instance, what OpBulkInfo told about the server, and a gRPC
// connection to the bulk gRPC server.
type bulkClient struct {
	p     *peer
	info  BulkInfo
	buf   []byte
	local *rpc.Bulk
	ep    rpc.Endpoint // the server: rank 0, tag 0
	gcc   *grpc.ClientConn

	ux, nc, tc lazySide // second clients: ferry-unix, ferry-nocrc, and over TCP with CRCs (HOL's other connection)
	sc         lazySide // ferry-secure: cephx and secure mode, to the server's secure instance (secure_test.go)

	bigOnce  sync.Once // the head-of-line benchmark's BulkBig buffers
	bigInfo  BulkInfo
	bigLocal *rpc.Bulk
	bigErr   error
}

var (
	bulkOnce sync.Once
	theBulk  *bulkClient
	bulkErr  error
)

func getBulk(tb testing.TB) *bulkClient {
	tb.Helper()
	p := getPeer(tb)
	bulkOnce.Do(func() { theBulk, bulkErr = newBulkClient(p) })
	if bulkErr != nil {
		tb.Fatalf("setting up the bulk client: %v", bulkErr)
	}
	return theBulk
}

func newBulkClient(p *peer) (*bulkClient, error) {
	c := &bulkClient{p: p, buf: make([]byte, BulkMax)}
	Pattern(c.buf, seedClient)
	var err error
	if c.local, err = p.fi.NewBulk([][]byte{c.buf}, rpc.BulkRW); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.fc.Call(ctx, c.ep, OpBulkInfo, nil, &c.info); err != nil {
		return nil, fmt.Errorf("bulk info: %w", err)
	}
	c.gcc, err = dialBulkGRPC(c.info.GRPC)
	return c, err
}

// dialBulkGRPC connects to the bulk gRPC server at addr, sized for large
// messages.
func dialBulkGRPC(addr string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(BulkCodec{}),
			grpc.MaxCallRecvMsgSize(GRPCMaxMsg), grpc.MaxCallSendMsgSize(GRPCMaxMsg)),
		grpc.WithInitialWindowSize(GRPCWindow),
		grpc.WithInitialConnWindowSize(GRPCWindow),
	}
	if !strings.HasPrefix(addr, "unix://") {
		opts = append(opts, grpc.WithContextDialer(dialTCP))
	}
	return grpc.NewClient(addr, opts...)
}

// altSide is a second ferry client instance with its own registered
// 16 MiB buffer, for the contenders that differ in how they reach the
// server: ferry-unix over the server's Unix socket (so bulk transfers
// take the direct path, process_vm_readv/writev, with gRPC over a Unix
// socket beside it), ferry-nocrc over TCP without data CRCs
// (rpc.Options.NoDataCRC, which the server offers), ferry-secure over
// TCP with cephx in secure mode to the server's second instance.
type altSide struct {
	fi    *rpc.Instance
	fc    *rpc.Context
	buf   []byte
	local *rpc.Bulk
	gcc   *grpc.ClientConn // ferry-unix only: gRPC over the Unix socket
	info  *BulkInfo        // the server instance's handles when not the first's (ferry-secure)
	m     *msgr.Messenger  // the messenger when not the instance's own (ferry-secure)
}

type lazySide struct {
	once sync.Once
	s    *altSide
	err  error
}

func (c *bulkClient) unix(tb testing.TB) *altSide {
	return c.ux.get(tb, func() (*altSide, error) {
		if c.p.ferryUnix == "" || c.info.GRPCUnix == "" {
			return nil, errors.New("the server has no Unix-socket addresses")
		}
		return newAltSide(c.p.ferryUnix, false, c.info.GRPCUnix)
	})
}

func (c *bulkClient) noCRC(tb testing.TB) *altSide {
	return c.nc.get(tb, func() (*altSide, error) { return newAltSide(c.p.ferryAddr, true, "") })
}

// other is a second client over TCP with data CRCs: its transfers use a
// connection of their own to the server.
func (c *bulkClient) other(tb testing.TB) *altSide {
	return c.tc.get(tb, func() (*altSide, error) { return newAltSide(c.p.ferryAddr, false, "") })
}

func (l *lazySide) get(tb testing.TB, mk func() (*altSide, error)) *altSide {
	tb.Helper()
	l.once.Do(func() { l.s, l.err = mk() })
	if l.err != nil {
		tb.Fatalf("setting up a second client: %v", l.err)
	}
	return l.s
}

func newAltSide(addr string, noDataCRC bool, grpcAddr string) (*altSide, error) {
	u := &altSide{buf: make([]byte, BulkMax)}
	Pattern(u.buf, seedClient)
	var err error
	if u.fi, err = rpc.New(rpc.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Bulk: BulkOptionsFromEnv(),
		Transports: Transports(), NoDataCRC: noDataCRC}); err != nil {
		return nil, err
	}
	if err = u.fi.Group().Add(0, addr); err != nil {
		return nil, err
	}
	if u.fc, err = u.fi.NewContext(rpc.ContextOptions{}); err != nil {
		return nil, err
	}
	if u.local, err = u.fi.NewBulk([][]byte{u.buf}, rpc.BulkRW); err != nil {
		return nil, err
	}
	if grpcAddr == "" {
		return u, nil
	}
	u.gcc, err = dialBulkGRPC(grpcAddr)
	return u, err
}

// altTransfer is ferryTransfer through u (with u's server handles if it
// has its own).
func (c *bulkClient) altTransfer(u *altSide, op rpc.BulkOp, n int) func() error {
	info := &c.info
	if u.info != nil {
		info = u.info
	}
	d := rpc.BulkDesc{Op: op, Remote: info.Src, Local: u.local, Len: int64(n), Peer: &c.ep}
	if op == rpc.BulkPut {
		d.Remote = info.Dst
	}
	ctx := context.Background()
	return func() error { return u.fc.TransferWait(ctx, d) }
}

// ---- operations: each moves n bytes once ----

func (c *bulkClient) ferryTransfer(op rpc.BulkOp, n int) func() error {
	d := rpc.BulkDesc{Op: op, Remote: c.info.Src, Local: c.local, Len: int64(n), Peer: &c.ep}
	if op == rpc.BulkPut {
		d.Remote = c.info.Dst
	}
	ctx := context.Background()
	return func() error { return c.p.fc.TransferWait(ctx, d) }
}

// ferryRPCWrite: the server GETs n bytes of the client's buffer, then
// replies.
func (c *bulkClient) ferryRPCWrite(n int) func() error {
	in := &BulkWriteIn{H: c.local.Handle(), N: int64(n)}
	ctx := context.Background()
	return func() error { return c.p.fc.Call(ctx, c.ep, OpBulkWrite, in, nil) }
}

// rawBulk is a floor client on one connection.
type rawBulk struct {
	c    net.Conn
	hdr  [5]byte
	wbuf []byte
	arr  [2][]byte
	ack  [1]byte
}

func dialRawBulk(addr string) (*rawBulk, error) {
	c, err := dialTCP(context.Background(), addr)
	if err != nil {
		return nil, err
	}
	return &rawBulk{c: c, wbuf: make([]byte, 0, 5+16<<10)}, nil
}

func (r *rawBulk) put(src []byte) error {
	r.hdr[0] = rawBulkPut
	binary.LittleEndian.PutUint32(r.hdr[1:], uint32(len(src)))
	var err error
	if len(src) <= 16<<10 {
		_, err = r.c.Write(append(append(r.wbuf[:0], r.hdr[:]...), src...))
	} else {
		r.arr = [2][]byte{r.hdr[:], src}
		bufs := net.Buffers(r.arr[:])
		_, err = bufs.WriteTo(r.c)
	}
	if err != nil {
		return err
	}
	_, err = io.ReadFull(r.c, r.ack[:])
	return err
}

func (r *rawBulk) get(dst []byte) error {
	r.hdr[0] = rawBulkGet
	binary.LittleEndian.PutUint32(r.hdr[1:], uint32(len(dst)))
	if _, err := r.c.Write(r.hdr[:]); err != nil {
		return err
	}
	_, err := io.ReadFull(r.c, dst)
	return err
}

// rawChunked is the chunked floor's client (one connection): ferry's
// transfer protocol without ferry. A GET asks for each chunk with its own
// request and keeps window bytes asked ahead; a PUT sends each chunk with
// a header and keeps window bytes unacknowledged. Chunk and window are
// ferry's (rpc.BulkOptions, as BulkOptionsFromEnv sets them). Answers are
// read through a 64 KiB buffer, as ferry's messenger reads (large reads
// go straight into the target once it is drained).
type rawChunked struct {
	c             net.Conn
	br            *bufio.Reader
	chunk, window int
	req           [9]byte
	arr           [2][]byte
	hdr           [8]byte
}

func dialRawChunked(addr string) (*rawChunked, error) {
	c, err := dialTCP(context.Background(), addr)
	if err != nil {
		return nil, err
	}
	o := BulkOptionsFromEnv()
	chunk := cmp.Or(o.ChunkSize, rpc.DefaultChunkSize)
	window := max(cmp.Or(o.Window, rpc.DefaultBulkWindow), chunk)
	return &rawChunked{c: c, br: bufio.NewReaderSize(c, 64<<10), chunk: chunk, window: window}, nil
}

func (r *rawChunked) request(op byte, off, n int) {
	r.req[0] = op
	binary.LittleEndian.PutUint32(r.req[1:], uint32(n))
	binary.LittleEndian.PutUint32(r.req[5:], uint32(off))
}

// room returns the size of the chunk at next of a total-byte transfer if
// the window, with inflight bytes out, has room for it, else 0.
func (r *rawChunked) room(next, inflight, total int) int {
	n := min(r.chunk, total-next)
	if n <= 0 || (inflight > 0 && inflight+n > r.window) {
		return 0
	}
	return n
}

func (r *rawChunked) get(dst []byte) error {
	next, landed, inflight := 0, 0, 0
	for landed < len(dst) {
		for n := r.room(next, inflight, len(dst)); n > 0; n = r.room(next, inflight, len(dst)) {
			r.request(rawBulkGetChunk, next, n)
			if _, err := r.c.Write(r.req[:]); err != nil {
				return err
			}
			next, inflight = next+n, inflight+n
		}
		if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
			return err
		}
		off, n := int(binary.LittleEndian.Uint32(r.hdr[:])), int(binary.LittleEndian.Uint32(r.hdr[4:]))
		if off != landed || n != min(r.chunk, len(dst)-landed) {
			return fmt.Errorf("raw chunk of %d bytes at %d, want %d at %d", n, off, min(r.chunk, len(dst)-landed), landed)
		}
		if _, err := io.ReadFull(r.br, dst[off:off+n]); err != nil {
			return err
		}
		landed, inflight = landed+n, inflight-n
	}
	return nil
}

func (r *rawChunked) put(src []byte) error {
	next, acked, inflight := 0, 0, 0
	for acked < len(src) {
		for n := r.room(next, inflight, len(src)); n > 0; n = r.room(next, inflight, len(src)) {
			r.request(rawBulkPutChunk, next, n)
			r.arr = [2][]byte{r.req[:], src[next : next+n]}
			bufs := net.Buffers(r.arr[:])
			if _, err := bufs.WriteTo(r.c); err != nil {
				return err
			}
			next, inflight = next+n, inflight+n
		}
		if _, err := r.br.ReadByte(); err != nil {
			return err
		}
		n := min(r.chunk, len(src)-acked)
		acked, inflight = acked+n, inflight-n
	}
	return nil
}

// sum asks for the CRC32-C of the first n bytes the connection's PUTs
// landed.
func (r *rawChunked) sum(n int) (uint32, error) {
	r.request(rawBulkSum, 0, n)
	if _, err := r.c.Write(r.req[:5]); err != nil {
		return 0, err
	}
	var b [4]byte
	if _, err := io.ReadFull(r.br, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

func withRawChunked(b *testing.B, f func(r *rawChunked)) {
	r, err := dialRawChunked(getBulk(b).info.Raw)
	if err != nil {
		b.Fatal(err)
	}
	defer r.c.Close()
	f(r)
}

// gRPC operations. Received bytes land in c.buf (BulkCodec copies into
// the target's backing array); sent bytes come from c.buf.
type grpcBulk struct {
	gcc   *grpc.ClientConn
	buf   []byte
	n     int
	req   []byte // u32 length
	in    []byte
	out   []byte
	chunk []byte
}

var (
	putStreamDesc = &grpc.StreamDesc{StreamName: "PutStream", ClientStreams: true}
	getStreamDesc = &grpc.StreamDesc{StreamName: "GetStream", ServerStreams: true}
)

func (c *bulkClient) grpcOps(n int) *grpcBulk { return newGRPCBulk(c.gcc, c.buf, n) }

// grpcUnixOps are grpcOps over the Unix-socket connection.
func (c *bulkClient) grpcUnixOps(tb testing.TB, n int) *grpcBulk {
	u := c.unix(tb)
	return newGRPCBulk(u.gcc, u.buf, n)
}

func newGRPCBulk(gcc *grpc.ClientConn, buf []byte, n int) *grpcBulk {
	return &grpcBulk{gcc: gcc, buf: buf, n: n, req: binary.LittleEndian.AppendUint32(nil, uint32(n)), out: make([]byte, 0, 64)}
}

func (g *grpcBulk) putUnary() error {
	g.in = g.buf[:g.n]
	g.out = g.out[:0]
	if err := g.gcc.Invoke(context.Background(), GRPCBulkPut, &g.in, &g.out); err != nil {
		return err
	}
	if len(g.out) != 0 {
		return fmt.Errorf("gRPC put reply of %d bytes", len(g.out))
	}
	return nil
}

func (g *grpcBulk) getUnary() error {
	g.out = g.buf[:0]
	if err := g.gcc.Invoke(context.Background(), GRPCBulkGet, &g.req, &g.out); err != nil {
		return err
	}
	if len(g.out) != g.n {
		return fmt.Errorf("gRPC get reply of %d bytes, want %d", len(g.out), g.n)
	}
	return nil
}

func (g *grpcBulk) putStream() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := g.gcc.NewStream(ctx, putStreamDesc, GRPCBulkPutStream)
	if err != nil {
		return err
	}
	for off := 0; off < g.n; off += GRPCChunk {
		g.chunk = g.buf[off:min(off+GRPCChunk, g.n)]
		if err := st.SendMsg(&g.chunk); err != nil {
			return err
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	g.out = g.out[:0]
	if err := st.RecvMsg(&g.out); err != nil {
		return err
	}
	if len(g.out) != 8 || binary.LittleEndian.Uint64(g.out) != uint64(g.n) {
		return fmt.Errorf("gRPC put stream ack %x, want %d bytes", g.out, g.n)
	}
	return nil
}

func (g *grpcBulk) getStream() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := g.gcc.NewStream(ctx, getStreamDesc, GRPCBulkGetStream)
	if err != nil {
		return err
	}
	if err := st.SendMsg(&g.req); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	got := 0
	for {
		g.chunk = g.buf[got:got]
		err := st.RecvMsg(&g.chunk)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if got+len(g.chunk) > len(g.buf) || &g.chunk[0] != &g.buf[got] {
			return errors.New("gRPC get stream: a message did not land in place")
		}
		got += len(g.chunk)
	}
	if got != g.n {
		return fmt.Errorf("gRPC get stream of %d bytes, want %d", got, g.n)
	}
	return nil
}

// ---- measurement ----

// benchOp runs op b.N times (after a warm-up) and reports MB/s for size
// bytes per op, the client's allocs/op and the server's srv-allocs/op, and
// each process's CPU time per op (cli-cpu-µs/op, srv-cpu-µs/op).
func benchOp(b *testing.B, size int, op func() error) {
	c := getBulk(b)
	for range 3 {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	m0, _, s0, err := c.p.statsCPU()
	if err != nil {
		b.Fatal(err)
	}
	c0 := CPUTime()
	b.ResetTimer()
	for range b.N {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c1 := CPUTime()
	m1, _, s1, err := c.p.statsCPU()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(m1-m0)/float64(b.N), "srv-allocs/op")
	// CPU time of both processes per operation: on a machine with spare
	// cores it is what a transfer costs, beside what it takes.
	b.ReportMetric(float64(c1-c0)/float64(b.N), "cli-cpu-µs/op")
	b.ReportMetric(float64(s1-s0)/float64(b.N), "srv-cpu-µs/op")
}

func withRaw(b *testing.B, f func(r *rawBulk)) {
	r, err := dialRawBulk(getBulk(b).info.Raw)
	if err != nil {
		b.Fatal(err)
	}
	defer r.c.Close()
	f(r)
}

// BenchmarkBulkPut moves SIZE bytes from the client to the server.
func BenchmarkBulkPut(b *testing.B) {
	for _, sz := range bulkSizes {
		n := sz.n
		b.Run("size="+sz.name, func(b *testing.B) {
			c := getBulk(b)
			b.Run("impl=raw", func(b *testing.B) {
				withRaw(b, func(r *rawBulk) { benchOp(b, n, func() error { return r.put(c.buf[:n]) }) })
			})
			b.Run("impl=raw-chunked", func(b *testing.B) {
				withRawChunked(b, func(r *rawChunked) { benchOp(b, n, func() error { return r.put(c.buf[:n]) }) })
			})
			b.Run("impl=ferry", func(b *testing.B) { benchOp(b, n, c.ferryTransfer(rpc.BulkPut, n)) })
			b.Run("impl=ferry-nocrc", func(b *testing.B) { benchOp(b, n, c.altTransfer(c.noCRC(b), rpc.BulkPut, n)) })
			b.Run("impl=ferry-secure", func(b *testing.B) { benchSecure(b, n, rpc.BulkPut) })
			b.Run("impl=ferry-rpc", func(b *testing.B) { benchOp(b, n, c.ferryRPCWrite(n)) })
			b.Run("impl=grpc-unary", func(b *testing.B) { benchOp(b, n, c.grpcOps(n).putUnary) })
			b.Run("impl=grpc-stream", func(b *testing.B) { benchOp(b, n, c.grpcOps(n).putStream) })
			b.Run("impl=ferry-unix", func(b *testing.B) { benchOp(b, n, c.altTransfer(c.unix(b), rpc.BulkPut, n)) })
			b.Run("impl=grpc-unary-unix", func(b *testing.B) { benchOp(b, n, c.grpcUnixOps(b, n).putUnary) })
		})
	}
}

// BenchmarkBulkGet moves SIZE bytes from the server to the client.
func BenchmarkBulkGet(b *testing.B) {
	for _, sz := range bulkSizes {
		n := sz.n
		b.Run("size="+sz.name, func(b *testing.B) {
			c := getBulk(b)
			b.Run("impl=raw", func(b *testing.B) {
				withRaw(b, func(r *rawBulk) { benchOp(b, n, func() error { return r.get(c.buf[:n]) }) })
			})
			b.Run("impl=raw-chunked", func(b *testing.B) {
				withRawChunked(b, func(r *rawChunked) { benchOp(b, n, func() error { return r.get(c.buf[:n]) }) })
			})
			b.Run("impl=ferry", func(b *testing.B) { benchOp(b, n, c.ferryTransfer(rpc.BulkGet, n)) })
			b.Run("impl=ferry-nocrc", func(b *testing.B) { benchOp(b, n, c.altTransfer(c.noCRC(b), rpc.BulkGet, n)) })
			b.Run("impl=ferry-secure", func(b *testing.B) { benchSecure(b, n, rpc.BulkGet) })
			b.Run("impl=grpc-unary", func(b *testing.B) { benchOp(b, n, c.grpcOps(n).getUnary) })
			b.Run("impl=grpc-stream", func(b *testing.B) { benchOp(b, n, c.grpcOps(n).getStream) })
			b.Run("impl=ferry-unix", func(b *testing.B) { benchOp(b, n, c.altTransfer(c.unix(b), rpc.BulkGet, n)) })
			b.Run("impl=grpc-unary-unix", func(b *testing.B) { benchOp(b, n, c.grpcUnixOps(b, n).getUnary) })
		})
	}
}

// BenchmarkHOL times 64 B ferry RPCs (OpSink, one in flight) on the
// client context whose connection also carries back-to-back 16 MiB
// transfers from a background goroutine (none, GETs or PUTs): the RPCs'
// p50 and p99 latency, and the background's MB/s.
//
// The 256 MiB variants run single transfers of BulkBig bytes (the issue's
// case) between buffers of that size, allocated when they first run.
func BenchmarkHOL(b *testing.B) {
	b.Run("bg=none", func(b *testing.B) { benchHOL(b, 0, 0, false) })
	b.Run("bg=get16MiB", func(b *testing.B) { benchHOL(b, rpc.BulkGet, BulkMax, false) })
	b.Run("bg=put16MiB", func(b *testing.B) { benchHOL(b, rpc.BulkPut, BulkMax, false) })
	b.Run("bg=get256MiB", func(b *testing.B) { benchHOL(b, rpc.BulkGet, BulkBig, false) })
	b.Run("bg=put256MiB", func(b *testing.B) { benchHOL(b, rpc.BulkPut, BulkBig, false) })
	b.Run("bg=get16MiB-otherconn", func(b *testing.B) { benchHOL(b, rpc.BulkGet, BulkMax, true) })
	b.Run("bg=put16MiB-otherconn", func(b *testing.B) { benchHOL(b, rpc.BulkPut, BulkMax, true) })
}

// bigTransfer returns an operation moving BulkBig bytes between the
// server's large buffers and a client buffer of that size, allocating
// both on first use.
func (c *bulkClient) bigTransfer(op rpc.BulkOp) (func() error, error) {
	c.bigOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if c.bigErr = c.p.fc.Call(ctx, c.ep, OpBulkBig, nil, &c.bigInfo); c.bigErr != nil {
			return
		}
		buf := make([]byte, BulkBig)
		Pattern(buf, seedClient)
		c.bigLocal, c.bigErr = c.p.fi.NewBulk([][]byte{buf}, rpc.BulkRW)
	})
	if c.bigErr != nil {
		return nil, c.bigErr
	}
	d := rpc.BulkDesc{Op: op, Remote: c.bigInfo.Src, Local: c.bigLocal, Len: BulkBig, Peer: &c.ep}
	if op == rpc.BulkPut {
		d.Remote = c.bigInfo.Dst
	}
	return func() error { return c.p.fc.TransferWait(context.Background(), d) }, nil
}

func benchHOL(b *testing.B, bg rpc.BulkOp, size int64, otherConn bool) {
	c := getBulk(b)
	call := ferryCall(c.p, OpSink, 64, 0)
	var out []byte
	for range 10 {
		if err := call(&out); err != nil {
			b.Fatal(err)
		}
	}
	var (
		moved atomic.Int64
		stop  = make(chan struct{})
		done  = make(chan error, 1)
	)
	if bg != 0 {
		xfer, bgc := c.ferryTransfer(bg, int(size)), c.p.fc
		if otherConn {
			u := c.other(b)
			xfer, bgc = c.altTransfer(u, bg, int(size)), u.fc
		}
		if size > BulkMax {
			var err error
			if xfer, err = c.bigTransfer(bg); err != nil {
				b.Fatal(err)
			}
		}
		go func() {
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if err := xfer(); err != nil {
					done <- err
					return
				}
				moved.Add(size)
			}
		}()
		// Measure only once a transfer is under way.
		deadline := time.Now().Add(10 * time.Second)
		for bgc.BulkStats().Active == 0 && moved.Load() == 0 {
			if time.Now().After(deadline) {
				b.Fatal("the background transfer did not start")
			}
			time.Sleep(50 * time.Microsecond)
		}
	} else {
		done <- nil
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	m0 := moved.Load()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := call(&out); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	m1 := moved.Load()
	close(stop)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))]) / 1e3 }
	b.ReportMetric(q(0.5), "p50-us")
	b.ReportMetric(q(0.99), "p99-us")
	if bg != 0 {
		// Transfers that completed during the measurement (a lower bound).
		b.ReportMetric(float64(m1-m0)/1e6/b.Elapsed().Seconds(), "bg-MB/s")
	}
}

// ---- correctness of what the benchmarks run ----

// TestBulkHarness runs each contender once per protocol size class and
// checks the bytes that arrive.
func TestBulkHarness(t *testing.T) {
	c := getBulk(t)
	want := make([]byte, BulkMax)
	Pattern(want, seedServer)
	// One bound for the whole check: under -race on a loaded 2-vCPU
	// machine its 40-odd transfers took over 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	check := func(which uint8, n int) uint32 {
		t.Helper()
		var sum U32
		if err := c.p.fc.Call(ctx, c.ep, OpBulkCheck, &BulkCheckIn{Which: which, N: int64(n)}, &sum); err != nil {
			t.Fatal(err)
		}
		return uint32(sum)
	}
	r, err := dialRawBulk(c.info.Raw)
	if err != nil {
		t.Fatal(err)
	}
	defer r.c.Close()
	r.c.SetDeadline(time.Now().Add(30 * time.Second))
	rc, err := dialRawChunked(c.info.Raw)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.c.Close()
	rc.c.SetDeadline(time.Now().Add(30 * time.Second))
	if cc := BenchCC(); cc != "" {
		if got, err := transport.Congestion(r.c); err != nil || got != cc {
			t.Fatalf("FERRY_BENCH_CC=%s: the raw connection runs %q (%v)", cc, got, err)
		}
	}

	// Eager, segmented or rendezvous (above 16 KiB; PUT above 1 MiB), and
	// a gRPC stream of several messages.
	for _, n := range []int{4 << 10, 200 << 10, 3<<20 + 12345} {
		gets := map[string]func() error{
			"raw":         func() error { return r.get(c.buf[:n]) },
			"raw-chunked": func() error { return rc.get(c.buf[:n]) },
			"ferry":       c.ferryTransfer(rpc.BulkGet, n),
			"grpc-unary":  c.grpcOps(n).getUnary,
			"grpc-stream": c.grpcOps(n).getStream,
		}
		for name, get := range gets {
			clear(c.buf[:n+1])
			if err := get(); err != nil {
				t.Fatalf("%s GET of %d bytes: %v", name, n, err)
			}
			if !bytes.Equal(c.buf[:n], want[:n]) || c.buf[n] != 0 {
				t.Fatalf("%s GET of %d bytes: wrong bytes", name, n)
			}
		}

		Pattern(c.buf, seedClient+uint64(n))
		sum := CRC32C(c.buf[:n])
		if err := c.ferryTransfer(rpc.BulkPut, n)(); err != nil {
			t.Fatalf("ferry PUT of %d bytes: %v", n, err)
		}
		if got := check(BulkCheckDst, n); got != sum {
			t.Fatalf("ferry PUT of %d bytes: server sum %08x, want %08x", n, got, sum)
		}
		if err := c.ferryRPCWrite(n)(); err != nil {
			t.Fatalf("ferry RPC write of %d bytes: %v", n, err)
		}
		if got := check(BulkCheckSink, n); got != sum {
			t.Fatalf("ferry RPC write of %d bytes: server sum %08x, want %08x", n, got, sum)
		}
		puts := map[string]func() error{
			"raw":         func() error { return r.put(c.buf[:n]) },
			"grpc-unary":  c.grpcOps(n).putUnary,
			"grpc-stream": c.grpcOps(n).putStream,
		}
		for name, put := range puts {
			if err := put(); err != nil {
				t.Fatalf("%s PUT of %d bytes: %v", name, n, err)
			}
		}
		// The chunked floor lands PUTs where the server can sum them.
		if err := rc.put(c.buf[:n]); err != nil {
			t.Fatalf("raw-chunked PUT of %d bytes: %v", n, err)
		}
		if got, err := rc.sum(n); err != nil || got != sum {
			t.Fatalf("raw-chunked PUT of %d bytes: server sum %08x (%v), want %08x", n, got, err, sum)
		}

		// The second clients, into and from their own buffers.
		u, nc := c.unix(t), c.noCRC(t)
		for _, g := range []struct {
			name string
			get  func() error
			buf  []byte
		}{
			{"ferry-unix", c.altTransfer(u, rpc.BulkGet, n), u.buf},
			{"grpc-unary-unix", c.grpcUnixOps(t, n).getUnary, u.buf},
			{"ferry-nocrc", c.altTransfer(nc, rpc.BulkGet, n), nc.buf},
		} {
			clear(g.buf[:n+1])
			if err := g.get(); err != nil {
				t.Fatalf("%s GET of %d bytes: %v", g.name, n, err)
			}
			if !bytes.Equal(g.buf[:n], want[:n]) || g.buf[n] != 0 {
				t.Fatalf("%s GET of %d bytes: wrong bytes", g.name, n)
			}
		}
		for i, s := range []*altSide{u, nc} {
			Pattern(s.buf, seedClient+uint64(n)+uint64(i)+1)
			sum = CRC32C(s.buf[:n])
			if err := c.altTransfer(s, rpc.BulkPut, n)(); err != nil {
				t.Fatalf("second client %d: PUT of %d bytes: %v", i, n, err)
			}
			if got := check(BulkCheckDst, n); got != sum {
				t.Fatalf("second client %d: PUT of %d bytes: server sum %08x, want %08x", i, n, got, sum)
			}
			Pattern(s.buf, seedClient)
		}
		if err := c.grpcUnixOps(t, n).putUnary(); err != nil {
			t.Fatalf("grpc-unary-unix PUT of %d bytes: %v", n, err)
		}
		checkSecureBulk(t, ctx, c, n, want) // ferry-secure, secure_test.go
	}
	Pattern(c.buf, seedClient)
}
