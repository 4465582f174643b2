package rpc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymsg/ferry/coll"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/rpc/internal/track"
)

// Collective RPCs (CaRT's corpc): Context.Broadcast sends a collective
// down a tree over the group (or a subset of it, less excluded ranks);
// every rank runs the collective's handler, forwards to its children,
// combines their replies with the collective's aggregation function and
// replies to its parent. The tree and the aggregation are package coll's
// pure machine; this file moves its inputs and outputs.

// BaseCollective is the reserved protocol base of the RPC that carries
// collectives from rank to rank. Wire constant.
const BaseCollective uint8 = 0xF5

// OpCollective is the RPC a rank forwards a collective to its children
// with: its input is the collective header (coll.Header, naming the
// collective's own opcode) in the front segment and the collective's
// input in the data segment; its output is a status byte, then the
// rank's coll.Report (0) or a refusal (1: a reason byte and a text).
var OpCollective = MakeOpcode(BaseCollective, 0, 0)

// DefaultTopology is the tree a collective takes when its
// CollectiveDesc names none: k-nomial of ratio 32, DAOS's choice for its
// management, pool and system broadcasts.
var DefaultTopology = coll.KNomial(32)

// ErrRefused: a rank refused a collective for another reason than its
// group version (ErrGroupVersion): it has not registered the
// collective, the collective's input was malformed... The failures of
// single ranks are RankFailures, whose Err matches this or the package's
// other sentinels.
var ErrRefused = errors.New("rpc: collective refused")

// CollectiveHandler runs a collective on one rank: it returns the rank's
// output (nil: an empty one) or an error, which lists the rank as failed
// with coll.ReasonHandler (the rank still forwards to its children, and
// their answers are aggregated). ctx ends when the rank's part of the
// collective ends (its deadline, an abort at the root). The handler runs
// in the progress of the context the collective arrived on (at the root,
// on a goroutine of its own), like an ordinary handler.
type CollectiveHandler func(ctx context.Context, r *CollectiveRequest) (Input, error)

// Aggregator combines v, the encoded output of a rank or the encoded
// aggregate of a subtree, into acc, the encoded aggregate so far, and
// returns the new aggregate. The first value in the combining order is
// the initial acc: a rank's own output, then its children's aggregates
// (see coll.Order). It may reuse acc's memory but must not keep v. An
// error drops v and lists the ranks it held as failed (handler error).
type Aggregator func(acc, v []byte) ([]byte, error)

// CollectiveRPC is one collective of a CollectiveProtocol.
type CollectiveRPC struct {
	// Name is for logs (optional).
	Name string
	// Handler runs on every rank of the collective.
	Handler CollectiveHandler
	// Aggregate combines outputs (nil: the result is the first output in
	// the order, the root's own when it is in the scope).
	Aggregate Aggregator
	// Order is the order outputs are combined in: coll.OrderArrival (as
	// they arrive, after the rank's own) or coll.OrderTree (in tree
	// order whatever the timing).
	Order coll.Order
}

// CollectiveProtocol is a set of collectives registered together: the
// opcode of RPCs[i] is MakeOpcode(Base, Version, i). Every rank that
// takes part registers it.
type CollectiveProtocol struct {
	Name    string
	Base    uint8
	Version uint8
	RPCs    []CollectiveRPC
}

type collDef struct {
	op      Opcode
	name    string
	handler CollectiveHandler
	agg     Aggregator
	order   coll.Order
}

// collRegistry holds an instance's collectives.
type collRegistry struct {
	mu   sync.Mutex
	once sync.Once
	err  error
	defs atomic.Pointer[map[Opcode]*collDef]
}

// RegisterCollective registers collectives (crt_corpc_register). Their
// opcodes are registered as a Protocol too (without point-to-point
// handlers: an ordinary request for one is answered CodeUnregistered), so
// a base and version serve either ordinary RPCs or collectives. The first
// registration also registers OpCollective, which ranks forward
// collectives with, and OpCollectiveRoot, which clients ask a rank to
// root one with (BroadcastVia).
func (in *Instance) RegisterCollective(p CollectiveProtocol) error {
	return in.registerCollective(p, false)
}

