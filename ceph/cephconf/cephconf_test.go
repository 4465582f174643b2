package cephconf

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ferrymsg/ferry/msg"
)

const sample = `# a ceph.conf in the style of the tools
[global]
fsid = 21ccba25-a6c7-41d0-a04d-8d83e4e702e3
mon host = [v2:127.0.0.1:43300,v1:127.0.0.1:46789]  ; the one mon
auth_client_required = cephx
ms-mon-client-mode = secure crc
ms client mode = crc secure
log file = /var/log/ceph/$cluster-$name.log
quoted = "a # not a comment \" here"   # but this is
single = 'x;y'
long = one \
two

[client]
keyring = /tmp/t/$cluster.$name.keyring
ms client mode = secure

[client.admin]
key = AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==

[mon.a]
mon addr = 10.0.0.1
`

func parse(t *testing.T, s string) *File {
	t.Helper()
	f, err := Parse(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestParseAndLookup(t *testing.T) {
	f := parse(t, sample)
	if got := f.Sections(); !reflect.DeepEqual(got, []string{"global", "client", "client.admin", "mon.a"}) {
		t.Fatalf("sections %v", got)
	}
	for _, tc := range []struct{ entity, option, want string }{
		{"client.admin", "fsid", "21ccba25-a6c7-41d0-a04d-8d83e4e702e3"},
		{"client.admin", "mon_host", "[v2:127.0.0.1:43300,v1:127.0.0.1:46789]"},
		{"client.admin", "ms_client_mode", "secure"}, // [client] over [global]
		{"osd.0", "ms client mode", "crc secure"},    // [global]
		{"client.admin", "keyring", "/tmp/t/ceph.client.admin.keyring"},
		{"client.foo", "log-file", "/var/log/ceph/ceph-client.foo.log"},
		{"client.admin", "quoted", `a # not a comment " here`},
		{"client.admin", "single", "x;y"},
		{"client.admin", "long", "one two"},
		{"client.admin", "key", "AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ=="},
		{"", "auth client required", "cephx"},
	} {
		got, ok := f.Lookup(tc.entity, tc.option)
		if !ok || got != tc.want {
			t.Errorf("Lookup(%q, %q) = %q, %v; want %q", tc.entity, tc.option, got, ok, tc.want)
		}
	}
	if _, ok := f.Lookup("client.foo", "key"); ok {
		t.Error("client.admin's key found for client.foo")
	}
	if v, _ := f.Raw("global", "log file"); v != "/var/log/ceph/$cluster-$name.log" {
		t.Errorf("Raw = %q", v)
	}
}

func TestExpand(t *testing.T) {
	f := parse(t, "[global]\n")
	f.Cluster, f.Host = "prod", "node1"
	for in, want := range map[string]string{
		"$cluster.$name.keyring":   "prod.osd.3.keyring",
		"${type}-${id}@$host":      "osd-3@node1",
		"$unknown and $":           "$unknown and $",
		"/run/$cluster-$name.asok": "/run/prod-osd.3.asok",
	} {
		if got := f.Expand("osd.3", in); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNormalizeKey(t *testing.T) {
	for _, k := range []string{"mon host", "mon_host", "mon-host", "  mon   host ", "mon__host"} {
		if got := NormalizeKey(k); got != "mon_host" {
			t.Errorf("NormalizeKey(%q) = %q", k, got)
		}
	}
}

func av(t *testing.T, ss ...string) msg.AddrVec {
	t.Helper()
	var v msg.AddrVec
	for _, s := range ss {
		a, err := msg.ParseEntityAddr(s)
		if err != nil {
			t.Fatal(err)
		}
		v = append(v, a)
	}
	return v
}

func TestParseMonHost(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []msg.AddrVec
	}{
		{"[v2:127.0.0.1:43300,v1:127.0.0.1:46789]", []msg.AddrVec{av(t, "v2:127.0.0.1:43300/0", "v1:127.0.0.1:46789/0")}},
		{"10.0.0.1,10.0.0.2:6789", []msg.AddrVec{
			av(t, "v2:10.0.0.1:3300/0", "v1:10.0.0.1:6789/0"),
			av(t, "v1:10.0.0.2:6789/0")}},
		{"10.0.0.1:3300; 10.0.0.2:7000", []msg.AddrVec{
			av(t, "v2:10.0.0.1:3300/0"),
			av(t, "v2:10.0.0.2:7000/0", "v1:10.0.0.2:7000/0")}},
		{"v1:10.0.0.1 v2:10.0.0.2", []msg.AddrVec{av(t, "v1:10.0.0.1:6789/0"), av(t, "v2:10.0.0.2:3300/0")}},
		{"v2:127.0.0.1:40000/0", []msg.AddrVec{av(t, "v2:127.0.0.1:40000/0")}},
		{"[v2:[::1]:3300,v1:[::1]:6789],[::1]:7000", []msg.AddrVec{
			av(t, "v2:[::1]:3300/0", "v1:[::1]:6789/0"),
			av(t, "v2:[::1]:7000/0", "v1:[::1]:7000/0")}},
		{"[fe80::1]", []msg.AddrVec{av(t, "v2:[fe80::1]:3300/0", "v1:[fe80::1]:6789/0")}},
		{" [v2:1.2.3.4:1, v1:1.2.3.4:2] , 5.6.7.8:9 ", []msg.AddrVec{
			av(t, "v2:1.2.3.4:1/0", "v1:1.2.3.4:2/0"),
			av(t, "v2:5.6.7.8:9/0", "v1:5.6.7.8:9/0")}},
	} {
		got, err := ParseMonHost(tc.in)
		if err != nil {
			t.Errorf("ParseMonHost(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseMonHost(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", " , ", "[v2:1.2.3.4:1", "1.2.3.4]", "mon.example.com", "1.2.3.4:0", "1.2.3.4:99999",
		"v2:1.2.3.4:x", "[v2:]", "[::1", "[::1]x", "1.2.3.4/x", strings.Repeat("1.2.3.4,", MaxMons+1)} {
		if got, err := ParseMonHost(bad); !errors.Is(err, ErrMonHost) {
			t.Errorf("ParseMonHost(%q) = %v, %v; want ErrMonHost", bad, got, err)
		}
	}
}

func TestClient(t *testing.T) {
	f := parse(t, sample)
	c, err := f.Client("client.admin")
	if err != nil {
		t.Fatal(err)
	}
	want := &Client{
		Name:         "client.admin",
		MonHost:      []msg.AddrVec{av(t, "v2:127.0.0.1:43300/0", "v1:127.0.0.1:46789/0")},
		Keyrings:     []string{"/tmp/t/ceph.client.admin.keyring"},
		Key:          "AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ==",
		AuthRequired: []string{"cephx"},
		MonMode:      []string{"secure", "crc"},
		Mode:         []string{"secure"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Client =\n%+v\nwant\n%+v", c, want)
	}

	// Without mon host, the [mon.X] sections' mon addr; without keyring,
	// Ceph's default search path.
	f = parse(t, "[mon.a]\nmon addr = 10.0.0.1:6789\n[mon.b]\nmon_addr = [v2:10.0.0.2:3300,v1:10.0.0.2:6789]\n")
	c, err = f.Client("client.x")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.MonHost, []msg.AddrVec{av(t, "v1:10.0.0.1:6789/0"), av(t, "v2:10.0.0.2:3300/0", "v1:10.0.0.2:6789/0")}) {
		t.Errorf("MonHost from mon addr = %v", c.MonHost)
	}
	if len(c.Keyrings) != 4 || c.Keyrings[0] != "/etc/ceph/ceph.client.x.keyring" {
		t.Errorf("default keyrings %v", c.Keyrings)
	}
	if c.AuthRequired != nil || c.MonMode != nil {
		t.Errorf("unset options: %+v", c)
	}

	// No mons at all is not an error for Client, but is for MonHost.
	f = parse(t, "[global]\n")
	if c, err := f.Client("client.admin"); err != nil || c.MonHost != nil {
		t.Errorf("Client without mons: %+v, %v", c, err)
	}
	if _, err := f.MonHost("client.admin"); !errors.Is(err, ErrNoMonHost) {
		t.Errorf("MonHost: %v", err)
	}
	if _, err := parse(t, "[global]\nmon host = nowhere\n").Client("client.admin"); !errors.Is(err, ErrMonHost) {
		t.Errorf("bad mon host: %v", err)
	}
	for _, bad := range []string{"admin", "client.", ".x", ""} {
		if _, err := f.Client(bad); !errors.Is(err, ErrBadName) {
			t.Errorf("Client(%q): %v", bad, err)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		line int
	}{
		{"[global\nx = 1\n", 1},
		{"[global]\nnot an option\n", 2},
		{"x = 1\n", 1},
		{"[global]\n = 1\n", 2},
		{"[]\n", 1},
		{"[global] junk\n", 1},
		{"[global]\n\n# c\nx = \"open\n", 4},
		{"[global]\nx = \"a\" b\n", 2},
	} {
		_, err := Parse(strings.NewReader(tc.in))
		var se *SyntaxError
		if !errors.Is(err, ErrSyntax) || !errors.As(err, &se) || se.Line != tc.line {
			t.Errorf("Parse(%q) = %v, want a SyntaxError on line %d", tc.in, err, tc.line)
		}
	}
	big := strings.Repeat("#", MaxFileSize+1)
	if _, err := Parse(strings.NewReader(big)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("huge file: %v", err)
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ceph.conf")
	if err := os.WriteFile(p, []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if f.Get("client.admin", "auth client required") != "cephx" {
		t.Fatal("Load lost options")
	}
	if _, err := Load(p + ".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// FuzzParse parses arbitrary files and mon host lists: no panics, and
// whatever parses gives consistent lookups.
func FuzzParse(f *testing.F) {
	f.Add(sample, "[v2:127.0.0.1:3300,v1:127.0.0.1:6789]")
	f.Add("[global]\nmon host = 1.2.3.4\n", "[::1]:7000,1.2.3.4")
	f.Fuzz(func(t *testing.T, conf, monHost string) {
		if file, err := Parse(strings.NewReader(conf)); err == nil {
			for _, s := range file.Sections() {
				if _, ok := file.sections[s]; !ok {
					t.Fatalf("section %q listed but missing", s)
				}
			}
			_, _ = file.Client("client.admin")
			_ = file.Expand("client.admin", conf)
		}
		mons, err := ParseMonHost(monHost)
		if err != nil {
			return
		}
		if len(mons) == 0 || len(mons) > MaxMons {
			t.Fatalf("%d mons from %q", len(mons), monHost)
		}
		for _, v := range mons {
			if len(v) == 0 {
				t.Fatalf("empty addrvec from %q", monHost)
			}
			for _, a := range v {
				if a.IsZero() || a.IP.Port() == 0 || (a.Type != msg.AddrMsgr2 && a.Type != msg.AddrLegacy && a.Type != msg.AddrAny) {
					t.Fatalf("bad address %v from %q", a, monHost)
				}
			}
		}
	})
}
