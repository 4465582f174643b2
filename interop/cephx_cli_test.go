package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/internal/cephtest"
)

// writeCephxConf writes a ceph.conf for the ceph CLI: mon host, cephx
// with the keyring given, and the client's mode towards mons.
func writeCephxConf(t *testing.T, monHost, keyring, mode string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ceph.conf")
	conf := fmt.Sprintf(`[global]
mon host = %s
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
ms mon client mode = %s

[client]
keyring = %s
log file =
admin socket =
`, monHost, mode, keyring)
	if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeKeyring writes a keyring for client.admin with a fresh key and mon
// caps, and returns its path.
func writeKeyring(t *testing.T) string {
	t.Helper()
	key, err := cephtest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(p, []byte(cephtest.KeyringEntry("client.admin", key, [2]string{"mon", "allow *"})), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCephCLIPingsFerryCephx: the stock ceph CLI with a cephx keyring runs
// `ceph ping mon.a` against `ferry serve --auth cephx` in secure and in
// crc mode; a CLI asking for the other mode, or with a wrong key, is
// refused.
func TestCephCLIPingsFerryCephx(t *testing.T) {
	cephtest.RequireCLI(t)
	bin := buildFerry(t)
	keyring := writeKeyring(t)
	wrong := writeKeyring(t)
	for _, mode := range []string{"secure", "crc"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			addr := strings.TrimSuffix(startServe(t, bin, "--auth", "cephx", "--keyring", keyring, "--mode", mode), "/0")
			other := map[string]string{"secure": "crc", "crc": "secure"}[mode]
			t.Run("ping", func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				out, err := cephtest.CLI(ctx, writeCephxConf(t, addr, keyring, mode), "ping", "mon.a")
				if err != nil {
					t.Fatal(err)
				}
				var status struct {
					MonStatus struct {
						Name  string `json:"name"`
						Ferry bool   `json:"ferry"`
					} `json:"mon_status"`
				}
				if err := json.Unmarshal(out, &status); err != nil || !status.MonStatus.Ferry || status.MonStatus.Name != "a" {
					t.Fatalf("ceph ping mon.a: %s (%v)", out, err)
				}
			})
			// The refusals wait for the CLI's own retries: bounded at 8 s.
			for _, tc := range []struct{ name, keyring, mode string }{
				{"wrong-key", wrong, mode},
				{"mode-" + other, keyring, other},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
					defer cancel()
					out, err := cephtest.CLI(ctx, writeCephxConf(t, addr, tc.keyring, tc.mode), "ping", "mon.a")
					if err == nil {
						t.Fatalf("ceph ping mon.a with %s succeeded: %s", tc.name, out)
					}
				})
			}
		})
	}
}

// runFerry runs the ferry binary and returns its stdout, stderr and exit
// code.
func runFerry(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("ferry %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// testCephxTell: `ferry tell` against the cluster, with -c (mons, keyring
// and modes from the conf) and with --mon and --keyring: an OSD's JSON,
// a mon command, a failing command's result on stderr.
func testCephxTell(t *testing.T, bin string, cl *cephtest.Cluster) {
	out, errOut, code := runFerry(t, bin, "tell", "-c", cl.ConfPath, "osd.0", "version")
	var v struct{ Version, Release string }
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Release != "pacific" {
		t.Fatalf("ferry tell -c conf osd.0 version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runFerry(t, bin, "tell", "--mon", cl.MonHost(), "--keyring", cl.KeyringPath("client.ferry"),
		"--name", "client.ferry", "--format", "json", "mon.a", "mon", "stat")
	var stat struct {
		Quorum []struct{ Name string } `json:"quorum"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &stat) != nil || len(stat.Quorum) != 1 {
		t.Fatalf("ferry tell mon.a mon stat: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Words matched against the mon's command signatures, as the ceph
	// CLI matches them: "osd find 0" is {"prefix":"osd find","id":0}.
	osdIP := cl.OSDV2Addr()[len("v2:"):strings.LastIndexByte(cl.OSDV2Addr(), '/')]
	for _, words := range [][]string{{"osd", "find", "0"}, {"osd", "find", "osd.0"}, {"osd", "find", "id=0"}} {
		out, errOut, code = runFerry(t, bin, append([]string{"tell", "-c", cl.ConfPath, "mon.a"}, words...)...)
		if code != 0 || !strings.Contains(out, osdIP) {
			t.Fatalf("ferry tell mon.a %v: exit %d, stdout %q, stderr %q", words, code, out, errOut)
		}
	}
	// Words no signature of the OSD's matches are refused before sending.
	out, errOut, code = runFerry(t, bin, "tell", "-c", cl.ConfPath, "osd.0", "no", "such", "command")
	if code == 0 || !strings.Contains(errOut, "no command matches") {
		t.Fatalf("ferry tell osd.0 no such command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A command the OSD refuses: its result and status string on stderr.
	out, errOut, code = runFerry(t, bin, "tell", "-c", cl.ConfPath, "osd.0", `{"prefix": "no such command"}`)
	if code == 0 || !strings.Contains(errOut, "-22") || !strings.Contains(errOut, "EINVAL") || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("ferry tell osd.0 with a JSON command it does not know: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A wrong key: refused, and stderr says why.
	bad := writeKeyring(t)
	out, errOut, code = runFerry(t, bin, "tell", "--mon", cl.MonHost(), "--keyring", bad, "osd.0", "version")
	if code == 0 || !strings.Contains(errOut, "EACCES") {
		t.Fatalf("ferry tell with a wrong key: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// testCephxPing: `ferry ping -c conf` hunts the conf's mons and pings
// with cephx; --json stays parseable with the logs on stderr; a wrong key
// is refused over v2 and over v1.
func testCephxPing(t *testing.T, bin string, cl *cephtest.Cluster) {
	out, errOut, code := runFerry(t, bin, "ping", "-c", cl.ConfPath, "--count", "5", "--json")
	var res struct {
		Count, Errors int
		Status        map[string]any
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Count != 5 || res.Errors != 0 || res.Status["mon_status"] == nil {
		t.Fatalf("ferry ping -c conf: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runFerry(t, bin, "ping", "--keyring", writeKeyring(t), "--count", "1", "v2:"+cl.MonV2+"/0")
	if code == 0 || !strings.Contains(errOut, "EACCES") {
		t.Fatalf("ferry ping with a wrong key: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Over msgr1 the login is in MAuth after the connect: the right key
	// pings, a wrong one is refused with the mon's EACCES.
	out, errOut, code = runFerry(t, bin, "ping", "--keyring", cl.KeyringPath("client.admin"), "--count", "3", "--json", "v1:"+cl.MonV1+"/0")
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Count != 3 || res.Errors != 0 {
		t.Fatalf("ferry ping v1 with cephx: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runFerry(t, bin, "ping", "--keyring", writeKeyring(t), "--count", "1", "v1:"+cl.MonV1+"/0")
	if code == 0 || !strings.Contains(errOut, "EACCES") {
		t.Fatalf("ferry ping v1 with a wrong key: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