func (in *Instance) registerCollective(p CollectiveProtocol, internal bool) error {
	for i, d := range p.RPCs {
		if d.Handler == nil {
			return fmt.Errorf("%w: collective %d of %q has no handler", ErrInvalid, i, p.Name)
		}
		if d.Order != coll.OrderArrival && d.Order != coll.OrderTree {
			return fmt.Errorf("%w: collective %d of %q: order %d", ErrInvalid, i, p.Name, d.Order)
		}
	}
	r := &in.colls
	r.once.Do(func() {
		r.err = in.reg.register(Protocol{Name: "collective", Base: BaseCollective, Version: 0, RPCs: []RPC{
			{Name: "forward", Handler: in.handleCollective},
			{Name: "root", Handler: in.handleCollectiveRoot},
		}}, true)
	})
	if r.err != nil {
		return r.err
	}
	rpcs := make([]RPC, len(p.RPCs))
	for i, d := range p.RPCs {
		rpcs[i].Name = d.Name
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := in.reg.register(Protocol{Name: p.Name, Base: p.Base, Version: p.Version, RPCs: rpcs}, internal); err != nil {
		return err
	}
	n := map[Opcode]*collDef{}
	if old := r.defs.Load(); old != nil {
		for k, v := range *old {
			n[k] = v
		}
	}
	for i, d := range p.RPCs {
		op := MakeOpcode(p.Base, p.Version, uint16(i))
		n[op] = &collDef{op: op, name: d.Name, handler: d.Handler, agg: d.Aggregate, order: d.Order}
	}
	r.defs.Store(&n)
	return nil
}

func (in *Instance) collDef(op Opcode) *collDef {
	if m := in.colls.defs.Load(); m != nil {
		return (*m)[op]
	}
	return nil
}

// CollectiveRequest is what a collective's handler sees on a rank.
type CollectiveRequest struct {
	// ID identifies the collective (chosen by its root).
	ID uint64
	// Opcode is the collective's opcode.
	Opcode Opcode
	// Root is the rank that started it.
	Root uint32
	// Rank is this rank.
	Rank uint32
	// GroupVersion is the group version it runs at.
	GroupVersion uint32
	// Topology is its tree's shape.
	Topology coll.Topology
	// Deadline is when this rank's part ends (zero: none).
	Deadline time.Time
	// Context is the context it runs on.
	Context *Context

	input []byte
}

// Input returns the collective's encoded input (shared by every rank's
// handler on this instance: do not modify it).
func (r *CollectiveRequest) Input() []byte { return r.input }

// Decode decodes the input into v. A failure is an *Error with
// CodeMalformed.
func (r *CollectiveRequest) Decode(v Output) error {
	if err := decodeOutput(v, r.input, nil); err != nil {
		return &Error{Code: CodeMalformed, Opcode: r.Opcode, Msg: "decoding collective input: " + err.Error()}
	}
	return nil
}

// CollectiveDesc describes a collective to run with Context.Broadcast
// (crt_corpc_req_create's arguments).
type CollectiveDesc struct {
	// Opcode is a collective registered with RegisterCollective (on this
	// instance and on every rank it reaches).
	Opcode Opcode
	// Ranks is the subset of the group to cover (nil: the whole group).
	// Ranks listed that are not members are not reached and are listed
	// as failed with coll.ReasonExcluded.
	Ranks []uint32
	// Excluded ranks are not reached; those of the scope are listed as
	// failed with coll.ReasonExcluded. So are the members this rank's
	// view has dead (Group.Excluded): they are left out of the tree, so
	// their subtrees are reached through others.
	Excluded []uint32
	// Topology is the tree's shape (0: DefaultTopology).
	Topology coll.Topology
	// Input is the collective's input, given to every rank's handler.
	Input Input
	// Timeout bounds the whole collective (0: the context's timeout); it
	// is shortened to the deadline of Broadcast's ctx.
	Timeout time.Duration
}

// RankFailure is a rank that failed or did not answer a collective.
type RankFailure struct {
	Rank   uint32
	Reason coll.Reason
	// Via is the rank whose failure left Rank unreached (Rank itself
	// when Rank failed; an ancestor in the tree when the forward to that
	// ancestor failed, so its whole subtree is listed).
	Via uint32
	// Detail is the cause as text.
	Detail string
	// Err matches the reason's sentinel (ErrUnreachable, ErrExcluded,
	// ErrTimedOut, ErrGroupVersion, ErrHandler, ErrCanceled,
	// ErrShutdown, ErrRefused); it wraps the local cause when this rank
	// saw the failure itself.
	Err error
}

func (f RankFailure) String() string {
	return coll.Failure{Rank: f.Rank, Reason: f.Reason, Via: f.Via, Detail: f.Detail}.String()
}

// CollectiveResult is the outcome of a collective: the aggregate and,
// between them, Answered and Failed name every rank asked for.
type CollectiveResult struct {
	// ID is the collective's id.
	ID uint64
	// GroupVersion is the version it ran at.
	GroupVersion uint32
	// Aggregate is the encoded aggregate of the outputs of the ranks
	// that answered (nil if none did: HasAggregate is false).
	Aggregate    []byte
	HasAggregate bool
	// Answered are the ranks whose handler answered and whose output is
	// in the aggregate, ascending (the root only if it is in the scope).
	Answered []uint32
	// Failed are the ranks that failed or did not answer, ascending.
	Failed []RankFailure
}

// Decode decodes the aggregate into v; ErrNotFound if no rank answered.
func (r *CollectiveResult) Decode(v Output) error {
	if !r.HasAggregate {
		return &Error{Code: CodeNotFound, Msg: "no rank answered the collective"}
	}
	if err := decodeOutput(v, r.Aggregate, nil); err != nil {
		return &Error{Code: CodeMalformed, Msg: "decoding aggregate", Err: err}
	}
	return nil
}

// FailedRank returns the failure of rank, if it failed.
func (r *CollectiveResult) FailedRank(rank uint32) (RankFailure, bool) {
	i, ok := slices.BinarySearchFunc(r.Failed, rank, func(f RankFailure, x uint32) int {
		switch {
		case f.Rank < x:
			return -1
		case f.Rank > x:
			return 1
		}
		return 0
	})
	if !ok {
		return RankFailure{}, false
	}
	return r.Failed[i], true
}

var collSeq atomic.Uint32

// Broadcast runs a collective rooted at this instance's rank
// (crt_corpc_req_create + crt_req_send) and waits for its outcome. The
// collective goes down a tree of d.Topology over its scope (d.Ranks or the
// group, less d.Excluded; the root forwards even when it is not in the
// scope, without running its handler), every rank runs the handler, and
// outputs are combined on the way up. Every rank of the scope whose
// group version differs from the root's refuses it (listed with
// coll.ReasonVersion).
//
// It always ends with a result: when every rank answered or failed, at
// its deadline (ranks that have not answered by then are listed with
// coll.ReasonTimedOut), or when ctx is canceled (pending ranks listed
// with coll.ReasonCanceled; Broadcast then also returns an error matching
// ErrCanceled and context.Canceled). An abort is local, as in CaRT: the
// ranks below stop at their own deadlines. It returns only an error, without
// result, if the collective cannot start: this instance is not a group
// member (a collective is rooted at a member, as in CaRT), the opcode is
// not a registered collective, the topology is invalid, or the input
// cannot be encoded. Broadcast does not need the context's progress.
func (c *Context) Broadcast(ctx context.Context, d CollectiveDesc) (*CollectiveResult, error) {
	in := c.in
	self := in.rank
	if self == RankNone {
		return nil, &Error{Code: CodeInvalid, Opcode: d.Opcode, Msg: "collectives are rooted at a group member; this instance is a client"}
	}
	def := in.collDef(d.Opcode)
	if def == nil {
		return nil, &Error{Code: CodeUnregistered, Opcode: d.Opcode, Msg: "not a registered collective"}
	}
	topo := d.Topology
	if topo == 0 {
		topo = DefaultTopology
	}
	if err := topo.Validate(); err != nil {
		return nil, &Error{Code: CodeInvalid, Opcode: d.Opcode, Msg: err.Error()}
	}
	payload, err := encodeFlat(d.Input)
	if err != nil {
		return nil, &Error{Code: CodeMalformed, Opcode: d.Opcode, Msg: "encoding collective input", Err: err}
	}
	if len(payload) > MaxPayload {
		return nil, &Error{Code: CodeTooLarge, Opcode: d.Opcode, Msg: fmt.Sprintf("input of %d bytes", len(payload))}
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = c.Timeout()
	}
	timeout = min(timeout, MaxTimeout)
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}

	version := in.group.Version()
	members := in.group.Ranks()
	isMember := func(r uint32) bool { _, ok := slices.BinarySearch(members, r); return ok }
	requested := members
	if d.Ranks != nil {
		requested = sortedUnique(d.Ranks)
	}
	excluded := sortedUnique(d.Excluded)
	var pre []coll.Failure // ranks asked for that are not reached
	var filter []uint32
	for _, r := range requested {
		_, ex := slices.BinarySearch(excluded, r)
		// A member this rank knows dead is left out of the tree (the
		// filter travels in the header, so every rank builds the same
		// tree) rather than reached and failed with its subtree.
		dead := !ex && r != self && isMember(r) && in.group.Excluded(r)
		switch {
		case !isMember(r):
			pre = append(pre, coll.Failure{Rank: r, Reason: coll.ReasonExcluded, Via: r, Detail: fmt.Sprintf("not a member of the group at version %d", version)})
		case ex || dead:
			detail := "excluded from the collective"
			if dead {
				detail = fmt.Sprintf("dead in rank %d's view of the group", self)
			}
			pre = append(pre, coll.Failure{Rank: r, Reason: coll.ReasonExcluded, Via: r, Detail: detail})
			if d.Ranks == nil {
				filter = append(filter, r)
			}
		case d.Ranks != nil:
			filter = append(filter, r)
		}
	}
	hdr := coll.Header{
		ID:     uint64(self)<<32 | uint64(collSeq.Add(1)),
		Opcode: uint32(d.Opcode), Root: self, GroupVersion: version, Topology: topo,
		Subset: d.Ranks != nil, Filter: filter,
	}
	tree, err := hdr.Tree(members)
	if err != nil {
		return nil, &Error{Code: CodeInvalid, Opcode: d.Opcode, Msg: err.Error()}
	}
	_, selfIn := slices.BinarySearch(hdr.Scope(members), self)
	_, filtered := slices.BinarySearch(filter, self)
	local := selfIn && (filtered == hdr.Subset)

	run := newCollRun(c, def, &hdr, payload)
	if timeout <= 0 {
		run.start(tree, self, local, in.now())
		run.abort(coll.ReasonTimedOut, "deadline passed")
	} else {
		run.start(tree, self, local, in.now()+int64(timeout))
		run.forward(timeout - collSlack(timeout))
		if local {
			hctx, cancel := context.WithCancel(ctx)
			run.cancel = cancel
			go run.runLocal(hctx)
		}
		go run.timer()
	}
	var cancelErr error
	select {
	case <-run.done:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			run.abort(coll.ReasonTimedOut, "deadline passed")
		} else {
			cancelErr = &Error{Code: CodeCanceled, Opcode: d.Opcode, Err: ctx.Err()}
			run.abort(coll.ReasonCanceled, "aborted by the root: "+ctx.Err().Error())
		}
		<-run.done
	}
	res := run.result
	out := &CollectiveResult{ID: hdr.ID, GroupVersion: version, Answered: res.Answered}
	if res.HasValue {
		out.Aggregate, out.HasAggregate = res.Value, true
		if out.Aggregate == nil {
			out.Aggregate = []byte{}
		}
	}
	fs := append(res.Failed, pre...)
	slices.SortStableFunc(fs, func(a, b coll.Failure) int { return cmpRank(a.Rank, b.Rank) })
	fs = slices.CompactFunc(fs, func(a, b coll.Failure) bool { return a.Rank == b.Rank })
	out.Failed = make([]RankFailure, len(fs))
	for i, f := range fs {
		out.Failed[i] = RankFailure{Rank: f.Rank, Reason: f.Reason, Via: f.Via, Detail: f.Detail,
			Err: failureErr(d.Opcode, c.tag, f, run.causes[f.Via])}
	}
	return out, cancelErr
}

