package cephtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Bounds on starting a cluster.
const (
	// ClusterTimeout bounds how long StartCluster waits for the mon's
	// quorum, then again for the OSD to be up and the mgr to be
	// available. About 10 s is usual; a 2-core machine under the load of
	// other tests took 85 s.
	ClusterTimeout = 3 * time.Minute
	// bindRange is how many ports the OSD and the mgr may bind from a
	// random base (ms_bind_port_min..max): an OSD takes 8 (public,
	// cluster and two heartbeat addresses, each v2 and v1), a mgr 2.
	bindRange = 200
	// bindBaseMin and bindBaseMax bound the base: below Linux's
	// ephemeral range (32768-60999), so the daemons do not collide
	// with the ports the kernel hands to test clients and listeners.
	bindBaseMin = 10000
	bindBaseMax = 32000
)

// ClusterOptions configures StartCluster. The zero value starts mon.a,
// osd.0 (memstore) and mgr.x with cephx required everywhere and Ceph's
// default connection modes.
type ClusterOptions struct {
	// Mode sets every ms_*_mode option (ms_mon_client_mode,
	// ms_mon_service_mode, ms_mon_cluster_mode, ms_client_mode,
	// ms_service_mode, ms_cluster_mode): "secure" or "crc". Empty keeps
	// Ceph's defaults ("secure crc" towards mons and mgrs, "crc secure"
	// towards OSDs).
	Mode string
	// Clients names further client entities to create, each with a key of
	// its own in its own keyring file and the caps "allow *" for mon,
	// osd and mgr (for example "client.ferry"). client.admin always
	// exists.
	Clients []string
	// NoOSD and NoMgr leave the OSD or the mgr out (faster when a test
	// needs only the mon).
	NoOSD, NoMgr bool
	// AuthNone runs the cluster with auth none instead of cephx (for
	// tests of what does not depend on authentication).
	AuthNone bool
	// Conf is appended to the [global] section of ceph.conf.
	Conf string
}

// Cluster is a running throwaway Ceph cluster: one mon (mon.a), a memstore
// OSD (osd.0) and a mgr (mgr.x), with cephx required for every
// connection (auth none with ClusterOptions.AuthNone). Its fields must not be modified. Its methods are safe for
// concurrent use.
type Cluster struct {
	FSID     string // the cluster's fsid, canonical UUID form
	Mode     string // ClusterOptions.Mode: "secure", "crc" or "" (Ceph's defaults)
	MonV2    string // the mon's msgr2 address, "127.0.0.1:PORT"
	MonV1    string // the mon's msgr1 address, "127.0.0.1:PORT"
	ConfPath string // ceph.conf for the daemons and for the ceph CLI
	Dir      string // directory holding the conf, keyrings, stores and logs

	// OSDAddrs is osd.0's public address vector as the OSD map gives it
	// (`ceph osd find 0`), v2 first, each "v2:127.0.0.1:PORT/NONCE"; the
	// nonce is the OSD's pid. Empty with NoOSD.
	OSDAddrs []string

	keys    map[string]string // entity name -> base64 key
	daemons []*daemon
}

// MonHost returns the mon's address vector as ceph.conf's "mon host"
// wants it: "[v2:127.0.0.1:P2,v1:127.0.0.1:P1]".
func (c *Cluster) MonHost() string { return "[v2:" + c.MonV2 + ",v1:" + c.MonV1 + "]" }

// OSDV2Addr returns osd.0's msgr2 address ("v2:127.0.0.1:PORT/NONCE"), or
// "" if it has none.
func (c *Cluster) OSDV2Addr() string {
	for _, a := range c.OSDAddrs {
		if strings.HasPrefix(a, "v2:") {
			return a
		}
	}
	return ""
}

// Key returns the base64 key of entity (for example "client.admin"), or
// "" if the cluster made no key for it.
func (c *Cluster) Key(entity string) string { return c.keys[entity] }

