// Package workload generates the benchmark workloads of
// /work/shared/reference/workloads.md as plain data: the multi-turn
// agentic workload (vLLM's multi-turn serving benchmark stretched to 40
// turns) and the RL group workload (G groups × n samples sharing the
// prompt prefix, with tool-call latency between turns).
//
// Contract: generation is pure and seeded. Agentic and Groups take a
// *rand.Rand and draw nothing else (no wall clock, no global randomness,
// no I/O), so a seed names a workload exactly and two runs of a benchmark
// compare routing policies on the same conversations.
//
// A workload is a list of Sessions. A Session is planned, not recorded:
// it holds the tokens the client appends before each turn (user messages,
// tool observations) and how many tokens each turn asks the engine to
// generate (requested exactly, with ignore_eos). The engine's real reply
// replaces the planned one in the history, so prompts are built while
// driving: a Transcript appends each turn's planned tokens, hands out the
// prompt (the whole conversation so far), and takes the reply. Prompts are
// token ids in [MinTokenID, Vocab), so the engine uses them verbatim and
// no tokenizer stands between the workload and the prefix cache.
package workload
