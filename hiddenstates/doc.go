// Package hiddenstates reads, checks and writes the files of hidden-state
// extraction: one safetensors file per sample, as vLLM's hidden-states
// connector writes it (hidden_states [tokens, layers, hidden] in the
// model's dtype, token_ids [tokens]) and speculators' trainer reads it
// (hs_<idx>.safetensors). A file is checked as a stream, through one
// fixed buffer, so that a sample of a gigabyte costs what one of a
// megabyte does.
package hiddenstates
