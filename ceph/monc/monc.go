// Package monc is a Ceph mon client (Ceph's MonClient): it hunts across
// the mons a configuration lists until one accepts a session, keeps that
// session (hunting again when it is lost), learns the cluster's fsid from
// the monmap, and runs what clients ask of mons: MPing, MMonGetVersion,
// MMonCommand. It also finds an OSD's address in the OSD map (the mon
// command "osd find") and runs MCommand on the OSD itself, as
// `ceph tell osd.N` does.
//
// With cephx (Config.Cephx) the client gets service tickets over the mon
// session (MAuth) and renews its tickets before they expire, timed by an
// injectable clock; over a session opened without authentication it can
// log in with MAuth messages, as msgr1 clients do (Config.MAuthLogin).
//
// A Client owns its messenger. Its methods are safe for concurrent use.
package monc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/msgr/msgr2"
)

// Defaults.
const (
	// DefaultHuntTimeout bounds one attempt to open a session with one
	// mon (Ceph's mon_client_hunt_interval is 3 s, backed off).
	DefaultHuntTimeout = 10 * time.Second
	// DefaultTickInterval is how often a client checks whether its
	// tickets are due for renewal (Ceph's MonClient ticks every 10 s).
	DefaultTickInterval = 10 * time.Second
)

// Errors.
var (
	// ErrNoMons means the configuration lists no mon.
	ErrNoMons = errors.New("monc: no mons configured")
	// ErrClosed means the client was closed.
	ErrClosed = errors.New("monc: client closed")
	// ErrSessionLost means the session a request was sent on failed
	// before its reply came; the request may or may not have run.
	ErrSessionLost = errors.New("monc: session lost before the reply")
	// ErrNoAddr means an entity has no address ferry can connect to.
	ErrNoAddr = errors.New("monc: no usable address")
	// ErrNoSuchMon means a command was addressed to a mon the monmap
	// does not list (see NoSuchMonError).
	ErrNoSuchMon = errors.New("monc: no such mon in the monmap")
	// ErrWrongMon means the mon reached at a monmap address is not the
	// mon the monmap names there (see MonCommandTo).
	ErrWrongMon = errors.New("monc: reached another mon than asked")
)

// NoSuchMonError reports a mon name (or rank) the monmap does not hold,
// with the mons it does hold. It matches ErrNoSuchMon.
type NoSuchMonError struct {
	Mon   string   // the name or rank asked for
	Epoch uint32   // the monmap's epoch
	Known []string // the monmap's mons, in rank order
}

// Error names the mon and those the monmap lists.
func (e *NoSuchMonError) Error() string {
	return fmt.Sprintf("monc: no mon %q in monmap epoch %d (its mons: %s)", e.Mon, e.Epoch, strings.Join(e.Known, ", "))
}

// Is reports whether target is ErrNoSuchMon.
func (e *NoSuchMonError) Is(target error) bool { return target == ErrNoSuchMon }

// HuntError reports that no mon accepted a session: the error of each
// attempt, in order.
type HuntError struct {
	Attempts []AttemptError
}

// AttemptError is one failed attempt of a hunt.
type AttemptError struct {
	Addr string
	Err  error
}

// Error lists the attempts, each failure once in the order first seen,
// with how many attempts failed so when more than one did (a hunt
// retried until its deadline repeats the same few).
func (e *HuntError) Error() string {
	type failure struct {
		text string
		n    int
	}
	var seen []failure
	at := map[string]int{}
	for _, a := range e.Attempts {
		text := fmt.Sprintf("%s: %v", a.Addr, a.Err)
		if i, ok := at[text]; ok {
			seen[i].n++
			continue
		}
		at[text] = len(seen)
		seen = append(seen, failure{text, 1})
	}
	var b strings.Builder
	b.WriteString("monc: no mon accepted a session:")
	for i, f := range seen {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(" " + f.text)
		if f.n > 1 {
			fmt.Fprintf(&b, " (%d attempts)", f.n)
		}
	}
	return b.String()
}

// Unwrap returns the attempts' errors, so errors.Is finds, say, a
// wrong key's auth.ErrBadKey or a refused mode.
func (e *HuntError) Unwrap() []error {
	errs := make([]error, len(e.Attempts))
	for i, a := range e.Attempts {
		errs[i] = a.Err
	}
	return errs
}

