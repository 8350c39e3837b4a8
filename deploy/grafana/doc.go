// Package grafana holds the Grafana dashboard of an asyncrl run
// (asyncrl.json, provisioned as is) and, test-only, its check: the JSON
// has the dashboard schema's fields, and every panel's PromQL names only
// asyncrl_* metrics the Go code declares (read from the module's source:
// metrics are registered across many packages, several only while a term
// runs, so no single registry holds them all without starting a run).
package grafana
