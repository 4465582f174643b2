package peers

// The secure-mode side of the benchmark server: a second ferry rpc
// instance, rank 0 as the first, on a messenger of its own that accepts
// cephx only and msgr2 secure mode (AES-128-GCM) only, serving the bulk
// protocol from the same buffers (the bulk benchmarks' ferry-secure
// contender; bench/msgrbench's ferry-*-secure do the same for round
// trips). No Ceph daemon is involved: the client holds a ticket for the
// OSD service sealed with a static service key (EnvOSDKey) by a key
// server in its own process, and this verifier opens it with that key.

import (
	"errors"
	"log/slog"
	"os"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
	"github.com/ferrymsg/ferry/rpc"
)

// EnvOSDKey names the environment variable through which the client
// hands the server process the OSD service key (keyring form) that its
// cephx tickets are sealed with. Without it the server runs no secure
// instance.
const EnvOSDKey = "FERRY_PEERS_OSD_KEY"

// secureServer is the second, cephx-and-secure-only instance.
type secureServer struct {
	m  *msgr.Messenger
	fi *rpc.Instance
}

// startSecure starts the secure instance with the OSD key of EnvOSDKey
// and serves bs's bulk protocol on it; nil, nil without the key.
func startSecure(bs *bulkServer, log *slog.Logger) (_ *secureServer, err error) {
	ks := os.Getenv(EnvOSDKey)
	if ks == "" {
		return nil, nil
	}
	key, err := cephx.ParseKey(ks)
	if err != nil {
		return nil, err
	}
	ver, err := cephx.NewVerifier(cephx.VerifierConfig{Service: msg.EntityOSD, StaticKey: key})
	if err != nil {
		return nil, err
	}
	m, err := msgr.New(msgr.Config{
		Name:       msg.EntityName{Type: msg.EntityOSD, Num: 0},
		Logger:     log,
		Transports: Transports(),
		Auth: msgr.AuthConfig{
			Methods: []uint32{auth.MethodCephx},
			// Clients (the only peers here) get secure mode or nothing.
			Modes: msgr.ModeConfig{Service: []uint32{auth.ConModeSecure}},
			// Every accepted socket verifies a cephx authorizer; auth
			// none is not allowed.
			ServerFor: func(msg.EntityAddr) (auth.Server, error) { return ver.Handler(), nil },
		},
	})
	if err != nil {
		return nil, err
	}
	// As the rpc instance's own messenger: lossy sessions both ways.
	m.SetDefaultPolicy(msgr.LossyClient())
	if err := m.Bind("tcp://127.0.0.1:0"); err != nil {
		m.Shutdown()
		return nil, err
	}
	if err := m.Start(); err != nil {
		m.Shutdown()
		return nil, err
	}
	s := &secureServer{m: m}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.fi, err = rpc.New(rpc.Options{Messenger: m, Logger: log, Bulk: BulkOptionsFromEnv()}); err != nil {
		return nil, err
	}
	if s.fi.URI() == "" {
		return nil, errors.New("peers: the secure instance does not serve")
	}
	if _, err := s.fi.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
		return nil, err
	}
	if err := bs.serveOn(s.fi); err != nil {
		return nil, err
	}
	return s, nil
}

// close stops the instance, then its messenger (which the instance does
// not own).
func (s *secureServer) close() {
	if s.fi != nil {
		s.fi.Close()
	}
	s.m.Shutdown()
}
