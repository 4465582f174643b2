package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/ceph/cephconf"
	"github.com/ferrymsg/ferry/ceph/monc"
	"github.com/ferrymsg/ferry/msg"
	"github.com/ferrymsg/ferry/msgr"
)

// runTell is `ferry tell`: `ceph tell` for mons and OSDs. The words are
// matched against the target's command signatures
// (get_command_descriptions), so `osd find 0` gives {"prefix": "osd
// find", "id": 0} as the ceph CLI sends it; one word holding a JSON
// object is sent as it is. A mon command goes to mon.X itself, as the
// monmap names it (or the mon of rank X, for a number, as librados
// reads it): the client hunts across the mons it was given, learns the
// others from the monmap and moves its session to mon.X if it reached
// another; a name the monmap does not list fails, naming those it does.
// An OSD command goes to the OSD itself, at the address the OSD map
// gives.
func runTell(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "tell")
	mon := fs.String("mon", "", "the mon to ask, an address (v2:IP:PORT/NONCE) or a mon host list; instead of -c's mon host")
	format := fs.String("format", "", `output format asked of the daemon, e.g. json or json-pretty (adds "format" to the command)`)
	timeout := fs.Duration("timeout", 30*time.Second, "overall time limit, connection setup included")
	verbose := fs.Bool("verbose", false, "log debug messages (on stderr)")
	af := addAuthFlags(fs)
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if len(pos) < 2 {
		return usageError(e, fs, "want a target (mon.X or osd.N) and a command, got %d arguments", len(pos))
	}
	if *timeout <= 0 {
		return usageError(e, fs, "--timeout must be positive")
	}
	target, err := msg.ParseEntityName(pos[0])
	monName := ""
	if err != nil || (target.Type != msg.EntityMon && target.Type != msg.EntityOSD) {
		// Mons are named by letters: accept mon.a as well as mon.0.
		if t, _, found := strings.Cut(pos[0], "."); !found || t != "mon" {
			return usageError(e, fs, "target %q: want mon.X or osd.N", pos[0])
		}
		target = msg.EntityName{Type: msg.EntityMon}
	}
	if target.Type == msg.EntityMon {
		if monName = strings.TrimPrefix(pos[0], "mon."); monName == "" {
			return usageError(e, fs, "target %q: want mon.X, X a mon's name or rank", pos[0])
		}
	}
	words := pos[1:]
	cmd, err := buildCommand(words, *format)
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	ca, err := af.resolve()
	if err != nil {
		return usageError(e, fs, "%v", err)
	}
	mons := ca.Mons
	if *mon != "" {
		if mons, err = cephconf.ParseMonHost(*mon); err != nil {
			return usageError(e, fs, "--mon: %v", err)
		}
	}
	if len(mons) == 0 {
		return usageError(e, fs, "no mon to ask: give --mon ADDR or -c ceph.conf")
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	log := newLogger(e, *verbose)
	cfg := monc.Config{Mons: mons, Logger: log, Msgr: msgr.Config{Logger: log}}
	if err := ca.configureMonc(&cfg); err != nil {
		fmt.Fprintf(e.stderr, "ferry tell: %v\n", err)
		return exitError
	}
	c, err := monc.Dial(ctx, cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry tell: %v\n", err)
		return exitError
	}
	defer c.Close()
	run := func(cmd string) (*monc.CommandResult, error) {
		if target.Type == msg.EntityMon {
			return c.MonCommandTo(ctx, monName, []string{cmd}, nil)
		}
		return c.OSDCommand(ctx, int(target.Num), []string{cmd}, nil)
	}
	if !isJSONCommand(words) {
		// Match the words against the target's own command signatures, as
		// the ceph CLI does; without them, the words as buildCommand reads
		// them.
		res, err := run(`{"prefix": "get_command_descriptions"}`)
		if err == nil && res.R == 0 {
			descs, derr := parseDescriptions(res.Output)
			if derr == nil {
				if cmd, err = matchCommand(descs, words, *format); err != nil {
					fmt.Fprintf(e.stderr, "ferry tell: %s: %v\n", pos[0], err)
					return exitError
				}
			}
		}
		log.Debug("command", "target", pos[0], "json", cmd)
	}
	res, err := run(cmd)
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry tell: %s: %v\n", pos[0], err)
		return exitError
	}
	if len(res.Output) > 0 {
		out := res.Output
		if out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		_, _ = e.stdout.Write(out)
	}
	if res.R != 0 {
		fmt.Fprintf(e.stderr, "ferry tell: %s: %v\n", pos[0], res.Err())
		return exitError
	}
	if res.RS != "" {
		fmt.Fprintln(e.stderr, res.RS)
	}
	return exitOK
}

// isJSONCommand reports whether the command words are one JSON object.
func isJSONCommand(words []string) bool {
	return len(words) == 1 && strings.HasPrefix(strings.TrimSpace(words[0]), "{")
}

// buildCommand turns the command words into the JSON command Ceph
// daemons take: one word holding a JSON object is used as it is;
// otherwise the words up to the first KEY=VALUE are the prefix ("mon
// stat", "version"), and each KEY=VALUE is an argument, an integer or a
// boolean when it reads as one ("osd find id=0"). format, if set, becomes
// the "format" argument.
func buildCommand(words []string, format string) (string, error) {
	if isJSONCommand(words) {
		var obj map[string]any
		if err := json.Unmarshal([]byte(words[0]), &obj); err != nil {
			return "", fmt.Errorf("command %q is not a JSON object: %v", words[0], err)
		}
		if _, ok := obj["prefix"]; !ok {
			return "", errors.New(`a JSON command needs a "prefix"`)
		}
		if format != "" {
			obj["format"] = format
			b, _ := json.Marshal(obj)
			return string(b), nil
		}
		return words[0], nil
	}
	cmd := map[string]any{}
	var prefix []string
	for _, w := range words {
		k, v, isArg := strings.Cut(w, "=")
		if !isArg {
			if len(cmd) > 0 {
				return "", fmt.Errorf("command word %q after an argument: put KEY=VALUE arguments last", w)
			}
			prefix = append(prefix, w)
			continue
		}
		if k == "" || k == "prefix" {
			return "", fmt.Errorf("bad argument %q: want KEY=VALUE", w)
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			cmd[k] = n
		} else if b, err := strconv.ParseBool(v); err == nil && (v == "true" || v == "false") {
			cmd[k] = b
		} else {
			cmd[k] = v
		}
	}
	if len(prefix) == 0 {
		return "", errors.New("no command words before the arguments")
	}
	cmd["prefix"] = strings.Join(prefix, " ")
	if format != "" {
		cmd["format"] = format
	}
	b, err := json.Marshal(cmd)
	return string(b), err
}
