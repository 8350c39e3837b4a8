package delta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// Checksum algorithm names as they appear in manifest.json.
const (
	ChecksumXXH3   = "xxh3-128"
	ChecksumSHA256 = "sha256"
)

// ManifestName is the file whose presence commits a version.
const ManifestName = "manifest.json"

// Manifest is manifest.json of one delta version, field for field as SkyRL
// writes it (reference/skyrl.md "Delta weight sync"). The JSON field names
// and order are fixed by a golden test.
type Manifest struct {
	// Version this delta produces.
	Version int64 `json:"version"`
	// BaseVersion the delta applies to (Version − 1).
	BaseVersion int64 `json:"base_version"`
	// Tensors that changed; unchanged tensors are omitted.
	Tensors []TensorEntry `json:"tensors"`
	// TotalUncompressedNumBytes sums the tensors' uncompressed_num_bytes.
	TotalUncompressedNumBytes int64 `json:"total_uncompressed_num_bytes"`
	// TotalCompressedNumBytes sums the tensors' compressed_num_bytes.
	TotalCompressedNumBytes int64 `json:"total_compressed_num_bytes"`
	// PayloadFiles lists the payload file names (relative to the version
	// directory) in write order.
	PayloadFiles []string `json:"payload_files"`
	// Skipped lists (sorted) the tensors of the new checkpoint that the
	// base checkpoint lacks, which Encode skipped as SkyRL's publisher does
	// (tied weights, buffers). Not part of manifest.json; the caller warns.
	Skipped []string `json:"-"`
}

// TensorEntry describes one changed tensor.
type TensorEntry struct {
	// Name of the tensor in the checkpoint.
	Name string `json:"name"`
	// DType of the base checkpoint's tensor (the patch is in this dtype),
	// spelled as torch names it without the "torch." prefix ("bfloat16"), as
	// SkyRL writes and reads it; safetensors spellings ("BF16") and a
	// "torch." prefix are accepted on read.
	DType string `json:"dtype"`
	// Shape of the tensor.
	Shape []int64 `json:"shape"`
	// UncompressedNumBytes is the tensor's size in bytes (= the XOR patch).
	UncompressedNumBytes int64 `json:"uncompressed_num_bytes"`
	// CompressedNumBytes is the zstd frame's size.
	CompressedNumBytes int64 `json:"compressed_num_bytes"`
	// PayloadFile holds the compressed patch (a name in PayloadFiles).
	PayloadFile string `json:"payload_file"`
	// PayloadKey is the uint8 tensor's name inside PayloadFile.
	PayloadKey string `json:"payload_key"`
	// Checksum of the NEW tensor bytes (hex digest, see Checksum).
	Checksum string `json:"checksum"`
	// ChecksumAlgorithm is "xxh3-128" (written) or "sha256" (accepted).
	ChecksumAlgorithm string `json:"checksum_algorithm"`
}

// DeltaDir is the directory (and store key prefix) of a delta version.
func DeltaDir(version int64) string { return fmt.Sprintf("delta-%08d", version) }

// ManifestKey is the store key of a delta version's manifest.
func ManifestKey(version int64) string { return DeltaDir(version) + "/" + ManifestName }

// PayloadFileName is the name of payload file i written by rank.
func PayloadFileName(rank, i int) string {
	return fmt.Sprintf("delta-rank%05d-file%06d.safetensors", rank, i)
}

// ParseDeltaDir returns the version of a "delta-00000012" name.
func ParseDeltaDir(name string) (int64, bool) {
	return parseVersionDir(name, "delta-")
}

