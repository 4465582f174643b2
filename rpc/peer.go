package rpc

// One account per peer: everything the peer on one connection makes this
// instance hold is charged to that connection's peer account, and
// released in one place (peer.release) when the connection goes away.
//
// What a peer can make an instance hold, and what bounds it:
//
//	chUnanswered   bytes of its requests received and not yet answered
//	               (each context's IncomingLimit bounds all peers' together)
//	chOverflowIn   bytes of its overflowing inputs pulled and held until
//	               their requests are answered (each context's
//	               OverflowLimit, all peers together)
//	chOvfWaiting   its requests waiting for overflow budget (per context
//	               maxOverflowWaitingPerConn, all peers maxOverflowWaiting)
//	chOutputs      bytes of overflowing outputs it has not pulled or
//	               released (IncomingLimit per peer)
//	chPulls        rendezvous PUTs being pulled for it (maxPullsPerConn)
//	chLeases       ranges of registered memory it may touch directly
//	               (directMaxLeases)
//	chXfers        bulk transfers running on the connection, either side
//	chXferBytes    bulk bytes in flight on the connection (each context's
//	               windows bound them: ConnLimit per connection; package
//	               window)
//	chDirectWaits  transfers of this side waiting for the peer's addresses
//	               (direct path; one per transfer)
//
// The bytes a peer is owed (chUnanswered and chOutputs, owedCharge) also
// count against the instance's Options.PeerBudget, shared fairly across
// the peers; take admits them (owe), add returns them.
//
// The counters are exact at all times (atomics: the RPC path charges and
// releases without a lock), and each change is also made to the
// instance's totals (Instance.charged) and the process's (charged), which
// count what accounts that were released still hold until it ends: the
// layers a process-wide budget charges. The things
// that only the connection's end frees (output handles, leases, pulls,
// transfers, overflow waiters) are also listed in the account, so that
// release finds them without scanning the instance's tables. A budget
// that spans peers (a process-wide one) charges through take, the one
// place where a peer's hold is admitted.
//
// Lifetime: an account is made on a connection's first charge
// (Instance.peerOf) and lives until release, which the instance calls when
// the messenger reports the connection failed (HandleReset,
// HandleRefused), when a watcher sees the connection closed (an account
// that used the direct path, whose leases must end however the
// connection closes: one marked down locally is not reported), or when
// the instance closes. The account of a connection marked down locally
// that did not use the direct path stays until the instance closes
// (what it holds ends by itself: transfers by their failed sends or
// timeouts, overflow waiters by their deadlines; its output handles with
// the instance). After release the account is
// gone: it refuses new holds, and what it still counts (requests whose
// handlers have not answered yet, transfers finishing) returns to zero as
// each one ends.
//
// Lock order (a lock may be taken while holding those above it, never
// the other way round):
//
//	Instance.life (read: a dispatch; write: Close)
//	Context.mu (the request tracker) and Context.bmu (transfers and the
//	        overflow queue) — never held together
//	peer.mu (the account's lists)
//	bulkRegistry.mu, Bulk.wmu (leaves)
//
// release takes peer.mu only to detach the lists, and ends what they held
// (failing transfers takes Context.bmu) after letting it go.

import (
	"sync"
	"sync/atomic"

	"github.com/ferrymsg/ferry/msgr"
)

// charge names what a peer holds (see the table above).
type charge uint8

const (
	chUnanswered charge = iota
	chOverflowIn
	chOvfWaiting
	chOutputs
	chPulls
	chLeases
	chXfers
	chXferBytes
	chDirectWaits
	nCharges
)

var chargeNames = [nCharges]string{"unanswered", "overflow_in", "overflow_waiting", "outputs", "pulls", "leases", "xfers", "xfer_bytes", "direct_waits"}

// charged is what all peers of all the process's instances hold, by
// charge.
var charged [nCharges]atomic.Int64

func (k charge) String() string { return chargeNames[k] }

// peer is the account of the peer on one connection.
type peer struct {
	in   *Instance
	conn *msgr.Conn

	held [nCharges]atomic.Int64
	owed atomic.Int64 // of held, the charges owedCharge names: what the instance owes the peer
	gone atomic.Bool  // released: it takes no new holds

	// The direct path (direct.go): used on this connection, and off for
	// good once the kernel or the holder refused.
	directUsed atomic.Bool
	directOff  atomic.Bool

	mu      sync.Mutex
	watched bool // a watcher releases it when the connection closes
	// The chunk the connection's reader is reading straight into a
	// registered buffer (PlaceData), until it is dispatched or unplaced
	// (takePlaced): a PUT chunk into putPlacing, or a GET's chunk into
	// getPlacing's buffer. At most one at a time: one goroutine reads a
	// connection.
	putPlacing *Bulk
	getPlacing *BulkTransfer
	outputs    map[*Bulk]struct{}          // overflowing outputs it may pull
	rts        map[rtsKey]*BulkTransfer    // rendezvous PUTs pulled for it
	leases     map[directKey]directLease   // ranges it may touch directly
	waiting    map[directKey]*BulkTransfer // transfers waiting for its addresses
	xfers      map[*BulkTransfer]struct{}  // transfers running on the connection
}

