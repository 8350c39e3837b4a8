package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Load reads the YAML file at path and returns Default() overlaid with it,
// validated. Keys absent from the file (or set to null) keep their
// defaults. Errors name the file, line and key path (see Error); a missing
// file gives an error wrapping fs.ErrNotExist.
func Load(path string) (Config, error) { return LoadWith(path, nil) }

// LoadWith is Load with override applied after the file and before
// validation, so command-line flags (--steps, --seed) can fix or change
// what the file says; validation errors still point at the file's lines.
func LoadWith(path string, override func(*Config)) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is already in front; don't repeat it
		}
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return parse(path, data, override)
}

// Parse is Load for bytes already in memory; name is used in error messages.
func Parse(name string, data []byte) (Config, error) { return parse(name, data, nil) }

func parse(name string, data []byte, override func(*Config)) (Config, error) {
	cfg := Default()
	lines, nulls, err := overlayTracked(name, data, &cfg)
	if err != nil {
		return Config{}, err
	}
	contextDefaults(&cfg, func(p string) bool { _, ok := lines[p]; return ok && !nulls[p] })
	if override != nil {
		override(&cfg)
	}
	errs := flatten(cfg.Validate())
	for i, e := range errs {
		located := *e
		located.File, located.Line = name, lineOf(lines, e.Path)
		errs[i] = &located
	}
	if err := joinErrors(errs); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// lineOf is the line the file set path on; for a key a list entry left
// out (engines.external[0].kind), the entry's line, so the message points
// at the entry to complete.
func lineOf(lines map[string]int, path string) int {
	if l, ok := lines[path]; ok {
		return l
	}
	if i := strings.LastIndexByte(path, '.'); i > 0 && strings.HasSuffix(path[:i], "]") {
		return lines[path[:i]]
	}
	return 0
}

// overlay decodes data onto cfg strictly and returns the line of every key
// path it set, so later validation errors can point into the file.
func overlay(name string, data []byte, cfg *Config) (map[string]int, error) {
	lines, _, err := overlayTracked(name, data, cfg)
	return lines, err
}

// overlayTracked is overlay also returning the key paths the file set to
// null (they keep their defaults, context defaults included).
func overlayTracked(name string, data []byte, cfg *Config) (map[string]int, map[string]bool, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, nil // an empty file is the defaults
		}
		return nil, nil, syntaxError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, nil, syntaxError(name, err)
		}
		return nil, nil, &Error{File: name, Line: extra.Line, Msg: "a config file holds one YAML document, found a second", Kind: ErrSyntax}
	}
	d := &decoder{file: name, root: reflect.TypeFor[Config](), lines: map[string]int{}, nulls: map[string]bool{}}
	if len(doc.Content) > 0 {
		d.decode(doc.Content[0], reflect.ValueOf(cfg).Elem(), "")
	}
	return d.lines, d.nulls, joinErrors(d.errs)
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns the parser's "yaml: line N: msg" into FILE:N: msg.
func syntaxError(name string, err error) error {
	msg, line := err.Error(), 0
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else if len(msg) > 6 && msg[:6] == "yaml: " {
		msg = msg[6:]
	}
	return &Error{File: name, Line: line, Msg: msg, Kind: ErrSyntax}
}

// decoder walks a yaml.Node tree against the Config struct by reflection,
// so that unknown keys and wrong types are reported with their full path
// and line instead of being ignored (yaml's default) or reported without a
// path (yaml's KnownFields).
type decoder struct {
	file  string
	root  reflect.Type
	lines map[string]int
	nulls map[string]bool // key paths set to null
	errs  []*Error
}

func (d *decoder) fail(n *yaml.Node, path string, kind error, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Path: path, Msg: fmt.Sprintf(format, args...), Kind: kind})
}

// wrongType reports a value of the wrong YAML type.
func (d *decoder) wrongType(n *yaml.Node, path, want string) {
	d.fail(n, path, ErrType, "want %s, got %s", want, describe(n))
}

