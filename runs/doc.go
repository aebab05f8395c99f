// Package runs lists the runs a NATS server holds and removes one of them
// entirely: its prompts, results, dead letters, events, advisories and
// stored turns, its consumers, its manifest, its failure counts and its
// aggregator lease.
//
// A run name is bound for good to the manifest its first producer wrote
// (model, sampling parameters, prompt count); removing the run is how a
// name given the wrong model is freed. Removal touches only NATS: the
// aggregator's output files stay where they are.
package runs
