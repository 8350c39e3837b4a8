package netx

import "testing"

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"": true, "127.0.0.1:8000": true, "127.0.0.1": true, "[::1]:80": true, "localhost:1": true, "127.3.4.5:9": true,
		"0.0.0.0:8000": false, ":8000": false, "[::]:1": false, "10.0.0.5:80": false, "example.com:80": false, "10.0.0.5": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for h, want := range map[string]string{"Bearer abc": "abc", "bearer abc": "abc", "BEARER a b": "a b"} {
		if got, ok := BearerToken(h); !ok || got != want {
			t.Errorf("BearerToken(%q) = %q, %v", h, got, ok)
		}
	}
	for _, h := range []string{"", "Basic abc", "Bearerabc", "Token abc"} {
		if _, ok := BearerToken(h); ok {
			t.Errorf("BearerToken(%q) accepted", h)
		}
	}
}

func TestTokenEqual(t *testing.T) {
	if !TokenEqual("k1", "k1") || TokenEqual("k1", "k2") || TokenEqual("", "") || TokenEqual("k", "") {
		t.Error("TokenEqual wrong")
	}
}
