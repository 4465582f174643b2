package main

import (
	"context"
	crand "crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
	"github.com/ferrymsg/ferry/transport"
)

// defaultListen is where `ferry serve` listens by default: a mon's msgr2
// port on loopback, so that `ceph ping mon.a` with mon_host = 127.0.0.1
// finds it.
const defaultListen = "v2:127.0.0.1:3300/0"

// runServe is `ferry serve`: Ceph's simple_server, answering pings as a
// mon does, and an RPC rank 0 on the same address serving the self-test
// protocol (`ferry selftest --endpoints ADDR`).
func runServe(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "serve")
	listen := fs.String("listen", defaultListen, "address to listen on: v2:IP:PORT/NONCE, v1:IP:PORT/NONCE (msgr1), tcp://IP:PORT (port 0 picks a free port), unix://PATH or shm://NAME (Linux; shm:///PATH for a socket path)")
	name := fs.String("name", "mon.a", "entity to serve as, TYPE.ID; a mon's ID is its name and its number is its rank (0 unless the ID is a number)")
	fsidFlag := fs.String("fsid", "", "cluster fsid reported in the ping status (default: random)")
	verbose := fs.Bool("verbose", false, "log debug messages")
	rank := fs.Uint("rank", 0, "the RPC rank to serve as: requests for other ranks are refused (ErrWrongRank)")
	groupFile := fs.String("group", "", "join the group of this attach `FILE` (a name line, then RANK URI lines) as --rank, listening on the rank's URI unless --listen is given, and serve the group status service (ferry group stat)")
	withSWIM := fs.Bool("swim", false, "with --group: run SWIM failure detection and log each membership event (member rank=N state=alive|suspect|dead)")
	peerBudget := newBytesFlag(fs, "peer-budget", 0, "`BYTES` (a count, or with K, M, G, KiB, MiB, GiB) the RPC rank may owe all its peers: requests not answered, outputs not pulled (rpc.Options.PeerBudget; 0: the default, 256 MiB; negative: none)")
	mflags := addMsgrFlags(fs, "stateless-server")
	ops := addOpsFlags(fs)
	aflags := addServerAuthFlags(fs)
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(e, fs, "unexpected arguments %q", pos)
	}
	if uint64(*rank) >= uint64(rpc.RankNone) {
		return usageError(e, fs, "--rank %d is out of range", *rank)
	}
	mopts, err := mflags.options()
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	var groupName string
	var members []rpc.Member
	listenFromGroup := false
	if *groupFile != "" {
		if groupName, members, err = readGroupFile(*groupFile); err != nil {
			return usageError(e, fs, "--group: %v", err)
		}
		listenSet := false
		fs.Visit(func(f *flag.Flag) { listenSet = listenSet || f.Name == "listen" })
		if !listenSet {
			found := false
			for _, m := range members {
				if m.Rank == uint32(*rank) {
					*listen, found, listenFromGroup = m.URI, true, true
				}
			}
			if !found {
				return usageError(e, fs, "--group: %s lists no rank %d (and --listen is not given)", *groupFile, *rank)
			}
		}
	} else if *withSWIM {
		return usageError(e, fs, "--swim needs --group")
	}
	listenFrom := "--listen"
	if listenFromGroup {
		listenFrom = fmt.Sprintf("--group: rank %d's URI", *rank)
	}
	if a, err := transport.ParseAddr(*listen); err != nil {
		return usageError(e, fs, "%s: %v", listenFrom, err)
	} else if _, err := cliTransports("").LookupAddr(a); err != nil {
		return usageError(e, fs, "%s: %v", listenFrom, err)
	}
	if mopts.ServerAuth, err = aflags.resolve(); err != nil {
		return usageError(e, fs, "%v", err)
	}
	ident, id, err := parseIdentity(*name)
	if err != nil {
		return usageError(e, fs, "--name: %v", err)
	}
	var fsid ceph.FSID
	if *fsidFlag != "" {
		if fsid, err = ceph.ParseFSID(*fsidFlag); err != nil {
			return usageError(e, fs, "--fsid: %v", err)
		}
	} else {
		fsid = randomFSID()
	}
	log := newLogger(e, *verbose)
	srv, err := startServer(serverConfig{Listen: *listen, Name: ident, ID: id, FSID: fsid, Logger: log, Msgr: mopts, Rank: uint32(*rank), Group: groupName, PeerBudget: *peerBudget})
	if err != nil {
		log.Error("cannot serve", "err", err)
		return exitError
	}
	if *groupFile != "" {
		if _, err := joinGroup(srv, members, *withSWIM, log); err != nil {
			log.Error("cannot join the group", "file", *groupFile, "err", err)
			srv.Close()
			return exitError
		}
	}
	stopOps, announceOps, err := ops.start(ctx, e, log, srv, time.Now())
	defer stopOps()
	if err != nil {
		log.Error("cannot serve", "err", err)
		srv.Close()
		return exitError
	}
	// The first line of stdout is the contract with scripts and tests:
	// printed once everything serve was asked to listen on is bound.
	// os.Stdout is unbuffered, so it is out as soon as Fprintf returns.
	fmt.Fprintf(e.stdout, "listening %s\n", srv.Addr())
	announceOps()
	log.Info("serving pings and the RPC self-test", "rank", *rank, "entity", ident.String(), "addr", srv.Addr(), "fsid", fsid.String(), "policy", mopts.PolicyName)
	<-ctx.Done()
	log.Info("shutting down", "pings_answered", srv.Pings())
	srv.Close()
	return exitOK
}

