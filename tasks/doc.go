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
// # Built-in tasks
//
//	name     turns  tokens/turn  prompt          answer
//	reverse  1      6            "rev abc="      "cba"   (2–4 letters of a–e)
//	sort     1      6            "sort cab="     "abc"
//	copy     1      6            "copy ab="      "ab"
//	arith    1      4            "7+5=" "3-8="   "12" "-5" (operands 0–9)
//	guess    10     3            "guess 1-20:"   a number per turn; replies
//	                                             " higher:" " lower:" " correct" " invalid:"
//	gridwalk 12     2            "walk 0,3>2,1:" a move u/d/l/r per turn; replies
//	                                             the position " 1,3:" or " goal"
//
// An answer is the model's text after leading whitespace up to the next
// whitespace: trailing blanks or junk after a space are ignored, junk glued to
// the answer costs credit. Partial credit (see LetterTask, ArithTask,
// GuessTask for the formulas) is shaped so that a randomly initialised model
// earns reward and a GRPO group of 8 has variance. Measured with
// MeasureRandomPolicy (uniform printable characters, length uniform in
// 1..MaxTokensPerTurn; 10,000 episodes in 1,250 groups of 8, PCG(1, 2)):
//
//	task     mean reward  P(score>0)  groups of 8 with variance
//	arith    0.0596       0.748       0.9992
//	copy     0.0462       0.591       0.9992
//	gridwalk 0.0406       0.539       0.9936
//	guess    0.0463       0.612       0.9984
//	reverse  0.0464       0.591       0.9992
//	sort     0.0463       0.591       0.9992
//
// Users add tasks with Register (names are unique), or variants of the
// built-ins with NewLetterTask, NewArithTask and NewGuessTask. Prompts can
// come from a JSONL file (LoadDataset, WithDataset); package httpenv serves
// any Task over HTTP and turns such a server back into a Task.
//
// Envs are plain state machines: no goroutines, locks, I/O, clock or global
// randomness. The registry (Register, Get, Names) is the only shared state.
package tasks
