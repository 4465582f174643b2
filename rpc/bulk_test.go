package rpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// bulkPair is a listening server and a client that knows it, over
// loopback TCP, each with one context.
type bulkPair struct {
	srv, cli   *rpc.Instance
	sctx, cctx *rpc.Context
	peer       *rpc.Endpoint
}

func newBulkPair(t testing.TB, o rpc.Options) *bulkPair {
	t.Helper()
	return newBulkPairOn(t, "tcp://127.0.0.1:0", o)
}

// newBulkPairOn is newBulkPair with the server listening on listen (over
// o.Transports).
func newBulkPairOn(t testing.TB, listen string, o rpc.Options) *bulkPair {
	t.Helper()
	so := o
	so.Listen, so.Logger = listen, quietLogger()
	srv, err := rpc.New(so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	co := o
	co.Logger = quietLogger()
	cli, err := rpc.New(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if err := cli.Group().Add(0, srv.URI()); err != nil {
		t.Fatal(err)
	}
	p := &bulkPair{srv: srv, cli: cli, peer: &rpc.Endpoint{Rank: 0, Tag: 0}}
	p.sctx = newCtx(t, srv, rpc.ContextOptions{Auto: true})
	p.cctx = newCtx(t, cli, rpc.ContextOptions{Auto: true})
	return p
}

// The test protocol's RPCs run Inline, on the server connection's reader
// goroutine, which is also where bulk data lands: the server's buffers
// are only touched there, so the race detector sees every access ordered
// (it cannot see the order that a TCP round trip gives).
const bulkTestBase = 0x42

var (
	opAlloc = rpc.MakeOpcode(bulkTestBase, 1, 0)
	opSums  = rpc.MakeOpcode(bulkTestBase, 1, 1)
)

// allocIn asks the server to register size bytes made from seed, in
// pieces, with perm.
type allocIn struct {
	seed   uint64
	size   int
	pieces int
	perm   rpc.BulkPerm
}

func (a *allocIn) AppendBinary(b []byte) ([]byte, error) {
	return fmt.Appendf(b, "%d %d %d %d", a.seed, a.size, a.pieces, a.perm), nil
}

func (a *allocIn) UnmarshalBinary(b []byte) error {
	_, err := fmt.Sscanf(string(b), "%d %d %d %d", &a.seed, &a.size, &a.pieces, &a.perm)
	return err
}

// sumsIn asks for the CRCs of a buffer before, inside and after a range.
type sumsIn struct {
	key    uint64
	off, n int
	out    [3]uint32
}

func (q *sumsIn) AppendBinary(b []byte) ([]byte, error) {
	return fmt.Appendf(b, "%d %d %d", q.key, q.off, q.n), nil
}

func (q *sumsIn) UnmarshalBinary(b []byte) error {
	_, err := fmt.Sscanf(string(b), "%d %d %d", &q.out[0], &q.out[1], &q.out[2])
	return err
}

func rangeSums(all []byte, off, n int) [3]uint32 {
	return [3]uint32{crc32.ChecksumIEEE(all[:off]), crc32.ChecksumIEEE(all[off : off+n]), crc32.ChecksumIEEE(all[off+n:])}
}

type sumsOut [3]uint32

func (o sumsOut) AppendBinary(b []byte) ([]byte, error) {
	return fmt.Appendf(b, "%d %d %d", o[0], o[1], o[2]), nil
}

// serveBulkTest registers the test protocol on the pair's server.
func (p *bulkPair) serveBulkTest(t testing.TB) {
	if err := p.srv.Register(bulkTestProtocol(p.srv)); err != nil {
		t.Fatal(err)
	}
}

// bulkTestProtocol is the bulk test protocol served by in: allocate a
// handle over a pseudo-random buffer cut into pieces, and report the
// checksums of a range of one and of what surrounds it.
func bulkTestProtocol(in *rpc.Instance) rpc.Protocol {
	var mu sync.Mutex
	bufs := map[uint64][]byte{}
	return rpc.Protocol{Name: "bulktest", Base: bulkTestBase, Version: 1, RPCs: []rpc.RPC{
		{Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
			var a allocIn
			if err := r.Decode(&a); err != nil {
				return err
			}
			segs, all := splitBuf(rand.New(rand.NewPCG(a.seed, 7)), a.size, a.pieces)
			b, err := in.NewBulk(segs, a.perm)
			if err != nil {
				return err
			}
			mu.Lock()
			bufs[b.Handle().Key] = all
			mu.Unlock()
			return r.Reply(b.Handle())
		}},
		{Flags: rpc.Inline, Handler: func(r *rpc.Incoming) error {
			var key uint64
			var off, n int
			if _, err := fmt.Sscanf(string(rawBody(r)), "%d %d %d", &key, &off, &n); err != nil {
				return err
			}
			mu.Lock()
			all := bufs[key]
			mu.Unlock()
			return r.Reply(sumsOut(rangeSums(all, off, n)))
		}},
	}}
}

// rawBody returns an incoming request's encoded input.
func rawBody(r *rpc.Incoming) []byte {
	var b rpc.Bytes
	_ = r.Decode(&b)
	return b
}

// remote registers a buffer on the server made from seed; it returns its
// handle and a copy of its content.
func (p *bulkPair) remote(t testing.TB, seed uint64, size, pieces int, perm rpc.BulkPerm) (rpc.BulkHandle, []byte) {
	t.Helper()
	var h rpc.BulkHandle
	if err := p.cctx.Call(context.Background(), *p.peer, opAlloc, &allocIn{seed, size, pieces, perm}, &h); err != nil {
		t.Fatal(err)
	}
	_, all := splitBuf(rand.New(rand.NewPCG(seed, 7)), size, pieces)
	return h, all
}

// sums returns the server buffer's CRCs before, inside and after a range.
func (p *bulkPair) sums(t testing.TB, key uint64, off, n int) [3]uint32 {
	t.Helper()
	q := &sumsIn{key: key, off: off, n: n}
	if err := p.cctx.Call(context.Background(), *p.peer, opSums, q, q); err != nil {
		t.Fatal(err)
	}
	return q.out
}

// splitBuf cuts n random bytes into pieces of irregular sizes.
func splitBuf(rng *rand.Rand, n int, pieces int) ([][]byte, []byte) {
	all := make([]byte, n)
	for i := range all {
		all[i] = byte(rng.Uint32())
	}
	var segs [][]byte
	rest := all
	for i := 0; i < pieces-1 && len(rest) > 0; i++ {
		k := rng.IntN(len(rest) + 1)
		segs = append(segs, rest[:k:k])
		rest = rest[k:]
	}
	return append(segs, rest), all
}

func register(t testing.TB, in *rpc.Instance, segs [][]byte, perm rpc.BulkPerm) *rpc.Bulk {
	t.Helper()
	b, err := in.NewBulk(segs, perm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Free)
	return b
}

// checkTransfer moves n bytes with op between random offsets (at least
// low) of a fresh server buffer and a local one, each cut into at least
// low+1 segments, and checks the data on both sides (the server's through
// p.sums) and that nothing outside the range changed.
func checkTransfer(t *testing.T, p *bulkPair, rng *rand.Rand, op rpc.BulkOp, n, low int) {
	t.Helper()
	roff, loff := low+rng.IntN(5000), low+rng.IntN(3000)
	rh, rall := p.remote(t, rng.Uint64(), n+roff+low+rng.IntN(100), 1+low+rng.IntN(4), rpc.BulkRW)
	lsegs, lall := splitBuf(rng, n+loff+low+rng.IntN(100), 1+low+rng.IntN(4))
	lb := register(t, p.cli, lsegs, rpc.BulkRW)
	lbefore := bytes.Clone(lall)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.cctx.TransferWait(ctx, rpc.BulkDesc{
		Op: op, Remote: rh, RemoteOff: int64(roff),
		Local: lb, LocalOff: int64(loff), Len: int64(n), Peer: p.peer,
	})
	if err != nil {
		t.Fatalf("%v of %d bytes: %v", op, n, err)
	}
	if op == rpc.BulkGet {
		if !bytes.Equal(lall[loff:loff+n], rall[roff:roff+n]) {
			t.Fatalf("GET of %d bytes: data differs", n)
		}
		if !bytes.Equal(lall[:loff], lbefore[:loff]) || !bytes.Equal(lall[loff+n:], lbefore[loff+n:]) {
			t.Fatalf("GET of %d bytes wrote outside its range", n)
		}
		return
	}
	want := rangeSums(rall, roff, n)
	want[1] = crc32.ChecksumIEEE(lall[loff : loff+n])
	if got := p.sums(t, rh.Key, roff, n); got != want {
		t.Fatalf("PUT of %d bytes: server CRCs before/in/after the range %x, want %x", n, got, want)
	}
}

func TestBulkIntegrity(t *testing.T) {
	p := newBulkPair(t, rpc.Options{})
	p.serveBulkTest(t)
	eager, chunk, seg := rpc.DefaultEagerLimit, rpc.DefaultChunkSize, rpc.DefaultSegmentLimit
	sizes := []int{0, 1, 4095, 4096, eager - 1, eager, eager + 1, 100003, chunk + 7, seg - 1, seg + 1, 5<<20 + 3}
	if !testing.Short() {
		sizes = append(sizes, 64<<20)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range sizes {
		for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
			t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
				checkTransfer(t, p, rng, op, n, 0)
			})
		}
	}
	st := p.cctx.BulkStats()
	if st.Active != 0 || st.InFlight != 0 || st.Failed != 0 {
		t.Fatalf("stats after the transfers: %+v", st)
	}
	// Every transfer is counted under the protocol its size chose.
	var want [4]uint64
	for _, n := range sizes {
		for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
			switch {
			case n <= eager:
				want[rpc.Eager]++
			case op == rpc.BulkPut && n <= seg:
				want[rpc.Segmented]++
			default:
				want[rpc.Rendezvous]++
			}
		}
	}
	if st.Eager != want[rpc.Eager] || st.Segmented != want[rpc.Segmented] || st.Rendezvous != want[rpc.Rendezvous] {
		t.Errorf("transfers by protocol: eager %d segmented %d rendezvous %d, want %v", st.Eager, st.Segmented, st.Rendezvous, want[1:])
	}
	ms := p.cli.Metrics().Snapshot()
	if got := ms.Total("ferry_bulk_rendezvous_transfers"); got != float64(want[rpc.Rendezvous]) {
		t.Errorf("ferry_bulk_rendezvous_transfers_total = %v, want %d", got, want[rpc.Rendezvous])
	}
}

