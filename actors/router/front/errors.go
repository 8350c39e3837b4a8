package front

import (
	"net/http"
	"strconv"
)

// ErrorValue is the JSON of a vLLM/OpenAI-style error: every local
// answer of the router, whichever front writes it.
func ErrorValue(code int, msg string) map[string]any {
	typ := "BadRequestError"
	switch {
	case code == http.StatusNotFound:
		typ = "NotFoundError"
	case code == http.StatusUnauthorized:
		typ = "AuthenticationError"
	case code >= 500:
		typ = "ServiceUnavailableError"
	}
	return map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}}
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "status code " + strconv.Itoa(code)
}
