// Command apitxt prints the exported API of a module's packages, one
// feature a line, sorted, in the manner of the Go project's api/*.txt
// files:
//
//	pkg github.com/redeliver-go/redeliver/stream, func NewProcessor(Handler, ...Option) (*Processor, error)
//	pkg github.com/redeliver-go/redeliver/stream, type Batch struct, Records []Record
//
// Run from a module's directory, it reads every package of that module but
// internal ones, main packages and tests. scripts/api.sh keeps one such
// file per public module under api/, so that a change to the public API
// shows in review as a change to that file.
package main

import (
	"fmt"
	"go/types"
	"os"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/types/typeutil"
)

func main() {
	patterns := os.Args[1:]
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apitxt:", err)
		os.Exit(1)
	}
	if packages.PrintErrors(pkgs) > 0 {
		os.Exit(1)
	}
	var lines []string
	for _, p := range pkgs {
		if p.Name == "main" || isInternal(p.PkgPath) {
			continue
		}
		lines = append(lines, features(p.Types)...)
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}

func isInternal(path string) bool {
	for _, e := range strings.Split(path, "/") {
		if e == "internal" {
			return true
		}
	}
	return false
}

// features lists the exported names of pkg, with their types.
func features(pkg *types.Package) []string {
	prefix := "pkg " + pkg.Path() + ", "
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Path()
	}
	var sig func(*types.Signature) string
	str := func(t types.Type) string {
		if s, ok := t.(*types.Signature); ok {
			return "func" + sig(s)
		}
		return types.TypeString(t, qual)
	}
	// sig prints a signature without parameter names: renaming a
	// parameter does not change the API.
	sig = func(s *types.Signature) string {
		tuple := func(t *types.Tuple, variadic bool) []string {
			var ts []string
			for i := 0; i < t.Len(); i++ {
				typ := t.At(i).Type()
				if variadic && i == t.Len()-1 {
					ts = append(ts, "..."+str(typ.(*types.Slice).Elem()))
					continue
				}
				ts = append(ts, str(typ))
			}
			return ts
		}
		b := "(" + strings.Join(tuple(s.Params(), s.Variadic()), ", ") + ")"
		switch r := tuple(s.Results(), false); len(r) {
		case 0:
		case 1:
			b += " " + r[0]
		default:
			b += " (" + strings.Join(r, ", ") + ")"
		}
		return b
	}
	var out []string
	add := func(format string, args ...any) { out = append(out, prefix+fmt.Sprintf(format, args...)) }
	var mset typeutil.MethodSetCache
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			add("const %s %s = %s", name, str(obj.Type()), obj.Val().ExactString())
		case *types.Var:
			add("var %s %s", name, str(obj.Type()))
		case *types.Func:
			add("func %s%s", name, sig(obj.Type().(*types.Signature)))
		case *types.TypeName:
			tparams := ""
			if n, ok := obj.Type().(*types.Named); ok && n.TypeParams().Len() > 0 {
				var ps []string
				for i := 0; i < n.TypeParams().Len(); i++ {
					tp := n.TypeParams().At(i)
					ps = append(ps, tp.Obj().Name()+" "+str(tp.Constraint()))
				}
				tparams = "[" + strings.Join(ps, ", ") + "]"
			}
			if obj.IsAlias() {
				add("type %s%s = %s", name, tparams, str(types.Unalias(obj.Type())))
				continue
			}
			under := obj.Type().Underlying()
			switch u := under.(type) {
			case *types.Struct:
				add("type %s%s struct", name, tparams)
				for i := 0; i < u.NumFields(); i++ {
					f := u.Field(i)
					if !f.Exported() {
						continue
					}
					if f.Embedded() {
						add("type %s struct, embedded %s", name, str(f.Type()))
					} else {
						add("type %s struct, %s %s", name, f.Name(), str(f.Type()))
					}
				}
			case *types.Interface:
				var ms []string
				for i := 0; i < u.NumMethods(); i++ {
					m := u.Method(i)
					if m.Exported() {
						ms = append(ms, m.Name())
						add("type %s interface, %s%s", name, m.Name(), sig(m.Type().(*types.Signature)))
					} else {
						ms = append(ms, "unexported methods")
					}
				}
				sort.Strings(ms)
				add("type %s%s interface { %s }", name, tparams, strings.Join(ms, ", "))
			default:
				add("type %s%s %s", name, tparams, str(under))
			}
			// Methods, promoted ones included, on T and on *T.
			for _, m := range typeutil.IntuitiveMethodSet(obj.Type(), &mset) {
				fn := m.Obj().(*types.Func)
				if !fn.Exported() {
					continue
				}
				recv := name
				if _, ptr := fn.Type().(*types.Signature).Recv().Type().(*types.Pointer); ptr && m.Indirect() {
					recv = "*" + name
				}
				if _, isIface := under.(*types.Interface); isIface {
					continue
				}
				add("method (%s) %s%s", recv, fn.Name(), sig(fn.Type().(*types.Signature)))
			}
		}
	}
	return out
}
