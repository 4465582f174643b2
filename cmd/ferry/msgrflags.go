package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// policyNames are the kebab-case names of msgr's policy presets, for
// --policy.
var policyNames = []string{
	"lossy-client", "lossless-client", "lossless-peer", "lossless-peer-reuse",
	"stateful-server", "stateless-server", "stateless-registered-server",
}

// Defaults the messenger applies to a zero Config field; the flags check
// the keepalive pair against them.
const (
	defaultKeepaliveInterval = 5 * time.Second
	defaultKeepaliveTimeout  = 30 * time.Second
)

// msgrFlags are the messenger settings shared by serve and ping: the
// policy, Ceph's ms_inject_* fault injection, keepalives and backoff.
type msgrFlags struct {
	policy         *string
	injSocket      *int
	injDelayType   *string
	injDelayProb   *float64
	injDelayMax    *time.Duration
	injInternal    *time.Duration
	kaInterval     *time.Duration
	kaTimeout      *time.Duration
	backoffInitial *time.Duration
	backoffMax     *time.Duration
	noDataCRC      *bool
	tcpCongestion  *string
	sendBudget     *int64
	slowConsumer   *time.Duration
	busyPoll       *time.Duration
}

// addMsgrFlags defines the messenger flags on fs, with defaultPolicy as
// the default of --policy.
func addMsgrFlags(fs *flag.FlagSet, defaultPolicy string) *msgrFlags {
	return &msgrFlags{
		policy:         fs.String("policy", defaultPolicy, "connection policy preset: "+strings.Join(policyNames, ", ")),
		injSocket:      fs.Int("inject-socket-failures", 0, "shut the socket down on 1 in N frame reads and batch writes (ms_inject_socket_failures); 0 disables"),
		injDelayType:   fs.String("inject-delay-type", "", `peer types whose received messages may be held back, space or comma separated, e.g. "client osd" (ms_inject_delay_type)`),
		injDelayProb:   fs.Float64("inject-delay-probability", 0, "chance (0..1) that a message from such a peer is held back (ms_inject_delay_probability)"),
		injDelayMax:    fs.Duration("inject-delay-max", 0, "longest a held message waits (ms_inject_delay_max)"),
		injInternal:    fs.Duration("inject-internal-delays", 0, "longest random sleep at the session code's race points (ms_inject_internal_delays); 0 disables"),
		kaInterval:     fs.Duration("keepalive-interval", 0, "how often an open connection sends KEEPALIVE2 (0: the default, 5s; negative disables)"),
		kaTimeout:      fs.Duration("keepalive-timeout", 0, "fault a connection that received nothing for this long (0: the default, 30s; negative disables)"),
		backoffInitial: fs.Duration("backoff-initial", 0, "first wait before a lossless connection retries a failed attempt (0: the default, 200ms)"),
		backoffMax:     fs.Duration("backoff-max", 0, "longest wait between reconnect attempts, doubling from --backoff-initial (0: the default, 15s)"),
		noDataCRC:      fs.Bool("no-data-crc", false, noDataCRCUsage),
		tcpCongestion:  addTCPCongestionFlag(fs),
		sendBudget:     newBytesFlag(fs, "send-budget", 0, "`BYTES` (a count, or with K, M, G, KiB, MiB, GiB) all connections together may hold queued to send (msgr.Config.SendBudget; 0: the default, 256 MiB; negative disables): past half, a connection over its share is not read from"),
		slowConsumer:   fs.Duration("slow-consumer-timeout", 0, "close a connection not read from for its share of the send budget whose peer read nothing for this long (0: the default, 30s; negative disables)"),
		busyPoll:       addBusyPollFlag(fs),
	}
}

// msgrOptions are the messenger settings the flags chose. The zero value
// is not meaningful: use defaultMsgrOptions or msgrFlags.options.
type msgrOptions struct {
	PolicyName string
	Policy     msgr.Policy
	Inject     msgr.Inject

	KeepaliveInterval, KeepaliveTimeout time.Duration
	InitialBackoff, MaxBackoff          time.Duration
	NoDataCRC                           bool
	SendBudget                          int64
	SlowConsumerTimeout                 time.Duration
	BusyPoll                            time.Duration
	// TCPCongestion is the TCP congestion control of the messenger's own
	// sockets ("" leaves the system default).
	TCPCongestion string
	// Auth is a client's name, auth method, key and modes (authflags.go);
	// nil leaves the messenger's defaults (auth none).
	Auth *clientAuth
	// ServerAuth is a server's cephx key database (serveauth.go); nil
	// for auth none.
	ServerAuth *serverAuth
}

// tcpCongestionUsage documents --tcp-congestion
// (transport.TCPOptions.Congestion).
const tcpCongestionUsage = "TCP congestion control `NAME` for this process's own sockets, e.g. cubic (the stock kernels' default) or bbr; empty: the system's (net.ipv4.tcp_congestion_control)"

// addTCPCongestionFlag defines --tcp-congestion on fs.
func addTCPCongestionFlag(fs *flag.FlagSet) *string {
	return fs.String("tcp-congestion", "", tcpCongestionUsage)
}

// checkTCPCongestion reports whether this kernel lets a socket use the
// congestion control name, by setting it on a throwaway socket, so that
// a misspelt --tcp-congestion is a usage error rather than connections
// that never come up.
func checkTCPCongestion(name string) error {
	if name == "" {
		return nil
	}
	lc := net.ListenConfig{Control: transport.CongestionControl(name)}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("--tcp-congestion %s: %v", name, err)
	}
	return l.Close()
}

