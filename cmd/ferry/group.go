package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// The group service of `ferry serve --group`: a status RPC every member
// answers, and a root RPC with which a client (`ferry group stat`) asks
// one member to gather every rank's status.
//
// Until the rpc collectives land, the root asks each rank point to point,
// all at once, and waits for them until its timeout.
const (
	groupBase    uint8 = 0xE0 // below rpc.MinReservedBase: an application protocol
	groupVersion uint8 = 0
)

var (
	opGroupStatus   = rpc.MakeOpcode(groupBase, groupVersion, 0)
	opGroupStatRoot = rpc.MakeOpcode(groupBase, groupVersion, 1)
)

// maxStatJSON bounds a status or stat answer (a client decodes at most
// this much).
const maxStatJSON = 1 << 20

// rankStatus is one rank's answer to the status RPC.
type rankStatus struct {
	Rank         uint32   `json:"rank"`
	GroupVersion uint32   `json:"group_version"`
	Incarnation  uint64   `json:"incarnation,omitempty"`
	Members      int      `json:"members"`
	Live         []uint32 `json:"live"`
	Dead         []uint32 `json:"dead"`
	ExcludedAt   uint32   `json:"excluded_at,omitempty"`
}

// rankFailure is a rank that did not answer, and why.
type rankFailure struct {
	Rank   uint32 `json:"rank"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// statResult is the root's answer: every rank asked for is in Answered or
// Failed.
type statResult struct {
	Root     uint32        `json:"root"`
	Version  uint32        `json:"group_version"`
	Answered []uint32      `json:"answered"`
	Status   []rankStatus  `json:"status"`
	Failed   []rankFailure `json:"failed"`
}

// statRequest is the input of the root RPC: the ranks to ask (the
// client's attach file's) and how long the root may wait for them.
type statRequest struct {
	Ranks     []uint32 `json:"ranks"`
	TimeoutMS int64    `json:"timeout_ms"`
}

// jsonIO is an RPC input and output encoded as JSON.
type jsonIO struct{ v any }

func (j jsonIO) AppendBinary(b []byte) ([]byte, error) {
	out, err := json.Marshal(j.v)
	if err != nil {
		return b, err
	}
	return append(b, out...), nil
}

func (j jsonIO) UnmarshalBinary(b []byte) error {
	if len(b) > maxStatJSON {
		return fmt.Errorf("%d bytes of JSON, at most %d", len(b), maxStatJSON)
	}
	return json.Unmarshal(b, j.v)
}

// groupService is a member's status service.
type groupService struct {
	in   *rpc.Instance
	swim *rpc.SWIM
	log  *slog.Logger
}

func (s *groupService) status() rankStatus {
	g := s.in.Group()
	st := rankStatus{Rank: s.in.Rank(), GroupVersion: g.Version(), Members: g.Size(), Live: g.Live(), Dead: []uint32{}, ExcludedAt: g.ExcludedAt()}
	for _, r := range g.Ranks() {
		if g.Excluded(r) {
			st.Dead = append(st.Dead, r)
		}
	}
	if s.swim != nil {
		st.Incarnation = s.swim.Self().Incarnation
	}
	return st
}

func (s *groupService) protocol() rpc.Protocol {
	return rpc.Protocol{Name: "ferry-group", Base: groupBase, Version: groupVersion, RPCs: []rpc.RPC{
		{Name: "status", Flags: rpc.Inline | rpc.QueueFront, Handler: func(r *rpc.Incoming) error {
			st := s.status()
			return r.Reply(jsonIO{&st})
		}},
		{Name: "stat-root", Handler: s.handleRoot},
	}}
}

// handleRoot gathers the status of the ranks asked for. It runs on its
// own goroutine and answers when every rank has answered or failed, or
// at the timeout.
func (s *groupService) handleRoot(r *rpc.Incoming) error {
	var req statRequest
	if err := r.Decode(jsonIO{&req}); err != nil {
		return err
	}
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 || timeout > time.Minute {
		timeout = 3 * time.Second
	}
	if rem, ok := r.Remaining(); ok && rem-500*time.Millisecond < timeout {
		timeout = max(rem-500*time.Millisecond, 100*time.Millisecond)
	}
	c := r.Target()
	go func() {
		res := s.gather(c, req.Ranks, timeout)
		r.Reply(jsonIO{&res})
	}()
	return nil
}

// gather asks every rank for its status, point to point and all at once.
// A rank the group has excluded (removed, or known dead) is not asked:
// it fails with reason "excluded".
func (s *groupService) gather(c *rpc.Context, ranks []uint32, timeout time.Duration) statResult {
	g := s.in.Group()
	self := s.in.Rank()
	if len(ranks) == 0 {
		ranks = g.Ranks()
	}
	ranks = slices.Compact(slices.Sorted(slices.Values(ranks)))
	res := statResult{Root: self, Version: g.Version(), Answered: []uint32{}, Status: []rankStatus{}, Failed: []rankFailure{}}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, rank := range ranks {
		if rank == self {
			st := s.status()
			mu.Lock()
			res.Answered = append(res.Answered, rank)
			res.Status = append(res.Status, st)
			mu.Unlock()
			continue
		}
		if g.Excluded(rank) || !g.Has(rank) {
			res.Failed = append(res.Failed, rankFailure{Rank: rank, Reason: "excluded"})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st rankStatus
			err := c.Call(ctx, rpc.Endpoint{Rank: rank}, opGroupStatus, nil, jsonIO{&st})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Failed = append(res.Failed, rankFailure{Rank: rank, Reason: failReason(err), Detail: err.Error()})
				return
			}
			res.Answered = append(res.Answered, rank)
			res.Status = append(res.Status, st)
		}()
	}
	wg.Wait()
	slices.Sort(res.Answered)
	slices.SortFunc(res.Status, func(a, b rankStatus) int { return cmpU32(a.Rank, b.Rank) })
	slices.SortFunc(res.Failed, func(a, b rankFailure) int { return cmpU32(a.Rank, b.Rank) })
	return res
}

func cmpU32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// failReason names why a rank did not answer, in one word.
func failReason(err error) string {
	switch {
	case errors.Is(err, rpc.ErrExcluded):
		return "excluded"
	case errors.Is(err, rpc.ErrTimedOut):
		return "timed-out"
	case errors.Is(err, rpc.ErrUnreachable):
		return "unreachable"
	case errors.Is(err, rpc.ErrGroupVersion):
		return "group-version"
	case errors.Is(err, rpc.ErrWrongRank):
		return "wrong-rank"
	}
	return strings.ReplaceAll(rpc.CodeOf(err).String(), " ", "-")
}

// joinGroup makes the server's RPC instance a member of the group of
// the attach file: the other members from the file, the status service,
// SWIM if asked, and a log line for every membership event.
func joinGroup(srv *server, members []rpc.Member, withSWIM bool, log *slog.Logger) (*groupService, error) {
	in := srv.rpc
	g := in.Group()
	self := in.Rank()
	var others []rpc.Member
	for _, m := range members {
		if m.Rank != self {
			others = append(others, m)
		}
	}
	// Log every event: "member rank=N state=alive|suspect|dead".
	g.Watch(func(e rpc.MemberEvent) {
		log.Info("member", "rank", e.Rank, "state", e.Kind.State().String(), "event", e.Kind.String(), "incarnation", e.Incarnation, "version", e.Version)
	})
	if len(others) > 0 {
		if err := g.Modify(rpc.ModAdd, others, g.Version()+1); err != nil {
			return nil, err
		}
	}
	gs := &groupService{in: in, log: log}
	if err := in.Register(gs.protocol()); err != nil {
		return nil, err
	}
	if withSWIM {
		s, err := in.StartSWIM(rpc.SWIMOptions{})
		if err != nil {
			return nil, err
		}
		gs.swim = s
	}
	return gs, nil
}

// readGroupFile reads an attach file: the group's name and members.
func readGroupFile(path string) (string, []rpc.Member, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	return rpc.ReadAttachFile(f)
}

// runGroup is `ferry group stat`.
func runGroup(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "group")
	file := fs.String("group", "", "the group's attach `FILE` (a name line, then RANK URI lines)")
	asJSON := fs.Bool("json", false, "print one JSON object: answered (ranks) and failed (rank and reason)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the ranks (the root gets most of it)")
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || pos[0] != "stat" {
		return usageError(e, fs, "want the subcommand stat")
	}
	if *file == "" {
		return usageError(e, fs, "--group FILE is required")
	}
	if *timeout <= time.Second {
		return usageError(e, fs, "--timeout %v: at least 1s", *timeout)
	}
	name, members, err := readGroupFile(*file)
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry group: %v\n", err)
		return exitError
	}
	if len(members) == 0 {
		fmt.Fprintf(e.stderr, "ferry group: %s lists no member\n", *file)
		return exitError
	}
	cli, err := rpc.New(rpc.Options{Group: name, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry group: %v\n", err)
		return exitError
	}
	defer cli.Close()
	if err := cli.Group().Modify(rpc.ModAdd, members, 1); err != nil {
		fmt.Fprintf(e.stderr, "ferry group: %v\n", err)
		return exitError
	}
	c, err := cli.NewContext(rpc.ContextOptions{})
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry group: %v\n", err)
		return exitError
	}
	ranks := cli.Group().Ranks()
	deadline := time.Now().Add(*timeout)
	// The root gets the time left less a margin for its answer; a rank
	// that does not answer as root costs a share of the time.
	var res statResult
	var lastErr error
	rooted := false
	for i, root := range ranks {
		left := time.Until(deadline)
		if left <= 500*time.Millisecond {
			break
		}
		// The first roots get a short try, so that a dead or stopped
		// rank does not take all the time.
		try := left
		if i < len(ranks)-1 {
			try = min(left, max(left/2, 2*time.Second))
		}
		inner := try - 700*time.Millisecond
		cctx, cancel := context.WithTimeout(ctx, try)
		err := c.Call(cctx, rpc.Endpoint{Rank: root}, opGroupStatRoot, jsonIO{&statRequest{Ranks: ranks, TimeoutMS: inner.Milliseconds()}}, jsonIO{&res})
		cancel()
		if err == nil {
			rooted = true
			break
		}
		lastErr = err
	}
	if !rooted {
		fmt.Fprintf(e.stderr, "ferry group: no rank could root the status collective: %v\n", lastErr)
		return exitError
	}
	if *asJSON {
		out := struct {
			Root     uint32        `json:"root"`
			Version  uint32        `json:"group_version"`
			Answered []uint32      `json:"answered"`
			Failed   []rankFailure `json:"failed"`
			Status   []rankStatus  `json:"status"`
		}{res.Root, res.Version, res.Answered, res.Failed, res.Status}
		b, _ := json.Marshal(out)
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		fmt.Fprintf(e.stdout, "group %s: %d of %d ranks answered (root rank %d, group version %d)\n", name, len(res.Answered), len(ranks), res.Root, res.Version)
		for _, st := range res.Status {
			fmt.Fprintf(e.stdout, "  rank %d: group version %d, %d members, live %v, dead %v\n", st.Rank, st.GroupVersion, st.Members, st.Live, st.Dead)
		}
		for _, f := range res.Failed {
			fmt.Fprintf(e.stdout, "  rank %d failed: %s\n", f.Rank, f.Reason)
		}
	}
	if len(res.Failed) > 0 {
		return exitError
	}
	return exitOK
}
