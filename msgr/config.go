package msgr

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ferrymsg/ferry/metrics"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr/msgr2"
	"github.com/ferrymsg/ferry/transport"
)

// Config configures a Messenger. The zero value of every field means its
// default.
type Config struct {
	// Name is this entity (type and number); default client.? (a client
	// whose number the server assigns).
	Name msg.EntityName
	// AuthID is the id part of the name this entity authenticates as
	// (Ceph's "admin" in client.admin); default "admin".
	AuthID string
	// Nonce tells apart successive instances of a process on one address;
	// 0 picks a random nonce unless ZeroNonce is set (mons use nonce 0).
	Nonce     uint32
	ZeroNonce bool

	// Metrics is the registry the messenger's counters go in (see
	// Messenger.Metrics for their names); nil: one of its own. Give a
	// messenger and an rpc instance one registry to export them together.
	Metrics *metrics.Registry
	// NoMetrics turns the messenger's counters off (each costs an atomic
	// add per message; BenchmarkMetricsOverhead measures it).
	NoMetrics bool

	// Transports resolves address strings to transports; default
	// transport.Default (TCP).
	Transports *transport.Registry

	// Supported and Required are the Ceph feature masks; default
	// msg.FeaturesAll and 0.
	Supported, Required uint64

	// NoDataCRC leaves the CRC of message data out on connections to
	// peers that set it too (ferry peers only: the msgr2 banner offers
	// msgr2.FeatureNoDataCRC; Ceph daemons never accept, so their
	// sessions keep every CRC). The counterpart of msgr1's
	// ms_crc_data=false (in msgr2's crc mode Ceph always computes segment
	// CRCs), for systems whose clients checksum data before sending it
	// and verify it after receiving it (as DAOS end-to-end checksums do),
	// which would otherwise pay for a second checksum on every byte sent
	// and received. Headers, fronts, middles and control frames keep
	// their CRCs.
	NoDataCRC bool

	// Limits bound the frames a peer may send; zero fields take defaults
	// (64 KiB control frames, 256 MiB messages and segments, 16 KiB in
	// all before the peer is authenticated).
	Limits msgr2.Limits

	// Auth configures authentication and connection modes (see
	// AuthConfig); the zero value is auth none in crc mode.
	Auth AuthConfig

	// HandshakeTimeout bounds connection setup; default 10 s.
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the incoming connections in their handshake
	// at once; default 512. At the bound a new connection waits for a
	// slot (at most HandshakeTimeout), holding only its socket, and
	// slots go first to the sources (IP addresses, IPv6 /64s) holding
	// the fewest. A waiter evicts the handshake that has received
	// nothing for longest, if for at least HandshakeIdleEvict (default
	// 1 s), or one of a source holding at least two slots more than its
	// own. So idle peers, and a peer that fills every slot with
	// handshakes trickling bytes, cannot lock honest clients out, and a
	// burst of clients queues rather than being refused. Before it is
	// authenticated a peer makes the messenger hold at most its read
	// buffer (64 KiB, allocated once it has a slot) and Limits.MaxPreAuth.
	MaxHandshakes      int
	HandshakeIdleEvict time.Duration
	// Clock is the messenger's time (see Clock); default SystemClock.
	Clock Clock
	// KeepaliveInterval is how often an open connection sends KEEPALIVE2;
	// default 5 s; negative disables keepalives.
	KeepaliveInterval time.Duration
	// KeepaliveTimeout faults a connection that has received nothing for
	// this long; default 30 s; negative disables the check.
	KeepaliveTimeout time.Duration

	// DispatchThrottleBytes bounds the payload bytes received and not yet
	// dispatched across all connections (ms_dispatch_throttle_bytes);
	// default 100 MiB.
	DispatchThrottleBytes int64
	// DispatchQueueLen bounds the number of items in the dispatch queue;
	// readers block when it is full; default 65536.
	DispatchQueueLen int

	// OutQueueBytes bounds the payload bytes queued on one connection and
	// not yet written; Send fails with ErrOutQueueFull beyond it (a single
	// message larger than the bound is accepted on an empty queue).
	// Default 256 MiB.
	OutQueueBytes int
	// SendBudget bounds the payload bytes queued on all the messenger's
	// connections together; under pressure a connection holding more
	// than its share is not read from, and Send fails with ErrSendBudget
	// once the budget is used up (budget.go). Default 256 MiB; negative
	// disables it.
	SendBudget int64
	// SlowConsumerTimeout closes, with ErrSlowConsumer, a connection
	// that has written nothing for this long while it was not read from
	// for holding more than its share of the send budget, or while it
	// had something queued. Default 30 s; negative disables it.
	SlowConsumerTimeout time.Duration

	// BusyPoll is how long a goroutine reading an established TCP or
	// Unix socket keeps polling it, with non-blocking reads and without
	// sleeping, after finding it empty: the connection's reader between
	// a peer's messages, a caller in Conn.Await for its reply. A message
	// that arrives meanwhile costs no wake-up, which on a small VM costs
	// more than the rest of a round trip when the kernel has put the
	// two processes on different vCPUs, as it does whenever the other
	// vCPU is idle (BENCHMARKS.md, "Small messages, session 17"). It is
	// adaptive: a poll that ends empty halves the next one, and a wait
	// that ends within four times BusyPoll restores it, so a socket
	// whose peer is slower than that soon sleeps at once. It applies
	// while the process runs at most 16 sockets (as raw system calls
	// do, rawread_linux.go), and a poll yields the CPU now and then to a
	// thread queued on it, and its P to the process's other goroutines.
	// Polling costs CPU, up to BusyPoll per wait: it is for
	// latency-bound peers with a few connections and a request or so in
	// flight (Mercury's and CaRT's busy progress); with many in flight
	// on CPUs the work fills, the pollers take CPU from it. Zero, the
	// default, sleeps at once; at most 10 ms.
	BusyPoll time.Duration

	// InitialBackoff is the first wait before a lossless connection
	// retries after a failed attempt (ms_initial_backoff); it doubles up
	// to MaxBackoff (ms_max_backoff), which is also the wait after the
	// peer says WAIT. Defaults 200 ms and 15 s.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration

	// Inject configures fault injection; off by default.
	Inject Inject

	// Logger receives connection-level logs; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.Name.Type == 0 {
		d.Name = msg.EntityName{Type: msg.EntityClient, Num: msg.NewID}
	}
	if d.AuthID == "" {
		d.AuthID = "admin"
	}
	if d.Auth.Name.Type == 0 && d.Auth.Name.ID == "" {
		d.Auth.Name = msg.AuthName{Type: d.Name.Type, ID: d.AuthID}
	}
	if d.Transports == nil {
		d.Transports = transport.Default
	}
	if d.Supported == 0 {
		d.Supported = msg.FeaturesAll
	}
	d.Limits = d.Limits.WithDefaults()
	if d.HandshakeTimeout == 0 {
		d.HandshakeTimeout = 10 * time.Second
	}
	if d.MaxHandshakes == 0 {
		d.MaxHandshakes = 512
	}
	if d.HandshakeIdleEvict == 0 {
		d.HandshakeIdleEvict = time.Second
	}
	if d.Clock == nil {
		d.Clock = SystemClock{}
	}
	if d.KeepaliveInterval == 0 {
		d.KeepaliveInterval = 5 * time.Second
	}
	if d.KeepaliveTimeout == 0 {
		d.KeepaliveTimeout = 30 * time.Second
	}
	if d.DispatchThrottleBytes == 0 {
		d.DispatchThrottleBytes = 100 << 20
	}
	if d.DispatchQueueLen == 0 {
		d.DispatchQueueLen = 65536
	}
	switch {
	case d.SendBudget == 0:
		d.SendBudget = 256 << 20
	case d.SendBudget < 0:
		d.SendBudget = 0
	}
	if d.SlowConsumerTimeout == 0 {
		d.SlowConsumerTimeout = 30 * time.Second
	}
	if d.OutQueueBytes == 0 {
		d.OutQueueBytes = 256 << 20
	}
	if d.InitialBackoff == 0 {
		d.InitialBackoff = 200 * time.Millisecond
	}
	if d.MaxBackoff == 0 {
		d.MaxBackoff = 15 * time.Second
	}
	d.MaxBackoff = max(d.MaxBackoff, d.InitialBackoff)
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d
}

