package vllmwire

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// The fixtures come from numpy itself (testdata/README.md): np.save into
// base64, as vLLM's CompletionResponseChoice.routed_experts
// (vllm-project/vllm vllm/entrypoints/openai/completion/protocol.py) is
// produced with numpy2base64 in vllm/entrypoints/openai/completion/serving.py.

type npyFixture struct {
	RoutedExperts RoutedExperts `json:"routed_experts"`
	NumExperts    int32         `json:"num_experts"`
	Shape         []int         `json:"shape"`
	DType         string        `json:"dtype"`
	Values        []int32       `json:"values"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestDecodeNumpyFixtures(t *testing.T) {
	for _, name := range []string{"npy_uint16.json", "npy_int32.json", "npy_empty.json"} {
		t.Run(name, func(t *testing.T) {
			var f npyFixture
			readJSON(t, "testdata/"+name, &f)
			if f.RoutedExperts.DType != f.DType || !slices.Equal(f.RoutedExperts.Shape[:], f.Shape) {
				t.Fatalf("parsed %s %v, numpy wrote %s %v", f.RoutedExperts.DType, f.RoutedExperts.Shape, f.DType, f.Shape)
			}
			rows, err := DecodeRoutedExperts(f.RoutedExperts, f.NumExperts, f.Shape[1], f.Shape[2])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rows.Values, f.Values) && len(f.Values)+len(rows.Values) > 0 {
				t.Fatalf("values %v, want %v", rows.Values[:min(8, len(rows.Values))], f.Values[:min(8, len(f.Values))])
			}
			if rows.Tokens != f.Shape[0] {
				t.Fatalf("tokens %d, want %d", rows.Tokens, f.Shape[0])
			}
		})
	}
}

func TestDecodeCompletionFixture(t *testing.T) {
	var ans struct {
		Choices []struct {
			TokenIDs       []int32        `json:"token_ids"`
			PromptTokenIDs []int32        `json:"prompt_token_ids"`
			RoutedExperts  *RoutedExperts `json:"routed_experts"`
		} `json:"choices"`
	}
	readJSON(t, "testdata/vllm_completion_routed_uint8.json", &ans)
	var want struct {
		Shape  []int   `json:"shape"`
		Values []int32 `json:"values"`
	}
	readJSON(t, "testdata/vllm_completion_routed_uint8.expect.json", &want)
	ch := ans.Choices[0]
	rows, err := DecodeRoutedExperts(*ch.RoutedExperts, 8, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	// vLLM: num_tokens - 1 rows (the last sampled token was never forwarded).
	if n := len(ch.PromptTokenIDs) + len(ch.TokenIDs) - 1; rows.Tokens != n {
		t.Fatalf("%d rows, want prompt+generated-1 = %d", rows.Tokens, n)
	}
	if !slices.Equal(rows.Values, want.Values) {
		t.Fatalf("values %v, want %v", rows.Values, want.Values)
	}
}

// Our encoder must write what numpy writes, byte for byte, so vLLM's own
// decode (np.load) reads the built-in engine's answers.
func TestEncodeMatchesNumpy(t *testing.T) {
	var f npyFixture
	readJSON(t, "testdata/npy_uint16.json", &f)
	enc, err := EncodeRoutedExperts(f.Values, f.Shape[0], f.Shape[1], f.Shape[2], f.NumExperts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(enc)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile("testdata/npy_uint16.json")
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	if string(got) != string(m["routed_experts"]) {
		t.Fatalf("encoded\n%s\nnumpy wrote\n%s", got, m["routed_experts"])
	}
}

func TestRoundTripDTypes(t *testing.T) {
	for _, tc := range []struct {
		experts int32
		dtype   string
	}{{8, "uint8"}, {256, "uint8"}, {257, "uint16"}, {65536, "uint16"}, {65537, "int32"}} {
		T, L, K := 5, 3, 2
		vals := make([]int32, T*L*K)
		for i := range vals {
			vals[i] = int32(i*7919) % tc.experts
		}
		vals[len(vals)-1] = tc.experts - 1
		enc, err := EncodeRoutedExperts(vals, T, L, K, tc.experts)
		if err != nil {
			t.Fatal(err)
		}
		if enc.DType != tc.dtype {
			t.Fatalf("%d experts: dtype %s, want %s", tc.experts, enc.DType, tc.dtype)
		}
		b, _ := json.Marshal(enc)
		var back RoutedExperts
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		rows, err := DecodeRoutedExperts(back, tc.experts, L, K)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rows.Values, vals) || rows.Tokens != T {
			t.Fatalf("%d experts: round trip changed the rows", tc.experts)
		}
	}
}

func TestObjectForm(t *testing.T) {
	// The {data, shape, dtype} form (raw C-order bytes, not .npy).
	data := base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 3, 4, 5})
	var r RoutedExperts
	if err := json.Unmarshal([]byte(`{"data":"`+data+`","shape":[3,1,2],"dtype":"uint8","start":0}`), &r); err != nil {
		t.Fatal(err)
	}
	rows, err := DecodeRoutedExperts(r, 6, 1, 2)
	if err != nil || !slices.Equal(rows.Values, []int32{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("rows %v, err %v", rows.Values, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	good, _ := EncodeRoutedExperts([]int32{0, 1, 2, 3}, 2, 1, 2, 4)
	npy := good.NPY()
	b64 := func(b []byte) string { return `"` + base64.StdEncoding.EncodeToString(b) + `"` }
	hdr := func(h string) []byte { // a v1 .npy with header h and 4 data bytes
		out := []byte("\x93NUMPY\x01\x00")
		out = append(out, byte(len(h)), 0)
		return append(append(out, h...), 0, 1, 2, 3)
	}
	cases := []struct {
		name, in, want string
	}{
		{"number", `42`, "want a base64 .npy string"},
		{"bad base64", `"@@@"`, "base64"},
		{"no magic", b64([]byte("not an npy file at all")), "magic"},
		{"truncated data", b64(npy[:len(npy)-1]), "data bytes"},
		{"extra data", b64(append(slices.Clone(npy), 9)), "data bytes"},
		{"2-dim", b64(hdr("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }\n")), "3 dims"},
		{"fortran", b64(hdr("{'descr': '|u1', 'fortran_order': True, 'shape': (2, 1, 2), }\n")), "Fortran"},
		{"float", b64(hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1), }\n")), "descr"},
		{"big endian", b64(hdr("{'descr': '>i4', 'fortran_order': False, 'shape': (1, 1, 1), }\n")), "descr"},
		{"missing key", b64(hdr("{'descr': '|u1', 'shape': (2, 1, 2), }\n")), "want descr, fortran_order and shape"},
		{"unknown key", b64(hdr("{'descr': '|u1', 'x': 1, 'fortran_order': False, 'shape': (2, 1, 2), }\n")), "unknown key"},
		{"header overrun", b64([]byte("\x93NUMPY\x01\x00\xff\x00{")), "header"},
		{"zero layers", b64(hdr("{'descr': '|u1', 'fortran_order': False, 'shape': (4, 0, 1), }\n")), "layers"},
		{"object no data", `{"shape":[1,1,1],"dtype":"uint8"}`, "needs data"},
		{"object bad dtype", `{"data":"AA==","shape":[1,1,1],"dtype":"float32"}`, "dtype"},
		{"object short", `{"data":"AA==","shape":[2,1,1],"dtype":"uint8"}`, "data bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r RoutedExperts
			err := json.Unmarshal([]byte(c.in), &r)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one mentioning %q", err, c.want)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v does not wrap ErrMalformed", err)
			}
		})
	}
	// Values and expected shape are checked on decode.
	if _, err := DecodeRoutedExperts(good, 3, 1, 2); err == nil || !strings.Contains(err.Error(), "routed_experts[1][0][1]=3 outside [0, 3)") {
		t.Fatalf("out-of-range id: %v", err)
	}
	if _, err := DecodeRoutedExperts(good, 4, 2, 2); err == nil || !strings.Contains(err.Error(), "want [tokens, 2, 2]") {
		t.Fatalf("wrong layers: %v", err)
	}
	neg := RoutedExperts{DType: "int16", Shape: [3]int{1, 1, 1}, Data: []byte{0xff, 0xff}}
	if _, err := DecodeRoutedExperts(neg, 4, 1, 1); err == nil || !strings.Contains(err.Error(), "=-1 outside") {
		t.Fatalf("negative id: %v", err)
	}
	if _, err := EncodeRoutedExperts([]int32{0, 9}, 1, 1, 2, 4); err == nil {
		t.Fatal("encode accepted an id ≥ num_experts")
	}
	if _, err := EncodeRoutedExperts([]int32{0}, 1, 1, 2, 4); err == nil {
		t.Fatal("encode accepted a short row")
	}
}

func FuzzRoutedExpertsJSON(f *testing.F) {
	good, _ := EncodeRoutedExperts([]int32{0, 1, 2, 3, 4, 5}, 3, 1, 2, 8)
	b, _ := json.Marshal(good)
	f.Add(b)
	f.Add([]byte(`{"data":"AAECAwQF","shape":[3,1,2],"dtype":"uint8"}`))
	f.Add([]byte(`"` + base64.StdEncoding.EncodeToString(good.NPY()[:20]) + `"`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var r RoutedExperts
		if err := json.Unmarshal(in, &r); err != nil {
			return
		}
		if r.DType == "" { // null
			return
		}
		if err := r.check(); err != nil {
			t.Fatalf("accepted an inconsistent value: %v", err)
		}
		rows, err := DecodeRoutedExperts(r, 1<<30, 0, 0)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(rows.Values)*1 > 4*len(in)+64 { // bounded by the input
			t.Fatalf("%d values from %d input bytes", len(rows.Values), len(in))
		}
		// What decodes re-encodes and decodes to the same rows.
		if int64(rows.Tokens)*int64(rows.Stride()) == int64(len(rows.Values)) {
			mx := int32(0)
			for _, v := range rows.Values {
				mx = max(mx, v)
			}
			enc, err := EncodeRoutedExperts(rows.Values, rows.Tokens, rows.Layers, rows.TopK, mx+1)
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeRoutedExperts(enc, mx+1, rows.Layers, rows.TopK)
			if err != nil || !slices.Equal(back.Values, rows.Values) {
				t.Fatalf("re-encode: %v", err)
			}
		}
	})
}

func TestDecodeSGLangRoutes(t *testing.T) {
	// SGLang: base64 of the int32 tensor's raw bytes (np.int32 [2, 1, 2]
	// = 0 1 2 3), shape from the model.
	s := base64.StdEncoding.EncodeToString([]byte{0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0})
	rows, err := DecodeSGLangRoutes(s, 4, 1, 2)
	if err != nil || rows.Tokens != 2 || !slices.Equal(rows.Values, []int32{0, 1, 2, 3}) {
		t.Fatalf("rows %+v, err %v", rows, err)
	}
	if _, err := DecodeSGLangRoutes(s, 4, 3, 1); err == nil || !strings.Contains(err.Error(), "whole number") {
		t.Fatalf("16 bytes as 12-byte rows: %v", err)
	}
	if _, err := DecodeSGLangRoutes(s, 3, 1, 2); !errors.Is(err, ErrMalformed) {
		t.Fatalf("id 3 of 3 experts: %v", err)
	}
}
