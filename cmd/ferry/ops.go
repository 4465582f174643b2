package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/adminsock"
	"github.com/ferrymsg/ferry/metrics"
)

// What operators reach a `ferry serve` through: /metrics and pprof over
// HTTP (--metrics), and an admin socket as Ceph daemons have
// (--admin-socket), read by `ferry admin` or `ceph --admin-daemon`.

// opsFlags are serve's --metrics and --admin-socket.
type opsFlags struct {
	metrics     *string
	adminSocket *string
}

func addOpsFlags(fs interface {
	String(name, value, usage string) *string
}) *opsFlags {
	return &opsFlags{
		metrics:     fs.String("metrics", "", "serve /metrics (Prometheus text) and /debug/pprof/ over HTTP on `ADDR` (host:port; port 0 picks one); the URL is printed after the listening line"),
		adminSocket: fs.String("admin-socket", "", "answer admin commands (perf dump, status, connections, help) on the Unix socket `PATH`, as a Ceph daemon's admin socket"),
	}
}

// start binds and starts what the flags ask for; announce prints the
// metrics URL on stdout (after serve's listening line), stop stops it
// all.
func (o *opsFlags) start(ctx context.Context, e *env, log *slog.Logger, srv *server, started time.Time) (stop, announce func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	announce = func() {}
	reg := srv.m.Metrics()
	// Both are bound before anything is served or printed, so that a
	// port or a socket path in use fails the start with nothing said
	// on stdout (whose first line, "listening", promises a server).
	var ml net.Listener
	if *o.metrics != "" {
		if ml, err = net.Listen("tcp", *o.metrics); err != nil {
			return stop, announce, fmt.Errorf("--metrics: %w", err)
		}
	}
	var as *adminsock.Server
	if *o.adminSocket != "" {
		as = adminsock.New(*o.adminSocket, log)
		registerAdminCommands(as, srv, reg, started)
		if err := as.Listen(); err != nil {
			if ml != nil {
				_ = ml.Close()
			}
			return stop, announce, fmt.Errorf("--admin-socket: %w", err)
		}
	}
	if ml != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			s := reg.Snapshot()
			_ = s.WritePrometheus(w)
		})
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ml) }()
		stops = append(stops, func() { _ = hs.Close() })
		announce = func() { fmt.Fprintf(e.stdout, "metrics http://%s/metrics\n", ml.Addr()) }
	}
	if as != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := as.Serve(ctx); err != nil {
				log.Warn("admin socket stopped", "err", err)
			}
		}()
		stops = append(stops, func() { _ = as.Close(); <-done })
	}
	return stop, announce, nil
}

// registerAdminCommands adds serve's admin commands.
func registerAdminCommands(as *adminsock.Server, srv *server, reg *metrics.Registry, started time.Time) {
	as.Register("perf dump", "dump the metrics as perf counters (msgr.messages_received, ...)", func(context.Context, map[string]any) (any, error) {
		s := reg.Snapshot()
		return s.PerfDump(), nil
	})
	as.Register("status", "entity, address, uptime and counts of this ferry serve", func(context.Context, map[string]any) (any, error) {
		return map[string]any{
			"entity":         srv.m.Name().String(),
			"addr":           srv.Addr(),
			"rank":           srv.rpc.Rank(),
			"uptime_s":       time.Since(started).Seconds(),
			"pings_answered": srv.Pings(),
			"connections":    len(srv.m.Conns()),
			"version":        versionString(),
			"gomaxprocs":     runtime.GOMAXPROCS(0),
		}, nil
	})
	as.Register("connections", "the messenger's connections: peer, state, policy, reconnects", func(context.Context, map[string]any) (any, error) {
		out := []map[string]any{}
		for _, c := range srv.m.Conns() {
			addrs := []string{}
			for _, a := range c.PeerAddrs() {
				addrs = append(addrs, a.String())
			}
			row := map[string]any{
				"id": c.ID(), "peer": c.PeerName().String(), "peer_addrs": addrs,
				"state": c.State(), "lossy": c.Policy().Lossy, "reconnects": c.Reconnects(),
				"data_crc": c.DataCRC(),
			}
			if t := c.LastKeepaliveAck(); !t.IsZero() {
				row["last_keepalive_ack"] = t.UTC().Format(time.RFC3339Nano)
			}
			out = append(out, row)
		}
		return out, nil
	})
}

// runAdmin is `ferry admin PATH WORDS...`: one admin-socket command,
// its JSON reply on stdout.
func runAdmin(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "admin")
	timeout := fs.Duration("timeout", 10*time.Second, "time limit")
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) < 2 {
		return usageError(e, fs, "want the socket's PATH and a command (perf dump, status, connections, help)")
	}
	if *timeout <= 0 {
		return usageError(e, fs, "--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	b, err := adminsock.Command(ctx, pos[0], pos[1:]...)
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry admin: %s: %v\n", strings.Join(pos[1:], " "), err)
		return exitError
	}
	fmt.Fprintf(e.stdout, "%s\n", strings.TrimRight(string(b), "\n"))
	return exitOK
}
