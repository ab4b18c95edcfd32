// Command modproxy writes a module proxy on disk, in the layout the go
// command reads through GOPROXY=file://DIR, holding the modules of a source
// tree at one version: for each module, DIR/<escaped path>/@v/ gets
// <version>.info, <version>.mod, <version>.zip and a list line, the zip made
// as the go command makes it (nested modules and vendor directories left
// out).
//
// Usage:
//
//	modproxy -out DIR -version VERSION MODULE_DIR...
//
// It is how scripts/rehearse.sh serves a release candidate of every module
// to fresh programs outside the workspace, as a user's build would fetch
// them once they are published.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func main() {
	out := flag.String("out", "", "proxy directory to write (created if missing)")
	version := flag.String("version", "", "version to publish every module at, e.g. v0.1.0-rc.1")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: modproxy -out DIR -version VERSION MODULE_DIR...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || *version == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if !semver.IsValid(*version) || semver.Canonical(*version) != *version {
		fmt.Fprintf(os.Stderr, "modproxy: -version %q is not a canonical semantic version (vMAJOR.MINOR.PATCH[-pre])\n", *version)
		os.Exit(2)
	}
	for _, dir := range flag.Args() {
		path, err := publish(*out, *version, dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "modproxy: %s: %v\n", dir, err)
			os.Exit(1)
		}
		fmt.Printf("%s@%s\n", path, *version)
	}
}

// publish writes the module in dir at version into the proxy at out and
// returns its path.
func publish(out, version, dir string) (string, error) {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	f, err := modfile.ParseLax(filepath.Join(dir, "go.mod"), gomod, nil)
	if err != nil {
		return "", err
	}
	if f.Module == nil {
		return "", errors.New("go.mod has no module line")
	}
	path := f.Module.Mod.Path
	if err := module.CheckPathMajor(version, pathMajor(path)); err != nil {
		return "", err
	}
	escaped, err := module.EscapePath(path)
	if err != nil {
		return "", err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return "", err
	}
	at := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return "", err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err := os.WriteFile(filepath.Join(at, ev+".info"), info, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(at, ev+".mod"), gomod, 0o644); err != nil {
		return "", err
	}
	zf, err := os.Create(filepath.Join(at, ev+".zip"))
	if err != nil {
		return "", err
	}
	if err := zip.CreateFromDir(zf, module.Version{Path: path, Version: version}, dir); err != nil {
		zf.Close()
		return "", err
	}
	if err := zf.Close(); err != nil {
		return "", err
	}
	return path, addToList(filepath.Join(at, "list"), version)
}

// pathMajor returns the /vN suffix of a module path, or "".
func pathMajor(path string) string {
	_, major, ok := module.SplitPathVersion(path)
	if !ok {
		return ""
	}
	return major
}

// addToList adds version to the proxy's version list, once.
func addToList(list, version string) error {
	old, err := os.ReadFile(list)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, v := range strings.Fields(string(old)) {
		if v == version {
			return nil
		}
	}
	return os.WriteFile(list, append(old, version+"\n"...), 0o644)
}
