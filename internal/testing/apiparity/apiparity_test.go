// Package apiparity_test keeps the module's public API the same on every
// operating system, so that a program embedding the packages compiles
// anywhere: on systems other than Linux the ports' constructors fail with
// frame.ErrNotSupported, but every name they export is there.
package apiparity_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the module's root directory, from this package's.
const root = "../../.."

// others are the systems whose API must be Linux's.
var others = []string{"darwin", "windows"}

// TestAPIParity compares, for every public package of the module, each
// exported declaration and method built for Linux with the same one built
// for each of the others, by signature: a name missing on either side or
// declared differently fails the test.
func TestAPIParity(t *testing.T) {
	dirs := publicPackages(t)
	if len(dirs) == 0 {
		t.Fatal("no public package found under the module root")
	}
	t.Logf("packages: %s", strings.Join(dirs, " "))
	for _, dir := range dirs {
		linux := exported(t, dir, "linux")
		for _, goos := range others {
			other := exported(t, dir, goos)
			for _, key := range slices.Sorted(maps.Keys(linux)) {
				switch sig, ok := other[key]; {
				case !ok:
					t.Errorf("%s: missing on %s: %s", dir, goos, linux[key])
				case sig != linux[key]:
					t.Errorf("%s: differs on %s: %s, on linux: %s", dir, goos, sig, linux[key])
				}
			}
			for _, key := range slices.Sorted(maps.Keys(other)) {
				if _, ok := linux[key]; !ok {
					t.Errorf("%s: missing on linux: %s (on %s)", dir, other[key], goos)
				}
			}
		}
	}
}

