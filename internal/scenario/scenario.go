package scenario

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Registry names the types a line may build: name → a value of the type
// (its zero value will do).
type Registry map[string]any

// Parser reads lines into values of its Registry's types, and keeps the
// values a file defined (Define) for $name references. One test owns a
// Parser; it is not safe for concurrent use.
type Parser struct {
	types map[string]reflect.Type
	defs  map[string]reflect.Value
}

// New returns a Parser for the types of r.
func New(r Registry) *Parser {
	p := &Parser{types: map[string]reflect.Type{}, defs: map[string]reflect.Value{}}
	for name, v := range r {
		p.types[name] = reflect.TypeOf(v)
	}
	return p
}

// Line reads "Type fields…" into a value of Type.
func (p *Parser) Line(line string) (any, error) {
	v, err := p.typed(line)
	if err != nil {
		return nil, err
	}
	return v.Interface(), nil
}

// Define reads "name Type fields…" and keeps the value as $name.
func (p *Parser) Define(line string) error {
	name, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	if name == "" || strings.ContainsAny(name, "$()[]{}=\"") {
		return fmt.Errorf("scenario: define %q: want \"name Type fields…\"", line)
	}
	v, err := p.typed(rest)
	if err != nil {
		return fmt.Errorf("scenario: define %s: %w", name, err)
	}
	p.defs[name] = v
	return nil
}

// Fields sets the fields of the struct dst points to from "field=value …".
func (p *Parser) Fields(dst any, text string) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("scenario: Fields wants a pointer to a struct, not %T", dst)
	}
	l, err := lex(text)
	if err != nil {
		return err
	}
	if err := p.fields(l, v.Elem(), ""); err != nil {
		return fmt.Errorf("scenario: %q: %w", text, err)
	}
	return nil
}

func (p *Parser) typed(line string) (reflect.Value, error) {
	l, err := lex(line)
	if err != nil {
		return reflect.Value{}, err
	}
	name := l.next()
	if name.kind != word {
		return reflect.Value{}, fmt.Errorf("scenario: %q: want a type name first", line)
	}
	t, ok := p.types[name.text]
	if !ok {
		return reflect.Value{}, fmt.Errorf("scenario: %q: unknown type %s (known: %s)", line, name.text, p.known())
	}
	v := reflect.New(t).Elem()
	if err := p.fields(l, v, ""); err != nil {
		return reflect.Value{}, fmt.Errorf("scenario: %q: %w", line, err)
	}
	return v, nil
}

