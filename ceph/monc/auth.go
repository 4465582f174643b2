package monc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// ErrNoCephx means a cephx operation was asked of a client configured
// without cephx.
var ErrNoCephx = errors.New("monc: client has no cephx state")

// cephxOf returns the client's cephx state, or ErrNoCephx.
func (c *Client) cephxOf() (*cephx.Client, error) {
	if c.cfg.Cephx == nil {
		return nil, ErrNoCephx
	}
	return c.cfg.Cephx, nil
}

// Cephx returns the client's cephx state (nil for auth none).
func (c *Client) Cephx() *cephx.Client { return c.cfg.Cephx }

// GlobalID returns the global id the mons gave this client (0 with auth
// none or before the first login).
func (c *Client) GlobalID() uint64 {
	if c.cfg.Cephx == nil {
		return 0
	}
	return c.cfg.Cephx.GlobalID()
}

// now returns the client's clock.
func (c *Client) now() time.Time {
	if c.cfg.Now != nil {
		return c.cfg.Now()
	}
	return time.Now()
}

// mauth sends one MAuth on the mon session conn and returns the reply.
// MAuth exchanges run one at a time (a reply has no tid).
func (c *Client) mauth(ctx context.Context, conn *msgr.Conn, protocol uint32, payload []byte) (*ceph.AuthReply, error) {
	c.authMu.Lock()
	defer c.authMu.Unlock()
	req := ceph.Auth{Protocol: protocol, Payload: payload, MonmapEpoch: c.MonMapEpoch()}
	r, err := c.call(ctx, conn, key{ceph.MsgAuthReply, 0}, req.Marshal())
	if err != nil {
		return nil, err
	}
	defer r.Done()
	var rep ceph.AuthReply
	if err := rep.Unmarshal(r); err != nil {
		return nil, err
	}
	rep.ResultBL = append([]byte(nil), rep.ResultBL...)
	return &rep, nil
}

// mauthLogin logs in over MAuth messages on a session opened without
// authentication (how msgr1 logs in to a mon, §1.8 of the cephx notes).
func (c *Client) mauthLogin(ctx context.Context, conn *msgr.Conn) error {
	cx, err := c.cephxOf()
	if err != nil {
		return err
	}
	l := cx.MAuthLogin()
	rep, err := c.mauth(ctx, conn, cephx.MAuthProtocolNegotiate, l.Hello())
	if err != nil {
		return err
	}
	p, err := l.HandleChallenge(rep.Result, rep.ResultBL)
	if err != nil {
		return err
	}
	rep, err = c.mauth(ctx, conn, cephx.MAuthProtocolCephx, p)
	if err != nil {
		return err
	}
	_, err = l.HandleDone(rep.Result, rep.GlobalID, rep.ResultBL)
	return err
}

// ServiceTickets asks the mon for tickets for the services in mask
// (cephx.ServiceMask of msg.EntityOSD, msg.EntityMgr ...) over the mon
// session (MAuth GET_PRINCIPAL_SESSION_KEY), whether or not they are due.
func (c *Client) ServiceTickets(ctx context.Context, mask uint32) error {
	cx, err := c.cephxOf()
	if err != nil {
		return err
	}
	conn, err := c.session(ctx)
	if err != nil {
		return err
	}
	p, err := cx.ServiceTicketRequest(mask)
	if err != nil {
		return err
	}
	return c.handleAuthReply(ctx, conn, cx, p)
}

// RenewTickets renews, over the mon session, what is due at the client's
// clock: the AUTH ticket first, else the service tickets a quarter of
// their validity before they expire (cephx.Client.RenewRequest). It
// returns at once when nothing is due.
func (c *Client) RenewTickets(ctx context.Context) error {
	cx, err := c.cephxOf()
	if err != nil {
		return err
	}
	conn, err := c.session(ctx)
	if err != nil {
		return err
	}
	for range 2 { // the AUTH ticket, then the service tickets
		p, err := cx.RenewRequest(c.now())
		if err != nil {
			return err
		}
		if p == nil {
			return nil
		}
		if err := c.handleAuthReply(ctx, conn, cx, p); err != nil {
			return err
		}
	}
	return nil
}

// handleAuthReply sends a cephx MAuth request and hands the reply to cx.
func (c *Client) handleAuthReply(ctx context.Context, conn *msgr.Conn, cx *cephx.Client, payload []byte) error {
	rep, err := c.mauth(ctx, conn, cephx.MAuthProtocolCephx, payload)
	if err != nil {
		return err
	}
	if _, err := cx.HandleMAuthReply(rep.Result, rep.GlobalID, rep.ResultBL); err != nil {
		return fmt.Errorf("monc: MAuth: %w", err)
	}
	return nil
}

// renewLoop renews tickets when they fall due, until the client closes:
// every TickInterval it checks what is due by the client's clock (Ceph's
// MonClient::tick and _check_auth_tickets) and renews it over the mon
// session, if one is open.
func (c *Client) renewLoop() {
	defer close(c.renewDone)
	cx := c.cfg.Cephx
	tick := time.NewTicker(c.cfg.TickInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		if cx.Need(c.now()) == 0 || c.MonConn() == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.HuntTimeout)
		err := c.RenewTickets(ctx)
		cancel()
		if err != nil && !c.isClosed() {
			c.log.Warn("monc: ticket renewal failed", "err", err)
		}
	}
}

// configureAuth fills the messenger's auth settings for cfg.Cephx (those
// not set already): the name, cephx as the method, and a fresh
// per-connection handler for every connection attempt (mon-mode login
// for mons, an authorizer from the service ticket for OSDs and MGRs).
// With MAuthLogin the mons are logged in to with MAuth instead, so mon
// connections get auth none in the handshake.
func configureAuth(cfg *Config, mc *msgr.Config) {
	cx := cfg.Cephx
	if cx == nil {
		return
	}
	if mc.Auth.Name == (msg.AuthName{}) {
		mc.Auth.Name = cx.Name()
	}
	if mc.Name.Type == 0 {
		mc.Name = msg.EntityName{Type: cx.Name().Type, Num: msg.NewID}
	}
	if len(mc.Auth.Methods) == 0 {
		mc.Auth.Methods = []uint32{auth.MethodCephx}
	}
	if mc.Auth.ClientFor == nil {
		mauth := cfg.MAuthLogin
		mc.Auth.ClientFor = func(c *msgr.Conn) (auth.Client, error) {
			if mauth && c.PeerType() == msg.EntityMon {
				return nil, nil
			}
			return cx.Handler(), nil
		}
	}
}
