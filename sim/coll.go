package sim

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ferrymsg/ferry/coll"
	"github.com/ferrymsg/ferry/swim"
)

// Collectives starts broadcasts with aggregation over the group while
// SWIM runs: the real tree and aggregation machines of package coll, one
// per rank per collective, over the simulated network.
//
// The root is a seeded choice among the ranks up (not crashed, not
// paused) at the start. Its scope is every rank its SWIM machine does not
// hold dead (the others are excluded, as CaRT leaves excluded ranks out).
// Each rank runs its handler at once when the collective reaches it (its
// value is rank+1, summed on the way up, so the root can check the
// aggregate against the ranks that answered), forwards to its children
// and reports to its parent when its machine is done.
//
// Collective messages model RPCs over a reliable transport: they take the
// network's delays and partitions (a message across a partition is lost,
// and its sender waits for its deadline) but not its random loss, which
// TCP would repair. A forward to a crashed rank is refused (its parent
// hears of it one delay later, as a connection refused); a rank that
// crashes with its part unfinished resets its parent's request, which
// fails one delay later (ReasonUnreachable); a paused rank answers when it
// resumes, if its parent is still waiting.
type Collectives struct {
	// Every starts one collective every Every of simulated time, the
	// first at Every, the last no later than the run's end minus Timeout.
	// Zero means none.
	Every time.Duration
	// Topology is the trees' shape (coll.KNomial(4) when zero).
	Topology coll.Topology
	// Timeout is the root's deadline after the start (10 s when zero). A
	// rank at level L of a tree of depth D waits for its children until
	// start + Timeout − L·Timeout/(2(D+1)), so a parent's deadline comes
	// after its children's and a timed-out subtree is reported as such.
	Timeout time.Duration
}

// DefaultCollTimeout is Collectives.Timeout's default.
const DefaultCollTimeout = 10 * time.Second

// CollResult is one collective's outcome.
type CollResult struct {
	ID    int
	Root  int
	Start time.Duration
	// Scope is the number of ranks in the tree; Excluded the ranks the
	// root held dead and left out; Live the ranks not crashed at the
	// start.
	Scope, Excluded, Live int
	// Answered and Failed are what the root's machine reported;
	// Unreachable and TimedOut split Failed by reason.
	Answered, Failed, Unreachable, TimedOut int
	// Latency is the time from the start until the root's machine was
	// done; negative if it never was (the root crashed, or the run ended).
	Latency time.Duration
	// AggregateOK says the aggregate equals the sum of rank+1 over the
	// ranks that answered, and Answered and Failed partition the scope.
	AggregateOK bool
	// CrashedListed says every rank of the scope that had crashed before
	// the start is listed as failed.
	CrashedListed bool
	// RootCrashed says the root crashed before its machine was done.
	RootCrashed bool
}

// Reach is the fraction of the ranks live at the start that answered.
func (c *CollResult) Reach() float64 {
	if c.Live == 0 {
		return 0
	}
	return float64(c.Answered) / float64(c.Live)
}

// Collective message kinds, recorded in the trace: append only.
const (
	cmForward uint8 = iota + 1 // the collective, to a child
	cmReport                   // a child's report, to its parent
	cmRefused                  // the child's connection refused or reset
)

// collRun is a collective in progress.
type collRun struct {
	tree    *coll.Tree
	start   int64
	root    uint32
	timeout int64
	step    int64
	ms      map[uint32]*coll.Machine[uint64] // ranks whose part is not done
	done    bool
}

// collMsg is a collective message in flight.
type collMsg struct {
	c        int32
	kind     uint8
	from, to uint32
	rep      coll.Report[uint64]
}

func sumAgg(acc, v uint64) uint64 { return acc + v }