// KeyringPath returns the path of the keyring file holding entity's key
// (for example "client.admin"); the ceph CLI finds it by name through the
// [client] section of ConfPath.
func (c *Cluster) KeyringPath(entity string) string {
	return filepath.Join(c.Dir, "ceph."+entity+".keyring")
}

// LogPath returns the log file of a daemon ("mon.a", "osd.0", "mgr.x").
func (c *Cluster) LogPath(daemon string) string {
	return filepath.Join(c.Dir, "log", "ceph-"+daemon+".log")
}

// Ceph runs the ceph CLI as client.admin against the cluster with args
// (for example "osd", "find", "0") and returns its standard output. See
// CLI.
func (c *Cluster) Ceph(ctx context.Context, args ...string) ([]byte, error) {
	return CLI(ctx, c.ConfPath, append([]string{"-n", "client.admin"}, args...)...)
}

// Stop stops every daemon (SIGTERM to its PID, SIGKILL after 15 s) and
// waits for them. It is idempotent and also runs when the test ends.
func (c *Cluster) Stop() error {
	var errs []error
	for _, d := range slices.Backward(c.daemons) {
		errs = append(errs, d.Stop())
	}
	return errors.Join(errs...)
}

// PID returns the process id of a daemon ("mon.a", "osd.0", "mgr.x"), or
// 0 if it is not part of the cluster.
func (c *Cluster) PID(name string) int {
	for _, d := range c.daemons {
		if d.name == name {
			return d.cmd.Process.Pid
		}
	}
	return 0
}

// StartCluster starts a throwaway cluster in a directory under
// t.TempDir(): mon.a on free loopback ports (v2 and v1), then osd.0
// (memstore) and mgr.x, with cephx required everywhere and the
// connection modes of opts. It waits (at most ClusterTimeout per stage)
// for the mon's quorum, then for the OSD to be up and the mgr available.
// A cleanup stops every daemon by PID and, if the test failed, logs the
// end of each daemon's log. It skips t if Ceph is not installed (see
// Require).
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	progs := []string{"ceph-mon", "monmaptool", "ceph"}
	if !opts.NoOSD {
		progs = append(progs, "ceph-osd")
	}
	if !opts.NoMgr {
		progs = append(progs, "ceph-mgr")
	}
	Require(t, progs...)
	switch opts.Mode {
	case "", "secure", "crc":
	default:
		t.Fatalf("cephtest: ClusterOptions.Mode %q: want secure, crc or empty", opts.Mode)
	}
	base := t.TempDir()
	start := time.Now()
	var c *Cluster
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		var retry bool
		c, retry, lastErr = startClusterMon(t, filepath.Join(base, strconv.Itoa(attempt)), opts)
		if lastErr == nil {
			break
		}
		c = nil
		if !retry {
			break
		}
		t.Logf("cephtest: attempt %d: %v; retrying on other ports", attempt+1, lastErr)
	}
	if c == nil {
		t.Fatalf("cephtest: cannot start ceph-mon: %v", lastErr)
	}
	t.Logf("cephtest: mon.a %s fsid %s mode %q in quorum after %v", c.MonHost(), c.FSID, opts.Mode, time.Since(start).Round(time.Millisecond))
	if err := c.startOSDAndMgr(t, opts); err != nil {
		t.Fatalf("cephtest: %v", err)
	}
	t.Logf("cephtest: cluster up in %v (osd.0 %v)", time.Since(start).Round(time.Millisecond), c.OSDAddrs)
	return c
}

