package rpc

// The direct bulk path (Mercury na+sm's cross-memory attach): when a
// transfer's connection joins two processes on one host and the kernel
// vouches for the peer's process ID (msgr.Conn.PeerProcess: shm
// connections and Unix-domain sockets), the initiator asks the holder of
// the remote handle for the addresses of the range (BulkDirectReq), and
// moves the bytes itself between its registered slices and the peer's
// with process_vm_readv (GET) or process_vm_writev (PUT), then tells the
// holder it is done with the addresses (BulkDirectDone).
//
// The holder checks the request exactly as it checks a GET or PUT chunk
// (the handle exists, its permission allows the access, the range lies
// inside it) and keeps a reference to the buffer (a lease) from its
// answer until BulkDirectDone or the connection's end, so that its
// garbage collector cannot reuse the memory while the peer may touch it
// even if the application frees the handle too early.
//
// When the kernel refuses (EPERM under a ptrace policy such as Yama's
// ptrace_scope, or another user's process; ENOSYS), the holder declines,
// or an address faults, the transfer runs through messages instead, and
// so do all later transfers on that connection. A peer process that is
// gone (ESRCH) fails the transfer as a connection fault.
//
// A system call moves at most directMaxCall bytes and IOV_MAX slices on
// each side; between calls the transfer's state is checked, and its
// completion waits for a call in progress (placing), so a GET never
// writes into its buffer after it completed and Abort takes effect
// within one call.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// Limits of the direct path.
const (
	directMaxIov    = 1024    // IOV_MAX: slices per side of one system call
	directMaxCall   = 4 << 20 // bytes per system call
	directMaxPairs  = 1 << 16 // address pairs in one BulkDirectInfo
	directMaxLeases = 4096    // ranges a connection's peer may hold at once
)

// The direct path's state of a connection is in its peer's account
// (peer.go): whether it is used and off for good, the ranges the peer
// may touch (holder: leases, chLeases) and the transfers waiting for the
// peer's addresses (initiator: waiting). An account that used it is
// watched, so that its leases end when the connection closes however it
// closes.

// directLease is a range of b the peer may touch; a write lease holds a
// write of b (acquireWrite) until end.
type directLease struct {
	b     *Bulk
	write bool
}

func (l directLease) end() {
	if l.write {
		l.b.releaseWrite()
	}
}

// directKey names a transfer on a connection: the initiator's tag and
// transfer id.
type directKey struct {
	tag  uint16
	xfer uint64
}

// useDirect marks a's connection as one that uses the direct path, and
// has it watched.
func (a *peer) useDirect() {
	if a.directUsed.Load() {
		return
	}
	a.mu.Lock()
	a.directUsed.Store(true)
	a.watchLocked()
	a.mu.Unlock()
}

// directHooks let tests steer the direct path (see export_direct_test.go).
var directHooks struct {
	anySize atomic.Bool                  // every non-empty transfer may go direct, not only those above the eager limit
	fail    atomic.Pointer[func() error] // an error the system call returns instead of running
	calls   atomic.Int64                 // system calls made (or failed by fail)
	mute    atomic.Bool                  // holders do not answer BulkDirectReq
}

// errNoPeerProcess: the connection has no socket up, so the peer's
// process is not known.
var errNoPeerProcess = errors.New("rpc: the peer's process is not known")

// directSeg is a piece of the peer's memory.
type directSeg struct {
	addr uintptr
	n    int
}

// directOK reports whether t can move by reading or writing the peer's
// memory directly (a same-host transport that allows it). It is called
// with the context's bmu held and must not block. A transfer on a
// connection whose socket is not up yet goes by messages: the peer's
// process is not known then.
func (c *Context) directOK(t *BulkTransfer) bool {
	if !directAvailable || t.conn == nil {
		return false
	}
	// An eager transfer is one round trip by messages already; the
	// direct path costs one too, plus the copy and a release message.
	if t.d.Len <= int64(c.in.opts.Bulk.EagerLimit) && !directHooks.anySize.Load() {
		return false
	}
	if t.acct.directUsed.Load() {
		return !t.acct.directOff.Load()
	}
	if _, ok := t.conn.PeerProcess(); !ok {
		return false
	}
	t.acct.useDirect()
	return true
}

