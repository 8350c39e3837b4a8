// Package certs makes a private certificate authority and one certificate
// per node for the bus's TLS (client connections and cluster routes, both
// mutually authenticated), with crypto/x509 only: tests make their
// certificates at run time and `asyncrl security mkcerts` writes the same
// files for an operator (docs/security.md).
//
// Every node certificate carries both server and client extended key
// usages, because a route is dialled by one member and accepted by another
// and each side verifies the other against the CA.
package certs