// parseIdentity parses --name: TYPE.ID where ID is a number, or for a mon
// also a name (Ceph names mons and numbers them by rank; ferry serves as
// rank 0). It returns the entity name and the ID as given.
func parseIdentity(s string) (msg.EntityName, string, error) {
	ts, id, found := strings.Cut(s, ".")
	if !found || id == "" {
		return msg.EntityName{}, "", fmt.Errorf("%q is not TYPE.ID (for example mon.a or osd.0)", s)
	}
	t, err := msg.ParseEntityType(ts)
	if err != nil || t == msg.EntityAny {
		return msg.EntityName{}, "", fmt.Errorf("unknown entity type %q", ts)
	}
	n, err := strconv.ParseInt(id, 10, 64)
	switch {
	case err != nil && t == msg.EntityMon:
		n = 0
	case err != nil:
		return msg.EntityName{}, "", fmt.Errorf("ID %q of a %s must be a number", id, ts)
	case n < 0:
		return msg.EntityName{}, "", fmt.Errorf("ID %q must not be negative", id)
	}
	return msg.EntityName{Type: t, Num: n}, id, nil
}

func randomFSID() ceph.FSID {
	var f ceph.FSID
	_, _ = crand.Read(f[:])
	f[6] = f[6]&0x0f | 0x40 // UUID version 4
	f[8] = f[8]&0x3f | 0x80 // RFC 4122 variant
	return f
}

// serverConfig configures a ping server.
type serverConfig struct {
	Listen string
	Name   msg.EntityName
	ID     string // the name's ID as given ("a" for mon.a)
	FSID   ceph.FSID
	Logger *slog.Logger
	// Msgr sets the policy, fault injection, keepalives and backoff; nil
	// means stateless-server and the messenger's defaults.
	Msgr *msgrOptions
	// Rank is the RPC rank served (0 by default).
	Rank uint32
	// Group is the primary group's name (default rpc.DefaultGroup).
	Group string
	// PeerBudget is the RPC rank's rpc.Options.PeerBudget.
	PeerBudget int64
}

// server answers every MPing with an MPing whose front is a mon-like JSON
// status and whose data segment is the request's (the same buffers, not a
// copy).
type server struct {
	m     *msgr.Messenger
	rpc   *rpc.Instance // the RPC rank on the same messenger: the self-test service
	log   *slog.Logger
	addr  string
	reply *msg.Message // template: header and front shared by all replies
	pings atomic.Uint64
}

