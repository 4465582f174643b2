package cephx

import (
	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/msg"
)

// CombinedServer is one connection's auth.Server for a server that is
// both a mon and a service (a ferry server holding the key database and
// serving requests itself): a request in mon mode (first byte 10..19)
// goes to a MonSession of the KeyServer, an authorizer (first byte 1..9)
// to a VerifierSession. It is used by one connection at a time.
type CombinedServer struct {
	ks  *KeyServer
	v   *Verifier
	cur auth.Server
	mon *MonSession
}

var _ auth.Server = (*CombinedServer)(nil)

// NewCombinedServer returns one connection's server taking mon-mode
// logins to ks and authorizers to v. Either may be nil, refusing that
// mode.
func NewCombinedServer(ks *KeyServer, v *Verifier) *CombinedServer {
	return &CombinedServer{ks: ks, v: v}
}

// Methods returns [auth.MethodCephx].
func (s *CombinedServer) Methods(msg.EntityType) []uint32 { return []uint32{auth.MethodCephx} }

// MonSession returns the mon session a mon-mode login created (for the
// MAuth requests that follow it), or nil.
func (s *CombinedServer) MonSession() *MonSession { return s.mon }

// Handle routes the first payload by its mode byte and every later one
// to the same handler.
func (s *CombinedServer) Handle(method uint32, peerType msg.EntityType, conMode uint32, first bool, payload []byte) (auth.Reply, error) {
	if s.cur == nil {
		if !first || len(payload) == 0 {
			return auth.Reply{}, fail(auth.ErrMalformed, "empty auth request", nil)
		}
		switch m := payload[0]; {
		case m >= AuthModeMon && m <= AuthModeMonMax && s.ks != nil:
			s.mon = s.ks.Handler()
			s.cur = s.mon
		case m >= AuthModeAuthorizer && m <= AuthModeAuthorizerMax && s.v != nil:
			s.cur = s.v.Handler()
		default:
			return auth.Reply{}, &StatusError{Status: StatusEOPNOTSUPP, Op: "auth request", Err: fail(auth.ErrDenied, "auth mode not served here", nil)}
		}
	}
	return s.cur.Handle(method, peerType, conMode, first, payload)
}