// TestBulkNoDataCRC moves every protocol's sizes between instances that
// leave data CRCs out (Options.NoDataCRC): the bytes still arrive intact
// and in place (checked by CRC on the far side), eager, pushed and pulled.
func TestBulkNoDataCRC(t *testing.T) {
	p := newBulkPair(t, rpc.Options{NoDataCRC: true})
	p.serveBulkTest(t)
	eager, chunk, seg := rpc.DefaultEagerLimit, rpc.DefaultChunkSize, rpc.DefaultSegmentLimit
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, eager + 1, 100003, chunk + 7, seg + 1, 3<<20 + 5} {
		for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
			t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
				checkTransfer(t, p, rng, op, n, 0)
			})
		}
	}
}

func TestBulkConcurrent(t *testing.T) {
	p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{ChunkSize: 64 << 10, Window: 128 << 10, ConnLimit: 256 << 10}})
	p.serveBulkTest(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 24
	type job struct {
		op         rpc.BulkOp
		rall, lall []byte
		want       []byte
		desc       rpc.BulkDesc
	}
	jobs := make([]*job, n)
	for i := range jobs {
		size := rng.IntN(3 << 20)
		rh, rall := p.remote(t, rng.Uint64(), size, 3, rpc.BulkRW)
		lsegs, lall := splitBuf(rng, size, 2)
		j := &job{op: []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut}[i%2], rall: rall, lall: lall}
		if j.op == rpc.BulkGet {
			j.want = bytes.Clone(rall)
		} else {
			j.want = bytes.Clone(lall)
		}
		j.desc = rpc.BulkDesc{Op: j.op, Remote: rh,
			Local: register(t, p.cli, lsegs, rpc.BulkRW), Len: int64(size), Peer: p.peer}
		jobs[i] = j
	}
	// Half through callbacks and progress, half blocking.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, j := range jobs {
		wg.Add(1)
		if i%4 < 2 {
			go func() {
				defer wg.Done()
				errs <- p.cctx.TransferWait(context.Background(), j.desc)
			}()
			continue
		}
		if _, err := p.cctx.Transfer(j.desc, func(c rpc.BulkCompletion) { errs <- c.Err; wg.Done() }); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, j := range jobs {
		if j.op == rpc.BulkGet && !bytes.Equal(j.lall, j.want) {
			t.Fatalf("job %d (GET, %d bytes): data differs", i, len(j.want))
		}
		if j.op == rpc.BulkPut && p.sums(t, j.desc.Remote.Key, 0, len(j.want))[1] != crc32.ChecksumIEEE(j.want) {
			t.Fatalf("job %d (PUT, %d bytes): data differs", i, len(j.want))
		}
	}
	if st := p.cctx.BulkStats(); st.Completed != n || st.InFlight != 0 || st.Parked != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestBulkPermissionsAndErrors(t *testing.T) {
	p := newBulkPair(t, rpc.Options{})
	ctx := context.Background()
	buf := make([]byte, 1<<20)
	ro := register(t, p.srv, [][]byte{buf}, rpc.BulkRO)
	wo := register(t, p.srv, [][]byte{make([]byte, 1<<20)}, rpc.BulkWO)
	local := register(t, p.cli, [][]byte{make([]byte, 1<<20)}, rpc.BulkRW)
	for _, tc := range []struct {
		name string
		d    rpc.BulkDesc
		want error
	}{
		{"put into read-only", rpc.BulkDesc{Op: rpc.BulkPut, Remote: ro.Handle(), Len: 10}, rpc.ErrNoPerm},
		{"get from write-only", rpc.BulkDesc{Op: rpc.BulkGet, Remote: wo.Handle(), Len: 10}, rpc.ErrNoPerm},
		{"remote range", rpc.BulkDesc{Op: rpc.BulkGet, Remote: ro.Handle(), RemoteOff: 1 << 19, Len: 1<<19 + 1}, rpc.ErrInvalid},
		{"local range", rpc.BulkDesc{Op: rpc.BulkGet, Remote: ro.Handle(), LocalOff: 1, Len: 1 << 20}, rpc.ErrInvalid},
		{"no peer", rpc.BulkDesc{Op: rpc.BulkGet, Remote: ro.Handle(), Len: 10, Peer: nil}, rpc.ErrInvalid},
	} {
		d := tc.d
		d.Local = local
		if tc.name != "no peer" {
			d.Peer = p.peer
		}
		if err := p.cctx.TransferWait(ctx, d); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	// The holder refuses what the handle it has does not allow: a forged
	// permission, a freed handle.
	forged := ro.Handle()
	forged.Perm = rpc.BulkRW
	err := p.cctx.TransferWait(ctx, rpc.BulkDesc{Op: rpc.BulkPut, Remote: forged, Local: local, Len: 100 << 10, Peer: p.peer})
	var e *rpc.Error
	if !errors.Is(err, rpc.ErrNoPerm) || !errors.As(err, &e) || !e.Remote {
		t.Errorf("PUT with a forged permission: %v", err)
	}
	gone := register(t, p.srv, [][]byte{make([]byte, 4096)}, rpc.BulkRW)
	h := gone.Handle()
	gone.Free()
	if err := p.cctx.TransferWait(ctx, rpc.BulkDesc{Op: rpc.BulkGet, Remote: h, Local: local, Len: 4096, Peer: p.peer}); !errors.Is(err, rpc.ErrNotFound) {
		t.Errorf("GET from a freed handle: %v", err)
	}
	// The connection still works.
	if err := p.cctx.TransferWait(ctx, rpc.BulkDesc{Op: rpc.BulkGet, Remote: ro.Handle(), Local: local, Len: 1 << 20, Peer: p.peer}); err != nil {
		t.Fatal(err)
	}
}

// moved reports whether some MiB have moved, by either side (a
// rendezvous PUT is pulled by the server).
func (p *bulkPair) moved() bool {
	return p.cctx.BulkStats().Bytes+p.sctx.BulkStats().Bytes > 1<<20
}

// slowBulk is a pair whose transfers move a chunk at a time.
func slowBulk(t *testing.T) (*bulkPair, *rpc.Bulk, *rpc.Bulk) {
	p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{ChunkSize: 16 << 10, Window: 16 << 10}})
	r := register(t, p.srv, [][]byte{make([]byte, 256<<20)}, rpc.BulkRW)
	l := register(t, p.cli, [][]byte{make([]byte, 256<<20)}, rpc.BulkRW)
	return p, r, l
}

