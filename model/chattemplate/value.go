package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ardanlabs/jinja"
)

// jsonValue decodes one JSON document into a template value keeping object
// key order, as Python's json.loads does (dicts are ordered): `tojson` of a
// tool schema or of tool-call arguments must print the keys in the order
// the caller wrote them, or the rendered prompt differs from transformers'.
// Integers stay integers and numbers with a fraction or exponent become
// floats (Python's int/float split). Empty input is None.
func jsonValue(raw []byte) (jinja.Value, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return jinja.None(), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return jinja.Value{}, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			items := []jinja.Value{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token() // ']'
			return jinja.NewList(items), err
		}
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case json.Number:
		// FromGoValue keeps "12" an int and "1.5"/"1e3" a float.
		return jinja.FromGoValue(t), nil
	case string:
		return jinja.NewString(t), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

// goValue converts a Go value for the template: json.RawMessage (and any
// value that marshals to JSON) keeps its key order; plain scalars convert
// directly.
func goValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case nil:
		return jinja.None(), nil
	case jinja.Value:
		return x, nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case float64:
		return jinja.NewFloat(x), nil
	case json.RawMessage:
		return jsonValue(x)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return jinja.Value{}, err
	}
	return jsonValue(b)
}
