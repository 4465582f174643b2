package peers

// The bulk-transfer side of the benchmark server (bulk_test.go is the
// client): ferry's registered buffers and the RPC that does a transfer
// (CaRT's way of writing), a raw-TCP floor for streams and a gRPC server
// sized for large messages, next to the small-message servers of
// server.go. Serve starts it with startBulk; a client learns everything it
// needs (handles and addresses) from one OpBulkInfo call.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"

	"github.com/ferrymsg/ferry/rpc"
)

// BulkMax is the largest transfer the bulk servers take (each of the
// server's registered buffers is this long).
const BulkMax = 16 << 20

// The ferry bulk protocol served: base 4, version 0.
var (
	OpBulkInfo  = rpc.MakeOpcode(4, 0, 0) // empty in, BulkInfo out
	OpBulkWrite = rpc.MakeOpcode(4, 0, 1) // BulkWriteIn in: the server GETs the bytes, then replies (empty)
	OpBulkCheck = rpc.MakeOpcode(4, 0, 2) // BulkCheckIn in, CRC32-C (u32) out
	OpBulkBig   = rpc.MakeOpcode(4, 0, 3) // empty in, BulkInfo out: handles of BulkBig-byte buffers (addresses empty)
)

// BulkBig is the length of the server's large GET source and PUT target,
// allocated on the first OpBulkBig (the head-of-line benchmark's single
// transfer of this size).
const BulkBig = 256 << 20

// BulkInfo is what a client needs to reach the bulk servers: the handles
// of the server's GET source (read-only, filled with Pattern(seedServer))
// and PUT target (write-only), and the addresses of the raw stream floor
// and of the bulk gRPC server.
type BulkInfo struct {
	Src, Dst rpc.BulkHandle
	Raw      string
	GRPC     string
	GRPCUnix string // the bulk gRPC server on a Unix socket ("unix:///path")
}

// AppendBinary encodes the handles, then the three addresses (u16 length
// and bytes each).
func (b *BulkInfo) AppendBinary(p []byte) ([]byte, error) {
	var err error
	if p, err = b.Src.AppendBinary(p); err != nil {
		return p, err
	}
	if p, err = b.Dst.AppendBinary(p); err != nil {
		return p, err
	}
	for _, s := range []string{b.Raw, b.GRPC, b.GRPCUnix} {
		p = binary.LittleEndian.AppendUint16(p, uint16(len(s)))
		p = append(p, s...)
	}
	return p, nil
}

// UnmarshalBinary decodes what AppendBinary encoded.
func (b *BulkInfo) UnmarshalBinary(p []byte) error {
	var err error
	if p, err = b.Src.Decode(p); err != nil {
		return err
	}
	if p, err = b.Dst.Decode(p); err != nil {
		return err
	}
	for _, s := range []*string{&b.Raw, &b.GRPC, &b.GRPCUnix} {
		if len(p) < 2 {
			return errors.New("peers: short bulk info")
		}
		n := int(binary.LittleEndian.Uint16(p))
		if len(p) < 2+n {
			return errors.New("peers: short bulk info")
		}
		*s, p = string(p[2:2+n]), p[2+n:]
	}
	if len(p) != 0 {
		return errors.New("peers: bytes after the bulk info")
	}
	return nil
}

// BulkWriteIn is OpBulkWrite's input: the client's handle and how many
// bytes of it the server is to GET (from offset 0).
type BulkWriteIn struct {
	H rpc.BulkHandle
	N int64
}

// AppendBinary encodes the handle and N (u64).
func (w *BulkWriteIn) AppendBinary(p []byte) ([]byte, error) {
	p, err := w.H.AppendBinary(p)
	return binary.LittleEndian.AppendUint64(p, uint64(w.N)), err
}

// UnmarshalBinary decodes what AppendBinary encoded.
func (w *BulkWriteIn) UnmarshalBinary(p []byte) error {
	rest, err := w.H.Decode(p)
	if err != nil {
		return err
	}
	if len(rest) != 8 {
		return errors.New("peers: bad bulk write input")
	}
	w.N = int64(binary.LittleEndian.Uint64(rest))
	return nil
}

// Server buffers OpBulkCheck can sum.
const (
	BulkCheckDst  = 1 // the PUT target
	BulkCheckSink = 2 // OpBulkWrite's GET target
)

