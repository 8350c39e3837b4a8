// Package archtest holds tests of the repository's layering rules
// (ARCHITECTURE.md, "Who may import whom"; docs/cores.md): every pure core
// imports no actor shell, no net/http, no protoactor, NATS, zerolog or
// transport implementation, directly or through any dependency. It has no
// code of its own.
package archtest
