package rpc

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/ferrymsg/ferry/transport"
)

// splitURIs splits a comma-separated address list, dropping empty items.
func splitURIs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// transportRank orders transports from the fastest: in-process, shared
// memory, Unix sockets, then the network.
var transportRank = map[string]int{"inproc": 0, "shm": 1, "unix": 2}

// SelectURI picks, from a rank's URI that lists several addresses, the
// one to dial: the fastest transport in reg (in-process, then shared
// memory, then Unix sockets, then the network) that can reach the peer.
// A shm or unix address counts only if its socket exists on this host
// and something listens on it: that is how a peer on another host, whose
// socket paths are not here, or one whose process died and left its
// socket file, is reached over the network instead. A single address is returned as
// it is.
func SelectURI(reg *transport.Registry, uri string) string {
	list := splitURIs(uri)
	if len(list) <= 1 {
		return strings.TrimSpace(uri)
	}
	best, bestRank := list[0], 1<<30
	for _, u := range list {
		a, err := transport.ParseAddr(u)
		if err != nil {
			continue
		}
		if _, ok := reg.Lookup(a.Scheme); !ok {
			continue
		}
		r, local := transportRank[a.Scheme]
		if !local {
			r = 10
		}
		if !reachableHere(reg, a) {
			continue
		}
		if r < bestRank {
			best, bestRank = u, r
		}
	}
	return best
}

// reachableHere reports whether a can be reached from this host: an
// address of a transport that names a local socket (unix, shm, in either
// of shm's forms) only if that socket exists here.
func reachableHere(reg *transport.Registry, a transport.Addr) bool {
	t, _ := reg.Lookup(a.Scheme)
	ls, ok := t.(transport.LocalSocket)
	if !ok {
		return a.Scheme != "shm" && a.Scheme != "unix" || socketHere(a.Host)
	}
	path, err := ls.SocketPath(a)
	return err == nil && socketHere(path)
}

// socketHere reports whether path names a Unix socket on this host that
// something listens on: a socket file a dead process left (a connect to
// it is refused) does not count, so that its peer is reached another
// way. The probe is one connect, closed at once, which a listener takes
// as a peer that went away before it spoke.
func socketHere(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return false
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		// Refused: nothing listens. Anything else (a full backlog)
		// leaves the socket to the dial.
		return !errors.Is(err, syscall.ECONNREFUSED)
	}
	_ = c.Close()
	return true
}

func (in *Instance) selectURI(uri string) string {
	return SelectURI(in.opts.Transports, uri)
}