// publicPackages lists the directories, relative to the module root, of
// the packages an embedder can import: every package but the commands and
// those under internal/ and testdata/.
func publicPackages(t *testing.T) []string {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		name := d.Name()
		if name == "internal" || name == "testdata" || rel != "." && (name[0] == '.' || name[0] == '_') {
			return filepath.SkipDir
		}
		p, err := buildContext("linux").ImportDir(path, 0)
		if _, ok := errors.AsType[*build.NoGoError](err); ok || err == nil && p.Name == "main" {
			return nil
		}
		if err != nil {
			return err
		}
		dirs = append(dirs, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

func buildContext(goos string) *build.Context {
	ctx := build.Default
	ctx.GOOS = goos
	ctx.CgoEnabled = false
	return &ctx
}

// exported returns the exported declarations of the package in dir (relative
// to the module root) as built for goos, keyed by name ("Type.Method" for
// a method), each as a one-line signature. A package without files for
// goos has none.
func exported(t *testing.T, dir, goos string) map[string]string {
	path := filepath.Join(root, filepath.FromSlash(dir))
	p, err := buildContext(goos).ImportDir(path, 0)
	if _, ok := errors.AsType[*build.NoGoError](err); ok {
		return nil
	}
	if err != nil {
		t.Fatalf("%s for %s: %v", dir, goos, err)
	}
	api := signatures{fset: token.NewFileSet(), decls: map[string]string{}}
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(api.fset, filepath.Join(path, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			api.add(d)
		}
	}
	return api.decls
}

// signatures collects exported declarations as one-line signatures:
// parameter names are left out, struct types show only their exported and
// embedded fields, one field a name, and every type is printed by
// go/printer with its white space collapsed, so that only what an importer
// sees is compared.
type signatures struct {
	fset  *token.FileSet
	decls map[string]string
}

func (s signatures) add(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		switch {
		case !d.Name.IsExported():
		case d.Recv == nil:
			s.decls[d.Name.Name] = "func " + d.Name.Name + s.typeParams(d.Type.TypeParams) + s.signature(d.Type)
		default:
			recv := d.Recv.List[0].Type
			if base := receiverBase(recv); ast.IsExported(base) {
				s.decls[base+"."+d.Name.Name] = "func (" + s.expr(recv) + ") " + d.Name.Name + s.signature(d.Type)
			}
		}
	case *ast.GenDecl:
		var typ ast.Expr      // of the last spec with a type or values,
		var values []ast.Expr // which a constant spec without either repeats
		for _, spec := range d.Specs {
			switch spec := spec.(type) {
			case *ast.TypeSpec:
				if spec.Name.IsExported() {
					sig := "type " + spec.Name.Name + s.typeParams(spec.TypeParams) + " "
					if spec.Assign.IsValid() {
						sig += "= "
					}
					s.decls[spec.Name.Name] = sig + s.typeExpr(spec.Type)
				}
			case *ast.ValueSpec:
				if d.Tok == token.VAR || spec.Type != nil || spec.Values != nil {
					typ, values = spec.Type, spec.Values
				}
				for i, name := range spec.Names {
					if !name.IsExported() {
						continue
					}
					sig := d.Tok.String() + " " + name.Name
					if typ != nil {
						sig += " " + s.expr(typ)
					}
					if d.Tok == token.CONST && i < len(values) {
						sig += " = " + s.expr(values[i])
					}
					s.decls[name.Name] = sig
				}
			}
		}
	}
}

// receiverBase is the name of a receiver's type: T in T, *T and *T[P].
func receiverBase(x ast.Expr) string {
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
		case *ast.ParenExpr:
			x = e.X
		case *ast.IndexExpr:
			x = e.X
		case *ast.IndexListExpr:
			x = e.X
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}

// signature prints a function type without its parameter names:
// "(int, []byte) (int, error)".
func (s signatures) signature(f *ast.FuncType) string {
	sig := "(" + s.types(f.Params) + ")"
	switch results := s.types(f.Results); {
	case results == "":
	case len(f.Results.List) == 1 && len(f.Results.List[0].Names) <= 1:
		sig += " " + results
	default:
		sig += " (" + results + ")"
	}
	return sig
}

// types prints the types of a parameter list, one per parameter.
func (s signatures) types(l *ast.FieldList) string {
	if l == nil {
		return ""
	}
	var types []string
	for _, f := range l.List {
		for range max(1, len(f.Names)) {
			types = append(types, s.expr(f.Type))
		}
	}
	return strings.Join(types, ", ")
}

// typeParams prints type parameters, one per name: "[K comparable, V any]".
func (s signatures) typeParams(l *ast.FieldList) string {
	if l == nil {
		return ""
	}
	var params []string
	for _, f := range l.List {
		for _, n := range f.Names {
			params = append(params, n.Name+" "+s.expr(f.Type))
		}
	}
	return "[" + strings.Join(params, ", ") + "]"
}

// typeExpr prints a declared type; of a struct, only the fields an
// importer can use.
func (s signatures) typeExpr(x ast.Expr) string {
	st, ok := x.(*ast.StructType)
	if !ok {
		return s.expr(x)
	}
	var fields []string
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			fields = append(fields, s.expr(f.Type))
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				fields = append(fields, n.Name+" "+s.expr(f.Type))
			}
		}
	}
	return "struct{" + strings.Join(fields, "; ") + "}"
}

// expr prints a node with go/printer, on one line.
func (s signatures) expr(n ast.Node) string {
	var b strings.Builder
	if err := printer.Fprint(&b, s.fset, n); err != nil {
		panic(fmt.Sprintf("printing %T: %v", n, err))
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// TestEmbedderBuilds builds testdata/embedder, a program that uses the
// ports and the gateway through the public API, for each of the others;
// the binaries go to a temporary directory.
func TestEmbedderBuilds(t *testing.T) {
	goTool := filepath.Join(build.Default.GOROOT, "bin", "go")
	for _, goos := range others {
		t.Run(goos, func(t *testing.T) {
			cmd := exec.Command(goTool, "build", "-o", t.TempDir(), "./internal/testing/apiparity/testdata/embedder")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("GOOS=%s go build: %v\n%s", goos, err, out)
			}
		})
	}
}