func (s *sim) collSetup(cfg *Collectives) error {
	if cfg.Every < 0 || cfg.Timeout < 0 {
		return fmt.Errorf("%w: collectives every %v, timeout %v", ErrConfig, cfg.Every, cfg.Timeout)
	}
	if cfg.Every == 0 {
		return nil
	}
	s.collTopo = cfg.Topology
	if s.collTopo == 0 {
		s.collTopo = coll.KNomial(4)
	}
	if err := s.collTopo.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s.collTimeout = int64(cfg.Timeout)
	if s.collTimeout == 0 {
		s.collTimeout = int64(DefaultCollTimeout)
	}
	for t := int64(cfg.Every); t+s.collTimeout <= int64(s.cfg.Duration); t += int64(cfg.Every) {
		s.q.push(event{at: t, kind: evColl, arg: int32(len(s.colls))})
		s.colls = append(s.colls, nil)
		s.res.Colls = append(s.res.Colls, CollResult{ID: len(s.res.Colls), Root: -1, Start: time.Duration(t), Latency: -1})
	}
	return nil
}

// collStart starts collective c now.
func (s *sim) collStart(c int32) {
	n := len(s.nodes)
	root := uint32(s.collRnd.IntN(n))
	for i := 0; s.nodes[root].state != up && i < n; i++ {
		root = (root + 1) % uint32(n)
	}
	cr := &s.res.Colls[c]
	if s.nodes[root].state != up {
		return // nobody is up: the collective does not start
	}
	cr.Root = int(root)
	s.members = s.nodes[root].m.Members(s.members[:0])
	scope := make([]coll.Rank, 0, len(s.members))
	for _, m := range s.members {
		if m.State == swim.Dead {
			cr.Excluded++
			continue
		}
		scope = append(scope, coll.Rank(m.ID))
	}
	for r := range n {
		if s.nodes[r].state != crashed {
			cr.Live++
		}
	}
	tree, err := coll.NewTree(s.collTopo, scope, coll.Rank(root))
	if err != nil {
		panic(fmt.Sprintf("sim: collective %d: %v", c, err)) // the root is in its own scope
	}
	cr.Scope = tree.Size()
	d := int64(tree.Depth())
	run := &collRun{tree: tree, start: s.now, root: root, timeout: s.collTimeout, step: s.collTimeout / (2 * (d + 1)),
		ms: make(map[uint32]*coll.Machine[uint64])}
	s.colls[c] = run
	s.collArrive(c, root)
}

// collArrive runs rank r's part of collective c: its handler, its
// forwards, its deadline.
func (s *sim) collArrive(c int32, r uint32) {
	run := s.colls[c]
	if _, ok := run.ms[r]; ok || run.done {
		return
	}
	dl := run.start + run.timeout - int64(run.tree.Level(coll.Rank(r)))*run.step
	m, err := coll.New(coll.Config[uint64]{Tree: run.tree, Self: coll.Rank(r), Local: true, Aggregate: sumAgg, Deadline: dl})
	if err != nil {
		panic(fmt.Sprintf("sim: collective %d at rank %d: %v", c, r, err))
	}
	run.ms[r] = m
	if err := m.Local(uint64(r) + 1); err != nil {
		panic(fmt.Sprintf("sim: collective %d at rank %d: %v", c, r, err))
	}
	for _, k := range m.Children() {
		s.collSend(c, cmForward, r, uint32(k), coll.Report[uint64]{})
	}
	if m.Done() {
		s.collDone(c, r, m)
		return
	}
	s.q.push(event{at: dl, kind: evCollTick, rank: r, arg: c})
}

// collTick fires rank r's deadline in collective c.
func (s *sim) collTick(c int32, r uint32) {
	run := s.colls[c]
	m, ok := run.ms[r]
	if !ok {
		return
	}
	switch n := &s.nodes[r]; n.state {
	case crashed:
		return
	case paused:
		// The timer fires when the process runs again.
		s.q.push(event{at: n.until, kind: evCollTick, rank: r, arg: c})
		return
	}
	if m.Tick(s.now) {
		s.collDone(c, r, m)
	}
}

