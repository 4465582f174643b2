package rpc

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/transport"
)

// Defaults and limits (CaRT's).
const (
	DefaultTimeout       = 60 * time.Second   // CRT_TIMEOUT default
	MaxTimeout           = 3600 * time.Second // CRT_TIMEOUT maximum
	DefaultCredits       = 32                 // CRT_CREDIT_EP_CTX default
	DefaultIncomingLimit = 256 << 20          // bytes of unanswered requests per context
	DefaultPeerBudget    = 256 << 20          // bytes an instance owes all its peers (Options.PeerBudget)
	MaxCredits           = 256                // credits are clamped to this
	DefaultMaxContexts   = 128                // CRT_CTX_NUM
	MaxContexts          = 1024               // tags are 16 bits on the wire; this bounds the table
	MaxPayload           = 64 << 20           // an input or output (front + data), as CaRT's 64 MiB
	DefaultGroup         = "ferry"            // the primary group's name
)

// UnlimitedCredits as Options.Credits turns the per-endpoint in-flight
// limit off (CaRT's credits = 0).
const UnlimitedCredits = -1

// RankNone is the rank of an instance that is not a group member (a
// client), and the source rank of its requests.
const RankNone = ^uint32(0)

// Endpoint names a target: a rank of the primary group and a context tag
// on it (crt_endpoint_t).
type Endpoint struct {
	Rank uint32
	Tag  uint16
}

func (e Endpoint) String() string { return rankString(e.Rank) + ":" + strconv.Itoa(int(e.Tag)) }

// Options configure an Instance (crt_init_options_t). The zero value of
// every field means its default; the zero Options make a client-only
// instance on the default TCP transport.
type Options struct {
	// Listen is the address to serve on ("tcp://127.0.0.1:0",
	// "inproc://rank0", "v2:127.0.0.1:3300/0"), or several separated by
	// commas ("shm:///run/ferry/r0.sock,tcp://10.0.0.5:0"): the instance
	// listens on each and its URI lists them all, so that a peer on the
	// same host picks the fastest (see SelectURI). Empty makes a
	// client-only instance (CaRT without CRT_FLAG_BIT_SERVER). Not allowed
	// with Messenger.
	Listen string
	// Rank is this instance's rank in its primary group when it listens.
	// Left unset it is rank 0: an instance is always exactly one rank,
	// and answers only requests addressed to that rank; a request for
	// another rank is refused with CodeWrongRank (ErrWrongRank) without
	// running a handler, so a server started without its rank answers as
	// rank 0 only, never for every rank. A client-only instance has
	// RankNone and serves nothing.
	Rank uint32
	// Group is the primary group's name; default DefaultGroup.
	Group string

	// Transports resolves addresses; default transport.Default (TCP).
	Transports *transport.Registry
	// NoDataCRC leaves the CRC of message data (RPC inputs and outputs,
	// bulk chunks) out on connections to peers that set it too; see
	// msgr.Config.NoDataCRC. For storage systems that checksum their data
	// end to end. Not allowed with Messenger (set it in its msgr.Config).
	NoDataCRC bool
	// BusyPoll is how long the instance's sockets are polled, without
	// sleeping, when they are found empty: a caller waiting for its
	// reply and the reader of a connection between requests find the
	// next message without a wake-up. It costs CPU, up to BusyPoll per
	// wait; see msgr.Config.BusyPoll. Zero (the default) sleeps at once.
	// Not allowed with Messenger (set it in its msgr.Config).
	BusyPoll time.Duration
	// Name is the messenger's entity name; default osd.RANK for a server
	// and client.? for a client.
	Name msg.EntityName
	// Messenger, when set, is an existing messenger to serve and send on
	// instead of one of the instance's own: the instance adds its
	// dispatcher at the head of its chain and takes only RPC message
	// types, leaving the rest to the messenger's other dispatchers. The
	// instance does not shut it down. It is a server if the messenger has
	// bound an address (serving as Rank), a client otherwise. The
	// messenger must be started before New is called.
	Messenger *msgr.Messenger

	// Timeout is the default request timeout (CRT_TIMEOUT); default 60 s,
	// at most 3600 s.
	Timeout time.Duration
	// Credits is the number of requests each context may have in flight
	// to one target rank before further requests wait in a queue
	// (CRT_CREDIT_EP_CTX): 0 means the default 32; values above 256 are
	// clamped to 256; UnlimitedCredits (negative) means no limit.
	Credits int
	// MaxContexts bounds the number of contexts (and so the tags);
	// default 128, at most 1024.
	MaxContexts int
	// IncomingLimit bounds the bytes of requests a context holds that it
	// has received and not answered yet (waiting for progress, or with
	// their handlers), inline inputs included; a request beyond it is
	// answered CodeBusy at once, so that a target slow to serve costs
	// its origins retries rather than growing its memory with what they
	// send. One request is always accepted when none is held. Inputs
	// pulled as bulk count against BulkOptions.OverflowLimit instead.
	// It also bounds, per connection, the bytes of overflowing outputs
	// the peer has not pulled or released yet: beyond it replies are
	// errors with CodeBusy. Default DefaultIncomingLimit.
	IncomingLimit int
	// PeerBudget bounds, for the instance (its contexts together), the
	// bytes it owes all its peers: requests received and not answered
	// yet, and overflowing outputs not pulled or released yet. It is
	// shared fairly: a peer that owes something already may not take
	// the instance past three quarters of the budget, nor, past half of
	// it, beyond its share (three quarters divided among the live peer
	// accounts); the last quarter is kept for peers that owe nothing.
	// A request or output beyond it is answered CodeBusy (ErrBusy at the
	// origin), at once. Replies queued to send are bounded by the
	// messenger's SendBudget, inputs pulled as bulk by
	// BulkOptions.OverflowLimit, bulk in flight by the windows. Default
	// DefaultPeerBudget; negative: no budget.
	PeerBudget int64

	// Interceptors wrap the serving of every request (the first is
	// outermost); CallInterceptors wrap every Context.Call. See
	// Interceptor and CallInterceptor.
	Interceptors     []Interceptor
	CallInterceptors []CallInterceptor

	// Clock is the time source of timeouts and deadlines; default the
	// system clock. Tests inject a fake one.
	Clock Clock
	// Logger receives the instance's logs; default slog.Default().
	Logger *slog.Logger

	// Bulk sets the transfer protocols' sizes and windows.
	Bulk BulkOptions
}

