// Command apidoc checks that the API review (docs/API.md) and the exported
// API (the api/*.txt files that tools/apitxt writes) name the same things:
// every exported name of every public package, and every method of its
// exported types, is named in that package's section of the review, and
// the review names nothing a package does not export (a struct's field or
// an interface's method may be named, as Policy.MaxDelay, but need not).
//
// Usage:
//
//	apidoc -doc docs/API.md -module github.com/redeliver-go/redeliver api/*.txt
//
// A package's section is the part of the document under a heading whose
// text is the package's import path without the module prefix, in
// backquotes ("## `stream`", "## `adapters/franz/share`"), up to the next
// heading of the same level or higher; deeper headings group its names. A
// name is
// named when it appears in backquotes at the start of a code span: `Batch`,
// `NewProcessor(h, opts...)`, `Processor.Skip`.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

func main() {
	doc := flag.String("doc", "docs/API.md", "the API review")
	module := flag.String("module", "github.com/redeliver-go/redeliver", "the module path prefix of the packages")
	flag.Parse()
	api := map[string]map[string]bool{} // package -> names: true for the names the review must name
	for _, f := range flag.Args() {
		if err := readAPI(f, *module, api); err != nil {
			fmt.Fprintln(os.Stderr, "apidoc:", err)
			os.Exit(2)
		}
	}
	sections, err := readDoc(*doc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apidoc:", err)
		os.Exit(2)
	}
	var problems []string
	for _, pkg := range sortedKeys(api) {
		named, ok := sections[pkg]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s has no section for package %s (a heading \"## `%s`\")", *doc, pkg, pkg))
			continue
		}
		for _, name := range sortedKeys(api[pkg]) {
			if api[pkg][name] && !named[name] {
				problems = append(problems, fmt.Sprintf("%s: package %s: %s is exported but not named in its section", *doc, pkg, name))
			}
		}
	}
	for _, pkg := range sortedKeys(sections) {
		names, ok := api[pkg]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s has a section for %s, which is no public package", *doc, pkg))
			continue
		}
		for _, name := range sortedKeys(sections[pkg]) {
			if _, known := names[name]; !known {
				problems = append(problems, fmt.Sprintf("%s: package %s: its section names %s, which the package does not export", *doc, pkg, name))
			}
		}
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

var (
	featureRE = regexp.MustCompile(`^pkg ([^,]+), (func|type|var|const) ([A-Za-z0-9_]+)`)
	methodRE  = regexp.MustCompile(`^pkg ([^,]+), method \(\*?([A-Za-z0-9_]+)\) ([A-Za-z0-9_]+)`)
	// A struct's field or an interface's method: the review may name them
	// (Policy.MaxDelay), but need not.
	memberRE = regexp.MustCompile(`^pkg ([^,]+), type ([A-Za-z0-9_]+) (?:struct|interface), ([A-Za-z0-9_]+)`)
)

// readAPI adds the exported names of an api/*.txt file to api.
func readAPI(file, module string, api map[string]map[string]bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	add := func(pkg, name string, required bool) {
		pkg = strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if pkg == "" {
			pkg = "."
		}
		if api[pkg] == nil {
			api[pkg] = map[string]bool{}
		}
		api[pkg][name] = api[pkg][name] || required
	}
	for sc.Scan() {
		line := sc.Text()
		if m := methodRE.FindStringSubmatch(line); m != nil {
			add(m[1], m[2]+"."+m[3], true)
		} else if m := memberRE.FindStringSubmatch(line); m != nil {
			add(m[1], m[2]+"."+m[3], false)
		} else if m := featureRE.FindStringSubmatch(line); m != nil {
			add(m[1], m[3], true)
		}
	}
	return sc.Err()
}

var (
	headingRE = regexp.MustCompile("^#{2,4} `([a-z0-9/._]+)`")
	// A code span that starts with an exported name, or Type.Method.
	spanRE = regexp.MustCompile("`([A-Z][A-Za-z0-9_]*(?:\\.[A-Z][A-Za-z0-9_]*)?)[^`]*`")
)

// readDoc returns the names each package's section names.
func readDoc(file string) (map[string]map[string]bool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	sections := map[string]map[string]bool{}
	var cur map[string]bool
	level := 0 // the heading level of the current package's section
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			if sections[m[1]] == nil {
				sections[m[1]] = map[string]bool{}
			}
			cur, level = sections[m[1]], headingLevel(line)
			continue
		}
		if l := headingLevel(line); l > 0 && l <= level {
			cur = nil // a heading as high as the package's ends its section
			continue
		}
		if cur == nil {
			continue
		}
		for _, m := range spanRE.FindAllStringSubmatch(line, -1) {
			cur[m[1]] = true
		}
	}
	return sections, nil
}

// headingLevel is the level of a Markdown heading line, 0 for other lines.
func headingLevel(line string) int {
	n := len(line) - len(strings.TrimLeft(line, "#"))
	if n == 0 || n > 6 || !strings.HasPrefix(line[n:], " ") {
		return 0
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