// startClusterMon writes the cluster's files in dir and starts its mon.
// retry reports a port collision worth retrying on fresh ports.
func startClusterMon(t testing.TB, dir string, opts ClusterOptions) (_ *Cluster, retry bool, _ error) {
	ports, err := pickPorts(2)
	if err != nil {
		return nil, false, err
	}
	fsid, err := newUUID()
	if err != nil {
		return nil, false, err
	}
	c := &Cluster{
		FSID:     fsid,
		Mode:     opts.Mode,
		MonV2:    net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		MonV1:    net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		ConfPath: filepath.Join(dir, "ceph.conf"),
		Dir:      dir,
		keys:     map[string]string{},
	}
	for _, d := range []string{dir, filepath.Join(dir, "run"), filepath.Join(dir, "log"), filepath.Join(dir, "mon-a")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, false, err
		}
	}
	bindBase, err := rand.Int(rand.Reader, big.NewInt(bindBaseMax-bindBaseMin-bindRange))
	if err != nil {
		return nil, false, err
	}
	if err := os.WriteFile(c.ConfPath, []byte(c.conf(opts, bindBaseMin+int(bindBase.Int64()))), 0o600); err != nil {
		return nil, false, err
	}

	// Keys: the mon's, client.admin's, the mgr's and the test's clients',
	// all in the mkfs keyring so the mon's auth database holds them from
	// the start; each also in a keyring file of its own.
	allCaps := [][2]string{{"mon", "allow *"}, {"osd", "allow *"}, {"mgr", "allow *"}, {"mds", "allow *"}}
	type ent struct {
		name string
		caps [][2]string
		path string
	}
	ents := []ent{
		{"mon.", [][2]string{{"mon", "allow *"}}, filepath.Join(dir, "mon-a", "keyring")},
		{"client.admin", allCaps, c.KeyringPath("client.admin")},
	}
	if !opts.NoMgr {
		if err := os.MkdirAll(filepath.Join(dir, "mgr-x"), 0o700); err != nil {
			return nil, false, err
		}
		ents = append(ents, ent{"mgr.x", [][2]string{{"mon", "allow profile mgr"}, {"osd", "allow *"}, {"mds", "allow *"}}, filepath.Join(dir, "mgr-x", "keyring")})
	}
	for _, n := range opts.Clients {
		if !strings.HasPrefix(n, "client.") || n == "client.admin" {
			return nil, false, fmt.Errorf("ClusterOptions.Clients: %q is not client.ID (other than client.admin)", n)
		}
		ents = append(ents, ent{n, allCaps[:3], c.KeyringPath(n)})
	}
	var mkfs strings.Builder
	for _, e := range ents {
		key, err := NewKey()
		if err != nil {
			return nil, false, err
		}
		c.keys[e.name] = key
		k := KeyringEntry(e.name, key, e.caps...)
		mkfs.WriteString(k)
		if e.name == "mon." {
			continue // the mon reads its own from its data directory after mkfs
		}
		if err := os.WriteFile(e.path, []byte(k), 0o600); err != nil {
			return nil, false, err
		}
	}
	mkfsPath := filepath.Join(dir, "mkfs.keyring")
	if err := os.WriteFile(mkfsPath, []byte(mkfs.String()), 0o600); err != nil {
		return nil, false, err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	monmap := filepath.Join(dir, "monmap")
	if out, err := run(ctx, "monmaptool", "--create", "--fsid", fsid, "--addv", "a", c.MonHost(), monmap); err != nil {
		return nil, false, fmt.Errorf("monmaptool: %v: %s", err, out)
	}
	if out, err := run(ctx, "ceph-mon", "-c", c.ConfPath, "--mkfs", "-i", "a", "--monmap", monmap, "--keyring", mkfsPath); err != nil {
		return nil, false, fmt.Errorf("ceph-mon --mkfs: %v: %s", err, out)
	}
	mon, err := c.startDaemon(t, "mon.a", "ceph-mon", "-i", "a")
	if err != nil {
		return nil, false, err
	}
	qctx, qcancel := context.WithTimeout(context.Background(), ClusterTimeout)
	defer qcancel()
	if err := c.waitQuorum(qctx, mon); err != nil {
		mon.Stop()
		retry := strings.Contains(tail(c.LogPath("mon.a"), logTail), "Address already in use")
		return nil, retry, err
	}
	return c, false, nil
}

