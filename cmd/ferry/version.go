package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// versionString describes this binary: the module version (or "devel"),
// the VCS revision and time it was built from when Go recorded them, and
// the Go version.
func versionString() string {
	v, rev, when, dirty := "devel", "", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	out := "ferry " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		out += " " + rev
		if dirty {
			out += "+dirty"
		}
		if when != "" {
			out += " " + when
		}
	}
	return fmt.Sprintf("%s %s %s/%s", out, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
