package rpc

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// BulkPerm says what peers may do with a registered buffer (crt_bulk_perm_t).
type BulkPerm uint8

// Bulk permissions, as seen by the peer that holds the handle. Wire
// constants; append only.
const (
	// BulkRO: peers may read it (GET); locally it is a PUT's source.
	BulkRO BulkPerm = 1
	// BulkWO: peers may write it (PUT); locally it is a GET's target.
	BulkWO BulkPerm = 2
	// BulkRW: both.
	BulkRW BulkPerm = BulkRO | BulkWO
)

func (p BulkPerm) String() string {
	switch p {
	case BulkRO:
		return "ro"
	case BulkWO:
		return "wo"
	case BulkRW:
		return "rw"
	}
	return fmt.Sprintf("perm(%d)", uint8(p))
}

func (p BulkPerm) valid() bool { return p >= BulkRO && p <= BulkRW }

// Bulk is a registered scatter-gather list of byte slices
// (crt_bulk_create): peers read it with GET or write it with PUT through
// its BulkHandle, and local transfers use it as their source or target.
// The slices are used in place: nothing is copied at registration, and
// transferred bytes land in them (or leave from them) without an
// intermediate copy. The caller must not change a slice while a transfer
// reads it, nor read it while a transfer writes it.
//
// A Bulk stays registered until Free. It is safe for concurrent use.
type Bulk struct {
	in    *Instance
	key   uint64
	segs  [][]byte
	offs  []int64 // offs[i] is where segs[i] starts
	size  int64
	perm  BulkPerm
	freed atomic.Bool

	// wmu guards writers: peers' PUT chunks being written into the
	// buffer right now; Free waits for them (wdone is signalled when the
	// last one ends).
	wmu     sync.Mutex
	writers int
	wdone   *sync.Cond

	// bound names the origin (crt_bulk_bind): set by Bind.
	bound atomic.Pointer[bulkOrigin]

	// conn, for an overflowing output's handle, is the connection of the
	// peer that pulls it (no other peer finds it), and acct that peer's
	// account, which frees it if that connection fails.
	conn *msgr.Conn
	acct *peer
	// held, for an overflowing output, is what it counts against its
	// peer's unpulled outputs (chOutputs).
	held int64

	// seg1 and off1 hold segs and offs of a one-segment handle (the
	// common case, and every overflow handle) without two allocations.
	seg1 [1][]byte
	off1 [1]int64
}

type bulkOrigin struct {
	rank uint32
	tag  uint16
	uri  string
}

// bulkRegistry maps keys to the instance's registered buffers.
//
// A key is the only credential a peer needs to read or write a buffer
// (as in CaRT, a handle passed on to a third party works for it), so keys
// are drawn from a cryptographically seeded generator: a peer that knows
// some keys cannot guess the others, and a restarted instance's keys
// differ from its predecessor's.
type bulkRegistry struct {
	mu  sync.RWMutex
	m   map[uint64]*Bulk
	rng *mrand.ChaCha8 // guarded by mu
}

func (r *bulkRegistry) init() {
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	r.rng = mrand.NewChaCha8(seed)
	r.m = map[uint64]*Bulk{}
}

func (r *bulkRegistry) add(b *Bulk) {
	r.mu.Lock()
	for {
		k := r.rng.Uint64()
		if _, taken := r.m[k]; !taken && k != 0 {
			b.key = k
			break
		}
	}
	r.m[b.key] = b
	r.mu.Unlock()
}

// peerBulk returns the handle with key that the peer on conn may access,
// or nil: a handle registered for one connection's peer (an overflowing
// output) is not found by the others.
func (in *Instance) peerBulk(conn *msgr.Conn, key uint64) *Bulk {
	b := in.bulks.get(key)
	if b == nil || (b.conn != nil && b.conn != conn) {
		return nil
	}
	return b
}

func (r *bulkRegistry) get(key uint64) *Bulk {
	r.mu.RLock()
	b := r.m[key]
	r.mu.RUnlock()
	return b
}

func (r *bulkRegistry) remove(key uint64) *Bulk {
	r.mu.Lock()
	b := r.m[key]
	delete(r.m, key)
	r.mu.Unlock()
	return b
}

// count returns how many handles are registered.
func (r *bulkRegistry) count() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.m)
}

// NewBulk registers segs with permission perm and returns its handle
// (crt_bulk_create). Empty slices are allowed; the handle's length is the
// sum of the slices'.
func (in *Instance) NewBulk(segs [][]byte, perm BulkPerm) (*Bulk, error) {
	if !perm.valid() {
		return nil, fmt.Errorf("%w: bulk permission %v", ErrInvalid, perm)
	}
	if in.closed.Load() {
		return nil, ErrShutdown
	}
	b := newBulk(in, segs, perm)
	in.bulks.add(b)
	return b, nil
}