func cmpRank(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sortedUnique(rs []uint32) []uint32 {
	out := slices.Clone(rs)
	slices.Sort(out)
	return slices.Compact(out)
}

// collSlack is how much earlier than its own deadline a rank gives up on
// its children, so that its reply reaches its parent in time: an eighth
// of the time left, at most 250 ms.
func collSlack(d time.Duration) time.Duration {
	return min(d/8, 250*time.Millisecond)
}

// failureErr is the error of a RankFailure.
func failureErr(op Opcode, tag uint16, f coll.Failure, cause error) error {
	ep := Endpoint{Rank: f.Rank, Tag: tag}
	e := &Error{Opcode: op, Endpoint: ep, Msg: f.Detail}
	if f.Via == f.Rank && cause != nil {
		e.Msg, e.Err = "", cause
	}
	switch f.Reason {
	case coll.ReasonTimedOut:
		e.Code = CodeTimedOut
	case coll.ReasonUnreachable:
		e.Code = CodeUnreachable
	case coll.ReasonExcluded:
		e.Code = CodeExcluded
	case coll.ReasonCanceled:
		e.Code = CodeCanceled
	case coll.ReasonShutdown:
		e.Code = CodeShutdown
	case coll.ReasonHandler:
		e.Code, e.Remote = CodeHandler, true
	case coll.ReasonVersion:
		e.Code, e.Remote = CodeGroupVersion, true
	default:
		return fmt.Errorf("%w: rank %d: %s", ErrRefused, f.Rank, f.Detail)
	}
	return e
}

// reasonOf maps the error of a failed forward to a reason.
func reasonOf(err error) coll.Reason {
	switch {
	case errors.Is(err, ErrTimedOut):
		return coll.ReasonTimedOut
	case errors.Is(err, ErrExcluded):
		return coll.ReasonExcluded
	case errors.Is(err, ErrUnreachable):
		return coll.ReasonUnreachable
	case errors.Is(err, ErrCanceled):
		return coll.ReasonCanceled
	case errors.Is(err, ErrShutdown):
		return coll.ReasonShutdown
	}
	return coll.ReasonRefused
}

// encodeFlat encodes an input or output into one byte slice (its
// encoded part, then its data buffers).
func encodeFlat(v Input) ([]byte, error) {
	front, data, err := encodeInput(v, nil, nil)
	if err != nil {
		return nil, err
	}
	for _, b := range data {
		front = append(front, b...)
	}
	return front, nil
}

// collRun is one rank's part in one collective: the machine and what
// moves its inputs.
type collRun struct {
	c       *Context
	def     *collDef
	hdr     *coll.Header
	fwd     collFwd
	payload []byte

	mu       sync.Mutex
	m        *coll.Machine[[]byte]
	kids     []uint32          // this rank's children
	ids      map[uint32]uint64 // children's requests in flight
	causes   map[uint32]error  // local causes of children's failures
	cancel   context.CancelFunc
	finished bool
	result   coll.Result[[]byte]
	onDone   func(res coll.Result[[]byte])
	done     chan struct{} // closed when finished
}

func newCollRun(c *Context, def *collDef, hdr *coll.Header, payload []byte) *collRun {
	return &collRun{
		c: c, def: def, hdr: hdr, payload: payload,
		fwd:    collFwd{hdr: hdr.Append(nil), payload: payload},
		ids:    map[uint32]uint64{},
		causes: map[uint32]error{},
		done:   make(chan struct{}),
	}
}

func (run *collRun) start(tree *coll.Tree, self uint32, local bool, deadline int64) {
	cfg := coll.Config[[]byte]{Tree: tree, Self: self, Local: local, Order: run.def.order, Deadline: deadline}
	if agg := run.def.agg; agg != nil {
		cfg.Combine = func(acc, v []byte) ([]byte, error) {
			var out []byte
			err := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("aggregator panicked: %v", p)
					}
				}()
				out, err = agg(acc, v)
				return err
			}()
			return out, err
		}
	}
	m, err := coll.New(cfg)
	if err != nil {
		panic(err) // self is in the tree: the callers check
	}
	run.mu.Lock()
	run.m, run.kids = m, m.Children()
	run.mu.Unlock()
	run.check()
}

