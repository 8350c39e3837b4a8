package golden

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Update is the -update flag: rewrite golden files from the transcripts.
var Update = flag.Bool("update", false, "rewrite the golden files from the scenarios")

// Run replays every file matching glob with run and compares its transcript
// with the file of the same name and extension ".golden"; ext is the
// scenarios' extension (".txt", ".scenario"). No matching file is a failure.
func Run(t *testing.T, glob, ext string, run func(t *testing.T, path string) string) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios match %s: %v", glob, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			got := run(t, f)
			path := strings.TrimSuffix(f, ext) + ".golden"
			if *Update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if got != string(want) {
				t.Fatalf("transcript differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
			}
		})
	}
}

// Command is one non-blank, non-comment line of a scenario file.
type Command struct {
	Line   int      // 1-based line number
	Text   string   // the line, trimmed
	Fields []string // strings.Fields(Text)
}

// Commands reads a scenario file: one command per line, blank lines and
// lines starting with '#' skipped.
func Commands(t *testing.T, path string) []Command {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []Command
	for i, l := range strings.Split(string(raw), "\n") {
		text := strings.TrimSpace(l)
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		cmds = append(cmds, Command{Line: i + 1, Text: text, Fields: strings.Fields(text)})
	}
	return cmds
}