// MaxBusyPoll bounds Config.BusyPoll.
const MaxBusyPoll = 10 * time.Millisecond

func (c *Config) validate() error {
	var errs []error
	if c.HandshakeTimeout < 0 {
		errs = append(errs, fmt.Errorf("HandshakeTimeout %v is negative", c.HandshakeTimeout))
	}
	if c.MaxHandshakes < 0 || c.HandshakeIdleEvict < 0 {
		errs = append(errs, errors.New("negative MaxHandshakes or HandshakeIdleEvict"))
	}
	if c.KeepaliveInterval > 0 && c.KeepaliveTimeout > 0 && c.KeepaliveTimeout < c.KeepaliveInterval {
		errs = append(errs, fmt.Errorf("KeepaliveTimeout %v is shorter than KeepaliveInterval %v", c.KeepaliveTimeout, c.KeepaliveInterval))
	}
	if c.DispatchThrottleBytes < 0 || c.DispatchQueueLen < 0 || c.OutQueueBytes < 0 {
		errs = append(errs, errors.New("negative queue bound"))
	}
	if c.BusyPoll < 0 || c.BusyPoll > MaxBusyPoll {
		errs = append(errs, fmt.Errorf("BusyPoll %v is not in [0, %v]", c.BusyPoll, MaxBusyPoll))
	}
	if c.InitialBackoff < 0 || c.MaxBackoff < 0 {
		errs = append(errs, errors.New("negative backoff"))
	}
	if c.Inject.SocketFailures < 0 || c.Inject.DelayProbability < 0 || c.Inject.DelayProbability > 1 {
		errs = append(errs, errors.New("bad fault injection settings"))
	}
	if err := c.Auth.validate(); err != nil {
		errs = append(errs, fmt.Errorf("Auth: %w", err))
	}
	if c.Required&^c.Supported != 0 && c.Supported != 0 {
		errs = append(errs, fmt.Errorf("required features %#x not in supported %#x", c.Required, c.Supported))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Inject configures fault injection for tests (Ceph's ms_inject_*
// options). The zero value injects nothing, and the checks then cost one
// comparison per read and per write.
type Inject struct {
	// SocketFailures: 1 in SocketFailures frame reads and batch writes
	// shuts the socket down (ms_inject_socket_failures); 0 disables.
	SocketFailures int
	// DelayTypes lists the peer types whose received messages may be
	// held back (ms_inject_delay_type); empty means none.
	DelayTypes []msg.EntityType
	// DelayProbability is the chance (0..1) that a message from such a
	// peer is held (ms_inject_delay_probability).
	DelayProbability float64
	// DelayMax bounds how long it is held (ms_inject_delay_max); the
	// connection's later messages wait behind it, so order is kept.
	DelayMax time.Duration
	// InternalDelays bounds random sleeps at the session code's race
	// points (ms_inject_internal_delays).
	InternalDelays time.Duration
}
