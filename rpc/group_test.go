package rpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/rpc"
)

// Environment of the child process of TestTwoProcessesJoinByAttachFile.
const (
	envRole      = "FERRY_RPC_TEST_ROLE"
	envAttachDir = "FERRY_RPC_TEST_ATTACH_DIR"
)

func TestMain(m *testing.M) {
	if os.Getenv(envRole) == "server" {
		os.Exit(serverMain())
	}
	os.Exit(m.Run())
}

// serverMain is the child: rank 0 with two contexts over loopback TCP; it
// saves the group's attach file and serves until its stdin closes.
func serverMain() int {
	in, err := rpc.New(rpc.Options{Listen: "tcp://127.0.0.1:0", Rank: 0, Logger: quietLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer in.Close()
	if err := in.Register(testProto(nil)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for range 2 {
		if _, err := in.NewContext(rpc.ContextOptions{Auto: true}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if _, err := in.Group().SaveAttach(os.Getenv(envAttachDir)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// Two processes joined through an attach file: a second process serves
// rank 0 and saves the attach file; this one loads it and calls rank 0's
// tags (tag 1's URI found by a URI lookup).
func TestTwoProcessesJoinByAttachFile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"=server", envAttachDir+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		stdin.Close() // the child exits on EOF
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("child: %v\n%s", err, stderr.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Error("child did not exit")
		}
	}()

	cli, err := rpc.New(rpc.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := cli.Register(testProto(nil)); err != nil {
		t.Fatal(err)
	}
	path := cli.Group().AttachPath(dir)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("child exited: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no attach file from the child")
		}
		time.Sleep(5 * time.Millisecond) // polling for the file, bounded
	}
	if err := cli.Group().LoadAttach(path); err != nil {
		t.Fatal(err)
	}
	if got := cli.Group().Ranks(); !slices.Equal(got, []uint32{0}) {
		t.Fatalf("ranks %v", got)
	}
	c := newCtx(t, cli, rpc.ContextOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for tag := range uint16(2) {
		var out pair
		if err := c.Call(ctx, rpc.Endpoint{Rank: 0, Tag: tag}, op(opEcho), &pair{A: uint32(tag)}, &out); err != nil {
			t.Fatalf("tag %d: %v", tag, err)
		}
		if out.A != uint32(tag)+1 {
			t.Fatalf("tag %d: %+v", tag, out)
		}
	}
	if st := c.Stats(); st.URILookups != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestAttachFile(t *testing.T) {
	n := newNet()
	s0 := n.server(t, 0, 1, rpc.Options{Group: "g"})
	if err := s0.Group().Add(3, "tcp://127.0.0.1:7"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, err := s0.Group().SaveAttach(dir)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "g.attach_info") {
		t.Fatalf("path %s", path)
	}
	b, _ := os.ReadFile(path)
	want := fmt.Sprintf("name g\nsize 2\nall\n0 %s\n3 tcp://127.0.0.1:7\n", s0.URI())
	if string(b) != want {
		t.Fatalf("attach file:\n%s\nwant:\n%s", b, want)
	}
	cli := n.client(t, rpc.Options{Group: "g"}, nil)
	if err := cli.Group().LoadAttach(path); err != nil {
		t.Fatal(err)
	}
	if ms := cli.Group().Members(); len(ms) != 2 || ms[0].URI != s0.URI() || ms[1].Rank != 3 {
		t.Fatalf("members %+v", ms)
	}
	v := cli.Group().Version()
	// Loading the same file again changes nothing.
	if err := cli.Group().LoadAttach(path); err != nil || cli.Group().Version() != v {
		t.Fatalf("reload: %v, version %d -> %d", err, v, cli.Group().Version())
	}
	other := n.client(t, rpc.Options{Group: "other"}, nil)
	if err := other.Group().LoadAttach(path); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("wrong group: %v", err)
	}
	for _, bad := range []string{
		"size 1\nall\n0 tcp://a\n",                      // no name
		"name g\nsize 1\n0 tcp://a\n1 tcp://b\n",        // more than size
		"name g\nx tcp://a\n",                           // bad rank
		"name g\n4294967295 tcp://a\n",                  // RankNone
		"name g\n1\n",                                   // no URI
		"name g\nsize -1\n",                             // bad size
		"name g\n1 " + strings.Repeat("u", 5000) + "\n", // line too long
	} {
		if _, _, err := rpc.ReadAttachFile(strings.NewReader(bad)); !errors.Is(err, rpc.ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestGroupAddRemoveConcurrent: Add and Remove from many goroutines at
// once each take their own version (the group's methods are safe for
// concurrent use): none fails as stale, and the version counts them all.
func TestGroupAddRemoveConcurrent(t *testing.T) {
	n := newNet()
	g := n.server(t, 0, 1, rpc.Options{}).Group()
	const workers, each = 8, 300
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := uint32(1 + w*each + i)
				if err := g.Add(r, fmt.Sprintf("tcp://10.0.0.1:%d", r)); err != nil {
					errs <- err
					return
				}
				if i%3 == 2 {
					if err := g.Remove(r); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Add or Remove: %v", err)
	}
	const changes = workers * (each + each/3)
	if v := g.Version(); v != changes {
		t.Errorf("version %d after %d changes", v, changes)
	}
	if size := g.Size(); size != 1+workers*(each-each/3) {
		t.Errorf("size %d, want %d", size, 1+workers*(each-each/3))
	}
}

// TestGroupRefusesBadInput: a membership listing a rank twice (Modify,
// an attach file), a group name that cannot name its attach file, an
// unknown member state and an unknown SWIM authority are refused, not
// taken (the last URI won, EventJoined came twice, SaveAttach wrote
// outside its directory, state(9) counted as alive).
func TestGroupRefusesBadInput(t *testing.T) {
	n := newNet()
	s := n.server(t, 0, 1, rpc.Options{})
	g := s.Group()
	v := g.Version()
	for _, op := range []rpc.ModOp{rpc.ModAdd, rpc.ModReplace} {
		if err := g.Modify(op, []rpc.Member{{1, "tcp://a:1"}, {1, "tcp://b:1"}}, v+1); !errors.Is(err, rpc.ErrInvalid) {
			t.Errorf("%v with rank 1 twice: %v, want ErrInvalid", op, err)
		}
	}
	if g.Version() != v || g.Size() != 1 {
		t.Errorf("a refused change changed the group: version %d, size %d", g.Version(), g.Size())
	}
	if _, _, err := rpc.ReadAttachFile(strings.NewReader("name g\n5 tcp://x:1\n5 tcp://y:1\n")); !errors.Is(err, rpc.ErrInvalid) {
		t.Errorf("attach file with rank 5 twice: %v, want ErrInvalid", err)
	}
	if _, _, err := rpc.ReadAttachFile(strings.NewReader("name a/b\n5 tcp://x:1\n")); !errors.Is(err, rpc.ErrInvalid) {
		t.Errorf("attach file named a/b: %v, want ErrInvalid", err)
	}
	for _, name := range []string{"../escaped", " g", "x\ny", "a/b", ".."} {
		if in, err := rpc.New(rpc.Options{Group: name, Logger: quietLogger()}); !errors.Is(err, rpc.ErrInvalid) {
			if in != nil {
				in.Close()
			}
			t.Errorf("group name %q: %v, want ErrInvalid", name, err)
		}
	}
	if err := g.Add(1, "tcp://10.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	if g.SetState(1, rpc.MemberState(9), 3) {
		t.Error("SetState with an unknown state changed something")
	}
	if st, _, _ := g.State(1); st != rpc.MemberAlive {
		t.Errorf("state %v after an unknown verdict", st)
	}
	if _, err := s.StartSWIM(rpc.SWIMOptions{Authority: 9}); !errors.Is(err, rpc.ErrInvalid) {
		t.Errorf("StartSWIM with authority 9: %v, want ErrInvalid", err)
	}
}

func TestGroupModify(t *testing.T) {
	n := newNet()
	s := n.server(t, 2, 1, rpc.Options{})
	g := s.Group()
	if g.Self() != 2 || g.Size() != 1 || g.Version() != 0 {
		t.Fatalf("self %d size %d version %d", g.Self(), g.Size(), g.Version())
	}
	if err := g.Modify(rpc.ModAdd, []rpc.Member{{0, "tcp://a"}, {1, "tcp://b"}}, 5); err != nil {
		t.Fatal(err)
	}
	if err := g.Modify(rpc.ModAdd, []rpc.Member{{4, "tcp://c"}}, 5); !errors.Is(err, rpc.ErrGroupVersion) {
		t.Fatalf("stale version: %v", err)
	}
	if err := g.Modify(rpc.ModAdd, []rpc.Member{{0, "tcp://a"}}, 6); !errors.Is(err, rpc.ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := g.Modify(rpc.ModRemove, []rpc.Member{{Rank: 2}}, 6); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("remove self: %v", err)
	}
	if err := g.Modify(rpc.ModAdd, []rpc.Member{{7, ""}}, 6); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("no URI: %v", err)
	}
	if err := g.Modify(rpc.ModReplace, []rpc.Member{{1, "tcp://b2"}, {9, "tcp://z"}}, 6); err != nil {
		t.Fatal(err)
	}
	if got := g.Ranks(); !slices.Equal(got, []uint32{1, 2, 9}) {
		t.Fatalf("ranks after replace %v", got)
	}
	if u, _ := g.URI(1, 0); u != "tcp://b2" {
		t.Fatalf("rank 1 URI %q", u)
	}
	if u, _ := g.URI(2, 0); u != s.URI() {
		t.Fatalf("self URI %q", u)
	}
	if err := g.Remove(9, 42); err != nil || g.Has(9) || g.Version() != 7 {
		t.Fatalf("remove: %v, version %d", err, g.Version())
	}
}