func newBulk(in *Instance, segs [][]byte, perm BulkPerm) *Bulk {
	b := &Bulk{in: in, perm: perm}
	if len(segs) == 1 {
		b.segs, b.offs = b.seg1[:0], b.off1[:0]
	} else {
		b.segs = make([][]byte, 0, len(segs))
		b.offs = make([]int64, 0, len(segs))
	}
	for _, s := range segs {
		if len(s) == 0 {
			continue
		}
		b.segs = append(b.segs, s)
		b.offs = append(b.offs, b.size)
		b.size += int64(len(s))
	}
	return b
}

// Free deregisters b (crt_bulk_free): peers can no longer start a
// transfer on it. Transfers that use it as their local side must have
// completed. Peers' writes into b end first: Free waits for a PUT chunk being read into the
// buffer (or for its connection to fail), stops the pulls of rendezvous
// PUTs into it (their initiators get ErrNotFound) once their chunk in
// progress has landed, and waits for same-host peers writing into it
// directly to report done (or for their connections to fail). Once Free
// returns nothing more is written into the buffer by a peer. Peers'
// reads are not waited for: chunks of a GET served by messages refer to
// the buffer until they are sent (on a lossless connection, until the
// peer acknowledges them), and a same-host peer copying it directly may
// go on until its transfer ends, so keep the buffer's contents until
// the peers' GETs of it complete (waiting for them here could block a
// connection's reader on the very message that ends them). Because it
// may wait for a peer, do not call it from an Inline handler: that runs
// on a connection's reader, which may be what has to deliver the peer's
// word.
func (b *Bulk) Free() {
	if b.freed.Swap(true) {
		return
	}
	if b.acct != nil {
		b.acct.dropOutput(b)
	}
	b.in.bulks.remove(b.key)
	// Rendezvous PUTs being pulled into b for peers stop (their
	// initiators get ErrNotFound); the write each holds ends when its
	// last chunk in progress has landed.
	if b.perm&BulkWO != 0 && b.in.charged[chPulls].Load() > 0 {
		var pulls []*BulkTransfer
		b.in.peers.Range(func(_, v any) bool {
			pulls = v.(*peer).pullsInto(b, pulls)
			return true
		})
		for _, t := range pulls {
			t.fail(errTargetFreed())
		}
	}
	b.wmu.Lock()
	for b.writers > 0 {
		if b.wdone == nil {
			b.wdone = sync.NewCond(&b.wmu)
		}
		b.wdone.Wait()
	}
	b.wmu.Unlock()
}

// acquireWrite registers a peer's write into b; false if b was freed.
func (b *Bulk) acquireWrite() bool {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.freed.Load() {
		return false
	}
	b.writers++
	return true
}

// releaseWrite ends a write acquireWrite registered.
func (b *Bulk) releaseWrite() {
	b.wmu.Lock()
	b.writers--
	if b.writers == 0 && b.wdone != nil {
		b.wdone.Broadcast()
	}
	b.wmu.Unlock()
}

// Len returns the registered length in bytes.
func (b *Bulk) Len() int64 { return b.size }

// Perm returns the registered permission.
func (b *Bulk) Perm() BulkPerm { return b.perm }

// Segments returns the registered slices (without empty ones).
func (b *Bulk) Segments() [][]byte { return b.segs }

// Bind records c's endpoint and address in b's handle (crt_bulk_bind), so
// that a third party that receives the handle can transfer with it
// directly, without the RPC that carried it.
func (b *Bulk) Bind(c *Context) error {
	in := b.in
	if c.in != in {
		return fmt.Errorf("%w: context of another instance", ErrInvalid)
	}
	uri := in.uri
	if u, err := in.group.URI(in.rank, c.tag); err == nil && u != "" {
		uri = u
	}
	if uri == "" {
		return fmt.Errorf("%w: a client-only instance has no address to bind", ErrInvalid)
	}
	b.bound.Store(&bulkOrigin{rank: in.rank, tag: c.tag, uri: uri})
	return nil
}

// Handle returns the descriptor a peer needs to transfer with b; it
// travels in an RPC input or output (it implements BinaryAppender).
func (b *Bulk) Handle() BulkHandle {
	h := BulkHandle{Key: b.key, Len: b.size, Perm: b.perm}
	if o := b.bound.Load(); o != nil {
		h.Rank, h.Tag, h.URI = o.rank, o.tag, o.uri
	}
	return h
}

// slice appends to dst the pieces of b's segments that cover [off,
// off+n), which the caller has checked lie inside b.
func (b *Bulk) slice(dst [][]byte, off, n int64) [][]byte {
	if n == 0 {
		return dst
	}
	i := sort.Search(len(b.offs), func(i int) bool { return b.offs[i] > off }) - 1
	for n > 0 {
		s := b.segs[i][off-b.offs[i]:]
		if int64(len(s)) > n {
			s = s[:n]
		}
		dst = append(dst, s)
		n -= int64(len(s))
		off += int64(len(s))
		i++
	}
	return dst
}