// forward sends the collective to every child.
func (run *collRun) forward(timeout time.Duration) {
	c := run.c
	for _, child := range run.kids {
		out := &collReplyOut{}
		cb := func(_ *request, err error) { run.childDone(child, out, err) }
		id, err := c.sendColl(Endpoint{Rank: child, Tag: c.tag}, &run.fwd, out, timeout, cb)
		run.mu.Lock()
		if err != nil {
			run.causes[child] = err
			if !run.finished {
				run.m.ChildFailed(child, reasonOf(err), err.Error())
			}
		} else if !run.finished && slices.Contains(run.m.Pending(), child) {
			run.ids[child] = id
		}
		run.mu.Unlock()
		run.check()
	}
}

// childDone feeds a child's outcome.
func (run *collRun) childDone(child uint32, out *collReplyOut, err error) {
	run.mu.Lock()
	delete(run.ids, child)
	if !run.finished {
		switch {
		case err != nil:
			run.causes[child] = err
			run.m.ChildFailed(child, reasonOf(err), err.Error())
		case out.refused:
			run.m.ChildFailed(child, out.reason, out.detail)
		default:
			run.m.Reply(child, out.rep)
		}
	}
	run.mu.Unlock()
	run.check()
}

// runLocal runs the handler and feeds its outcome.
func (run *collRun) runLocal(ctx context.Context) {
	c := run.c
	req := &CollectiveRequest{
		ID: run.hdr.ID, Opcode: Opcode(run.hdr.Opcode), Root: run.hdr.Root, Rank: c.in.rank,
		GroupVersion: run.hdr.GroupVersion, Topology: run.hdr.Topology, Context: c, input: run.payload,
	}
	if dl, ok := ctx.Deadline(); ok {
		req.Deadline = dl
	}
	var v []byte
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				c.in.log.Error("collective handler panicked", "opcode", req.Opcode, "panic", p)
				err = fmt.Errorf("handler panicked: %v", p)
			}
		}()
		out, err := run.def.handler(ctx, req)
		if err != nil {
			return err
		}
		v, err = encodeFlat(out)
		return err
	}()
	run.mu.Lock()
	if !run.finished {
		if err != nil {
			run.m.LocalFailed(coll.ReasonHandler, err.Error())
		} else {
			run.m.Local(v)
		}
	}
	run.mu.Unlock()
	run.check()
}

