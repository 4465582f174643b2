package rpc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Group is the primary group: its ranks, the URI of each rank's contexts
// (one per tag), and a version that grows with each membership change
// (CaRT's crt_group_t with gp_uri_lookup_cache). All methods are safe for
// concurrent use.
//
// A member is added with the URI of its tag 0; the URIs of its other tags
// are learned by URI-lookup RPCs when first needed and kept here.
type Group struct {
	name string
	inst *Instance

	mu sync.RWMutex
	// version is written under mu and read without it: every request
	// and reply stamps it, and a read lock there was a shared counter
	// that the callers on every P bumped twice per RPC.
	version atomic.Uint32
	self    uint32
	members map[uint32]*member
	// removed remembers the ranks that left, with the URI of their tag
	// 0: a request to one fails with ErrExcluded (not ErrNotFound, as
	// for a rank never known), and a rejoining rank can be re-added.
	removed map[uint32]string
	// excluded is the version of a membership received that left this
	// instance out (0: none).
	excluded uint32

	watch watchers
	// onChange, if set, hears of members added and removed by a new
	// version (the SWIM service keeps its machine's members in step).
	onChange func(added, removed []uint32)
}

type member struct {
	uris  []string // by tag; "" unknown
	state MemberState
	inc   uint64 // the incarnation of the last verdict
}

func (m *member) uri(tag uint16) string {
	if int(tag) < len(m.uris) {
		return m.uris[tag]
	}
	return ""
}

func (m *member) setURI(tag uint16, uri string) {
	if int(tag) >= len(m.uris) {
		m.uris = append(m.uris, make([]string, int(tag)+1-len(m.uris))...)
	}
	m.uris[tag] = uri
}

// Member is a rank and the URI of its tag 0.
type Member struct {
	Rank uint32
	URI  string
}

// ModOp is a membership change (crt_group_mod_op_t).
type ModOp uint8

// Membership changes.
const (
	ModAdd     ModOp = iota // add the members (none may exist)
	ModRemove               // remove the ranks (URIs ignored)
	ModReplace              // make the membership exactly the members (and self)
)

func (o ModOp) String() string {
	switch o {
	case ModAdd:
		return "add"
	case ModRemove:
		return "remove"
	case ModReplace:
		return "replace"
	}
	return "op?"
}

func newGroup(name string, inst *Instance, self uint32, selfURI string) *Group {
	g := &Group{name: name, inst: inst, self: self, members: map[uint32]*member{}, removed: map[uint32]string{}}
	if self != RankNone {
		g.members[self] = &member{uris: []string{selfURI}}
	}
	return g
}

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// Self returns this instance's rank (RankNone for a client).
func (g *Group) Self() uint32 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.self
}

// Version returns the membership version.
func (g *Group) Version() uint32 {
	return g.version.Load()
}

// Size returns the number of members.
func (g *Group) Size() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.members)
}

// Ranks returns the members' ranks in ascending order.
func (g *Group) Ranks() []uint32 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]uint32, 0, len(g.members))
	for r := range g.members {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// Has reports whether rank is a member.
func (g *Group) Has(rank uint32) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	_, ok := g.members[rank]
	return ok
}

// errNotMember and errNoURI are what lookupURI reports: the rank is not a
// member, or the URI of that tag is not known (a URI lookup can find it).
var (
	errNotMember = errors.New("rank not in group")
	errRemoved   = errors.New("rank removed from group")
	errDead      = errors.New("rank known dead")
	errNoURI     = errors.New("URI not known")
)

// URI returns the URI of rank's context tag if it is known.
func (g *Group) URI(rank uint32, tag uint16) (string, error) {
	u, err := g.lookupURI(rank, tag)
	if err != nil {
		return "", fmt.Errorf("%w: rank %d tag %d: %w", ErrNotFound, rank, tag, err)
	}
	return u, nil
}

