// Package tasks holds environments with programmatic rewards for RL
// post-training: the prompts a rollout starts from, and the code that scores
// what the model says.
//
// # Contract
//
// A Task names a kind of problem and makes Envs; an Env runs one episode:
//
//	obs, err := env.Reset(prompt)         // first observation = the model's prompt
//	for !done {
//	    action := model(conversation)     // at most MaxTokensPerTurn characters
//	    obs, r, done, err = env.Step(action)
//	    score += r                         // episode score = sum of step rewards
//	    conversation += action + obs       // the caller appends the env's reply
//	}
//
// Single-turn tasks end after the first Step, whose observation is "".
// Multi-turn tasks end when solved or after MaxTurns Steps. Step before Reset
// fails with ErrNotReset, Step after done with ErrEpisodeDone.
//
// Every episode is deterministic given the Prompt: Text is parsed when it is
// set, and everything hidden (the guess task's number) comes from Seed. A
// Prompt with an empty Text is generated from Seed, so Sample(rng) and a
// stored seed reproduce the same episode. Every built-in episode score lies
// in [0, 1], all text is printable ASCII, and prompts are short (under 16
// characters) because the built-in model's context is 64–128 characters.
//
// Envs are plain state machines: no goroutines, locks, I/O, clock or global
// randomness. The registry (Register, Get, Names) is the only shared state.
package tasks
