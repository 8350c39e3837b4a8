package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// asyncrlCheck holds the asyncrl binary the chart's pods would run (make
// build's): the run configuration each scenario renders must pass its
// `config validate` (strict: an unknown key is an error), and every flag
// the pods pass to an asyncrl subcommand must be one its --help lists, so
// the chart cannot drift from the CLI.
type asyncrlCheck struct {
	bin  string
	help map[string]string // subcommand → its --help
}

func (a *asyncrlCheck) helpOf(sub string) (string, error) {
	if h, ok := a.help[sub]; ok {
		return h, nil
	}
	out, err := exec.Command(a.bin, sub, "--help").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s --help: %v: %s", a.bin, sub, err, out)
	}
	a.help[sub] = string(out)
	return a.help[sub], nil
}

var (
	flagRE = regexp.MustCompile(`(?:^|\s|")(--[a-z][a-z0-9-]*)`)
	execRE = regexp.MustCompile(`exec asyncrl ([a-z-]+)`)
)

// check returns the problems of one rendered manifest.
func (a *asyncrlCheck) check(m manifest) []string {
	var obj struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name    string   `json:"name"`
						Command []string `json:"command"`
						Args    []string `json:"args"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(m.Body, &obj); err != nil {
		return nil // validate reports it
	}
	var problems []string
	if cfg, ok := obj.Data["run.yaml"]; ok && obj.Kind == "ConfigMap" {
		if p := a.validateConfig(strings.ReplaceAll(cfg, "__POD_IP__", "10.1.2.3")); p != "" {
			problems = append(problems, obj.Metadata.Name+": run.yaml: "+p)
		}
	}
	for _, c := range obj.Spec.Template.Spec.Containers {
		sub, flags := "", []string{}
		switch {
		case len(c.Command) >= 2 && c.Command[0] == "asyncrl":
			sub = c.Command[1]
		case len(c.Command) >= 3 && c.Command[0] == "/bin/sh":
			if mm := execRE.FindStringSubmatch(c.Command[2]); mm != nil {
				sub = mm[1]
				tail := c.Command[2][strings.Index(c.Command[2], mm[0]):]
				for _, f := range flagRE.FindAllStringSubmatch(tail, -1) {
					flags = append(flags, f[1])
				}
			}
		}
		if sub == "" {
			continue
		}
		for _, arg := range c.Args {
			if strings.HasPrefix(arg, "--") {
				flags = append(flags, strings.SplitN(arg, "=", 2)[0])
			}
		}
		help, err := a.helpOf(sub)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for _, f := range flags {
			if !regexp.MustCompile(`(?m)\s` + regexp.QuoteMeta(f) + `[\s=]`).MatchString(help) {
				problems = append(problems, fmt.Sprintf("%s/%s: asyncrl %s has no flag %s", obj.Metadata.Name, c.Name, sub, f))
			}
		}
	}
	return problems
}

// validateConfig runs `asyncrl config validate` on cfg; "" when valid.
func (a *asyncrlCheck) validateConfig(cfg string) string {
	dir, err := os.MkdirTemp("", "asyncrl-chart-config-")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		return err.Error()
	}
	out, err := exec.Command(a.bin, "config", "validate", f).CombinedOutput()
	if err != nil {
		return strings.TrimSpace(strings.ReplaceAll(string(out), f, "run.yaml"))
	}
	return ""
}
