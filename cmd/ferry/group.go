package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/coll"
	"github.com/ferrymsg/ferry/rpc"
)

// The group service of `ferry serve --group`: a status collective every
// member registers. `ferry group stat`, a client, asks one member to root
// it (rpc.Context.BroadcastVia): it runs down a tree over the ranks of
// the attach file, each rank answers its status, and the answers are
// concatenated on the way up; the root's result names the ranks that
// answered and those that failed, with the reason (coll.Reason: a rank
// the root's group has excluded, removed or known dead, is "excluded").
const (
	groupBase    uint8 = 0xE0 // below rpc.MinReservedBase: an application protocol
	groupVersion uint8 = 1
)

// opGroupStat is the status collective.
var opGroupStat = rpc.MakeOpcode(groupBase, groupVersion, 0)

// maxStatJSON bounds one rank's status (a rank decodes at most this
// much of another's).
const maxStatJSON = 1 << 16

// rankStatus is one rank's answer to the status collective.
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

// jsonIO is an RPC input and output encoded as JSON.
type jsonIO struct{ v any }

func (j jsonIO) AppendBinary(b []byte) ([]byte, error) {
	out, err := json.Marshal(j.v)
	if err != nil {
		return b, err
	}
	return append(b, out...), nil
}

// statusLines is the aggregate of the status collective: one JSON
// object per line, one line per rank that answered.
type statusLines struct{ st []rankStatus }

func (l *statusLines) UnmarshalBinary(b []byte) error {
	l.st = l.st[:0]
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		if len(line) > maxStatJSON {
			return fmt.Errorf("a status of %d bytes, at most %d", len(line), maxStatJSON)
		}
		var st rankStatus
		if err := json.Unmarshal([]byte(line), &st); err != nil {
			return err
		}
		l.st = append(l.st, st)
	}
	slices.SortFunc(l.st, func(a, b rankStatus) int { return cmpU32(a.Rank, b.Rank) })
	return nil
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

func (s *groupService) collective() rpc.CollectiveProtocol {
	return rpc.CollectiveProtocol{Name: "ferry-group", Base: groupBase, Version: groupVersion, RPCs: []rpc.CollectiveRPC{{
		Name: "status",
		Handler: func(ctx context.Context, r *rpc.CollectiveRequest) (rpc.Input, error) {
			st := s.status()
			return jsonIO{&st}, nil
		},
		// One line per rank.
		Aggregate: func(acc, v []byte) ([]byte, error) {
			acc = append(acc, '\n')
			return append(acc, v...), nil
		},
		Order: coll.OrderTree,
	}}}
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
	if err := in.RegisterCollective(gs.collective()); err != nil {
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
	if *timeout < time.Second {
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
	// Each rank in turn is asked to root the collective; the first ones
	// get a share of the time, so that a dead or stopped rank does not
	// take it all.
	var res *rpc.CollectiveResult
	var lastErr error
	for i, root := range ranks {
		left := time.Until(deadline)
		if left <= 500*time.Millisecond {
			break
		}
		try := left
		if i < len(ranks)-1 {
			try = min(left, max(left/2, 2*time.Second))
		}
		// BroadcastVia waits for the collective's timeout plus 2 s.
		inner := max(try-2*time.Second, try/2)
		cctx, cancel := context.WithTimeout(ctx, try)
		r, err := c.BroadcastVia(cctx, root, rpc.CollectiveDesc{Opcode: opGroupStat, Ranks: ranks, Timeout: inner})
		cancel()
		if err == nil {
			res = r
			break
		}
		lastErr = err
	}
	if res == nil {
		fmt.Fprintf(e.stderr, "ferry group: no rank could root the status collective: %v\n", lastErr)
		return exitError
	}
	var lines statusLines
	if res.HasAggregate {
		if err := res.Decode(&lines); err != nil {
			fmt.Fprintf(e.stderr, "ferry group: the ranks' answers: %v\n", err)
			return exitError
		}
	}
	failed := []rankFailure{}
	for _, f := range res.Failed {
		failed = append(failed, rankFailure{Rank: f.Rank, Reason: f.Reason.String(), Detail: f.Detail})
	}
	answered := res.Answered
	if answered == nil {
		answered = []uint32{}
	}
	status := lines.st
	if status == nil {
		status = []rankStatus{}
	}
	if *asJSON {
		out := struct {
			Version  uint32        `json:"group_version"`
			Answered []uint32      `json:"answered"`
			Failed   []rankFailure `json:"failed"`
			Status   []rankStatus  `json:"status"`
		}{res.GroupVersion, answered, failed, status}
		b, _ := json.Marshal(out)
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		fmt.Fprintf(e.stdout, "group %s: %d of %d ranks answered (group version %d)\n", name, len(answered), len(ranks), res.GroupVersion)
		for _, st := range status {
			fmt.Fprintf(e.stdout, "  rank %d: group version %d, %d members, live %v, dead %v\n", st.Rank, st.GroupVersion, st.Members, st.Live, st.Dead)
		}
		for _, f := range failed {
			fmt.Fprintf(e.stdout, "  rank %d failed: %s\n", f.Rank, f.Reason)
		}
	}
	if len(failed) > 0 {
		return exitError
	}
	return exitOK
}
