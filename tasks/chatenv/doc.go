// Package chatenv is the chat-level environment contract: environments as
// users write them for agentic RL — an episode is a list of chat messages,
// the model's turns carry tool calls, the environment answers with tool
// results or user turns and rewards — and the ways to plug one in.
//
// # Contract
//
//	start := env.Reset(ctx, prompt)   // opening messages (system, user), tools
//	for !done {
//	    text := model(...)            // the rollout renders with the chat template
//	    msg, bad := ParseToolCalls(format, text)
//	    res := env.Step(ctx, Action{msg, text})  // new messages, reward, done
//	}
//	env.Close(ctx)
//
// The rollout (actors/rollout, RunEpisode on a Task) renders the opening
// messages once with the model's chat template and the generation prompt,
// and after each model turn appends only the tokens of what follows it
// (the end of the assistant turn the model did not write, the new
// messages, the next generation prompt): token-in/token-out, the history
// never re-tokenised, everything but the model's own tokens masked out of
// the loss. Malformed tool calls (ParseToolCalls' CallErrors) are
// answered by the rollout with an error message to the model and do not
// reach the environment. An error from Reset or Step, or a call that runs
// past the rollout's deadline, aborts the trajectory (docs/environments.md
// has the failure semantics).
//
// Tool-call formats (ToolFormat): Qwen3/Hermes "<tool_call>{json}</tool_call>"
// and Llama-3.1 JSON; see the constants for the template files they are
// read from.
//
// Demonstrator and Demonstrate give a chat environment's demonstration
// episodes (tool calls answered by the environment itself) as chat JSONL
// rows for an SFT warm-up (`asyncrl data demos`).
//
// Adapters: Client speaks this contract over HTTP (the wire form in
// wire.go; integrations/envs serves SkyRL-Gym BaseTextEnv environments
// with it), package tasks/openenv speaks OpenEnv's reset/step/state, and
// package tasks/toolenv is a calculator environment whose tool runs in a
// sandboxed subprocess.
package chatenv