// abort ends the collective now.
func (run *collRun) abort(reason coll.Reason, detail string) {
	run.mu.Lock()
	if !run.finished {
		run.m.Abort(reason, detail)
	}
	run.mu.Unlock()
	run.check()
}

// timer ends the collective at its deadline.
func (run *collRun) timer() {
	in := run.c.in
	for {
		d := time.Duration(run.m.Deadline() - in.now())
		t := in.clock.NewTimer(max(d, 0))
		select {
		case <-t.C():
		case <-run.done:
			t.Stop()
			return
		case <-run.c.done:
			// The context is closing: end at once, so that the handler's
			// ctx ends and progress can stop.
			t.Stop()
			run.abort(coll.ReasonShutdown, "the context is closing")
			return
		}
		run.mu.Lock()
		if !run.finished {
			run.m.Tick(in.now())
		}
		run.mu.Unlock()
		run.check()
		select {
		case <-run.done:
			return
		default:
		}
	}
}

// check finishes the run once its machine is done: it aborts the
// children's requests still in flight, ends the handler's context and
// hands the result on.
func (run *collRun) check() {
	run.mu.Lock()
	if run.finished || run.m == nil || !run.m.Done() {
		run.mu.Unlock()
		return
	}
	run.finished = true
	run.result, _ = run.m.Result()
	ids := make([]uint64, 0, len(run.ids))
	for _, id := range run.ids {
		ids = append(ids, id)
	}
	clear(run.ids)
	cancel, onDone := run.cancel, run.onDone
	run.mu.Unlock()
	for _, id := range ids {
		run.c.finishID(id, track.Canceled, nil)
	}
	if cancel != nil {
		cancel()
	}
	if onDone != nil {
		onDone(run.result)
	}
	close(run.done)
}