func (g *Group) lookupURI(rank uint32, tag uint16) (string, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	m, ok := g.members[rank]
	if !ok {
		if _, gone := g.removed[rank]; gone {
			return "", errRemoved
		}
		return "", errNotMember
	}
	if m.state == MemberDead {
		return "", errDead
	}
	if u := m.uri(tag); u != "" {
		return u, nil
	}
	return "", errNoURI
}

// removedURI returns the tag-0 URI a removed rank had.
func (g *Group) removedURI(rank uint32) (string, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	u, ok := g.removed[rank]
	return u, ok && u != ""
}

// setURI records a URI learned by a lookup; it changes no version.
func (g *Group) setURI(rank uint32, tag uint16, uri string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.members[rank]
	if !ok {
		return false
	}
	m.setURI(tag, uri)
	return true
}

// Add adds rank with the URI of its tag 0 and bumps the version (read
// and bumped under the group's lock: concurrent Adds and Removes each
// get their own version).
func (g *Group) Add(rank uint32, uri string) error {
	_, err := g.change(ModAdd, []Member{{Rank: rank, URI: uri}}, nextVersion)
	return err
}

// Remove removes ranks and bumps the version. Requests queued or in flight
// to a removed rank complete with ErrExcluded.
func (g *Group) Remove(ranks ...uint32) error {
	ms := make([]Member, len(ranks))
	for i, r := range ranks {
		ms[i].Rank = r
	}
	_, err := g.change(ModRemove, ms, nextVersion)
	return err
}

// Modify changes the membership (crt_group_primary_modify) and sets the
// version to version, which must be greater than the current one. ModAdd
// fails with ErrExists if a rank is a member; ModRemove ignores ranks that
// are not; ModReplace removes every member not listed and adds or
// updates those listed; a rank listed twice fails with ErrInvalid. This
// instance's own rank cannot be removed or re-addressed. Requests to
// removed ranks complete with ErrExcluded; the contexts forget the
// connections of removed and re-addressed ranks.
//
// Every rank should see the same sequence of versions: Modify changes
// only this instance's view; Propose changes it here and sends it to
// every rank. A stale or repeated version fails with ErrGroupVersion.
// Each member added emits EventJoined and each removed EventLeft to the
// Watch callbacks.
func (g *Group) Modify(op ModOp, ms []Member, version uint32) error {
	if version == nextVersion {
		return fmt.Errorf("%w: group version %d is not above %d", ErrGroupVersion, version, g.Version())
	}
	_, err := g.change(op, ms, version)
	return err
}

// nextVersion asks change for the version one above the current one.
const nextVersion = 0

// change is Modify, returning the version set; version nextVersion
// takes the one above the current version, under the same lock as the
// change.
func (g *Group) change(op ModOp, ms []Member, version uint32) (uint32, error) {
	added, removed, changed, version, err := g.modify(op, ms, version)
	if err != nil {
		return 0, err
	}
	if g.inst != nil && (len(removed) > 0 || len(changed) > 0) {
		g.inst.groupChanged(removed, changed)
	}
	g.changed(added, removed, version)
	return version, nil
}

// changed tells the SWIM service and the watchers of a new version's
// members added and removed.
func (g *Group) changed(added, removed []uint32, version uint32) {
	g.mu.RLock()
	hook := g.onChange
	g.mu.RUnlock()
	if hook != nil && (len(added) > 0 || len(removed) > 0) {
		hook(added, removed)
	}
	var evs []MemberEvent
	for _, r := range added {
		evs = append(evs, MemberEvent{Kind: EventJoined, Rank: r, Version: version})
	}
	for _, r := range removed {
		evs = append(evs, MemberEvent{Kind: EventLeft, Rank: r, Version: version})
	}
	g.watch.emit(evs...)
}

