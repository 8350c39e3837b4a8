// Package archtest holds tests of the repository's layering rules
// (ARCHITECTURE.md, "Who may import whom"; docs/cores.md): every pure core
// imports no actor shell, no net/http, no protoactor, NATS, zerolog or
// transport implementation, directly or through any dependency
// (cores_test.go, whose table lists every core); the simulator steps every
// core not exempted with a reason, and a registered shell holds no
// decision its core owns (shells_test.go, issue 31). It has no code of
// its own.
package archtest
