package main

import (
	"fmt"
	"runtime/debug"
)

// runVersion prints the module version of the tool and of the redeliver
// library it was built with, from the build information the Go toolchain
// records in the binary.
func runVersion(args []string, e env) int {
	fs := newFlags("version", e)
	pos, code := parseArgs(fs, args, e)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, "version takes no arguments")
	}
	fmt.Fprintln(e.stdout, versionText(debug.ReadBuildInfo()))
	return exitOK
}

// versionText describes the build info: the tool's module version, the
// library's when it differs, the VCS revision when recorded, and Go's.
func versionText(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "redeliver (unknown version: built without module information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	s := fmt.Sprintf("redeliver %s %s", bi.Main.Path, v)
	for _, d := range bi.Deps {
		if d.Path == "github.com/redeliver-go/redeliver" {
			dv := d.Version
			if d.Replace != nil {
				dv += " => " + d.Replace.Path
				if d.Replace.Version != "" {
					dv += " " + d.Replace.Version
				}
			}
			s += fmt.Sprintf(", library %s", dv)
		}
	}
	var rev, modified string
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.modified":
			modified = kv.Value
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += ", revision " + rev
		if modified == "true" {
			s += " (modified)"
		}
	}
	return s + ", " + bi.GoVersion
}
