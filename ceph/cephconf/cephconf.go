// Package cephconf reads ceph.conf as the Ceph tools read it: sections
// ([global], [client], [client.admin], [mon.a] ...), options whose names
// treat spaces, underscores and dashes alike, values with quotes,
// comments and continuation lines, the metavariables $cluster, $type,
// $id, $name and $host, and the lookup order [TYPE.ID], [TYPE], [global].
// It also parses the mon host list in all its forms (ParseMonHost) and
// gathers what a client needs (File.Client).
//
// A File is immutable after Parse and safe for concurrent use.
package cephconf

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/ferrymsg/ferry/msg"
)

// Bounds on the input.
const (
	// MaxFileSize bounds the bytes Load and Parse read.
	MaxFileSize = 4 << 20
	// MaxMons bounds the mons a mon host list may name.
	MaxMons = 64
)

// Default ports of a mon (CEPH_MON_PORT_IANA and CEPH_MON_PORT_LEGACY).
const (
	MonPortV2 = 3300
	MonPortV1 = 6789
)

// DefaultKeyring is Ceph's default keyring search path (the keyring
// option's default), before metavariable expansion.
const DefaultKeyring = "/etc/ceph/$cluster.$name.keyring,/etc/ceph/$cluster.keyring,/etc/ceph/keyring,/etc/ceph/keyring.bin"

// Errors. Parse errors are *SyntaxError values, which match ErrSyntax.
var (
	// ErrSyntax means a line of the file could not be parsed.
	ErrSyntax = errors.New("cephconf: syntax error")
	// ErrTooLarge means the file exceeds MaxFileSize.
	ErrTooLarge = errors.New("cephconf: file too large")
	// ErrMonHost means a mon host list could not be parsed.
	ErrMonHost = errors.New("cephconf: bad mon host")
	// ErrNoMonHost means neither mon host nor any [mon.X] mon addr is set.
	ErrNoMonHost = errors.New("cephconf: no mon host")
	// ErrBadName means an entity name is not TYPE.ID.
	ErrBadName = errors.New("cephconf: bad entity name")
)

// SyntaxError reports a line that could not be parsed.
type SyntaxError struct {
	Line int    // 1-based
	Msg  string // what is wrong
}

// Error describes the failure.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("cephconf: line %d: %s", e.Line, e.Msg)
}

// Is reports whether target is ErrSyntax.
func (e *SyntaxError) Is(target error) bool { return target == ErrSyntax }

// File is a parsed ceph.conf.
type File struct {
	sections map[string]map[string]string // section -> normalized option -> raw value
	order    []string                     // section names in file order
	// Cluster is the cluster name for $cluster; default "ceph".
	Cluster string
	// Host is the host name for $host; default os.Hostname's short form.
	Host string
}

// Load reads and parses the file at path.
func Load(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse parses a ceph.conf from r (at most MaxFileSize bytes).
func Parse(r io.Reader) (*File, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, ErrTooLarge
	}
	f := &File{sections: map[string]map[string]string{}, Cluster: "ceph"}
	if h, err := os.Hostname(); err == nil {
		f.Host, _, _ = strings.Cut(h, ".")
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxFileSize+1)
	section := ""
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		start := lineNo
		// A backslash at the end continues the line.
		for strings.HasSuffix(line, "\\") && sc.Scan() {
			lineNo++
			line = line[:len(line)-1] + sc.Text()
		}
		line = strings.TrimSpace(strings.TrimPrefix(line, "\ufeff"))
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				return nil, &SyntaxError{start, "section header without ]"}
			}
			if rest := strings.TrimSpace(line[end+1:]); rest != "" && rest[0] != '#' && rest[0] != ';' {
				return nil, &SyntaxError{start, "text after section header"}
			}
			section = strings.TrimSpace(line[1:end])
			if section == "" {
				return nil, &SyntaxError{start, "empty section name"}
			}
			if _, ok := f.sections[section]; !ok {
				f.sections[section] = map[string]string{}
				f.order = append(f.order, section)
			}
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, &SyntaxError{start, fmt.Sprintf("%q is not key = value", line)}
		}
		key = NormalizeKey(key)
		if key == "" {
			return nil, &SyntaxError{start, "empty option name"}
		}
		v, err := parseValue(val)
		if err != nil {
			return nil, &SyntaxError{start, err.Error()}
		}
		if section == "" {
			return nil, &SyntaxError{start, "option outside any section"}
		}
		f.sections[section][key] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return f, nil
}

