package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/rpc/selftest"
)

// Defaults of `ferry selftest`.
const (
	selftestRanks    = 2
	selftestReps     = 1000
	selftestInflight = 16
)

// runSelftest is `ferry selftest`: CaRT's self-test. By default it starts
// a small group of ranks in this process over loopback TCP; with
// --endpoints it targets `ferry serve` processes (or any ferry rpc
// ranks). For each size pair it sends --reps self-test RPCs with
// --inflight in flight and prints the RPC rate, bandwidth and latencies.
func runSelftest(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "selftest")
	endpoints := fs.String("endpoints", "", "comma-separated `ADDRS` of ranks to test (ferry serve processes), each RANK@ADDR or ADDR (the rank is then its position, from 0); default: start --ranks ranks in this process")
	ranks := fs.Int("ranks", selftestRanks, "ranks to start in this process when --endpoints is not given")
	sizes := fs.String("sizes", selftest.DefaultSizes, "message-size `PAIRS` \"SEND REPLY\", comma-separated (CaRT's -s; sizes in bytes, K and M suffixes; a b prefix moves that side by bulk transfer)")
	reps := fs.Int("reps", selftestReps, "RPCs per size pair (CaRT's -r)")
	inflight := fs.Int("inflight", selftestInflight, "RPCs in flight at once (CaRT's -i)")
	asJSON := fs.Bool("json", false, "print one JSON object per size pair on stdout instead of text")
	rpcTimeout := fs.Duration("rpc-timeout", 10*time.Second, "timeout of each RPC")
	timeout := fs.Duration("timeout", 2*time.Minute, "overall time limit")
	verbose := fs.Bool("verbose", false, "log debug messages")
	noDataCRC := fs.Bool("no-data-crc", false, noDataCRCUsage)
	congestion := addTCPCongestionFlag(fs)
	busyPoll := addBusyPollFlag(fs)
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if err := checkTCPCongestion(*congestion); err != nil {
		return usageError(e, fs, "%v", err)
	}
	if err := checkBusyPoll(*busyPoll); err != nil {
		return usageError(e, fs, "%v", err)
	}
	pairs, err := selftest.ParseSizes(*sizes)
	switch {
	case len(pos) > 0:
		return usageError(e, fs, "unexpected arguments %q", pos)
	case err != nil:
		return usageError(e, fs, "--sizes: %v", err)
	case *reps <= 0:
		return usageError(e, fs, "--reps must be positive")
	case *inflight <= 0:
		return usageError(e, fs, "--inflight must be positive")
	case *ranks <= 0 || *ranks > 64:
		return usageError(e, fs, "--ranks must be 1 to 64")
	case *rpcTimeout <= 0 || *timeout <= 0:
		return usageError(e, fs, "timeouts must be positive")
	}
	var addrs []string
	if *endpoints != "" {
		for _, a := range strings.Split(*endpoints, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			return usageError(e, fs, "--endpoints lists no address")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	// Connection-level logs would tear the progress line: warnings only,
	// unless asked.
	lvl := slog.LevelWarn
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))

	var cli *rpc.Instance
	var eps []rpc.Endpoint
	if len(addrs) == 0 {
		g, err := selftest.StartLocalGroupOpts(*ranks, rpc.Options{Logger: log, NoDataCRC: *noDataCRC, BusyPoll: *busyPoll, Transports: cliTransports(*congestion)})
		if err != nil {
			fmt.Fprintf(e.stderr, "ferry selftest: starting %d ranks: %v\n", *ranks, err)
			return exitError
		}
		defer g.Close()
		cli, eps = g.Client, g.Endpoints()
	} else {
		// Each address is a rank of the client's view of the group: a
		// target answers only for its own rank (`ferry serve --rank N`,
		// 0 by default).
		cli, err = rpc.New(rpc.Options{Logger: log, NoDataCRC: *noDataCRC, BusyPoll: *busyPoll, Transports: cliTransports(*congestion)})
		if err != nil {
			fmt.Fprintf(e.stderr, "ferry selftest: %v\n", err)
			return exitError
		}
		defer cli.Close()
		for i, a := range addrs {
			rank := uint32(i)
			if rs, addr, ok := strings.Cut(a, "@"); ok {
				n, err := strconv.ParseUint(rs, 10, 32)
				if err != nil || uint32(n) == rpc.RankNone {
					return usageError(e, fs, "--endpoints: %q is not RANK@ADDR", a)
				}
				rank, a = uint32(n), addr
			}
			if err := cli.Group().Add(rank, a); err != nil {
				return usageError(e, fs, "--endpoints: %v", err)
			}
			eps = append(eps, rpc.Endpoint{Rank: rank})
		}
	}
	c, err := cli.NewContext(rpc.ContextOptions{Timeout: *rpcTimeout})
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry selftest: %v\n", err)
		return exitError
	}

	if !*asJSON {
		where := fmt.Sprintf("%d in-process ranks over loopback TCP", len(eps))
		if len(addrs) > 0 {
			where = strings.Join(addrs, ", ")
		}
		crcs := ""
		if *noDataCRC {
			crcs = ", data CRCs off where the peer agrees"
		}
		fmt.Fprintf(e.stdout, "Self-test: %d size pairs, %d RPCs each, %d in flight%s, endpoints: %s\n\n", len(pairs), *reps, *inflight, crcs, where)
	}
	failures := 0
	var results []*selftest.Result
	for _, sp := range pairs {
		cfg := selftest.Config{Endpoints: eps, Sizes: sp, Reps: *reps, Inflight: *inflight}
		var pr *progress
		if e.stderrTTY {
			pr = &progress{w: e, label: fmt.Sprintf("(%d %d)", sp.Send, sp.Reply), start: time.Now()}
			cfg.Progress = pr.update
		}
		res, err := selftest.Run(ctx, c, cfg)
		if pr != nil {
			pr.clear()
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "ferry selftest: (%d %d): %v\n", sp.Send, sp.Reply, err)
			return exitError
		}
		failures += res.Failures
		if res.Failures > 0 {
			fmt.Fprintf(e.stderr, "ferry selftest: (%s): %d of %d RPCs failed; first: %v\n", sp, res.Failures, *reps, res.FirstError)
		}
		results = append(results, res)
		if *asJSON {
			if err := res.WriteJSON(e.stdout); err != nil {
				return exitError
			}
		} else {
			res.Format(e.stdout)
		}
	}
	if !*asJSON {
		selftest.WriteSummary(e.stdout, results)
	}
	if failures > 0 {
		return exitError
	}
	return exitOK
}

// progress is a line on a terminal rewritten in place with \r.
type progress struct {
	w     *env
	label string
	start time.Time
	width int
}

func (p *progress) update(done, total int) {
	line := fmt.Sprintf("selftest: %s: %d/%d RPCs, %.0f RPCs/s", p.label, done, total, rate(float64(done), time.Since(p.start)))
	pad := ""
	if n := p.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.width = len(line)
	fmt.Fprintf(p.w.stderr, "\r%s%s", line, pad)
}

func (p *progress) clear() {
	if p.width > 0 {
		fmt.Fprintf(p.w.stderr, "\r%s\r", strings.Repeat(" ", p.width))
	}
}
