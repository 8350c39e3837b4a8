// Package multihop is a multi-hop retrieval chat environment over a small
// corpus the package generates deterministically from a seed: fictional
// people, cities, countries and companies (names no model has seen), one
// document per entity, and questions whose answer needs two lookups —
// "In which country was Varo Tesk born?" needs the person's document (the
// city) and the city's (the country); "Who founded the company Varo Tesk
// works for?" needs the person's (the company) and the company's (the
// founder).
//
// The model has two tools (the OpenAI tools shape, announced by the chat
// template): search {"query"} returns the titles of the best-matching
// documents, lookup {"title"} returns a document's text. A turn without
// tool calls is the final answer, scored by a verifier: 1 when it equals
// the answer (case, surrounding space and a final period ignored), else 0.
//
// Everything is pure and deterministic: NewCorpus(seed) gives the same
// corpus on every machine, Sample draws a question from its rng, and the
// tools are in-process functions of the corpus (no I/O). Importing the
// package registers "multihop" (wiring does, so `asyncrl run`
// knows it); examples/multihop-env.yaml runs it.
package multihop
