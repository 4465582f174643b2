package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"
)

// selftestSizes are the data sizes selftest pings with, and how many
// pings each gets by default.
var selftestSizes = []struct {
	size, count int
}{
	{0, 2000},
	{4 << 10, 2000},
	{64 << 10, 1000},
	{1 << 20, 200},
}

// selftestInflight are the in-flight limits run at every size.
var selftestInflight = []int{1, 16}

// runSelftest is `ferry selftest`: an in-process server and client over
// loopback TCP, pinging at several sizes.
func runSelftest(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "selftest")
	count := fs.Int("count", 0, "pings per row (default: 2000 at 0 B and 4 KiB, 1000 at 64 KiB, 200 at 1 MiB)")
	asJSON := fs.Bool("json", false, "print one JSON object on stdout instead of a table")
	timeout := fs.Duration("timeout", 2*time.Minute, "overall time limit")
	verbose := fs.Bool("verbose", false, "log debug messages")
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) > 0:
		return usageError(e, fs, "unexpected arguments %q", pos)
	case *count < 0:
		return usageError(e, fs, "--count must not be negative")
	case *timeout <= 0:
		return usageError(e, fs, "--timeout must be positive")
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

	srv, err := startServer(serverConfig{Listen: "tcp://127.0.0.1:0", Name: defaultIdentity(), ID: "a", FSID: randomFSID(), Logger: log})
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry selftest: server: %v\n", err)
		return exitError
	}
	defer srv.Close()
	pc, err := dialPing(ctx, srv.Addr(), log)
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry selftest: client: %v\n", err)
		return exitError
	}
	defer pc.Close()

	var rows []*pingReport
	total := 0
	for _, sz := range selftestSizes {
		n := sz.count
		if *count > 0 {
			n = *count
		}
		for _, k := range selftestInflight {
			o := pingOptions{Count: n, Size: sz.size, Inflight: k}
			var pr *progress
			if e.stderrTTY {
				pr = &progress{w: e, label: fmt.Sprintf("%s, %d in flight", sizeString(sz.size), k), start: time.Now()}
				o.Progress = pr.update
			}
			res := pc.run(ctx, o)
			if pr != nil {
				pr.clear()
			}
			r := newPingReport(res, o, "", "")
			r.Status = nil // the same for every row
			rows = append(rows, r)
			total += r.Errors
			if r.Error != "" {
				fmt.Fprintf(e.stderr, "ferry selftest: %s, %d in flight: %s\n", sizeString(sz.size), k, r.Error)
			}
		}
	}

	if *asJSON {
		writeJSON(e, struct {
			Peer   string        `json:"peer"`
			Rows   []*pingReport `json:"rows"`
			Errors int           `json:"errors"`
		}{pc.conn.PeerName().String(), rows, total})
	} else {
		printSelftestTable(e, rows)
	}
	if total > 0 {
		return exitError
	}
	return exitOK
}

func printSelftestTable(e *env, rows []*pingReport) {
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tinflight\tcount\tmsgs/s\tMB/s\tp50 µs\tp99 µs\tmax µs\terrors\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\n",
			sizeString(r.Size), r.Inflight, r.Count, r.MsgsPerS, r.MBytesPerS, r.RTTP50, r.RTTP99, r.RTTMax, r.Errors)
	}
	_ = tw.Flush()
	fmt.Fprintln(e.stdout, "msgs/s: round trips per second; MB/s: data payload sent + received, 1 MB = 10^6 B.")
}

// sizeString formats a byte count with a binary unit ("0 B", "4 KiB").
func sizeString(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// progress is a line on a terminal rewritten in place with \r.
type progress struct {
	w     *env
	label string
	start time.Time
	last  time.Time
	width int
}

// progressEvery is the minimum time between two redraws.
const progressEvery = 100 * time.Millisecond

func (p *progress) update(done, total int) {
	now := time.Now()
	if done < total && now.Sub(p.last) < progressEvery {
		return
	}
	p.last = now
	line := fmt.Sprintf("selftest: %s: %d/%d, %.0f msgs/s", p.label, done, total, rate(float64(done), now.Sub(p.start)))
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