// startDirect runs a transfer directOK accepted; it completes t itself
// (successfully, or with an error after which the caller may not retry).
// Called without locks.
func (c *Context) startDirect(t *BulkTransfer) {
	a := t.acct
	a.useDirect()
	k := directKey{c.tag, t.id}
	a.mu.Lock()
	gone := a.gone.Load()
	if !gone {
		if a.waiting == nil {
			a.waiting = map[directKey]*BulkTransfer{}
		}
		a.waiting[k] = t
		a.add(chDirectWaits, 1)
	}
	a.mu.Unlock()
	if gone {
		t.fail(&Error{Code: CodeUnreachable, Msg: "connection failed during a bulk transfer"})
		return
	}
	select {
	case <-t.done:
		// It ended (aborted, timed out) before it was registered:
		// forgetDirect may have run already.
		forgetDirect(t)
		return
	default:
	}
	h := wire.BulkHeader{Op: wire.BulkDirectReq, SrcTag: c.tag, DstTag: t.d.Remote.Tag, Xfer: t.id,
		Key: t.d.Remote.Key, Off: uint64(t.d.RemoteOff), Len: uint64(t.d.Len)}
	if t.d.Op == BulkPut {
		h.Flags = wire.BulkFlagDirectWrite
	}
	m := bulkMsg(&h, nil, msg.PrioDefault)
	if err := t.conn.Send(m); err != nil {
		m.Done()
		a.mu.Lock()
		if a.waiting[k] == t {
			delete(a.waiting, k)
			a.add(chDirectWaits, -1)
		}
		a.mu.Unlock()
		t.fail(&Error{Code: CodeUnreachable, Msg: "sending a direct bulk request", Err: err})
	}
}

// forgetDirect drops t's wait for the holder's addresses when t ended
// before they came (aborted, timed out), so that a holder that never
// answers does not pin t and its buffers until the connection ends. An
// answer that comes later finds nothing and is released (directInfo).
func forgetDirect(t *BulkTransfer) {
	a := t.acct
	k := directKey{t.c.tag, t.id}
	a.mu.Lock()
	if a.waiting[k] == t {
		delete(a.waiting, k)
		a.add(chDirectWaits, -1)
	}
	a.mu.Unlock()
}

// handleDirect handles the bulk operations of the direct path.
func (in *Instance) handleDirect(conn *msgr.Conn, h *wire.BulkHeader, m *msg.Message) {
	switch h.Op {
	case wire.BulkDirectReq:
		in.serveDirect(conn, h)
	case wire.BulkDirectInfo:
		var data []byte
		if len(m.Data) == 1 {
			data = m.Data[0]
		} else {
			data = m.Data.Bytes()
		}
		hc := *h // directInfo keeps it; h itself must not escape (handleBulk's, per bulk message)
		in.directInfo(conn, &hc, data)
	case wire.BulkDirectDone:
		if v, ok := in.peers.Load(conn); ok {
			a := v.(*peer)
			k := directKey{h.SrcTag, h.Xfer}
			a.mu.Lock()
			if l, ok := a.leases[k]; ok {
				l.end()
				delete(a.leases, k)
				a.add(chLeases, -1)
			}
			a.mu.Unlock()
		}
	default:
		in.fault(conn, fmt.Sprintf("unknown direct bulk operation %d", h.Op))
	}
}

// serveDirect answers a BulkDirectReq with the addresses of the range,
// after the checks serveGet and servePut make.
func (in *Instance) serveDirect(conn *msgr.Conn, h *wire.BulkHeader) {
	reply := func(rc Code, flags uint16, data []byte) {
		r := wire.BulkHeader{Op: wire.BulkDirectInfo, Flags: flags, SrcTag: h.DstTag, DstTag: h.SrcTag, RC: int32(rc),
			Xfer: h.Xfer, Key: h.Key, Off: h.Off, Len: h.Len}
		var segs [][]byte
		if len(data) > 0 {
			segs = [][]byte{data}
		}
		m := bulkMsg(&r, segs, msg.PrioDefault)
		if err := conn.Send(m); err != nil {
			m.Done()
		}
	}
	if directHooks.mute.Load() {
		return
	}
	if _, ok := conn.PeerProcess(); !ok || !directAvailable {
		// Not a peer on this host: its addresses are of no use to it.
		reply(CodeOK, wire.BulkFlagNoDirect, nil)
		return
	}
	write := h.Flags&wire.BulkFlagDirectWrite != 0
	b := in.peerBulk(conn, h.Key)
	switch {
	case b == nil || b.freed.Load():
		reply(CodeNotFound, 0, nil)
		return
	case write && b.perm&BulkWO == 0, !write && b.perm&BulkRO == 0:
		reply(CodeNoPerm, 0, nil)
		return
	case !b.inRange(h.Off, h.Len):
		reply(CodeInvalid, 0, nil)
		return
	}
	segs := b.slice(nil, int64(h.Off), int64(h.Len))
	if len(segs) > directMaxPairs {
		reply(CodeBusy, 0, nil) // too scattered: by messages
		return
	}
	// A write lease counts as a write into b (acquireWrite), so that
	// b.Free waits until the peer is done writing.
	l := directLease{b: b, write: write}
	if write && !b.acquireWrite() {
		reply(CodeNotFound, 0, nil)
		return
	}
	a := in.peerOf(conn)
	a.useDirect()
	k := directKey{h.SrcTag, h.Xfer}
	a.mu.Lock()
	if a.gone.Load() || len(a.leases) >= directMaxLeases {
		a.mu.Unlock()
		l.end()
		reply(CodeBusy, 0, nil)
		return
	}
	if old, ok := a.leases[k]; ok {
		old.end() // the peer asked again for the same transfer
	} else {
		a.add(chLeases, 1)
	}
	if a.leases == nil {
		a.leases = map[directKey]directLease{}
	}
	a.leases[k] = l
	a.mu.Unlock()
	data := make([]byte, 0, len(segs)*wire.DirectPairLen)
	for _, s := range segs {
		data = binary.LittleEndian.AppendUint64(data, uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s)))))
		data = binary.LittleEndian.AppendUint64(data, uint64(len(s)))
	}
	reply(CodeOK, 0, data)
}