func parseVersionDir(name, prefix string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || len(rest) < 8 {
		return 0, false
	}
	v, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// Marshal encodes the manifest as indented JSON; nil slices are written as
// [] (an unchanged publish has "tensors": [] and "payload_files": []).
func (m *Manifest) Marshal() ([]byte, error) {
	c := *m
	c.Tensors = append([]TensorEntry{}, c.Tensors...) // a copy, never nil
	if c.PayloadFiles == nil {
		c.PayloadFiles = []string{}
	}
	for i := range c.Tensors {
		if c.Tensors[i].Shape == nil {
			c.Tensors[i].Shape = []int64{}
		}
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("delta: manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// ParseManifest decodes and validates manifest.json. Unknown fields are
// ignored so a newer writer's additions do not break this reader.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks the manifest's internal consistency.
func (m *Manifest) Validate() error {
	if m.Version < 1 || m.BaseVersion < 0 || m.BaseVersion >= m.Version {
		return fmt.Errorf("%w: version %d with base_version %d (need 0 ≤ base_version < version)", ErrManifest, m.Version, m.BaseVersion)
	}
	files, err := m.payloadFileSet()
	if err != nil {
		return err
	}
	names := make(map[string]bool, len(m.Tensors))
	keys := make(map[[2]string]bool, len(m.Tensors))
	var unc, comp int64
	for _, t := range m.Tensors {
		if t.Name == "" || names[t.Name] {
			return fmt.Errorf("%w: tensor name %q empty or repeated", ErrManifest, t.Name)
		}
		names[t.Name] = true
		if err := t.checkSizes(); err != nil {
			return err
		}
		if !files[t.PayloadFile] {
			return fmt.Errorf("%w: tensor %q: payload_file %q is not in payload_files", ErrManifest, t.Name, t.PayloadFile)
		}
		k := [2]string{t.PayloadFile, t.PayloadKey}
		if t.PayloadKey == "" || keys[k] {
			return fmt.Errorf("%w: tensor %q: payload_key %q empty or repeated in %s", ErrManifest, t.Name, t.PayloadKey, t.PayloadFile)
		}
		keys[k] = true
		if err := checkChecksumField(t.ChecksumAlgorithm, t.Checksum); err != nil {
			return fmt.Errorf("%w: tensor %q: %v", ErrManifest, t.Name, err)
		}
		unc += t.UncompressedNumBytes
		comp += t.CompressedNumBytes
	}
	if unc != m.TotalUncompressedNumBytes || comp != m.TotalCompressedNumBytes {
		return fmt.Errorf("%w: totals %d/%d but the tensors sum to %d/%d (uncompressed/compressed)", ErrManifest,
			m.TotalUncompressedNumBytes, m.TotalCompressedNumBytes, unc, comp)
	}
	return nil
}

// payloadFileSet checks every payload file is a plain name listed once and
// returns them as a set.
func (m *Manifest) payloadFileSet() (map[string]bool, error) {
	files := make(map[string]bool, len(m.PayloadFiles))
	for _, f := range m.PayloadFiles {
		if f == "" || strings.ContainsAny(f, "/\\") || strings.HasPrefix(f, ".") {
			return nil, fmt.Errorf("%w: payload file %q is not a plain file name", ErrManifest, f)
		}
		if files[f] {
			return nil, fmt.Errorf("%w: payload file %q listed twice", ErrManifest, f)
		}
		files[f] = true
	}
	return files, nil
}

// checkSizes checks the tensor's dtype and shape, that its uncompressed
// size is what they hold, and that its compressed size is positive.
func (t *TensorEntry) checkSizes() error {
	dt, err := NormalizeDType(t.DType)
	if err != nil {
		return fmt.Errorf("%w: tensor %q: %v", ErrManifest, t.Name, err)
	}
	n := int64(dt.Size())
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("%w: tensor %q: negative dimension in %v", ErrManifest, t.Name, t.Shape)
		}
		n *= d
	}
	if n != t.UncompressedNumBytes {
		return fmt.Errorf("%w: tensor %q: uncompressed_num_bytes %d but %s%v holds %d", ErrManifest, t.Name, t.UncompressedNumBytes, t.DType, t.Shape, n)
	}
	if t.CompressedNumBytes <= 0 {
		return fmt.Errorf("%w: tensor %q: compressed_num_bytes %d", ErrManifest, t.Name, t.CompressedNumBytes)
	}
	return nil
}

// TorchDTypeName is the manifest spelling of a safetensors dtype.
func TorchDTypeName(d safetensors.DType) string {
	switch d {
	case safetensors.BF16:
		return "bfloat16"
	case safetensors.F16:
		return "float16"
	case safetensors.F32:
		return "float32"
	case safetensors.F64:
		return "float64"
	case safetensors.I8:
		return "int8"
	case safetensors.U8:
		return "uint8"
	case safetensors.I16:
		return "int16"
	case safetensors.U16:
		return "uint16"
	case safetensors.I32:
		return "int32"
	case safetensors.U32:
		return "uint32"
	case safetensors.I64:
		return "int64"
	case safetensors.U64:
		return "uint64"
	case safetensors.BOOL:
		return "bool"
	case safetensors.F8E4M3:
		return "float8_e4m3fn" // torch's name, as SkyRL's _torch_dtype_name writes it
	case safetensors.F8E5M2:
		return "float8_e5m2"
	}
	return string(d)
}

// UnmarshalJSON reads an entry, accepting the older SkyRL spelling where
// the checksum was a "sha256" field (then the algorithm is sha256).
func (e *TensorEntry) UnmarshalJSON(b []byte) error {
	type plain TensorEntry
	var aux struct {
		plain
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*e = TensorEntry(aux.plain)
	if e.Checksum == "" && aux.SHA256 != "" {
		e.Checksum = aux.SHA256
		if e.ChecksumAlgorithm == "" {
			e.ChecksumAlgorithm = ChecksumSHA256
		}
	}
	if e.ChecksumAlgorithm == "" {
		e.ChecksumAlgorithm = ChecksumXXH3 // SkyRL's default when the field is absent
	}
	return nil
}

// NormalizeDType maps a manifest dtype (safetensors or torch spelling) to
// the safetensors dtype.
func NormalizeDType(s string) (safetensors.DType, error) {
	t := strings.TrimPrefix(strings.ToLower(s), "torch.")
	switch t {
	case "bfloat16", "bf16":
		return safetensors.BF16, nil
	case "float16", "half", "f16":
		return safetensors.F16, nil
	case "float32", "float", "f32":
		return safetensors.F32, nil
	case "float64", "double", "f64":
		return safetensors.F64, nil
	case "int8", "i8":
		return safetensors.I8, nil
	case "uint8", "u8":
		return safetensors.U8, nil
	case "int16", "i16":
		return safetensors.I16, nil
	case "uint16", "u16":
		return safetensors.U16, nil
	case "uint32", "u32":
		return safetensors.U32, nil
	case "uint64", "u64":
		return safetensors.U64, nil
	case "int32", "i32":
		return safetensors.I32, nil
	case "int64", "long", "i64":
		return safetensors.I64, nil
	case "bool":
		return safetensors.BOOL, nil
	case "float8_e4m3fn", "f8_e4m3":
		return safetensors.F8E4M3, nil
	case "float8_e5m2", "f8_e5m2":
		return safetensors.F8E5M2, nil
	}
	if d := safetensors.DType(strings.ToUpper(s)); d.Valid() {
		return d, nil
	}
	return "", fmt.Errorf("unknown dtype %q", s)
}