// startOSDAndMgr creates osd.0 in the OSD map, makes its store, starts it
// and the mgr, and waits until the OSD is up and the mgr available.
func (c *Cluster) startOSDAndMgr(t testing.TB, opts ClusterOptions) error {
	ctx, cancel := context.WithTimeout(context.Background(), ClusterTimeout)
	defer cancel()
	if !opts.NoMgr {
		if _, err := c.startDaemon(t, "mgr.x", "ceph-mgr", "-i", "x"); err != nil {
			return err
		}
	}
	if !opts.NoOSD {
		if err := c.makeOSD(ctx); err != nil {
			return err
		}
		osd, err := c.startDaemon(t, "osd.0", "ceph-osd", "-i", "0")
		if err != nil {
			return err
		}
		if err := c.waitOSD(ctx, osd); err != nil {
			return err
		}
	}
	if !opts.NoMgr {
		if err := c.waitMgr(ctx); err != nil {
			return err
		}
	}
	return nil
}

// makeOSD registers osd.0 with a fresh key (`ceph osd new`), writes its
// keyring and makes its memstore store.
func (c *Cluster) makeOSD(ctx context.Context) error {
	uuid, err := newUUID()
	if err != nil {
		return err
	}
	key, err := NewKey()
	if err != nil {
		return err
	}
	osdDir := filepath.Join(c.Dir, "osd-0")
	if err := os.MkdirAll(osdDir, 0o700); err != nil {
		return err
	}
	secret := filepath.Join(c.Dir, "osd-0.secret.json")
	if err := os.WriteFile(secret, []byte(`{"cephx_secret": "`+key+`"}`), 0o600); err != nil {
		return err
	}
	out, err := c.Ceph(ctx, "osd", "new", uuid, "-i", secret)
	if err != nil {
		return err
	}
	if id := strings.TrimSpace(string(out)); id != "0" {
		return fmt.Errorf("ceph osd new gave id %q, want 0", id)
	}
	c.keys["osd.0"] = key
	if err := os.WriteFile(filepath.Join(osdDir, "keyring"), []byte(KeyringEntry("osd.0", key)), 0o600); err != nil {
		return err
	}
	if out, err := run(ctx, "ceph-osd", "-c", c.ConfPath, "-i", "0", "--mkfs", "--osd-uuid", uuid); err != nil {
		return fmt.Errorf("ceph-osd --mkfs: %v: %s", err, out)
	}
	return nil
}

// conf returns the cluster's ceph.conf; bindBase is the first port the OSD
// and mgr may bind.
func (c *Cluster) conf(opts ClusterOptions, bindBase int) string {
	asok := filepath.Join(c.Dir, "run", "$cluster-$name.asok")
	if len(asok)+len("client.admin")-len("$name") > 100 { // sun_path holds 108 bytes
		asok = ""
	}
	authMethod := "cephx"
	if opts.AuthNone {
		authMethod = "none"
	}
	modes := ""
	if opts.Mode != "" {
		for _, o := range []string{"ms mon client mode", "ms mon service mode", "ms mon cluster mode",
			"ms client mode", "ms service mode", "ms cluster mode"} {
			modes += o + " = " + opts.Mode + "\n"
		}
	}
	return fmt.Sprintf(`[global]
fsid = %[1]s
mon host = %[2]s
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind port min = %[3]d
ms bind port max = %[4]d
# Fail at once if the mon's port is taken; StartCluster retries elsewhere.
ms bind retry count = 1
auth cluster required = %[11]s
auth service required = %[11]s
auth client required = %[11]s
auth allow insecure global id reclaim = false
mon warn on insecure global id reclaim allowed = false
%[5]smon data avail warn = 1
mon data avail crit = 0
mon warn on pool no redundancy = false
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
run dir = %[6]s
admin socket = %[7]s
log file = %[8]s/$cluster-$name.log
mon cluster log file = %[8]s/cluster.log
pid file = %[6]s/$cluster-$name.pid
crash dir = %[9]s/crash
%[10]s
[mon]
mon data = %[9]s/mon-$id
[mgr]
mgr data = %[9]s/mgr-$id
keyring = %[9]s/mgr-$id/keyring
[osd]
osd data = %[9]s/osd-$id
keyring = %[9]s/osd-$id/keyring
osd objectstore = memstore
memstore device bytes = 268435456
osd crush chooseleaf type = 0

[client]
keyring = %[9]s/$cluster.$name.keyring
log file =
admin socket =
`, c.FSID, c.MonHost(), bindBase, bindBase+bindRange-1, modes,
		filepath.Join(c.Dir, "run"), asok, filepath.Join(c.Dir, "log"), c.Dir, opts.Conf, authMethod)
}

