package tasks

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadDataset(t *testing.T) {
	path := writeFile(t, `{"id":"a","text":"rev abc=","seed":1}

{"text":"rev dd=","seed":2}
`)
	ds, err := LoadDataset(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Prompt{{"a", "rev abc=", 1}, {path + ":3", "rev dd=", 2}}
	if len(ds.Prompts) != 2 || ds.Prompts[0] != want[0] || ds.Prompts[1] != want[1] {
		t.Fatalf("prompts = %+v, want %+v", ds.Prompts, want)
	}
	task, err := WithDataset(mustGet(t, "reverse"), ds)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	seen := map[string]bool{}
	for range 50 {
		seen[task.Sample(rng).ID] = true
	}
	if len(seen) != 2 || !seen["a"] || task.Name() != "reverse" {
		t.Errorf("sampled ids %v from %s", seen, task.Name())
	}
}

func TestLoadDatasetErrors(t *testing.T) {
	cases := []struct{ body, want string }{
		{"{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"b\"}\n{\"id\": \"c\", \n", ":3:"},
		{"{\"id\":\"a\",\"txt\":\"x\"}\n", ":1:"},  // unknown field
		{"{\"id\":\"a\",\"seed\":\"7\"}\n", ":1:"}, // wrong type
		{"{\"id\":\"a\"} {\"id\":\"b\"}\n", ":1:"}, // two values
		{"\n\n", "no prompts"},
	}
	for _, c := range cases {
		path := writeFile(t, c.body)
		_, err := LoadDataset(path)
		if !errors.Is(err, ErrDataset) || !strings.Contains(err.Error(), path+c.want) && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want ErrDataset with %q", c.body, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), path) {
			t.Errorf("%q: err = %v does not name the file", c.body, err)
		}
	}
	if _, err := LoadDataset(filepath.Join(t.TempDir(), "missing.jsonl")); !errors.Is(err, ErrDataset) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestWithDatasetChecksPrompts(t *testing.T) {
	ds, err := ReadDataset(strings.NewReader(`{"id":"ok","text":"7+5="}`+"\n"+`{"id":"bad","text":"rev ab="}`), "mem")
	if err != nil {
		t.Fatal(err)
	}
	_, err = WithDataset(mustGet(t, "arith"), ds)
	if !errors.Is(err, ErrDataset) || !errors.Is(err, ErrBadPrompt) || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("err = %v, want ErrDataset+ErrBadPrompt naming prompt \"bad\"", err)
	}
}