func TestBulkAbort(t *testing.T) {
	for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
		t.Run(op.String(), func(t *testing.T) {
			p, r, l := slowBulk(t)
			done := make(chan error, 1)
			x, err := p.cctx.Transfer(rpc.BulkDesc{Op: op, Remote: r.Handle(), Local: l, Len: 256 << 20, Peer: p.peer, Timeout: time.Minute},
				func(c rpc.BulkCompletion) { done <- c.Err })
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "some progress", p.moved)
			if !x.Abort() {
				t.Fatal("Abort of a running transfer returned false")
			}
			if err := recv(t, done, "completion"); !errors.Is(err, rpc.ErrCanceled) {
				t.Fatalf("aborted transfer: %v", err)
			}
			if x.Abort() {
				t.Fatal("second Abort returned true")
			}
			if st := p.cctx.BulkStats(); st.Active != 0 || st.InFlight != 0 {
				t.Fatalf("stats after abort: %+v", st)
			}
			// The pair still transfers.
			if err := p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: op, Remote: r.Handle(), Local: l, Len: 1 << 20, Peer: p.peer}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestBulkContextCancel(t *testing.T) {
	p, r, l := slowBulk(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitFor(t, "progress", func() bool { return p.cctx.BulkStats().Bytes > 1<<20 })
		cancel()
	}()
	err := p.cctx.TransferWait(ctx, rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l, Len: 256 << 20, Peer: p.peer})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled transfer: %v", err)
	}
}

