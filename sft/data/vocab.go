package data

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Vocab is the vocabulary a dataset's ids are checked against: ids must be
// in [0, Size). From says where Size came from: a tokenizer.json or
// config.json path, or "--vocab" (the caller's number).
type Vocab struct {
	Size int    `json:"size"`
	From string `json:"from"`
}

func (v Vocab) String() string { return fmt.Sprintf("%d ids (%s)", v.Size, v.From) }

// Vocabulary files, in the order a directory is searched: the tokenizer
// that made a dataset's ids bounds them more tightly than the model's
// embedding (a config.json's vocab_size is often padded past the
// tokenizer's last id, to a multiple that suits the GPU).
const (
	TokenizerFile   = "tokenizer.json"
	ModelConfigFile = "config.json"
)

// ReadVocab reads a vocabulary size from path: a Hugging Face
// tokenizer.json (its highest id, in model.vocab or added_tokens, plus
// one), a model's config.json (vocab_size, or text_config.vocab_size for
// a multimodal model), or a directory holding either (tokenizer.json
// first).
func ReadVocab(path string) (Vocab, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Vocab{}, fmt.Errorf("sft/data: vocabulary: %w", err)
	}
	if st.IsDir() {
		v, ok, err := vocabInDir(path)
		if err != nil {
			return Vocab{}, err
		}
		if !ok {
			return Vocab{}, fmt.Errorf("sft/data: vocabulary: %s holds neither %s nor a %s with vocab_size", path, TokenizerFile, ModelConfigFile)
		}
		return v, nil
	}
	if filepath.Base(path) == ModelConfigFile {
		size, err := configVocab(path)
		if err != nil {
			return Vocab{}, err
		}
		if size == 0 {
			return Vocab{}, fmt.Errorf("sft/data: vocabulary: %s has no vocab_size (nor text_config.vocab_size)", path)
		}
		return Vocab{Size: size, From: path}, nil
	}
	size, err := tokenizerVocab(path)
	if err != nil {
		return Vocab{}, err
	}
	return Vocab{Size: size, From: path}, nil
}

// FindVocab looks for the vocabulary a dataset was made with next to it:
// a tokenizer.json, else a config.json with vocab_size, in the dataset's
// directory (the path itself when it is one, else the directory of the
// file or glob), then in that directory's parent (a model directory
// holding a data/ folder). ok is false when neither holds one; searched
// lists the directories looked in, for the message that says so. A
// tokenizer.json that cannot be read is an error, not a silent skip: the
// caller would believe the ids were checked.
func FindVocab(dataset string) (v Vocab, ok bool, searched []string, err error) {
	dir := dataset
	if st, err := os.Stat(dataset); err != nil || !st.IsDir() {
		dir = filepath.Dir(dataset)
	}
	dirs := []string{filepath.Clean(dir)}
	if abs, err := filepath.Abs(dir); err == nil && filepath.Dir(abs) != abs {
		dirs = append(dirs, filepath.Join(dir, ".."))
	}
	for _, d := range dirs {
		v, ok, err := vocabInDir(d)
		if err != nil || ok {
			return v, ok, dirs, err
		}
	}
	return Vocab{}, false, dirs, nil
}

// vocabInDir reads dir's tokenizer.json, else its config.json; a
// config.json without vocab_size (not a model's) is passed over.
func vocabInDir(dir string) (Vocab, bool, error) {
	tok := filepath.Join(dir, TokenizerFile)
	size, err := tokenizerVocab(tok)
	switch {
	case err == nil:
		return Vocab{Size: size, From: tok}, true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return Vocab{}, false, err
	}
	cfg := filepath.Join(dir, ModelConfigFile)
	size, err = configVocab(cfg)
	switch {
	case err == nil && size > 0:
		return Vocab{Size: size, From: cfg}, true, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return Vocab{}, false, err
	}
	return Vocab{}, false, nil
}

// tokenizerVocab is one more than the highest id of a tokenizer.json:
// model.vocab is a {token: id} map (BPE, WordPiece, WordLevel) or a list
// of [piece, score] pairs whose index is the id (Unigram), and
// added_tokens carry their own ids (special tokens past the model's).
func tokenizerVocab(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("sft/data: vocabulary: %w", err)
	}
	var doc struct {
		Model struct {
			Vocab json.RawMessage `json:"vocab"`
		} `json:"model"`
		Added []struct {
			ID int `json:"id"`
		} `json:"added_tokens"`
	}
	bad := func(why string, args ...any) error {
		return fmt.Errorf("sft/data: vocabulary: %s is not a Hugging Face tokenizer.json: %s (give the vocabulary size with --vocab N instead)", path, fmt.Sprintf(why, args...))
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return 0, bad("%v", err)
	}
	size := 0
	raw := strings.TrimSpace(string(doc.Model.Vocab))
	switch {
	case strings.HasPrefix(raw, "{"):
		var m map[string]int
		if err := json.Unmarshal(doc.Model.Vocab, &m); err != nil {
			return 0, bad("model.vocab: %v", err)
		}
		for _, id := range m {
			size = max(size, id+1)
		}
	case strings.HasPrefix(raw, "["):
		var l []json.RawMessage
		if err := json.Unmarshal(doc.Model.Vocab, &l); err != nil {
			return 0, bad("model.vocab: %v", err)
		}
		size = len(l)
	default:
		return 0, bad("no model.vocab")
	}
	for _, a := range doc.Added {
		size = max(size, a.ID+1)
	}
	if size == 0 {
		return 0, bad("an empty vocabulary")
	}
	return size, nil
}

// configVocab is a model config.json's vocab_size (text_config's for a
// multimodal model); 0 when it has neither.
func configVocab(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("sft/data: vocabulary: %w", err)
	}
	var doc struct {
		VocabSize  int `json:"vocab_size"`
		TextConfig struct {
			VocabSize int `json:"vocab_size"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		// Not JSON we understand: not a model config.
		return 0, nil
	}
	if doc.VocabSize > 0 {
		return doc.VocabSize, nil
	}
	return doc.TextConfig.VocabSize, nil
}