// startServer binds, builds the status and starts the messenger.
func startServer(cfg serverConfig) (*server, error) {
	mo := cfg.Msgr
	if mo == nil {
		mo = defaultMsgrOptions("stateless-server")
	}
	mc := msgr.Config{
		Name:      cfg.Name,
		ZeroNonce: cfg.Name.Type == msg.EntityMon, // mons use nonce 0
		Logger:    cfg.Logger,
	}
	mo.configure(&mc)
	m, err := msgr.New(mc)
	if err != nil {
		return nil, err
	}
	m.SetDefaultPolicy(mo.Policy)
	if mo.ServerAuth != nil {
		m.AddDispatcherHead(mo.ServerAuth) // MAuth on authenticated sessions
	}
	s := &server{m: m, log: cfg.Logger}
	if err := m.Bind(cfg.Listen); err != nil {
		m.Shutdown()
		return nil, err
	}
	var ea msg.EntityAddr
	for _, a := range m.Addrs() {
		if !a.IsZero() {
			ea = a
			break
		}
	}
	switch {
	case !ea.IsZero():
		s.addr = ea.String()
	case len(m.ListenAddrs()) > 0:
		s.addr = m.ListenAddrs()[0]
	}
	status, err := monStatus(cfg, ea)
	if err != nil {
		m.Shutdown()
		return nil, err
	}
	s.reply = ceph.PingReply(status)
	m.AddDispatcherTail(s)
	if err := m.Start(); err != nil {
		m.Shutdown()
		return nil, err
	}
	// The RPC layer joins the messenger (it takes only RPC message types)
	// as cfg.Rank with one context: every rpc instance serves the
	// self-test protocol and the internal RPCs.
	ri, err := rpc.New(rpc.Options{Messenger: m, Rank: cfg.Rank, Group: cfg.Group, Logger: cfg.Logger, PeerBudget: cfg.PeerBudget})
	if err != nil {
		m.Shutdown()
		return nil, err
	}
	if _, err := ri.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
		ri.Close()
		m.Shutdown()
		return nil, err
	}
	s.rpc = ri
	return s, nil
}

// Addr returns the bound address in Ceph's form ("v2:127.0.0.1:41234/0"),
// or the transport URI for a non-IP transport.
func (s *server) Addr() string { return s.addr }

// Pings returns the number of pings answered.
func (s *server) Pings() uint64 { return s.pings.Load() }

// Close stops the RPC instance, shuts the messenger down and waits for
// their goroutines.
func (s *server) Close() {
	s.rpc.Close()
	s.m.Shutdown()
}

// Dispatch answers MPing; it implements msgr.Dispatcher.
func (s *server) Dispatch(m *msg.Message) bool {
	if m.Header.Type != ceph.MsgPing {
		return false
	}
	s.answer(m)
	return true
}

// CanFastDispatch takes MPing on the reader goroutine: answering only
// queues the reply, so it never blocks (msgr.FastDispatcher).
func (s *server) CanFastDispatch(m *msg.Message) bool { return m.Header.Type == ceph.MsgPing }

// FastDispatch answers an MPing inline.
func (s *server) FastDispatch(m *msg.Message) { s.answer(m) }

func (s *server) answer(req *msg.Message) {
	if req.Conn == nil {
		return
	}
	r := &msg.Message{Header: s.reply.Header, Front: s.reply.Front}
	r.Header.Tid = req.Header.Tid
	r.Header.DataOff = req.Header.DataOff
	// The request's buffers go back out as they are; nothing writes to
	// them. The reply takes over the request's release, so its pooled
	// body goes back to the pool once the reply has been sent (before,
	// it never did, and every large ping allocated and zeroed a fresh
	// body: a fifth of the server's CPU at 1 MiB).
	r.Data = req.Data
	if crc, ok := req.ReceivedDataCRC(); ok {
		// The same bytes go back: their CRC was checked on receipt, so
		// the writer need not compute it again.
		r.SetDataCRCAhead(crc)
	}
	r.Release, req.Release = req.Release, nil
	if err := req.Conn.Send(r); err != nil {
		r.Done()
		s.log.Debug("ping reply not sent", "peer", req.Header.Src.String(), "tid", req.Header.Tid, "err", err)
		return
	}
	s.pings.Add(1)
}

