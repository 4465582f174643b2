package cephtest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartCluster starts a cephx cluster with every connection in secure
// mode and checks it with the stock ceph CLI: `ceph -s` with the admin
// keyring, `ceph osd find 0` (the OSD's addresses as Cluster reports
// them), a second client with its own keyring, and a wrong key refused.
func TestStartCluster(t *testing.T) {
	c := StartCluster(t, ClusterOptions{Mode: "secure", Clients: []string{"client.ferry"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	out, err := CLI(ctx, c.ConfPath, "-n", "client.admin", "-k", c.KeyringPath("client.admin"), "-s", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		FSID   string `json:"fsid"`
		OSDMap struct {
			NumOSDs   int `json:"num_osds"`
			NumUpOSDs int `json:"num_up_osds"`
		} `json:"osdmap"`
		MgrMap struct {
			Available bool `json:"available"`
		} `json:"mgrmap"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("ceph -s: %v\n%s", err, out)
	}
	if st.FSID != c.FSID || st.OSDMap.NumOSDs != 1 || st.OSDMap.NumUpOSDs != 1 || !st.MgrMap.Available {
		t.Fatalf("ceph -s: %s", out)
	}

	out, err = c.Ceph(ctx, "osd", "find", "0", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var find struct {
		OSD   int `json:"osd"`
		Addrs struct {
			Addrvec []struct {
				Type  string `json:"type"`
				Addr  string `json:"addr"`
				Nonce int    `json:"nonce"`
			} `json:"addrvec"`
		} `json:"addrs"`
	}
	if err := json.Unmarshal(out, &find); err != nil {
		t.Fatalf("osd find: %v\n%s", err, out)
	}
	if len(find.Addrs.Addrvec) == 0 || find.Addrs.Addrvec[0].Nonce != c.PID("osd.0") {
		t.Fatalf("osd find 0: %s (osd.0 pid %d)", out, c.PID("osd.0"))
	}
	if v2 := c.OSDV2Addr(); !strings.HasPrefix(v2, "v2:127.0.0.1:") || !strings.Contains(string(out), strings.TrimPrefix(strings.Split(v2, "/")[0], "v2:")) {
		t.Fatalf("OSDV2Addr %q not in osd find: %s", v2, out)
	}

	// The second client authenticates with its own keyring, found by name.
	if _, err := CLI(ctx, c.ConfPath, "-n", "client.ferry", "mon", "stat"); err != nil {
		t.Fatalf("client.ferry: %v", err)
	}

	// A wrong key is refused.
	bad := filepath.Join(t.TempDir(), "bad.keyring")
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(KeyringEntry("client.admin", key)), 0o600); err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithTimeout(ctx, 20*time.Second)
	defer bcancel()
	if out, err := CLI(bctx, c.ConfPath, "-n", "client.admin", "-k", bad, "mon", "stat"); err == nil {
		t.Fatalf("a wrong key was accepted: %s", out)
	}

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if c.PID("mon.a") == 0 {
		t.Fatal("no mon pid")
	}
}

func TestEncodeKey(t *testing.T) {
	// The keyring vector of src/test/cli/ceph-authtool/add-key.t.
	secret := []byte{0xd1, 0x28, 0x12, 0x75, 0xbb, 0x3c, 0x22, 0x42, 0x6b, 0xc6, 0xba, 0x03, 0x78, 0x9e, 0x92, 0xc1}
	got := EncodeKey(secret, time.Unix(1294790410, 480731000))
	if want := "AQAK7yxNeF+nHBAA0SgSdbs8IkJrxroDeJ6SwQ=="; got != want {
		t.Fatalf("EncodeKey = %s, want %s", got, want)
	}
}
