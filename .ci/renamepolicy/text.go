package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// textRules rewrites the texts that name the old package: paths, the
// module path, qualified names in prose.
type textRules struct {
	exported map[string]bool // exported by the root model package and not by actors/router/policy
}

var (
	// modulePath is the module's import path of the old tree; \b keeps
	// policy_x and policyfoo out.
	modulePath = regexp.MustCompile(`github\.com/asyncrl/asyncrl/policy\b`)
	// relDir is ./policy as a command argument (./policy, ./policy/...,
	// ./policy/transformer/), run from the module root.
	relDir = regexp.MustCompile(`(?m)(^|[^\w/.-])\./policy([^\w-]|$)`)
	// upDir is ../policy, ../../policy/…: a path relative to the file's
	// directory, rewritten where it leads to the module root's policy (so
	// actors/router's ../policy stays).
	upDir = regexp.MustCompile(`(?m)(^|[^\w/.-])((?:\.\./)+)policy([^\w-]|$)`)
	// subPath is policy/<first element> not preceded by a path (so
	// actors/router/policy/x stays); the element is checked against model/.
	subPath = regexp.MustCompile(`(?m)(^|[^\w/.-])policy/([A-Za-z0-9_][\w-]*(?:\.[\w-]+)*)`)
	// qualified is policy.Name in prose; Name is checked against the root
	// package's exported names.
	qualified = regexp.MustCompile(`(?m)(^|[^\w/.-])policy\.([A-Z]\w*)`)
	// pkgClause is "package policy" in a comment's prose, ending the
	// sentence or followed by a space or punctuation (not policy/x or
	// policy.X: the path and qualifier rules own those).
	pkgClause = regexp.MustCompile(`(^|[^\w])package policy(\.?[^\w/.-]|\.?$)`)
	// errPrefix is the root package's error prefix in its string literals.
	errPrefix = regexp.MustCompile(`^(["` + "`" + `])policy: `)
)

func newTextRules() (*textRules, error) {
	own, err := exportedNames(newDir)
	if err != nil {
		return nil, err
	}
	router, err := exportedNames(routerP)
	if err != nil {
		return nil, err
	}
	r := &textRules{exported: map[string]bool{}}
	for n := range own {
		if !router[n] {
			r.exported[n] = true
		}
	}
	return r, nil
}

// exportedNames are the exported package-level names and method names of
// the package in dir, its test files included: prose writes
// policy.SaveTrainer for a method and policy.TestMismatchSameVersion for a
// test.
func exportedNames(dir string) (map[string]bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, id := range topLevel(f) {
			if id.IsExported() {
				names[id.Name] = true
			}
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && fd.Name.IsExported() {
				names[fd.Name.Name] = true
			}
		}
	}
	return names, nil
}

// topLevel is every package-level identifier a file declares.
func topLevel(f *ast.File) []*ast.Ident {
	var ids []*ast.Ident
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				ids = append(ids, d.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					ids = append(ids, s.Names...)
				case *ast.TypeSpec:
					ids = append(ids, s.Name)
				}
			}
		}
	}
	return ids
}

// paths rewrites the module path, ./policy, ../policy from dir (the
// file's directory) and policy/<element>.
func (r *textRules) paths(s, dir string) string {
	s = modulePath.ReplaceAllString(s, "github.com/asyncrl/asyncrl/"+newDir)
	s = relDir.ReplaceAllString(s, "${1}./"+newDir+"${2}")
	s = upDir.ReplaceAllStringFunc(s, func(m string) string {
		g := upDir.FindStringSubmatch(m)
		if filepath.Join(dir, g[2], oldDir) != oldDir {
			return m
		}
		return g[1] + g[2] + newDir + g[3]
	})
	return subPath.ReplaceAllStringFunc(s, func(m string) string {
		g := subPath.FindStringSubmatch(m)
		// The element is a file (train.go), or a directory, perhaps with
		// a qualified name after it (chattemplate.Conversation).
		elem, _, _ := strings.Cut(g[2], ".")
		if !exists(filepath.Join(newDir, g[2])) && !exists(filepath.Join(newDir, elem)) {
			return m // policy/weight and the like: not a path of the tree
		}
		return g[1] + newDir + "/" + g[2]
	})
}

// prose is paths plus policy.Name → model.Name.
func (r *textRules) prose(s, dir string) string {
	s = r.paths(s, dir)
	return qualified.ReplaceAllStringFunc(s, func(m string) string {
		g := qualified.FindStringSubmatch(m)
		if !r.exported[g[2]] {
			return m
		}
		return g[1] + newDir + "." + g[2]
	})
}

// text rewrites a whole non-Go file; Markdown also gets the package named
// in backticks.
func (r *textRules) text(s, dir string, markdown bool) string {
	s = r.prose(s, dir)
	if !markdown {
		return strings.ReplaceAll(s, "`policy/`", "`model/`")
	}
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if strings.Contains(l, "`router:`") {
			continue // the router section's `policy` key is the routing policy
		}
		l = strings.ReplaceAll(l, "`policy`", "`"+newDir+"`")
		lines[i] = strings.ReplaceAll(l, "`policy/`", "`"+newDir+"/`")
	}
	return strings.Join(lines, "")
}

// comment rewrites a Go comment of a file in dir; in the root package,
// its doc sentence names the package too, and outside actors/router (whose
// comments name the routing core "package policy") so does "package
// policy" (unless routerFile: the file imports the routing core).
func (r *textRules) comment(s, dir string, routerFile bool) string {
	s = r.prose(s, dir)
	if dir == newDir {
		s = strings.ReplaceAll(s, "Package policy ", "Package "+newDir+" ")
	}
	if !routerFile && dir != "actors/router" && !strings.HasPrefix(dir, "actors/router/") {
		s = pkgClause.ReplaceAllString(s, "${1}package "+newDir+"${2}")
	}
	return s
}

// str rewrites a Go string literal (its quoted source form) of a file in
// dir: paths, and
// the root package's error prefix.
func (r *textRules) str(lit, dir string) string {
	inRoot := dir == newDir
	lit = r.paths(lit, dir)
	if inRoot {
		lit = errPrefix.ReplaceAllString(lit, "${1}"+newDir+": ")
	}
	return lit
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