// daemon is one Ceph daemon process run in the foreground.
type daemon struct {
	name     string // "mon.a"
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited
	waitErr  error         // valid after done is closed
	stopOnce sync.Once
	stopErr  error
}

// Stop stops the daemon by its PID (SIGTERM, then SIGKILL) and waits for
// it to exit; idempotent.
func (d *daemon) Stop() error {
	d.stopOnce.Do(func() {
		if err := stopProcess(d.cmd.Process, d.done); err != nil {
			d.stopErr = fmt.Errorf("%s: %w", d.name, err)
		}
	})
	return d.stopErr
}

// startDaemon starts prog (ceph-mon, ceph-osd, ceph-mgr) in the
// foreground with the cluster's conf and args, and registers its cleanup.
func (c *Cluster) startDaemon(t testing.TB, name, prog string, args ...string) (*daemon, error) {
	outPath := filepath.Join(c.Dir, "log", name+".stdout")
	stdout, err := os.Create(outPath)
	if err != nil {
		return nil, err
	}
	defer stdout.Close() // the child has its own copy
	d := &daemon{name: name, done: make(chan struct{})}
	d.cmd = exec.Command(prog, append([]string{"-c", c.ConfPath, "-f"}, args...)...)
	d.cmd.Dir = c.Dir
	d.cmd.Stdout = stdout
	d.cmd.Stderr = stdout
	d.cmd.SysProcAttr = deathSignal()
	if err := startWaited(d.cmd, &d.waitErr, d.done); err != nil {
		return nil, fmt.Errorf("start %s: %w", prog, err)
	}
	c.daemons = append(c.daemons, d)
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Errorf("cephtest: %v", err)
		}
		if t.Failed() {
			t.Logf("cephtest: end of %s:\n%s", c.LogPath(name), tail(c.LogPath(name), logTail))
			t.Logf("cephtest: %s stdout/stderr:\n%s", name, tail(outPath, logTail))
		}
	})
	return d, nil
}