// directInfo takes the holder's answer: it starts the copy, or falls
// back to messages, or fails the transfer.
func (in *Instance) directInfo(conn *msgr.Conn, h *wire.BulkHeader, data []byte) {
	granted := h.RC == int32(CodeOK) && h.Flags&wire.BulkFlagNoDirect == 0
	var t *BulkTransfer
	a := in.peerOf(conn)
	k := directKey{h.DstTag, h.Xfer}
	a.mu.Lock()
	if w := a.waiting[k]; w != nil {
		t = w
		delete(a.waiting, k)
		a.add(chDirectWaits, -1)
	}
	a.mu.Unlock()
	c := in.Context(h.DstTag)
	if t == nil || c == nil || t.c != c || t.conn != conn {
		if granted {
			directDone(conn, h)
		}
		return
	}
	var segs []directSeg
	var bad bool
	if granted {
		segs, bad = parseDirect(data, h.Len, uint64(t.d.Len))
	}
	var out []*msg.Message
	var fin []*BulkTransfer
	start := false
	c.bmu.Lock()
	switch {
	case t.state != xActive:
	case h.Flags&wire.BulkFlagNoDirect != 0:
		a.directOff.Store(true)
		out = c.fallbackLocked(t)
	case h.RC == int32(CodeBusy):
		out = c.fallbackLocked(t)
	case h.RC != int32(CodeOK):
		what := "bulk GET refused"
		if t.d.Op == BulkPut {
			what = "bulk PUT refused"
		}
		fin = c.failLocked(t, &Error{Code: Code(h.RC), Remote: true, Msg: what})
	case bad:
		fin = c.failLocked(t, &Error{Code: CodeMalformed, Msg: "bad direct bulk addresses"})
	default:
		t.placing++ // completion waits for the copy
		start = true
	}
	c.bmu.Unlock()
	c.finishXfers(fin)
	if !start {
		if granted {
			directDone(conn, h)
		}
		c.sendAll(t, out)
		return
	}
	// A copy no larger than a transfer's window runs on the connection's
	// reader goroutine, which received the addresses (the message path
	// would read that much data there too, and a hand-off to another
	// goroutine can cost a thread wake-up); a larger one on its own
	// goroutine, so the reader goes on with other messages.
	if t.d.Len <= int64(c.in.opts.Bulk.Window) {
		c.directCopy(t, h, segs)
		return
	}
	go c.directCopy(t, h, segs)
}

// parseDirect decodes the address pairs of a BulkDirectInfo for n bytes
// (the transfer's length, which the answer's must equal).
func parseDirect(data []byte, hlen, n uint64) ([]directSeg, bool) {
	if hlen != n || len(data)%wire.DirectPairLen != 0 || len(data)/wire.DirectPairLen > directMaxPairs {
		return nil, true
	}
	segs := make([]directSeg, 0, len(data)/wire.DirectPairLen)
	var sum uint64
	for p := data; len(p) > 0; p = p[wire.DirectPairLen:] {
		a, l := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])
		if l == 0 || l > n-sum || a+l < a || uint64(uintptr(a)) != a {
			return nil, true
		}
		sum += l
		segs = append(segs, directSeg{uintptr(a), int(l)})
	}
	return segs, sum != n
}

// directDone tells the holder it may drop the lease of h's range.
func directDone(conn *msgr.Conn, h *wire.BulkHeader) {
	r := wire.BulkHeader{Op: wire.BulkDirectDone, SrcTag: h.DstTag, DstTag: h.SrcTag, Xfer: h.Xfer, Key: h.Key, Off: h.Off, Len: h.Len}
	m := bulkMsg(&r, nil, msg.PrioDefault)
	if err := conn.Send(m); err != nil {
		m.Done() // the connection is gone, and the lease with it
	}
}