// BulkCheckIn asks for the CRC32-C of the first N bytes of a server
// buffer (Which: BulkCheckDst or BulkCheckSink).
type BulkCheckIn struct {
	Which uint8
	N     int64
}

// AppendBinary encodes Which (u8) and N (u64).
func (c *BulkCheckIn) AppendBinary(p []byte) ([]byte, error) {
	return binary.LittleEndian.AppendUint64(append(p, c.Which), uint64(c.N)), nil
}

// UnmarshalBinary decodes what AppendBinary encoded.
func (c *BulkCheckIn) UnmarshalBinary(p []byte) error {
	if len(p) != 9 {
		return errors.New("peers: bad bulk check input")
	}
	c.Which, c.N = p[0], int64(binary.LittleEndian.Uint64(p[1:]))
	return nil
}

// U32 is a little-endian uint32 input or output.
type U32 uint32

// AppendBinary encodes u.
func (u U32) AppendBinary(p []byte) ([]byte, error) {
	return binary.LittleEndian.AppendUint32(p, uint32(u)), nil
}

// UnmarshalBinary decodes u.
func (u *U32) UnmarshalBinary(p []byte) error {
	if len(p) != 4 {
		return errors.New("peers: bad u32")
	}
	*u = U32(binary.LittleEndian.Uint32(p))
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C sums p (Castagnoli).
func CRC32C(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// Pattern fills p with bytes that depend on seed and on each 8-byte
// word's position.
func Pattern(p []byte, seed uint64) {
	var w [8]byte
	for i := 0; i < len(p); i += 8 {
		x := uint64(i/8) + seed*0x9e3779b97f4a7c15
		x ^= x >> 31
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 29
		binary.LittleEndian.PutUint64(w[:], x)
		copy(p[i:], w[:])
	}
}

// Pattern seeds of the server's GET source and of the client's buffer.
const (
	seedServer = 1
	seedClient = 2
)

// bulkServer is the bulk side of Serve.
type bulkServer struct {
	n *atomic.Uint64

	srcBuf, dstBuf, sinkBuf []byte
	bulkRegs                // the buffers registered on the first instance
	info                    BulkInfo

	bigMu sync.Mutex
	big   map[*rpc.Instance]*BulkInfo // OpBulkBig's answer per instance, once allocated

	rl     net.Listener
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}

	gs     *grpc.Server
	gl, gu net.Listener // TCP and Unix-socket listeners of gs
	wg     sync.WaitGroup
}

// startBulk registers the bulk protocol and buffers on fi (whose first
// context must have Auto progress) and starts the raw stream floor and
// the bulk gRPC server, the latter also on a Unix socket in dir; n
// counts the operations they serve.
func startBulk(fi *rpc.Instance, n *atomic.Uint64, dir string) (_ *bulkServer, err error) {
	s := &bulkServer{n: n, conns: map[net.Conn]struct{}{}, big: map[*rpc.Instance]*BulkInfo{}}
	s.srcBuf, s.dstBuf, s.sinkBuf = make([]byte, BulkMax), make([]byte, BulkMax), make([]byte, BulkMax)
	Pattern(s.srcBuf, seedServer)
	if s.bulkRegs, err = s.register(fi); err != nil {
		return nil, err
	}
	if s.rl, err = listenTCP(); err != nil {
		return nil, err
	}
	if s.gl, err = listenTCP(); err != nil {
		s.rl.Close()
		return nil, err
	}
	gpath := filepath.Join(dir, "grpc.sock")
	if s.gu, err = net.Listen("unix", gpath); err != nil {
		s.rl.Close()
		s.gl.Close()
		return nil, err
	}
	s.info = BulkInfo{Src: s.src.Handle(), Dst: s.dst.Handle(), Raw: s.rl.Addr().String(), GRPC: s.gl.Addr().String(), GRPCUnix: "unix://" + gpath}
	info := s.info
	if err := fi.Register(s.protocol(&info, s.bulkRegs)); err != nil {
		s.rl.Close()
		s.gl.Close()
		s.gu.Close()
		return nil, err
	}
	s.gs = grpc.NewServer(GRPCBulkServerOptions()...)
	s.gs.RegisterService(s.grpcDesc(), nil)
	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		s.serveRaw()
	}()
	for _, l := range []net.Listener{s.gl, s.gu} {
		go func() {
			defer s.wg.Done()
			_ = s.gs.Serve(l)
		}()
	}
	return s, nil
}

