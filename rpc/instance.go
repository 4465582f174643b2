package rpc

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc/internal/wire"
)

// Instance is one process's RPC endpoint (CaRT after crt_init): a
// messenger, the registered protocols, the primary group and the
// contexts. All methods are safe for concurrent use.
type Instance struct {
	opts  Options
	log   *slog.Logger
	m     *msgr.Messenger
	ownM  bool
	uri   string
	rank  uint32
	group *Group
	reg   registry
	colls collRegistry // collectives (collective.go)
	clock Clock
	epoch time.Time // origin of the monotonic nanoseconds the trackers use

	// life is held for reading while a message is dispatched and for
	// writing by Close, so Close waits for dispatches in progress.
	life   sync.RWMutex
	closed atomic.Bool

	ctxMu sync.Mutex
	ctxs  atomic.Pointer[[]*Context] // by tag; nil entries are free tags

	malformed atomic.Uint64 // RPC messages whose header did not decode

	swimMu         sync.Mutex
	swim           *SWIM // the failure detector, once started
	swimRegistered bool

	disp *dispatcher
	// The messenger of the transfers' own connections
	// (BulkOptions.SeparateConn), started by the first transfer.
	laneMu sync.Mutex
	lane   *msgr.Messenger

	bulks    bulkRegistry  // registered buffers by key
	nextXfer atomic.Uint64 // the last transfer id given out (ids are unique in the instance)
	// peers holds the account of each connection's peer (*msgr.Conn →
	// *peer): everything that peer makes this instance hold (peer.go).
	peers  sync.Map
	nPeers atomic.Int64 // accounts in peers
	// charged is what all peers hold, by charge, released accounts
	// included (peer.add keeps it).
	charged [nCharges]atomic.Int64
	owed    atomic.Int64 // what its peers' accounts owe together, against Options.PeerBudget (peer.go)

	budgetRefusals atomic.Uint64 // takes owe refused

	met       *rpcMetrics                        // see metrics.go
	intercept func(r *Incoming, h Handler) error // Options.Interceptors chained; nil for none
}

