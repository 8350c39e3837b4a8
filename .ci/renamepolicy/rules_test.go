package main

import (
	"go/parser"
	"go/token"
	"os"
	"testing"
)

// rulesAtRoot builds the rules from the module root (where the tool runs:
// model/ and actors/router/policy are read there) and stays there.
func rulesAtRoot(t *testing.T) *textRules {
	t.Helper()
	t.Chdir("../..")
	if _, err := os.Stat(newDir); err != nil {
		t.Skipf("%s/ does not exist yet (the rename has not run): %v", newDir, err)
	}
	r, err := newTextRules()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The text rules rename what names the built-in model's package and leave
// the routing core, the config keys and the word "policy" alone.
func TestTextRules(t *testing.T) {
	r := rulesAtRoot(t)
	for _, tc := range []struct {
		name, dir, in, want string
		md                  bool
	}{
		{"module path", ".", `"github.com/asyncrl/asyncrl/policy/transformer"`, `"github.com/asyncrl/asyncrl/model/transformer"`, false},
		{"go command argument", ".", "go test ./policy/... ./policy -run X", "go test ./model/... ./model -run X", false},
		{"path of a file", "docs", "see policy/trainloss.go.", "see model/trainloss.go.", true},
		{"path with a qualified name", "sft/data", "(policy/chattemplate.Conversation)", "(model/chattemplate.Conversation)", false},
		{"routing core's path", ".", "actors/router/policy/types.go and router/policy", "actors/router/policy/types.go and router/policy", false},
		{"not a path of the tree", "messages", "the policy/weight version", "the policy/weight version", false},
		{"up to the root", "cmd/asyncrl", `"../../policy/hftokenizer/testdata/x"`, `"../../model/hftokenizer/testdata/x"`, false},
		{"up, but to the routing core", "actors/router/proxy", `"../policy/testdata"`, `"../policy/testdata"`, false},
		{"exported name and method", ".", "policy.NewTrainer, policy.SaveTrainer", "model.NewTrainer, model.SaveTrainer", false},
		{"routing core's name", ".", "policy.Change, policy.SetVersion", "policy.Change, policy.SetVersion", false},
		{"config key", "config", "policy.experts and router.policy", "policy.experts and router.policy", false},
		{"package in backticks", ".", "imports `policy` and `policy/`", "imports `model` and `model/`", true},
		{"router section's key", "docs", "The `router:` section: `policy`, `balance_factor`", "The `router:` section: `policy`, `balance_factor`", true},
		{"backticks outside Markdown", ".", "`policy`", "`policy`", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.text(tc.in, tc.dir, tc.md); got != tc.want {
				t.Errorf("text(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
			if got := r.text(r.text(tc.in, tc.dir, tc.md), tc.dir, tc.md); got != tc.want {
				t.Errorf("a second pass changed %q to %q", tc.want, got)
			}
		})
	}
}

// Comments name the package in prose outside the router; string
// literals of the root package change their error prefix.
func TestCommentAndStringRules(t *testing.T) {
	r := rulesAtRoot(t)
	if got := r.comment("// GRPO advantages live in package policy.", "actors/filter", false); got != "// GRPO advantages live in package model." {
		t.Errorf("comment outside the router: %q", got)
	}
	for _, tc := range []struct {
		dir    string
		router bool
	}{{"actors/router/proxy", false}, {"cluster/discovery", true}} {
		if in := "// driven by the core in package policy."; r.comment(in, tc.dir, tc.router) != in {
			t.Errorf("%s (imports the routing core: %v): %q renamed", tc.dir, tc.router, in)
		}
	}
	if got := r.comment("// Package policy is the model.", newDir, false); got != "// Package model is the model." {
		t.Errorf("the root package's doc: %q", got)
	}
	if got := r.str(`"policy: bad checkpoint"`, newDir); got != `"model: bad checkpoint"` {
		t.Errorf("the root package's error prefix: %q", got)
	}
	if in := `"policy: nil change"`; r.str(in, "actors/router/policy") != in {
		t.Errorf("the routing core's error prefix renamed")
	}
}

// usesName finds every use of a name a qualifier would collide with, and
// none of the positions where it cannot.
func TestUsesName(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      bool
	}{
		{"local variable", "func f() { model := 1; _ = model }", true},
		{"parameter", "func f(model int) {}", true},
		{"package-level", "var model = 1", true},
		{"another import", "import model \"x/y\"\nvar _ = model.X", true},
		{"type parameter", "func f[model any]() {}", true},
		{"selector", "func f(s S) { _ = s.model }", false},
		{"struct field", "type S struct{ model int }", false},
		{"interface method", "type I interface{ model() }", false},
		{"method", "type S int\nfunc (S) model() {}", false},
		{"composite literal key", "type S struct{ model int }\nvar _ = S{model: 1}", false},
		{"string and comment", "// model\nvar _ = \"model\"", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parser.ParseFile(token.NewFileSet(), "x.go", "package p\n"+tc.src+"\n", 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := usesName(f, newDir); got != tc.want {
				t.Errorf("usesName = %v, want %v", got, tc.want)
			}
		})
	}
}