func (g *Group) modify(op ModOp, ms []Member, version uint32) (added, removed, changed []uint32, v uint32, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.version.Load()
	if version == nextVersion {
		version = cur + 1
	}
	if version <= cur {
		return nil, nil, nil, 0, fmt.Errorf("%w: group version %d is not above %d", ErrGroupVersion, version, cur)
	}
	for _, m := range ms {
		if m.Rank == RankNone {
			return nil, nil, nil, 0, fmt.Errorf("%w: rank %d", ErrInvalid, m.Rank)
		}
		if m.Rank == g.self && g.self != RankNone && op != ModReplace {
			return nil, nil, nil, 0, fmt.Errorf("%w: cannot %v this instance's own rank %d", ErrInvalid, op, m.Rank)
		}
		if op != ModRemove && m.URI == "" {
			return nil, nil, nil, 0, fmt.Errorf("%w: rank %d has no URI", ErrInvalid, m.Rank)
		}
	}
	if op != ModRemove {
		if r, dup := duplicateRank(ms); dup {
			return nil, nil, nil, 0, fmt.Errorf("%w: rank %d listed twice", ErrInvalid, r)
		}
	}
	switch op {
	case ModAdd:
		for _, m := range ms {
			if _, ok := g.members[m.Rank]; ok {
				return nil, nil, nil, 0, fmt.Errorf("%w: rank %d", ErrExists, m.Rank)
			}
		}
		for _, m := range ms {
			g.members[m.Rank] = &member{uris: []string{m.URI}}
			delete(g.removed, m.Rank)
			added = append(added, m.Rank)
		}
	case ModRemove:
		for _, m := range ms {
			if old, ok := g.members[m.Rank]; ok {
				g.removed[m.Rank] = old.uri(0)
				delete(g.members, m.Rank)
				removed = append(removed, m.Rank)
			}
		}
	case ModReplace:
		keep := map[uint32]string{}
		for _, m := range ms {
			keep[m.Rank] = m.URI
		}
		for r, old := range g.members {
			if _, ok := keep[r]; !ok && r != g.self {
				g.removed[r] = old.uri(0)
				delete(g.members, r)
				removed = append(removed, r)
			}
		}
		for r, u := range keep {
			if r == g.self {
				continue // our own address is what we listen on
			}
			if old, ok := g.members[r]; ok {
				if old.uri(0) != u {
					g.members[r] = &member{uris: []string{u}}
					changed = append(changed, r)
				}
				continue
			}
			g.members[r] = &member{uris: []string{u}}
			delete(g.removed, r)
			added = append(added, r)
		}
	default:
		return nil, nil, nil, 0, fmt.Errorf("%w: group op %d", ErrInvalid, op)
	}
	slices.Sort(added)
	slices.Sort(removed)
	g.version.Store(version)
	return added, removed, changed, version, nil
}

// duplicateRank reports a rank ms lists more than once.
func duplicateRank(ms []Member) (uint32, bool) {
	seen := make(map[uint32]bool, len(ms))
	for _, m := range ms {
		if seen[m.Rank] {
			return m.Rank, true
		}
		seen[m.Rank] = true
	}
	return 0, false
}

// Members returns the members with the URIs of their tag 0, by rank.
func (g *Group) Members() []Member {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]Member, 0, len(g.members))
	for r, m := range g.members {
		out = append(out, Member{Rank: r, URI: m.uri(0)})
	}
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.Rank < b.Rank:
			return -1
		case a.Rank > b.Rank:
			return 1
		}
		return 0
	})
	return out
}

// Attach files.
//
// An attach file is what crt_group_config_save writes so that other
// processes can join a group: "name NAME", "size N", "all", then one
// "RANK URI" line per member (the URI of its tag 0).

// maxAttachMembers bounds the members an attach file may list.
const maxAttachMembers = 1 << 20

// WriteAttach writes the group's attach file to w.
func (g *Group) WriteAttach(w io.Writer) error {
	ms := g.Members()
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "name %s\nsize %d\nall\n", g.name, len(ms))
	for _, m := range ms {
		if m.URI == "" {
			continue
		}
		fmt.Fprintf(bw, "%d %s\n", m.Rank, m.URI)
	}
	return bw.Flush()
}

