package schema

import "time"

// Lease is the value of a lease in LeasesBucket, as JSON so that `nats kv
// get aerie-leases aggregator.<run> --raw` says who holds it. The holder
// renews it well within the bucket's TTL; a holder that dies (kill -9, a
// lost host) loses it when the TTL runs out.
type Lease struct {
	// Holder names the holder uniquely: "<host>:<pid>:<random>".
	Holder string `json:"holder"`
	Host   string `json:"host"`
	PID    int    `json:"pid"`
	// Dir is the directory the holder writes (an aggregator's
	// <data-dir>/<run>), as an absolute path on Host.
	Dir        string    `json:"dir,omitempty"`
	AcquiredAt time.Time `json:"acquired_at"`
	RenewedAt  time.Time `json:"renewed_at"`
}
