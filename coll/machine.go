package coll

import (
	"errors"
	"fmt"
	"slices"
)

// Reason says why a rank failed or did not answer. Wire constants (they
// travel in Reports); append only.
type Reason uint8

// Reasons.
const (
	// ReasonUnreachable: the rank could not be reached (its connection
	// failed or was refused, it died mid-collective).
	ReasonUnreachable Reason = 1
	// ReasonExcluded: the rank is excluded from the group, or is not a
	// member of it.
	ReasonExcluded Reason = 2
	// ReasonTimedOut: the rank did not answer before the deadline.
	ReasonTimedOut Reason = 3
	// ReasonVersion: the rank's group version differs from the root's;
	// it refused the collective (CaRT's -DER_GRPVER).
	ReasonVersion Reason = 4
	// ReasonHandler: the rank's handler failed; Detail says how.
	ReasonHandler Reason = 5
	// ReasonCanceled: the collective was aborted before the rank answered.
	ReasonCanceled Reason = 6
	// ReasonShutdown: the rank, or the rank forwarding to it, is shutting
	// down.
	ReasonShutdown Reason = 7
	// ReasonRefused: the rank refused the request for another reason
	// (unregistered opcode, busy, malformed); Detail says which.
	ReasonRefused Reason = 8
)

var reasonNames = [...]string{
	ReasonUnreachable: "unreachable",
	ReasonExcluded:    "excluded",
	ReasonTimedOut:    "timeout",
	ReasonVersion:     "version mismatch",
	ReasonHandler:     "handler error",
	ReasonCanceled:    "canceled",
	ReasonShutdown:    "shutdown",
	ReasonRefused:     "refused",
}

func (r Reason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason %d", uint8(r))
}

// valid reports whether r is a known reason.
func (r Reason) valid() bool { return int(r) < len(reasonNames) && reasonNames[r] != "" }

// MaxDetail bounds a Failure's Detail in bytes; longer ones are cut.
const MaxDetail = 256

// Failure is one rank that failed or did not answer.
type Failure struct {
	Rank   Rank
	Reason Reason
	// Via is the rank whose failure left Rank unreached: Rank itself when
	// Rank failed, an ancestor of Rank when the forward to that ancestor
	// failed and so Rank's subtree was never reached.
	Via Rank
	// Detail is a human-readable cause (an error text), at most
	// MaxDetail bytes.
	Detail string
}

func (f Failure) String() string {
	s := fmt.Sprintf("rank %d: %v", f.Rank, f.Reason)
	if f.Via != f.Rank {
		s += fmt.Sprintf(" (via rank %d)", f.Via)
	}
	if f.Detail != "" {
		s += ": " + f.Detail
	}
	return s
}

// Report is what a rank knows about its subtree once its part is done:
// the aggregate of what its subtree answered (HasValue false if nothing
// did) and the ranks of the subtree that failed, ascending. A rank sends
// it to its parent; the root's is the collective's outcome.
type Report[T any] struct {
	Value    T
	HasValue bool
	Failed   []Failure
}

// Result is a Machine's outcome: its Report plus the ranks of its subtree
// that answered, ascending (those of the subtree that are not in Failed,
// without this rank if it runs no handler).
type Result[T any] struct {
	Report[T]
	Answered []Rank
}

// Order is the order in which children's values are combined.
type Order uint8

// Orders.
const (
	// OrderArrival combines each child's value as it arrives (after
	// this rank's own value).
	OrderArrival Order = iota
	// OrderTree combines the values in tree order (this rank's, then its
	// children's in child order), parking those that arrive early; with
	// it the aggregate does not depend on timing.
	OrderTree
)