// cliTransports returns the transports the CLI offers: TCP (with
// --tcp-congestion's algorithm on every socket when name is set), Unix
// sockets, and shared memory where the platform has it. An algorithm the
// kernel does not have fails Bind and Connect with transport.ErrBadConfig.
func cliTransports(name string) *transport.Registry {
	r := transport.NewRegistry(transport.NewTCP(transport.TCPOptions{Congestion: name}), transport.NewUnix())
	addPlatformTransports(r)
	return r
}

// addBusyPollFlag defines --busy-poll on fs (msgr.Config.BusyPoll).
func addBusyPollFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("busy-poll", 0, "poll an empty TCP or Unix socket for up to `DURATION` before sleeping, so that a message arriving meanwhile costs no wake-up (msgr.Config.BusyPoll; costs CPU; at most 10ms; 0: sleep at once)")
}

// checkBusyPoll reports a --busy-poll outside what the messenger takes.
func checkBusyPoll(d time.Duration) error {
	if d < 0 || d > msgr.MaxBusyPoll {
		return fmt.Errorf("--busy-poll %v is not between 0 and %v", d, msgr.MaxBusyPoll)
	}
	return nil
}

// noDataCRCUsage documents --no-data-crc (msgr.Config.NoDataCRC).
const noDataCRCUsage = "leave the CRCs of message data out on connections to ferry peers that set it too (Ceph daemons never do)"

// defaultMsgrOptions returns the options with policy name and nothing else
// changed from the messenger's defaults.
func defaultMsgrOptions(name string) *msgrOptions {
	p, ok := msgr.PolicyByName(name)
	if !ok {
		panic("ferry: unknown policy preset " + name)
	}
	return &msgrOptions{PolicyName: name, Policy: p}
}

// configure copies the options into c.
func (o *msgrOptions) configure(c *msgr.Config) {
	c.Inject = o.Inject
	c.KeepaliveInterval = o.KeepaliveInterval
	c.KeepaliveTimeout = o.KeepaliveTimeout
	c.InitialBackoff = o.InitialBackoff
	c.MaxBackoff = o.MaxBackoff
	c.NoDataCRC = o.NoDataCRC
	c.SendBudget = o.SendBudget
	c.SlowConsumerTimeout = o.SlowConsumerTimeout
	c.BusyPoll = o.BusyPoll
	c.Transports = cliTransports(o.TCPCongestion)
	if o.Auth != nil {
		o.Auth.configureMsgr(c)
	}
	if o.ServerAuth != nil {
		o.ServerAuth.configure(c)
	}
}

// options validates the parsed flags and returns the options, or an error
// phrased for the user (a usage error).
func (f *msgrFlags) options() (*msgrOptions, error) {
	p, ok := msgr.PolicyByName(*f.policy)
	if !ok {
		return nil, fmt.Errorf("--policy: unknown policy %q; want one of %s", *f.policy, strings.Join(policyNames, ", "))
	}
	o := &msgrOptions{
		PolicyName:          *f.policy,
		Policy:              p,
		KeepaliveInterval:   *f.kaInterval,
		KeepaliveTimeout:    *f.kaTimeout,
		InitialBackoff:      *f.backoffInitial,
		MaxBackoff:          *f.backoffMax,
		NoDataCRC:           *f.noDataCRC,
		TCPCongestion:       *f.tcpCongestion,
		SendBudget:          *f.sendBudget,
		SlowConsumerTimeout: *f.slowConsumer,
		BusyPoll:            *f.busyPoll,
		Inject: msgr.Inject{
			SocketFailures:   *f.injSocket,
			DelayProbability: *f.injDelayProb,
			DelayMax:         *f.injDelayMax,
			InternalDelays:   *f.injInternal,
		},
	}
	switch {
	case *f.injSocket < 0:
		return nil, fmt.Errorf("--inject-socket-failures must not be negative")
	case !(*f.injDelayProb >= 0 && *f.injDelayProb <= 1):
		return nil, fmt.Errorf("--inject-delay-probability must be between 0 and 1")
	case *f.injDelayMax < 0:
		return nil, fmt.Errorf("--inject-delay-max must not be negative")
	case *f.injInternal < 0:
		return nil, fmt.Errorf("--inject-internal-delays must not be negative")
	case *f.backoffInitial < 0 || *f.backoffMax < 0:
		return nil, fmt.Errorf("--backoff-initial and --backoff-max must not be negative")
	}
	if err := checkTCPCongestion(o.TCPCongestion); err != nil {
		return nil, err
	}
	if err := checkBusyPoll(o.BusyPoll); err != nil {
		return nil, err
	}
	types, err := parseEntityTypes(*f.injDelayType)
	if err != nil {
		return nil, fmt.Errorf("--inject-delay-type: %v", err)
	}
	o.Inject.DelayTypes = types
	// Check the keepalive pair as the messenger will run it, defaults
	// filled in: a timeout shorter than the interval faults idle
	// connections.
	iv, to := o.KeepaliveInterval, o.KeepaliveTimeout
	if iv == 0 {
		iv = defaultKeepaliveInterval
	}
	if to == 0 {
		to = defaultKeepaliveTimeout
	}
	if iv > 0 && to > 0 && to < iv {
		return nil, fmt.Errorf("--keepalive-timeout %v is shorter than --keepalive-interval %v", to, iv)
	}
	return o, nil
}

// parseEntityTypes parses a list of entity type names ("client osd",
// "client,osd").
func parseEntityTypes(s string) ([]msg.EntityType, error) {
	var out []msg.EntityType
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		t, err := msg.ParseEntityType(f)
		if err != nil || t == msg.EntityAny {
			return nil, fmt.Errorf("unknown entity type %q", f)
		}
		out = append(out, t)
	}
	return out, nil
}
