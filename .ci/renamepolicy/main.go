// Command renamepolicy is the Go half of .ci/rename-policy (issue 31 item
// 6): after the script has moved the built-in model tree from policy/ to
// model/, it rewrites every tracked file so the tree builds again and every
// text names the new paths. It edits byte ranges found by go/parser (never
// line numbers) and only patterns that still name the old package, so it
// runs on a tree that changed elsewhere and a second run changes nothing.
//
// In Go files it rewrites import paths under the module's policy/ to
// model/, the package clauses of model/ itself (policy → model,
// policy_test → model_test), the qualifier of the root package (policy.X →
// model.X) and, in comments and strings, the texts below. A file where the
// name model is already taken (a local, a parameter, a package-level
// declaration of its package, another import) keeps its code and imports
// the package under the alias pmodel instead — a syntactic, conservative
// test, so it never renames a local and never produces a shadowed
// qualifier.
//
// In every other tracked text file it rewrites the module path, policy/…
// paths whose first element exists under model/, `policy.X` where X is
// exported by the root package and not by actors/router/policy, and, in
// Markdown, the package named in backticks (`policy` → `model`) except on a
// line about the router's config section (`router:`), whose `policy` key is
// the routing policy; Go comments outside actors/router (and not in a file
// importing the routing core) also say "package model" for "package
// policy". The files in skip are left alone. go test ./.ci/renamepolicy
// checks the rules.
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const (
	module  = "github.com/asyncrl/asyncrl"
	oldDir  = "policy"
	newDir  = "model"
	alias   = "pmodel" // the import name where model is taken
	routerP = "actors/router/policy"
)

// skip are tracked files the rewrite leaves alone: the rename's own
// script and tool (they spell the old names on purpose) and BENCHMARKS.md
// (a record another change owns; its commands are rewritten by hand when
// it is next edited).
var skip = []string{".ci/rename-policy", ".ci/renamepolicy/", "BENCHMARKS.md", "go.mod", "go.sum"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "renamepolicy:", err)
		os.Exit(1)
	}
}

func run() error {
	if _, err := os.Stat(filepath.Join(newDir, "doc.go")); err != nil {
		return fmt.Errorf("%s/doc.go missing: run from the module root after moving %s/ to %s/ (bash .ci/rename-policy does both): %w", newDir, oldDir, newDir, err)
	}
	rules, err := newTextRules()
	if err != nil {
		return err
	}
	files, err := trackedFiles()
	if err != nil {
		return err
	}
	taken, err := packagesDeclaringModel(files)
	if err != nil {
		return err
	}
	changed := 0
	for _, f := range files {
		if skipped(f) {
			continue
		}
		did, err := rewriteFile(f, rules, taken)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if did {
			changed++
		}
	}
	fmt.Printf("renamepolicy: %d files rewritten\n", changed)
	return nil
}

func skipped(f string) bool {
	for _, s := range skip {
		if f == s || strings.HasSuffix(s, "/") && strings.HasPrefix(f, s) {
			return true
		}
	}
	return false
}

// trackedFiles lists the files git tracks (after the script's git mv, the
// model/ tree among them), in git's order.
func trackedFiles() ([]string, error) {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if st, err := os.Lstat(f); err == nil && st.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	return files, nil
}

func rewriteFile(path string, rules *textRules, taken map[string]bool) (bool, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var out []byte
	if strings.HasSuffix(path, ".go") {
		out, err = rewriteGo(path, src, rules, taken)
		if err != nil {
			return false, err
		}
	} else {
		if bytes.IndexByte(src[:min(len(src), 8000)], 0) >= 0 {
			return false, nil // binary
		}
		out = []byte(rules.text(string(src), filepath.Dir(path), strings.HasSuffix(path, ".md")))
	}
	if bytes.Equal(out, src) {
		return false, nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return true, os.WriteFile(path, out, st.Mode().Perm())
}