// Config starts a Machine.
type Config[T any] struct {
	// Tree is the collective's tree; Self must be in it.
	Tree *Tree
	// Self is this rank.
	Self Rank
	// Local says that this rank runs the handler and contributes its own
	// value (Local or LocalFailed is expected). False for a root outside
	// the scope (CaRT's root_excluded), which only forwards.
	Local bool
	// Aggregate combines a value into the accumulator and returns the new
	// accumulator; the first value in the order is the initial
	// accumulator. nil keeps the first value and drops the others.
	Aggregate func(acc, v T) T
	// Combine is Aggregate for functions that can fail; it is used
	// instead of Aggregate when set. When it fails, the accumulator is
	// left as it was and the ranks whose answers the value held (the
	// contributor's subtree, less those already failed) are listed as
	// failed with ReasonHandler, via the contributor.
	Combine func(acc, v T) (T, error)
	// Order is the order values are combined in (OrderArrival by default).
	Order Order
	// Deadline is when Tick ends the collective with what it has (0:
	// none), on the caller's time scale.
	Deadline int64
}

// Input errors. Inputs that return one of them change nothing.
var (
	// ErrNotChild: a reply or failure for a rank that is not one of this
	// rank's children.
	ErrNotChild = errors.New("coll: not a child of this rank")
	// ErrDuplicate: a second reply or failure for the same child, or a
	// second local result.
	ErrDuplicate = errors.New("coll: duplicate contribution")
	// ErrFinished: an input after the machine is done.
	ErrFinished = errors.New("coll: collective already finished")
	// ErrNoLocal: a local result for a machine started without Local.
	ErrNoLocal = errors.New("coll: this rank runs no handler")
	// ErrNotInTree: Config.Self is not in Config.Tree.
	ErrNotInTree = errors.New("coll: rank not in the tree")
)

// slot states.
const (
	pending  uint8 = iota
	arrived        // value parked, not yet combined
	combined       // value combined (or nothing to combine)
	failed
)

type slot[T any] struct {
	rank  Rank
	state uint8
	has   bool
	v     T
}

// Machine is one rank's part in one collective. It is not safe for
// concurrent use: the caller serialises its inputs (as it would with a
// lock around it). See the package documentation.
type Machine[T any] struct {
	cfg Config[T]
	// slots[0] is the local contribution (if cfg.Local), then one per
	// child in child order.
	slots    []slot[T]
	byRank   map[Rank]int // child rank → slot index
	local    int          // 1 if slots[0] is the local one, else 0
	left     int          // contributions not yet in (pending)
	next     int          // OrderTree: the first slot not yet combined
	acc      T
	hasAcc   bool
	failures []Failure
	done     bool
}

// New starts a machine. Its children are cfg.Tree.Children(cfg.Self).
// A machine without children and without a local contribution (a root
// alone outside its scope) is done at once.
func New[T any](cfg Config[T]) (*Machine[T], error) {
	if cfg.Tree == nil || !cfg.Tree.Has(cfg.Self) {
		return nil, fmt.Errorf("%w: rank %d", ErrNotInTree, cfg.Self)
	}
	m := &Machine[T]{cfg: cfg}
	kids := cfg.Tree.Children(cfg.Self)
	if cfg.Local {
		m.local = 1
	}
	m.slots = make([]slot[T], m.local+len(kids))
	if cfg.Local {
		m.slots[0].rank = cfg.Self
	}
	m.byRank = make(map[Rank]int, len(kids))
	for i, k := range kids {
		m.slots[m.local+i].rank = k
		m.byRank[k] = m.local + i
	}
	m.left = len(m.slots)
	m.check()
	return m, nil
}

// Self returns this rank.
func (m *Machine[T]) Self() Rank { return m.cfg.Self }

// Tree returns the collective's tree.
func (m *Machine[T]) Tree() *Tree { return m.cfg.Tree }

// Deadline returns the configured deadline (0: none).
func (m *Machine[T]) Deadline() int64 { return m.cfg.Deadline }

// Children returns this rank's children, to forward the collective to.
func (m *Machine[T]) Children() []Rank {
	out := make([]Rank, 0, len(m.slots)-m.local)
	for _, s := range m.slots[m.local:] {
		out = append(out, s.rank)
	}
	return out
}