// AttachPath returns the attach file's path in dir: NAME.attach_info.
func (g *Group) AttachPath(dir string) string {
	return filepath.Join(dir, g.name+".attach_info")
}

// SaveAttach writes the attach file into dir atomically (a temporary file
// renamed into place) and returns its path.
func (g *Group) SaveAttach(dir string) (string, error) {
	path := g.AttachPath(dir)
	tmp := path + "_tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	if err := g.WriteAttach(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return path, nil
}

// ReadAttachFile parses an attach file: the group name and its members.
func ReadAttachFile(r io.Reader) (name string, ms []Member, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	size := -1
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, v, _ := strings.Cut(s, " ")
		v = strings.TrimSpace(v)
		switch k {
		case "name":
			name = v
		case "size":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > maxAttachMembers {
				return "", nil, fmt.Errorf("%w: attach file line %d: bad size %q", ErrInvalid, line, v)
			}
			size = n
		case "all", "self":
		default:
			rank, err := strconv.ParseUint(k, 10, 32)
			if err != nil || uint32(rank) == RankNone || v == "" || strings.ContainsAny(v, " \t") {
				return "", nil, fmt.Errorf("%w: attach file line %d: %q is not \"RANK URI\"", ErrInvalid, line, s)
			}
			if len(ms) >= maxAttachMembers || (size >= 0 && len(ms) >= size) {
				return "", nil, fmt.Errorf("%w: attach file line %d: more members than its size %d", ErrInvalid, line, size)
			}
			ms = append(ms, Member{Rank: uint32(rank), URI: v})
		}
	}
	if err := sc.Err(); err != nil {
		return "", nil, fmt.Errorf("%w: attach file: %w", ErrInvalid, err)
	}
	if name == "" {
		return "", nil, fmt.Errorf("%w: attach file has no name line", ErrInvalid)
	}
	if r, dup := duplicateRank(ms); dup {
		return "", nil, fmt.Errorf("%w: attach file lists rank %d twice", ErrInvalid, r)
	}
	if err := checkGroupName(name); err != nil {
		return "", nil, fmt.Errorf("%w: attach file: %w", ErrInvalid, err)
	}
	return name, ms, nil
}

// LoadAttach reads the attach file at path and merges its members into
// the group (crt_group_attach): ranks not yet members are added, members
// whose tag-0 URI differs are re-addressed; this instance's own rank is
// left alone. The version is bumped if anything changed. The file's group
// name must be this group's.
func (g *Group) LoadAttach(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return g.ReadAttach(f)
}

// ReadAttach is LoadAttach from a reader.
func (g *Group) ReadAttach(r io.Reader) error {
	name, ms, err := ReadAttachFile(r)
	if err != nil {
		return err
	}
	if name != g.name {
		return fmt.Errorf("%w: attach file is for group %q, not %q", ErrInvalid, name, g.name)
	}
	g.mu.Lock()
	var changed, added []uint32
	dirty := false
	for _, m := range ms {
		if m.Rank == g.self && g.self != RankNone {
			continue
		}
		old, ok := g.members[m.Rank]
		switch {
		case !ok:
			g.members[m.Rank] = &member{uris: []string{m.URI}}
			delete(g.removed, m.Rank)
			added = append(added, m.Rank)
			dirty = true
		case old.uri(0) != m.URI:
			g.members[m.Rank] = &member{uris: []string{m.URI}}
			changed = append(changed, m.Rank)
			dirty = true
		}
	}
	if dirty {
		g.version.Add(1)
	}
	v := g.version.Load()
	g.mu.Unlock()
	if g.inst != nil && len(changed) > 0 {
		g.inst.groupChanged(nil, changed)
	}
	slices.Sort(added)
	g.changed(added, nil, v)
	return nil
}