// NormalizeKey returns an option name in Ceph's canonical form: trimmed,
// with runs of spaces, underscores and dashes as one underscore
// ("mon host", "mon_host" and "mon-host" are the same option).
func NormalizeKey(k string) string {
	var b strings.Builder
	sep := false
	for _, r := range strings.TrimSpace(k) {
		if r == ' ' || r == '\t' || r == '_' || r == '-' {
			sep = true
			continue
		}
		if sep && b.Len() > 0 {
			b.WriteByte('_')
		}
		sep = false
		b.WriteRune(r)
	}
	return b.String()
}

// parseValue trims a value, removes a trailing comment, and unquotes a
// value in double or single quotes (with backslash escapes inside double
// quotes).
func parseValue(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if q := v[0]; q == '"' || q == '\'' {
		var b strings.Builder
		for i := 1; i < len(v); i++ {
			c := v[i]
			switch {
			case c == q:
				rest := strings.TrimSpace(v[i+1:])
				if rest != "" && rest[0] != '#' && rest[0] != ';' {
					return "", fmt.Errorf("text after quoted value")
				}
				return b.String(), nil
			case c == '\\' && q == '"' && i+1 < len(v):
				i++
				b.WriteByte(v[i])
			default:
				b.WriteByte(c)
			}
		}
		return "", fmt.Errorf("unterminated quote")
	}
	if i := strings.IndexAny(v, "#;"); i >= 0 {
		v = strings.TrimSpace(v[:i])
	}
	return v, nil
}

// Sections returns the section names in file order.
func (f *File) Sections() []string { return append([]string(nil), f.order...) }

// Raw returns option's value in section exactly as the file gives it
// (unquoted, without metavariable expansion).
func (f *File) Raw(section, option string) (string, bool) {
	v, ok := f.sections[section][NormalizeKey(option)]
	return v, ok
}

// Lookup returns option for entity (TYPE.ID, e.g. "client.admin"): from
// [TYPE.ID], else [TYPE], else [global], with the metavariables expanded
// for entity. An empty entity looks in [global] only.
func (f *File) Lookup(entity, option string) (string, bool) {
	for _, s := range searchSections(entity) {
		if v, ok := f.Raw(s, option); ok {
			return f.Expand(entity, v), true
		}
	}
	return "", false
}

// Get is Lookup without the found flag.
func (f *File) Get(entity, option string) string {
	v, _ := f.Lookup(entity, option)
	return v
}

func searchSections(entity string) []string {
	if entity == "" {
		return []string{"global"}
	}
	typ, _, _ := strings.Cut(entity, ".")
	if typ == entity {
		return []string{entity, "global"}
	}
	return []string{entity, typ, "global"}
}

// Expand replaces the metavariables $cluster, $type, $id, $name and $host
// (also written ${name}) in v for entity; other $words are left as they
// are.
func (f *File) Expand(entity, v string) string {
	if !strings.Contains(v, "$") {
		return v
	}
	typ, id, _ := strings.Cut(entity, ".")
	vars := map[string]string{
		"cluster": f.Cluster,
		"type":    typ,
		"id":      id,
		"name":    entity,
		"host":    f.Host,
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '$' {
			b.WriteByte(v[i])
			continue
		}
		name, width := "", 0
		if i+1 < len(v) && v[i+1] == '{' {
			if end := strings.IndexByte(v[i:], '}'); end > 0 {
				name, width = v[i+2:i+end], end+1
			}
		} else {
			j := i + 1
			for j < len(v) && (v[j] == '_' || 'a' <= v[j] && v[j] <= 'z' || 'A' <= v[j] && v[j] <= 'Z' || '0' <= v[j] && v[j] <= '9') {
				j++
			}
			name, width = v[i+1:j], j-i
		}
		if val, ok := vars[name]; ok && width > 0 {
			b.WriteString(val)
			i += width - 1
			continue
		}
		b.WriteByte('$')
	}
	return b.String()
}

