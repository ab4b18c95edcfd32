// Command redeliver is the operator's tool for redeliver: it checks and
// explains host.json files, decodes the retry state redeliver commits with
// a checkpoint, shows a consumer group's committed offsets with that
// state decoded, and lists and changes the entries of the re-drive store.
//
// Usage:
//
//	redeliver <command> [flags] [arguments]
//
// The commands:
//
//	check    validate host.json files: problems as file:line:col, warnings
//	explain  the effective policies, their schedules, and where each value came from
//	state    decode a committed retry-state string (offset commit metadata)
//	offsets  a consumer group's committed offsets with their decoded retry state
//	parked   list, requeue and complete entries of the re-drive store
//	stopped  what a running host holds stopped: partitions, and keys in key ordering
//	resume   release a stopped partition or key of a running host: delivered again, a fresh count
//	skip     release a stopped partition or key of a running host past its record
//	version  the tool's module version and the Go version it was built with
//
// "redeliver <command> -h" describes a command's flags. The exit status is
// 0 on success, 1 when the command found problems or failed, and 2 on a
// usage error.
package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr, environ: os.Environ, now: time.Now}))
}

// env is what a command reads and writes besides its arguments, injected
// by the tests.
type env struct {
	stdout, stderr io.Writer
	environ        func() []string
	now            func() time.Time
}

// The exit statuses.
const (
	exitOK       = 0
	exitProblems = 1
	exitUsage    = 2
)

// command is one verb of the tool.
type command struct {
	name, args, short string
	run               func(args []string, e env) int
}

// commands lists the verbs. (It is filled in by init: the commands' usage
// reads it.)
var commands []command

func init() {
	commands = []command{
		{"check", "[-json] [-strict] [-functions a,b] host.json...", "validate host.json files", runCheck},
		{"explain", "[-json] host.json [function]", "the effective policies, their schedules, and where each value came from", runExplain},
		{"state", "[-json] metadata", "decode a committed retry-state string", runState},
		{"offsets", "-brokers host:port,... -group name [-topic t] [-config host.json [-function f]] [-json]", "a group's committed offsets with their decoded retry state", runOffsets},
		{"parked", "<list|requeue|complete> [flags] [key...]", "list, requeue and complete entries of the re-drive store", runParked},
		{"stopped", "-url http://host:port [-function f] [-json]", "what a running host holds stopped: partitions, and keys in key ordering", runStopped},
		{"resume", "-url http://host:port [-key k | -offset n] [-json] function topic/partition", "release a stopped partition or key of a running host: delivered again, with a fresh count", runResume},
		{"skip", "-url http://host:port [-key k | -offset n] [-json] function topic/partition", "release a stopped partition or key of a running host past its record, as if its exhaustion action succeeded", runSkip},
		{"version", "", "the tool's module version and the Go version it was built with", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "redeliver is the operator's tool for redeliver consumers.\n\nUsage:\n\n\tredeliver <command> [flags] [arguments]\n\nThe commands are:\n\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-8s %s\n", c.name, c.short)
	}
	fmt.Fprintf(w, "\nUse \"redeliver <command> -h\" for more about a command.\n")
}

func run(args []string, e env) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			return run([]string{args[1], "-h"}, e)
		}
		usage(e.stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], e)
		}
	}
	fmt.Fprintf(e.stderr, "redeliver %s: unknown command\nRun 'redeliver -h' for usage.\n", args[0])
	return exitUsage
}