// CommandError is a command's non-zero result: a negative errno (Linux
// numbering) and the status string the daemon gave.
type CommandError struct {
	R  int32
	RS string
}

// Error gives the result and the status string.
func (e *CommandError) Error() string {
	if e.RS == "" {
		return fmt.Sprintf("command failed: %d (%s)", e.R, errnoName(e.R))
	}
	return fmt.Sprintf("command failed: %d (%s): %s", e.R, errnoName(e.R), e.RS)
}

// CommandResult is what a mon or an OSD answers to a command.
type CommandResult struct {
	R      int32  // 0, or a negative errno
	RS     string // status string
	Output []byte // the output (what `ceph` prints on stdout)
}

// Err returns nil when R is 0, else a *CommandError.
func (r *CommandResult) Err() error {
	if r.R == 0 {
		return nil
	}
	return &CommandError{R: r.R, RS: r.RS}
}

// Config configures a Client.
type Config struct {
	// Mons are the mons to hunt across, each an address vector (see
	// cephconf.ParseMonHost). At least one.
	Mons []msg.AddrVec
	// Msgr is the configuration of the client's messenger: its name,
	// auth settings and connection modes. Its Logger defaults to Logger.
	Msgr msgr.Config
	// HuntTimeout bounds one attempt with one mon; default
	// DefaultHuntTimeout.
	HuntTimeout time.Duration
	// HuntRounds bounds how many times a hunt goes through the mons
	// before it gives up; 0 hunts until the context ends, as Ceph's
	// MonClient hunts until its timeout. A refusal another attempt would
	// not change (a wrong key, a refused mode) ends the hunt at once.
	HuntRounds int
	// Logger receives the client's logs; default slog.Default().
	Logger *slog.Logger
	// Rand orders the hunt (Ceph hunts in random order); nil means a
	// random order, a non-nil source a reproducible one.
	Rand *rand.Rand

	// Cephx is the client's cephx state (name, key, tickets); nil means
	// auth none. With it the client renews its tickets over the mon
	// session before they expire (see RenewTickets) and gets service
	// tickets (ServiceTickets).
	Cephx *cephx.Client
	// MAuthLogin logs in to the mon with MAuth messages after a
	// handshake without authentication, as msgr1 clients do, instead of
	// in the msgr2 handshake.
	MAuthLogin bool
	// Now is the clock renewals are timed by; nil means time.Now. It
	// should be the clock Cephx was made with.
	Now func() time.Time
	// NoAutoRenew turns off the background renewal (tests that drive
	// RenewTickets with a fake clock).
	NoAutoRenew bool
	// TickInterval is how often the background renewal checks, by Now,
	// whether a ticket is due; default DefaultTickInterval.
	TickInterval time.Duration
}

// Client is a mon client. See the package documentation.
type Client struct {
	cfg Config
	m   *msgr.Messenger
	log *slog.Logger

	tid atomic.Uint64

	mu      sync.Mutex
	closed  bool
	mon     *msgr.Conn // the mon session, nil when hunting is needed
	monAddr string
	monName string // the session's mon as the monmap names it ("" if unknown)
	fsid    ceph.FSID
	epoch   uint32
	monmap  *ceph.MonMapInfo // the last monmap; nil before the first
	waiters map[key]waiter
	pings   []chan *msg.Message // on the mon session; MPing replies carry no tid: FIFO
	osds    map[int]*msgr.Conn

	huntMu sync.Mutex // one hunt at a time
	authMu sync.Mutex // one MAuth exchange at a time

	stop      chan struct{} // closed by Close
	renewDone chan struct{} // closed when renewLoop has returned
}

// key identifies a pending reply: its message type and tid (or handle).
type key struct {
	typ uint16
	id  uint64
}

// waiter is a pending request: where its reply goes, and the connection
// it was sent on (whose loss fails it).
type waiter struct {
	ch   chan *msg.Message
	conn *msgr.Conn
}