// BulkOptions size the bulk protocols and bound the bytes in flight. The
// zero value of each field means its default.
type BulkOptions struct {
	// EagerLimit: an RPC input or output, or a transfer, of at most this
	// many bytes travels in one message; a larger input or output goes
	// as a bulk handle that the receiver pulls. Default
	// DefaultEagerLimit.
	EagerLimit int
	// ChunkSize is the size of the chunks a larger transfer is cut into;
	// the connection interleaves other messages between them. Default
	// DefaultChunkSize.
	ChunkSize int
	// SegmentLimit: a PUT of at most this many bytes is pushed in chunks
	// (segmented); a larger one asks the receiver to pull (rendezvous).
	// Default DefaultSegmentLimit.
	SegmentLimit int
	// Window bounds one transfer's bytes in flight (requested or sent,
	// not yet landed). Default DefaultBulkWindow.
	Window int
	// ConnLimit and ContextLimit bound the bytes in flight of all of a
	// context's transfers on one connection and in all. Defaults
	// DefaultBulkConnLimit and DefaultBulkContextLimit.
	ConnLimit    int
	ContextLimit int
	// SeparateConn sends the transfers this instance starts on
	// connections of their own, one per peer, apart from its RPCs: a
	// small RPC then never waits behind a transfer's bytes in the
	// kernel's socket queues (Ceph keeps heartbeats off its data
	// connections the same way). On the 2-vCPU test VM the median wait
	// of a 64 B RPC behind back-to-back 16 MiB transfers fell from about
	// 680 µs to 180–200 µs (BENCHMARKS.md, section 3, session 5); the
	// tail, set by CPU contention there, did not. It costs a second
	// session per peer. Transfers run Via an incoming RPC keep that
	// RPC's connection, as CaRT's do.
	SeparateConn bool
	// OverflowLimit bounds the bytes a context holds for overflowing
	// inputs it has pulled, until their requests are answered; a request
	// beyond it waits, unpulled (one request is always admitted, however
	// large). Default DefaultOverflowLimit.
	OverflowLimit int
}

// Bulk defaults. Chunk and window were chosen by measurement on the
// 2-vCPU VM (bench/peers, 16 MiB GET): every chunk costs its sender and
// receiver a few system calls and wake-ups, so 1 MiB chunks move a byte
// for about 20% less CPU than 256 KiB ones, and 64 B RPC latency behind a
// transfer grows with the window (the bytes queued ahead of it): p50
// about 0.7 ms with a 1 MiB window, 1.1 ms with 2 MiB, 1.6 ms with 4 MiB.
// The segmentation limit covers the 4 MiB object write, the common large
// storage RPC: pushed, it saves the rendezvous round trip (the receiver's
// first pull request), which is a tenth of a 4 MiB PUT here: 0.87 of the
// raw-TCP floor against 0.76 as a rendezvous PUT (session 4, 6 interleaved
// rounds). Pushed chunks land straight in the registered target as pulled
// ones do, within the same windows.
const (
	DefaultEagerLimit       = 16 << 10
	DefaultChunkSize        = 1 << 20
	DefaultSegmentLimit     = 4 << 20
	DefaultBulkWindow       = 2 << 20
	DefaultBulkConnLimit    = 4 << 20
	DefaultBulkContextLimit = 16 << 20
	DefaultOverflowLimit    = 64 << 20
)

