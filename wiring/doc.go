// Package wiring translates the run's YAML configuration (package config)
// into the component configs of the packages that implement each role
// (engine, router proxy, policy), so every entry point — `asyncrl engine`,
// `asyncrl router`, `asyncrl run`, `asyncrl node` — builds components the
// same way. It holds no logic beyond unit conversion and field mapping.
package wiring