// New returns a Client and starts its messenger; it does not connect
// (see Connect).
func New(cfg Config) (*Client, error) {
	if len(cfg.Mons) == 0 {
		return nil, ErrNoMons
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HuntTimeout <= 0 {
		cfg.HuntTimeout = DefaultHuntTimeout
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = DefaultTickInterval
	}
	mc := cfg.Msgr
	if mc.Logger == nil {
		mc.Logger = cfg.Logger
	}
	configureAuth(&cfg, &mc)
	m, err := msgr.New(mc)
	if err != nil {
		return nil, err
	}
	m.SetDefaultPolicy(msgr.LossyClient())
	c := &Client{
		cfg:       cfg,
		m:         m,
		log:       cfg.Logger,
		waiters:   map[key]waiter{},
		osds:      map[int]*msgr.Conn{},
		stop:      make(chan struct{}),
		renewDone: make(chan struct{}),
	}
	m.AddDispatcherTail(c)
	if err := m.Start(); err != nil {
		m.Shutdown()
		return nil, err
	}
	if cfg.Cephx != nil && !cfg.NoAutoRenew {
		go c.renewLoop()
	} else {
		close(c.renewDone)
	}
	return c, nil
}

// Dial is New followed by Connect.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.Connect(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Messenger returns the client's messenger.
func (c *Client) Messenger() *msgr.Messenger { return c.m }

// Close ends every session and stops the messenger; pending requests
// fail with ErrClosed. It is idempotent.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mon = nil
	c.mu.Unlock()
	close(c.stop)
	c.m.Shutdown()
	c.failPending(nil, true)
	<-c.renewDone
}

// Connect hunts for a mon (unless a session is open): it tries the
// configured mons in random order, each for at most HuntTimeout, round
// after round (see Config.HuntRounds), until one completes the handshake
// (and authentication) and answers with the monmap, which gives the
// fsid. A *HuntError says why the mons failed.
func (c *Client) Connect(ctx context.Context) error {
	_, err := c.session(ctx)
	return err
}

// session returns the open mon session, hunting for one if there is none.
func (c *Client) session(ctx context.Context) (*msgr.Conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if conn := c.mon; conn != nil && !ended(conn) {
		c.mu.Unlock()
		return conn, nil
	}
	c.mu.Unlock()

	c.huntMu.Lock()
	defer c.huntMu.Unlock()
	c.mu.Lock()
	conn := c.mon
	c.mu.Unlock()
	if conn != nil {
		if !ended(conn) {
			return conn, nil
		}
		// The session ended before its reset was dispatched: hunt now
		// rather than send on a closed connection.
		c.dropMon(conn)
	}
	return c.hunt(ctx)
}

// ended reports whether conn has closed.
func ended(conn *msgr.Conn) bool {
	select {
	case <-conn.Done():
		return true
	default:
		return false
	}
}

// hunt opens a session with the first mon that accepts one: it goes
// through the mons in random order, round after round with a backoff
// between rounds (a mon without quorum yet closes the connection), until
// one accepts, HuntRounds rounds have failed, ctx ends, or a mon refuses
// for a reason another attempt would not change (a refused key or mode,
// missing features: see permanent).
func (c *Client) hunt(ctx context.Context) (*msgr.Conn, error) {
	shuffle := rand.Shuffle
	if c.cfg.Rand != nil {
		shuffle = c.cfg.Rand.Shuffle
	}
	herr := &HuntError{}
	backoff := huntBackoff
	for round := 1; ; round++ {
		mons := c.huntList()
		shuffle(len(mons), func(i, j int) { mons[i], mons[j] = mons[j], mons[i] })
		for _, vec := range mons {
			addr, err := c.connectAddr(vec)
			if err == nil {
				var conn *msgr.Conn
				if conn, err = c.tryMon(ctx, addr); err == nil {
					c.log.Debug("monc: session open", "mon", addr, "name", c.MonName(), "peer", conn.PeerName().String(), "round", round)
					return conn, nil
				}
				c.log.Debug("monc: mon refused", "mon", addr, "err", err, "round", round)
			} else {
				addr = vec.String()
			}
			herr.add(AttemptError{addr, err})
			if permanent(err) || ctx.Err() != nil {
				return nil, herr
			}
		}
		if c.cfg.HuntRounds > 0 && round >= c.cfg.HuntRounds {
			return nil, herr
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, herr
		case <-c.stop:
			t.Stop()
			return nil, ErrClosed
		case <-t.C:
		}
		backoff = min(2*backoff, maxHuntBackoff)
	}
}

