package config

import (
	"reflect"
	"strings"
	"time"
)

var durationType = reflect.TypeFor[time.Duration]()

// field is one config struct field as the loader and printer see it.
type field struct {
	index int          // position in the struct
	key   string       // yaml key (snake_case)
	doc   string       // the `doc` tag, printed as a comment by print-defaults
	typ   reflect.Type // Go type
}

// fieldsOf lists the yaml-tagged fields of struct type t in declaration
// order (the order print-defaults writes them).
func fieldsOf(t reflect.Type) []field {
	out := make([]field, 0, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		key, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if key == "" || key == "-" || !sf.IsExported() {
			continue
		}
		out = append(out, field{index: i, key: key, doc: sf.Tag.Get("doc"), typ: sf.Type})
	}
	return out
}

// formatDuration prints d as Go does but without zero trailing units, so the
// defaults read "2h" and "1m" rather than "2h0m0s" and "1m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