// New creates an instance (crt_init_opt): it starts a messenger (or
// joins opts.Messenger), listens if opts.Listen is set, and registers the
// internal protocols (proto-query, URI lookup, ping) and the self-test
// service. Create contexts with NewContext.
func New(opts Options) (*Instance, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	in := &Instance{opts: o, log: o.Logger, clock: o.Clock, rank: RankNone}
	in.epoch = o.Clock.Now()
	in.reg.init()
	in.bulks.init()
	empty := []*Context{}
	in.ctxs.Store(&empty)
	d := &dispatcher{in: in}
	in.disp = d

	if o.Messenger != nil {
		in.m = o.Messenger
		if ls := in.m.ListenAddrs(); len(ls) > 0 {
			in.uri = strings.Join(ls, ",")
			in.rank = o.Rank
		}
		in.m.AddDispatcherHead(d)
	} else {
		name := o.Name
		if name.Type == 0 {
			name = msg.EntityName{Type: msg.EntityClient, Num: msg.NewID}
			if o.Listen != "" {
				name = msg.EntityName{Type: msg.EntityOSD, Num: int64(o.Rank)}
			}
		}
		m, err := msgr.New(msgr.Config{Name: name, Transports: o.Transports, Logger: o.Logger, NoDataCRC: o.NoDataCRC, BusyPoll: o.BusyPoll})
		if err != nil {
			return nil, err
		}
		// Lossy sessions both ways: a failed connection fails its
		// requests at once (ErrUnreachable) rather than replaying them.
		m.SetDefaultPolicy(msgr.LossyClient())
		m.AddDispatcherHead(d)
		for _, a := range splitURIs(o.Listen) {
			if err := m.Bind(a); err != nil {
				m.Shutdown()
				return nil, err
			}
		}
		if err := m.Start(); err != nil {
			m.Shutdown()
			return nil, err
		}
		in.m, in.ownM = m, true
		if o.Listen != "" {
			in.uri = strings.Join(m.ListenAddrs(), ",")
			in.rank = o.Rank
		}
	}
	in.intercept = chainInterceptors(o.Interceptors)
	in.met = newRPCMetrics(in.m.Metrics(), in)
	in.reg.met = in.met
	in.group = newGroup(o.Group, in, in.rank, in.uri)
	if err := in.registerInternal(); err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

// URI returns the address this instance serves on, as peers dial it
// ("tcp://127.0.0.1:41234"), or its addresses separated by commas when it
// listens on several ("shm:///run/ferry/r0.sock,tcp://10.0.0.5:41234");
// empty for a client.
func (in *Instance) URI() string { return in.uri }

// Rank returns this instance's rank (RankNone for a client).
func (in *Instance) Rank() uint32 { return in.rank }

// Group returns the primary group.
func (in *Instance) Group() *Group { return in.group }

// Messenger returns the messenger the instance runs on.
func (in *Instance) Messenger() *msgr.Messenger { return in.m }

// MalformedMessages returns how many RPC messages arrived with an RPC
// header that did not decode (they are dropped: without a header there
// is nobody to answer).
func (in *Instance) MalformedMessages() uint64 { return in.malformed.Load() }

// Register registers a protocol (crt_proto_register). Its base must be
// below MinReservedBase; a base and version may be registered once.
func (in *Instance) Register(p Protocol) error { return in.reg.register(p, false) }

// Versions returns the registered versions of protocol base, ascending.
func (in *Instance) Versions(base uint8) []uint8 { return in.reg.versions(base) }

// NewContext creates a context (crt_context_create); its tag is the
// lowest free index. The first context has tag 0.
func (in *Instance) NewContext(o ContextOptions) (*Context, error) {
	if in.closed.Load() {
		return nil, ErrShutdown
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("%w: context timeout %v", ErrInvalid, o.Timeout)
	}
	if len(o.CPUs) > 0 && !o.Auto {
		return nil, fmt.Errorf("%w: CPUs need Auto progress", ErrInvalid)
	}
	in.ctxMu.Lock()
	defer in.ctxMu.Unlock()
	cur := *in.ctxs.Load()
	tag := len(cur)
	for i, c := range cur {
		if c == nil {
			tag = i
			break
		}
	}
	if tag >= in.opts.MaxContexts {
		return nil, fmt.Errorf("%w: %d contexts already (MaxContexts)", ErrInvalid, in.opts.MaxContexts)
	}
	c, err := newContext(in, uint16(tag), o)
	if err != nil {
		return nil, err
	}
	n := make([]*Context, max(len(cur), tag+1))
	copy(n, cur)
	n[tag] = c
	in.ctxs.Store(&n)
	return c, nil
}

// Context returns the context with tag, or nil.
func (in *Instance) Context(tag uint16) *Context {
	cs := *in.ctxs.Load()
	if int(tag) < len(cs) {
		return cs[tag]
	}
	return nil
}

// contextSlot returns the context with tag, or nil and whether a context
// had that tag and was closed: tags are handed out lowest free first, so
// a free slot below the highest tag is one a closed context left.
func (in *Instance) contextSlot(tag uint16) (c *Context, closed bool) {
	cs := *in.ctxs.Load()
	if int(tag) < len(cs) {
		return cs[tag], cs[tag] == nil
	}
	return nil, false
}

func (in *Instance) contexts() []*Context {
	var out []*Context
	for _, c := range *in.ctxs.Load() {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

func (in *Instance) removeContext(c *Context) {
	in.ctxMu.Lock()
	defer in.ctxMu.Unlock()
	cur := *in.ctxs.Load()
	n := make([]*Context, len(cur))
	copy(n, cur)
	if int(c.tag) < len(n) && n[c.tag] == c {
		n[c.tag] = nil
	}
	in.ctxs.Store(&n)
}

// Close destroys every context (their outstanding requests complete with
// ErrShutdown and their callbacks run), waits for dispatches in progress
// and shuts the messenger down if the instance created it. It is
// idempotent.
func (in *Instance) Close() error {
	in.life.Lock()
	already := in.closed.Swap(true)
	in.life.Unlock()
	if already {
		return nil
	}
	if s := in.swimSvc(); s != nil {
		s.Close()
	}
	for _, c := range in.contexts() {
		c.Close()
	}
	in.group.watch.close()
	if in.ownM {
		in.m.Shutdown()
	}
	in.laneMu.Lock()
	lane := in.lane
	in.laneMu.Unlock()
	if lane != nil {
		lane.Shutdown()
	}
	// The messenger does not report the connections its shutdown closes:
	// their peers' accounts end here. (On a messenger the instance only
	// joined, the connections stay, and so do their accounts until they
	// close.)
	in.peers.Range(func(k, v any) bool {
		select {
		case <-k.(*msgr.Conn).Done():
			v.(*peer).release()
		default:
		}
		return true
	})
	return nil
}

// laneConn returns the transfers' own connection to uri
// (BulkOptions.SeparateConn), starting their messenger on first use: a
// client of its own, with the instance's transports, data CRC setting
// and dispatcher, and lossy sessions like the instance's.
func (in *Instance) laneConn(uri string) (*msgr.Conn, error) {
	in.laneMu.Lock()
	if in.lane == nil {
		if in.closed.Load() {
			in.laneMu.Unlock()
			return nil, &Error{Code: CodeShutdown}
		}
		cfg := in.m.Config()
		cfg.Name = msg.EntityName{Type: msg.EntityClient, Num: msg.NewID}
		cfg.Nonce, cfg.ZeroNonce = 0, false
		m, err := msgr.New(cfg)
		if err == nil {
			m.SetDefaultPolicy(msgr.LossyClient())
			m.AddDispatcherHead(in.disp)
			if err = m.Start(); err != nil {
				m.Shutdown()
			}
		}
		if err != nil {
			in.laneMu.Unlock()
			return nil, &Error{Code: CodeUnreachable, Msg: "starting the transfers' messenger", Err: err}
		}
		in.lane = m
	}
	m := in.lane
	in.laneMu.Unlock()
	conn, err := m.Connect(uri)
	if err != nil {
		return nil, &Error{Code: CodeUnreachable, Msg: "connecting to " + uri, Err: err}
	}
	return conn, nil
}

// now returns the monotonic time in nanoseconds since the instance
// started, at least 1 (the trackers' 0 means "no deadline").
func (in *Instance) now() int64 {
	return int64(in.clock.Now().Sub(in.epoch)) + 1
}

// groupChanged is called by the group after a membership change.
func (in *Instance) groupChanged(removed, changed []uint32) {
	for _, c := range in.contexts() {
		c.ranksChanged(removed, changed)
	}
}

// dropBulk settles a bulk chunk that was read straight into a
// registered buffer and is dropped because the instance is closing: its
// transfer still finishes (with ErrShutdown if it had not ended).
func (in *Instance) dropBulk(m *msg.Message) {
	conn, ok := m.Conn.(*msgr.Conn)
	if !ok || conn == nil {
		return
	}
	if m.Header.Type == wire.TypeReply {
		// An overflowing output nobody will pull: its holder may free it.
		if h, body, err := wire.Decode(frontOf(m)); err == nil {
			in.releaseOutput(m, &h, body)
		}
		return
	}
	if m.Header.Type != wire.TypeBulk {
		return
	}
	in.settlePlaced(conn, &Error{Code: CodeShutdown})
	// Direct ranges end either way: a holder that granted one waits for
	// the initiator to be done with it (its Free does), so say so, as
	// directInfo does for a transfer that is gone; and a closing holder
	// still ends the leases its peers report done.
	h, err := wire.DecodeBulk(frontOf(m))
	switch {
	case err != nil:
	case h.Op == wire.BulkDirectInfo && h.RC == int32(CodeOK) && h.Flags&wire.BulkFlagNoDirect == 0:
		directDone(conn, &h)
	case h.Op == wire.BulkDirectDone:
		// A peer done with a range this instance granted: the lease
		// (and the write of the buffer it holds) ends, so Free returns.
		in.handleDirect(conn, &h, m)
	}
}

// frontOf returns m's front segment as one slice (without copying when it
// is one piece already).
func frontOf(m *msg.Message) []byte {
	switch len(m.Front) {
	case 0:
		return nil
	case 1:
		return m.Front[0]
	}
	return m.Front.Bytes()
}

// releaseOutput tells the holder of an overflowing output (a reply with
// FlagBulkOut) that nobody here will pull it, so that it frees the
// handle at once rather than when the connection ends.
func (in *Instance) releaseOutput(m *msg.Message, h *wire.Header, body []byte) {
	conn, ok := m.Conn.(*msgr.Conn)
	if !ok || conn == nil || h.Flags&wire.FlagBulkOut == 0 {
		return
	}
	key, _, _, err := wire.DecodeOverflow(body)
	if err != nil {
		return
	}
	rm := bulkMsg(&wire.BulkHeader{Op: wire.BulkRelease, SrcTag: h.DstTag, DstTag: h.SrcTag, Key: key}, nil, msg.PrioDefault)
	if err := conn.Send(rm); err != nil {
		rm.Done()
	}
}

// dispatcher is the instance's msgr dispatcher: it takes RPC requests
// and replies on the connections' reader goroutines (fast dispatch) and
// hears about failed connections.
type dispatcher struct{ in *Instance }

func isRPC(m *msg.Message) bool {
	t := m.Header.Type
	return t == wire.TypeRequest || t == wire.TypeReply || t == wire.TypeBulk
}

// CanFastDispatch takes every RPC message.
func (d *dispatcher) CanFastDispatch(m *msg.Message) bool { return isRPC(m) }

// FastDispatch handles an RPC message on the reader goroutine.
func (d *dispatcher) FastDispatch(m *msg.Message) { d.in.dispatch(m) }

// Dispatch handles RPC messages that came the slow way (none normally).
func (d *dispatcher) Dispatch(m *msg.Message) bool {
	if !isRPC(m) {
		return false
	}
	d.in.dispatch(m)
	return true
}

// HandleReset fails the requests sent on a connection that failed.
func (d *dispatcher) HandleReset(c *msgr.Conn) { d.in.connFailed(c) }

// HandleRefused fails the requests queued on a connection that could not
// be set up.
func (d *dispatcher) HandleRefused(c *msgr.Conn) { d.in.connFailed(c) }

// HandleRemoteReset fails the requests sent on a lossless connection
// whose peer restarted (a new incarnation reset the session): the
// messenger dropped them with the session, so no reply can come. What
// the old incarnation held is released as for a failed connection.
func (d *dispatcher) HandleRemoteReset(c *msgr.Conn) { d.in.connFailed(c) }

func (in *Instance) connFailed(conn *msgr.Conn) {
	if !in.life.TryRLock() {
		return
	}
	defer in.life.RUnlock()
	if in.closed.Load() {
		return
	}
	for _, c := range in.contexts() {
		c.connFailed(conn)
	}
	in.peerGone(conn) // what its peer held, and the transfers on it
}

// fault closes conn because its peer broke the RPC protocol (what says
// how), after counting it in MalformedMessages. What the instance had
// outstanding on conn fails as on any connection failure; the peer's
// other connections and every other session go on.
func (in *Instance) fault(conn *msgr.Conn, what string) {
	in.malformed.Add(1)
	if conn == nil {
		return
	}
	conn.Fault(fmt.Errorf("%w: %s", ErrMalformed, what))
}

func (in *Instance) dispatch(m *msg.Message) {
	if !in.life.TryRLock() {
		in.dropBulk(m) // closing
		return
	}
	defer in.life.RUnlock()
	if in.closed.Load() {
		in.dropBulk(m)
		return
	}
	if m.Header.Type == wire.TypeBulk {
		in.handleBulk(m)
		return
	}
	h, body, err := wire.Decode(frontOf(m))
	if err != nil {
		// Without a header there is no tag to answer to: drop it, and
		// the connection that sent it.
		conn, _ := m.Conn.(*msgr.Conn)
		in.fault(conn, "RPC message with a bad header: "+err.Error())
		m.Done()
		return
	}
	if m.Header.Type == wire.TypeReply {
		if c := in.Context(h.DstTag); c != nil && h.Flags&wire.FlagBulkOut != 0 {
			c.pullReply(m, &h, body)
		} else if c != nil {
			c.handleReply(m, &h, body)
		} else {
			in.releaseOutput(m, &h, body)
			m.Done()
		}
		return
	}
	in.handleRequest(m, &h, body)
}

// rankString formats a rank, "none" for RankNone.
func rankString(r uint32) string {
	if r == RankNone {
		return "none"
	}
	return strconv.FormatUint(uint64(r), 10)
}

func (in *Instance) handleRequest(m *msg.Message, h *wire.Header, body []byte) {
	c, closed := in.contextSlot(h.DstTag)
	op := Opcode(h.Opcode)
	var def *rpcDef
	code, text := CodeOK, ""
	switch {
	case h.DstRank != in.rank:
		// Another rank's request (a stale URI, a target started with the
		// wrong rank): answering it would act for that rank.
		code, text = CodeWrongRank, fmt.Sprintf("request for rank %d reached rank %s", h.DstRank, rankString(in.rank))
	case closed:
		code, text = CodeShutdown, fmt.Sprintf("the context with tag %d is closed", h.DstTag)
	case c == nil:
		code, text = CodeBadTarget, fmt.Sprintf("no context with tag %d", h.DstTag)
	default:
		if def = in.reg.lookup(op); def == nil || def.handler == nil {
			code, text = CodeUnregistered, "not registered at the target"
		} else if def.flags&CheckGroupVersion != 0 {
			if v := in.group.Version(); h.GroupVersion != v {
				code, text = CodeGroupVersion, fmt.Sprintf("origin's group version %d, target's %d", h.GroupVersion, v)
			}
		}
	}
	r := getIncoming()
	r.init(in, c, def, m, h, body)
	if code != CodeOK {
		r.failCode(code, text)
		return
	}
	r.acct = in.peerFor(r.conn)
	if why := c.holdIncoming(r, int64(len(body)+r.data.Len())); why != "" {
		c.nBusy.Add(1)
		r.failCode(CodeBusy, why)
		return
	}
	if h.Flags&wire.FlagBulkIn != 0 {
		c.pullInput(r) // delivers r once its input has arrived
		return
	}
	c.deliverIncoming(r)
}

// holdIncoming counts r's n bytes against the context's IncomingLimit
// and the instance's PeerBudget (the peer's account, peer.take) until r
// is answered (release), or says why they do not fit.
func (c *Context) holdIncoming(r *Incoming, n int64) string {
	if a := r.acct; a != nil && !a.take(chUnanswered, n, math.MaxInt64) {
		return "the target owes its peers its PeerBudget, or this origin its share of it"
	}
	limit := int64(c.in.opts.IncomingLimit)
	for {
		cur := c.inHeld.Load()
		if cur > 0 && cur+n > limit {
			r.acct.add(chUnanswered, -n)
			return "the target context holds its IncomingLimit of unanswered requests"
		}
		if c.inHeld.CompareAndSwap(cur, cur+n) {
			r.held = n
			return ""
		}
	}
}

// deliverIncoming runs r's handler inline or queues it for progress.
func (c *Context) deliverIncoming(r *Incoming) {
	def := r.def
	c.nReceived.Add(1)
	if def.flags&Inline != 0 {
		c.serve(r)
		return
	}
	if !c.pushWork(work{in: r}) {
		r.failCode(CodeShutdown, "context is shutting down")
	}
}