// MonHost returns the mons the file names for entity: its mon host
// option parsed with ParseMonHost or, if that is unset, the mon addr of
// every [mon.X] section in file order.
func (f *File) MonHost(entity string) ([]msg.AddrVec, error) {
	if s, ok := f.Lookup(entity, "mon host"); ok && strings.TrimSpace(s) != "" {
		return ParseMonHost(s)
	}
	var out []msg.AddrVec
	for _, sec := range f.order {
		if !strings.HasPrefix(sec, "mon.") {
			continue
		}
		v, ok := f.Raw(sec, "mon addr")
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		mons, err := ParseMonHost(v)
		if err != nil {
			return nil, fmt.Errorf("[%s] mon addr: %w", sec, err)
		}
		out = append(out, mons...)
	}
	if len(out) == 0 {
		return nil, ErrNoMonHost
	}
	return out, nil
}

// ParseMonHost parses a mon host list as Ceph does (MonMap::init_with_ips
// and _add_ambiguous_addr): entries separated by commas, semicolons or
// spaces, each an address vector "[v2:IP:PORT,v1:IP:PORT]" or one
// address. An address with a "v1:" or "v2:" prefix is taken as it is,
// with the default port 6789 or 3300 when it has none. Without a prefix:
// port 6789 is msgr1; port 3300 is msgr2; no port gives both
// [v2:IP:3300,v1:IP:6789]; any other port is tried as v2 and then as v1
// on the same port. IPv6 addresses are written in brackets. Each
// returned AddrVec is one mon, v2 first as Ceph lists them; nonces are 0.
// Host names are not resolved: they are an error matching ErrMonHost.
func ParseMonHost(s string) ([]msg.AddrVec, error) {
	items, err := splitMonHost(s)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%w: empty list", ErrMonHost)
	}
	if len(items) > MaxMons {
		return nil, fmt.Errorf("%w: %d mons, at most %d", ErrMonHost, len(items), MaxMons)
	}
	out := make([]msg.AddrVec, 0, len(items))
	for _, it := range items {
		if strings.HasPrefix(it, "[v1:") || strings.HasPrefix(it, "[v2:") || strings.HasPrefix(it, "[any:") {
			var v msg.AddrVec
			for _, p := range strings.Split(it[1:len(it)-1], ",") {
				a, err := parseMonAddr(strings.TrimSpace(p))
				if err != nil {
					return nil, err
				}
				v = append(v, a...)
			}
			if len(v) == 0 {
				return nil, fmt.Errorf("%w: empty address vector %q", ErrMonHost, it)
			}
			out = append(out, v)
			continue
		}
		v, err := parseMonAddr(it)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// splitMonHost splits a mon host list at commas, semicolons and blanks
// outside brackets.
func splitMonHost(s string) ([]string, error) {
	var items []string
	depth, start := 0, -1
	flush := func(end int) {
		if start >= 0 {
			items = append(items, s[start:end])
			start = -1
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '[':
			depth++
		case c == ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("%w: unbalanced ] in %q", ErrMonHost, s)
			}
		case depth == 0 && (c == ',' || c == ';' || c == ' ' || c == '\t'):
			flush(i)
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%w: unbalanced [ in %q", ErrMonHost, s)
	}
	flush(len(s))
	return items, nil
}

// parseMonAddr parses one address of a mon host list; an address without
// a prefix may stand for two (see ParseMonHost).
func parseMonAddr(s string) (msg.AddrVec, error) {
	typ := msg.AddrAny
	switch {
	case strings.HasPrefix(s, "v1:"):
		typ, s = msg.AddrLegacy, s[3:]
	case strings.HasPrefix(s, "v2:"):
		typ, s = msg.AddrMsgr2, s[3:]
	case strings.HasPrefix(s, "any:"):
		s = s[4:]
	}
	var nonce uint32
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		n, err := strconv.ParseUint(s[i+1:], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: nonce in %q", ErrMonHost, s)
		}
		nonce, s = uint32(n), s[:i]
	}
	ip, port, err := splitHostPort(s)
	if err != nil {
		return nil, err
	}
	mk := func(t msg.AddrType, p uint16) msg.EntityAddr {
		return msg.EntityAddr{Type: t, Nonce: nonce, IP: netip.AddrPortFrom(ip, p)}
	}
	switch {
	case typ == msg.AddrLegacy:
		return msg.AddrVec{mk(typ, cmpPort(port, MonPortV1))}, nil
	case typ == msg.AddrMsgr2:
		return msg.AddrVec{mk(typ, cmpPort(port, MonPortV2))}, nil
	case port == 0:
		return msg.AddrVec{mk(msg.AddrMsgr2, MonPortV2), mk(msg.AddrLegacy, MonPortV1)}, nil
	case port == MonPortV1:
		return msg.AddrVec{mk(msg.AddrLegacy, port)}, nil
	case port == MonPortV2:
		return msg.AddrVec{mk(msg.AddrMsgr2, port)}, nil
	default:
		return msg.AddrVec{mk(msg.AddrMsgr2, port), mk(msg.AddrLegacy, port)}, nil
	}
}

func cmpPort(p, def uint16) uint16 {
	if p == 0 {
		return def
	}
	return p
}

// splitHostPort parses "IP", "IP:PORT", "[IPv6]" or "[IPv6]:PORT"; port 0
// means none was given.
func splitHostPort(s string) (netip.Addr, uint16, error) {
	if s == "" {
		return netip.Addr{}, 0, fmt.Errorf("%w: empty address", ErrMonHost)
	}
	host, portStr := s, ""
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, 0, fmt.Errorf("%w: %q", ErrMonHost, s)
		}
		host = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return netip.Addr{}, 0, fmt.Errorf("%w: %q", ErrMonHost, s)
			}
			portStr = rest[1:]
		}
	} else if strings.Count(s, ":") == 1 {
		host, portStr, _ = strings.Cut(s, ":")
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("%w: %q is not an IP address (host names are not resolved)", ErrMonHost, host)
	}
	var port uint16
	if portStr != "" {
		p, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || p == 0 {
			return netip.Addr{}, 0, fmt.Errorf("%w: port %q", ErrMonHost, portStr)
		}
		port = uint16(p)
	}
	return ip.Unmap(), port, nil
}

