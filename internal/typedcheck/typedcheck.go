// Package typedcheck finds errors a package builds without a sentinel:
// calls of errors.New outside a package-level var declaration, and of
// fmt.Errorf whose format has no %w. Tests of the protocol engines run it
// over their own sources, so a handshake failure cannot become an
// untyped string again.
package typedcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Untyped returns the positions ("file.go:LINE: call") of the untyped
// error constructions in the non-test Go files of dir.
func Untyped(t testing.TB, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if gd, ok := decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				continue // the sentinel block
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				bad := false
				switch {
				case pkg.Name == "errors" && sel.Sel.Name == "New":
					bad = true
				case pkg.Name == "fmt" && sel.Sel.Name == "Errorf":
					bad = true
					if len(call.Args) > 0 {
						if lit, ok := call.Args[0].(*ast.BasicLit); ok {
							if s, err := strconv.Unquote(lit.Value); err == nil && strings.Contains(s, "%w") {
								bad = false
							}
						}
					}
				}
				if bad {
					p := fset.Position(call.Pos())
					out = append(out, filepath.Base(p.Filename)+":"+strconv.Itoa(p.Line)+": "+pkg.Name+"."+sel.Sel.Name)
				}
				return true
			})
		}
	}
	return out
}
