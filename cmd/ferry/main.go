// Command ferry is a tool for ferry's messenger and RPC layer: it serves
// and sends Ceph pings (the simple_server and simple_client of Ceph's
// messenger tests), serves the RPC self-test protocol as rank 0, and runs
// CaRT's self-test against in-process ranks or `ferry serve` processes.
//
// Usage:
//
//	ferry serve [--listen ADDR] [--name TYPE.ID] [--rank N] [--group FILE [--swim]] [--metrics ADDR] [--admin-socket PATH] [--verbose]
//	ferry group stat --group FILE [--json] [--timeout D]
//	ferry ping [--count N] [--size BYTES] [--inflight K] [--warmup D] [--json] [--timeout D] ADDR
//	ferry tell [--mon ADDR | -c ceph.conf] [--keyring FILE] [--name TYPE.ID] TARGET WORDS...
//	ferry admin [--timeout D] PATH perf dump|status|connections|help
//	ferry selftest [--endpoints ADDR[,ADDR...]] [--sizes "S R,..."] [--reps N] [--inflight K] [--json]
//	ferry bench [--transports LIST] [--sizes BYTES] [--inflight DEPTHS] [--duration D] [--out DIR] [--json]
//	ferry sim [--ranks N] [--seed S] [--duration D] [--loss P] [--kill K] [--pause K] [--json]
//	ferry help [COMMAND]
//	ferry version
//
// ADDR is v2:IP:PORT/NONCE, v1:IP:PORT/NONCE (msgr1), tcp://IP:PORT,
// unix://PATH or shm://NAME (or shm:///PATH); `ferry help COMMAND` lists
// a command's flags.
//
// Exit status: 0 on success, 1 on a runtime error, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"syscall"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // runtime error
	exitUsage = 2 // bad command line
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string // arguments after the name
	run     func(ctx context.Context, env *env, args []string) int
	// hidden commands serve other commands (ferry bench's servers) and
	// are left out of the command list.
	hidden bool
}

// env is what a subcommand writes to.
type env struct {
	stdout io.Writer
	stderr io.Writer
	// stderrTTY says whether stderr is a terminal (progress display).
	stderrTTY bool
}

// commands is set in init: the runners refer to it through newFlagSet.
var commands []*command

func init() {
	commands = []*command{
		{name: "serve", summary: "answer Ceph pings like a mon (simple_server) and serve the RPC self-test as a rank, optionally as a member of a group with SWIM", usage: "[--listen ADDR] [--name TYPE.ID] [--rank N] [--group FILE [--swim]] [--fsid UUID] [--auth cephx --keyring FILE] [--mode MODES] [--verbose]", run: runServe},
		{name: "ping", summary: "send Ceph pings to a peer and report round-trip times (simple_client)", usage: "[--count N] [--size BYTES] [--inflight K] [--warmup D] [--json] [--timeout D] [-c ceph.conf] [--keyring FILE] [--name TYPE.ID] [--auth cephx|none] [--mode MODES] [ADDR]", run: runPing},
		{name: "tell", summary: "run a command on a mon (MMonCommand) or an OSD (MCommand), as ceph tell does", usage: "[--mon ADDR | -c ceph.conf] [--keyring FILE] [--name TYPE.ID] [--auth cephx|none] [--mode secure|crc[,...]] TARGET WORDS...", run: runTell},
		{name: "admin", summary: "send a command to an admin socket (ferry serve --admin-socket, or a Ceph daemon's) and print its JSON", usage: "[--timeout D] PATH perf dump|status|connections|help", run: runAdmin},
		{name: "bench", summary: "compare ferry's round trips with each transport's raw floor, and write a table and plots", usage: "[--transports LIST] [--sizes BYTES] [--inflight DEPTHS] [--duration D] [--out DIR] [--json]", run: runBench},
		{name: "bench-echo", summary: "echo length-prefixed frames: the raw floor's server for ferry bench", usage: "[--listen ADDR]", run: runBenchEcho, hidden: true},
		{name: "selftest", summary: "run the RPC self-test (CaRT's) against in-process ranks or ferry serve processes", usage: "[--endpoints ADDR[,ADDR...]] [--ranks N] [--sizes \"SEND REPLY,...\"] [--reps N] [--inflight K] [--json] [--timeout D]", run: runSelftest},
		{name: "group", summary: "ask a group's ranks for their status through one of them (ferry serve --group members)", usage: "stat --group FILE [--json] [--timeout D]", run: runGroup},
		{name: "sim", summary: "simulate a SWIM group of N ranks, deterministically, with loss, crashes and pauses", usage: "[--ranks N] [--seed S] [--duration D] [--loss P] [--kill K] [--pause K] [--json]", run: runSim},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, restore the default handling so that a
	// second one ends the process even if shutting down hangs.
	go func() {
		<-ctx.Done()
		stop()
	}()
	e := &env{stdout: os.Stdout, stderr: os.Stderr, stderrTTY: isTerminal(os.Stderr)}
	code := run(ctx, e, os.Args[1:])
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program name) and returns
// the exit code. ctx is cancelled on SIGINT or SIGTERM.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "version", "-version", "--version":
		fmt.Fprintln(e.stdout, versionString())
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(e.stdout)
			return exitOK
		}
		c := lookup(rest[0])
		if c == nil {
			fmt.Fprintf(e.stderr, "ferry: unknown command %q\n", rest[0])
			usage(e.stderr)
			return exitUsage
		}
		return c.run(ctx, e, []string{"-h"})
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(e.stderr, "ferry: unknown command %q\n", name)
		usage(e.stderr)
		return exitUsage
	}
	return c.run(ctx, e, rest)
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: ferry COMMAND [FLAGS] [ARGS]\n\nCommands:\n")
	cs := append([]*command(nil), commands...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		if c.hidden {
			continue
		}
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-9s %s\n", "help", "show this list, or a command's flags (ferry help COMMAND)")
	fmt.Fprintf(w, "  %-9s %s\n", "version", "print ferry's version (also --version)")
	fmt.Fprintf(w, "\nExit status: 0 success, 1 runtime error, 2 usage error.\n")
}

