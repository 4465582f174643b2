package cephx

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/ferrymsg/ferry/msg"
)

// maxKeyringSize bounds the keyring text ParseKeyring accepts.
const maxKeyringSize = 16 << 20

// Keyring is a Ceph keyring: entities with their keys and capabilities,
// in file order. A Keyring is not safe for concurrent modification.
type Keyring struct {
	Entries []KeyringEntry // the sections, in file order
}

// KeyringEntry is one section of a keyring.
type KeyringEntry struct {
	Name msg.AuthName // the section's entity ("client.admin")
	Key  Key          // its key (`key = ...`)
	// Caps maps a service name ("mon", "osd", "mgr", "mds") to the
	// capability string for it ("allow *").
	Caps map[string]string
}

// ParseEntityName parses an authentication name as keyrings and the ceph
// tools write it: "TYPE.ID" ("client.admin", "osd.0", "mon." for the
// mons' shared key).
func ParseEntityName(s string) (msg.AuthName, error) {
	ts, id, ok := strings.Cut(s, ".")
	if !ok {
		return msg.AuthName{}, fmt.Errorf("cephx: entity name %q has no '.'", s)
	}
	t, err := msg.ParseEntityType(ts)
	if err != nil || t == msg.EntityAny {
		return msg.AuthName{}, fmt.Errorf("cephx: entity name %q: unknown type %q", s, ts)
	}
	return msg.AuthName{Type: t, ID: id}, nil
}

// LoadKeyring reads and parses a keyring file. It is the package's only
// function that does I/O.
func LoadKeyring(path string) (*Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParseKeyring(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ParseKeyring parses a keyring as Ceph's KeyRing::decode_plaintext
// reads it: INI-like sections named by entity ("[client.admin]"), each
// with `key = BASE64` and `caps SERVICE = "CAPS"` lines. Comments begin
// with '#' or ';' outside quotes; a value may be double-quoted (with
// backslash escapes); spaces and underscores in a field name are
// equivalent; unknown fields (auid, ...) are ignored. A section without a
// key is an error, as in Ceph.
func ParseKeyring(text []byte) (*Keyring, error) {
	if len(text) > maxKeyringSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadKeyring, len(text))
	}
	kr := &Keyring{}
	var cur *KeyringEntry
	hasKey := false
	finish := func(line int) error {
		if cur != nil && !hasKey {
			return fmt.Errorf("%w: line %d: section [%s] has no key", ErrBadKeyring, line, cur.Name)
		}
		return nil
	}
	lines := bytes.Split(text, []byte("\n"))
	for i, raw := range lines {
		ln := i + 1
		s := strings.TrimSpace(strings.TrimSuffix(string(raw), "\r"))
		if s == "" || s[0] == '#' || s[0] == ';' {
			continue
		}
		if s[0] == '[' {
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, fmt.Errorf("%w: line %d: unterminated section header", ErrBadKeyring, ln)
			}
			if rest := strings.TrimSpace(s[end+1:]); rest != "" && rest[0] != '#' && rest[0] != ';' {
				return nil, fmt.Errorf("%w: line %d: text after section header", ErrBadKeyring, ln)
			}
			if err := finish(ln); err != nil {
				return nil, err
			}
			name, err := ParseEntityName(strings.TrimSpace(s[1:end]))
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: %v", ErrBadKeyring, ln, err)
			}
			kr.Entries = append(kr.Entries, KeyringEntry{Name: name, Caps: map[string]string{}})
			cur = &kr.Entries[len(kr.Entries)-1]
			hasKey = false
			continue
		}
		field, value, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("%w: line %d: expected 'name = value'", ErrBadKeyring, ln)
		}
		if cur == nil {
			return nil, fmt.Errorf("%w: line %d: field outside a section", ErrBadKeyring, ln)
		}
		field = normalizeField(field)
		v, err := parseValue(value)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadKeyring, ln, err)
		}
		switch {
		case field == "key":
			k, err := ParseKey(v)
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: %w", ErrBadKeyring, ln, err)
			}
			cur.Key = k
			hasKey = true
		case strings.HasPrefix(field, "caps "):
			svc := strings.TrimSpace(field[len("caps "):])
			if svc == "" {
				return nil, fmt.Errorf("%w: line %d: caps without a service", ErrBadKeyring, ln)
			}
			cur.Caps[svc] = v
		}
	}
	if err := finish(len(lines)); err != nil {
		return nil, err
	}
	return kr, nil
}

// normalizeField lowercases a field name and turns runs of spaces, tabs
// and underscores into one space (Ceph's ConfFile treats them alike).
func normalizeField(f string) string {
	f = strings.Map(func(r rune) rune {
		if r == '_' || r == '\t' {
			return ' '
		}
		return r
	}, strings.ToLower(f))
	return strings.Join(strings.Fields(f), " ")
}

// parseValue returns a field's value: a double-quoted string with
// backslash escapes, or the text up to a comment, trimmed.
func parseValue(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" || v[0] != '"' {
		if i := strings.IndexAny(v, "#;"); i >= 0 {
			v = v[:i]
		}
		return strings.TrimSpace(v), nil
	}
	var sb strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch c {
		case '\\':
			if i+1 >= len(v) {
				return "", fmt.Errorf("backslash at end of value")
			}
			i++
			sb.WriteByte(v[i])
		case '"':
			rest := strings.TrimSpace(v[i+1:])
			if rest != "" && rest[0] != '#' && rest[0] != ';' {
				return "", fmt.Errorf("text after quoted value")
			}
			return sb.String(), nil
		default:
			sb.WriteByte(c)
		}
	}
	return "", fmt.Errorf("unterminated quoted value")
}

// Lookup returns the entry for name.
func (k *Keyring) Lookup(name msg.AuthName) (KeyringEntry, bool) {
	for _, e := range k.Entries {
		if e.Name == name {
			return e, true
		}
	}
	return KeyringEntry{}, false
}

// Add adds an entry, or replaces the entry of the same name.
func (k *Keyring) Add(e KeyringEntry) {
	for i := range k.Entries {
		if k.Entries[i].Name == e.Name {
			k.Entries[i] = e
			return
		}
	}
	k.Entries = append(k.Entries, e)
}

// Marshal returns the keyring text as ceph-authtool writes it
// (KeyRing::encode_plaintext): the sections in Ceph's order of entity
// names (by type number, then id), each with its key and its caps in
// service-name order, quoted.
func (k *Keyring) Marshal() []byte {
	var b bytes.Buffer
	entries := slices.Clone(k.Entries)
	slices.SortStableFunc(entries, func(x, y KeyringEntry) int {
		if x.Name.Type != y.Name.Type {
			return int(x.Name.Type) - int(y.Name.Type)
		}
		return strings.Compare(x.Name.ID, y.Name.ID)
	})
	for _, e := range entries {
		fmt.Fprintf(&b, "[%s]\n\tkey = %s\n", e.Name, e.Key)
		svcs := make([]string, 0, len(e.Caps))
		for s := range e.Caps {
			svcs = append(svcs, s)
		}
		slices.Sort(svcs)
		for _, s := range svcs {
			fmt.Fprintf(&b, "\tcaps %s = \"%s\"\n", s, quoteCaps(e.Caps[s]))
		}
	}
	return b.Bytes()
}

func quoteCaps(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}
