package main

import (
	"flag"
	"fmt"
	"sync"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// serverAuthFlags are serve's auth flags: --auth, --keyring (its key
// database, as a mon's keyring is) and --mode.
type serverAuthFlags struct {
	method  *string
	keyring *string
	mode    *string
}

func addServerAuthFlags(fs *flag.FlagSet) *serverAuthFlags {
	return &serverAuthFlags{
		method:  fs.String("auth", "none", "authentication required of clients: none, or cephx (needs --keyring)"),
		keyring: fs.String("keyring", "", "with --auth cephx: keyring holding the keys and caps of the clients accepted (a mon's key database)"),
		mode:    fs.String("mode", "", "connection modes accepted, in order of preference: secure, crc or a comma list (default: Ceph's, secure,crc)"),
	}
}

// resolve returns the server's auth, nil for auth none. Its errors are
// phrased for the user.
func (f *serverAuthFlags) resolve() (*serverAuth, error) {
	modes, err := parseModes(*f.mode)
	if err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	switch *f.method {
	case "none":
		if *f.keyring != "" {
			return nil, fmt.Errorf("--keyring needs --auth cephx")
		}
		if len(modes) > 0 && modes[0] != auth.ConModeCRC {
			return nil, fmt.Errorf("--mode: auth none runs in crc mode only")
		}
		return nil, nil
	case "cephx":
	default:
		return nil, fmt.Errorf("--auth %q: want cephx or none", *f.method)
	}
	if *f.keyring == "" {
		return nil, fmt.Errorf("--auth cephx needs --keyring with the keys of the clients to accept")
	}
	kr, err := cephx.LoadKeyring(*f.keyring)
	if err != nil {
		return nil, fmt.Errorf("--keyring: %w", err)
	}
	ks, err := cephx.NewKeyServer(cephx.KeyServerConfig{Keyring: kr})
	if err != nil {
		return nil, fmt.Errorf("--keyring: %w", err)
	}
	return &serverAuth{ks: ks, modes: modes, sessions: map[*msgr.Conn]*cephx.MonSession{}, pending: map[uint64]*cephx.MonSession{}}, nil
}

// serverAuth authenticates a server's clients as a mon does: cephx
// logins through the messenger (cephx.KeyServer's MonSession as the
// auth.Server of each accepted socket), then the session's MAuth
// requests (service tickets, renewals) answered by the same MonSession.
type serverAuth struct {
	ks    *cephx.KeyServer
	modes []uint32

	mu       sync.Mutex
	pending  map[uint64]*cephx.MonSession     // logged in, by global id, until their connection is known
	sessions map[*msgr.Conn]*cephx.MonSession // by connection
}

// configure sets the messenger's auth to cephx with this server's keys.
func (sa *serverAuth) configure(c *msgr.Config) {
	c.Auth.Methods = []uint32{auth.MethodCephx}
	c.Auth.Modes.MonService = sa.modes
	c.Auth.Modes.Service = sa.modes
	c.Auth.ServerFor = func(msg.EntityAddr) (auth.Server, error) {
		return &loginRecorder{MonSession: sa.ks.Handler(), sa: sa}, nil
	}
}

// loginRecorder is a MonSession that files itself under its global id
// when its login completes, so the MAuth requests of that connection
// find it.
type loginRecorder struct {
	*cephx.MonSession
	sa *serverAuth
}

// Handle passes the payload to the MonSession and files a completed
// login.
func (l *loginRecorder) Handle(method uint32, peerType msg.EntityType, conMode uint32, first bool, payload []byte) (auth.Reply, error) {
	r, err := l.MonSession.Handle(method, peerType, conMode, first, payload)
	if err == nil && r.Done {
		l.sa.mu.Lock()
		l.sa.pending[r.Result.GlobalID] = l.MonSession
		l.sa.mu.Unlock()
	}
	return r, err
}

// session returns the MonSession of conn's login.
func (sa *serverAuth) session(conn *msgr.Conn) *cephx.MonSession {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if s := sa.sessions[conn]; s != nil {
		return s
	}
	gid := conn.Auth().GlobalID
	s := sa.pending[gid]
	if s != nil {
		delete(sa.pending, gid)
		sa.sessions[conn] = s
	}
	return s
}

// Dispatch answers MAuth on an authenticated session, and an MAuth login
// (msgr1's) on a connection without one (msgr.Dispatcher).
func (sa *serverAuth) Dispatch(m *msg.Message) bool {
	if m.Header.Type != ceph.MsgAuth {
		return false
	}
	defer m.Done()
	conn, ok := m.Conn.(*msgr.Conn)
	if !ok {
		return true
	}
	var req ceph.Auth
	if err := req.Unmarshal(m); err != nil {
		conn.Fault(err)
		return true
	}
	s := sa.session(conn)
	if s == nil && req.Protocol == cephx.MAuthProtocolNegotiate {
		// A msgr1 client logs in to a mon with MAuth after READY: the
		// negotiation starts this connection's session.
		s = sa.ks.Handler()
		sa.mu.Lock()
		sa.sessions[conn] = s
		sa.mu.Unlock()
	}
	if s == nil {
		rep := ceph.AuthReply{Protocol: req.Protocol, Result: cephx.StatusEACCES, ResultMsg: "no cephx login on this connection"}
		_ = conn.Send(rep.Marshal())
		return true
	}
	ans, _ := s.HandleMAuth(req.Protocol, req.Payload)
	if ans.Login != nil {
		// A login over MAuth (msgr1): the connection is authenticated
		// from now on, and its peer may send messages of any size.
		conn.Authenticated(*ans.Login)
	}
	rep := ceph.AuthReply{Protocol: ans.Protocol, Result: ans.Result, GlobalID: ans.GlobalID, ResultBL: ans.ResultBL}
	_ = conn.Send(rep.Marshal())
	return true
}

// HandleAccept files a new session under its connection as soon as it is
// ready (msgr.AcceptHandler), so a login whose client never sends MAuth
// (as `ceph ping` does not) is not left in pending.
func (sa *serverAuth) HandleAccept(conn *msgr.Conn) { sa.session(conn) }

// sessionCount returns the number of sessions held (tests).
func (sa *serverAuth) sessionCount() int {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	return len(sa.sessions) + len(sa.pending)
}

// HandleReset forgets a closed connection's session (msgr.ResetHandler).
func (sa *serverAuth) HandleReset(conn *msgr.Conn) {
	sa.mu.Lock()
	delete(sa.sessions, conn)
	delete(sa.pending, conn.Auth().GlobalID)
	sa.mu.Unlock()
}
