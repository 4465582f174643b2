package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/ceph"
	"github.com/ferrymsg/ferry/ceph/cephconf"
	"github.com/ferrymsg/ferry/ceph/monc"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// authFlags are the Ceph client settings of ping and tell: -c ceph.conf,
// --keyring, --name, --auth and --mode, spelt as the ceph tools spell
// them.
type authFlags struct {
	conf    *string
	keyring *string
	name    *string
	method  *string
	mode    *string
}

// addAuthFlags defines the client auth flags on fs.
func addAuthFlags(fs *flag.FlagSet) *authFlags {
	return &authFlags{
		conf:    fs.String("c", "", "ceph.conf to read the mon host list, keyring, key and modes from, as the ceph tools do"),
		keyring: fs.String("keyring", "", "keyring file holding this entity's key; implies --auth cephx"),
		name:    fs.String("name", "client.admin", "entity to authenticate as, TYPE.ID"),
		method:  fs.String("auth", "", "authentication: cephx or none (default: cephx with --keyring, else the conf's auth_client_required, else none)"),
		mode:    fs.String("mode", "", "connection modes in order of preference, secure, crc or a comma list such as secure,crc (default: the conf's, else Ceph's defaults per peer type)"),
	}
}

// clientAuth is what the auth flags resolved to.
type clientAuth struct {
	// Name is the entity (client.admin).
	Name msg.AuthName
	// Cephx is set for --auth cephx: the key, and what the conf says.
	Cephx bool
	Key   cephx.Key
	// KeyringPath is the keyring the key came from ("" for a key given
	// in the conf).
	KeyringPath string
	// Mons are the conf's mons (nil without -c).
	Mons []msg.AddrVec
	// MonModes and Modes are the connection modes towards mons and mgrs
	// and towards OSDs, in order of preference; nil for Ceph's defaults.
	MonModes, Modes []uint32

	cx *cephx.Client // made by cephxClient
}

// resolve reads the conf and keyring the flags name. Its errors are
// phrased for the user.
func (f *authFlags) resolve() (*clientAuth, error) {
	name, err := cephx.ParseEntityName(*f.name)
	if err != nil || name.ID == "" {
		return nil, fmt.Errorf("--name %q is not TYPE.ID (for example client.admin)", *f.name)
	}
	ca := &clientAuth{Name: name}
	var conf *cephconf.Client
	if *f.conf != "" {
		file, err := cephconf.Load(*f.conf)
		if err != nil {
			return nil, fmt.Errorf("-c: %w", err)
		}
		if conf, err = file.Client(name.String()); err != nil {
			return nil, fmt.Errorf("-c %s: %w", *f.conf, err)
		}
		ca.Mons = conf.MonHost
	}

	method := *f.method
	switch {
	case method == "" && *f.keyring != "":
		method = "cephx"
	case method == "" && conf != nil && len(conf.AuthRequired) > 0:
		method = conf.AuthRequired[0]
	case method == "":
		method = "none"
	case method == "none" && *f.keyring != "":
		return nil, errors.New("--keyring implies --auth cephx, but --auth none was given")
	}
	switch method {
	case "none":
	case "cephx":
		ca.Cephx = true
	default:
		return nil, fmt.Errorf("--auth %q: want cephx or none", method)
	}

	if *f.mode != "" {
		m, err := parseModes(*f.mode)
		if err != nil {
			return nil, fmt.Errorf("--mode: %w", err)
		}
		ca.MonModes, ca.Modes = m, m
	} else if conf != nil {
		if ca.MonModes, err = modesFromNames(conf.MonMode); err != nil {
			return nil, fmt.Errorf("-c: ms_mon_client_mode: %w", err)
		}
		if ca.Modes, err = modesFromNames(conf.Mode); err != nil {
			return nil, fmt.Errorf("-c: ms_client_mode: %w", err)
		}
	}

	if !ca.Cephx {
		return ca, nil
	}
	switch {
	case *f.keyring != "":
		if ca.Key, err = keyFromKeyring(*f.keyring, name); err != nil {
			return nil, err
		}
		ca.KeyringPath = *f.keyring
	case conf != nil && conf.Key != "":
		if ca.Key, err = cephx.ParseKey(conf.Key); err != nil {
			return nil, fmt.Errorf("-c: key: %w", err)
		}
	case conf != nil:
		// The conf's keyring list: the first file that exists.
		var tried []string
		for _, p := range conf.Keyrings {
			if _, err := os.Stat(p); err != nil {
				tried = append(tried, p)
				continue
			}
			if ca.Key, err = keyFromKeyring(p, name); err != nil {
				return nil, err
			}
			ca.KeyringPath = p
			break
		}
		if ca.KeyringPath == "" {
			return nil, fmt.Errorf("no keyring for %s: none of %s exists (give --keyring)", name, strings.Join(tried, ", "))
		}
	default:
		return nil, errors.New("--auth cephx needs a key: give --keyring, or -c with a conf that names one")
	}
	return ca, nil
}

// keyFromKeyring returns name's key from the keyring file at path.
func keyFromKeyring(path string, name msg.AuthName) (cephx.Key, error) {
	kr, err := cephx.LoadKeyring(path)
	if err != nil {
		return cephx.Key{}, fmt.Errorf("--keyring: %w", err)
	}
	e, ok := kr.Lookup(name)
	if !ok {
		return cephx.Key{}, fmt.Errorf("keyring %s holds no key for %s", path, name)
	}
	return e.Key, nil
}