// bulkRegs are the server's three buffers as registered on one ferry
// instance.
type bulkRegs struct{ src, dst, sink *rpc.Bulk }

// register registers the server's buffers on fi: the GET source
// read-only, the PUT and OpBulkWrite targets write-only.
func (s *bulkServer) register(fi *rpc.Instance) (r bulkRegs, err error) {
	if r.src, err = fi.NewBulk([][]byte{s.srcBuf}, rpc.BulkRO); err != nil {
		return r, err
	}
	if r.dst, err = fi.NewBulk([][]byte{s.dstBuf}, rpc.BulkWO); err != nil {
		return r, err
	}
	r.sink, err = fi.NewBulk([][]byte{s.sinkBuf}, rpc.BulkWO)
	return r, err
}

// serveOn serves the bulk protocol on a second instance fi (whose first
// context must have Auto progress) from the same buffers, registered on
// fi: its OpBulkInfo answers fi's handles and the same raw and gRPC
// addresses.
func (s *bulkServer) serveOn(fi *rpc.Instance) error {
	regs, err := s.register(fi)
	if err != nil {
		return err
	}
	info := s.info
	info.Src, info.Dst = regs.src.Handle(), regs.dst.Handle()
	return fi.Register(s.protocol(&info, regs))
}

func (s *bulkServer) close() {
	s.gs.Stop()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.rl.Close()
	s.wg.Wait()
}

// protocol is the ferry bulk protocol. OpBulkWrite is CaRT's write: the
// input carries the origin's handle, the handler starts a GET on the
// request's connection and returns; the GET's callback (in the context's
// progress) replies. OpBulkInfo and OpBulkCheck do not block and run
// Inline (OpBulkCheck on the reader goroutine of the connection that put
// the bytes, so that it sees them).
func (s *bulkServer) protocol(info *BulkInfo, regs bulkRegs) rpc.Protocol {
	return rpc.Protocol{Name: "peers-bulk", Base: 4, Version: 0, RPCs: []rpc.RPC{
		{Name: "info", Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
			return r.Reply(info)
		}},
		{Name: "write", Handler: func(r *rpc.Incoming) error { return s.write(r, regs.sink) }},
		{Name: "check", Flags: rpc.Inline, Handler: s.check},
		{Name: "big", Handler: s.bigBuffers},
	}}
}

// bigBuffers answers OpBulkBig, allocating the large source (filled, so
// that every page is real) and target on the instance's first call.
func (s *bulkServer) bigBuffers(r *rpc.Incoming) error {
	s.bigMu.Lock()
	defer s.bigMu.Unlock()
	fi := r.Target().Instance()
	big := s.big[fi]
	if big == nil {
		src, dst := make([]byte, BulkBig), make([]byte, BulkBig)
		Pattern(src, seedServer)
		clear(dst)
		hs, err := fi.NewBulk([][]byte{src}, rpc.BulkRO)
		if err != nil {
			return err
		}
		hd, err := fi.NewBulk([][]byte{dst}, rpc.BulkWO)
		if err != nil {
			hs.Free()
			return err
		}
		big = &BulkInfo{Src: hs.Handle(), Dst: hd.Handle()}
		s.big[fi] = big
	}
	return r.Reply(big)
}

// check answers OpBulkCheck: the CRC32-C of the first N bytes of a
// server buffer.
func (s *bulkServer) check(r *rpc.Incoming) error {
	var in BulkCheckIn
	if err := r.Decode(&in); err != nil {
		return err
	}
	var b []byte
	switch in.Which {
	case BulkCheckDst:
		b = s.dstBuf
	case BulkCheckSink:
		b = s.sinkBuf
	}
	if in.N < 0 || in.N > int64(len(b)) {
		return &rpc.Error{Code: rpc.CodeInvalid, Msg: "bad check range"}
	}
	return r.Reply(U32(CRC32C(b[:in.N])))
}

// write answers OpBulkWrite: a GET of the client's bytes into sink (the
// sink buffer as registered on the request's instance).
func (s *bulkServer) write(r *rpc.Incoming, sink *rpc.Bulk) error {
	var in BulkWriteIn
	if err := r.Decode(&in); err != nil {
		return err
	}
	if in.N < 0 || in.N > sink.Len() {
		return &rpc.Error{Code: rpc.CodeInvalid, Msg: fmt.Sprintf("write of %d bytes", in.N)}
	}
	s.n.Add(1)
	_, err := r.Target().Transfer(rpc.BulkDesc{
		Op: rpc.BulkGet, Remote: in.H, Local: sink, Len: in.N, Via: r, Arg: r,
	}, bulkWriteDone)
	return err
}

