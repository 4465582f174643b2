package transport

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ParseAddr parses a transport address. It accepts:
//
//   - URIs: "tcp://HOST:PORT" (optionally ending in "/NONCE"),
//     "unix:///path/to/socket", "shm://name", "inproc://name", and
//     "scheme://anything" for the scheme of another transport;
//   - Ceph's address form "v2:IP:PORT/NONCE", "v1:IP:PORT/NONCE" and
//     "any:IP:PORT/NONCE", with "[IPv6]" literals and an optional nonce,
//     all of which map to scheme "tcp" (the Ceph type is not kept; the
//     messenger knows which protocol it speaks);
//   - a bare "IP:PORT", "[IPv6]:PORT" or "name:PORT", also "tcp".
//
// A tcp port is a decimal number from 0 to 65535 and is required; an empty
// host (":3300") means every local address when listening. Ceph's form
// requires an IP literal, as Ceph does. Schemes are case-insensitive and
// returned in lower case. An inproc name may be empty, which asks the
// listener to choose one.
//
// Errors are *AddrError values wrapping ErrBadAddr, or ErrUnknownScheme for
// a Ceph-style type prefix other than v1, v2 and any ("cidr:…", "v3:…").
func ParseAddr(s string) (Addr, error) {
	if s == "" {
		return Addr{}, badAddr(s, "empty")
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return Addr{}, badAddr(s, "contains a space or control character")
		}
	}
	if i := strings.Index(s, "://"); i >= 0 {
		return parseURI(s, s[:i], s[i+3:])
	}
	if s[0] == '[' {
		return parseTCP(s, s, false)
	}
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return Addr{}, badAddr(s, "missing port")
	}
	prefix, rest := s[:i], s[i+1:]
	switch prefix {
	case "v1", "v2", "any":
		return parseTCP(s, rest, true)
	}
	if !strings.Contains(rest, ":") {
		return parseTCP(s, s, false)
	}
	// More than one colon and no brackets: either an IPv6 literal
	// without brackets or a type prefix we do not know.
	if _, err := netip.ParseAddr(s); err == nil {
		return Addr{}, badAddr(s, "an IPv6 address needs brackets and a port: [IP]:PORT")
	}
	if isScheme(prefix) {
		return Addr{}, &AddrError{Input: s, Reason: "address type " + strconv.Quote(prefix), Err: ErrUnknownScheme}
	}
	return Addr{}, badAddr(s, "too many colons")
}

func badAddr(s, reason string) error {
	return &AddrError{Input: s, Reason: reason, Err: ErrBadAddr}
}

// isScheme reports whether s is an RFC 3986 scheme: a letter followed by
// letters, digits, '+', '-' or '.'.
func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20 // lower-case letters; digits and +-. unchanged
		switch {
		case c >= 'a' && c <= 'z':
		case i > 0 && (s[i] >= '0' && s[i] <= '9' || s[i] == '+' || s[i] == '-' || s[i] == '.'):
		default:
			return false
		}
	}
	return true
}

func parseURI(s, scheme, rest string) (Addr, error) {
	if !isScheme(scheme) {
		return Addr{}, badAddr(s, "bad scheme")
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "tcp":
		return parseTCP(s, rest, false)
	case "unix":
		if rest == "" {
			return Addr{}, badAddr(s, "missing socket path")
		}
		return Addr{Scheme: scheme, Host: rest}, nil
	case "shm":
		if rest == "" {
			return Addr{}, badAddr(s, "missing name")
		}
	}
	return Addr{Scheme: scheme, Host: rest}, nil
}

// parseTCP parses "HOST:PORT" with an optional "/NONCE". If ceph is set,
// HOST must be an IP literal.
func parseTCP(s, hp string, ceph bool) (Addr, error) {
	a := Addr{Scheme: "tcp"}
	if i := strings.IndexByte(hp, '/'); i >= 0 {
		n, err := strconv.ParseUint(hp[i+1:], 10, 32)
		if err != nil {
			return Addr{}, badAddr(s, "bad nonce")
		}
		a.Nonce, hp = uint32(n), hp[:i]
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return Addr{}, badAddr(s, "want HOST:PORT")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return Addr{}, badAddr(s, "bad port")
	}
	bracketed := strings.HasPrefix(hp, "[")
	switch {
	case bracketed:
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() {
			return Addr{}, badAddr(s, "bad IPv6 address")
		}
	case ceph:
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is4() {
			return Addr{}, badAddr(s, "want an IP address")
		}
	case !isHostName(host):
		return Addr{}, badAddr(s, "bad host name")
	}
	a.Host = net.JoinHostPort(host, strconv.FormatUint(p, 10))
	return a, nil
}

// isHostName reports whether s is empty, an IPv4 address or a DNS name
// (letters, digits, '-', '_' and dots).
func isHostName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
