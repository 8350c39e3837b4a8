package vllmwire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// The .npy format (numpy/lib/format.py): magic "\x93NUMPY", a major and a
// minor version byte, the header length (uint16 little-endian for 1.0,
// uint32 for 2.0 and 3.0), then an ASCII (3.0: UTF-8) Python dict literal
// {'descr': '<i4', 'fortran_order': False, 'shape': (T, L, K), } padded
// with spaces and ended by '\n' so the data starts 64-byte aligned.

const npyMagic = "\x93NUMPY"

// maxNPYHeader bounds the header (numpy itself refuses headers over 10000
// bytes unless told otherwise).
const maxNPYHeader = 10000

// npyDescr maps a wire dtype to numpy's little-endian descr and back.
var npyDescr = map[string]string{
	"uint8":  "|u1",
	"uint16": "<u2",
	"int16":  "<i2",
	"int32":  "<i4",
	"int64":  "<i8",
}

func dtypeOfDescr(d string) (string, bool) {
	switch d {
	case "|u1", "<u1", "u1":
		return "uint8", true
	case "<u2":
		return "uint16", true
	case "<i2":
		return "int16", true
	case "<i4":
		return "int32", true
	case "<i8":
		return "int64", true
	}
	return "", false
}

// encodeNPY writes a version 1.0 .npy file of a C-order array, byte for
// byte what np.save writes for it.
func encodeNPY(dtype string, shape []int, data []byte) []byte {
	var sb strings.Builder
	sb.WriteString("{'descr': '")
	sb.WriteString(npyDescr[dtype])
	sb.WriteString("', 'fortran_order': False, 'shape': (")
	for i, s := range shape {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Itoa(s))
	}
	if len(shape) == 1 {
		sb.WriteString(",")
	}
	sb.WriteString("), }")
	h := sb.String()
	// magic(6) + version(2) + len(2) + header + '\n', padded to 64.
	total := 10 + len(h) + 1
	pad := (64 - total%64) % 64
	out := make([]byte, 0, total+pad+len(data))
	out = append(out, npyMagic...)
	out = append(out, 1, 0)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(h)+pad+1))
	out = append(out, h...)
	out = append(out, bytes.Repeat([]byte{' '}, pad)...)
	out = append(out, '\n')
	return append(out, data...)
}

// decodeNPY parses a .npy file: its dtype, shape and the data bytes (a
// sub-slice of b). It accepts versions 1.0–3.0, little-endian integer
// descrs only, C order only; it never allocates beyond the header.
func decodeNPY(b []byte) (dtype string, shape []int, data []byte, err error) {
	if len(b) < 10 || string(b[:6]) != npyMagic {
		return "", nil, nil, fmt.Errorf("%w: not a .npy array (no \\x93NUMPY magic)", ErrMalformed)
	}
	var hlen, off int
	switch b[6] {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(b[8:10])), 10
	case 2, 3:
		if len(b) < 12 {
			return "", nil, nil, fmt.Errorf("%w: .npy %d.%d header truncated", ErrMalformed, b[6], b[7])
		}
		h := binary.LittleEndian.Uint32(b[8:12])
		if h > maxNPYHeader {
			return "", nil, nil, fmt.Errorf("%w: .npy header of %d bytes (max %d)", ErrMalformed, h, maxNPYHeader)
		}
		hlen, off = int(h), 12
	default:
		return "", nil, nil, fmt.Errorf("%w: .npy version %d.%d", ErrMalformed, b[6], b[7])
	}
	if hlen > maxNPYHeader || off+hlen > len(b) {
		return "", nil, nil, fmt.Errorf("%w: .npy header of %d bytes, %d after the preamble", ErrMalformed, hlen, len(b)-off)
	}
	descr, fortran, shape, err := parseNPYHeader(string(b[off : off+hlen]))
	if err != nil {
		return "", nil, nil, err
	}
	if fortran {
		return "", nil, nil, fmt.Errorf("%w: .npy array in Fortran order (want C order)", ErrMalformed)
	}
	dt, ok := dtypeOfDescr(descr)
	if !ok {
		return "", nil, nil, fmt.Errorf("%w: .npy descr %q: want |u1, <u2, <i2, <i4 or <i8", ErrMalformed, descr)
	}
	return dt, shape, b[off+hlen:], nil
}

// parseNPYHeader reads the dict literal np.save writes: string keys
// 'descr' (a string), 'fortran_order' (True/False) and 'shape' (a tuple
// of non-negative ints), each exactly once, in any order.
func parseNPYHeader(h string) (descr string, fortran bool, shape []int, err error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: .npy header %q: %s", ErrMalformed, truncate(h, 120), why)
	}
	p := &hparser{s: strings.TrimRight(h, " \n\x00")}
	if !p.eat('{') {
		return "", false, nil, bad("no '{'")
	}
	seen := map[string]bool{}
	for {
		p.space()
		if p.eat('}') {
			break
		}
		key, ok := p.str()
		if !ok || seen[key] {
			return "", false, nil, bad("want a new quoted key")
		}
		seen[key] = true
		p.space()
		if !p.eat(':') {
			return "", false, nil, bad("want ':' after " + key)
		}
		p.space()
		switch key {
		case "descr":
			if descr, ok = p.str(); !ok {
				return "", false, nil, bad("descr is not a string")
			}
		case "fortran_order":
			switch {
			case p.word("True"):
				fortran = true
			case p.word("False"):
			default:
				return "", false, nil, bad("fortran_order is not True/False")
			}
		case "shape":
			if shape, ok = p.tuple(); !ok {
				return "", false, nil, bad("shape is not a tuple of ints")
			}
		default:
			return "", false, nil, bad("unknown key " + strconv.Quote(key))
		}
		p.space()
		if !p.eat(',') {
			p.space()
			if !p.eat('}') {
				return "", false, nil, bad("want ',' or '}'")
			}
			break
		}
	}
	p.space()
	if p.i != len(p.s) {
		return "", false, nil, bad("trailing bytes after '}'")
	}
	if !seen["descr"] || !seen["fortran_order"] || !seen["shape"] {
		return "", false, nil, bad("want descr, fortran_order and shape")
	}
	return descr, fortran, shape, nil
}

type hparser struct {
	s string
	i int
}

func (p *hparser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *hparser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *hparser) word(w string) bool {
	if strings.HasPrefix(p.s[p.i:], w) {
		p.i += len(w)
		return true
	}
	return false
}

// str reads a '…' or "…" string without escapes.
func (p *hparser) str() (string, bool) {
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", false
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", false
	}
	v := p.s[p.i+1 : p.i+1+end]
	if strings.ContainsRune(v, '\\') {
		return "", false
	}
	p.i += end + 2
	return v, true
}

// tuple reads (a, b, c) or (a,) or (): at most 8 dims, each < 2^31.
func (p *hparser) tuple() ([]int, bool) {
	if !p.eat('(') {
		return nil, false
	}
	out := []int{}
	for {
		p.space()
		if p.eat(')') {
			return out, true
		}
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		if j == p.i || j-p.i > 10 || len(out) == 8 {
			return nil, false
		}
		n, err := strconv.ParseInt(p.s[p.i:j], 10, 32)
		if err != nil {
			return nil, false
		}
		out = append(out, int(n))
		p.i = j
		p.space()
		if !p.eat(',') {
			p.space()
			if !p.eat(')') {
				return nil, false
			}
			return out, true
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
