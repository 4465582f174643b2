package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ferrymsg/ferry/auth"
	"github.com/ferrymsg/ferry/auth/cephx"
	"github.com/ferrymsg/ferry/internal/cephtest"
)

func TestBuildCommand(t *testing.T) {
	for _, tc := range []struct {
		words  []string
		format string
		want   map[string]any
	}{
		{[]string{"version"}, "", map[string]any{"prefix": "version"}},
		{[]string{"mon", "stat"}, "json", map[string]any{"prefix": "mon stat", "format": "json"}},
		{[]string{"osd", "find", "id=0"}, "", map[string]any{"prefix": "osd find", "id": float64(0)}},
		{[]string{"config", "set", "key=debug_ms", "value=1/5", "force=true"}, "", map[string]any{"prefix": "config set", "key": "debug_ms", "value": "1/5", "force": true}},
		{[]string{`{"prefix":"osd find","id":3}`}, "json", map[string]any{"prefix": "osd find", "id": float64(3), "format": "json"}},
	} {
		got, err := buildCommand(tc.words, tc.format)
		if err != nil {
			t.Errorf("%v: %v", tc.words, err)
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(got), &m); err != nil || !reflect.DeepEqual(m, tc.want) {
			t.Errorf("%v -> %s, want %v", tc.words, got, tc.want)
		}
	}
	for _, bad := range [][]string{{"id=0"}, {"osd", "id=0", "find"}, {"=x"}, {"prefix=x"}, {`{"id":1}`}, {`{bad`}} {
		if got, err := buildCommand(bad, ""); err == nil {
			t.Errorf("%v -> %s, want an error", bad, got)
		}
	}
}

func TestParseModes(t *testing.T) {
	got, err := parseModes("secure,crc")
	if err != nil || !reflect.DeepEqual(got, []uint32{auth.ConModeSecure, auth.ConModeCRC}) {
		t.Fatalf("secure,crc -> %v, %v", got, err)
	}
	if got, _ := parseModes(""); got != nil {
		t.Fatalf("empty -> %v", got)
	}
	if _, err := parseModes("secure,fast"); err == nil {
		t.Fatal("unknown mode accepted")
	}
}

// TestAuthFlagsResolve: where the key, the method, the modes and the mons
// come from.
func TestAuthFlagsResolve(t *testing.T) {
	dir := t.TempDir()
	key, _ := cephtest.NewKey()
	kr := filepath.Join(dir, "ceph.client.admin.keyring")
	os.WriteFile(kr, []byte(cephtest.KeyringEntry("client.admin", key)), 0o600)
	conf := filepath.Join(dir, "ceph.conf")
	os.WriteFile(conf, []byte(`[global]
mon host = [v2:127.0.0.1:3300,v1:127.0.0.1:6789],127.0.0.2
auth client required = cephx
ms mon client mode = secure
ms client mode = crc secure
[client]
keyring = `+dir+`/$cluster.$name.keyring
`), 0o600)
	resolve := func(args ...string) (*clientAuth, error) {
		fs := newFlagSet(&env{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}, "tell")
		af := addAuthFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return af.resolve()
	}
	want, _ := cephx.ParseKey(key)

	ca, err := resolve("-c", conf)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cephx || !ca.Key.Equal(want) || ca.KeyringPath != kr || len(ca.Mons) != 2 ||
		!reflect.DeepEqual(ca.MonModes, []uint32{auth.ConModeSecure}) || !reflect.DeepEqual(ca.Modes, []uint32{auth.ConModeCRC, auth.ConModeSecure}) {
		t.Fatalf("from the conf: %+v", ca)
	}
	// --mode overrides the conf for every peer type.
	if ca, err = resolve("-c", conf, "--mode", "crc"); err != nil || !reflect.DeepEqual(ca.MonModes, []uint32{auth.ConModeCRC}) || !reflect.DeepEqual(ca.Modes, ca.MonModes) {
		t.Fatalf("--mode crc: %+v, %v", ca, err)
	}
	// --keyring alone implies cephx.
	if ca, err = resolve("--keyring", kr); err != nil || !ca.Cephx || !ca.Key.Equal(want) || ca.Mons != nil {
		t.Fatalf("--keyring: %+v, %v", ca, err)
	}
	// Nothing: auth none.
	if ca, err = resolve(); err != nil || ca.Cephx || ca.Name.String() != "client.admin" {
		t.Fatalf("no flags: %+v, %v", ca, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--keyring", kr, "--auth", "none"}, "implies --auth cephx"},
		{[]string{"--auth", "cephx"}, "needs a key"},
		{[]string{"--auth", "kerberos"}, "want cephx or none"},
		{[]string{"--keyring", kr, "--name", "client.other"}, "holds no key for client.other"},
		{[]string{"--keyring", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"--name", "admin"}, "not TYPE.ID"},
		{[]string{"--mode", "fast"}, "unknown mode"},
		{[]string{"-c", filepath.Join(dir, "missing.conf")}, "no such file"},
		{[]string{"-c", conf, "--name", "client.nokey"}, "no keyring for client.nokey"},
	} {
		if _, err := resolve(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
