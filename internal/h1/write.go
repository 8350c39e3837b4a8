package h1

import "strconv"

// AppendStatusLine appends "HTTP/1.1 <code> <reason>\r\n".
func AppendStatusLine(dst []byte, code int, reason string) []byte {
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, ' ')
	dst = append(dst, reason...)
	return append(dst, "\r\n"...)
}

// AppendHeader appends "name: value\r\n"; CR and LF in value become
// spaces, so no value can split the head.
func AppendHeader(dst []byte, name, value string) []byte {
	dst = append(dst, name...)
	dst = append(dst, ": "...)
	for i := 0; i < len(value); i++ {
		c := value[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		dst = append(dst, c)
	}
	return append(dst, "\r\n"...)
}

// AppendChunkSize appends the size line of an n-byte chunk (n > 0; 0 is
// the last chunk, which LastChunk writes with its trailers).
func AppendChunkSize(dst []byte, n int) []byte {
	dst = strconv.AppendUint(dst, uint64(n), 16)
	return append(dst, "\r\n"...)
}

// Bodiless reports whether a response with this status has no body
// (1xx, 204, 304: RFC 9112 §6.3), so it carries neither Content-Length
// framing nor chunks.
func Bodiless(code int) bool { return code < 200 || code == 204 || code == 304 }
