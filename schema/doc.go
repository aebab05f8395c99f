// Package schema defines what travels between aerie's roles: the msgpack
// wire types (Prompt, Result, DeadLetter), the JSON events and run manifest,
// and every stream, subject, consumer, bucket and header name. Nothing else
// in aerie spells a subject or a header by hand, so a `nats` CLI user can
// read this package as the map of what is on the wire.
//
// Wire types carry a schema version ("v"). A decoder that meets a version it
// does not know returns a *VersionError instead of guessing; an undecodable
// payload returns a *DecodeError. Neither ever panics.
package schema
