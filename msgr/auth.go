package msgr

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
)

// AuthConfig is how a messenger authenticates its connections and which
// connection modes it uses. The zero value is auth none in crc mode, as
// before authentication existed.
//
// A client's method comes from ClientFor, called once per connection
// attempt (a mon client hands out mon-mode cephx clients for mons and
// authorizer clients holding service tickets for OSDs and MGRs); a
// server's from ServerFor, called once per accepted socket. Without
// them both sides use auth none (auth.NoneClient as Name,
// auth.NoneServer assigning global ids).
type AuthConfig struct {
	// Name is the entity this messenger authenticates as (client.admin,
	// osd.0); default Config.Name's type with Config.AuthID.
	Name msg.AuthName
	// Keyring is the path of a Ceph keyring file holding Name's key, and
	// Key the key itself (base64, as on a keyring's "key =" line). The
	// messenger does not read them itself: they are for the auth methods
	// that ClientFor and ServerFor build (Messenger.Config returns
	// them).
	Keyring string
	Key     string
	// Methods are the auth methods in order of preference (auth.MethodCephx,
	// auth.MethodNone), for the layers that build auth methods; default
	// [auth.MethodNone]. ServerFor's auth.Server says what a server
	// allows; ClientFor's auth.Client what a client offers, filtered by
	// Methods when it is set: when Methods lists auth.MethodNone beside
	// the method of ClientFor's client, a client offers both in Methods'
	// order (auth.ChainClient): refused one (msgr2's AUTH_BAD_METHOD), it
	// retries with the next the server allows, as Ceph's clients do with
	// auth_client_required "cephx, none"; when it lists none but not that
	// method, the client offers auth none only. Listing none after cephx
	// lets a server that allows only none downgrade the connection to
	// auth none. (msgr1 has no such retry: it offers the first method.)
	Methods []uint32
	// Modes are the connection modes in order of preference, per kind
	// of peer; Ceph's defaults for empty lists.
	Modes ModeConfig

	// ClientFor returns the auth.Client for one connection attempt of c
	// (c.PeerType is the type given to ConnectType, if any; the method's
	// Request learns the peer's real type from its HELLO). nil, or a nil
	// result, means auth none. An error fails the attempt.
	ClientFor func(c *Conn) (auth.Client, error)
	// ServerFor returns the auth.Server for one accepted socket from
	// remote. nil, or a nil result, means auth none. An error closes the
	// socket.
	ServerFor func(remote msg.EntityAddr) (auth.Server, error)
}

// ModeConfig lists connection modes (auth.ConModeSecure, auth.ConModeCRC)
// in order of preference, as Ceph's ms_*_mode options do. Which list
// applies depends on this messenger's type and the peer's, in both roles
// (Modes): a client offers it; a server picks the first mode of the
// client's list that its own list allows. Empty lists take Ceph's
// defaults. Auth none always runs in crc mode, and secure mode needs a
// msgr2.1 peer.
type ModeConfig struct {
	// Client: a client to OSDs and MDSs (ms_client_mode); default crc,
	// secure.
	Client []uint32
	// MonClient: a client to mons and mgrs (ms_mon_client_mode); default
	// secure, crc.
	MonClient []uint32
	// Service: a daemon with clients (ms_service_mode, or
	// ms_mon_service_mode on a mon: MonService); defaults crc, secure and
	// secure, crc.
	Service    []uint32
	MonService []uint32
	// Cluster: a daemon with OSDs and MDSs (ms_cluster_mode); default crc,
	// secure. MonCluster: a daemon with mons and mgrs, or a mon with
	// other mons (ms_mon_cluster_mode); default secure, crc.
	Cluster    []uint32
	MonCluster []uint32
}

var (
	defaultCRCFirst    = []uint32{auth.ConModeCRC, auth.ConModeSecure}
	defaultSecureFirst = []uint32{auth.ConModeSecure, auth.ConModeCRC}
)

func orDefault(l, d []uint32) []uint32 {
	if len(l) == 0 {
		return d
	}
	return l
}

func isDaemon(t msg.EntityType) bool {
	switch t {
	case msg.EntityMon, msg.EntityOSD, msg.EntityMDS, msg.EntityMgr:
		return true
	}
	return false
}

// Modes returns the modes a messenger of type me uses with a peer of type
// peer, in order (Ceph's AuthRegistry::get_supported_methods).
func (mc *ModeConfig) Modes(me, peer msg.EntityType) []uint32 {
	monish := peer == msg.EntityMon || peer == msg.EntityMgr
	switch {
	case !isDaemon(me) && monish:
		return orDefault(mc.MonClient, defaultSecureFirst)
	case !isDaemon(me):
		return orDefault(mc.Client, defaultCRCFirst)
	case me == msg.EntityMon && monish:
		return orDefault(mc.MonCluster, defaultSecureFirst)
	case me == msg.EntityMon:
		return orDefault(mc.MonService, defaultSecureFirst)
	case monish:
		return orDefault(mc.MonCluster, defaultSecureFirst)
	case isDaemon(peer):
		return orDefault(mc.Cluster, defaultCRCFirst)
	}
	return orDefault(mc.Service, defaultCRCFirst)
}

