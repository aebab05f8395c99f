// Package policy is every choice a worker makes, as pure functions.
//
// Every WindowPoll the worker takes a Snapshot of plain values: its
// window's sizes, the requests in flight, the runs it serves and what
// their other workers say in their heartbeats, its backend's load, its
// pauses. Decide turns it, with what the decision before remembered
// (Memory), into a Plan and the Memory for the next one. The worker only
// carries the plan out: the window's size and the yield cap, the holds
// of each run, the requests to hand back or hedge. The decisions taken
// a pull or a delivery at a time live here too: how free slots are
// shared between runs (GrantSlots), how many prompts a pull asks for
// (PullSize), what a failed request says of the backend (FaultOf) and
// how a delivery ends (Settle).
//
// The package imports neither nats nor sync and never reads the clock:
// every time comes in the snapshot. So each policy is tested by a table,
// and every decision the worker made in a benchmark is replayed from a
// recording (testdata/decisions.jsonl.gz): a change of behaviour shows
// as a changed plan, and a change of policy records the file again on
// purpose.
package policy