// huntList returns the mons a hunt goes through: those of the last
// monmap (as Ceph's MonClient hunts across its monmap once a mon sent
// one, so a client configured with one mon finds the others), then the
// configured ones the monmap does not list.
func (c *Client) huntList() []msg.AddrVec {
	c.mu.Lock()
	mm := c.monmap
	c.mu.Unlock()
	var out []msg.AddrVec
	if mm != nil {
		for _, m := range mm.Mons {
			if len(m.Addrs) > 0 {
				out = append(out, m.Addrs)
			}
		}
	}
	listed := len(out)
	for _, vec := range c.cfg.Mons {
		dup := false
		for _, have := range out[:listed] {
			if sameMon(have, vec) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, vec)
		}
	}
	return out
}

// sameMon reports whether two address vectors share an address (type,
// IP and port; nonces differ between a mon host line and a monmap).
func sameMon(a, b msg.AddrVec) bool {
	for _, x := range a {
		for _, y := range b {
			if x.Type == y.Type && x.IP == y.IP {
				return true
			}
		}
	}
	return false
}

// Backoff between hunting rounds, and how many attempts a HuntError
// keeps.
const (
	huntBackoff     = 100 * time.Millisecond
	maxHuntBackoff  = 3 * time.Second
	maxHuntAttempts = 16
)

// add records an attempt, keeping the last maxHuntAttempts.
func (e *HuntError) add(a AttemptError) {
	if len(e.Attempts) == maxHuntAttempts {
		copy(e.Attempts, e.Attempts[1:])
		e.Attempts = e.Attempts[:len(e.Attempts)-1]
	}
	e.Attempts = append(e.Attempts, a)
}

// permanent reports whether a mon's refusal would be the same on another
// attempt: authentication refused (a wrong key, a mode or method not
// allowed), features missing, no usable address, the client closed.
func permanent(err error) bool {
	for _, p := range []error{msgr2.ErrAuthRejected, msgr2.ErrBadAuthMethod, msgr2.ErrMissingFeatures,
		auth.ErrDenied, auth.ErrBadKey, auth.ErrUnknownEntity, ErrNoAddr, ErrNoCephx, ErrClosed, msgr.ErrShutdown} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// tryMon opens a session with the mon at addr and fetches the monmap.
func (c *Client) tryMon(ctx context.Context, addr string) (*msgr.Conn, error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.HuntTimeout)
	defer cancel()
	conn, err := c.m.ConnectType(addr, msg.EntityMon)
	if err != nil {
		return nil, err
	}
	if err := conn.Ready(actx); err != nil {
		conn.MarkDown()
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		conn.MarkDown()
		return nil, ErrClosed
	}
	c.mon, c.monAddr = conn, addr
	c.mu.Unlock()
	// Over msgr1 the connect message carries no authorizer for a mon: the
	// login runs in MAuth messages once the session is up.
	if c.cfg.Cephx != nil && (c.cfg.MAuthLogin || strings.HasPrefix(addr, "v1:")) {
		if err := c.mauthLogin(actx, conn); err != nil {
			c.dropMon(conn)
			conn.MarkDown()
			return nil, fmt.Errorf("login: %w", err)
		}
	}
	mm, err := c.getMonMap(actx, conn)
	var info *ceph.MonMapInfo
	if err == nil {
		info, err = ceph.DecodeMonMap(mm.Map)
	}
	if err != nil {
		c.dropMon(conn)
		conn.MarkDown()
		return nil, fmt.Errorf("monmap: %w", err)
	}
	c.mu.Lock()
	if c.mon == conn {
		c.fsid, c.epoch, c.monmap = mm.FSID, mm.Epoch, info
		c.monName = monNameOf(info, addr, conn)
	}
	c.mu.Unlock()
	return conn, nil
}

// monNameOf returns the name of the mon at addr in mm: the mon whose
// addresses include addr, else the mon of the peer's rank (a mon's
// entity number).
func monNameOf(mm *ceph.MonMapInfo, addr string, conn *msgr.Conn) string {
	if a, err := msg.ParseEntityAddr(addr); err == nil {
		for _, m := range mm.Mons {
			if sameMon(m.Addrs, msg.AddrVec{a}) {
				return m.Name
			}
		}
	}
	if r := conn.PeerName().Num; r >= 0 && r < int64(len(mm.Mons)) {
		return mm.Mons[r].Name
	}
	return ""
}

