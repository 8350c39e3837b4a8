package wire

import (
	"mime"
	"strconv"
	"strings"
)

// ContentType is the media type of protobuf bodies and answers
// (resources/training.py _PROTO_CONTENT_TYPE).
const ContentType = "application/x-protobuf"

// IsProtobuf reports whether a Content-Type header names ContentType.
func IsProtobuf(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == ContentType
}

// PrefersProtobuf reports whether an Accept header asks for a protobuf
// answer over JSON. The SDK sends, on retrieve_future for a sample,
// forward or forward_backward result (lib/api_future_impl.py,
// PROTO_SUPPORTED_TYPES): "application/x-protobuf, application/json" from
// 0.18.1 to 0.24.1 (either is read, by the answer's Content-Type) and
// "application/x-protobuf" from 0.25.0 (a JSON result is an error). Both
// get protobuf: the quality of application/x-protobuf must be above zero
// and at least that of JSON (application/json, application/*, */*); on a
// tie the type listed first wins. No Accept, or one naming only JSON or
// wildcards, gets JSON, as every SDK before 0.18.1 and curl do.
func PrefersProtobuf(accept string) bool {
	if !strings.Contains(accept, ContentType) {
		return false // the common case, without parsing
	}
	qProto, qJSON := -1.0, -1.0
	posProto, posJSON := -1, -1
	for i, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if v, err := strconv.ParseFloat(s, 64); err == nil && v >= 0 && v <= 1 {
				q = v
			}
		}
		switch mt {
		case ContentType:
			if q > qProto {
				qProto, posProto = q, i
			}
		case "application/json", "application/*", "*/*":
			if q > qJSON {
				qJSON, posJSON = q, i
			}
		}
	}
	if qProto <= 0 {
		return false
	}
	return qProto > qJSON || (qProto == qJSON && posProto < posJSON)
}