func TestBulkPeerDies(t *testing.T) {
	for _, op := range []rpc.BulkOp{rpc.BulkGet, rpc.BulkPut} {
		t.Run(op.String(), func(t *testing.T) {
			p, r, l := slowBulk(t)
			done := make(chan error, 1)
			go func() {
				done <- p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: op, Remote: r.Handle(), Local: l, Len: 256 << 20, Peer: p.peer})
			}()
			waitFor(t, "progress", p.moved)
			p.srv.Close()
			err := recv(t, done, "completion")
			if !errors.Is(err, rpc.ErrUnreachable) && !errors.Is(err, rpc.ErrShutdown) {
				t.Fatalf("transfer from a dead peer: %v", err)
			}
			if st := p.cctx.BulkStats(); st.Active != 0 {
				t.Fatalf("stats: %+v", st)
			}
		})
	}
}

func TestBulkTimeout(t *testing.T) {
	p, r, l := slowBulk(t)
	err := p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkGet, Remote: r.Handle(), Local: l, Len: 256 << 20, Peer: p.peer, Timeout: 50 * time.Millisecond})
	if !errors.Is(err, rpc.ErrTimedOut) {
		t.Fatalf("transfer past its timeout: %v", err)
	}
}

func TestBulkHandleEncoding(t *testing.T) {
	h := rpc.BulkHandle{Key: 0x1122334455667788, Len: 12345, Perm: rpc.BulkRW, Rank: 3, Tag: 2, URI: "tcp://127.0.0.1:5"}
	b, err := h.AppendBinary([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	var g rpc.BulkHandle
	rest, err := g.Decode(append(b[1:], "tail"...))
	if err != nil || g != h || string(rest) != "tail" {
		t.Fatalf("decoded %+v rest %q err %v", g, rest, err)
	}
	for i := range len(b) - 1 {
		if err := g.UnmarshalBinary(b[1 : 1+i]); !errors.Is(err, rpc.ErrMalformed) {
			t.Fatalf("truncated to %d: %v", i, err)
		}
	}
}

// Free waits for a peer's PUT chunk being written into the buffer, and
// after it nothing lands there: later chunks are refused.
func TestBulkFreeDuringPut(t *testing.T) {
	p := newBulkPair(t, rpc.Options{Bulk: rpc.BulkOptions{ChunkSize: 16 << 10, Window: 16 << 10, SegmentLimit: 64 << 20}})
	src := register(t, p.cli, [][]byte{bytes.Repeat([]byte{1}, 64<<20)}, rpc.BulkRO)
	// A loaded machine may finish the PUT before the test gets to Free:
	// try again then.
	for attempt := 0; attempt < 3; attempt++ {
		dst, err := p.srv.NewBulk([][]byte{make([]byte, 64<<20)}, rpc.BulkWO)
		if err != nil {
			t.Fatal(err)
		}
		before := p.cctx.BulkStats().Bytes
		done := make(chan error, 1)
		go func() {
			done <- p.cctx.TransferWait(context.Background(), rpc.BulkDesc{Op: rpc.BulkPut, Remote: dst.Handle(), Local: src, Len: 64 << 20, Peer: p.peer})
		}()
		waitFor(t, "some chunks acked", func() bool { return p.cctx.BulkStats().Bytes > before+256<<10 || len(done) > 0 })
		if len(done) > 0 {
			<-done
			dst.Free()
			continue
		}
		dst.Free()
		if err := recv(t, done, "the PUT's completion"); !errors.Is(err, rpc.ErrNotFound) {
			t.Fatalf("PUT into a handle freed midway: %v", err)
		}
		return
	}
	t.Fatal("every PUT finished before the test could free its target")
}
