package cephx

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

// A keyring as ceph-authtool writes it, with the comments and spacing
// variants Ceph's parser accepts.
const sampleKeyring = `# written by hand
[client.admin]
	key = AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==
	caps mon = "allow *"
	caps osd = "allow rw pool=\"a b\""  ; trailing comment
	auid = 0
[mon.]
key=AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ== # unquoted, comment
caps_mon = allow *

[osd.0]
	key = AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==
`

func TestParseKeyring(t *testing.T) {
	kr, err := ParseKeyring([]byte(sampleKeyring))
	if err != nil {
		t.Fatal(err)
	}
	if len(kr.Entries) != 3 {
		t.Fatalf("%d entries", len(kr.Entries))
	}
	admin, ok := kr.Lookup(msg.AuthName{Type: msg.EntityClient, ID: "admin"})
	if !ok {
		t.Fatal("no client.admin")
	}
	want := map[string]string{"mon": "allow *", "osd": `allow rw pool="a b"`}
	if !reflect.DeepEqual(admin.Caps, want) {
		t.Fatalf("caps %q", admin.Caps)
	}
	if admin.Key.String() != "AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==" {
		t.Fatalf("key %s", admin.Key)
	}
	mon, ok := kr.Lookup(msg.AuthName{Type: msg.EntityMon, ID: ""})
	if !ok || mon.Caps["mon"] != "allow *" {
		t.Fatalf("mon.: %+v %v", mon, ok)
	}
	// The writer's output parses back to the same keyring.
	again, err := ParseKeyring(kr.Marshal())
	if err != nil {
		t.Fatalf("%v\n%s", err, kr.Marshal())
	}
	if !reflect.DeepEqual(again.Marshal(), kr.Marshal()) || len(again.Entries) != 3 {
		t.Fatalf("round trip:\n%s", kr.Marshal())
	}
	if e, _ := again.Lookup(admin.Name); !reflect.DeepEqual(e, admin) {
		t.Fatalf("client.admin: %+v", e)
	}
	// Sections come out in Ceph's order: mon., osd.0, client.admin.
	if got := string(kr.Marshal()); !strings.HasPrefix(got, "[mon.]\n") || strings.Index(got, "[osd.0]") > strings.Index(got, "[client.admin]") {
		t.Fatalf("order:\n%s", got)
	}
	const wantText = "[client.admin]\n\tkey = AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==\n\tcaps mon = \"allow *\"\n\tcaps osd = \"allow rw pool=\\\"a b\\\"\"\n"
	if got := string(kr.Marshal()); !strings.Contains(got, wantText) {
		t.Fatalf("marshal:\n%s", got)
	}
}

func TestParseKeyringErrors(t *testing.T) {
	for _, bad := range []string{
		"[client.admin]\n", // no key
		"key = AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==\n", // outside a section
		"[client.admin\nkey = x\n",                         // unterminated header
		"[nobody]\n",                                       // bad entity name
		"[client.a]\nkey = notbase64!\n",                   // bad key
		"[client.a]\nkey = AAAA\n",                         // short key
		"[client.a]\njust text\n",                          // no '='
		"[client.a]\nkey = AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==\ncaps mon = \"open\n",
	} {
		if _, err := ParseKeyring([]byte(bad)); !errors.Is(err, ErrBadKeyring) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestLoadKeyring(t *testing.T) {
	p := filepath.Join(t.TempDir(), "k")
	if err := os.WriteFile(p, []byte(sampleKeyring), 0o600); err != nil {
		t.Fatal(err)
	}
	kr, err := LoadKeyring(p)
	if err != nil || len(kr.Entries) != 3 {
		t.Fatalf("%v", err)
	}
	if _, err := LoadKeyring(p + "x"); err == nil {
		t.Fatal("missing file")
	}
}

func TestParseKeyErrors(t *testing.T) {
	k := keyFrom(1)
	k.Type = 7
	for _, s := range []string{"", "!!", "AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ", k.String(), "AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQAA"} {
		if _, err := ParseKey(s); !errors.Is(err, ErrBadKeyEncoding) {
			t.Errorf("%q: %v", s, err)
		}
	}
}
