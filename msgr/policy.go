package msgr

// Policy says how the messenger treats connections with one type of peer
// (Ceph's Messenger::Policy). Use a preset and adjust throttles and
// features; the flags of the presets are Ceph's.
type Policy struct {
	// Lossy: on a fault the connection is closed and its unsent messages
	// are dropped; the dispatchers are told (HandleReset). Otherwise the
	// session outlives its TCP connections and nothing is lost.
	Lossy bool
	// Server: never reconnect to the peer; wait for it to come back.
	Server bool
	// Standby: when a lossless connection fails with nothing to send, stay
	// idle until there is.
	Standby bool
	// ResetCheck: detect that the peer reset its session (it restarted),
	// drop what the session held for the old incarnation and tell the
	// dispatchers (HandleRemoteReset). Without it, as in Ceph, the
	// session goes on with the new incarnation: what was queued or sent
	// and not acknowledged is delivered to it, so a peer must tell stale
	// messages apart itself (Ceph's OSDs do by map epoch).
	ResetCheck bool
	// RegisterLossyClients: keep one registered connection per lossy
	// client address, so a newer connection replaces an older one.
	RegisterLossyClients bool

	// ThrottleMessages and ThrottleBytes bound the messages and payload
	// bytes received from peers of this type that are not yet dispatched
	// and released. Several policies may share a Throttle. Nil means
	// unlimited.
	ThrottleMessages *Throttle
	ThrottleBytes    *Throttle

	// FeaturesSupported is the feature mask offered to such peers (0: the
	// messenger's); FeaturesRequired is what they must support.
	FeaturesSupported uint64
	FeaturesRequired  uint64
}

// StatefulServer is Ceph's stateful_server: a lossless session the server
// never reconnects, kept in standby, with peer-reset detection.
func StatefulServer() Policy {
	return Policy{Server: true, Standby: true, ResetCheck: true, RegisterLossyClients: true}
}

// StatelessRegisteredServer is Ceph's stateless_registered_server: lossy
// sessions, one registered connection per client.
func StatelessRegisteredServer() Policy {
	return Policy{Lossy: true, Server: true, RegisterLossyClients: true}
}

// StatelessServer is Ceph's stateless_server: lossy sessions, not
// registered. A mon uses it for clients.
func StatelessServer() Policy {
	return Policy{Lossy: true, Server: true}
}

// LosslessPeer is Ceph's lossless_peer: both sides reconnect; standby when
// idle; no reset detection (a restarted peer receives what its old
// incarnation had not acknowledged; see Policy.ResetCheck).
func LosslessPeer() Policy {
	return Policy{Standby: true, RegisterLossyClients: true}
}

// LosslessPeerReuse is Ceph's lossless_peer_reuse: as LosslessPeer, with
// reset detection.
func LosslessPeerReuse() Policy {
	return Policy{Standby: true, ResetCheck: true, RegisterLossyClients: true}
}

// LossyClient is Ceph's lossy_client: a client session that is dropped on
// any fault.
func LossyClient() Policy {
	return Policy{Lossy: true, RegisterLossyClients: true}
}

// LosslessClient is Ceph's lossless_client: a client session that
// reconnects and replays, with reset detection.
func LosslessClient() Policy {
	return Policy{ResetCheck: true, RegisterLossyClients: true}
}

// PolicyByName returns the preset with the given kebab-case name
// ("lossy-client", "lossless-client", "lossless-peer",
// "lossless-peer-reuse", "stateful-server", "stateless-server",
// "stateless-registered-server").
func PolicyByName(name string) (Policy, bool) {
	switch name {
	case "lossy-client":
		return LossyClient(), true
	case "lossless-client":
		return LosslessClient(), true
	case "lossless-peer":
		return LosslessPeer(), true
	case "lossless-peer-reuse":
		return LosslessPeerReuse(), true
	case "stateful-server":
		return StatefulServer(), true
	case "stateless-server":
		return StatelessServer(), true
	case "stateless-registered-server":
		return StatelessRegisteredServer(), true
	}
	return Policy{}, false
}