// sendColl sends a forward whose callback runs where it completes and
// returns its id.
func (c *Context) sendColl(ep Endpoint, in Input, out Output, timeout time.Duration, cb func(*request, error)) (uint64, error) {
	r := getRequest(c)
	r.mode = modeInline
	r.req.Endpoint, r.req.Opcode, r.req.Out = ep, OpCollective, out
	r.icb = cb
	if err := c.prepare(r, ep, OpCollective, in, timeout); err != nil {
		r.unref()
		return 0, err
	}
	r.refs.Add(1) // read the id even if it completes at once
	if err := c.submit(r); err != nil {
		r.refs.Add(-1)
		r.unref()
		return 0, err
	}
	id := r.entry.ID()
	r.unref()
	return id, nil
}

// collFwd is a forward's input: the header in the front segment, the
// collective's input in the data segment (shared by every forward).
type collFwd struct {
	hdr     []byte
	payload []byte
}

func (f *collFwd) AppendBinary(b []byte) ([]byte, error) { return append(b, f.hdr...), nil }

func (f *collFwd) AppendData(bufs [][]byte) [][]byte {
	if len(f.payload) == 0 {
		return bufs
	}
	return append(bufs, f.payload)
}

// Reply statuses of OpCollective. Wire constants; append only.
const (
	collReport  byte = 0 // a coll.Report follows
	collRefused byte = 1 // a reason byte and a text follow
)

