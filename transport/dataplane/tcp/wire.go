package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

var magic = [4]byte{'A', 'D', 'P', '1'}

const (
	statusOK byte = iota
	statusUnknown
	statusBadRequest
)

// errProtocol marks a malformed peer message; it is not retried.
var errProtocol = errors.New("tcp: protocol error")

type request struct {
	id     string
	index  uint32
	offset int64
	length int64
}

func writeRequest(w io.Writer, r request) error {
	if len(r.id) > 0xffff {
		return fmt.Errorf("%w: transfer id longer than 65535 bytes", errProtocol)
	}
	b := make([]byte, 0, 4+2+len(r.id)+4+8+8)
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.id)))
	b = append(b, r.id...)
	b = binary.BigEndian.AppendUint32(b, r.index)
	b = binary.BigEndian.AppendUint64(b, uint64(r.offset))
	b = binary.BigEndian.AppendUint64(b, uint64(r.length))
	_, err := w.Write(b)
	return err
}

func readRequest(r io.Reader) (request, error) {
	var hdr [6]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return request{}, err
	}
	if [4]byte(hdr[:4]) != magic {
		return request{}, fmt.Errorf("%w: bad magic %q", errProtocol, hdr[:4])
	}
	rest := make([]byte, int(binary.BigEndian.Uint16(hdr[4:]))+20)
	if _, err := io.ReadFull(r, rest); err != nil {
		return request{}, err
	}
	n := len(rest) - 20
	return request{
		id:     string(rest[:n]),
		index:  binary.BigEndian.Uint32(rest[n:]),
		offset: int64(binary.BigEndian.Uint64(rest[n+4:])),
		length: int64(binary.BigEndian.Uint64(rest[n+12:])),
	}, nil
}

func writeStatus(w io.Writer, status byte, msg string) error {
	if len(msg) > 0xffff {
		msg = msg[:0xffff]
	}
	b := make([]byte, 0, 3+len(msg))
	b = append(b, status)
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	b = append(b, msg...)
	_, err := w.Write(b)
	return err
}

func readStatus(r io.Reader) (byte, string, error) {
	var hdr [3]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, "", err
	}
	msg := make([]byte, binary.BigEndian.Uint16(hdr[1:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return 0, "", err
	}
	return hdr[0], string(msg), nil
}
