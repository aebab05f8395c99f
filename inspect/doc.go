// Package inspect turns a message that aerie put in NATS back into JSON a
// person can read: prompts, results, dead letters and stored turns are
// msgpack (see schema), so `nats stream view` and `nats stream get` show
// bytes. Decode takes a message body, as `nats ... --translate` pipes it,
// or a whole message as the nats CLI prints it (headers included), tells
// its kind from the Aerie-Schema header, the subject or the payload's
// fields, and returns it as JSON with the wire's field names. JSON events
// pass through. Nothing here panics on bad input.
package inspect