// peerOf returns conn's account, making it on first use. A connection
// that has closed already gets an account that is gone.
func (in *Instance) peerOf(conn *msgr.Conn) *peer {
	if v, ok := in.peers.Load(conn); ok {
		return v.(*peer)
	}
	a := &peer{in: in, conn: conn}
	if v, loaded := in.peers.LoadOrStore(conn, a); loaded {
		return v.(*peer)
	}
	in.nPeers.Add(1)
	select {
	case <-conn.Done():
		// It may have been released already: nothing would release this
		// one.
		a.release()
	default:
	}
	return a
}

// peerFor is peerOf for a request's connection, nil for one that is not
// a messenger connection.
func (in *Instance) peerFor(c any) *peer {
	if conn, ok := c.(*msgr.Conn); ok && conn != nil {
		return in.peerOf(conn)
	}
	return nil
}

// add counts n more (or less) of k, in the account and in the
// instance's totals.
func (a *peer) add(k charge, n int64) {
	if a != nil {
		a.held[k].Add(n)
		a.in.charged[k].Add(n)
		charged[k].Add(n)
		if owedCharge(k) {
			a.owed.Add(n)
			a.in.owed.Add(n)
		}
	}
}

// owedCharge reports whether k is bytes the instance owes the peer,
// which Options.PeerBudget bounds: its requests not answered yet and its
// outputs not pulled yet.
func owedCharge(k charge) bool { return k == chUnanswered || k == chOutputs }

// take counts n of k if the account is not gone, what it holds of k
// stays within limit (one is always taken when it holds none, so that a
// limit below one item's size cannot block it for ever) and, for the
// bytes the instance owes its peers, the instance's PeerBudget admits
// them (owe). It is the one place where a peer's hold is admitted.
func (a *peer) take(k charge, n, limit int64) bool { return a.takeBeside(k, n, limit, 0) }

// takeBeside is take for an item that comes with own bytes the peer is
// already owed for it (a request's output beside the request itself):
// those do not count as the peer's when owe looks at what it is owed, so
// that the first output of a peer owed nothing else is not held back by
// its own request.
func (a *peer) takeBeside(k charge, n, limit, own int64) bool {
	if a.gone.Load() {
		return false
	}
	owed := owedCharge(k)
	if owed && !a.owe(n, own) {
		return false
	}
	for {
		cur := a.held[k].Load()
		if cur > 0 && cur+n > limit {
			if owed {
				a.owed.Add(-n)
				a.in.owed.Add(-n)
			}
			return false
		}
		if a.held[k].CompareAndSwap(cur, cur+n) {
			a.in.charged[k].Add(n)
			charged[k].Add(n)
			return true
		}
	}
}

// owes is owe's rule: whether n more bytes may be owed to a peer that
// is owed mine, when the instance owes tot of budget b to the peers of
// its live accounts.
func owes(b, tot, mine, n, peers int64) bool {
	if tot > 0 && tot+n > b {
		return false
	}
	if mine == 0 {
		return true
	}
	shared := b - b/4
	return tot+n <= shared && (tot+n <= b/2 || mine+n <= shared/max(peers, 1))
}

// owe counts n more bytes owed to the peer against the instance's
// PeerBudget, or reports that they do not fit (own of what it is owed
// already belong to the same item, takeBeside): a peer that owes nothing
// may take what the budget has left; one that owes something may not
// take the instance past three quarters of the budget nor, past half,
// beyond its share of three quarters among the live accounts. When
// nothing at all is owed, one item is always admitted, so that a budget
// below one item's size cannot block it for ever. The instance's total
// is taken with a compare-and-swap, so concurrent peers cannot overshoot
// it together.
func (a *peer) owe(n, own int64) bool {
	in := a.in
	b := in.opts.PeerBudget
	if b <= 0 {
		a.owed.Add(n)
		in.owed.Add(n)
		return true
	}
	mine := max(a.owed.Load()-own, 0)
	for {
		tot := in.owed.Load()
		if !owes(b, tot, mine, n, in.nPeers.Load()) {
			in.budgetRefusals.Add(1)
			return false
		}
		if in.owed.CompareAndSwap(tot, tot+n) {
			a.owed.Add(n)
			return true
		}
	}
}

// watchLocked makes sure the account is released when its connection
// closes, even if the messenger does not report it (a local mark-down):
// for accounts that used the direct path (a goroutine per such
// connection, as the direct path always had). Called with mu held.
func (a *peer) watchLocked() {
	if a.watched {
		return
	}
	a.watched = true
	go func() {
		<-a.conn.Done()
		a.release()
	}()
}

// placing records the chunk the reader is about to read into b (a PUT)
// or into t's buffer (a GET); false if the account is gone (the chunk is
// then read into the messenger's buffers, and dropped).
func (a *peer) placing(b *Bulk, t *BulkTransfer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gone.Load() {
		return false
	}
	a.putPlacing, a.getPlacing = b, t
	return true
}