func (mc *ModeConfig) validate() error {
	for _, l := range [][]uint32{mc.Client, mc.MonClient, mc.Cluster, mc.Service, mc.MonService, mc.MonCluster} {
		for _, m := range l {
			if m != auth.ConModeCRC && m != auth.ConModeSecure {
				return fmt.Errorf("unknown connection mode %d", m)
			}
		}
	}
	return nil
}

func (a *AuthConfig) validate() error {
	var errs []error
	if err := a.Modes.validate(); err != nil {
		errs = append(errs, err)
	}
	for _, m := range a.Methods {
		if m != auth.MethodNone && m != auth.MethodCephx {
			errs = append(errs, fmt.Errorf("unknown auth method %d", m))
		}
	}
	if slices.Contains(a.Methods, auth.MethodCephx) && a.ClientFor == nil && a.ServerFor == nil {
		errs = append(errs, errors.New("auth method cephx without ClientFor or ServerFor to provide it"))
	}
	return errors.Join(errs...)
}

// AuthInfo is what authentication established on a connection's current
// socket.
type AuthInfo struct {
	// Method is the auth method (auth.MethodNone, auth.MethodCephx), 0
	// before the first handshake.
	Method uint32
	// Mode is the connection mode (auth.ConModeCRC, auth.ConModeSecure).
	Mode uint32
	// Name is the authenticated entity: on an accepted connection the
	// peer (as it proved it, for cephx), on an outgoing one ourselves.
	Name msg.AuthName
	// GlobalID is Name's global id.
	GlobalID uint64
	// Caps are the peer's capabilities for this service as its ticket
	// carries them, and AllowAll the ticket's allow_all flag (accepted
	// connections with cephx only).
	Caps     []byte
	AllowAll bool
}

func authInfo(res auth.Result, mode uint32) AuthInfo {
	return AuthInfo{Method: res.Method, Mode: mode, Name: res.Name, GlobalID: res.GlobalID,
		Caps: slices.Clone(res.Caps), AllowAll: res.AllowAll}
}

// Auth returns what authentication established on the connection's
// latest socket (the zero AuthInfo before the first handshake). On an
// accepted connection it says who the peer is, so a server can authorize
// what the peer asks.
func (c *Conn) Auth() AuthInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.auth
}

// Authenticated records that the peer of c authenticated after the
// handshake, through messages a layer above handled (a msgr1 client's
// MAuth login to a mon): Auth then reports res, and a msgr1 connection's
// limits go from the pre-authentication ones (Limits.MaxControl per
// message) back to the messenger's, from the next message the reader
// takes. On msgr2, where authentication is part of the handshake, it
// only updates Auth.
func (c *Conn) Authenticated(res auth.Result) {
	c.mu.Lock()
	c.auth = authInfo(res, c.auth.Mode)
	c.mu.Unlock()
	c.liftLimits.Store(true)
}

// authClient returns the auth.Client for one connection attempt of c.
func (m *Messenger) authClient(c *Conn) (auth.Client, error) {
	var cl auth.Client
	if m.cfg.Auth.ClientFor != nil {
		var err error
		if cl, err = m.cfg.Auth.ClientFor(c); err != nil {
			return nil, err
		}
	}
	if cl == nil {
		cl = auth.NewNoneClient(m.cfg.Auth.Name)
	}
	return chainMethods(cl, m.cfg.Auth.Methods, m.cfg.Auth.Name), nil
}

// chainMethods returns the client a connection attempt offers, by the
// configured methods: cl when methods is empty or names only cl's method;
// an auth.ChainClient offering cl's method and auth none in the order of
// methods when it lists both; auth none alone when it lists none but not
// cl's method. A client that already falls back (auth.Fallback), or one
// whose method methods does not name beside anything else usable, is
// used as it is.
func chainMethods(cl auth.Client, methods []uint32, name msg.AuthName) auth.Client {
	if _, ok := cl.(auth.Fallback); ok || len(methods) == 0 {
		return cl
	}
	var chain []auth.Client
	for _, me := range methods {
		switch me {
		case cl.Method():
			chain = append(chain, cl)
		case auth.MethodNone:
			chain = append(chain, auth.NewNoneClient(name))
		}
	}
	switch len(chain) {
	case 0:
		return cl
	case 1:
		return chain[0]
	}
	ch, err := auth.NewChainClient(chain...)
	if err != nil {
		return cl
	}
	return ch
}

// authServer returns the auth.Server for a socket accepted from remote.
func (m *Messenger) authServer(remote msg.EntityAddr) (auth.Server, error) {
	if m.cfg.Auth.ServerFor != nil {
		s, err := m.cfg.Auth.ServerFor(remote)
		if err != nil || s != nil {
			return s, err
		}
	}
	return &auth.NoneServer{GlobalID: m.globalID.Add(1)}, nil
}

// conModes is the engine's ConModes: the modes for a peer of the given
// type, by this messenger's type.
func (m *Messenger) conModes(peer msg.EntityType) []uint32 {
	return m.cfg.Auth.Modes.Modes(m.cfg.Name.Type, peer)
}
