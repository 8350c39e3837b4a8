// Package faultproxy is a loopback TCP proxy with switchable faults, put in
// front of an inference engine (or any TCP server) by chaos tests.
//
// # Contract
//
// Listen binds addr (127.0.0.1:0 by default) and forwards every accepted
// connection to the target address. Set switches the fault for every
// connection, live and future, at once:
//
//   - Pass: bytes flow both ways unchanged.
//   - Latency: every chunk read in either direction is held Fault.Delay
//     before it is written on (a slow or congested link).
//   - Reset: every live connection — also one in the middle of a streamed
//     response — is closed with a TCP RST (SO_LINGER 0) on both sides, and
//     new connections are reset as soon as they are accepted.
//   - Blackhole: new connections are accepted and never answered (nothing is
//     dialled, bytes are read and dropped) until the proxy closes; live
//     connections stop forwarding until the fault changes, as if packets
//     vanished and TCP kept retransmitting.
//
// Counters (Stats) say how many connections were accepted, reset and
// blackholed and how many chunks were delayed or held, so a test can prove
// a fault took effect. Close stops the
// listener and every connection and waits for all of the proxy's
// goroutines. A Proxy is safe for concurrent use.
package faultproxy
