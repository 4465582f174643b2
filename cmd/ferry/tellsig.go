package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// A daemon describes its commands in answer to
// {"prefix": "get_command_descriptions"}: a JSON object of entries
// {"sig": [...], "help": ...}, each signature a list of literal words and
// arguments {"name", "type", "req", "n", "strings"} (Ceph's
// dump_cmddesc_to_json). tell matches the command words against them as
// the ceph CLI does (a subset of its argparse.validate_command): the
// literal words in order, then the arguments by position or as
// NAME=VALUE, typed.

// cmdDesc is one command signature.
type cmdDesc struct {
	words []string  // literal words, the prefix
	args  []argDesc // arguments, in order
}

// argDesc is one argument of a signature.
type argDesc struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Req     string `json:"req"`     // "false" for optional
	N       string `json:"n"`       // "N" for a list of any length
	Strings string `json:"strings"` // CephChoices: the choices, |-separated
}

func (a argDesc) optional() bool { return a.Req == "false" }

// errNoMatch means no signature matches the command words.
var errNoMatch = errors.New("no command matches")

// parseDescriptions parses get_command_descriptions output.
func parseDescriptions(out []byte) ([]cmdDesc, error) {
	var raw map[string]struct {
		Sig []json.RawMessage `json:"sig"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, fmt.Errorf("command descriptions: %w", err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys) // cmd000, cmd001...: the daemon's order
	var descs []cmdDesc
	for _, k := range keys {
		var d cmdDesc
		for _, e := range raw[k].Sig {
			var w string
			if json.Unmarshal(e, &w) == nil {
				if len(d.args) > 0 {
					break // a literal after an argument: not a form tell builds
				}
				d.words = append(d.words, w)
				continue
			}
			var a argDesc
			if err := json.Unmarshal(e, &a); err != nil || a.Name == "" {
				return nil, fmt.Errorf("command descriptions: bad argument %s in %s", e, k)
			}
			d.args = append(d.args, a)
		}
		if len(d.words) > 0 {
			descs = append(descs, d)
		}
	}
	return descs, nil
}

// matchCommand returns the JSON command for words from the first
// signature, among those with the longest literal prefix of words, whose
// arguments the rest of the words fill. format, if set, is added.
func matchCommand(descs []cmdDesc, words []string, format string) (string, error) {
	best := 0
	for _, d := range descs {
		if len(d.words) > best && hasPrefix(words, d.words) {
			best = len(d.words)
		}
	}
	if best == 0 {
		return "", fmt.Errorf("%w %q", errNoMatch, strings.Join(words, " "))
	}
	var errs []string
	for _, d := range descs {
		if len(d.words) != best || !hasPrefix(words, d.words) {
			continue
		}
		cmd, err := d.fill(words[best:])
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", d, err))
			continue
		}
		cmd["prefix"] = strings.Join(d.words, " ")
		if format != "" {
			cmd["format"] = format
		}
		b, err := json.Marshal(cmd)
		return string(b), err
	}
	return "", fmt.Errorf("%w %q: %s", errNoMatch, strings.Join(words, " "), strings.Join(errs, "; "))
}

func hasPrefix(words, prefix []string) bool {
	if len(words) < len(prefix) {
		return false
	}
	for i, w := range prefix {
		if words[i] != w {
			return false
		}
	}
	return true
}

// String gives the signature as Ceph's help prints it.
func (d cmdDesc) String() string {
	s := strings.Join(d.words, " ")
	for _, a := range d.args {
		v := "<" + a.Name + ">"
		if a.Strings != "" {
			v = a.Strings
		}
		if a.N == "N" {
			v += "..."
		}
		if a.optional() {
			v = "[" + v + "]"
		}
		s += " " + v
	}
	return s
}

// fill assigns the words after the prefix to d's arguments: NAME=VALUE
// words by name, the others by position.
func (d cmdDesc) fill(rest []string) (map[string]any, error) {
	cmd := map[string]any{}
	var pos []string
	for _, w := range rest {
		if k, v, ok := strings.Cut(w, "="); ok && d.arg(k) != nil {
			a := d.arg(k)
			val, err := a.convert(v)
			if err != nil {
				return nil, err
			}
			if a.N == "N" {
				l, _ := cmd[a.Name].([]any)
				cmd[a.Name] = append(l, val)
			} else {
				cmd[a.Name] = val
			}
			continue
		}
		pos = append(pos, w)
	}
	for _, a := range d.args {
		if _, set := cmd[a.Name]; set {
			continue
		}
		if len(pos) == 0 {
			if !a.optional() {
				return nil, fmt.Errorf("missing <%s>", a.Name)
			}
			continue
		}
		if a.N == "N" {
			var l []any
			for _, w := range pos {
				v, err := a.convert(w)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			cmd[a.Name], pos = l, nil
			continue
		}
		v, err := a.convert(pos[0])
		if err != nil {
			if a.optional() {
				continue // an optional argument the word is not: try the next
			}
			return nil, err
		}
		cmd[a.Name], pos = v, pos[1:]
	}
	if len(pos) > 0 {
		return nil, fmt.Errorf("too many words: %q", strings.Join(pos, " "))
	}
	return cmd, nil
}

func (d cmdDesc) arg(name string) *argDesc {
	for i := range d.args {
		if d.args[i].Name == name {
			return &d.args[i]
		}
	}
	return nil
}

// convert types one word for a as the daemon expects it.
func (a argDesc) convert(w string) (any, error) {
	switch a.Type {
	case "CephInt":
		n, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("<%s>: %q is not an integer", a.Name, w)
		}
		return n, nil
	case "CephFloat":
		f, err := strconv.ParseFloat(w, 64)
		if err != nil {
			return nil, fmt.Errorf("<%s>: %q is not a number", a.Name, w)
		}
		return f, nil
	case "CephBool":
		switch strings.ToLower(w) {
		case "true", "yes", "1", "--" + strings.ReplaceAll(a.Name, "_", "-"):
			return true, nil
		case "false", "no", "0":
			return false, nil
		}
		return nil, fmt.Errorf("<%s>: %q is not true or false", a.Name, w)
	case "CephOsdName":
		// osd.N or N, sent as the number (Ceph's CephOsdName).
		n, err := strconv.ParseInt(strings.TrimPrefix(w, "osd."), 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("<%s>: %q is not an OSD id (N or osd.N)", a.Name, w)
		}
		return n, nil
	case "CephChoices":
		for _, c := range strings.Split(a.Strings, "|") {
			if c == w {
				return w, nil
			}
		}
		return nil, fmt.Errorf("<%s>: %q is not one of %s", a.Name, w, a.Strings)
	}
	return w, nil
}