// collDone sends rank r's report up, or ends the collective at the root.
func (s *sim) collDone(c int32, r uint32, m *coll.Machine[uint64]) {
	run := s.colls[c]
	delete(run.ms, r)
	res, _ := m.Result()
	if r != run.root {
		p, _ := run.tree.Parent(coll.Rank(r))
		s.collSend(c, cmReport, r, uint32(p), res.Report)
		return
	}
	run.done = true
	cr := &s.res.Colls[c]
	cr.Latency = time.Duration(s.now - run.start)
	cr.Answered, cr.Failed = len(res.Answered), len(res.Failed)
	var want uint64
	for _, a := range res.Answered {
		want += uint64(a) + 1
	}
	failed := make(map[coll.Rank]bool, len(res.Failed))
	for _, f := range res.Failed {
		failed[f.Rank] = true
		switch f.Reason {
		case coll.ReasonUnreachable:
			cr.Unreachable++
		case coll.ReasonTimedOut:
			cr.TimedOut++
		}
	}
	cr.AggregateOK = res.HasValue == (len(res.Answered) > 0) && res.Value == want && cr.Answered+cr.Failed == cr.Scope
	for _, a := range res.Answered {
		if failed[a] || !run.tree.Has(a) {
			cr.AggregateOK = false
		}
	}
	cr.CrashedListed = true
	for _, rk := range run.tree.Ranks() {
		if t := s.crashT[rk]; t >= 0 && t <= run.start && !failed[rk] {
			cr.CrashedListed = false
		}
	}
	s.tr.coll(s.now, r, uint32(c), uint32(cr.Answered), uint32(cr.Failed))
	s.colls[c] = &collRun{done: true} // free the tree and machines
}

// collCrash ends rank r's parts in the collectives in progress: its
// parents' requests are reset.
func (s *sim) collCrash(r uint32) {
	for c, run := range s.colls {
		if run == nil || run.done {
			continue
		}
		if _, ok := run.ms[r]; !ok {
			continue
		}
		delete(run.ms, r)
		if r == run.root {
			run.done = true
			s.res.Colls[c].RootCrashed = true
			s.colls[c] = &collRun{done: true}
			continue
		}
		p, _ := run.tree.Parent(coll.Rank(r))
		s.collSend(int32(c), cmRefused, r, uint32(p), coll.Report[uint64]{})
	}
}

// collSend puts a collective message on the network.
func (s *sim) collSend(c int32, kind uint8, from, to uint32, rep coll.Report[uint64]) {
	s.res.CollMsgs++
	delay := s.net.delay()
	if s.net.cut(from, to) {
		s.tr.collMsg(recCollDrop, s.now, from, to, uint32(c), kind, &rep)
		return
	}
	i := s.allocColl()
	s.cmsgs[i] = collMsg{c: c, kind: kind, from: from, to: to, rep: rep}
	s.q.push(event{at: s.now + delay, kind: evCollDeliver, rank: to, arg: i})
}

// collDeliver hands collective message i to its destination.
func (s *sim) collDeliver(i int32) {
	cm := s.cmsgs[i]
	n := &s.nodes[cm.to]
	switch {
	case n.state == paused:
		if len(n.held) >= s.heldMx {
			s.collDrop(i)
			return
		}
		n.held = append(n.held, -i-1)
		return
	case n.state == crashed:
		s.collDrop(i)
		if cm.kind == cmForward {
			// Connection refused: the sender learns of it one delay on.
			s.collSend(cm.c, cmRefused, cm.to, cm.from, coll.Report[uint64]{})
		}
		return
	case s.net.cut(cm.from, cm.to):
		s.collDrop(i)
		return
	}
	s.tr.collMsg(recCollDeliver, s.now, cm.from, cm.to, uint32(cm.c), cm.kind, &cm.rep)
	s.releaseColl(i)
	run := s.colls[cm.c]
	if run == nil || run.done {
		return
	}
	if cm.kind == cmForward {
		s.collArrive(cm.c, cm.to)
		return
	}
	m, ok := run.ms[cm.to]
	if !ok {
		return // its part is over: the answer came too late
	}
	var err error
	if cm.kind == cmReport {
		err = m.Reply(coll.Rank(cm.from), cm.rep)
	} else {
		err = m.ChildFailed(coll.Rank(cm.from), coll.ReasonUnreachable, "connection refused or reset")
	}
	if err != nil {
		s.res.CollErrors++ // the simulator fed the machine something it refused
	}
	if m.Done() {
		s.collDone(cm.c, cm.to, m)
	}
}

