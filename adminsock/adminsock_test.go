package adminsock_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrymsg/ferry/adminsock"
	"github.com/ferrymsg/ferry/internal/cephtest"
)

func start(t *testing.T) (string, *adminsock.Server) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ferry.asok")
	s := adminsock.New(path, nil)
	s.Register("perf dump", "dump perf counters", func(context.Context, map[string]any) (any, error) {
		return map[string]map[string]int{"msgr": {"messages_received": 3}}, nil
	})
	s.Register("fail now", "always fails", func(context.Context, map[string]any) (any, error) {
		return nil, errors.New("it failed")
	})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return path, s
}

func TestCommand(t *testing.T) {
	path, _ := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := adminsock.Command(ctx, path, "perf", "dump")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]map[string]int
	if err := json.Unmarshal(b, &v); err != nil || v["msgr"]["messages_received"] != 3 {
		t.Errorf("perf dump: %s (%v)", b, err)
	}
	b, err = adminsock.Command(ctx, path, "help")
	if err != nil || !strings.Contains(string(b), `"perf dump"`) {
		t.Errorf("help: %s (%v)", b, err)
	}
	if _, err := adminsock.Command(ctx, path, "no", "such"); !errors.Is(err, adminsock.ErrUnknownCommand) || strings.Count(err.Error(), "adminsock:") != 1 || !strings.Contains(err.Error(), `"no such"`) {
		t.Errorf("unknown command: %v, want ErrUnknownCommand naming it, prefixed once", err)
	}
	if _, err := adminsock.Command(ctx, path, "fail", "now"); err == nil || !strings.Contains(err.Error(), "it failed") {
		t.Errorf("failing command: %v", err)
	}
}

// TestStaleSocket: a socket file nothing listens on is replaced; one in
// use is not.
func TestStaleSocket(t *testing.T) {
	path, _ := start(t)
	if err := adminsock.New(path, nil).Listen(); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second Listen on a live socket: %v", err)
	}
}

// TestCephCLI: the stock ceph CLI reads the socket as a daemon's.
func TestCephCLI(t *testing.T) {
	cephtest.Require(t, "ceph")
	path, _ := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ceph", "--admin-daemon", path, "perf", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("ceph --admin-daemon perf dump: %v\n%s", err, out)
	}
	var v map[string]map[string]int
	if err := json.Unmarshal(out, &v); err != nil || v["msgr"]["messages_received"] != 3 {
		t.Errorf("ceph --admin-daemon perf dump printed %s (%v)", out, err)
	}
	out, err = exec.CommandContext(ctx, "ceph", "--admin-daemon", path, "help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "perf dump") {
		t.Errorf("ceph --admin-daemon help: %v\n%s", err, out)
	}
}