func (o BulkOptions) withDefaults() BulkOptions {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.EagerLimit, DefaultEagerLimit)
	def(&o.ChunkSize, DefaultChunkSize)
	def(&o.SegmentLimit, DefaultSegmentLimit)
	def(&o.Window, DefaultBulkWindow)
	def(&o.ConnLimit, DefaultBulkConnLimit)
	def(&o.ContextLimit, DefaultBulkContextLimit)
	def(&o.OverflowLimit, DefaultOverflowLimit)
	o.Window = max(o.Window, o.ChunkSize)
	o.ConnLimit = max(o.ConnLimit, o.Window)
	o.ContextLimit = max(o.ContextLimit, o.ConnLimit)
	return o
}

func (o *Options) validate() error {
	var errs []error
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout %v is negative", o.Timeout))
	}
	if o.MaxContexts < 0 || o.MaxContexts > MaxContexts {
		errs = append(errs, fmt.Errorf("MaxContexts %d is not in 0..%d", o.MaxContexts, MaxContexts))
	}
	if err := checkGroupName(o.Group); err != nil {
		errs = append(errs, err)
	}
	if o.Messenger != nil && o.Listen != "" {
		errs = append(errs, errors.New("Listen is set with Messenger"))
	}
	if o.Messenger != nil && o.NoDataCRC {
		errs = append(errs, errors.New("NoDataCRC is set with Messenger (set it in the messenger's msgr.Config)"))
	}
	if o.Messenger != nil && o.BusyPoll != 0 {
		errs = append(errs, errors.New("BusyPoll is set with Messenger (set it in the messenger's msgr.Config)"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: options: %w", ErrInvalid, err)
	}
	return nil
}

// checkGroupName refuses a group name that could not name its attach
// file (NAME.attach_info, in the directory given) or survive its name
// line: a path separator, "." or "..", white space or a control
// character. Empty is the default name.
func checkGroupName(name string) error {
	if name == "" {
		return nil
	}
	if name == "." || name == ".." || len(name) > 255 || strings.ContainsAny(name, `/\`) ||
		strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("Group %q: want a name without a path separator, spaces or control characters", name)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Group == "" {
		o.Group = DefaultGroup
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	o.Timeout = min(o.Timeout, MaxTimeout)
	switch {
	case o.Credits == 0:
		o.Credits = DefaultCredits
	case o.Credits < 0:
		o.Credits = 0 // the tracker's "unlimited"
	case o.Credits > MaxCredits:
		o.Credits = MaxCredits
	}
	if o.MaxContexts == 0 {
		o.MaxContexts = DefaultMaxContexts
	}
	if o.IncomingLimit <= 0 {
		o.IncomingLimit = DefaultIncomingLimit
	}
	switch {
	case o.PeerBudget == 0:
		o.PeerBudget = DefaultPeerBudget
	case o.PeerBudget < 0:
		o.PeerBudget = 0
	}
	if o.Transports == nil {
		o.Transports = transport.Default
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Bulk = o.Bulk.withDefaults()
	return o
}

// ContextOptions configure a Context. The zero value is a context whose
// completion callbacks and handlers run in Progress.
type ContextOptions struct {
	// Auto gives the context its own progress goroutine, which runs
	// completion callbacks and handlers as they come; Progress must not be
	// called then. Without it (the zero value, as CaRT's contexts),
	// Send's callbacks and the handlers of requests to this context run
	// only inside Progress: call it in a loop. Call waits without it. A
	// context whose work has waited NoProgressWarning with Progress never
	// called logs a warning.
	Auto bool
	// CPUs pins the progress goroutine (Auto) to these CPUs on a locked OS
	// thread, as DAOS pins each xstream to a core. Empty: not pinned.
	// Linux only; elsewhere NewContext fails if it is set.
	CPUs []int
	// Timeout is the default timeout of the context's requests
	// (crt_context_set_timeout); default the instance's.
	Timeout time.Duration
	// Spin is how long a goroutine waiting for a completion (Call) or for
	// work (Progress, the Auto goroutine) busy-polls, yielding the
	// processor, before it blocks (CaRT's D_PROGRESS_BUSY and
	// D_PROGRESS_SPINDOWN). Spinning trades CPU for latency: a blocked
	// goroutine's wake-up costs an OS thread wake-up (about 17 µs on a
	// small VM) that a spinning one avoids. 0: block at once.
	Spin time.Duration
}

// Clock is a source of time: the system clock or a fake one in tests.
// It is msgr's (msgr.Clock), so one clock can drive both layers.
type Clock = msgr.Clock

// Timer is a Clock's timer (msgr.Timer).
type Timer = msgr.Timer

// SystemClock is the system's clock (msgr.SystemClock).
type SystemClock = msgr.SystemClock