// parseModes parses --mode: "secure", "crc", or a comma (or space)
// separated list in order of preference.
func parseModes(s string) ([]uint32, error) {
	return modesFromNames(strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }))
}

// modesFromNames maps mode names to auth.ConMode values; nil for none.
func modesFromNames(names []string) ([]uint32, error) {
	var out []uint32
	for _, n := range names {
		switch strings.ToLower(n) {
		case "secure":
			out = append(out, auth.ConModeSecure)
		case "crc":
			out = append(out, auth.ConModeCRC)
		default:
			return nil, fmt.Errorf("unknown mode %q: want secure or crc", n)
		}
	}
	return out, nil
}

// cephxClient returns the cephx client state for ca, made on first use
// (nil for auth none). resolve has checked the key, so NewClient fails
// only for a key that is not AES, which it reports.
func (ca *clientAuth) cephxClient() (*cephx.Client, error) {
	if !ca.Cephx || ca.cx != nil {
		return ca.cx, nil
	}
	cx, err := cephx.NewClient(cephx.ClientConfig{Name: ca.Name, Key: ca.Key})
	ca.cx = cx
	return cx, err
}

// configureMsgr sets a client messenger's name, auth and modes from ca.
// A cephx key NewClient refuses leaves the messenger with auth cephx
// and no handler, which msgr.New refuses with that config error.
func (ca *clientAuth) configureMsgr(c *msgr.Config) {
	cx, _ := ca.cephxClient()
	c.Name = msg.EntityName{Type: ca.Name.Type, Num: msg.NewID}
	c.AuthID = ca.Name.ID
	c.Auth.Name = ca.Name
	c.Auth.Modes.MonClient = ca.MonModes
	c.Auth.Modes.Client = ca.Modes
	if ca.Cephx {
		c.Auth.Methods = []uint32{auth.MethodCephx}
	}
	if cx != nil {
		c.Auth.ClientFor = func(*msgr.Conn) (auth.Client, error) { return cx.Handler(), nil }
	}
}

// configureMonc sets a mon client's auth from ca.
func (ca *clientAuth) configureMonc(c *monc.Config) error {
	cx, err := ca.cephxClient()
	if err != nil {
		return err
	}
	ca.configureMsgr(&c.Msgr)
	c.Cephx = cx
	return nil
}

// pingTargets returns the addresses ping tries, in order: the one given,
// or the first msgr2 address of each mon of the conf.
func pingTargets(pos []string, ca *clientAuth) ([]string, error) {
	if len(pos) == 1 {
		return pos, nil
	}
	var out []string
	for _, v := range ca.Mons {
		if a, ok := v.Msgr2(); ok {
			a.Type = msg.AddrMsgr2
			out = append(out, a.String())
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the conf names no mon with a msgr2 address")
	}
	return out, nil
}

// pingHuntTimeout bounds one attempt of ping's hunt across a conf's mons.
const pingHuntTimeout = 10 * time.Second

// dialPingAny is dialPingWith on the first of addrs that completes the
// handshake (a hunt across a conf's mons, in the conf's order); with one
// address it is dialPingWith.
func dialPingAny(ctx context.Context, addrs []string, log *slog.Logger, o *msgrOptions) (*pingClient, error) {
	if len(addrs) == 1 {
		return dialPingWith(ctx, addrs[0], log, o)
	}
	var errs []error
	for _, a := range addrs {
		actx, cancel := context.WithTimeout(ctx, pingHuntTimeout)
		pc, err := dialPingWith(actx, a, log, o)
		cancel()
		if err == nil {
			return pc, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("no mon answered: %w", errors.Join(errs...))
}

// mauthLoginConn logs in to the mon at the other end of conn with MAuth
// messages (msgr1's mon login: the connect message carries no authorizer
// for a mon); the MAuthReply messages come on replies.
func mauthLoginConn(ctx context.Context, conn *msgr.Conn, cx *cephx.Client, replies <-chan *msg.Message) error {
	l := cx.MAuthLogin()
	exchange := func(protocol uint32, payload []byte) (*ceph.AuthReply, error) {
		if err := conn.Send((&ceph.Auth{Protocol: protocol, Payload: payload}).Marshal()); err != nil {
			return nil, err
		}
		select {
		case r := <-replies:
			defer r.Done()
			var rep ceph.AuthReply
			if err := rep.Unmarshal(r); err != nil {
				return nil, err
			}
			rep.ResultBL = append([]byte(nil), rep.ResultBL...)
			return &rep, nil
		case <-conn.Done():
			return nil, fmt.Errorf("mon login: connection closed: %v", conn.Err())
		case <-ctx.Done():
			return nil, fmt.Errorf("mon login: %w", ctx.Err())
		}
	}
	rep, err := exchange(cephx.MAuthProtocolNegotiate, l.Hello())
	if err != nil {
		return err
	}
	p, err := l.HandleChallenge(rep.Result, rep.ResultBL)
	if err != nil {
		return fmt.Errorf("mon login: %w", err)
	}
	if rep, err = exchange(cephx.MAuthProtocolCephx, p); err != nil {
		return err
	}
	if _, err := l.HandleDone(rep.Result, rep.GlobalID, rep.ResultBL); err != nil {
		return fmt.Errorf("mon login: %w", err)
	}
	return nil
}