// directCopy moves t's bytes with system calls, then completes t (or
// falls back to messages, or fails it). t.placing was raised for it.
func (c *Context) directCopy(t *BulkTransfer, h *wire.BulkHeader, segs []directSeg) {
	pid, ok := t.conn.PeerProcess()
	var err error
	if !ok {
		err = errNoPeerProcess
	}
	offs := make([]int64, len(segs)) // offs[i]: where segs[i] starts in the transfer
	var o int64
	for i, s := range segs {
		offs[i] = o
		o += int64(s.n)
	}
	write := t.d.Op == BulkPut
	var moved int64
	for err == nil && moved < t.d.Len {
		c.bmu.Lock()
		active := t.state == xActive
		c.bmu.Unlock()
		if !active {
			break
		}
		var k int
		k, err = directCall(pid, write, t.d.Local, t.d.LocalOff+moved, segs, offs, moved, t.d.Len-moved)
		moved += int64(k)
		if err == nil && k == 0 {
			err = syscall.EFAULT
		}
		if err == syscall.EINTR || err == syscall.EAGAIN {
			err = nil
		}
	}
	directDone(t.conn, h)

	sends := map[*BulkTransfer][]*msg.Message{}
	var out []*msg.Message
	var fin []*BulkTransfer
	c.bmu.Lock()
	t.placing--
	switch {
	case t.state == xFinishing:
		if t.placing == 0 {
			t.state = xFinished
			delete(c.finishing, t.id)
			fin = append(fin, t)
		}
	case t.state != xActive:
	case err == nil:
		c.nDirect++
		fin = c.landedLocked(t, t.d.Len, sends)
	case errors.Is(err, syscall.ESRCH):
		fin = c.failLocked(t, &Error{Code: CodeUnreachable, Msg: "the peer process is gone", Err: err})
	case err == errNoPeerProcess:
		out = c.fallbackLocked(t) // no socket up just now: by messages, this once
	default:
		// EPERM, EACCES (the kernel's ptrace policy), ENOSYS, EFAULT
		// (the peer's addresses do not hold the range)...: this
		// connection uses messages from now on.
		t.acct.directOff.Store(true)
		c.in.log.Debug("direct bulk path refused; using messages", "tag", c.tag, "err", err)
		out = c.fallbackLocked(t)
	}
	c.bmu.Unlock()
	c.finishXfers(fin)
	c.sendAll(t, out)
	for t, out := range sends {
		c.sendAll(t, out)
	}
}

// directCall makes one system call for up to n bytes: local's bytes at
// loff against the peer's segments (offs: their offsets in the transfer)
// at pos. It returns the bytes moved.
func directCall(pid int, write bool, local *Bulk, loff int64, segs []directSeg, offs []int64, pos, n int64) (int, error) {
	n = min(n, directMaxCall)
	lv := local.slice(make([][]byte, 0, 8), loff, n)
	if len(lv) > directMaxIov {
		lv = lv[:directMaxIov]
		n = 0
		for _, s := range lv {
			n += int64(len(s))
		}
	}
	i := sort.Search(len(offs), func(i int) bool { return offs[i] > pos }) - 1
	rv := make([]directSeg, 0, 8)
	for left, at := n, pos; left > 0 && len(rv) < directMaxIov; i++ {
		s := segs[i]
		skip := at - offs[i]
		p := directSeg{s.addr + uintptr(skip), int(min(int64(s.n)-skip, left))}
		rv = append(rv, p)
		left -= int64(p.n)
		at += int64(p.n)
	}
	var rn int64
	for _, s := range rv {
		rn += int64(s.n)
	}
	if rn < n {
		// The peer's side hit IOV_MAX first: trim the local side.
		n = rn
		lv = local.slice(lv[:0], loff, n)
	}
	directHooks.calls.Add(1)
	if f := directHooks.fail.Load(); f != nil {
		if err := (*f)(); err != nil {
			return 0, err
		}
	}
	return processVM(pid, write, lv, rv)
}

// fallbackLocked starts t by messages, as startOn would have.
func (c *Context) fallbackLocked(t *BulkTransfer) []*msg.Message {
	d := &t.d
	if d.Op == BulkPut && t.proto == Rendezvous {
		t.fl.Next = d.Len // the peer pulls it all; its final ack lands it
		return []*msg.Message{bulkMsg(&wire.BulkHeader{
			Op: wire.BulkRTS, SrcTag: c.tag, DstTag: d.Remote.Tag, Xfer: t.id,
			Key: d.Remote.Key, Off: uint64(d.RemoteOff), Len: uint64(d.Len),
			Key2: d.Local.key, Off2: uint64(d.LocalOff),
		}, nil, msg.PrioDefault)}
	}
	return c.issueLocked(t, nil)
}
