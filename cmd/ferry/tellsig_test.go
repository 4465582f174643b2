package main

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// descFixture holds signatures as ceph-mon and ceph-osd 16.2.15 describe
// them (get_command_descriptions, abridged).
const descFixture = `{
"cmd000": {"sig": ["mon", "stat"], "help": "summarize monitor status", "module": "mon", "perm": "r", "flags": 0},
"cmd001": {"sig": ["osd", "find", {"name": "id", "type": "CephOsdName"}], "help": "find osd <id>", "module": "osd", "perm": "r", "flags": 0},
"cmd002": {"sig": ["pg", "dump", {"n": "N", "name": "dumpcontents", "req": "false", "strings": "all|summary|sum|delta|pools|osds|pgs|pgs_brief", "type": "CephChoices"}]},
"cmd003": {"sig": ["osd", "pool", "create", {"name": "pool", "type": "CephPoolname"}, {"name": "pg_num", "range": "0", "req": "false", "type": "CephInt"}, {"name": "pgp_num", "range": "0", "req": "false", "type": "CephInt"}, {"name": "pool_type", "req": "false", "strings": "replicated|erasure", "type": "CephChoices"}, {"name": "bulk", "req": "false", "type": "CephBool"}, {"name": "target_size_ratio", "range": "0.0", "req": "false", "type": "CephFloat"}]},
"cmd004": {"sig": ["config", "set", {"name": "who", "type": "CephString"}, {"name": "name", "type": "CephString"}, {"name": "value", "type": "CephString"}, {"name": "force", "req": "false", "type": "CephBool"}]},
"cmd005": {"sig": ["version"], "help": ""},
"cmd006": {"sig": ["osd", "pool", "ls", {"name": "detail", "req": "false", "strings": "detail", "type": "CephChoices"}]}
}`

func TestMatchCommand(t *testing.T) {
	descs, err := parseDescriptions([]byte(descFixture))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words  string
		format string
		want   map[string]any
	}{
		{"mon stat", "json", map[string]any{"prefix": "mon stat", "format": "json"}},
		{"version", "", map[string]any{"prefix": "version"}},
		{"osd find 0", "", map[string]any{"prefix": "osd find", "id": float64(0)}},
		{"osd find osd.3", "", map[string]any{"prefix": "osd find", "id": float64(3)}},
		{"osd find id=2", "", map[string]any{"prefix": "osd find", "id": float64(2)}},
		{"pg dump", "", map[string]any{"prefix": "pg dump"}},
		{"pg dump pools osds", "", map[string]any{"prefix": "pg dump", "dumpcontents": []any{"pools", "osds"}}},
		{"osd pool create p 8 8 replicated", "", map[string]any{"prefix": "osd pool create", "pool": "p", "pg_num": float64(8), "pgp_num": float64(8), "pool_type": "replicated"}},
		{"osd pool create p bulk=true target_size_ratio=0.5", "", map[string]any{"prefix": "osd pool create", "pool": "p", "bulk": true, "target_size_ratio": 0.5}},
		{"osd pool ls detail", "", map[string]any{"prefix": "osd pool ls", "detail": "detail"}},
		{"config set osd.0 debug_ms 1/5", "", map[string]any{"prefix": "config set", "who": "osd.0", "name": "debug_ms", "value": "1/5"}},
	} {
		got, err := matchCommand(descs, strings.Fields(tc.words), tc.format)
		if err != nil {
			t.Errorf("%q: %v", tc.words, err)
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(got), &m); err != nil || !reflect.DeepEqual(m, tc.want) {
			t.Errorf("%q -> %s, want %v", tc.words, got, tc.want)
		}
	}
	for _, tc := range []struct{ words, why string }{
		{"no such command", "no command matches"},
		{"osd find", "missing <id>"},
		{"osd find x", "not an OSD id"},
		{"osd find 0 1", "too many words"},
		{"pg dump everything", "not one of"},
		{"osd pool create p many", "too many words"},
		{"config set osd.0 debug_ms 1 maybe", "too many words"},
	} {
		_, err := matchCommand(descs, strings.Fields(tc.words), "")
		if !errors.Is(err, errNoMatch) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%q: %v, want errNoMatch saying %q", tc.words, err, tc.why)
		}
	}
	if s := descs[3].String(); s != "osd pool create <pool> [<pg_num>] [<pgp_num>] [replicated|erasure] [<bulk>] [<target_size_ratio>]" {
		t.Errorf("signature %q", s)
	}
	if _, err := parseDescriptions([]byte(`{"cmd0": {"sig": [{"type": "CephInt"}]}}`)); err == nil {
		t.Error("argument without a name accepted")
	}
	if _, err := parseDescriptions([]byte(`[`)); err == nil {
		t.Error("bad JSON accepted")
	}
}