// poll runs f every 500 ms (each run of the ceph CLI, a Python
// program, costs a good part of a core for as long) until it returns nil, d exits (if d is not
// nil), or ctx ends. A CLI run in progress when d dies is cancelled.
func poll(ctx context.Context, d *daemon, what string, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var exited <-chan struct{}
	if d != nil {
		exited = d.done
		go func() {
			select {
			case <-exited:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-exited:
			return fmt.Errorf("%s exited before %s: %v", d.name, what, d.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("no %s within %v: %v", what, ClusterTimeout, lastErr)
		case <-tick.C:
		}
	}
}

// waitQuorum waits until quorum_status shows mon.a in quorum in a cluster
// with c's fsid (so another mon on the port is not mistaken for this one).
func (c *Cluster) waitQuorum(ctx context.Context, mon *daemon) error {
	return poll(ctx, mon, "quorum", func(ctx context.Context) error {
		out, err := c.Ceph(ctx, "quorum_status", "--format", "json")
		if err != nil {
			return err
		}
		var st struct {
			QuorumNames []string `json:"quorum_names"`
			Monmap      struct {
				FSID string `json:"fsid"`
			} `json:"monmap"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			return fmt.Errorf("quorum_status: %v: %q", err, out)
		}
		if st.Monmap.FSID != c.FSID {
			return fmt.Errorf("quorum_status: fsid %s, want %s (another mon on the port?)", st.Monmap.FSID, c.FSID)
		}
		if !slices.Contains(st.QuorumNames, "a") {
			return fmt.Errorf("quorum_status: mon.a not in quorum %v", st.QuorumNames)
		}
		return nil
	})
}

// waitOSD waits until the OSD map shows osd.0 up, and records its
// addresses.
func (c *Cluster) waitOSD(ctx context.Context, osd *daemon) error {
	return poll(ctx, osd, "osd.0 up", func(ctx context.Context) error {
		out, err := c.Ceph(ctx, "osd", "dump", "--format", "json")
		if err != nil {
			return err
		}
		var dump struct {
			OSDs []struct {
				OSD         int `json:"osd"`
				Up          int `json:"up"`
				PublicAddrs struct {
					Addrvec []struct {
						Type  string `json:"type"`
						Addr  string `json:"addr"`
						Nonce uint32 `json:"nonce"`
					} `json:"addrvec"`
				} `json:"public_addrs"`
			} `json:"osds"`
		}
		if err := json.Unmarshal(out, &dump); err != nil {
			return fmt.Errorf("osd dump: %v: %q", err, out)
		}
		for _, o := range dump.OSDs {
			if o.OSD != 0 || o.Up != 1 {
				continue
			}
			var addrs []string
			for _, a := range o.PublicAddrs.Addrvec {
				addrs = append(addrs, fmt.Sprintf("%s:%s/%d", a.Type, a.Addr, a.Nonce))
			}
			if len(addrs) == 0 {
				return errors.New("osd.0 up without addresses")
			}
			c.OSDAddrs = addrs
			return nil
		}
		return errors.New("osd.0 not up yet")
	})
}

// waitMgr waits until the mgr map shows an available mgr.
func (c *Cluster) waitMgr(ctx context.Context) error {
	var mgr *daemon
	for _, d := range c.daemons {
		if d.name == "mgr.x" {
			mgr = d
		}
	}
	return poll(ctx, mgr, "mgr available", func(ctx context.Context) error {
		out, err := c.Ceph(ctx, "mgr", "stat", "--format", "json")
		if err != nil {
			return err
		}
		var st struct {
			Available bool `json:"available"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			return fmt.Errorf("mgr stat: %v: %q", err, out)
		}
		if !st.Available {
			return errors.New("mgr not available yet")
		}
		return nil
	})
}

// NewKey returns a fresh random cephx key in the form keyrings hold it:
// the base64 of an encoded CryptoKey (type AES, created now, 16 random
// bytes), as `ceph-authtool --gen-print-key` prints it.
func NewKey() (string, error) {
	var secret [16]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return "", err
	}
	return EncodeKey(secret[:], time.Now()), nil
}

// EncodeKey returns the base64 form of an AES CryptoKey with the given
// secret and creation time: le16 type 1, utime_t created, le16 length,
// the secret.
func EncodeKey(secret []byte, created time.Time) string {
	b := make([]byte, 0, 12+len(secret))
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = binary.LittleEndian.AppendUint32(b, uint32(created.Unix()))
	b = binary.LittleEndian.AppendUint32(b, uint32(created.Nanosecond()))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(secret)))
	b = append(b, secret...)
	return base64.StdEncoding.EncodeToString(b)
}

// KeyringEntry returns a keyring section for entity with key and caps
// (pairs of service and grant, e.g. {"mon", "allow *"}), as ceph-authtool
// writes it.
func KeyringEntry(entity, key string, caps ...[2]string) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "[%s]\n\tkey = %s\n", entity, key)
	for _, c := range caps {
		fmt.Fprintf(&b, "\tcaps %s = %q\n", c[0], c[1])
	}
	return b.String()
}