func (p *Parser) known() string {
	var names []string
	for n := range p.types {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// fields sets v's fields from the tokens up to end ("" the end of the line).
func (p *Parser) fields(l *lexer, v reflect.Value, end string) error {
	for {
		tok := l.next()
		switch {
		case tok.kind == eof && end == "":
			return nil
		case tok.kind == eof:
			return fmt.Errorf("missing %s", end)
		case tok.kind == punct && tok.text == end:
			return nil
		case tok.kind != word:
			return fmt.Errorf("want a field name, got %q", tok.text)
		}
		if v.Kind() != reflect.Struct {
			return fmt.Errorf("%s has no fields (%s)", v.Type(), tok.text)
		}
		f, err := field(v, tok.text)
		if err != nil {
			return err
		}
		if eq := l.peek(); eq.kind != punct || eq.text != "=" || eq.spaced {
			if f.Kind() != reflect.Bool {
				return fmt.Errorf("field %s (%s) wants =value", tok.text, f.Type())
			}
			f.SetBool(true)
			continue
		}
		l.next()
		val, err := p.value(l, f)
		if err != nil {
			return fmt.Errorf("field %s: %w", tok.text, err)
		}
		f.Set(val)
	}
}

// field finds v's exported field named name, case-insensitively.
func field(v reflect.Value, name string) (reflect.Value, error) {
	t := v.Type()
	for i := range t.NumField() {
		if sf := t.Field(i); sf.IsExported() && strings.EqualFold(sf.Name, name) {
			return v.Field(i), nil
		}
	}
	return reflect.Value{}, fmt.Errorf("%s has no field %s", t, name)
}

// value reads one value of cur's type. A struct in brackets starts from
// cur: "(…)" changes the fields it names and keeps the others.
func (p *Parser) value(l *lexer, cur reflect.Value) (reflect.Value, error) {
	t := cur.Type()
	tok := l.next()
	switch {
	case tok.kind == punct && tok.text == "(":
		v := reflect.New(t).Elem()
		v.Set(cur)
		if t.Kind() != reflect.Struct {
			return v, fmt.Errorf("(…) is a struct, %s is not", t)
		}
		return v, p.fields(l, v, ")")
	case tok.kind == punct && tok.text == "[":
		if t.Kind() != reflect.Slice {
			return reflect.Value{}, fmt.Errorf("[…] is a slice, %s is not", t)
		}
		return p.slice(l, t)
	case tok.kind == punct && tok.text == "{":
		if t.Kind() != reflect.Map {
			return reflect.Value{}, fmt.Errorf("{…} is a map, %s is not", t)
		}
		return p.mapping(l, t)
	case tok.kind == word && strings.HasPrefix(tok.text, "$"):
		return p.ref(l, tok.text[1:], t)
	case tok.kind == word || tok.kind == quoted:
		return scalar(tok.text, t)
	}
	return reflect.Value{}, fmt.Errorf("want a value, got %q", tok.text)
}

func (p *Parser) slice(l *lexer, t reflect.Type) (reflect.Value, error) {
	s := reflect.MakeSlice(t, 0, 4)
	for {
		if tok := l.peek(); tok.kind == punct && tok.text == "]" {
			l.next()
			return s, nil
		} else if tok.kind == eof {
			return s, fmt.Errorf("missing ]")
		}
		e, err := p.value(l, reflect.New(t.Elem()).Elem())
		if err != nil {
			return s, fmt.Errorf("element %d: %w", s.Len(), err)
		}
		s = reflect.Append(s, e)
	}
}

func (p *Parser) mapping(l *lexer, t reflect.Type) (reflect.Value, error) {
	m := reflect.MakeMap(t)
	for {
		tok := l.next()
		switch {
		case tok.kind == punct && tok.text == "}":
			return m, nil
		case tok.kind == eof:
			return m, fmt.Errorf("missing }")
		case tok.kind != word:
			return m, fmt.Errorf("want key:value, got %q", tok.text)
		}
		k, v, ok := strings.Cut(tok.text, ":")
		if !ok {
			return m, fmt.Errorf("want key:value, got %q", tok.text)
		}
		kv, err := scalar(k, t.Key())
		if err != nil {
			return m, fmt.Errorf("key %q: %w", k, err)
		}
		vv, err := scalar(v, t.Elem())
		if err != nil {
			return m, fmt.Errorf("value of %q: %w", k, err)
		}
		m.SetMapIndex(kv, vv)
	}
}

// ref is a copy of the value defined as name, with the fields in the
// brackets that follow it without a space changed.
func (p *Parser) ref(l *lexer, name string, t reflect.Type) (reflect.Value, error) {
	d, ok := p.defs[name]
	if !ok {
		return reflect.Value{}, fmt.Errorf("$%s is not defined", name)
	}
	if d.Type() != t {
		return reflect.Value{}, fmt.Errorf("$%s is a %s, the field a %s", name, d.Type(), t)
	}
	v := reflect.New(t).Elem()
	v.Set(d)
	if tok := l.peek(); tok.kind == punct && tok.text == "(" && !tok.spaced {
		l.next()
		if err := p.fields(l, v, ")"); err != nil {
			return v, fmt.Errorf("$%s(…): %w", name, err)
		}
	}
	return v, nil
}

var durationType = reflect.TypeFor[time.Duration]()

// scalar reads s as a value of the scalar type t.
func scalar(s string, t reflect.Type) (reflect.Value, error) {
	v := reflect.New(t).Elem()
	var err error
	switch t.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		var b bool
		b, err = strconv.ParseBool(s)
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var n int64
		if t == durationType {
			var d time.Duration
			d, err = time.ParseDuration(s)
			n = int64(d)
		} else {
			n, err = strconv.ParseInt(s, 10, t.Bits())
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		var n uint64
		n, err = strconv.ParseUint(s, 10, t.Bits())
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		var f float64
		f, err = strconv.ParseFloat(s, t.Bits())
		v.SetFloat(f)
	default:
		return v, fmt.Errorf("%q: a %s is not a scalar (use (…), […] or {…})", s, t)
	}
	if err != nil {
		return v, fmt.Errorf("%q as %s: %w", s, t, err)
	}
	return v, nil
}

// Lines are the lines of a scenario block, blank ones and # comments
// left out, each trimmed.
func Lines(block string) []string {
	var out []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
