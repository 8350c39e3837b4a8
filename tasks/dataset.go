package tasks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
)

// ErrDataset marks a dataset that cannot be read or parsed.
var ErrDataset = errors.New("tasks: bad dataset")

// maxDatasetLine bounds one JSONL line; prompts are short, so anything
// longer is a broken file rather than a prompt.
const maxDatasetLine = 1 << 20

// Dataset is a fixed list of prompts, loaded from JSONL.
type Dataset struct {
	// Name is where the prompts came from (the file path), for errors.
	Name    string
	Prompts []Prompt
}

// LoadDataset reads a JSONL file: one {"id","text","seed"} object per line;
// blank lines are skipped. A malformed line gives an error naming the file
// and the 1-based line number.
func LoadDataset(path string) (*Dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataset, err)
	}
	defer f.Close()
	return ReadDataset(f, path)
}

// ReadDataset parses JSONL from r; name is used in errors. Unknown fields
// are errors, so a typo ("txt") does not silently produce empty prompts.
func ReadDataset(r io.Reader, name string) (*Dataset, error) {
	ds := &Dataset{Name: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxDatasetLine)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var p Prompt
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %w", ErrDataset, name, line, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("%w: %s:%d: more than one JSON value on the line", ErrDataset, name, line)
		}
		if p.ID == "" {
			p.ID = fmt.Sprintf("%s:%d", name, line)
		}
		ds.Prompts = append(ds.Prompts, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s:%d: %w", ErrDataset, name, line+1, err)
	}
	if len(ds.Prompts) == 0 {
		return nil, fmt.Errorf("%w: %s: no prompts", ErrDataset, name)
	}
	return ds, nil
}

// Check resets an env of t on every prompt, so a prompt the task cannot
// parse is reported at load time with its ID, not mid-run.
func (d *Dataset) Check(t Task) error {
	env := t.NewEnv()
	for _, p := range d.Prompts {
		if _, err := env.Reset(p); err != nil {
			return fmt.Errorf("%w: %s: prompt %q: %w", ErrDataset, d.Name, p.ID, err)
		}
	}
	return nil
}

// DatasetTask is a Task whose prompts come from a Dataset; the episodes are
// the underlying task's.
type DatasetTask struct {
	Task
	data *Dataset
}

// WithDataset returns t drawing its prompts uniformly from d. Every prompt
// is checked against t first.
func WithDataset(t Task, d *Dataset) (*DatasetTask, error) {
	if err := d.Check(t); err != nil {
		return nil, err
	}
	return &DatasetTask{Task: t, data: d}, nil
}

// Sample draws one of the dataset's prompts.
func (t *DatasetTask) Sample(rng *rand.Rand) Prompt {
	return t.data.Prompts[rng.IntN(len(t.data.Prompts))]
}
