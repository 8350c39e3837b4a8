// Package toolenv holds tool-using chat environments (tasks/chatenv)
// whose tools run sandboxed.
//
// "calculator" (Calculator, DefaultConfig) asks "What is 37+48?" with a
// calc tool announced in the chat template; each calc call runs in a
// Sandbox (a child process: rlimits on CPU and memory, no file writes or
// new processes, an empty network namespace when root and no network by
// design otherwise, a wall-clock limit) and is answered with a tool
// message; the final answer is scored by a verifier (the arith task's
// reward). "calculator_small" is the same with operands 0–9, no system
// message and short turns, sized for the built-in policy
// (examples/tool-env.yaml).
//
// The calculator is a chatenv.Demonstrator (demo.go): demonstrations
// with well-formed Hermes tool calls for an SFT warm-up
// (examples/tool-env-qwen3-sft.yaml). A call cut off at the sandbox's
// wall clock or CPU limit (ErrTimeLimit) is answered as an error message
// and reported under chatenv.MetaToolTimeouts.
//
// Importing the package registers both tasks (wiring does, so
// `asyncrl run` knows them).
package toolenv
