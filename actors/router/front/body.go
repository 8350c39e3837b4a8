package front

import "io"

// ReadBody reads the whole body into one buffer sized from the declared
// Content-Length (capped by the body limit), instead of io.ReadAll's
// doubling from 512 bytes, which for a 70 KB multi-turn prompt
// allocates and copies eight times.
func ReadBody(rd io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength <= 0 {
		return io.ReadAll(rd)
	}
	buf := make([]byte, 0, min(contentLength, limit)+1) // +1: see EOF without regrowing
	for {
		if len(buf) == cap(buf) { // longer than declared: let append grow it
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