// Pending returns the children that have neither replied nor failed (to
// abort their requests once the machine is done, say).
func (m *Machine[T]) Pending() []Rank {
	var out []Rank
	for _, s := range m.slots[m.local:] {
		if s.state == pending {
			out = append(out, s.rank)
		}
	}
	return out
}

// LocalPending reports whether this rank's own contribution is still
// expected.
func (m *Machine[T]) LocalPending() bool { return m.local == 1 && m.slots[0].state == pending }

// Done reports whether the machine has finished.
func (m *Machine[T]) Done() bool { return m.done }

// Local gives this rank's own value (its handler's output).
func (m *Machine[T]) Local(v T) error {
	if err := m.localCheck(); err != nil {
		return err
	}
	m.arrive(0, v, true)
	return nil
}

// LocalFailed reports that this rank's handler failed (or could not run).
func (m *Machine[T]) LocalFailed(reason Reason, detail string) error {
	if err := m.localCheck(); err != nil {
		return err
	}
	m.fail(0, reason, detail)
	return nil
}

func (m *Machine[T]) localCheck() error {
	switch {
	case m.done:
		return ErrFinished
	case m.local == 0:
		return ErrNoLocal
	case m.slots[0].state != pending:
		return ErrDuplicate
	}
	return nil
}

// childSlot returns the pending slot of child.
func (m *Machine[T]) childSlot(child Rank) (int, error) {
	if m.done {
		return 0, ErrFinished
	}
	i, ok := m.byRank[child]
	if !ok {
		return 0, fmt.Errorf("%w: rank %d (self %d)", ErrNotChild, child, m.cfg.Self)
	}
	if m.slots[i].state != pending {
		return 0, fmt.Errorf("%w: rank %d", ErrDuplicate, child)
	}
	return i, nil
}

// Reply gives child's report: its subtree's aggregate and failures.
// Failures it lists for ranks outside its subtree are ignored, and so are
// duplicates; the child itself is taken to have answered unless it lists
// itself.
func (m *Machine[T]) Reply(child Rank, rep Report[T]) error {
	i, err := m.childSlot(child)
	if err != nil {
		return err
	}
	if len(rep.Failed) > 0 {
		sub := m.cfg.Tree.Subtree(child)
		slices.Sort(sub)
		seen := make(map[Rank]bool, len(rep.Failed))
		for _, f := range rep.Failed {
			if _, in := slices.BinarySearch(sub, f.Rank); !in || seen[f.Rank] || !f.Reason.valid() {
				continue
			}
			seen[f.Rank] = true
			f.Detail = cut(f.Detail)
			m.failures = append(m.failures, f)
		}
	}
	m.arrive(i, rep.Value, rep.HasValue)
	return nil
}

// ChildFailed reports that the forward to child failed (it could not be
// reached, refused, timed out...): every rank of child's subtree is
// listed with reason, via child.
func (m *Machine[T]) ChildFailed(child Rank, reason Reason, detail string) error {
	i, err := m.childSlot(child)
	if err != nil {
		return err
	}
	m.fail(i, reason, detail)
	return nil
}

// Tick gives the current time: at or past the deadline, every
// contribution still expected fails with ReasonTimedOut and the machine
// is done. It returns Done().
func (m *Machine[T]) Tick(now int64) bool {
	if !m.done && m.cfg.Deadline != 0 && now >= m.cfg.Deadline {
		m.failPending(ReasonTimedOut, "deadline passed")
	}
	return m.done
}

// Abort ends the collective now: every contribution still expected fails
// with reason (ReasonCanceled, ReasonShutdown...). It returns false if
// the machine was already done.
func (m *Machine[T]) Abort(reason Reason, detail string) bool {
	if m.done {
		return false
	}
	m.failPending(reason, detail)
	return true
}

func (m *Machine[T]) failPending(reason Reason, detail string) {
	for i := range m.slots {
		if m.slots[i].state == pending {
			m.fail(i, reason, detail)
		}
	}
}