// Client is what a client entity needs from ceph.conf.
type Client struct {
	// Name is the entity, "client.admin".
	Name string
	// MonHost lists the mons (see File.MonHost); nil if the file names
	// none.
	MonHost []msg.AddrVec
	// Keyrings are the keyring files to try, in order: the keyring
	// option split at commas, expanded; DefaultKeyring's files if unset.
	Keyrings []string
	// Key is the key option (a base64 key given in the file), KeyFile
	// the keyfile option (a file holding one); either may be empty.
	Key, KeyFile string
	// AuthRequired is auth_client_required split into method names
	// ("cephx", "none"); nil if unset.
	AuthRequired []string
	// MonMode and Mode are ms_mon_client_mode (towards mons and mgrs)
	// and ms_client_mode (towards OSDs and MDSs), split into mode names
	// ("secure", "crc") in order of preference; nil if unset.
	MonMode, Mode []string
}

// Client returns the settings for the client entity name (TYPE.ID,
// "client.admin"). A missing mon host is not an error here (MonHost is
// nil); a malformed one is.
func (f *File) Client(name string) (*Client, error) {
	typ, id, ok := strings.Cut(name, ".")
	if !ok || typ == "" || id == "" {
		return nil, fmt.Errorf("%w: %q is not TYPE.ID", ErrBadName, name)
	}
	c := &Client{Name: name}
	mons, err := f.MonHost(name)
	if err != nil && !errors.Is(err, ErrNoMonHost) {
		return nil, err
	}
	c.MonHost = mons
	kr, ok := f.Lookup(name, "keyring")
	if !ok {
		kr = f.Expand(name, DefaultKeyring)
	}
	c.Keyrings = splitList(kr, ",;")
	c.Key = f.Get(name, "key")
	c.KeyFile = f.Get(name, "keyfile")
	c.AuthRequired = splitList(f.Get(name, "auth client required"), ", ;\t")
	c.MonMode = splitList(f.Get(name, "ms mon client mode"), ", ;\t")
	c.Mode = splitList(f.Get(name, "ms client mode"), ", ;\t")
	return c, nil
}

// splitList splits s at any of seps and drops empty items; nil if none
// is left.
func splitList(s, seps string) []string {
	out := strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(seps, r) })
	if len(out) == 0 {
		return nil
	}
	return out
}