// newFlagSet returns a FlagSet for c that reports errors to e.stderr and
// prints help to e.stdout.
func newFlagSet(e *env, c string) *flag.FlagSet {
	fs := flag.NewFlagSet("ferry "+c, flag.ContinueOnError)
	// The flag package prints a bad flag's error and calls Usage itself;
	// parseFlags prints help (on stdout) or the error, with the flags
	// spelt as the help spells them, and a pointer to help (on stderr)
	// instead, so that each appears once.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// printUsage writes the command's usage line and its flags, spelt with
// two dashes as the usage lines spell them (one-letter flags with one).
func printUsage(w io.Writer, fs *flag.FlagSet) {
	cmd := lookup(strings.TrimPrefix(fs.Name(), "ferry "))
	fmt.Fprintf(w, "Usage: ferry %s %s\n\n%s.\n\nFlags:\n", cmd.name, cmd.usage, capitalize(cmd.summary))
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if len(f.Name) == 1 {
			line = "  -" + f.Name // -c, as the ceph tools spell it
		}
		if name != "" {
			line += " " + name
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			if g, ok := f.Value.(flag.Getter); ok {
				if _, isString := g.Get().(string); isString {
					line += fmt.Sprintf(" (default %q)", f.DefValue)
					fmt.Fprintln(w, line)
					return
				}
			}
			line += " (default " + f.DefValue + ")"
		}
		fmt.Fprintln(w, line)
	})
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// parseFlags parses args with fs, allowing flags after positional
// arguments ("ferry ping ADDR --count 5"). It returns the positional
// arguments, or an exit code (and ok false) when parsing stopped: 0 for
// -h, 2 for a bad flag.
func parseFlags(e *env, fs *flag.FlagSet, args []string) (pos []string, code int, ok bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				// Help was asked for: print it on stdout, not as an error.
				printUsage(e.stdout, fs)
				return nil, exitOK, false
			}
			fmt.Fprintln(e.stderr, dashFlags(err.Error()))
			fmt.Fprintf(e.stderr, "Run 'ferry help %s' for usage.\n", strings.TrimPrefix(fs.Name(), "ferry "))
			return nil, exitUsage, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, 0, true
		}
		// A "--" terminator makes everything after it positional.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), 0, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// flagInError is a flag as the flag package's errors spell it: one dash.
var flagInError = regexp.MustCompile(`(^|[ :])-([A-Za-z][A-Za-z0-9-]+)\b`)

// dashFlags respells the flags in a flag package error with two dashes,
// as the help and the usage lines spell them (one-letter flags such as
// -c keep one).
func dashFlags(msg string) string {
	return flagInError.ReplaceAllString(msg, "$1--$2")
}

// usageError reports a bad command line and returns exitUsage.
func usageError(e *env, fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(e.stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fmt.Fprintf(e.stderr, "Run 'ferry help %s' for usage.\n", strings.TrimPrefix(fs.Name(), "ferry "))
	return exitUsage
}

// newLogger returns a text logger on e.stderr at Info, or Debug when
// verbose is set.
func newLogger(e *env, verbose bool) *slog.Logger {
	lvl := slog.LevelInfo
	if verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
