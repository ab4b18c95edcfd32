package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlags returns the flag set of the command called name.
func newFlags(name string, e env) *flag.FlagSet {
	var c command
	for _, c = range commands {
		if c.name == name {
			break
		}
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: redeliver %s %s\n\n%s.\n", c.name, c.args, strings.ToUpper(c.short[:1])+c.short[1:])
		if doc := docs[name]; doc != "" {
			fmt.Fprintf(fs.Output(), "\n%s\n", doc)
		}
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintf(fs.Output(), "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// docs completes each command's usage.
var docs = map[string]string{
	"stopped": `Lists what the host's exhaustion action "stop" holds stopped, as its status
page shows it: a partition (partition ordering), a key (key ordering: its
record at OFFSET is stopped, its later records wait, the partition's other
keys go on) or a record (a share group), with since when and the last error.
A -function the host does not run is an error, with the name meant when one
is close. The exit status is 0 when the host was read (whether or not
something is stopped), 1 when it cannot be read, 2 on a usage error.

` + hostDoc,
	"resume": `Releases what "stop" holds: the partition's batch, or with -key the key's
stopped record (-offset names the record instead, for a key that is not
text or in a share group), is delivered again with a fresh retry count. A
partition in key ordering with keys stopped needs -key or -offset: the tool
lists its stopped keys. The tool reads the host's status first: a function,
partition or key that is not stopped is an error naming what is stopped (or
the name meant). The exit status is 0 once the host released it, 1 when it
is not stopped or the host refused or cannot be reached, 2 on a usage error.

` + hostDoc,
	"skip": `Releases what "stop" holds past it: the partition's batch, or with -key the
key's stopped record (-offset names the record instead), is settled as if
its exhaustion action had succeeded (the checkpoint passes it; the key's
next record goes), and is not delivered again. The host answers once the
checkpoint past it is written. Otherwise as resume: a partition in key
ordering with keys stopped needs -key or -offset; what is not stopped is an
error naming what is. The exit status is 0 once the host released it, 1
when it is not stopped or the host refused or cannot be reached, 2 on a
usage error.

` + hostDoc,
	"check": `Each file is read as the host reads it, environment overrides
(AzureFunctionsJobHost__...) included. Problems are printed one a line as
file:line:col: path: message; warnings (what is read but not in force) are
printed too and do not fail the check unless -strict is given (a CI gate
should give it). The exit status is 0 when every file is valid, 1 when one
has problems (or, with -strict, warnings), 2 on a usage error.`,
	"explain": `Prints the policy in force (host-wide, or the function's), what it does in
words with the delays of its first retries and its worst case, each value in
force with where it was written (file:line:col, an environment variable, or
a default), and the function's trigger. A function the file does not name
runs under the host-wide policy: explain shows that policy and says so.`,
	"state": `The metadata is what redeliver commits with the checkpoint of a batch it
retries, e.g. rd1;o=40;r=3;f=1732262400000;d=5000;n=1732262405000: the
record it belongs to (o), the retry due (r; with s=1, the retry that
started), the first failure (f), the last backoff (d), when the retry is due
(n), the time waited out in outages (w), and a handler's RetryResult (rr).
It is read with the decoder the engine uses. The exit status is 1 for
metadata another tool wrote or damaged metadata.`,
	"offsets": `Reads the group's committed offsets and the partitions' end offsets, and
decodes the retry state committed with each: a partition whose checkpoint is
withheld shows its retry number, when the retry is due and since when the
batch fails. With -config (and -function), the retry limit of the policy in
force is shown too ("retry 3 of 10"); a handler's RetryResult committed with
the state replaces it. A -topic the brokers do not know, or a -function the
host.json does not name, is an error (exit status 1); so is a -group the
brokers do not know, with the name it may have meant.`,
}

// parseArgs parses flags and positional arguments, which may be mixed. It
// returns the positional arguments, and an exit status to return at once
// (-1 when the command goes on): 0 after -h, which prints the usage to
// stdout, and 2 after a bad flag, whose error and the usage go to stderr.
func parseArgs(fs *flag.FlagSet, args []string, e env) ([]string, int) {
	// The flag package prints the usage itself on -h and on a bad flag:
	// it is printed here instead, once, where it belongs.
	usage := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = usage }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(e.stdout)
				usage()
				return nil, exitOK
			}
			usage()
			return nil, exitUsage
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, -1
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), -1
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// usageError reports a usage error of the command and returns exitUsage.
func usageError(fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(fs.Output(), "redeliver %s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fmt.Fprintf(fs.Output(), "Run 'redeliver %s -h' for usage.\n", fs.Name())
	return exitUsage
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
