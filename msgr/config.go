package msgr

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

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

	// Transports resolves address strings to transports; default
	// transport.Default (TCP).
	Transports *transport.Registry

	// Supported and Required are the Ceph feature masks; default
	// msg.FeaturesAll and 0.
	Supported, Required uint64

	// Limits bound the frames a peer may send; zero fields take defaults
	// (64 KiB control frames, 256 MiB messages and segments).
	Limits msgr2.Limits

	// HandshakeTimeout bounds connection setup; default 10 s.
	HandshakeTimeout time.Duration
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
	if d.OutQueueBytes == 0 {
		d.OutQueueBytes = 256 << 20
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return d
}

func (c *Config) validate() error {
	var errs []error
	if c.HandshakeTimeout < 0 {
		errs = append(errs, fmt.Errorf("HandshakeTimeout %v is negative", c.HandshakeTimeout))
	}
	if c.KeepaliveInterval > 0 && c.KeepaliveTimeout > 0 && c.KeepaliveTimeout < c.KeepaliveInterval {
		errs = append(errs, fmt.Errorf("KeepaliveTimeout %v is shorter than KeepaliveInterval %v", c.KeepaliveTimeout, c.KeepaliveInterval))
	}
	if c.DispatchThrottleBytes < 0 || c.DispatchQueueLen < 0 || c.OutQueueBytes < 0 {
		errs = append(errs, errors.New("negative queue bound"))
	}
	if c.Required&^c.Supported != 0 {
		errs = append(errs, fmt.Errorf("required features %#x not in supported %#x", c.Required, c.Supported))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("msgr: invalid config: %w", err)
	}
	return nil
}
