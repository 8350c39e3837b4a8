package config

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// fill sets every field of v (a config struct) to a generated value of its
// type, including values validation would reject: the printer must round
// trip whatever it is given.
func fill(t *rapid.T, v reflect.Value, path string) {
	ty := v.Type()
	switch {
	case ty == durationType:
		v.SetInt(rapid.Int64Range(-int64(1000*time.Hour), int64(1000*time.Hour)).Draw(t, path))
	case ty.Kind() == reflect.Struct:
		for _, f := range fieldsOf(ty) {
			fill(t, v.Field(f.index), joinPath(path, f.key))
		}
	case ty.Kind() == reflect.Slice:
		n := rapid.IntRange(0, 3).Draw(t, path+".len")
		s := reflect.MakeSlice(ty, n, n)
		for i := range n {
			fill(t, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case ty.Kind() == reflect.String:
		v.SetString(rapid.String().Draw(t, path))
	case ty.Kind() == reflect.Bool:
		v.SetBool(rapid.Bool().Draw(t, path))
	case ty.Kind() == reflect.Int || ty.Kind() == reflect.Int64:
		v.SetInt(rapid.Int64().Draw(t, path))
	case ty.Kind() == reflect.Float64:
		f := rapid.Float64().Draw(t, path)
		if math.IsNaN(f) {
			f = 0 // NaN ≠ NaN would fail DeepEqual without saying anything about the printer
		}
		v.SetFloat(f)
	default:
		t.Fatalf("%s: unhandled type %s", path, ty)
	}
}

// TestMarshalRoundTripProperty: Marshal then the strict loader gives back
// exactly the generated config (before validation).
func TestMarshalRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c Config
		fill(t, reflect.ValueOf(&c).Elem(), "")
		out, err := Marshal(c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back Config
		if _, err := overlay("p.yaml", out, &back); err != nil {
			t.Fatalf("reload: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip differs:\n got %#v\nwant %#v\n%s", back, c, out)
		}
	})
}