// collReplyOut decodes a forward's reply.
type collReplyOut struct {
	refused bool
	reason  coll.Reason
	detail  string
	rep     coll.Report[[]byte]
}

func (o *collReplyOut) UnmarshalBinary(b []byte) error {
	if len(b) < 1 {
		return errors.New("empty collective reply")
	}
	switch b[0] {
	case collReport:
		rep, err := coll.DecodeReport(b[1:])
		if err != nil {
			return err
		}
		rep.Value = slices.Clone(rep.Value)
		if rep.HasValue && rep.Value == nil {
			rep.Value = []byte{}
		}
		o.rep = rep
	case collRefused:
		if len(b) < 2 || len(b)-2 > coll.MaxDetail {
			return fmt.Errorf("collective refusal of %d bytes", len(b))
		}
		o.refused, o.reason, o.detail = true, coll.Reason(b[1]), string(b[2:])
		if o.reason.String() == fmt.Sprintf("reason %d", b[1]) || o.reason == 0 {
			return fmt.Errorf("collective refusal with unknown reason %d", b[1])
		}
	default:
		return fmt.Errorf("collective reply status %d", b[0])
	}
	return nil
}

// rawOut is an output that is already encoded.
type rawOut []byte

func (o rawOut) AppendBinary(b []byte) ([]byte, error) { return append(b, o...), nil }

// refuse answers a forward with a refusal.
func refuse(r *Incoming, reason coll.Reason, detail string) error {
	if len(detail) > coll.MaxDetail {
		detail = detail[:coll.MaxDetail]
	}
	return r.Reply(rawOut(append([]byte{collRefused, byte(reason)}, detail...)))
}

// handleCollective serves OpCollective on an intermediate or leaf rank:
// it checks the header and the group version, forwards to this rank's
// children, runs the handler, and replies to its parent with the
// subtree's report when the machine is done.
func (in *Instance) handleCollective(r *Incoming) error {
	hdr, _, err := coll.DecodeHeader(r.body)
	if err != nil {
		return &Error{Code: CodeMalformed, Opcode: r.Opcode(), Msg: "collective header", Err: err}
	}
	var payload []byte
	switch data := r.Data(); len(data) {
	case 0:
	case 1:
		payload = data[0]
	default:
		payload = msg.Buffers(data).Bytes()
	}
	self := in.rank
	op := Opcode(hdr.Opcode)
	def := in.collDef(op)
	if def == nil {
		return refuse(r, coll.ReasonRefused, fmt.Sprintf("collective %v is not registered at rank %d", op, self))
	}
	if v := in.group.Version(); v != hdr.GroupVersion {
		return refuse(r, coll.ReasonVersion, fmt.Sprintf("rank %d is at group version %d, the collective at %d", self, v, hdr.GroupVersion))
	}
	tree, err := hdr.Tree(in.group.Ranks())
	if err != nil || !tree.Has(self) || self == hdr.Root {
		return refuse(r, coll.ReasonExcluded, fmt.Sprintf("rank %d is not in the collective's scope", self))
	}
	c := r.Target()
	budget, ok := r.Remaining()
	if !ok {
		budget = c.Timeout()
	}
	if budget <= 0 {
		return refuse(r, coll.ReasonTimedOut, "arrived after its deadline")
	}
	run := newCollRun(c, def, &hdr, payload)
	run.onDone = func(res coll.Result[[]byte]) {
		b := coll.AppendReport([]byte{collReport}, res.Report)
		if err := r.Reply(rawOut(b)); err != nil {
			in.log.Debug("collective reply not sent", "opcode", op, "id", hdr.ID, "err", err)
		}
	}
	slack := collSlack(budget)
	run.start(tree, self, true, in.now()+int64(budget-slack/2))
	run.forward(budget - slack)
	go run.timer()
	ctx, cancel := context.WithTimeout(context.Background(), budget-slack/2)
	run.mu.Lock()
	if run.finished {
		cancel()
	} else {
		run.cancel = cancel
	}
	run.mu.Unlock()
	run.runLocal(ctx)
	return nil
}