// connectAddr picks the address of vec to connect to as Pacific does
// (msgr.Messenger.PickAddr: the first msgr2 or msgr1 entry, v2 unless
// the messenger listens on v1 only).
func (c *Client) connectAddr(vec msg.AddrVec) (string, error) {
	if a, ok := c.m.PickAddr(vec); ok {
		return a.String(), nil
	}
	return "", fmt.Errorf("%w in %v", ErrNoAddr, vec)
}

// Mon returns the address of the mon the session is with, or "" if there
// is none.
func (c *Client) Mon() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mon == nil {
		return ""
	}
	return c.monAddr
}

// MonName returns the name of the mon the session is with, as the
// monmap names it, or "" if there is no session.
func (c *Client) MonName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mon == nil {
		return ""
	}
	return c.monName
}

// MonMap returns the last monmap a mon sent (after Connect, the one
// fetched at login; then every MMonMap the session's mon pushes), or nil
// before the first. The value is not modified afterwards: a new monmap
// replaces it.
func (c *Client) MonMap() *ceph.MonMapInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.monmap
}

// MonConn returns the mon session's connection, or nil if there is none.
func (c *Client) MonConn() *msgr.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mon
}

// FSID returns the cluster's fsid from the last monmap (zero before
// Connect).
func (c *Client) FSID() ceph.FSID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fsid
}

// MonMapEpoch returns the epoch of the last monmap.
func (c *Client) MonMapEpoch() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// dropMon forgets conn as the mon session (if it still is) and fails the
// requests waiting on it.
func (c *Client) dropMon(conn *msgr.Conn) {
	c.mu.Lock()
	if c.mon != conn {
		c.mu.Unlock()
		return
	}
	c.mon = nil
	c.mu.Unlock()
	c.failPending(conn, true)
}

// failPending closes the waiters of the requests sent on conn (all, if
// conn is nil), and the pings if pings is set: they see no reply.
func (c *Client) failPending(conn *msgr.Conn, pings bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, w := range c.waiters {
		if conn == nil || w.conn == conn {
			close(w.ch)
			delete(c.waiters, k)
		}
	}
	if pings {
		for _, ch := range c.pings {
			close(ch)
		}
		c.pings = nil
	}
}

// Dispatch routes replies to their waiters (msgr.Dispatcher).
func (c *Client) Dispatch(m *msg.Message) bool {
	var k key
	switch m.Header.Type {
	case ceph.MsgPing:
		c.mu.Lock()
		if len(c.pings) == 0 {
			c.mu.Unlock()
			return true
		}
		ch := c.pings[0]
		c.pings = c.pings[1:]
		c.mu.Unlock()
		ch <- m
		return true
	case ceph.MsgMonGetVersionReply:
		var r ceph.MonGetVersionReply
		if r.Unmarshal(m) != nil {
			return true
		}
		k = key{m.Header.Type, r.Handle}
	case ceph.MsgMonCommandAck, ceph.MsgCommandReply:
		k = key{m.Header.Type, m.Header.Tid}
	case ceph.MsgAuthReply:
		k = key{m.Header.Type, 0}
	case ceph.MsgMonMap:
		var mm ceph.MonMap
		if mm.Unmarshal(m) == nil {
			info, err := ceph.DecodeMonMap(mm.Map)
			c.mu.Lock()
			if m.Conn == c.mon && err == nil && mm.Epoch >= c.epoch {
				c.fsid, c.epoch, c.monmap = mm.FSID, mm.Epoch, info
				c.monName = monNameOf(info, c.monAddr, c.mon)
			}
			c.mu.Unlock()
		}
		k = key{m.Header.Type, 0}
	default:
		return false
	}
	c.mu.Lock()
	w, ok := c.waiters[k]
	if ok && w.conn == m.Conn {
		delete(c.waiters, k)
	} else {
		ok = false // a reply from another connection is not this request's
	}
	c.mu.Unlock()
	if ok {
		w.ch <- m
	} else {
		m.Done()
	}
	return true
}