// monStatus returns the JSON a mon puts in its ping reply
// (Monitor::handle_ping: {"health": ..., "mon_status": ...}, pretty
// printed), for a one-mon cluster led by this entity, with "ferry": true
// so tools can tell it from a real mon.
func monStatus(cfg serverConfig, addr msg.EntityAddr) ([]byte, error) {
	type addrJSON struct {
		Type  string `json:"type"`
		Addr  string `json:"addr"`
		Nonce uint32 `json:"nonce"`
	}
	type monJSON struct {
		Rank        int64               `json:"rank"`
		Name        string              `json:"name"`
		PublicAddrs map[string]any      `json:"public_addrs"`
		Addr        string              `json:"addr"`
		PublicAddr  string              `json:"public_addr"`
		Priority    int                 `json:"priority"`
		Weight      int                 `json:"weight"`
		CrushLoc    map[string]struct{} `json:"crush_location"`
	}
	addrs := []addrJSON{}
	legacy := "0.0.0.0:0/0"
	if !addr.IsZero() {
		typ := "v2"
		if addr.Type == msg.AddrLegacy {
			typ = "v1"
		}
		addrs = append(addrs, addrJSON{Type: typ, Addr: addr.IP.String(), Nonce: addr.Nonce})
		legacy = addr.IP.String() + "/" + strconv.FormatUint(uint64(addr.Nonce), 10)
	}
	v := struct {
		Health struct {
			Status string         `json:"status"`
			Checks map[string]any `json:"checks"`
			Mutes  []any          `json:"mutes"`
		} `json:"health"`
		MonStatus struct {
			Name            string   `json:"name"`
			Rank            int64    `json:"rank"`
			State           string   `json:"state"`
			ElectionEpoch   int      `json:"election_epoch"`
			Quorum          []int64  `json:"quorum"`
			OutsideQuorum   []string `json:"outside_quorum"`
			ExtraProbePeers []any    `json:"extra_probe_peers"`
			SyncProvider    []any    `json:"sync_provider"`
			Monmap          struct {
				Epoch int       `json:"epoch"`
				FSID  string    `json:"fsid"`
				Mons  []monJSON `json:"mons"`
			} `json:"monmap"`
			Ferry  bool   `json:"ferry"`
			Entity string `json:"entity"`
		} `json:"mon_status"`
	}{}
	v.Health.Status = "HEALTH_OK"
	v.Health.Checks = map[string]any{}
	v.Health.Mutes = []any{}
	ms := &v.MonStatus
	ms.Name = cfg.ID
	ms.Rank = cfg.Name.Num
	ms.State = "leader"
	ms.ElectionEpoch = 1
	ms.Quorum = []int64{cfg.Name.Num}
	ms.OutsideQuorum = []string{}
	ms.ExtraProbePeers = []any{}
	ms.SyncProvider = []any{}
	ms.Monmap.Epoch = 1
	ms.Monmap.FSID = cfg.FSID.String()
	ms.Monmap.Mons = []monJSON{{
		Rank:        cfg.Name.Num,
		Name:        cfg.ID,
		PublicAddrs: map[string]any{"addrvec": addrs},
		Addr:        legacy,
		PublicAddr:  legacy,
		CrushLoc:    map[string]struct{}{},
	}}
	ms.Ferry = true
	ms.Entity = cfg.Name.String()
	// Ceph's JSONFormatter(true) indents by four spaces.
	return json.MarshalIndent(v, "", "    ")
}

// defaultIdentity is the entity `ferry serve` is by default: mon.a, rank 0.
func defaultIdentity() msg.EntityName { return msg.EntityName{Type: msg.EntityMon, Num: 0} }
