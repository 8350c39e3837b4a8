package main

import (
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// edit replaces src[start:end] with text.
type edit struct {
	start, end int
	text       string
}

// goFile collects the edits of one Go file.
type goFile struct {
	fset  *token.FileSet
	f     *ast.File
	src   []byte
	edits []edit
}

func (g *goFile) replace(from, to token.Pos, text string) {
	s, e := g.fset.Position(from).Offset, g.fset.Position(to).Offset
	if string(g.src[s:e]) != text {
		g.edits = append(g.edits, edit{s, e, text})
	}
}

// apply applies the edits back to front and gofmts the result (a renamed
// import path sorts elsewhere in its block; struct columns realign).
func (g *goFile) apply() ([]byte, error) {
	if len(g.edits) == 0 {
		return g.src, nil
	}
	// Back to front; at one offset the replacement before the insertion
	// (the import path before the alias put in front of it).
	sort.Slice(g.edits, func(i, j int) bool {
		a, b := g.edits[i], g.edits[j]
		return a.start > b.start || a.start == b.start && a.end > b.end
	})
	out := append([]byte(nil), g.src...)
	for _, e := range g.edits {
		out = append(out[:e.start], append([]byte(e.text), out[e.end:]...)...)
	}
	return format.Source(out)
}

func rewriteGo(path string, src []byte, rules *textRules, taken map[string]bool) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	g := &goFile{fset: fset, f: f, src: src}
	dir := filepath.Dir(path)
	inRoot := dir == newDir
	if inRoot {
		switch f.Name.Name {
		case oldDir:
			g.replace(f.Name.Pos(), f.Name.End(), newDir)
		case oldDir + "_test":
			g.replace(f.Name.Pos(), f.Name.End(), newDir+"_test")
		}
	}
	if err := g.imports(taken[dir+"\x00"+f.Name.Name]); err != nil {
		return nil, err
	}
	routerFile := false
	for _, spec := range f.Imports {
		routerFile = routerFile || spec.Path.Value == strconv.Quote(module+"/"+routerP)
	}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			g.replace(c.Pos(), c.End(), rules.comment(c.Text, dir, routerFile))
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if _, ok := n.(*ast.ImportSpec); ok {
			return false // its path is the imports' job above
		}
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			g.replace(lit.Pos(), lit.End(), rules.str(lit.Value, dir))
		}
		return true
	})
	return g.apply()
}

// imports renames the import paths of the old tree and, for the root
// package imported under its own name, the qualifier. pkgTaken is true
// when the file's package declares model at package level.
func (g *goFile) imports(pkgTaken bool) error {
	root := module + "/" + oldDir
	for _, spec := range g.f.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			return err
		}
		if p != root && !strings.HasPrefix(p, root+"/") {
			continue
		}
		g.replace(spec.Path.Pos(), spec.Path.End(), strconv.Quote(module+"/"+newDir+p[len(root):]))
		if p != root || spec.Name != nil && spec.Name.Name != oldDir {
			continue // a sub-package keeps its name; an alias stays
		}
		name := newDir
		if pkgTaken || usesName(g.f, newDir) {
			name = alias
			if usesName(g.f, alias) {
				return fmt.Errorf("both %s and %s are taken: import %s under another name by hand, then run again", newDir, alias, root)
			}
		}
		if spec.Name != nil {
			g.replace(spec.Name.Pos(), spec.Name.End(), name)
		} else if name != newDir {
			g.replace(spec.Path.Pos(), spec.Path.Pos(), name+" ")
		}
		g.qualifiers(name)
	}
	return nil
}

// qualifiers renames policy in policy.X where policy is the import (the
// parser leaves package names unresolved; a local named policy resolves).
func (g *goFile) qualifiers(name string) {
	ast.Inspect(g.f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == oldDir && id.Obj == nil {
			g.replace(id.Pos(), id.End(), name)
		}
		return true
	})
}

// usesName reports whether name appears in f as anything a package
// qualifier could collide with: every identifier except a selector's
// field or method, a struct field or interface method name, a method's
// name, a key in a composite literal, and the package clause. It is
// syntactic and errs on the side of true (then the import is aliased).
func usesName(f *ast.File, name string) bool {
	free := map[*ast.Ident]bool{f.Name: true}
	fieldNames := func(fl *ast.FieldList) {
		for _, fd := range fl.List {
			for _, id := range fd.Names {
				free[id] = true
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			free[x.Sel] = true
		case *ast.StructType:
			fieldNames(x.Fields)
		case *ast.InterfaceType:
			fieldNames(x.Methods)
		case *ast.FuncDecl:
			if x.Recv != nil {
				free[x.Name] = true
			}
		case *ast.KeyValueExpr:
			if id, ok := x.Key.(*ast.Ident); ok {
				free[id] = true
			}
		}
		return true
	})
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == name && !free[id] {
			found = true
		}
		return !found
	})
	return found
}

// packagesDeclaringModel keys "dir\x00package" for every package that
// declares model at package level: no file of it may import a package
// under that name (the spec forbids a name in both the file and the
// package block).
func packagesDeclaringModel(files []string) (map[string]bool, error) {
	taken := map[string]bool{}
	fset := token.NewFileSet()
	for _, path := range files {
		if !strings.HasSuffix(path, ".go") || skipped(path) {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, id := range topLevel(f) {
			if id.Name == newDir {
				taken[filepath.Dir(path)+"\x00"+f.Name.Name] = true
			}
		}
	}
	return taken, nil
}