// HandleReset hears that a connection failed (msgr.ResetHandler): a lost
// mon session is forgotten (the next request hunts again), a lost OSD
// session too.
func (c *Client) HandleReset(conn *msgr.Conn) {
	c.mu.Lock()
	for id, oc := range c.osds {
		if oc == conn {
			delete(c.osds, id)
		}
	}
	c.mu.Unlock()
	c.dropMon(conn)
	c.failPending(conn, false)
}

// HandleRemoteReset is HandleReset for a peer that reset the session.
func (c *Client) HandleRemoteReset(conn *msgr.Conn) { c.HandleReset(conn) }

// call registers a waiter for k, sends m on conn and waits for the reply.
func (c *Client) call(ctx context.Context, conn *msgr.Conn, k key, m *msg.Message) (*msg.Message, error) {
	ch := make(chan *msg.Message, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if old, ok := c.waiters[k]; ok {
		// Only the monmap has a fixed key: a second request shares
		// nothing with the first, which is failed.
		close(old.ch)
	}
	c.waiters[k] = waiter{ch, conn}
	c.mu.Unlock()
	if err := conn.Send(m); err != nil {
		c.unwait(k, ch)
		return nil, err
	}
	return c.await(ctx, conn, ch, func() { c.unwait(k, ch) })
}

func (c *Client) unwait(k key, ch chan *msg.Message) {
	c.mu.Lock()
	if c.waiters[k].ch == ch {
		delete(c.waiters, k)
	}
	c.mu.Unlock()
}

// await waits for a reply on ch, the end of conn, or ctx.
func (c *Client) await(ctx context.Context, conn *msgr.Conn, ch chan *msg.Message, cancel func()) (*msg.Message, error) {
	select {
	case r, ok := <-ch:
		if !ok {
			if c.isClosed() {
				return nil, ErrClosed
			}
			return nil, ErrSessionLost
		}
		return r, nil
	case <-conn.Done():
		cancel()
		// A reply dispatched just before the end still counts.
		select {
		case r, ok := <-ch:
			if ok {
				return r, nil
			}
		default:
		}
		if err := conn.Err(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSessionLost, err)
		}
		return nil, ErrSessionLost
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// getMonMap asks conn's mon for the monmap.
func (c *Client) getMonMap(ctx context.Context, conn *msgr.Conn) (*ceph.MonMap, error) {
	r, err := c.call(ctx, conn, key{ceph.MsgMonMap, 0}, (&ceph.MonGetMap{}).Marshal())
	if err != nil {
		return nil, err
	}
	defer r.Done()
	var mm ceph.MonMap
	if err := mm.Unmarshal(r); err != nil {
		return nil, err
	}
	mm.Map = append([]byte(nil), mm.Map...)
	return &mm, nil
}

// Ping sends an MPing to the mon and returns the status JSON of its
// reply (health and mon_status, what `ceph ping mon.X` prints).
func (c *Client) Ping(ctx context.Context) ([]byte, error) {
	conn, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan *msg.Message, 1)
	c.mu.Lock()
	c.pings = append(c.pings, ch)
	c.mu.Unlock()
	unping := func() {
		c.mu.Lock()
		for i, p := range c.pings {
			if p == ch {
				c.pings = append(c.pings[:i], c.pings[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
	}
	if err := conn.Send((&ceph.Ping{}).Marshal()); err != nil {
		unping()
		return nil, err
	}
	r, err := c.await(ctx, conn, ch, unping)
	if err != nil {
		return nil, err
	}
	defer r.Done()
	var p ceph.Ping
	if err := p.Unmarshal(r); err != nil {
		return nil, err
	}
	return append([]byte(nil), p.Status...), nil
}

// GetVersion asks the mon for the latest and oldest versions of a map
// ("osdmap", "monmap", "mgrmap"...).
func (c *Client) GetVersion(ctx context.Context, what string) (ceph.MonGetVersionReply, error) {
	conn, err := c.session(ctx)
	if err != nil {
		return ceph.MonGetVersionReply{}, err
	}
	h := c.tid.Add(1)
	r, err := c.call(ctx, conn, key{ceph.MsgMonGetVersionReply, h}, (&ceph.MonGetVersion{Handle: h, What: what}).Marshal())
	if err != nil {
		return ceph.MonGetVersionReply{}, err
	}
	defer r.Done()
	var rep ceph.MonGetVersionReply
	err = rep.Unmarshal(r)
	return rep, err
}

// MonCommand runs a command on the mon (MMonCommand): cmd holds the
// command as JSON, e.g. `{"prefix": "mon stat", "format": "json"}`;
// input, if any, is its input. A non-zero result is not an error here:
// see CommandResult.Err.
func (c *Client) MonCommand(ctx context.Context, cmd []string, input []byte) (*CommandResult, error) {
	conn, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	return c.monCommandOn(ctx, conn, cmd, input)
}

// MonCommandTo runs a command on the mon called mon in the monmap (or of
// that rank, when mon is a decimal number, as librados's
// rados_mon_command_target takes it), as `ceph tell mon.X` does: when the
// session is with another mon, the client moves its session to that
// one, as Ceph's MonClient reopens its session for a targeted command. A
// mon the monmap does not list gives a *NoSuchMonError (ErrNoSuchMon);
// a mon that does not answer at its monmap address, the attempt's error.
func (c *Client) MonCommandTo(ctx context.Context, mon string, cmd []string, input []byte) (*CommandResult, error) {
	conn, err := c.sessionWith(ctx, mon)
	if err != nil {
		return nil, err
	}
	return c.monCommandOn(ctx, conn, cmd, input)
}

// sessionWith returns a session with the mon called (or ranked) mon,
// moving the session there if it is with another.
func (c *Client) sessionWith(ctx context.Context, mon string) (*msgr.Conn, error) {
	if _, err := c.session(ctx); err != nil {
		return nil, err
	}
	c.huntMu.Lock()
	defer c.huntMu.Unlock()
	c.mu.Lock()
	mm, cur, curName, curAddr := c.monmap, c.mon, c.monName, c.monAddr
	c.mu.Unlock()
	if mm == nil {
		return nil, &NoSuchMonError{Mon: mon}
	}
	info, _, ok := mm.ByName(mon)
	if !ok {
		if r, err := strconv.Atoi(mon); err == nil && r >= 0 && r < len(mm.Mons) {
			info, ok = mm.Mons[r], true
		}
	}
	if !ok {
		return nil, &NoSuchMonError{Mon: mon, Epoch: mm.Epoch, Known: mm.Names()}
	}
	if cur != nil && curName == info.Name {
		return cur, nil
	}
	addr, err := c.connectAddr(info.Addrs)
	if err != nil {
		return nil, fmt.Errorf("mon.%s: %w", info.Name, err)
	}
	conn, err := c.tryMon(ctx, addr)
	if err != nil {
		// Keep the session we had, if it is still up.
		c.mu.Lock()
		if c.mon == nil && cur != nil && !c.closed {
			select {
			case <-cur.Done():
			default:
				c.mon, c.monAddr, c.monName = cur, curAddr, curName
			}
		}
		c.mu.Unlock()
		return nil, fmt.Errorf("mon.%s at %s: %w", info.Name, addr, err)
	}
	if cur != nil && cur != conn {
		cur.MarkDown()
		c.failPending(cur, false)
	}
	if got := c.MonName(); got != info.Name {
		return nil, fmt.Errorf("%w: mon.%s at %s is mon.%s by its monmap", ErrWrongMon, info.Name, addr, got)
	}
	c.log.Debug("monc: session moved", "mon", info.Name, "addr", addr)
	return conn, nil
}

// monCommandOn runs a mon command on conn.
func (c *Client) monCommandOn(ctx context.Context, conn *msgr.Conn, cmd []string, input []byte) (*CommandResult, error) {
	tid := c.tid.Add(1)
	req := ceph.MonCommand{Tid: tid, FSID: c.FSID(), Cmd: cmd, Input: input}
	r, err := c.call(ctx, conn, key{ceph.MsgMonCommandAck, tid}, req.Marshal())
	if err != nil {
		return nil, err
	}
	defer r.Done()
	var ack ceph.MonCommandAck
	if err := ack.Unmarshal(r); err != nil {
		return nil, err
	}
	return &CommandResult{R: ack.R, RS: ack.RS, Output: append([]byte(nil), ack.Output...)}, nil
}

// OSDAddrs returns the address vector of osd.id as the OSD map has it,
// from the mon command "osd find" (the nonces are the OSD's, which its
// CLIENT_IDENT check requires).
func (c *Client) OSDAddrs(ctx context.Context, id int) (msg.AddrVec, error) {
	cmd, _ := json.Marshal(map[string]any{"prefix": "osd find", "id": id, "format": "json"})
	res, err := c.MonCommand(ctx, []string{string(cmd)}, nil)
	if err != nil {
		return nil, err
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("osd find %d: %w", id, err)
	}
	return parseOSDFind(res.Output)
}

// parseOSDFind reads the addrvec of `osd find` JSON output.
func parseOSDFind(out []byte) (msg.AddrVec, error) {
	var find struct {
		Addrs struct {
			Addrvec []struct {
				Type  string `json:"type"`
				Addr  string `json:"addr"`
				Nonce uint32 `json:"nonce"`
			} `json:"addrvec"`
		} `json:"addrs"`
	}
	if err := json.Unmarshal(out, &find); err != nil {
		return nil, fmt.Errorf("osd find: %w", err)
	}
	var v msg.AddrVec
	for _, a := range find.Addrs.Addrvec {
		ea, err := msg.ParseEntityAddr(a.Type + ":" + a.Addr + "/" + strconv.FormatUint(uint64(a.Nonce), 10))
		if err != nil {
			return nil, fmt.Errorf("osd find: %w", err)
		}
		v = append(v, ea)
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("%w: osd find gave no address", ErrNoAddr)
	}
	return v, nil
}

// OSDConn returns a session with osd.id, opening one (its address from
// OSDAddrs) if there is none, and waits for its handshake.
func (c *Client) OSDConn(ctx context.Context, id int) (*msgr.Conn, error) {
	c.mu.Lock()
	conn := c.osds[id]
	c.mu.Unlock()
	if conn != nil {
		select {
		case <-conn.Done():
		default:
			return conn, conn.Ready(ctx)
		}
	}
	addrs, err := c.OSDAddrs(ctx, id)
	if err != nil {
		return nil, err
	}
	addr, err := c.connectAddr(addrs)
	if err != nil {
		return nil, err
	}
	conn, err = c.m.ConnectType(addr, msg.EntityOSD)
	if err != nil {
		return nil, err
	}
	if err := conn.Ready(ctx); err != nil {
		conn.MarkDown()
		return nil, fmt.Errorf("osd.%d at %s: %w", id, addr, err)
	}
	c.mu.Lock()
	c.osds[id] = conn
	c.mu.Unlock()
	return conn, nil
}

// OSDCommand runs a command on osd.id (MCommand), as `ceph tell osd.N`
// does: cmd holds the command as JSON, e.g. `{"prefix": "version"}`. A
// non-zero result is not an error here: see CommandResult.Err.
func (c *Client) OSDCommand(ctx context.Context, id int, cmd []string, input []byte) (*CommandResult, error) {
	conn, err := c.OSDConn(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.Command(ctx, conn, cmd, input)
}

// Command runs a command (MCommand) on the daemon at the other end of
// conn, which must be one of this client's connections.
func (c *Client) Command(ctx context.Context, conn *msgr.Conn, cmd []string, input []byte) (*CommandResult, error) {
	tid := c.tid.Add(1)
	req := ceph.Command{Tid: tid, FSID: c.FSID(), Cmd: cmd, Input: input}
	r, err := c.call(ctx, conn, key{ceph.MsgCommandReply, tid}, req.Marshal())
	if err != nil {
		return nil, err
	}
	defer r.Done()
	var rep ceph.CommandReply
	if err := rep.Unmarshal(r); err != nil {
		return nil, err
	}
	return &CommandResult{R: rep.R, RS: rep.RS, Output: append([]byte(nil), rep.Output...)}, nil
}

// errnoName names the common errnos commands return.
func errnoName(r int32) string {
	switch -r {
	case 1:
		return "EPERM"
	case 2:
		return "ENOENT"
	case 5:
		return "EIO"
	case 11:
		return "EAGAIN"
	case 13:
		return "EACCES"
	case 16:
		return "EBUSY"
	case 17:
		return "EEXIST"
	case 22:
		return "EINVAL"
	case 95:
		return "EOPNOTSUPP"
	case 110:
		return "ETIMEDOUT"
	}
	return "errno " + strconv.Itoa(int(-r))
}