// takePlaced returns and forgets the chunk placing recorded. A released
// account that had one stays in the instance's table until then (so the
// reader finds it), and leaves it here.
func (a *peer) takePlaced() (*Bulk, *BulkTransfer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, t := a.putPlacing, a.getPlacing
	a.putPlacing, a.getPlacing = nil, nil
	if a.gone.Load() && (b != nil || t != nil) {
		a.forget()
	}
	return b, t
}

// addOutput lists b, an overflowing output the peer may pull; false if
// the account is gone (b is then the caller's to free).
func (a *peer) addOutput(b *Bulk) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gone.Load() {
		return false
	}
	if a.outputs == nil {
		a.outputs = map[*Bulk]struct{}{}
	}
	a.outputs[b] = struct{}{}
	return true
}

// dropOutput ends b's hold (Free).
func (a *peer) dropOutput(b *Bulk) {
	a.mu.Lock()
	delete(a.outputs, b)
	a.mu.Unlock()
	a.add(chOutputs, -b.held)
}

// addXfer lists t, a transfer on the connection; false if the account is
// gone. Called with t's context's bmu held.
func (a *peer) addXfer(t *BulkTransfer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gone.Load() {
		return false
	}
	if a.xfers == nil {
		a.xfers = map[*BulkTransfer]struct{}{}
	}
	a.xfers[t] = struct{}{}
	a.add(chXfers, 1)
	return true
}

// dropXfer ends t's listing. Called with t's context's bmu held.
func (a *peer) dropXfer(t *BulkTransfer) {
	a.mu.Lock()
	if _, ok := a.xfers[t]; ok {
		delete(a.xfers, t)
		a.add(chXfers, -1)
	}
	a.mu.Unlock()
}

// addRTS lists a rendezvous PUT pulled for the peer; false if gone.
func (a *peer) addRTS(k rtsKey, t *BulkTransfer) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gone.Load() {
		return false
	}
	if a.rts == nil {
		a.rts = map[rtsKey]*BulkTransfer{}
	}
	a.rts[k] = t
	return true
}

// dropRTS ends k's listing if it is still t.
func (a *peer) dropRTS(k rtsKey, t *BulkTransfer) {
	a.mu.Lock()
	if a.rts[k] == t {
		delete(a.rts, k)
	}
	a.mu.Unlock()
}

// rtsOf returns the rendezvous PUT k pulled for the peer, or nil.
func (a *peer) rtsOf(k rtsKey) *BulkTransfer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rts[k]
}

// pullsInto returns the rendezvous PUTs pulled for the peer into b.
func (a *peer) pullsInto(b *Bulk, dst []*BulkTransfer) []*BulkTransfer {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.rts {
		if t.d.Local == b {
			dst = append(dst, t)
		}
	}
	return dst
}

// release ends everything the peer holds because its connection has
// gone, once (the one release path): its output handles are freed, its
// leases end, its pulls and every transfer on the connection fail with
// ErrUnreachable, and its requests waiting for overflow budget are
// answered. Requests its handlers still hold are not touched: each
// returns its charge when it is answered (its reply goes nowhere).
func (a *peer) release() {
	a.mu.Lock()
	if a.gone.Swap(true) {
		a.mu.Unlock()
		return
	}
	outputs, leases, xfers := a.outputs, a.leases, a.xfers
	a.add(chDirectWaits, -int64(len(a.waiting)))
	a.outputs, a.leases, a.waiting, a.rts = nil, nil, nil, nil
	for _, l := range leases {
		l.end()
	}
	a.add(chLeases, -int64(len(leases)))
	// The pulls are among the transfers: failing those ends them.
	ts := make([]*BulkTransfer, 0, len(xfers))
	for t := range xfers {
		ts = append(ts, t)
	}
	if a.putPlacing == nil && a.getPlacing == nil {
		// (Otherwise the reader still has to find it: takePlaced.)
		a.forget()
	}
	a.mu.Unlock()
	for b := range outputs {
		b.Free()
	}
	for _, t := range ts {
		t.fail(&Error{Code: CodeUnreachable, Msg: "connection failed during a bulk transfer"})
	}
	for _, c := range a.in.contexts() {
		c.dropOverflowPeer(a)
	}
}

// forget removes the account from the instance's table.
func (a *peer) forget() {
	if a.in.peers.CompareAndDelete(a.conn, a) {
		a.in.nPeers.Add(-1)
	}
}

// peerGone releases conn's account, if it has one.
func (in *Instance) peerGone(conn *msgr.Conn) {
	if v, ok := in.peers.Load(conn); ok {
		v.(*peer).release()
	}
}

// peerCharges returns what all peers hold, by charge (released
// accounts included), and how many accounts are live.
func (in *Instance) peerCharges() (sum [nCharges]int64, accounts int) {
	for k := range sum {
		sum[k] = in.charged[k].Load()
	}
	return sum, int(in.nPeers.Load())
}
