// Package status tells how a run is going from what NATS alone holds:
// the run's manifest (KV bucket aerie-runs), the state of its consumers,
// the aggregator's last throughput event and the workers' heartbeats
// (both kept in the events stream), and the aggregator's lease. No file
// of the aggregator's is read, so `aerie status` works from any host that
// reaches the NATS server.
//
// Gathering (gather.go, list.go) and rendering (render.go) are apart:
// Gather and List read the server into a Run or Lines, WriteRun and
// WriteList turn those into text, and the JSON form is the same values
// encoded, with field names that stay.
package status