func cut(s string) string {
	if len(s) > MaxDetail {
		return s[:MaxDetail]
	}
	return s
}

// fail marks slot i failed and lists its subtree (just self for the
// local slot).
func (m *Machine[T]) fail(i int, reason Reason, detail string) {
	s := &m.slots[i]
	s.state = failed
	m.left--
	detail = cut(detail)
	if i < m.local {
		m.failures = append(m.failures, Failure{Rank: s.rank, Reason: reason, Via: s.rank, Detail: detail})
	} else {
		for _, r := range m.cfg.Tree.Subtree(s.rank) {
			m.failures = append(m.failures, Failure{Rank: r, Reason: reason, Via: s.rank, Detail: detail})
		}
	}
	m.advance()
	m.check()
}

func (m *Machine[T]) arrive(i int, v T, has bool) {
	s := &m.slots[i]
	s.state, s.has, s.v = arrived, has, v
	m.left--
	m.advance()
	m.check()
}

// advance combines what may be combined now.
func (m *Machine[T]) advance() {
	if m.cfg.Order == OrderTree {
		for m.next < len(m.slots) && m.slots[m.next].state != pending {
			m.combine(m.next)
			m.next++
		}
		return
	}
	// Arrival: nothing before the local value (CaRT parks early child
	// replies until the local handler has replied), then in arrival
	// order; parked ones in child order when the local value comes.
	if m.LocalPending() {
		return
	}
	for i := range m.slots {
		if m.slots[i].state == arrived {
			m.combine(i)
		}
	}
}

func (m *Machine[T]) combine(i int) {
	s := &m.slots[i]
	if s.state == arrived && s.has {
		switch {
		case !m.hasAcc:
			m.acc, m.hasAcc = s.v, true
		case m.cfg.Combine != nil:
			acc, err := m.cfg.Combine(m.acc, s.v)
			if err != nil {
				m.combineFailed(i, err)
				break
			}
			m.acc = acc
		case m.cfg.Aggregate != nil:
			m.acc = m.cfg.Aggregate(m.acc, s.v)
		}
	}
	if s.state == arrived {
		s.state = combined
	}
	var zero T
	s.v = zero
}

// combineFailed lists the ranks whose answers slot i's value held.
func (m *Machine[T]) combineFailed(i int, err error) {
	s := &m.slots[i]
	detail := cut("aggregating: " + err.Error())
	sub := []Rank{s.rank}
	if i >= m.local {
		sub = m.cfg.Tree.Subtree(s.rank)
	}
	// Failures listed earlier win when Result compacts them.
	for _, r := range sub {
		m.failures = append(m.failures, Failure{Rank: r, Reason: ReasonHandler, Via: s.rank, Detail: detail})
	}
}

func (m *Machine[T]) check() {
	if m.left == 0 {
		m.done = true
	}
}

// Result returns the outcome once the machine is done (false before).
// Failed and Answered are ascending by rank.
func (m *Machine[T]) Result() (Result[T], bool) {
	if !m.done {
		return Result[T]{}, false
	}
	fs := slices.Clone(m.failures)
	slices.SortStableFunc(fs, func(a, b Failure) int {
		switch {
		case a.Rank < b.Rank:
			return -1
		case a.Rank > b.Rank:
			return 1
		}
		return 0
	})
	fs = slices.CompactFunc(fs, func(a, b Failure) bool { return a.Rank == b.Rank })
	sub := m.cfg.Tree.Subtree(m.cfg.Self)
	slices.Sort(sub)
	ans := make([]Rank, 0, len(sub))
	j := 0
	for _, r := range sub {
		for j < len(fs) && fs[j].Rank < r {
			j++
		}
		if j < len(fs) && fs[j].Rank == r {
			continue
		}
		if r == m.cfg.Self && m.local == 0 {
			continue
		}
		ans = append(ans, r)
	}
	return Result[T]{Report: Report[T]{Value: m.acc, HasValue: m.hasAcc, Failed: fs}, Answered: ans}, true
}