// inRange reports whether [off, off+n) lies inside b.
func (b *Bulk) inRange(off, n uint64) bool {
	return off <= uint64(b.size) && n <= uint64(b.size)-off
}

// copyIn copies src into b at off (the eager path, for chunks too small
// to be placed).
func (b *Bulk) copyIn(off int64, src [][]byte) {
	for _, s := range src {
		for len(s) > 0 {
			var dst [1][]byte
			d := b.slice(dst[:0], off, int64(len(s)))
			n := copy(d[0], s)
			s = s[n:]
			off += int64(n)
		}
	}
}

// BulkHandle is a peer's view of a registered buffer (crt_bulk_t as it
// travels in an RPC): its key, length and permission, and, when it was
// bound, the rank, tag and address of its origin. Encode it into an input
// or output with AppendBinary; decode it with Decode (or UnmarshalBinary
// when it is the whole payload).
type BulkHandle struct {
	Key  uint64
	Len  int64
	Perm BulkPerm
	// Rank, Tag and URI name the origin of a bound handle (URI empty:
	// not bound).
	Rank uint32
	Tag  uint16
	URI  string
}

// maxBulkURI bounds the URI a handle carries.
const maxBulkURI = 1024

// bulkHandleFixed is the encoded length without the URI.
const bulkHandleFixed = 8 + 8 + 1 + 4 + 2 + 2

// AppendBinary appends the handle's encoding (little-endian: key u64, len
// u64, perm u8, rank u32, tag u16, URI length u16 and bytes).
func (h BulkHandle) AppendBinary(b []byte) ([]byte, error) {
	if len(h.URI) > maxBulkURI {
		return b, fmt.Errorf("%w: bulk URI of %d bytes", ErrInvalid, len(h.URI))
	}
	b = binary.LittleEndian.AppendUint64(b, h.Key)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.Len))
	b = append(b, byte(h.Perm))
	b = binary.LittleEndian.AppendUint32(b, h.Rank)
	b = binary.LittleEndian.AppendUint16(b, h.Tag)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h.URI)))
	return append(b, h.URI...), nil
}

// Decode parses a handle at the start of p and returns what follows it.
func (h *BulkHandle) Decode(p []byte) (rest []byte, err error) {
	if len(p) < bulkHandleFixed {
		return nil, fmt.Errorf("%w: bulk handle of %d bytes", ErrMalformed, len(p))
	}
	h.Key = binary.LittleEndian.Uint64(p)
	h.Len = int64(binary.LittleEndian.Uint64(p[8:]))
	h.Perm = BulkPerm(p[16])
	h.Rank = binary.LittleEndian.Uint32(p[17:])
	h.Tag = binary.LittleEndian.Uint16(p[21:])
	n := int(binary.LittleEndian.Uint16(p[23:]))
	p = p[bulkHandleFixed:]
	if h.Len < 0 || !h.Perm.valid() || n > maxBulkURI || len(p) < n {
		return nil, fmt.Errorf("%w: bad bulk handle", ErrMalformed)
	}
	h.URI = string(p[:n])
	return p[n:], nil
}

// UnmarshalBinary decodes a handle that is the whole of p.
func (h *BulkHandle) UnmarshalBinary(p []byte) error {
	rest, err := h.Decode(p)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%w: %d bytes after the bulk handle", ErrMalformed, len(rest))
	}
	return err
}

// Bound reports whether the handle names its origin.
func (h BulkHandle) Bound() bool { return h.URI != "" }

// overflowBulk registers an RPC's data segment as a read-only handle for
// its receiver to pull. With a set (an output), only a's peer finds the
// handle, the account lists it (its connection's end frees it), and held
// is what it took of a's unpulled outputs (chOutputs), given back when it
// is freed.
func (in *Instance) overflowBulk(data [][]byte, a *peer, held int64) *Bulk {
	b := newBulk(in, data, BulkRO)
	if a == nil {
		in.bulks.add(b)
		return b // a request's input: any peer that has its key may pull it
	}
	b.conn, b.acct, b.held = a.conn, a, held
	in.bulks.add(b)
	if !a.addOutput(b) {
		// The connection failed already: nothing will pull it.
		b.Free()
	}
	return b
}

// insertOverflow inserts an overflow descriptor between the RPC header at
// the start of front and the body after it.
func insertOverflow(front []byte, key, n uint64) []byte {
	var d [wire.OverflowLen]byte
	wire.PutOverflow(d[:], key, n)
	front = append(front, d[:]...)
	copy(front[wire.HeaderLen+wire.OverflowLen:], front[wire.HeaderLen:len(front)-wire.OverflowLen])
	copy(front[wire.HeaderLen:], d[:])
	return front
}

// BulkHandles returns how many buffers are registered, including the
// handles of overflowing inputs and outputs in flight.
func (in *Instance) BulkHandles() int { return in.bulks.count() }
