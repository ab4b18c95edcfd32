package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/redeliver-go/redeliver/hostconfig"
)

// fileResult is the JSON form of one checked file.
type fileResult struct {
	File     string    `json:"file"`
	OK       bool      `json:"ok"`
	Problems []problem `json:"problems"`
	Warnings []string  `json:"warnings"`
}

type problem struct {
	File string `json:"file"`
	Line int    `json:"line,omitempty"`
	Col  int    `json:"col,omitempty"`
	Env  string `json:"env,omitempty"`
	Path string `json:"path,omitempty"`
	Msg  string `json:"message"`
	Text string `json:"text"` // the line check prints
}

func runCheck(args []string, e env) int {
	fs := newFlags("check", e)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	strict := fs.Bool("strict", false, "fail (exit 1) on warnings too, as a CI gate should")
	functions := fs.String("functions", "", "comma-separated `names` of the functions the host runs: a trigger or policy for another one is a problem")
	files, code := parseArgs(fs, args, e)
	if code >= 0 {
		return code
	}
	if len(files) == 0 {
		return usageError(fs, "no host.json given")
	}
	var names []string
	for n := range strings.SplitSeq(*functions, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	status := exitOK
	var results []fileResult
	for _, file := range files {
		r := checkFile(file, names, *functions != "", e)
		if !r.OK || *strict && len(r.Warnings) > 0 {
			status = exitProblems
		}
		results = append(results, r)
		if *asJSON {
			continue
		}
		for _, p := range r.Problems {
			fmt.Fprintln(e.stdout, p.Text)
		}
		for _, w := range r.Warnings {
			fmt.Fprintln(e.stdout, "warning: "+w)
		}
		switch n, w := len(r.Problems), len(r.Warnings); {
		case n == 0 && w == 0:
			fmt.Fprintf(e.stdout, "%s: ok\n", file)
		case n == 0 && *strict:
			fmt.Fprintf(e.stdout, "%s: %d %s (-strict fails on warnings)\n", file, w, plural(w, "warning"))
		case n == 0:
			fmt.Fprintf(e.stdout, "%s: ok, %d %s\n", file, w, plural(w, "warning"))
		case w == 0:
			fmt.Fprintf(e.stdout, "%s: %d %s\n", file, n, plural(n, "problem"))
		default:
			fmt.Fprintf(e.stdout, "%s: %d %s, %d %s\n", file, n, plural(n, "problem"), w, plural(w, "warning"))
		}
	}
	if *asJSON {
		printJSON(e.stdout, results)
	}
	return status
}

// checkFile reads and checks one host.json; names are the host's functions
// when withNames.
func checkFile(file string, names []string, withNames bool, e env) fileResult {
	r := fileResult{File: file, Problems: []problem{}, Warnings: []string{}}
	data, err := os.ReadFile(file)
	if err != nil {
		r.Problems = append(r.Problems, problem{File: file, Msg: err.Error(), Text: err.Error()})
		return r
	}
	cfg, err := hostconfig.Loader{Environ: e.environ}.Parse(file, data)
	if err == nil && withNames {
		err = cfg.CheckFunctions(names)
	}
	var herr *hostconfig.Error
	switch {
	case errors.As(err, &herr):
		for _, p := range herr.Problems {
			r.Problems = append(r.Problems, problem{File: p.File, Line: p.Line, Col: p.Col, Env: p.Env, Path: p.Path, Msg: p.Msg,
				Text: strings.TrimPrefix(p.Error(), "hostconfig: ")})
		}
		r.Warnings = append(r.Warnings, herr.Warnings...)
	case err != nil:
		r.Problems = append(r.Problems, problem{File: file, Msg: err.Error(), Text: err.Error()})
	}
	if cfg != nil {
		r.Warnings = append(r.Warnings, cfg.Warnings...)
	}
	r.OK = len(r.Problems) == 0
	return r
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
