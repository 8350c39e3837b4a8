package config

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Marshal writes c as YAML with every field's doc (and, for enums, its
// allowed values) as a comment above it. Its output loads back with Parse
// to an equal Config; the run report stores the effective config this way.
func Marshal(c Config) ([]byte, error) {
	root := toNode(reflect.ValueOf(c))
	// A blank line before each section after the first, for the eye.
	for i := 2; i < len(root.Content); i += 2 {
		root.Content[i].HeadComment = "\n" + root.Content[i].HeadComment
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	return buf.Bytes(), nil
}

// WriteDefaults writes Default() as commented YAML, headed by a note on how
// to use it (asyncrl config print-defaults).
func WriteDefaults(w io.Writer) error {
	b, err := Marshal(Default())
	if err != nil {
		return err
	}
	const header = "# asyncrl run configuration: every key with its default value.\n" +
		"# Copy this file, keep the keys you change, and pass it with --config.\n" +
		"# Unknown keys are errors; durations are Go durations (\"90s\", \"2h\").\n\n"
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// toNode builds the commented yaml.Node for a config value.
func toNode(v reflect.Value) *yaml.Node {
	t := v.Type()
	switch {
	case t == durationType:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: formatDuration(time.Duration(v.Int()))}
	case t.Kind() == reflect.Struct:
		m := &yaml.Node{Kind: yaml.MappingNode}
		for _, f := range fieldsOf(t) {
			key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.key, HeadComment: comment(f)}
			m.Content = append(m.Content, key, toNode(v.Field(f.index)))
		}
		return m
	case t.Kind() == reflect.Slice:
		s := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for i := range v.Len() {
			s.Content = append(s.Content, toNode(v.Index(i)))
		}
		return s
	}
	if t.Kind() == reflect.String {
		// Built by hand: yaml's Encode picks block styles for multi-line
		// strings that it then cannot re-read (a tab after a newline), and
		// a "|+" block would swallow the blank line before the next section.
		// The emitter still quotes plain strings that would read back as
		// another type ("true", "1").
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v.String()}
		if strings.ContainsFunc(n.Value, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			n.Style = yaml.DoubleQuotedStyle
		}
		return n
	}
	var n yaml.Node
	if err := n.Encode(v.Interface()); err != nil {
		// Only numbers and bools reach here, and yaml encodes all of them.
		panic(fmt.Sprintf("config: encode %s: %v", t, err))
	}
	return &n
}

// comment is a field's doc tag plus, for enums, the allowed values.
func comment(f field) string {
	doc := f.doc
	t := f.typ
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Implements(enumIface) {
		values := reflect.Zero(t).Interface().(enum).Values()
		doc += " [" + strings.Join(values, "|") + "]"
	}
	return doc
}
