package driver

import "testing"

func TestParseRelease(t *testing.T) {
	cases := []struct {
		in   string
		want string
	}{
		{"0.14.1", "0.14.1"},
		{"v0.11.0", "0.11.0"},
		{"0.11.0rc2.dev45+g1234abc", "0.11.0"},
		{"0.17.0.dev123+gdeadbeef", "0.17.0"},
		{"0.5.3.post1", "0.5.3"},
		{"0.10", "0.10.0"},
		{" 1 ", "1.0.0"},
	}
	for _, c := range cases {
		r, err := ParseRelease(c.in)
		if err != nil {
			t.Fatalf("ParseRelease(%q): %v", c.in, err)
		}
		if r.String() != c.want {
			t.Errorf("ParseRelease(%q) = %s, want %s", c.in, r, c.want)
		}
	}
	for _, bad := range []string{"", "dev", "v", "main"} {
		if _, err := ParseRelease(bad); err == nil {
			t.Errorf("ParseRelease(%q) succeeded", bad)
		}
	}
}

func TestReleaseOrderAndTable(t *testing.T) {
	if !MustRelease("0.9.9").Less(MustRelease("0.10.0")) || MustRelease("0.10.0").Less(MustRelease("0.9.9")) {
		t.Fatal("0.9.9 < 0.10.0 numerically, not as strings")
	}
	table := []FeatureRow{
		{Kind: KindVLLM, Feature: "x", Since: MustRelease("0.14.0")},
		{Kind: KindSGLang, Feature: "x", Since: MustRelease("0.1.0")},
	}
	old := CapabilitiesFor(KindVLLM, MustRelease("0.13.9"), table)
	if old.Has("x") {
		t.Error("0.13.9 has a feature from 0.14.0")
	}
	if !CapabilitiesFor(KindVLLM, MustRelease("0.14.0rc1"), table).Has("x") {
		t.Error("0.14.0rc1 lacks a feature from 0.14.0")
	}
	if CapabilitiesFor(KindVLLM, MustRelease("0.15.0"), table).Has("y") {
		t.Error("a feature with no row is present on a known release")
	}
	if !UnknownCapabilities(KindVLLM).Has("x") {
		t.Error("an unknown release must be trusted")
	}
}