// bulkWriteDone answers an OpBulkWrite once its GET has completed.
func bulkWriteDone(cp rpc.BulkCompletion) {
	r := cp.Desc.Arg.(*rpc.Incoming)
	if cp.Err != nil {
		_ = r.Fail(cp.Err)
		return
	}
	_ = r.Reply(nil)
}

// ---- raw stream floor ----

// Raw stream requests: an op byte and a u32 little-endian length. PUT:
// the length's bytes follow and the server answers one byte once it has
// them all. GET: the server answers with the length's bytes.
//
// The chunked floor (the shape of ferry's transfers, without ferry):
// the same five bytes, then a u32 offset. Chunk GET: the server answers
// with an 8-byte header (offset, length) and that range of its source.
// Chunk PUT: the range follows and lands at that offset of the
// connection's buffer, answered by one byte. Sum: the server answers
// with the CRC32-C (u32) of the first length bytes of the connection's
// buffer, where PUTs and chunk PUTs land.
const (
	rawBulkPut      = 'P'
	rawBulkGet      = 'G'
	rawBulkGetChunk = 'g'
	rawBulkPutChunk = 'p'
	rawBulkSum      = 's'
)

func (s *bulkServer) serveRaw() {
	for {
		c, err := s.rl.Accept()
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
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			_ = s.rawConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// rawConn serves one floor connection: buffered reads, one write per
// answer, the PUT target reused (one per connection).
func (s *bulkServer) rawConn(c net.Conn) error {
	br := bufio.NewReaderSize(c, 64<<10)
	var (
		hdr  [5]byte
		offb [4]byte
		chdr [8]byte
		buf  []byte // where PUTs land
		ack  = []byte{1}
	)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := int(binary.LittleEndian.Uint32(hdr[1:]))
		if n > BulkMax {
			return fmt.Errorf("peers: raw bulk of %d bytes", n)
		}
		off := 0
		if hdr[0] == rawBulkGetChunk || hdr[0] == rawBulkPutChunk {
			if _, err := io.ReadFull(br, offb[:]); err != nil {
				return err
			}
			if off = int(binary.LittleEndian.Uint32(offb[:])); off > BulkMax-n {
				return fmt.Errorf("peers: raw chunk of %d bytes at %d", n, off)
			}
		}
		if (hdr[0] == rawBulkPut || hdr[0] == rawBulkPutChunk || hdr[0] == rawBulkSum) && len(buf) < off+n {
			buf = append(buf, make([]byte, off+n-len(buf))...)
		}
		var err error
		switch hdr[0] {
		case rawBulkPut, rawBulkPutChunk:
			if _, err = io.ReadFull(br, buf[off:off+n]); err == nil {
				_, err = c.Write(ack)
			}
		case rawBulkGet:
			_, err = c.Write(s.srcBuf[:n])
		case rawBulkGetChunk:
			binary.LittleEndian.PutUint32(chdr[:], uint32(off))
			binary.LittleEndian.PutUint32(chdr[4:], uint32(n))
			bufs := net.Buffers{chdr[:], s.srcBuf[off : off+n]}
			_, err = bufs.WriteTo(c)
		case rawBulkSum:
			var sum [4]byte
			binary.LittleEndian.PutUint32(sum[:], CRC32C(buf[:n]))
			_, err = c.Write(sum[:])
		default:
			err = fmt.Errorf("peers: raw bulk op %q", hdr[0])
		}
		if err != nil {
			return err
		}
		s.n.Add(1)
	}
}

// ---- gRPC ----

// gRPC bulk method names (a hand-written service; messages are raw bytes
// with BulkCodec). Put and Get are unary (Get's request is a u32 length);
// PutStream is a client stream of chunks answered by the u64 total;
// GetStream a server stream of chunks answering a u32 length.
const (
	GRPCBulkPut       = "/ferry.peers.Bulk/Put"
	GRPCBulkGet       = "/ferry.peers.Bulk/Get"
	GRPCBulkPutStream = "/ferry.peers.Bulk/PutStream"
	GRPCBulkGetStream = "/ferry.peers.Bulk/GetStream"
)

// GRPCChunk is the message size of the gRPC streams.
const GRPCChunk = 1 << 20

// gRPC tuning of the bulk server and its clients: gRPC's default message
// limit is 4 MiB (receive) so it is raised above BulkMax, and the HTTP/2
// windows are fixed at 4 MiB per stream and per connection (the defaults
// are 64 KiB, grown by BDP estimation; setting them turns that off).
const (
	GRPCMaxMsg = BulkMax + 1<<20
	GRPCWindow = 4 << 20
)

// GRPCBulkServerOptions are the bulk gRPC server's options.
func GRPCBulkServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(BulkCodec{}),
		grpc.MaxRecvMsgSize(GRPCMaxMsg),
		grpc.MaxSendMsgSize(GRPCMaxMsg),
		grpc.InitialWindowSize(GRPCWindow),
		grpc.InitialConnWindowSize(GRPCWindow),
	}
}

