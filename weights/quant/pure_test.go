package quant_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The package contract (doc.go): standard library only, no I/O, no
// goroutine machinery — it runs inside the publisher and the engines'
// loaders alike, and callers own the files.
func TestImportsStayPure(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := map[string]bool{"os": true, "io/ioutil": true, "net": true, "net/http": true, "sync": true, "sync/atomic": true, "unsafe": true}
	fs := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		pf, err := parser.ParseFile(fs, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pf.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(strings.SplitN(p, "/", 2)[0], ".") || forbidden[p] {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}
