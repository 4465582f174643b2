// Package adminsock is an admin socket as Ceph daemons have one: a Unix
// socket that answers commands with JSON, speaking Ceph's admin-socket
// protocol, so the stock `ceph --admin-daemon PATH perf dump` works
// against a ferry process as against a Ceph daemon.
//
// The protocol: the client connects, writes one command as a JSON object
// ({"prefix": "perf dump", ...}) terminated by a NUL byte, and reads a
// 4-byte big-endian length and that many bytes of reply; the server then
// closes the connection. The ceph CLI first asks for
// "get_command_descriptions" (a JSON object describing every command's
// words, which it validates the user's words against), then sends the
// command.
package adminsock

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferrymsg/ferry/transport"
)

// Bounds of the protocol.
const (
	// MaxRequest bounds a command's JSON; longer requests are refused.
	MaxRequest = 64 << 10
	// MaxReply bounds a reply a Client reads.
	MaxReply = 64 << 20
	// Timeout bounds reading a request and writing its reply.
	Timeout = 10 * time.Second
)

// Errors.
var (
	// ErrUnknownCommand: no registered command has the prefix.
	ErrUnknownCommand = errors.New("adminsock: unknown command")
	// ErrBadRequest: the request was not a JSON object with a prefix, or
	// was too long.
	ErrBadRequest = errors.New("adminsock: bad request")
)

// Handler answers a command. req is the whole request object (prefix,
// format and any arguments); the result is marshalled as JSON.
type Handler func(ctx context.Context, req map[string]any) (any, error)

type command struct {
	prefix string
	help   string
	h      Handler
}

// Server serves an admin socket. Register commands, then Serve.
type Server struct {
	path string
	log  *slog.Logger

	mu       sync.Mutex
	commands map[string]*command
	l        net.Listener
	conns    sync.WaitGroup
	closed   bool
}

// New returns a server for the socket at path with the built-in commands
// help and get_command_descriptions.
func New(path string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{path: path, log: log, commands: map[string]*command{}}
	s.Register("help", "list available commands", func(context.Context, map[string]any) (any, error) {
		out := map[string]string{}
		for _, c := range s.sorted() {
			out[c.prefix] = c.help
		}
		return out, nil
	})
	s.Register("get_command_descriptions", "list available commands (for the ceph CLI)", func(context.Context, map[string]any) (any, error) {
		out := map[string]any{}
		for i, c := range s.sorted() {
			out[fmt.Sprintf("cmd%03d", i)] = map[string]any{
				"sig": strings.Fields(c.prefix), "help": c.help,
				"module": "ferry", "perm": "r", "flags": 0,
			}
		}
		return out, nil
	})
	return s
}

// Register adds a command: prefix is its words ("perf dump").
func (s *Server) Register(prefix, help string, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commands[prefix] = &command{prefix: prefix, help: help, h: h}
}

func (s *Server) sorted() []*command {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]*command, 0, len(s.commands))
	for _, c := range s.commands {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].prefix < cs[j].prefix })
	return cs
}

// Listen binds the socket, replacing a stale socket file left at the
// path (one nothing listens on); it refuses to replace anything else
// (transport.ListenUnix).
func (s *Server) Listen() error {
	l, err := transport.ListenUnix(context.Background(), s.path)
	if errors.Is(err, transport.ErrAddrInUse) {
		return fmt.Errorf("adminsock: %s is in use: %w", s.path, err)
	}
	if err != nil {
		return fmt.Errorf("adminsock: %w", err)
	}
	s.mu.Lock()
	s.l = l
	s.mu.Unlock()
	return nil
}

// Serve answers connections until Close. Call Listen first.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	l := s.l
	s.mu.Unlock()
	if l == nil {
		return errors.New("adminsock: Serve before Listen")
	}
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			return err
		}
		// Add under mu, after checking closed: Close sets closed under mu
		// before it waits, so no Add can race with its Wait.
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.conns.Done()
			defer c.Close()
			s.serveConn(ctx, c)
		}()
	}
}

// Close stops listening, removes the socket file and waits for the
// commands being answered.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	l := s.l
	s.mu.Unlock()
	var err error
	if l != nil {
		err = l.Close()
	}
	s.conns.Wait()
	return err
}

// serveConn answers one request.
func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(Timeout))
	req, err := readRequest(bufio.NewReader(c))
	var reply []byte
	if err == nil {
		reply, err = s.Do(ctx, req)
	}
	if err != nil {
		s.log.Debug("admin socket command failed", "err", err)
		reply, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(reply)))
	_, _ = c.Write(append(n[:], reply...))
}

// readRequest reads one NUL-terminated request of at most MaxRequest
// bytes (a client that closes its write side ends it too).
func readRequest(r *bufio.Reader) (map[string]any, error) {
	var b []byte
	for {
		c, err := r.ReadByte()
		if err == io.EOF && len(b) > 0 {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		if c == 0 {
			break
		}
		if len(b) >= MaxRequest {
			return nil, fmt.Errorf("%w: longer than %d bytes", ErrBadRequest, MaxRequest)
		}
		b = append(b, c)
	}
	var req map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&req); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return req, nil
}

// Do runs the request's command and returns its JSON reply.
func (s *Server) Do(ctx context.Context, req map[string]any) ([]byte, error) {
	prefix, _ := req["prefix"].(string)
	if prefix == "" {
		return nil, fmt.Errorf("%w: no prefix", ErrBadRequest)
	}
	s.mu.Lock()
	c := s.commands[strings.Join(strings.Fields(prefix), " ")]
	s.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownCommand, prefix)
	}
	v, err := c.h(ctx, req)
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(v, "", "    ")
}

// replyError is the error of a command the server answered with
// {"error": msg}: ErrUnknownCommand when it is that (ferry's servers
// say so in those words), with the "adminsock: " prefix once.
func replyError(msg string) error {
	if rest, ok := strings.CutPrefix(msg, ErrUnknownCommand.Error()); ok {
		return fmt.Errorf("%w%s", ErrUnknownCommand, rest)
	}
	return errors.New("adminsock: " + strings.TrimPrefix(msg, "adminsock: "))
}

// Command sends the command words (e.g. "perf dump") to the admin
// socket at path and returns its JSON reply.
func Command(ctx context.Context, path string, words ...string) ([]byte, error) {
	req, err := json.Marshal(map[string]string{"prefix": strings.Join(words, " "), "format": "json"})
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(Timeout))
	}
	if _, err := c.Write(append(req, 0)); err != nil {
		return nil, err
	}
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, fmt.Errorf("adminsock: no reply: %w", err)
	}
	l := binary.BigEndian.Uint32(n[:])
	if l > MaxReply {
		return nil, fmt.Errorf("adminsock: a reply of %d bytes (at most %d)", l, MaxReply)
	}
	reply := make([]byte, l)
	if _, err := io.ReadFull(c, reply); err != nil {
		return nil, fmt.Errorf("adminsock: reply cut short: %w", err)
	}
	// A failed command is answered {"error": "..."} alone.
	var e map[string]json.RawMessage
	if json.Unmarshal(reply, &e) == nil && len(e) == 1 && e["error"] != nil {
		var msg string
		_ = json.Unmarshal(e["error"], &msg)
		return reply, replyError(msg)
	}
	return reply, nil
}