// BulkCodec is a gRPC codec (encoding.CodecV2) for *[]byte messages that
// costs the least gRPC allows: Marshal hands the slice over without a
// copy, Unmarshal copies the received buffers once into the target's
// backing array (reused when it is large enough, so a client can land a
// message in place by passing a zero-length slice of its buffer).
type BulkCodec struct{}

// Marshal returns the bytes, not copied.
func (BulkCodec) Marshal(v any) (mem.BufferSlice, error) {
	p, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("peers: BulkCodec cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*p)}, nil
}

// Unmarshal copies data into *v.
func (BulkCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("peers: BulkCodec cannot unmarshal into %T", v)
	}
	n := data.Len()
	if cap(*p) < n {
		*p = make([]byte, n)
	}
	*p = (*p)[:n]
	data.CopyTo(*p)
	return nil
}

// Name is the codec's content-subtype.
func (BulkCodec) Name() string { return "ferry-bulk" }

// grpcBufs recycles the server's receive buffers.
var grpcBufs = sync.Pool{New: func() any { return new([]byte) }}

func (s *bulkServer) grpcDesc() *grpc.ServiceDesc {
	put := func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		bp := grpcBufs.Get().(*[]byte)
		defer grpcBufs.Put(bp)
		if err := dec(bp); err != nil {
			return nil, err
		}
		s.n.Add(1)
		var empty []byte
		return &empty, nil
	}
	get := func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		n, err := decodeLen(dec)
		if err != nil {
			return nil, err
		}
		s.n.Add(1)
		out := s.srcBuf[:n]
		return &out, nil
	}
	putStream := func(_ any, st grpc.ServerStream) error {
		bp := grpcBufs.Get().(*[]byte)
		defer grpcBufs.Put(bp)
		var total uint64
		for {
			err := st.RecvMsg(bp)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			total += uint64(len(*bp))
		}
		s.n.Add(1)
		ack := binary.LittleEndian.AppendUint64(nil, total)
		return st.SendMsg(&ack)
	}
	getStream := func(_ any, st grpc.ServerStream) error {
		n, err := decodeLen(st.RecvMsg)
		if err != nil {
			return err
		}
		s.n.Add(1)
		for off := 0; off < n; off += GRPCChunk {
			chunk := s.srcBuf[off:min(off+GRPCChunk, n)]
			if err := st.SendMsg(&chunk); err != nil {
				return err
			}
		}
		return nil
	}
	return &grpc.ServiceDesc{
		ServiceName: "ferry.peers.Bulk",
		HandlerType: (*benchService)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Put", Handler: put},
			{MethodName: "Get", Handler: get},
		},
		Streams: []grpc.StreamDesc{
			{StreamName: "PutStream", Handler: putStream, ClientStreams: true},
			{StreamName: "GetStream", Handler: getStream, ServerStreams: true},
		},
	}
}

// decodeLen reads a u32 length request.
func decodeLen(dec func(any) error) (int, error) {
	var b [4]byte
	p := b[:0]
	if err := dec(&p); err != nil {
		return 0, err
	}
	if len(p) != 4 {
		return 0, errors.New("peers: bad length request")
	}
	n := int(binary.LittleEndian.Uint32(p))
	if n > BulkMax {
		return 0, fmt.Errorf("peers: %d bytes asked for", n)
	}
	return n, nil
}