func (s *sim) collDrop(i int32) {
	cm := &s.cmsgs[i]
	s.tr.collMsg(recCollDrop, s.now, cm.from, cm.to, uint32(cm.c), cm.kind, &cm.rep)
	s.releaseColl(i)
}

func (s *sim) allocColl() int32 {
	if k := len(s.cfree); k > 0 {
		i := s.cfree[k-1]
		s.cfree = s.cfree[:k-1]
		return i
	}
	s.cmsgs = append(s.cmsgs, collMsg{})
	return int32(len(s.cmsgs) - 1)
}

func (s *sim) releaseColl(i int32) {
	s.cmsgs[i] = collMsg{}
	s.cfree = append(s.cfree, i)
}

// collMsg records a collective message: kind u8, time i64, from u32,
// to u32, collective u32, message kind u8, has value u8, value u64,
// failures u32, then per failure rank u32, reason u8, via u32.
func (t *tracer) collMsg(kind uint8, at int64, from, to, c uint32, mk uint8, rep *coll.Report[uint64]) {
	t.head(kind, at, from)
	t.buf = binary.LittleEndian.AppendUint32(t.buf, to)
	t.buf = binary.LittleEndian.AppendUint32(t.buf, c)
	has := uint8(0)
	if rep.HasValue {
		has = 1
	}
	t.buf = append(t.buf, mk, has)
	t.buf = binary.LittleEndian.AppendUint64(t.buf, rep.Value)
	t.buf = binary.LittleEndian.AppendUint32(t.buf, uint32(len(rep.Failed)))
	for _, f := range rep.Failed {
		t.buf = binary.LittleEndian.AppendUint32(t.buf, f.Rank)
		t.buf = append(t.buf, byte(f.Reason))
		t.buf = binary.LittleEndian.AppendUint32(t.buf, f.Via)
	}
	t.maybeFlush()
}

// CollSummary sums up the collectives of a run.
type CollSummary struct {
	// Run counts the collectives started; Finished those whose root's
	// machine was done; AggregateOK those whose aggregate checked out;
	// CrashedListed those that listed every rank crashed before them.
	Run, Finished, AggregateOK, CrashedListed int
	// ReachMin and ReachMean are over the finished collectives.
	ReachMin, ReachMean float64
	// LatencyMax and LatencyMean are start-to-root-done times of the
	// finished collectives.
	LatencyMax, LatencyMean time.Duration
}

// CollSummary sums up r.Colls.
func (r *Result) CollSummary() CollSummary {
	var cs CollSummary
	var reach float64
	var lat time.Duration
	for i := range r.Colls {
		c := &r.Colls[i]
		if c.Root < 0 {
			continue
		}
		cs.Run++
		if c.Latency < 0 {
			continue
		}
		cs.Finished++
		if c.AggregateOK {
			cs.AggregateOK++
		}
		if c.CrashedListed {
			cs.CrashedListed++
		}
		if cs.Finished == 1 || c.Reach() < cs.ReachMin {
			cs.ReachMin = c.Reach()
		}
		reach += c.Reach()
		lat += c.Latency
		cs.LatencyMax = max(cs.LatencyMax, c.Latency)
	}
	if cs.Finished > 0 {
		cs.ReachMean = reach / float64(cs.Finished)
		cs.LatencyMean = lat / time.Duration(cs.Finished)
	}
	return cs
}