// describe names a node's value for a type error.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if n.ShortTag() == "!!str" {
		return strconv.Quote(n.Value)
	}
	return n.Value
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // `key:` with no value keeps the default
	}
	t := v.Type()
	switch {
	case t == durationType:
		d.duration(n, v, path)
	case t.Kind() == reflect.Struct:
		d.mapping(n, v, path)
	case t.Kind() == reflect.Slice:
		d.list(n, v, path)
	case t.Kind() == reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.wrongType(n, path, "a string")
			return
		}
		v.SetString(n.Value)
	default:
		d.tagged(n, v, path)
	}
}

// duration decodes a quoted Go duration ("90s").
func (d *decoder) duration(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		// A bare number would be nanoseconds: almost surely a mistake.
		d.wrongType(n, path, `a duration such as "90s"`)
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil {
		d.wrongType(n, path, `a duration such as "90s"`)
		return
	}
	v.SetInt(int64(dur))
}

// list decodes a sequence element by element, recording each one's line.
func (d *decoder) list(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.wrongType(n, path, "a list")
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, el := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.lines[p] = el.Line
		d.decode(el, s.Index(i), p)
	}
	v.Set(s)
}

// tagged decodes a bool, integer or float scalar whose YAML tag matches
// the field's kind (an integer is a number too).
func (d *decoder) tagged(n *yaml.Node, v reflect.Value, path string) {
	k, tag := v.Kind(), n.ShortTag()
	var want string
	var ok bool
	switch {
	case k == reflect.Bool:
		want, ok = "true or false", tag == "!!bool"
	case k >= reflect.Int && k <= reflect.Int64:
		want, ok = "an integer", tag == "!!int"
	case k == reflect.Float64 || k == reflect.Float32:
		want, ok = "a number", tag == "!!float" || tag == "!!int"
	default:
		// A field type the loader does not know is a bug in this package.
		panic(fmt.Sprintf("config: field %s has unsupported type %s", path, v.Type()))
	}
	if n.Kind != yaml.ScalarNode || !ok {
		d.wrongType(n, path, want)
		return
	}
	d.scalar(n, v, path)
}

// scalar lets yaml convert a scalar already checked to have the right tag;
// what can still fail is range (an int too big for its field).
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	if err := n.Decode(v.Addr().Interface()); err != nil {
		d.fail(n, path, ErrType, "%s does not fit in %s", n.Value, v.Type())
	}
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.wrongType(n, path, "a mapping")
		return
	}
	fields := fieldsOf(v.Type())
	known := make([]string, len(fields))
	for i, f := range fields {
		known[i] = f.key
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.wrongType(k, path, "a key name")
			continue
		}
		p := joinPath(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.fail(k, p, ErrSyntax, "duplicate key (first set on line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		idx := -1
		for _, f := range fields {
			if f.key == k.Value {
				idx = f.index
				break
			}
		}
		if idx < 0 && k.Value == "<<" {
			d.fail(k, p, ErrUnknownKey, "merge keys (<<) are not supported; write the keys out (anchors and aliases on values work)")
			continue
		}
		if idx < 0 {
			d.unknownKey(k, p, known)
			continue
		}
		d.lines[p] = k.Line
		if val.Kind == yaml.ScalarNode && val.ShortTag() == "!!null" {
			d.nulls[p] = true
		}
		d.decode(val, v.Field(idx), p)
	}
}

// unknownKey reports a key no field has, suggesting the closest sibling or,
// failing that, the same key in another section.
func (d *decoder) unknownKey(k *yaml.Node, path string, known []string) {
	if s := suggest(k.Value, known); s != "" {
		d.fail(k, path, ErrUnknownKey, "unknown key (did you mean %s?)", s)
		return
	}
	if s := suggestElsewhere(d.root, k.Value); s != "" {
		d.fail(k, path, ErrUnknownKey, "unknown key (did you mean %s?)", s)
		return
	}
	d.fail(k, path, ErrUnknownKey, "unknown key")
}
