// Package server is the HTTP shell of the Tinker-compatible API
// (`asyncrl tinker serve`, docs/tinker.md) over the tinker core.
//
// Every route lives under /api/v1/ with the SDK's JSON bodies; as the SDK
// ≥ 0.25 does, forward_backward also takes an application/x-protobuf body
// and retrieve_future answers sample and forward/forward_backward results
// as protobuf to an Accept that prefers it (proto.go, tinker/wire). Training
// calls (create_model, forward, forward_backward, optim_step,
// save_weights, save_weights_for_sampler, load_weights, unload_model) run
// in arrival order on one goroutine per model over a Backend (GoBackend:
// tinker/gotrain on the built-in policy; ExecBackend: tinker/bridgetrain,
// one trainer child per model over the worker bridge, closed with the
// model); their futures are written to the
// JetStream KV bucket asyncrl_tinker_futures as pending before the call
// answers and again with the result, so a restarted server answers them
// all: finished ones with their result, the rest failed naming the
// restart. Sample futures live only in memory: asample reserves a slot of
// tinker.sample_queue (429 when full) and a fixed pool of
// tinker.sample_concurrency workers calls the engines' /v1/completions
// round robin, so in-flight samples hold no sockets. Sampler checkpoints
// are loaded on every engine as LoRA adapters (/v1/load_lora_adapter)
// named tinker-<model>-<name>. retrieve_future long-polls for
// tinker.long_poll, then answers try_again.
//
// No training route answers a status the SDK retries (409): a seq_id
// reused with another body is a 400; an existing checkpoint name and bad
// forward/forward_backward data fail the request's future with category
// user (submitTrainChecked), so the SDK's turn order never stalls.
// weights_info answers from the checkpoint's tinker_model.json for
// create_training_client_from_state.
//
// Start wires the whole server as the CLI runs it: the bus (embedded NATS
// unless bus.nats_url), built-in engines unless tinker.engine_urls, the
// listener (loopback unless an API key is given). The base model is the
// built-in policy, or the tinker.base_models entry served (hfbase.go): a
// Hugging Face checkpoint directory (given, or random-initialised once)
// that the built-in engines serve with model/transformer and every
// model's trainer child (model kind hf) starts from, named by its Hugging
// Face name and tokenizer id so the SDK's get_tokenizer works.
package server
